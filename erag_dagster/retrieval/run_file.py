"""A run produced by another system, validated against the dataset: a file (``kind: run_file``)
or the value of an upstream Dagster asset of the user's project (``kind: asset``, the component:
:func:`load_run_value`; a frame or a run file path), both under the policies below.

Formats: a TREC run file (``qid Q0 docid rank score tag``, :func:`~erag_dagster.retrieval.runs.
read_trec_run`) or a parquet file with columns ``query_id, doc_id, score`` (any other column,
``rank`` included, is ignored). Either way ranks are recomputed from the scores in trec_eval's
order, so the run is evaluated, labelled and answered from exactly as trec_eval would read it.

Policies:

- **Identity.** The registry hashes the file's bytes (:mod:`erag_dagster.config.registry`); a
  file that changed after the registry was read is refused (its results would be stored under
  the old content's partition).
- **Empty.** A run with no row is refused (:func:`~erag_dagster.retrieval.runs.
  refuse_empty_run`: one rule for a TREC file, a parquet file and a frame), and so is a run none
  of whose queries is a query of the dataset (nothing of it would be evaluated).
- **Unknown ids.** A query or document id that is not in the dataset is an error naming the
  first one in file order, with ``file:line`` (TREC) or ``file (row N)`` (parquet, 1-based).
  Exception: when the dataset spec keeps a subset of the questions (``max_questions``,
  ``spread_questions``; ``question_subset=True``), a run made over all of them is expected, so
  its queries outside the subset are dropped, counted (``run_queries_outside_dataset``) and
  named (:attr:`RunFileRun.outside_ids`; the ``run_file`` kind logs them); the corpus is whole,
  so every document id is still checked. The regression gate passes its own
  ``--drop-unknown-queries`` here instead of the spec's subset (docs/gate.md).
- **Missing queries.** Queries of the dataset with no line in the run are counted
  (:attr:`RunFileRun.queries_missing`) and kept as empty lists, as trec_eval does (each scores 0
  on every measure when evaluated over all judged queries).
- **Depth.** Each query's list is cut to the evaluation's ``k``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from erag_dagster.core.errors import InputError
from erag_dagster.core.input_files import (
    as_polars_frame,
    regular_file,
    regular_file_sha256,
    text_lines,
)
from erag_dagster.retrieval.runs import (
    check_run_frame,
    rank_by_score,
    read_trec_run,
    refuse_empty_run,
    top_k,
    validate_run,
)


@dataclass(frozen=True)
class RunFileRun:
    """The validated run (cut to ``k``) and what reading it found: the file's rows, its queries
    that are in the dataset, the dataset's queries it lacks, its queries outside the dataset."""

    run: pl.DataFrame
    rows_in_file: int
    queries_in_file: int
    queries_missing: int
    queries_outside: int = 0
    outside_ids: tuple[str, ...] = ()
    """The run's queries left out as outside the dataset (sorted), each named where it is said."""

    def left_out_line(self, source: str, shown: int = 20) -> str:
        """One line naming the queries left out (:attr:`outside_ids`; the first ``shown`` of
        them, then a count), ``""`` when none was."""
        if not self.outside_ids:
            return ""
        ids = self.outside_ids
        more = f", … {len(ids) - shown} more" if len(ids) > shown else ""
        return (
            f"{source}: {len(ids)} queries of the run are not among the dataset's questions and "
            f"were left out: {', '.join(repr(q) for q in ids[:shown])}{more}"
        )

    def metadata(self) -> dict[str, int]:
        return {
            "run_file_rows": self.rows_in_file,
            "run_file_queries": self.queries_in_file,
            "queries_missing_from_run": self.queries_missing,
            "run_queries_outside_dataset": self.queries_outside,
        }


def read_parquet_run(path: Path) -> pl.DataFrame:
    """A parquet run's ``query_id, doc_id, score`` (ids cast to text), ranked by score."""
    regular_file(path)  # the input rule; then polars maps the file
    try:
        frame = pl.read_parquet(path)
    except Exception as exc:  # polars raises several types for a file that is not parquet
        raise InputError(f"{path}: unreadable parquet run ({str(exc).splitlines()[0]})") from None
    missing = [c for c in ("query_id", "doc_id", "score") if c not in frame.columns]
    if missing:
        raise InputError(
            f"{path}: parquet run lacks column(s) {', '.join(missing)}; "
            "it needs query_id, doc_id, score"
        )
    frame = frame.select(
        pl.col("query_id").cast(pl.String), pl.col("doc_id").cast(pl.String), "score"
    )
    nulls = frame.with_row_index("row", offset=1).filter(pl.any_horizontal(pl.all().is_null()))
    if nulls.height:
        raise InputError(f"{path} (row {nulls.item(0, 'row')}): null query_id, doc_id or score")
    try:
        frame = frame.with_columns(pl.col("score").cast(pl.Float64, strict=True))
    except pl.exceptions.InvalidOperationError:
        raise InputError(f"{path}: column score is not numeric") from None
    refuse_empty_run(frame, str(path))
    return validate_run(rank_by_score(frame), source=str(path))


