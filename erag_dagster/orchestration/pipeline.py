"""The main job: materialise every asset through Dagster, in process, partition by partition.

Used by ``erag-dagster run`` (the README's run command). The order comes from the Definitions'
own asset graph (:func:`plan`): a topological order of its assets, declaration order breaking
ties, with every partition of each partitioned asset; a new asset needs no edit here. With
``DAGSTER_HOME`` set, runs are recorded in that instance, so ``dagster dev`` shows them
afterwards; otherwise an ephemeral instance is used.

A full re-evaluation through the run queue, pools and run launcher (instead of in process) is an
asset backfill of every partition: :func:`request_full_reevaluation`, or in the UI "Materialize
all" on the asset lineage, then "All partitions" and "Launch backfill". (An asset job over every
asset is not possible: Dagster's asset jobs need one partitions definition, and this graph has
three: none, retriever, reader x retriever.)
"""

from __future__ import annotations

import contextlib
import io
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

# isort: off
from erag_dagster.orchestration import notices  # noqa: F401  (first: Dagster's beta notices filtered)
import dagster as dg
# isort: on

from erag_dagster.config.evaluation import EvaluationConfig
from erag_dagster.config.registry import Registry
from erag_dagster.core.callbacks import Log
from erag_dagster.core.errors import EnvironmentFault, InputError
from erag_dagster.orchestration.instance_settings import warn_once
from erag_dagster.orchestration.progress import Progress
from erag_dagster.orchestration.resources import EvalSettings
from erag_dagster.orchestration.resources.keys import prefixed_name
from erag_dagster.orchestration.run_slots import (
    process_tags,
    release_dead_runs,
    slot_wait_line,
    step_pools,
)
from erag_dagster.reports.catalog import REPORTS

#: The optional stages of the main job (``stages=`` of :func:`materialize_all`), by asset group:
#: the assets of a stage's group and everything downstream of them that is not in a later stage.
_META = dg.AssetSelection.groups("meta_evaluation").downstream()
STAGES: dict[str, dg.AssetSelection] = {
    "labels": dg.AssetSelection.groups("labels").downstream() - _META,
    "meta": _META,
    "efficiency": dg.AssetSelection.groups("efficiency"),
}


def stage_selection(stages: Sequence[str] | None = None) -> dg.AssetSelection:
    """Every asset, less the :data:`STAGES` not named in ``stages`` (``None``: every stage)."""
    selection = dg.AssetSelection.all()
    for name, stage in STAGES.items():
        if stages is not None and name not in stages:
            selection = selection - stage
    return selection


@dataclass(frozen=True)
class Graph:
    """One eRAG graph to build: the Definitions it is part of (the packaged project's, or a
    team's whole code location), and the registry, key prefix and settings of its eRAG assets
    (an eRAG component instance's: :mod:`erag_dagster.orchestration.project`)."""

    defs: dg.Definitions
    registry: Registry
    settings: EvalSettings
    key_prefix: tuple[str, ...] = ()

    @classmethod
    def packaged(cls, settings: EvalSettings | None = None, registry_path: str = "") -> Graph:
        """The graph of a registry file (``settings.registry_path``, else ``registry_path``,
        else ``$ERAG_REGISTRY`` or the packaged one): :func:`build_defs`'s."""
        # imported late: its module warns about the instance, which must come after every
        # refusal of the settings (check_settings)
        from erag_dagster.orchestration.definitions import build_defs

        settings = settings or EvalSettings(registry_path=registry_path)
        defs = build_defs(settings.registry_path or None, settings)
        bound = dict(defs.resources or {})["settings"]
        return cls(defs, bound.registry(), bound)

    def key(self, user_string: str) -> dg.AssetKey:
        """The key of an eRAG asset named as the registry sees it (``erag_report``,
        ``scifact/verdict``), under this graph's key prefix."""
        return dg.AssetKey([*self.key_prefix, *dg.AssetKey.from_user_string(user_string).path])

    def selection(self, stages: Sequence[str] | None = None) -> dg.AssetSelection:
        """This graph's assets of ``stages`` (:func:`stage_selection`) and the assets of the
        project they read (a ``kind: asset`` retriever's run)."""
        own = stage_selection(stages)
        if self.key_prefix:
            own = own & dg.AssetSelection.key_prefixes(list(self.key_prefix))
        return own.upstream()

    @property
    def page(self) -> Path:
        """Where its ``html_report`` writes the page."""
        from erag_dagster.orchestration.assets.html_report import page_path

        return page_path(self.key_prefix)


