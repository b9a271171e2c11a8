"""Rank correlations between two per-query score vectors, and percentile-bootstrap CIs.

The meta-evaluation (paper Table 1, Figure 1) asks how well a retrieval-evaluation method
agrees with end-to-end RAG quality: for each query it has the method's retrieval score ``x_i``
and the end-to-end downstream score ``y_i``, and it reports rank correlations over queries.

Kendall's tau-b (Kendall 1945; the tie-corrected form scipy's ``kendalltau(variant="b")``
computes). Over the ``n0 = n(n-1)/2`` pairs of queries ``i < j``::

    tau_b = (n_c - n_d) / sqrt((n0 - n_x) * (n0 - n_y))

where ``n_c`` / ``n_d`` count concordant / discordant pairs (``sign(x_i - x_j) *
sign(y_i - y_j)`` is +1 / -1), ``n_x`` counts pairs tied in ``x`` (including pairs tied in
both) and ``n_y`` pairs tied in ``y``. It lies in ``[-1, 1]``.

Spearman's rho is Pearson's correlation of the ranks, ties given their average rank
(scipy's ``spearmanr``).

Edge-case policy (both statistics): the correlation is **undefined** when either side is
constant (a zero denominator), which includes ``n < 2``; the functions then return ``nan``
(no warning, no exception) and reports print it as ``nan``. Non-finite inputs, inputs of
different lengths and inputs that are not one-dimensional raise :class:`InputError`.

Confidence intervals are percentile bootstrap intervals (Efron & Tibshirani 1993, ch. 13):
resample the ``n`` *queries* with replacement (``x`` and ``y`` stay paired), recompute the
statistic on each of ``B`` resamples, and report the ``alpha/2`` and ``1 - alpha/2`` quantiles
of those ``B`` values (``alpha = 1 - confidence``; numpy's linear-interpolation quantile).

**Undefined resamples** (the policy of :func:`bootstrap_ci`). A resample can draw a constant
side although the sample is not constant: with ``m`` of ``n`` queries off the common value, it
misses all of them with probability ``(1 - m/n)^n ~ exp(-m)`` (36% for one exact answer in 30
questions, 4% for three). Dropping those resamples, as this module once did, makes the interval
a percentile interval of the resamples that *did* draw the rare queries: a biased subset, e.g.
with one non-zero label every defined resample has the sign of that query's pair, so the
interval excluded 0 (``-0.062 [-0.14, -0.03]``) on what is one observation's worth of evidence.
Calling them ``tau = 0`` instead is no fix: tau-b is ``0/0`` there, not "no association", and the
choice moves the endpoints by an amount nobody can check. A careful reading is that the value
of an undefined resample is *missing*, and it could lie anywhere in the statistic's range
``[-1, 1]``. With a share ``p`` of the ``B`` resamples missing, the sharp worst-case bounds on
the full bootstrap distribution's ``q``-quantile (missing outcomes: Manski 1989, J. Human
Resources 24:343-360; Manski 2003, *Partial Identification of Probability Distributions*,
ch. 1) are the quantiles of the defined values at levels ``(q - p)/(1 - p)`` and
``q/(1 - p)``; they reach the ends of the range, ``-1`` or ``+1``, once ``p >= q`` or
``p >= 1 - q``. Hence:

* ``p < alpha/2``: the interval is reported, widened to those bounds: ``low`` is the ``alpha/2``
  quantile with every undefined resample set to ``-1``, ``high`` the ``1 - alpha/2`` quantile
  with every one set to ``+1``. It contains the percentile interval of *any* completion of the
  bootstrap distribution (the ``tau = 0`` convention included) and is the plain percentile
  interval when ``p = 0`` (the usual case for graded labels);
* ``p >= alpha/2`` (2.5% at 95%): the interval is **not identified**, since the undefined
  resamples alone could put an endpoint at ``-1`` or ``+1``. ``low``/``high`` are ``nan``
  and ``ci_note`` says why, with the share. This is also when the percentile bootstrap is least
  trustworthy anyway: the statistic hinges on a handful of queries, like the sample maximum for
  which the bootstrap is known to fail (Bickel & Freedman 1981, Ann. Statist. 9:1196-1217;
  Efron & Tibshirani 1993, ch. 7);
* a reported interval must contain the point estimate. A percentile interval that does not
  (a bootstrap distribution almost entirely on one side of the estimate: the percentile method's
  assumption of a symmetrising transformation fails, Efron & Tibshirani 1993, ch. 13-14) is not
  reported either: ``nan`` with a ``ci_note``.

A reported interval keeps the bootstrap's own limit with sparse labels: resamples cannot put
mass where the sample has none. Two sparse sides whose non-zero queries are disjoint give only
negative defined resamples, so the interval excludes 0 although such disjointness is likely
under independence (4 of 30 on each side: hypergeometric P = 0.55). With a few non-zero
queries, read a CI that excludes 0 as "the bootstrap cannot tell", and use a permutation test
for "is there an association".

So every interval this module reports contains its estimate, and every one it does not report
carries its reason; ``n_undefined`` always says how many resamples were undefined. (An
asymptotic interval, from the variance of tau-b with ties (Kendall 1970, *Rank Correlation
Methods*, 4th ed., ch. 3) or its delta-method standard error for contingency tables (Brown &
Benedetti 1977, JASA 72:309-315; Agresti 2010, *Analysis of Ordinal Categorical Data*, ch. 7),
always "exists" and always contains the estimate, but its normal approximation rests on the
same handful of queries: we prefer saying "not identified" to a precise-looking interval.)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from erag_dagster.core.errors import InputError
from erag_dagster.stats.settings import Statistics

Statistic = Callable[[NDArray[np.float64], NDArray[np.float64]], float]

#: Resamples drawn (and evaluated) per block, bounding memory at ``_BLOCK * n`` values.
_BLOCK = 256
#: Relative slack for "the interval contains the estimate" (rounding, not statistics).
_ROUNDING = 1e-9
#: Largest ``n`` for the pairwise-matrix Kendall kernel (three ``n x n`` float64 matrices,
#: 96 MB at the limit); above it each resample calls scipy (faster there, and bounded memory).
_KENDALL_MATRIX_MAX_N = 2000


@dataclass(frozen=True)
class CorrelationEstimate:
    """A point estimate with its percentile bootstrap interval (policy: the module docstring).

    ``value`` is the statistic on all ``n`` pairs; ``[low, high]`` the interval at level
    ``confidence``, which contains ``value`` whenever it is reported; ``n_resamples`` the
    resamples drawn and ``n_undefined`` those whose statistic was undefined (a constant side).
    ``low`` and ``high`` are ``nan`` exactly when ``ci_note`` is set: it says why (``value``
    undefined, too many undefined resamples, or an interval excluding ``value``).
    """

    value: float
    low: float
    high: float
    n: int
    n_resamples: int
    confidence: float
    n_undefined: int = 0
    ci_note: str | None = None

    @property
    def undefined_share(self) -> float:
        """``n_undefined / n_resamples``: the share of resamples with an undefined statistic."""
        return self.n_undefined / self.n_resamples if self.n_resamples else math.nan


def as_pair(x: ArrayLike, y: ArrayLike) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Validate two paired score vectors: one-dimensional, same length, all finite."""
    xa = np.asarray(x, dtype=np.float64)
    ya = np.asarray(y, dtype=np.float64)
    if xa.ndim != 1 or ya.ndim != 1:
        raise InputError(f"scores must be one-dimensional, got shapes {xa.shape} and {ya.shape}")
    if xa.shape != ya.shape:
        raise InputError(f"paired scores differ in length: {xa.size} vs {ya.size}")
    for name, arr in (("x", xa), ("y", ya)):
        bad = np.flatnonzero(~np.isfinite(arr))
        if bad.size:
            raise InputError(f"non-finite {name} score {arr[bad[0]]} at position {bad[0]}")
    return xa, ya


