"""The Pólya-Gamma factor of a logistic link (``cemodel.families.polyagamma``).

q(ω) = PG(b, c) = cosh(c/2)^b e^{−c² ω/2} PG(ω | b, 0): an exponential family in t = ω with
natural parameter λ = −c²/2 and base measure the prior PG(b, 0), so (Polson, Scott & Windle
2013, §2; b known at each row)

    A(λ) = −b log cosh(c/2),  E[ω] = dA/dλ = b/(2c) tanh(c/2)  (b/4 at c = 0),  c = √(−2λ),

and the ELBO's E[log p(ω)] − E[log q(ω)] = A(λ) − λ E[ω] = −b log cosh(c/2) + c² E[ω]/2
= −KL(PG(b, c) ‖ PG(b, 0)), the entropy form every factor uses (H = A − λ·E[t]).
"""

import math

import numba
import numpy as np

jit = numba.njit(nogil=True, error_model="numpy")

_LOG_2 = math.log(2.0)


@jit
def _half_c(lam: float) -> float:
    """c/2 = √(−2λ)/2; λ ≤ 0 (c² = E[η²]), a positive rounding is read as 0."""
    return 0.5 * math.sqrt(max(-2.0 * lam, 0.0))


@jit
def polyagamma_expected_stats(lam: float, b: float) -> float:
    """E[ω] = b/(2c) tanh(c/2) = (b/4) tanh(x)/x, x = c/2 (series below x = 1e-4)."""
    x = _half_c(lam)
    if x < 1e-4:
        x2 = x * x
        return 0.25 * b * (1.0 - x2 / 3.0 + 2.0 * x2 * x2 / 15.0)
    return 0.25 * b * math.tanh(x) / x


@jit
def polyagamma_log_normalizer(lam: float, b: float) -> float:
    """A(λ) = −b log cosh(c/2); log cosh x = x + log1p(e^{−2x}) − log 2 (x ≥ 0)."""
    x = _half_c(lam)
    return -b * (x + math.log1p(math.exp(-2.0 * x)) - _LOG_2)


def polyagamma_params(lam: np.ndarray) -> np.ndarray:
    """The tilt c = √(−2λ) of q(ω) = PG(b, c) (b is the count the ω belongs to)."""
    return np.sqrt(np.maximum(-2.0 * np.asarray(lam, dtype=float), 0.0))


def polyagamma_natural(c: np.ndarray) -> tuple[np.ndarray]:
    """λ = −c²/2."""
    return (-0.5 * np.square(np.asarray(c, dtype=float)),)
