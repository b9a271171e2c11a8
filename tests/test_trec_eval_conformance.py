"""evaluate_run against trec_eval's own expected outputs (usnistgov/trec_eval ``test/``) and CACM.

Each expected file is the output of one trec_eval command (see shared/data/SOURCES.md). For every
measure in it that our metric grammar accepts (the numeric trec_eval measures pytrec_eval
computes), our value printed with 4 decimals (counts as integers) must equal trec_eval's line.

Covered: ``out.test`` (also with ``qrels.test.with-comments``), ``out.test.a``, ``out.test.aq``
(per topic + all), ``out.test.aql`` (``-l2`` on ``qrels.rel_level``), ``out.comment.test`` (graded
TREC RAG 2024 qrels, 270 of 301 run topics unjudged), ``out.test.meas_params`` (parameterised
measures), and the per-topic lines of ``out.test.aqc`` / ``out.test.aqcM`` for the topics in the
run (``-c`` only adds the missing topic and changes ``all``; ``-M100`` is applied by truncating
the run to each topic's top 100 in trec_eval order).

Not covered: ``out.test.aqZ`` (``-Z`` z-scores), ``out.test.prefs``, ``out.test.qrels_prefs``,
``out.test.qrels_jg`` (preference and multi-judgment-group measures pytrec_eval lacks), the
``all`` lines of ``out.test.aqc``/``aqcM`` (``-c``), and the measures in :data:`UNSUPPORTED`.
"""

from __future__ import annotations

import math
from pathlib import Path

import polars as pl
import pytest
import pytrec_eval

from erag_dagster.core.errors import InputError
from erag_dagster.metrics.human import evaluate_run, interpolated_precision, read_trec_qrels
from erag_dagster.metrics.names import parse_metric_name

#: measures in the expected files that evaluate_run does not compute, and why
UNSUPPORTED = {
    "runid": "a string (the run tag)",
    "relstring": "a string of relevance digits",
    "relstring_20": "a string of relevance digits",
    "rbp": "rank-biased precision: not in pytrec_eval",
    "rbp_resid": "rank-biased precision residual: not in pytrec_eval",
    "unj_5": "unjudged fraction: not in pytrec_eval",
    "unj_10": "unjudged fraction: not in pytrec_eval",
    "unj_20": "unjudged fraction: not in pytrec_eval",
    "11pt_avg_.25,.5,.75": "pytrec_eval cannot pass these parameters",
    "ndcg_1=3,2=9,4=4.5": "gain-map parameters: pytrec_eval cannot pass them",
    "utility_2,-1,0,0": "negative parameters: pytrec_eval cannot pass them",
}

# (expected file, qrels, run, relevance level, -M depth or None, per-topic lines only)
CASES = [
    ("out.test", "qrels.test", "results.test", 1, None, False),
    ("out.test", "qrels.test.with-comments", "results.test", 1, None, False),
    ("out.test.a", "qrels.test", "results.test", 1, None, False),
    ("out.test.aq", "qrels.test", "results.test", 1, None, False),
    ("out.test.aql", "qrels.rel_level", "results.test", 2, None, False),
    ("out.comment.test", "qrels.comment.test", "results.comment.test", 1, None, False),
    ("out.test.meas_params", "qrels.test", "results.test", 1, None, False),
    ("out.test.aqc", "qrels.test", "results.trunc", 1, None, True),
    ("out.test.aqcM", "qrels.test", "results.trunc", 1, 100, True),
]