def _is_constant(a: NDArray[np.float64]) -> bool:
    return a.size < 2 or bool(np.all(a == a[0]))


def kendall_tau_b(x: ArrayLike, y: ArrayLike) -> float:
    """Kendall's tau-b of paired scores (scipy ``kendalltau(variant="b")``).

    Returns ``nan`` when either side is constant or there are fewer than two pairs.
    """
    from scipy import stats as sps

    xa, ya = as_pair(x, y)
    if _is_constant(xa) or _is_constant(ya):
        return math.nan
    return float(sps.kendalltau(xa, ya, variant="b").statistic)


def spearman_rho(x: ArrayLike, y: ArrayLike) -> float:
    """Spearman's rho of paired scores (scipy ``spearmanr``; ties get average ranks).

    Returns ``nan`` when either side is constant or there are fewer than two pairs.
    """
    from scipy import stats as sps

    xa, ya = as_pair(x, y)
    if _is_constant(xa) or _is_constant(ya):
        return math.nan
    return float(sps.spearmanr(xa, ya).statistic)


def resample_blocks(
    rng: np.random.Generator, n: int, n_resamples: int, block: int = _BLOCK
) -> Iterator[NDArray[np.intp]]:
    """Yield bootstrap index matrices of shape ``(b, n)`` (rows sum to ``n_resamples``).

    Each row is ``n`` draws with replacement from ``0..n-1``; blocks bound the memory used.
    """
    done = 0
    while done < n_resamples:
        b = min(block, n_resamples - done)
        yield rng.integers(0, n, size=(b, n))
        done += b


