"""Issue 36: the yes/no/maybe set from SciFact (its fixed tuning/held-out split) and the
likelihood-gain label (P(gold | q, d) − P(gold | q)) on real SmolLM2 pairs of that set."""

from __future__ import annotations

import hashlib
from pathlib import Path

import polars as pl
import pytest

from erag_dagster.config.registry import load_registry
from erag_dagster.data.loaders import load_dataset
from erag_dagster.labels.likelihood import label_set, label_set_probability, likelihood_labels
from erag_dagster.labels.likelihood_gain import (
    CLOSED_BOOK_LIKELIHOOD,
    LIKELIHOOD_GAIN,
    likelihood_gain_labels,
    prior_fingerprint,
)
from erag_dagster.labels.store import LabelStore
from erag_dagster.meta.fit import (
    SAME_LABEL_SHARE,
    fit_diagnostics,
    fit_from_dict,
    fit_lines,
    format_fit,
)
from erag_dagster.meta.label_methods import (
    LABEL_METHODS,
    SIGNED_METHODS,
    check_label_methods,
    extra_labels,
    label_method_code_versions,
)
from erag_dagster.readers.factory import reader_from_config
from tests.conftest import load_script
from tests.stats_fixture import FIT_SETTINGS, STATS

LABELS = ("yes", "no", "maybe")


@pytest.fixture(scope="module")
def script():
    return load_script("make_yesno_set")


def test_the_yes_no_maybe_halves_split_every_claim_once(
    script, shared_data: Path, tmp_path: Path
) -> None:
    source = shared_data / "scifact" / "scifact-hf-csv.zip"
    whole = script.build(source, LABELS)
    # the claims without evidence are kept as "maybe"; none has mixed labels
    assert whole.counts == {"yes": 124, "no": 64, "no_evidence": 112, "mixed": 0, "maybe": 112}
    tuning = script.build(source, LABELS, "tuning")
    heldout = script.build(source, LABELS, "heldout")
    assert (len(tuning.queries), len(heldout.queries)) == (167, 133)
    ids = {h: {q["query_id"] for q in d.queries} for h, d in (("t", tuning), ("h", heldout))}
    assert not ids["t"] & ids["h"]
    assert ids["t"] | ids["h"] == {q["query_id"] for q in whole.queries}
    for qid in ids["t"]:  # the written rule: the first byte of sha256(claim id) is even
        assert hashlib.sha256(qid.encode()).digest()[0] % 2 == 0
    assert all(script.half_of(q) == "heldout" for q in ids["h"])

    options = ["--labels", "yes,no,maybe", "--half", "heldout"]
    script.main(["--out", str(tmp_path / "h"), "--source", str(source), *options])
    ds = load_dataset(f"jsonl:{tmp_path / 'h'}")
    assert ds.corpus.height == 5183 and ds.queries.height == 133
    golds = [a[0] for a in ds.queries["answers"].to_list()]
    assert (golds.count("yes"), golds.count("no"), golds.count("maybe")) == (58, 29, 46)
    assert ds.queries["question"].str.ends_with("? Answer yes, no or maybe.").all()
    assert set(ds.qrels["query_id"]) <= set(ds.queries["query_id"])  # "maybe" has no evidence
    script.write(heldout, tmp_path / "again")  # deterministic: the same bytes
    for name in ("corpus.jsonl", "queries.jsonl", "qrels.jsonl"):
        assert (tmp_path / "h" / name).read_bytes() == (tmp_path / "again" / name).read_bytes()
    # the yes/no set is unchanged by the new option
    assert script.build(source).counts == {"yes": 124, "no": 64, "no_evidence": 112, "mixed": 0}


