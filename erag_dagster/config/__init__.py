"""Typed configuration shared by every front door (:mod:`.evaluation`: ``EvaluationConfig``)."""

from erag_dagster.config.evaluation import DATASET_OVERRIDES, FIELDS, EvaluationConfig

__all__ = ["DATASET_OVERRIDES", "FIELDS", "EvaluationConfig"]
