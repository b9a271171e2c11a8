"""The dataset spec grammar: ``kind[:PATH][?key=value&...]`` parsed and checked (syntax only).

See :mod:`erag_dagster.data.loaders` for the grammar, the kinds and what each option does.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple
from urllib.parse import unquote

from erag_dagster.core.errors import InputError

__all__ = [
    "CANONICAL_COLUMNS",
    "COMMON_OPTIONS",
    "KIND_OPTIONS",
    "KNOWN_KINDS",
    "DatasetSpec",
    "parse_spec",
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

_KIND_USAGE = "sample, squad:PATH, beir:DIR, kilt:FILE, jsonl:DIR, parquet:DIR"


class DatasetSpec(NamedTuple):
    """A parsed dataset spec: ``kind``, ``path`` (``None`` for ``sample``) and ``options``."""

    kind: str
    path: Path | None
    options: dict[str, str]

    @property
    def name(self) -> str:
        """A short name for reports: the kind for ``sample`` (or a spec whose path has no
        name, such as ``/``), else the path's folder name or file name without its suffix;
        options are left out (the full spec belongs in metadata)."""
        if self.path is None or not self.path.name:
            return self.kind
        return self.path.name if self.path.is_dir() or not self.path.suffix else self.path.stem

    @property
    def question_subset(self) -> bool:
        """Whether the spec keeps only some of the questions (``max_questions``,
        ``spread_questions``); the corpus is kept whole either way."""
        return "max_questions" in self.options or "spread_questions" in self.options


def parse_spec(spec: str) -> DatasetSpec:
    """Split ``kind[:PATH][?key=value&...]`` into its parts and check them.

    The kind is matched case-insensitively; the first ``?`` starts the options, so a PATH
    cannot contain ``?`` (write ``%3F``). ``max_questions`` and ``passages`` must be positive
    integers up to ``2**31 - 1``. Checks syntax only: whether PATH exists is
    :func:`load_dataset`'s business. Raises :class:`InputError` for a spec that is not a
    string, an unknown kind (listing the known ones), a missing or superfluous PATH, and a
    malformed, repeated, unknown or out-of-range option.
    """
    if not isinstance(spec, str):
        raise InputError(f"a dataset spec is a string such as 'sample' or 'beir:DIR', not {spec!r}")
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
        count = value.isascii() and value.isdigit() and 0 < int(value) <= 2**31 - 1
        if key in COMMON_OPTIONS and not count:
            raise InputError(
                f"dataset spec {spec!r}: {key} must be a positive integer up to 2147483647, "
                f"not {value!r}"
            )
        options[key] = value
    return DatasetSpec(kind, path, options)
