"""Tests for cemodel.runtime.special against scipy / numpy references."""

import numpy as np
import pytest
import scipy.special as sps
from numpy.testing import assert_allclose

from cemodel.runtime import special

PSI_ROOT = 1.4616321449683622


def _grid() -> np.ndarray:
    """Log grid over [1e-8, 1e8] plus dense points around the positive root of digamma."""
    return np.concatenate(
        [
            np.logspace(-8, 8, 8001),
            np.linspace(1.0, 2.0, 2001),
            PSI_ROOT + np.array([-1e-3, -1e-8, -1e-12, 0.0, 1e-12, 1e-8, 1e-3]),
            np.arange(1.0, 30.0),
            [5.999999999999, 6.0, 6.000000000001],
        ]
    )


def test_digamma_matches_scipy():
    x = _grid()
    got = np.array([special.digamma(v) for v in x])
    assert_allclose(got, sps.digamma(x), rtol=1e-12, atol=0)


def test_digamma_tiny_and_edges():
    for x in [1e-8, 1e-10, 1e-300, 3e-8]:
        assert_allclose(special.digamma(x), sps.digamma(x), rtol=1e-13)
    assert special.digamma(0.0) == -np.inf
    assert np.isnan(special.digamma(-1.5))
    assert np.isnan(special.digamma(np.nan))
    assert special.digamma(np.inf) == np.inf


def test_trigamma_matches_scipy():
    x = _grid()
    got = np.array([special.trigamma(v) for v in x])
    assert_allclose(got, sps.polygamma(1, x), rtol=1e-10, atol=0)
    assert special.trigamma(0.0) == np.inf
    assert np.isnan(special.trigamma(-0.5))


def test_lgamma_matches_scipy():
    x = np.concatenate([np.logspace(-8, 8, 401), [0.5, 1.0, 2.0, 3.5]])
    got = np.array([special.lgamma(v) for v in x])
    assert_allclose(got, sps.gammaln(x), rtol=1e-13, atol=1e-15)


@pytest.mark.parametrize("d", [1, 2, 3, 5, 10])
def test_multigammaln_matches_scipy(d):
    lo = 0.5 * (d - 1)
    for a in lo + np.array([1e-6, 0.1, 0.5, 1.0, 3.7, 50.0, 1e4]):
        assert_allclose(special.multigammaln(a, d), sps.multigammaln(a, d), rtol=1e-12, atol=1e-12)


def test_logsumexp():
    rng = np.random.default_rng(0)
    cases = [
        rng.normal(size=7),
        rng.normal(size=50) * 300.0,
        np.array([1000.0, 1000.0]),
        np.array([-1000.0, -1001.0, -2000.0]),
        np.array([-np.inf, 0.0, 2.0]),
        np.array([3.5]),
        np.array([1e300, 1e300]),
    ]
    for v in cases:
        assert_allclose(special.logsumexp(v), sps.logsumexp(v), rtol=1e-14)
    assert special.logsumexp(np.array([-np.inf, -np.inf])) == -np.inf
    assert special.logsumexp(np.array([np.inf, 0.0])) == np.inf
    assert special.logsumexp(np.empty(0)) == -np.inf


def test_log1pexp():
    x = np.concatenate(
        [np.linspace(-800.0, 800.0, 16001), [-37.0, -36.9, 18.0, 18.1, 33.3, 33.4, 0.0, 1e-20]]
    )
    got = np.array([special.log1pexp(v) for v in x])
    with np.errstate(under="ignore"):
        ref = np.logaddexp(0.0, x)
    tiny = ref < 1e-300  # exp underflows to subnormals/zero: compare absolutely
    assert_allclose(got[~tiny], ref[~tiny], rtol=2e-15, atol=0)
    assert_allclose(got[tiny], ref[tiny], rtol=0, atol=1e-300)
    assert np.all(np.isfinite(got))


