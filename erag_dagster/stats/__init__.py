"""Statistics used by every report (a leaf package: it imports only ``erag_dagster.core.errors``).

- :mod:`~erag_dagster.stats.settings` — :class:`Statistics`, the one group of settings
  (resamples, seed, alpha, confidence, permutations) every function below requires;
- :mod:`~erag_dagster.stats.correlation` — Kendall tau-b, Spearman rho, bootstrap CIs;
- :mod:`~erag_dagster.stats.significance` — paired t-test, randomisation test, bootstrap CI of a
  difference, multiple-comparison correction.
"""
