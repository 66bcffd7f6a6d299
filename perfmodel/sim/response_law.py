"""The response-length law of a rollout: a heavy-tailed lognormal truncated at the cap (or a given histogram),
fitted to the job's mean and truncated share, and the seeded sample of lengths the rollout simulator serves."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from perfmodel.cost.serve.engine import DEFAULT_RESPONSE_SIGMA
from perfmodel.errors import InputError
from perfmodel.inputs.job import ResponseTokens

DEFAULT_MEDIAN_FRACTION_OF_MAX = 0.5
"""Assumption when only `response_tokens.max` is given: median response = max / 2 (with sigma 1.0: mean about 0.47
max, 24% truncated)."""


# ---------------------------------------------------------------------------------------------------------------
# Response lengths


@dataclass(frozen=True, slots=True)
class ResponseLaw:
    """The response-length law actually used: `kind` lognormal (mu, sigma in log space, truncated at `max`) or
    histogram; `mean` and `truncated_fraction` are its expected values after truncation."""

    kind: str
    max: int
    mu: float = 0.0
    sigma: float = 0.0
    mean: float = 0.0
    truncated_fraction: float = 0.0
    note: str = ""


def _norm_sf(x: float) -> float:
    return 0.5 * math.erfc(x / math.sqrt(2.0))


def _norm_cdf(x: float) -> float:
    return 0.5 * math.erfc(-x / math.sqrt(2.0))


def _lognormal_capped_mean(mu: float, sigma: float, cap: float) -> float:
    """E[min(X, cap)] for X ~ LogNormal(mu, sigma)."""
    z = (math.log(cap) - mu) / sigma
    return math.exp(mu + 0.5 * sigma * sigma) * _norm_cdf(z - sigma) + cap * _norm_sf(z)


def _bisect(f, lo: float, hi: float, iters: int = 200) -> float:
    flo = f(lo)
    for _ in range(iters):
        mid = 0.5 * (lo + hi)
        fm = f(mid)
        if (fm > 0) == (flo > 0):
            lo, flo = mid, fm
        else:
            hi = mid
        if hi - lo < 1e-12 * max(1.0, abs(hi)):
            break
    return 0.5 * (lo + hi)


def _norm_isf(p: float) -> float:
    """Inverse survival function of the standard normal (bisection on erfc; p in (0, 1))."""
    return _bisect(lambda x: _norm_sf(x) - p, -40.0, 40.0)


_ACKLAM_A = (-3.969683028665376e01, 2.209460984245205e02, -2.759285104469687e02, 1.383577518672690e02,
             -3.066479806614716e01, 2.506628277459239e00)
_ACKLAM_B = (-5.447609879822406e01, 1.615858368580409e02, -1.556989798598866e02, 6.680131188771972e01,
             -1.328068155288572e01)
_ACKLAM_C = (-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e00, -2.549732539343734e00,
             4.374664141464968e00, 2.938163982698783e00)
_ACKLAM_D = (7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e00, 3.754408661907416e00)


def _ndtri(u: np.ndarray) -> np.ndarray:
    """Standard-normal quantile, vectorised (P. J. Acklam's rational approximation, relative error < 1.2e-9);
    avoids importing scipy.special on the hot path."""
    a, b, c, d = _ACKLAM_A, _ACKLAM_B, _ACKLAM_C, _ACKLAM_D
    u = np.asarray(u, dtype=float)
    out = np.empty_like(u)
    lo, hi = u < 0.02425, u > 1 - 0.02425
    mid = ~(lo | hi)
    q = u[mid] - 0.5
    r = q * q
    out[mid] = ((((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q
                / (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1))
    for mask, sign, tail in ((lo, 1.0, u[lo]), (hi, -1.0, 1 - u[hi])):
        q = np.sqrt(-2 * np.log(tail))
        out[mask] = sign * ((((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5])
                            / ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1))
    return out


def _law(rt: ResponseTokens, sigma_default: float) -> ResponseLaw:
    cap = float(rt.max)
    if rt.histogram is not None:
        toks = np.array([t for t, _ in rt.histogram], dtype=float)
        w = np.array([w for _, w in rt.histogram], dtype=float)
        if w.sum() <= 0:
            raise InputError("", "rl.response_tokens.histogram", "weights must not all be zero")
        w = w / w.sum()
        return ResponseLaw("histogram", rt.max, mean=float((toks * w).sum()),
                           truncated_fraction=float(w[toks >= cap].sum()), note="user histogram")
    f, mean = rt.truncated_fraction, rt.mean
    if f is not None and f >= 1.0:
        if mean is not None and mean < cap:
            raise InputError("", "rl.response_tokens", f"truncated_fraction 1 means every response is {rt.max} "
                             f"tokens; mean {mean} must then equal max")
        return ResponseLaw("histogram", rt.max, mean=cap, truncated_fraction=1.0, note="all responses at the cap")
    if f is not None and f <= 0.0:
        f = 1e-6  # a lognormal always has a tail; 'none truncated' is read as one in a million
    if f is not None and mean is not None:
        if mean <= f * cap + 1.0:
            raise InputError("", "rl.response_tokens", f"mean {mean} is too small for {f:.0%} of the responses at "
                             f"the cap {rt.max} (needs mean > truncated_fraction x max)")
        if mean >= cap:
            raise InputError("", "rl.response_tokens", "mean equal to max needs truncated_fraction 1")
        z = _norm_isf(f)

        def g(s: float) -> float:
            return _lognormal_capped_mean(math.log(cap) - s * z, s, cap) - mean

        lo, hi = 1e-3, 30.0
        if g(lo) * g(hi) > 0:
            raise InputError("", "rl.response_tokens", f"no lognormal has mean {mean} with {f:.0%} truncated at "
                             f"{rt.max}; give a histogram instead")
        s = _bisect(g, lo, hi)
        return ResponseLaw("lognormal", rt.max, math.log(cap) - s * z, s, mean, f,
                           "lognormal, mean and truncated_fraction as given")
    s = sigma_default
    if mean is not None:
        if mean >= cap:
            return ResponseLaw("histogram", rt.max, mean=cap, truncated_fraction=1.0, note="mean = max")
        mu = _bisect(lambda m: _lognormal_capped_mean(m, s, cap) - mean, -50.0, math.log(cap) + 50.0)
        note = f"lognormal, mean as given, default sigma {s}"
    elif f is not None:
        mu = math.log(cap) - s * _norm_isf(f)
        note = f"lognormal, truncated_fraction as given, default sigma {s}"
    else:
        mu = math.log(DEFAULT_MEDIAN_FRACTION_OF_MAX * cap)
        note = f"lognormal, only max given: median max/2, default sigma {s}"
    return ResponseLaw("lognormal", rt.max, mu, s, _lognormal_capped_mean(mu, s, cap),
                       _norm_sf((math.log(cap) - mu) / s), note)


def response_law(rt: ResponseTokens, sigma_default: float = DEFAULT_RESPONSE_SIGMA) -> ResponseLaw:
    """The law `response_lengths` draws from.

    * `histogram` given: that empirical law (tokens, weights), nothing else is read.
    * `mean` and `truncated_fraction`: a lognormal LN(mu, sigma) truncated at `max` with exactly that mass at the cap
      (mu = ln max - sigma z_f) and that capped mean (sigma solved).
    * `mean` only: sigma = `DEFAULT_RESPONSE_SIGMA` (1.0), mu solved for the capped mean.
    * `truncated_fraction` only: sigma 1.0, mu from the fraction.
    * `max` only: sigma 1.0, median = max / 2 (about 24% truncated, mean about 0.47 max).
    """
    return _law(rt, sigma_default)


def response_lengths(rt: ResponseTokens, n: int, seed: int = 0,
                     sigma_default: float = DEFAULT_RESPONSE_SIGMA) -> np.ndarray:
    """`n` response lengths (ints in [1, max]). Stratified inverse-CDF sampling (one uniform per 1/n stratum, then
    shuffled), so the truncated fraction and the mean match the law closely even for small n; seeded."""
    law = response_law(rt, sigma_default)
    rng = np.random.default_rng(seed)
    u = (np.arange(n) + rng.random(n)) / n
    u = u[rng.permutation(n)]
    if law.kind == "histogram":
        if rt.histogram is None:  # all at the cap
            return np.full(n, rt.max, dtype=np.int64)
        toks = np.array([t for t, _ in rt.histogram], dtype=np.int64)
        w = np.array([w for _, w in rt.histogram], dtype=float)
        order = np.argsort(toks, kind="stable")
        toks, w = toks[order], w[order]
        cdf = np.cumsum(w) / w.sum()
        idx = np.minimum(np.searchsorted(cdf, u, side="right"), len(toks) - 1)
        return toks[idx]
    # Inverse CDF of the lognormal: exp(mu + sigma * Phi^-1(u)).
    x = np.exp(law.mu + law.sigma * _ndtri(np.clip(u, 1e-15, 1 - 1e-15)))
    return np.clip(np.ceil(x), 1, rt.max).astype(np.int64)
