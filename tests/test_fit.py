"""Fit diagnostics (erag_dagster/meta/fit.py): cut answers, lengths, label-vs-judgment AUC.

The truncation case runs the real packaged SmolLM2 reader with a tiny ``max_new_tokens`` and a
prompt that asks for a whole sentence, so its answers really stop at the limit; the tokens are
counted by the reader's own tokenizer.
"""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest

from erag_dagster.data.loaders import load_dataset
from erag_dagster.meta.fit import (
    CUT_SHARE,
    MIN_AUC,
    fit_diagnostics,
    fit_frame,
    format_fit,
    label_auc,
    reader_fit,
    separation,
)
from erag_dagster.readers.factory import reader_from_config
from erag_dagster.reports.run_report import FIT_TITLE, RunReport
from tests.stats_fixture import FIT_SETTINGS, STATS, stats

SENTENCE_PROMPT = "Reply with the whole sentence of the passage that answers the question."


def test_truncated_answers_warn_with_the_fix() -> None:
    ds = load_dataset("sample?max_questions=3")
    config = {
        "dtype": "float32", "device": "cpu", "num_threads": 1, "batch_size": 8,
        "max_new_tokens": 4, "system_prompt": SENTENCE_PROMPT,
    }  # fmt: skip
    reader = reader_from_config("smollm2-cut", config)
    pairs = ds.qrels.join(ds.queries, on="query_id").join(ds.corpus, on="doc_id")
    answers = reader.answer(list(zip(pairs["question"], pairs["text"], strict=True)))
    labels = pairs.select("query_id", "doc_id").with_columns(
        label=pl.lit(0.0), answer=pl.Series(answers, dtype=pl.String)
    )
    fit = reader_fit(
        labels,
        ds.queries,
        ds.qrels,
        reader,
        retriever="gold",
        metric="f1",
        **FIT_SETTINGS,
    )
    reader.close()
    assert fit.max_new_tokens == 4 and fit.answers == 3
    assert fit.cut_share is not None and fit.cut_share > CUT_SHARE, answers
    warnings = fit.warnings()
    cut = [w for w in warnings if "stop at max_new_tokens=4" in w]
    assert len(cut) == 1 and "raise the reader's max_new_tokens (e.g. 16)" in cut[0], warnings
    assert cut[0].startswith("fit warning [smollm2-cut / gold]: ")
    assert cut[0] in format_fit([fit])


def _labels(rows: list[tuple[str, str, float, str]]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=["query_id", "doc_id", "label", "answer"], orient="row")


def test_labels_that_fit_give_no_warning() -> None:
    labels = _labels(
        [("q1", "a", 1.0, "Denver Broncos"), ("q1", "b", 0.0, "Panthers"),
         ("q2", "c", 0.8, "Levi's Stadium"), ("q2", "d", 0.1, "a stadium"),
         ("q3", "e", 1.0, "2015"), ("q3", "f", 0.0, "1990")]
    )  # fmt: skip
    queries = pl.DataFrame(
        {"query_id": ["q1", "q2", "q3"],
         "answers": [["Denver Broncos"], ["Levi's Stadium", "Levi's"], ["2015"]]}
    )  # fmt: skip
    qrels = pl.DataFrame({"query_id": ["q1", "q2", "q3"], "doc_id": ["a", "c", "e"],
                          "relevance": [1, 1, 1]})  # fmt: skip
    fit = fit_diagnostics(
        labels,
        queries,
        qrels,
        reader="r",
        metric="f1",
        max_new_tokens=16,
        answer_tokens=[3, 2, 4, 2, 1, 1],
        relevance_level=1,
        stats=stats(resamples=200),
        label_methods=(),
        verdict_labels="eRAG",
        expected={},
    )
    assert fit.cut_answers == 0 and fit.warnings() == []
    assert fit.mean_gold_words == pytest.approx((2 + 1.5 + 1) / 3)
    assert fit.separation is not None and fit.separation.auc == 1.0
    assert fit.separation.relevant == 3 and fit.separation.others == 3
    assert "no fit warning" in format_fit([fit])


def test_long_golds_scored_with_f1_and_poor_separation_warn() -> None:
    gold = " ".join(["word"] * 30)
    labels = _labels(
        [(f"q{i}", f"d{i}{j}", 0.2 if j else 0.1, "a short answer") for i in range(6)
         for j in range(3)]
    )  # fmt: skip
    queries = pl.DataFrame({"query_id": [f"q{i}" for i in range(6)], "answers": [[gold]] * 6})
    qrels = pl.DataFrame(
        {"query_id": [f"q{i}" for i in range(6)], "doc_id": [f"d{i}0" for i in range(6)],
         "relevance": [1] * 6}
    )  # fmt: skip
    fit = fit_diagnostics(
        labels,
        queries,
        qrels,
        reader="r",
        retriever="bm25",
        metric="f1",
        **FIT_SETTINGS,
    )
    text = "\n".join(fit.warnings())
    assert fit.cut_answers is None  # no token counts: the cut share is unknown, not 0
    assert "use metric rougel for long answers" in text
    assert "ratio 0.10 < 0.5" in text and "F1 can reach at most 0.18" in text
    assert fit.separation is not None and fit.separation.auc == 0.0 < MIN_AUC
    assert "separate judged-relevant from other documents poorly: AUC 0.00" in text
    assert fit_frame([fit])["warnings"][0] == text  # one string per run: the frame writes to CSV
    contains = fit_diagnostics(
        labels,
        queries,
        qrels,
        reader="r",
        metric="contains",
        **FIT_SETTINGS,
    )
    assert any("contains needs a whole gold answer" in w for w in contains.warnings())


