"""The one rule for opening and parsing a user's input file (datasets, runs, qrels, labels, YAML).

Every reader of a user-supplied file goes through this module, so the rule holds everywhere:

* **Regular files only.** A FIFO, a character device (``/dev/zero``), a socket, a block device
  or a folder is refused in one line naming the path and what it is. The file is opened with
  ``O_NONBLOCK`` and checked with ``fstat`` on the open descriptor, so a FIFO never blocks the
  open and a file swapped for a FIFO after a check is still caught.
* **Bounded.** A file larger than the input limit is refused before it is read:
  ``$ERAG_MAX_INPUT_BYTES`` (default :data:`DEFAULT_MAX_INPUT_BYTES`, 8 GiB) for data files,
  :data:`MAX_CONFIG_BYTES` (16 MiB) for YAML configs (the registry, a reader config). A
  compressed SQuAD file is bounded by the same limit after decompression (a zip bomb stops
  at the limit).
* **UTF-8, BOM stripped.** Text is UTF-8; one byte-order mark (``EF BB BF``) at the very start
  of a file is removed, as Python's ``utf-8-sig`` does, so ``\\ufeff3`` never becomes a query id.
  A byte-order mark at the start of any *other* line of a line-oriented file (two files
  concatenated) is refused at ``file:line``.
* **Duplicate keys refused.** In a JSON object (a JSON document or a JSON-lines record) or a
  YAML mapping, a key given twice is refused at ``file:line`` naming the key (JSON and YAML
  parsers otherwise keep the last one silently).
* **No YAML aliases or anchors** (``&a`` / ``*a``): refused at ``file:line`` (an alias bomb
  expands exponentially); only safe YAML tags are accepted (``yaml.SafeLoader``).
* **Nesting bounded.** JSON nested deeper than the parser's limit is one line, not a
  ``RecursionError`` traceback.
* **JSON numbers are finite.** ``NaN``, ``Infinity`` and ``-Infinity`` are not JSON (RFC 8259),
  though Python's parser reads them: refused at ``file:line`` naming the word, in every JSON
  file and JSON-lines record (a label, a score or a time never becomes NaN on the way in).
* **Frames.** A table handed over in memory (the Python API, a Dagster asset's value) is a
  polars ``DataFrame`` or a pandas one, turned into polars (:func:`as_polars_frame`): the same
  rules then read both.

Everything refused is an :class:`~erag_dagster.core.errors.InputError` (exit status 2).
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import yaml

from erag_dagster.core.errors import InputError, where
from erag_dagster.core.hashing import sha256_stream

MAX_INPUT_BYTES_ENV = "ERAG_MAX_INPUT_BYTES"
"""Environment variable: the largest data file read, in bytes (default 8 GiB)."""
DEFAULT_MAX_INPUT_BYTES = 8 * 2**30
MAX_CONFIG_BYTES = 16 * 2**20
"""The largest YAML config (registry, reader config) read, in bytes."""
UNBOUNDED = 2**63 - 1
"""A limit for files that are streamed, never held in memory (model weights being hashed)."""
BOM = b"\xef\xbb\xbf"

_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def max_input_bytes() -> int:
    """The data-file limit: ``$ERAG_MAX_INPUT_BYTES`` (a positive integer) or 8 GiB."""
    text = os.environ.get(MAX_INPUT_BYTES_ENV, "").strip()
    if not text:
        return DEFAULT_MAX_INPUT_BYTES
    if not (text.isascii() and text.isdigit()) or int(text) < 1:
        raise InputError(f"{MAX_INPUT_BYTES_ENV}={text!r} is not a positive number of bytes")
    return int(text)


def _not_regular(path: Path | str, mode: int) -> InputError:
    kind = next((name for test, name in _KINDS if test(mode)), "not a regular file")
    return InputError(f"{path}: is {kind}, not a regular file; give a file")


def _size_limit(path: Path | str, size: int, limit: int | None) -> None:
    """Refuse ``size`` over ``limit`` (None: :func:`max_input_bytes`, which the user can raise)."""
    if limit is None:
        limit, hint = max_input_bytes(), f"set {MAX_INPUT_BYTES_ENV} to read larger files"
    else:
        hint = "the most this kind of file may hold"
    if size > limit:
        raise InputError(f"{path}: {size} bytes is over the input limit of {limit} bytes ({hint})")


def regular_file(path: Path | str, limit: int | None = None) -> Path:
    """``path`` if it names a regular file (symlinks followed) within ``limit`` bytes
    (default :func:`max_input_bytes`), else :class:`InputError` (missing, a folder, a FIFO, a
    device, too large)."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if not stat.S_ISREG(info.st_mode):
        raise _not_regular(path, info.st_mode)
    _size_limit(path, info.st_size, limit)
    return Path(path)


