"""compat="erag": the real reference ``erag.eval`` 0.0.1 against our reproduction, on many inputs.

The reference is installed with ``pip install --no-deps erag==0.0.1`` (it pins the old
``pytrec_eval==0.5``; pytrec-eval-terrier provides ``import pytrec_eval``). Its text generator is
the identity on a document id and its downstream metric returns that document's label, so
``erag.eval`` scores exactly the label lists we give ``evaluate_labels``.
"""

from __future__ import annotations

import math
import random
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from erag_dagster.core.errors import InputError
from erag_dagster.metrics.list_metrics import evaluate_labels

erag = pytest.importorskip("erag", reason="reference erag 0.0.1: pip install --no-deps erag==0.0.1")


def reference_eval(labels: Mapping[str, Sequence[float]], metrics: Sequence[str]) -> dict:
    """``erag.eval`` on documents whose downstream score is the given label."""
    label_of = {f"{q}#{i}": x for q, xs in labels.items() for i, x in enumerate(xs)}
    retrieval_results = {q: [f"{q}#{i}" for i in range(len(xs))] for q, xs in labels.items()}
    expected_outputs = {q: ["gold"] for q in labels}

    def text_generator(batch: dict[str, list[str]]) -> dict[str, str]:
        return {q: docs[0] for q, docs in batch.items()}

    def downstream_metric(generated: dict[str, str], gold: dict[str, list[str]]) -> dict:
        return {q: label_of[doc] for q, doc in generated.items()}

    return erag.eval(
        retrieval_results, expected_outputs, text_generator, downstream_metric, set(metrics)
    )


def compare(labels: Mapping[str, Sequence[float]], metrics: Sequence[str]) -> bool:
    """Assert both agree: same values (exact), or both refuse. True if the reference accepted."""
    try:
        expected = reference_eval(labels, metrics)
    except Exception as ref_error:  # the reference's failure: ours must be an InputError
        with pytest.raises(InputError, match=r"erag 0\.0\.1 .* refuses this input"):
            evaluate_labels(labels, metrics, compat="erag")
        assert ref_error is not None
        return False
    ours = evaluate_labels(labels, metrics, compat="erag")
    assert ours.per_query.keys() == expected["per_input"].keys(), (labels, metrics)
    for query, values in expected["per_input"].items():
        assert ours.per_query[query].keys() == values.keys()
        for metric, value in values.items():
            assert ours.per_query[query][metric] == value, (labels, metrics, query, metric)
    assert ours.aggregate == expected["aggregated"], (labels, metrics)
    return True


# --- metric pools ------------------------------------------------------------------------------

# names pytrec_eval returns under their own key (never makes trec_eval abort)
BINARY_OK = ["map", "recip_rank", "ndcg", "bpref", "Rprec", "infAP", "gm_map", "gm_bpref",
             "num_q", "num_ret", "num_rel", "num_rel_ret", "num_nonrel_judged_ret", "11pt_avg",
             "utility", "set_P", "set_F", "set_recall", "set_map", "set_relative_P", "binG",
             "G", "Rndcg", "ndcg_rel", "iprec_at_recall_0.10",
             "iprec_at_recall_0.50", "Rprec_mult_0.20", "Rprec_mult_2.00"]  # fmt: skip
CUTOFF_BASES = ["P", "success", "recall", "map_cut", "ndcg_cut", "relative_P"]
# names the reference fails on (KeyError / unsupported measure), each with its trec_eval base:
# mixed with a valid name of the same base some of them make trec_eval abort ("duplicate
# cutoffs"), so the generator keeps them apart
BINARY_FAIL = {"P": "P", "success": "success", "P_05": "P", "map_5": "map", "P.5": "P",
               "P@5": "P@", "foo": "foo", "ndcg_cut": "ndcg_cut", "P_5.5": "P",
               "iprec_at_recall_0.1": "iprec_at_recall", "iprec_at_recall": "iprec_at_recall",
               "Rprec_mult_1": "Rprec_mult"}  # fmt: skip
GRADED_ANY = ["P", "success", "P_1_0", "P_ 2", "P_-1", "success_0", "success_-2", "P_+3",
              "map", "ndcg_cut_3", "recip_rank", "P_x", "P_", "success_1.5", "foo"]  # fmt: skip


