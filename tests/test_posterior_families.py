"""Closed-form marginals and exact draws of every variational family (cemodel.posterior), no
compile: each family's mean, sd and central interval agree with scipy's own distributions and
samplers, and with az.summary of 10⁵ of our draws, within Monte Carlo error."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.stats

from cemodel.posterior import MARGINALS, PARTS, SAMPLERS, central_interval, draw, marginals

N = 100_000
PROB = 0.94
TAIL = (1 - PROB) / 2
RNG = np.random.default_rng

W2 = np.array([[[2.0, 0.6], [0.6, 1.0]], [[0.5, -0.2], [-0.2, 0.3]]])  # two 2 × 2 scales
PARAMS = {
    "dirichlet": {"alpha": np.array([[2.0, 5.0, 0.7], [30.0, 1.5, 4.0]])},
    "beta": {"a": np.array([2.0, 0.8]), "b": np.array([3.0, 6.0])},
    "gamma": {"shape": np.array([0.9, 12.0]), "rate": np.array([2.0, 0.5])},
    "normal": {"mean": np.array([-1.0, 3.0]), "precision": np.array([4.0, 0.25])},
    "mvn": {"mean": np.array([[1.0, -2.0]]), "precision": np.linalg.inv(W2[:1] * 3)},
    "wishart": {"dof": np.array([5.5, 9.0]), "scale": W2},
    "normal_gamma": {"mean": np.array([0.5]), "beta": np.array([2.0]),
                     "shape": np.array([4.0]), "rate": np.array([3.0])},
    "normal_wishart": {"mean": np.array([[1.0, 2.0], [0.0, -1.0]]), "beta": np.array([3.0, 0.5]),
                       "dof": np.array([7.0, 8.5]), "scale": W2},
    "bernoulli": {"p": np.array([0.2, 0.9])},
    "categorical": {"probs": np.array([[0.1, 0.6, 0.3], [0.7, 0.1, 0.2]])},
}


def test_every_family_has_draws_and_marginals():
    assert set(PARAMS) == set(SAMPLERS) == set(MARGINALS)


def scipy_draws(family: str, p: dict, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """N draws of q from scipy's samplers (an implementation independent of ours)."""
    if family == "dirichlet":
        return {"": np.stack([scipy.stats.dirichlet(a).rvs(N, random_state=rng)
                              for a in p["alpha"]], axis=1)}
    if family == "mvn":
        cov = np.linalg.inv(p["precision"][0])
        return {"": scipy.stats.multivariate_normal(p["mean"][0], cov).rvs(
            N, random_state=rng)[:, None]}
    if family in ("wishart", "normal_wishart"):
        lam = np.stack([scipy.stats.wishart(df, s).rvs(N, random_state=rng)
                        for df, s in zip(p["dof"], p["scale"], strict=True)], axis=1)
        if family == "wishart":
            return {"": lam}
        mu = np.stack([[scipy.stats.multivariate_normal(m, np.linalg.inv(b * L)).rvs(
            random_state=rng) for L in lam[:200, k]] for k, (m, b) in enumerate(
            zip(p["mean"], p["beta"], strict=True))], axis=1)
        return {"mean": mu, "precision": lam[:200]}  # μ | Λ one at a time: fewer
    if family == "normal_gamma":
        tau = scipy.stats.gamma(p["shape"], scale=1 / p["rate"]).rvs((N, 1), random_state=rng)
        return {"precision": tau, "mean": scipy.stats.norm(
            p["mean"], 1 / np.sqrt(p["beta"] * tau)).rvs(random_state=rng)}
    dist = {"beta": lambda: scipy.stats.beta(p["a"], p["b"]),
            "gamma": lambda: scipy.stats.gamma(p["shape"], scale=1 / p["rate"]),
            "normal": lambda: scipy.stats.norm(p["mean"], 1 / np.sqrt(p["precision"])),
            "bernoulli": lambda: scipy.stats.bernoulli(p["p"])}
    if family in dist:
        return {"": dist[family]().rvs((N, *np.shape(next(iter(p.values())))),
                                       random_state=rng)}
    cdf = np.cumsum(p["probs"], axis=-1)
    return {"": (rng.random((N, len(cdf), 1)) >= cdf).sum(-1)}


def agree(family: str, part: str, draws: np.ndarray) -> None:
    """Closed-form mean, sd and interval against draws: within 5 standard errors (the
    interval's ends: the fraction of draws below each is its probability)."""
    m = marginals(family, PARAMS[family])[part]
    n = len(draws)
    mean, sd = draws.mean(0), draws.std(0)
    assert np.all(np.abs(mean - m.mean) <= 5 * m.sd / np.sqrt(n)), (family, part, mean, m.mean)
    kurt = np.mean((draws - mean) ** 4, 0) / np.maximum(sd**4, 1e-300)
    se_sd = m.sd * np.sqrt(np.maximum(kurt - 1, 0) / (4 * n))  # sd's standard error
    assert np.all(np.abs(sd - m.sd) <= 5 * se_sd + 1e-12), (family, part, sd, m.sd)
    if family in ("bernoulli", "categorical"):
        return
    low, high = central_interval(m, PROB)
    for bound, q in ((low, TAIL), (high, 1 - TAIL)):
        below = (draws <= bound).mean(0)
        assert np.all(np.abs(below - q) <= 5 * np.sqrt(q * (1 - q) / n)), (family, part, q)