def open_binary(path: Path | str, limit: int | None = None) -> IO[bytes]:
    """Open a regular file for reading bytes (rule above); the caller closes it.

    ``O_NONBLOCK`` keeps the open of a FIFO from waiting for a writer; the type and size are
    checked on the open descriptor, so nothing else can be swapped in between.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise InputError(f"{path}: is a folder, not a regular file; give a file") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror or exc})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise _not_regular(path, info.st_mode)
        _size_limit(path, info.st_size, limit)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def regular_file_sha256(path: Path | str, limit: int | None = None) -> str:
    """sha256 hex of a regular file's bytes (rule above: a FIFO or device is refused, not read
    forever)."""
    with open_binary(path, limit) as handle:
        return sha256_stream(handle)


def starts_with_bom(path: Path | str) -> bool:
    """Whether a regular file (rule above) opens with a UTF-8 byte-order mark."""
    with open_binary(path) as handle:
        return handle.read(len(BOM)) == BOM


def read_bytes(path: Path | str, limit: int | None = None) -> bytes:
    """The whole file's bytes (rule above), a leading BOM removed."""
    with open_binary(path, limit) as handle:
        data = handle.read()
    return data[len(BOM) :] if data.startswith(BOM) else data


def bounded_read(handle: IO[bytes], label: str, limit: int | None = None) -> bytes:
    """Read a stream (e.g. a decompressing one) to its end, refusing more than ``limit`` bytes
    (default :func:`max_input_bytes`); a leading BOM is removed."""
    limit = max_input_bytes() if limit is None else limit
    data = handle.read(limit + 1)
    if len(data) > limit:
        raise InputError(
            f"{label}: more than {limit} bytes once decompressed (over the input limit; set "
            f"{MAX_INPUT_BYTES_ENV} to read larger files)"
        )
    return data[len(BOM) :] if data.startswith(BOM) else data


