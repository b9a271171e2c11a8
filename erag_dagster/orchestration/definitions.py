"""The one ``Definitions`` object: assets, resources, jobs, schedules and sensors.

Partitions come from the registry (``$ERAG_REGISTRY`` or the packaged ``registry.yaml``), so the
asset graph is built by :func:`build_defs`, which parses the registry once and hands it to the
partitioned assets, the schedule and the settings resource; ``defs`` is the graph of the
default registry. A full re-evaluation (every partition of every asset) is an asset backfill
over this graph: see :func:`erag_dagster.orchestration.pipeline.request_full_reevaluation`.

Resources are chosen per deployment by ``$DAGSTER_DEPLOYMENT``
(:mod:`erag_dagster.orchestration.deployment`, as in Dagster's ``project_fully_featured`` example):
``local`` (the default; everything on this machine) or ``production`` (the parts several pods share
come from the environment: the label store URL ``$ERAG_LABEL_STORE`` and the IO manager's base
``$ERAG_ASSETS_URL``; see deploy/README.md).
"""

from collections.abc import Mapping, Sequence

import dagster as dg

from erag_dagster.config.registry import Registry, load_registry
from erag_dagster.orchestration.assets import (
    automation,
    data,
    fit,
    html_report,
    labels,
    meta,
    reports,
    retrieval,
    verdict,
)
from erag_dagster.orchestration.assets.common import prefixed, with_key_prefix
from erag_dagster.orchestration.deployment import deployment as current_deployment
from erag_dagster.orchestration.deployment import step_executor
from erag_dagster.orchestration.instance_settings import warn_once
from erag_dagster.orchestration.resources import EvalSettings, LabelStoreResource, ReaderResource
from erag_dagster.orchestration.resources.io import PolarsJsonIOManagerFactory
from erag_dagster.orchestration.resources.keys import UNPREFIXED, ResourceKeys


def source_assets(
    registry: Registry, key_prefix: Sequence[str] = (), keys: ResourceKeys = UNPREFIXED
) -> list[dg.SourceAsset]:
    """The observed external inputs: each dataset's ``dataset_files`` and ``reader_models``
    (one partition per registry reader, shared by every dataset), under ``key_prefix``."""
    return [
        *(
            automation.build_dataset_files(name, key_prefix, keys)
            for name in registry.dataset_names
        ),
        automation.build_reader_models(registry, key_prefix, keys),
    ]


def dataset_assets(
    registry: Registry,
    settings: EvalSettings | None = None,
    keys: ResourceKeys = UNPREFIXED,
    package_checks: bool = True,
) -> list[dg.AssetsDefinition]:
    """The materialisable assets of one dataset, partitioned by ``registry`` (the dataset's
    view: :meth:`Registry.for_dataset`), unprefixed. A dataset without ``reader_labels`` gets
    the human-judgment assets only. One whose labels score against a reference answer
    (``evaluation.reference``, :attr:`Registry.has_reference`) gets ``reference_answers``
    before ``doc_labels`` and no stage scored against gold answers (end-to-end answers,
    baselines, Table 1, label agreement). The label
    assets' ``code_version`` follows the metric and label methods of ``settings`` (default: the
    registry's; :mod:`erag_dagster.core.code_versions`). The report tables come from their
    declarations (:mod:`erag_dagster.reports.catalog`), each placed right after the last asset
    it reads (:func:`with_reports`). Every asset binds its resources under ``keys``.

    The order is the order of the main job
    (:func:`erag_dagster.orchestration.pipeline.materialize_all`) among assets that do not depend on
    each other.
    """
    stages = [
        data.build_dataset_tables(keys),
        *retrieval.build_indexes(keys),
        retrieval.build_retrieval_run(registry, keys),
        *filter(None, [retrieval.build_rerank_lift(registry, keys)]),
    ]
    if registry.reader_labels:
        stages += [
            *([labels.build_reference_answers(registry, keys)] if registry.has_reference else []),
            labels.build_doc_labels(registry, settings, keys),
            verdict.build_verdict(keys, methods=_ranks_by_a_label_method(registry, settings)),
            fit.build_fit(keys),
            # scored against gold answers: none with a reference (evaluation.reference)
            *(
                []
                if registry.has_reference
                else meta.build_meta_partitioned(registry, settings, keys)
            ),
        ]
    return with_reports(stages, reports.build_report_assets(registry, keys, package_checks))


def _ranks_by_a_label_method(registry: Registry, settings: EvalSettings | None) -> bool:
    """Whether the verdict reads ``baseline_labels`` (``evaluation.verdict_labels`` names a
    label method, and the graph scores against gold): only then does it wait for the
    meta-evaluation stage; eRAG's own labels need nothing past ``erag_per_query``."""
    from erag_dagster.orchestration.assets.common import evaluation_of

    ranked = evaluation_of(registry, settings).verdict_labels != "eRAG"
    return ranked and not registry.has_reference


def with_reports(
    stages: list[dg.AssetsDefinition], built: list[dg.AssetsDefinition]
) -> list[dg.AssetsDefinition]:
    """``stages`` with each report of ``built`` (in its catalog order) inserted right after the
    last asset it reads, and never before the report inserted before it."""
    ordered = list(stages)
    floor = 0
    for report in built:
        reads = {dep.asset_key for dep in report.specs_by_key[report.key].deps}
        after = [i for i, a in enumerate(ordered) if reads & set(a.keys)]
        position = max([floor, *(i + 1 for i in after)])
        ordered.insert(position, report)
        floor = position + 1
    return ordered


