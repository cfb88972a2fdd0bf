"""Variational families in coefficient form.

A factor is q(x) = exp(sum_s lam_s . t_s(x) - A(lam)) with base measure h(x) = 1, where the
natural parameters lam_s are the coefficients of the sufficient statistics t_s (including the
"-1" terms, e.g. Dirichlet lam = alpha - 1) and matrix statistics pair with their coefficients
through the Frobenius product.  For each family:

* ``<fam>_expected_stats`` computes E_q[t_s(x)] = dA/dlam_s for one variable (numba);
* ``<fam>_log_normalizer`` computes A(lam) (numba), so that the entropy is
  H = A(lam) - sum_s lam_s . E[t_s];
* ``<fam>_params`` / ``<fam>_natural`` (``cemodel.runtime.parameters``) convert to / from the
  usual parameters.

Matrix coefficients (MVN ``outer``, Wishart and Normal-Wishart ``value``) are symmetrised as
(L + L^T) / 2 before use, so A is a function of all D*D entries and its gradient with respect to
each entry is the corresponding entry of the (symmetric) expected statistic.

The Normal-Gamma and Normal-Wishart families are joint blocks q(mu, tau) / q(mu, Lambda) of a
mean and its precision; their statistics are (log tau, tau, tau mu, tau mu^2) and
(Lambda, log|Lambda|, Lambda mu, mu^T Lambda mu).  The conditional normal's normaliser adds
1/2 log tau (1/2 log|Lambda|), so the log coefficient is shape - 1/2 ((dof - D) / 2).
"""

import math

import numba
import numpy as np

from .special import (
    cholesky_spd,
    digamma,
    digamma_shifted,
    exp_digamma,
    inv_from_cholesky,
    inv_spd,
    lgamma,
    log1pexp,
    logsumexp,
    multigammaln,
    softmax_inplace,
)

# Not disk-cached: numba would keep a stale copy of a helper from another file that this
# one calls. Generated kernels are cached (keyed by the runtime's fingerprint) together with
# the machine code of every helper they call, so nothing here recompiles on a cached run.
jit = numba.njit(nogil=True, error_model="numpy")

_LOG_2PI = math.log(2.0 * math.pi)
_LOG_2 = math.log(2.0)


# ---------------------------------------------------------------------------------------------
# numba kernels
# ---------------------------------------------------------------------------------------------


@jit
def _neg_sym2(L: np.ndarray) -> np.ndarray:
    """-(L + L^T), i.e. -2 * sym(L)."""
    n = L.shape[0]
    out = np.empty((n, n))
    for i in range(n):
        for j in range(n):
            out[i, j] = -(L[i, j] + L[j, i])
    return out


# Dirichlet: t = log x, lam = alpha - 1 ------------------------------------------------------


@jit
def dirichlet_expected_stats(lam_log: np.ndarray, out_log: np.ndarray) -> None:
    """out_log[k] = E[log x_k] = psi(alpha_k) - psi(sum_j alpha_j), alpha = lam_log + 1."""
    n = lam_log.shape[0]
    total = 0.0
    for k in range(n):
        total += lam_log[k] + 1.0
    psi_total = digamma(total)
    for k in range(n):
        out_log[k] = digamma_shifted(lam_log[k] + 1.0) - psi_total


@jit
def dirichlet_exp_expected(lam_log: np.ndarray, out_exp: np.ndarray) -> None:
    """out_exp[k] = exp(E[log x_k]) = exp(psi(alpha_k)) / exp(psi(sum_j alpha_j)), no logs."""
    n = lam_log.shape[0]
    total = 0.0
    for k in range(n):
        total += lam_log[k] + 1.0
    scale = 1.0 / exp_digamma(total)
    # The loop vectorizes 8 entries at a time and leaves n % 8 to scalar code, ~4× slower
    # per entry (K = 20: 16 + 4 cost as much as 24 + 12). So the tail is recomputed as the
    # last 8 entries, overlapping (each entry is a function of its own α alone). The width
    # is read from the row's stride (8 bytes): a trip count LLVM sees as a constant it
    # unrolls into scalar code instead.
    width = out_exp.strides[0]
    body = n - n % 8 if width >= 8 and n >= width else n
    for k in range(body):
        out_exp[k] = exp_digamma(lam_log[k] + 1.0) * scale
    if body < n:
        for k in range(n - width, n):
            out_exp[k] = exp_digamma(lam_log[k] + 1.0) * scale


@jit
def dirichlet_log_normalizer(lam_log: np.ndarray) -> float:
    """A = sum_k lnGamma(alpha_k) - lnGamma(sum_k alpha_k), alpha = lam_log + 1."""
    total = 0.0
    acc = 0.0
    for k in range(lam_log.shape[0]):
        a = lam_log[k] + 1.0
        total += a
        acc += lgamma(a)
    return acc - lgamma(total)