def test_likelihood_gain_is_registered_as_a_signed_label_method() -> None:
    assert LABEL_METHODS["likelihood_gain"] == "eRAG_likelihood_gain"
    assert "eRAG_likelihood_gain" in SIGNED_METHODS
    assert check_label_methods(["likelihood", "likelihood_gain"]) == [
        "likelihood",
        "likelihood_gain",
    ]
    versions = label_method_code_versions("accuracy", ["likelihood_gain"])
    assert CLOSED_BOOK_LIKELIHOOD in versions and LIKELIHOOD_GAIN in versions


@pytest.mark.slow
def test_likelihood_gain_on_real_smollm2_pairs(script, shared_data: Path, tmp_path: Path) -> None:
    """Two held-out claims (one with evidence, one "maybe"), each with two abstracts (evidence of
    the first and of another claim): the gain is
    the likelihood label less a closed-book prior computed by hand from the reader, in [−1, 1],
    and the prior is stored once per query whatever the run."""
    data = script.build(shared_data / "scifact" / "scifact-hf-csv.zip", LABELS, "heldout")
    judged = {r["query_id"]: r["doc_id"] for r in reversed(data.qrels)}  # first evidence doc
    with_evidence = [q for q in data.queries if q["query_id"] in judged][:2]
    maybe = next(q for q in data.queries if q["answers"] == ["maybe"])
    queries = pl.DataFrame([with_evidence[0], maybe])
    queries = queries.with_columns(pl.col("query_id").cast(pl.String))
    evidence = [judged[q["query_id"]] for q in with_evidence]
    corpus = pl.DataFrame([r for r in data.corpus if r["doc_id"] in evidence])
    run = pl.DataFrame(
        {
            "query_id": [q for q in queries["query_id"] for _ in range(2)],
            "doc_id": [evidence[0], evidence[1], evidence[1], evidence[0]],
            "rank": [1, 2, 1, 2],
        }
    )
    entry = next(iter(load_registry().readers.values()))
    reader = reader_from_config(
        entry.name, {**entry.config, "dtype": "float32", "num_threads": 1, "batch_size": 4}
    )
    store = LabelStore(str(tmp_path / "labels.sqlite"))
    gain = likelihood_gain_labels(run, queries, corpus, reader, "accuracy", store)
    with_doc = likelihood_labels(run, queries, corpus, reader, "accuracy", store)
    assert gain.height == 4 and gain["label"].is_between(-1.0, 1.0).all()
    labels = label_set(queries, "accuracy")  # the evaluated queries' golds
    assert "maybe" in labels
    for qid, question, answers in queries.select("query_id", "question", "answers").rows():
        items = [(question, "", f" {c}") for c in labels]
        log_probs = reader.continuation_log_probs(items)
        sums = {c: sum(lp) for c, lp in zip(labels, log_probs, strict=True)}
        prior = label_set_probability(sums, answers)
        rows = gain.filter(pl.col("query_id") == qid)
        assert rows["prior"].to_list() == pytest.approx([prior, prior], abs=1e-5)
        expected = with_doc.filter(pl.col("query_id") == qid)["label"] - prior
        assert rows["label"].to_list() == pytest.approx(expected.to_list(), abs=1e-5)
    count = "select count(*) from generations where reader_fingerprint = ?"
    fingerprint = prior_fingerprint(reader, labels)
    assert store._conn().execute(count, (fingerprint,)).fetchone()[0] == 2

    reader.reset_timings()  # a second retriever's run of the same queries: all from the store
    extra = extra_labels(run.head(2), queries, corpus, reader, "accuracy",
                         ["likelihood_gain"], store)  # fmt: skip
    assert reader.timings == []
    first = gain.filter(pl.col("query_id") == queries["query_id"][0])
    assert extra["eRAG_likelihood_gain"]["label"].to_list() == first["label"].to_list()


