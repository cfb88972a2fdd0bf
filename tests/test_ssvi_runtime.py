"""The SSVI matrix V(β, λ) (Hoffman & Blei 2015, eq. 8): quantile derivatives, E[V] = I by
Monte Carlo, and V g against a dense reference built from scipy's gamma quantile."""

import numpy as np
import pytest
from numpy.testing import assert_allclose
from scipy.special import gammainc, gammaincc, gammainccinv, gammaincinv, polygamma, psi

from cemodel.runtime import families as fam
from cemodel.runtime import parameters as par
from cemodel.runtime import sampling, ssvi

# ---------------------------------------------------------------------------------------------
# d log R̂(u; a)/da
# ---------------------------------------------------------------------------------------------

SHAPES = [1e-2, 0.1, 0.5, 1.0, 3.0, 10.0, 49.0, 51.0, 200.0, 1e3, 1e4]
# (u, 1 − u) pairs, so that upper quantiles are inverted from the upper tail without rounding
LEVELS = [(1e-6, 1 - 1e-6), (1e-3, 1 - 1e-3), (0.1, 0.9), (0.5, 0.5), (0.9, 0.1),
          (1 - 1e-3, 1e-3), (1 - 1e-6, 1e-6)]


def gamma_quantile(a, u, q):
    """R̂(u; a), from whichever tail is the smaller (full relative accuracy in both)."""
    return gammaincinv(a, u) if u <= 0.5 else gammainccinv(a, q)


@pytest.mark.parametrize("a", SHAPES)
def test_shape_derivative_matches_finite_differences(a):
    """Against central differences of log R̂(u; a) in a at fixed u (scipy's inverse)."""
    for u, q in LEVELS:
        x = gamma_quantile(a, u, q)
        if not x > 1e-280:  # underflows: covered by the small-x test below
            continue
        h = 1e-4 * a
        fd = (np.log(gamma_quantile(a + h, u, q)) - np.log(gamma_quantile(a - h, u, q))) / (2 * h)
        got = ssvi.gamma_log_quantile_shape_derivative(a, np.log(x))
        assert got == pytest.approx(fd, rel=1e-5), (a, u)


def test_shape_derivative_small_x_closed_form():
    """For x → 0, P(a, x) ≈ x^a/Γ(a+1) so log R̂ = (log u + lnΓ(a+1))/a and
    d log R̂/da = (ψ(a+1) − log x)/a; log x far below the float range is fine."""
    for a in [1e-3, 1e-2, 0.3, 2.0, 60.0, 1e4]:
        for log_x in [-300.0, -800.0, -5000.0]:
            got = ssvi.gamma_log_quantile_shape_derivative(a, log_x)
            assert got == pytest.approx((psi(a + 1.0) - log_x) / a, rel=1e-12)


def test_shape_derivative_methods_agree():
    """Series / continued fraction / 1/√x expansion, as dispatched, against the quadrature
    of the integral representation (valid for every a and x) on random Gamma draws and
    their tails, shapes 1e-3 … 1e5."""
    rng = np.random.default_rng(0)
    a = 10.0 ** rng.uniform(-3, 5, 3000)
    log_x = sampling.log_gamma_draws(a, rng)
    log_x[:300] += rng.normal(0.0, 3.0, 300) / np.sqrt(a[:300] + 1.0)  # into the tails
    got = ssvi.gamma_log_quantile_shape_derivative(a, log_x)
    ref = np.array([ssvi._dlogq_integral(ai, li, psi(ai)) for ai, li in zip(a, log_x,
                                                                              strict=True)])
    assert np.all(got > 0)
    assert_allclose(got, ref, rtol=1e-9)


