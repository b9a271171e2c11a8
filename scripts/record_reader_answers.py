"""Write reproductions/answers/reader_answers.yaml: the default reader's answers on 20 fixed pairs.

``tests/test_determinism.py`` checks that this machine gives the same answers. Re-run this only
when the reader's identity changes on purpose (model, prompt, decoding, library versions), and
say so in the commit: the file is what makes another CPU's different answers a failing test.

    .venv/bin/python scripts/record_reader_answers.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from erag_dagster.readers.prompts import reader_passage  # noqa: E402
from tests.test_determinism import ANSWERS, DEFAULT_READER, default_reader, sample_run  # noqa: E402

QUESTIONS, PER_QUERY = 10, 2


def main() -> None:
    run, queries, corpus = sample_run(QUESTIONS, PER_QUERY)
    question = dict(queries.select("query_id", "question").rows())
    text = {d: reader_passage(t, x) for d, t, x in corpus.select("doc_id", "title", "text").rows()}
    pairs = run.select("query_id", "doc_id").rows()
    reader = default_reader()
    answers = reader.answer([(question[q], text[d]) for q, d in pairs])
    document = {
        "reader": DEFAULT_READER,
        "reader_fingerprint": reader.fingerprint,
        "questions": QUESTIONS,
        "per_query": PER_QUERY,
        "answers": [
            {"query_id": q, "doc_id": d, "answer": a}
            for (q, d), a in zip(pairs, answers, strict=True)
        ],
    }
    header = (
        "# Written by scripts/record_reader_answers.py; checked by tests/test_determinism.py.\n"
    )
    ANSWERS.write_text(header + yaml.safe_dump(document, sort_keys=False, allow_unicode=True))
    sent = reader.guard_counts["reference"]
    print(f"{ANSWERS}: {len(answers)} answers, {sent} decoded again in float64")


if __name__ == "__main__":
    main()
