"""Held-out scores (Model.score): the exact log predictive against direct NumPy computations
under the same draws of q, the held-out ELBO below it on every model where both exist, and
LDA's document-completion perplexity."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import numpy as np
import pytest
from scipy import sparse, stats
from scipy.special import logsumexp

from cemodel.api import Model
from cemodel.evaluation import completion_perplexity, topics_from_dirichlet
from cemodel.predictive import Posterior, World, draw_q
from cemodel.scoring import ExactPlan, exact_plan, item_log_likelihood

REPO = Path(__file__).resolve().parents[1]
STDLIB = sorted(p.stem for p in (REPO / "stdlib_models").glob("*.cem"))
NOT_EXACT = {"lda": "theta", "factor_analysis": "f", "gap_nmf": "H", "lds": "x"}


def _corpus(rng: np.random.Generator, D: int = 20, V: int = 12) -> sparse.csr_matrix:
    topics = rng.dirichlet(np.full(V, 0.3), 3)
    theta = rng.dirichlet(np.full(3, 0.3), D)
    return sparse.csr_matrix(np.stack([rng.multinomial(15, t @ topics) for t in theta]))


def _data(name: str, seed: int) -> tuple[dict, dict]:
    """Small data for each stdlib model, and the sizes to fit it with (given as dims, so
    that every test of a model shares its compiled module)."""
    rng = np.random.default_rng(seed)
    points = np.concatenate([rng.normal(c, 0.6, (15, 2)) for c in ([0, 0], [5, 0], [0, 5])])
    groups = {"group": np.arange(30) % 3}
    table = {
        "beta_bernoulli": ({"x": rng.binomial(1, 0.3, 30)}, {}),
        "gamma_poisson": ({"x": rng.poisson(3.0, 30)}, {}),
        "normal_normal": ({"x": rng.normal(2.0, 1.0, 30)}, {}),
        "dirichlet_categorical": ({"x": rng.integers(0, 6, 30)}, {}),
        "gmm": ({"x": points}, {"K": 3}),
        "gmm_means": ({"x": points}, {"K": 3}),
        "gmm_normal_wishart": ({"x": points}, {"K": 3}),
        "poisson_mixture": ({"x": np.concatenate([rng.poisson(2, 15), rng.poisson(12, 15)])},
                            {}),
        "bernoulli_mixture": ({"x": rng.binomial(1, 0.3, (30, 4))}, {"K": 3}),
        "mixture_of_multinomials": ({"w": _corpus(rng)}, {"K": 3}),
        "dp_gmm": ({"x": points}, {"K": 5}),
        "dp_mixture_of_multinomials": ({"w": _corpus(rng)}, {"K": 5}),
        "lda": ({"w": _corpus(rng)}, {"K": 3}),
        "hmm": ({"x": [rng.integers(0, 4, n) for n in (9, 12, 7, 10)]}, {"K": 2}),
        "lds": ({"y": [rng.normal(size=(n, 3)) for n in (9, 12, 7, 10)]}, {}),
        "hierarchical_normal": ({"y": rng.normal(0, 1, 30), **groups}, {}),
        "hierarchical_poisson": ({"x": rng.poisson(3, 30), "e": np.ones(30), **groups}, {}),
        "linear_regression": ({"x": rng.normal(size=(30, 3)), "y": rng.normal(size=30)}, {}),
        "robust_regression": ({"x": rng.normal(size=(30, 3)), "y": rng.standard_t(3, 30)}, {}),
        "pmf": ({"y": rng.normal(size=40), "user": np.arange(40) % 6,
                 "item": np.arange(40) % 5}, {"K": 2}),
        "factor_analysis": ({"y": rng.normal(size=(20, 3))}, {}),
        "gap_nmf": ({"Y": rng.poisson(2, (8, 5))}, {"K": 3}),
        "logistic_regression": ({"x": rng.normal(size=(30, 2)), "y": rng.binomial(1, 0.4, 30)},
                                {}),
        "hierarchical_logistic": ({"x": rng.normal(size=(30, 2)), "y": rng.binomial(1, 0.4, 30),
                                   **groups}, {}),
    }
    return table[name]


def test_every_stdlib_model_has_data_here():
    assert set(STDLIB) == {name for name in STDLIB if _data(name, 0)}


@pytest.mark.parametrize("name", STDLIB)
def test_which_models_have_an_exact_log_predictive(name):
    """Structure only (nothing is fitted): the locals sum out unless continuous."""
    data, settings = _data(name, 0)
    plan = exact_plan(World.of(Model(name), Posterior({}, {}, {}), data, settings))
    if name in NOT_EXACT:
        assert isinstance(plan, str) and f"'{NOT_EXACT[name]}'" in plan
    else:
        assert isinstance(plan, ExactPlan), plan


@cache
def _fitted(name: str) -> tuple[Model, object]:
    data, dims = _data(name, 0)
    model = Model(name)
    return model, model.fit(data, max_iter=60, dims=dims)


@pytest.mark.parametrize("name", STDLIB)
def test_every_stdlib_model_replicates_each_observed_variable(name):
    """Laid out as the data: a bag of words as counts, sequences flat, the rest as given."""
    model, fit = _fitted(name)
    for new in (False, True):  # the fit's items, new items
        data = _data(name, int(new))[0]
        replicated = model.sample_posterior_predictive(fit, 3, data=data, new=new)
        assert set(replicated) <= set(data) and replicated
        for key, value in replicated.items():
            given = data[key]
            shape = ((sum(len(s) for s in given), *np.shape(given[0])[1:])
                     if isinstance(given, list) else given.shape)  # sequences: flat
            assert value.shape == (3, *shape) and np.all(np.isfinite(value)), key


@pytest.mark.parametrize("name", [n for n in STDLIB if n not in NOT_EXACT])
def test_the_heldout_elbo_is_below_the_exact_log_predictive(name):
    model, fit = _fitted(name)
    heldout, _ = _data(name, 1)
    score = model.score(fit, heldout, draws=300, seed=0)
    assert np.isfinite(score.elbo) and np.isfinite(score.log_predictive)
    assert score.elbo <= score.log_predictive, (score.elbo, score.log_predictive)
    assert score.elbo == pytest.approx(model.infer(heldout, fit).elbo / score.items)
    assert score.item_log_predictive.shape == (score.items,)


def _scored(name: str, draws: int, seed: int) -> tuple:
    """``name`` fitted to its data and scored on other data: (the fit, the held-out data, the
    score, the draws of q the score used)."""
    data, dims = _data(name, 0)
    model = Model(name)
    fit = model.fit(data, dims=dims)
    heldout = _data(name, 1)[0]
    return (fit, heldout, model.score(fit, heldout, draws=draws, seed=seed),
            model.posterior_draws(fit, draws, seed))


def test_gmm_exact_log_density_is_numpy_under_the_same_draws():
    """(1/N) Σ_n log (1/S) Σ_s Σ_k π_sk N(x_n; μ_sk, Λ_sk⁻¹) with the draws posterior_draws
    gives for the same seed."""
    _, heldout, score, g = _scored("gmm", 40, 7)
    x = heldout["x"]
    log_p = np.stack([logsumexp(
        [np.log(g["pi"][s, k]) + stats.multivariate_normal.logpdf(
            x, g["mu"][s, k], np.linalg.inv(g["Lambda"][s, k])) for k in range(3)], axis=0)
        for s in range(40)])
    items = logsumexp(log_p, axis=0) - np.log(40)
    np.testing.assert_allclose(score.item_log_predictive, items, rtol=1e-10)
    assert score.log_predictive == pytest.approx(items.mean(), rel=1e-10)


def test_hmm_exact_log_density_is_the_forward_algorithm_under_the_same_draws():
    _, heldout, score, g = _scored("hmm", 20, 3)
    sequences = heldout["x"]

    def log_p(s: int, seq: np.ndarray) -> float:  # α_t = (α_{t−1} A) ⊙ φ[:, x_t], scaled
        alpha, total = g["pi0"][s] * g["phi"][s][:, seq[0]], 0.0
        for symbol in seq[1:]:
            total += np.log(alpha.sum())
            alpha = (alpha / alpha.sum()) @ g["A"][s] * g["phi"][s][:, symbol]
        return total + np.log(alpha.sum())

    per_draw = np.array([[log_p(s, seq) for seq in sequences] for s in range(20)])
    np.testing.assert_allclose(score.item_log_predictive,
                               logsumexp(per_draw, axis=0) - np.log(20), rtol=1e-10)


@pytest.mark.parametrize("name, predictive", [
    ("beta_bernoulli", lambda f, x: stats.bernoulli.logpmf(x, f["p.a"] / (f["p.a"] + f["p.b"]))),
    ("gamma_poisson", lambda f, x: stats.nbinom.logpmf(
        x, f["rate.shape"], f["rate.rate"] / (f["rate.rate"] + 1.0))),
    ("normal_normal", lambda f, x: stats.norm.logpdf(
        x, f["mu.mean"], np.sqrt(1.0 / f["mu.precision"] + 1.0))),
])
def test_a_conjugate_pair_s_log_predictive_is_its_closed_form(name, predictive):
    """Many draws of q: the Monte Carlo average reaches the analytic predictive density."""
    fit, heldout, score, _ = _scored(name, 4000, 0)
    np.testing.assert_allclose(score.item_log_predictive, predictive(fit, heldout["x"]),
                               atol=0.01)


def test_lda_scores_document_completion_as_evaluation_does():
    data, dims = _data("lda", 0)
    model = Model("lda")
    fit = model.fit(data, max_iter=30, dims=dims)
    heldout = _data("lda", 1)[0]
    score = model.score(fit, heldout, seed=4)
    assert score.log_predictive is None and "theta" in score.exact
    expected = completion_perplexity(topics_from_dirichlet(fit["beta.alpha"]),
                                     fit.hypers["alpha"], heldout["w"], seed=4)
    assert score.perplexity == pytest.approx(expected, rel=1e-12)
    assert score.elbo < 0 and score.items == 20
    # the same documents as lists of token ids (a form the Data section accepts)
    counts = sparse.csr_matrix(heldout["w"])
    tokens = [np.repeat(row.indices, row.data.astype(int)) for row in counts]
    assert model.score(fit, {"w": tokens}, seed=4).perplexity == pytest.approx(expected,
                                                                               rel=1e-12)


TOKEN_MIXTURE = """model tokens
dim K = 2
dim V
dim D
dim N[D]
pi ~ Dirichlet(1.0, K)
plate comps k in K:
    phi[k] ~ Dirichlet(0.5, V)
