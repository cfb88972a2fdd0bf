"""SSVI's V(β, λ) (Hoffman & Blei 2015, eq. 8) for the Normal-Gamma block q(μ, τ): the aux
sampler, J by finite differences at fixed (u, ε), F against the Hessian of the log
normalizer, E[V] = I by Monte Carlo, and the non-box domain in ssvi_blend / check_step."""

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal
from scipy.special import gammainc, gammaincc, gammainccinv, gammaincinv

from cemodel.errors import CemError
from cemodel.runtime import driver, sampling, ssvi
from cemodel.runtime import families as fam
from cemodel.runtime import parameters as par

# (mean m, β, shape a, rate b): a small shape, a large one, a large |m| with a small β
PARAMS = [(0.5, 2.0, 0.3, 1.5), (-3.0, 0.2, 40.0, 10.0), (1.0, 10.0, 3.0, 0.5),
          (8.0, 0.05, 1.2, 4.0)]


def natural(params):
    """The coefficient-form λ (4 arrays) of a list of (m, β, a, b)."""
    m, beta, a, b = (np.array(v, dtype=float) for v in zip(*params, strict=True))
    return par.normal_gamma_natural(m, beta, a, b)


def draw(lam, seed):
    shape = lam[0].shape
    stats = [np.zeros(shape) for _ in range(4)]
    aux = [np.zeros(shape) for _ in range(2)]
    ssvi.sample_normal_gamma_aux(*lam, np.random.default_rng(seed), *stats, *aux)
    return stats, aux


# ---------------------------------------------------------------------------------------------
# sampler
# ---------------------------------------------------------------------------------------------


def test_registered():
    assert ssvi.SSVI_FAMILIES["normal_gamma"] == (ssvi.sample_normal_gamma_aux,
                                                  ssvi.ssvi_normal_gamma, 2)


def test_aux_sampler_matches_plain_sampler():
    """Same statistics as sampling.sample_normal_gamma from the same random stream (batch
    shape (2, 2)), and the aux draws reproduce them: τ = G/b, μ = m + ε/√(βτ)."""
    lam = [v.reshape(2, 2) for v in natural(PARAMS)]
    plain = [np.zeros((2, 2)) for _ in range(4)]
    sampling.sample_normal_gamma(*lam, np.random.default_rng(7), *plain)
    stats, (log_g, eps) = draw(lam, 7)
    for p, s in zip(plain, stats, strict=True):
        assert_array_equal(s, p)
    m, beta, a, b = par.normal_gamma_params(*lam)
    tau = np.exp(log_g) / b
    mu = m + eps / np.sqrt(beta * tau)
    assert_allclose(stats[0], log_g - np.log(b), rtol=1e-14)
    assert_allclose(stats[1], tau, rtol=1e-14)
    assert_allclose(stats[2], tau * mu, rtol=1e-12)
    assert_allclose(stats[3], tau * mu * mu, rtol=1e-12)


def test_aux_sampler_moments():
    """E[t] = ∇A (normal_gamma_expected_stats) within a few standard errors."""
    n = 40000
    for params in PARAMS[:3]:
        lam = [np.full(n, v[0]) for v in natural([params])]
        stats, _ = draw(lam, 11)
        want = fam.normal_gamma_expected_stats(*(v[0] for v in lam))
        for s, w in zip(stats, want, strict=True):
            assert abs(s.mean() - w) < 5 * s.std() / np.sqrt(n), (params, s.mean(), w)


# ---------------------------------------------------------------------------------------------
# J and F
# ---------------------------------------------------------------------------------------------


def quantile(a, u, q):
    return gammaincinv(a, u) if u <= 0.5 else gammainccinv(a, q)


def t_at_fixed_draw(lam_i, u, q, eps):
    """t(R(u, λ)) with the Gamma quantile at level u and the same ε."""
    m, beta, a, b = par.normal_gamma_params(*lam_i)
    tau = quantile(a, u, q) / b
    mu = m + eps / np.sqrt(beta * tau)
    return np.array([np.log(tau), tau, tau * mu, tau * mu * mu])


def fd_jacobian(f, lam_i, rel=1e-6):
    """∂f/∂λ by central differences (rows: outputs, columns: λ)."""
    cols = []
    for j in range(4):
        h = rel * max(abs(lam_i[j]), 1.0)
        up, down = lam_i.copy(), lam_i.copy()
        up[j] += h
        down[j] -= h
        cols.append((f(up) - f(down)) / (2 * h))
    return np.stack(cols, axis=1)


