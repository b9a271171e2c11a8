"""erag-dagster: evaluate retrievers by what they do for a RAG reader (eRAG), as Dagster assets."""

__version__ = "0.1.0"
