"""Every conjugate role the compiler promises, on models written here (in no stdlib file).

Each single conjugate pair is checked against its closed-form posterior; models that are
conjugate only conditionally (mean-field) are checked for a monotone ELBO and recovery.
"""

import textwrap

import numpy as np
import pytest

from cemodel.compiler import compile_model

TOL = 1e-8


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    root = tmp_path_factory.mktemp("roles")

    def make(name: str, source: str, **settings):
        path = root / f"{name}.cem"
        path.write_text(textwrap.dedent(source))
        return compile_model(path, settings)

    return make


def monotone(trace):
    trace = np.asarray(trace)
    return np.all(np.diff(trace) >= -1e-9 * np.maximum(1.0, np.abs(trace[:-1])))


def test_gamma_on_normal_precision(build):
    mod = build("normal_precision", """
        model normal_precision
        dim N
        hyper a = 2.0
        hyper b = 3.0
        hyper m = 1.5
        tau ~ Gamma(a, b)
        plate obs n in N:
            observe x[n] ~ Normal(m, tau)
        """)
    x = np.random.default_rng(0).normal(1.5, 0.7, 40)
    res = mod.fit({"x": x})
    assert res["tau.shape"] == pytest.approx(2.0 + 40 / 2, rel=TOL)
    assert res["tau.rate"] == pytest.approx(3.0 + np.sum((x - 1.5) ** 2) / 2, rel=TOL)


def test_gamma_on_exponential_rate(build):
    mod = build("exponential_rate", """
        model exponential_rate
        dim N
        lam ~ Gamma(1.5, 2.0)
        plate obs n in N:
            observe t[n] ~ Exponential(lam)
        """)
    t = np.random.default_rng(1).exponential(0.5, 30)
    res = mod.fit({"t": t})
    assert res["lam.shape"] == pytest.approx(1.5 + 30, rel=TOL)
    assert res["lam.rate"] == pytest.approx(2.0 + t.sum(), rel=TOL)


def test_gamma_on_gamma_rate(build):
    mod = build("gamma_rate", """
        model gamma_rate
        dim N
        hyper k = 3.0
        r ~ Gamma(2.0, 1.0)
        plate obs n in N:
            observe y[n] ~ Gamma(k, r)
        """)
    y = np.random.default_rng(2).gamma(3.0, 0.5, 25)
    res = mod.fit({"y": y})
    assert res["r.shape"] == pytest.approx(2.0 + 25 * 3.0, rel=TOL)
    assert res["r.rate"] == pytest.approx(1.0 + y.sum(), rel=TOL)


def test_exponential_prior_has_gamma_posterior(build):
    mod = build("exponential_prior", """
        model exponential_prior
        dim N
        rate ~ Exponential(0.5)
        plate obs n in N:
            observe c[n] ~ Poisson(rate)
        """)
    c = np.random.default_rng(3).poisson(2.0, 20)
    res = mod.fit({"c": c})
    assert res["rate.shape"] == pytest.approx(1.0 + c.sum(), rel=TOL)
    assert res["rate.rate"] == pytest.approx(0.5 + 20, rel=TOL)


def test_beta_on_binomial(build):
    mod = build("beta_binomial", """
        model beta_binomial
        dim N
        p ~ Beta(1.0, 2.0)
        plate groups n in N:
            data trials[n] : int
            observe k[n] ~ Binomial(trials[n], p)
        """)
    rng = np.random.default_rng(4)
    trials = rng.integers(5, 20, 15)
    k = rng.binomial(trials, 0.3)
    res = mod.fit({"k": k, "trials": trials})
    assert res["p.a"] == pytest.approx(1.0 + k.sum(), rel=TOL)
    assert res["p.b"] == pytest.approx(2.0 + (trials - k).sum(), rel=TOL)


