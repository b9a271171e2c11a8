"""The HTML report page (erag_dagster/reports/html.py): its content from small real frames,
every untrusted string escaped, and the page in a real Chromium (Debian's, driven by
Playwright): it renders, the figure decodes, and it makes no request outside the page itself.

The frames come from the project's own report functions (pytrec_eval leaderboard, eRAG list
metrics, the correlation report with its matplotlib figure, label agreement) on hand-made
labels, and the reader identities from a real SQLite label store.
"""

from __future__ import annotations

import base64
import re
import shutil
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from erag_dagster.labels.store import open_store
from erag_dagster.meta.agreement import label_agreement_table
from erag_dagster.meta.correlation_report import correlation_report
from erag_dagster.meta.per_query import erag_per_query
from erag_dagster.reports.html import (
    DatasetSection,
    dataset_erag_leaderboard,
    file_links,
    reader_identities,
    render_html_report,
    write_html_report,
)
from erag_dagster.reports.leaderboard import leaderboard

#: Untrusted text: a script in a reader name, a document id, a dataset name and a model path.
HOSTILE_READER = "<script>window.__pwned = 1</script>r2"
HOSTILE_DOC = '"><script>window.__pwned = 2</script>'
HOSTILE_DATASET = "squad<img src=x onerror='window.__pwned=3'>"
HOSTILE_FILE = "<b>run<i>.parquet"
READERS = ("r1", HOSTILE_READER)
RETRIEVERS = ("bm25", "dense", "hybrid")
QUERIES = [f"q{i:02d}" for i in range(12)]
METRICS = ["P@2", "RR", "nDCG@2"]
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


def _doc_id(q: int, d: int) -> str:
    return HOSTILE_DOC if (q, d) == (0, 0) else f"d{q}-{d}"


def _labels(reader: str, retriever: str, seed: int) -> pl.DataFrame:
    """Top-3 eRAG labels of every query: binary, seeded, with the reader's fingerprint."""
    rng = np.random.default_rng(seed)
    rows = [
        (qid, _doc_id(q, d), rank, float(rng.random() < 0.4), "ans", f"fp-{reader}", "em")
        for q, qid in enumerate(QUERIES)
        for rank, d in enumerate((0, 1, 2), start=1)
    ]
    schema = ["query_id", "doc_id", "rank", "label", "answer", "reader_fingerprint", "metric"]
    return pl.DataFrame(rows, schema=schema, orient="row")


@pytest.fixture(scope="module")
def section(tmp_path_factory: pytest.TempPathFactory) -> DatasetSection:
    root = tmp_path_factory.mktemp("html")
    systems = [(r, t) for r in READERS for t in RETRIEVERS]
    doc = {s: _labels(*s, seed=i) for i, s in enumerate(systems)}
    baselines = {s: doc[s].select("query_id", "doc_id", "rank", "label").with_columns(
        label=1.0 - pl.col("label"), method=pl.lit("containment")) for s in systems}  # fmt: skip
    rng = np.random.default_rng(7)
    e2e = {
        s: pl.DataFrame(
            [(qid, k, float(rng.random() < 0.5)) for k in (1, 2) for qid in QUERIES],
            schema=["query_id", "k", "score"],
            orient="row",
        )
        for s in systems
    }
    qrels = pl.DataFrame(
        [(qid, _doc_id(q, q % 3), 1) for q, qid in enumerate(QUERIES)],
        schema=["query_id", "doc_id", "relevance"],
        orient="row",
    )
    runs = {
        t: doc[("r1", t)].select("query_id", "doc_id", "rank", score=10.0 - pl.col("rank"))
        for t in RETRIEVERS
    }
    report = correlation_report(
        doc, baselines, e2e, dataset="squad", metrics=METRICS, label_k=2, e2e_ks=[1, 2],
        n_resamples=50, folder=root / "reports",
    )  # fmt: skip
    store = open_store(root / "labels.sqlite")
    for reader in READERS:
        model = {"kind": "gguf", "path": f"/models/<script>{reader}</script>.gguf", "sha256": "ab"}
        store.register_reader(f"fp-{reader}", reader, {"model": model, "dtype": "float32"})
    assets = root / "assets"
    (assets / "doc_labels").mkdir(parents=True)
    for name in ("erag_per_query.parquet", HOSTILE_FILE):
        (assets / "doc_labels" / name).write_bytes(b"PAR1")
    files = file_links(sorted(assets.rglob("*.parquet")), root / "reports")
    return DatasetSection(
        name=HOSTILE_DATASET,
        erag_board=dataset_erag_leaderboard(
            erag_per_query(doc, METRICS), METRICS, "bm25", n_resamples=100
        ),
        ranking_metric="RR",
        retrieval_report=leaderboard(qrels, runs, ["P@2", "RR"], n_resamples=100),
        correlation_report=report.table,
        figure_png=report.plot.read_bytes(),
        label_agreement=label_agreement_table(doc, baselines, qrels),
        identities=reader_identities(doc, store.reader_identity),
        files=files,
    )