def decode(data: bytes, label: str) -> str:
    """UTF-8 text of ``data``; the first undecodable byte is refused at ``label:line``."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        byte = data[exc.start : exc.start + 1].hex()
        raise InputError(
            f"{where(label, line)}: not UTF-8 text (byte 0x{byte} at column {column}); save the "
            "file as UTF-8"
        ) from exc


def read_text(path: Path | str, limit: int | None = None) -> str:
    """The whole file as UTF-8 text (rule above), a leading BOM removed."""
    return decode(read_bytes(path, limit), str(path))


def text_lines(path: Path | str, limit: int | None = None) -> Iterator[tuple[int, str]]:
    """``(line number, text)`` for every line of a UTF-8 file (1-based; the line ending kept).

    A BOM opening line 1 is removed; one opening any later line is refused at ``file:line``; a
    line that is not UTF-8 is refused at ``file:line`` with the byte and column.
    """
    with open_binary(path, limit) as handle:
        for number, raw in enumerate(handle, start=1):
            if raw.startswith(BOM):
                if number > 1:
                    raise InputError(
                        f"{where(path, number)}: a byte-order mark (U+FEFF) starts this line, "
                        "not the file (were two files joined?); remove it"
                    )
                raw = raw[len(BOM) :]
            try:
                yield number, raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                byte = raw[exc.start : exc.start + 1].hex()
                raise InputError(
                    f"{where(path, number)}: not UTF-8 text (byte 0x{byte} at column "
                    f"{exc.start + 1}); save the file as UTF-8"
                ) from exc


# ---------------------------------------------------------------------------------------------
# JSON: duplicate keys and nesting refused


class _DuplicateKey(Exception):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


class _NotFinite(Exception):
    def __init__(self, word: str) -> None:
        super().__init__(word)
        self.word = word


def _refuse_constant(word: str) -> Any:
    raise _NotFinite(word)


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e400: Python's parser would read inf
        raise _NotFinite(text)
    return value


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKey(key)
            seen.add(key)
    return out


_DECODER = json.JSONDecoder(
    object_pairs_hook=_pairs, parse_constant=_refuse_constant, parse_float=_finite_float
)
_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[{}\[\],:]', re.DOTALL)
_CONSTANT = re.compile(r'"(?:[^"\\]|\\.)*"|-?Infinity|NaN|-?[0-9][0-9.eE+-]*', re.DOTALL)


def _constant_offset(text: str, word: str) -> int:
    """Offset of the first ``word`` (``NaN``, ``Infinity``, ``-Infinity``, a number literal)
    outside a string."""
    for token in _CONSTANT.finditer(text):
        if token.group() == word:
            return token.start()
    return 0


def _duplicate_offset(text: str) -> int:
    """Offset of the first key repeated within one object (only called once one is known)."""
    stack: list[tuple[set[str], list[bool]] | None] = []
    for token in _TOKEN.finditer(text):
        tok = token.group()
        top = stack[-1] if stack else None
        if tok == "{":
            stack.append((set(), [True]))
        elif tok == "[":
            stack.append(None)
        elif tok in "}]":
            if stack:
                stack.pop()
        elif top is None:
            continue
        elif tok == ",":
            top[1][0] = True
        elif tok == ":":
            top[1][0] = False
        elif top[1][0]:
            key = json.loads(tok)
            if key in top[0]:
                return token.start()
            top[0].add(key)
    return 0


def parse_json(text: str, label: str, line: int | None = None) -> Any:
    """Parse one JSON document (``line``: the 1-based line it sits on, for a JSON-lines
    record) or raise :class:`InputError` at ``label:line``: malformed JSON, a key repeated in
    one object (named), ``NaN``/``Infinity`` (not JSON), or nesting deeper than the parser's
    limit."""
    try:
        return _DECODER.decode(text)
    except _DuplicateKey as dup:
        at = line if line is not None else text.count("\n", 0, _duplicate_offset(text)) + 1
        raise InputError(
            f"{where(label, at)}: key {dup.key!r} appears twice in one JSON object; keep one"
        ) from None
    except _NotFinite as bad:
        at = line if line is not None else text.count("\n", 0, _constant_offset(text, bad.word)) + 1
        raise InputError(
            f"{where(label, at)}: {bad.word} is not a finite number (JSON has no NaN or "
            "Infinity); write a finite number, or leave the value out"
        ) from None
    except json.JSONDecodeError as exc:
        if line is not None:
            raise InputError(f"{where(label, line)}: malformed JSON line: {exc.msg}") from None
        raise InputError(f"{where(label, exc.lineno)}: malformed JSON: {exc.msg}") from None
    except RecursionError:
        raise InputError(
            f"{where(label, line)}: JSON nested too deeply (more levels than the parser's "
            "limit of about 1000)"
        ) from None


def json_key_line(text: str, key: str) -> int | None:
    """The 1-based line on which the top-level object of the JSON ``text`` (already parsed:
    keys are unique) gives ``key``; ``None`` when it does not. For error lines that name a
    value of a JSON document by its key (``labels.json:3: label at rank 2 of query 'q1'``)."""
    depth = 0
    expecting_key = False
    for token in _TOKEN.finditer(text):
        tok = token.group()
        if tok in "{[":
            depth += 1
            expecting_key = tok == "{" and depth == 1
        elif tok in "}]":
            depth -= 1
        elif depth == 1 and tok == ",":
            expecting_key = True
        elif depth == 1 and tok == ":":
            expecting_key = False
        elif depth == 1 and expecting_key and json.loads(tok) == key:
            return text.count("\n", 0, token.start()) + 1
    return None


def load_json(path: Path | str, limit: int | None = None) -> Any:
    """Parse a JSON file under the rule above (regular, bounded, BOM stripped, no duplicate
    keys, bounded nesting)."""
    return parse_json(read_text(path, limit), str(path))


# ---------------------------------------------------------------------------------------------
# YAML: safe tags only, no aliases or anchors, no duplicate keys


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses aliases, anchors and duplicate mapping keys."""

    label = "YAML"

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()
        anchor = getattr(event, "anchor", None)
        if isinstance(event, yaml.AliasEvent) or anchor is not None:
            sign = "*" if isinstance(event, yaml.AliasEvent) else "&"
            raise InputError(
                f"{where(self.label, event.start_mark.line + 1)}: YAML {sign}{anchor} "
                "(anchors and aliases are not accepted here); write the value out"
            )
        return super().compose_node(parent, index)

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        if isinstance(node, yaml.MappingNode):
            seen: set[Any] = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                try:
                    repeated = key in seen
                except TypeError:  # an unhashable key: the base class says so
                    break
                if repeated:
                    raise InputError(
                        f"{where(self.label, key_node.start_mark.line + 1)}: key {key!r} "
                        "appears twice in one mapping; keep one"
                    )
                seen.add(key)
        return super().construct_mapping(node, deep=deep)


