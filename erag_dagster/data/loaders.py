"""Turn a dataset spec string into a validated :class:`~erag_dagster.data.schema.Dataset`.

Spec grammar (the same string is used in config files and on the command line)::

    spec    := kind [":" PATH] ["?" option ("&" option)*]
    option  := key "=" value            (keys and values are %-decoded)

    sample                           the embedded SQuAD v1.1 dev slice (no PATH)
    squad:PATH                       SQuAD v1.1 JSON, ``.json.gz`` or ``.zip`` holding one ``.json``
    beir:DIR[?split=test]            BEIR layout: corpus.jsonl, queries.jsonl, qrels/<split>.tsv
    kilt:FILE[?corpus=KS.jsonl]      KILT JSON lines (+ optional KILT knowledge source)
    jsonl:DIR / parquet:DIR          corpus/queries[/qrels] files with the canonical column names;
                                     ``?doc_id=_id&question=query`` renames (canonical=source)

Options every kind accepts: ``max_questions=N`` keeps the first *N* queries in file order (after
the kind's own filtering, e.g. BEIR's judged-only rule) and the qrels of those queries; the
corpus is kept whole. ``spread_questions=N`` keeps *N* queries evenly spaced over the file
instead (a deterministic sample covering all of it, e.g. every SQuAD article).
``passages=W`` then splits every document into *W*-word passages
(:func:`erag_dagster.data.chunking.split_dataset`).

Error policy: every problem is one :class:`~erag_dagster.errors.InputError` whose message names the
file and 1-based line (``path:line``), or the offending id where a line does not apply (a SQuAD
question id, a parquet row). A missing file, an unknown kind or option, malformed JSON, duplicate
ids, a judgment naming an unknown document or query, a query without gold answers (SQuAD, KILT)
and an empty corpus are all errors; nothing is silently dropped except what a kind's docstring
says it drops.
"""

from __future__ import annotations

import gzip
import io
import json
import zipfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import IO, Any, NamedTuple
from urllib.parse import unquote

import polars as pl

from erag_dagster.data.chunking import split_dataset
from erag_dagster.data.schema import CORPUS_SCHEMA, QRELS_SCHEMA, QUERIES_SCHEMA, Dataset
from erag_dagster.errors import InputError, where

__all__ = [
    "CANONICAL_COLUMNS",
    "COMMON_OPTIONS",
    "KIND_OPTIONS",
    "KNOWN_KINDS",
    "SAMPLE_FILE",
    "DatasetSpec",
    "load_beir",
    "load_dataset",
    "load_kilt",
    "load_sample",
    "load_squad",
    "load_tables",
    "parse_spec",
    "take_questions",
]

KNOWN_KINDS: tuple[str, ...] = ("sample", "squad", "beir", "kilt", "jsonl", "parquet")
"""Every dataset kind :func:`load_dataset` understands (the part of a spec before ``:``)."""

CANONICAL_COLUMNS: tuple[str, ...] = (
    "doc_id",
    "title",
    "text",
    "query_id",
    "question",
    "answers",
    "relevance",
)
"""Column names of the three tables; ``jsonl:``/``parquet:`` options may rename any of them."""

COMMON_OPTIONS: tuple[str, ...] = ("max_questions", "spread_questions", "passages")
KIND_OPTIONS: dict[str, tuple[str, ...]] = {
    "sample": (),
    "squad": (),
    "beir": ("split",),
    "kilt": ("corpus",),
    "jsonl": CANONICAL_COLUMNS,
    "parquet": CANONICAL_COLUMNS,
}
"""Options each kind accepts on top of :data:`COMMON_OPTIONS`."""

SAMPLE_FILE = "squad-v1.1-dev-sample.json"
"""Name of the embedded sample inside the ``erag_dagster.data`` package's ``sample/`` folder."""

_KIND_USAGE = "sample, squad:PATH, beir:DIR, kilt:FILE, jsonl:DIR, parquet:DIR"


class DatasetSpec(NamedTuple):
    """A parsed dataset spec: ``kind``, ``path`` (``None`` for ``sample``) and ``options``."""

    kind: str
    path: Path | None
    options: dict[str, str]


# ---------------------------------------------------------------------------------------------
# spec parsing and the public entry point


