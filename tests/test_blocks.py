"""Joint blocks q(mean, precision): a Normal mean whose prior precision is a Gamma / Wishart
precision scaled by a constant is fitted together with it as one Normal-Gamma /
Normal-Wishart factor (cemodel.blocks; Bishop 2006 §10.2.1), found by the form of the model."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
from scipy.special import gammaln, multigammaln

import cemodel.runtime as rt
from cemodel.check import check_report
from cemodel.compiler import compile_model, read_source, run_stages

from .helpers import never_decreases

REPO = Path(__file__).resolve().parents[1]

NORMAL_GAMMA = """model ng
dim N
hyper m0 = 0.0
hyper k0 = 0.5
hyper a0 = 2.0
hyper b0 = 1.0
tau ~ Gamma(a0, b0)
mu ~ Normal(m0, k0 * tau)
plate obs n in N:
    observe y[n] ~ Normal(mu, tau)
"""

NORMAL_WISHART = """model nw
dim D
dim N
hyper m0 = zeros(D)
hyper k0 = 0.5
hyper nu0 = D + 2
hyper W0 = eye(D)
Lambda ~ Wishart(nu0, W0)
mu ~ MultivariateNormal(m0, k0 * Lambda)
plate obs n in N:
    observe x[n] ~ MultivariateNormal(mu, Lambda)