@pytest.mark.parametrize("family", sorted(PARAMS))
def test_closed_form_agrees_with_scipy_draws(family):
    for part, draws in scipy_draws(family, PARAMS[family], RNG(1)).items():
        agree(family, part, draws)


@pytest.mark.parametrize("family", sorted(PARAMS))
def test_our_draws_agree_with_the_closed_form(family):
    drawn = draw(family, PARAMS[family], N, RNG(2))
    assert tuple(drawn) == PARTS[family]
    for part, draws in drawn.items():
        assert draws.shape[1:] == marginals(family, PARAMS[family])[part].mean.shape
        agree(family, part, draws)


def test_closed_form_against_scipy_quantiles():
    """The marginals that scipy names directly: Dirichlet components are Beta(α_k, α₀ − α_k),
    a Wishart's diagonal Gamma(ν/2, 2W_ii), a Normal-Gamma's mean Student-t(2a)."""
    alpha = PARAMS["dirichlet"]["alpha"]
    low, high = central_interval(marginals("dirichlet", {"alpha": alpha})[""], PROB)
    np.testing.assert_allclose(low, scipy.stats.beta(alpha, alpha.sum(1, keepdims=True)
                                                     - alpha).ppf(TAIL), rtol=1e-12)
    p = PARAMS["wishart"]
    high = central_interval(marginals("wishart", p)[""], PROB)[1]
    diag = np.diagonal(p["scale"], axis1=1, axis2=2)
    np.testing.assert_allclose(np.diagonal(high, axis1=1, axis2=2), scipy.stats.gamma(
        p["dof"][:, None] / 2, scale=2 * diag).ppf(1 - TAIL), rtol=1e-12)
    p = PARAMS["normal_gamma"]
    low = central_interval(marginals("normal_gamma", p)["mean"], PROB)[0]
    np.testing.assert_allclose(low, scipy.stats.t(2 * p["shape"], p["mean"], np.sqrt(
        p["rate"] / (p["shape"] * p["beta"]))).ppf(TAIL), rtol=1e-12)


@pytest.mark.parametrize("family", sorted(PARAMS))
def test_closed_form_agrees_with_az_summary(family):
    """az.summary of 10⁵ of our draws (its mean, sd and eti columns) against the closed form:
    means within 5 standard errors, sds within 3%, the interval's ends within the band of
    the draws' own quantiles at q ± 5 standard errors (labels and 0/1s: mean and sd)."""
    az = pytest.importorskip("arviz")
    drawn = draw(family, PARAMS[family], N, RNG(3))
    names = {part: part or "x" for part in drawn}
    idata = az.from_dict(posterior={names[p]: v[None] for p, v in drawn.items()})
    stats = az.summary(idata, kind="stats", hdi_prob=PROB, round_to="none")
    eti = az.summary(idata, kind="stats", hdi_prob=PROB, stat_focus="median",
                     round_to="none")
    for part, m in marginals(family, PARAMS[family]).items():
        low, high = central_interval(m, PROB)
        for index in np.ndindex(m.mean.shape):
            label = f"{names[part]}[{', '.join(map(str, index))}]" if index else names[part]
            assert abs(stats.loc[label, "mean"] - m.mean[index]) <= 5 * m.sd[index] / N**0.5
            assert abs(stats.loc[label, "sd"] - m.sd[index]) <= 0.03 * m.sd[index] + 1e-9
            if family in ("bernoulli", "categorical"):
                continue
            column = drawn[part][(slice(None), *index)]
            for ours, key, q in ((low, "eti_3%", TAIL), (high, "eti_97%", 1 - TAIL)):
                se = 5 * np.sqrt(q * (1 - q) / N)
                band = np.quantile(column, [q - se, q + se])
                assert band[0] - 1e-9 <= ours[index] <= band[1] + 1e-9, (label, key)
                assert band[0] - 1e-9 <= eti.loc[label, key] <= band[1] + 1e-9, (label, key)


def test_draws_of_tiny_concentrations_are_finite():
    """LDA's η = 0.01: a plain gamma draw underflows to 0 / 0; the log-domain draw does not."""
    drawn = draw("dirichlet", {"alpha": np.full((3, 50), 0.01)}, 20, RNG(4))[""]
    assert np.isfinite(drawn).all()
    np.testing.assert_allclose(drawn.sum(-1), 1.0)