def run_format(path: str | Path) -> str:
    """``parquet`` for a ``.parquet`` file, else ``trec``: how a run file given by path (a gate
    ref, ``label --run``, an asset's value) is read."""
    return "parquet" if Path(path).suffix.lower() == ".parquet" else "trec"


def read_run_file(path: str | Path) -> pl.DataFrame:
    """A TREC or parquet run file (:func:`run_format`), read and checked, ranked by score."""
    path = Path(path)
    return read_parquet_run(path) if run_format(path) == "parquet" else read_trec_run(path)


def _first_unknown(
    path: Path, fmt: str, queries: set[str], docs: set[str], skip_other_queries: bool
) -> tuple[str, str, str]:
    """``(where, what, id)`` of the first line/row naming an unknown query or document (lines
    of queries outside ``queries`` skipped when ``skip_other_queries``)."""
    if fmt == "trec":
        rows = ((f"{path}:{n}", line.split()) for n, line in text_lines(path))
        pairs = ((where, f[0], f[2]) for where, f in rows if f)
        return _first_bad(pairs, queries, docs, skip_other_queries)
    columns = ["query_id", "doc_id"]
    frame = pl.read_parquet(regular_file(path), columns=columns).cast(pl.String)
    pairs = ((f"{path} (row {n})", q, d) for n, (q, d) in enumerate(frame.iter_rows(), start=1))
    return _first_bad(pairs, queries, docs, skip_other_queries)


def _first_bad(pairs, queries: set[str], docs: set[str], skip: bool) -> tuple[str, str, str]:
    for where, query, doc in pairs:
        if query not in queries and not skip:
            return where, "query_id", query
        if doc not in docs:
            return where, "doc_id", doc
    raise AssertionError("an unknown id was found but no line names it")  # pragma: no cover


def load_run_file(
    path: str | Path,
    fmt: str,
    sha256: str,
    queries: pl.DataFrame,
    corpus: pl.DataFrame,
    k: int | None,
    question_subset: bool = False,
    unknown_query_hint: str = "",
) -> RunFileRun:
    """Read and validate the run file at ``path`` (``fmt`` ``trec`` or ``parquet``) whose bytes
    must hash to ``sha256``, against the dataset's ``queries`` and ``corpus``; cut to ``k``
    (``None``: not cut). ``question_subset``: the run's queries outside ``queries`` are left
    out and named, not refused (module docstring); ``unknown_query_hint`` ends the line that
    refuses an unknown query (what the caller offers instead)."""
    path = Path(path)
    try:
        digest = regular_file_sha256(path)
    except OSError as exc:
        raise InputError(f"{path}: cannot read the run file ({exc.strerror or exc})") from None
    if digest != sha256:
        raise InputError(
            f"{path}: the run file changed after the registry was read (sha256 {digest[:16]}..., "
            f"registry {sha256[:16]}...); reload the definitions to make it a new partition"
        )
    run = read_trec_run(path) if fmt == "trec" else read_parquet_run(path)

    def locate(queries_known: set[str], docs_known: set[str]) -> tuple[str, str, str]:
        return _first_unknown(path, fmt, queries_known, docs_known, question_subset)

    return against_dataset(
        run, queries, corpus, k, question_subset, locate, str(path), unknown_query_hint
    )


def against_dataset(
    run: pl.DataFrame,
    queries: pl.DataFrame,
    corpus: pl.DataFrame,
    k: int | None,
    question_subset: bool,
    locate: Callable[[set[str], set[str]], tuple[str, str, str]],
    source: str,
    unknown_query_hint: str = "",
) -> RunFileRun:
    """The module's policies on a read ``run`` (every door that checks a run against a dataset
    comes here: a registry run file, an asset's run, a gate ref, ``label``'s run): unknown ids
    refused (``locate(query ids, doc ids)`` names the first offending line or row;
    ``unknown_query_hint`` ends the line when the id is a query's), queries outside a question
    subset dropped, counted and named, a run with nothing left for the dataset refused
    (``source`` names it), missing queries counted, each list cut to ``k`` (``None``: kept)."""
    query_ids = queries.get_column("query_id").cast(pl.String).implode()
    doc_ids = corpus.get_column("doc_id").cast(pl.String).implode()
    unknown = run.filter(
        ~pl.col("doc_id").is_in(doc_ids)
        | (~pl.col("query_id").is_in(query_ids) & pl.lit(not question_subset))
    )
    if unknown.height:
        where, what, value = locate(
            set(queries["query_id"].cast(pl.String)), set(corpus["doc_id"].cast(pl.String))
        )
        hint = unknown_query_hint if what == "query_id" and unknown_query_hint else ""
        raise InputError(
            f"{where}: {what} {value!r} is not in the dataset "
            f"({unknown.height} run rows name an unknown query or document){hint}"
        )
    rows = run.height
    outside = sorted(
        run.filter(~pl.col("query_id").is_in(query_ids)).get_column("query_id").unique()
    )
    run = run.filter(pl.col("query_id").is_in(query_ids))
    if rows and not run.height:
        raise InputError(
            f"{source}: none of its {len(outside)} queries is a query of the dataset (e.g. "
            f"{outside[0]!r}); nothing of it would be evaluated: is it the run of another "
            "dataset?"
        )
    in_file = run.get_column("query_id").n_unique()
    return RunFileRun(
        run=top_k(run, k) if k is not None else run,
        rows_in_file=rows,
        queries_in_file=in_file,
        queries_missing=queries["query_id"].n_unique() - in_file,
        queries_outside=len(outside),
        outside_ids=tuple(outside),
    )


