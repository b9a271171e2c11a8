"""The result of scoring label lists or runs: per-query values and their mean."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["ListMetricReport"]


@dataclass(frozen=True)
class ListMetricReport:
    """Per-query and aggregate metric values.

    ``per_query[query_id][metric]`` and ``aggregate[metric]`` are keyed by the metric names
    exactly as the caller gave them. ``dropped_queries`` lists queries that were not scored and
    are not in the aggregate (only :func:`~erag_dagster.metrics.human.evaluate_run` drops any:
    run queries without judgments, as trec_eval does).
    """

    per_query: dict[str, dict[str, float]]
    aggregate: dict[str, float]
    dropped_queries: tuple[str, ...] = field(default=())
