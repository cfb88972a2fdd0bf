"""After the fit: the posterior predictive (Model.sample_posterior_predictive, cemodel predict)
against the analytic predictives of the conjugate pairs, and on mixtures and LDA."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from scipy import sparse

from cemodel.api import Model
from cemodel.cli import main
from cemodel.errors import CemError

REPO = Path(__file__).resolve().parents[1]
DRAWS = 4000


def _within(sample: np.ndarray, mean: float, variance: float, sigmas: float = 4.0) -> None:
    """The sample's mean within ``sigmas`` standard errors of ``mean``, its variance within
    ``sigmas`` standard errors (≈ var·√(2/n), inflated by the excess kurtosis)."""
    n = len(sample)
    assert abs(sample.mean() - mean) < sigmas * np.sqrt(variance / n), (sample.mean(), mean)
    kurtosis = np.mean((sample - sample.mean()) ** 4) / sample.var() ** 2
    se = variance * np.sqrt((kurtosis - 1.0) / n)
    assert abs(sample.var() - variance) < sigmas * se, (sample.var(), variance)


def test_beta_bernoulli_replicates_are_beta_binomial():
    """Σ_n x_rep[n] of one draw ~ BetaBinomial(N, a', b'): the items share p (binomial
    variance would be N p̄(1 − p̄), about half)."""
    model, N = Model("beta_bernoulli"), 40
    fit = model.fit({"x": np.random.default_rng(0).binomial(1, 0.3, N)})
    a, b = fit["p.a"], fit["p.b"]
    total = model.sample_posterior_predictive(fit, DRAWS, 1)["x"].sum(axis=1)
    _within(total, N * a / (a + b), N * a * b * (a + b + N) / ((a + b) ** 2 * (a + b + 1)))


def test_gamma_poisson_replicates_are_negative_binomial():
    """x_rep[n] ~ NegBin(a', b' / (b' + 1)): mean a'/b', variance a'/b' · (1 + 1/b')."""
    model = Model("gamma_poisson")
    fit = model.fit({"x": np.random.default_rng(1).poisson(3.0, 30)})
    a, b = fit["rate.shape"], fit["rate.rate"]
    x = model.sample_posterior_predictive(fit, DRAWS, 2)["x"]
    assert x.shape == (DRAWS, 30) and x.dtype.kind == "i"
    _within(x[:, 0], a / b, a / b * (1.0 + 1.0 / b))


def test_an_exponential_prior_draws_from_its_gamma_posterior(tmp_path):
    """q(λ) of an Exponential(2) prior under Poisson data is Gamma(1 + Σx, 2 + N): the draws,
    the replicates (negative binomial) and the held-out log predictive read that Gamma, not
    an Exponential of its rate."""
    from scipy import stats

    path = tmp_path / "expprior.cem"
    path.write_text("model expprior\ndim N\nlam ~ Exponential(2.0)\n"
                    "plate obs n in N:\n    observe x[n] ~ Poisson(lam)\n")
    model = Model(path)
    x = np.random.default_rng(0).poisson(3, 20)
    fit = model.fit({"x": x})
    a, b = 1 + x.sum(), 2 + x.size
    _within(model.posterior_draws(fit, DRAWS, 0)["lam"], a / b, a / b**2)
    _within(model.sample_posterior_predictive(fit, DRAWS, 1)["x"][:, 0], a / b,
            a / b * (1.0 + 1.0 / b))
    held_out = np.array([1, 3, 8])
    exact = stats.nbinom(a, b / (b + 1)).logpmf(held_out).mean()
    score = model.score(fit, {"x": held_out}, draws=20000, seed=0)
    assert score.log_predictive == pytest.approx(exact, abs=0.01)


def test_normal_normal_replicates_are_normal():
    """x_rep[n] ~ Normal(m', 1/t' + 1/τ)."""
    model = Model("normal_normal")
    fit = model.fit({"x": np.random.default_rng(2).normal(2.0, 1.0, 30)})
    x = model.sample_posterior_predictive(fit, DRAWS, 3)["x"][:, 7]
    _within(x, fit["mu.mean"], 1.0 / fit["mu.precision"] + 1.0)


def test_dirichlet_categorical_replicates_have_the_posterior_mean_frequencies():
    model = Model("dirichlet_categorical")
    fit = model.fit({"x": np.random.default_rng(3).integers(0, 6, 30)})
    x = model.sample_posterior_predictive(fit, DRAWS, 4)["x"][:, 0]
    p = fit["p.alpha"] / fit["p.alpha"].sum()
    frequency = np.bincount(x, minlength=6) / DRAWS
    assert np.all(np.abs(frequency - p) < 4 * np.sqrt(p * (1 - p) / DRAWS)), (frequency, p)


def _points(seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.concatenate([rng.normal(c, 0.5, (20, 2)) for c in ([0, 0], [6, 0], [0, 6])])


@pytest.fixture(scope="module")
def gmm():
    model = Model("gmm")
    return model, model.fit({"x": _points()}, dims={"K": 3})


def test_a_mixture_replicates_its_items_from_q_and_new_items_from_the_prior(gmm):
    model, fit = gmm
    x = _points()
    own = model.sample_posterior_predictive(fit, 400, 5)["x"]
    assert own.shape == (400, 60, 2)
    # q(z) is near one-hot: each replicate lies around its own item's cluster
    centres = np.array([[0, 0], [6, 0], [0, 6]])
    nearest = np.argmin(((own.mean(0)[:, None] - centres) ** 2).sum(-1), axis=1)
    assert np.array_equal(nearest, np.repeat(np.arange(3), 20))
    # new items: z from E over q(π), so the mean is Σ_k E[π_k] E[μ_k]
    new = model.sample_posterior_predictive(fit, 1000, 6, dims={"N": 5}, new=True)["x"]
    assert new.shape == (1000, 5, 2)
    weights = fit["pi.alpha"] / fit["pi.alpha"].sum()
    np.testing.assert_allclose(new.reshape(-1, 2).mean(0), weights @ fit["mu.mean"], atol=0.35)
    assert np.abs(new.reshape(-1, 2).mean(0) - x.mean(0)).max() < 0.35


def test_a_size_or_item_count_other_than_the_fit_s_is_a_clear_error(gmm):
    model, fit = gmm
    with pytest.raises(CemError, match="'z' has shape") as err:
        model.sample_posterior_predictive(fit, 5, data={"x": _points()[:30]})
    assert "new=True" in err.value.hint
    assert model.sample_posterior_predictive(fit, 5, data={"x": _points()[:30]},
                                             new=True)["x"].shape == (5, 30, 2)
    with pytest.raises(CemError, match="draws"):
        model.sample_posterior_predictive(fit, 0)


def _corpus(seed: int = 0, D: int = 24, V: int = 15) -> sparse.csr_matrix:
    rng = np.random.default_rng(seed)
    topics = rng.dirichlet(np.full(V, 0.2), 3)
    theta = rng.dirichlet(np.full(3, 0.3), D)
    return sparse.csr_matrix(np.stack([rng.multinomial(20, t @ topics) for t in theta]))


def _cli(*args: str) -> int:
    return main([str(a) for a in args])


def test_cemodel_predict_on_lda_and_gmm(tmp_path, capsys):
    docs, points = tmp_path / "docs.npz", tmp_path / "points.npz"
    sparse.save_npz(docs, _corpus())
    np.savez(points, x=_points())
    for name, data, shape in (("lda", docs, (7, 24, 15)), ("gmm", points, (7, 60, 2))):
        post, out = tmp_path / f"{name}_post.npz", tmp_path / f"{name}_pp.npz"
        model = REPO / "stdlib_models" / f"{name}.cem"
        assert _cli("fit", model, "--data", data, "-o", post, "--quiet") == 0
        assert _cli("predict", model, post, data, "--draws", 7, "-o", out) == 0
        replicated = np.load(out)
        key = "w" if name == "lda" else "x"
        assert list(replicated) == [key] and replicated[key].shape == shape
    # a bag of words comes back as counts: every document keeps its length
    np.testing.assert_array_equal(np.load(tmp_path / "lda_pp.npz")["w"].sum(-1),
                                  np.full((7, 24), 20))
    capsys.readouterr()
    assert _cli("predict", REPO / "stdlib_models" / "gmm.cem", tmp_path / "gmm_post.npz",
                points, "--set", "K=3", "-o", tmp_path / "pp.npz") == 2  # fitted with K=5
    assert "--set" in capsys.readouterr().err
    assert _cli("predict", REPO / "stdlib_models" / "gmm.cem", tmp_path / "gmm_post.npz",
                points, "-o", tmp_path / "pp.txt") == 2


def test_lda_without_its_data_asks_for_it():
    model = Model("lda")
    fit = model.fit({"w": _corpus()}, max_iter=5, dims={"K": 3})
    with pytest.raises(CemError, match="lengths of plate tokens"):
        model.sample_posterior_predictive(fit, 3)
