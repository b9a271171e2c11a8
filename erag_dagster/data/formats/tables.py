"""Folders of ``corpus``/``queries``[/``qrels``] tables in JSON lines or parquet."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

import polars as pl

from erag_dagster.core.errors import InputError
from erag_dagster.data.formats.records import (
    Column,
    check_nonempty_corpus,
    check_references,
    check_unique,
    read_table,
    row_place,
)
from erag_dagster.data.schema import QRELS_SCHEMA, Dataset
from erag_dagster.data.spec import CANONICAL_COLUMNS


class TableFiles(NamedTuple):
    """The tables of a folder: ``qrels`` is ``None`` when the folder has no qrels file."""

    corpus: Path
    queries: Path
    qrels: Path | None


def table_files(directory: Path, fmt: str) -> TableFiles:
    """``corpus.<fmt>``, ``queries.<fmt>`` and ``qrels.<fmt>`` (if present) of a folder.

    ``fmt`` is ``jsonl`` or ``parquet``. A missing corpus or queries file is reported by the
    reader (naming it); a folder that is not one, or another format, is an :class:`InputError`.
    """
    if fmt not in ("jsonl", "parquet"):
        raise InputError(f"unknown table format {fmt!r}; use jsonl or parquet")
    if not directory.is_dir():
        raise InputError(f"{directory}: not a directory ({fmt}: needs a folder of tables)")
    qrels_file = directory / f"qrels.{fmt}"
    return TableFiles(
        directory / f"corpus.{fmt}",
        directory / f"queries.{fmt}",
        qrels_file if qrels_file.exists() else None,
    )


def load_tables(
    directory: Path, fmt: str, rename: Mapping[str, str] | None = None, spec: str | None = None
) -> Dataset:
    """Read ``corpus.<fmt>``, ``queries.<fmt>`` and optional ``qrels.<fmt>`` from a folder.

    ``fmt`` is ``jsonl`` or ``parquet``. Columns carry the canonical names unless ``rename``
    maps a canonical name to the file's (``{"doc_id": "_id"}``; a rename applies to every file
    holding that column). Required: ``doc_id``, ``text``, ``query_id``, ``question`` and, in
    qrels, ``query_id``, ``doc_id``. Optional: ``title`` (``""``), ``answers`` (a string or a
    list of strings; ``[]`` when absent) and ``relevance`` (1). All queries are kept, judged or
    not; without a qrels file the qrels table is empty. Ids may be ints or strings.
    """
    corpus_file, queries_file, qrels_file = table_files(directory, fmt)
    names = dict(rename or {})
    unknown = sorted(set(names) - set(CANONICAL_COLUMNS))
    if unknown:
        columns = ", ".join(CANONICAL_COLUMNS)
        raise InputError(f"cannot rename {unknown[0]!r}: the columns are {columns}")

    def col(target: str, kind: str, required: bool = True, default: Any = None) -> Column:
        return Column(names.get(target, target), target, kind, required, default)

    corpus = read_table(
        corpus_file,
        fmt,
        [col("doc_id", "id"), col("title", "str", required=False), col("text", "str")],
    )
    check_nonempty_corpus(corpus, corpus_file)
    check_unique(corpus, "doc_id", corpus_file, fmt, "doc_id")
    queries = read_table(
        queries_file,
        fmt,
        [col("query_id", "id"), col("question", "str"), col("answers", "answers", False)],
    )
    check_unique(queries, "query_id", queries_file, fmt, "query_id")
    if qrels_file is not None:
        qrels = read_table(
            qrels_file,
            fmt,
            [col("query_id", "id"), col("doc_id", "id"), col("relevance", "int", False, 1)],
        )
        repeated = (
            qrels.with_row_index("_row")
            .filter(pl.struct("query_id", "doc_id").is_duplicated())
            .filter(pl.struct("query_id", "doc_id").is_first_distinct().not_())
        )
        if repeated.height:
            row = repeated.row(0, named=True)
            raise InputError(
                f"{row_place(qrels_file, fmt, row['_row'])}: second judgment for query "
                f"{row['query_id']!r} and document {row['doc_id']!r}"
            )
        check_references(
            qrels,
            corpus,
            queries,
            lambda row: row_place(qrels_file, fmt, row),
            queries_file,
            corpus_file,
        )
    else:
        qrels = pl.DataFrame(schema=QRELS_SCHEMA)
    return Dataset(spec or f"{fmt}:{directory}", corpus, queries, qrels)