def parse_spec(spec: str) -> DatasetSpec:
    """Split ``kind[:PATH][?key=value&...]`` into its parts and check them.

    The kind is matched case-insensitively; the first ``?`` starts the options, so a PATH
    cannot contain ``?`` (write ``%3F``). ``max_questions`` and ``passages`` must be positive
    integers. Checks syntax only: whether PATH exists is :func:`load_dataset`'s business.
    Raises :class:`InputError` for an unknown kind (listing the known ones), a missing or
    superfluous PATH, and a malformed, repeated or unknown option.
    """
    text = spec.strip()
    head, _, query = text.partition("?")
    kind, _, raw_path = head.partition(":")
    kind = kind.strip().lower()
    if kind not in KNOWN_KINDS:
        raise InputError(
            f"unknown dataset kind {kind!r} in spec {spec!r}; known kinds: {_KIND_USAGE}"
        )
    raw_path = unquote(raw_path.strip())
    if kind == "sample":
        if raw_path:
            raise InputError(f"dataset spec {spec!r}: 'sample' takes no path")
        path = None
    else:
        if not raw_path:
            raise InputError(f"dataset spec {spec!r}: '{kind}' needs a path, e.g. {kind}:PATH")
        path = Path(raw_path).expanduser()

    allowed = COMMON_OPTIONS + KIND_OPTIONS[kind]
    options: dict[str, str] = {}
    for item in query.split("&") if query else ():
        if not item:
            continue
        key, eq, value = item.partition("=")
        key, value = unquote(key.strip()), unquote(value.strip())
        if not eq or not key or not value:
            raise InputError(f"dataset spec {spec!r}: option {item!r} is not key=value")
        if key not in allowed:
            raise InputError(
                f"dataset spec {spec!r}: unknown option {key!r} for '{kind}'; "
                f"allowed: {', '.join(allowed)}"
            )
        if key in options:
            raise InputError(f"dataset spec {spec!r}: option {key!r} given twice")
        if key in COMMON_OPTIONS and not (value.isascii() and value.isdigit() and int(value) > 0):
            raise InputError(
                f"dataset spec {spec!r}: {key} must be a positive integer, not {value!r}"
            )
        options[key] = value
    return DatasetSpec(kind, path, options)


def load_dataset(spec: str) -> Dataset:
    """Load the dataset a spec names, apply ``max_questions`` then ``passages``, and validate.

    ``Dataset.spec`` is the spec string exactly as given. Raises :class:`InputError` (see the
    module docstring for the policy).
    """
    parsed = parse_spec(spec)
    if parsed.path is not None and not parsed.path.exists():
        raise InputError(f"dataset spec {spec!r}: no such file or directory: {parsed.path}")
    options = parsed.options
    if parsed.kind == "sample":
        dataset = load_sample(spec)
    elif parsed.kind == "squad":
        dataset = load_squad(_path(parsed), spec)
    elif parsed.kind == "beir":
        dataset = load_beir(_path(parsed), options.get("split", "test"), spec)
    elif parsed.kind == "kilt":
        corpus = options.get("corpus")
        ks = _resolve_beside(corpus, _path(parsed), spec) if corpus else None
        dataset = load_kilt(_path(parsed), ks, spec)
    else:
        rename = {k: v for k, v in options.items() if k in CANONICAL_COLUMNS}
        dataset = load_tables(_path(parsed), parsed.kind, rename, spec)
    if "max_questions" in options:
        dataset = take_questions(dataset, int(options["max_questions"]))
    if "spread_questions" in options:
        dataset = spread_questions(dataset, int(options["spread_questions"]))
    if "passages" in options:
        dataset = split_dataset(dataset, int(options["passages"]))
    return dataset.validate()


def take_questions(dataset: Dataset, n: int) -> Dataset:
    """The first ``n`` queries (table order), their qrels, and the whole corpus."""
    queries = dataset.queries.head(n)
    qrels = dataset.qrels.join(queries.select("query_id"), on="query_id", how="semi")
    return Dataset(dataset.spec, dataset.corpus, queries, qrels)