@dataclass(frozen=True)
class Step:
    """Assets materialised together: one run per partition of their partitions definition
    (one run when unpartitioned)."""

    keys: tuple[dg.AssetKey, ...]
    partitions_def: dg.PartitionsDefinition | None

    def partition_keys(self) -> list[str | None]:
        if self.partitions_def is None:
            return [None]
        return list(self.partitions_def.get_partition_keys())


def plan(defs: dg.Definitions, selection: dg.AssetSelection | None = None) -> list[Step]:
    """The selected materialisable assets of ``defs`` in topological order (ties: the order of
    ``defs.assets``), consecutive assets with the same partitions definition in one step.

    The assets of one definition (a multi-asset) stay together.
    """
    graph = defs.resolve_asset_graph()
    wanted = (selection or dg.AssetSelection.all()).resolve(graph)
    nodes = []
    for assets_def in defs.assets or []:
        if isinstance(assets_def, dg.AssetsDefinition) and assets_def.is_materializable:
            declared = assets_def.keys_by_output_name.values()  # outs order (a set: .keys)
            keys = tuple(k for k in declared if k in wanted)
            if keys:
                nodes.append(keys)
    planned = {k for node in nodes for k in node}
    parents = {
        node: {p for k in node for p in graph.get(k).parent_keys if p in planned} - set(node)
        for node in nodes
    }
    done: set[dg.AssetKey] = set()
    steps: list[Step] = []
    pending = list(nodes)
    while pending:
        node = next((n for n in pending if parents[n] <= done), None)
        if node is None:
            raise RuntimeError(f"asset graph has a cycle among {pending}")
        pending.remove(node)
        done |= set(node)
        partitions_def = graph.get(node[0]).partitions_def
        if steps and steps[-1].partitions_def == partitions_def:
            steps[-1] = Step((*steps[-1].keys, *node), partitions_def)
        else:
            steps.append(Step(node, partitions_def))
    return steps


def _instance(log: Log = print) -> dg.DagsterInstance:
    """The ``$DAGSTER_HOME`` instance, or an ephemeral one when it is unset. A ``DAGSTER_HOME``
    that is relative or not an existing folder is an :class:`InputError` (one line), not Dagster's
    traceback; one lacking the instance settings the project relies on gets one line through ``log``
    saying what to add (:mod:`erag_dagster.orchestration.instance_settings`), in place of Dagster's
    own warnings."""
    home = os.environ.get("DAGSTER_HOME")
    if not home:
        return dg.DagsterInstance.ephemeral()
    if not os.path.isabs(home) or not os.path.isdir(home):
        problem = "is not an absolute path" if not os.path.isabs(home) else "is not a folder"
        raise InputError(
            f"DAGSTER_HOME={home} {problem}: point it at an existing folder (make run uses "
            ".dagster_home), or unset it for a temporary instance"
        )
    warn_once(lambda line: log(f"warning: {line}"), home)
    return dg.DagsterInstance.get()


#: The job name of the runs :func:`materialize_all` launches (``erag-dagster run``'s).
EVALUATION_JOB = "erag_evaluation"
#: The run tag naming what launched a run (``erag-dagster run``, the API, a backfill request).
LAUNCHED_BY_TAG = "erag/launched_by"


#: The stages of ``erag-dagster run`` (:data:`STAGES`): every report but the efficiency
#: benchmark (Table 2), which times fresh reader processes for minutes and is materialised on
#: purpose (the UI, or ``bench/efficiency.py``).
DEFAULT_STAGES: tuple[str, ...] = ("labels", "meta")

#: The reports ``erag-dagster run`` prints (:func:`print_reports`): those declared ``printed``
#: (:mod:`erag_dagster.reports.catalog`).
DEFAULT_REPORTS: tuple[str, ...] = tuple(r.key for r in REPORTS if r.printed)


class StepFailed(EnvironmentFault):
    """A step of the main job failed (exit status 1); the message names the asset, the
    partition, the error and the Dagster run to look at. The step's traceback is a note
    (shown by ``--debug``) and in the run's event log."""


