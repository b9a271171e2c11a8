"""``html_report``: the run's reports as one self-contained HTML page (docs/html-report.md).

One unprefixed asset downstream of every dataset's reports: each dataset's report tables that have a
page block (their declarations, :mod:`erag_dagster.reports.catalog`: the human-judgment leaderboard,
Table 1 with Figure 1's png as its side file in
:func:`~erag_dagster.orchestration.assets.common.report_folder`, label agreement), and for a dataset
with reader stages what the page's story is drawn from (:data:`STORY_INPUTS`: ``erag_per_query``,
``verdict``, ``fit`` and ``doc_labels``, whose fingerprints name the readers); and the reports
across datasets the registry builds (:mod:`erag_dagster.orchestration.assets.reports`). Its inputs
are named ``<dataset>__<asset>`` (the bare asset name without a ``datasets`` section; the reports
across datasets by their own unprefixed names). The page is written to :func:`page_path`, replacing
the previous run's, because the parquet files it links to are replaced by each run too; the
materialisation's metadata links to it. The page itself is :mod:`erag_dagster.reports.html`'s.

Verdict: the page opens with each dataset's ``verdict`` asset (computed once per run,
:func:`erag_dagster.evaluation.steps.decide`: the same object ``erag-dagster run`` prints first).
"""

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path

import dagster as dg
import polars as pl

from erag_dagster.config.registry import Registry
from erag_dagster.core.hashing import sha256_text
from erag_dagster.meta.fit import expected_fit_lines, fit_from_dict, fit_lines
from erag_dagster.orchestration.assets.adapter import adapt
from erag_dagster.orchestration.assets.automation import RECOMPUTE_WHEN_STALE
from erag_dagster.orchestration.assets.common import (
    CODE_VERSION,
    by_system,
    key_prefix_of,
    report_folder,
)
from erag_dagster.orchestration.assets.html_inputs import (
    dataset_facts,
    label_cost,
    question_texts,
    registry_specs,
    worked_examples,
)
from erag_dagster.orchestration.assets.reports import build_across_assets
from erag_dagster.orchestration.resources import EvalSettings, LabelStoreResource
from erag_dagster.orchestration.resources.io import PolarsJsonIOManager, local_path
from erag_dagster.orchestration.resources.keys import UNPREFIXED, ResourceKeys
from erag_dagster.reports.catalog import BY_KEY, dataset_reports_for
from erag_dagster.reports.html import (
    DatasetSection,
    FitWarnings,
    dataset_erag_leaderboard,
    file_links,
    reader_identities,
    render_html_report,
    write_html_report,
)
from erag_dagster.reports.html_words import dataset_display_name
from erag_dagster.reports.verdict import Verdict

PAGE_NAME = "report.html"

#: What a dataset with reader stages contributes besides its report tables: the verdict, the
#: fit diagnostics, the per-query table (leaderboard, drill-down, examples) and the labels.
STORY_INPUTS = ("erag_per_query", "verdict", "fit", "doc_labels")


def page_path(key_prefix: Sequence[str] = ()) -> Path:
    """Where the page is written: ``reports/report.html`` under the storage root (under the
    eRAG component's ``key_prefix``: ``reports/<prefix parts>/report.html``)."""
    return report_folder(None, key_prefix) / PAGE_NAME


def _input_name(dataset: str | None, asset: str) -> str:
    return f"{dataset}__{asset}" if dataset else asset


def _page_reports(registry: Registry, name: str | None) -> list[str]:
    """The report tables of dataset ``name`` that the page shows (catalog order)."""
    view = registry.for_dataset(name)
    reports = dataset_reports_for(bool(view.reader_labels), not view.has_reference)
    return [r.key for r in reports if r.page is not None]


def _inputs(registry: Registry) -> dict[str, dg.AssetIn]:
    ins = {}
    for name in registry.dataset_names:
        prefix = [name] if name else []
        assets = _page_reports(registry, name)
        if registry.for_dataset(name).reader_labels:
            assets += [a for a in STORY_INPUTS if a not in assets]
        for asset in assets:
            ins[_input_name(name, asset)] = dg.AssetIn(key=dg.AssetKey([*prefix, asset]))
    for built in build_across_assets(registry):  # two or more datasets
        ins |= {key.path[-1]: dg.AssetIn(key=key) for key in built.keys}
    return ins


def _partitions(context: dg.AssetExecutionContext, name: str, value: object) -> dict:
    """A partitioned input as ``{partition key: frame}``: the IO manager hands a bare frame
    when one partition maps to the input (``**inputs`` carries no annotation)."""
    if isinstance(value, dict):
        return value
    (key,) = context.asset_partition_keys_for_input(name)
    return {key: value}