plate docs d in D:
    plate tokens n in N[d]:
        z[d, n] ~ Categorical(pi)
        observe w[d, n] ~ Categorical(phi[z[d, n]])
"""

TWO_LOCALS = """model two
dim K = 2
dim N
pi ~ Dirichlet(1.0, K)
plate comps k in K:
    mu[k] ~ Normal(0.0, 0.01)
    tau[k] ~ Gamma(1.0, 1.0)
plate points n in N:
    z1[n] ~ Categorical(pi)
    z2[n] ~ Categorical(pi)
    observe x[n] ~ Normal(mu[z1[n]], tau[z2[n]])
"""


def _world(tmp_path: Path, source: str, post: Posterior, data: dict) -> World:
    path = tmp_path / "m.cem"
    path.write_text(source)
    return World.of(Model(path), post, data)


def test_a_token_level_mixture_sums_each_token_out_counts_included(tmp_path):
    """Bag of words, a categorical per token under global weights: log p(doc | π, φ) =
    Σ_w c_dw log Σ_k π_k φ_kw, from the plan alone (given q's parameters, no fit)."""
    rng = np.random.default_rng(5)
    counts = rng.poisson(1.0, (6, 8))
    post = Posterior({"pi.alpha": np.array([2.0, 3.0]),
                      "phi.alpha": rng.uniform(0.5, 3.0, (2, 8))}, {}, {})
    world = _world(tmp_path, TOKEN_MIXTURE, post, {"w": counts})
    plan = exact_plan(world)
    assert isinstance(plan, ExactPlan) and [s.local for s in plan.sums] == ["z"]
    q = draw_q(world, post, world.globals_, 3, np.random.default_rng(0))
    for s in range(3):
        expected = counts @ np.log(q["pi"][s] @ q["phi"][s])
        got = item_log_likelihood(world, plan, {k: v[s] for k, v in q.items()})
        np.testing.assert_allclose(got, expected, rtol=1e-12)


def test_an_observation_of_two_locals_is_not_summed_out(tmp_path):
    world = _world(tmp_path, TWO_LOCALS, Posterior({}, {}, {}), {"x": np.zeros(4)})
    assert exact_plan(world) == "'x' reads the local 'z1' and another local"
