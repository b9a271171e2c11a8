"""The regression gate: evaluate a baseline and a candidate the same way, and compare them.

A *ref* names what is evaluated, tried in this order:

1. an existing ``.json`` file: a baseline written by :func:`save_baseline` (``erag-dagster
   baseline``), used as stored — no retrieval, no reader call;
2. any other existing file: a run file, TREC (``qid Q0 docid rank score tag``) or ``.parquet``
   (``query_id, doc_id, score``), read and checked as a registry ``run_file`` is
   (:func:`~erag_dagster.retrieval.run_file.load_run_file`);
3. otherwise a registry retriever (name or partition key), run on the dataset.

A run is cut to ``k`` per query and labelled with eRAG (:func:`~erag_dagster.labels.labeller.
label_run`, the path of ``erag-dagster label``) through the label store, so only (query,
document text) pairs the store lacks cost reader calls. A dataset query the run has no
document for is an empty list (0 on every metric), never dropped. The list metrics
(:func:`~erag_dagster.metrics.list_metrics.evaluate_labels`) of each query are then compared
(:mod:`.verdict`). Both sides must share every field of
:class:`~erag_dagster.gate.identity.EvalIdentity`; otherwise :func:`compare` refuses in one
line naming what differs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from erag_dagster.callbacks import Log
from erag_dagster.errors import InputError, concerning
from erag_dagster.gate.identity import (
    LABEL_METHOD,
    EvalIdentity,
    RetrieverIdentity,
    baseline_payload,
    read_baseline,
    refuse_other_identity,
    write_baseline,
)
from erag_dagster.gate.verdict import GateRule, MetricVerdict, metric_verdicts, overall_verdict


@dataclass(frozen=True)
class GateSettings:
    """How both sides are evaluated. Empty values take the registry's ``evaluation`` defaults
    (``dataset``, ``label_k`` as ``k``, ``metric``, ``list_metrics``) and its first reader;
    ``store`` empty: the default label store (:func:`~erag_dagster.labels.store.resolve_store`).
    """

    dataset: str = ""
    reader: str = ""
    downstream_metric: str = ""
    metrics: tuple[str, ...] = ()
    k: int = 0
    store: str = ""
    registry: str = ""


@dataclass(frozen=True)
class Evaluation:
    """One side of a gate: its identity, retriever, labelled rows (``query_id, doc_id, rank,
    label``), per-query metric values, means, and what labelling cost (distinct pairs answered
    by the reader now / found in the store; both 0 for a stored baseline)."""

    ref: str
    identity: EvalIdentity
    retriever: RetrieverIdentity
    dataset: str
    reader_name: str
    query_ids: list[str]
    labels: pl.DataFrame
    per_query: dict[str, dict[str, float]]
    aggregate: dict[str, float]
    judged_now: int = 0
    from_store: int = 0
    stored: bool = False


@dataclass(frozen=True)
class GateResult:
    """:func:`compare`'s answer: both sides, the per-metric verdicts, the overall verdict and
    the rule they were reached with."""

    baseline: Evaluation
    candidate: Evaluation
    metrics: list[MetricVerdict]
    verdict: str
    rule: GateRule
    notes: list[str] = field(default_factory=list)


class _Context:
    """The dataset, registry, reader and store shared by both sides (each loaded once)."""

    def __init__(self, settings: GateSettings, reader: Any = None, log: Log | None = None):
        from erag_dagster.labels.audit import evaluation_id
        from erag_dagster.registry import load_registry

        self.log = log or (lambda _m: None)
        with concerning(settings.registry or None):
            self.registry = load_registry(settings.registry or None)
        # The registry's EvaluationConfig with the gate's flags applied, checked by the same
        # rules before any work: the gate evaluates at the labelled depth (label_k).
        self.config = self.registry.evaluation.with_overrides(
            "compare",
            dataset=settings.dataset or None,
            k=max(settings.k, self.registry.evaluation.k) if settings.k else None,
            label_k=settings.k or None,
            metric=settings.downstream_metric or None,
            list_metrics=list(settings.metrics) or None,
        )
        self.spec = self.config.dataset
        self.k = self.config.label_k
        self.downstream = self.config.metric
        self.metrics = tuple(self.config.list_metrics)
        self.store_target = settings.store
        # one id for this baseline or comparison: every label row it writes records it (audit)
        self.evaluation_id = evaluation_id("gate")
        self._reader, self._reader_name = reader, settings.reader
        self._dataset = None
        self._store = None

    @property
    def dataset(self):
        if self._dataset is None:
            from erag_dagster.data.loaders import load_dataset

            self._dataset = load_dataset(self.spec)
        return self._dataset

    @property
    def reader(self):
        if self._reader is None:
            from erag_dagster.readers.factory import reader_from_config

            name = self._reader_name
            entry = (
                self.registry.reader(name) if name else next(iter(self.registry.readers.values()))
            )
            self._reader = reader_from_config(entry.name, entry.config)
        return self._reader

    @property
    def store(self):
        if self._store is None:
            from erag_dagster.labels.store import open_store, redact_url, resolve_store

            with concerning(redact_url(resolve_store(self.store_target or None))):
                self._store = open_store(self.store_target or None)
        return self._store

    def identity(self) -> EvalIdentity:
        from erag_dagster.inputs import dataset_digest
        from erag_dagster.metrics.downstream import get_downstream_metric

        return EvalIdentity(
            dataset_digest=dataset_digest(self.spec),
            reader_fingerprint=self.reader.fingerprint,
            label_method=LABEL_METHOD,
            # the metric's tag ("f1"; "f1/v2" once its version is raised): a baseline scored
            # by another version of the metric is refused, not compared
            downstream_metric=get_downstream_metric(self.downstream).tag,
            metrics=self.metrics,
            k=self.k,
        )


def _run_of(ref: str, ctx: _Context) -> tuple[pl.DataFrame, RetrieverIdentity]:
    """The top-``k`` run a run-file or registry ref names (module docstring, cases 2 and 3)."""
    from erag_dagster.data.spec import parse_spec
    from erag_dagster.hashing import sha256_file
    from erag_dagster.retrieval.run_file import load_run_file
    from erag_dagster.retrievers import run_retriever

    ds, subset = ctx.dataset, parse_spec(ctx.spec).question_subset
    path = Path(ref)
    if path.is_file():
        with concerning(path):
            digest = sha256_file(path)
            fmt = "parquet" if path.suffix == ".parquet" else "trec"
            loaded = load_run_file(path, fmt, digest, ds.queries, ds.corpus, ctx.k, subset)
        return loaded.run, RetrieverIdentity("run_file", str(ref), digest)
    try:
        entry = ctx.registry.retriever(ref)  # unknown: one line listing the known ones
    except InputError:
        if path.suffix or "/" in ref:  # meant as a file
            raise InputError(
                f"{ref}: no such file (a ref is a baseline, a run file or a retriever)"
            ) from None
        raise
    run = run_retriever(ctx.registry, entry.name, ds.corpus, ds.queries, ctx.k, log=ctx.log,
                        question_subset=subset)  # fmt: skip
    return run, RetrieverIdentity("registry", entry.name, entry.digest)


def _scores(
    labels: pl.DataFrame, query_ids: Sequence[str], metrics: Sequence[str]
) -> tuple[dict[str, dict[str, float]], dict[str, float]]:
    """Per-query metric values and means; a query without a labelled row scores an empty list."""
    from erag_dagster.metrics.list_metrics import evaluate_labels, labels_from_frame

    lists = labels_from_frame(labels) if labels.height else {}
    lists = {q: lists.get(q, []) for q in query_ids}
    report = evaluate_labels(lists, list(metrics))
    return report.per_query, report.aggregate


def evaluate(ref: str, ctx: _Context) -> Evaluation:
    """One side of the gate (module docstring)."""
    from erag_dagster.labels.labeller import label_run
    from erag_dagster.labels.store import redact_url, resolve_store

    if _is_baseline_file(ref):
        return _stored(ref)
    run, retriever = _run_of(ref, ctx)
    query_ids = sorted(ctx.dataset.queries.get_column("query_id").cast(pl.String).to_list())
    judged = stored = 0
    if run.height:
        with concerning(redact_url(resolve_store(ctx.store_target or None))):
            result = label_run(run, ctx.dataset.queries, ctx.dataset.corpus, ctx.reader,
                               ctx.downstream, ctx.store, run_id=ctx.evaluation_id, log=ctx.log,
                               executor=ctx.registry.generation)  # fmt: skip
        labels = result.labels.select("query_id", "doc_id", "rank", "label")
        judged, stored = result.judged_now, result.from_store
    else:
        labels = pl.DataFrame(
            schema={"query_id": pl.String, "doc_id": pl.String, "rank": pl.Int64,
                    "label": pl.Float64}
        )  # fmt: skip
    per_query, aggregate = _scores(labels, query_ids, ctx.metrics)
    return Evaluation(
        ref, ctx.identity(), retriever, ctx.spec, str(ctx.reader.name), query_ids, labels,
        per_query, aggregate, judged, stored,
    )  # fmt: skip


def _is_baseline_file(ref: str) -> bool:
    return Path(ref).suffix == ".json" and Path(ref).is_file()


def _stored(ref: str) -> Evaluation:
    """A baseline file as an :class:`Evaluation` (metric values recomputed from its labels)."""
    with concerning(ref):
        data = read_baseline(ref)
        labels = pl.DataFrame(
            data["labels"],
            schema={"query_id": pl.String, "doc_id": pl.String, "rank": pl.Int64,
                    "label": pl.Float64},
            orient="row" if data["labels"] and isinstance(data["labels"][0], list) else None,
        )  # fmt: skip
    identity: EvalIdentity = data["identity"]
    query_ids = [str(q) for q in data["query_ids"]]
    try:
        per_query, aggregate = _scores(labels, query_ids, identity.metrics)
    except InputError as exc:
        raise InputError(f"{ref}: {exc}") from None
    return Evaluation(
        ref, identity, data["retriever"], str(data.get("dataset", "")),
        str(data.get("reader", "")), query_ids, labels, per_query, aggregate, stored=True,
    )  # fmt: skip


def save_baseline(evaluation: Evaluation, path: str | Path) -> None:
    """Write ``evaluation`` as a baseline file that :func:`compare` reads back as a ref."""
    write_baseline(
        path,
        baseline_payload(
            evaluation.identity,
            evaluation.retriever,
            evaluation.dataset,
            evaluation.reader_name,
            evaluation.query_ids,
            evaluation.labels.sort("query_id", "rank").to_dicts(),
            evaluation.per_query,
            evaluation.aggregate,
        ),
    )


def make_baseline(
    ref: str,
    output: str | Path,
    settings: GateSettings | None = None,
    reader: Any = None,
    log: Log | None = None,
) -> Evaluation:
    """Evaluate ``ref`` (a run file or registry retriever) and save it as a baseline file."""
    from erag_dagster.paths import check_output

    check_output(output)
    evaluation = evaluate(ref, _Context(settings or GateSettings(), reader, log))
    save_baseline(evaluation, output)
    return evaluation


def compare(
    baseline: str,
    candidate: str,
    settings: GateSettings | None = None,
    rule: GateRule | None = None,
    reader: Any = None,
    log: Log | None = None,
) -> GateResult:
    """Gate ``candidate`` against ``baseline`` (refs: module docstring) under ``rule``
    (:mod:`.verdict`). ``reader``: an already loaded reader to use instead of the settings'
    one (its fingerprint is the identity's). Raises :class:`InputError` when the two sides'
    identities differ, naming the fields."""
    rule = rule or GateRule()
    ctx = _Context(settings or GateSettings(), reader, log)
    refs = {"baseline": baseline, "candidate": candidate}
    sides = {role: _stored(ref) for role, ref in refs.items() if _is_baseline_file(ref)}
    if len(sides) == 1:  # a stored side is checked before any retrieval or reader call
        now = ctx.identity()
        refuse_other_identity(
            sides["baseline"].identity if "baseline" in sides else now,
            sides["candidate"].identity if "candidate" in sides else now,
            baseline,
            candidate,
        )
    for role, ref in refs.items():
        if role not in sides:
            sides[role] = evaluate(ref, ctx)
    base, cand = sides["baseline"], sides["candidate"]
    refuse_other_identity(base.identity, cand.identity, baseline, candidate)
    if base.query_ids != cand.query_ids:
        raise InputError(f"{baseline} and {candidate} hold different query sets")
    verdicts = metric_verdicts(base.per_query, cand.per_query, base.identity.metrics, rule)
    notes = []
    if base.retriever == cand.retriever:
        notes.append("baseline and candidate are the same retriever")
    return GateResult(base, cand, verdicts, overall_verdict(verdicts), rule, notes)