def random_binary_case(rng: random.Random) -> tuple[dict[str, list], list[str]]:
    labels: dict[str, list] = {}
    for q in range(rng.randint(1, 6)):
        length = rng.choice([0, 1, 2, 3, 5, 8, 12]) if rng.random() < 0.9 else 0
        pool = [0, 1] if rng.random() < 0.5 else [0.0, 1.0, 0, 1, True, False]
        labels[f"query {q}"] = [rng.choice(pool) for _ in range(length)]
    metrics = [f"{rng.choice(CUTOFF_BASES)}_{rng.randint(1, 15)}" for _ in range(rng.randint(0, 4))]
    metrics += rng.sample(BINARY_OK, rng.randint(0, 4))
    if rng.random() < 0.15:
        bad = rng.choice(sorted(BINARY_FAIL))
        base = BINARY_FAIL[bad]
        metrics = [m for m in metrics if m != base and not m.startswith(f"{base}_")]
        metrics.append(bad)
    return labels, metrics


def random_graded_case(rng: random.Random) -> tuple[dict[str, list], list[str]]:
    labels: dict[str, list] = {}
    for q in range(rng.randint(1, 6)):
        length = rng.choice([1, 2, 3, 5, 8, 12]) if rng.random() < 0.93 else 0
        labels[f"q{q}"] = [
            rng.choice([0, 1, 0.0, 1.0, 0.5, rng.random(), rng.random(), round(rng.random(), 2)])
            for _ in range(length)
        ]
    # make sure at least one label is graded
    first = next(iter(labels))
    labels[first].append(rng.choice([0.25, 0.5, rng.random() * 0.98 + 0.01]))
    # cut-offs mostly within every list; sometimes past the shortest one (refused)
    cut_max = min(len(xs) for xs in labels.values())
    if rng.random() < 0.2:
        cut_max = max(len(xs) for xs in labels.values()) + 1
    metrics = [
        f"{rng.choice(['P', 'success'])}_{rng.randint(1, max(cut_max, 1))}"
        for _ in range(rng.randint(0, 3))
    ]
    if rng.random() < 0.5:
        metrics.append(rng.choice(["P", "success"]))
    if rng.random() < 0.25:
        metrics.append(rng.choice(GRADED_ANY))
    return labels, metrics


def test_random_binary_label_lists_match_the_reference() -> None:
    rng = random.Random(20240714)
    accepted = refused = 0
    for _ in range(1500):
        labels, metrics = random_binary_case(rng)
        if compare(labels, metrics):
            accepted += 1
        else:
            refused += 1
    print(f"binary: {accepted} accepted, {refused} refused by both")
    assert accepted >= 1000 and refused >= 100, (accepted, refused)


def test_random_graded_label_lists_match_the_reference() -> None:
    rng = random.Random(99)
    accepted = refused = 0
    for _ in range(1500):
        labels, metrics = random_graded_case(rng)
        if compare(labels, metrics):
            accepted += 1
        else:
            refused += 1
    print(f"graded: {accepted} accepted, {refused} refused by both")
    assert accepted >= 700 and refused >= 300, (accepted, refused)


# --- the quirks, one by one -------------------------------------------------------------------


def test_binary_mode_drops_empty_lists_and_keeps_all_zero_lists() -> None:
    labels = {"a": [1, 0, 1], "empty": [], "zeros": [0, 0]}
    assert compare(labels, ["P_5", "recip_rank"])
    report = evaluate_labels(labels, ["P_5", "recip_rank"], compat="erag")
    assert set(report.per_query) == {"a", "zeros"}
    assert report.aggregate["P_5"] == pytest.approx(0.2, abs=1e-15)  # (0.4 + 0) / 2


def test_graded_mode_is_global_and_refuses_ranking_metrics() -> None:
    assert not compare({"b": [1, 0], "g": [0.5]}, ["map"])
    with pytest.raises(InputError, match="only success, P"):
        evaluate_labels({"b": [1, 0], "g": [0.5]}, ["map"], compat="erag")
    assert compare({"b": [1, 0], "g": [0.5]}, ["P_1", "success"])


def test_graded_mode_quirks_of_int_parsing() -> None:
    labels = {"q": [0.5, 0, 1, 0.25, 0, 0, 0, 0, 0, 1, 0.75]}
    for metric in ("P_1_0", "P_ 2", "P_-1", "success_0", "P_+3", "P", "success"):
        assert compare(labels, [metric]), metric
    report = evaluate_labels(labels, ["P_1_0", "P_10", "P_-1", "success_0"], compat="erag")
    assert report.per_query["q"]["P_1_0"] == report.per_query["q"]["P_10"]
    # range(-1) is empty: int 0 / -1 = -0.0 per query; the mean sum([-0.0]) / 1 is +0.0
    reference = reference_eval(labels, ["P_-1"])
    assert math.copysign(1, reference["per_input"]["q"]["P_-1"]) < 0
    assert math.copysign(1, report.per_query["q"]["P_-1"]) < 0
    assert math.copysign(1, report.aggregate["P_-1"]) > 0
    assert report.per_query["q"]["success_0"] == 0.0


