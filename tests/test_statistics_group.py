"""Statistics as one group of the configuration, and one missing-query rule (issue 44).

- No function, method or dataclass field below the configuration holds a default for a
  statistical setting (resamples, seed, alpha, confidence, permutations), for the
  :class:`~erag_dagster.stats.settings.Statistics` value or for another evaluation setting
  (``relevance_level``, ...): a forgotten seed is a ``TypeError``, not seed 0.
  The scan reads the source (every ``def`` and class field of the package), so a new function
  is checked without being listed.
- The group is built by the configuration, checked by its rules, and reaches Dagster run config
  and the command line as the configuration's own fields.
- The stars of a leaderboard mark ``p < alpha`` of the statistics they are handed.
- A question a system has no labelled document for scores 0 on every metric and is named.
"""

from __future__ import annotations

import ast
from pathlib import Path

import polars as pl
import pytest

from erag_dagster.config.evaluation import FIELDS, STATISTICS_FIELDS, EvaluationConfig
from erag_dagster.config.registry import load_registry
from erag_dagster.core.errors import InputError
from erag_dagster.meta.per_query import erag_per_query, missing_queries_note, scored_queries
from erag_dagster.reports.leaderboard import format_leaderboard
from erag_dagster.stats.settings import Statistics
from tests.stats_fixture import STATS, stats

PACKAGE = Path(__file__).resolve().parents[1] / "erag_dagster"
STATISTICAL = {"n_resamples", "resamples", "seed", "alpha", "confidence", "n_permutations",
               "permutations", "stats", "statistics"}  # fmt: skip
#: The other evaluation settings whose names mean only that setting (``k``, ``metric`` and
#: ``dataset`` also name a reranker's depth, a fit's label, a spec string).
SETTINGS = {"relevance_level", "label_k", "list_metrics", "human_metrics", "e2e_ks",
            "label_methods", "efficiency_ks", "efficiency_queries",
            "efficiency_rounds"}  # fmt: skip
#: Where a setting may have a default: the configuration (it holds the one default of each);
#: the readers' own specs (a reader's ``seed`` is its sampling seed, a key of the reader config,
#: not a statistic).
HOLDERS = ("config/", "readers/")
#: Where a ``None`` default means "the registry's value" (an argument applied to the
#: configuration with ``with_overrides``): the Python API's arguments and the gate's ``--alpha``.
OVERRIDES = ("api/", "gate/verdict.py")


def _defaults(tree: ast.AST):
    """``(line, name, default node)`` of every argument default and class-body field value."""
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            args = node.args
            positional = [*args.posonlyargs, *args.args]
            for arg, default in zip(positional[len(positional) - len(args.defaults) :],
                                    args.defaults, strict=True):  # fmt: skip
                yield arg.lineno, arg.arg, default
            for arg, default in zip(args.kwonlyargs, args.kw_defaults, strict=True):
                if default is not None:
                    yield arg.lineno, arg.arg, default
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                named = isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)
                if named and item.value is not None:
                    yield item.lineno, item.target.id, item.value


def test_no_evaluation_setting_has_a_default_below_the_configuration() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        where = path.relative_to(PACKAGE).as_posix()
        if where.startswith(HOLDERS):
            continue
        for line, name, default in _defaults(ast.parse(path.read_text(encoding="utf-8"))):
            if name not in STATISTICAL | SETTINGS:
                continue
            none = isinstance(default, ast.Constant) and default.value is None
            if none and where.startswith(OVERRIDES):
                continue
            found.append(f"{where}:{line}: {name}={ast.unparse(default)}")
    assert not found, "setting defaults outside the configuration:\n" + "\n".join(found)


def test_a_forgotten_statistics_argument_is_a_type_error() -> None:
    from erag_dagster.reports.verdict import verdict
    from erag_dagster.stats.significance import bootstrap_mean_ci, compare_paired

    with pytest.raises(TypeError):
        bootstrap_mean_ci([0.0, 1.0])  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        compare_paired({"q": 1.0}, {"q": 0.0})  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        verdict(pl.DataFrame(), "P@3")  # type: ignore[call-arg]