def test_shape_derivative_broadcasts():
    a = np.array([[0.5], [20.0], [300.0]])
    log_x = np.log(np.array([0.1, 1.0, 25.0, 310.0]))
    got = ssvi.gamma_log_quantile_shape_derivative(a, log_x)
    assert got.shape == (3, 4)
    assert got[1, 2] == ssvi.gamma_log_quantile_shape_derivative(20.0, log_x[2])
    assert isinstance(ssvi.gamma_log_quantile_shape_derivative(2.0, 0.0), float)
    assert np.isnan(ssvi.gamma_log_quantile_shape_derivative(-1.0, 0.0))


# ---------------------------------------------------------------------------------------------
# samplers with auxiliary draws
# ---------------------------------------------------------------------------------------------

# family → natural parameters (coefficient form) of a small batch; the matrix families (MVN,
# Wishart, Normal-Wishart: statistics of several shapes) are tested in test_ssvi_matrix.py
LAMS = {
    "dirichlet": par.dirichlet_natural(np.array([[0.3, 1.0, 4.0], [50.0, 2.0, 0.01]])),
    "beta": par.beta_natural(np.array([0.3, 5.0, 80.0]), np.array([2.0, 0.7, 60.0])),
    "gamma": par.gamma_natural(np.array([0.3, 5.0, 800.0]), np.array([2.0, 0.5, 10.0])),
    "normal": par.normal_natural(np.array([1.5, -3.0, 0.0]), np.array([4.0, 0.1, 100.0])),
    "normal_gamma": par.normal_gamma_natural(
        np.array([1.5, -3.0, 0.0]), np.array([4.0, 0.1, 100.0]),
        np.array([0.3, 5.0, 800.0]), np.array([2.0, 0.5, 10.0])),
}
N_STATS = {"dirichlet": 1, "beta": 2, "gamma": 2, "normal": 2, "normal_gamma": 4}


def test_the_planner_knows_what_the_runtime_samples():
    """plan.SAMPLED_FAMILIES / SSVI_AUX_DRAWS decide which methods apply and how many aux
    arrays the generated code allocates: they must be the runtime's own registries."""
    from cemodel.plan import SAMPLED_FAMILIES, SSVI_AUX_DRAWS

    assert set(SAMPLED_FAMILIES) == set(sampling.SAMPLERS)
    assert SSVI_AUX_DRAWS == {f: n for f, (_, _, n) in ssvi.SSVI_FAMILIES.items()}


def test_every_family_with_v_is_tested():
    from cemodel.runtime.ssvi_matrix import MATRIX_FAMILIES

    assert set(ssvi.SSVI_FAMILIES) == set(LAMS) | set(MATRIX_FAMILIES)


@pytest.mark.parametrize("family", sorted(LAMS))
def test_aux_samplers_match_plain_samplers(family):
    """Same statistics as sampling.SAMPLERS from the same random stream, and the aux
    arrays (n_aux of them, shaped like λ) reproduce them."""
    sampler, _, n_aux = ssvi.SSVI_FAMILIES[family]
    lam = LAMS[family]
    shape = lam[0].shape
    plain = [np.zeros(shape) for _ in range(N_STATS[family])]
    stats = [np.zeros(shape) for _ in range(N_STATS[family])]
    aux = [np.zeros(shape) for _ in range(n_aux)]
    sampling.SAMPLERS[family](*lam, np.random.default_rng(3), *plain)
    sampler(*lam, np.random.default_rng(3), *stats, *aux)
    for p, s in zip(plain, stats, strict=True):
        assert_allclose(s, p, rtol=1e-14, atol=0)
    if family == "dirichlet":
        log_g = aux[0]
        top = log_g.max(axis=-1, keepdims=True)
        total = top + np.log(np.exp(log_g - top).sum(axis=-1, keepdims=True))
        assert_allclose(stats[0], log_g - total, rtol=1e-14)
    elif family == "beta":
        assert_allclose(np.exp(stats[0]), 1 / (1 + np.exp(aux[1] - aux[0])), rtol=1e-12)
    elif family == "gamma":
        assert_allclose(stats[0], aux[0] - np.log(-lam[1]), rtol=1e-14)
    elif family == "normal_gamma":  # τ = G / rate, τμ with μ = m + ε / √(βτ)
        mean, beta, _, rate = par.normal_gamma_params(*lam)
        tau = np.exp(aux[0]) / rate
        assert_allclose(stats[1], tau, rtol=1e-12)
        assert_allclose(stats[2], tau * (mean + aux[1] / np.sqrt(beta * tau)), rtol=1e-12)
    else:
        mean, prec = par.normal_params(*lam)
        assert_allclose(stats[0], mean + aux[0] / np.sqrt(prec), rtol=1e-14)


