"""Special functions and small linear-algebra kernels used by generated numba code.

Every function is compiled with ``numba.njit(cache=True, nogil=True)`` and works on
float64 scalars or contiguous float64 arrays; nothing falls back to Python objects.
"""

import math

import numba
import numpy as np

from ..errors import CemDataError
from .fastexp import exp_nonpositive, log_positive

# Not disk-cached: numba would keep a stale copy of a helper from another file that this
# one calls. Generated kernels are cached (keyed by the runtime's fingerprint) together with
# the machine code of every helper they call, so nothing here recompiles on a cached run.
# error_model="numpy": no zero-division check and raise, which keeps loops from vectorizing.
jit = numba.njit(nogil=True, error_model="numpy")
# numba-level inlining of the small straight-line helpers of vectorized loops (LLVM left the
# tuple-returning _psi_parts as a call, and a call keeps the caller's loop scalar)
inline_jit = numba.njit(nogil=True, error_model="numpy", inline="always")

_LOG_PI = math.log(math.pi)

# Positive root of digamma (the float64 nearest to it) and psi at that float64.
_PSI_ROOT = 1.4616321449683622
_PSI_ROOT_VAL = -9.241265521729427e-17
# Taylor coefficients of psi about _PSI_ROOT: c_k = (-1)**(k + 1) * zeta(k + 1, _PSI_ROOT).
_PSI_ROOT_COEF = (
    0.9676722454476212,
    -0.4427631689835922,
    0.2584997609556511,
    -0.16394270544240658,
    0.10782405069126241,
    -0.07219956125645474,
    0.04880428816414313,
    -0.033161126474847376,
    0.022597648232218118,
    -0.01542476590494897,
    0.010538791616612184,
    -0.007204534386356875,
    0.004926781395729858,
    -0.0033698016554393312,
    0.00230512632673493,
    -0.001576936771430199,
    0.0010788252019162978,
    -0.000738070938996006,
    0.0005049532658346027,
    -0.0003454680251063082,
    0.00023635601564027086,
    -0.00016170622091974827,
    0.00011063372768747428,
    -7.569179582195078e-05,
    5.17857579522209e-05,
    -3.543007094765967e-05,
)
_PSI_ROOT_RADIUS = 0.25

# Bernoulli numbers B_2 .. B_26; the asymptotic series at x >= 6 are accurate to ~1e-16.
_BERNOULLI_EVEN = (
    1.0 / 6.0,
    -1.0 / 30.0,
    1.0 / 42.0,
    -1.0 / 30.0,
    5.0 / 66.0,
    -691.0 / 2730.0,
    7.0 / 6.0,
    -3617.0 / 510.0,
    43867.0 / 798.0,
    -174611.0 / 330.0,
    854513.0 / 138.0,
    -236364091.0 / 2730.0,
    8553103.0 / 6.0,
)
# psi(x) ~ log x - 1/(2x) - sum_n B_2n / (2n x^2n)
_DIGAMMA_ASYMP = tuple(b / (2 * (n + 1)) for n, b in enumerate(_BERNOULLI_EVEN))
# psi_1(x) ~ 1/x + 1/(2x^2) + sum_n B_2n / x^(2n+1)
_TRIGAMMA_ASYMP = _BERNOULLI_EVEN


@jit
def digamma(x: float) -> float:
    """psi(x) = d/dx log Gamma(x) for x > 0 (nan for x < 0, -inf at 0)."""
    if x <= 0.0:
        if x == 0.0:
            return -np.inf
        return np.nan
    h = x - _PSI_ROOT
    if abs(h) < _PSI_ROOT_RADIUS:
        # Taylor series about the positive root keeps full relative accuracy near psi = 0.
        acc = 0.0
        for k in range(len(_PSI_ROOT_COEF) - 1, -1, -1):
            acc = acc * h + _PSI_ROOT_COEF[k]
        return _PSI_ROOT_VAL + h * acc
    # psi(x) = psi(x + 1) - 1/x until x >= 6, then the asymptotic series.
    shift = 0.0
    while x < 6.0:
        shift += 1.0 / x
        x += 1.0
    t = 1.0 / x
    z = t * t
    acc = 0.0
    for k in range(len(_DIGAMMA_ASYMP) - 1, -1, -1):
        acc = acc * z + _DIGAMMA_ASYMP[k]
    return math.log(x) - 0.5 * t - z * acc - shift