def test_jacobian_matches_finite_differences():
    """∂t/∂λ at fixed (u, ε), u = P(a, G) of the sampled G (scipy's inverse), against the
    J that ssvi_normal_gamma uses."""
    lam = natural(PARAMS)
    _, (log_g, eps) = draw(lam, 5)
    eps[0] = 2.5  # far from 0, so the ε terms of J matter
    jac = ssvi._normal_gamma_jacobian(*lam, log_g, eps)
    assert jac.shape == (len(PARAMS), 4, 4)
    for i, (_, _, a, _) in enumerate(PARAMS):
        lam_i = np.array([v[i] for v in lam])
        g = np.exp(log_g[i])
        u, q = gammainc(a, g), gammaincc(a, g)
        want = fd_jacobian(lambda v, u=u, q=q, i=i: t_at_fixed_draw(v, u, q, eps[i]), lam_i)
        scale = np.abs(want).max(axis=1, keepdims=True)
        assert np.all(np.abs(jac[i] - want) <= 1e-6 * scale), (PARAMS[i], jac[i], want)


def fd_hessian(f, x, rel=1e-4):
    n = len(x)
    h = rel * np.maximum(np.abs(x), 1.0)
    out = np.zeros((n, n))
    for i in range(n):
        for j in range(n):
            total = 0.0
            for si, sj in ((1, 1), (1, -1), (-1, 1), (-1, -1)):
                y = x.copy()
                y[i] += si * h[i]
                y[j] += sj * h[j]
                total += si * sj * f(*y)
            out[i, j] = total / (4 * h[i] * h[j])
    return out


def test_fisher_matches_hessian_of_log_normalizer():
    """F = ∇²A: against central second differences of normal_gamma_log_normalizer and
    (more precisely) first differences of normal_gamma_expected_stats = ∇A."""
    lam = natural(PARAMS)
    fisher = ssvi._normal_gamma_fisher(*lam)
    for i in range(len(PARAMS)):
        lam_i = np.array([v[i] for v in lam])
        assert_allclose(fisher[i], fisher[i].T, rtol=0, atol=0)
        scale = np.sqrt(np.outer(np.diag(fisher[i]), np.diag(fisher[i])))
        hess = fd_hessian(fam.normal_gamma_log_normalizer, lam_i)
        assert np.all(np.abs(fisher[i] - hess) <= 1e-4 * scale), (PARAMS[i], fisher[i], hess)
        grad = fd_jacobian(lambda v: np.array(fam.normal_gamma_expected_stats(*v)), lam_i)
        assert np.all(np.abs(fisher[i] - grad) <= 1e-7 * scale), (PARAMS[i], fisher[i], grad)
        assert np.all(np.linalg.eigvalsh(fisher[i]) > 0)


def test_v_matches_dense_reference():
    """V g = F⁻¹ Jᵀ g with J and F both from finite differences (not from the module), and
    equal to the dense solve with the module's J and F (the closed-form inverse)."""
    lam = natural(PARAMS)
    _, (log_g, eps) = draw(lam, 9)
    rng = np.random.default_rng(10)
    g = rng.normal(size=(4, len(PARAMS))) * 10
    out = [np.zeros(len(PARAMS)) for _ in range(4)]
    ssvi.ssvi_normal_gamma(*lam, log_g, eps, *g, *out)
    got = np.stack(out, axis=1)
    jac = ssvi._normal_gamma_jacobian(*lam, log_g, eps)
    fisher = ssvi._normal_gamma_fisher(*lam)
    for i, (_, _, a, _) in enumerate(PARAMS):
        lam_i = np.array([v[i] for v in lam])
        dense = np.linalg.solve(fisher[i], jac[i].T @ g[:, i])
        assert_allclose(got[i], dense, rtol=1e-9, atol=1e-9 * np.abs(dense).max())
        gi = np.exp(log_g[i])
        u, q = gammainc(a, gi), gammaincc(a, gi)
        fd_j = fd_jacobian(lambda v, u=u, q=q, i=i: t_at_fixed_draw(v, u, q, eps[i]), lam_i)
        fd_f = fd_jacobian(lambda v: np.array(fam.normal_gamma_expected_stats(*v)), lam_i)
        want = np.linalg.solve(fd_f, fd_j.T @ g[:, i])
        assert_allclose(got[i], want, rtol=1e-4, atol=1e-5 * np.abs(want).max())


# ---------------------------------------------------------------------------------------------
# E[V] = I
# ---------------------------------------------------------------------------------------------