def test_fit_warns_when_one_label_answers_every_document() -> None:
    """Label outputs (accuracy): a reader that gives every document of most queries the same
    label is flagged, and the finding round-trips through the stored dict."""
    labels = pl.DataFrame(
        {
            "query_id": ["a", "a", "a", "b", "b", "c", "c", "d"],
            "doc_id": ["1", "2", "3", "1", "2", "1", "2", "1"],
            "label": [1.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.0, 1.0],
            "answer": ["Yes.", "yes, because", "Yes", "No", "no", "Yes", "Maybe", "yes"],
        }
    )
    queries = pl.DataFrame(
        {"query_id": ["a", "b", "c", "d"], "answers": [["yes"], ["yes"], ["maybe"], ["yes"]]}
    )
    fit = fit_diagnostics(
        labels,
        queries,
        metric="accuracy",
        **FIT_SETTINGS,
    )
    # d has one document; of a, b, c two answer one label on every document
    assert (fit.same_label_queries, fit.multi_doc_queries) == (2, 3)
    assert fit.same_label_share > SAME_LABEL_SHARE
    kinds = [kind for kind, _ in fit.findings()]
    assert kinds == ["same_label"]
    assert "its answers follow its prior for the question" in fit.warnings()[0]
    assert "add evaluation.verdict_labels: likelihood_gain" in fit.warnings()[0]
    assert fit_from_dict(fit.as_dict()) == fit
    # free-text metrics are not read this way
    other = fit_diagnostics(
        labels,
        queries,
        metric="f1",
        **FIT_SETTINGS,
    )
    assert other.same_label_queries is None and "same_label" not in dict(other.findings())
    # answers that follow the documents raise nothing
    mixed = labels.with_columns(answer=pl.Series(["yes", "no", "yes", "no", "yes"] * 2)[:8])
    assert (
        fit_diagnostics(
            mixed,
            queries,
            metric="accuracy",
            **FIT_SETTINGS,
        ).findings()
        == []
    )


def test_fit_fixes_know_what_is_already_configured() -> None:
    """The same-label finding does not ask for a label method or verdict setting that is
    already configured, and a kind declared expected is one line with its reason instead of a
    warning (issue 43)."""
    labels = pl.DataFrame(
        {
            "query_id": ["a", "a", "b", "b"],
            "doc_id": ["1", "2", "1", "2"],
            "label": [1.0, 1.0, 0.0, 0.0],
            "answer": ["yes", "Yes", "no", "no"],
        }
    )
    queries = pl.DataFrame({"query_id": ["a", "b"], "answers": [["yes"], ["yes"]]})
    plain = fit_diagnostics(
        labels,
        queries,
        metric="accuracy",
        **FIT_SETTINGS,
    ).warnings()[0]
    assert "add evaluation.verdict_labels: likelihood_gain" in plain
    computed = fit_diagnostics(
        labels,
        queries,
        metric="accuracy",
        relevance_level=1,
        stats=STATS,
        label_methods=("likelihood_gain",),
        verdict_labels="eRAG",
        expected={},
    ).warnings()[0]
    assert "eRAG_likelihood_gain is computed" in computed and "add evaluation" not in computed
    assert "evaluation.verdict_labels: likelihood_gain" in computed
    ranked = fit_diagnostics(
        labels, queries, metric="accuracy", relevance_level=1, stats=STATS,
        label_methods=("likelihood_gain",), verdict_labels="likelihood_gain", expected={}
    )  # fmt: skip
    assert "the verdict already ranks retrievers by eRAG_likelihood_gain" in ranked.warnings()[0]
    assert fit_from_dict(ranked.as_dict()) == ranked
    expected = fit_diagnostics(
        labels,
        queries,
        metric="accuracy",
        relevance_level=1,
        stats=STATS,
        expected={"same_label": "a reader with a prior"},
        label_methods=(),
        verdict_labels="eRAG",
    )
    assert expected.warnings() == [] and fit_lines([expected]) == []
    (line,) = expected.expected_lines()
    assert line.startswith("fit, expected [") and line.endswith("expected: a reader with a prior")
    assert fit_from_dict(expected.as_dict()) == expected
    (compact,) = format_fit([expected], full=False).splitlines()  # one line: no warning left
    assert compact.startswith("no fit warning on 1 reader x retriever runs")
    assert compact.endswith("; fit, expected: one label for every document (1 of 1 runs); why, "
                            "each run: --full")  # fmt: skip
    assert line in format_fit([expected], full=True)


