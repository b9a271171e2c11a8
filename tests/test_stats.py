"""Rank correlations and bootstrap CIs checked against scipy and hand-computed values."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from scipy import stats as sps

from erag_dagster.core.errors import InputError
from erag_dagster.stats.correlation import (
    CorrelationEstimate,
    bootstrap_ci,
    bootstrap_distribution,
    kendall_tau_b,
    percentile_interval,
    spearman_rho,
)
from tests.stats_fixture import stats

# Hand-computed: of the 6 pairs, (0,1) (0,2) (0,3) are concordant, (1,3) discordant, (1,2)
# tied in x only and (2,3) tied in y only: tau_b = (3 - 1) / sqrt((6 - 1) * (6 - 1)) = 0.4.
# Average ranks x = [1, 2.5, 2.5, 4], y = [1, 4, 2.5, 2.5]: rho = 2.25 / 4.5 = 0.5.
TIED_X = [1.0, 2.0, 2.0, 3.0]
TIED_Y = [1.0, 3.0, 2.0, 2.0]


def test_kendall_tau_b_hand_computed_with_ties() -> None:
    assert kendall_tau_b(TIED_X, TIED_Y) == pytest.approx(0.4, abs=1e-12)
    assert kendall_tau_b(TIED_X, TIED_Y) == pytest.approx(
        sps.kendalltau(TIED_X, TIED_Y, variant="b").statistic, abs=1e-15
    )


def test_spearman_rho_hand_computed_with_ties() -> None:
    assert spearman_rho(TIED_X, TIED_Y) == pytest.approx(0.5, abs=1e-12)


@pytest.mark.parametrize("n", [2, 3, 5, 17, 60])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_statistics_match_scipy_on_tied_data(n: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 4, n).astype(float)
    y = (x + rng.integers(0, 3, n)).astype(float)
    x[0], x[-1] = 0.0, 5.0  # never constant
    y[0], y[-1] = 0.0, 9.0
    assert kendall_tau_b(x, y) == pytest.approx(
        sps.kendalltau(x, y, variant="b").statistic, abs=1e-12
    )
    assert spearman_rho(x, y) == pytest.approx(sps.spearmanr(x, y).statistic, abs=1e-12)


def test_two_points_are_perfectly_correlated() -> None:
    assert kendall_tau_b([0.1, 0.9], [3.0, 1.0]) == -1.0
    assert spearman_rho([0.1, 0.9], [1.0, 3.0]) == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("x", "y"),
    [
        ([1.0, 1.0, 1.0], [1.0, 2.0, 3.0]),
        ([1.0, 2.0, 3.0], [0.5, 0.5, 0.5]),
        ([4.0], [2.0]),
        ([], []),
    ],
)
def test_constant_or_too_short_input_is_nan_without_warning(x: list, y: list) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert math.isnan(kendall_tau_b(x, y))
        assert math.isnan(spearman_rho(x, y))


def test_bad_input_raises_input_error() -> None:
    with pytest.raises(InputError, match="differ in length: 3 vs 2"):
        kendall_tau_b([1, 2, 3], [1, 2])
    with pytest.raises(InputError, match="non-finite y score nan at position 1"):
        spearman_rho([1, 2, 3], [1, float("nan"), 2])
    with pytest.raises(InputError, match="one-dimensional"):
        kendall_tau_b([[1, 2]], [[1, 2]])


@pytest.mark.parametrize("statistic", [kendall_tau_b, spearman_rho])
@pytest.mark.parametrize("n", [4, 9, 40])
def test_vectorised_resamples_equal_per_resample_scipy(statistic, n: int) -> None:
    """The fast kernels give what calling the statistic on each resample gives, NaNs included."""
    rng = np.random.default_rng(n)
    x = rng.integers(0, 3, n).astype(float)
    y = (x + rng.integers(0, 2, n)).astype(float)
    x[0], y[0] = -1.0, -1.0
    fast = bootstrap_distribution(x, y, statistic, stats(resamples=300, seed=7))
    slow = bootstrap_distribution(x, y, lambda a, b: statistic(a, b), stats(resamples=300, seed=7))
    assert fast.shape == (300,)
    np.testing.assert_array_equal(np.isnan(fast), np.isnan(slow))
    np.testing.assert_allclose(fast[~np.isnan(fast)], slow[~np.isnan(slow)], atol=1e-12)
    if n == 4:
        assert np.isnan(fast).any()  # small n: some resamples are constant


@pytest.mark.parametrize("n", [25, 2001])  # 2001: past the matrix kernel, scipy per resample
def test_kendall_resample_matches_scipy_on_explicit_indices(n: int) -> None:
    """Resample b is rows drawn as rng.integers(0, n, (block, n)) from default_rng(seed)."""
    rng = np.random.default_rng(3)
    x = rng.integers(0, 5, n).astype(float)
    y = rng.integers(0, 5, n).astype(float)
    draws = bootstrap_distribution(x, y, kendall_tau_b, stats(resamples=5, seed=11))
    idx = np.random.default_rng(11).integers(0, n, size=(5, n))
    expected = [sps.kendalltau(x[r], y[r], variant="b").statistic for r in idx]
    np.testing.assert_allclose(draws, expected, atol=1e-12)


def test_percentile_interval_quantiles() -> None:
    assert percentile_interval(np.arange(101.0), 0.90) == pytest.approx((5.0, 95.0))
    assert percentile_interval(np.arange(11.0), 0.5) == (2.5, 7.5)
    low, high = percentile_interval([], 0.95)
    assert math.isnan(low) and math.isnan(high)


def _sample(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=n)
    return np.round(x, 1), np.round(x + rng.normal(size=n), 1)  # rounding makes ties


@pytest.mark.parametrize("statistic", [kendall_tau_b, spearman_rho])
def test_bootstrap_ci_contains_estimate_and_shrinks_with_n(statistic) -> None:
    x, y = _sample(640, 0)
    small = bootstrap_ci(x[:40], y[:40], statistic, stats(resamples=500, seed=1))
    large = bootstrap_ci(x, y, statistic, stats(resamples=500, seed=1))
    for est, n in ((small, 40), (large, 640)):
        assert isinstance(est, CorrelationEstimate)
        assert est.low < est.value < est.high
        assert (est.n, est.n_resamples, est.n_undefined, est.confidence) == (n, 500, 0, 0.95)
        assert est.ci_note is None
        assert est.value == pytest.approx(statistic(x[:n], y[:n]))
    # The width scales like 1 / sqrt(n): 16x the queries gives about a quarter of the width
    # (here a bit less: the first 40 queries happen to correlate more weakly, widening theirs).
    ratio = (large.high - large.low) / (small.high - small.low)
    assert 0.08 < ratio < 0.4


def test_bootstrap_ci_agrees_with_scipy_percentile_bootstrap() -> None:
    x, y = _sample(120, 4)
    ours = bootstrap_ci(x, y, spearman_rho, stats(resamples=1000, seed=0))
    ref = sps.bootstrap(
        (x, y),
        lambda a, b: sps.spearmanr(a, b).statistic,
        paired=True,
        vectorized=False,
        n_resamples=1000,
        method="percentile",
        rng=np.random.default_rng(0),
    ).confidence_interval
    # Different random draws: agreement up to Monte Carlo error.
    assert ours.low == pytest.approx(ref.low, abs=0.03)
    assert ours.high == pytest.approx(ref.high, abs=0.03)


def test_bootstrap_is_deterministic_for_a_seed() -> None:
    x, y = _sample(50, 5)
    assert bootstrap_ci(x, y, kendall_tau_b, stats(resamples=200, seed=3)) == bootstrap_ci(
        x, y, kendall_tau_b, stats(resamples=200, seed=3)
    )
    assert bootstrap_ci(x, y, kendall_tau_b, stats(resamples=200, seed=3)) != bootstrap_ci(
        x, y, kendall_tau_b, stats(resamples=200, seed=4)
    )


def test_too_many_undefined_resamples_leave_the_ci_unreported() -> None:
    # A resample is undefined when x is constant (it draws only from {0, 1}, or only 2) or y is
    # (only from {1, 2}, or only 0): by inclusion-exclusion 9/27 + 9/27 - 3/27 = 5/9.
    x, y = [0.0, 0.0, 1.0], [0.0, 1.0, 1.0]
    est = bootstrap_ci(x, y, kendall_tau_b, stats(resamples=600, seed=0))
    draws = bootstrap_distribution(x, y, kendall_tau_b, stats(resamples=600, seed=0))
    assert (est.n_resamples, est.n_undefined) == (600, int(np.isnan(draws).sum()))
    assert 280 < est.n_undefined < 390
    assert est.value == pytest.approx(0.5)
    assert math.isnan(est.low) and math.isnan(est.high)
    assert est.ci_note == f"no CI: {est.undefined_share:.1%} of resamples undefined"


def _sparse_labels(seed: int, n: int = 30, nonzero: int = 3) -> tuple[np.ndarray, np.ndarray]:
    """Real-shaped Table 1 input: eRAG P@3 of ``n`` questions, ``nonzero`` of them with an
    exact-match label (P@3 in {1/3, 2/3, 1}), against exact-match end-to-end scores (0/1)."""
    rng = np.random.default_rng(seed)
    x = np.zeros(n)
    x[rng.choice(n, nonzero, replace=False)] = rng.choice([1, 2, 3], nonzero) / 3
    y = np.zeros(n)
    y[rng.choice(n, int(rng.integers(1, 8)), replace=False)] = 1.0
    return x, y


@pytest.mark.parametrize("statistic", [kendall_tau_b, spearman_rho])
@pytest.mark.parametrize("nonzero", [1, 3, 5, 12])
def test_reported_ci_contains_its_estimate_or_says_why_not(statistic, nonzero: int) -> None:
    """The invariant, over 40 random sparse label sets per case: a CI that is reported contains
    the estimate; one that is not has nan bounds and a note; the undefined share is always
    the share of the resamples that were undefined."""
    reported = 0
    for seed in range(40):
        x, y = _sparse_labels(seed, nonzero=nonzero)
        est = bootstrap_ci(x, y, statistic, stats(resamples=400, seed=seed))
        draws = bootstrap_distribution(x, y, statistic, stats(resamples=400, seed=seed))
        assert est.n_undefined == int(np.isnan(draws).sum())
        assert est.undefined_share == est.n_undefined / 400
        if est.ci_note is None:
            reported += 1
            assert est.low <= est.value <= est.high
            assert est.undefined_share < 0.025
        else:
            assert math.isnan(est.low) and math.isnan(est.high)
            assert est.ci_note.startswith(("no CI", "correlation undefined"))
        rare = min(np.count_nonzero(x), np.count_nonzero(y))
        if rare <= 3:
            # (1 - 3/30)^30 = 4.2% of resamples miss all three: the CI is never identified.
            assert est.ci_note is not None
        elif rare >= 5:
            # (1 - 5/30)^30 = 0.4% per side: the CI is reported.
            assert est.ci_note is None, est.ci_note
    if nonzero == 12:
        assert reported > 15


def test_few_undefined_resamples_widen_the_ci_to_the_worst_case() -> None:
    """0 < p < alpha/2: the bounds count undefined resamples at -1 (low) and +1 (high), so the
    interval holds the percentile interval of the defined resamples and of any completion."""
    rng = np.random.default_rng(5)
    x = np.zeros(30)
    x[:5] = [1 / 3, 2 / 3, 1.0, 1.0, 1 / 3]  # (25/30)^30 = 0.4% of resamples miss all five
    y = np.round(x + rng.normal(0, 0.4, 30), 1)
    est = bootstrap_ci(x, y, kendall_tau_b, stats(resamples=2000, seed=2))
    draws = bootstrap_distribution(x, y, kendall_tau_b, stats(resamples=2000, seed=2))
    undefined = np.isnan(draws)
    assert 0 < est.n_undefined == undefined.sum() < 50
    assert est.ci_note is None
    kept = draws[~undefined]
    low = np.quantile(np.where(undefined, -1.0, draws), 0.025)
    high = np.quantile(np.where(undefined, 1.0, draws), 0.975)
    assert (est.low, est.high) == (pytest.approx(low), pytest.approx(high))
    for completion in (kept, np.where(undefined, 0.0, draws)):  # dropped, or tau = 0
        c_low, c_high = percentile_interval(completion, 0.95)
        assert est.low <= c_low and c_high <= est.high
    assert est.low < est.value < est.high


def test_an_interval_excluding_its_estimate_is_not_reported() -> None:
    """A statistic whose bootstrap distribution misses its own value (1 when all x are
    distinct, which 10 draws with replacement from 10 almost never are)."""
    x = np.arange(10.0)

    def all_distinct(a: np.ndarray, b: np.ndarray) -> float:
        return float(np.unique(a).size == a.size)

    est = bootstrap_ci(x, x, all_distinct, stats(resamples=200, seed=0))
    assert est.value == 1.0 and est.n_undefined == 0
    assert math.isnan(est.low) and math.isnan(est.high)
    assert est.ci_note == "no CI: [0.00, 0.00] excludes the estimate"


def test_bootstrap_of_constant_side_is_all_nan() -> None:
    est = bootstrap_ci([1, 2, 3, 4], [5, 5, 5, 5], spearman_rho, stats(resamples=100))
    assert math.isnan(est.value) and math.isnan(est.low) and math.isnan(est.high)
    assert (est.n, est.n_resamples, est.n_undefined) == (4, 100, 100)
    assert est.ci_note == "correlation undefined (constant scores, or n < 2)"


def test_bootstrap_rejects_bad_arguments() -> None:
    with pytest.raises(InputError, match="confidence"):
        bootstrap_ci([1, 2, 3], [1, 2, 3], kendall_tau_b, stats(confidence=1.0))
    with pytest.raises(InputError, match="resamples must be an integer >= 1"):
        bootstrap_ci([1, 2, 3], [1, 2, 3], kendall_tau_b, stats(resamples=0))
