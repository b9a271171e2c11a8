"""The reader's answer from a ranked list of documents together: one stored generation per list.

The end-to-end evaluation (:mod:`erag_dagster.meta.end_to_end`: the ground truth eRAG is
correlated against) and the no-gold reference (:mod:`erag_dagster.labels.reference`: "what the
system says with its best context") ask the reader the same thing — the question with the
passages of a ranked list in rank order, one prompt (the reader's ``answer_with_contexts``;
lowest-ranked passages are dropped first when the prompt would exceed the model's input
budget). So they are one task, :data:`END_TO_END`, and one generation: a reference made from
BM25's top 3 *is* BM25's end-to-end answer at k = 3, read from the store whichever asked first.

Store key: the task fingerprint (:func:`end_to_end_fingerprint`: reader fingerprint + task
version), the query, the question and :func:`list_text` of the passages (the "document" of the
generation is the list; the stored ``doc_id`` is its doc ids joined by a space, for audits). A
list of exactly one passage is the eRAG prompt of that document: its stored eRAG answer (same
reader fingerprint) is reused (:func:`_erag_answers`). An empty list asks the question alone.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from erag_dagster.core.callbacks import Log
from erag_dagster.core.code_versions import CodeVersion
from erag_dagster.core.hashing import sha256_text
from erag_dagster.labels.cached import OnBatch, Subject, generate_stored, task_fingerprint
from erag_dagster.labels.executor import ExecutorSpec
from erag_dagster.labels.reader_calls import ReaderCalls, reader_calls
from erag_dagster.labels.step_notes import StepNotes, chained
from erag_dagster.labels.store import generation_key

__all__ = [
    "END_TO_END",
    "STEP",
    "ContextAnswers",
    "ContextList",
    "context_answers",
    "end_to_end_fingerprint",
    "list_text",
]

#: The end-to-end answer task's version (passages concatenated in rank order): its ``name/vN``
#: is part of the answers' store key (:func:`end_to_end_fingerprint`).
END_TO_END = CodeVersion("end_to_end_concatenated", "1")
#: Queries per reader call in this process (and per chunk on a Ray actor).
STEP = 32


def list_text(passages: Sequence[str]) -> str:
    """The text a top-k list is stored under in the label store: its passages in rank order,
    separated by a blank line."""
    return "\n\n".join(passages)


def end_to_end_fingerprint(reader) -> str:
    """Fingerprint of end-to-end answering: the reader's fingerprint + the task version."""
    return task_fingerprint(reader.fingerprint, END_TO_END.task)


@dataclass(frozen=True)
class ContextList:
    """One question and the ranked documents the reader reads together: ``doc_ids`` and their
    ``passages`` (the text the reader sees of each, :func:`~erag_dagster.readers.passages.
    reader_passage`), in rank order, the same length."""

    query_id: str
    question: str
    doc_ids: tuple[str, ...]
    passages: tuple[str, ...]

    @property
    def subject(self) -> Subject:
        """The store subject: the doc ids joined by a space, the passages' :func:`list_text`."""
        return Subject(
            self.query_id, self.question, " ".join(self.doc_ids), list_text(self.passages)
        )


@dataclass(frozen=True)
class ContextAnswers:
    """Answers in input order, their generation keys (the store's, whether generated now or
    read), and the counts: ``generated`` now, ``from_store`` read (``reused_erag``: of those,
    eRAG answers of a one-document list)."""

    answers: list[str]
    keys: list[str]
    generated: int
    from_store: int
    reused_erag: int


def context_answers(
    lists: Sequence[ContextList],
    reader,
    store=None,
    run_id: str | None = None,
    executor: ExecutorSpec | ReaderCalls | None = None,
    log: Log | None = None,
    progress: Callable[[int, int], None] | None = None,
    what: str = "end_to_end",
) -> ContextAnswers:
    """The reader's answer to each list's question from its passages together (module
    docstring), generating only what ``store`` lacks; ``executor``: where the reader runs
    (:mod:`erag_dagster.labels.reader_calls`). ``what`` names the step in the terminal's
    estimate and ETA lines; ``progress(done, total)`` after each step."""
    subjects = [c.subject for c in lists]
    fingerprint = end_to_end_fingerprint(reader)
    keys = [
        generation_key(fingerprint, s.query_id, sha256_text(s.question), sha256_text(s.text))
        for s in subjects
    ]
    reused = _erag_answers(store, reader, lists) if store is not None else {}
    rest = [i for i in range(len(lists)) if i not in reused]
    asked = [subjects[i] for i in rest]
    notes = StepNotes(what, reader, lambda part: [(asked[j].question, asked[j].text) for j in part])
    with reader_calls(reader, executor, log) as calls:

        def generate(part: list[int], on_batch: OnBatch | None = None) -> list[str]:
            items = [(lists[rest[j]].question, list(lists[rest[j]].passages)) for j in part]
            shown = progress if calls.on_ray else None  # in-process: the engine reports it
            return calls("answer_with_contexts", items, on_batch, chunk=STEP, progress=shown)

        done = generate_stored(
            asked,
            generate,
            store,
            fingerprint,
            f"{reader.name}:end_to_end",
            {"task": END_TO_END.task, "reader": reader.identity()},
            run_id=run_id,
            step=calls.step(STEP, len(rest)),
            streams=calls.streams("answer_with_contexts"),
            progress=chained(progress, notes.progress),
            estimate=notes.estimate,
        )
    answers = [reused.get(i, ("", ""))[0] for i in range(len(lists))]
    for i, answer in zip(rest, done.outputs, strict=True):
        answers[i] = answer
    for i, (_, key) in reused.items():
        keys[i] = key  # the eRAG answer's own key: the audit finds it there
    return ContextAnswers(answers, keys, done.generated, done.from_store + len(reused), len(reused))


def _erag_answers(store, reader, lists: Sequence[ContextList]) -> dict[int, tuple[str, str]]:
    """Stored eRAG answers (same reader fingerprint) of the lists with exactly one passage,
    with their generation keys, by list index: ``answer_with_context`` on one passage builds
    the same prompt as ``answer``, so the answer is the same generation."""
    keys = {
        i: generation_key(
            reader.fingerprint, c.query_id, sha256_text(c.question), sha256_text(c.passages[0])
        )
        for i, c in enumerate(lists)
        if len(c.passages) == 1
    }
    if not keys:
        return {}
    found = dict(
        store.lookup_generations(list(keys.values())).select("generation_key", "answer").rows()
    )
    return {i: (found[key], key) for i, key in keys.items() if key in found}