def test_mvn_on_mvn_mean(build):
    mod = build("mvn_mean", """
        model mvn_mean
        dim D
        dim N
        hyper m0 = zeros(D)
        hyper P0 = eye(D) * 0.5
        hyper L = eye(D) * 2.0
        mu ~ MultivariateNormal(m0, P0)
        plate obs n in N:
            observe x[n] ~ MultivariateNormal(mu, L)
        """)
    x = np.random.default_rng(5).normal([1.0, -2.0, 0.5], 0.7, (50, 3))
    res = mod.fit({"x": x})
    P = 0.5 * np.eye(3) + 50 * 2.0 * np.eye(3)
    mean = np.linalg.solve(P, 2.0 * x.sum(0))
    np.testing.assert_allclose(res["mu.precision"], P, rtol=TOL)
    np.testing.assert_allclose(res["mu.mean"], mean, rtol=TOL)


def test_wishart_on_mvn_precision(build):
    mod = build("wishart_precision", """
        model wishart_precision
        dim D
        dim N
        hyper m = zeros(D)
        hyper nu = D + 1
        hyper W = eye(D)
        Lambda ~ Wishart(nu, W)
        plate obs n in N:
            observe x[n] ~ MVN(m, Lambda)
        """)
    x = np.random.default_rng(6).multivariate_normal([0, 0], [[2.0, 0.6], [0.6, 1.0]], 80)
    res = mod.fit({"x": x})
    assert res["Lambda.dof"] == pytest.approx(3.0 + 80, rel=TOL)
    scale = np.linalg.inv(np.eye(2) + x.T @ x)
    np.testing.assert_allclose(res["Lambda.scale"], scale, rtol=1e-7)


def test_linear_predictor_is_bayesian_linear_regression(build):
    mod = build("linreg", """
        model linreg
        dim P
        dim N
        hyper P0 = eye(P) * 0.1
        hyper m0 = zeros(P)
        hyper tau = 4.0
        w ~ MultivariateNormal(m0, P0)
        plate rows n in N:
            data x[n] : vector(P)
            observe y[n] ~ Normal(dot(x[n], w), tau)
        """)
    rng = np.random.default_rng(7)
    X = rng.normal(size=(60, 3))
    y = X @ np.array([1.0, -0.5, 2.0]) + rng.normal(0, 0.5, 60)
    res = mod.fit({"x": X, "y": y})
    P = 0.1 * np.eye(3) + 4.0 * X.T @ X
    mean = np.linalg.solve(P, 4.0 * X.T @ y)
    np.testing.assert_allclose(res["w.precision"], P, rtol=TOL)
    np.testing.assert_allclose(res["w.mean"], mean, rtol=TOL)


def test_known_scale_of_a_rate(build):
    """Poisson(c[n] * lam): exposure times a Gamma rate stays conjugate."""
    mod = build("exposure", """
        model exposure
        dim N
        lam ~ Gamma(1.0, 1.0)
        plate obs n in N:
            data c[n] : real
            observe y[n] ~ Poisson(c[n] * lam)
        """)
    rng = np.random.default_rng(8)
    c = rng.uniform(0.5, 3.0, 30)
    y = rng.poisson(2.0 * c)
    res = mod.fit({"y": y, "c": c})
    assert res["lam.shape"] == pytest.approx(1.0 + y.sum(), rel=TOL)
    assert res["lam.rate"] == pytest.approx(1.0 + c.sum(), rel=TOL)


def test_normal_gamma_mean_field(build):
    """Unknown mean and precision: conjugate given each other; MF is monotone."""
    mod = build("normal_unknown", """
        model normal_unknown
        dim N
        mu ~ Normal(0.0, 0.01)
        tau ~ Gamma(1.0, 1.0)
        plate obs n in N:
            observe x[n] ~ Normal(mu, tau)
        """)
    x = np.random.default_rng(9).normal(3.0, 0.5, 200)
    res = mod.fit({"x": x}, max_iter=100, tol=1e-12)
    assert monotone(res.elbo)
    assert res["mu.mean"] == pytest.approx(x.mean(), rel=1e-3)
    assert res["tau.shape"] / res["tau.rate"] == pytest.approx(1 / x.var(), rel=0.05)


