"""Retrieval runs: the ``(query_id, doc_id, rank, score)`` table and TREC run files.

A run holds, per query, its top-k documents; ``rank`` is 1-based and dense (1..n per query),
``score`` is the retriever's score (higher is better). TREC run files are whitespace-separated
``qid Q0 docid rank score tag`` lines (trec_eval's format); note that trec_eval re-sorts by
score (descending, ties by docid descending) and ignores the rank column.

Ids in a TREC run are whitespace-free by the format: an id holding any character that
:meth:`str.split` splits on (space, tab, U+00A0, U+2003, U+3000, the ``\x1c``–``\x1f``
separators …) or an empty id would be read back as other fields. :func:`check_trec_ids` refuses
such ids at the source (the dataset, before any retrieval runs) and :func:`write_trec_run`
refuses to write them, naming the id.

Empty runs, one rule whatever the format (:func:`refuse_empty_run`): a TREC file with no line,
a parquet run with no row, a run frame (the Python API, a Dagster asset's value) with no row —
each is refused in one line naming it, before any work; nothing is evaluated as "retrieved
nothing" because a file came out empty. A run frame handed over in memory with ranks of its own
(:func:`check_run_frame`) follows the rules a run file does: ids present, ranks integers
``>= 1`` and unique per query, a document once per query, scores finite.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from erag_dagster.core.errors import InputError
from erag_dagster.core.input_files import text_lines
from erag_dagster.core.input_numbers import parse_score
from erag_dagster.core.paths import atomic_path
from erag_dagster.data.schema import ids_trec_cannot_hold

RUN_SCHEMA = {"query_id": pl.String, "doc_id": pl.String, "rank": pl.Int64, "score": pl.Float64}


def empty_run() -> pl.DataFrame:
    """A run with no rows and the canonical schema."""
    return pl.DataFrame(schema=RUN_SCHEMA)


def rank_by_score(frame: pl.DataFrame) -> pl.DataFrame:
    """Assign dense 1-based ranks per query from ``score``, in trec_eval's order.

    trec_eval sorts by score descending and breaks ties by doc_id *descending*; using the same
    rule here means rank positions (and so eRAG labels by position) agree with trec_eval.

    Input needs ``query_id, doc_id, score``; output has the canonical run schema, sorted.
    """
    return (
        frame.select("query_id", "doc_id", pl.col("score").cast(pl.Float64))
        .sort(["query_id", "score", "doc_id"], descending=[False, True, True])
        .with_columns(rank=pl.int_range(1, pl.len() + 1, dtype=pl.Int64).over("query_id"))
        .select(list(RUN_SCHEMA))
    )


def top_k(run: pl.DataFrame, k: int) -> pl.DataFrame:
    """Keep ranks ``1..k`` of every query. ``k`` must be >= 1."""
    if k < 1:
        raise InputError(f"cut-off k must be >= 1, got {k}")
    return run.filter(pl.col("rank") <= k)


def validate_run(run: pl.DataFrame, source: str = "run") -> pl.DataFrame:
    """Check the schema, duplicate (query, doc) pairs and non-finite scores; return the run."""
    missing = [c for c in RUN_SCHEMA if c not in run.columns]
    if missing:
        raise InputError(f"{source}: missing column(s) {', '.join(missing)}")
    run = run.select([pl.col(c).cast(t) for c, t in RUN_SCHEMA.items()])
    dup = run.filter(pl.struct("query_id", "doc_id").is_duplicated())
    if dup.height:
        row = dup.row(0, named=True)
        raise InputError(
            f"{source}: document {row['doc_id']!r} appears twice for query {row['query_id']!r}"
        )
    bad = run.filter(~pl.col("score").is_finite())
    if bad.height:
        row = bad.row(0, named=True)
        raise InputError(
            f"{source}: non-finite score for query {row['query_id']!r}, doc {row['doc_id']!r}"
        )
    return run


def refuse_empty_run(run: pl.DataFrame, source: str, what: str = "run file") -> None:
    """The one rule for empty runs (module docstring): ``"{source}: the {what} is empty"``."""
    if run.height == 0:
        raise InputError(f"{source}: the {what} is empty (no rows); give a run with documents")


def check_run_frame(frame: pl.DataFrame, source: str = "run frame") -> pl.DataFrame:
    """A run frame with ranks of its own (``query_id, doc_id, rank`` and maybe ``score``),
    checked as a run file is (module docstring), ids as text; an :class:`InputError` names
    ``source``, the row (1-based) and the query."""
    missing = [c for c in ("query_id", "doc_id", "rank") if c not in frame.columns]
    if missing:
        raise InputError(
            f"{source} lacks column(s) {', '.join(missing)} (a run frame has query_id, "
            f"doc_id, rank, score; it has {', '.join(frame.columns) or 'none'})"
        )
    if not frame.schema["rank"].is_integer():
        raise InputError(f"{source}: rank must be an integer column, got {frame.schema['rank']}")
    has_score = "score" in frame.columns
    if has_score and not frame.schema["score"].is_numeric():
        raise InputError(f"{source}: score must be a numeric column, got {frame.schema['score']}")
    refuse_empty_run(frame, source, "run frame")
    columns = [pl.col("query_id").cast(pl.String), pl.col("doc_id").cast(pl.String), "rank"]
    run = frame.select(*columns, *(["score"] if has_score else [])).with_row_index("row", 1)
    nulls = run.filter(pl.any_horizontal(pl.all().is_null()))
    if nulls.height:
        column = next(c for c in run.columns if nulls.get_column(c)[0] is None)
        raise InputError(f"{source} (row {nulls.item(0, 'row')}): null {column}")
    problems = (
        (pl.col("rank") < 1, "rank {rank} of query {query_id!r} is below 1 (ranks start at 1)"),
        (~pl.struct("query_id", "rank").is_first_distinct(),
         "rank {rank} appears twice for query {query_id!r}"),
        (~pl.struct("query_id", "doc_id").is_first_distinct(),
         "document {doc_id!r} appears twice for query {query_id!r}"),
    )  # fmt: skip
    if has_score:
        finite = pl.col("score").cast(pl.Float64).is_finite()
        problems += (
            (~finite, "score {score} of query {query_id!r}, doc {doc_id!r} is not finite"),
        )
    for test, message in problems:
        bad = run.filter(test)
        if bad.height:
            row = bad.row(0, named=True)
            raise InputError(f"{source} (row {row['row']}): {message.format(**row)}")
    return run.drop("row")


def check_trec_ids(frame: pl.DataFrame, column: str, source: str) -> None:
    """Refuse an id of ``frame[column]`` that a TREC run cannot hold (empty, or holding
    whitespace: module docstring); the :class:`InputError` names the id and ``source``."""
    bad = ids_trec_cannot_hold(frame, column)
    if bad.height:
        value = bad.get_column(column)[0]
        what = "query id" if column == "query_id" else "document id"
        raise InputError(
            f"{source}: {what} {value!r} is empty or holds whitespace, which a TREC run file "
            "cannot hold (it would be read back as other fields); rename it in the dataset"
        )


def write_trec_run(
    run: pl.DataFrame, path: Path | str, tag: str = "erag", command: str | None = None
) -> Path:
    """Write ``run`` as a TREC run file (atomically), sorted by query then rank.

    An id a TREC run cannot hold is an :class:`InputError` (:func:`check_trec_ids`). With
    ``command``, the file is written as that command's ``--output``
    (:func:`erag_dagster.core.output_guard.writing_output`: recorded, a failed write named).
    """
    from erag_dagster.core.output_guard import writing_output

    path = Path(path)
    for column in ("query_id", "doc_id"):
        check_trec_ids(run, column, f"run for {path}")
    ordered = run.sort(["query_id", "rank"])
    lines = ordered.select(
        pl.format(
            "{} Q0 {} {} {} {}",
            "query_id",
            "doc_id",
            "rank",
            pl.col("score").map_elements(repr, return_dtype=pl.String),
            pl.lit(tag),
        )
    ).to_series()
    text = "\n".join(lines.to_list()) + ("\n" if len(lines) else "")
    with writing_output(path, command) if command else atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return path


def read_trec_run(path: Path | str) -> pl.DataFrame:
    """Read a TREC run file (6 whitespace-separated fields a line; blank lines ignored).

    Ranks are recomputed from the scores exactly as trec_eval orders documents (score
    descending, ties by doc_id descending), so a file whose rank column disagrees with its
    scores is read the way trec_eval would evaluate it. The file is read under the input rule
    (:mod:`erag_dagster.core.input_files`: a regular file, bounded, a leading BOM stripped) and each
    score by :func:`~erag_dagster.core.input_numbers.parse_score` (ASCII decimal only). Errors name
    ``file:line``.
    """
    path = Path(path)
    if not path.exists():
        raise InputError(f"{path}: run file not found")
    qids: list[str] = []
    dids: list[str] = []
    scores: list[float] = []
    for lineno, line in text_lines(path):
        fields = line.split()
        if not fields:
            continue
        if len(fields) != 6:
            raise InputError(
                f"{path}:{lineno}: expected 6 fields 'qid Q0 docid rank score tag', "
                f"got {len(fields)}"
            )
        qids.append(fields[0])
        dids.append(fields[2])
        scores.append(parse_score(fields[4], f"{path}:{lineno}"))
    frame = pl.DataFrame(
        {"query_id": qids, "doc_id": dids, "score": scores},
        schema={"query_id": pl.String, "doc_id": pl.String, "score": pl.Float64},
    )
    refuse_empty_run(frame, str(path))
    dup = frame.filter(pl.struct("query_id", "doc_id").is_duplicated())
    if dup.height:
        row = dup.row(0, named=True)
        raise InputError(
            f"{path}: document {row['doc_id']!r} appears twice for query {row['query_id']!r}"
        )
    return rank_by_score(frame)