def check_settings(
    settings: EvalSettings, load_dataset: Callable[[str], object] | None = None
) -> list[EvaluationConfig]:
    """The settings in force for each registry dataset (one without a ``datasets`` section),
    checked before any run starts: registry, downstream metric, list and human metric names,
    the dataset (loaded once with ``load_dataset``, default
    :func:`erag_dagster.data.loaders.load_dataset`) and its run files against it. Raises
    :class:`InputError` naming the bad value (a bad registry file: its path; a run file: its
    ``file:line``; a registry dataset: its name), so a bad run costs one line, not a failed run.
    """
    from erag_dagster.data.loaders import load_dataset as default_loader
    from erag_dagster.data.spec import parse_spec
    from erag_dagster.retrieval.run_file import load_run_file

    settings.check_dataset_override()  # parses the registry
    checked = []
    for name in settings.registry().dataset_names:
        try:
            params = settings.resolve(name)  # names and values checked by EvaluationConfig
            dataset = (load_dataset or default_loader)(params.dataset)
            subset = parse_spec(params.dataset).question_subset
            for entry in settings.registry(name).retrievers.values():
                if entry.config["kind"] == "run_file":
                    cfg = entry.config
                    load_run_file(
                        cfg["path"], cfg["format"], cfg["sha256"], dataset.queries,
                        dataset.corpus, params.k, subset,
                    )  # fmt: skip
        except InputError as exc:
            if name is None:
                raise
            raise InputError(f"dataset {name!r}: {exc}") from None
        checked.append(params)
    return checked


def check_readers_available(registry: Registry) -> None:
    """Every reader of ``registry`` can be loaded here, decided without loading it
    (:func:`erag_dagster.readers.availability.check_readers_available`), each error naming the
    registry file. A registry none of whose datasets gets the reader stages (BEIR judgments
    only) runs no reader: nothing to check."""
    from erag_dagster.readers.availability import check_readers_available as check

    if not any(registry.for_dataset(name).reader_labels for name in registry.dataset_names):
        return
    check(
        {e.name: e.config for e in registry.readers.values()},
        {name: registry.path for name in registry.readers},
    )


def _run_config(verbose: bool) -> dict:
    """Dagster's console logger: its default level with ``verbose``, else silent (CRITICAL).

    The run's event log (the instance, the UI) keeps every event either way: Dagster's own
    handlers are separate from the console logger.
    """
    level = "DEBUG" if verbose else "CRITICAL"
    return {"loggers": {"console": {"config": {"log_level": level}}}}


def _failure(result: dg.ExecuteInProcessResult, label: str) -> Exception:
    """One-line error of a failed run: the erag error raised inside it (an :class:`InputError`
    keeps exit status 2), else :class:`StepFailed` with the innermost error's class and message."""
    errors = [
        event.event_specific_data.error
        for event in result.all_events
        if event.is_failure and getattr(event.event_specific_data, "error", None) is not None
    ]
    if not errors:
        return StepFailed(f"{label} failed (Dagster run {result.run_id}; see it in the UI)")
    chain = []
    info = errors[0]
    while info is not None:
        chain.append(info)
        info = info.cause
    ours = next((e for e in chain if e.cls_name in _ERAG_ERRORS), None)
    cause = ours or chain[-1]
    message = (cause.message or cause.cls_name or "").strip().splitlines()
    text = message[0] if message else cause.cls_name
    if not text.startswith(f"{cause.cls_name}:"):
        text = f"{cause.cls_name}: {text}"
    line = f"{label} failed: {text} (Dagster run {result.run_id}; see it in the UI)"
    error: Exception = InputError(line) if cause.cls_name == "InputError" else StepFailed(line)
    error.add_note(errors[0].to_string())
    return error


_ERAG_ERRORS = ("InputError", "EnvironmentFault", "StorageError")


