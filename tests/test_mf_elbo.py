"""The MF ELBO never decreases, and equals an independent numpy implementation of the bound."""

import numpy as np
import pytest
import scipy.sparse as sp
from scipy import stats
from scipy.special import digamma, gammaln, multigammaln

MONOTONE_RTOL = 1e-9


def assert_monotone(trace):
    trace = np.asarray(trace)
    drops = trace[:-1] - trace[1:]
    allowed = MONOTONE_RTOL * np.maximum(1.0, np.abs(trace[:-1]))
    assert np.all(drops <= allowed), f"ELBO decreased: worst drop {drops.max()}"


def lda_corpus(seed=0, D=60, V=40, K=4, length=50):
    rng = np.random.default_rng(seed)
    topics = rng.dirichlet(np.full(V, 0.2), K)
    rows = []
    for _ in range(D):
        theta = rng.dirichlet(np.full(K, 0.3))
        z = rng.choice(K, length, p=theta)
        words = np.array([rng.choice(V, p=topics[k]) for k in z])
        rows.append(np.bincount(words, minlength=V))
    return sp.csr_matrix(np.array(rows, dtype=float))


def gmm_data(seed=0):
    rng = np.random.default_rng(seed)
    centres = np.array([[-4.0, 0.0], [4.0, 0.0], [0.0, 5.0]])
    z = rng.integers(0, 3, 300)
    return centres[z] + rng.normal(0, 1.0, (300, 2)), z


def bernoulli_data(seed=0):
    rng = np.random.default_rng(seed)
    probs = np.where(rng.random((4, 25)) < 0.5, 0.85, 0.15)
    z = rng.integers(0, 4, 250)
    return (rng.random((250, 25)) < probs[z]).astype(int), z


def test_lda_elbo_monotone(compiled):
    res = compiled("lda", K=4).fit({"w": lda_corpus()}, max_iter=60, tol=0.0)
    assert len(res.elbo) == 60
    assert_monotone(res.elbo)


def test_gmm_elbo_monotone(compiled):
    x, _ = gmm_data()
    res = compiled("gmm", K=4).fit({"x": x}, max_iter=80, tol=0.0)
    assert_monotone(res.elbo)


def test_bernoulli_mixture_elbo_monotone(compiled):
    x, _ = bernoulli_data()
    res = compiled("bernoulli_mixture", K=8).fit({"x": x}, max_iter=60, tol=0.0)
    assert_monotone(res.elbo)


def test_poisson_mixture_elbo_monotone(compiled):
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.poisson(2, 150), rng.poisson(15, 150)])
    res = compiled("poisson_mixture", K=3).fit({"x": x}, max_iter=60, tol=0.0)
    assert_monotone(res.elbo)


# --- independent implementations of the bound ---------------------------------------------


def dirichlet_elog(alpha):
    return digamma(alpha) - digamma(alpha.sum(-1, keepdims=True))


def test_gmm_elbo_matches_numpy(compiled):
    """Recompute the bound from the returned q(pi), q(mu), q(Lambda), q(z)."""
    x, _ = gmm_data(1)
    res = compiled("gmm", K=3).fit({"x": x}, max_iter=15, tol=0.0)
    N, D = x.shape
    K = 3
    alpha0, m0, P0, nu0, W0 = 1.0, np.zeros(D), 0.01 * np.eye(D), D + 2.0, np.eye(D)
    a = res["pi.alpha"]
    m, P = res["mu.mean"], res["mu.precision"]
    nu, W = res["Lambda.dof"], res["Lambda.scale"]
    r = res["z.probs"]
    elog_pi = dirichlet_elog(a)
    S = np.linalg.inv(P)
    E_lam = nu[:, None, None] * W
    E_logdet = np.array([
        sum(digamma((nu[k] + 1 - i) / 2) for i in range(1, D + 1)) + D * np.log(2)
        + np.linalg.slogdet(W[k])[1] for k in range(K)
    ])
    elbo = gammaln(K * alpha0) - K * gammaln(alpha0) + (alpha0 - 1) * elog_pi.sum()
    for k in range(K):
        d = m[k] - m0
        elbo += (0.5 * np.linalg.slogdet(P0)[1] - 0.5 * D * np.log(2 * np.pi)
                 - 0.5 * np.trace(P0 @ (S[k] + np.outer(d, d))))
        elbo += ((nu0 - D - 1) / 2 * E_logdet[k] - 0.5 * np.trace(np.linalg.inv(W0) @ E_lam[k])
                 - nu0 * D / 2 * np.log(2) - nu0 / 2 * np.linalg.slogdet(W0)[1]
                 - multigammaln(nu0 / 2, D))
        diff = x - m[k]
        quad = np.einsum("ni,ij,nj->n", diff, E_lam[k], diff) + np.trace(E_lam[k] @ S[k])
        loglik = 0.5 * E_logdet[k] - 0.5 * D * np.log(2 * np.pi) - 0.5 * quad
        elbo += np.sum(r[:, k] * (elog_pi[k] + loglik))
        elbo += stats.multivariate_normal(m[k], S[k]).entropy()
        elbo += stats.wishart(df=nu[k], scale=W[k]).entropy()
    elbo += stats.dirichlet(a).entropy()
    elbo += -np.sum(r * np.log(np.where(r > 0, r, 1.0)))
    assert res.elbo[-1] == pytest.approx(elbo, rel=1e-10)


