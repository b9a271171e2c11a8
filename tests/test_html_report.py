"""The HTML report page (erag_dagster/reports/html.py): its content from small real frames,
every untrusted string escaped, and the page in a real Chromium (Debian's, driven by
Playwright): it renders, the figure decodes, and it makes no request outside the page itself.

The frames come from the project's own report functions (pytrec_eval leaderboard, eRAG list
metrics, the correlation report with its matplotlib figure, label agreement) on hand-made
labels, and the reader identities from a real SQLite label store.
"""

from __future__ import annotations

import base64
import dataclasses
import html
import re
import shutil
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from erag_dagster.config.registry import load_registry
from erag_dagster.labels.store import open_store
from erag_dagster.meta.agreement import label_agreement_table
from erag_dagster.meta.correlation_report import correlation_report
from erag_dagster.meta.per_query import erag_per_query
from erag_dagster.meta.plots import correlation_vs_k_figure
from erag_dagster.orchestration.assets.html_inputs import registry_specs
from erag_dagster.reports.cross_leaderboard import erag_leaderboard
from erag_dagster.reports.html import (
    DatasetSection,
    dataset_erag_leaderboard,
    file_links,
    reader_identities,
    render_html_report,
    write_html_report,
)
from erag_dagster.reports.html_blocks import display_names
from erag_dagster.reports.html_examples import WorkedExample, drilldown, example_picks, excerpt
from erag_dagster.reports.html_words import DatasetFacts, LabelCost
from erag_dagster.reports.leaderboard import leaderboard
from erag_dagster.reports.verdict import verdict
from tests.stats_fixture import STATS, stats

