"""MF on a single conjugate pair returns the closed-form posterior (tolerance 1e-8)."""

import numpy as np
import pytest

TOL = 1e-8


def test_beta_bernoulli(compiled):
    x = np.random.default_rng(1).integers(0, 2, 57)
    res = compiled("beta_bernoulli").fit({"x": x})
    assert res["p.a"] == pytest.approx(2.0 + x.sum(), rel=TOL)
    assert res["p.b"] == pytest.approx(3.0 + len(x) - x.sum(), rel=TOL)


def test_beta_bernoulli_hyper_override(compiled):
    x = np.array([1, 1, 0, 1])
    res = compiled("beta_bernoulli").fit({"x": x}, hypers={"a": 0.5, "b": 7.0})
    assert res["p.a"] == pytest.approx(3.5, rel=TOL)
    assert res["p.b"] == pytest.approx(8.0, rel=TOL)


def test_gamma_poisson(compiled):
    x = np.random.default_rng(2).poisson(4.2, 33)
    res = compiled("gamma_poisson").fit({"x": x})
    assert res["rate.shape"] == pytest.approx(2.0 + x.sum(), rel=TOL)
    assert res["rate.rate"] == pytest.approx(1.0 + len(x), rel=TOL)


def test_normal_normal(compiled):
    x = np.random.default_rng(3).normal(-1.5, 2.0, 41)
    res = compiled("normal_normal").fit({"x": x}, hypers={"m0": 0.7, "t0": 0.2, "tau": 0.25})
    precision = 0.2 + len(x) * 0.25
    mean = (0.2 * 0.7 + 0.25 * x.sum()) / precision
    assert res["mu.precision"] == pytest.approx(precision, rel=TOL)
    assert res["mu.mean"] == pytest.approx(mean, rel=TOL)


def test_dirichlet_categorical(compiled):
    x = np.random.default_rng(4).integers(0, 6, 200)
    res = compiled("dirichlet_categorical").fit({"x": x}, hypers={"alpha": 0.5})
    np.testing.assert_allclose(res["p.alpha"], 0.5 + np.bincount(x, minlength=6), rtol=TOL)


def test_elbo_of_conjugate_pair_is_log_evidence(compiled):
    """With an exact posterior the ELBO is the log marginal likelihood."""
    from scipy.special import betaln

    x = np.random.default_rng(5).integers(0, 2, 20)
    res = compiled("beta_bernoulli").fit({"x": x})
    s = x.sum()
    evidence = betaln(2.0 + s, 3.0 + len(x) - s) - betaln(2.0, 3.0)
    assert res.elbo[-1] == pytest.approx(evidence, rel=1e-10)