def _section(
    context: dg.AssetExecutionContext,
    settings: EvalSettings,
    name: str | None,
    inputs: dict[str, object],
    reader_identity: Callable[[str], dict | None],
    links: list[tuple[str, str | None]],
    base: Path | None,
    fit_warnings: FitWarnings = None,
) -> DatasetSection:
    """One dataset's part of the page from its inputs (absent ones stay ``None``) and what the
    run recorded beside them (:mod:`.html_inputs`; ``base``: the IO manager's local folder,
    ``None`` on an object store). ``fit_warnings``: the fit diagnostics' lines, if any. The
    recorded facts are read under the keys the dataset's assets have in this graph (the eRAG
    component's ``key_prefix``, then the dataset's name)."""
    registry, params = settings.registry(name), settings.resolve(name)
    key_prefix = key_prefix_of(context)
    prefix = [*key_prefix, *([name] if name else [])]
    value = {asset: inputs.get(_input_name(name, asset)) for asset in STORY_INPUTS}
    tables = {
        key: inputs.get(_input_name(name, key)) for key in _page_reports(settings.registry(), name)
    }
    folder = report_folder(name, key_prefix)
    side_files = {  # the files the reports' page blocks show (Figure 1's png)
        file: (folder / file).read_bytes()
        for key in tables
        for file in BY_KEY[key].side_files
        if (folder / file).is_file()
    }
    facts = dataset_facts(
        context.instance, prefix, name or dataset_display_name(params.dataset), params.dataset
    )
    per_query = value["erag_per_query"]
    found = Verdict.from_dict(value["verdict"]) if value["verdict"] else None  # the run's one
    if fit_warnings is None and value["fit"] is not None:  # the fit asset's, computed once
        fits = [fit_from_dict(row) for row in value["fit"]]
        fit_warnings = fit_lines(fits) + expected_fit_lines(fits)
    board = cost = queries = None
    examples: list = []
    identities = None
    if isinstance(per_query, pl.DataFrame) and per_query.height:
        board = dataset_erag_leaderboard(
            per_query,
            [m for m in params.list_metrics if m in per_query.columns],
            params.statistics,
            registry.retriever_partitions[0],
        )
        queries = question_texts(base, prefix)
    if value["doc_labels"] is not None:
        labels = _partitions(context, _input_name(name, "doc_labels"), value["doc_labels"])
        by = by_system(labels)
        identities = reader_identities(by, reader_identity)
        cost = label_cost(
            context.instance, dg.AssetKey([*prefix, "doc_labels"]), [str(k) for k in labels],
            sum(frame.height for frame in labels.values()),
        )  # fmt: skip
        if isinstance(per_query, pl.DataFrame) and per_query.height and found is not None:
            examples = worked_examples(base, prefix, per_query, by, found.metric, queries)
    return DatasetSection(
        name=facts.name,
        facts=facts,
        verdict=found,
        erag_per_query=per_query if isinstance(per_query, pl.DataFrame) else None,
        questions=dict(queries.select("query_id", "question").iter_rows())
        if queries is not None
        else {},
        downstream_metric=params.metric,
        cost=cost,
        examples=examples,
        fit_warnings=fit_warnings,
        erag_board=board,
        ranking_metric=params.list_metrics[0],
        reports={k: v for k, v in tables.items() if isinstance(v, pl.DataFrame)},
        side_files=side_files,
        identities=identities,
        specs=registry_specs(registry, facts),
        files=links,
        reference=_reference_words(params),
    )


def _reference_words(params) -> str | None:
    """``self@union: the reader's own answer from ...`` when the labels score against a
    reference answer (``evaluation.reference``), else ``None``."""
    from erag_dagster.labels.reference import parse_reference

    spec = parse_reference(params.reference)
    return None if spec is None else f"{spec.text}, {spec.describe(params.label_k)}"


def _html_report(
    context: dg.AssetExecutionContext,
    settings: EvalSettings,
    label_store: LabelStoreResource,
    io_manager: dg.ResourceParam[PolarsJsonIOManager],
    **inputs: object,
) -> dg.MaterializeResult:
    """Render and write the page (module docstring); metadata: its path and ``file://`` URL."""
    key_prefix = key_prefix_of(context)
    page = page_path(key_prefix)
    base = local_path(io_manager.base_path)
    stored = sorted(base.rglob("*.parquet")) if base is not None and base.is_dir() else []
    store = label_store.open()
    sections = []
    for name in settings.registry().dataset_names:
        if base is None:  # an object store: named, not linked
            links = [(f"{io_manager.base_path} (not on this disk: not linked)", None)]
        else:
            mine = base.joinpath(*key_prefix, *([name] if name else []))
            own = [f for f in stored if f.is_relative_to(mine)]
            tables = sorted(report_folder(name, key_prefix).glob("*.parquet"))
            links = file_links([*own, *tables], page.parent)
        sections.append(
            _section(context, settings, name, inputs, store.reader_identity, links, base)
        )
    across = {  # the reports across datasets the registry builds, by key
        key: frame
        for key, report in BY_KEY.items()
        if report.scope == "across" and isinstance(frame := inputs.get(key), pl.DataFrame)
    }
    html = render_html_report(
        sections, statistics=settings.resolve().statistics, run_id=context.run.run_id,
        written=datetime.now(UTC), across=across,
    )  # fmt: skip
    write_html_report(html, page)
    return dg.MaterializeResult(
        data_version=dg.DataVersion(sha256_text(html)[:16]),
        metadata={
            "report": dg.MetadataValue.path(str(page)),
            "report_url": dg.MetadataValue.url(page.as_uri()),
            "bytes": len(html.encode("utf-8")),
            "datasets": [s.name for s in sections],
        },
    )


def build_html_report(registry: Registry, keys: ResourceKeys = UNPREFIXED) -> dg.AssetsDefinition:
    """The ``html_report`` asset over ``registry``'s datasets (module docstring), resources
    under ``keys``."""
    return dg.asset(
        name="html_report",
        group_name="reports",
        code_version=CODE_VERSION,
        automation_condition=RECOMPUTE_WHEN_STALE,
        ins=_inputs(registry),
        io_manager_key=keys.io_manager,
    )(adapt(_html_report, keys))