def test_bernoulli_mixture_elbo_matches_numpy(compiled):
    x, _ = bernoulli_data(2)
    K = 6
    res = compiled("bernoulli_mixture", K=K).fit({"x": x}, max_iter=10, tol=0.0)
    alpha, a0, b0 = 20.0 / K, 1.0, 1.0
    a_pi = res["pi.alpha"]
    pa, pb = res["p.a"], res["p.b"]
    r = res["z.probs"]
    elog_pi = dirichlet_elog(a_pi)
    elog_p = digamma(pa) - digamma(pa + pb)
    elog_1mp = digamma(pb) - digamma(pa + pb)
    elbo = gammaln(K * alpha) - K * gammaln(alpha) + (alpha - 1) * elog_pi.sum()
    elbo += np.sum((a0 - 1) * elog_p + (b0 - 1) * elog_1mp - (gammaln(a0) + gammaln(b0)
                                                              - gammaln(a0 + b0)))
    loglik = x @ elog_p.T + (1 - x) @ elog_1mp.T  # N × K
    elbo += np.sum(r * (elog_pi + loglik))
    elbo += stats.dirichlet(a_pi).entropy()
    elbo += np.sum(stats.beta(pa, pb).entropy())
    elbo += -np.sum(r * np.log(np.where(r > 0, r, 1.0)))
    assert res.elbo[-1] == pytest.approx(elbo, rel=1e-10)


def optimal_phi(gamma, elog_beta_ids):
    logphi = dirichlet_elog(gamma)[:, None] + elog_beta_ids
    phi = np.exp(logphi - logphi.max(0))
    return phi / phi.sum(0)


def numpy_lda_iteration(X, lam_beta, alpha, eta, local_tol=1e-3, max_local_iter=100):
    """One VBEM iteration of LDA written out by hand (Blei et al. 2003; Hoffman et al.)."""
    X = sp.csr_matrix(X)
    D, V = X.shape
    K = lam_beta.shape[0]
    beta = lam_beta + 1.0  # Dirichlet parameters
    elog_beta = dirichlet_elog(beta)
    sstats = np.zeros((K, V))
    elbo = 0.0
    for d in range(D):
        ids = X.indices[X.indptr[d]:X.indptr[d + 1]]
        cts = X.data[X.indptr[d]:X.indptr[d + 1]]
        gamma = np.full(K, alpha)
        for _ in range(max_local_iter):
            phi = optimal_phi(gamma, elog_beta[:, ids])
            new = alpha + phi @ cts
            change = np.mean(np.abs(new - gamma))
            gamma = new
            if change < local_tol:
                break
        phi = optimal_phi(gamma, elog_beta[:, ids])  # the E-step ends with q(z) from the final γ
        sstats[:, ids] += phi * cts
        elog_theta = dirichlet_elog(gamma)
        elbo += gammaln(K * alpha) - K * gammaln(alpha) + (alpha - 1) * elog_theta.sum()
        elbo += np.sum(cts * phi * elog_theta[:, None])
        elbo += stats.dirichlet(gamma).entropy()
        elbo += -np.sum(cts * phi * np.log(phi))
    beta_new = eta + sstats
    elog_beta_new = dirichlet_elog(beta_new)
    elbo += np.sum(sstats * elog_beta_new)
    elbo += K * (gammaln(V * eta) - V * gammaln(eta)) + (eta - 1) * elog_beta_new.sum()
    elbo += sum(stats.dirichlet(b).entropy() for b in beta_new)
    return beta_new, elbo


def test_lda_iteration_matches_numpy(compiled):
    """From the same warm start, one compiled VBEM iteration equals the hand-written one."""
    X = lda_corpus(3, D=30, V=25, K=3)
    rng = np.random.default_rng(7)
    lam_beta = rng.gamma(100.0, 0.01, (3, 25)) - 1.0
    mod = compiled("lda", K=3)
    res = mod.fit({"w": X}, max_iter=1, init={"lam_beta_log": lam_beta},
                  hypers={"alpha": 0.3, "eta": 0.05})
    beta_new, elbo = numpy_lda_iteration(X, lam_beta, 0.3, 0.05)
    np.testing.assert_allclose(res["beta.alpha"], beta_new, rtol=1e-9)
    assert res.elbo[0] == pytest.approx(elbo, rel=1e-10)
