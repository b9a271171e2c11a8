"""Quality checks of the assets' values, as plain functions (no Dagster): each returns a
:class:`CheckOutcome` ``(passed, description, metadata)``;
``erag_dagster.orchestration.assets.checks`` turns them into Dagster asset check results.

Policies (where the issue left a choice):

- **Retrieval depth.** A query's list has at most ``k`` rows, ranks ``1..n`` without a gap and no
  document twice. A retriever that scores every document (:func:`scores_every_document`: dense, or
  a hybrid fusing one with ``depth >= k``) must return exactly ``min(k, documents)`` rows for every
  query of the dataset; a lexical one (BM25) returns only documents sharing a term with the query,
  so it may return fewer (or none); such short lists are counted in the metadata, not refused.
- **Labels.** Every ``(query, doc)`` of the run's top ``label_k`` has one label, a number in
  ``[0, 1]`` (null and NaN fail), all from the reader fingerprint of the partition.
- **Regression.** A figure with a bootstrap CI regresses when its new value lies outside the
  ``[low, high]`` interval of the previous materialisation (a change larger than that run's own
  uncertainty). Rows are matched on the report's text columns; new or vanished rows are counted.
- **README figures.** The ``report_asset`` entries of ``reproductions/default_run.yaml`` are
  checked only for the default run (the packaged registry's configs and evaluation settings):
  otherwise the check passes, saying it does not apply.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, NamedTuple

import polars as pl
import yaml

from erag_dagster.meta.correlation import CI_COLUMNS as CORRELATION_CI
from erag_dagster.meta.correlation import CI_NOTE_COLUMNS as CORRELATION_NOTES
from erag_dagster.retrieval.ann import parse_index

#: The reproduction entries of the default run (next to the package in a source checkout).
DEFAULT_RUN_FIGURES = Path(__file__).resolve().parents[2] / "reproductions" / "default_run.yaml"


class CheckOutcome(NamedTuple):
    """A check's verdict: ``passed``, a one-line ``description`` and ``metadata`` (JSON-able)."""

    passed: bool
    description: str
    metadata: dict[str, Any]


# --- retrieval runs -------------------------------------------------------------------------


def scores_every_document(retrievers: dict[str, dict[str, Any]], name: str, k: int) -> bool:
    """Whether retriever ``name`` (registry configs by name) ranks every document of the corpus
    down to depth ``k``: dense over a flat index does (an approximate one may return fewer);
    BM25 does not (only term-matching documents), nor do run files and rerankers (their first
    stage decides); a hybrid does when one of its fused retrievers does and its per-retriever
    ``depth`` is >= ``k``."""
    config = retrievers[name]
    kind = config.get("kind")
    if kind == "dense":
        return not parse_index(config.get("index")).approximate
    if kind == "hybrid":
        depth = int(config.get("depth", k))
        fused = config.get("fuse") or []
        return depth >= k and any(scores_every_document(retrievers, f, k) for f in fused)
    return False


