"""The regression gate: evaluate a baseline and a candidate the same way, and compare them.

A *ref* names what is evaluated, tried in this order:

1. an existing ``.json`` file: a baseline written by :func:`save_baseline` (``erag-dagster
   baseline``), used as stored — no retrieval, no reader call — once read, checked
   (:mod:`.baseline_file`) and verified against the dataset and the label store
   (:mod:`.verify`); options left out take its values, one given that contradicts it is
   refused naming the option;
2. any other existing file: a run file, TREC (``qid Q0 docid rank score tag``) or ``.parquet``
   (``query_id, doc_id, score``), read and checked as a registry ``run_file`` is
   (:func:`~erag_dagster.retrieval.run_file.load_run_file`) — except that a query id the
   dataset (as the spec keeps it) does not have is refused, naming ``file:line``, unless
   :attr:`GateSettings.drop_unknown_queries` (``--drop-unknown-queries``) says to leave such
   queries out; they are then named in the result's notes (every one in JSON), never dropped
   without a word;
3. otherwise a registry retriever (name or partition key), run on the dataset.

Something that exists but is not a regular file (a folder, a FIFO, ``/dev/null``) is refused
saying what it is (:func:`erag_dagster.core.input_files.regular_file`). Every ref is checked, and
the power the query count allows computed (:mod:`.power`), before any retrieval or reader call.

Both sides are evaluated by the evaluation session every front door runs
(:class:`~erag_dagster.evaluation.session.EvaluationSession`): a registry retriever is run by
its ``retrieve`` step (at depth ``k``: the gate's config has ``k`` = ``label_k``), a run is cut
to ``k`` per query and labelled with eRAG, with its fit diagnostics, by its ``label_system``
step through the label store, so only (query, document text) pairs the store lacks cost reader
calls; and scored by its missing-query rule (:func:`~erag_dagster.meta.per_query.
scored_queries`, docs/metrics.md): a dataset query the run has no document for is an empty list
(0 on every metric), never dropped, and named in a note. The list metrics of each query are
then compared (:mod:`.verdict`) with the registry's statistics (``--alpha`` may replace its
alpha). Both sides must share every field of
:class:`~erag_dagster.gate.identity.EvalIdentity`; otherwise :func:`compare` refuses in one
line naming what differs.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from erag_dagster.core.callbacks import Log
from erag_dagster.core.errors import InputError, concerning
from erag_dagster.core.output_guard import Input
from erag_dagster.gate.baseline_file import baseline_payload, read_baseline, write_baseline
from erag_dagster.gate.escape import shown
from erag_dagster.gate.identity import (
    LABEL_METHOD,
    EvalIdentity,
    RetrieverIdentity,
    refuse_other_identity,
)
from erag_dagster.gate.power import Power, gate_power
from erag_dagster.gate.verdict import (
    GateCannotDecide,
    GateRule,
    MetricVerdict,
    metric_verdicts,
    overall_verdict,
)
from erag_dagster.meta.per_query import missing_queries_note, scored_queries, unlabelled_queries
from erag_dagster.stats.settings import Statistics

LABEL_SCHEMA = {"query_id": pl.String, "doc_id": pl.String, "rank": pl.Int64,
                "label": pl.Float64, "answer_key": pl.String}  # fmt: skip
"""The columns of an :class:`Evaluation`'s ``labels``."""