# Beta: t = (log x, log(1 - x)), lam = (a - 1, b - 1) -----------------------------------------


@jit
def beta_expected_stats(lam_log: float, lam_log1m: float) -> tuple[float, float]:
    """(E[log x], E[log(1-x)]) = (psi(a) - psi(a+b), psi(b) - psi(a+b)), a, b = lam + 1."""
    a = lam_log + 1.0
    b = lam_log1m + 1.0
    psi_ab = digamma(a + b)
    return digamma(a) - psi_ab, digamma(b) - psi_ab


@jit
def beta_log_normalizer(lam_log: float, lam_log1m: float) -> float:
    """A = lnGamma(a) + lnGamma(b) - lnGamma(a + b), a, b = lam + 1."""
    a = lam_log + 1.0
    b = lam_log1m + 1.0
    return lgamma(a) + lgamma(b) - lgamma(a + b)


# Gamma (shape a, rate b): t = (log x, x), lam = (a - 1, -b) -----------------------------------


@jit
def gamma_expected_stats(lam_log: float, lam_value: float) -> tuple[float, float]:
    """(E[log x], E[x]) = (psi(a) - log b, a / b), a = lam_log + 1, b = -lam_value."""
    a = lam_log + 1.0
    b = -lam_value
    return digamma(a) - math.log(b), a / b


@jit
def gamma_log_normalizer(lam_log: float, lam_value: float) -> float:
    """A = lnGamma(a) - a log b, a = lam_log + 1, b = -lam_value."""
    a = lam_log + 1.0
    b = -lam_value
    return lgamma(a) - a * math.log(b)


# Normal (mean m, precision tau): t = (x, x^2), lam = (tau m, -tau/2) --------------------------


@jit
def normal_expected_stats(lam_value: float, lam_square: float) -> tuple[float, float]:
    """(E[x], E[x^2]) = (m, m^2 + 1/tau), tau = -2 lam_square, m = lam_value / tau."""
    tau = -2.0 * lam_square
    m = lam_value / tau
    return m, m * m + 1.0 / tau


@jit
def normal_log_normalizer(lam_value: float, lam_square: float) -> float:
    """A = tau m^2 / 2 - log(tau) / 2 + log(2 pi) / 2, tau = -2 lam_square, m = lam_value / tau."""
    tau = -2.0 * lam_square
    return 0.5 * lam_value * lam_value / tau - 0.5 * math.log(tau) + 0.5 * _LOG_2PI


# Multivariate normal (mean m, precision P): t = (x, x x^T), lam = (P m, -P/2) -----------------


@jit
def mvn_expected_stats(
    lam_value: np.ndarray, lam_outer: np.ndarray, out_value: np.ndarray, out_outer: np.ndarray
) -> None:
    """E[x] = m = P^{-1} lam_value, E[x x^T] = P^{-1} + m m^T, P = -(lam_outer + lam_outer^T)."""
    n = lam_value.shape[0]
    cov = inv_spd(_neg_sym2(lam_outer))
    for i in range(n):
        acc = 0.0
        for j in range(n):
            acc += cov[i, j] * lam_value[j]
        out_value[i] = acc
    for i in range(n):
        for j in range(n):
            out_outer[i, j] = cov[i, j] + out_value[i] * out_value[j]


@jit
def mvn_log_normalizer(lam_value: np.ndarray, lam_outer: np.ndarray) -> float:
    """A = m^T P m / 2 - log|P| / 2 + (D/2) log(2 pi), P = -(lam_outer + lam_outer^T)."""
    n = lam_value.shape[0]
    chol = cholesky_spd(_neg_sym2(lam_outer))
    # m^T P m = lam^T P^{-1} lam = |y|^2 with chol @ y = lam_value.
    y = np.empty(n)
    quad = 0.0
    logdet = 0.0
    for i in range(n):
        acc = lam_value[i]
        for k in range(i):
            acc -= chol[i, k] * y[k]
        y[i] = acc / chol[i, i]
        quad += y[i] * y[i]
        logdet += math.log(chol[i, i])
    return 0.5 * quad - logdet + 0.5 * n * _LOG_2PI


# Wishart (dof nu, scale W): t = (Lambda, log|Lambda|), lam = (-W^{-1}/2, (nu - D - 1)/2) -------