def check_retrieval_run(
    run: pl.DataFrame,
    query_ids: list[str],
    k: int,
    documents: int,
    exhaustive: bool,
) -> CheckOutcome:
    """``run`` (``query_id, doc_id, rank``) against the depth policy of the module docstring:
    ``k`` the requested depth, ``documents`` the corpus size, ``query_ids`` the dataset's
    queries, ``exhaustive`` from :func:`scores_every_document`."""
    depth = min(k, documents)
    per_query = run.group_by("query_id").agg(
        pl.len().alias("rows"),
        pl.col("rank").min().alias("first"),
        pl.col("rank").max().alias("last"),
    )
    duplicates = run.filter(pl.struct("query_id", "doc_id").is_duplicated())
    too_long = per_query.filter(pl.col("rows") > depth)
    gaps = per_query.filter((pl.col("first") != 1) | (pl.col("last") != pl.col("rows")))
    short = per_query.filter(pl.col("rows") < depth)
    missing = sorted(set(query_ids) - set(per_query.get_column("query_id").to_list()))
    metadata: dict[str, Any] = {
        "k": k,
        "documents": documents,
        "expected_rows_per_query": depth,
        "queries": per_query.height,
        "rows": run.height,
        "short_lists": short.height,
        "queries_without_results": len(missing),
        "duplicate_pairs": duplicates.height,
        "scores_every_document": exhaustive,
    }
    if duplicates.height:
        row = duplicates.row(0, named=True)
        pair = f"({row['query_id']}, {row['doc_id']})"
        why = f"{duplicates.height} duplicate (query, doc) rows, e.g. {pair}"
    elif too_long.height:
        row = too_long.row(0, named=True)
        why = f"query {row['query_id']} has {row['rows']} rows, more than k={depth}"
    elif gaps.height:
        row = gaps.row(0, named=True)
        ranks = f"{row['first']}..{row['last']}"
        why = f"query {row['query_id']} has ranks {ranks} for {row['rows']} rows"
    elif exhaustive and (short.height or missing):
        row = short.row(0, named=True) if short.height else {"query_id": missing[0], "rows": 0}
        why = (
            f"query {row['query_id']} has {row['rows']} rows, want {depth} "
            f"(the retriever ranks every document)"
        )
    else:
        note = f"; {short.height} lexical short lists" if short.height else ""
        return CheckOutcome(
            True, f"{per_query.height} queries, <= {depth} rows each, no duplicate{note}", metadata
        )
    return CheckOutcome(False, why, metadata)


# --- labels ---------------------------------------------------------------------------------


def check_doc_labels(labels: pl.DataFrame, top_run: pl.DataFrame, fingerprint: str) -> CheckOutcome:
    """Every ``(query_id, doc_id)`` of ``top_run`` (the run's top ``label_k``) has exactly one
    row in ``labels`` with ``label`` in ``[0, 1]`` (not null, not NaN) and ``reader_fingerprint``
    equal to ``fingerprint``; no label for a pair outside ``top_run``."""
    keys = ["query_id", "doc_id"]
    wanted = top_run.select(keys).unique()
    got = labels.select(keys)
    missing = wanted.join(got, on=keys, how="anti")
    extra = got.join(wanted, on=keys, how="anti")
    repeated = labels.filter(pl.struct(keys).is_duplicated())
    value = pl.col("label").cast(pl.Float64)
    bad = labels.filter(value.is_null() | value.is_nan() | (value < 0) | (value > 1))
    foreign = labels.filter(pl.col("reader_fingerprint") != fingerprint)
    metadata: dict[str, Any] = {
        "pairs": wanted.height,
        "labels": labels.height,
        "missing_pairs": missing.height,
        "extra_pairs": extra.height,
        "out_of_range": bad.height,
        "foreign_fingerprint": foreign.height,
        "reader_fingerprint": fingerprint,
    }
    if missing.height:
        row = missing.row(0, named=True)
        return CheckOutcome(
            False,
            f"{missing.height} top-k pairs have no label, "
            f"e.g. ({row['query_id']}, {row['doc_id']})",
            metadata,
        )
    if extra.height or repeated.height:
        return CheckOutcome(
            False, f"{extra.height} labels outside the top-k, {repeated.height} repeated", metadata
        )
    if bad.height:
        row = bad.row(0, named=True)
        return CheckOutcome(
            False,
            f"{bad.height} labels outside [0, 1], e.g. {row['label']} at "
            f"({row['query_id']}, {row['doc_id']})",
            metadata,
        )
    if foreign.height:
        row = foreign.row(0, named=True)
        return CheckOutcome(
            False,
            f"{foreign.height} labels from reader {str(row['reader_fingerprint'])[:16]}, "
            f"not the partition's reader {fingerprint[:16]}",
            metadata,
        )
    return CheckOutcome(
        True, f"{labels.height} labels in [0, 1] for every top-k pair, one reader", metadata
    )


# --- reports --------------------------------------------------------------------------------


