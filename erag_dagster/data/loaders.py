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

Error policy: every problem is one :class:`~erag_dagster.core.errors.InputError` whose message names
the file and 1-based line (``path:line``), or the offending id where a line does not apply (a SQuAD
question id, a parquet row). A missing file, an unknown kind or option, malformed JSON, duplicate
ids, a judgment naming an unknown document or query, a query without gold answers (SQuAD, KILT)
and an empty corpus are all errors; nothing is silently dropped except what a kind's docstring
says it drops. Every file is opened under the one input rule of :mod:`erag_dagster.core.input_files`
(regular files only, bounded, a leading BOM stripped, duplicate keys refused; docs/inputs.md).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from erag_dagster.core.errors import InputError
from erag_dagster.data.chunking import split_dataset
from erag_dagster.data.formats.beir import beir_files, load_beir
from erag_dagster.data.formats.kilt import kilt_files, load_kilt
from erag_dagster.data.formats.squad import SAMPLE_FILE, load_sample, load_squad, sample_file
from erag_dagster.data.formats.tables import load_tables, table_files
from erag_dagster.data.schema import Dataset
from erag_dagster.data.spec import (
    CANONICAL_COLUMNS,
    COMMON_OPTIONS,
    KIND_OPTIONS,
    KNOWN_KINDS,
    DatasetSpec,
    parse_spec,
)

__all__ = [
    "CANONICAL_COLUMNS",
    "COMMON_OPTIONS",
    "KIND_OPTIONS",
    "KNOWN_KINDS",
    "SAMPLE_FILE",
    "DatasetSpec",
    "dataset_source_files",
    "load_beir",
    "load_dataset",
    "load_kilt",
    "load_sample",
    "load_squad",
    "load_tables",
    "parse_spec",
    "spread_questions",
    "take_questions",
]


@dataclass(frozen=True)
class _Format:
    """How one kind finds its files and reads them (``load`` gets those files' spec)."""

    files: Callable[[DatasetSpec, str], tuple[Path, ...]]
    load: Callable[[DatasetSpec, str], Dataset]


def _path(parsed: DatasetSpec) -> Path:
    assert parsed.path is not None  # parse_spec guarantees a path for every kind but sample
    return parsed.path


def _kilt_files(parsed: DatasetSpec, spec: str) -> tuple[Path, ...]:
    found = kilt_files(_path(parsed), parsed.options.get("corpus"), spec)
    return (found.kilt,) if found.corpus is None else (found.kilt, found.corpus)


def _load_kilt(parsed: DatasetSpec, spec: str) -> Dataset:
    found = kilt_files(_path(parsed), parsed.options.get("corpus"), spec)
    return load_kilt(found.kilt, found.corpus, spec)


def _table_files(parsed: DatasetSpec, spec: str) -> tuple[Path, ...]:
    return tuple(p for p in table_files(_path(parsed), parsed.kind) if p is not None)


def _load_tables(parsed: DatasetSpec, spec: str) -> Dataset:
    rename = {k: v for k, v in parsed.options.items() if k in CANONICAL_COLUMNS}
    return load_tables(_path(parsed), parsed.kind, rename, spec)


_FORMATS: dict[str, _Format] = {
    "sample": _Format(
        lambda parsed, spec: (sample_file(),), lambda parsed, spec: load_sample(spec)
    ),
    "squad": _Format(
        lambda parsed, spec: (_path(parsed),), lambda parsed, spec: load_squad(_path(parsed), spec)
    ),
    "beir": _Format(
        lambda parsed, spec: tuple(beir_files(_path(parsed), parsed.options.get("split", "test"))),
        lambda parsed, spec: load_beir(_path(parsed), parsed.options.get("split", "test"), spec),
    ),
    "kilt": _Format(_kilt_files, _load_kilt),
    "jsonl": _Format(_table_files, _load_tables),
    "parquet": _Format(_table_files, _load_tables),
}
assert set(_FORMATS) == set(KNOWN_KINDS), "every known kind needs a loader"


def dataset_source_files(spec: str) -> tuple[Path, ...]:
    """The files :func:`load_dataset` reads for ``spec`` (each checked to exist), in a fixed order.

    The same resolution the loader uses (e.g. a KILT ``corpus=`` name looked up beside the KILT
    file), so a fingerprint over these files sees every change the loader would. Raises
    :class:`InputError` like :func:`load_dataset` for a bad spec or a missing file.
    """
    parsed = _checked(spec)
    return _FORMATS[parsed.kind].files(parsed, spec)


def load_dataset(spec: str) -> Dataset:
    """Load the dataset a spec names, apply ``max_questions`` then ``passages``, and validate.

    ``Dataset.spec`` is the spec string exactly as given; ``Dataset.source_files`` the files
    read (:func:`dataset_source_files`). Raises :class:`InputError` (see the module docstring
    for the policy).
    """
    parsed = _checked(spec)
    fmt = _FORMATS[parsed.kind]
    files = fmt.files(parsed, spec)
    dataset = fmt.load(parsed, spec)
    options = parsed.options
    if "max_questions" in options:
        dataset = take_questions(dataset, int(options["max_questions"]))
    if "spread_questions" in options:
        dataset = spread_questions(dataset, int(options["spread_questions"]))
    if "passages" in options:
        dataset = split_dataset(dataset, int(options["passages"]))
    return replace(dataset, source_files=files).validate()


def _checked(spec: str) -> DatasetSpec:
    parsed = parse_spec(spec)
    if parsed.path is not None and not parsed.path.exists():
        raise InputError(f"dataset spec {spec!r}: no such file or directory: {parsed.path}")
    return parsed


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
