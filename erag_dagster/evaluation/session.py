"""The one composer: an evaluation session every front door runs its steps through.

An :class:`EvaluationSession` is built from what an evaluation is — the settings
(:class:`~erag_dagster.config.evaluation.EvaluationConfig`), the registry, the dataset, the
label store and the *producer* every new store row records — and offers its steps, each with
those settings and nothing else (no loose depth, metric, resamples or seed arguments):

``retrieve`` · ``label`` (· ``fit``) · ``score`` · ``summarise`` · ``decide`` · ``report``

- :meth:`~EvaluationSession.retrieve`: the top ``k`` run of a registry retriever; a dataset
  spec that keeps a subset of its questions drops a run file's other queries;
- :meth:`~EvaluationSession.labelled_run` / :meth:`~EvaluationSession.label`: eRAG labels of
  ranks ``1..label_k`` of each query, through the label store (only pairs it lacks cost reader
  calls); :meth:`~EvaluationSession.fit`: whether those labels fit the data;
- :meth:`~EvaluationSession.score`: the list metrics of every (reader, retriever) system on
  **every question of the dataset** — the one missing-query rule
  (:mod:`erag_dagster.meta.per_query`, docs/metrics.md): a question a system has no labelled
  document for scores 0 on every metric, stays in the mean and is named in a note;
  :meth:`~EvaluationSession.score_system`: the same for one system's labels (the gate);
- :meth:`~EvaluationSession.summarise`: the means per system; :meth:`~EvaluationSession.
  leaderboard`: the human-judgment leaderboard; :meth:`~EvaluationSession.decide`: the verdict
  — every CI, test and star with ``config.statistics``;
- :meth:`~EvaluationSession.report`: the :class:`~erag_dagster.reports.run_report.RunReport`
  of retrieved runs and their labels; :meth:`~EvaluationSession.evaluate`: the whole loop.

Who calls it: the Dagster assets, one step per partition (``retrieval_run``, ``doc_labels``,
``baseline_labels``' cut, ``fit``, ``verdict``; the report declarations ``erag_per_query`` and
``retrieval_report`` compute with the same functions and ``config.statistics``),
:func:`erag_dagster.evaluate` (:meth:`evaluate`), :func:`erag_dagster.label` (:meth:`label`),
the regression gate (:meth:`retrieve`, :meth:`label_system`, :meth:`score_system`) and the
command line's ``retrieve``, ``label`` (through the API) and ``correlate`` (through the assets).

Edge cases: a step that needs a table the session was not given (a Dagster asset holds only
its inputs: :func:`partial_dataset`) raises ``ValueError`` naming it — a wiring error, not a
user's; an empty run, or one naming an unknown query or document, is the labeller's
:class:`~erag_dagster.core.errors.InputError`; a foreign store error while labelling is one
line naming ``store_name`` when it is given.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import polars as pl

from erag_dagster.config.evaluation import EvaluationConfig
from erag_dagster.core.callbacks import Log, Progress
from erag_dagster.data.schema import CORPUS_SCHEMA, QRELS_SCHEMA, QUERIES_SCHEMA, Dataset
from erag_dagster.evaluation import steps, systems
from erag_dagster.meta.per_query import System, scored_queries
from erag_dagster.metrics.report import ListMetricReport
from erag_dagster.stats.settings import Statistics

if TYPE_CHECKING:
    from erag_dagster.config.registry import Registry
    from erag_dagster.evaluation.retrievers import RetrievalTiming
    from erag_dagster.labels.executor import ExecutorSpec
    from erag_dagster.labels.labeller import LabelResult, Reader
    from erag_dagster.labels.reader_calls import ReaderCalls
    from erag_dagster.labels.reference import References
    from erag_dagster.labels.store import LabelStoreBase
    from erag_dagster.meta.fit import FitDiagnostics
    from erag_dagster.reports.run_report import RunReport
    from erag_dagster.reports.verdict import Verdict

__all__ = ["EvaluationSession", "Scored", "partial_dataset"]


def partial_dataset(
    spec: str,
    *,
    corpus: pl.DataFrame | None = None,
    queries: pl.DataFrame | None = None,
    qrels: pl.DataFrame | None = None,
) -> Dataset:
    """A :class:`~erag_dagster.data.schema.Dataset` of the tables a caller holds (a Dagster
    asset: its inputs, already validated upstream); an absent one is an empty table of its
    schema, which :class:`EvaluationSession` refuses to use for a step that needs it."""
    return Dataset(
        spec=spec,
        corpus=corpus if corpus is not None else pl.DataFrame(schema=CORPUS_SCHEMA),
        queries=queries if queries is not None else pl.DataFrame(schema=QUERIES_SCHEMA),
        qrels=qrels if qrels is not None else pl.DataFrame(schema=QRELS_SCHEMA),
    )


@dataclass(frozen=True)
class Scored:
    """:meth:`EvaluationSession.score`'s answer: the per-query table (``reader, retriever,
    query_id`` + one column per list metric, every question for every system) and one note per
    system with questions it has no labelled document for (scored 0)."""

    per_query: pl.DataFrame
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class EvaluationSession:
    """One evaluation's settings, registry, dataset and store, and its steps (module docstring).

    ``store``: the label store (``None``: the session does not label); ``producer``: the id
    every new store row records (a Dagster run id, or an
    :func:`~erag_dagster.labels.audit.evaluation_id` outside Dagster); ``executor``: where
    readers generate (``None``: the registry's ``generation`` section); ``log`` / ``progress``:
    progress lines and ``progress(done, total)`` of generated pairs; ``store_name``: the
    store's location, credentials masked, named in a foreign store error; ``references``:
    the reference answers of ``config.reference`` (``None`` for ``gold``)."""

    config: EvaluationConfig
    registry: Registry
    dataset: Dataset
    store: LabelStoreBase | None = None
    producer: str | None = None
    executor: ExecutorSpec | ReaderCalls | None = None
    log: Log | None = None
    progress: Progress | None = None
    store_name: str | None = None
    references: References | None = None
    """The reference answers labels are scored against when ``config.reference`` is not
    ``gold`` (:meth:`make_references`; :func:`dataclasses.replace` a session with them)."""

    # -- what the session holds -------------------------------------------------------------

    @property
    def statistics(self) -> Statistics:
        """Every CI's, test's and star's settings (``config.statistics``)."""
        return self.config.statistics

    @property
    def query_ids(self) -> list[str]:
        """The evaluated question set: the dataset's query ids (its spec's subset applied)."""
        return self._table("queries").get_column("query_id").cast(pl.String).to_list()

    def _table(self, name: str) -> pl.DataFrame:
        table: pl.DataFrame = getattr(self.dataset, name)
        if name != "qrels" and table.height == 0:
            raise ValueError(f"this evaluation session was built without the dataset's {name}")
        return table

    def _executor(self) -> ExecutorSpec | ReaderCalls:
        return self.executor if self.executor is not None else self.registry.generation

    # -- retrieve · label · fit ---------------------------------------------------------------

    def retrieve(
        self,
        retriever: str,
        *,
        timing: RetrievalTiming | None = None,
        asset_runs: Mapping[str, object] | None = None,
    ) -> pl.DataFrame:
        """The top-``config.k`` run ``(query_id, doc_id, rank, score)`` of the registry
        retriever ``retriever`` (name or partition key); ``timing`` receives index and search
        seconds; ``asset_runs``: the runs ``kind: asset`` retrievers read (Dagster only)."""
        return systems.retrieve(
            self.registry, retriever, self._table("corpus"), self._table("queries"),
            self.config, self.log, timing=timing, asset_runs=asset_runs,
        )  # fmt: skip

    def labelled_run(self, run: pl.DataFrame) -> pl.DataFrame:
        """The rows of ``run`` that get labels: ranks ``1..config.label_k`` of each query."""
        return systems.labelled_run(run, self.config)

    def label(self, run: pl.DataFrame, reader: Reader) -> LabelResult:
        """eRAG labels of :meth:`labelled_run` of ``run`` by ``reader``, scored with
        ``config.metric``, through the label store (pairs it holds are read, not generated)."""
        if self.store is None:
            raise ValueError("this evaluation session was built without a label store")
        return systems.label(
            run, self._table("queries"), self._table("corpus"), reader, self.config,
            self.store, executor=self._executor(), producer=self.producer, log=self.log,
            progress=self.progress, store_name=self.store_name, references=self.references,
        )  # fmt: skip

    def make_references(
        self,
        runs: Mapping[str, pl.DataFrame],
        reader: Reader,
        reader_for: Callable[[str], Reader],
        queries: pl.DataFrame | None = None,
    ) -> References | None:
        """The reference answers of ``config.reference`` (``None`` for ``gold``) for every
        question of ``queries`` (default: the dataset's), answered by ``reader`` or the teacher
        ``reader_for(NAME)`` from ``runs`` (the union, or the named retriever's), through the
        store (:func:`erag_dagster.evaluation.references.make_references`)."""
        from erag_dagster.evaluation.references import make_references

        if self.store is None:
            raise ValueError("this evaluation session was built without a label store")
        return make_references(
            self.config, self.registry,
            queries if queries is not None else self._table("queries"),
            self._table("corpus"), reader, runs, self.store, reader_for=reader_for,
            executor=self._executor(), producer=self.producer, log=self.log,
            store_name=self.store_name,
        )  # fmt: skip

    def verdict_labels(self, run: pl.DataFrame, reader: Reader) -> pl.DataFrame | None:
        """The labels the verdict ranks ``run`` by when ``config.verdict_labels`` names a label
        method (:func:`systems.verdict_labels`, through the label store); ``None`` for eRAG's
        own or when the reader cannot give them (one line to the log)."""
        if self.store is None:
            raise ValueError("this evaluation session was built without a label store")
        return systems.verdict_labels(
            run, self.dataset, reader, self.config, self.store,
            executor=self._executor(), producer=self.producer, log=self.log,
        )  # fmt: skip

    def fit(
        self, labels: pl.DataFrame, reader: Any, *, reader_name: str, retriever: str
    ) -> FitDiagnostics:
        """Whether one system's ``labels`` fit the data (answers cut, answer vs gold length,
        label-vs-judgment AUC with its CI at ``config.statistics``)."""
        return systems.fit(
            labels, self._table("queries"), self.dataset.qrels, reader, self.config,
            reader_name=reader_name, retriever=retriever,
        )  # fmt: skip

    def label_system(
        self, run: pl.DataFrame, reader: Reader, *, reader_name: str, retriever: str
    ) -> systems.SystemLabels:
        """:meth:`label` then :meth:`fit` for one (reader, retriever) system."""
        result = self.label(run, reader)
        diagnosed = self.fit(result.labels, reader, reader_name=reader_name, retriever=retriever)
        return systems.SystemLabels(result.labels, result.judged_now, result.from_store, diagnosed)

    # -- score · summarise · decide -------------------------------------------------------------

    def score(self, labels: Mapping[System, pl.DataFrame]) -> Scored:
        """The list metrics of every system's labels on every question (module docstring)."""
        query_ids = self.query_ids
        return Scored(
            steps.score(labels, self.config, query_ids), steps.missing_notes(labels, query_ids)
        )

    def score_system(
        self, labels: pl.DataFrame, metrics: Sequence[str] | None = None
    ) -> ListMetricReport:
        """One system's list metrics (``config.list_metrics`` unless ``metrics``: a stored
        baseline's) on every question, by the same rule as :meth:`score`."""
        names = list(metrics) if metrics is not None else list(self.config.list_metrics)
        return scored_queries(labels, names, self.query_ids)

    def summarise(self, per_query: pl.DataFrame) -> pl.DataFrame:
        """The mean of each list metric per (reader, retriever)."""
        return steps.summarise(per_query, self.config)

    def decide(
        self,
        per_query: pl.DataFrame,
        dataset: str | None = None,
        method_labels: Mapping[System, pl.DataFrame] | None = None,
    ) -> Verdict | None:
        """The verdict on the headline metric of the labels ``verdict_labels`` names (eRAG's
        ``per_query``, or a label method's ``method_labels``: :func:`steps.verdict_table`);
        ``None`` without labelled queries."""
        return steps.decide(per_query, self.config, dataset, method_labels)

    def leaderboard(self, runs: Mapping[str, pl.DataFrame]) -> pl.DataFrame:
        """The human-judgment leaderboard of ``runs`` (the first is the baseline) on
        ``config.human_metrics``; an empty frame when the dataset has no judgments."""
        from erag_dagster.reports.leaderboard import leaderboard

        if self.dataset.qrels.height == 0:
            return pl.DataFrame()
        return leaderboard(
            self.dataset.qrels, runs, list(self.config.human_metrics), self.statistics,
            relevance_level=self.config.relevance_level,
        )  # fmt: skip

    # -- report -------------------------------------------------------------------------------

    def report(
        self,
        runs: Mapping[str, pl.DataFrame],
        labels: Mapping[System, pl.DataFrame],
        fits: Sequence[FitDiagnostics] = (),
        method_labels: Mapping[System, pl.DataFrame] | None = None,
    ) -> RunReport:
        """The :class:`~erag_dagster.reports.run_report.RunReport` of retrieved ``runs`` (by
        retriever key) and their ``labels`` (by ``(reader, retriever)``): the human-judgment
        leaderboard, the eRAG report, its per-query table and the verdict, every label and run,
        the fit diagnostics and the missing-query notes. ``method_labels``: the labels the
        verdict ranks by when ``verdict_labels`` names a label method (:meth:`decide`)."""
        from erag_dagster.meta.fit import fit_frame
        from erag_dagster.reports.run_report import RunReport, Section

        board = self.leaderboard(runs)
        scored = self.score(labels)
        erag_report = self.summarise(scored.per_query)
        found = self.decide(scored.per_query, method_labels=method_labels)
        doc_labels = pl.concat(
            [f.select(pl.lit(r).alias("reader"), pl.lit(t).alias("retriever"), pl.all())
             for (r, t), f in labels.items()]
        )  # fmt: skip
        run_table = pl.concat(
            [r.select(pl.lit(t).alias("retriever"), pl.all()) for t, r in runs.items()]
        )
        return RunReport(
            sections=[
                Section("retrieval_report", None, board),
                Section("erag_report", None, erag_report),
            ],
            statistics=self.statistics,
            verdicts=[found] if found is not None else [],
            frames={
                "retrieval_report": board,
                "erag_report": erag_report,
                "erag_per_query": scored.per_query,
                "doc_labels": doc_labels,
                "retrieval_run": run_table,
                "fit": fit_frame(list(fits)),
            },
            fits=list(fits),
            notes=scored.notes,
        )

    def evaluate(
        self,
        retrievers: Sequence[str],
        readers: Sequence[tuple[str, Reader]],
        reader_for: Callable[[str], Reader] | None = None,
    ) -> RunReport:
        """The whole loop: retrieve with each registry retriever, label each run with each
        ``(reader key, reader)`` — against that reader's reference answers when
        ``config.reference`` is not ``gold`` (:meth:`make_references`; ``reader_for(NAME)``
        builds a teacher reader) —, diagnose the fit, and :meth:`report`."""
        say = self.log or (lambda _message: None)
        runs: dict[str, pl.DataFrame] = {}
        for name in retrievers:
            key = self.registry.retriever(name).partition_key
            say(f"retrieve {key}")
            runs[key] = self.retrieve(name)
        labels: dict[System, pl.DataFrame] = {}
        method_labels: dict[System, pl.DataFrame] = {}
        fits = []
        for reader_key, model in readers:  # each model loads on its first pair, stays loaded
            labelling = self
            if self.config.reference != "gold":
                refs = self.make_references(runs, model, reader_for or _no_teacher)
                labelling = replace(self, references=refs)
            for key, run in runs.items():
                say(f"label {key} with {reader_key}")
                system = labelling.label_system(run, model, reader_name=reader_key, retriever=key)
                labels[(reader_key, key)] = system.labels
                fits.append(system.fit)  # docs/label-methods.md, "Fit diagnostics"
                ranked = labelling.verdict_labels(run, model)
                if ranked is not None:  # evaluation.verdict_labels names a label method
                    method_labels[(reader_key, key)] = ranked
        return self.report(runs, labels, fits, method_labels)


def _no_teacher(name: str) -> Reader:
    raise ValueError(f"evaluation.reference names the reader {name!r}: pass reader_for")