def materialize_all(
    settings: EvalSettings | None = None,
    instance: dg.DagsterInstance | None = None,
    log: Log = print,
    stages: Sequence[str] | None = None,
    verbose: bool = False,
    progress: Callable[[list], Progress] | None = None,
    load_dataset: Callable[[str], object] | None = None,
    launched_by: str = "erag_dagster.orchestration.pipeline.materialize_all",
    graph: Graph | None = None,
) -> None:
    """Check the settings, observe the inputs, then materialise the graph step by step
    (:func:`plan`), each step a run of the job :data:`EVALUATION_JOB` (:func:`step_job`)
    tagged ``erag/launched_by: <launched_by>`` (``erag-dagster run`` names itself).

    Partitioned assets are materialised one partition per run (as a user would from the UI); the
    reports read every partition of their upstream. ``stages`` keeps only the named optional stages
    (:data:`STAGES`); ``None`` runs everything. Nothing runs when :func:`check_settings` refuses the
    settings. Dagster's console log is silent unless ``verbose`` (the runs' event logs keep it); the
    terminal gets one progress line per run (``progress``: a
    :class:`~erag_dagster.orchestration.progress.Progress` factory over the planned steps, default
    lines through ``log``). A failed run raises :class:`StepFailed` (or the :class:`InputError`
    raised in it) naming the asset, the partition and the run id. A reader that cannot be loaded
    here (its libraries, packaged wheel or model file missing) is one :class:`InputError` line
    naming it and the install command, after the settings are checked and before anything runs
    (:func:`check_readers_available`; nothing is loaded).

    ``graph``: the graph to build (default: :meth:`Graph.packaged` of ``settings``), e.g. an
    eRAG component instance's in a team's project (``erag-dagster run --defs``), with the
    project's assets it reads, under its key prefix.
    """
    settings = graph.settings if graph is not None else settings or EvalSettings()
    check_settings(settings, load_dataset)
    check_readers_available(settings.registry())
    owned = instance is None
    instance = instance or _instance(log)
    # An instance opened here is entered (Dagster's public context manager): the Definitions
    # load with its definitions-state storage, and it is closed at the end. A caller's instance
    # is the caller's to enter (``with dg.instance_for_test() as instance``, as tests do).
    with instance if owned else contextlib.nullcontext(instance):
        graph = graph or Graph.packaged(settings)
        defs = graph.defs
        run_config = _run_config(verbose)
        runs = [
            (step, partition_key)
            for step in plan(defs, graph.selection(stages))
            for partition_key in step.partition_keys()
        ]
        tracker = (progress or (lambda planned: Progress(planned, log)))(
            ["observe"] + [step.keys for step, _ in runs]
        )
        tracker.started("observe dataset_files, reader_models")
        tags = {**process_tags(), LAUNCHED_BY_TAG: launched_by}
        observe = prefixed_name("observe_inputs", graph.key_prefix)
        observed = defs.resolve_job_def(observe).execute_in_process(
            instance=instance, run_config=run_config, raise_on_error=False, tags=tags
        )
        if not observed.success:
            raise _failure(observed, observe)
        tracker.finished("observe dataset_files, reader_models")
        assets = list(defs.assets or [])
        resources = dict(defs.resources or {})
        for step, partition_key in runs:
            names = ", ".join(k.to_user_string() for k in step.keys)
            label = names + (f" [{partition_key}]" if partition_key else "")
            tracker.started(label)
            for line in release_dead_runs(instance):  # a killed run's slot (run_slots.py)
                tracker.note(line)
            waiting = slot_wait_line(instance, step_pools(assets, step.keys))
            if waiting:
                tracker.note(waiting)
            result = step_job(assets, resources, step.keys).execute_in_process(
                partition_key=partition_key,
                instance=instance,
                run_config=run_config,
                raise_on_error=False,
                tags=tags,
            )
            if not result.success:
                raise _failure(result, label)
            tracker.finished(label)


def step_job(
    assets: Sequence[dg.AssetsDefinition | dg.SourceAsset],
    resources: dict[str, object],
    keys: Sequence[dg.AssetKey],
) -> dg.JobDefinition:
    """The job of one step of :func:`materialize_all`: :data:`EVALUATION_JOB` over ``keys``
    (with their checks), the other ``assets`` read as inputs — what ``dg.materialize`` runs,
    under a name the UI's Runs list shows instead of ``__ephemeral_asset_job__``. One job per
    step, since an asset job holds one partitions definition and the graph has several."""
    job = dg.define_asset_job(EVALUATION_JOB, selection=dg.AssetSelection.assets(*keys))
    defs = dg.Definitions(assets=assets, resources=resources, jobs=[job])
    return defs.resolve_job_def(EVALUATION_JOB)


#: The webserver :func:`request_full_reevaluation` asks by default (``make dev``'s address).
DEFAULT_WEBSERVER = "http://127.0.0.1:3000"

