#!/usr/bin/env python3
"""Make a small long-answer QA set (ClapNQ-style) from SQuAD v1.1 dev: the gold answer of a
question is the whole sentence of its paragraph that holds the SQuAD answer span.

    python scripts/make_long_answer_set.py --out DIR [--questions 40] [--source dev-v1.1.json.zip]

Source: the official SQuAD v1.1 dev set in the shared test data
(``../shared/data/squad-v1.1-dev/dev-v1.1.json.zip``, ``../shared/data/SOURCES.md`` section 1).
Questions are taken evenly spaced over the file (every article is visited), keeping only those
whose answer sentence has at least :data:`MIN_WORDS` words (long answers, as in ClapNQ, whose
answers average about 50 words) and holds the answer spans of at least two annotators (SQuAD's
odd misplaced single span is left out); each question gets :data:`DOCS_PER_QUESTION` documents: its
own paragraph (relevance 1), the next two paragraphs of the same article (hard negatives,
relevance 0) and one paragraph of the next article (an easy negative, relevance 0).

Writes a ``jsonl:DIR`` dataset (``docs/data.md``, canonical column names) and a run file:

* ``corpus.jsonl`` — ``doc_id, title, text``: every paragraph used, ``doc_id`` as SQuAD's
  loader names it (``<article title>_<paragraph index>``), first-use order;
* ``queries.jsonl`` — ``query_id, question, answers``: the SQuAD id, the question, and a
  one-element list, the answer sentence;
* ``qrels.jsonl`` — ``query_id, doc_id, relevance``: the four judged documents of each query;
* ``run.trec`` — those four documents per query in a fixed mixed order (gold not always first),
  TREC format, so ``erag-dagster label --run`` labels exactly these pairs.

Output is byte-identical on every run from the same source file. The package never reads the
shared data; this script and ``scripts/measure_long_answers.py`` do.
"""

from __future__ import annotations

import argparse
import json
import re
import zipfile
from pathlib import Path
from typing import Any, NamedTuple

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SOURCE = REPO_ROOT.parent / "shared" / "data" / "squad-v1.1-dev" / "dev-v1.1.json.zip"
MIN_WORDS = 20
"""Shortest answer sentence kept, in whitespace words (SQuAD's own answers are a few words)."""
DOCS_PER_QUESTION = 4
_SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]]*\s+(?=[A-Z0-9\"'(\[])")


class Paragraph(NamedTuple):
    doc_id: str
    title: str
    text: str


class LongAnswerSet(NamedTuple):
    """The three tables and the run as lists of rows."""

    corpus: list[dict[str, Any]]
    queries: list[dict[str, Any]]
    qrels: list[dict[str, Any]]
    run: list[tuple[str, str, int]]


def sentence_span(text: str, start: int) -> tuple[int, int]:
    """``(begin, end)`` of the sentence of ``text`` holding character ``start`` (split after
    ``.``, ``!``, ``?`` followed by space and a capital, digit or quote)."""
    begin = 0
    for match in _SENTENCE_END.finditer(text):
        if match.end() > start:
            return begin, match.start() + len(match.group(0).rstrip())
        begin = match.end()
    return begin, len(text)


def read_squad(source: Path) -> list[dict[str, Any]]:
    """The ``data`` list of the zipped SQuAD JSON."""
    with zipfile.ZipFile(source) as archive:
        (member,) = [n for n in archive.namelist() if n.endswith(".json")]
        return json.loads(archive.read(member))["data"]


def build(articles: list[dict[str, Any]], questions: int) -> LongAnswerSet:
    """The set of the module docstring from SQuAD's ``data`` list."""
    paragraphs: list[list[Paragraph]] = [
        [
            Paragraph(f"{a['title']}_{i}", a["title"].replace("_", " "), p["context"])
            for i, p in enumerate(a["paragraphs"])
        ]
        for a in articles
    ]
    candidates: list[tuple[int, int, str, str, str]] = []
    for a_index, article in enumerate(articles):
        for p_index, paragraph in enumerate(article["paragraphs"]):
            context = paragraph["context"]
            for qa in paragraph["qas"]:
                begin, end = sentence_span(context, int(qa["answers"][0]["answer_start"]))
                sentence = context[begin:end].strip()
                agreeing = sum(
                    begin <= int(a["answer_start"]) < end
                    and context[int(a["answer_start"]) :].startswith(a["text"])
                    for a in qa["answers"]
                )
                # two annotators' spans in the sentence: SQuAD's odd single misplaced span is out
                if len(sentence.split()) >= MIN_WORDS and agreeing >= 2:
                    candidates.append((a_index, p_index, qa["id"], qa["question"], sentence))
    step = len(candidates) / questions
    chosen = [candidates[int(i * step)] for i in range(questions)]
    corpus: dict[str, Paragraph] = {}
    queries, qrels, run = [], [], []
    for a_index, p_index, qid, question, sentence in chosen:
        own = paragraphs[a_index]
        other = paragraphs[(a_index + 1) % len(paragraphs)]
        docs = [own[p_index]]
        docs += [own[(p_index + d) % len(own)] for d in (1, 2)]
        docs.append(other[p_index % len(other)])
        queries.append({"query_id": qid, "question": question.strip(), "answers": [sentence]})
        for rel, doc in zip((1, 0, 0, 0), docs, strict=True):
            corpus.setdefault(doc.doc_id, doc)
            qrels.append({"query_id": qid, "doc_id": doc.doc_id, "relevance": rel})
        shift = len(queries) % DOCS_PER_QUESTION  # the gold document's rank cycles 1..4
        order = docs[-shift:] + docs[:-shift] if shift else docs
        run += [(qid, doc.doc_id, rank) for rank, doc in enumerate(order, start=1)]
    rows = [{"doc_id": p.doc_id, "title": p.title, "text": p.text} for p in corpus.values()]
    return LongAnswerSet(rows, queries, qrels, run)


def write(data: LongAnswerSet, out: Path) -> None:
    """The four files of the module docstring into ``out`` (created if missing)."""
    out.mkdir(parents=True, exist_ok=True)
    for name, rows in (("corpus", data.corpus), ("queries", data.queries), ("qrels", data.qrels)):
        lines = [json.dumps(row, ensure_ascii=False) + "\n" for row in rows]
        (out / f"{name}.jsonl").write_text("".join(lines), encoding="utf-8")
    run_lines = [f"{q} Q0 {d} {r} {1.0 / r:.4f} long-answer-set\n" for q, d, r in data.run]
    (out / "run.trec").write_text("".join(run_lines), encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--questions", type=int, default=40)
    parser.add_argument("--source", type=Path, default=DEFAULT_SOURCE)
    args = parser.parse_args()
    data = build(read_squad(args.source), args.questions)
    write(data, args.out)
    words = [len(q["answers"][0].split()) for q in data.queries]
    print(
        f"{args.out}: {len(data.queries)} questions, {len(data.corpus)} documents, "
        f"{len(data.qrels)} judgments; answer sentences {min(words)}-{max(words)} words, "
        f"mean {sum(words) / len(words):.1f}"
    )


if __name__ == "__main__":
    main()
