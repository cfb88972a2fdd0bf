"""SQUAREM for an item's local sweeps (Varadhan & Roland 2008, "Simple and globally convergent
methods for accelerating the convergence of any EM algorithm", Scand. J. Statist. 35; scheme
SqS3): from three states of a fixed-point map F, s₀, s₁ = F(s₀), s₂ = F(s₁), the point

    s′ = s₀ − 2α·r + α²·v,   r = s₁ − s₀,   v = s₂ − 2·s₁ + s₀,   α = −‖r‖ / ‖v‖,

where α = −1 gives s₂ itself. The generated ``extrapolate_<item>`` kernel sums ‖r‖² and ‖v‖²
over the item's iterated locals (``squarem_norms``), takes ``squarem_step``, and halves α
towards −1 (``backtrack``) until every point (``squarem_point``) lies in its family's domain.
"""

from __future__ import annotations

import numba
import numpy as np

# α is halved towards −1 until the point is in the domain; within this of −1 the point is
# s₂ itself, which the plain sweeps reach anyway (Varadhan & Roland 2008, §4)
STEP_PLAIN = -1.01

# inlined into the generated kernels, so the loops over an item's coefficients take their
# fastmath flags and vectorize (compiled on their own they were scalar reductions)
inline_jit = numba.njit(nogil=True, error_model="numpy", inline="always")


@inline_jit
def squarem_norms(first: np.ndarray, middle: np.ndarray, last: np.ndarray) -> tuple:
    """(‖r‖², ‖v‖²) of one array: r = middle − first, v = last − 2·middle + first."""
    r2 = 0.0
    v2 = 0.0
    for j in range(first.shape[0]):
        r = middle[j] - first[j]
        v = last[j] - 2.0 * middle[j] + first[j]
        r2 += r * r
        v2 += v * v
    return r2, v2


@numba.njit(nogil=True, cache=True, error_model="numpy")
def squarem_step(r2: float, v2: float) -> float:
    """α = −‖r‖/‖v‖, at most −1 (−1: no extrapolation; so where v = 0 or a norm is not
    finite)."""
    if not (v2 > 0.0 and v2 < np.inf and r2 < np.inf):
        return -1.0
    step = -np.sqrt(r2 / v2)
    return step if step < -1.0 else -1.0


@numba.njit(nogil=True, cache=True, error_model="numpy")
def backtrack(step: float) -> float:
    """The next α towards −1 when the point left a domain: (α − 1)/2; −1 once within
    ``STEP_PLAIN`` of it."""
    step = 0.5 * (step - 1.0)
    return step if step < STEP_PLAIN else -1.0


@inline_jit
def squarem_point(first: np.ndarray, middle: np.ndarray, last: np.ndarray, step: float,
                  out: np.ndarray, low: float, high: float) -> bool:
    """out = first − 2α·r + α²·v; whether every entry lies in the open box (low, high)
    (±inf: no bound; NaN lies in none)."""
    inside = True
    for j in range(first.shape[0]):
        r = middle[j] - first[j]
        v = last[j] - 2.0 * middle[j] + first[j]
        x = first[j] - 2.0 * step * r + step * step * v
        out[j] = x
        if not (x > low and x < high):
            inside = False
    return inside
