"""Reports built on the evaluation modules: the human-judgment leaderboard and terminal tables.

- :mod:`~erag_dagster.reports.leaderboard` — per-retriever means, bootstrap CIs and paired tests
  against a baseline, from human qrels (pytrec_eval, trec_eval conventions);
- :mod:`~erag_dagster.reports.tables` — tables as text/markdown (Table 1 layout).
"""