# ---------------------------------------------------------------------------------------------
# E[V] = I
# ---------------------------------------------------------------------------------------------

DRAWS = 20000


def mean_v(family, lam_single, seed=0):
    """Monte Carlo mean and standard error of V (rows: natural parameters, columns: the
    basis vector g = e_j), from DRAWS independent draws laid out as a batch."""
    sampler, apply_v, n_aux = ssvi.SSVI_FAMILIES[family]
    lam = [np.broadcast_to(v, (DRAWS,) + np.shape(v)).copy() for v in lam_single]
    shape = lam[0].shape
    n_stats = N_STATS[family]
    stats = [np.zeros(shape) for _ in range(n_stats)]
    aux = [np.zeros(shape) for _ in range(n_aux)]
    sampler(*lam, np.random.default_rng(seed), *stats, *aux)
    # flatten (statistic, component) into one index
    size = n_stats * int(np.prod(shape[1:], dtype=int))
    cols = []
    for j in range(size):
        basis = np.zeros((DRAWS, size))
        basis[:, j] = 1.0
        g = [part.reshape(shape) for part in np.split(basis, n_stats, axis=1)]
        out = [np.zeros(shape) for _ in range(n_stats)]
        apply_v(*lam, *aux, *g, *out)
        cols.append(np.concatenate([o.reshape(DRAWS, -1) for o in out], axis=1))
    v = np.stack(cols, axis=2)  # (draw, row, column)
    return v.mean(axis=0), v.std(axis=0) / np.sqrt(DRAWS)


def assert_identity(mean, stderr):
    assert np.all(np.isfinite(mean))
    assert np.all(np.abs(mean - np.eye(len(mean))) <= 5.0 * stderr + 1e-12), (mean, stderr)
    assert np.diag(stderr).max() < 0.05  # the test has power (off-diagonal errors scale
    # with the ratio of the Fisher entries, e.g. large for α = (0.3, …, 50))


@pytest.mark.parametrize("alpha", [[0.3, 0.3, 0.3, 0.3], [50.0, 50.0, 50.0, 50.0],
                                   [0.3, 1.0, 4.0, 50.0], [0.05, 0.3, 2.0, 150.0]])
def test_dirichlet_v_is_identity_in_expectation(alpha):
    assert_identity(*mean_v("dirichlet", par.dirichlet_natural(np.array(alpha))))


@pytest.mark.parametrize("a, b", [(0.3, 2.0), (5.0, 0.7), (60.0, 40.0)])
def test_beta_v_is_identity_in_expectation(a, b):
    assert_identity(*mean_v("beta", par.beta_natural(np.array([a]), np.array([b]))))


@pytest.mark.parametrize("shape, rate", [(0.3, 2.0), (3.0, 0.5), (30.0, 10.0)])
def test_gamma_v_is_identity_in_expectation(shape, rate):
    assert_identity(*mean_v("gamma", par.gamma_natural(np.array([shape]), np.array([rate]))))


@pytest.mark.parametrize("mean, precision", [(1.5, 4.0), (-3.0, 0.1), (0.0, 100.0)])
def test_normal_v_is_identity_in_expectation(mean, precision):
    lam = par.normal_natural(np.array([mean]), np.array([precision]))
    assert_identity(*mean_v("normal", lam))


