"""The families' NumPy draws and log densities (cemodel.distributions) against SciPy."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from cemodel.distributions import JOINT, NUMERIC, categorical_rows, numeric
from cemodel.errors import CemError

P = np.array([[2.0, 0.5], [0.5, 1.0]])  # a precision / scale matrix
W = np.linalg.inv(P)

# family, parameters (the family's order), the same distribution in SciPy, a point
CASES = [
    ("Dirichlet", (np.array([0.5, 2.0, 3.0]),), stats.dirichlet([0.5, 2.0, 3.0]),
     np.array([0.2, 0.3, 0.5])),
    ("Beta", (np.array(2.0), np.array(5.0)), stats.beta(2.0, 5.0), np.array(0.3)),
    ("Bernoulli", (np.array(0.3),), stats.bernoulli(0.3), np.array(1.0)),
    ("Binomial", (np.array(12.0), np.array(0.3)), stats.binom(12, 0.3), np.array(4.0)),
    ("Geometric", (np.array(0.3),), stats.geom(0.3), np.array(3.0)),
    ("NegativeBinomial", (np.array(3.0), np.array(0.4)), stats.nbinom(3.0, 0.4),
     np.array(5.0)),
    ("Gamma", (np.array(3.0), np.array(2.0)), stats.gamma(3.0, scale=0.5), np.array(1.2)),
    ("Poisson", (np.array(4.0),), stats.poisson(4.0), np.array(6.0)),
    ("Exponential", (np.array(2.0),), stats.expon(scale=0.5), np.array(0.7)),
    ("Normal", (np.array(1.0), np.array(4.0)), stats.norm(1.0, 0.5), np.array(1.3)),
    ("StudentT", (np.array(5.0), np.array(1.0), np.array(4.0)), stats.t(5.0, 1.0, 0.5),
     np.array(2.3)),
    ("MultivariateNormal", (np.array([1.0, -1.0]), P), stats.multivariate_normal([1, -1], W),
     np.array([0.5, 0.0])),
    ("Multinomial", (np.array(10.0), np.array([0.2, 0.3, 0.5])),
     stats.multinomial(10, [0.2, 0.3, 0.5]), np.array([2.0, 3.0, 5.0])),
]


def _value(attribute):
    """A frozen SciPy distribution's mean or cov: a method, or (multivariate) an array."""
    return np.asarray(attribute() if callable(attribute) else attribute)


@pytest.mark.parametrize("family, params, dist, x", CASES, ids=[c[0] for c in CASES])
def test_log_density_is_scipy_s(family, params, dist, x):
    log_p = numeric(family, "log density").log_density(x, params)
    logpdf = getattr(dist, "logpdf", None) or dist.logpmf
    assert log_p == pytest.approx(logpdf(x), rel=1e-10)


@pytest.mark.parametrize("family, params, dist, x", CASES, ids=[c[0] for c in CASES])
def test_draws_have_scipy_s_mean(family, params, dist, x):
    n = 20000
    rows = tuple(np.broadcast_to(p, (n,) + p.shape) for p in params)
    draws = np.asarray(NUMERIC[family].draw(np.random.default_rng(0), rows, None), float)
    assert draws.shape == (n,) + np.shape(x)
    mean, cov = (_value(getattr(dist, m)) for m in ("mean", "cov" if hasattr(dist, "cov")
                                                     else "var"))
    sd = np.sqrt(np.diag(cov) if np.ndim(cov) == 2 else cov)
    assert np.all(np.abs(draws.mean(0) - mean) < 5 * sd / np.sqrt(n)), (draws.mean(0), mean)
    if np.ndim(cov) == 2 and family != "Multinomial":  # a singular covariance: its sum is n
        np.testing.assert_allclose(np.cov(draws.T), cov, rtol=0.05, atol=1e-3)


def test_wishart_draws_have_the_wishart_mean_and_variance():
    n, dof = 20000, 5.0
    draws = NUMERIC["Wishart"].draw(np.random.default_rng(1),
                                    (np.full(n, dof), np.broadcast_to(W, (n, 2, 2))), None)
    # E[Λ] = ν W, Var(Λ_ij) = ν (W_ij² + W_ii W_jj)
    var = dof * (W**2 + np.outer(np.diag(W), np.diag(W)))
    assert np.all(np.abs(draws.mean(0) - dof * W) < 5 * np.sqrt(var / n))
    np.testing.assert_allclose(draws.var(0), var, rtol=0.1)


def test_joint_blocks_draw_the_precision_then_the_mean_given_it():
    n, rng = 20000, np.random.default_rng(2)
    mean, beta, shape, rate = (np.full(n, v) for v in (1.0, 2.0, 3.0, 1.5))
    mu, tau = JOINT["Normal-Gamma"](rng, (mean, beta, shape, rate))
    assert tau.mean() == pytest.approx(2.0, rel=0.02)
    # Var(μ) = E[1 / (β τ)] = rate / (β (shape − 1))
    assert mu.var() == pytest.approx(1.5 / (2.0 * 2.0), rel=0.05)
    mu, precision = JOINT["Normal-Wishart"](
        rng, (np.zeros((n, 2)), np.full(n, 2.0), np.full(n, 5.0), np.broadcast_to(W, (n, 2, 2))))
    # Cov(μ) = E[(β Λ)⁻¹] = W⁻¹ / (β (ν − D − 1))
    np.testing.assert_allclose(np.cov(mu.T), P / (2.0 * 2.0), atol=0.05)


def test_categorical_rows_draw_each_row_s_distribution():
    table = np.array([[0.7, 0.2, 0.1], [0.0, 0.5, 0.5], [0.1, 0.1, 0.8]])
    rows = np.repeat([2, 0, 1], 10000)
    x = categorical_rows(np.random.default_rng(3), table, rows)
    for r in range(3):
        frequency = np.bincount(x[rows == r], minlength=3) / 10000
        np.testing.assert_allclose(frequency, table[r], atol=0.015)


def test_a_family_without_a_log_density_says_so():
    with pytest.raises(CemError, match="no log density of the Wishart family"):
        numeric("Wishart", "log density")
