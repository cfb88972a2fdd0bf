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


def squarem(first, middle, last):
    """SQUAREM (Varadhan & Roland 2008, SqS3) on γ: first − 2α·r + α²·v, α = −‖r‖/‖v‖ ≤ −1,
    halved towards −1 (``last`` itself) while some γ_k ≤ 0."""
    r, v = middle - first, last - 2.0 * middle + first
    step = min(-np.sqrt(r @ r / (v @ v)), -1.0) if v @ v > 0 else -1.0
    while step < -1.0:
        point = first - 2.0 * step * r + step * step * v
        if np.all(point > 0.0):
            return point
        step = 0.5 * (step - 1.0)
        step = step if step < -1.01 else -1.0
    return last


def numpy_lda_iteration(X, lam_beta, alpha, eta, local_tol=1e-3, max_local_iter=100,
                        accelerate=True):
    """One VBEM iteration of LDA written out by hand (Blei et al. 2003; Hoffman et al.), each
    document's fixed-point iteration accelerated as the local step's is."""
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
        for sweep in range(max_local_iter):
            if sweep % 2 == 0:
                first = gamma
            else:
                middle = gamma
            phi = optimal_phi(gamma, elog_beta[:, ids])
            new = alpha + phi @ cts
            change = np.mean(np.abs(new - gamma))
            gamma = new
            if change < local_tol:
                break
            if accelerate and sweep % 2 == 1 and sweep + 1 < max_local_iter:
                gamma = squarem(first, middle, gamma)
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


def _lda_iteration(compiled, **local):
    X = lda_corpus(3, D=30, V=25, K=3)
    rng = np.random.default_rng(7)
    lam_beta = rng.gamma(100.0, 0.01, (3, 25)) - 1.0
    res = compiled("lda", K=3).fit({"w": X}, max_iter=1, init={"lam_beta_log": lam_beta},
                                    hypers={"alpha": 0.3, "eta": 0.05}, **local)
    return res, numpy_lda_iteration(X, lam_beta, 0.3, 0.05, **local)


def test_lda_iteration_matches_numpy(compiled):
    """From the same warm start, one compiled VBEM iteration equals the hand-written one, each
    document's sweeps run to its fixed point."""
    res, (beta_new, elbo) = _lda_iteration(compiled, local_tol=1e-14, max_local_iter=5000)
    np.testing.assert_allclose(res["beta.alpha"], beta_new, rtol=1e-9)
    assert res.elbo[0] == pytest.approx(elbo, rel=1e-10)


def test_lda_sweeps_follow_squarem(compiled):
    """The extrapolated sweeps themselves, step for step: 12 sweeps per document (5
    extrapolations), no convergence test. (Longer paths part by round-off on a document whose
    topics trade mass along a nearly flat ridge: SQUAREM's step reads a second difference.)"""
    res, (beta_new, elbo) = _lda_iteration(compiled, local_tol=0.0, max_local_iter=12)
    # round-off grows along the path (4e-9 here after 12 sweeps); a wrong step is ~1e-2
    np.testing.assert_allclose(res["beta.alpha"], beta_new, rtol=1e-7)
    assert res.elbo[0] == pytest.approx(elbo, rel=1e-9)


def test_squarem_reaches_the_plain_fixed_point():
    """Each document's accelerated iteration ends on a fixed point of the plain map γ ↦ α +
    φ(γ)·n, where the plain iteration is still far from it: one document of this corpus
    needs more than 20,000 plain sweeps to meet 1e-14, and SQUAREM about 1,000."""
    X = sp.csr_matrix(lda_corpus(3, D=30, V=25, K=3))
    rng = np.random.default_rng(7)
    elog_beta = dirichlet_elog(rng.gamma(100.0, 0.01, (3, 25)))
    alpha = 0.3
    slowest = 0
    for d in range(X.shape[0]):
        ids, cts = X.indices[X.indptr[d]:X.indptr[d + 1]], X.data[X.indptr[d]:X.indptr[d + 1]]
        gamma, sweeps = np.full(3, alpha), 0
        for sweeps in range(1, 5001):
            if sweeps % 2 == 1:
                first = gamma
            else:
                middle = gamma
            new = alpha + optimal_phi(gamma, elog_beta[:, ids]) @ cts
            change, gamma = np.mean(np.abs(new - gamma)), new
            if change < 1e-14:
                break
            if sweeps % 2 == 0:
                gamma = squarem(first, middle, gamma)
        fixed = alpha + optimal_phi(gamma, elog_beta[:, ids]) @ cts
        np.testing.assert_allclose(fixed, gamma, rtol=1e-12)
        slowest = max(slowest, sweeps)
    assert slowest < 2000
