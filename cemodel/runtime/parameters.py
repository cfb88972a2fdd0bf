"""Conversions between the coefficient form of ``cemodel.runtime.families`` and the usual
parameters of each family (plain numpy, vectorised over leading batch axes; ``<fam>_natural``
always returns a tuple in statistic order). Matrix coefficients are symmetrised as
(L + L^T) / 2 before use, as the kernels do.
"""

import numpy as np


def _sym(a: np.ndarray) -> np.ndarray:
    return 0.5 * (a + np.swapaxes(a, -1, -2))


def dirichlet_params(lam_log: np.ndarray) -> np.ndarray:
    """alpha = lam_log + 1."""
    return np.asarray(lam_log, dtype=np.float64) + 1.0


def dirichlet_natural(alpha: np.ndarray) -> tuple[np.ndarray]:
    """(lam_log,) = (alpha - 1,)."""
    return (np.asarray(alpha, dtype=np.float64) - 1.0,)


def beta_params(lam_log: np.ndarray, lam_log1m: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(a, b) = (lam_log + 1, lam_log1m + 1)."""
    return (
        np.asarray(lam_log, dtype=np.float64) + 1.0,
        np.asarray(lam_log1m, dtype=np.float64) + 1.0,
    )


def beta_natural(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(lam_log, lam_log1m) = (a - 1, b - 1)."""
    return np.asarray(a, dtype=np.float64) - 1.0, np.asarray(b, dtype=np.float64) - 1.0


def gamma_params(lam_log: np.ndarray, lam_value: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(shape, rate) = (lam_log + 1, -lam_value)."""
    return np.asarray(lam_log, dtype=np.float64) + 1.0, -np.asarray(lam_value, dtype=np.float64)


def gamma_natural(shape: np.ndarray, rate: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(lam_log, lam_value) = (shape - 1, -rate)."""
    return np.asarray(shape, dtype=np.float64) - 1.0, -np.asarray(rate, dtype=np.float64)


def normal_params(lam_value: np.ndarray, lam_square: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(mean, precision) = (lam_value / tau, tau) with tau = -2 lam_square."""
    tau = -2.0 * np.asarray(lam_square, dtype=np.float64)
    return np.asarray(lam_value, dtype=np.float64) / tau, tau


def normal_natural(mean: np.ndarray, precision: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(lam_value, lam_square) = (precision * mean, -precision / 2)."""
    tau = np.asarray(precision, dtype=np.float64)
    return tau * np.asarray(mean, dtype=np.float64), -0.5 * tau


def mvn_params(lam_value: np.ndarray, lam_outer: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(mean, precision) = (P^{-1} lam_value, P) with P = -(lam_outer + lam_outer^T)."""
    prec = -2.0 * _sym(np.asarray(lam_outer, dtype=np.float64))
    lam_value = np.asarray(lam_value, dtype=np.float64)
    mean = np.linalg.solve(prec, lam_value[..., None])[..., 0]
    return mean, prec


def mvn_natural(mean: np.ndarray, precision: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(lam_value, lam_outer) = (P mean, -P / 2)."""
    prec = np.asarray(precision, dtype=np.float64)
    mean = np.asarray(mean, dtype=np.float64)
    return (prec @ mean[..., None])[..., 0], -0.5 * prec


def wishart_params(lam_value: np.ndarray, lam_logdet: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(dof, scale) = (2 lam_logdet + D + 1, (-(lam_value + lam_value^T))^{-1})."""
    lam_value = np.asarray(lam_value, dtype=np.float64)
    d = lam_value.shape[-1]
    scale = _sym(np.linalg.inv(-2.0 * _sym(lam_value)))
    return 2.0 * np.asarray(lam_logdet, dtype=np.float64) + d + 1.0, scale


def wishart_natural(dof: np.ndarray, scale: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(lam_value, lam_logdet) = (-W^{-1} / 2, (dof - D - 1) / 2)."""
    scale = np.asarray(scale, dtype=np.float64)
    d = scale.shape[-1]
    lam_value = -0.5 * _sym(np.linalg.inv(scale))
    return lam_value, 0.5 * (np.asarray(dof, dtype=np.float64) - d - 1.0)


def normal_gamma_params(
    lam_log: np.ndarray, lam_value: np.ndarray, lam_prec_mean: np.ndarray, lam_quad: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(mean, beta, shape, rate) = (lam_prec_mean / beta, -2 lam_quad, lam_log + 1/2,
    -lam_value - beta mean^2 / 2)."""
    beta = -2.0 * np.asarray(lam_quad, dtype=np.float64)
    mean = np.asarray(lam_prec_mean, dtype=np.float64) / beta
    shape = np.asarray(lam_log, dtype=np.float64) + 0.5
    rate = -np.asarray(lam_value, dtype=np.float64) - 0.5 * beta * mean * mean
    return mean, beta, shape, rate


def normal_gamma_natural(
    mean: np.ndarray, beta: np.ndarray, shape: np.ndarray, rate: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(lam_log, lam_value, lam_prec_mean, lam_quad)
    = (shape - 1/2, -rate - beta mean^2 / 2, beta mean, -beta / 2)."""
    mean = np.asarray(mean, dtype=np.float64)
    beta = np.asarray(beta, dtype=np.float64)
    return (
        np.asarray(shape, dtype=np.float64) - 0.5,
        -np.asarray(rate, dtype=np.float64) - 0.5 * beta * mean * mean,
        beta * mean,
        -0.5 * beta,
    )


def normal_wishart_params(
    lam_value: np.ndarray, lam_logdet: np.ndarray, lam_prec_mean: np.ndarray, lam_quad: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(mean, beta, dof, scale) = (lam_prec_mean / beta, -2 lam_quad, 2 lam_logdet + D,
    (-2 sym(lam_value) - beta mean mean^T)^{-1})."""
    lam_value = np.asarray(lam_value, dtype=np.float64)
    d = lam_value.shape[-1]
    beta = -2.0 * np.asarray(lam_quad, dtype=np.float64)
    mean = np.asarray(lam_prec_mean, dtype=np.float64) / beta[..., None]
    outer = mean[..., :, None] * mean[..., None, :]
    w_inv = -2.0 * _sym(lam_value) - beta[..., None, None] * outer
    scale = _sym(np.linalg.inv(w_inv))
    return mean, beta, 2.0 * np.asarray(lam_logdet, dtype=np.float64) + d, scale


def normal_wishart_natural(
    mean: np.ndarray, beta: np.ndarray, dof: np.ndarray, scale: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(lam_value, lam_logdet, lam_prec_mean, lam_quad)
    = (-(W^{-1} + beta mean mean^T) / 2, (dof - D) / 2, beta mean, -beta / 2)."""
    scale = np.asarray(scale, dtype=np.float64)
    d = scale.shape[-1]
    mean = np.asarray(mean, dtype=np.float64)
    beta = np.asarray(beta, dtype=np.float64)
    outer = mean[..., :, None] * mean[..., None, :]
    lam_value = -0.5 * (_sym(np.linalg.inv(scale)) + beta[..., None, None] * outer)
    return (
        lam_value,
        0.5 * (np.asarray(dof, dtype=np.float64) - d),
        beta[..., None] * mean,
        -0.5 * beta,
    )


def categorical_params(lam: np.ndarray) -> np.ndarray:
    """probs = softmax(lam) along the last axis, in one array the size of lam (an N × K
    posterior of a large data plate is not copied three times)."""
    lam = np.asarray(lam, dtype=np.float64)
    probs = lam - np.max(lam, axis=-1, keepdims=True)
    np.exp(probs, out=probs)
    probs /= np.sum(probs, axis=-1, keepdims=True)
    return probs


def categorical_natural(probs: np.ndarray) -> tuple[np.ndarray]:
    """(lam,) = (log probs,)."""
    with np.errstate(divide="ignore"):
        return (np.log(np.asarray(probs, dtype=np.float64)),)


def bernoulli_params(lam: np.ndarray) -> np.ndarray:
    """p = sigmoid(lam) = 1 / (1 + exp(-lam))."""
    lam = np.asarray(lam, dtype=np.float64)
    e = np.exp(-np.abs(lam))
    return np.where(lam >= 0.0, 1.0 / (1.0 + e), e / (1.0 + e))


def bernoulli_natural(p: np.ndarray) -> tuple[np.ndarray]:
    """(lam,) = (log p - log(1 - p),)."""
    p = np.asarray(p, dtype=np.float64)
    with np.errstate(divide="ignore"):
        return (np.log(p) - np.log1p(-p),)
