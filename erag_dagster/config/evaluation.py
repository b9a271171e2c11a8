"""``EvaluationConfig``: the one typed, validated set of evaluation settings.

Every front door — the Dagster assets (``erag-dagster run``, the UI), the Python API
(:func:`erag_dagster.evaluate`, ``label``), the regression gate (``baseline``/``compare``) and the
HTML report — receives one of these; nothing else holds a default of its own. It is parsed from a
registry's ``evaluation:`` section (and each registry dataset's overrides) by
:meth:`EvaluationConfig.from_mapping`; a front door's explicit arguments are applied with
:meth:`EvaluationConfig.with_overrides`, checked by the same rules.

Defaults (the fields of :class:`EvaluationConfig`, each written once there):

- ``dataset`` ``sample``; ``k`` 50 (retrieval depth; the paper's Table 1); ``label_k`` 3 (eRAG
  labels per query, capped at ``k``); ``metric`` ``f1`` — token F1 (SQuAD v1.1's second
  metric) grades the partial answers of small readers, where exact match leaves most labels 0
  (docs/default-run.md);
- ``list_metrics`` derived from ``label_k``: ``P@L, Success@L, RR, AP, nDCG@L`` (the first is the
  verdict's headline metric); ``e2e_ks`` derived: ``[1, label_k]`` (Figure 1 needs two depths);
- ``human_metrics`` ``nDCG@10, R@10, R@50, P@5, Success@5, RR, AP``; ``relevance_level`` 1;
- the statistics (:attr:`EvaluationConfig.statistics`, one
  :class:`~erag_dagster.stats.settings.Statistics` value every CI, test, star and verdict is
  computed with): ``bootstrap_resamples`` 1000, ``seed`` 0, ``alpha`` 0.05, ``confidence``
  0.95 (the level of every interval), ``permutations`` 10000 (sign flips of a randomisation
  test; exact when ``2**n`` fits);
- ``efficiency_ks`` ``[10, 50]``, ``efficiency_queries`` 10, ``efficiency_rounds`` 3 (Table 2);
- ``label_methods`` none; ``verdict_labels`` ``eRAG`` (the labels the verdict ranks retrievers
  by: eRAG's generated answers, or one of the label methods — ``likelihood``, ``signed``,
  ``likelihood_gain`` —, which is then computed as if it were in ``label_methods``);
  ``expected_fit`` none (fit finding kind → why it is expected: printed as one line with the
  reason instead of a warning, :mod:`erag_dagster.meta.fit`); ``schedule`` ``0 3 * * *`` (the
  re-evaluation schedule, cron);
- ``reference`` ``gold``: labels score against the gold answers; a reference answer per question
  instead (``self@union``, ``self@RETRIEVER``, ``reader:NAME@RETRIEVER``, ...) labels a dataset
  without gold answers (:mod:`erag_dagster.labels.reference`, docs/label-methods.md).

Edge-case policy: an unknown key, a wrong type (a bool where a number is wanted, a string where a
list is wanted), an empty list or an out-of-range number is refused with one
:class:`~erag_dagster.core.errors.InputError` naming ``where`` (``file:line`` when the registry
knows the line) and the key. ``label_k`` and every ``e2e_ks`` entry larger than ``k`` are capped at
``k`` (the deepest list there is); ``e2e_ks`` and ``efficiency_ks`` are sorted, duplicates dropped.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from erag_dagster.core.errors import InputError
from erag_dagster.stats.settings import Statistics

__all__ = [
    "DATASET_OVERRIDES",
    "FIELDS",
    "STATISTICS_FIELDS",
    "EvaluationConfig",
    "default_list_metrics",
]

_MAX_INT = 2**31 - 1
DEFAULT_HUMAN_METRICS = ("nDCG@10", "R@10", "R@50", "P@5", "Success@5", "RR", "AP")
DEFAULT_SCHEDULE = "0 3 * * *"
DEFAULT_METRIC = "f1"


def default_list_metrics(label_k: int) -> list[str]:
    """The eRAG list metrics when none are given: precision, success and nDCG at the labelled
    depth, and the depth-free RR and AP (paper Table 1's metrics)."""
    return [f"P@{label_k}", f"Success@{label_k}", "RR", "AP", f"nDCG@{label_k}"]


def _where(where: str, lines: Mapping[str, int] | None, key: str, section: str) -> str:
    """``FILE:LINE: evaluation.KEY`` when the line is known, else ``WHERE: evaluation.KEY``
    (``section`` ``""``: an argument, named as it is)."""
    line = (lines or {}).get(key)
    if line is None:
        return f"{where}: {section}{key}" if where else f"{section}{key}"
    path = where.split(": ", 1)[0]
    return f"{path}:{line}: {section}{key}"


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _count(value: Any) -> int:
    if not _is_int(value) or not 1 <= value <= _MAX_INT:
        raise ValueError("an integer >= 1")
    return value


def _seed(value: Any) -> int:
    if not _is_int(value) or not 0 <= value <= 2**32 - 1:
        raise ValueError("an integer from 0 to 2**32 - 1")
    return value


def _alpha(value: Any) -> float:
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise ValueError("a number between 0 and 1")
    if not (math.isfinite(value) and 0 < value < 1):
        raise ValueError("a number between 0 and 1 (exclusive)")
    return float(value)


def _confidence(value: Any) -> float:
    return _alpha(value)


def _counts(value: Any) -> list[int]:
    if not isinstance(value, list | tuple) or not value:
        raise ValueError("a non-empty list of integers >= 1")
    return sorted({_count(v) for v in value})


def _text(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError("a non-empty string")
    return value


def _dataset(value: Any) -> str:
    from erag_dagster.data.spec import parse_spec

    parse_spec(_text(value))
    return value


def _metric(value: Any) -> str:
    from erag_dagster.metrics.downstream import get_downstream_metric

    get_downstream_metric(_text(value))
    return value


def _metric_names(value: Any) -> list[str]:
    from erag_dagster.metrics.names import parse_metric_names

    if not isinstance(value, list | tuple) or not value:
        raise ValueError("a non-empty list of metric names such as [P@3, nDCG@3]")
    parse_metric_names(list(value))
    return list(dict.fromkeys(value))


def _label_methods(value: Any) -> list[str]:
    from erag_dagster.meta.label_methods import check_label_methods

    if not isinstance(value, list | tuple):
        raise ValueError("a list (empty, or of likelihood, signed)")
    return check_label_methods(list(value))


def _reference(value: Any) -> str:
    from erag_dagster.labels.reference import GOLD, parse_reference

    found = parse_reference(value)
    return GOLD if found is None else found.text


def _verdict_labels(value: Any) -> str:
    from erag_dagster.meta.label_methods import VERDICT_LABELS, check_verdict_labels

    if not isinstance(value, str):
        raise ValueError(f"one of {', '.join(VERDICT_LABELS)}")
    return check_verdict_labels(value)


def _expected_fit(value: Any) -> dict[str, str]:
    from erag_dagster.meta.fit import SHORT_FIXES

    kinds = ", ".join(SHORT_FIXES)
    if not isinstance(value, Mapping):
        raise ValueError(f"a mapping of fit finding kinds ({kinds}) to why each is expected")
    out = {}
    for kind, reason in value.items():
        if kind not in SHORT_FIXES:
            raise ValueError(f"a mapping whose keys are fit finding kinds ({kinds}), not {kind!r}")
        if not isinstance(reason, str) or not reason.strip():
            raise ValueError(f"a mapping whose values say why each kind is expected ({kind!r})")
        out[str(kind)] = " ".join(reason.split())
    return dict(sorted(out.items()))


def _schedule(value: Any) -> str:
    if not isinstance(value, str) or len(value.split()) != 5:
        raise ValueError("a cron string of five fields such as '0 3 * * *'")
    return value


@dataclass(frozen=True)
class _Field:
    """One setting: its check (returns the normalised value or raises ``ValueError`` with
    what is wanted), whether a registry dataset may override it, and the part of its check a
    JSON schema can state (``schema``: the eRAG component's ``defs.yaml`` schema carries it,
    so ``dg check yaml`` refuses such a value before anything loads; the check decides). Its
    default is the field default of :class:`EvaluationConfig` (the one place it is written)."""

    check: Callable[[Any], Any]
    help: str
    per_dataset: bool = True
    run_config: bool = True
    """Whether Dagster run config (``EvalSettings``) may set it (the schedule is the
    definitions', not a run's)."""
    schema: Mapping[str, Any] = field(default_factory=dict)


_COUNT = {"minimum": 1, "maximum": _MAX_INT}
_COUNTS = {"minItems": 1, "items": _COUNT}
_NAMES = {"minItems": 1, "items": {"minLength": 1}}
_TEXT = {"minLength": 1}

FIELDS: dict[str, _Field] = {
    "dataset": _Field(_dataset, "dataset spec, e.g. sample, beir:DIR, squad:PATH", schema=_TEXT),
    "k": _Field(_count, "retrieval depth per query", schema=_COUNT),
    "label_k": _Field(_count, "documents labelled per query (capped at k)", schema=_COUNT),
    "metric": _Field(
        _metric,
        "downstream metric of the answers: em, f1, rougel, accuracy, contains",
        schema=_TEXT,
    ),
    "list_metrics": _Field(
        _metric_names, "eRAG list metrics; the first is the verdict's", schema=_NAMES
    ),
    "human_metrics": _Field(_metric_names, "metrics on the human judgments", schema=_NAMES),
    "relevance_level": _Field(
        _count, "binary human metrics: a document is relevant when judged >= this", schema=_COUNT
    ),
    "e2e_ks": _Field(_counts, "end-to-end depths (Figure 1)", schema=_COUNTS),
    "label_methods": _Field(_label_methods, "extra Table-1 labellings: likelihood, signed"),
    "reference": _Field(
        _reference,
        "what answers are scored against: gold, self@RETRIEVER, self@union, reader:NAME@RETRIEVER",
        schema=_TEXT,
    ),
    "verdict_labels": _Field(
        _verdict_labels,
        "the labels the verdict ranks retrievers by: eRAG, or a label method",
        run_config=False,  # it decides what the verdict asset reads: the definitions'
        schema=_TEXT,
    ),
    "expected_fit": _Field(
        _expected_fit,
        "fit finding kinds expected on this data, each with why (one line, not a warning)",
        run_config=False,
    ),
    "bootstrap_resamples": _Field(
        _count, "bootstrap resamples of every CI", per_dataset=False, schema=_COUNT
    ),
    "seed": _Field(
        _seed,
        "seed of every random draw (bootstrap, sign flips)",
        per_dataset=False,
        schema={"minimum": 0, "maximum": 2**32 - 1},
    ),
    "alpha": _Field(
        _alpha,
        "significance level of every test and star",
        per_dataset=False,
        schema={"exclusiveMinimum": 0, "exclusiveMaximum": 1},
    ),
    "confidence": _Field(
        _confidence,
        "level of every confidence interval, e.g. 0.95",
        per_dataset=False,
        schema={"exclusiveMinimum": 0, "exclusiveMaximum": 1},
    ),
    "permutations": _Field(
        _count,
        "sign flips of every randomisation test (exact when 2**n fits)",
        per_dataset=False,
        schema=_COUNT,
    ),
    "efficiency_ks": _Field(_counts, "Table 2 depths", per_dataset=False, schema=_COUNTS),
    "efficiency_queries": _Field(
        _count, "queries timed for Table 2", per_dataset=False, schema=_COUNT
    ),
    "efficiency_rounds": _Field(
        _count, "timing rounds per Table 2 cell", per_dataset=False, schema=_COUNT
    ),
    "schedule": _Field(
        _schedule,
        "re-evaluation schedule (cron)",
        per_dataset=False,
        run_config=False,
        schema={"minLength": 9},
    ),
}
"""Every ``evaluation:`` key and its rule (:class:`EvaluationConfig` holds the defaults)."""

STATISTICS_FIELDS = ("bootstrap_resamples", "seed", "alpha", "confidence", "permutations")
"""The settings of the statistics group (:attr:`EvaluationConfig.statistics`), in the order of
:class:`~erag_dagster.stats.settings.Statistics`' fields."""

DATASET_OVERRIDES = frozenset(name for name, f in FIELDS.items() if f.per_dataset) - {"dataset"}
"""Keys a registry dataset's ``evaluation:`` may override (its spec is its own ``spec``; the
rest — the statistics, Table 2, the schedule — are one per graph)."""


@dataclass(frozen=True)
class EvaluationConfig:
    """The settings of one evaluation (see the module docstring for each default). Frozen: a
    front door changes settings with :meth:`with_overrides`, never in place (its lists are
    lists for Dagster metadata and JSON; treat them as read-only)."""

    dataset: str = "sample"
    k: int = 50
    label_k: int = 3
    metric: str = DEFAULT_METRIC
    list_metrics: list[str] = field(default_factory=lambda: default_list_metrics(3))
    human_metrics: list[str] = field(default_factory=lambda: list(DEFAULT_HUMAN_METRICS))
    relevance_level: int = 1
    e2e_ks: list[int] = field(default_factory=lambda: [1, 3])
    label_methods: list[str] = field(default_factory=list)
    reference: str = "gold"
    verdict_labels: str = "eRAG"
    expected_fit: dict[str, str] = field(default_factory=dict)
    bootstrap_resamples: int = 1000
    seed: int = 0
    alpha: float = 0.05
    confidence: float = 0.95
    permutations: int = 10_000
    efficiency_ks: list[int] = field(default_factory=lambda: [10, 50])
    efficiency_queries: int = 10
    efficiency_rounds: int = 3
    schedule: str = DEFAULT_SCHEDULE

    @classmethod
    def from_mapping(
        cls,
        raw: Mapping[str, Any] | None,
        where: str = "",
        lines: Mapping[str, int] | None = None,
        base: EvaluationConfig | None = None,
        allowed: frozenset[str] | None = None,
    ) -> EvaluationConfig:
        """Parse a registry ``evaluation:`` mapping (``None``: every default) over ``base``
        (default: the built-in defaults). ``where`` names the file (and section) in errors,
        ``lines`` maps a key to its line; ``allowed``: the keys this mapping may set (a
        registry dataset's overrides: :data:`DATASET_OVERRIDES`)."""
        if raw is None:
            raw = {}
        if not isinstance(raw, Mapping):
            raise InputError(f"{where or 'evaluation'}: 'evaluation' must be a mapping")
        known = allowed if allowed is not None else frozenset(FIELDS)
        for key in raw:
            if key not in known:
                raise InputError(
                    f"{_where(where, lines, str(key), 'evaluation.')} is not a setting; known: "
                    f"{', '.join(sorted(known))}"
                )
        return (base or _DEFAULTS)._apply(dict(raw), where, lines, "evaluation.")

    def with_overrides(self, where: str = "", **values: Any) -> EvaluationConfig:
        """A copy with the given settings (``None`` values are left as they are), checked by
        the same rules as the registry; derived defaults follow a changed ``label_k``."""
        given = {k: v for k, v in values.items() if v is not None}
        for key in given:
            if key not in FIELDS:
                raise InputError(f"{where or 'evaluation'}: unknown setting {key!r}")
        return self._apply(given, where, None, "")

    def _apply(
        self, given: dict[str, Any], where: str, lines: Mapping[str, int] | None, section: str
    ) -> EvaluationConfig:
        values = asdict(self)
        derived_from_label_k = {
            "list_metrics": values["list_metrics"] == default_list_metrics(values["label_k"]),
            "e2e_ks": values["e2e_ks"] == _default_e2e_ks(values["label_k"], values["k"]),
        }
        for key, value in given.items():
            try:
                values[key] = FIELDS[key].check(value)
            except InputError as exc:  # a name the metric/label-method grammar refuses
                raise InputError(f"{_where(where, lines, key, section)}: {exc}") from None
            except ValueError as exc:
                raise InputError(
                    f"{_where(where, lines, key, section)} is {value!r}; it must be {exc}"
                ) from None
        values["label_k"] = min(values["label_k"], values["k"])
        if "list_metrics" not in given and derived_from_label_k["list_metrics"]:
            values["list_metrics"] = default_list_metrics(values["label_k"])
        if "e2e_ks" not in given and derived_from_label_k["e2e_ks"]:
            values["e2e_ks"] = _default_e2e_ks(values["label_k"], values["k"])
        values["e2e_ks"] = sorted({min(x, values["k"]) for x in values["e2e_ks"]})
        if (
            values["verdict_labels"] != "eRAG"
            and values["verdict_labels"] not in values["label_methods"]
        ):
            values["label_methods"] = [*values["label_methods"], values["verdict_labels"]]
        return EvaluationConfig(**values)

    @property
    def statistics(self) -> Statistics:
        """The statistics group (``bootstrap_resamples``, ``seed``, ``alpha``, ``confidence``,
        ``permutations``) as the one value every stats and report function requires."""
        return Statistics(
            resamples=self.bootstrap_resamples,
            seed=self.seed,
            alpha=self.alpha,
            confidence=self.confidence,
            permutations=self.permutations,
        )

    def as_dict(self) -> dict[str, Any]:
        """Every setting as plain JSON-able values (copies of the lists)."""
        return asdict(self)

    def differences(self, other: EvaluationConfig) -> list[str]:
        """The names of the settings where ``other`` differs (in field order)."""
        return [f.name for f in fields(self) if getattr(self, f.name) != getattr(other, f.name)]


def _default_e2e_ks(label_k: int, k: int) -> list[int]:
    return sorted({1, min(label_k, k)})


_DEFAULTS = EvaluationConfig()