def parse_yaml(text: str, label: str) -> Any:
    """Parse YAML text (rule above); errors name ``label:line``."""
    return _parse_yaml(text, label, lambda loader: loader.get_single_data())


def _parse_yaml(text: str, label: str, read: Any) -> Any:
    """``read(loader)`` over a :class:`_StrictLoader` of ``text``; a YAML error is one
    :class:`InputError` naming ``label:line``."""
    loader = _StrictLoader(text)
    loader.label = label
    try:
        return read(loader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = mark.line + 1 if mark is not None else None
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise InputError(f"{where(label, at)}: invalid YAML ({problem})") from None
    except RecursionError:
        raise InputError(f"{label}: YAML nested too deeply") from None
    finally:
        loader.dispose()


def load_yaml_documents(path: Path | str, limit: int = MAX_CONFIG_BYTES) -> list[Any]:
    """Every document of a YAML file (``---`` between them: a Dagster ``defs.yaml`` may
    declare several components), each by the rule of :func:`load_yaml`."""

    def documents(loader: _StrictLoader) -> list[Any]:
        found = []
        while loader.check_data():
            found.append(loader.get_data())
        return found

    return _parse_yaml(read_text(path, limit), str(path), documents)


def load_yaml(path: Path | str, limit: int = MAX_CONFIG_BYTES) -> Any:
    """Parse a YAML config file (regular, at most ``limit`` bytes, BOM stripped, safe tags,
    no aliases, anchors or duplicate keys)."""
    return parse_yaml(read_text(path, limit), str(path))


def yaml_key_lines(path: Path | str, *section: str) -> dict[str, int]:
    """The 1-based line of each key of the mapping at ``section`` (a path of keys from the
    top) of a YAML file already parsed by :func:`load_yaml`; ``{}`` when there is no such
    mapping or the file cannot be read again. For error lines only: never raises."""
    try:
        node = yaml.compose(read_text(path, MAX_CONFIG_BYTES), Loader=yaml.SafeLoader)
    except (InputError, OSError, yaml.YAMLError, RecursionError):
        return {}
    for key in section:
        if not isinstance(node, yaml.MappingNode):
            return {}
        node = next((v for k, v in node.value if getattr(k, "value", None) == key), None)
    if not isinstance(node, yaml.MappingNode):
        return {}
    return {str(k.value): k.start_mark.line + 1 for k, _ in node.value}


# ---------------------------------------------------------------------------------------------
# Frames handed over in memory


def as_polars_frame(value: Any) -> Any:
    """``value`` as a polars ``DataFrame`` when it is a polars or a pandas one (converted with
    ``polars.from_pandas``, its index dropped), else ``None``: the one place that decides what
    counts as a table handed over in memory (the Python API, a Dagster asset's value)."""
    import polars as pl

    if isinstance(value, pl.DataFrame):
        return value
    kind = type(value)
    if kind.__name__ == "DataFrame" and kind.__module__.split(".")[0] == "pandas":
        try:
            return pl.from_pandas(value)
        except Exception as exc:  # a column polars cannot hold (mixed Python objects, ...)
            raise InputError(
                f"a pandas frame polars cannot read ({str(exc).splitlines()[0]}); give a "
                "polars DataFrame"
            ) from None
    return None