class _Tables(HTMLParser):
    """Every table's rows as lists of cell texts (entities decoded), and every img src."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: list[list[list[str]]] = []
        self.images: list[str] = []
        self.scripts = 0
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self._cell = []
        elif tag == "img":
            self.images.append(dict(attrs)["src"] or "")
        elif tag == "script":
            self.scripts += 1

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None:
            self.tables[-1][-1].append("".join(self._cell))
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def _parsed(page: str) -> _Tables:
    parser = _Tables()
    parser.feed(page)
    return parser


def test_page_holds_every_report_with_every_retriever(section: DatasetSection) -> None:
    page = render_html_report([section], run_id="run-1")
    parsed = _parsed(page)
    # two eRAG leaderboards (one per reader), then human judgments, Table 1, agreement, readers
    erag = [t for t in parsed.tables if t[0][:5] == ["#", "retriever", "queries",
                                                      "RR [95% CI]", "vs baseline"]]  # fmt: skip
    assert len(erag) == len(READERS)
    board = section.erag_board
    readers_shown = board.get_column("reader").unique(maintain_order=True).to_list()
    assert sorted(readers_shown) == sorted(READERS)
    for reader, table in zip(readers_shown, erag, strict=True):
        names = [row[1].removesuffix(" (baseline)") for row in table[1:]]
        assert sorted(names) == sorted(RETRIEVERS)
        rr = board.filter((pl.col("reader") == reader) & (pl.col("metric") == "RR"))
        means = dict(zip(rr["retriever"], rr["mean"], strict=True))
        shown = [float(row[3].split(" [")[0]) for row in table[1:]]
        assert shown == sorted(shown, reverse=True)  # ranked by the ranking metric
        assert shown == pytest.approx([means[n] for n in names], abs=5e-4)
        assert [row[4] for row in table[1:] if row[1].endswith("(baseline)")] == ["baseline"]
    human = next(t for t in parsed.tables if t[0][:2] == ["retriever", "queries"])
    assert [row[0] for row in human[1:]] == ["bm25 (baseline)", "dense", "hybrid"]
    table1 = next(t for t in parsed.tables if t[0][:2] == ["retriever", "method"])
    systems = {row[0] for row in table1[1:]}
    assert systems == {f"{t} / {r}" for r in READERS for t in RETRIEVERS}
    assert table1[0][2:] == METRICS
    agreement = next(t for t in parsed.tables if t[0][:3] == ["reader", "retriever", "method"])
    assert len(agreement) - 1 == section.label_agreement.height
    readers = next(
        t for t in parsed.tables if t[0][:3] == ["reader", "reader_fingerprint", "labels"]
    )
    assert [row[:3] for row in readers[1:]] == [
        [r, f"fp-{r}", str(len(RETRIEVERS) * len(QUERIES) * 3)] for r in sorted(READERS)
    ]
    assert all(row[5] == "float32" and row[6] == '"any"' for row in readers[1:])
    (image,) = parsed.images
    assert image.startswith("data:image/png;base64,")
    assert base64.b64decode(image.split(",", 1)[1]) == section.figure_png
    assert "Verdict" not in page and 'id="verdict"' not in page
    assert 'id="verdict"' not in render_html_report([section], verdict=[])


def test_every_untrusted_string_is_escaped(section: DatasetSection) -> None:
    page = render_html_report(
        [section],
        verdict=["<script>window.__pwned = 4</script> wins"],
        across=[("<script>t</script>", "bm25 <script>x</script>  0.5 [0.4, 0.6]")],
    )
    parsed = _parsed(page)
    assert parsed.scripts == 0
    assert "<script" not in page and "<img src=x" not in page and "<b>" not in page
    assert "&lt;script&gt;window.__pwned = 1&lt;/script&gt;r2" in page  # reader name
    assert "&lt;script&gt;/models" not in page  # the model JSON ...
    assert "/models/&lt;script&gt;" in page  # ... is shown, escaped
    assert "squad&lt;img src=x onerror=&#x27;window.__pwned=3&#x27;&gt;" in page  # dataset
    assert ">assets/doc_labels/&lt;b&gt;run&lt;i&gt;.parquet<" in page  # a file name ...
    assert 'href="../assets/doc_labels/%3Cb%3Erun%3Ci%3E.parquet"' in page  # ... and its link
    assert "&lt;script&gt;window.__pwned = 4&lt;/script&gt; wins" in page  # the verdict
    assert re.search(r'<section id="verdict">.*?</section>', page, re.S)
    across = page.split('<section id="across">')[1]  # after the datasets, escaped as well
    assert "<h3>&lt;script&gt;t&lt;/script&gt;</h3>" in across
    assert "bm25 &lt;script&gt;x&lt;/script&gt;  0.5 [0.4, 0.6]</pre>" in across


def test_sections_without_inputs_say_so() -> None:
    page = render_html_report([DatasetSection(name="bare")])
    assert "no eRAG labels in this run" in page
    assert "the dataset has no judgments" in page
    assert "no figure in this run" in page
    assert 'id="across"' not in page  # no report across datasets given: no section
    assert "<img" not in page and "<table" not in page


@pytest.mark.browser
def test_page_renders_in_chromium_without_any_request_outside_it(
    section: DatasetSection, tmp_path: Path
) -> None:
    from playwright.sync_api import expect, sync_playwright

    if not Path(CHROMIUM).exists():
        pytest.fail("Debian's chromium is not installed (.ci/run installs it)")
    path = write_html_report(render_html_report([section], run_id="run-1"), tmp_path / "r.html")
    requests: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=["--no-sandbox", "--disable-gpu"]
        )
        page = browser.new_page(viewport={"width": 1300, "height": 900})
        page.on("request", lambda request: requests.append(request.url))
        page.goto(path.as_uri())
        page.wait_for_load_state("networkidle")
        assert page.title() == "eRAG evaluation report"
        expect(page.get_by_role("heading", name="Table 1", exact=False)).to_be_visible()
        tables = page.locator("table")
        assert tables.count() == 6  # 2 readers' leaderboards, human, Table 1, agreement, readers
        for i in range(tables.count()):
            expect(tables.nth(i)).to_be_visible()
        image = page.locator("img.figure")
        image.scroll_into_view_if_needed()
        expect(image).to_be_visible()
        width = image.evaluate("img => img.complete ? img.naturalWidth : 0")
        pwned = page.evaluate("() => window.__pwned === undefined")
        browser.close()
    assert width > 0
    assert pwned, "a script from the inputs ran"
    assert requests, "no request recorded at all (the listener did not run)"
    outside = [u for u in requests if not u.startswith(("file://", "data:"))]
    assert outside == [], outside
    assert requests[0] == path.as_uri()
