"""Draws from the variational families: their statistics average to E_q[t] (Monte Carlo)."""

import numpy as np
import pytest
from scipy.special import digamma

from cemodel.runtime import families as fam
from cemodel.runtime import sampling

DRAWS = 4000


def mc_mean(sampler, lams, shapes, seed=0):
    rng = np.random.default_rng(seed)
    totals = [np.zeros(s) for s in shapes]
    for _ in range(DRAWS):
        outs = [np.zeros(s) for s in shapes]
        sampler(*lams, rng, *outs)
        for t, o in zip(totals, outs, strict=True):
            t += o
    return [t / DRAWS for t in totals]


def test_dirichlet_log_draws_average_to_expected_log():
    """Within 4 Monte Carlo standard errors, also for a concentration of 0.01."""
    alpha = np.array([[0.01, 0.5, 3.0, 20.0]])
    rng = np.random.default_rng(0)
    draws = np.zeros((DRAWS, 4))
    out = np.zeros((1, 4))
    for i in range(DRAWS):
        sampling.sample_dirichlet(alpha - 1.0, rng, out)
        draws[i] = out[0]
    expected = digamma(alpha[0]) - digamma(alpha.sum())
    stderr = draws.std(axis=0) / np.sqrt(DRAWS)
    assert np.all(np.abs(draws.mean(axis=0) - expected) < 4 * stderr)
    # tiny concentrations stay finite
    sampling.sample_dirichlet(np.full((1, 3), 1e-4 - 1.0), np.random.default_rng(1), out[:, :3])
    assert np.all(np.isfinite(out))


@pytest.mark.parametrize("a, b", [(0.5, 2.0), (3.0, 4.0)])
def test_beta_draws(a, b):
    mean_log, mean_log1m = mc_mean(sampling.sample_beta, [np.array([a - 1.0]),
                                                          np.array([b - 1.0])], [(1,), (1,)])
    assert mean_log[0] == pytest.approx(digamma(a) - digamma(a + b), abs=0.08)
    assert mean_log1m[0] == pytest.approx(digamma(b) - digamma(a + b), abs=0.08)


def test_gamma_draws():
    a, rate = 2.5, 4.0
    mean_log, mean_value = mc_mean(sampling.sample_gamma, [np.array([a - 1.0]),
                                                           np.array([-rate])], [(1,), (1,)])
    assert mean_value[0] == pytest.approx(a / rate, rel=0.05)
    assert mean_log[0] == pytest.approx(digamma(a) - np.log(rate), abs=0.05)


def test_normal_draws():
    m, tau = 1.5, 4.0
    mean_value, mean_square = mc_mean(sampling.sample_normal, [np.array([tau * m]),
                                                               np.array([-tau / 2])],
                                      [(1,), (1,)])
    assert mean_value[0] == pytest.approx(m, abs=0.03)
    assert mean_square[0] == pytest.approx(m * m + 1 / tau, rel=0.03)


def test_mvn_and_wishart_draws_average_to_expected_stats():
    P = np.array([[2.0, 0.5], [0.5, 1.0]])
    m = np.array([1.0, -1.0])
    lam_value, lam_outer = (P @ m)[None], (-P / 2)[None]
    v, o = mc_mean(sampling.sample_mvn, [lam_value, lam_outer], [(1, 2), (1, 2, 2)])
    E_value, E_outer = np.zeros(2), np.zeros((2, 2))
    fam.mvn_expected_stats(lam_value[0], lam_outer[0], E_value, E_outer)
    np.testing.assert_allclose(v[0], E_value, atol=0.05)
    np.testing.assert_allclose(o[0], E_outer, atol=0.1)
    W = np.array([[1.0, 0.3], [0.3, 0.5]])
    dof = 6.0
    lam_w, lam_ld = (-np.linalg.inv(W) / 2)[None], np.array([(dof - 3) / 2])
    value, logdet = mc_mean(sampling.sample_wishart, [lam_w, lam_ld], [(1, 2, 2), (1,)])
    E_w = np.zeros((2, 2))
    E_ld = fam.wishart_expected_stats(lam_w[0], lam_ld[0], E_w)
    np.testing.assert_allclose(value[0], E_w, rtol=0.05, atol=0.05)
    assert logdet[0] == pytest.approx(E_ld, abs=0.05)