def percentile_interval(values: ArrayLike, confidence: float) -> tuple[float, float]:
    """The ``(1 - confidence)/2`` and ``(1 + confidence)/2`` quantiles of ``values``.

    Uses numpy's default (linear interpolation) quantile; ``(nan, nan)`` if ``values`` is empty.
    """
    arr = np.asarray(values, dtype=np.float64)
    if arr.size == 0:
        return math.nan, math.nan
    alpha = 1.0 - confidence
    low, high = np.quantile(arr, [alpha / 2.0, 1.0 - alpha / 2.0])
    return float(low), float(high)


def check_bootstrap_args(n_resamples: int, confidence: float | None) -> None:
    """Raise :class:`InputError` unless ``n_resamples >= 1`` and ``0 < confidence < 1``."""
    if int(n_resamples) != n_resamples or n_resamples < 1:
        raise InputError(f"n_resamples must be a positive integer, got {n_resamples}")
    if confidence is not None and not 0.0 < confidence < 1.0:
        raise InputError(f"confidence must be in (0, 1), got {confidence}")


def _counts(idx: NDArray[np.intp], n: int) -> NDArray[np.float64]:
    """Row-wise multiplicities: ``w[b, i]`` = how often query ``i`` was drawn in resample b."""
    b = idx.shape[0]
    flat = (idx + n * np.arange(b)[:, None]).ravel()
    return np.bincount(flat, minlength=b * n).reshape(b, n).astype(np.float64)


def _kendall_kernel(
    x: NDArray[np.float64], y: NDArray[np.float64]
) -> Callable[[NDArray[np.intp]], NDArray[np.float64]] | None:
    """Vectorised tau-b over resamples, or ``None`` when ``n`` is too large for it.

    With ``S^x_ij = sign(x_i - x_j)`` and multiplicities ``w`` of a resample, the resample's
    sums over pairs are quadratic forms (a pair of copies of one query has sign 0, i.e. is
    tied, exactly as in the resampled arrays): ``2 (n_c - n_d) = w' (S^x * S^y) w`` and
    ``2 (n0 - n_x) = w' |S^x| w``; the factors 2 cancel in tau-b.
    """
    n = x.size
    if n > _KENDALL_MATRIX_MAX_N:
        return None
    untied_x = np.sign(x[:, None] - x[None, :])
    concordance = np.sign(y[:, None] - y[None, :])
    untied_y = np.abs(concordance)
    concordance *= untied_x
    np.abs(untied_x, out=untied_x)

    def kernel(idx: NDArray[np.intp]) -> NDArray[np.float64]:
        w = _counts(idx, n)
        num = np.einsum("bi,bi->b", w @ concordance, w)
        dx = np.einsum("bi,bi->b", w @ untied_x, w)
        dy = np.einsum("bi,bi->b", w @ untied_y, w)
        out = np.full(idx.shape[0], math.nan)
        ok = (dx > 0) & (dy > 0)
        out[ok] = num[ok] / np.sqrt(dx[ok]) / np.sqrt(dy[ok])
        return out

    return kernel


def _spearman_kernel(
    x: NDArray[np.float64], y: NDArray[np.float64]
) -> Callable[[NDArray[np.intp]], NDArray[np.float64]]:
    """Vectorised Spearman rho over resamples: Pearson of row-wise average ranks."""

    from scipy import stats as sps

    def kernel(idx: NDArray[np.intp]) -> NDArray[np.float64]:
        xs, ys = x[idx], y[idx]
        rx = sps.rankdata(xs, axis=1)
        ry = sps.rankdata(ys, axis=1)
        rx -= rx.mean(axis=1, keepdims=True)
        ry -= ry.mean(axis=1, keepdims=True)
        num = np.einsum("bi,bi->b", rx, ry)
        den = np.sqrt(np.einsum("bi,bi->b", rx, rx) * np.einsum("bi,bi->b", ry, ry))
        out = np.full(idx.shape[0], math.nan)
        # Constant rows are detected on the data, not on a rounding-prone denominator.
        ok = (np.ptp(xs, axis=1) > 0) & (np.ptp(ys, axis=1) > 0)
        out[ok] = np.clip(num[ok] / den[ok], -1.0, 1.0)
        return out

    return kernel