class GateSettings:
    """How both sides are evaluated: evaluation settings by their own names — any field of
    :class:`~erag_dagster.config.evaluation.EvaluationConfig` (``dataset``, ``label_k``: the
    depth labelled and compared, ``metric``, ``list_metrics``, ``alpha``, ...), not re-declared
    here: checked by the configuration's rules when the gate starts — over the registry's
    ``evaluation`` section, whose values the ones left out take (a stored baseline's, when a
    ref is one); ``reader``: a registry reader (empty: its first); ``store``: the label store
    (empty: the default, :func:`~erag_dagster.labels.store.resolve_store`); ``registry``: the
    registry file (empty: packaged or ``$ERAG_REGISTRY``). Frozen; :meth:`replace` copies.

    ``drop_unknown_queries``: leave out (and name) a run file's queries that the dataset
    lacks, instead of refusing (``--drop-unknown-queries``).

    A name that is not an evaluation setting is refused at once (:class:`InputError`)."""

    __slots__ = ("drop_unknown_queries", "evaluation", "reader", "registry", "store")

    evaluation: dict[str, Any]
    reader: str
    store: str
    registry: str
    drop_unknown_queries: bool

    def __init__(
        self,
        *,
        reader: str = "",
        store: str = "",
        registry: str = "",
        drop_unknown_queries: bool = False,
        **evaluation: Any,
    ) -> None:
        from erag_dagster.config.evaluation import FIELDS

        unknown = sorted(set(evaluation) - set(FIELDS))
        if unknown:
            raise InputError(
                f"GateSettings: {', '.join(unknown)} is not an evaluation setting; known: "
                f"{', '.join(FIELDS)}"
            )
        given = {k: v for k, v in evaluation.items() if v is not None}
        own = {"evaluation": given, "reader": reader, "store": store, "registry": registry,
               "drop_unknown_queries": drop_unknown_queries}  # fmt: skip
        for name, value in own.items():
            object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("GateSettings is frozen; use replace()")

    def __getattr__(self, name: str) -> Any:
        """An evaluation setting given (``None`` when it was left to the registry)."""
        from erag_dagster.config.evaluation import FIELDS

        if name in FIELDS:
            return self.evaluation.get(name)
        raise AttributeError(name)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, GateSettings) and all(
            getattr(self, n) == getattr(other, n) for n in self.__slots__
        )

    def __repr__(self) -> str:
        given = ", ".join(f"{k}={v!r}" for k, v in self.evaluation.items())
        return (
            f"GateSettings({given}{', ' if given else ''}reader={self.reader!r}, "
            f"store={self.store!r}, registry={self.registry!r}, "
            f"drop_unknown_queries={self.drop_unknown_queries!r})"
        )

    def replace(self, **changes: Any) -> GateSettings:
        """A copy with ``changes`` (evaluation settings or ``reader``/``store``/``registry``)."""
        values = {"reader": self.reader, "store": self.store, "registry": self.registry,
                  "drop_unknown_queries": self.drop_unknown_queries}  # fmt: skip
        return GateSettings(**{**values, **self.evaluation, **changes})


DROP_HINT = (
    "; a query the gate does not score is never dropped silently: fix the id, or pass "
    "--drop-unknown-queries to leave such queries out (each is then named in the report)"
)
"""How the refusal of an unknown query id ends (the option that drops them instead)."""


@dataclass(frozen=True)
class Evaluation:
    """One side of a gate: its identity, retriever, labelled rows (:data:`LABEL_SCHEMA`:
    ``query_id, doc_id, rank, label, answer_key``), per-query metric values, means, what
    labelling cost (distinct pairs answered by the reader now / found in the store; both 0 for
    a stored baseline) and, for a stored baseline, how its labels were verified (``checked``)."""

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
    checked: str = ""
    fit: Any = None
    """The labels' fit diagnostics (:class:`~erag_dagster.meta.fit.FitDiagnostics`; ``None``
    for a stored baseline, which keeps no answers, or a run without documents)."""
    left_out: tuple[str, ...] = ()
    """The run's query ids that are not queries of the dataset, left out with
    ``--drop-unknown-queries`` (sorted; named in the notes)."""


@dataclass(frozen=True)
class GateResult:
    """:func:`compare`'s answer: both sides, the per-metric verdicts, the overall verdict and
    the rule and statistics they were reached with."""

    baseline: Evaluation
    candidate: Evaluation
    metrics: list[MetricVerdict]
    verdict: str
    rule: GateRule
    statistics: Statistics
    notes: list[str] = field(default_factory=list)
    power: Power | None = None