def build_assets(
    registry: Registry,
    settings: EvalSettings | None = None,
    keys: ResourceKeys = UNPREFIXED,
    package_checks: bool = True,
) -> list[dg.AssetsDefinition]:
    """Every materialisable asset: :func:`dataset_assets` once per registry dataset, its keys
    prefixed by the dataset's name (none without a ``datasets`` section), then the reports across
    datasets (:mod:`erag_dagster.orchestration.assets.reports`; two or more datasets) and the run's
    HTML page (:mod:`erag_dagster.orchestration.assets.html_report`); resources under ``keys``;
    ``package_checks`` as :func:`build_defs`'s."""
    per_dataset = [
        asset
        for name in registry.dataset_names
        for asset in prefixed(
            dataset_assets(registry.for_dataset(name), settings, keys, package_checks), name
        )
    ]
    return [
        *per_dataset,
        *reports.build_across_assets(registry, keys),
        html_report.build_html_report(registry, keys),
    ]


def build_resources(
    registry: Registry, settings: EvalSettings | None = None, deployment: str | None = None
) -> dict[str, object]:
    """The resources of ``deployment`` (default
    :func:`erag_dagster.orchestration.deployment.deployment`), by their names
    (:data:`~erag_dagster.orchestration.resources.keys.RESOURCE_NAMES`; :func:`build_defs` binds
    them under the graph's keys); every value is overridable through run config.

    ``local``: single-machine defaults (store and assets under the storage root). ``production``:
    the label store and the IO manager base path from environment variables read at run time
    (``dg.EnvVar``: the UI and run config show the variable's name, never its value).
    ``settings`` (default: all from the registry) is bound to ``registry``, so run config
    cannot point it at another registry file than the one the partitions came from.
    """
    name = deployment or current_deployment()
    shared = {
        "settings": (settings or EvalSettings()).bound_to(registry),
        "reader": ReaderResource(),
    }
    if name == "production":
        return shared | {
            "label_store": LabelStoreResource(path=dg.EnvVar("ERAG_LABEL_STORE")),
            "io_manager": PolarsJsonIOManagerFactory(base_dir=dg.EnvVar("ERAG_ASSETS_URL")),
        }
    return shared | {
        "label_store": LabelStoreResource(),
        "io_manager": PolarsJsonIOManagerFactory(),
    }


def build_defs(
    registry_path: str | None = None,
    settings: EvalSettings | None = None,
    *,
    registry: Registry | None = None,
    key_prefix: Sequence[str] = (),
    resources: Mapping[str, object] | None = None,
    deployment: str | None = None,
    package_checks: bool = True,
) -> dg.Definitions:
    """The Definitions for a registry file (default: ``$ERAG_REGISTRY`` or the packaged one),
    or for an already parsed ``registry`` (the eRAG component's:
    :mod:`erag_dagster.orchestration.component`).

    ``key_prefix``: every asset key (and the op names, jobs, schedule and sensors) under it, applied
    as the assets are built (:func:`~erag_dagster.orchestration.assets.common.with_key_prefix`); the
    automation sensor then targets these assets only, and the resources are bound under keys of the
    prefix too (:class:`~erag_dagster.orchestration.resources.keys.ResourceKeys`: ``erag__settings``
    for ``[erag]``), so several graphs share one code location. ``resources``: values replacing
    those of :func:`build_resources`, by name (``None`` as a value drops that resource; a dropped
    ``io_manager`` means the graph stores through the code location's own ``io_manager``);
    ``deployment``: as there. ``package_checks``: the checks that hold only for this package's own
    default run (``readme_figures``), off in a team's project.
    """
    if registry is None:
        registry = load_registry(registry_path or (settings.registry_path if settings else None))
    prefix = list(key_prefix)
    named = {**build_resources(registry, settings, deployment), **(resources or {})}
    keys = ResourceKeys(tuple(prefix), shared_io_manager=named.get("io_manager") is None)
    observe = automation.build_observe_inputs_job(registry, prefix)
    assets = build_assets(registry, settings, keys, package_checks)
    inputs = [automation.dataset_files_key(n) for n in registry.dataset_names]
    own = {key for a in assets for key in a.keys} | {*inputs, automation.READER_MODELS}
    return dg.Definitions(
        assets=[*source_assets(registry, prefix, keys), *with_key_prefix(assets, prefix, own)],
        jobs=[observe],
        schedules=[automation.build_reevaluation_schedule(registry, observe, prefix, keys)],
        sensors=[
            automation.build_automation_sensor(prefix),
            automation.build_input_change_sensor(observe, prefix, keys),
        ],
        resources={keys.key(k): v for k, v in named.items() if v is not None},
        executor=step_executor(deployment),  # production: a Kubernetes job per step (deploy/)
    )


# A code server (or run worker) whose $DAGSTER_HOME lacks the gpu pool's or the run queue's limit:
# one line saying what to add, once per process (erag_dagster/orchestration/instance_settings.py).
warn_once()
defs = build_defs()