@jit
def wishart_expected_stats(
    lam_value: np.ndarray, lam_logdet: float, out_value: np.ndarray
) -> float:
    """out = nu W; returns E[log|Lambda|] = sum_i psi((nu+1-i)/2) + D log 2 + log|W|."""
    n = lam_value.shape[0]
    chol = cholesky_spd(_neg_sym2(lam_value))  # W^{-1} = L L^T
    scale = inv_from_cholesky(chol)
    nu = 2.0 * lam_logdet + n + 1.0
    for i in range(n):
        for j in range(n):
            out_value[i, j] = nu * scale[i, j]
    acc = n * _LOG_2
    for i in range(n):
        acc += digamma(0.5 * (nu - i)) - 2.0 * math.log(chol[i, i])
    return acc


@jit
def wishart_log_normalizer(lam_value: np.ndarray, lam_logdet: float) -> float:
    """A = (nu D / 2) log 2 + (nu / 2) log|W| + ln Gamma_D(nu / 2), W = (-2 sym(lam_value))^{-1}."""
    n = lam_value.shape[0]
    chol = cholesky_spd(_neg_sym2(lam_value))
    logdet_w = 0.0
    for i in range(n):
        logdet_w -= 2.0 * math.log(chol[i, i])
    nu = 2.0 * lam_logdet + n + 1.0
    return 0.5 * nu * n * _LOG_2 + 0.5 * nu * logdet_w + multigammaln(0.5 * nu, n)


# Normal-Gamma block q(mu, tau) (mean m, beta, shape a, rate b): tau ~ Gamma(a, b),
# mu | tau ~ Normal(m, precision beta tau); t = (log tau, tau, tau mu, tau mu^2),
# lam = (a - 1/2, -b - beta m^2 / 2, beta m, -beta / 2) ------------------------------------


@jit
def _normal_gamma_usual(
    lam_log: float, lam_value: float, lam_prec_mean: float, lam_quad: float
) -> tuple[float, float, float, float]:
    """(m, beta, a, b): beta = -2 lam_quad, m = lam_prec_mean / beta, a = lam_log + 1/2,
    b = -lam_value - beta m^2 / 2 (``normal_gamma_params`` for one element)."""
    beta = -2.0 * lam_quad
    m = lam_prec_mean / beta
    return m, beta, lam_log + 0.5, -lam_value - 0.5 * beta * m * m


@jit
def normal_gamma_expected_stats(
    lam_log: float, lam_value: float, lam_prec_mean: float, lam_quad: float
) -> tuple[float, float, float, float]:
    """(E[log tau], E[tau], E[tau mu], E[tau mu^2]) = (psi(a) - log b, a/b, m a/b,
    1/beta + m^2 a/b)."""
    m, beta, a, b = _normal_gamma_usual(lam_log, lam_value, lam_prec_mean, lam_quad)
    e_tau = a / b
    return digamma(a) - math.log(b), e_tau, m * e_tau, 1.0 / beta + m * m * e_tau


@jit
def normal_gamma_log_normalizer(
    lam_log: float, lam_value: float, lam_prec_mean: float, lam_quad: float
) -> float:
    """A = lnGamma(a) - a log b + log(2 pi) / 2 - log(beta) / 2."""
    _m, beta, a, b = _normal_gamma_usual(lam_log, lam_value, lam_prec_mean, lam_quad)
    return lgamma(a) - a * math.log(b) + 0.5 * _LOG_2PI - 0.5 * math.log(beta)


# Normal-Wishart block q(mu, Lambda) (mean m, beta, dof nu, scale W): Lambda ~ Wishart(nu, W),
# mu | Lambda ~ MVN(m, precision beta Lambda); t = (Lambda, log|Lambda|, Lambda mu,
# mu^T Lambda mu), lam = (-(W^{-1} + beta m m^T)/2, (nu - D)/2, beta m, -beta/2) -------------


@jit
def _normal_wishart_chol(
    lam_value: np.ndarray, lam_prec_mean: np.ndarray, lam_quad: float
) -> tuple[float, np.ndarray, np.ndarray]:
    """(beta, m, L) with L L^T = W^{-1} = -2 sym(lam_value) - beta m m^T."""
    n = lam_value.shape[0]
    beta = -2.0 * lam_quad
    m = np.empty(n)
    for i in range(n):
        m[i] = lam_prec_mean[i] / beta
    w_inv = _neg_sym2(lam_value)
    for i in range(n):
        for j in range(n):
            w_inv[i, j] -= beta * m[i] * m[j]
    return beta, m, cholesky_spd(w_inv)