# ---------------------------------------------------------------------------------------------
# V g against a dense reference
# ---------------------------------------------------------------------------------------------


def uniforms(a, log_g):
    """(u, 1 − u) of the Gamma(a, 1) draws exp(log_g)."""
    g = np.exp(log_g)
    return gammainc(a, g), gammaincc(a, g)


def quantile(a, u, q):
    return np.where(u <= 0.5, gammaincinv(a, u), gammainccinv(a, q))


def fd_jacobian(t_of_lam, lam, rel=1e-5):
    """∂t/∂λ by central differences (rows: statistics, columns: λ)."""
    cols = []
    for j in range(len(lam)):
        h = rel * max(abs(lam[j] + 1.0), 1.0)
        up, down = lam.copy(), lam.copy()
        up[j] += h
        down[j] -= h
        cols.append((t_of_lam(up) - t_of_lam(down)) / (2 * h))
    return np.stack(cols, axis=1)


def test_dirichlet_matches_dense_reference():
    """J = ∂ log β/∂λ at fixed u (scipy's inverse) and F = ∂E[log β]/∂λ (finite differences
    of the family's expected statistics), V g = F⁻¹ Jᵀ g, row by row."""
    alpha = np.array([[0.7, 2.0, 5.0, 30.0], [0.2, 0.5, 80.0, 1.5], [3.0, 3.0, 3.0, 3.0]])
    lam = par.dirichlet_natural(alpha)[0]
    rng = np.random.default_rng(1)
    out_log, aux = np.zeros_like(lam), np.zeros_like(lam)
    ssvi.sample_dirichlet_aux(lam, rng, out_log, aux)
    g = rng.normal(size=lam.shape) * 100
    got = np.zeros_like(lam)
    ssvi.ssvi_dirichlet(lam, aux, g, got)
    for r in range(len(lam)):
        u, q = uniforms(alpha[r], aux[r])

        def t_of_lam(lam_row, u=u, q=q):
            log_g = np.log(quantile(lam_row + 1.0, u, q))
            return log_g - np.log(np.exp(log_g).sum())

        def expected(lam_row):
            out = np.zeros(len(lam_row))
            fam.dirichlet_expected_stats(lam_row, out)
            return out

        jac = fd_jacobian(t_of_lam, lam[r])
        fisher = fd_jacobian(expected, lam[r])
        assert_allclose(fisher, np.diag(polygamma(1, alpha[r])) - polygamma(1, alpha[r].sum()),
                        rtol=1e-6)
        assert_allclose(got[r], np.linalg.solve(fisher, jac.T @ g[r]), rtol=1e-5)


def scalar_family_case(family, lam, expected_stats, make_t):
    """Dense check for a two-statistic family over a batch of scalars: ``make_t(lam_i,
    aux_i)`` returns t(R(u, λ)) as a function of λ at the u of the sampled draw."""
    rng = np.random.default_rng(2)
    sampler, apply_v, n_aux = ssvi.SSVI_FAMILIES[family]
    stats = [np.zeros_like(lam[0]) for _ in range(2)]
    aux = [np.zeros_like(lam[0]) for _ in range(n_aux)]
    sampler(*lam, rng, *stats, *aux)
    g = rng.normal(size=(2,) + lam[0].shape)
    out = [np.zeros_like(lam[0]) for _ in range(2)]
    apply_v(*lam, *aux, *g, *out)
    for i in range(len(lam[0])):
        lam_i = np.array([lam[0][i], lam[1][i]])
        t_of_lam = make_t(lam_i, [v[i] for v in aux])
        jac = fd_jacobian(lambda v, t=t_of_lam: np.array(t(v)), lam_i)
        fisher = fd_jacobian(lambda v: np.array(expected_stats(v[0], v[1])), lam_i)
        want = np.linalg.solve(fisher, jac.T @ g[:, i])
        assert_allclose([out[0][i], out[1][i]], want, rtol=1e-5)


