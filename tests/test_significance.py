"""Paired significance tests checked against scipy and exhaustive hand enumeration."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from erag_dagster.core.errors import InputError
from erag_dagster.stats.significance import (
    PairedComparison,
    align,
    bootstrap_mean_ci,
    compare_paired,
    paired_t_test,
    randomisation_test,
)
from tests.stats_fixture import STATS, stats


def _mean_diff(a: np.ndarray, b: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.mean(a - b, axis=axis)


def test_exhaustive_sign_flip_hand_computed() -> None:
    # Sums of ±1 ±2 ±3: 6, 4, 2, 0, 0, -2, -4, -6; |sum| >= 6 for 2 of the 8 assignments.
    assert randomisation_test([1.0, 2.0, 3.0], STATS) == (0.25, True)
    # All differences zero: every assignment is as extreme.
    assert randomisation_test([0.0, 0.0, 0.0, 0.0], STATS) == (1.0, True)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_exact_randomisation_matches_scipy_permutation_test(seed: int) -> None:
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 5, 10) / 4  # EM/F1-like scores with many ties
    b = rng.integers(0, 5, 10) / 4
    p, exact = randomisation_test(a - b, stats(permutations=2**10))
    ref = sps.permutation_test(
        (a, b), _mean_diff, permutation_type="samples", n_resamples=np.inf, vectorized=True
    )
    assert exact
    assert p == pytest.approx(ref.pvalue, abs=1e-12)


def test_monte_carlo_randomisation_is_close_to_scipy_and_uses_plus_one_rule() -> None:
    rng = np.random.default_rng(5)
    a = rng.random(40)
    b = a + rng.normal(0.05, 0.2, 40)
    p, exact = randomisation_test(a - b, stats(permutations=4000, seed=1))
    ref = sps.permutation_test(
        (a, b),
        _mean_diff,
        permutation_type="samples",
        n_resamples=4000,
        vectorized=True,
        rng=np.random.default_rng(1),
    )
    assert not exact
    assert p * 4001 == pytest.approx(round(p * 4001))  # p = (count + 1) / (n + 1)
    assert p == pytest.approx(ref.pvalue, abs=0.02)  # both Monte Carlo estimates


def test_monte_carlo_p_value_is_never_zero() -> None:
    d = np.full(30, 1.0) + np.linspace(0, 0.1, 30)
    p, exact = randomisation_test(d, stats(permutations=500, seed=0))
    assert (p, exact) == (1 / 501, False)


def test_randomisation_is_deterministic_for_a_seed() -> None:
    d = np.random.default_rng(0).normal(0.1, 1.0, 25)
    assert randomisation_test(d, stats(permutations=300, seed=4)) == randomisation_test(
        d, stats(permutations=300, seed=4)
    )


def test_t_test_matches_scipy() -> None:
    rng = np.random.default_rng(3)
    a, b = rng.random(20), rng.random(20)
    t, p = paired_t_test(a, b)
    ref = sps.ttest_rel(a, b)
    assert (t, p) == pytest.approx((ref.statistic, ref.pvalue), abs=1e-12)


def test_t_test_degenerate_cases() -> None:
    assert paired_t_test([0.5, 0.2, 1.0], [0.5, 0.2, 1.0]) == (0.0, 1.0)
    assert paired_t_test([1.0, 2.0, 3.0], [0.5, 1.5, 2.5]) == (math.inf, 0.0)
    assert paired_t_test([0.0, 1.0], [0.5, 1.5]) == (-math.inf, 0.0)
    t, p = paired_t_test([1.0], [0.0])
    assert math.isnan(t) and math.isnan(p)


def test_identical_systems() -> None:
    scores = {"q1": 0.5, "q2": 1.0, "q3": 0.0, "q4": 0.25}
    result = compare_paired(scores, dict(scores), stats(resamples=200))
    assert isinstance(result, PairedComparison)
    assert result.difference == 0.0
    assert (result.t, result.p_t, result.p_perm) == (0.0, 1.0, 1.0)
    assert result.ci == (0.0, 0.0)
    assert result.mean_a == result.mean_b == pytest.approx(0.4375)


def test_constant_nonzero_difference_uses_exact_randomisation() -> None:
    a = {f"q{i}": 0.5 + i / 10 for i in range(6)}
    b = {q: v - 0.25 for q, v in a.items()}
    result = compare_paired(a, b, stats(permutations=1000, resamples=200))
    assert result.difference == pytest.approx(0.25)
    assert (result.t, result.p_t) == (math.inf, 0.0)
    assert result.exact and result.n_permutations == 64
    assert result.p_perm == pytest.approx(2 / 64)  # all +, all -
    assert result.ci == pytest.approx((0.25, 0.25))


def test_compare_aligns_on_shared_ids_and_counts_dropped() -> None:
    a = {"q1": 1.0, "q2": 0.0, "q3": 1.0, "only_a": 0.3}
    b = {"q3": 0.0, "q2": 0.0, "q1": 0.5, "only_b1": 1.0, "only_b2": 1.0}
    ids, xa, xb, only_a, only_b = align(a, b)
    assert ids == ["q1", "q2", "q3"]
    assert xa.tolist() == [1.0, 0.0, 1.0] and xb.tolist() == [0.5, 0.0, 0.0]
    assert (only_a, only_b) == (1, 2)
    result = compare_paired(a, b, stats(resamples=200))
    assert (result.n, result.only_a, result.only_b) == (3, 1, 2)
    assert result.mean_a == pytest.approx(2 / 3) and result.mean_b == pytest.approx(0.5 / 3)
    assert result.difference == pytest.approx(0.5)
    # d = [0.5, 0, 1]: |sum| = 1.5 reached by the 2 flips of the zero with all signs kept or
    # all flipped -> 4 of 8.
    assert result.exact and result.p_perm == pytest.approx(0.5)
    assert result.p_t == pytest.approx(sps.ttest_rel([1.0, 0.0, 1.0], [0.5, 0.0, 0.0]).pvalue)


def test_compare_real_difference() -> None:
    rng = np.random.default_rng(8)
    base = rng.random(60)
    a = {f"q{i}": float(v) for i, v in enumerate(base)}
    b = {f"q{i}": float(v + 0.15 + rng.normal(0, 0.1)) for i, v in enumerate(base)}
    result = compare_paired(a, b, stats(permutations=2000, resamples=500, seed=2))
    assert result.difference < 0
    assert result.ci[0] < result.difference < result.ci[1] < 0
    assert result.p_t < 1e-6 and result.p_perm == pytest.approx(1 / 2001)
    assert compare_paired(a, b, stats(permutations=2000, resamples=500, seed=2)) == result


def test_single_shared_query() -> None:
    result = compare_paired({"q": 1.0}, {"q": 0.0}, stats(resamples=50))
    assert math.isnan(result.t) and math.isnan(result.p_t)
    assert (result.p_perm, result.exact, result.ci) == (1.0, True, (1.0, 1.0))


def test_bootstrap_mean_ci_contains_mean() -> None:
    values = np.random.default_rng(1).normal(0.2, 1.0, 80)
    low, high = bootstrap_mean_ci(values, stats(resamples=500, seed=0))
    assert low < values.mean() < high
    assert high - low == pytest.approx(2 * 1.96 * values.std(ddof=1) / math.sqrt(80), rel=0.2)


def test_bad_input() -> None:
    with pytest.raises(InputError, match="share no query id"):
        compare_paired({"a": 1.0}, {"b": 1.0}, STATS)
    with pytest.raises(InputError, match="system B: non-finite score nan for query 'q'"):
        compare_paired({"q": 1.0}, {"q": float("nan")}, STATS)
    with pytest.raises(InputError, match="permutations must be an integer >= 1"):
        randomisation_test([1.0, 2.0], stats(permutations=0))
    with pytest.raises(InputError, match="finite"):
        randomisation_test([1.0, math.inf], STATS)
    with pytest.raises(InputError, match="finite"):
        bootstrap_mean_ci([], STATS)
