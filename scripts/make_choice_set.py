#!/usr/bin/env python3
"""Make a multiple-choice QA set from SQuAD v1.1 dev: each question with four numbered options.

    python scripts/make_choice_set.py --out DIR [--source dev-v1.1.json.zip]
        [--half all | tuning | heldout] [--per-article N]

Source: the official SQuAD v1.1 dev file in the shared test data
(``squad-v1.1-dev/dev-v1.1.json.zip``, ``../shared/data/SOURCES.md`` section 1), the 40
articles that are NOT in the embedded sample, less "Normans" (the span presets' worked example
comes from it), so no question, paragraph or article of the default run, of the prompt tuning
or of a prompt is in it.

**Questions.** Per article, the first ``--per-article`` (8) questions, in file order, whose
first gold answer is 1–4 words with a letter and no digit (an option number must not be
mistaken for the answer). Their options: the gold answer and three distractors — the first
gold answers of the article's next questions, in file order from the question on (wrapping
around to the article's first), each 1–4 words with a
letter and no digit, sharing no normalised word with the gold or with each other (so the
first word of an answer that copies an option names one option only) — in an order fixed by
``sha256(question id)``. The question asked is :data:`QUESTION`; the gold answer is the
option's number (``"1"`` … ``"4"``): a closed label set for ``metric: accuracy``, whose
likelihood labels normalise over ``1, 2, 3, 4``. Questions without three such distractors are
left out (counted).

**Halves.** ``tuning`` when the first byte of ``sha256(question id)`` is even, ``heldout``
when odd (the rule of ``make_yesno_set.py``). The corpus is whole in both halves.

Writes a ``jsonl:DIR`` dataset: ``corpus.jsonl`` (``doc_id, title, text``: every paragraph of
the 40 articles, id ``<article index>-<paragraph index>``), ``queries.jsonl`` (``query_id,
question, answers``) and ``qrels.jsonl`` (the question's own paragraph, relevance 1).
Byte-identical on every run from the same source file. The package never reads the shared data.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import string
import zipfile
from collections import Counter
from pathlib import Path
from typing import NamedTuple

REPO_ROOT = Path(__file__).resolve().parents[1]
SAMPLE = REPO_ROOT / "erag_dagster" / "data" / "sample" / "squad-v1.1-dev-sample.json"
MEMBER = "dev-v1.1.json"
QUESTION = (
    "{question} Options: 1) {o1}; 2) {o2}; 3) {o3}; 4) {o4}. "
    "Answer with the number of the right option."
)
HALVES = ("all", "tuning", "heldout")
#: The article of the span presets' worked example (erag_dagster/readers/presets.py): left out.
EXAMPLE_ARTICLE = "Normans"
_ARTICLES = re.compile(r"\b(a|an|the)\b")


class ChoiceSet(NamedTuple):
    corpus: list[dict]
    queries: list[dict]
    qrels: list[dict]
    counts: dict[str, int]


def default_source() -> Path:
    """``$ERAG_SHARED_DATA`` or ``<repo>/../shared/data``, then SQuAD's dev zip in it."""
    env = os.environ.get("ERAG_SHARED_DATA")
    base = Path(env) if env else REPO_ROOT.parent / "shared" / "data"
    return base / "squad-v1.1-dev" / "dev-v1.1.json.zip"


def words(text: str) -> list[str]:
    """SQuAD-normalised words (lower case, no punctuation, no articles)."""
    lowered = "".join(c for c in text.lower() if c not in string.punctuation)
    return _ARTICLES.sub(" ", lowered).split()


def usable(answer: str) -> bool:
    """1–4 words, a letter in it, no digit."""
    return (
        1 <= len(answer.split()) <= 4
        and not any(c.isdigit() for c in answer)
        and any(c.isalpha() for c in answer)
    )


def half_of(question_id: str) -> str:
    """``tuning`` when the first byte of ``sha256(question_id)`` is even, else ``heldout``."""
    return "tuning" if hashlib.sha256(question_id.encode()).digest()[0] % 2 == 0 else "heldout"


