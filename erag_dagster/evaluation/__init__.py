"""The one measurement core every front door calls (:mod:`.steps`): score labelled runs with
the configured list metrics, summarise them, and decide the verdict — from one
:class:`~erag_dagster.config.evaluation.EvaluationConfig`."""
