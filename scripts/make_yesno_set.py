#!/usr/bin/env python3
"""Make a yes/no (or yes/no/maybe) QA set from SciFact: each claim becomes a question.

    python scripts/make_yesno_set.py --out DIR [--source scifact-hf-csv.zip]
        [--labels yes,no | yes,no,maybe] [--half all | tuning | heldout]

Source: the SciFact release as CSV in the shared test data (``scifact/scifact-hf-csv.zip``,
described in ``../shared/data/SOURCES.md`` section 8): ``claims_validation.csv`` (the 300
claims that are BEIR SciFact's test queries, one row per evidence document and sentence set)
and ``corpus_train.csv`` (5,183 abstracts). A claim whose evidence labels are all ``SUPPORT``
gets the gold answer ``yes``, all ``CONTRADICT`` the answer ``no``; a claim without evidence
(SciFact's "not enough info") or with mixed labels is left out (the counts are printed).

``--labels yes,no,maybe`` (the harder set of issue 36) keeps the claims without evidence too,
with the gold answer ``maybe``, and asks :data:`QUESTION_MAYBE`; mixed claims are still left
out. ``--half`` keeps one half of the claims by a fixed rule (:func:`half_of`): ``tuning`` when
the first byte of ``sha256(claim id as written in the CSV, UTF-8)`` is even, ``heldout`` when it
is odd — tune on one, report on the other. The corpus is whole in both halves; the qrels follow
the kept claims.

Writes a ``jsonl:DIR`` dataset (``docs/data.md``, canonical column names):

* ``corpus.jsonl`` — ``doc_id, title, text``: every abstract, its sentences joined by one space
  as BEIR does (the text then equals BEIR SciFact's ``corpus.jsonl``), in the CSV's order
  (BEIR's corpus order);
* ``queries.jsonl`` — ``query_id, question, answers``: the claim id, :data:`QUESTION` filled
  with the claim, ``["yes"]`` or ``["no"]``; sorted by claim id (numeric);
* ``qrels.jsonl`` — ``query_id, doc_id, relevance``: each kept claim's evidence documents,
  relevance 1, sorted by claim id then doc id (numeric).

Output is byte-identical on every run from the same source file. The package never reads the
shared data; this script and its test do.
"""

from __future__ import annotations

import argparse
import ast
import csv
import hashlib
import io
import json
import os
import tokenize
import zipfile
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

REPO_ROOT = Path(__file__).resolve().parents[1]
CLAIMS_MEMBER = "claims_validation.csv"
CORPUS_MEMBER = "corpus_train.csv"
#: The question asked for a claim (trailing full stop dropped): a question about the claim, not
#: about "the passage", so it reads the same with one passage, three (end-to-end) or none
#: (closed-book), and the packaged readers answer it with a bare "Yes"/"No", the first token
#: the ``accuracy`` metric reads (docs/label-methods.md, "Yes/no answers").
QUESTION = "Is it true that {claim}? Answer yes or no."
#: The question of the yes/no/maybe set (``--labels yes,no,maybe``).
QUESTION_MAYBE = "Is it true that {claim}? Answer yes, no or maybe."
GOLD = {"SUPPORT": "yes", "CONTRADICT": "no"}
#: The label sets ``--labels`` accepts.
LABEL_SETS = {"yes,no": ("yes", "no"), "yes,no,maybe": ("yes", "no", "maybe")}
HALVES = ("all", "tuning", "heldout")


class YesNoSet(NamedTuple):
    """The three tables as lists of rows (dicts in canonical column order), and the counts
    ``yes``, ``no``, ``no_evidence``, ``mixed`` of the source claims."""

    corpus: list[dict]
    queries: list[dict]
    qrels: list[dict]
    counts: dict[str, int]


def default_source() -> Path:
    """``$ERAG_SHARED_DATA`` or ``<repo>/../shared/data``, then SciFact's CSV zip in it."""
    env = os.environ.get("ERAG_SHARED_DATA")
    base = Path(env) if env else REPO_ROOT.parent / "shared" / "data"
    return base / "scifact" / "scifact-hf-csv.zip"


def abstract_sentences(field: str) -> list[str]:
    """The sentences of an abstract printed as a numpy array (``['s1'\\n 's2' ...]``).

    Each Python string literal is read on its own (:mod:`tokenize`, then
    :func:`ast.literal_eval` of that one token): evaluating the whole field would concatenate
    adjacent literals into one string. Literals may use either quote (numpy picks ``"`` when a
    sentence holds ``'``)."""
    tokens = tokenize.generate_tokens(io.StringIO(field).readline)
    return [ast.literal_eval(t.string) for t in tokens if t.type == tokenize.STRING]


def question_for(claim: str, template: str = QUESTION) -> str:
    """``template`` (:data:`QUESTION`) for one claim, its surrounding blanks and one final ``.``
    dropped."""
    text = claim.strip()
    if text.endswith("."):
        text = text[:-1].rstrip()
    return template.format(claim=text)