def spread_questions(dataset: Dataset, n: int) -> Dataset:
    """``n`` queries evenly spaced over the table (rows ``i * height // n``), their qrels and
    the whole corpus: a deterministic sample that covers every part of the file (e.g. every
    SQuAD article) rather than its first articles only. ``n >= height`` keeps every query."""
    height = dataset.queries.height
    if n >= height:
        return dataset
    rows = [i * height // n for i in range(n)]
    queries = dataset.queries[rows]
    qrels = dataset.qrels.join(queries.select("query_id"), on="query_id", how="semi")
    return Dataset(dataset.spec, dataset.corpus, queries, qrels)


def _path(parsed: DatasetSpec) -> Path:
    assert parsed.path is not None  # parse_spec guarantees a path for every kind but sample
    return parsed.path


def _resolve_beside(name: str, anchor: Path, spec: str) -> Path:
    """``name`` as given if it exists, else relative to the directory of ``anchor``."""
    candidate = Path(name).expanduser()
    if candidate.exists():
        return candidate
    beside = anchor.parent / candidate
    if not candidate.is_absolute() and beside.exists():
        return beside
    raise InputError(f"dataset spec {spec!r}: no such file or directory: {candidate}")


# ---------------------------------------------------------------------------------------------
# SQuAD and the embedded sample


def load_squad(path: Path, spec: str | None = None) -> Dataset:
    """Read SQuAD v1.1 JSON (plain, ``.gz``, or the single ``.json`` member of a ``.zip``).

    * corpus: one document per paragraph, ``doc_id = f"{article_title}_{paragraph_index}"``
      (the raw title, 0-based index within the article, e.g. ``Super_Bowl_50_0``), ``title`` =
      the article title with ``_`` shown as spaces, ``text`` = the context unchanged.
    * queries: the SQuAD question id, the question with surrounding whitespace stripped, and
      every non-empty gold answer text (exact-string duplicates removed, first-seen order).
    * qrels: ``(question id, its paragraph's doc_id, 1)``.

    A question without any non-empty answer (e.g. a SQuAD v2 unanswerable one), a repeated
    question id or article title, or a structure that is not SQuAD's is an :class:`InputError`
    naming the file and the question id or article.
    """
    label, data = _read_squad_json(path)
    articles = data.get("data") if isinstance(data, dict) else None
    if not isinstance(articles, list):
        raise InputError(f"{label}: not SQuAD JSON (no top-level 'data' list)")
    docs: dict[str, list[str]] = {"doc_id": [], "title": [], "text": []}
    query_ids: list[str] = []
    questions: list[str] = []
    answer_lists: list[list[str]] = []
    qrel_docs: list[str] = []
    seen_titles: set[str] = set()
    seen_questions: set[str] = set()
    for a_index, article in enumerate(articles):
        at = f"{label}: article {a_index}"
        title = _get(article, "title", str, at)
        if title in seen_titles:
            raise InputError(
                f"{label}: article title {title!r} appears twice (doc ids would clash)"
            )
        seen_titles.add(title)
        for p_index, paragraph in enumerate(_get(article, "paragraphs", list, at)):
            pt = f"{label}: article {title!r} paragraph {p_index}"
            doc_id = f"{title}_{p_index}"
            docs["doc_id"].append(doc_id)
            docs["title"].append(title.replace("_", " "))
            docs["text"].append(_get(paragraph, "context", str, pt))
            for qa in _get(paragraph, "qas", list, pt, default=[]):
                qid = str(_get(qa, "id", (str, int), pt))
                qt = f"{label}: question {qid!r}"
                if qid in seen_questions:
                    raise InputError(f"{qt} appears twice")
                seen_questions.add(qid)
                raw_answers = _get(qa, "answers", list, qt, default=[])
                texts = [a.get("text") if isinstance(a, dict) else None for a in raw_answers]
                answers = _unique_nonempty(texts)
                if not answers:
                    raise InputError(
                        f"{qt} has no gold answers (unanswerable SQuAD v2 questions are not "
                        "supported)"
                    )
                query_ids.append(qid)
                questions.append(_get(qa, "question", str, qt).strip())
                answer_lists.append(answers)
                qrel_docs.append(doc_id)
    if not docs["doc_id"]:
        raise InputError(f"{label}: the corpus is empty (no paragraphs)")
    corpus = pl.DataFrame(docs, schema=CORPUS_SCHEMA)
    queries = pl.DataFrame(
        {"query_id": query_ids, "question": questions, "answers": answer_lists},
        schema=QUERIES_SCHEMA,
    )
    qrels = pl.DataFrame(
        {"query_id": query_ids, "doc_id": qrel_docs, "relevance": [1] * len(query_ids)},
        schema=QRELS_SCHEMA,
    )
    return Dataset(spec or f"squad:{path}", corpus, queries, qrels)


def load_sample(spec: str = "sample") -> Dataset:
    """The embedded SQuAD v1.1 dev slice (CC BY-SA 4.0), read with :func:`load_squad`.

    See ``erag_dagster/data/sample/ATTRIBUTION.md`` for its source and contents.
    """
    resource = resources.files("erag_dagster.data").joinpath("sample", SAMPLE_FILE)
    with resources.as_file(resource) as path:
        if not path.is_file():
            raise InputError(f"the embedded sample is missing from the installation: {path}")
        return load_squad(path, spec)


def _read_squad_json(path: Path) -> tuple[str, Any]:
    """Parse the JSON; returns a label for messages (``file`` or ``archive/member``) and data."""
    if path.is_dir():
        raise InputError(f"{path}: is a directory; squad: needs a .json, .json.gz or .zip file")
    try:
        if zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as archive:
                members = [
                    n for n in archive.namelist() if n.endswith(".json") and "__MACOSX" not in n
                ]
                if len(members) != 1:
                    raise InputError(
                        f"{path}: expected exactly one .json member in the zip, found "
                        f"{len(members)} ({', '.join(members) or 'none'})"
                    )
                label = f"{path}/{members[0]}"
                with archive.open(members[0]) as raw:
                    return label, _parse_json(io.TextIOWrapper(raw, encoding="utf-8"), label)
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt", encoding="utf-8") as handle:
            return str(path), _parse_json(handle, str(path))
    except (OSError, zipfile.BadZipFile, EOFError) as exc:
        raise InputError(f"{path}: cannot read: {exc}") from exc


def _parse_json(handle: IO[str], label: str) -> Any:
    try:
        return json.load(handle)
    except json.JSONDecodeError as exc:
        raise InputError(f"{where(label, exc.lineno)}: malformed JSON: {exc.msg}") from exc
    except UnicodeDecodeError as exc:
        raise InputError(f"{label}: not UTF-8 text ({exc.reason})") from exc


def _get(obj: Any, key: str, kind: type | tuple[type, ...], at: str, default: Any = ...) -> Any:
    """``obj[key]`` checked to be of ``kind``; a missing key gives ``default`` or an error."""
    if not isinstance(obj, dict):
        raise InputError(f"{at}: expected a JSON object, found {type(obj).__name__}")
    value = obj.get(key, default)
    if value is ...:
        raise InputError(f"{at}: missing field {key!r}")
    if value is None and default is not ...:
        return default
    if not isinstance(value, kind) or isinstance(value, bool):
        raise InputError(f"{at}: field {key!r} has type {type(value).__name__}")
    return value


def _unique_nonempty(values: list[Any]) -> list[str]:
    """Strings that are not blank, exact duplicates removed, first-seen order."""
    out: list[str] = []
    for value in values:
        if isinstance(value, str) and value.strip() and value not in out:
            out.append(value)
    return out


# ---------------------------------------------------------------------------------------------
# JSON lines: one fast polars read, a line-by-line scan only when that fails


@dataclass(frozen=True)
class _Column:
    """One column to read: ``source`` field in the file → canonical ``target`` of ``kind``.

    kinds: ``id`` (str or int → str; required non-empty), ``str`` (null → ``""``), ``answers``
    (null → [], str → [str], list of str; blank strings dropped), ``int`` (integer; integral
    floats and digit strings accepted), ``paragraphs`` (str, or list of str joined by newlines).
    """

    source: str
    target: str
    kind: str
    required: bool = True
    default: Any = None


def _iter_jsonl(path: Path) -> Iterator[tuple[int, Any]]:
    """Yield ``(line_number, parsed_value)`` for every non-blank line (1-based numbers)."""
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise InputError(f"{where(path, number)}: not UTF-8 text ({exc.reason})") from exc
            if not line.strip():
                continue
            try:
                value = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InputError(f"{where(path, number)}: malformed JSON line: {exc.msg}") from exc
            yield number, value


def _iter_jsonl_objects(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    for number, value in _iter_jsonl(path):
        if not isinstance(value, dict):
            raise InputError(
                f"{where(path, number)}: expected a JSON object, found {type(value).__name__}"
            )
        yield number, value


def _line_of_row(path: Path, row: int) -> int:
    """1-based line number of the ``row``-th (0-based) record: blank lines hold no record."""
    seen = -1
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, start=1):
            if raw.strip():
                seen += 1
                if seen == row:
                    return number
    return seen + 2  # past the end: only reachable if the file changed underneath us


def _row_place(path: Path, fmt: str, row: int) -> str:
    """Where record ``row`` (0-based) lives: ``file:line`` for JSON lines, else the row."""
    if fmt == "jsonl":
        return where(path, _line_of_row(path, row))
    return f"{path} (row {row + 1})"


class _SlowPath(Exception):
    """The fast polars read produced a column type that needs per-value handling."""

    def __init__(self, column: _Column, dtype: pl.DataType) -> None:
        super().__init__(column.source)
        self.column = column
        self.dtype = dtype


def _read_table(path: Path, fmt: str, columns: list[_Column]) -> pl.DataFrame:
    """Read ``columns`` of a JSON-lines or parquet file into a frame of canonical types.

    JSON lines are parsed by polars in one go; only if that fails, or a column has an
    unexpected type, is the file scanned line by line, which either coerces the values or
    names the offending line. A blank line holds no record. A required id that is missing or
    empty is an error. Ids may be ints or strings (ints become their decimal text). Where
    polars reads a column as text it writes any other JSON value it meets there as JSON text
    (``[1]`` → ``"[1]"``), so an id or text given as a list or object is kept as that text, not
    rejected; an ``answers`` column read as text always goes through the line-by-line path,
    since it may mix strings and lists.
    """
    if not path.is_file():
        raise InputError(f"{path}: no such file")
    raw: pl.DataFrame | None = None
    try:
        if fmt == "jsonl":
            raw = pl.read_ndjson(path, infer_schema_length=None)
        else:
            raw = pl.read_parquet(path)
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
                if not column.required:
                    continue
                missing = pl.col(column.target).is_null()
                if column.kind == "id":
                    missing = missing | (pl.col(column.target) == "")
                bad = frame.with_row_index("_row").filter(missing)
                if bad.height:
                    place = _row_place(path, fmt, int(bad.get_column("_row")[0]))
                    raise InputError(f"{place}: {_missing(column)}")
            return frame
    return _read_jsonl_slowly(path, columns)


_INTEGER_TYPES = (pl.Int8, pl.Int16, pl.Int32, pl.Int64, pl.UInt8, pl.UInt16, pl.UInt32, pl.UInt64)


def _normalise(raw: pl.DataFrame, columns: list[_Column], path: Path, typed: bool) -> pl.DataFrame:
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
        if dtype == pl.Null:
            expr = _default_expr(column) if not column.required else col.cast(pl.String)
        elif column.kind == "id" and (dtype == pl.String or dtype in _INTEGER_TYPES):
            expr = col.cast(pl.String)
        elif column.kind == "str" and dtype == pl.String:
            expr = col if column.required else col.fill_null("")
        elif column.kind == "int" and dtype in _INTEGER_TYPES:
            expr = col.cast(pl.Int64)
            if not column.required:
                expr = expr.fill_null(column.default)
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


def _default_expr(column: _Column) -> pl.Expr:
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


def _read_jsonl_slowly(path: Path, columns: list[_Column]) -> pl.DataFrame:
    """Line-by-line read with per-value coercion; the first bad line is an error."""
    values: dict[str, list[Any]] = {c.target: [] for c in columns}
    for number, record in _iter_jsonl_objects(path):
        for column in columns:
            values[column.target].append(_coerce(record, column, where(path, number)))
    return pl.DataFrame(values, schema={c.target: _DTYPES[c.kind] for c in columns})


def _coerce(record: dict[str, Any], column: _Column, at: str) -> Any:
    """One field of one JSON record as the column's canonical Python value."""
    value = record.get(column.source)
    if value is None:
        if column.required:
            raise InputError(f"{at}: {_missing(column)}")
        return _python_default(column)
    kind = column.kind
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
        return _unique_nonempty([value])
    elif kind == "answers" and isinstance(value, list):
        if all(v is None or isinstance(v, (str, int, float)) for v in value):
            return _unique_nonempty([None if v is None else str(v) for v in value])
    elif kind == "int" and _integral(value):
        return int(value)
    raise InputError(
        f"{at}: field {column.source!r} = {_short(value)} does not fit {column.target!r} ({kind})"
    )


def _missing(column: _Column) -> str:
    if column.kind == "id":
        return f"missing or empty {column.source!r}"
    return f"missing {column.source!r}"


def _integral(value: Any) -> bool:
    """An int, an integral float, or a string of digits (JSON writers differ)."""
    if isinstance(value, int):
        return True
    if isinstance(value, float):
        return value.is_integer()
    return isinstance(value, str) and _is_int(value.strip())


def _python_default(column: _Column) -> Any:
    if column.kind == "answers":
        return []
    if column.kind == "int":
        return column.default
    return "" if column.default is None else column.default


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 40 else text[:37] + "..."


def _check_unique(frame: pl.DataFrame, column: str, path: Path, fmt: str, label: str) -> None:
    """Raise naming the file and place of the second occurrence of the first repeated id."""
    dup = frame.select(pl.col(column)).with_row_index("_row").filter(pl.col(column).is_duplicated())
    if dup.height:
        value = dup.get_column(column)[0]
        rows = dup.filter(pl.col(column) == value).get_column("_row")
        first, second = int(rows[0]), int(rows[1])
        if fmt == "jsonl":
            raise InputError(
                f"{where(path, _line_of_row(path, second))}: duplicate {label} {value!r} "
                f"(first at line {_line_of_row(path, first)})"
            )
        raise InputError(
            f"{path} (row {second + 1}): duplicate {label} {value!r} (first at row {first + 1})"
        )


def _check_references(
    qrels: pl.DataFrame,
    corpus: pl.DataFrame,
    queries: pl.DataFrame,
    place: Callable[[int], str],
    queries_file: Path,
    corpus_file: Path,
) -> None:
    """Every judgment must name a known document and query; ``place(row)`` locates a row."""
    indexed = qrels.with_row_index("_row")
    unknown_doc = indexed.join(corpus.select("doc_id"), on="doc_id", how="anti")
    if unknown_doc.height:
        row = unknown_doc.sort("_row").row(0, named=True)
        raise InputError(
            f"{place(row['_row'])}: judgment names doc_id {row['doc_id']!r}, "
            f"which is not in {corpus_file}"
        )
    unknown_query = indexed.join(queries.select("query_id"), on="query_id", how="anti")
    if unknown_query.height:
        row = unknown_query.sort("_row").row(0, named=True)
        raise InputError(
            f"{place(row['_row'])}: judgment names query_id {row['query_id']!r}, "
            f"which is not in {queries_file}"
        )


def _check_nonempty_corpus(corpus: pl.DataFrame, path: Path) -> None:
    if corpus.height == 0:
        raise InputError(f"{path}: the corpus is empty (no documents)")


# ---------------------------------------------------------------------------------------------
# BEIR


def load_beir(directory: Path, split: str = "test", spec: str | None = None) -> Dataset:
    """Read a BEIR folder: ``corpus.jsonl``, ``queries.jsonl`` and ``qrels/<split>.tsv``.

    * corpus: ``_id`` (str or int) → ``doc_id``; missing ``title``/``text`` become ``""``.
    * queries: ``_id``, ``text``; ``answers`` from ``metadata.answers`` and/or
      ``metadata.answer`` (string or list) when present, else an empty list. **Only queries
      with at least one judgment in the split are kept** (as BEIR's own loader does), in
      ``queries.jsonl`` order; judgments with score 0 count as judgments.
    * qrels: tab-separated ``query-id corpus-id score``, with or without a header line. The
      first line is a header if its third field is not an integer (BEIR's own loader always
      skips line 1, silently losing a judgment of header-less files; this one does not).
      Blank lines are ignored; a line without exactly three fields, a non-integer score, a
      repeated (query, document) pair, or a judgment naming an unknown document or query is
      an :class:`InputError` at ``file:line``.
    """
    if not directory.is_dir():
        raise InputError(f"{directory}: not a directory (beir: needs a BEIR folder)")
    corpus_file = directory / "corpus.jsonl"
    queries_file = directory / "queries.jsonl"
    qrels_file = directory / "qrels" / f"{split}.tsv"
    for needed in (corpus_file, queries_file):
        if not needed.is_file():
            raise InputError(f"{needed}: no such file (expected in a BEIR folder)")
    if not qrels_file.is_file():
        splits = sorted(p.stem for p in (directory / "qrels").glob("*.tsv"))
        raise InputError(
            f"{qrels_file}: no such file; splits available: {', '.join(splits) or 'none'}"
        )

    corpus = _read_table(
        corpus_file,
        "jsonl",
        [
            _Column("_id", "doc_id", "id"),
            _Column("title", "title", "str", required=False),
            _Column("text", "text", "str", required=False),
        ],
    )
    _check_nonempty_corpus(corpus, corpus_file)
    _check_unique(corpus, "doc_id", corpus_file, "jsonl", "doc_id")
    queries = _read_beir_queries(queries_file)
    qrels, qrel_lines = _read_qrels_tsv(qrels_file)

    def place(row: int) -> str:
        return where(qrels_file, qrel_lines[row])

    _check_references(qrels, corpus, queries, place, queries_file, corpus_file)
    queries = queries.join(
        qrels.select("query_id").unique(), on="query_id", how="semi", maintain_order="left"
    )
    return Dataset(spec or f"beir:{directory}?split={split}", corpus, queries, qrels)


def _read_beir_queries(path: Path) -> pl.DataFrame:
    """BEIR queries, line by line (they are few and carry free-form ``metadata``)."""
    ids: list[str] = []
    questions: list[str] = []
    answer_lists: list[list[str]] = []
    first_line: dict[str, int] = {}
    id_column = _Column("_id", "query_id", "id")
    text_column = _Column("text", "question", "str")
    for number, record in _iter_jsonl_objects(path):
        at = where(path, number)
        qid = _coerce(record, id_column, at)
        if qid in first_line:
            raise InputError(f"{at}: duplicate query_id {qid!r} (first at line {first_line[qid]})")
        first_line[qid] = number
        answers: list[str] = []
        metadata = record.get("metadata")
        if isinstance(metadata, dict):
            for key in ("answers", "answer"):
                answers += _coerce(metadata, _Column(key, "answers", "answers", False), at)
        elif metadata is not None:
            raise InputError(f"{at}: 'metadata' is not a JSON object")
        ids.append(qid)
        questions.append(_coerce(record, text_column, at))
        answer_lists.append(_unique_nonempty(answers))
    return pl.DataFrame(
        {"query_id": ids, "question": questions, "answers": answer_lists}, schema=QUERIES_SCHEMA
    )


def _read_qrels_tsv(path: Path) -> tuple[pl.DataFrame, list[int]]:
    """``query-id<TAB>corpus-id<TAB>score`` lines (header optional) and their line numbers."""
    query_ids: list[str] = []
    doc_ids: list[str] = []
    scores: list[int] = []
    lines: list[int] = []
    seen: dict[tuple[str, str], int] = {}
    first = True
    with open(path, encoding="utf-8", errors="strict") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            fields = line.rstrip("\r\n").split("\t")
            fields = [f.strip() for f in fields]
            if first:
                first = False
                if len(fields) == 3 and not _is_int(fields[2]):
                    continue  # header, e.g. "query-id corpus-id score"
            at = where(path, number)
            if len(fields) != 3:
                raise InputError(
                    f"{at}: expected 3 tab-separated fields (query-id, corpus-id, score), "
                    f"found {len(fields)}"
                )
            qid, did, score = fields
            if not qid or not did:
                raise InputError(f"{at}: empty query-id or corpus-id")
            if not _is_int(score):
                raise InputError(f"{at}: score {score!r} is not an integer")
            if (qid, did) in seen:
                raise InputError(
                    f"{at}: second judgment for query {qid!r} and document {did!r} "
                    f"(first at line {seen[(qid, did)]})"
                )
            seen[(qid, did)] = number
            query_ids.append(qid)
            doc_ids.append(did)
            scores.append(int(score))
            lines.append(number)
    if not lines:
        raise InputError(f"{path}: no judgments")
    frame = pl.DataFrame(
        {"query_id": query_ids, "doc_id": doc_ids, "relevance": scores}, schema=QRELS_SCHEMA
    )
    return frame, lines


def _is_int(text: str) -> bool:
    return text.lstrip("+-").isdigit()


# ---------------------------------------------------------------------------------------------
# KILT


def load_kilt(path: Path, corpus_file: Path | None = None, spec: str | None = None) -> Dataset:
    """Read a KILT JSON-lines file (``id``, ``input``, ``output[].answer``/``provenance``).

    * queries: ``id`` (int or str → str), ``input`` (required, non-blank) and every non-blank
      ``output[].answer`` (duplicates removed, order kept). A record with no answer is an
      :class:`InputError` at ``file:line`` (KILT test files without outputs cannot be used).
    * qrels: one ``(id, str(wikipedia_id), 1)`` per distinct page named in any
      ``output[].provenance``; ``wikipedia_id`` may be an int or a string.
    * corpus with ``corpus=FILE``: a KILT knowledge source (``wikipedia_id``,
      ``wikipedia_title``, ``text`` = list of paragraphs), one document per page, the
      paragraphs stripped, blank ones dropped, joined by newlines. A provenance page missing
      from it is an error. In a spec, a relative FILE is looked up in the working directory
      first, then beside the KILT file.
    * corpus without ``corpus=``: a stand-in built from the provenance itself, one document per
      page in first-seen order: ``title`` = the first non-blank provenance ``title``,
      ``text`` = the distinct non-blank provenance ``text`` values joined by newlines, or ``""``
      when provenance carries no text (KILT's usually does not). Good for smoke tests, not for
      a real retrieval evaluation. With no provenance at all this corpus is empty: an error.
    """
    if not path.is_file():
        raise InputError(f"{path}: no such file (kilt: needs a KILT .jsonl file)")
    ids: list[str] = []
    questions: list[str] = []
    answer_lists: list[list[str]] = []
    qrel_rows: dict[tuple[str, str], int] = {}
    pages: dict[str, tuple[str, list[str]]] = {}
    first_line: dict[str, int] = {}
    id_column = _Column("id", "query_id", "id")
    page_column = _Column("wikipedia_id", "doc_id", "id")
    for number, record in _iter_jsonl_objects(path):
        at = where(path, number)
        qid = _coerce(record, id_column, at)
        if qid in first_line:
            raise InputError(f"{at}: duplicate id {qid!r} (first at line {first_line[qid]})")
        first_line[qid] = number
        question = record.get("input")
        if not isinstance(question, str) or not question.strip():
            raise InputError(f"{at}: record {qid!r} has no 'input' question")
        outputs = record.get("output") or []
        if not isinstance(outputs, list):
            raise InputError(f"{at}: 'output' of record {qid!r} is not a list")
        answers: list[str] = []
        for output in outputs:
            if not isinstance(output, dict):
                raise InputError(f"{at}: an 'output' entry of record {qid!r} is not an object")
            answers.append(output.get("answer"))
            for provenance in output.get("provenance") or []:
                if not isinstance(provenance, dict):
                    raise InputError(f"{at}: a provenance entry of record {qid!r} is not an object")
                page = _coerce(provenance, page_column, at)
                qrel_rows.setdefault((qid, page), number)
                title, texts = pages.setdefault(page, ("", []))
                new_title = provenance.get("title")
                if not title and isinstance(new_title, str) and new_title.strip():
                    pages[page] = (new_title, texts)
                text = provenance.get("text")
                if isinstance(text, str) and text.strip() and text not in texts:
                    texts.append(text)
        kept = _unique_nonempty(answers)
        if not kept:
            raise InputError(f"{at}: record {qid!r} has no non-empty 'output' answer")
        ids.append(qid)
        questions.append(question.strip())
        answer_lists.append(kept)
    queries = pl.DataFrame(
        {"query_id": ids, "question": questions, "answers": answer_lists}, schema=QUERIES_SCHEMA
    )
    qrels = pl.DataFrame(
        {
            "query_id": [q for q, _ in qrel_rows],
            "doc_id": [d for _, d in qrel_rows],
            "relevance": [1] * len(qrel_rows),
        },
        schema=QRELS_SCHEMA,
    )
    if corpus_file is None:
        if not pages:
            raise InputError(
                f"{path}: the corpus is empty (no provenance pages); give a KILT knowledge "
                "source with ?corpus=FILE"
            )
        corpus = pl.DataFrame(
            {
                "doc_id": list(pages),
                "title": [title for title, _ in pages.values()],
                "text": ["\n".join(texts) for _, texts in pages.values()],
            },
            schema=CORPUS_SCHEMA,
        )
    else:
        corpus = _read_table(
            corpus_file,
            "jsonl",
            [
                _Column("wikipedia_id", "doc_id", "id"),
                _Column("wikipedia_title", "title", "str", required=False),
                _Column("text", "text", "paragraphs", required=False),
            ],
        )
        _check_nonempty_corpus(corpus, corpus_file)
        _check_unique(corpus, "doc_id", corpus_file, "jsonl", "wikipedia_id")
        qrel_lines = list(qrel_rows.values())
        _check_references(
            qrels, corpus, queries, lambda row: where(path, qrel_lines[row]), path, corpus_file
        )
    suffix = f"?corpus={corpus_file}" if corpus_file is not None else ""
    return Dataset(spec or f"kilt:{path}{suffix}", corpus, queries, qrels)


# ---------------------------------------------------------------------------------------------
# generic JSON lines / parquet tables


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
    if fmt not in ("jsonl", "parquet"):
        raise InputError(f"unknown table format {fmt!r}; use jsonl or parquet")
    if not directory.is_dir():
        raise InputError(f"{directory}: not a directory ({fmt}: needs a folder of tables)")
    names = dict(rename or {})
    unknown = sorted(set(names) - set(CANONICAL_COLUMNS))
    if unknown:
        columns = ", ".join(CANONICAL_COLUMNS)
        raise InputError(f"cannot rename {unknown[0]!r}: the columns are {columns}")

    def col(target: str, kind: str, required: bool = True, default: Any = None) -> _Column:
        return _Column(names.get(target, target), target, kind, required, default)

    corpus_file = directory / f"corpus.{fmt}"
    queries_file = directory / f"queries.{fmt}"
    qrels_file = directory / f"qrels.{fmt}"
    corpus = _read_table(
        corpus_file,
        fmt,
        [col("doc_id", "id"), col("title", "str", required=False), col("text", "str")],
    )
    _check_nonempty_corpus(corpus, corpus_file)
    _check_unique(corpus, "doc_id", corpus_file, fmt, "doc_id")
    queries = _read_table(
        queries_file,
        fmt,
        [col("query_id", "id"), col("question", "str"), col("answers", "answers", False)],
    )
    _check_unique(queries, "query_id", queries_file, fmt, "query_id")
    if qrels_file.exists():
        qrels = _read_table(
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
                f"{_row_place(qrels_file, fmt, row['_row'])}: second judgment for query "
                f"{row['query_id']!r} and document {row['doc_id']!r}"
            )
        _check_references(
            qrels,
            corpus,
            queries,
            lambda row: _row_place(qrels_file, fmt, row),
            queries_file,
            corpus_file,
        )
    else:
        qrels = pl.DataFrame(schema=QRELS_SCHEMA)
    return Dataset(spec or f"{fmt}:{directory}", corpus, queries, qrels)
