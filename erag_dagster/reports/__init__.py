"""Reports built on the evaluation modules: the human-judgment leaderboard and terminal tables.

- :mod:`~erag_dagster.reports.leaderboard` — per-retriever means, bootstrap CIs and paired tests
  against a baseline, from human qrels (pytrec_eval, trec_eval conventions);
- :mod:`~erag_dagster.reports.cross_leaderboard` — the same across datasets (BEIR-style and
  eRAG leaderboards with a mean over datasets and Holm-adjusted tests);
- :mod:`~erag_dagster.reports.cross_table1` — Table 1 with one column group per dataset;
- :mod:`~erag_dagster.reports.tables` — tables as text/markdown (Table 1 layout).
"""