DRAWS = 100000


@pytest.mark.parametrize("params", PARAMS)
def test_v_is_identity_in_expectation(params):
    """Monte Carlo mean of V e_j over DRAWS draws is e_j within 5 standard errors."""
    lam = [np.full(DRAWS, v[0]) for v in natural([params])]
    _, aux = draw(lam, 0)
    cols = []
    for j in range(4):
        g = [np.full(DRAWS, float(k == j)) for k in range(4)]
        out = [np.zeros(DRAWS) for _ in range(4)]
        ssvi.ssvi_normal_gamma(*lam, *aux, *g, *out)
        cols.append(np.stack(out, axis=1))
    v = np.stack(cols, axis=2)  # (draw, row, column)
    assert np.all(np.isfinite(v))
    mean, stderr = v.mean(axis=0), v.std(axis=0) / np.sqrt(DRAWS)
    assert np.all(np.abs(mean - np.eye(4)) <= 5.0 * stderr + 1e-12), (mean, stderr)
    assert np.diag(stderr).max() < 0.05, stderr  # the test has power


def test_out_may_alias_g_and_be_non_contiguous():
    lam = [v.reshape(2, 2) for v in natural(PARAMS)]
    _, aux = draw(lam, 4)
    rng = np.random.default_rng(4)
    g = [rng.normal(size=(2, 2)) for _ in range(4)]
    want = [np.zeros((2, 2)) for _ in range(4)]
    ssvi.ssvi_normal_gamma(*lam, *aux, *g, *want)
    in_place = [v.copy() for v in g]
    ssvi.ssvi_normal_gamma(*lam, *aux, *in_place, *in_place)
    strided = [np.zeros((2, 4))[:, ::2] for _ in range(4)]
    ssvi.ssvi_normal_gamma(*lam, *aux, *g, *strided)
    flat = [np.zeros(4) for _ in range(4)]
    ssvi.ssvi_normal_gamma(*(v.ravel() for v in lam), *(v.ravel() for v in aux),
                           *(v.ravel() for v in g), *flat)
    for w, p, s, f in zip(want, in_place, strided, flat, strict=True):
        assert np.all(np.isfinite(w))
        assert_allclose(p, w, rtol=1e-14)
        assert_allclose(s, w, rtol=1e-14)
        assert_allclose(f, w.ravel(), rtol=1e-14)


# ---------------------------------------------------------------------------------------------
# domain: in_domain, ssvi_blend, check_step
# ---------------------------------------------------------------------------------------------


def test_in_domain():
    lam = natural(PARAMS)
    assert ssvi.in_domain("normal_gamma", lam).all()
    l1, l2, l3, l4 = (v[0] for v in lam)  # m = 0.5, β = 2, a = 0.3, b = 1.5
    bad = [(-0.5, l2, l3, l4), (l1, l2, l3, 0.0), (l1, l2, l3, 1.0),
           (l1, -0.25, l3, l4),  # b = 0: −l2 = βm²/2
           (l1, -0.2, l3, l4), (np.nan, l2, l3, l4)]
    for case in bad:
        assert not ssvi.in_domain("normal_gamma", [np.array(v) for v in case]), case
    assert ssvi.in_domain("normal_gamma", [np.array(v) for v in (l1, -0.26, l3, l4)])
    # box families as before: per element; the matrix families per distribution
    # (test_ssvi_matrix.py): a zero precision is invalid
    assert_array_equal(ssvi.in_domain("gamma", (np.array([0.0, -1.0, 0.0]),
                                                np.array([-1.0, -1.0, 0.0]))),
                       [True, False, False])
    assert np.all(ssvi.in_domain("mvn", (np.zeros(2), -0.5 * np.eye(2))))
    assert not np.any(ssvi.in_domain("mvn", (np.zeros(2), np.zeros((2, 2)))))


def bisect_limit(old, new, r_max=1e6):
    """The largest r with old + r (new − old) valid, by bisection (the domain is convex)."""
    def valid(r):
        return bool(ssvi.in_domain("normal_gamma", [o + r * (n - o)
                                                    for o, n in zip(old, new, strict=True)]))
    if valid(r_max):
        return np.inf
    lo, hi = 0.0, r_max
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if valid(mid) else (lo, mid)
    return hi