def test_the_group_is_built_and_checked_by_the_configuration() -> None:
    config = EvaluationConfig.from_mapping(
        {"seed": 7, "alpha": 0.01, "bootstrap_resamples": 200, "confidence": 0.9,
         "permutations": 500}
    )  # fmt: skip
    assert config.statistics == Statistics(200, 7, 0.01, 0.9, 500)
    assert config.statistics.percent == "90%"
    fields = [name.removeprefix("bootstrap_") for name in STATISTICS_FIELDS]
    assert fields == list(Statistics.__dataclass_fields__)
    for key, value in (("confidence", 1.0), ("confidence", True), ("permutations", 0),
                       ("alpha", 0.0), ("seed", -1)):  # fmt: skip
        with pytest.raises(InputError, match=rf"evaluation\.{key} is"):
            EvaluationConfig.from_mapping({key: value})
        assert not FIELDS[key].per_dataset  # one per graph, as resamples, seed and alpha
    with pytest.raises(InputError, match="statistics: confidence must lie in"):
        Statistics(200, 7, 0.01, 1.5, 500)


def test_run_config_and_options_are_the_configurations_fields() -> None:
    from erag_dagster.cli import build_parser
    from erag_dagster.orchestration.resources import EvalSettings

    derived = {name for name, rule in FIELDS.items() if rule.run_config} - {"dataset"}
    own = {"dataset", "registry_path", "parsed_registry"}
    assert set(EvalSettings.model_fields) - own == derived
    packaged = load_registry().evaluation
    settings = EvalSettings(seed=7, alpha=0.01, confidence=0.9)
    assert settings.resolve() == packaged.with_overrides("test", seed=7, alpha=0.01, confidence=0.9)
    assert EvalSettings().resolve() == packaged  # every field empty: the registry's
    args = build_parser().parse_args(["run", "--seed", "7", "--confidence", "0.9"])
    assert (args.seed, args.confidence, args.alpha, args.k) == (7, 0.9, None, None)
    for command in (["evaluate-run", "--dataset", "d", "--run", "r"],
                    ["correlate", "--dataset", "d", "--retrievers", "bm25"]):  # fmt: skip
        parsed = build_parser().parse_args(command)
        assert all(getattr(parsed, name, None) is None for name in ("relevance_level", "k"))


def _board(p: float) -> pl.DataFrame:
    return pl.DataFrame(
        {"retriever": ["a", "b"], "baseline": [True, False], "queries": [10, 10],
         "dropped": [0, 0], "RR": [0.5, 0.6], "RR_low": [0.4, 0.5], "RR_high": [0.6, 0.7],
         "RR_diff": [0.0, 0.1], "RR_p_perm": [1.0, p], "RR_p_t": [1.0, p]}
    )  # fmt: skip


def test_the_stars_mark_p_below_the_statistics_alpha() -> None:
    assert format_leaderboard(_board(0.03), stats(alpha=0.05))["RR"][1].endswith("*")
    assert not format_leaderboard(_board(0.03), stats(alpha=0.01))["RR"][1].endswith("*")
    assert not format_leaderboard(_board(0.03), STATS)["RR"][0].endswith("*")  # the baseline


def _labels(rows: list[tuple[str, int, float]]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=["query_id", "rank", "label"], orient="row")


def test_a_question_without_a_labelled_document_scores_zero_and_stays_in_the_mean() -> None:
    labels = _labels([("a", 1, 1.0), ("a", 2, 0.0), ("b", 1, 0.0), ("b", 2, 1.0)])
    report = scored_queries(labels, ["P@2", "RR"], ["a", "b", "c"])
    assert report.per_query["c"] == {"P@2": 0.0, "RR": 0.0}
    assert report.aggregate == pytest.approx({"P@2": 1 / 3, "RR": 0.5})
    table = erag_per_query({("r", "partial"): labels}, ["RR"], ["c", "b", "a"])
    assert table["query_id"].to_list() == ["a", "b", "c"] and table["RR"].to_list()[-1] == 0.0
    with pytest.raises(InputError, match=r"1 question.* the evaluation does not have, e\.g\. 'a'"):
        scored_queries(labels, ["RR"], ["b"])
    note = missing_queries_note("partial", ["c"], 3)
    assert note == "partial has no document for 1 of 3 queries (each scored 0 on every metric: 'c')"
    assert missing_queries_note("full", [], 3) == ""
