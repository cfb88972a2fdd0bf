"""The Pólya-Gamma factor's numerics (cemodel.runtime.polyagamma) against independent
formulas: E[ω] of PG(b, c) from its series representation (Polson, Scott & Windle 2013,
eq. 1: ω = (1/2π²) Σ_k g_k / ((k − ½)² + c²/4π²), g_k ~ Gamma(b, 1)), E[ω] = dA/dλ by finite
differences, and −KL(PG(b, c) ‖ PG(b, 0)) = A − λ E[ω] ≤ 0."""

import numpy as np
import pytest

from cemodel.runtime.polyagamma import (
    polyagamma_expected_stats,
    polyagamma_log_normalizer,
    polyagamma_natural,
    polyagamma_params,
)


def _series_mean(b: float, c: float, terms: int = 200_000) -> float:
    k = np.arange(1, terms + 1)
    total = np.sum(1.0 / ((k - 0.5) ** 2 + c ** 2 / (4 * np.pi ** 2)))
    tail = 1.0 / (terms + 0.0)  # Σ_{k > K} 1/k² ≈ 1/K: the series' rest
    return b / (2 * np.pi ** 2) * (total + tail)


@pytest.mark.parametrize("b", [1.0, 3.5, 20.0])
@pytest.mark.parametrize("c", [0.0, 1e-6, 2e-4, 0.5, 3.0, 40.0])
def test_mean_matches_the_series(b, c):
    lam = float(polyagamma_natural(np.array(c))[0])
    assert polyagamma_expected_stats(lam, b) == pytest.approx(_series_mean(b, c), rel=1e-9)


@pytest.mark.parametrize("c", [0.05, 0.7, 5.0, 300.0])
def test_mean_is_the_derivative_of_the_log_normalizer(c):
    b, lam = 2.5, -0.5 * c * c
    h = 1e-5 * abs(lam)
    a = polyagamma_log_normalizer
    slope = (a(lam + h, b) - a(lam - h, b)) / (2 * h)
    assert polyagamma_expected_stats(lam, b) == pytest.approx(slope, rel=1e-6)


def test_the_elbo_term_is_minus_a_kl():
    """A − λ E[ω] = −b log cosh(c/2) + c² E[ω]/2: 0 at c = 0, negative otherwise, ≈ −b(c/4 −
    log 2) for large c."""
    b = 3.0
    for c in (0.0, 0.1, 1.0, 10.0, 1e4):
        lam = -0.5 * c * c
        term = polyagamma_log_normalizer(lam, b) - lam * polyagamma_expected_stats(lam, b)
        assert term <= 0.0 and np.isfinite(term)
        expected = -b * np.log(np.cosh(c / 2)) + c * c / 2 * b / (2 * c) * np.tanh(c / 2) \
            if 0 < c < 100 else (0.0 if c == 0 else -b * (c / 4 - np.log(2)))
        assert term == pytest.approx(expected, rel=1e-9, abs=1e-15)
    np.testing.assert_allclose(polyagamma_params(polyagamma_natural(np.array([0.0, 2.0]))[0]),
                               [0.0, 2.0])