def test_blend_shortens_a_step_that_makes_the_rate_negative():
    """Row 0: the proposal has b < 0 (box constraints fine) → shortened to margin × the root
    of b along the line; rows 1, 2: valid proposals → untouched."""
    old = natural([(0.5, 2.0, 3.0, 1.5), (1.0, 1.0, 2.0, 1.0), (0.0, 1.0, 1.0, 1.0)])
    new = natural([(0.5, 2.0, 3.0, 1.5), (1.5, 3.0, 2.5, 2.0), (3.0, 0.5, 1.0, 0.2)])
    new[1][0] += 2.0  # b = 1.5 − 2r along the line (a, β, m fixed): b = −0.5 at r = 1
    assert not ssvi.in_domain("normal_gamma", new)[0]
    assert ssvi.in_domain("normal_gamma", [v[1:] for v in new]).all()
    assert bisect_limit([v[0] for v in old], [v[0] for v in new]) == pytest.approx(0.75)
    rho = 0.9
    blended = [v.copy() for v in new]
    short = ssvi.ssvi_blend("normal_gamma", rho, old, blended, margin=0.5)
    assert short == 1
    for o, p, b in zip(old, new, blended, strict=True):
        assert b[0] == pytest.approx(o[0] + 0.5 * 0.75 * (p[0] - o[0]), rel=1e-12)
        assert_array_equal(b[1:], o[1:] + rho * (p[1:] - o[1:]))
    m, beta, a, b = par.normal_gamma_params(*(v[0] for v in blended))
    assert (m, beta, a) == pytest.approx((0.5, 2.0, 3.0)) and b == pytest.approx(0.75)


def test_blend_random_lines_against_bisection():
    """Random valid λ_old and random proposals (all sign cases of the rate's quadratic, box
    violations included): the step is ρ where ρ < the bisection limit, else margin × it."""
    rng = np.random.default_rng(12)
    n = 300
    old = natural([(rng.normal(0, 3), 10 ** rng.uniform(-2, 1), 10 ** rng.uniform(-1, 2),
                    10 ** rng.uniform(-1, 1)) for _ in range(n)])
    new = [o + rng.normal(size=n) * np.abs(o).mean() * 10 ** rng.uniform(-2, 0.5, n)
           for o in old]
    limit = np.array([bisect_limit([v[i] for v in old], [v[i] for v in new])
                      for i in range(n)])
    rho = 0.8
    assert 50 < np.count_nonzero(limit <= rho) < n - 50  # both cases well represented
    blended = [v.copy() for v in new]
    short = ssvi.ssvi_blend("normal_gamma", rho, old, blended, margin=0.6)
    assert short == np.count_nonzero(limit <= rho)
    want = np.where(limit > rho, rho, 0.6 * limit)
    for o, p, b in zip(old, new, blended, strict=True):
        assert_allclose(b, o + want * (p - o), rtol=1e-9, atol=1e-12 * np.abs(o).max())
    assert ssvi.in_domain("normal_gamma", blended).all()


def test_blend_box_families_unchanged():
    """The existing families still use their box bounds (a Gamma rate crossing 0)."""
    old = (np.array([1.0, 1.0]), np.array([-1.0, -1.0]))
    new = [np.array([2.0, 2.0]), np.array([-2.0, 1.0])]
    assert ssvi.ssvi_blend("gamma", 1.0, old, new, margin=0.5) == 1
    assert_array_equal(new[0], [2.0, 1.25])
    assert_array_equal(new[1], [-2.0, -0.5])


def test_check_step_rejects_invalid_normal_gamma():
    lam = natural(PARAMS)
    expectations = {"E": np.ones(3)}
    driver.check_step(expectations, 1, None, (("normal_gamma", lam),))
    for k, value in ((0, -0.5), (3, 0.0), (1, -0.25)):  # a = 0, β = 0, b = 0 (row 0)
        bad = [v.copy() for v in lam]
        bad[k][0] = value
        with pytest.raises(CemError, match="left its domain"):
            driver.check_step(expectations, 1, None, (("normal_gamma", bad),))
    with pytest.raises(CemError, match="annealing noise"):
        driver.check_step(expectations, 1, 100.0, (("normal_gamma", bad),))
    # other families as before
    driver.check_step(expectations, 1, None, (("gamma", (np.zeros(2), -np.ones(2))),
                                              ("mvn", (np.zeros(2), -np.eye(2)))))
    with pytest.raises(CemError):
        driver.check_step(expectations, 1, None, (("gamma", (np.zeros(2), np.ones(2))),))
    with pytest.raises(CemError):
        driver.check_step(expectations, 1, None, (("dirichlet", (np.array([[0.5, -1.0]]),)),))