class _Context:
    """The dataset, registry, reader and store shared by both sides (each loaded once)."""

    def __init__(self, settings: GateSettings, reader: Any = None, log: Log | None = None):
        from erag_dagster.config.registry import load_registry
        from erag_dagster.labels.audit import evaluation_id

        self.log = log or (lambda _m: None)
        with concerning(settings.registry or None):
            self.registry = load_registry(settings.registry or None)
        # The registry's EvaluationConfig with the gate's flags applied, checked by the same
        # rules before any work: the gate evaluates at the labelled depth, so it retrieves
        # label_k documents per query (its config's k is its label_k) and labels them all.
        depth = settings.label_k
        given = {**settings.evaluation}
        if isinstance(depth, int) and not isinstance(depth, bool) and depth > 0:
            given.setdefault("k", max(depth, self.registry.evaluation.k))
        config = self.registry.evaluation.with_overrides("compare", **given)
        self.config = config.with_overrides("compare", k=config.label_k)
        self.spec = self.config.dataset
        self.k = self.config.label_k
        self.downstream = self.config.metric
        self.metrics = tuple(self.config.list_metrics)
        self.store_target = settings.store
        self.drop_unknown_queries = settings.drop_unknown_queries
        from erag_dagster.labels.store import resolve_store
        from erag_dagster.labels.store_url import check_store_location

        # the store's location before any work (a folder, a FIFO, a file that is not SQLite)
        check_store_location(resolve_store(settings.store or None, writable=False))
        # one id for this baseline or comparison: every label row it writes records it (audit)
        self.evaluation_id = evaluation_id("gate")
        self._reader, self._reader_name = reader, settings.reader
        self._dataset = None
        self._store = None
        self._read_store = None

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
        """The label store, opened for writing — or read-only when it is an SQLite file this
        process cannot write (a CI cache mounted read-only): every stored label is then used,
        and a pair it lacks is one StorageError naming the store."""
        if self._store is None:
            from erag_dagster.labels.store import open_store, redact_url, resolve_store

            target = resolve_store(self.store_target or None, writable=False)
            read_only = _unwritable_sqlite(target)
            if read_only:
                self.log(f"the label store {redact_url(target)} is read-only: reading it only")
            with concerning(redact_url(target)):
                self._store = open_store(target, read_only=read_only)
        return self._store

    @property
    def read_store(self):
        """The label store to check stored labels against, or None when there is none (a
        store is never created for that)."""
        from erag_dagster.core.errors import StorageError
        from erag_dagster.labels.store import open_store, resolve_store

        if self._store is not None:
            return self._store
        if self._read_store is None:
            target = resolve_store(self.store_target or None, writable=False)
            try:
                self._read_store = open_store(target, read_only=True)
            except (StorageError, InputError, OSError):
                self._read_store = False
        return self._read_store or None

    def session(self, store: Any = None, store_name: str | None = None):
        """The evaluation session of this gate (:class:`~erag_dagster.evaluation.session.
        EvaluationSession`): its config, registry and dataset, ``store`` (``None``: one that
        does not label) and this gate's evaluation id as the producer of every new row."""
        from erag_dagster.evaluation.session import EvaluationSession

        return EvaluationSession(
            self.config, self.registry, self.dataset, store, producer=self.evaluation_id,
            log=self.log, store_name=store_name,
        )  # fmt: skip

    def close(self) -> None:
        """Close the stores this context opened (their files can then be unmounted)."""
        for store in (self._store, self._read_store):
            if store:
                store.close()
        self._store = self._read_store = None

    def identity(self) -> EvalIdentity:
        from erag_dagster.config.inputs import dataset_digest
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


def _unwritable_sqlite(target: str) -> bool:
    """Whether ``target`` names an existing SQLite store this process cannot write (the file
    or its folder, where SQLite keeps its ``-wal`` and ``-shm`` files)."""
    from erag_dagster.labels.store_url import parse_store

    kind, where = parse_store(target)
    path = Path(where)
    if kind != "sqlite" or not path.is_file():
        return False
    return not (os.access(path, os.W_OK) and os.access(path.parent, os.W_OK))


# -- refs ---------------------------------------------------------------------------------------


def _ref_kind(ref: str, ctx: _Context | None = None) -> str:
    """``baseline``, ``run_file`` or ``registry`` (module docstring). Something that exists
    but is not a regular file (a folder, a FIFO, ``/dev/null``) is refused saying what it is —
    unless the registry has a retriever of that name; a file over ``ERAG_MAX_INPUT_BYTES`` is
    refused too."""
    from erag_dagster.core.input_files import regular_file

    if not ref:
        raise InputError("a ref is empty: give a baseline .json, a run file or a retriever name")
    if not os.path.lexists(ref):
        return "registry"
    if not Path(ref).is_file() and ctx is not None and ref in ctx.registry.retrievers:
        return "registry"
    regular_file(ref)
    return "baseline" if Path(ref).suffix == ".json" else "run_file"


def _is_baseline_file(ref: str) -> bool:
    return Path(ref).suffix == ".json" and Path(ref).is_file()


Run = tuple[pl.DataFrame, RetrieverIdentity, tuple[str, ...]]
"""A ref's run, its retriever and the query ids of the run left out (``--drop-unknown-queries``)."""