def build(source: Path, half: str = "all", per_article: int = 8) -> ChoiceSet:
    """The multiple-choice set (module docstring)."""
    with zipfile.ZipFile(source) as archive:
        data = json.loads(archive.read(MEMBER))["data"]
    in_sample = {a["title"] for a in json.loads(SAMPLE.read_text(encoding="utf-8"))["data"]}
    in_sample.add(EXAMPLE_ARTICLE)
    corpus, queries, qrels = [], [], []
    counts: Counter[str] = Counter({"kept": 0, "no_distractors": 0, "unusable_gold": 0})
    for a, article in enumerate(data):
        if article["title"] in in_sample:
            continue
        pool = []  # (question id, first gold answer) of the article, in file order
        for p, paragraph in enumerate(article["paragraphs"]):
            doc_id = f"{a}-{p}"
            corpus.append({"doc_id": doc_id, "title": article["title"].replace("_", " "),
                           "text": paragraph["context"]})  # fmt: skip
            for qa in paragraph["qas"]:
                pool.append((qa, doc_id))
        taken = 0
        for position, (qa, doc_id) in enumerate(pool):
            if taken >= per_article:
                break
            gold = qa["answers"][0]["text"].strip()
            if not usable(gold):
                counts["unusable_gold"] += 1
                continue
            seen = set(words(gold))
            options = [gold]
            for other, _ in pool[position + 1 :] + pool[:position]:
                text = other["answers"][0]["text"].strip()
                if other["id"] == qa["id"] or not usable(text) or seen & set(words(text)):
                    continue
                if not words(text):
                    continue
                options.append(text)
                seen |= set(words(text))
                if len(options) == 4:
                    break
            if len(options) < 4:
                counts["no_distractors"] += 1
                continue
            taken += 1
            if half != "all" and half_of(qa["id"]) != half:
                continue
            digest = hashlib.sha256(qa["id"].encode()).digest()
            order = sorted(range(4), key=lambda i: (digest[i + 1], i))
            shown = [options[i] for i in order]
            gold_number = str(order.index(0) + 1)
            question = QUESTION.format(
                question=qa["question"].strip(), o1=shown[0], o2=shown[1], o3=shown[2],
                o4=shown[3],
            )  # fmt: skip
            queries.append({"query_id": qa["id"], "question": question, "answers": [gold_number]})
            qrels.append({"query_id": qa["id"], "doc_id": doc_id, "relevance": 1})
            counts["kept"] += 1
            counts[f"gold_{gold_number}"] += 1
    return ChoiceSet(corpus, queries, qrels, dict(counts))


def write_jsonl(path: Path, rows: list[dict]) -> None:
    with path.open("w", encoding="utf-8", newline="\n") as out:
        for row in rows:
            out.write(json.dumps(row, ensure_ascii=False) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--source", type=Path, default=None)
    parser.add_argument("--half", choices=HALVES, default="all")
    parser.add_argument("--per-article", type=int, default=8)
    args = parser.parse_args(argv)
    data = build(args.source or default_source(), args.half, args.per_article)
    args.out.mkdir(parents=True, exist_ok=True)
    write_jsonl(args.out / "corpus.jsonl", data.corpus)
    write_jsonl(args.out / "queries.jsonl", data.queries)
    write_jsonl(args.out / "qrels.jsonl", data.qrels)
    c = data.counts
    golds = ", ".join(f"{n}: {c.get(f'gold_{n}', 0)}" for n in "1234")
    print(
        f"{len(data.queries)} multiple-choice questions (half: {args.half}; gold option {golds}) "
        f"over {len(data.corpus)} paragraphs; left out {c['unusable_gold']} questions whose "
        f"gold answer is not 1-4 words without digits and {c['no_distractors']} without three "
        f"distractors; load it as jsonl:{args.out}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