def test_softmax_inplace():
    rng = np.random.default_rng(1)
    for v in [
        rng.normal(size=6),
        rng.normal(size=40) * 500.0,
        np.array([0.0]),
        np.array([-1e4, 0]),
    ]:
        w = v.copy()
        a = special.softmax_inplace(w)
        assert_allclose(a, sps.logsumexp(v), rtol=1e-14)
        assert_allclose(w, sps.softmax(v), rtol=1e-13, atol=1e-300)
        assert_allclose(w.sum(), 1.0, rtol=1e-14)


def _random_spd(rng: np.random.Generator, d: int) -> np.ndarray:
    a = rng.normal(size=(d, d))
    return a @ a.T + d * np.eye(d)


@pytest.mark.parametrize("d", [1, 2, 3, 6])
def test_spd_helpers(d):
    rng = np.random.default_rng(d)
    for _ in range(3):
        m = _random_spd(rng, d)
        sign, ref = np.linalg.slogdet(m)
        assert sign == 1.0
        assert_allclose(special.logdet_spd(m), ref, rtol=1e-12, atol=1e-12)
        inv = special.inv_spd(m)
        assert np.array_equal(inv, inv.T)
        assert_allclose(inv, np.linalg.inv(m), rtol=1e-11, atol=1e-13)
        assert_allclose(
            special.inv_from_cholesky(np.linalg.cholesky(m)),
            np.linalg.inv(m),
            rtol=1e-11,
            atol=1e-13,
        )


def test_not_positive_definite_raises():
    with pytest.raises(np.linalg.LinAlgError):
        special.logdet_spd(np.array([[1.0, 2.0], [2.0, 1.0]]))


def test_fast_digamma_variants_against_scipy():
    """digamma_shifted (absolute 1e-14) and exp_digamma (relative 1e-13) over [1e-2, 1e8]."""
    import numpy as np
    from scipy.special import digamma as sp_digamma

    from cemodel.runtime.special import digamma_shifted, exp_digamma, weighted_sum

    xs = np.concatenate([np.logspace(-2, 8, 2001), np.linspace(0.05, 30.0, 2000)])
    for x in xs:
        ref = sp_digamma(x)
        assert abs(digamma_shifted(x) - ref) <= 1e-14 * max(1.0, abs(ref))
        assert abs(exp_digamma(x) / np.exp(ref) - 1.0) <= 1e-13
    assert weighted_sum(np.array([1.0, 2.0]), np.array([3.0, 4.0])) == 11.0


def test_exp_nonpositive_within_one_ulp_of_libm():
    """fastexp.exp_nonpositive against numpy's exp on [-750, 0]: within one unit in the last
    place for normal results, one subnormal step below them, exactly 0 below -746."""
    from numba import njit

    from cemodel.runtime.fastexp import exp_nonpositive

    @njit
    def each(x, out):
        for i in range(x.size):
            out[i] = exp_nonpositive(x[i])

    from cemodel.codegen.context import KERNEL

    # inlined into code compiled as the generated kernels are (their fastmath flags), where
    # reassociation must not fold its rounding constant
    flags = {"reassoc", "contract", "arcp"}
    assert 'fastmath={"reassoc", "contract", "arcp"}' in KERNEL

    @njit(fastmath=flags, error_model="numpy")
    def each_in_a_kernel(x, out):
        for i in range(x.size):
            out[i] = exp_nonpositive(x[i])

    rng = np.random.default_rng(0)
    x = -np.concatenate([rng.random(200_000) * 750.0, rng.random(200_000) * 2.0,
                         [0.0, 5e-324, 1e-300, 708.0, 708.5, 744.0, 745.1, 746.0, 800.0]])
    ref = np.exp(x)
    for run in (each, each_in_a_kernel):
        got = np.empty_like(x)
        run(x, got)
        assert np.all(np.abs(got - ref) <= np.spacing(ref))
        assert np.all(got[x < -746.0] == 0.0) and got[x == 0.0][0] == 1.0