def _run_of(ref: str, ctx: _Context) -> Run:
    """The top-``k`` run a run-file or registry ref names (module docstring, cases 2 and 3)."""
    from erag_dagster.core.input_files import regular_file_sha256
    from erag_dagster.retrieval.run_file import load_run_file, run_format

    ds = ctx.dataset
    path = Path(ref)
    if _ref_kind(ref, ctx) == "run_file":
        with concerning(path):
            digest = regular_file_sha256(path)
            loaded = load_run_file(
                path, run_format(path), digest, ds.queries, ds.corpus, ctx.k,
                question_subset=ctx.drop_unknown_queries, unknown_query_hint=DROP_HINT,
            )  # fmt: skip
        return loaded.run, RetrieverIdentity("run_file", str(ref), digest), loaded.outside_ids
    try:
        entry = ctx.registry.retriever(ref)  # unknown: one line listing the known ones
    except InputError:
        if path.suffix or "/" in ref:  # meant as a file
            raise InputError(
                f"{shown(ref)}: no such file (a ref is a baseline, a run file or a retriever)"
            ) from None
        raise
    run = ctx.session().retrieve(entry.name)
    return run, RetrieverIdentity("registry", entry.name, entry.digest), ()


def _empty_labels() -> pl.DataFrame:
    return pl.DataFrame(schema=LABEL_SCHEMA)


def evaluate(ref: str, ctx: _Context, run: Run | None = None) -> Evaluation:
    """One side of the gate (module docstring); ``run``: the ref's run, already read."""
    from erag_dagster.core.errors import StorageError
    from erag_dagster.gate.verify import answer_keys
    from erag_dagster.labels.store import redact_url, resolve_store

    if _ref_kind(ref, ctx) == "baseline":
        return _stored(ref, ctx)
    run, retriever, left_out = run if run is not None else _run_of(ref, ctx)
    query_ids = sorted(ctx.dataset.queries.get_column("query_id").cast(pl.String).to_list())
    judged = stored = 0
    labels = _empty_labels()
    fit = None
    if run.height:
        where = redact_url(resolve_store(ctx.store_target or None))
        try:
            with concerning(where):
                store = ctx.store
            result = ctx.session(store, where).label_system(
                run, ctx.reader, reader_name=str(ctx.reader.name), retriever=shown(ref)
            )
        except StorageError as exc:
            if ctx.store.read_only:
                raise StorageError(
                    f"{where}: the label store is read-only and lacks answers that "
                    f"{shown(ref)} needs; make it writable, or fill it first ({exc})"
                ) from exc
            raise
        found = result.labels.select("query_id", "doc_id", "rank", "label")
        keys = answer_keys(found.to_dicts(), ctx.reader.fingerprint, ctx.dataset)
        labels = found.with_columns(pl.Series("answer_key", keys, dtype=pl.String))
        judged, stored, fit = result.judged_now, result.from_store, result.fit
    scored = ctx.session().score_system(labels)  # the one missing-query rule
    per_query, aggregate = scored.per_query, scored.aggregate
    return Evaluation(
        ref, ctx.identity(), retriever, ctx.spec, str(ctx.reader.name), query_ids, labels,
        per_query, aggregate, judged, stored, fit=fit, left_out=left_out,
    )  # fmt: skip


def _read_stored(ref: str) -> dict[str, Any]:
    """A baseline file read and checked (:func:`~erag_dagster.gate.baseline_file.read_baseline`)."""
    with concerning(ref):
        return read_baseline(ref)