@jit
def trigamma(x: float) -> float:
    """psi_1(x) = d^2/dx^2 log Gamma(x) for x > 0 (nan for x < 0, inf at 0)."""
    if x <= 0.0:
        if x == 0.0:
            return np.inf
        return np.nan
    # psi_1(x) = psi_1(x + 1) + 1/x^2 until x >= 6, then the asymptotic series.
    shift = 0.0
    while x < 6.0:
        shift += 1.0 / (x * x)
        x += 1.0
    t = 1.0 / x
    z = t * t
    acc = 0.0
    for k in range(len(_TRIGAMMA_ASYMP) - 1, -1, -1):
        acc = acc * z + _TRIGAMMA_ASYMP[k]
    return t + 0.5 * z + z * t * acc + shift


@jit
def lgamma(x: float) -> float:
    """log|Gamma(x)| (math.lgamma)."""
    return math.lgamma(x)


@jit
def multigammaln(a: float, d: int) -> float:
    """log Gamma_d(a) = d(d-1)/4 log(pi) + sum_{j=1..d} log Gamma(a + (1-j)/2)."""
    acc = 0.25 * d * (d - 1) * _LOG_PI
    for j in range(d):
        acc += math.lgamma(a - 0.5 * j)
    return acc


@jit
def logsumexp(v: np.ndarray) -> float:
    """log(sum_i exp(v_i)) computed as m + log(sum_i exp(v_i - m)) with m = max_i v_i."""
    n = v.shape[0]
    if n == 0:
        return -np.inf
    m = v[0]
    for i in range(1, n):
        if v[i] > m:
            m = v[i]
    if not np.isfinite(m):
        return m
    s = 0.0
    for i in range(n):
        s += math.exp(v[i] - m)
    return m + math.log(s)


@jit
def log1pexp(x: float) -> float:
    """log(1 + exp(x)), stable for large |x|."""
    if x <= -37.0:
        return math.exp(x)
    if x <= 18.0:
        return math.log1p(math.exp(x))
    if x <= 33.3:
        return x + math.exp(-x)
    return x


@jit
def softmax_inplace(v: np.ndarray) -> float:
    """v <- exp(v - A) with A = logsumexp(v); returns A."""
    n = v.shape[0]
    m = v[0]
    for i in range(1, n):
        if v[i] > m:
            m = v[i]
    s = 0.0
    for i in range(n):
        e = math.exp(v[i] - m)
        v[i] = e
        s += e
    inv = 1.0 / s
    for i in range(n):
        v[i] *= inv
    return m + math.log(s)


_NOT_POSITIVE_DEFINITE = (
    "a posterior precision or scale matrix is not positive definite in floating point: the "
    "data are on a scale too far from the prior's (rescale the data, or the prior's precision "
    "and scale hyperparameters with it)"
)


@jit
def cholesky_spd(M: np.ndarray) -> np.ndarray:
    """L with M = L L^T; a matrix that is not positive definite raises ``CemDataError``.

    Posterior matrices are sums of prior and data terms; when the data's scale dwarfs the
    prior's (x near 1e20 against a unit prior) cancellation leaves them indefinite."""
    ok = True
    try:
        L = np.linalg.cholesky(M)
    except Exception:  # numba cannot bind or re-raise the LinAlgError itself
        ok = False
        L = np.zeros_like(M)
    if not ok:
        raise CemDataError(_NOT_POSITIVE_DEFINITE)
    return L


@jit
def logdet_spd(M: np.ndarray) -> float:
    """log|M| = 2 sum_i log L_ii with M = L L^T (Cholesky), M symmetric positive definite."""
    L = np.linalg.cholesky(M)
    acc = 0.0
    for i in range(L.shape[0]):
        acc += math.log(L[i, i])
    return 2.0 * acc