def test_log_positive_within_one_ulp_of_libm():
    """fastexp.log_positive against numpy's log over the normal doubles, compiled with the
    kernels' fastmath flags: within one unit in the last place, log 1 = 0 exactly."""
    from numba import njit

    from cemodel.runtime.fastexp import log_positive

    @njit(fastmath={"reassoc", "contract", "arcp"}, error_model="numpy")
    def each(x, out):
        for i in range(x.size):
            out[i] = log_positive(x[i])

    rng = np.random.default_rng(1)
    x = np.concatenate([np.exp(rng.uniform(-708.0, 709.0, 300_000)),
                        rng.uniform(0.5, 2.0, 200_000), rng.uniform(12.0, 1e6, 100_000),
                        [1.0, 2.0, np.sqrt(2.0), np.nextafter(np.sqrt(2.0), 2.0), 12.0,
                         np.finfo(float).tiny, np.finfo(float).max]])
    got = np.empty_like(x)
    each(x, got)
    ref = np.log(x)
    assert np.all(np.abs(got - ref) <= np.spacing(np.abs(ref)))
    assert got[x == 1.0][0] == 0.0


def _vectorized(dispatcher, name: str) -> str:
    llvm = next(iter(dispatcher.inspect_llvm().values()))
    headers = [(f.split("{")[0], f) for f in llvm.split("\ndefine ")[1:]]
    return next(f for head, f in headers if name in head
                and "cpython" not in head and "cfunc" not in head)


def test_dirichlet_expected_log_row_vectorizes():
    """E[log x] of a Dirichlet row (every topic of LDA's K × V at each refresh: 25–35 ns per
    entry with libm's log, 5–7 after) is compiled to vector instructions, with no log call."""
    from cemodel.runtime import families

    lam = np.linspace(-0.9, 30.0, 20)
    out = np.empty(20)
    families.dirichlet_expected_stats(lam, out)
    ref = sps.digamma(lam + 1.0) - sps.digamma(np.sum(lam + 1.0))
    assert_allclose(out, ref, rtol=1e-14, atol=1e-14)
    kernel = _vectorized(families.dirichlet_expected_stats, "dirichlet_expected_stats")
    assert "x double>" in kernel and "@log" not in kernel


def test_dirichlet_exp_row_vectorizes():
    """The Dirichlet's exp(E[log x]) row (once per inner sweep of every Dirichlet local) is
    compiled to vector instructions: a library call or a zero-division check in its loop would
    keep it scalar, 3x slower (issue 22)."""
    from cemodel.runtime import families

    lam = np.linspace(-0.9, 30.0, 20)
    out = np.empty(20)
    families.dirichlet_exp_expected(lam, out)
    ref = np.exp(sps.digamma(lam + 1.0) - sps.digamma(np.sum(lam + 1.0)))
    assert_allclose(out, ref, rtol=1e-13)
    assert "x double>" in _vectorized(families.dirichlet_exp_expected, "dirichlet_exp_expected")


def test_dirichlet_exp_row_every_length_and_layout():
    """The row's tail (the last 8 entries recomputed, its width read from the stride) gives
    every entry for every length, on contiguous rows and on strided and reversed views."""
    from cemodel.runtime import families

    rng = np.random.default_rng(3)
    for n in range(1, 41):
        lam = rng.gamma(1.0, 5.0, n) - 0.95
        ref = np.exp(sps.digamma(lam + 1.0) - sps.digamma(np.sum(lam + 1.0)))
        wide = np.full((n, 3), np.nan)
        for out in (np.full(n, np.nan), wide[:, 1], np.full(n, np.nan)[::-1]):
            families.dirichlet_exp_expected(lam, out)
            assert_allclose(out, ref, rtol=1e-13, err_msg=f"n = {n}, strides {out.strides}")
        assert np.isnan(wide[:, [0, 2]]).all()  # nothing written beside the column


