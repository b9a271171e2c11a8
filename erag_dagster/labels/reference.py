"""Labels without gold answers: a reference answer per question stands in for the gold answers.

eRAG scores the reader's answer from each document alone against the query's gold answers. A
team with a question log and a reader but no gold answers can keep eRAG's idea (the reader's own
utility, per document) by scoring against a *reference answer* instead (docs/label-methods.md,
"Labels without gold answers", for where it tracks end-to-end quality and where it does not):

    label(q, d) = m(a(q, d), [r(q)])

with ``m`` the task metric (``evaluation.metric``), ``a(q, d)`` the eRAG answer from ``d`` alone
and ``r(q)`` the reference, chosen by ``evaluation.reference`` (:func:`parse_reference`)::

    gold                         the gold answers (eRAG itself; the default)
    self@RETRIEVER               the reader's own answer from RETRIEVER's top documents together
    self@union                   ... from the union of the compared retrievers' top documents
    reader:NAME@RETRIEVER|union  the registry reader NAME's answer from those documents (a teacher)
    reader:NAME@none             ... from the question alone (closed book)
    ...?k=N                      N documents per retriever (default: evaluation.label_k)

A reference from documents is the end-to-end answer of that reader on that list
(:mod:`erag_dagster.labels.context_answers`: the same task, the same store key), so
``self@bm25`` at ``k = label_k`` *is* BM25's end-to-end answer, generated once; ``@none`` is
the closed-book answer (:mod:`erag_dagster.labels.signed`). The union's documents are ordered
by their best rank in any of the runs, ties by doc id (:func:`union_lists`), so it does not
depend on which retriever is named first.

Identity: the reference enters each label's score key as its gold hash,
``sha256(canonical JSON ["reference", reference generation key, reference answer])``
(:func:`reference_hash`); the generation key holds the reference reader's task fingerprint
(its model, prompt, decoding), the question and the text of every document it read. The label
store's ``gold_answers`` row of that hash records the provenance as
``{"answers": [answer], "reference": {...}}`` (which reader, its fingerprint, the task, the
documents, where they came from, the generation key), which ``erag-dagster audit`` shows. So
a new reference re-scores the stored per-document answers (no reader call) and a stored one is
reused like any answer.

With a label-output metric (``accuracy``) the answers are scored against the reference's label,
its first normalised token (:func:`scored_against`), as ``accuracy`` reads every answer.

Edge cases: a query of the run without a reference answer is an :class:`InputError` naming it;
an empty reference answer (the reader said nothing) is kept — every label of its query is then
the metric against an empty string (``f1``, ``em``, ``accuracy``: 0) — and counted in
``empty``; a query no retriever returned a document for gets the reference from its question
alone.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import parse_qsl

import polars as pl

from erag_dagster.core.code_versions import CodeVersion
from erag_dagster.core.errors import InputError
from erag_dagster.core.hashing import sha256_json, sha256_text
from erag_dagster.labels.context_answers import END_TO_END, ContextList, context_answers
from erag_dagster.labels.executor import ExecutorSpec
from erag_dagster.labels.likelihood import LABEL_METRICS
from erag_dagster.labels.reader_calls import ReaderCalls
from erag_dagster.labels.signed import CLOSED_BOOK, closed_book_answers, closed_book_fingerprint
from erag_dagster.labels.store import generation_key
from erag_dagster.metrics.downstream import normalize_answer
from erag_dagster.readers.passages import run_with_passages

__all__ = [
    "GOLD",
    "REFERENCE_COLUMNS",
    "REFERENCE_TASK",
    "ReferenceSpec",
    "References",
    "parse_reference",
    "reference_answers",
    "reference_hash",
    "reference_lists",
    "scored_against",
]

REFERENCE_TASK = CodeVersion("reference", "1")
"""The reference rule (which documents, in which order, its gold hash): raise it when what a
reference is changes; the assets that score against references name it in their code version."""
GOLD = "gold"
"""``evaluation.reference`` for the gold answers (eRAG as the paper defines it)."""
SELF = "self"
UNION = "union"
NONE = "none"
_READER_PREFIX = "reader:"
_MAX_DEPTH = 1000
REFERENCE_COLUMNS = {
    "query_id": pl.String,
    "reference_answer": pl.String,
    "scored_against": pl.String,
    "gold_hash": pl.String,
    "reference": pl.String,
}
"""A reference frame: each query's reference answer, what the per-document answers are scored
against (:func:`scored_against`), its :func:`reference_hash` and its provenance (canonical
JSON: :meth:`References.provenance`)."""


@dataclass(frozen=True)
class ReferenceSpec:
    """A parsed ``evaluation.reference`` other than ``gold``: ``reader`` is ``self`` or a
    registry reader's name, ``documents`` a registry retriever's name, ``union`` or ``none``,
    ``depth`` the documents per retriever (``None``: the config's ``label_k``)."""

    reader: str
    documents: str
    depth: int | None = None

    @property
    def text(self) -> str:
        """The canonical spelling (what the config holds)."""
        who = SELF if self.reader == SELF else f"{_READER_PREFIX}{self.reader}"
        tail = f"?k={self.depth}" if self.depth is not None else ""
        return f"{who}@{self.documents}{tail}"

    @property
    def teacher(self) -> str | None:
        """The registry reader that answers, or ``None`` when it is the labelled reader."""
        return None if self.reader == SELF else self.reader

    @property
    def retriever(self) -> str | None:
        """The one registry retriever whose documents are read (``None``: union or none)."""
        return None if self.documents in (UNION, NONE) else self.documents

    def depth_for(self, label_k: int) -> int:
        """Documents read per retriever: ``depth``, else ``label_k``."""
        return self.depth if self.depth is not None else label_k

    def describe(self, label_k: int) -> str:
        """Words for reports: ``the reader's own answer from the top 3 of bm25``."""
        who = "the reader's own answer" if self.reader == SELF else f"{self.reader}'s answer"
        n = self.depth_for(label_k)
        if self.documents == NONE:
            return f"{who} to the question alone (closed book)"
        if self.documents == UNION:
            return f"{who} from the union of the compared retrievers' top {n} documents"
        return f"{who} from the top {n} documents of {self.documents}"


def parse_reference(value: str) -> ReferenceSpec | None:
    """``None`` for ``gold``, else the :class:`ReferenceSpec` of ``value`` (grammar: module
    docstring). Raises ``ValueError`` saying what is wanted (the config names the key)."""
    wanted = (
        "gold, self@RETRIEVER, self@union, reader:NAME@RETRIEVER, reader:NAME@union or "
        "reader:NAME@none, optionally ?k=N"
    )
    if not isinstance(value, str) or not value.strip():
        raise ValueError(wanted)
    text = value.strip()
    if text == GOLD:
        return None
    head, _, query = text.partition("?")
    who, at, documents = head.partition("@")
    if not at or not documents.strip():
        raise ValueError(wanted)
    who, documents = who.strip(), documents.strip()
    if who == SELF:
        reader = SELF
    elif who.startswith(_READER_PREFIX) and who[len(_READER_PREFIX) :].strip():
        reader = who[len(_READER_PREFIX) :].strip()
    else:
        raise ValueError(wanted)
    if documents == NONE and reader == SELF:
        raise ValueError(
            f"{wanted} (self@none, the reader's own closed-book answer, would score a document "
            "by whether it leaves the reader's prior answer unchanged)"
        )
    depth = None
    if query:
        options = dict(parse_qsl(query, keep_blank_values=True))
        if set(options) != {"k"} or len(query.split("&")) != 1:
            raise ValueError(f"{wanted}; the one option is k")
        raw = options["k"]
        if not (raw.isascii() and raw.isdigit() and 1 <= int(raw) <= _MAX_DEPTH):
            raise ValueError(f"{wanted}; k is an integer from 1 to {_MAX_DEPTH}")
        if documents == NONE:
            raise ValueError(f"{wanted}; @none reads no document, so it takes no k")
        depth = int(raw)
    return ReferenceSpec(reader, documents, depth)


def scored_against(answer: str, metric: str) -> str:
    """What a per-document answer is scored against: the reference answer itself — or, with a
    label-output metric (``accuracy``: yes/no/maybe, SUPPORTS/REFUTES), its label, the first
    normalised token, which is what ``accuracy`` reads from every answer (the reference "Yes,
    the study shows ..." is the label ``yes``; the whole sentence would match no answer)."""
    if metric in LABEL_METRICS:
        tokens = normalize_answer(answer or "").split()
        return tokens[0] if tokens else ""
    return answer


def reference_hash(generation: str, answer: str) -> str:
    """The gold hash of a reference (module docstring): it names the reference generation and
    its answer, so it differs from every gold-answer hash and from every other reference."""
    return sha256_json(["reference", generation, answer])


def union_lists(runs: Sequence[pl.DataFrame], depth: int) -> pl.DataFrame:
    """``query_id, doc_id, rank``: per query the documents in the top ``depth`` of any of
    ``runs``, ranked by their best rank in any run, ties by doc id (so the order of ``runs``
    does not matter); one run: its top ``depth`` as ranked."""
    rows = [
        run.select(
            pl.col("query_id").cast(pl.String), pl.col("doc_id").cast(pl.String), "rank"
        ).filter(pl.col("rank") <= depth)
        for run in runs
    ]
    if not rows:
        return pl.DataFrame(schema={"query_id": pl.String, "doc_id": pl.String, "rank": pl.Int64})
    return (
        pl.concat(rows)
        .group_by("query_id", "doc_id")
        .agg(pl.col("rank").min())
        .sort("query_id", "rank", "doc_id")
        .with_columns(pl.int_range(1, pl.len() + 1).over("query_id").cast(pl.Int64).alias("rank"))
    )


def reference_lists(
    queries: pl.DataFrame, corpus: pl.DataFrame, runs: Sequence[pl.DataFrame], depth: int
) -> list[ContextList]:
    """One :class:`ContextList` per query of ``queries`` (in its order): the documents of
    :func:`union_lists` with the text the reader sees of each; a query without any document
    gets an empty list. An unknown doc id is the :class:`InputError` of
    :func:`~erag_dagster.readers.passages.run_with_passages`."""
    merged = union_lists(runs, depth)
    lists = (
        run_with_passages(merged, corpus)
        .sort("query_id", "rank")
        .group_by("query_id", maintain_order=True)
        .agg("doc_id", "passage")
    )
    found = {qid: (tuple(ids), tuple(texts)) for qid, ids, texts in lists.rows()}
    return [
        ContextList(qid, question, *found.get(qid, ((), ())))
        for qid, question in queries.select(pl.col("query_id").cast(pl.String), "question").rows()
    ]


@dataclass(frozen=True)
class References:
    """The reference answers of one reference reader on one set of queries (:data:`frame`
    with :data:`REFERENCE_COLUMNS`), and what making them cost: ``generated`` now,
    ``from_store`` read, ``empty`` answers that are empty."""

    frame: pl.DataFrame
    spec: str
    description: str
    generated: int
    from_store: int
    empty: int

    @classmethod
    def of_frame(cls, frame: pl.DataFrame, spec: str, label_k: int) -> References:
        """References read back from a stored frame (the ``reference_answers`` asset); the
        counts of what making them cost are not kept (0)."""
        parsed = parse_reference(spec)
        if parsed is None:
            raise InputError("reference answers given for evaluation.reference gold")
        missing = [c for c in REFERENCE_COLUMNS if c not in frame.columns]
        if missing:
            raise InputError(f"reference answers lack column(s) {', '.join(missing)}")
        empty = frame.filter(pl.col("scored_against").fill_null("").str.strip_chars() == "")
        return cls(frame, parsed.text, parsed.describe(label_k), 0, 0, empty.height)

    @staticmethod
    def provenance(
        spec: str,
        reader,
        task: str,
        generation: str,
        doc_ids: Sequence[str],
        sources: Sequence[str],
        depth: int | None,
    ) -> str:
        """The provenance of one reference as canonical JSON (what a label and the store's
        ``gold_answers`` row record, and ``audit`` shows)."""
        return json.dumps(
            {
                "reference": spec,
                "reader": str(reader.name),
                "reader_fingerprint": reader.fingerprint,
                "task": task,
                "documents": list(doc_ids),
                "sources": list(sources),
                "depth": depth,
                "generation_key": generation,
            },
            sort_keys=True,
            ensure_ascii=False,
        )


def reference_answers(
    spec: ReferenceSpec,
    queries: pl.DataFrame,
    corpus: pl.DataFrame,
    runs: Mapping[str, pl.DataFrame],
    reader,
    label_k: int,
    metric: str,
    store=None,
    run_id: str | None = None,
    executor: ExecutorSpec | ReaderCalls | None = None,
    log=None,
) -> References:
    """The reference answer of every query of ``queries`` (module docstring): ``reader`` (the
    labelled reader for ``self``, the teacher otherwise) answers from the union of the top
    ``spec.depth_for(label_k)`` documents of ``runs`` (name → run; the names are recorded as
    the documents' sources), or from the question alone for ``@none`` (``runs`` unused).
    Answers come from ``store`` when it has them (the end-to-end or closed-book task's key);
    ``metric``, the task metric, decides what the answers are scored against
    (:func:`scored_against`)."""
    say = log or (lambda _m: None)
    asked = queries.select(pl.col("query_id").cast(pl.String), "question")
    if spec.documents == NONE:
        answers = closed_book_answers(asked, reader, store, run_id, executor)
        fingerprint = closed_book_fingerprint(reader)
        keys = [
            generation_key(fingerprint, qid, sha256_text(question), sha256_text(""))
            for qid, question in asked.rows()
        ]
        texts = answers.get_column("answer").to_list()
        doc_lists: list[tuple[str, ...]] = [() for _ in texts]
        task, sources, depth = CLOSED_BOOK.task, [], None
        generated = from_store = -1  # closed_book_answers does not count them
    else:
        if not runs:
            raise InputError(f"reference {spec.text}: no retriever run to take documents from")
        depth = spec.depth_for(label_k)
        lists = reference_lists(asked, corpus, list(runs.values()), depth)
        found = context_answers(
            lists, reader, store, run_id, executor, log, what=f"reference ({spec.text})"
        )
        texts, keys, doc_lists = found.answers, found.keys, [c.doc_ids for c in lists]
        task, sources = END_TO_END.task, sorted(runs)
        generated, from_store = found.generated, found.from_store
    provenance = [
        References.provenance(spec.text, reader, task, key, docs, sources, depth)
        for key, docs in zip(keys, doc_lists, strict=True)
    ]
    frame = pl.DataFrame(
        {
            "query_id": asked.get_column("query_id"),
            "reference_answer": texts,
            "scored_against": [scored_against(t, metric) for t in texts],
            "gold_hash": [reference_hash(k, a) for k, a in zip(keys, texts, strict=True)],
            "reference": provenance,
        },
        schema=REFERENCE_COLUMNS,
    )
    empty = frame.filter(pl.col("scored_against").fill_null("").str.strip_chars() == "").height
    say(
        f"reference {spec.text}: {len(texts)} answers by {reader.name}"
        + (
            f", {empty} of them empty (their queries' labels score against nothing)"
            if empty
            else ""
        )
    )
    return References(
        frame, spec.text, spec.describe(label_k), max(generated, 0), max(from_store, 0), empty
    )