@jit
def inv_from_cholesky(L: np.ndarray) -> np.ndarray:
    """M^{-1} = L^{-T} L^{-1} for M = L L^T with L lower-triangular, returned exactly symmetric."""
    n = L.shape[0]
    # Forward substitution for the lower-triangular inverse Li = L^{-1}.
    Li = np.zeros((n, n))
    for j in range(n):
        Li[j, j] = 1.0 / L[j, j]
        for i in range(j + 1, n):
            acc = 0.0
            for k in range(j, i):
                acc += L[i, k] * Li[k, j]
            Li[i, j] = -acc / L[i, i]
    out = np.empty((n, n))
    for i in range(n):
        for j in range(i + 1):
            acc = 0.0
            for k in range(i, n):
                acc += Li[k, i] * Li[k, j]
            out[i, j] = acc
            out[j, i] = acc
    return out


@jit
def inv_spd(M: np.ndarray) -> np.ndarray:
    """M^{-1} = L^{-T} L^{-1} with M = L L^T (Cholesky), M symmetric positive definite."""
    return inv_from_cholesky(cholesky_spd(M))


@jit
def frobenius(a: np.ndarray, b: np.ndarray) -> float:
    """Σ_i a_i b_i over every element of two same-shaped C-contiguous arrays (no temporary)."""
    fa = a.ravel()
    fb = b.ravel()
    total = 0.0
    for i in range(fa.shape[0]):
        total += fa[i] * fb[i]
    return total


@inline_jit
def copy_into(out: np.ndarray, values: np.ndarray) -> None:
    """out[...] = values for two arrays of one shape; a row by a plain loop (numba's
    broadcasting assignment costs 15 ns for 20 entries against 10, 51 against 14 for 100)."""
    if out.ndim == 1:
        for i in range(out.shape[0]):
            out[i] = values[i]
    else:
        out[...] = values


@inline_jit
def mean_abs_change(new: np.ndarray, old: np.ndarray) -> float:
    """mean_i |new_i − old_i| (the local step's convergence test), without a temporary."""
    fn = new.ravel()
    fo = old.ravel()
    total = 0.0
    for i in range(fn.shape[0]):
        total += abs(fn[i] - fo[i])
    return total / max(fn.shape[0], 1)


@inline_jit
def _reciprocal_sum4(x: float) -> float:
    """1/x + 1/(x+1) + 1/(x+2) + 1/(x+3) with one division: (num)/(abcd)."""
    a, b, c, d = x, x + 1.0, x + 2.0, x + 3.0
    ab, cd = a * b, c * d
    return ((a + b) * cd + (c + d) * ab) / (ab * cd)


@inline_jit
def _psi_parts(x: float) -> tuple[float, float]:
    """(y, r) with psi(x) = log y + r: psi(x + 12) − Σ_{i<12} 1/(x + i) below 12, then 7 terms
    of the asymptotic series at y (enough for 1e-16 at 12). Straight-line code (no loop, no
    call), so a loop over it vectorizes."""
    shift = 0.0
    y = x
    if x < 12.0:
        shift = _reciprocal_sum4(x) + _reciprocal_sum4(x + 4.0) + _reciprocal_sum4(x + 8.0)
        y = x + 12.0
    t = 1.0 / y
    z = t * t
    # Bernoulli terms B_2k / (2k) for k = 1..7, Horner in z
    acc = 1.0 / 12.0 - z * (1.0 / 120.0 - z * (1.0 / 252.0 - z * (1.0 / 240.0 - z * (
        1.0 / 132.0 - z * (691.0 / 32760.0 - z / 12.0)))))
    return y, -0.5 * t - z * acc - shift


@inline_jit
def digamma_shifted(x: float) -> float:
    """psi(x) by ``_psi_parts`` and ``fastexp.log_positive`` (y ≥ 12): straight-line code, so
    a loop of it vectorizes; accurate to ~1e-15 in absolute terms (``digamma`` keeps full
    relative accuracy near its root, this does not need to)."""
    y, r = _psi_parts(x)
    return log_positive(y) + r


