"""Make the embedded default data set: a deterministic slice of SQuAD v1.1 dev.

    .venv/bin/python scripts/make_sample.py [--source dev-v1.1.json.zip] [--out DIR]

Keeps every paragraph of the articles in ``ARTICLES`` (so a retriever has to pick the right
paragraph among many on the same topic, and BM25 and dense retrievers disagree meaningfully)
and exactly ``QUESTIONS`` questions: the paragraphs of those articles are numbered in file
order, ``QUESTIONS`` of them are picked at evenly spaced positions (``i * n // QUESTIONS``),
and each picked paragraph keeps its first question with all its gold answers; every other
question is dropped. Articles and paragraphs stay in their dev-file order with their original
paragraph positions, so the squad loader gives each paragraph the same doc id
(``f"{title}_{index}"``) as on the full dev file.

Writes ``squad-v1.1-dev-sample.json`` (SQuAD JSON format, ``version`` "1.1") and
``ATTRIBUTION.md`` into the output folder (default: the package's ``data/sample``); the
licence text (``LICENSE``, CC BY-SA 4.0) is kept there by hand. Output is byte-identical
on every run from the same source file.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import zipfile
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO_ROOT / "erag_dagster" / "data" / "sample"
SAMPLE_NAME = "squad-v1.1-dev-sample.json"
QUESTIONS = 120
# Eight articles on unrelated topics, two pairs of them close (a city and a river; an epidemic
# and the immune system), 364 paragraphs in all.
ARTICLES = (
    "Super_Bowl_50",
    "Warsaw",
    "Computational_complexity_theory",
    "Oxygen",
    "Black_Death",
    "Immune_system",
    "Genghis_Khan",
    "Rhine",
)


def default_source() -> Path:
    """``$ERAG_SHARED_DATA`` or ``<repo>/../shared/data``, then the SQuAD dev zip in it."""
    env = os.environ.get("ERAG_SHARED_DATA")
    base = Path(env) if env else REPO_ROOT.parent / "shared" / "data"
    return base / "squad-v1.1-dev" / "dev-v1.1.json.zip"


def read_dev_bytes(source: Path) -> bytes:
    """The SQuAD JSON file's bytes, from a ``.zip`` (its single ``.json`` member) or a file."""
    if zipfile.is_zipfile(source):
        with zipfile.ZipFile(source) as archive:
            (member,) = [n for n in archive.namelist() if n.endswith(".json")]
            return archive.read(member)
    return source.read_bytes()


def build_sample(dev: dict[str, Any]) -> dict[str, Any]:
    """The sample in SQuAD JSON format (see the module docstring for the selection rule)."""
    by_title = {article["title"]: article for article in dev["data"]}
    missing = [t for t in ARTICLES if t not in by_title]
    if missing:
        raise SystemExit(f"articles not in the source file: {', '.join(missing)}")
    chosen = [a for a in dev["data"] if a["title"] in ARTICLES]  # dev-file order
    positions = [(ai, pi) for ai, a in enumerate(chosen) for pi in range(len(a["paragraphs"]))]
    n = len(positions)
    if n < QUESTIONS:
        raise SystemExit(f"only {n} paragraphs for {QUESTIONS} questions")
    picked = {positions[i * n // QUESTIONS] for i in range(QUESTIONS)}
    data = []
    for ai, article in enumerate(chosen):
        paragraphs = []
        for pi, paragraph in enumerate(article["paragraphs"]):
            qas = [paragraph["qas"][0]] if (ai, pi) in picked else []
            paragraphs.append({"context": paragraph["context"], "qas": qas})
        data.append({"title": article["title"], "paragraphs": paragraphs})
    return {"version": dev.get("version", "1.1"), "data": data}


def attribution(sample: dict[str, Any], source_sha256: str, sample_sha256: str) -> str:
    """ATTRIBUTION.md text: source, authors, licence, what was changed, and the numbers."""
    rows = []
    for article in sample["data"]:
        title = article["title"]
        questions = sum(len(p["qas"]) for p in article["paragraphs"])
        rows.append(
            f"| [{title.replace('_', ' ')}](https://en.wikipedia.org/wiki/{title}) "
            f"| {len(article['paragraphs'])} | {questions} |"
        )
    paragraphs = sum(len(a["paragraphs"]) for a in sample["data"])
    questions = sum(len(p["qas"]) for a in sample["data"] for p in a["paragraphs"])
    return "\n".join(
        [
            "# Attribution for the embedded sample",
            "",
            f"`{SAMPLE_NAME}` is a subset of the **SQuAD v1.1 development set**:",
            "",
            "> Pranav Rajpurkar, Jian Zhang, Konstantin Lopyrev, Percy Liang. 2016.",
            "> *SQuAD: 100,000+ Questions for Machine Comprehension of Text.* EMNLP 2016.",
            "> https://rajpurkar.github.io/SQuAD-explorer/ — licensed CC BY-SA 4.0.",
            "",
            "The paragraph texts are taken from English Wikipedia articles written by",
            "Wikipedia contributors (CC BY-SA); the questions and answers were written by the",
            "SQuAD crowd workers. This subset is licensed under the same licence,",
            "**CC BY-SA 4.0** (full text in `LICENSE`, also at",
            "https://creativecommons.org/licenses/by-sa/4.0/).",
            "",
            "Changes made: the articles below were selected whole (every paragraph, unchanged,",
            f"in dev-file order); of their questions, {questions} were kept — the first question",
            f"of {questions} evenly spaced paragraphs — with all their gold answers; every other",
            "question was removed. Made by `scripts/make_sample.py` from the official",
            f"`dev-v1.1.json` (SHA-256 `{source_sha256}`).",
            "",
            f"{len(sample['data'])} articles, {paragraphs} paragraphs, {questions} questions;",
            f"`{SAMPLE_NAME}` SHA-256 `{sample_sha256}`.",
            "",
            "| article | paragraphs | questions |",
            "| --- | ---: | ---: |",
            *rows,
            "",
        ]
    )


def make_sample(source: Path, out_dir: Path) -> dict[str, int]:
    """Write the sample and its ATTRIBUTION.md into ``out_dir``; return its numbers."""
    source_json = read_dev_bytes(source)
    source_sha256 = hashlib.sha256(source_json).hexdigest()
    sample = build_sample(json.loads(source_json))
    text = json.dumps(sample, ensure_ascii=False, indent=1) + "\n"
    data = text.encode("utf-8")
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / SAMPLE_NAME).write_bytes(data)
    notice = attribution(sample, source_sha256, hashlib.sha256(data).hexdigest())
    (out_dir / "ATTRIBUTION.md").write_text(notice, encoding="utf-8")
    return {
        "articles": len(sample["data"]),
        "paragraphs": sum(len(a["paragraphs"]) for a in sample["data"]),
        "questions": sum(len(p["qas"]) for a in sample["data"] for p in a["paragraphs"]),
        "bytes": len(data),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, default=default_source())
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    stats = make_sample(args.source, args.out)
    print(", ".join(f"{k}={v}" for k, v in stats.items()), "->", args.out / SAMPLE_NAME)


if __name__ == "__main__":
    main()