def half_of(claim_id: str) -> str:
    """``"tuning"`` when the first byte of ``sha256(claim_id)`` (UTF-8) is even, else
    ``"heldout"``: a fixed split that depends on the id alone."""
    return "tuning" if hashlib.sha256(claim_id.encode("utf-8")).digest()[0] % 2 == 0 else "heldout"


def _csv_rows(archive: zipfile.ZipFile, member: str) -> Iterable[dict[str, str]]:
    with archive.open(member) as raw:
        yield from csv.DictReader(io.TextIOWrapper(raw, encoding="utf-8", newline=""))


def build(source: Path, labels: tuple[str, ...] = ("yes", "no"), half: str = "all") -> YesNoSet:
    """The yes/no set from SciFact's CSV zip (see the module docstring); ``labels`` with
    ``"maybe"`` keeps the claims without evidence as ``maybe`` questions; ``half`` one of
    :data:`HALVES`. ``counts`` count the claims of the chosen half only."""
    maybe = "maybe" in labels
    template = QUESTION_MAYBE if maybe else QUESTION
    with zipfile.ZipFile(source) as archive:
        corpus = [
            {
                "doc_id": row["doc_id"],
                "title": row["title"],
                "text": " ".join(abstract_sentences(row["abstract"])),
            }
            for row in _csv_rows(archive, CORPUS_MEMBER)
        ]
        claims: dict[str, str] = {}
        found_labels: dict[str, set[str]] = {}
        evidence: dict[str, set[str]] = {}
        for row in _csv_rows(archive, CLAIMS_MEMBER):
            claims.setdefault(row["id"], row["claim"])
            found_labels.setdefault(row["id"], set())
            evidence.setdefault(row["id"], set())
            if row["evidence_doc_id"]:
                found_labels[row["id"]].add(row["evidence_label"])
                evidence[row["id"]].add(row["evidence_doc_id"])
    counts = Counter({"yes": 0, "no": 0, "no_evidence": 0, "mixed": 0})
    if maybe:
        counts["maybe"] = 0
    queries, qrels = [], []
    for claim_id in sorted(claims, key=int):
        if half != "all" and half_of(claim_id) != half:
            continue
        found = found_labels[claim_id]
        if not found:
            counts["no_evidence"] += 1
            if maybe:
                counts["maybe"] += 1
                question = question_for(claims[claim_id], template)
                queries.append({"query_id": claim_id, "question": question, "answers": ["maybe"]})
            continue
        if len(found) > 1 or not found <= GOLD.keys():
            counts["mixed"] += 1
            continue
        answer = GOLD[next(iter(found))]
        counts[answer] += 1
        question = question_for(claims[claim_id], template)
        queries.append({"query_id": claim_id, "question": question, "answers": [answer]})
        qrels.extend(
            {"query_id": claim_id, "doc_id": doc_id, "relevance": 1}
            for doc_id in sorted(evidence[claim_id], key=int)
        )
    return YesNoSet(corpus, queries, qrels, dict(counts))


def write_jsonl(path: Path, rows: Iterable[dict]) -> None:
    """One JSON object per line, UTF-8, ``\\n`` line ends, keys in the rows' order."""
    with path.open("w", encoding="utf-8", newline="\n") as out:
        for row in rows:
            out.write(json.dumps(row, ensure_ascii=False) + "\n")


def write(data: YesNoSet, out: Path) -> None:
    """``corpus.jsonl``, ``queries.jsonl`` and ``qrels.jsonl`` into ``out`` (created)."""
    out.mkdir(parents=True, exist_ok=True)
    write_jsonl(out / "corpus.jsonl", data.corpus)
    write_jsonl(out / "queries.jsonl", data.queries)
    write_jsonl(out / "qrels.jsonl", data.qrels)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for the jsonl tables")
    parser.add_argument("--source", type=Path, default=None, help="SciFact's CSV zip")
    parser.add_argument("--labels", choices=sorted(LABEL_SETS), default="yes,no")
    parser.add_argument("--half", choices=HALVES, default="all", help="claims kept (sha256 rule)")
    args = parser.parse_args(argv)
    data = build(args.source or default_source(), LABEL_SETS[args.labels], args.half)
    write(data, args.out)
    c = data.counts
    if "maybe" in c:
        kept = f"{c['yes']} yes, {c['no']} no, {c['maybe']} maybe"
        left = f"{c['mixed']} claims with mixed labels"
    else:
        kept = f"{c['yes']} yes, {c['no']} no"
        left = f"{c['no_evidence']} claims without evidence and {c['mixed']} with mixed labels"
    print(
        f"{len(data.queries)} {args.labels.replace(',', '/')} questions ({kept}; half: "
        f"{args.half}) over {len(data.corpus)} abstracts, {len(data.qrels)} evidence judgments; "
        f"left out {left}; load it as jsonl:{args.out}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
