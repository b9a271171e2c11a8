"""The Python API: evaluate retrievers for a reader, label one run, score one labelled run.

Three functions, exported lazily by :mod:`erag_dagster` (``import erag_dagster`` stays cheap):

- :func:`evaluate` — retrieve with each retriever, label the top ``label_k`` documents of each
  run with each reader (eRAG labels, through the label store), and report: the human-judgment
  leaderboard, the eRAG report, its per-query table and the verdict, as a
  :class:`~erag_dagster.reports.run_report.RunReport` (the object ``erag-dagster run``
  prints). It runs in process, without Dagster: the meta-evaluation reports (Table 1, label
  agreement) are the main job's (``erag-dagster run``);
- :func:`label` — eRAG labels of one run (``erag-dagster label``);
- :func:`score` — list metrics of one labelled run (``erag-dagster score``).

Same inputs, same store, same errors as the CLI (which calls these functions): a bad dataset,
registry, run file, labels file, metric or reader raises
:class:`~erag_dagster.errors.InputError` with one line naming what and where; an unusable
store or environment raises :class:`~erag_dagster.errors.EnvironmentFault`. The label store
is ``store``, else ``$ERAG_LABEL_STORE``, else ``<storage root>/labels.sqlite``
(:mod:`erag_dagster.paths`): labels computed by the CLI, the main job or this API are shared.
Defaults left as ``None`` come from the registry's ``evaluation`` section — the one typed
configuration every front door reads (:func:`evaluation_config`), as for the main job.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from erag_dagster import api_args
from erag_dagster.callbacks import Progress
from erag_dagster.errors import EnvironmentFault, InputError, as_fault, concerning

if TYPE_CHECKING:
    import polars as pl

    from erag_dagster.data.loaders import Dataset
    from erag_dagster.labels.labeller import LabelResult
    from erag_dagster.metrics.list_metrics import ListMetricReport
    from erag_dagster.registry import Registry
    from erag_dagster.reports.run_report import RunReport

Log = Callable[[str], None]


def evaluate(
    dataset: str = "",
    retrievers: Sequence[str] | None = None,
    reader: str | Sequence[str] | None = None,
    metrics: Sequence[str] | str | None = None,
    *,
    metric: str | None = None,
    k: int | None = None,
    label_k: int | None = None,
    registry: str | Path | None = None,
    store: str | Path | None = None,
    n_resamples: int | None = None,
    seed: int | None = None,
    log: Log | None = None,
    progress: Progress | None = None,
) -> RunReport:
    """Evaluate ``retrievers`` by what they do for ``reader`` (eRAG) on ``dataset``.

    Args:
        dataset: a dataset spec (``sample``, ``sample?spread_questions=30``, ``beir:DIR``,
            ``squad:PATH``, ...); default the registry's ``evaluation.dataset``.
        retrievers: registry retriever names or partition keys; default every one.
        reader: a registry reader name, a reader config YAML path, or a list of them; default
            the first registry reader.
        metrics: eRAG list metrics (``["P@3", "nDCG@3"]`` or ``"P@3,nDCG@3"``); the first is
            the verdict's headline metric. Default: the registry's ``list_metrics``.
        metric: downstream metric of the reader's answers (``em``, ``f1``, ``rougel``,
            ``accuracy``, ``contains``); default the registry's.
        k: retrieval depth per query; ``label_k``: documents labelled per query (capped at
            ``k``); defaults the registry's.
        registry: registry YAML (default: the packaged one).
        store: label store (path or URL, as ``--store``).
        n_resamples: bootstrap resamples of every CI; ``seed``: seed of every draw (defaults:
            the registry's ``bootstrap_resamples`` and ``seed``, 1000 and 0 unless set there:
            the same call gives the same CIs and p-values).
        log: receives progress lines (default: silent).
        progress: ``progress(done, total)``, the pairs a reader has generated of those it
            must (per reader x retriever), after each step and at least every 10 s.

    Returns:
        A :class:`~erag_dagster.reports.run_report.RunReport`: ``.verdict``,
        ``.erag_report``, ``.erag_per_query``, ``.retrieval_report`` (empty without
        judgments), ``["doc_labels"]`` (every label, with ``reader`` and ``retriever``) and
        ``["retrieval_run"]`` (every run, with ``retriever``), as polars DataFrames;
        ``.fits`` / ``["fit"]``: whether the labels fit the data, per reader x retriever
        (:mod:`erag_dagster.meta.fit`: answers cut at ``max_new_tokens``, answer vs gold
        length, label-vs-judgment AUC with CI, warning lines);
        ``str(report)`` is the text ``erag-dagster run`` prints.

    Raises:
        InputError: a bad dataset, registry, retriever or reader name, metric name or setting.
        EnvironmentFault: an unusable label store or storage folder.
    """
    # arguments checked before any work (types, empty lists, counts, seed): erag_dagster/api_args.py
    api_args.check_evaluate(
        dataset=dataset, retrievers=retrievers, reader=reader, metrics=metrics, metric=metric,
        k=k, label_k=label_k, registry=registry, store=store, n_resamples=n_resamples,
        seed=seed, log=log, progress=progress,
    )  # fmt: skip
    import polars as pl

    from erag_dagster.evaluation import steps, systems
    from erag_dagster.labels.audit import evaluation_id
    from erag_dagster.labels.store import open_store, redact_url, resolve_store
    from erag_dagster.meta.fit import FitDiagnostics, fit_frame
    from erag_dagster.reports.leaderboard import leaderboard
    from erag_dagster.reports.run_report import RunReport, Section

    say = log or (lambda _message: None)
    reg = load_registry_file(registry)
    api_args.check_reader_names(reader, reg)  # before retrieval; an unknown reader creates nothing
    config = evaluation_config(
        reg, "evaluate", dataset=dataset or None, k=k, label_k=label_k, metric=metric,
        list_metrics=metric_list(metrics) if metrics is not None else None,
        bootstrap_resamples=n_resamples, seed=seed,
    )  # fmt: skip
    human_metrics = list(config.human_metrics)
    n_resamples, seed = config.bootstrap_resamples, config.seed
    spec = config.dataset
    names = [reg.retriever(r).name for r in retrievers] if retrievers else list(reg.retrievers)
    if not names:
        raise InputError("evaluate: no retriever given and none in the registry")
    models = _readers(reader, reg)  # checked (and built, not loaded) before any work
    ds = load_dataset_checked(spec)
    target = redact_url(resolve_store(store))
    with concerning(target):
        label_store = open_store(store)
    runs = {}
    for name in names:
        key = reg.retriever(name).partition_key
        say(f"retrieve {key}")
        runs[key] = systems.retrieve(reg, name, ds.corpus, ds.queries, config, log=log)
    labels: dict[tuple[str, str], pl.DataFrame] = {}
    method_labels: dict[tuple[str, str], pl.DataFrame] = {}
    fits: list[FitDiagnostics] = []
    producer = evaluation_id("api")  # what `erag-dagster audit` shows for this call's labels
    for reader_key, model in models:  # each model loads on its first pair, stays loaded
        for key, run in runs.items():
            say(f"label {key} with {reader_key}")
            system = systems.label_system(
                run, ds, model, config, label_store, executor=reg.generation,
                producer=producer, reader_name=reader_key, retriever=key, log=log,
                progress=progress, store_name=target,
            )  # fmt: skip
            labels[(reader_key, key)] = system.labels
            fits.append(system.fit)  # docs/label-methods.md, "Fit diagnostics"
            ranked = systems.verdict_labels(
                run, ds, model, config, label_store, executor=reg.generation,
                producer=producer, log=log,
            )  # fmt: skip
            if ranked is not None:  # evaluation.verdict_labels names a label method
                method_labels[(reader_key, key)] = ranked
    per_query = steps.score(labels, config)
    board = pl.DataFrame()
    if ds.qrels.height:
        board = leaderboard(
            ds.qrels, runs, human_metrics, n_resamples=n_resamples, seed=seed,
            relevance_level=config.relevance_level,
        )  # fmt: skip
    erag_report = steps.summarise(per_query, config)
    found = steps.decide(per_query, config, method_labels=method_labels)
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
        verdicts=[found] if found is not None else [],
        frames={
            "retrieval_report": board,
            "erag_report": erag_report,
            "erag_per_query": per_query,
            "doc_labels": doc_labels,
            "retrieval_run": run_table,
            "fit": fit_frame(fits),
        },
        fits=fits,
    )


def label(
    dataset: str | Dataset,
    run: str | Path | pl.DataFrame,
    reader: str | None = None,
    metric: str | None = None,
    *,
    k: int | None = None,
    store: str | Path | None = None,
    registry: str | Path | None = None,
    executor: str | None = None,
    ray_address: str | None = None,
    log: Log | None = None,
    progress: Progress | None = None,
) -> LabelResult:
    """eRAG labels of one run: each (query, document) of ``run`` (its top ``k`` per query when
    given) answered by ``reader`` on that document alone, scored against the gold answers with
    ``metric`` (default: the registry's ``evaluation.metric``; ``erag-dagster label``).

    ``dataset``: a spec or a loaded :class:`~erag_dagster.data.loaders.Dataset`; ``run``: a
    TREC run file or a run table (``query_id, doc_id, rank, score``); ``reader``: a registry
    reader name or a reader config YAML (default: the first registry reader). Pairs already
    in the label store (same reader fingerprint, question, document text, golds and metric)
    are read, not generated. ``executor``/``ray_address`` override the registry's
    ``generation`` section (``inprocess`` or ``ray``). ``log`` receives progress lines;
    ``progress(done, total)`` the pairs generated so far, after each step and at least every
    10 s while the reader works.

    Returns the :class:`~erag_dagster.labels.labeller.LabelResult` (``.labels``: one row per
    run row with ``label`` in [0, 1], ``answer``, ``reader_fingerprint``; ``.judged_now``,
    ``.from_store``). Raises :class:`InputError` for a bad dataset, run file, reader, metric
    or ``k``; :class:`EnvironmentFault` for an unusable store.
    """
    # arguments checked before any file is read or a store created: erag_dagster/api_args.py
    api_args.check_label(
        dataset=dataset, run=run, reader=reader, metric=metric, k=k, store=store,
        registry=registry, executor=executor, ray_address=ray_address, log=log,
        progress=progress,
    )  # fmt: skip
    from erag_dagster.labels.audit import evaluation_id
    from erag_dagster.labels.store import open_store, redact_url, resolve_store
    from erag_dagster.retrieval.runs import read_trec_run, top_k

    reg = load_registry_file(registry)
    api_args.check_reader_names(reader, reg)  # an unknown reader creates no store
    ds = load_dataset_checked(dataset) if isinstance(dataset, str) else dataset
    if isinstance(run, str | Path):
        with concerning(run):
            run = read_trec_run(run)
    if k is not None:
        run = top_k(run, _positive(k, "k"))
    target = redact_url(resolve_store(store))
    with concerning(target):
        label_store = open_store(store)  # opened before the reader loads: a bad store fails fast
    spec = reg.generation.replace(
        "--executor/--ray-address", executor=executor, address=ray_address
    )
    ((_key, model),) = _readers(reader, reg)
    downstream = evaluation_config(reg, "label", metric=metric).metric
    with concerning(target):
        producer = evaluation_id("api")
        return _label(run, ds, model, downstream, label_store, spec, log, producer, progress)


@dataclass(frozen=True)
class Scores:
    """The list metrics of one labelled run (:func:`score`).

    ``per_query``: ``query_id`` + one column per metric; ``aggregate``: ``metric, value``
    (the mean over the scored queries, in the order asked); ``report``: the same as a
    :class:`~erag_dagster.metrics.list_metrics.ListMetricReport` (for JSON); ``note``: one line
    counting queries with an empty label list and what became of them (``""`` if none).
    """

    per_query: pl.DataFrame
    aggregate: pl.DataFrame
    report: ListMetricReport
    note: str = ""


def score(
    labels: str | Path | pl.DataFrame | Mapping[str, Sequence[float]],
    metrics: Sequence[str] | str,
    *,
    compat: str | None = None,
) -> Scores:
    """List metrics (``P@k``, ``Success@k``, ``RR``, ``AP``, ``nDCG@k``) of eRAG labels
    (``erag-dagster score``).

    ``labels``: a labels parquet (the ``label`` output), a JSON file ``{query_id: [label, ...]}``
    in rank order, a labels frame (``query_id, rank, label``) or such a mapping. Default mode
    scores a query with an empty list 0 on every metric (kept in the mean); ``compat="erag"``
    reproduces the reference erag 0.0.1 (such a query left out; JSON booleans taken as 1/0).
    Raises :class:`InputError` for a missing or malformed labels file (``file:line``), a
    non-numeric label (naming query and rank) or a bad metric name.
    """
    api_args.check_score(labels, metrics, compat)
    import polars as pl

    from erag_dagster.metrics.list_metrics import evaluate_labels, labels_from_frame

    names = metric_list(metrics)
    if isinstance(labels, str | Path):
        values = load_labels_file(str(labels), compat)
    elif isinstance(labels, pl.DataFrame):
        values = labels_from_frame(labels)
    else:
        values = {str(q): [float(v) for v in vs] for q, vs in labels.items()}
    report = evaluate_labels(values, names, compat=compat)
    per_query = pl.DataFrame(
        [{"query_id": q, **{m: v[m] for m in names}} for q, v in report.per_query.items()],
        schema={"query_id": pl.String, **dict.fromkeys(names, pl.Float64)},
    )
    aggregate = pl.DataFrame(
        [{"metric": m, "value": report.aggregate[m]} for m in names],
        schema={"metric": pl.String, "value": pl.Float64},
    )
    return Scores(per_query, aggregate, report, empty_lists_note(values, report))


# --- shared with the CLI ------------------------------------------------------------------


def evaluation_config(registry: Registry, where: str, **given: Any):
    """The registry's :class:`~erag_dagster.config.evaluation.EvaluationConfig` with the
    caller's non-``None`` arguments applied, each checked by the registry's own rules (one
    :class:`InputError` naming the argument). Every front door without Dagster (this API, the
    CLI, the gate) resolves its settings here."""
    return registry.evaluation.with_overrides(where, **given)


def metric_list(metrics: Sequence[str] | str) -> list[str]:
    """Metric names from a list or a comma-separated string; :class:`InputError` if empty."""
    items = metrics.split(",") if isinstance(metrics, str) else list(metrics)
    names = [m.strip() for m in items if m.strip()]
    if not names:
        raise InputError("metrics is empty; give a list such as nDCG@10,R@100")
    return names


def load_registry_file(path: str | Path | None) -> Registry:
    """The registry at ``path`` (default: packaged), a bad file's errors naming it."""
    from erag_dagster.registry import default_registry_path, load_registry

    with concerning(path or default_registry_path()):
        return load_registry(str(path) if path else None)


def load_dataset_checked(spec: str) -> Dataset:
    """:func:`~erag_dagster.data.loaders.load_dataset` with foreign exceptions mapped to one
    line naming the file (an undecodable file) or the spec."""
    from erag_dagster.data.loaders import dataset_source_files, load_dataset

    try:
        return load_dataset(spec)
    except (InputError, EnvironmentFault):
        raise
    except Exception as exc:
        files: tuple = ()
        if isinstance(exc, UnicodeDecodeError):
            try:
                files = dataset_source_files(spec)
            except Exception:  # the spec itself is fine (load_dataset got past it)
                files = ()
        fault = as_fault(exc, *files) if files else as_fault(exc, f"dataset {spec!r}")
        if fault is None:
            raise
        raise fault from exc


def load_labels_file(path: str, compat: str | None = None) -> dict[str, list[float]]:
    """Labels from parquet (``labels_from_frame``) or JSON ``{query_id: [label, ...]}``.

    JSON booleans are refused as labels, except with ``compat="erag"``: the reference erag
    0.0.1 takes ``true``/``false`` as 1/0, so compat mode does too.
    """
    import polars as pl

    from erag_dagster.input_files import load_json, open_binary
    from erag_dagster.metrics.list_metrics import labels_from_frame

    file = Path(path)
    if not file.exists():
        raise InputError(f"{path}: labels file not found")
    if file.suffix == ".parquet":
        with concerning(path), open_binary(file) as handle:
            return labels_from_frame(pl.read_parquet(handle))
    data = load_json(file)
    if not isinstance(data, dict):
        raise InputError(f"{path}: expected a JSON object {{query_id: [label, ...]}}")
    out: dict[str, list[float]] = {}
    for qid, values in data.items():
        if not isinstance(values, list):
            raise InputError(f"{path}: labels of query {qid!r} must be a list in rank order")
        for rank, value in enumerate(values, start=1):
            boolean = isinstance(value, bool) and compat != "erag"
            if boolean or not isinstance(value, int | float):
                raise InputError(
                    f"{path}: label at rank {rank} of query {qid!r} is {value!r}, not a number"
                )
        out[str(qid)] = [float(v) for v in values]
    return out


def empty_lists_note(labels: Mapping[str, Sequence[float]], report: ListMetricReport) -> str:
    """One line counting queries with an empty label list and what became of them ("" if none).

    Default mode scores such a query 0 on every metric and keeps it in the mean; compat mode
    (like erag 0.0.1's pytrec_eval) leaves it out of ``per_query`` and the mean.
    """
    empty = [q for q, values in labels.items() if not values]
    if not empty:
        return ""
    scored = [q for q in empty if q in report.per_query]
    dropped = [q for q in empty if q not in report.per_query]
    parts = []
    if scored:
        parts.append(f"{len(scored)} with an empty label list scored 0 ({_ids(scored)})")
    if dropped:
        parts.append(
            f"{len(dropped)} with an empty label list left out of the mean ({_ids(dropped)})"
        )
    return f"of {len(labels)} queries, " + "; ".join(parts)


def _ids(ids: list[str], shown: int = 5) -> str:
    more = f", ... {len(ids) - shown} more" if len(ids) > shown else ""
    return ", ".join(repr(i) for i in ids[:shown]) + more


def _positive(value: int | None, name: str) -> int | None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise InputError(f"{name} must be a positive integer, got {value!r}")
    return value


def _reader_entry(value: str | None, registry: Registry) -> tuple[str, Any]:
    """``(key, reader)``: the registry partition key (a YAML config: its name) and the reader."""
    from erag_dagster.readers.factory import reader_from_config

    if value and _is_config(value):
        from erag_dagster.input_files import load_yaml

        cfg = load_yaml(value)
        if not isinstance(cfg, dict):
            raise InputError(f"{value}: a reader config must be a YAML mapping")
        name = str(cfg.pop("name", Path(value).stem))
        return name, reader_from_config(name, cfg)
    if not value and not registry.readers:
        raise InputError("no reader given and none in the registry")
    entry = registry.reader(value) if value else next(iter(registry.readers.values()))
    return entry.partition_key, reader_from_config(entry.name, entry.config)


def _readers(value: str | Sequence[str] | None, registry: Registry) -> list[tuple[str, Any]]:
    """``(key, reader)`` of each reader asked for, in order; every name is checked first."""
    values = [value] if value is None or isinstance(value, str) else list(value)
    for v in values:  # an unknown name fails before a model loads
        if v and not _is_config(v):
            registry.reader(v)
    return [_reader_entry(v, registry) for v in values]


def _is_config(value: str) -> bool:
    """A reader argument naming a file (a config YAML, read through the input rules: a FIFO
    or device is refused, not read) rather than a registry name."""
    return Path(value).exists() and not Path(value).is_dir()


def _label(
    run, ds, model, metric: str, store, executor, log: Log | None, producer: str,
    progress: Progress | None = None,
) -> LabelResult:  # fmt: skip
    """:func:`label_run`, recording ``producer`` (an :func:`evaluation_id`) with every row."""
    from erag_dagster.labels.labeller import label_run

    return label_run(
        run, ds.queries, ds.corpus, model, metric, store, run_id=producer, log=log,
        executor=executor, progress=progress,
    )  # fmt: skip
