"""Reading records shared by every format: JSON lines and parquet tables, and their checks.

JSON lines are read by polars in one go; only when that fails, or a column has a type that
needs per-value handling, is the file scanned line by line, which coerces the values or names
the offending line (``file:line``). Parquet problems name the 1-based row.

Types of the values (the one rule, :func:`check_value`, for every format that reads records
here: BEIR, KILT, ``jsonl:``/``parquet:`` tables): a text field (a title, a text, a question,
an answer) holds a JSON string — a number (``"text": 5``, ``"answers": [5]``), a boolean, a
list or an object where a string is documented is refused at ``file:line`` naming the field
("write it in quotes"), never turned into its text; ``null`` is "not given" (an optional field
takes its default; an ``answers`` list drops it like a blank answer). An id holds a string or
an integer (ints become their decimal text, as documented for ids); a grade an integer.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from erag_dagster.core.errors import InputError, where
from erag_dagster.core.input_files import (
    parse_json,
    read_bytes,
    regular_file,
    starts_with_bom,
    text_lines,
)
from erag_dagster.core.input_numbers import is_grade


def unique_nonempty(values: list[Any]) -> list[str]:
    """Strings that are not blank, exact duplicates removed, first-seen order."""
    out: list[str] = []
    for value in values:
        if isinstance(value, str) and value.strip() and value not in out:
            out.append(value)
    return out


# ---------------------------------------------------------------------------------------------
# JSON lines: one fast polars read, a line-by-line scan only when that fails


@dataclass(frozen=True)
class Column:
    """One column to read: ``source`` field in the file → canonical ``target`` of ``kind``.

    kinds: ``id`` (str or int → str; required non-empty), ``str`` (null → ``""``), ``answers``
    (null → [], str → [str], list of str; blank strings and nulls dropped), ``int`` (integer;
    integral floats and digit strings accepted), ``paragraphs`` (str, or list of str joined by
    newlines). Any other JSON type is refused (:func:`check_value`).
    """

    source: str
    target: str
    kind: str
    required: bool = True
    default: Any = None


def _json_kind(value: Any) -> str:
    """What a JSON value is, in words: ``a number (5)``, ``a boolean (true)``, ``a list``."""
    if isinstance(value, bool):
        return f"a boolean ({_short(value)})"
    if isinstance(value, int | float):
        return f"a number ({_short(value)})"
    if isinstance(value, list):
        return f"a list ({_short(value)})"
    if isinstance(value, dict):
        return f"an object ({_short(value)})"
    if value is None:
        return "null"
    return f"{type(value).__name__} ({_short(value)})"


def check_value(value: Any, column: Column, at: str) -> None:
    """Refuse, at ``at``, a present (non-null) ``value`` whose JSON type does not fit
    ``column.kind`` (module docstring): text kinds take strings only (``paragraphs`` also a
    list of strings, ``answers`` also a list of strings and nulls), ``id`` a string or an
    integer. Grades (``int``) are :func:`coerce`'s."""
    kind = column.kind
    if value is None or kind == "int":
        return
    if kind == "id":
        if isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool)):
            return
        raise InputError(
            f"{at}: field {column.source!r} is {_json_kind(value)}, not an id (a string, or an "
            "integer)"
        )
    if isinstance(value, str):
        return
    if isinstance(value, list) and kind in ("paragraphs", "answers"):
        for index, item in enumerate(value):
            if isinstance(item, str) or (item is None and kind == "answers"):
                continue
            raise InputError(
                f"{at}: field {column.source!r} holds {_json_kind(item)} at position {index}, "
                "not a string; write it in quotes"
            )
        return
    hint = "write it in quotes" if not isinstance(value, list | dict) else "give a string"
    if isinstance(value, list):
        hint = "give a string or a list of strings" if kind != "str" else "give a string"
    raise InputError(f"{at}: field {column.source!r} is {_json_kind(value)}, not a string; {hint}")


def iter_jsonl(path: Path) -> Iterator[tuple[int, Any]]:
    """Yield ``(line_number, parsed_value)`` for every non-blank line (1-based numbers), read
    under the input rule (:mod:`erag_dagster.core.input_files`: regular file, bounded, BOM stripped,
    duplicate keys and over-deep nesting refused at ``file:line``)."""
    for number, line in text_lines(path):
        if line.strip():
            yield number, parse_json(line, str(path), number)