def _loop_kernel(
    x: NDArray[np.float64], y: NDArray[np.float64], statistic: Statistic
) -> Callable[[NDArray[np.intp]], NDArray[np.float64]]:
    def kernel(idx: NDArray[np.intp]) -> NDArray[np.float64]:
        return np.array([statistic(x[row], y[row]) for row in idx], dtype=np.float64)

    return kernel


def bootstrap_distribution(
    x: ArrayLike, y: ArrayLike, statistic: Statistic, stats: Statistics
) -> NDArray[np.float64]:
    """The statistic on ``stats.resamples`` paired bootstrap resamples (``nan`` where
    undefined), drawn from ``stats.seed``.

    For :func:`kendall_tau_b` (``n <= 2000``) and :func:`spearman_rho` the resamples are
    evaluated in vectorised form (same values as calling the function on each resample, up to
    floating-point rounding); any other callable ``statistic(x, y) -> float`` is called per
    resample. Resample ``b`` uses the ``b``-th row drawn from ``np.random.default_rng(seed)``
    as ``rng.integers(0, n, size=(block, n))`` in blocks of 256 rows.
    """
    n_resamples, seed = stats.resamples, stats.seed
    xa, ya = as_pair(x, y)
    check_bootstrap_args(n_resamples, None)
    n = xa.size
    if n == 0:
        return np.full(n_resamples, math.nan)
    kernel: Callable[[NDArray[np.intp]], NDArray[np.float64]] | None = None
    if statistic is kendall_tau_b:
        kernel = _kendall_kernel(xa, ya)
    elif statistic is spearman_rho:
        kernel = _spearman_kernel(xa, ya)
    if kernel is None:
        kernel = _loop_kernel(xa, ya, statistic)
    rng = np.random.default_rng(seed)
    return np.concatenate([kernel(idx) for idx in resample_blocks(rng, n, n_resamples)])


def bootstrap_ci(
    x: ArrayLike,
    y: ArrayLike,
    statistic: Statistic,
    stats: Statistics,
    bounds: tuple[float, float] = (-1.0, 1.0),
) -> CorrelationEstimate:
    """Point estimate and percentile bootstrap CI of ``statistic`` over paired queries.

    ``statistic(x, y) -> float`` is typically :func:`kendall_tau_b` or :func:`spearman_rho`;
    ``bounds`` is its range, where an undefined resample's unknown value may lie. Policy (module
    docstring): with a share ``p`` of undefined resamples, the interval is reported only when
    ``value`` is defined, ``p < (1 - confidence)/2`` and it contains ``value``; it is then the
    percentile interval widened to the worst-case bounds over the undefined resamples (the plain
    percentile interval when ``p = 0``). Otherwise ``low``/``high`` are ``nan`` and ``ci_note``
    gives the reason. ``stats``: resamples, confidence and seed; deterministic for a seed.
    """
    confidence = stats.confidence
    xa, ya = as_pair(x, y)
    check_bootstrap_args(stats.resamples, confidence)
    value = float(statistic(xa, ya))
    draws = bootstrap_distribution(xa, ya, statistic, stats)
    undefined = np.isnan(draws)
    n_undefined = int(undefined.sum())
    share = n_undefined / draws.size
    tail = (1.0 - confidence) / 2.0
    note: str | None = None
    low = high = math.nan
    if math.isnan(value):
        note = "correlation undefined (constant scores, or n < 2)"
    elif share >= tail - _ROUNDING:  # 1 - 0.95 is 0.0500...04 in binary
        note = f"no CI: {share:.1%} of resamples undefined"
    else:
        kept = draws[~undefined]
        low = float(np.quantile(np.append(kept, np.full(n_undefined, bounds[0])), tail))
        high = float(np.quantile(np.append(kept, np.full(n_undefined, bounds[1])), 1.0 - tail))
        # The kernels and scipy compute one number two ways: a bound equal to the estimate can
        # differ from it in the last bits (the same slack as checks._ROUNDING); that is containment.
        slack = _ROUNDING * max(1.0, abs(value))
        if low - slack <= value <= high + slack:
            low, high = min(low, value), max(high, value)
        else:
            note = f"no CI: [{low:.2f}, {high:.2f}] excludes the estimate"
            low = high = math.nan
    return CorrelationEstimate(
        value=value,
        low=low,
        high=high,
        n=int(xa.size),
        n_resamples=int(draws.size),
        n_undefined=n_undefined,
        confidence=confidence,
        ci_note=note,
    )