@inline_jit
def exp_digamma(x: float) -> float:
    """exp(psi(x)) = y·exp(r) with ``_psi_parts`` (r < 0): no ``log``, and an ``exp`` without a
    library call (``fastexp``), so that a loop of it vectorizes."""
    y, r = _psi_parts(x)
    return y * exp_nonpositive(r)


# entries of a matrix below which matvec and vecmat loop instead of calling BLAS: a call
# costs ~100 ns whatever the size, and the loops below (four rows of M at a time) beat it up
# to about this size (an item's factors stored topics × rows, 20 × 114: loops 478 ns, BLAS
# 720 ns; 100 × 114: 2.23 vs 2.55 µs; 100 × 300: 5.37 vs 5.01 µs)
SMALL_PRODUCT = 16384


@inline_jit
def matvec(M: np.ndarray, x: np.ndarray, out: np.ndarray) -> None:
    """out = M x (M 2-D, rows contiguous), by loops for a small M (``SMALL_PRODUCT``), else
    BLAS; inlined, so the loops take the calling kernel's fastmath and vectorize: four rows
    at a time, each a dot product along the contiguous axis."""
    rows, cols = M.shape
    if rows * cols > SMALL_PRODUCT:
        np.dot(M, x, out)
        return
    r = 0
    while r + 4 <= rows:
        t0 = t1 = t2 = t3 = 0.0
        for c in range(cols):
            v = x[c]
            t0 += M[r, c] * v
            t1 += M[r + 1, c] * v
            t2 += M[r + 2, c] * v
            t3 += M[r + 3, c] * v
        out[r], out[r + 1], out[r + 2], out[r + 3] = t0, t1, t2, t3
        r += 4
    while r < rows:
        t0 = 0.0
        for c in range(cols):
            t0 += M[r, c] * x[c]
        out[r] = t0
        r += 1


@inline_jit
def vecmat(x: np.ndarray, M: np.ndarray, out: np.ndarray) -> None:
    """out = xᵀ M (M 2-D, rows contiguous), by loops for a small M (``SMALL_PRODUCT``), else
    BLAS: four rows of M added into ``out`` per pass along the contiguous axis."""
    rows, cols = M.shape
    if rows * cols > SMALL_PRODUCT:
        np.dot(x, M, out)
        return
    for c in range(cols):
        out[c] = 0.0
    r = 0
    while r + 4 <= rows:
        x0, x1, x2, x3 = x[r], x[r + 1], x[r + 2], x[r + 3]
        for c in range(cols):
            out[c] += x0 * M[r, c] + x1 * M[r + 1, c] + x2 * M[r + 2, c] + x3 * M[r + 3, c]
        r += 4
    while r < rows:
        x0 = x[r]
        for c in range(cols):
            out[c] += x0 * M[r, c]
        r += 1


# categories up to which an item's gathered factors are stored categories × rows (the
# products then run along the item's rows, long loops without a reduction per row: at 20
# categories and 114 rows 499 ns against 705 ns by BLAS on rows × categories); with more
# categories a row is long enough, and the transposing gather costs more than it saves
# (100 categories: the same product time, a gather 8 µs slower per document)
SHORT_ROWS = 32


@inline_jit
def gather_rows(B: np.ndarray, X: np.ndarray, index: np.ndarray, start: int, n: int) -> None:
    """Rows ``index[start:start + n]`` of ``X`` into the flat buffer ``B``: categories × rows
    (``SHORT_ROWS`` or fewer categories) or rows × categories (``gathered`` views them)."""
    size = X.shape[1]
    if size <= SHORT_ROWS:
        for j in range(n):
            row = index[start + j]
            for c in range(size):
                B[c * n + j] = X[row, c]
    else:
        for j in range(n):
            row = index[start + j]
            for c in range(size):
                B[j * size + c] = X[row, c]


