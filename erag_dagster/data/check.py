"""What a dataset spec holds, read through the loaders every command uses: ``check-dataset``.

:func:`check_dataset` loads the spec with :func:`~erag_dagster.data.loaders.load_dataset` (the
same files, rules and one-line :class:`~erag_dagster.core.errors.InputError` at ``file:line`` as
``run``, ``label`` and ``evaluate()``), then counts what it found and notes what will limit an
evaluation. :func:`format_check` renders it as text.

Counts: documents, queries, judgments (and the relevant ones, ``relevance >= 1``), queries with
gold answers, judged queries and, for ``beir:``, the queries of ``queries.jsonl`` the loader left
out (BEIR keeps the queries judged in the split only). Samples: the first record of each file as
it is written there (a JSON-lines or TSV line, a parquet row; ``None`` for a SQuAD/KILT file read
as one document), and the first row of each table as loaded (canonical columns).

Usable: a dataset is usable when some query has gold answers (eRAG labels) or judgments exist
(human-judgment metrics); one with neither raises :class:`InputError` (nothing to evaluate
against). A query or document id that a TREC file cannot hold (empty, or holding whitespace:
:func:`~erag_dagster.data.schema.ids_trec_cannot_hold`, the rule ``retrieve`` refuses by) is
said on the "usable for" line itself — such a dataset is not usable with TREC runs (``retrieve``
refuses it; no TREC run file can name the id), only with runs given as parquet or frames.
Notes (not errors): queries without judgments, some but not all queries without gold answers
(labelling refuses a run that holds one), documents without text.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from erag_dagster.core.errors import InputError
from erag_dagster.core.input_files import text_lines
from erag_dagster.data.loaders import dataset_source_files, load_dataset
from erag_dagster.data.schema import ids_trec_cannot_hold
from erag_dagster.data.spec import parse_spec

SAMPLE_CHARS = 240
"""Longest sample record shown, in characters (longer ones end in ``...``)."""


@dataclass(frozen=True)
class DatasetCheck:
    """What :func:`check_dataset` found (module docstring); counts are rows of the loaded
    tables, after the spec's options (``max_questions``, ``passages``, ...)."""

    spec: str
    kind: str
    files: tuple[Path, ...]
    documents: int
    queries: int
    judgments: int
    relevant_judgments: int
    queries_with_answers: int
    judged_queries: int
    left_out_queries: int | None
    file_samples: dict[str, str | None] = field(default_factory=dict)
    table_samples: dict[str, str | None] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    not_trec: str = ""
    """Why TREC runs cannot be used (an id a TREC file cannot hold, named); ``""`` if they can."""

    @property
    def uses(self) -> str:
        """What the dataset supports: eRAG labels, human-judgment metrics or both — and, when
        an id rules them out, that TREC run files are not among them (:attr:`not_trec`)."""
        parts = []
        if self.queries_with_answers:
            parts.append("eRAG labels (gold answers)")
        if self.judgments:
            parts.append("human-judgment metrics (judgments)")
        limit = f"; NOT with TREC run files or erag-dagster retrieve: {self.not_trec}"
        return " and ".join(parts) + (limit if self.not_trec else "")


def _cut(text: str) -> str:
    text = text.strip()
    return text if len(text) <= SAMPLE_CHARS else text[: SAMPLE_CHARS - 3] + "..."


def _json(row: dict) -> str:
    return _cut(json.dumps(row, ensure_ascii=False, default=str))


def first_record(path: Path) -> str | None:
    """The first record of ``path`` as written there: the first non-blank line of a ``.jsonl``
    file or data line of a ``.tsv`` file, the first row of a ``.parquet`` file (as JSON);
    ``None`` for a file read as one JSON document (SQuAD, ``.zip``, ``.gz``) or an empty
    file."""
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        rows = pl.read_parquet(path, n_rows=1).to_dicts()
        return _json(rows[0]) if rows else None
    if suffix in (".jsonl", ".tsv"):
        for _, line in text_lines(path):
            fields = line.split("\t")
            header = suffix == ".tsv" and len(fields) == 3 and fields[2].strip()[:1].isalpha()
            if line.strip() and not header:  # a qrels header line is skipped, as the loader does
                return _cut(line)
    return None


def _first_row(frame: pl.DataFrame) -> str | None:
    return _json(frame.row(0, named=True)) if frame.height else None


def _left_out_queries(spec: str, kept: int) -> int | None:
    """``beir:``: the records of ``queries.jsonl`` the loader did not keep (unjudged in the
    split, or cut by ``max_questions``); ``None`` for the other kinds."""
    parsed = parse_spec(spec)
    if parsed.kind != "beir" or parsed.path is None:
        return None
    records = sum(1 for _, line in text_lines(parsed.path / "queries.jsonl") if line.strip())
    return records - kept