def check_not_empty(
    report: pl.DataFrame, name: str, why_empty_is_fine: str | None = None
) -> CheckOutcome:
    """``report`` has at least one row; ``why_empty_is_fine`` (e.g. no judgments) lets an empty
    report pass, saying why."""
    metadata: dict[str, Any] = {"rows": report.height, "columns": len(report.columns)}
    if report.height:
        return CheckOutcome(True, f"{name}: {report.height} rows", metadata)
    if why_empty_is_fine:
        return CheckOutcome(True, f"{name}: empty, as expected ({why_empty_is_fine})", metadata)
    return CheckOutcome(False, f"{name} is empty", metadata)


def ci_columns(report: pl.DataFrame) -> dict[str, tuple[str, str]]:
    """Each figure column with its bootstrap CI columns: ``X`` with ``X_low``/``X_high``
    (leaderboard) and the correlation table's ``kendall_tau``/``spearman_rho``."""
    found = {
        c: (f"{c}_low", f"{c}_high")
        for c in report.columns
        if f"{c}_low" in report.columns and f"{c}_high" in report.columns
    }
    for column, (low, high) in CORRELATION_CI.items():
        if {column, low, high} <= set(report.columns):
            found[column] = (low, high)
    return found


def ci_figures(report: pl.DataFrame) -> list[dict[str, Any]]:
    """The report's CI-carrying figures as records ``{row, figure, value, low, high}``; ``row``
    joins the row's text columns with `` / `` (its identity; the correlation table's
    ``*_ci_note`` annotations are not). Empty when no column has a CI."""
    columns = ci_columns(report)
    notes = {note for _, note in CORRELATION_NOTES.values()}
    keys = [c for c, t in report.schema.items() if t == pl.String and c not in notes]
    if not columns:
        return []
    rows = report.select(
        pl.concat_str([pl.col(k).fill_null("") for k in keys], separator=" / ").alias("row")
        if keys
        else pl.int_range(pl.len()).cast(pl.String).alias("row"),
        *[
            pl.col(c).cast(pl.Float64)
            for c in {x for trio in columns.items() for x in (trio[0], *trio[1])}
        ],
    )
    records = []
    for row in rows.iter_rows(named=True):
        for figure, (low, high) in columns.items():
            records.append(
                {
                    "row": row["row"],
                    "figure": figure,
                    "value": row[figure],
                    "low": row[low],
                    "high": row[high],
                }
            )
    return records


#: Relative slack for comparing a value with a CI bound: the mean and the bootstrap percentile
#: of a constant column are the same number computed two ways (they differ in the last bits).
_ROUNDING = 1e-9


def _defined(*values: Any) -> bool:
    return all(v is not None and not math.isnan(v) for v in values)


def check_regression(
    current: list[dict[str, Any]], previous: list[dict[str, Any]] | None
) -> CheckOutcome:
    """Each figure of ``current`` (:func:`ci_figures`) against the same ``(row, figure)`` of the
    ``previous`` materialisation: fails when the new value is outside the previous ``[low,
    high]`` (widened by :data:`_ROUNDING`, relative). Undefined (NaN/null) values are not
    compared. ``previous`` None: first materialisation, passes."""
    if previous is None:
        return CheckOutcome(
            True, "first materialisation: nothing to compare", {"figures": len(current)}
        )
    before = {(p["row"], p["figure"]): p for p in previous}
    moved, compared = [], 0
    for fig in current:
        old = before.get((fig["row"], fig["figure"]))
        if old is None or not _defined(fig["value"], old["value"], old["low"], old["high"]):
            continue
        compared += 1
        slack = _ROUNDING * max(1.0, abs(fig["value"]))  # a mean equal to a CI bound
        if not old["low"] - slack <= fig["value"] <= old["high"] + slack:
            moved.append(
                f"{fig['row']} {fig['figure']}: {old['value']:.4f} -> {fig['value']:.4f} "
                f"(previous CI [{old['low']:.4f}, {old['high']:.4f}])"
            )
    keys_now = {(f["row"], f["figure"]) for f in current}
    metadata: dict[str, Any] = {
        "compared": compared,
        "outside_previous_ci": len(moved),
        "new_figures": len(keys_now - set(before)),
        "vanished_figures": len(set(before) - keys_now),
        "changes": moved[:20],
    }
    if moved:
        return CheckOutcome(
            False,
            f"{len(moved)} of {compared} figures moved outside their previous CI: {moved[0]}",
            metadata,
        )
    return CheckOutcome(True, f"{compared} figures within their previous CI", metadata)


