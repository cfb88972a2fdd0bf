"""The exact smoother for the GaussianChain local factor (Kalman/RTS in information form).

The chain's variational posterior given the rest is one Gaussian over x_0..x_{n−1},

    log q(x) = Σ_t h_tᵀ x_t − ½ Σ_t x_tᵀ J_tt x_t − Σ_{t≥1} x_tᵀ J_{t,t−1} x_{t−1} + const,

with a block-tridiagonal precision J built from the per-step natural parameters (the messages
the generated kernels write: the emissions' and the prior's coefficients of x_t, x_t x_tᵀ,
x_t x_{t−1}ᵀ and x_{t−1} x_{t−1}ᵀ). A forward pass eliminates x_0, x_1, ... (the information
filter: J̃_t = J_tt − J_{t,t−1} J̃_{t−1}⁻¹ J_{t−1,t}, h̃_t = h_t − J_{t,t−1} J̃_{t−1}⁻¹ h̃_{t−1})
and a backward pass gives the smoothed moments (Rauch, Tung & Striebel 1965; Beal 2003 §5.3):
μ_t = J̃_t⁻¹(h̃_t − J_{t,t+1} μ_{t+1}), Σ_t = J̃_t⁻¹ + G_t Σ_{t+1} G_tᵀ,
Cov(x_t, x_{t+1}) = −G_t Σ_{t+1} with G_t = J̃_t⁻¹ J_{t,t+1}. log|J| = Σ_t log|J̃_t|.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from .special import cholesky_spd, inv_from_cholesky

jit = njit(cache=True, nogil=True, error_model="numpy")

_LOG_2PI_E = math.log(2.0 * math.pi) + 1.0


@jit
def _precision_blocks(l_outer, l_start_outer, l_step_outer, l_prev_outer, n):
    """J_tt = −(M + Mᵀ), M the coefficient of x_t x_tᵀ in log q (every message that holds it)."""
    d = l_outer.shape[1]
    diag = np.empty((n, d, d))
    for t in range(n):
        m = l_outer[t].copy()
        if t == 0:
            m += l_start_outer[0]
        else:
            m += l_step_outer[t]
        if t + 1 < n:
            m += l_prev_outer[t + 1]
        for i in range(d):
            for j in range(d):
                diag[t, i, j] = -(m[i, j] + m[j, i])
    return diag


@jit
def _forward(diag, h, l_cross, n):
    """The information filter: J̃_t⁻¹ (returned as ``inv``), h̃_t and log|J| = Σ log|J̃_t|."""
    d = h.shape[1]
    inv = np.empty((n, d, d))
    hf = np.empty((n, d))
    logdet = 0.0
    for t in range(n):
        jt = diag[t].copy()
        ht = h[t].copy()
        if t > 0:
            # J_{t,t−1} = −C_t (C_t = l_cross[t]): J̃_t = J_tt − C_t J̃⁻¹ C_tᵀ, h̃_t = h_t + C_t J̃⁻¹ h̃
            c = l_cross[t]
            ci = c @ inv[t - 1]
            jt -= ci @ c.T
            ht += ci @ hf[t - 1]
        chol = cholesky_spd(0.5 * (jt + jt.T))
        for i in range(d):
            logdet += 2.0 * math.log(chol[i, i])
        inv[t] = inv_from_cholesky(chol)
        hf[t] = ht
    return inv, hf, logdet


@jit
def gaussian_chain_posterior(
        l_value, l_outer, l_start, l_start_value, l_start_outer, l_step, l_step_outer, l_cross,
        l_prev_outer, e_value, e_outer, e_start, e_start_value, e_start_outer, e_step,
        e_step_outer, e_cross, e_prev_outer, n: int) -> float:
    """The smoothed moments of the chain's n steps (rows 0..n−1 of every array).

    l_*: the natural parameters per step, one array per statistic of GaussianChain (rows
    t = 0 of the start ones and t ≥ 1 of the step ones are used; l_start and l_step are
    constants of x and unused). Writes E[x_t], E[x_t x_tᵀ], the indicators [t = 0], [t ≥ 1]
    and their products with x_t, x_t x_tᵀ, E[x_t x_{t−1}ᵀ] and E[x_{t−1} x_{t−1}ᵀ]. Returns the
    entropy of q, ½ n D (1 + log 2π) − ½ log|J|.
    """
    if n == 0:
        return 0.0
    d = l_value.shape[1]
    h = l_value[:n].copy()
    h[0] += l_start_value[0]
    diag = _precision_blocks(l_outer, l_start_outer, l_step_outer, l_prev_outer, n)
    inv, hf, logdet = _forward(diag, h, l_cross, n)
    cov = inv[n - 1].copy()
    mean = inv[n - 1] @ hf[n - 1]
    for t in range(n - 1, -1, -1):
        if t < n - 1:
            # J_{t,t+1} = −C_{t+1}ᵀ: G_t = −J̃_t⁻¹ C_{t+1}ᵀ, μ_t = J̃_t⁻¹(h̃_t + C_{t+1}ᵀ μ_{t+1})
            ct = l_cross[t + 1].T
            g = -(inv[t] @ ct)
            new_mean = inv[t] @ (hf[t] + ct @ mean)
            across = -(g @ cov)  # Cov(x_t, x_{t+1})
            new_cov = inv[t] + g @ cov @ g.T
            for i in range(d):
                for j in range(d):
                    # E[x_{t+1} x_tᵀ]
                    e_cross[t + 1, i, j] = across[j, i] + mean[i] * new_mean[j]
            mean, cov = new_mean, new_cov
        for i in range(d):
            e_value[t, i] = mean[i]
            for j in range(d):
                e_outer[t, i, j] = 0.5 * (cov[i, j] + cov[j, i]) + mean[i] * mean[j]
    for t in range(n):
        first = 1.0 if t == 0 else 0.0
        later = 1.0 - first
        e_start[t] = first
        e_step[t] = later
        e_start_value[t] = first * e_value[t]
        e_start_outer[t] = first * e_outer[t]
        e_step_outer[t] = later * e_outer[t]
        if t == 0:
            e_cross[0] = 0.0
            e_prev_outer[0] = 0.0
        else:
            e_prev_outer[t] = e_outer[t - 1]
    return 0.5 * n * d * _LOG_2PI_E - 0.5 * logdet
