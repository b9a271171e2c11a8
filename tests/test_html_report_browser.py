"""The HTML report of a real run in a real Chromium, at a desktop and a phone width.

The module materialises the real graph once (the packaged reader, three retrievers, six
embedded questions; the reader's answers seeded from tests/answers/fixture_answers.jsonl as the
other graph fixtures do), then opens the page the ``html_report`` step wrote in Debian's
headless Chromium (Playwright) at 1400 px and 390 px wide and checks what a person would
notice: the page never scrolls sideways (a wide table scrolls inside its own box), the
verdict chart's labels do not overlap, nothing is fetched from outside the page, and the
verdict sentence and one worked example per retriever are there. Screenshots of both widths
go to ``test-artifacts/`` (look at them).
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import dagster as dg
import pytest

from erag_dagster.orchestration.pipeline import materialize_all
from erag_dagster.orchestration.resources import EvalSettings
from tests.answer_seed import shared_answers
from tests.pipeline_fixtures import scoped_env, small_registry, write_instance_yaml

REPO = Path(__file__).resolve().parents[1]
ARTIFACTS = REPO / "test-artifacts"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
WIDTHS = (1400, 390)
RETRIEVERS = 3  # the packaged registry's bm25, dense, hybrid
PARTITION_HASH = re.compile(r"-[0-9a-f]{8}\b")

pytestmark = [pytest.mark.browser, pytest.mark.slow]

#: Every pair of ``svg.chart`` text boxes that intersect (user units, from getBBox()).
_CHART_OVERLAPS = """() => {
  const hits = [];
  for (const svg of document.querySelectorAll('svg.chart')) {
    const boxes = [...svg.querySelectorAll('text')].map(t => [t.textContent, t.getBBox()]);
    for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) {
      const [a, p] = boxes[i], [b, q] = boxes[j];
      if (p.x < q.x + q.width && q.x < p.x + p.width && p.y < q.y + q.height
          && q.y < p.y + p.height) hits.push([a, b]);
    }
  }
  return hits;
}"""

#: Elements wider than the viewport that are not inside a box that scrolls on its own.
_OVERFLOWING = """() => {
  const width = document.documentElement.clientWidth, out = [];
  for (const el of document.body.querySelectorAll('*')) {
    if (el.closest('div.wide, pre.across')) continue;
    const r = el.getBoundingClientRect();
    if (r.right > width + 0.5 || r.left < -0.5) out.push(el.tagName + '.' + el.className);
  }
  return out;
}"""


@pytest.fixture(scope="module")
def page_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The page a real main-job run wrote (labels and meta stages, as ``erag-dagster run``)."""
    if not Path(CHROMIUM).exists():
        pytest.fail("Debian's chromium is not installed (scripts/ensure-chromium.sh)")
    root = tmp_path_factory.mktemp("html-run")
    home = write_instance_yaml(root / "dagster_home")
    with scoped_env(ERAG_STORAGE=str(root / "storage"), DAGSTER_HOME=str(home)):
        registry = small_registry(root / "registry")
        instance = dg.DagsterInstance.from_config(str(home))
        settings = EvalSettings(registry_path=str(registry))
        with shared_answers(tmp_path_factory):
            materialize_all(
                settings, instance=instance, stages=["labels", "meta"], log=lambda m: None
            )
    page = root / "storage" / "reports" / "report.html"
    assert page.is_file(), "the run wrote no page"
    return page


@pytest.mark.parametrize("width", WIDTHS)
def test_page_fits_the_width_fetches_nothing_and_reads_first(page_path: Path, width) -> None:
    from playwright.sync_api import sync_playwright

    requests: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=["--no-sandbox", "--disable-gpu"]
        )
        context = browser.new_context(viewport={"width": width, "height": 900})
        # every request is recorded; anything but the page itself and data:/about: is refused
        context.route(
            "**/*",
            lambda route: (
                route.continue_()
                if route.request.url.startswith(("file://", "data:", "about:"))
                else route.abort()
            ),
        )
        page = context.new_page()
        page.on("request", lambda request: requests.append(request.url))
        page.goto(page_path.as_uri())
        page.wait_for_load_state("networkidle")
        scroll_width = page.evaluate("() => document.documentElement.scrollWidth")
        viewport = page.evaluate("() => document.documentElement.clientWidth")
        overflowing = page.evaluate(_OVERFLOWING)
        overlaps = page.evaluate(_CHART_OVERLAPS)
        sentences = page.locator("#verdict p.sentence").all_inner_texts()
        verdict_text = page.locator("#verdict").inner_text()
        lede = page.locator("p.lede").first.inner_text()
        cost = page.locator("h3:has-text('What it cost') + p").inner_text()
        charts = page.locator("#verdict svg.chart").count()
        examples = page.locator("div.example").all_inner_texts()
        figure_ok = page.locator("img.figure").evaluate("img => img.complete && img.naturalWidth")
        drill = page.locator("table.drilldown tbody tr").count()
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / f"html-report-{width}.png"), full_page=True)
        browser.close()
    assert scroll_width <= viewport <= width, (scroll_width, viewport)  # no sideways page scroll
    assert overflowing == [], overflowing
    assert overlaps == [], overlaps
    assert len(sentences) == 1 and sentences[0].startswith("Reader smollm2-135m: ")
    assert any(w in sentences[0] for w in ("indistinguishable", "is worse than")), sentences
    assert not PARTITION_HASH.search(verdict_text + "".join(examples))  # names, not keys
    assert re.fullmatch(
        r"Dataset sample · 6 questions · \d+ documents · 6 judgments · run "
        r"\d{4}-\d\d-\d\d \d\d:\d\d UTC",
        lede,
    ), lede  # name, not the spec
    assert cost.startswith("36 question-document pairs judged by the reader"), cost  # 6 x 2 x 3
    assert charts == 1
    assert len(examples) == RETRIEVERS
    for text in examples:
        assert "Reader's answer:" in text and "→ label" in text
    assert figure_ok
    assert drill == 6  # every question of the run, in the drill-down
    assert requests and requests[0] == page_path.as_uri()
    outside = [u for u in requests if not u.startswith(("file://", "data:", "about:"))]
    assert outside == [], outside