def _stored(ref: str, ctx: _Context, data: dict[str, Any] | None = None) -> Evaluation:
    """A baseline file as an :class:`Evaluation` (metric values recomputed from its labels),
    its labels verified against the dataset and the label store (:mod:`.verify`)."""
    from erag_dagster.config.inputs import dataset_digest
    from erag_dagster.gate.verify import verify_stored_labels

    data = data if data is not None else _read_stored(ref)
    identity: EvalIdentity = data["identity"]
    if dataset_digest(ctx.spec) != identity.dataset_digest:
        raise InputError(
            f"{shown(ref)}: was evaluated on another dataset than {shown(ctx.spec)} (dataset "
            f"digest {identity.dataset_digest[:12]} vs {dataset_digest(ctx.spec)[:12]}); give "
            "--dataset with the baseline's dataset, or write the baseline again"
        )
    known = set(ctx.dataset.queries.get_column("query_id").cast(pl.String).to_list())
    if set(data["query_ids"]) != known:
        odd = sorted(set(data["query_ids"]) ^ known)
        raise InputError(
            f"{shown(ref)}: query_ids are not the queries of {shown(ctx.spec)} ({len(odd)} "
            f"differ, e.g. {shown(odd[0])!r}); write the baseline again"
        )
    verified = verify_stored_labels(ref, data["labels"], identity, ctx.dataset, ctx.read_store)
    rows = data["labels"]
    labels = pl.DataFrame(rows, schema=LABEL_SCHEMA) if rows else _empty_labels()
    query_ids = list(data["query_ids"])
    try:
        scored = scored_queries(labels, identity.metrics, query_ids)
        per_query, aggregate = scored.per_query, scored.aggregate
    except InputError as exc:
        raise InputError(f"{shown(ref)}: {exc}") from None
    return Evaluation(
        ref, identity, data["retriever"], data["dataset"], data["reader"], query_ids, labels,
        per_query, aggregate, stored=True, checked=verified.note,
    )  # fmt: skip


_OPTIONS = (("--k", "label_k"), ("--metrics", "list_metrics"), ("--metric", "metric"),
            ("--dataset", "dataset"))  # fmt: skip
"""The gate's options a stored baseline settles, and the evaluation setting each one sets."""


def _settled(settings: GateSettings, stored: dict[str, dict[str, Any]]) -> GateSettings:
    """``settings`` with every option left out taken from the first stored baseline; an option
    given that contradicts any of them is refused in one line naming the option (two stored
    baselines that differ are refused later, naming the fields, by the identity check)."""
    from erag_dagster.config.inputs import dataset_digest
    from erag_dagster.metrics.downstream import get_downstream_metric

    asked = settings
    shown_as = {
        "label_k": "k",
        "list_metrics": "metrics",
        "metric": "downstream_metric",
        "dataset": "dataset",
    }  # the identity's names, as the messages always said
    for ref, data in stored.items():
        ident: EvalIdentity = data["identity"]
        found = {
            "label_k": ident.k,
            "list_metrics": tuple(ident.metrics),
            "metric": ident.downstream_metric,
            "dataset": ident.dataset_digest,
        }
        given = {
            "label_k": asked.label_k,
            "list_metrics": tuple(asked.list_metrics) if asked.list_metrics else None,
            "metric": get_downstream_metric(asked.metric).tag if asked.metric else None,
            "dataset": dataset_digest(asked.dataset) if asked.dataset else None,
        }
        for option, name in _OPTIONS:
            if given[name] is not None and given[name] != found[name]:
                mine = getattr(asked, name)
                theirs = found[name] if name != "dataset" else data["dataset"]
                show = ",".join(mine) if isinstance(mine, list | tuple) else str(mine)
                was = ",".join(theirs) if isinstance(theirs, tuple) else str(theirs)
                raise InputError(
                    f"{option} {shown(show)} contradicts the stored baseline {shown(ref)} "
                    f"({shown_as[name]} {shown(was)}); leave {option} out (a stored baseline's "
                    "settings are used) or write the baseline again"
                )
        settings = settings.replace(
            label_k=settings.label_k or ident.k,
            list_metrics=list(settings.list_metrics or ident.metrics),
            metric=settings.metric or ident.downstream_metric.split("/")[0],
            dataset=settings.dataset or data["dataset"],
        )
    return settings


def gate_inputs(settings: GateSettings, refs: Sequence[str]) -> list[Input]:
    """Every file a gate run with ``settings`` over ``refs`` reads — the registry and its run
    files, the dataset's files, the label store, the refs that are files — as the ``reads`` of
    :func:`erag_dagster.core.output_guard.guard_output` (an output is never one of them)."""
    from erag_dagster.config.registry import load_registry
    from erag_dagster.data.loaders import dataset_source_files
    from erag_dagster.labels.store import resolve_store
    from erag_dagster.labels.store_url import store_files

    with concerning(settings.registry or None):
        registry = load_registry(settings.registry or None)
    reads: list[Input] = [("the registry", registry.path)]
    for entry in registry.retrievers.values():
        if entry.config.get("kind") == "run_file":
            reads.append((f"run_file {entry.name!r} of the registry", entry.config.get("path")))
    specs = {settings.dataset or registry.evaluation.dataset}
    for ref in refs:
        if os.path.lexists(ref):
            reads.append(("a ref of this gate", ref))
            if _is_baseline_file(ref):
                with contextlib.suppress(InputError, OSError):
                    specs.add(_read_stored(ref)["dataset"])
    for spec in sorted(s for s in specs if s):
        with contextlib.suppress(Exception):  # a bad spec says why when it is loaded
            reads += [("a dataset file", p) for p in dataset_source_files(spec)]
    with contextlib.suppress(Exception):
        reads += store_files(resolve_store(settings.store or None, writable=False))
    return reads


