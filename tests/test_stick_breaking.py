"""Stick-breaking (truncated Dirichlet-process) weights: ``StickBreaking(alpha, K)`` broken into
Beta(1, alpha) sticks by ``cemodel.augment_sticks`` (Blei & Jordan 2006, eqs. 18-20).

The sticks' conditionals against a numpy reimplementation of the closed-form Beta updates,
E[log pi] against the sticks' digammas through the assignments' fixed point, recovery of the
number of clusters, the components report, every listed method on dp_gmm, and the refusals.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import digamma, logsumexp
from sklearn.metrics import adjusted_rand_score

from cemodel.check import check_report
from cemodel.compiler import run_stages
from cemodel.errors import CemConjugacyError, CemError, CemModelError
from cemodel.runtime import stick_components
from cemodel.runtime.drivers import DRIVERS

from .helpers import never_decreases

K = 10  # the truncation of the tests (dp_gmm's default is 20)


@pytest.fixture(scope="module")
def dp_gmm(compiled):
    return compiled("dp_gmm")


@pytest.fixture(scope="module")
def clusters():
    """150 points from 3 well-separated 2-D Gaussians (weights .5, .3, .2)."""
    rng = np.random.default_rng(0)
    z = rng.choice(3, 150, p=[0.5, 0.3, 0.2])
    x = np.array([[0.0, 0.0], [10.0, 0.0], [0.0, 10.0]])[z] + rng.normal(size=(150, 2))
    return x, z


@pytest.fixture(scope="module")
def mf_fit(dp_gmm, clusters):
    x, _ = clusters
    return dp_gmm.fit({"x": x}, dims={"K": K}, hypers={"alpha": 0.7}, max_iter=500, tol=1e-14,
                      seed=0)


def test_sticks_are_the_closed_form_beta_conditionals(mf_fit):
    """gamma_k1 = 1 + sum_n phi_nk, gamma_k2 = alpha + sum_n sum_{j>k} phi_nj (B&J eqs. 18-19)
    from the fit's own q(z); the K-th stick (v_K = 1) is read by nothing: its prior."""
    phi = mf_fit["z.probs"]
    counts = phi.sum(axis=0)
    above = counts[::-1].cumsum()[::-1] - counts  # sum_{j>k} N_j
    a, b = mf_fit["pi_sticks.a"], mf_fit["pi_sticks.b"]
    np.testing.assert_allclose(a[:-1], 1.0 + counts[:-1], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(b[:-1], 0.7 + above[:-1], rtol=1e-12, atol=1e-12)
    assert (a[-1], b[-1]) == pytest.approx((1.0, 0.7), abs=1e-12)


def test_assignments_read_log_pi_of_the_sticks(mf_fit, clusters):
    """At MF's fixed point q(z_n = k) ∝ exp(E[log pi_k] + E[log N(x_n | mu_k, Lambda_k)]) with
    E[log pi_k] = E[log v_k] + sum_{j<k} E[log(1 - v_j)] (B&J eq. 20), in numpy."""
    x, _ = clusters
    a, b = mf_fit["pi_sticks.a"], mf_fit["pi_sticks.b"]
    e_log_v, e_log1m = digamma(a) - digamma(a + b), digamma(b) - digamma(a + b)
    e_log_v[-1] = 0.0
    e_log_pi = e_log_v + np.concatenate(([0.0], np.cumsum(e_log1m[:-1])))
    lam, logdet = mf_fit["E[value Lambda]"], mf_fit["E[logdet Lambda]"]
    mu, outer = mf_fit["E[value mu]"], mf_fit["E[outer mu]"]
    quad = (np.einsum("ni,kij,nj->nk", x, lam, x) - 2 * np.einsum("ni,kij,kj->nk", x, lam, mu)
            + np.einsum("kij,kij->k", lam, outer))
    log_phi = e_log_pi + 0.5 * logdet - 0.5 * quad
    phi = np.exp(log_phi - logsumexp(log_phi, axis=1, keepdims=True))
    np.testing.assert_allclose(mf_fit["z.probs"], phi, atol=1e-8)


def test_dp_gmm_recovers_three_clusters_with_a_monotone_elbo(dp_gmm, clusters, mf_fit):
    x, z = clusters
    assert never_decreases(mf_fit.elbo)
    components = mf_fit.notes["components"]["pi"]
    assert components["components_used"] == 3
    assert adjusted_rand_score(z, mf_fit["z.probs"].argmax(axis=1)) >= 0.95
    np.testing.assert_allclose(components["counts"].sum(), len(x), rtol=1e-9)
    assert components["weights"].sum() == pytest.approx(1.0, abs=1e-12)
    used = np.sort(components["counts"])[::-1][:3] / len(x)
    np.testing.assert_allclose(used, np.sort(np.bincount(z) / len(x))[::-1], atol=0.02)


def test_cemodel_fit_prints_the_components_used(dp_gmm, clusters, tmp_path, capsys):
    from pathlib import Path

    from cemodel.cli import main

    data = tmp_path / "points.npz"
    np.savez(data, x=clusters[0])
    model = Path(__file__).resolve().parents[1] / "stdlib_models" / "dp_gmm.cem"
    assert main(["fit", str(model), "--data", str(data), "-o", str(tmp_path / "p.npz")]) == 0
    assert "pi: 3 of 20 components used" in capsys.readouterr().out


def test_stick_components_by_hand():
    """E[pi] from the sticks' means, counts from a - 1 and b_{K-1} - alpha, the 1% rule."""
    a = np.array([61.0, 31.0, 1.5, 1.0])
    b = np.array([40.5, 10.5, 10.0, 0.5])  # alpha = 0.5: N = (60, 30, 0.5, 9.5)
    out = stick_components(a, b, 0.5)
    np.testing.assert_allclose(out["counts"], [60.0, 30.0, 0.5, 9.5])
    v = a / (a + b)
    expected = [v[0], (1 - v[0]) * v[1], (1 - v[0]) * (1 - v[1]) * v[2],
                (1 - v[0]) * (1 - v[1]) * (1 - v[2])]
    np.testing.assert_allclose(out["weights"], expected, rtol=1e-14)
    assert out["components_used"] == 3  # 0.5 items < max(1, 1% of 100)


def test_check_lists_the_sticks_as_introduced():
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "stdlib_models" / "dp_gmm.cem"
    report = check_report(run_stages(path.read_text(), path.name).plan)
    assert "introduced by cemodel" in report
    assert "pi_sticks: pi ~ StickBreaking is broken into Beta(1, α) sticks" in report
    assert "pi_sticks[k] ~ Beta  [introduced in plates sticks_pi]  (dp_gmm.cem:" in report
    assert "a = 1 + Σ_{n} q(z[n] = k)·[k < K]" in report
    assert "b = alpha + Σ_{n,v} q(z[n] = v)·[k < v]" in report


# every method dp_gmm's table lists, with the options of a quick run: the SVI steps on the
# small-data default schedule (334 steps here); SSVI-A and SSVI, whose sampled globals keep
# the noise of a large step, on the large-data one for 90 steps (ρ ends at 0.04)
_SAMPLED = {"batch_size": 50, "epochs": 30, "kappa": 0.7, "tau": 10.0}
_RUNS = {"svi": {"batch_size": 50}, "svi+": {"batch_size": 50, "effective_batch_size": 25},
         "svi-avg": {"batch_size": 50}, "ssvi-a": _SAMPLED, "ssvi": _SAMPLED}


def test_every_listed_method_runs_on_dp_gmm(dp_gmm, clusters):
    """Each method of the table ends with the three clusters found (ARI >= 0.9; SSVI-A keeps
    some items in components drawn from their prior, so it uses more of them)."""
    x, z = clusters
    listed = [m for m, why in dp_gmm.METHODS.items() if why.startswith("yes")]
    assert set(listed) == {"mf", *_RUNS}  # klc is refused: mu and Lambda are not d-separated
    assert "not d-separated" in dp_gmm.METHODS["klc"]
    for method, options in _RUNS.items():
        fit = DRIVERS[method].run(dp_gmm, {"x": x}, dims={"K": K}, seed=0, **options)
        assert np.all(np.isfinite(fit.elbo)), method
        assert adjusted_rand_score(z, fit["z.probs"].argmax(axis=1)) >= 0.9, method
        assert fit.notes["components"]["pi"]["components_used"] >= 3, method
    steps = [s for s, why in dp_gmm.LOCAL_STEPS.items() if why.startswith("yes") and s != "mf"]
    for local in steps:
        fit = dp_gmm.fit({"x": x}, dims={"K": K}, seed=0, local=local)
        assert adjusted_rand_score(z, fit["z.probs"].argmax(axis=1)) >= 0.95, local


def _src(*lines: str) -> str:
    return "\n".join(("model m", "dim K = 5", "dim N", "hyper alpha = 1.0", *lines)) + "\n"


_MIXTURE = ("plate points n in N:", "    z[n] ~ Categorical(pi)",
            "    observe y[n] ~ Normal(0.0, 1.0)")

# (id, source, error class, line, column, substring of the message, substring of the hint)
REFUSALS = [
    ("truncation-not-a-dimension", _src("pi ~ StickBreaking(alpha, 2.5)", *_MIXTURE),
     CemModelError, 5, 27, "second argument of StickBreaking(a, K) is a dimension",
     "dim K = 10"),
    ("latent-truncation", _src("w ~ Gamma(1, 1)", "pi ~ StickBreaking(alpha, w)", *_MIXTURE),
     CemModelError, 6, 27, "second argument of StickBreaking(a, K) is a dimension", None),
    ("one-argument", _src("pi ~ StickBreaking(alpha)", *_MIXTURE),
     CemModelError, 5, 6, "StickBreaking takes 2 arguments (a, K), got 1", "StickBreaking(a, K)"),
    ("vector-concentration", _src("hyper c = [1.0, 2.0]", "pi ~ StickBreaking(c, K)", *_MIXTURE),
     CemModelError, 6, 20, "StickBreaking(a, K) takes a scalar a", None),
    ("latent-concentration", _src("a ~ Gamma(1, 1)", "pi ~ StickBreaking(a, K)", *_MIXTURE),
     CemConjugacyError, 6, 20, "concentration of StickBreaking 'pi' depends on latent 'a'",
     "hyperparameter"),
    ("inside-a-plate", _src("dim G", "plate groups g in G:", "    pi[g] ~ StickBreaking(alpha, K)",
                            "    plate points n in N:", "        z[g, n] ~ Categorical(pi[g])",
                            "        observe y[g, n] ~ Normal(0.0, 1.0)"),
     CemModelError, 7, 5, "supported at the top level only", "Dirichlet(a, K)"),
    ("observed", _src("observe pi ~ StickBreaking(alpha, K)", *_MIXTURE),
     CemModelError, 5, 1, "StickBreaking 'pi' cannot be observed", "Dirichlet"),
    ("inside-an-expression", _src("hyper c = ones(K)", "pi ~ StickBreaking(alpha, K)",
                                  "plate points n in N:",
                                  "    observe y[n] ~ Normal(dot(pi, c), 1.0)"),
     CemConjugacyError, 8, 31, "stick-breaking weights 'pi' inside an expression",
     "probabilities of a Categorical"),
    ("read-as-a-value", _src("pi ~ StickBreaking(alpha, K)", "plate points n in N:",
                             "    observe y[n] ~ Dirichlet(pi)"),
     CemConjugacyError, 7, 30, "reads stick-breaking weights 'pi' through E[value]",
     "probabilities of a Categorical"),
]


@pytest.mark.parametrize("text, error, line, col, message, hint",
                         [case[1:] for case in REFUSALS], ids=[case[0] for case in REFUSALS])
def test_forms_that_do_not_apply_are_refused_where_they_are(text, error, line, col, message,
                                                            hint):
    with pytest.raises(CemError) as info:
        run_stages(text, "bad.cem")
    exc = info.value
    assert type(exc) is error, f"{type(exc).__name__}: {exc}"
    assert (exc.span.line, exc.span.column) == (line, col), str(exc)
    assert message in exc.message, exc.message
    if hint is not None:
        assert exc.hint is not None and hint in exc.hint, exc.hint
    rendered = str(exc)
    assert rendered.startswith(f"bad.cem:{line}:{col}: error: "), rendered
    assert rendered.splitlines()[1] == "    " + text.splitlines()[line - 1]


def test_multinomial_counts_read_stick_breaking_weights_too():
    """Any read through log pi (a Multinomial's probabilities) is conjugate to the sticks."""
    text = _src("dim T", "pi ~ StickBreaking(alpha, K)", "plate draws n in N:",
                "    observe y[n] ~ Multinomial(20, pi)")
    report = check_report(run_stages(text, "ok.cem").plan)
    assert "b = alpha + Σ_{n,v} y[n]_v·[k < v]" in report


# -- dp_mixture_of_multinomials: the ELBO's stick terms and KLC (the sticks collapsed) ------

KM, V, D = 5, 6, 9  # truncation, vocabulary, documents


@pytest.fixture(scope="module")
def dp_mom(compiled):
    return compiled("dp_mixture_of_multinomials")


@pytest.fixture(scope="module")
def counts():
    rng = np.random.default_rng(3)
    topics = rng.dirichlet(np.full(V, 0.3), 3)
    return np.stack([rng.multinomial(12, topics[c]) for c in rng.integers(0, 3, D)])


def _beta_kl(a, b, a2, b2) -> float:
    """KL(Beta(a, b) ‖ Beta(a2, b2)), summed."""
    from scipy.special import betaln

    return float(np.sum(betaln(a2, b2) - betaln(a, b) + (a - a2) * digamma(a)
                        + (b - b2) * digamma(b) + (a2 - a + b2 - b) * digamma(a + b)))


def _mf_elbo(x, theta, a, b, a_phi, alpha=1.0, eta=0.1) -> float:
    """The mean-field ELBO of the truncated DP mixture of multinomials in numpy: sticks
    q(v_k) = Beta(a_k, b_k) (the K-th unread), q(phi_k) = Dirichlet(a_phi_k), q(c) softmax."""
    from scipy.special import gammaln, softmax

    q = softmax(theta, axis=1)
    e_log_v, e_log1m = digamma(a) - digamma(a + b), digamma(b) - digamma(a + b)
    e_log_pi = np.append(e_log_v[:-1], 0.0) + np.concatenate(([0.0], np.cumsum(e_log1m[:-1])))
    e_phi = digamma(a_phi) - digamma(a_phi.sum(1, keepdims=True))
    value = -_beta_kl(a, b, np.ones(KM), np.full(KM, alpha))  # E[log p(v)] − E[log q(v)]
    a0 = a_phi.sum(-1)
    value += KM * (gammaln(V * eta) - V * gammaln(eta)) + (eta - 1) * e_phi.sum()
    value += np.sum(gammaln(a_phi).sum(-1) - gammaln(a0) + (a0 - V) * digamma(a0)
                    - ((a_phi - 1) * digamma(a_phi)).sum(-1))  # the Dirichlets' entropy
    value += (q @ e_log_pi).sum() + np.sum(q * (x @ e_phi.T)) - np.sum(q * np.log(q))
    return float(value)


def _optimal_sticks(x, theta, alpha=1.0, eta=0.1):
    """q*(X) given q(c): B&J eqs. 18-19 for the sticks, eta + sum_d q_dk w_d for phi."""
    from scipy.special import softmax

    n = softmax(theta, axis=1).sum(0)
    above = n[::-1].cumsum()[::-1] - n
    a, b = 1.0 + n, alpha + above
    a[-1], b[-1] = 1.0, alpha
    return a, b, eta + softmax(theta, axis=1).T @ x


def test_klc_bound_is_the_numpy_elbo_at_the_optimal_sticks(dp_mom, counts):
    """L_KL (sticks and phi collapsed) equals the numpy ELBO at q*(X), and is above it by
    exactly KL(q(X) ‖ q*(X)) for random sticks and topics (Hensman et al. 2012, eqs. 6-9):
    every stick term of the module's bound is the closed form."""
    assert "collapses pi_sticks, phi" in dp_mom.METHODS["klc"]
    state = dp_mom._prepare({"w": counts}, None, {"K": KM}, 0, None, "random", 1, 0.0)
    rng = np.random.default_rng(0)
    for _ in range(10):
        theta = rng.normal(0.0, 2.0, (D, KM))
        bound = dp_mom._klc_bound(state, [theta])
        a, b, a_phi = _optimal_sticks(counts, theta)
        assert bound == pytest.approx(_mf_elbo(counts, theta, a, b, a_phi), rel=1e-10)
        np.testing.assert_allclose(state.lam_pi_sticks_log + 1.0, a, rtol=1e-12)
        np.testing.assert_allclose(state.lam_pi_sticks_log1m + 1.0, b, rtol=1e-12)
        a2, b2 = rng.gamma(2.0, 2.0, KM), rng.gamma(2.0, 2.0, KM)
        l_mf = _mf_elbo(counts, theta, a2, b2, a_phi)
        assert bound - l_mf == pytest.approx(_beta_kl(a2, b2, a, b), rel=1e-8, abs=1e-8)


def test_dp_mom_mf_and_klc_find_the_classes(dp_mom):
    """Three classes of documents with disjoint words: MF's ELBO and KLC's bound never
    decrease; the best of three starts of each uses three of the 10 components and recovers
    the classes (a start can end with one document alone in a fourth component: a local
    optimum 8-10 nats lower here, the known weakness of mean field on DP mixtures)."""
    rng = np.random.default_rng(4)
    classes = rng.choice(3, 60, p=[0.5, 0.3, 0.2])
    topics = np.kron(np.eye(3), np.ones(8)) / 8.0  # 24 words, 8 per class
    w = np.stack([rng.multinomial(30, topics[c]) for c in classes])
    for run in (dp_mom.fit, lambda data, **o: dp_mom.fit_klc(data, cg="fr", **o)):
        fits = [run({"w": w}, dims={"K": 10}, seed=seed) for seed in range(3)]
        assert all(never_decreases(fit.elbo) for fit in fits)
        best = max(fits, key=lambda fit: fit.elbo[-1])
        assert best.notes["components"]["pi"]["components_used"] == 3
        assert adjusted_rand_score(classes, best["E[onehot c]"].argmax(axis=1)) == 1.0


def test_empirical_bayes_sets_the_concentration_to_its_closed_form(dp_gmm, clusters):
    """learn=('alpha',): α maximising Σ_k E[log Beta(v_k; 1, α)] is K / −Σ_k E[log(1 − v_k)]
    (the unread K-th stick included; at the fixed point this is B&J's (K − 1) / −Σ_{k<K})."""
    x, _ = clusters
    fit = dp_gmm.fit({"x": x}, dims={"K": K}, learn=("alpha",), seed=0, tol=1e-12,
                     max_iter=1000)
    assert "alpha" in dp_gmm.LEARNABLE
    assert never_decreases(fit.elbo)
    e_log1m = fit["E[log1m pi_sticks]"]
    alpha = fit.hypers["alpha"]
    # α is set from the sticks of the iteration before the last, and α and the sticks
    # approach their joint fixed point slowly (an EM step each): 7e-6 apart at the stop
    assert alpha == pytest.approx(K / -e_log1m.sum(), rel=1e-4)
    assert alpha == pytest.approx((K - 1) / -e_log1m[:-1].sum(), rel=1e-4)
    assert fit.notes["components"]["pi"]["components_used"] == 3


def test_learn_beta_param_solves_its_equation():
    """ψ(a + b) − ψ(a) = −mean E[log x] for b ≠ 1 (Newton), a = −1 / mean for b = 1."""
    e_log = np.array([-0.4, -0.9, -0.2])
    from cemodel.runtime import learn_beta_param

    for b in (0.3, 2.5, 40.0):
        a = learn_beta_param(b, e_log)
        assert digamma(a + b) - digamma(a) == pytest.approx(-e_log.mean(), rel=1e-10)
    assert learn_beta_param(1.0, e_log) == pytest.approx(1.0 / 0.5, rel=1e-14)


def test_draws_of_the_sticks_break_into_weights_that_sum_to_one():
    """The posterior predictive and held-out scores draw π from the sticks' q: π_k = v_k
    Π_{j<k}(1 − v_j), the K-th stick 1; on average E[π] of the independent sticks."""
    from cemodel.runtime.sticks import weights_of_sticks

    rng = np.random.default_rng(0)
    a, b = np.array([3.0, 2.0, 5.0, 1.0]), np.array([4.0, 6.0, 1.5, 1.0])
    v = rng.beta(a, b, size=(200_000, 4))
    pi = weights_of_sticks(v)
    np.testing.assert_allclose(pi.sum(axis=-1), 1.0, rtol=1e-12)
    mean = a / (a + b)
    expected = mean * np.concatenate(([1.0], np.cumprod(1.0 - mean[:-1])))
    expected[-1] = np.prod(1.0 - mean[:-1])
    np.testing.assert_allclose(pi.mean(axis=0), expected, atol=3e-3)


def test_weights_share_the_axis_of_the_components(clusters):
    """The sticks run over K in a plate cemodel introduced (sticks_pi); exported, the weights
    pi[k], their sticks and the components mu[k] share the model's axis over K (components),
    and labels given for K label all three."""
    pytest.importorskip("arviz")
    import warnings

    import cemodel

    x, _ = clusters
    model = cemodel.Model("dp_gmm", K=K)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a short fit may not converge
        fit = model.fit({"x": x}, seed=0, max_iter=20)
    labels = [f"c{k}" for k in range(K)]
    posterior = fit.to_arviz(draws=5, seed=0, coords={"K": labels}).posterior
    assert posterior["pi"].dims == posterior["pi_sticks"].dims == ("chain", "draw", "components")
    assert posterior["mu"].dims[2] == "components"
    assert list(posterior["components"].values) == labels
    assert {"pi_sticks[c3]", "mu[c3, 0]"} <= set(fit.summary(coords={"K": labels}).index)