def read_trec_run(path: Path) -> pl.DataFrame:
    """A TREC run file (``qid Q0 docid rank score tag``) as a run table."""
    rows = [line.split() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return pl.DataFrame(
        {
            "query_id": [r[0] for r in rows],
            "doc_id": [r[2] for r in rows],
            "rank": [int(r[3]) for r in rows],
            "score": [float(r[4]) for r in rows],
        }
    )


def read_expected(path: Path) -> dict[str, dict[str, str]]:
    """``{topic or 'all': {measure: printed value}}`` from trec_eval output."""
    expected: dict[str, dict[str, str]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        measure, topic, value = line.split("\t")
        expected.setdefault(topic, {})[measure.strip()] = value.strip()
    return expected


def _supported(name: str) -> bool:
    try:
        parse_metric_name(name)
    except InputError:
        return False
    return True


def _printed(value: float, like: str) -> str:
    return f"{value:.4f}" if "." in like else str(round(value))


@pytest.mark.parametrize(
    ("out_file", "qrels_file", "run_file", "level", "depth", "topics_only"), CASES
)
def test_matches_trec_eval_expected_output(
    shared_data: Path,
    out_file: str,
    qrels_file: str,
    run_file: str,
    level: int,
    depth: int | None,
    topics_only: bool,
) -> None:
    folder = shared_data / "trec_eval-tests"
    expected = read_expected(folder / out_file)
    names = sorted({name for lines in expected.values() for name in lines})
    supported = [n for n in names if _supported(n)]
    assert set(names) - set(supported) <= set(UNSUPPORTED), set(names) - set(supported)

    run = read_trec_run(folder / run_file)
    if depth is not None:  # trec_eval -M: each topic's top `depth` in trec_eval's order
        run = (
            run.sort(["query_id", "score", "doc_id"], descending=[False, True, True])
            .group_by("query_id", maintain_order=True)
            .head(depth)
        )
    report = evaluate_run(read_trec_qrels(folder / qrels_file), run, supported, level)

    compared = 0
    for topic, lines in expected.items():
        if topics_only and (topic == "all" or topic not in report.per_query):
            continue
        values = report.aggregate if topic == "all" else report.per_query[topic]
        for name, printed in lines.items():
            if name in supported:
                assert _printed(values[name], printed) == printed, (out_file, topic, name)
                compared += 1
    assert compared >= len(supported)
    if out_file == "out.comment.test":
        assert len(report.per_query) == 31 and len(report.dropped_queries) == 270


def test_pytrec_eval_iprec_differs_from_trec_eval_10(shared_data: Path) -> None:
    """Why iprec_at_recall/11pt_avg are computed by us: pytrec_eval bundles trec_eval 9, whose
    recall-level rounding gives 0.1420 where trec_eval 10 prints 0.1528 (topic 302, level 0.6)."""
    folder = shared_data / "trec_eval-tests"
    qrels = pytrec_eval.parse_qrel((folder / "qrels.test").open())
    with (folder / "results.test").open() as handle:
        run = pytrec_eval.parse_run(handle)
    old = pytrec_eval.RelevanceEvaluator(qrels, {"iprec_at_recall_0.60"}).evaluate(run)
    assert f"{old['302']['iprec_at_recall_0.60']:.4f}" == "0.1420"
    ours = evaluate_run(
        read_trec_qrels(folder / "qrels.test"), read_trec_run(folder / "results.test"),
        ["iprec_at_recall_0.60"], relevance_level=1,
    )  # fmt: skip
    assert f"{ours.per_query['302']['iprec_at_recall_0.60']:.4f}" == "0.1528"


def test_interpolated_precision_by_hand() -> None:
    # relevant at ranks 1, 3; 4 relevant judged. precision@1 = 1, @3 = 2/3.
    relevant = [True, False, True, False]
    values = interpolated_precision(relevant, 4, [0.0, 0.2, 0.5, 0.6, 1.0])
    # level 0.2 -> lround(0.8) = 1st relevant (rank 1): max(1, 2/3) = 1; 0.5 -> 2nd (rank 3): 2/3;
    # 0.6 -> lround(2.4) = 2 -> 2/3; 1.0 -> 4th relevant never retrieved: 0
    assert values == [1.0, 1.0, 2 / 3, 2 / 3, 0.0]


def test_cacm_bm25_run_names_agree(shared_data: Path) -> None:
    """Both metric grammars give the same values on CACM (the trec_eval figures P_30 0.1942,
    map 0.2744 and num_q 52 are reproductions/trec_eval.yaml)."""
    folder = shared_data / "cacm"
    report = evaluate_run(
        read_trec_qrels(folder / "qrels.cacm.txt"),
        read_trec_run(folder / "run.cacm-bm25.anserini.txt"),
        ["P_30", "map", "P@30", "AP", "num_q"],
        relevance_level=1,
    )
    assert report.aggregate["P@30"] == report.aggregate["P_30"]
    assert report.aggregate["AP"] == report.aggregate["map"]
    assert len(report.per_query) == report.aggregate["num_q"]
    assert len(report.dropped_queries) == 64 - report.aggregate["num_q"]


# --- evaluate_run conventions -----------------------------------------------------------------


def _qrels(rows: list[tuple[str, str, int]]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=["query_id", "doc_id", "relevance"], orient="row")


def _run(rows: list[tuple[str, str, int, float]]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=["query_id", "doc_id", "rank", "score"], orient="row")


def test_ties_break_by_doc_id_descending_and_rank_is_ignored() -> None:
    qrels = _qrels([("q", "a", 1), ("q", "b", 0)])
    # equal scores: trec_eval ranks "b" before "a", whatever the rank column says
    run = _run([("q", "a", 1, 5.0), ("q", "b", 2, 5.0)])
    report = evaluate_run(qrels, run, ["RR", "P@1", "RR@1"], relevance_level=1)
    assert report.per_query["q"] == {"RR": 0.5, "P@1": 0.0, "RR@1": 0.0}


def test_relevance_level_and_rel_in_the_name() -> None:
    qrels = _qrels([("q", "a", 1), ("q", "b", 2), ("q", "c", 0)])
    run = _run([("q", "a", 1, 3.0), ("q", "b", 2, 2.0), ("q", "c", 3, 1.0)])
    default = evaluate_run(qrels, run, ["P@2", "P(rel=2)@2", "RR", "nDCG@2"], relevance_level=1)
    assert default.per_query["q"]["P@2"] == 1.0
    assert default.per_query["q"]["P(rel=2)@2"] == 0.5
    level2 = evaluate_run(qrels, run, ["P@2", "RR", "nDCG@2"], relevance_level=2)
    assert level2.per_query["q"]["P@2"] == 0.5
    assert level2.per_query["q"]["RR"] == 0.5
    # nDCG uses the grades as gains whatever the level: (1 + 2/log2 3) / (2 + 1/log2 3)
    ndcg = (1 + 2 / math.log2(3)) / (2 + 1 / math.log2(3))
    assert default.per_query["q"]["nDCG@2"] == pytest.approx(ndcg, abs=1e-12)
    assert level2.per_query["q"]["nDCG@2"] == default.per_query["q"]["nDCG@2"]
    with pytest.raises(InputError, match="relevance_level must be >= 1"):
        evaluate_run(qrels, run, ["P@2"], relevance_level=0)


def test_unjudged_run_queries_are_dropped_or_scored_as_without_relevant_docs() -> None:
    qrels = _qrels([("q1", "a", 1)])
    run = _run([("q1", "a", 1, 2.0), ("q2", "x", 1, 2.0), ("q2", "y", 2, 1.0)])
    dropped = evaluate_run(qrels, run, ["P@1", "num_ret", "num_q"], relevance_level=1)
    assert dropped.dropped_queries == ("q2",)
    assert list(dropped.per_query) == ["q1"]
    assert dropped.aggregate == {"P@1": 1.0, "num_ret": 1.0, "num_q": 1.0}
    kept = evaluate_run(
        qrels, run, ["P@1", "num_ret", "num_q", "num_rel"], judged_only=False, relevance_level=1
    )
    assert kept.dropped_queries == ()
    assert kept.per_query["q2"] == {"P@1": 0.0, "num_ret": 2.0, "num_q": 1.0, "num_rel": 0.0}
    assert kept.aggregate["P@1"] == 0.5 and kept.aggregate["num_ret"] == 3.0


def test_geometric_mean_floors_at_1e_5() -> None:
    qrels = _qrels([("q1", "a", 1), ("q2", "b", 1)])
    run = _run([("q1", "a", 1, 1.0), ("q2", "c", 1, 1.0)])
    report = evaluate_run(qrels, run, ["gm_map", "map"], relevance_level=1)
    assert report.per_query["q2"]["gm_map"] == pytest.approx(1e-5, rel=1e-12)
    assert report.aggregate["gm_map"] == pytest.approx(math.sqrt(1.0 * 1e-5), rel=1e-12)
    assert report.aggregate["map"] == 0.5


def test_evaluate_run_input_errors() -> None:
    qrels = _qrels([("q", "a", 1)])
    with pytest.raises(InputError, match="run: query 'q' lists doc 'a' twice"):
        evaluate_run(
            qrels, _run([("q", "a", 1, 1.0), ("q", "a", 2, 0.5)]), ["P@1"], relevance_level=1
        )
    with pytest.raises(InputError, match="NaN score"):
        evaluate_run(qrels, _run([("q", "a", 1, float("nan"))]), ["P@1"], relevance_level=1)
    with pytest.raises(InputError, match="no run query has judgments"):
        evaluate_run(qrels, _run([("other", "a", 1, 1.0)]), ["P@1"], relevance_level=1)
    with pytest.raises(InputError, match="judged twice"):
        evaluate_run(
            _qrels([("q", "a", 1), ("q", "a", 0)]),
            _run([("q", "a", 1, 1.0)]),
            ["P@1"],
            relevance_level=1,
        )
    with pytest.raises(InputError, match="lacks column"):
        evaluate_run(
            qrels.drop("relevance"), _run([("q", "a", 1, 1.0)]), ["P@1"], relevance_level=1
        )
    with pytest.raises(InputError, match="unknown metric name"):
        evaluate_run(qrels, _run([("q", "a", 1, 1.0)]), ["Judged@10"], relevance_level=1)


# --- read_trec_qrels ------------------------------------------------------------------------------


def test_read_trec_qrels_skips_comments_and_keeps_hash_in_doc_ids(shared_data: Path) -> None:
    folder = shared_data / "trec_eval-tests"
    plain = read_trec_qrels(folder / "qrels.test")
    commented = read_trec_qrels(folder / "qrels.test.with-comments")
    assert plain.schema == {"query_id": pl.String, "doc_id": pl.String, "relevance": pl.Int64}
    assert plain.height == 3681 and plain["relevance"].sum() == 561
    assert commented.height == plain.height
    assert "CR#93E-1860" in commented["doc_id"].to_list()


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("1 0 d1 1\n1 0 d2\n", r"qrels.txt:2: expected 4 fields"),
        ("# header\n1 0 d1 1\n\n1 0 d2 high\n", r"qrels.txt:4: relevance 'high' is not an integer"),
        ("1 0 d1 1\n1 0 d1 0\n", r"qrels.txt:2: query 1 doc d1 judged twice \(first at line 1\)"),
    ],
)
def test_read_trec_qrels_errors_name_file_and_line(
    tmp_path: Path, content: str, message: str
) -> None:
    path = tmp_path / "qrels.txt"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(InputError, match=message):
        read_trec_qrels(path)
    with pytest.raises(InputError, match=r"missing\.txt: no such file"):
        read_trec_qrels(tmp_path / "missing.txt")
