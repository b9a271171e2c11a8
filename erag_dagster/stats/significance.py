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

Edge-case policy: ``n = 0`` (no shared query) raises :class:`InputError`; so do non-finite
scores. When every difference is the same value ``c`` (zero variance) the t statistic is
``0`` with ``p_t = 1`` if ``c == 0`` (identical systems) and ``copysign(inf, c)`` with
``p_t = 0`` otherwise (the limit of the t-test; the randomisation test then gives the useful
p-value, ``2 / 2**n`` when exact). With ``n = 1`` the t-test is undefined: ``t = p_t = nan``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import stats as sps

from erag_dagster.errors import InputError
from erag_dagster.stats.correlation import (
    check_bootstrap_args,
    percentile_interval,
    resample_blocks,
)

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
    d = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    if d.size < 2:
        return math.nan, math.nan
    if np.all(d == d[0]):
        if d[0] == 0.0:
            return 0.0, 1.0
        return math.copysign(math.inf, float(d[0])), 0.0
    result = sps.ttest_rel(a, b)
    return float(result.statistic), float(result.pvalue)


def randomisation_test(
    differences: ArrayLike, n_permutations: int = 10_000, seed: int | None = 0
) -> tuple[float, bool]:
    """Two-sided paired sign-flip test on ``differences``; returns ``(p, exact)``.

    Exact enumeration when ``2**n <= n_permutations``, else Monte Carlo with a seeded
    ``np.random.default_rng(seed)`` (see the module docstring for both p-value formulas).
    """
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


def bootstrap_mean_ci(
    values: ArrayLike, n_resamples: int = 1000, confidence: float = 0.95, seed: int | None = 0
) -> tuple[float, float]:
    """Percentile bootstrap interval of ``mean(values)`` (resampling the values).

    ``(v, v)`` for a single value or a constant array.
    """
    v = np.asarray(values, dtype=np.float64)
    check_bootstrap_args(n_resamples, confidence)
    if v.ndim != 1 or v.size == 0 or not np.isfinite(v).all():
        raise InputError("bootstrap needs a non-empty one-dimensional finite array")
    rng = np.random.default_rng(seed)
    means = np.concatenate(
        [v[idx].mean(axis=1) for idx in resample_blocks(rng, v.size, n_resamples)]
    )
    return percentile_interval(means, confidence)


def compare_paired(
    a: Mapping[str, float],
    b: Mapping[str, float],
    n_permutations: int = 10_000,
    n_resamples: int = 1000,
    confidence: float = 0.95,
    seed: int | None = 0,
) -> PairedComparison:
    """Compare systems A and B on the queries both scored (``query_id -> score`` mappings).

    Runs the paired t-test, the randomisation test (``n_permutations``, seeded) and a
    bootstrap CI of the mean difference (``n_resamples``, seeded); deterministic for a seed.
    """
    check_bootstrap_args(n_resamples, confidence)
    _ids, xa, xb, only_a, only_b = align(a, b)
    d = xa - xb
    seq = np.random.SeedSequence(seed)
    perm_seed, boot_seed = seq.spawn(2)
    t, p_t = paired_t_test(xa, xb)
    p_perm, exact = randomisation_test(
        d, n_permutations=n_permutations, seed=int(perm_seed.generate_state(1)[0])
    )
    ci = bootstrap_mean_ci(
        d,
        n_resamples=n_resamples,
        confidence=confidence,
        seed=int(boot_seed.generate_state(1)[0]),
    )
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