def left_out_note(role: str, side: Evaluation, shown_ids: int = 50) -> str:
    """The note naming the queries of ``side``'s run that the gate did not score
    (``--drop-unknown-queries``): every one up to ``shown_ids``, then a count (the JSON
    report lists every one)."""
    ids = side.left_out
    more = (
        f", … {len(ids) - shown_ids} more (--json lists every one)" if len(ids) > shown_ids else ""
    )
    return (
        f"the {role} {shown(side.ref)} names {len(ids)} queries that are not queries of "
        f"{shown(side.dataset)}; not scored (--drop-unknown-queries): "
        f"{', '.join(repr(q) for q in ids[:shown_ids])}{more}"
    )


# -- the decision -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Decision:
    """:func:`decide`'s answer: per-metric verdicts, the overall verdict, the power the query
    count allows, and notes (queries a side has no document for)."""

    metrics: list[MetricVerdict]
    verdict: str
    power: Power
    notes: list[str]


def decide(
    baseline_labels: pl.DataFrame,
    candidate_labels: pl.DataFrame,
    query_ids: Sequence[str],
    metrics: Sequence[str],
    rule: GateRule,
    stats: Statistics,
) -> Decision:
    """The gate's decision on two label tables (``query_id, doc_id, rank, label``) over the same
    ``query_ids`` — what :func:`compare` (and so ``erag-dagster compare``) decides with, under
    ``rule``'s margin and ``stats`` (the registry's statistics, :meth:`GateRule.statistics`).

    The missing-query rule of every door (:func:`~erag_dagster.meta.per_query.scored_queries`):
    a query a side has no labelled row for scores 0 on every metric (an empty list) and is
    named in a note: a candidate without documents, or covering 1 of 6 queries, is scored as
    retrieving nothing for the rest, never compared on the queries it kept. Power before
    verdict: :func:`~erag_dagster.gate.power.gate_power` of ``len(query_ids)``.
    """
    n = len(query_ids)
    power = gate_power(n, len(metrics), rule.margin, stats)
    base = scored_queries(baseline_labels, metrics, query_ids).per_query
    cand = scored_queries(candidate_labels, metrics, query_ids).per_query
    verdicts = metric_verdicts(base, cand, metrics, rule, stats)
    notes = []
    for side, labels in (("baseline", baseline_labels), ("candidate", candidate_labels)):
        note = missing_queries_note(f"the {side}", unlabelled_queries(labels, query_ids), n)
        if note:
            notes.append(note)
    if not power.can_decide:
        notes.append(power.summary())
    return Decision(verdicts, overall_verdict(verdicts), power, notes)


def save_baseline(
    evaluation: Evaluation, path: str | Path, command: str = "baseline", option: str = "--output"
) -> None:
    """Write ``evaluation`` as a baseline file that :func:`compare` reads back as a ref (an
    ``OSError`` is one StorageError naming ``option`` and ``path``). The caller has applied
    :func:`erag_dagster.core.output_guard.guard_output` to ``path``."""
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
        command,
        option,
    )


def _stored_refs(refs: Sequence[str]) -> dict[str, dict[str, Any]]:
    """The refs that are baseline files, read and checked (the others: :func:`_ref_kind`
    once the registry is loaded)."""
    return {ref: _read_stored(ref) for ref in refs if _is_baseline_file(ref)}


def make_baseline(
    ref: str,
    output: str | Path,
    settings: GateSettings | None = None,
    reader: Any = None,
    log: Log | None = None,
    force: bool = False,
) -> Evaluation:
    """Evaluate ``ref`` (a run file, a registry retriever, or a baseline file, re-saved as
    stored) and save it as a baseline file at ``output``, under the one output rule
    (:func:`erag_dagster.core.output_guard.guard_output`: never a file the run reads; an existing
    file only when it is an earlier baseline output, or with ``force``) — checked before any
    work."""
    from erag_dagster.core.output_guard import guard_output

    settings = settings or GateSettings()
    stored = _stored_refs([ref])
    settings = _settled(settings, stored)
    guard_output(output, "baseline", gate_inputs(settings, [ref]), force=force)
    ctx = _Context(settings, reader, log)
    try:
        evaluation = _stored(ref, ctx, stored[ref]) if stored else evaluate(ref, ctx)
    finally:
        ctx.close()
    save_baseline(evaluation, output)
    return evaluation