_LAUNCH_BACKFILL = """
mutation Reevaluate($params: LaunchBackfillParams!) {
  launchPartitionBackfill(backfillParams: $params) {
    __typename
    ... on LaunchBackfillSuccess { backfillId }
    ... on Error { message }
  }
}
"""


def request_full_reevaluation(
    url: str = "",
    registry_path: str | None = None,
    title: str = "full re-evaluation",
    launched_by: str = "erag_dagster.orchestration.pipeline.request_full_reevaluation",
    timeout_s: float = 60.0,
) -> str:
    """Request an asset backfill of every partition of every materialisable asset (what "Materialize
    all" does in the UI) from the Dagster webserver at ``url`` (default ``$ERAG_DAGSTER_URL``,
    else :data:`DEFAULT_WEBSERVER`), through Dagster's public GraphQL API
    (``launchPartitionBackfill`` with ``allPartitions``); the daemon runs it through the run
    queue, pools and launcher, in dependency order across the partitions definitions. The keys
    are those of :func:`build_defs` for ``registry_path``: the webserver's code location must load
    the same registry (``ERAG_REGISTRY``). Returns the backfill id; a webserver that cannot be
    reached or refuses is one :class:`EnvironmentFault` line."""
    import json
    import urllib.error
    import urllib.request

    url = (url or os.environ.get("ERAG_DAGSTER_URL") or DEFAULT_WEBSERVER).rstrip("/")
    # imported late: its module warns about the instance, which must come after
    # every refusal of the settings (check_settings)
    from erag_dagster.orchestration.definitions import build_defs

    defs = build_defs(registry_path)
    keys = sorted(
        {key for a in defs.assets or [] if isinstance(a, dg.AssetsDefinition) for key in a.keys},
        key=lambda key: key.path,
    )
    params = {
        "assetSelection": [{"path": key.path} for key in keys],
        "allPartitions": True,
        "title": title,
        "description": "every partition of every asset",
        "tags": [{"key": LAUNCHED_BY_TAG, "value": launched_by}],
    }
    body = json.dumps({"query": _LAUNCH_BACKFILL, "variables": {"params": params}}).encode()
    request = urllib.request.Request(
        f"{url}/graphql", data=body, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            answer = json.load(response)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise EnvironmentFault(
            f"no Dagster webserver answered at {url}/graphql ({exc}): start one (make dev) or "
            "set ERAG_DAGSTER_URL"
        ) from None
    result = (answer.get("data") or {}).get("launchPartitionBackfill") or {}
    if result.get("__typename") != "LaunchBackfillSuccess":
        problem = result.get("message") or answer.get("errors") or result.get("__typename")
        raise EnvironmentFault(f"{url} refused the full re-evaluation backfill: {problem}")
    return str(result["backfillId"])


def load_asset_value(
    key: str,
    instance: dg.DagsterInstance | None = None,
    registry_path: str = "",
    verbose: bool = False,
    graph: Graph | None = None,
):
    """Read a materialised unpartitioned asset's value through the IO manager (``key`` as the
    registry names it; ``graph``: whose asset, default :meth:`Graph.packaged` of
    ``registry_path``).

    Dagster's console log of the load (the IO manager's "Loading file from ...") is dropped
    unless ``verbose``: the loader's console logger writes to the ``sys.stderr`` of the moment
    it is created, so it is created with stderr redirected.
    """
    if graph is None:
        # imported late: its module warns about the instance, which must come after
        # every refusal of the settings (check_settings)
        from erag_dagster.orchestration.definitions import build_defs

        defs, asset_key = build_defs(registry_path or None), dg.AssetKey.from_user_string(key)
    else:
        defs, asset_key = graph.defs, graph.key(key)
    quiet = contextlib.nullcontext() if verbose else contextlib.redirect_stderr(io.StringIO())
    with quiet, defs.get_asset_value_loader(instance=instance or _instance()) as loader:
        return loader.load_asset_value(asset_key)


def load_run_report(
    instance: dg.DagsterInstance | None = None,
    registry_path: str = "",
    only: Sequence[str] | None = None,
    verbose: bool = False,
    graph: Graph | None = None,
):
    """The materialised reports as a :class:`~erag_dagster.reports.run_report.RunReport`:
    every report in ``only`` (default: all) that exists, and where ``erag_report`` is wanted
    each dataset's verdict (the ``verdict`` asset: computed once per run). A report not
    materialised yet is a section "not available", not an error. ``graph``: whose reports
    (default: the graph of ``registry_path``), whose settings' statistics the tables' stars and
    legends follow."""
    from erag_dagster.config.registry import load_registry
    from erag_dagster.reports.run_report import RunReport, Section, sections_order
    from erag_dagster.reports.verdict import Verdict

    registry = graph.registry if graph is not None else load_registry(registry_path or None)
    names = registry.dataset_names
    readers = {name: bool(registry.for_dataset(name).reader_labels) for name in names}
    many = len(registry.datasets) >= 2
    wanted = [
        (name, key)
        for name, key in sections_order(names, readers, many)
        if only is None or key in only
    ]
    settings = graph.settings if graph is not None else EvalSettings(registry_path=registry_path)
    report = RunReport(sections=[], statistics=settings.resolve().statistics)

    def load(name: str | None, key: str) -> Section:
        try:
            frame = load_asset_value(
                f"{name}/{key}" if name else key, instance, registry_path, verbose, graph
            )
        except Exception as exc:  # a report not materialised yet is not an error here
            return Section(key, name, None, type(exc).__name__)
        section = Section(key, name, frame)
        report.frames[section.name] = frame
        return section

    for name, key in wanted:
        report.sections.append(load(name, key))
        if key == "erag_report" and report.sections[-1].frame is not None:
            load(name, "erag_per_query")
            report.notes += per_query_notes(name, instance, graph)
            try:  # the verdict asset's value: computed once, rendered here
                found = load_asset_value(
                    f"{name}/verdict" if name else "verdict",
                    instance, registry_path, verbose, graph,
                )  # fmt: skip
            except Exception:  # not materialised (yet): no verdict lines
                found = None
            if found:
                report.verdicts.append(Verdict.from_dict(found))
            report.fits += load_fits(name, instance, registry_path, verbose, graph)
    return report


def per_query_notes(
    name: str | None, instance: dg.DagsterInstance | None = None, graph: Graph | None = None
) -> list[str]:
    """The notes the latest ``erag_per_query`` of dataset ``name`` (in ``graph``, default the
    unprefixed one) recorded: the questions a system has no document for, each scored 0
    (:mod:`erag_dagster.meta.per_query`'s rule; the metadata key
    ``queries_scored_0_without_labels``); ``[]`` when none or not materialised."""
    from erag_dagster.reports.erag_tables import NOTES_KEY

    user_string = f"{name}/erag_per_query" if name else "erag_per_query"
    key = graph.key(user_string) if graph is not None else dg.AssetKey.from_user_string(user_string)
    try:
        records = (instance or _instance()).fetch_materializations(key, limit=1).records
    except Exception:  # no instance history: no notes, as a report not materialised yet
        return []
    if not records or records[0].asset_materialization is None:
        return []
    entry = records[0].asset_materialization.metadata.get(NOTES_KEY)
    text = str(entry.value) if entry is not None else ""
    return [] if text in ("", "none") else text.split("; ")


def load_fits(
    name: str | None,
    instance: dg.DagsterInstance | None = None,
    registry_path: str = "",
    verbose: bool = False,
    graph: Graph | None = None,
) -> list:
    """The fit diagnostics of dataset ``name``: the ``fit`` asset's value (computed once per
    run, :mod:`erag_dagster.orchestration.assets.fit`); ``[]`` when it is not materialised."""
    from erag_dagster.meta.fit import fit_from_dict

    try:
        rows = load_asset_value(
            f"{name}/fit" if name else "fit", instance, registry_path, verbose, graph
        )
    except Exception:  # not materialised (yet): no diagnostics
        return []
    return [fit_from_dict(row) for row in rows or []]


def print_reports(
    instance: dg.DagsterInstance | None = None,
    registry_path: str = "",
    only: Sequence[str] | None = None,
    verbose: bool = False,
    full: bool = True,
    tables_dir: Path | None = None,
    graph: Graph | None = None,
) -> None:
    """Print the report assets that exist (:func:`load_run_report`): the verdict first, then
    each table, compact unless ``full`` (``verbose``: with Dagster's console log of the loads,
    see :func:`load_asset_value`). With ``tables_dir`` every frame is first written there in
    full as CSV and parquet, and the text ends saying where."""
    report = load_run_report(instance, registry_path, only, verbose, graph)
    if tables_dir is not None:
        report.write_tables(tables_dir)
    print(report.text(full=full))
