"""Empirical Bayes: hyperparameters that maximise the ELBO given q (Minka 2000).

Each function takes the current value and the expected sufficient statistics of the
variables the hyperparameter governs (one row per variable) and returns the maximiser of
Σ_rows E_q[log p(row | hyper)], which is concave in the hyperparameter.
"""

from __future__ import annotations

import numpy as np
from scipy.special import digamma, polygamma


def learn_symmetric_dirichlet(current: float, E_log: np.ndarray, iters: int = 100) -> float:
    """a maximising R (lnΓ(K a) − K lnΓ(a)) + (a − 1) Σ E[log x] over rows of E_log (R × K).

    Newton's method in log a (Minka 2000, §2 for the symmetric case)."""
    E_log = np.asarray(E_log, dtype=float)
    rows, K = E_log.reshape(-1, E_log.shape[-1]).shape
    total = float(E_log.sum())

    def step(a: float) -> float:
        grad = rows * K * (digamma(K * a) - digamma(a)) + total
        hess = rows * K * (K * polygamma(1, K * a) - polygamma(1, a))
        # d/dlog a: g·a ; d²/dlog a²: h·a² + g·a
        return grad * a / (hess * a * a + grad * a)

    return _newton_in_log(current, step, iters)


def _newton_in_log(x: float, step, iters: int) -> float:
    """Newton's method in log x from ``x``: log x −= step(x) until the step is below 1e-12."""
    log_x = np.log(x)
    for _ in range(iters):
        delta = step(np.exp(log_x))
        if not np.isfinite(delta):
            break
        log_x -= delta
        if abs(delta) < 1e-12:
            break
    return float(np.exp(log_x))


def inverse_digamma(y: float, iters: int = 20) -> float:
    """x with ψ(x) = y (Minka's initialisation and Newton steps)."""
    x = np.exp(y) + 0.5 if y >= -2.22 else -1.0 / (y - digamma(1.0))
    for _ in range(iters):
        x -= (digamma(x) - y) / polygamma(1, x)
    return float(x)


def learn_gamma_shape(rate: float, E_log: np.ndarray) -> float:
    """a maximising Σ_rows (a log b − lnΓ(a) + (a − 1) E[log x]): ψ(a) = log b + mean E[log x]."""
    return inverse_digamma(np.log(rate) + float(np.mean(E_log)))


def learn_gamma_rate(shape: float, E_value: np.ndarray) -> float:
    """b maximising Σ_rows (a log b − b E[x]): b = a R / Σ E[x]."""
    E_value = np.asarray(E_value, dtype=float)
    return float(shape * E_value.size / E_value.sum())


def learn_beta_param(other: float, E_stat: np.ndarray, iters: int = 100) -> float:
    """a maximising Σ_rows (lnΓ(a + b) − lnΓ(a) + (a − 1) E[t]) for Beta(a, b) with b = ``other``
    known, E[t] = E[log x] (or, for b given a, E[log(1 − x)]):

        ψ(a + b) − ψ(a) = −mean E[t]

    (Minka 2000), by Newton's method in log a; for b = 1 exactly a = −1 / mean E[t] (the
    concentration of stick-breaking weights, v_k ~ Beta(1, α): α = −R / Σ E[log(1 − v_k)])."""
    target = -float(np.mean(E_stat))
    if other == 1.0:
        return 1.0 / target

    def step(a: float) -> float:
        grad = digamma(a + other) - digamma(a) - target
        return grad / ((polygamma(1, a + other) - polygamma(1, a)) * a)  # (< 0: one root)

    return _newton_in_log(other / target, step, iters)  # ψ(a + b) − ψ(a) ≈ b / a


__all__ = ["inverse_digamma", "learn_beta_param", "learn_gamma_rate", "learn_gamma_shape",
           "learn_symmetric_dirichlet"]
