"""The Dagster layer: the component a team adds to its own project, the one ``Definitions``
builder, the asset factories (``assets/``), resources, automation, the main job's terminal
progress and the dev server. Everything below it is plain Python with no Dagster import.

This ``__init__`` imports nothing, so ``erag_dagster.orchestration.notices`` can filter
Dagster's notices before Dagster is imported."""