@inline_jit
def gathered(B: np.ndarray, n: int, size: int) -> np.ndarray:
    """The ``n`` rows of ``size`` categories in ``B`` as ``gather_rows`` stored them."""
    if size <= SHORT_ROWS:
        return B[:size * n].reshape((size, n))
    return B[:size * n].reshape((n, size))


@inline_jit
def rows_dot(G: np.ndarray, a: np.ndarray, out: np.ndarray) -> None:
    """out_n = Σ_c G_nc a_c for the gathered rows ``G`` (``gathered``; ``a`` one per category)."""
    if a.shape[0] <= SHORT_ROWS:
        vecmat(a, G, out)
    else:
        matvec(G, a, out)


@inline_jit
def rows_weighted_sum(G: np.ndarray, weights: np.ndarray, out: np.ndarray) -> None:
    """out_c = Σ_n weights_n G_nc for the gathered rows ``G`` (``out`` one per category)."""
    if out.shape[0] <= SHORT_ROWS:
        matvec(G, weights, out)
    else:
        vecmat(weights, G, out)


@jit
def weighted_sum(weights: np.ndarray, values: np.ndarray) -> float:
    """Σ_i w_i v_i over two 1-D arrays of one length (no temporary)."""
    total = 0.0
    for i in range(weights.shape[0]):
        total += weights[i] * values[i]
    return total


@numba.njit(nogil=True, cache=True, error_model="numpy")
def all_finite(values: np.ndarray) -> bool:
    """np.all(np.isfinite(values)) in one pass, without the temporary (a stochastic step's
    check of every global: 2.7 ms on a 100 × 37,895 topic matrix, ~0.5 here)."""
    for x in values.ravel():
        if not np.isfinite(x):
            return False
    return True


@numba.njit(nogil=True, cache=True, error_model="numpy")
def all_above(values: np.ndarray, bound: float) -> bool:
    """np.all(values > bound) in one pass (nan is not above anything)."""
    for x in values.ravel():
        if not x > bound:
            return False
    return True


@numba.njit(nogil=True, cache=True, error_model="numpy")
def all_below(values: np.ndarray, bound: float) -> bool:
    """np.all(values < bound) in one pass (nan is not below anything)."""
    for x in values.ravel():
        if not x < bound:
            return False
    return True


# columns of E per tile of transpose_exp: the tile of ET and XT (this many rows of each, every
# column) stays in L2 while it is written, and each row of E is read 64 values at a time
_TILE = 64


# not disk-cached, as ``jit`` above: it inlines fastexp's exp from another file
@numba.njit(nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def transpose_exp(E: np.ndarray, ET: np.ndarray, XT: np.ndarray, nonpositive: bool) -> None:
    """ET = Eᵀ and XT = exp(E)ᵀ of a 2-D E (a global's E[log ·], one row per element of its
    plate), by tiles of columns: written a row of E at a time, each transposed store missed
    the cache (a K × V topic matrix: ~13 ns per entry). ``nonpositive``: E ≤ 0 (a Dirichlet's
    or Beta's E[log x]), whose exp needs no library call (``fastexp``), so the tile's exps
    vectorize."""
    rows, columns = E.shape
    values = np.empty(_TILE)
    for start in range(0, columns, _TILE):
        stop = min(start + _TILE, columns)
        for r in range(rows):
            if nonpositive:
                for t in range(start, stop):
                    values[t - start] = exp_nonpositive(E[r, t])
            else:
                for t in range(start, stop):
                    values[t - start] = math.exp(E[r, t])
            for t in range(start, stop):
                ET[t, r] = E[r, t]
                XT[t, r] = values[t - start]


@numba.njit(nogil=True, cache=True, error_model="numpy")
def blend(lam: np.ndarray, old: np.ndarray, rho: float) -> None:
    """λ ← (1 − ρ)·λ_old + ρ·λ̂ in place of ``lam`` (which holds λ̂): the stochastic step,
    one pass and no temporaries (both arrays C-contiguous, of one shape)."""
    new = lam.reshape(-1)
    previous = old.reshape(-1)
    keep = 1.0 - rho
    for i in range(new.size):
        new[i] = keep * previous[i] + rho * new[i]