@pytest.mark.parametrize(
    ("labels", "metrics", "reason"),
    [
        ({"q": [0.5, 1]}, ["P_3"], "cuts past"),
        ({"q": [0.5], "e": []}, ["P"], "divides by zero"),
        ({"q": [0.5, 1]}, ["P_0"], "divides by zero"),
        ({"q": [1, 0]}, ["P"], "not a pytrec_eval result key"),
        ({"q": [1, 0]}, ["success"], "not a pytrec_eval result key"),
        ({"q": [1, 0]}, ["P_05"], "not a pytrec_eval result key"),
        ({"q": [1, 0]}, ["P_5\n"], "not a pytrec_eval result key"),
        ({"q": [1, 0]}, ["P.5"], "not a pytrec_eval result key"),
        ({"q": [10**400]}, ["P_1"], "outside"),
        ({"a": [], "b": []}, ["P_5"], "every list is empty"),
        ({}, ["P_5"], "no queries"),
        ({"q": [1.5]}, ["P_1"], "outside"),
        ({"q": [-0.5]}, ["P_1"], "outside"),
        ({"q": [0.5]}, ["ndcg"], "only success, P"),
        ({"q": [0.5]}, ["P_x"], "not an integer"),
    ],
)
def test_refusals_match_reference_failures(labels: dict, metrics: list, reason: str) -> None:
    with pytest.raises(Exception) as ref_error:  # any failure of the reference
        reference_eval(labels, metrics)
    assert not isinstance(ref_error.value, InputError)
    with pytest.raises(InputError, match=reason) as ours:
        evaluate_labels(labels, metrics, compat="erag")
    assert "\n" not in str(ours.value)


@pytest.mark.parametrize("metric", ["runid", "relstring"])
def test_string_measures_are_refused(metric: str) -> None:
    """pytrec_eval hands back uninitialised memory for trec_eval's string measures."""
    value = reference_eval({"q": [1, 0, 1]}, [metric])["aggregated"][metric]
    assert isinstance(value, float)  # some number, not trec_eval's string
    with pytest.raises(InputError, match="uninitialised"):
        evaluate_labels({"q": [1, 0, 1]}, [metric], compat="erag")


def test_empty_metric_set_matches() -> None:
    assert compare({"q": [1, 0]}, [])
    assert compare({"q": [0.5, 0]}, [])
    assert compare({"a": [], "b": []}, [])  # nothing to average: the reference returns {} too


def test_nan_label_is_refused_although_the_reference_returns_nan() -> None:
    labels = {"q": [0.5, float("nan"), 1.0]}
    reference = reference_eval(labels, ["P", "success"])
    assert math.isnan(reference["aggregated"]["P"])
    assert reference["aggregated"]["success"] == 1.0  # max() silently skips the NaN
    with pytest.raises(InputError, match="NaN label"):
        evaluate_labels(labels, ["P", "success"], compat="erag")


_ABORT_SCRIPT = """
import sys
sys.path.insert(0, {tests!r})
from test_erag_compat import reference_eval
reference_eval({{"q": [1, 0, 1]}}, [{metric!r}])
print("survived")
"""


@pytest.mark.parametrize("metric", ["P_0", "ndcg_5"])
def test_names_that_abort_the_reference_process_are_refused(metric: str) -> None:
    """trec_eval (inside pytrec_eval) aborts the interpreter on these: run it in a child."""
    script = _ABORT_SCRIPT.format(tests=str(Path(__file__).parent), metric=metric)
    repo = Path(__file__).resolve().parents[1]
    child = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=repo
    )
    assert child.returncode != 0 and "survived" not in child.stdout
    with pytest.raises(InputError, match="not a pytrec_eval result key"):
        evaluate_labels({"q": [1, 0, 1]}, [metric], compat="erag")


def test_compat_modes_come_from_a_provider_table_without_an_import_cycle() -> None:
    import subprocess
    import sys

    from erag_dagster.metrics.erag_compat import erag_eval_labels
    from erag_dagster.metrics.list_metrics import COMPAT_MODES, COMPAT_PROVIDERS

    assert {"erag": erag_eval_labels} == COMPAT_PROVIDERS and COMPAT_MODES == ("erag",)
    # either module imports first on its own (no module-level cycle between them)
    for first in ("erag_compat", "list_metrics"):
        code = f"import erag_dagster.metrics.{first}; import erag_dagster.metrics.report"
        assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0