def compare(
    baseline: str,
    candidate: str,
    settings: GateSettings | None = None,
    rule: GateRule | None = None,
    reader: Any = None,
    log: Log | None = None,
    require_power: bool = False,
) -> GateResult:
    """Gate ``candidate`` against ``baseline`` (refs: module docstring) under ``rule``
    (:mod:`.verdict`). ``reader``: an already loaded reader to use instead of the settings'
    one (its fingerprint is the identity's).

    Options left out take a stored baseline's values; one that contradicts it, or identities
    that differ, is an :class:`InputError` naming it — before any retrieval or reader call.
    Power before verdict: when the dataset's query count cannot reach ``rule.alpha``
    (:mod:`.power`), ``require_power`` raises :class:`~erag_dagster.gate.verdict.
    GateCannotDecide` before labelling; otherwise it is logged and noted in the result.
    """
    stored = _stored_refs([baseline, candidate])
    settings = _settled(settings or GateSettings(), stored)
    ctx = _Context(settings, reader, log)
    rule = rule or GateRule()
    stats = rule.statistics(ctx.config)  # the registry's statistics; --alpha replaces its alpha
    try:
        return _compared(baseline, candidate, stored, ctx, rule, stats, require_power)
    finally:
        ctx.close()


def _compared(
    baseline: str,
    candidate: str,
    stored: dict[str, dict[str, Any]],
    ctx: _Context,
    rule: GateRule,
    stats: Statistics,
    require_power: bool,
) -> GateResult:
    """:func:`compare` once the stored sides are read and the context is made."""
    refs = {"baseline": baseline, "candidate": candidate}
    runs: dict[str, Run] = {}
    for ref in refs.values():  # every ref checked, a run file read, before any work
        kind = "baseline" if ref in stored else _ref_kind(ref, ctx)
        if kind == "run_file" and ref not in runs:
            runs[ref] = _run_of(ref, ctx)
        if kind == "registry":
            with contextlib.suppress(InputError):
                ctx.registry.retriever(ref)
                continue
            if Path(ref).suffix or "/" in ref:
                raise InputError(
                    f"{shown(ref)}: no such file (a ref is a baseline, a run file or a retriever)"
                )
            ctx.registry.retriever(ref)  # one line listing the known retrievers
    sides = {role: _stored(ref, ctx, stored[ref]) for role, ref in refs.items() if ref in stored}
    if len(sides) == 1:  # a stored side is checked before any retrieval or reader call
        now = ctx.identity()
        refuse_other_identity(
            sides["baseline"].identity if "baseline" in sides else now,
            sides["candidate"].identity if "candidate" in sides else now,
            baseline,
            candidate,
        )
    n = len(next(iter(sides.values())).query_ids) if sides else ctx.dataset.queries.height
    metrics = next(iter(sides.values())).identity.metrics if sides else ctx.metrics
    power = gate_power(n, len(metrics), rule.margin, stats)
    if not power.can_decide:
        if require_power:
            raise GateCannotDecide(power)
        ctx.log(f"warning: {power.summary()}")
    for role, ref in refs.items():
        if role not in sides:
            sides[role] = evaluate(ref, ctx, runs.get(ref))
    base, cand = sides["baseline"], sides["candidate"]
    refuse_other_identity(base.identity, cand.identity, baseline, candidate)
    if base.query_ids != cand.query_ids:
        raise InputError(f"{shown(baseline)} and {shown(candidate)} hold different query sets")
    decision = decide(base.labels, cand.labels, base.query_ids, base.identity.metrics, rule, stats)
    notes = [n for n in (base.checked, cand.checked) if n]
    notes += [left_out_note(role, side) for role, side in (("baseline", base), ("candidate", cand))
              if side.left_out]  # fmt: skip
    notes += decision.notes
    if base.retriever == cand.retriever:
        notes.append("baseline and candidate are the same retriever")
    return GateResult(
        base, cand, decision.metrics, decision.verdict, rule, stats, notes, decision.power
    )