def test_verdict_labels_and_expected_fit_settings() -> None:
    """``evaluation.verdict_labels`` names eRAG or a label method (computed as if listed) and
    ``evaluation.expected_fit`` maps finding kinds to reasons; anything else is one line."""
    from erag_dagster.config.evaluation import EvaluationConfig
    from erag_dagster.core.errors import InputError

    config = EvaluationConfig.from_mapping({"verdict_labels": "likelihood_gain"})
    assert config.verdict_labels == "likelihood_gain"
    assert config.label_methods == ["likelihood_gain"]
    assert EvaluationConfig().verdict_labels == "eRAG" and EvaluationConfig().expected_fit == {}
    fitted = EvaluationConfig.from_mapping({"expected_fit": {"separation": " small  reader "}})
    assert fitted.expected_fit == {"separation": "small reader"}
    for bad, needle in (
        ({"verdict_labels": "containment"}, "unknown verdict labels 'containment'"),
        ({"expected_fit": {"nonsense": "x"}}, "fit finding kinds"),
        ({"expected_fit": {"separation": ""}}, "say why"),
        ({"expected_fit": ["separation"]}, "a mapping"),
    ):
        with pytest.raises(InputError, match=needle) as err:
            EvaluationConfig.from_mapping(bad, where="registry.yaml")
        assert "\n" not in str(err.value)


def test_the_verdict_ranks_by_the_configured_label_method() -> None:
    """``verdict_labels: likelihood_gain``: the verdict ranks the retrievers on that method's
    labels (scored as Table 1 scores signed labels), and says so in its header."""
    from erag_dagster.config.evaluation import EvaluationConfig
    from erag_dagster.evaluation.steps import decide, score

    def frame(values: dict[str, list[float]]) -> pl.DataFrame:
        return pl.DataFrame(
            [(q, f"{q}-{i}", i + 1, v) for q, vs in values.items() for i, v in enumerate(vs)],
            schema=["query_id", "doc_id", "rank", "label"], orient="row",
        )  # fmt: skip

    erag = {("r", "good"): frame({"q1": [0, 0], "q2": [0, 0], "q3": [0, 1]}),
            ("r", "bad"): frame({"q1": [1, 1], "q2": [1, 1], "q3": [1, 0]})}  # fmt: skip
    gain = {
        ("r", "good"): frame({"q1": [0.5, 0.4], "q2": [0.6, 0.3], "q3": [0.7, 0.2]}),
        ("r", "bad"): frame({"q1": [-0.5, 0.0], "q2": [-0.2, 0.0], "q3": [0.0, -0.1]}),
    }
    base = EvaluationConfig.from_mapping({"label_k": 2})
    QUERY_IDS = ["q1", "q2", "q3"]
    by_erag = decide(score(erag, base, QUERY_IDS), base)
    assert by_erag.labels == "eRAG" and by_erag.ranking["retriever"][0] == "bad"
    config = base.with_overrides(verdict_labels="likelihood_gain")
    with_method = {
        s: f.with_columns(method=pl.lit("eRAG_likelihood_gain")) for s, f in gain.items()
    }
    found = decide(score(erag, config, QUERY_IDS), config, method_labels=with_method)
    assert found.labels == "eRAG_likelihood_gain"
    assert found.ranking["retriever"].to_list() == ["good", "bad"]
    assert found.lines()[0].startswith("reader r: retrievers ranked by eRAG_likelihood_gain P@2")
    assert type(found).from_dict(found.to_dict()).to_dict() == found.to_dict()