def iter_jsonl_objects(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    for number, value in iter_jsonl(path):
        if not isinstance(value, dict):
            raise InputError(
                f"{where(path, number)}: expected a JSON object, found {type(value).__name__}"
            )
        yield number, value


def records_with_ids(
    path: Path, id_column: Column, label: str
) -> Iterator[tuple[int, str, str, dict[str, Any]]]:
    """``(line number, "file:line", id, record)`` for every JSON-lines record, the id read by
    ``id_column``; a repeated id is an :class:`InputError` naming both lines (``label`` names
    the id in the message)."""
    first_line: dict[str, int] = {}
    for number, record in iter_jsonl_objects(path):
        at = where(path, number)
        record_id = coerce(record, id_column, at)
        if record_id in first_line:
            raise InputError(
                f"{at}: duplicate {label} {record_id!r} (first at line {first_line[record_id]})"
            )
        first_line[record_id] = number
        yield number, at, record_id, record


def line_of_row(path: Path, row: int) -> int:
    """1-based line number of the ``row``-th (0-based) record: blank lines hold no record."""
    seen = -1
    for number, line in text_lines(path):
        if line.strip():
            seen += 1
            if seen == row:
                return number
    return seen + 2  # past the end: only reachable if the file changed underneath us


def row_place(path: Path, fmt: str, row: int) -> str:
    """Where record ``row`` (0-based) lives: ``file:line`` for JSON lines, else the row."""
    if fmt == "jsonl":
        return where(path, line_of_row(path, row))
    return f"{path} (row {row + 1})"


class _SlowPath(Exception):
    """The fast polars read produced a column type that needs per-value handling."""

    def __init__(self, column: Column, dtype: pl.DataType) -> None:
        super().__init__(column.source)
        self.column = column
        self.dtype = dtype


def read_table(path: Path, fmt: str, columns: list[Column]) -> pl.DataFrame:
    """Read ``columns`` of a JSON-lines or parquet file into a frame of canonical types.

    JSON lines are parsed by polars in one go; only if that fails, or a column has an
    unexpected type, is the file scanned line by line, which either coerces the values or
    names the offending line. A blank line holds no record. A required id that is missing or
    empty is an error. Ids may be ints or strings (ints become their decimal text). Before
    polars reads a JSON-lines file every record's values are checked by :func:`check_value`
    (polars would write a number or a list it meets in a text column as its JSON text: ``5`` →
    ``"5"``); an ``answers`` column read as text always goes through the line-by-line path,
    since it may mix strings and lists.
    """
    raw: pl.DataFrame | None = None
    # the input rule first (a regular file within the limit; for JSON lines every line checked,
    # so a bad one is named exactly), then polars reads the checked file by its path (mapped,
    # not copied) unless a BOM must be stripped first
    source: Path | io.BytesIO = regular_file(path)
    if fmt == "jsonl":
        for number, record in iter_jsonl(path):
            if isinstance(record, dict):  # a value of the wrong type: refused, never cast
                for column in columns:
                    check_value(record.get(column.source), column, where(path, number))
        if starts_with_bom(path):
            source = io.BytesIO(read_bytes(path))
    try:
        if fmt == "jsonl":
            raw = pl.read_ndjson(source, infer_schema_length=None)
        else:
            raw = pl.read_parquet(source)
    except (Exception, pl.exceptions.PanicException) as exc:
        if fmt != "jsonl":
            raise InputError(f"{path}: cannot read {fmt}: {str(exc).splitlines()[0]}") from exc
    if raw is not None:
        try:
            frame = _normalise(raw, columns, path, typed=fmt == "parquet")
        except _SlowPath as slow:
            if fmt != "jsonl":
                raise InputError(
                    f"{path}: column {slow.column.source!r} has type {slow.dtype}, which does "
                    f"not fit {slow.column.target!r}"
                ) from None
        else:
            for column in columns:
                if not column.required and column.kind != "int":
                    continue
                missing = pl.col(column.target).is_null()
                if column.kind == "id":
                    missing = missing | (pl.col(column.target) == "")
                bad = frame.with_row_index("_row").filter(missing)
                if bad.height:
                    place = row_place(path, fmt, int(bad.get_column("_row")[0]))
                    raise InputError(f"{place}: {_missing(column)}")
            return frame
    return _read_jsonl_slowly(path, columns)


_INTEGER_TYPES = (pl.Int8, pl.Int16, pl.Int32, pl.Int64, pl.UInt8, pl.UInt16, pl.UInt32, pl.UInt64)


def _normalise(raw: pl.DataFrame, columns: list[Column], path: Path, typed: bool) -> pl.DataFrame:
    """Select and cast ``columns`` from a polars-read frame, or raise :class:`_SlowPath`.

    ``typed``: the file stores real column types (parquet), so a string column holds strings
    (JSON lines read by polars may hold the JSON text of lists there).
    """
    exprs: list[pl.Expr] = []
    for column in columns:
        if column.source not in raw.columns:
            if column.required:
                raise InputError(f"{path}: no record has a field {column.source!r}")
            exprs.append(_default_expr(column).alias(column.target))
            continue
        dtype = raw.schema[column.source]
        col = pl.col(column.source)
        if dtype == pl.Null and column.kind == "int":
            expr = col.cast(pl.Int64)  # a column of nulls is refused below, not read as default
        elif dtype == pl.Null:
            expr = _default_expr(column) if not column.required else col.cast(pl.String)
        elif column.kind == "id" and (dtype == pl.String or dtype in _INTEGER_TYPES):
            expr = col.cast(pl.String)
        elif column.kind == "str" and dtype == pl.String:
            expr = col if column.required else col.fill_null("")
        elif column.kind == "int" and dtype in _INTEGER_TYPES:
            expr = col.cast(pl.Int64)  # a null stays null: refused below, never the default
        elif column.kind == "answers" and dtype == pl.String and typed:
            expr = pl.concat_list(col).list.eval(
                pl.element().filter(pl.element().str.strip_chars() != "")
            )
        elif column.kind == "answers" and dtype in (pl.List(pl.String), pl.List(pl.Null)):
            expr = (
                col.cast(pl.List(pl.String))
                .fill_null([])
                .list.eval(
                    pl.element().filter(
                        pl.element().is_not_null() & (pl.element().str.strip_chars() != "")
                    )
                )
                .list.unique(maintain_order=True)
            )
        elif column.kind == "paragraphs" and dtype == pl.String:
            expr = col.fill_null("")
        elif column.kind == "paragraphs" and dtype == pl.List(pl.String):
            expr = (
                col.fill_null([])
                .list.eval(
                    pl.element().str.strip_chars().filter(pl.element().str.strip_chars() != "")
                )
                .list.join("\n")
            )
        else:
            raise _SlowPath(column, dtype)
        exprs.append(expr.alias(column.target))
    frame = raw.select(exprs)
    for column in columns:
        if column.kind == "answers":
            frame = frame.with_columns(pl.col(column.target).fill_null([]))
    return frame


def _default_expr(column: Column) -> pl.Expr:
    if column.kind == "answers":
        return pl.lit([], dtype=pl.List(pl.String))
    if column.kind == "int":
        return pl.lit(column.default, dtype=pl.Int64)
    if column.kind == "id":
        return pl.lit(None, dtype=pl.String)
    return pl.lit("" if column.default is None else column.default, dtype=pl.String)


_DTYPES = {
    "id": pl.String,
    "str": pl.String,
    "paragraphs": pl.String,
    "answers": pl.List(pl.String),
    "int": pl.Int64,
}


def _read_jsonl_slowly(path: Path, columns: list[Column]) -> pl.DataFrame:
    """Line-by-line read with per-value coercion; the first bad line is an error."""
    values: dict[str, list[Any]] = {c.target: [] for c in columns}
    for number, record in iter_jsonl_objects(path):
        for column in columns:
            values[column.target].append(coerce(record, column, where(path, number)))
    return pl.DataFrame(values, schema={c.target: _DTYPES[c.kind] for c in columns})


def coerce(record: dict[str, Any], column: Column, at: str) -> Any:
    """One field of one JSON record as the column's canonical Python value."""
    value = record.get(column.source)
    if value is None:
        if column.required or (column.kind == "int" and column.source in record):
            raise InputError(f"{at}: {_missing(column)}")
        return _python_default(column)
    kind = column.kind
    check_value(value, column, at)  # a number where a string is documented: refused
    if isinstance(value, bool):
        pass  # booleans fit no column; fall through to the error
    elif kind == "id" and isinstance(value, (str, int)):
        text = str(value)
        if not text:
            raise InputError(f"{at}: {_missing(column)}")
        return text
    elif kind in ("str", "paragraphs") and isinstance(value, str):
        return value
    elif (
        kind == "paragraphs" and isinstance(value, list) and all(isinstance(v, str) for v in value)
    ):
        return "\n".join(v.strip() for v in value if v.strip())
    elif kind == "answers" and isinstance(value, str):
        return unique_nonempty([value])
    elif kind == "answers" and isinstance(value, list):
        return unique_nonempty(value)  # strings (check_value): nulls and blanks dropped
    elif kind == "int" and _integral(value) and -(2**63) <= int(value) < 2**63:
        return int(value)
    raise InputError(
        f"{at}: field {column.source!r} = {_short(value)} does not fit {column.target!r} ({kind})"
    )


def _missing(column: Column) -> str:
    if column.kind == "int":
        return (
            f"null {column.source!r} (give a grade >= 0, or leave the column out: every pair "
            "is then relevant)"
        )
    if column.kind == "id":
        return f"missing or empty {column.source!r}"
    return f"missing {column.source!r}"


def _integral(value: Any) -> bool:
    """An int, an integral float, or a string of digits (JSON writers differ)."""
    if isinstance(value, int):
        return True
    if isinstance(value, float):
        return value.is_integer()
    return isinstance(value, str) and is_grade(value)


def _python_default(column: Column) -> Any:
    if column.kind == "answers":
        return []
    if column.kind == "int":
        return column.default
    return "" if column.default is None else column.default


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 40 else text[:37] + "..."


def check_unique(frame: pl.DataFrame, column: str, path: Path, fmt: str, label: str) -> None:
    """Raise naming the file and place of the second occurrence of the first repeated id."""
    dup = frame.select(pl.col(column)).with_row_index("_row").filter(pl.col(column).is_duplicated())
    if dup.height:
        value = dup.get_column(column)[0]
        rows = dup.filter(pl.col(column) == value).get_column("_row")
        first, second = int(rows[0]), int(rows[1])
        if fmt == "jsonl":
            raise InputError(
                f"{where(path, line_of_row(path, second))}: duplicate {label} {value!r} "
                f"(first at line {line_of_row(path, first)})"
            )
        raise InputError(
            f"{path} (row {second + 1}): duplicate {label} {value!r} (first at row {first + 1})"
        )


def check_references(
    qrels: pl.DataFrame,
    corpus: pl.DataFrame,
    queries: pl.DataFrame,
    place: Callable[[int], str],
    queries_file: Path,
    corpus_file: Path,
) -> None:
    """Every judgment must name a known document and query; ``place(row)`` locates a row."""
    indexed = qrels.with_row_index("_row")
    for column, known, source in (
        ("doc_id", corpus, corpus_file),
        ("query_id", queries, queries_file),
    ):
        unknown = indexed.join(known.select(column), on=column, how="anti")
        if unknown.height:
            row = unknown.sort("_row").row(0, named=True)
            raise InputError(
                f"{place(row['_row'])}: judgment names {column} {row[column]!r}, "
                f"which is not in {source}"
            )


def read_corpus(
    path: Path, id_field: str, title_field: str, text: Column, id_label: str
) -> pl.DataFrame:
    """A JSON-lines corpus (``id_field`` → ``doc_id``, ``title_field`` → ``title``, ``text`` →
    ``text``; title and text may be missing), non-empty and with unique ids, else
    :class:`InputError` at ``file:line`` (a repeated id is called ``id_label``)."""
    corpus = read_table(
        path,
        "jsonl",
        [
            Column(id_field, "doc_id", "id"),
            Column(title_field, "title", "str", required=False),
            text,
        ],
    )
    check_nonempty_corpus(corpus, path)
    check_unique(corpus, "doc_id", path, "jsonl", id_label)
    return corpus


def check_nonempty_corpus(corpus: pl.DataFrame, path: Path) -> None:
    if corpus.height == 0:
        raise InputError(f"{path}: the corpus is empty (no documents)")
