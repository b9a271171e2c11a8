"""The one measurement core every front door calls: an evaluation session
(:class:`~erag_dagster.evaluation.session.EvaluationSession`) built from one
:class:`~erag_dagster.config.evaluation.EvaluationConfig`, the registry, the dataset, the label
store and the producer, whose steps — retrieve · label · fit (:mod:`.systems`) · score ·
summarise · decide (:mod:`.steps`) · report — the Dagster assets, the Python API, the gate and
the command line all run."""
