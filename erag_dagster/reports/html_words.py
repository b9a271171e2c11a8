"""The HTML report's sentences: what a number means, what the run judged and cost, and which
test each p-value comes from (:mod:`erag_dagster.reports.html`).

Pure functions of the run's figures; nothing here computes a statistic. The wording follows
:mod:`erag_dagster.metrics.list_metrics` (each list metric's formula on per-document labels) and
the three test families a pair of retrievers can meet on the page (:data:`FAMILIES`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from erag_dagster.core.errors import InputError
from erag_dagster.metrics.names import parse_metric_name

#: The test behind each view's p-values, in words (each view names its own).
FAMILIES = {
    "verdict": (
        "Verdict p: paired randomisation test on the questions both retrievers answered, "
        "Holm-adjusted over this reader's {m} pairs of retrievers; a pair differs when "
        "p < {alpha}. This is the p that decides the sentence above."
    ),
    "leaderboard": (
        "Leaderboard p: the same paired randomisation test, but each retriever against the "
        "baseline only and Holm-adjusted over all {m} comparisons of this dataset (every "
        "reader, metric and retriever) — a larger family than the verdict's, so its p can be "
        "larger for the same pair."
    ),
    "judgments": (
        "Judgment p: paired permutation test of each retriever against the first on the "
        "human relevance judgments (not the reader's labels), not corrected for multiple "
        "comparisons — it answers a different question than the verdict."
    ),
}


def label_sentence(downstream: str | None) -> str:
    """What an eRAG label is, in one sentence (``downstream``: the reader's metric, ``f1``,
    ``em``...; ``None``: "downstream score")."""
    score = f"{downstream} score" if downstream else "downstream score"
    return (
        f"Each retrieved document gets a label: the reader's {score} (0 to 1) against the gold "
        "answers when it answers the question from that document alone."
    )


def _value(value: float | None) -> str:
    return "this" if value is None else f"{value:.2f}"


def metric_sentence(metric: str, value: float | None = None) -> str:
    """One sentence saying what eRAG ``metric`` measures, with ``value`` as its example
    (``eRAG P@3 = 0.19: ...``), in terms of the labels of :func:`label_sentence`. A metric
    outside the list families gets a generic sentence."""
    try:
        parsed = parse_metric_name(metric)
    except InputError:
        parsed = None
    family = parsed.family if parsed is not None else ""
    k = parsed.cutoff if parsed is not None else None
    top = f"top {k}" if k else "retrieved"
    lead = f"eRAG {metric} = {value:.2f}" if value is not None else f"eRAG {metric}"
    if family == "P":
        worth = (
            f" — as if {value * k:.1f} of the {k} documents let it answer fully correctly"
            if value is not None and k
            else ""
        )
        return (
            f"{lead}: the reader answered from each of a retriever's {top} documents alone, "
            f"and those answers scored {_value(value)} on average{worth}."
        )
    if family == "Success":
        return (
            f"{lead}: the best answer the reader gave from any one of the {top} documents, "
            f"averaged over questions."
        )
    if family == "RR":
        return (
            f"{lead}: the best label in the {top} list divided by its rank, averaged over "
            "questions — 1 when the first document alone yields a fully correct answer, 0.5 "
            f"when that happens first at rank 2."
        )
    if family == "AP":
        return (
            f"{lead}: average precision with the reader's labels as relevance — high when "
            f"the documents the reader answers well from come first."
        )
    if family == "nDCG":
        return (
            f"{lead}: the {top} labels discounted by rank (1/log2(rank+1)) and divided by a "
            f"list of perfect documents — 1 when every one of them yields a fully correct answer."
        )
    if family == "R":
        return f"{lead}: the share of all labelled answer quality that sits in the {top} documents."
    if family == "UDCG":
        return (
            f"{lead}: like nDCG on signed labels (document minus closed-book score): "
            "negative when the documents distract the reader."
        )
    return f"{lead}: the list metric {metric} on the reader's per-document labels."


@dataclass(frozen=True)
class LabelCost:
    """What the eRAG labels of a dataset cost in the run that last wrote them.

    ``pairs``: (question, document) pairs labelled, over every reader x retriever;
    ``from_store``: pairs whose answer was already in the label store; ``generated``: pairs
    the reader answered then; ``reader_seconds``: the reader's wall time for them, seconds
    (``None`` where no partition recorded it); ``partitions``: reader x retriever partitions
    counted.
    """

    pairs: int
    from_store: int
    generated: int
    reader_seconds: float | None
    partitions: int


def cost_sentence(cost: LabelCost) -> str:
    """The cost in one sentence (counts as integers, time in seconds or minutes). Every pair
    from the store: said so (the reader ran in earlier runs, none of its time is this run's)."""
    head = (
        f"{cost.pairs:,} question-document pairs judged by the reader over "
        f"{cost.partitions} reader x retriever runs: "
    )
    if cost.generated == 0 and cost.from_store:
        return head + (
            f"all {cost.from_store:,} distinct pairs came from the label store (answered in "
            "earlier runs): no reader time in this one."
        )
    time = (
        "reader time not recorded"
        if cost.reader_seconds is None
        else f"reader time {_duration(cost.reader_seconds)}"
    )
    return head + (
        f"{cost.from_store:,} from the label store, {cost.generated:,} generated ({time})."
    )


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.1f} s"
    return f"{seconds / 60:.1f} min"


@dataclass(frozen=True)
class DatasetFacts:
    """The dataset as a person names it, and its size.

    ``name``: the registry dataset name, else the spec's kind and file name without options or
    folders (``sample``, ``jsonl: mydata``); ``spec``: the full spec (paths and options: for the
    details); ``questions``, ``documents``, ``judgments``: counts (``None``: unknown).
    """

    name: str
    spec: str | None = None
    questions: int | None = None
    documents: int | None = None
    judgments: int | None = None


def dataset_display_name(spec: str) -> str:
    """A spec without options and folders: ``sample?spread_questions=30`` → ``sample``,
    ``jsonl:/home/me/data/clapnq`` → ``jsonl: clapnq``, ``beir:/x/scifact/beir`` →
    ``beir: scifact/beir``... the last two path parts at most."""
    base = spec.split("?", 1)[0]
    kind, _, path = base.partition(":")
    if not path:
        return kind
    parts = [p for p in path.replace("\\", "/").split("/") if p]
    if not parts:
        return kind
    shown = parts[-2:] if len(parts) > 1 and parts[-1] in _GENERIC else parts[-1:]
    return f"{kind}: {'/'.join(shown)}"


#: Folder names too generic to name a dataset alone (their parent is shown too).
_GENERIC = {"beir", "data", "corpus", "kilt", "jsonl", "parquet", "squad"}


def facts_sentence(facts: DatasetFacts, written: datetime | None) -> str:
    """``30 questions · 1,204 documents · 30 judgments · run 2026-12-06 02:50 UTC`` (unknown
    parts left out)."""
    parts = [
        f"{n:,} {what}"
        for n, what in (
            (facts.questions, "questions"),
            (facts.documents, "documents"),
            (facts.judgments, "judgments"),
        )
        if n is not None
    ]
    if written is not None:
        parts.append(f"run {written:%Y-%m-%d %H:%M} UTC")
    return " · ".join(parts)
