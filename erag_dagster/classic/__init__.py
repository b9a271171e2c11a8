"""Classic retrieval evaluation: human-judgment leaderboards, semantic labels, reranking lift.

- :mod:`~erag_dagster.classic.leaderboard` — per-retriever means, bootstrap CIs and paired tests
  against a baseline, from human qrels (pytrec_eval, trec_eval conventions);
- :mod:`~erag_dagster.classic.semantic` — BERTScore-style / cosine similarity labels between
  retrieved passages and the gold answers (or the question), and their agreement with humans;
- :mod:`~erag_dagster.classic.rerank` — a second-stage reranker over a first-stage top-N and the
  quality/latency trade-off table.
"""