def check_dataset(spec: str) -> DatasetCheck:
    """Load ``spec`` and describe it (module docstring). Raises :class:`InputError`: the
    loader's one line for a bad spec or file, or one line when the dataset has neither gold
    answers nor judgments."""
    files = dataset_source_files(spec)
    ds = load_dataset(spec)
    parsed = parse_spec(spec)
    answers = ds.queries.filter(pl.col("answers").list.len() > 0).height
    judged = ds.qrels.get_column("query_id").n_unique() if ds.qrels.height else 0
    relevant = ds.qrels.filter(pl.col("relevance") >= 1).height
    n_queries = ds.queries.height
    if not answers and not ds.qrels.height:
        raise InputError(
            f"dataset {spec!r}: {n_queries} queries, none with gold answers and no judgments: "
            "nothing to evaluate against (give answers in queries or a qrels file)"
        )
    notes = []
    if ds.qrels.height and judged < n_queries:
        notes.append(
            f"{n_queries - judged} of {n_queries} queries have no judgment: human-judgment "
            "metrics score them 0"
        )
    if not ds.qrels.height:
        notes.append(
            "no judgments: eRAG labels only (no retrieval leaderboard, no label agreement)"
        )
    if not answers:
        notes.append(
            "no query has gold answers: judgments only (eRAG labels need gold answers; "
            "in a registry's datasets: section, reader_labels: false)"
        )
    elif answers < n_queries:
        missing = ds.queries.filter(pl.col("answers").list.len() == 0)
        notes.append(
            f"{n_queries - answers} of {n_queries} queries have no gold answers (first: "
            f"{missing.get_column('query_id')[0]!r}): labelling refuses a run holding one; give "
            "them answers or leave them out"
        )
    empty = ds.corpus.filter(pl.col("text").str.strip_chars() == "").height
    if empty:
        notes.append(f"{empty} of {ds.corpus.height} documents have no text")
    not_trec = _not_trec(ds.queries, "query_id", "query") or _not_trec(
        ds.corpus, "doc_id", "document"
    )
    left_out = _left_out_queries(spec, n_queries)
    if left_out:
        notes.append(
            f"{left_out} queries of queries.jsonl left out (BEIR keeps the queries judged in "
            "the split; max_questions/spread_questions cut the rest)"
        )
    return DatasetCheck(
        spec=spec,
        kind=parsed.kind,
        files=files,
        documents=ds.corpus.height,
        queries=n_queries,
        judgments=ds.qrels.height,
        relevant_judgments=relevant,
        queries_with_answers=answers,
        judged_queries=judged,
        left_out_queries=left_out,
        file_samples={str(path): first_record(path) for path in files},
        table_samples={
            "corpus": _first_row(ds.corpus),
            "queries": _first_row(ds.queries),
            "qrels": _first_row(ds.qrels),
        },
        notes=tuple(notes),
        not_trec=not_trec,
    )


def _not_trec(frame: pl.DataFrame, column: str, what: str) -> str:
    """Why the ids of ``frame[column]`` rule out TREC files (:func:`ids_trec_cannot_hold`),
    naming the first one; ``""`` when every id fits."""
    bad = ids_trec_cannot_hold(frame, column)
    if not bad.height:
        return ""
    return (
        f"{what} id {bad.get_column(column)[0]!r} is empty or holds whitespace ({bad.height} "
        f"such {what} ids; a TREC line splits there): rename them, or give runs as parquet"
    )


def format_check(check: DatasetCheck) -> str:
    """The text ``erag-dagster check-dataset`` prints."""
    lines = [f"dataset {check.spec} (kind {check.kind})", "files (first record as written):"]
    for path, sample in check.file_samples.items():
        lines.append(f"  {path}")
        lines.append(f"    {sample if sample is not None else '(one JSON document)'}")
    lines.append(
        f"documents {check.documents:,}; queries {check.queries:,}; judgments "
        f"{check.judgments:,} ({check.relevant_judgments:,} with relevance >= 1)"
    )
    lines.append(
        f"queries with gold answers {check.queries_with_answers:,} of {check.queries:,}; "
        f"judged {check.judged_queries:,} of {check.queries:,}"
    )
    lines.append("as loaded (canonical columns, docs/data.md):")
    for table, sample in check.table_samples.items():
        lines.append(f"  {table:8} {sample if sample is not None else '(empty)'}")
    lines += [f"note: {note}" for note in check.notes]
    lines.append(f"usable for: {check.uses}")
    return "\n".join(lines)
