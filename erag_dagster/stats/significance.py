"""Paired significance tests for two systems scored on the same queries.

Given per-query scores ``a_q`` and ``b_q`` of systems A and B, the tests work on the
per-query differences ``d_q = a_q - b_q`` over the queries both systems scored (the
intersection of their ids; ids only one side has are dropped and counted).

- **Paired t-test** (Student 1908; scipy ``ttest_rel``): ``t = mean(d) / (sd(d) / sqrt(n))``
  with ``sd`` the sample standard deviation (``ddof=1``), two-sided ``p`` from Student's t with
  ``n - 1`` degrees of freedom.
- **Paired randomisation (sign-flip) test** (Fisher 1935; Smucker, Allan & Carterette,
  CIKM 2007, for IR): under H0 "A and B are exchangeable per query" each ``d_q`` is equally
  likely to carry either sign. Statistic ``T = |mean(d)|``; the p-value is the share of sign
  assignments ``s`` with ``|mean(s * d)| >= T``. When all ``2**n`` assignments fit in
  ``n_permutations`` they are enumerated and ``p = count / 2**n`` (exact; the identity is one of
  them). Otherwise ``n_permutations`` random assignments are drawn and
  ``p = (count + 1) / (n_permutations + 1)`` (Phipson & Smyth 2010), which is never 0.
  scipy's ``permutation_test(..., permutation_type="samples")`` follows the same two rules.
- **Bootstrap CI of the mean difference**: percentile bootstrap over queries (see
  :mod:`erag_dagster.stats.correlation`).
- **Across datasets** (:func:`stratified_bootstrap_mean_ci`,
  :func:`stratified_randomisation_test`): the same bootstrap and sign-flip test for the
  unweighted mean over datasets of per-dataset means, resampling / flipping within each dataset.
- **Multiple comparisons**: :func:`holm` (Holm 1979 step-down, family-wise error rate).

Edge-case policy: ``n = 0`` (no shared query) raises :class:`InputError`; so do non-finite
scores. When every difference is the same value ``c`` (zero variance) the t statistic is
``0`` with ``p_t = 1`` if ``c == 0`` (identical systems) and ``copysign(inf, c)`` with
``p_t = 0`` otherwise (the limit of the t-test; the randomisation test then gives the useful
p-value, ``2 / 2**n`` when exact). With ``n = 1`` the t-test is undefined: ``t = p_t = nan``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np
from numpy.typing import ArrayLike, NDArray

from erag_dagster.core.errors import InputError
from erag_dagster.stats.correlation import (
    check_bootstrap_args,
    percentile_interval,
    resample_blocks,
)
from erag_dagster.stats.settings import Statistics

#: Tolerance (relative to ``sum(|d|)``) when comparing permuted statistics with the observed
#: one, so that assignments equal to it up to floating-point rounding count as extreme.
_ABS_TOL = 1e-10
_BLOCK = 1024


@dataclass(frozen=True)
class PairedComparison:
    """Result of :func:`compare_paired`: A versus B on their shared queries.

    ``difference = mean_a - mean_b`` (the mean per-query difference); ``ci`` its percentile
    bootstrap interval at ``confidence``; ``t``/``p_t`` the paired t-test; ``p_perm`` the
    two-sided randomisation test (``exact`` when all sign flips were enumerated, else from
    ``n_permutations`` random ones); ``n`` shared queries; ``only_a``/``only_b`` queries
    dropped because the other system lacks them.
    """

    mean_a: float
    mean_b: float
    difference: float
    t: float
    p_t: float
    p_perm: float
    ci: tuple[float, float]
    n: int
    only_a: int
    only_b: int
    exact: bool
    n_permutations: int
    confidence: float


def align(
    a: Mapping[str, float], b: Mapping[str, float]
) -> tuple[list[str], NDArray[np.float64], NDArray[np.float64], int, int]:
    """Scores of the shared query ids, in sorted id order.

    Returns ``(ids, a_scores, b_scores, only_a, only_b)`` where ``only_a``/``only_b`` count ids
    present in one mapping only. Raises :class:`InputError` for a non-finite score (naming the
    query) or when no id is shared.
    """
    ids = sorted(set(a) & set(b))
    if not ids:
        raise InputError(f"the two systems share no query id ({len(a)} vs {len(b)} queries scored)")
    for name, scores in (("A", a), ("B", b)):
        for qid in ids:
            if not math.isfinite(float(scores[qid])):
                raise InputError(f"system {name}: non-finite score {scores[qid]} for query {qid!r}")
    xa = np.array([float(a[q]) for q in ids], dtype=np.float64)
    xb = np.array([float(b[q]) for q in ids], dtype=np.float64)
    return ids, xa, xb, len(a) - len(ids), len(b) - len(ids)


def paired_t_test(a: ArrayLike, b: ArrayLike) -> tuple[float, float]:
    """Two-sided paired t-test ``(t, p)`` of ``a - b`` (scipy ``ttest_rel``).

    Zero-variance and ``n < 2`` cases follow the module's edge-case policy.
    """
    from scipy import stats as sps

    d = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    if d.size < 2:
        return math.nan, math.nan
    if np.all(d == d[0]):
        if d[0] == 0.0:
            return 0.0, 1.0
        return math.copysign(math.inf, float(d[0])), 0.0
    result = sps.ttest_rel(a, b)
    return float(result.statistic), float(result.pvalue)


def randomisation_test(differences: ArrayLike, stats: Statistics) -> tuple[float, bool]:
    """Two-sided paired sign-flip test on ``differences``; returns ``(p, exact)``.

    Exact enumeration when ``2**n <= stats.permutations``, else ``stats.permutations`` Monte
    Carlo draws from ``np.random.default_rng(stats.seed)`` (see the module docstring for both
    p-value formulas).
    """
    n_permutations, seed = stats.permutations, stats.seed
    d = np.asarray(differences, dtype=np.float64)
    if d.ndim != 1 or d.size == 0 or not np.isfinite(d).all():
        raise InputError("randomisation test needs a non-empty one-dimensional finite array")
    if int(n_permutations) != n_permutations or n_permutations < 1:
        raise InputError(f"n_permutations must be a positive integer, got {n_permutations}")
    n = d.size
    # Sums instead of means: same ordering for fixed n, fewer rounding steps. Sums that equal
    # the observed one mathematically may differ from it by rounding (at most ~n * eps * S),
    # so "at least as extreme" allows a margin far below any real difference.
    observed = abs(float(d.sum()))
    threshold = observed - _ABS_TOL * float(np.abs(d).sum())
    exact = n < 63 and 2**n <= n_permutations
    count = 0
    if exact:
        # Sign vector k has sign -1 at position j iff bit j of k is set; all 2**n of them.
        bits = np.arange(n, dtype=np.int64)
        for start in range(0, 2**n, _BLOCK):
            k = np.arange(start, min(start + _BLOCK, 2**n), dtype=np.int64)
            signs = 1.0 - 2.0 * ((k[:, None] >> bits) & 1)
            count += int(np.count_nonzero(np.abs(signs @ d) >= threshold))
        return count / 2**n, True
    rng = np.random.default_rng(seed)
    done = 0
    while done < n_permutations:
        b = min(_BLOCK, n_permutations - done)
        signs = 1.0 - 2.0 * rng.integers(0, 2, size=(b, n))
        count += int(np.count_nonzero(np.abs(signs @ d) >= threshold))
        done += b
    return (count + 1) / (n_permutations + 1), False


def bootstrap_mean_ci(values: ArrayLike, stats: Statistics) -> tuple[float, float]:
    """Percentile bootstrap interval of ``mean(values)`` (resampling the values
    ``stats.resamples`` times from ``stats.seed``, at ``stats.confidence``).

    ``(v, v)`` for a single value or a constant array.
    """
    n_resamples, confidence, seed = stats.resamples, stats.confidence, stats.seed
    v = np.asarray(values, dtype=np.float64)
    check_bootstrap_args(n_resamples, confidence)
    if v.ndim != 1 or v.size == 0 or not np.isfinite(v).all():
        raise InputError("bootstrap needs a non-empty one-dimensional finite array")
    rng = np.random.default_rng(seed)
    means = np.concatenate(
        [v[idx].mean(axis=1) for idx in resample_blocks(rng, v.size, n_resamples)]
    )
    return percentile_interval(means, confidence)


def stratified_bootstrap_mean_ci(
    groups: Sequence[ArrayLike], stats: Statistics
) -> tuple[float, float]:
    """Percentile bootstrap interval of the *unweighted mean of group means*
    ``(1/G) * sum_g mean(groups[g])`` (BEIR's "average over datasets").

    Stratified bootstrap (Davison & Hinkley 1997, §3.7): each resample draws ``n_g`` values with
    replacement within every group ``g`` (queries never move between datasets, and each
    dataset keeps its size), the statistic is recomputed, and the interval is the percentile
    interval of the ``n_resamples`` replicates. Each group has its own seeded generator (spawned
    from ``seed``), so the result is deterministic. With one group this is the ordinary
    percentile bootstrap of that group's mean (but not the same draws as
    :func:`bootstrap_mean_ci`). Raises :class:`InputError` for no groups, an empty group or
    non-finite values. ``stats``: resamples, confidence and seed.
    """
    n_resamples, confidence, seed = stats.resamples, stats.confidence, stats.seed
    check_bootstrap_args(n_resamples, confidence)
    if not groups:
        raise InputError("stratified bootstrap needs at least one group")
    arrays = [np.asarray(g, dtype=np.float64) for g in groups]
    for i, v in enumerate(arrays):
        if v.ndim != 1 or v.size == 0 or not np.isfinite(v).all():
            raise InputError(f"stratified bootstrap: group {i} is not a non-empty finite 1-D array")
    total = np.zeros(int(n_resamples))
    for v, child in zip(arrays, np.random.SeedSequence(seed).spawn(len(arrays)), strict=True):
        rng = np.random.default_rng(child)
        total += np.concatenate(
            [v[idx].mean(axis=1) for idx in resample_blocks(rng, v.size, n_resamples)]
        )
    return percentile_interval(total / len(arrays), confidence)


def stratified_randomisation_test(
    differences: Sequence[ArrayLike], stats: Statistics
) -> tuple[float, bool]:
    """Two-sided paired sign-flip test of the unweighted mean over groups of the mean paired
    difference, ``D = (1/G) * sum_g mean(d_g)``; returns ``(p, exact)``.

    Under H0 each query's difference is equally likely to carry either sign, independently of
    the others, so flipping signs within groups is a valid randomisation (a stratified
    version of the test in the module docstring). Since
    ``D = sum_g sum_q d_gq / (G * n_g)``, it is :func:`randomisation_test` on the weighted
    differences ``d_gq / (G * n_g)``: same exact/Monte Carlo rules and p-value formulas.
    """
    if not differences:
        raise InputError("stratified randomisation test needs at least one group")
    arrays = [np.asarray(d, dtype=np.float64) for d in differences]
    if any(d.ndim != 1 or d.size == 0 for d in arrays):
        raise InputError("stratified randomisation test: every group needs a non-empty 1-D array")
    weighted = np.concatenate([d / (len(arrays) * d.size) for d in arrays])
    return randomisation_test(weighted, stats)


def compare_paired(
    a: Mapping[str, float], b: Mapping[str, float], stats: Statistics
) -> PairedComparison:
    """Compare systems A and B on the queries both scored (``query_id -> score`` mappings).

    Runs the paired t-test, the randomisation test (``stats.permutations``) and a bootstrap
    CI of the mean difference (``stats.resamples`` at ``stats.confidence``), each from its own
    seed spawned from ``stats.seed``: deterministic for a seed.
    """
    n_permutations, confidence = stats.permutations, stats.confidence
    check_bootstrap_args(stats.resamples, confidence)
    _ids, xa, xb, only_a, only_b = align(a, b)
    d = xa - xb
    seq = np.random.SeedSequence(stats.seed)
    perm_seed, boot_seed = seq.spawn(2)
    t, p_t = paired_t_test(xa, xb)
    p_perm, exact = randomisation_test(d, replace(stats, seed=int(perm_seed.generate_state(1)[0])))
    ci = bootstrap_mean_ci(d, replace(stats, seed=int(boot_seed.generate_state(1)[0])))
    return PairedComparison(
        mean_a=float(xa.mean()),
        mean_b=float(xb.mean()),
        difference=float(d.mean()),
        t=t,
        p_t=p_t,
        p_perm=p_perm,
        ci=ci,
        n=int(d.size),
        only_a=only_a,
        only_b=only_b,
        exact=exact,
        n_permutations=2**d.size if exact else int(n_permutations),
        confidence=confidence,
    )


def holm(p_values: ArrayLike) -> NDArray[np.float64]:
    """Holm's step-down adjustment of ``p_values`` for multiple comparisons (Holm 1979,
    "A simple sequentially rejective multiple test procedure", Scand. J. Statist. 6:65–70).

    With the ``m`` finite p-values sorted ascending, ``p_(1) <= ... <= p_(m)``, the adjusted
    value of the ``i``-th is ``min(1, max_{j <= i} (m - j + 1) * p_(j))`` (the running maximum
    keeps the adjusted values in the order of the raw ones); rejecting where the adjusted value
    is ``< alpha`` controls the family-wise error rate at ``alpha`` under any dependence
    between the tests. Returned in the input order, same shape (1-D). ``nan`` p-values stay
    ``nan`` and are not counted in ``m``; an empty input gives an empty array. A p-value outside
    ``[0, 1]`` (or infinite) raises :class:`InputError`.
    """
    p = np.asarray(p_values, dtype=np.float64)
    if p.ndim != 1:
        raise InputError("holm needs a one-dimensional array of p-values")
    finite = ~np.isnan(p)
    if ((p[finite] < 0.0) | (p[finite] > 1.0)).any():
        raise InputError(f"p-values must lie in [0, 1], got {p[finite].min()}..{p[finite].max()}")
    out = np.full(p.shape, np.nan)
    index = np.flatnonzero(finite)
    m = index.size
    if m == 0:
        return out
    order = index[np.argsort(p[index], kind="stable")]
    scaled = (m - np.arange(m)) * p[order]
    out[order] = np.minimum(1.0, np.maximum.accumulate(scaled))
    return out