@jit
def normal_wishart_expected_stats(
    lam_value: np.ndarray,
    lam_logdet: float,
    lam_prec_mean: np.ndarray,
    lam_quad: float,
    out_value: np.ndarray,
    out_prec_mean: np.ndarray,
) -> tuple[float, float]:
    """out_value = E[Lambda] = nu W, out_prec_mean = E[Lambda mu] = nu W m; returns
    (E[log|Lambda|], E[mu^T Lambda mu]) = (sum_{i<D} psi((nu - i)/2) + D log 2 + log|W|,
    D / beta + nu m^T W m), nu = 2 lam_logdet + D."""
    n = lam_value.shape[0]
    beta, m, chol = _normal_wishart_chol(lam_value, lam_prec_mean, lam_quad)
    scale = inv_from_cholesky(chol)
    nu = 2.0 * lam_logdet + n
    quad = 0.0
    for i in range(n):
        acc = 0.0
        for j in range(n):
            out_value[i, j] = nu * scale[i, j]
            acc += out_value[i, j] * m[j]
        out_prec_mean[i] = acc
        quad += m[i] * acc
    e_logdet = n * _LOG_2
    for i in range(n):
        e_logdet += digamma(0.5 * (nu - i)) - 2.0 * math.log(chol[i, i])
    return e_logdet, n / beta + quad


@jit
def normal_wishart_log_normalizer(
    lam_value: np.ndarray, lam_logdet: float, lam_prec_mean: np.ndarray, lam_quad: float
) -> float:
    """A = (D/2) log(2 pi) - (D/2) log beta + (nu D / 2) log 2 + (nu / 2) log|W|
    + ln Gamma_D(nu / 2), W^{-1} = -2 sym(lam_value) - beta m m^T, nu = 2 lam_logdet + D."""
    n = lam_value.shape[0]
    beta, _m, chol = _normal_wishart_chol(lam_value, lam_prec_mean, lam_quad)
    logdet_w = 0.0
    for i in range(n):
        logdet_w -= 2.0 * math.log(chol[i, i])
    nu = 2.0 * lam_logdet + n
    return (
        0.5 * n * (_LOG_2PI - math.log(beta))
        + 0.5 * nu * n * _LOG_2
        + 0.5 * nu * logdet_w
        + multigammaln(0.5 * nu, n)
    )


# Categorical: t = onehot(x), lam = unnormalised log-probabilities ----------------------------


@jit
def categorical_expected_stats(lam: np.ndarray, out: np.ndarray) -> float:
    """out = E[onehot] = softmax(lam); returns A = logsumexp(lam)."""
    for k in range(lam.shape[0]):
        out[k] = lam[k]
    return softmax_inplace(out)


@jit
def categorical_log_normalizer(lam: np.ndarray) -> float:
    """A = log sum_k exp(lam_k)."""
    return logsumexp(lam)


@jit
def categorical_entropy(q: np.ndarray) -> float:
    """H = −Σ_k q_k log q_k (0 log 0 = 0); needs only the probabilities."""
    h = 0.0
    for k in range(q.shape[0]):
        if q[k] > 0.0:
            h -= q[k] * math.log(q[k])
    return h


# Split counts (cemodel.augment): q(c) = Multinomial(n, softmax(lam)), t = c -----------------


@jit
def split_expected_stats(lam: np.ndarray, out: np.ndarray, total: float) -> float:
    """out = E[c] = n·softmax(lam); returns logsumexp(lam)."""
    for k in range(lam.shape[0]):
        out[k] = lam[k]
    log_norm = softmax_inplace(out)
    for k in range(lam.shape[0]):
        out[k] *= total
    return log_norm


@jit
def split_entropy(lam: np.ndarray, expected: np.ndarray) -> float:
    """−Σ_k E[c_k] log φ_k: the entropy of q(c) without its base measure ln n! − Σ ln c_k!,
    which cancels against the Poisson terms' (cemodel.families.split)."""
    log_norm = logsumexp(lam)
    h = 0.0
    for k in range(lam.shape[0]):
        if expected[k] > 0.0:
            h -= expected[k] * (lam[k] - log_norm)
    return h


@jit
def normalize_inplace(q: np.ndarray) -> bool:
    """q /= Σq; False (q untouched) when the sum underflowed or is not finite."""
    total = 0.0
    for k in range(q.shape[0]):
        total += q[k]
    if not (total > 0.0) or not math.isfinite(total):
        return False
    for k in range(q.shape[0]):
        q[k] /= total
    return True


# Bernoulli: t = x in {0, 1}, lam = logit ------------------------------------------------------


@jit
def bernoulli_expected_stats(lam: float) -> float:
    """E[x] = sigmoid(lam) = 1 / (1 + exp(-lam))."""
    if lam >= 0.0:
        return 1.0 / (1.0 + math.exp(-lam))
    e = math.exp(lam)
    return e / (1.0 + e)


@jit
def bernoulli_log_normalizer(lam: float) -> float:
    """A = log(1 + exp(lam))."""
    return log1pexp(lam)