def test_beta_matches_dense_reference():
    lam = par.beta_natural(np.array([0.4, 3.0, 70.0]), np.array([2.5, 0.6, 45.0]))

    def make_t(lam_i, aux_i):
        ua = uniforms(lam_i[0] + 1.0, aux_i[0])
        ub = uniforms(lam_i[1] + 1.0, aux_i[1])

        def t(v):
            ga = quantile(v[0] + 1.0, *ua)
            gb = quantile(v[1] + 1.0, *ub)
            return np.log(ga / (ga + gb)), np.log(gb / (ga + gb))

        return t

    scalar_family_case("beta", lam, fam.beta_expected_stats, make_t)


def test_gamma_matches_dense_reference():
    lam = par.gamma_natural(np.array([0.3, 4.0, 900.0]), np.array([2.0, 0.5, 30.0]))

    def make_t(lam_i, aux_i):
        u = uniforms(lam_i[0] + 1.0, aux_i[0])

        def t(v):
            x = quantile(v[0] + 1.0, *u) / -v[1]
            return np.log(x), x

        return t

    scalar_family_case("gamma", lam, fam.gamma_expected_stats, make_t)


def test_normal_matches_dense_reference():
    lam = par.normal_natural(np.array([1.5, -3.0, 0.2]), np.array([4.0, 0.1, 50.0]))

    def make_t(lam_i, aux_i):
        def t(v):
            precision = -2.0 * v[1]
            x = v[0] / precision + aux_i[0] / np.sqrt(precision)
            return x, x * x

        return t

    scalar_family_case("normal", lam, fam.normal_expected_stats, make_t)


# ---------------------------------------------------------------------------------------------
# calling conventions
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("family", sorted(LAMS))
def test_out_may_alias_g_and_be_non_contiguous(family):
    sampler, apply_v, n_aux = ssvi.SSVI_FAMILIES[family]
    lam = LAMS[family]
    shape = lam[0].shape
    n_stats = N_STATS[family]
    rng = np.random.default_rng(4)
    aux = [np.zeros(shape) for _ in range(n_aux)]
    sampler(*lam, rng, *[np.zeros(shape) for _ in range(n_stats)], *aux)
    g = [rng.normal(size=shape) for _ in range(n_stats)]
    want = [np.zeros(shape) for _ in range(n_stats)]
    apply_v(*lam, *aux, *g, *want)
    in_place = [v.copy() for v in g]
    apply_v(*lam, *aux, *in_place, *in_place)
    strided = [np.zeros(shape[:-1] + (2 * shape[-1],))[..., ::2] for _ in range(n_stats)]
    apply_v(*lam, *aux, *g, *strided)
    for w, p, s in zip(want, in_place, strided, strict=True):
        assert np.all(np.isfinite(w))
        assert_allclose(p, w, rtol=1e-14)
        assert_allclose(s, w, rtol=1e-14)


def test_all_in_domain_decides_as_in_domain_does():
    """The one-pass check every stochastic step runs (``all_in_domain``, and ``all_finite``
    for the expectations) decides as np.all of the element-wise ``in_domain`` does, nan and
    inf included."""
    from cemodel.runtime.special import all_finite
    from cemodel.runtime.ssvi import all_in_domain, in_domain

    rng = np.random.default_rng(9)
    for family, count in (("dirichlet", 1), ("beta", 2), ("gamma", 2), ("normal", 2)):
        for _ in range(50):
            lams = [rng.normal(size=(3, 4)) * 2.0 for _ in range(count)]
            if rng.random() < 0.3:
                lams[0][1, 2] = rng.choice([np.nan, np.inf, -np.inf])
            assert all_in_domain(family, lams) == bool(np.all(in_domain(family, lams)))
            assert all_finite(lams[0]) == bool(np.all(np.isfinite(lams[0])))
