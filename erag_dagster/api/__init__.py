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
:class:`~erag_dagster.core.errors.InputError` with one line naming what and where; an unusable
store or environment raises :class:`~erag_dagster.core.errors.EnvironmentFault`. The label store
is ``store``, else ``$ERAG_LABEL_STORE``, else ``<storage root>/labels.sqlite``
(:mod:`erag_dagster.core.paths`): labels computed by the CLI, the main job or this API are shared.
Defaults left as ``None`` come from the registry's ``evaluation`` section — the one typed
configuration every front door reads (:func:`evaluation_config`), as for the main job.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from erag_dagster.api import args as api_args
from erag_dagster.core.callbacks import Progress
from erag_dagster.core.errors import EnvironmentFault, InputError, as_fault, concerning

if TYPE_CHECKING:
    import polars as pl

    from erag_dagster.config.registry import Registry
    from erag_dagster.data.loaders import Dataset
    from erag_dagster.labels.labeller import LabelResult
    from erag_dagster.metrics.list_metrics import ListMetricReport
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
    # arguments checked before any work (types, empty lists, counts, seed): erag_dagster/api/args.py
    api_args.check_evaluate(
        dataset=dataset, retrievers=retrievers, reader=reader, metrics=metrics, metric=metric,
        k=k, label_k=label_k, registry=registry, store=store, n_resamples=n_resamples,
        seed=seed, log=log, progress=progress,
    )  # fmt: skip
    from erag_dagster.evaluation.session import EvaluationSession
    from erag_dagster.labels.audit import evaluation_id
    from erag_dagster.labels.store import open_store, redact_url, resolve_store

    reg = load_registry_file(registry)
    api_args.check_reader_names(reader, reg)  # before retrieval; an unknown reader creates nothing
    config = evaluation_config(
        reg, "evaluate", dataset=dataset or None, k=k, label_k=label_k, metric=metric,
        list_metrics=metric_list(metrics) if metrics is not None else None,
        bootstrap_resamples=n_resamples, seed=seed,
    )  # fmt: skip
    names = [reg.retriever(r).name for r in retrievers] if retrievers else list(reg.retrievers)
    if not names:
        raise InputError("evaluate: no retriever given and none in the registry")
    specs = reader_specs(reader, reg)  # every reader's spec checked before any work
    ds = load_dataset_checked(config.dataset)
    models = _built(specs)  # built (not loaded) once the inputs are known good
    target = redact_url(resolve_store(store))
    with concerning(target):
        label_store = open_store(store)
    session = EvaluationSession(
        config, reg, ds, label_store,
        producer=evaluation_id("api"),  # what `erag-dagster audit` shows for this call's labels
        log=log, progress=progress, store_name=target,
    )  # fmt: skip
    return session.evaluate(names, models)


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
    run file (TREC, or ``.parquet``) or a run table (``query_id, doc_id, rank, score``; polars
    or pandas) that a run file's rules accept (:func:`labelled_run`); ``reader``: a registry
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
    # arguments checked before any file is read or a store created: erag_dagster/api/args.py
    api_args.check_label(
        dataset=dataset, run=run, reader=reader, metric=metric, k=k, store=store,
        registry=registry, executor=executor, ray_address=ray_address, log=log,
        progress=progress,
    )  # fmt: skip
    from erag_dagster.evaluation.session import EvaluationSession
    from erag_dagster.labels.audit import evaluation_id
    from erag_dagster.labels.labeller import labelling_rows
    from erag_dagster.labels.store import open_store, redact_url, resolve_store

    reg = load_registry_file(registry)
    api_args.check_reader_names(reader, reg)  # an unknown reader creates no store
    specs = reader_specs(reader, reg)  # the reader's keys checked (max_new_tokens ...)
    _positive(k, "k")
    # ``k``: the depth labelled (the config's label_k; its retrieval depth at least as deep)
    config = evaluation_config(
        reg, "label", metric=metric, label_k=k, k=max(k, reg.evaluation.k) if k else None
    )
    spec = reg.generation.replace(
        "--executor/--ray-address", executor=executor, address=ray_address
    )
    ds = load_dataset_checked(dataset) if isinstance(dataset, str) else dataset
    run = labelled_run(run, ds, None)  # file:line / row of a bad run, before work (uncut)
    if k is None:  # no depth asked: every row of the run (``label`` labels what it is given)
        depth = int(run.get_column("rank").max() or 1) if run.height else 1
        config = config.with_overrides("label", k=max(depth, config.k), label_k=depth)
    session = EvaluationSession(
        config, reg, ds, producer=evaluation_id("api"), executor=spec, log=log,
        progress=progress,
    )  # fmt: skip
    # gold answers, questions of the rows labelled (the session's label_k cut): before any store
    labelling_rows(session.labelled_run(run), ds.queries, ds.corpus)
    ((_key, model),) = _built(specs)
    target = redact_url(resolve_store(store))
    with concerning(target):
        label_store = open_store(store)  # opened before the reader loads: a bad store fails fast
    return replace(session, store=label_store, store_name=target).label(run, model)


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
    in rank order, a labels frame (``query_id, rank, label``; polars or pandas) or such a
    mapping. Default mode
    scores a query with an empty list 0 on every metric (kept in the mean); ``compat="erag"``
    reproduces the reference erag 0.0.1 (such a query left out; JSON booleans taken as 1/0).
    Raises :class:`InputError` for a missing or malformed labels file (``file:line``), a
    non-numeric label (naming query and rank) or a bad metric name.
    """
    api_args.check_score(labels, metrics, compat)
    import polars as pl

    from erag_dagster.core.input_files import as_polars_frame
    from erag_dagster.metrics.list_metrics import evaluate_labels, labels_from_frame

    names = metric_list(metrics)
    frame = as_polars_frame(labels)  # polars, or pandas turned into polars
    if isinstance(labels, str | Path):
        values = load_labels_file(str(labels), compat)
    elif frame is not None:
        values = labels_from_frame(frame, source="labels frame")
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
    from erag_dagster.config.registry import default_registry_path, load_registry

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

    from erag_dagster.core.errors import where
    from erag_dagster.core.input_files import json_key_line, open_binary, parse_json, read_text
    from erag_dagster.metrics.list_metrics import labels_from_frame

    file = Path(path)
    if not file.exists():
        raise InputError(f"{path}: labels file not found")
    if file.suffix == ".parquet":
        with concerning(path), open_binary(file) as handle:
            frame = pl.read_parquet(handle)
        return labels_from_frame(frame, source=path)
    text = read_text(file)
    data = parse_json(text, path)  # NaN/Infinity refused at file:line (the input rule)
    if not isinstance(data, dict):
        raise InputError(f"{path}: expected a JSON object {{query_id: [label, ...]}}")
    out: dict[str, list[float]] = {}
    for qid, values in data.items():
        at = where(path, json_key_line(text, qid))
        if not isinstance(values, list):
            raise InputError(f"{at}: labels of query {qid!r} must be a list in rank order")
        for rank, value in enumerate(values, start=1):
            boolean = isinstance(value, bool) and compat != "erag"
            if boolean or not isinstance(value, int | float):
                raise InputError(
                    f"{at}: label at rank {rank} of query {qid!r} is {value!r}, not a number"
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


def _reader_spec(value: str | None, registry: Registry) -> tuple[str, Any]:
    """``(key, spec)``: the registry partition key (a YAML config: its name) and the reader's
    checked :class:`~erag_dagster.readers.spec.ReaderSpec` (nothing imported or built)."""
    from erag_dagster.readers.spec import ReaderSpec

    if value and _is_config(value):
        from erag_dagster.core.input_files import load_yaml

        cfg = load_yaml(value)
        if not isinstance(cfg, dict):
            raise InputError(f"{value}: a reader config must be a YAML mapping")
        name = str(cfg.pop("name", Path(value).stem))
        try:
            return name, ReaderSpec.from_dict(cfg, name=name)
        except InputError as exc:
            raise InputError(f"{value}: {exc}") from None
    if not value and not registry.readers:
        raise InputError("no reader given and none in the registry")
    entry = registry.reader(value) if value else next(iter(registry.readers.values()))
    return entry.partition_key, ReaderSpec.from_dict(entry.config, name=entry.name)


def reader_specs(value: str | Sequence[str] | None, registry: Registry) -> list[tuple[str, Any]]:
    """``(key, spec)`` of each reader asked for, in order: every name looked up and every
    spec checked (a bad key such as ``max_new_tokens`` named, with the config file) before any
    reader is built, a store opened or a dataset read — the door every caller of a reader
    goes through (:func:`evaluate`, :func:`label`, ``erag-dagster label``)."""
    values = [value] if value is None or isinstance(value, str) else list(value)
    for v in values:  # an unknown name fails before a model loads
        if v and not _is_config(v):
            registry.reader(v)
    return [_reader_spec(v, registry) for v in values]


def _built(specs: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """``(key, reader)`` for each checked spec (the backend's module imported; nothing
    loaded until its first pair), its fingerprint computed: a model file or folder that does
    not exist is refused here, before a store is opened or created."""
    from erag_dagster.readers.factory import reader_for_spec

    built = [(key, reader_for_spec(spec)) for key, spec in specs]
    for _key, reader in built:
        reader.fingerprint  # noqa: B018  (resolves the model: the reader's last check)
    return built


def labelled_run(run: Any, ds: Dataset, k: int | None) -> pl.DataFrame:
    """The run :func:`label` labels: a run file (TREC, or ``.parquet``) read by the run-file
    rules, or a run frame (polars or pandas, checked at the door by
    :func:`~erag_dagster.retrieval.runs.check_run_frame`), then checked against ``ds`` as a
    registry run file is (an unknown query or document named at ``file:line`` or the frame's
    row; :func:`~erag_dagster.retrieval.run_file.run_against_dataset`) and cut to ``k``."""
    from erag_dagster.core.input_files import as_polars_frame
    from erag_dagster.retrieval.run_file import read_run_file, run_against_dataset
    from erag_dagster.retrieval.runs import check_run_frame

    if isinstance(run, str | Path):
        with concerning(run):
            frame = read_run_file(run)
        return run_against_dataset(frame, ds.queries, ds.corpus, k, path=run).run
    frame = check_run_frame(as_polars_frame(run))
    return run_against_dataset(frame, ds.queries, ds.corpus, k, source="run frame").run


def _is_config(value: str) -> bool:
    """A reader argument naming a file (a config YAML, read through the input rules: a FIFO
    or device is refused, not read) rather than a registry name."""
    return Path(value).exists() and not Path(value).is_dir()