def test_label_auc_matches_sklearn_and_ties_count_half() -> None:
    from sklearn.metrics import roc_auc_score

    rng = np.random.default_rng(7)
    labels = rng.integers(0, 5, 200) / 4  # many ties
    relevant = rng.random(200) < 0.3
    assert label_auc(labels, relevant) == pytest.approx(roc_auc_score(relevant, labels))
    assert label_auc([0.5, 0.5], [True, False]) == 0.5
    assert math.isnan(label_auc([0.1, 0.2], [False, False]))


def test_separation_ci_is_seeded_and_holds_the_estimate() -> None:
    rng = np.random.default_rng(3)
    frame = pl.DataFrame(
        {"query_id": np.repeat([f"q{i}" for i in range(30)], 4),
         "label": rng.random(120), "relevant": np.tile([True, False, False, False], 30)}
    )  # fmt: skip
    first = separation(frame, stats(resamples=300, seed=5))
    again = separation(frame, stats(resamples=300, seed=5))
    assert first == again and first is not None
    assert first.low <= first.auc <= first.high and first.queries == 30
    assert separation(frame.filter(~pl.col("relevant")), STATS) is None


def test_run_report_prints_the_fit_after_the_verdict() -> None:
    labels = _labels([("q1", "a", 0.0, "x " * 16), ("q1", "b", 0.0, "y " * 16)])
    queries = pl.DataFrame({"query_id": ["q1"], "answers": [["x " * 16]]})
    fit = fit_diagnostics(
        labels,
        queries,
        None,
        reader="r",
        retriever="bm25",
        metric="rougel",
        max_new_tokens=16,
        count_tokens=lambda text: len(text.split()),
        **FIT_SETTINGS,
    )
    other = fit_diagnostics(
        labels,
        queries,
        None,
        reader="r",
        retriever="dense",
        metric="rougel",
        max_new_tokens=64,
        count_tokens=lambda text: len(text.split()),
        **FIT_SETTINGS,
    )
    report = RunReport(sections=[], statistics=STATS, fits=[fit, other])
    full = report.text(full=True)
    assert full.startswith(f"== {FIT_TITLE} ==")
    assert "fit warning [r / bm25]: 100% of the answers stop at max_new_tokens=16" in full
    assert "fit warning [r / dense]" not in full  # 16 tokens of 64: not cut
    compact = report.text().splitlines()  # erag-dagster run's default: one line in all
    assert compact[0] == f"== {FIT_TITLE} =="  # (under the verdict when there is one)
    assert compact[1].startswith(
        "fit warning: answers cut at max_new_tokens: raise it (1 of 2 runs)"
    )
    assert compact[1].endswith("[2 runs (answers cut at most 100%); each run and its fix: --full]")
    assert len(compact) == 2
    quiet = RunReport(sections=[], statistics=STATS, fits=[other]).text().splitlines()
    assert quiet[1] == (
        "no fit warning on 1 reader x retriever runs (answers cut at most 0%); each run: --full"
    )


@pytest.mark.slow
def test_the_run_report_diagnoses_every_labelled_partition(tmp_path, monkeypatch) -> None:
    """``erag-dagster run``'s report (pipeline.load_fits): the materialised doc_labels of each
    reader x retriever, the dataset's tables and the registry's reader."""
    import dagster as dg
    import yaml

    from erag_dagster.orchestration.pipeline import load_fits, load_run_report, materialize_all
    from erag_dagster.orchestration.resources import EvalSettings
    from tests.pipeline_fixtures import small_registry

    monkeypatch.setenv("ERAG_STORAGE", str(tmp_path / "storage"))
    monkeypatch.delenv("ERAG_DATASET", raising=False)
    path = small_registry(tmp_path, "sample?max_questions=3")
    raw = yaml.safe_load(path.read_text())
    raw["retrievers"] = {"bm25": raw["retrievers"]["bm25"]}
    raw["evaluation"].update({"k": 5, "label_k": 2, "e2e_ks": [1]})
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    instance = dg.DagsterInstance.ephemeral()
    assert load_fits(None, instance, str(path)) == []  # nothing materialised: nothing to say
    materialize_all(
        EvalSettings(registry_path=str(path)), instance, log=lambda _line: None,
        stages=["labels"],
    )  # fmt: skip
    (fit,) = load_fits(None, instance, str(path))
    reader = next(iter(raw["readers"]))
    assert fit.reader.startswith(reader) and fit.retriever.startswith("bm25-")
    assert fit.answers == 3 * 2 and fit.metric == raw["evaluation"]["metric"]
    from erag_dagster.config.registry import load_registry

    spec = reader_from_config(reader, load_registry(str(path)).readers[reader].config).spec
    assert fit.max_new_tokens == spec.max_new_tokens  # the entry's, else its preset's
    assert fit.cut_answers is not None  # counted with the reader's tokenizer
    assert fit.separation is not None and fit.separation.relevant >= 1
    assert fit.name in format_fit([fit])
    report = load_run_report(instance, str(path), only=["erag_report"])  # what `run` prints
    assert report.fits == [fit] and f"== {FIT_TITLE} ==" in report.text(full=True)
    verdict_block = report.text().split("\n\n")[0]  # compact: one fit line under the verdict
    assert verdict_block.startswith("== Verdict")
    lines = verdict_block.splitlines()
    first = next(i for i, line in enumerate(lines) if "fit warning" in line)  # or "no fit warning"
    # the findings the registry declares expected (evaluation.expected_fit) are named on that
    # line when no warning is left, else on one line after it
    rest = lines[first + 1 :]
    assert rest == [] or (len(rest) == 1 and rest[0].startswith("fit, expected: "))