"""


def _write(tmp_path, text: str, name: str = "m.cem") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_check_shows_the_block_and_its_conditional(tmp_path):
    out = check_report(run_stages(*read_source(_write(tmp_path, NORMAL_GAMMA))).plan)
    assert "joint blocks (one factor q(mean, precision) instead of two):" in out
    assert "mu_tau = (mu, tau)" in out
    assert "q(mu_tau) = Normal-Gamma(mean, β, shape, rate)" in out
    # the textbook Normal-Gamma update (Bishop 2006, eqs. 2.150-2.153 in natural form)
    assert "β = k0 + Σ_{n} 1" in out
    assert "β·mean = k0·m0 + Σ_{n} y[n]" in out
    assert "shape = a0 + 0.5·Σ_{n} 1" in out
    assert "rate + β·mean²/2 = 0.5·k0·square(m0) + b0 + 0.5·Σ_{n} y[n]·y[n]" in out
    assert "\ntau ~" not in out and "\nmu ~" not in out  # no separate factors

    out = check_report(run_stages(*read_source(REPO / "stdlib_models" /
                                               "gmm_normal_wishart.cem")).plan)
    assert "q(mu_Lambda[k]) = Normal-Wishart(mean, β, dof, scale)" in out
    assert "dof = nu0 + Σ_{n} q(z[n] = k)" in out
    # the responsibilities read the joint statistics, E[Λμ] and E[μᵀΛμ], not E[Λ]E[μ]
    assert "Σ_{i} x[n]_i·E[Lambda[v] mu[v]]_i - 0.5·E[mu[v]ᵀ Lambda[v] mu[v]]" in out
    assert "X (integrated out): pi, mu_Lambda" in out  # KLC can now collapse the pair


def test_normal_gamma_block_is_the_exact_posterior(tmp_path):
    """iid Normal data under a Normal-Gamma prior: q(mu, tau) is the exact posterior and the
    ELBO is the log marginal likelihood (mean field q(mu)q(tau) could be neither)."""
    y = np.random.default_rng(0).normal(1.5, 0.7, 50)
    res = compile_model(_write(tmp_path, NORMAL_GAMMA)).fit({"y": y}, max_iter=20)
    m0, k0, a0, b0, n = 0.0, 0.5, 2.0, 1.0, len(y)
    kn = k0 + n
    mn = (k0 * m0 + y.sum()) / kn
    an = a0 + n / 2
    bn = b0 + 0.5 * (np.sum(y ** 2) + k0 * m0 ** 2 - kn * mn ** 2)
    assert res["mu_tau.beta"] == pytest.approx(kn, rel=1e-12)
    assert res["mu_tau.mean"] == pytest.approx(mn, rel=1e-12)
    assert res["mu_tau.shape"] == pytest.approx(an, rel=1e-12)
    assert res["mu_tau.rate"] == pytest.approx(bn, rel=1e-10)
    # the members' marginals: q(tau) = Gamma(an, bn) exactly, E[mu] = mn
    assert (res["tau.shape"], res["tau.rate"]) == (res["mu_tau.shape"], res["mu_tau.rate"])
    assert res["mu.mean"] == res["mu_tau.mean"]
    log_marginal = (gammaln(an) - gammaln(a0) + a0 * np.log(b0) - an * np.log(bn)
                    + 0.5 * np.log(k0 / kn) - n / 2 * np.log(2 * np.pi))
    assert res.elbo[-1] == pytest.approx(log_marginal, abs=1e-9)


def test_normal_wishart_block_is_the_exact_posterior(tmp_path):
    rng = np.random.default_rng(1)
    d, n = 3, 40
    x = rng.multivariate_normal([1.0, -1.0, 0.5], np.diag([0.5, 1.0, 2.0]), n)
    res = compile_model(_write(tmp_path, NORMAL_WISHART)).fit({"x": x}, max_iter=20)
    m0, k0, nu0, w0 = np.zeros(d), 0.5, d + 2.0, np.eye(d)
    xbar = x.mean(0)
    scatter = (x - xbar).T @ (x - xbar)
    kn, nun = k0 + n, nu0 + n
    mn = (k0 * m0 + x.sum(0)) / kn
    wn_inv = np.linalg.inv(w0) + scatter + k0 * n / kn * np.outer(xbar - m0, xbar - m0)
    assert res["mu_Lambda.beta"] == pytest.approx(kn, rel=1e-12)
    assert res["mu_Lambda.dof"] == pytest.approx(nun, rel=1e-12)
    np.testing.assert_allclose(res["mu_Lambda.mean"], mn, rtol=1e-12)
    np.testing.assert_allclose(res["mu_Lambda.scale"], np.linalg.inv(wn_inv), rtol=1e-10)
    np.testing.assert_allclose(res["Lambda.scale"], res["mu_Lambda.scale"])
    np.testing.assert_allclose(res["E[value mu_Lambda]"], nun * np.linalg.inv(wn_inv),
                               rtol=1e-10)
    log_marginal = (-n * d / 2 * np.log(np.pi) + multigammaln(nun / 2, d)
                    - multigammaln(nu0 / 2, d) - nu0 / 2 * np.linalg.slogdet(w0)[1]
                    - nun / 2 * np.linalg.slogdet(wn_inv)[1] + d / 2 * np.log(k0 / kn))
    assert res.elbo[-1] == pytest.approx(log_marginal, abs=1e-9)


def _mixture(seed: int = 11, n: int = 300):
    rng = np.random.default_rng(seed)
    centres = np.array([[0.0, 0.0], [5.0, 0.0], [0.0, 5.0]])
    truth = rng.integers(0, 3, n)
    cov = np.array([[1.0, 0.4], [0.4, 0.6]])
    return centres[truth] + rng.multivariate_normal(np.zeros(2), cov, n), truth


def test_gmm_step_equals_scikit_learns_variational_step():
    """Same algorithm, same answer: from the same q, one cemodel MF iteration (E-step, then
    the Normal-Wishart update) gives what BayesianGaussianMixture's next iteration gives."""
    sklearn = pytest.importorskip("sklearn.mixture")
    x, _ = _mixture()
    k, d = 3, 2
    module = compile_model(REPO / "stdlib_models" / "gmm_normal_wishart.cem", {"K": k})
    hypers = dict(alpha=1.0, m0=np.zeros(d), kappa0=0.01, nu0=d + 2.0, W0=np.eye(d))
    theirs = sklearn.BayesianGaussianMixture(
        n_components=k, covariance_type="full",
        weight_concentration_prior_type="dirichlet_distribution", weight_concentration_prior=1.0,
        mean_precision_prior=0.01, mean_prior=np.zeros(d), degrees_of_freedom_prior=d + 2.0,
        covariance_prior=np.eye(d), reg_covar=0.0, max_iter=1, warm_start=True, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # one iteration per call: sklearn warns it stopped
        theirs.fit(x)
        for _ in range(3):
            # sklearn's q: covariances_ = W⁻¹ / ν (its precisions_ are E[Λ] = ν W)
            scale = np.linalg.inv(theirs.covariances_ * theirs.degrees_of_freedom_[:, None, None])
            value, logdet, prec_mean, quad = rt.normal_wishart_natural(
                theirs.means_, theirs.mean_precision_, theirs.degrees_of_freedom_, scale)
            init = {"lam_pi_log": rt.dirichlet_natural(theirs.weight_concentration_)[0][None],
                    "lam_mu_Lambda_value": value, "lam_mu_Lambda_logdet": logdet,
                    "lam_mu_Lambda_prec_mean": prec_mean, "lam_mu_Lambda_quad": quad}
            ours = module.fit({"x": x}, hypers=hypers, max_iter=1, init=init)
            theirs.fit(x)
            np.testing.assert_allclose(ours["pi.alpha"], theirs.weight_concentration_,
                                       rtol=1e-10)
            np.testing.assert_allclose(ours["mu_Lambda.beta"], theirs.mean_precision_,
                                       rtol=1e-10)
            np.testing.assert_allclose(ours["mu_Lambda.mean"], theirs.means_, rtol=1e-9,
                                       atol=1e-12)
            np.testing.assert_allclose(ours["mu_Lambda.dof"], theirs.degrees_of_freedom_,
                                       rtol=1e-10)
            np.testing.assert_allclose(ours["E[value mu_Lambda]"], theirs.precisions_,
                                       rtol=1e-9)


def test_gmm_block_fits_with_every_method():
    from sklearn.metrics import adjusted_rand_score

    x, truth = _mixture()
    module = compile_model(REPO / "stdlib_models" / "gmm_normal_wishart.cem", {"K": 3})
    res = module.fit({"x": x}, max_iter=200, tol=1e-9)
    assert never_decreases(res.elbo)
    assert adjusted_rand_score(truth, res["z.probs"].argmax(1)) > 0.95
    np.testing.assert_allclose(np.sort(res["mu.mean"][:, 0]), [0.0, 0.0, 5.0], atol=0.3)
    for method, options in (("svi", {}), ("svi+", {"effective_batch_size": 50}),
                            ("ssvi-a", {})):
        fitter = module.fit_ssvi_a if method == "ssvi-a" else module.fit_svi
        fit = fitter({"x": x}, batch_size=100, epochs=15, seed=0, **options)
        assert np.all(np.isfinite(fit["mu_Lambda.mean"])), method
        assert adjusted_rand_score(truth, module.fit({"x": x}, init=fit.state, max_iter=1)[
            "z.probs"].argmax(1)) > 0.9, method
    # KLC-CG with the blocks collapsed, from the mean-field q(z): L_KL ≥ L_MF there, with
    # equality at a mean-field fixed point (Hensman et al. 2012, eq. 9), and CG only climbs
    klc = module.fit_klc({"x": x}, cg="fr", max_iter=300,
                         init={"z": np.log(np.maximum(res["z.probs"], 1e-300))})
    assert klc.elbo[0] == pytest.approx(res.elbo[-1], abs=1e-3)
    assert klc.elbo[-1] >= klc.elbo[0] - 1e-9
    random = module.fit_klc({"x": x}, cg="fr", max_iter=500, seed=1)
    assert adjusted_rand_score(truth, random["z.probs"].argmax(1)) > 0.9


def test_a_mean_read_any_other_way_stays_mean_field(tmp_path):
    """A second child reading mu with a known precision breaks the joint conjugacy: the
    pair stays two factors (and still fits)."""
    text = NORMAL_GAMMA + "    observe w[n] ~ Normal(mu, 4.0)\n"
    plan = run_stages(*read_source(_write(tmp_path, text))).plan
    assert not plan.model.blocks
    assert {v.name for v in plan.model.latents} == {"mu", "tau"}
    # check says which statement kept them apart
    assert ("mu, tau stay two factors q(mu) q(tau): 'w' (m.cem:11) reads mu with a precision "
            "other than the matching tau times a constant") in check_report(plan)
    # a child whose precision is another variable's
    text = NORMAL_GAMMA.replace("observe y[n] ~ Normal(mu, tau)", "observe y[n] ~ Normal(mu, s)")
    text = text.replace("tau ~ Gamma(a0, b0)\n", "tau ~ Gamma(a0, b0)\ns ~ Gamma(a0, b0)\n")
    assert not run_stages(*read_source(_write(tmp_path, text))).plan.model.blocks


def test_blocks_under_gates_with_a_latent_prior_mean(tmp_path):
    """A 1-D mixture whose component means share a latent centre: mu[k] and tau[k] form
    per-component Normal-Gamma blocks, gated by z; the centre m gets its messages through
    the blocks' joint statistics. The MF ELBO never decreases and the components are found."""
    text = """model mix
dim K = 2
dim N
m ~ Normal(0.0, 0.01)
pi ~ Dirichlet(1.0, K)
plate comps k in K:
    tau[k] ~ Gamma(2.0, 1.0)
    mu[k] ~ Normal(m, 0.1 * tau[k])
plate obs n in N:
    z[n] ~ Categorical(pi)
    observe y[n] ~ Normal(mu[z[n]], tau[z[n]])
"""
    stages = run_stages(*read_source(_write(tmp_path, text)))
    assert [b.name for b in stages.model.blocks] == ["mu_tau"]
    out = check_report(stages.plan)
    assert "precision = 0.01 + Σ_{k} 0.1·E[tau[k]]" in out
    assert "precision·mean = Σ_{k} 0.1·E[tau[k]·mu[k]]" in out  # (the prior mean 0 drops)
    assert "β·mean = 0.1·E[m] + Σ_{n} y[n]·q(z[n] = k)" in out
    rng = np.random.default_rng(3)
    truth = rng.integers(0, 2, 400)
    y = np.where(truth == 0, -3.0, 4.0) + rng.normal(0.0, 0.5, 400)
    res = compile_model(_write(tmp_path, text)).fit({"y": y}, max_iter=300, tol=1e-10)
    assert never_decreases(res.elbo)
    np.testing.assert_allclose(np.sort(res["mu.mean"]), [-3.0, 4.0], atol=0.15)
    np.testing.assert_allclose(res["tau.shape"] / res["tau.rate"], [4.0, 4.0], rtol=0.25)


def test_ssvi_applies_to_a_normal_gamma_block(compiled):
    """hierarchical_normal.cem's (mu, tau_b) is a Normal-Gamma block; SSVI's V(β, λ) for it
    (cemodel.runtime.ssvi.ssvi_normal_gamma) keeps SSVI available and it reaches MF's fit.
    V's noise is heavy-tailed here: about one start in four wanders off (before and after the
    first step became SSVI-A's), so the best of three restarts is compared, as in practice."""
    rng = np.random.default_rng(3)
    groups, per = 30, 100
    theta = 5.0 + rng.normal(size=groups) / np.sqrt(0.25)
    group = np.repeat(np.arange(groups), per)
    y = theta[group] + rng.normal(size=groups * per) / np.sqrt(4.0)
    module = compiled("hierarchical_normal")
    assert [b.name for b in run_stages(*read_source(
        REPO / "stdlib_models" / "hierarchical_normal.cem")).model.blocks] == ["mu_tau_b"]
    assert module.METHODS["ssvi"] == "yes"
    mf = module.fit({"y": y, "group": group}, max_iter=500)
    fit = max((module.fit_ssvi({"y": y, "group": group}, batch_size=600, epochs=40, seed=seed)
               for seed in range(3)), key=lambda result: result.elbo[-1])
    assert fit["mu.mean"] == pytest.approx(mf["mu.mean"], abs=0.02)
    assert fit["tau_b.shape"] / fit["tau_b.rate"] == pytest.approx(
        mf["tau_b.shape"] / mf["tau_b.rate"], rel=0.05)
    np.testing.assert_allclose(fit["theta.mean"], theta, atol=0.2)
    assert fit.elbo[-1] == pytest.approx(mf.elbo[-1], abs=5.0)


def test_a_block_read_through_a_linear_mean_and_a_scaled_precision_stays_exact(tmp_path):
    """Children may read the mean as a + b·mu and the precision as c·tau, and other children
    may read tau alone: every term is still linear in (log τ, τ, τμ, τμ²), the posterior is
    Normal-Gamma, and the ELBO equals the log marginal likelihood (here by quadrature)."""
    from scipy import integrate, stats

    text = """model corner
dim N
hyper k = 0.5
tau ~ Gamma(2.0, 1.0)
mu ~ Normal(0.0, k * tau)
plate obs n in N:
    observe y[n] ~ Normal(mu, tau)
    observe w[n] ~ Normal(0.0, tau)
    observe v[n] ~ Normal(2.0 * mu + 1.0, tau * 3.0)
"""
    stages = run_stages(*read_source(_write(tmp_path, text)))
    assert [b.name for b in stages.model.blocks] == ["mu_tau"]
    rng = np.random.default_rng(0)
    n = 50
    y, w = rng.normal(1.0, 1.0, n), rng.normal(0.0, 1.0, n)
    v = 3.0 + rng.normal(0.0, 1.0 / np.sqrt(3.0), n)
    res = compile_model(_write(tmp_path, text)).fit({"y": y, "w": w, "v": v}, max_iter=10)

    def log_joint(mu, tau):
        return (stats.gamma.logpdf(tau, 2.0) + stats.norm.logpdf(mu, 0, 1 / np.sqrt(0.5 * tau))
                + stats.norm.logpdf(y, mu, 1 / np.sqrt(tau)).sum()
                + stats.norm.logpdf(w, 0, 1 / np.sqrt(tau)).sum()
                + stats.norm.logpdf(v, 2 * mu + 1, 1 / np.sqrt(3 * tau)).sum())

    top = log_joint(res["mu.mean"], res["tau.shape"] / res["tau.rate"])
    mass, _ = integrate.dblquad(lambda mu, tau: np.exp(log_joint(mu, tau) - top),
                                0.05, 5.0, 0.5, 1.6, epsabs=1e-12)
    assert res.elbo[-1] == pytest.approx(top + np.log(mass), abs=1e-6)


NG_MIXTURE = """model ngmix
dim K = 2
dim N
pi ~ Dirichlet(1.0, K)
plate comps k in K:
    tau[k] ~ Gamma(1.0, 1.0)
    mu[k] ~ Normal(0.0, 0.1 * tau[k])
plate pts n in N:
    z[n] ~ Categorical(pi)
    observe x[n] ~ Normal(mu[z[n]], tau[z[n]])
"""


@pytest.mark.parametrize("member, other", [("mu", "precision"), ("tau", "mean")])
def test_collapsing_a_member_of_a_block_names_the_block(tmp_path, member, other):
    """--collapse mu said "'mu' is not a variable of the model": it is, fitted as one factor
    with tau; the error names the block to collapse instead."""
    from cemodel.errors import CemError

    with pytest.raises(CemError, match=f"'{member}' is fitted jointly with its {other} as "
                                       "'mu_tau'.*collapse 'mu_tau'"):
        run_stages(*read_source(_write(tmp_path, NG_MIXTURE)), None, (member,))
    plan = run_stages(*read_source(_write(tmp_path, NG_MIXTURE)), None, ("pi", "mu_tau")).plan
    assert set(plan.collapse.collapsed) == {"pi", "mu_tau"}


def test_a_multivariate_mean_with_a_gamma_precision_is_named_as_two_factors(tmp_path):
    """Bayesian linear regression with a Normal-Gamma prior (w ~ MVN(0, eye(P)·l0·tau)) has no
    joint family: check says the pair stays two factors and why, instead of nothing."""
    text = ("model m\ndim P\ndim N\nhyper l0 = 0.1\ntau ~ Gamma(2.0, 2.0)\n"
            "w ~ MultivariateNormal(zeros(P), eye(P) * l0 * tau)\nplate obs n in N:\n"
            "    data x[n] : vector(P)\n    observe y[n] ~ Normal(dot(x[n], w), tau)\n")
    plan = run_stages(*read_source(_write(tmp_path, text))).plan
    assert not plan.model.blocks
    assert ("w, tau stay two factors q(w) q(tau): w's prior precision is a constant times the "
            "Gamma tau, and cemodel's joint factors are Normal–Gamma and "
            "MultivariateNormal–Wishart only") in check_report(plan)