def test_gated_normal_mixture_with_gated_gamma_precisions(build):
    mod = build("normal_mixture", """
        model normal_mixture
        dim K = 3
        dim N
        pi ~ Dirichlet(1.0, K)
        plate comps k in K:
            mu[k] ~ Normal(0.0, 0.001)
            tau[k] ~ Gamma(1.0, 1.0)
        plate obs n in N:
            z[n] ~ Categorical(pi)
            observe x[n] ~ Normal(mu[z[n]], tau[z[n]])
        """)
    rng = np.random.default_rng(10)
    truth = np.array([-10.0, 0.0, 10.0])
    x = np.concatenate([rng.normal(m, 1.0, 150) for m in truth])
    res = mod.fit({"x": x}, max_iter=200)
    assert monotone(res.elbo)
    np.testing.assert_allclose(np.sort(res["mu.mean"]), truth, atol=0.3)


def test_hierarchical_gamma_rate(build):
    """Gamma rates with a Gamma hyperprior on their common rate (Gamma -> Gamma rate)."""
    mod = build("hierarchical_poisson", """
        model hierarchical_poisson
        dim G
        dim N
        beta ~ Gamma(1.0, 1.0)
        plate groups g in G:
            lam[g] ~ Gamma(2.0, beta)
        plate obs n in N:
            data group[n] : int
            observe y[n] ~ Poisson(lam[group[n]])
        """)
    rng = np.random.default_rng(12)
    rates = np.array([1.0, 4.0, 9.0])
    group = np.repeat(np.arange(3), 50)
    y = rng.poisson(rates[group])
    res = mod.fit({"y": y, "group": group}, max_iter=200, tol=1e-12)
    assert monotone(res.elbo)
    np.testing.assert_allclose(res["lam.shape"] / res["lam.rate"], rates, rtol=0.2)


RIDGE = """
    model ridge
    dim P
    dim N
    hyper c = 0.5
    tau ~ Gamma(1.0, 1.0)
    w ~ MultivariateNormal(zeros(P), PRECISION)
    plate rows n in N:
        data x[n] : vector(P)
        observe y[n] ~ Normal(dot(x[n], w), tau)
    """


def test_weight_precision_scaled_by_the_noise_precision(build):
    """MVN(0, eye(P)·c·tau) with tau ~ Gamma: log|c·tau·I| = P log c + P log tau is linear in
    E[log tau] (it was refused). E[w] is the ridge solution (XᵀX + cI)⁻¹Xᵀy, as in the exact
    Normal-Gamma posterior, and q(tau) gets shape a0 + (P + N)/2. The other spellings of the
    product derive the same conditionals."""
    from cemodel.check import check_report
    from cemodel.compiler import run_stages

    reports = {spelling: check_report(run_stages(
        textwrap.dedent(RIDGE.replace("PRECISION", spelling)), "ridge.cem", {}).plan)
        for spelling in ("eye(P) * c * tau", "tau * eye(P) * c", "c * tau * eye(P)")}
    assert all("shape = 1 + 0.5·P + 0.5·Σ_{n} 1" in text for text in reports.values())
    mod = build("ridge", RIDGE.replace("PRECISION", "eye(P) * c * tau"))
    rng = np.random.default_rng(8)
    X = rng.normal(size=(80, 3))
    y = X @ np.array([1.0, -0.5, 2.0]) + rng.normal(0, 0.5, 80)
    res = mod.fit({"x": X, "y": y}, max_iter=500, tol=1e-13)
    assert monotone(res.elbo)
    ridge = np.linalg.solve(X.T @ X + 0.5 * np.eye(3), X.T @ y)
    np.testing.assert_allclose(res["w.mean"], ridge, rtol=1e-8)
    assert res["tau.shape"] == pytest.approx(1.0 + (3 + 80) / 2, rel=TOL)