@pytest.mark.parametrize("nonpositive", [True, False])
def test_transpose_exp_is_the_transpose_and_its_exp(nonpositive):
    """rt.transpose_exp by tiles of 64 columns: every entry, for sizes that are not a
    multiple of the tile (the library exp when E may be positive, 1 ulp otherwise)."""
    from cemodel.runtime import transpose_exp

    rng = np.random.default_rng(3)
    for rows, columns in ((1, 1), (7, 63), (20, 130), (3, 64)):
        E = -rng.gamma(1.0, 3.0, (rows, columns)) + (0.0 if nonpositive else 2.0)
        ET, XT = np.full((columns, rows), np.nan), np.full((columns, rows), np.nan)
        transpose_exp(E, ET, XT, nonpositive)
        assert np.array_equal(ET, E.T)
        assert np.all(np.abs(XT - np.exp(E).T) <= np.spacing(np.exp(E).T))


@pytest.mark.parametrize("shape", [(3, 5), (4, 20), (7, 33), (130, 200)])
def test_matvec_and_vecmat_match_numpy_by_loops_and_by_blas(shape):
    """Both ways (loops of four rows with their remainder; BLAS above SMALL_PRODUCT)."""
    rng = np.random.default_rng(1)
    M = rng.random(shape)
    x, y = rng.random(shape[1]), rng.random(shape[0])
    out, out_t = np.empty(shape[0]), np.empty(shape[1])
    special.matvec(M, x, out)
    special.vecmat(y, M, out_t)
    np.testing.assert_allclose(out, M @ x, rtol=1e-13)
    np.testing.assert_allclose(out_t, y @ M, rtol=1e-13)


@pytest.mark.parametrize("categories", [3, special.SHORT_ROWS, special.SHORT_ROWS + 1, 100])
def test_gathered_rows_give_the_products_of_the_rows_themselves(categories):
    """gather_rows stores an item's rows categories × rows (few categories) or rows ×
    categories; gathered, rows_dot and rows_weighted_sum read either the same way."""
    rng = np.random.default_rng(2)
    X = rng.random((40, categories))
    index = rng.integers(0, 40, 30)
    start, n = 5, 13
    B = np.full(30 * categories, np.nan)
    special.gather_rows(B, X, index, start, n)
    rows = X[index[start:start + n]]
    G = special.gathered(B, n, categories)
    np.testing.assert_array_equal(G.T if categories <= special.SHORT_ROWS else G, rows)
    a, weights = rng.random(categories), rng.random(n)
    s, S = np.empty(n), np.empty(categories)
    special.rows_dot(G, a, s)
    special.rows_weighted_sum(G, weights, S)
    np.testing.assert_allclose(s, rows @ a, rtol=1e-13)
    np.testing.assert_allclose(S, weights @ rows, rtol=1e-13)


def test_copy_into_copies_rows_matrices_and_strided_rows():
    """rt.copy_into(out, values) is out[...] = values for one shape: a row by a flat loop
    (the local step's per-sweep copies), anything else by numba's assignment."""
    import numba

    @numba.njit(error_model="numpy")
    def copy_row_of(out, values, i):
        special.copy_into(out, values[i])

    rng = np.random.default_rng(5)
    values = rng.random((4, 7))
    out = np.full(7, np.nan)
    copy_row_of(out, values, 3)
    assert_allclose(out, values[3])
    wide = np.full((7, 3), np.nan)  # a strided destination: a column
    copy_row_of(wide[:, 1], values, 2)
    assert_allclose(wide[:, 1], values[2])
    assert np.isnan(wide[:, [0, 2]]).all()
    matrices = rng.random((3, 2, 5))
    out = np.full((2, 5), np.nan)
    copy_row_of(out, matrices, 1)
    assert_allclose(out, matrices[1])