#: Untrusted text: a script in a reader name, a document id, a dataset name and a model path.
HOSTILE_READER = "<script>window.__pwned = 1</script>r2"
HOSTILE_DOC = '"><script>window.__pwned = 2</script>'
HOSTILE_DATASET = "squad<img src=x onerror='window.__pwned=3'>"
HOSTILE_FILE = "<b>run<i>.parquet"
HOSTILE_QUESTION = "Who wrote <script>window.__pwned = 5</script>?"
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
        doc,
        baselines,
        e2e,
        dataset="squad",
        metrics=METRICS,
        label_k=2,
        e2e_ks=[1, 2],
        folder=root / "reports",
        stats=stats(resamples=50),
    )
    store = open_store(root / "labels.sqlite")
    for reader in READERS:
        model = {"kind": "gguf", "path": f"/models/<script>{reader}</script>.gguf", "sha256": "ab"}
        store.register_reader(f"fp-{reader}", reader, {"model": model, "dtype": "float32"})
    assets = root / "assets"
    (assets / "doc_labels").mkdir(parents=True)
    for name in ("erag_per_query.parquet", HOSTILE_FILE):
        (assets / "doc_labels" / name).write_bytes(b"PAR1")
    files = file_links(sorted(assets.rglob("*.parquet")), root / "reports")
    per_query = erag_per_query(doc, METRICS, QUERIES)
    found = verdict(per_query, "RR", stats(resamples=100, permutations=500))
    questions = {qid: HOSTILE_QUESTION if q == 0 else f"question {q}?" for q, qid in
                 enumerate(QUERIES)}  # fmt: skip
    picks = example_picks(per_query, doc, "RR")
    examples = [
        WorkedExample(
            reader=p["reader"],
            retriever=p["retriever"],
            query_id=p["query_id"],
            question=questions[p["query_id"]],
            gold=("<b>gold</b>",),
            doc_id=p["doc_id"],
            rank=p["rank"],
            excerpt=f"text with the <b>gold</b> answer of {p['doc_id']}",
            answer=p["answer"],
            label=p["label"],
            score=p["score"],
        )
        for p in picks.iter_rows(named=True)
    ]
    return DatasetSection(
        name=HOSTILE_DATASET,
        facts=DatasetFacts(HOSTILE_DATASET, "squad:/data/<i>dev</i>.json", 12, 36, 12),
        verdict=found,
        erag_per_query=per_query,
        questions=questions,
        downstream_metric="em",
        cost=LabelCost(pairs=216, from_store=200, generated=16, reader_seconds=4.5, partitions=6),
        examples=examples,
        specs=pl.DataFrame(
            {
                "kind": ["dataset", "retriever"],
                "name": [HOSTILE_DATASET, "bm25"],
                "partition_key": ["", "bm25-286b153c"],
                "spec": ["squad:/data/<i>dev</i>.json", '{"kind": "bm25"}'],
            }
        ),
        erag_board=dataset_erag_leaderboard(
            per_query, METRICS, stats(resamples=100), baseline="bm25"
        ),
        ranking_metric="RR",
        reports={
            "retrieval_report": leaderboard(
                qrels, runs, ["P@2", "RR"], stats(resamples=100), relevance_level=1
            ),
            "correlation_report": report.table,
            "label_agreement": label_agreement_table(doc, baselines, qrels, 1),
        },
        side_files={"correlation_vs_k.png": report.plot.read_bytes()},
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
    page = render_html_report(statistics=STATS, sections=[section], run_id="run-1")
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
    assert len(agreement) - 1 == section.reports["label_agreement"].height
    readers = next(
        t for t in parsed.tables if t[0][:3] == ["reader", "reader_fingerprint", "labels"]
    )
    assert [row[:3] for row in readers[1:]] == [
        [r, f"fp-{r}", str(len(RETRIEVERS) * len(QUERIES) * 3)] for r in sorted(READERS)
    ]
    assert all(row[5] == "float32" and row[6] == '"any"' for row in readers[1:])
    (image,) = parsed.images
    assert image.startswith("data:image/png;base64,")
    assert base64.b64decode(image.split(",", 1)[1]) == section.side_files["correlation_vs_k.png"]
    assert 'id="verdict"' in page
    bare = render_html_report(
        statistics=STATS, sections=[dataclasses.replace(section, verdict=None)]
    )
    assert "Verdict" not in bare and 'id="verdict"' not in bare


def test_every_untrusted_string_is_escaped(section: DatasetSection) -> None:
    page = render_html_report(
        [dataclasses.replace(section, fit_warnings=["<script>window.__pwned = 4</script> cut"])],
        statistics=STATS,
        across={  # a report across datasets, with the hostile reader name in its rows
            "erag_leaderboard": erag_leaderboard(
                {"a": section.erag_per_query, "b": section.erag_per_query},
                METRICS,
                stats(resamples=20),
            )
        },
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
    assert "<li>&lt;script&gt;window.__pwned = 4&lt;/script&gt; cut</li>" in page  # fit line
    verdict_part = re.search(r'<section id="verdict">.*?</section>', page, re.S).group(0)
    assert "Reader <strong>&lt;script&gt;window.__pwned = 1&lt;/script&gt;r2</strong>" in (
        verdict_part
    )  # the reader's name in its sentence and chart title, escaped
    assert "<title>eRAG RR of each retriever with reader &lt;script&gt;" in verdict_part
    question = "Who wrote &lt;script&gt;window.__pwned = 5&lt;/script&gt;?"
    assert page.count(question) >= 1  # drill-down (and the example when it is q00)
    assert "<mark>&lt;b&gt;gold&lt;/b&gt;</mark>" in page  # the gold answer marked, escaped
    assert "squad:/data/&lt;i&gt;dev&lt;/i&gt;.json" not in page.split("<h3>Details")[0]
    across = page.split('<section id="across">')[1]  # after the datasets, escaped as well
    assert "<h3>eRAG list metrics, reader x retriever x dataset</h3>" in across
    assert "&lt;script&gt;window.__pwned = 1&lt;/script&gt;r2" in across.split("</pre>")[0]


def test_sections_without_inputs_say_so() -> None:
    page = render_html_report(statistics=STATS, sections=[DatasetSection(name="bare")])
    assert "no eRAG labels in this run" in page
    assert "the dataset has no judgments" in page
    assert "no correlation report in this run (no Table 1, no Figure 1)" in page
    assert "no label agreement in this run" in page
    assert 'id="across"' not in page  # no report across datasets given: no section
    assert "<img" not in page and "<table" not in page


@pytest.mark.browser
def test_page_renders_in_chromium_without_any_request_outside_it(
    section: DatasetSection, tmp_path: Path
) -> None:
    from playwright.sync_api import expect, sync_playwright

    if not Path(CHROMIUM).exists():
        pytest.fail("Debian's chromium is not installed (.ci/run installs it)")
    path = write_html_report(
        render_html_report(statistics=STATS, sections=[section], run_id="run-1"),
        tmp_path / "r.html",
    )
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
        # per reader a verdict pair table and a leaderboard; human, Table 1, drill-down,
        # agreement, specs, readers
        assert tables.count() == 2 * 2 + 6
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


def _p_text(p: float) -> str:
    return "<0.001" if p < 0.001 else f"{p:.3f}"


def test_verdict_section_renders_the_runs_verdict_with_its_p_by_each_pair(
    section: DatasetSection,
) -> None:
    """The sentence, one chart row per retriever and every pair with the verdict's own Holm p
    (the Verdict object handed in, not a second computation); each view names its test."""
    page = render_html_report(statistics=STATS, sections=[section])
    part = page.split('<section id="verdict">')[1].split("</section>")[0]
    found = section.verdict
    for reader in found.readers:
        assert html.escape(found.sentences[reader], quote=True) in part
    charts = re.findall(r'<svg class="chart".*?</svg>', part, re.S)
    assert len(charts) == len(READERS)
    for chart in charts:
        assert chart.count("<circle") == len(RETRIEVERS)
        assert "http" not in chart.replace('xmlns="http://www.w3.org/2000/svg"', "")
    tables = [t for t in _parsed(part).tables if t[0][0] == "pair"]
    assert len(tables) == len(READERS)
    shown = {(row[0], row[2]) for t in tables for row in t[1:]}
    expected = {
        (f"{p['higher']} − {p['lower']}", "p = " + _p_text(p["p_holm"]))
        for p in found.pairs.iter_rows(named=True)
    }
    assert shown == expected  # the verdict's p, next to the pair it decides
    assert "Holm-adjusted over this reader&#x27;s 3 pairs" in part
    assert "Leaderboard p:" in page and "Judgment p:" in page  # the other two families


def test_names_drop_partition_hashes_except_in_the_details() -> None:
    keys = ["bm25-286b153c", "dense-0a1b2c3d", "bm25-286b153c / smollm2-135m-a88d591a"]
    assert display_names(keys) == {
        "bm25-286b153c": "bm25",
        "dense-0a1b2c3d": "dense",
        "bm25-286b153c / smollm2-135m-a88d591a": "bm25 / smollm2-135m",
    }
    # two versions of one retriever keep their keys: no two rows may read alike
    assert display_names(["bm25-286b153c", "bm25-99999999"]) == {
        "bm25-286b153c": "bm25-286b153c",
        "bm25-99999999": "bm25-99999999",
    }
    rng = np.random.default_rng(3)
    per_query = pl.DataFrame(
        [
            (r, t, q, float(rng.random()))
            for r in ("smollm2-a88d591a",)
            for t in ("bm25-286b153c", "dense-0a1b2c3d")
            for q in QUERIES
        ],
        schema=["reader", "retriever", "query_id", "P@2"],
        orient="row",
    )
    page = render_html_report(
        [
            DatasetSection(
                name="sample",
                verdict=verdict(per_query, "P@2", stats(resamples=50, permutations=200)),
                erag_per_query=per_query,
                erag_board=dataset_erag_leaderboard(per_query, ["P@2"], stats(resamples=50)),
                ranking_metric="P@2",
                specs=pl.DataFrame(
                    {
                        "kind": ["retriever"],
                        "name": ["bm25"],
                        "partition_key": ["bm25-286b153c"],
                        "spec": ['{"kind": "bm25"}'],
                    }
                ),
            )
        ],
        statistics=STATS,
    )
    before, details = page.split("<h3>Details")
    assert not re.search(r"-[0-9a-f]{8}\b", before), re.findall(r"\S*-[0-9a-f]{8}\b", before)
    assert "bm25-286b153c" in details


def test_drilldown_is_sorted_by_disagreement(section: DatasetSection) -> None:
    table = drilldown(section.erag_per_query, "RR", section.questions, section.names())
    spread = table["disagreement"].to_list()
    assert spread == sorted(spread, reverse=True) and table.height == len(QUERIES)
    assert table.columns[0] == "question" and table.columns[-1] == "question id"
    assert len(table.columns) == 3 + 6  # 3 retrievers x 2 readers
    page = render_html_report(statistics=STATS, sections=[section])
    rows = next(t for t in _parsed(page).tables if t[0][0] == "question")[1:]
    assert [float(r[-2]) for r in rows] == pytest.approx(spread, abs=5e-4)
    top = table.row(0, named=True)
    per_query = section.erag_per_query.filter(pl.col("query_id") == top["question id"])
    widest = max(g["RR"].max() - g["RR"].min() for _, g in per_query.group_by("reader"))
    assert top["disagreement"] == pytest.approx(widest)


def test_worked_examples_come_from_the_most_disputed_question(section: DatasetSection) -> None:
    picks = example_picks(section.erag_per_query, {}, "RR")
    assert picks.height == 0  # no labels: no example
    examples = section.examples
    assert {e.retriever for e in examples} == set(RETRIEVERS)
    assert len({(e.reader, e.query_id) for e in examples}) == 1
    scores = [e.score for e in examples]
    table = drilldown(section.erag_per_query, "RR", section.questions, section.names())
    assert max(scores) - min(scores) == pytest.approx(table["disagreement"][0])
    page = render_html_report(statistics=STATS, sections=[section])
    assert page.count('<div class="example">') == len(RETRIEVERS)
    # an excerpt centres on the gold answer and marks its cuts
    text = " ".join(f"w{i}" for i in range(200)) + " the Eiffel Tower " + "tail " * 100
    cut = excerpt(text, ["eiffel tower"], words=30)
    assert "Eiffel Tower" in cut and cut.startswith("… ") and cut.endswith(" …")


def test_table1_is_a_heat_map_with_the_best_marked(section: DatasetSection) -> None:
    page = render_html_report(statistics=STATS, sections=[section])
    heat = page.split('<table class="heat">')[1].split("</table>")[0]
    cells = re.findall(r"<td([^>]*)>(.*?)</td>", heat)
    numeric = [(attrs, text) for attrs, text in cells if 'class="num' in attrs]
    coloured = [(a, t) for a, t in numeric if "background:hsl(" in a]
    assert coloured and all(re.match(r"(<strong>)?\*?-?\d", t) for _, t in coloured)
    best = [(a, t) for a, t in numeric if "best" in a]
    assert best and all(t.startswith("<strong>*") for _, t in best)


def test_meaning_cost_and_fit_sections(section: DatasetSection) -> None:
    page = render_html_report(statistics=STATS, sections=[section])
    meaning = page.split("<h3>What the numbers mean</h3>")[1].split("<h3>")[0]
    assert meaning.count("<li>") == len(METRICS)  # one sentence per list metric
    assert "the reader&#x27;s em score" in meaning and "eRAG P@2 = " in meaning
    assert "216 question-document pairs" in page and "200 from the label store" in page
    assert "16 generated (reader time 4.5 s)" in page
    stored = dataclasses.replace(section.cost, from_store=216, generated=0, reader_seconds=0.0)
    assert "all 216 distinct pairs came from the label store" in render_html_report(
        [dataclasses.replace(section, cost=stored)], statistics=STATS
    )
    assert 'id="fit-diagnostics"' not in page  # no diagnostics given: no section
    warned = render_html_report(
        statistics=STATS, sections=[dataclasses.replace(section, fit_warnings=["cut at 16"])]
    )
    assert '<h3 id="fit-diagnostics">' in warned and "<li>cut at 16</li>" in warned
    clean = render_html_report(
        statistics=STATS, sections=[dataclasses.replace(section, fit_warnings=[])]
    )
    assert "No warning" in clean


def test_figure1_titles_do_not_overlap() -> None:
    """Figure 1 with long partition keys and five metrics: the panel titles, axis labels and
    legend boxes (matplotlib's own text extents after layout) intersect nowhere."""
    systems = ["bm25-286b153c / smollm2-135m-a88d591a", "hybrid-0a1b2c3d / gemma3-270m-12345678"]
    metrics = ["P@{k}", "Success@{k}", "RR", "AP", "nDCG@{k}"]  # as correlation_vs_k names them
    rows = [
        ("squad", s, m.format(k=k), meth, k, 0.1 * k, 0.05 * k, 0.15 * k)
        for s in systems for m in metrics for meth in ("eRAG", "containment", "bm25-judge")
        for k in (1, 2, 3)
    ]  # fmt: skip
    frame = pl.DataFrame(
        rows,
        schema=["dataset", "retriever", "metric", "method", "k", "kendall_tau", "low", "high"],
        orient="row",
    )
    fig = correlation_vs_k_figure(frame, title="Figure 1")
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    axes = [ax for ax in fig.axes if ax.get_visible()]
    assert len(axes) == len(systems) * len(metrics)
    titles = [ax.title.get_text() for ax in axes]
    assert not any(re.search(r"-[0-9a-f]{8}", t) for t in titles)  # names without hashes
    assert "bm25 / smollm2-135m · P@k" in titles  # one curve over k per metric
    boxes = [ax.title.get_window_extent(renderer) for ax in axes]
    boxes += [ax.xaxis.label.get_window_extent(renderer) for ax in axes]
    boxes += [ax.yaxis.label.get_window_extent(renderer) for ax in axes]
    boxes += [legend.get_window_extent(renderer) for legend in fig.legends]
    boxes.append(fig._suptitle.get_window_extent(renderer))
    for i, a in enumerate(boxes):
        assert a.x0 >= 0 and a.x1 <= fig.bbox.width and a.y0 >= 0 and a.y1 <= fig.bbox.height
        for b in boxes[i + 1 :]:
            assert not a.overlaps(b), (a, b)


def test_details_table_holds_each_partition_key_and_spec_with_credentials_masked() -> None:
    registry = load_registry()
    reader = next(iter(registry.readers.values()))
    leaky = dataclasses.replace(
        reader, config={**reader.config, "base_url": "http://me:hunter2@llm.local/v1"}
    )
    registry = dataclasses.replace(registry, readers={reader.name: leaky})
    facts = DatasetFacts("clapnq", "jsonl:http://me:hunter2@data.local/clapnq?x=1")
    specs = registry_specs(registry, facts)
    assert specs.columns == ["kind", "name", "partition_key", "spec"]
    assert specs["kind"].to_list() == ["dataset", *["retriever"] * len(registry.retrievers),
                                       "reader"]  # fmt: skip
    keys = dict(zip(specs["name"], specs["partition_key"], strict=True))
    assert keys["bm25"] == registry.retrievers["bm25"].partition_key
    assert "hunter2" not in "".join(specs["spec"].to_list())