# --- README figures -------------------------------------------------------------------------


def report_value(report: pl.DataFrame, condition: dict[str, Any]) -> float:
    """The value a ``report_asset`` condition names in ``report``: the rows whose ``where``
    columns equal the wanted value (or one of a list), or start with ``value + "-"`` (a registry
    name matches its partition keys), then ``column``'s only value (``aggregate: only``) or its
    largest non-NaN value (``aggregate: max``). ``reader`` on a table without that column (the
    correlation table names systems ``"<retriever> / <reader>"`` in ``retriever``) matches the
    system's reader part. ``ValueError`` when not exactly one row (only) or no defined value
    (max) matches."""
    mask = pl.lit(True)
    for column, wanted in (condition.get("where") or {}).items():
        options = [str(w) for w in (wanted if isinstance(wanted, list) else [wanted])]
        text = pl.col(column).cast(pl.String)
        if column == "reader" and "reader" not in report.columns:
            text = pl.col("retriever").cast(pl.String).str.split(" / ").list.last()
        mask = mask & pl.any_horizontal(
            *[(text == o) | text.str.starts_with(f"{o}-") for o in options]
        )
    values = report.filter(mask).get_column(condition["column"]).drop_nulls()
    if condition.get("aggregate", "only") == "max":  # tau is NaN for a constant column
        finite = values.cast(pl.Float64).drop_nans()
        if finite.len() == 0:
            raise ValueError(f"no defined {condition['column']} at {condition.get('where')}")
        return float(finite.max())
    if values.len() != 1:
        raise ValueError(f"{values.len()} rows match {condition.get('where')}, want 1")
    return float(values[0])


def load_report_figures(asset: str, path: Path = DEFAULT_RUN_FIGURES) -> list[dict[str, Any]]:
    """The ``report_asset`` entries of ``path`` for report ``asset`` (empty when the file is
    absent, e.g. an installed package without the source checkout)."""
    if not path.is_file():
        return []
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    return [
        e
        for e in data.get("entries") or []
        if e["condition"].get("kind") == "report_asset" and e["condition"].get("asset") == asset
    ]


def check_readme_figures(
    report: pl.DataFrame, entries: list[dict[str, Any]], not_default: str | None
) -> CheckOutcome:
    """Each entry's value in ``report`` within ``tolerance`` of ``expected``
    (:func:`load_report_figures`). ``not_default``: why this run is not the default run (then
    the check passes, saying the figures do not apply)."""
    if not_default:
        return CheckOutcome(True, f"README figures do not apply: {not_default}", {"applies": False})
    if not entries:
        return CheckOutcome(True, "no README figure concerns this report", {"applies": False})
    wrong = []
    for entry in entries:
        try:
            value = report_value(report, entry["condition"])
        except (ValueError, pl.exceptions.PolarsError) as error:
            wrong.append(f"{entry['id']}: {error}")
            continue
        if math.isnan(value) or abs(value - float(entry["expected"])) > float(entry["tolerance"]):
            wrong.append(f"{entry['id']}: {value:.4f}, README {entry['expected']}")
    metadata: dict[str, Any] = {"applies": True, "figures": len(entries), "wrong": wrong}
    if wrong:
        return CheckOutcome(
            False, f"{len(wrong)} of {len(entries)} README figures differ: {wrong[0]}", metadata
        )
    return CheckOutcome(True, f"all {len(entries)} README figures of this report hold", metadata)
