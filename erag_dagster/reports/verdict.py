"""The verdict: which retriever helps the reader, and is the difference real?

Per reader of an ``erag_per_query`` table (``reader, retriever, query_id`` + one column per
eRAG list metric, :func:`~erag_dagster.meta.per_query.erag_per_query`), on one *headline*
metric:

- **ranking**: the retrievers by their mean over queries, highest first (ties: name order),
  each with the percentile bootstrap CI of its mean
  (:func:`~erag_dagster.stats.significance.bootstrap_mean_ci`, the leaderboards' CI);
- **pairs**: every pair of retrievers, oriented higher-ranked minus lower-ranked, compared on
  the queries both scored (:func:`~erag_dagster.stats.significance.compare_paired`): the mean
  paired difference, its paired bootstrap CI, the two-sided paired randomisation test
  ``p_perm`` and ``p_holm``, ``p_perm`` Holm-adjusted
  (:func:`~erag_dagster.stats.significance.holm`) over the family of that reader's pairs
  (``m = r (r - 1) / 2`` for ``r`` retrievers). A pair is *significant* when
  ``p_holm < stats.alpha`` (the registry's ``alpha``; every interval at its ``confidence``,
  every draw from its ``seed``: one :class:`~erag_dagster.stats.settings.Statistics` value,
  required, kept in the verdict);
- **sentence**: one line a person reads first, e.g. ``bm25 and hybrid are indistinguishable
  on 30 questions; dense is worse than bm25 (p = 0.010)``.

Names: a registry partition key (``bm25-286b153c``) prints as its registry name (``bm25``,
:func:`short_name`); the frames keep the keys. Edge cases: a reader with one retriever has no
pair ("nothing to compare"); an empty table raises :class:`InputError`, as does a headline
metric that is not a column. All draws are seeded: the same table gives the same verdict.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import combinations

import numpy as np
import polars as pl

from erag_dagster.core.errors import InputError
from erag_dagster.core.input_numbers import format_given
from erag_dagster.meta.per_query import check_erag_per_query
from erag_dagster.stats.settings import Statistics
from erag_dagster.stats.significance import bootstrap_mean_ci, compare_paired, holm

#: At most this many pair lines per reader in the text; beyond, only adjacent ranks are shown
#: (every pair stays in :attr:`Verdict.pairs`).
MAX_PAIR_LINES = 6

RANKING_SCHEMA: dict[str, type[pl.DataType]] = {
    "reader": pl.String,
    "rank": pl.Int64,
    "retriever": pl.String,
    "queries": pl.Int64,
    "mean": pl.Float64,
    "low": pl.Float64,
    "high": pl.Float64,
}
PAIRS_SCHEMA: dict[str, type[pl.DataType]] = {
    "reader": pl.String,
    "higher": pl.String,
    "lower": pl.String,
    "queries": pl.Int64,
    "difference": pl.Float64,
    "low": pl.Float64,
    "high": pl.Float64,
    "p_perm": pl.Float64,
    "p_holm": pl.Float64,
    "significant": pl.Boolean,
}

_PARTITION_SUFFIX = re.compile(r"-[0-9a-f]{8}$")


def short_name(partition_key: str) -> str:
    """A registry partition key without its content-hash suffix (``bm25-286b153c`` ->
    ``bm25``); any other string is returned as it is."""
    return _PARTITION_SUFFIX.sub("", partition_key)


@dataclass(frozen=True)
class Verdict:
    """The verdict of one ``erag_per_query`` table (module docstring).

    ``ranking`` and ``pairs`` follow :data:`RANKING_SCHEMA` / :data:`PAIRS_SCHEMA`;
    ``sentences`` maps each reader (partition key) to its one-line summary; ``metric`` is the
    headline metric, ``dataset`` the registry dataset name (``None`` for a registry without a
    ``datasets`` section), ``statistics`` the settings it was computed with (``alpha``: the
    significance level of ``p_holm``; ``confidence``: the level of every interval).
    """

    metric: str
    ranking: pl.DataFrame
    pairs: pl.DataFrame
    sentences: dict[str, str]
    statistics: Statistics
    dataset: str | None = None
    readers: tuple[str, ...] = field(default=())
    labels: str = "eRAG"
    """The labels ranked: ``eRAG`` or a label method's Table-1 name
    (``evaluation.verdict_labels``)."""

    @property
    def alpha(self) -> float:
        """The significance level of ``p_holm`` (``statistics.alpha``)."""
        return self.statistics.alpha

    def lines(self) -> list[str]:
        """The verdict as terminal lines: per reader a header, the ranking, the pairs and the
        sentence (see :data:`MAX_PAIR_LINES`)."""
        out: list[str] = []
        for reader in self.readers:
            ranks = self.ranking.filter(pl.col("reader") == reader)
            n = int(ranks["queries"].max() or 0)
            out.append(
                f"reader {short_name(reader)}: retrievers ranked by {self.labels} {self.metric} "
                f"(mean over {n} questions [{self.statistics.percent} bootstrap CI])"
            )
            width = max(len(short_name(r)) for r in ranks["retriever"])
            for row in ranks.iter_rows(named=True):
                out.append(
                    f"  {row['rank']}. {short_name(row['retriever']):<{width}}  "
                    f"{row['mean']:.3f} [{row['low']:.3f}, {row['high']:.3f}]"
                )
            pairs = self.pairs.filter(pl.col("reader") == reader)
            shown = pairs if pairs.height <= MAX_PAIR_LINES else _adjacent(pairs, ranks)
            labels = [f"{short_name(p['higher'])} - {short_name(p['lower'])}" for p in
                      shown.iter_rows(named=True)]  # fmt: skip
            pad = max((len(label) for label in labels), default=0)
            for label, p in zip(labels, shown.iter_rows(named=True), strict=True):
                out.append(
                    f"  {label:<{pad}}  {p['difference']:+.3f} [{p['low']:+.3f}, {p['high']:+.3f}]"
                    f"  p = {_p(p['p_holm'])} (Holm){' *' if p['significant'] else ''}"
                )
            if shown.height < pairs.height:
                out.append(f"  ({pairs.height - shown.height} more pairs in the verdict tables)")
            out.append(f"  => {self.sentences[reader]}")
        return out

    @property
    def text(self) -> str:
        """:meth:`lines` joined by newlines."""
        return "\n".join(self.lines())

    @property
    def family(self) -> str:
        """The test family of ``p_holm``, in words (every view that shows the verdict's p says
        which test it is, since a leaderboard or a gate tests other families)."""
        return (
            "two-sided paired randomisation test of each pair of retrievers on the questions "
            "both answered, Holm-adjusted over that reader's pairs (alpha = "
            f"{format_given(self.alpha)})"
        )

    def to_dict(self) -> dict:
        """The verdict as JSON-able data (the ``verdict`` asset's stored value)."""
        return {
            "metric": self.metric,
            "labels": self.labels,
            "alpha": self.alpha,
            "statistics": self.statistics.as_dict(),
            "dataset": self.dataset,
            "readers": list(self.readers),
            "sentences": dict(self.sentences),
            "ranking": self.ranking.to_dicts(),
            "pairs": self.pairs.to_dicts(),
        }

    @classmethod
    def from_dict(cls, data: dict) -> Verdict:
        """The :class:`Verdict` :meth:`to_dict` wrote (frames with their schemas). One stored
        before verdicts kept their statistics (no ``statistics`` key) is refused in one line:
        its CIs' level and seed are unknown, so it is materialised again, not guessed."""
        if "statistics" not in data:
            raise InputError(
                "the stored verdict predates its statistics (seed, alpha, confidence): "
                "materialise the verdict asset again (erag-dagster run does)"
            )
        return cls(
            metric=str(data["metric"]),
            ranking=pl.DataFrame(data["ranking"], schema=RANKING_SCHEMA),
            pairs=pl.DataFrame(data["pairs"], schema=PAIRS_SCHEMA),
            sentences={str(k): str(v) for k, v in data["sentences"].items()},
            statistics=Statistics.from_dict(data["statistics"]),
            dataset=data.get("dataset"),
            readers=tuple(data["readers"]),
            labels=str(data.get("labels", "eRAG")),
        )

    def markdown(self) -> str:
        """The verdict for Dagster metadata (``MetadataValue.md``): a bullet per reader with
        its sentence, then the ranking and pair lines as a code block."""
        bullets = [f"- **{short_name(r)}**: {self.sentences[r]}" for r in self.readers]
        head = f"**Verdict** ({self.labels} {self.metric}; p: {self.family})"
        return "\n".join([head, "", *bullets, "", "```", self.text, "```"])


def verdict(
    per_query: pl.DataFrame,
    metric: str,
    stats: Statistics,
    dataset: str | None = None,
    labels: str = "eRAG",
) -> Verdict:
    """The :class:`Verdict` of every reader of ``per_query`` on the headline ``metric``.

    Readers are taken in sorted order, each retriever's queries in id order (the row order
    of ``per_query`` does not matter); ``stats`` (resamples, permutations, confidence, seed,
    and ``alpha`` for the Holm-adjusted decision) is passed to
    :func:`~erag_dagster.stats.significance.compare_paired` and kept in the verdict. Raises
    :class:`InputError` for an empty table, a missing column or a null/non-finite score (naming the
    reader, retriever and query).
    ``labels`` names the labels the table was scored from (the header says it).
    """
    _check(per_query, metric)
    rankings, pair_rows, sentences = [], [], {}
    readers = tuple(sorted(per_query["reader"].unique().to_list()))
    for reader in readers:
        table = per_query.filter(pl.col("reader") == reader).sort("query_id")
        scores = {
            str(r): dict(zip(g["query_id"], g[metric], strict=True))
            for (r,), g in table.group_by("retriever")
        }
        rows = []
        for name, values in scores.items():
            low, high = bootstrap_mean_ci(list(values.values()), stats)
            rows.append((name, len(values), float(np.mean(list(values.values()))), low, high))
        rows.sort(key=lambda row: (-row[2], row[0]))
        rankings += [(reader, i, *row) for i, row in enumerate(rows, start=1)]
        pairs = []
        for (a, *_), (b, *_) in combinations(rows, 2):
            cmp = compare_paired(scores[a], scores[b], stats)
            pairs.append([reader, a, b, cmp.n, cmp.difference, *cmp.ci, cmp.p_perm])
        adjusted = holm([p[-1] for p in pairs])
        for p, p_holm in zip(pairs, adjusted, strict=True):
            p += [float(p_holm), bool(p_holm < stats.alpha)]
        pair_rows += pairs
        sentences[reader] = _sentence([r[0] for r in rows], pairs, stats.alpha)
    return Verdict(
        metric=metric,
        ranking=pl.DataFrame(rankings, schema=RANKING_SCHEMA, orient="row"),
        pairs=pl.DataFrame(pair_rows, schema=PAIRS_SCHEMA, orient="row"),
        sentences=sentences,
        statistics=stats,
        dataset=dataset,
        readers=readers,
        labels=labels,
    )


def _check(per_query: pl.DataFrame, metric: str) -> None:
    if per_query.height == 0:
        raise InputError("the verdict needs a non-empty erag_per_query table")
    check_erag_per_query(per_query, [metric], "erag_per_query")


def _sentence(order: Sequence[str], pairs: Sequence[Sequence], alpha: float) -> str:
    """One sentence: the indistinguishable pairs, then each retriever worse than others."""
    if len(order) < 2:
        return f"only one retriever ({short_name(order[0])}): nothing to compare."
    n = max(int(p[3]) for p in pairs)
    same = [p for p in pairs if not p[-1]]
    worse: dict[str, list[Sequence]] = {}
    for p in pairs:
        if p[-1]:
            worse.setdefault(p[2], []).append(p)
    parts = []
    if len(same) == len(pairs):
        parts.append(f"{_names(order)} are indistinguishable on {n} questions")
    elif same:
        alike = [f"{short_name(p[1])} and {short_name(p[2])}" for p in same]
        parts.append(f"{alike[0]} are indistinguishable on {n} questions")
        parts += [f"so are {text}" for text in alike[1:]]
    for lower in [r for r in order if r in worse]:
        than = [f"{short_name(p[1])} (p = {_p(p[-2])})" for p in worse[lower]]
        parts.append(f"{short_name(lower)} is worse than {_names(than)}")
    if not same:
        parts[0] += f" on {n} questions"
    return "; ".join(parts) + f" (Holm-corrected p, alpha = {format_given(alpha)})."


def _names(items: Sequence[str]) -> str:
    names = [short_name(i) if "(" not in i else i for i in items]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _p(value: float) -> str:
    return "<0.001" if value < 0.001 else f"{value:.3f}"


def _adjacent(pairs: pl.DataFrame, ranks: pl.DataFrame) -> pl.DataFrame:
    """The pairs of neighbouring ranks (1-2, 2-3, ...), in rank order."""
    order = ranks["retriever"].to_list()
    neighbours = pl.DataFrame({"higher": order[:-1], "lower": order[1:]})
    return neighbours.join(pairs, on=["higher", "lower"], how="left").select(pairs.columns)