def run_against_dataset(
    run: pl.DataFrame,
    queries: pl.DataFrame,
    corpus: pl.DataFrame,
    k: int | None,
    *,
    path: str | Path | None = None,
    source: str = "run frame",
    question_subset: bool = False,
) -> RunFileRun:
    """:func:`against_dataset` for a run already read: from the file at ``path`` (an unknown
    id named at its ``file:line`` or ``file (row N)``), else a frame (named by ``source`` and
    its row, 1-based, in the ranked run's order)."""
    if path is not None:
        file = Path(path)

        def locate(queries_known: set[str], docs_known: set[str]) -> tuple[str, str, str]:
            fmt = run_format(file)
            return _first_unknown(file, fmt, queries_known, docs_known, question_subset)

        return against_dataset(run, queries, corpus, k, question_subset, locate, str(file))

    def locate_row(queries_known: set[str], docs_known: set[str]) -> tuple[str, str, str]:
        pairs = (
            (f"{source} (row {n})", q, d)
            for n, (q, d) in enumerate(run.select("query_id", "doc_id").iter_rows(), start=1)
        )
        return _first_bad(pairs, queries_known, docs_known, question_subset)

    return against_dataset(run, queries, corpus, k, question_subset, locate_row, source)


def run_from_value(value: object, source: str) -> pl.DataFrame:
    """The run an upstream Dagster asset produced (``kind: asset``), ranked as a run file is.

    ``value``: a polars or pandas frame with ``query_id, doc_id`` and ``score`` and/or
    ``rank`` (with ``score`` the ranks are recomputed from it in trec_eval's order, as for a
    parquet run; with ``rank`` only, the score is ``-rank``, so rank 1 stays first), or a path
    (``str``/``Path``) to a TREC run or a ``.parquet`` run file. ``source`` names the asset in
    errors. Anything else is an :class:`InputError` naming the type it got.
    """
    if isinstance(value, str | Path):
        path = Path(value)
        if not path.is_file():
            raise InputError(f"{source}: its value is a path, {path}, which is not a file")
        return read_run_file(path)
    frame = as_polars_frame(value)  # polars, or pandas turned into polars
    value = frame if frame is not None else value
    if not isinstance(value, pl.DataFrame):
        raise InputError(
            f"{source}: its value is a {type(value).__name__}; a retriever of kind asset needs a "
            "polars/pandas frame (query_id, doc_id, rank and/or score) or a run file path"
        )
    has = set(value.columns)
    if not {"query_id", "doc_id"} <= has or not has & {"rank", "score"}:
        raise InputError(
            f"{source}: the run frame has columns {sorted(has)}; it needs query_id, doc_id and "
            "rank and/or score"
        )
    if "score" not in has:  # its own ranks decide: a rank twice, or below 1, as a run file's
        check_run_frame(value, source)
    frame = value.select(
        pl.col("query_id").cast(pl.String),
        pl.col("doc_id").cast(pl.String),
        (pl.col("score") if "score" in has else -pl.col("rank")).alias("score"),
    )
    nulls = frame.with_row_index("row", offset=1).filter(pl.any_horizontal(pl.all().is_null()))
    if nulls.height:
        raise InputError(f"{source} (row {nulls.item(0, 'row')}): null query_id, doc_id or score")
    try:
        frame = frame.with_columns(pl.col("score").cast(pl.Float64, strict=True))
    except pl.exceptions.InvalidOperationError:
        raise InputError(f"{source}: column score (or rank) is not numeric") from None
    refuse_empty_run(frame, source, "run frame")
    return validate_run(rank_by_score(frame), source=source)


def load_run_value(
    value: object,
    source: str,
    queries: pl.DataFrame,
    corpus: pl.DataFrame,
    k: int,
    question_subset: bool = False,
) -> RunFileRun:
    """An upstream asset's run (:func:`run_from_value`) validated against the dataset by the
    same policies as a run file (module docstring); unknown ids are named by ``source`` and the
    row of the ranked run (1-based)."""
    run = run_from_value(value, source)
    return run_against_dataset(
        run, queries, corpus, k, source=source, question_subset=question_subset
    )
