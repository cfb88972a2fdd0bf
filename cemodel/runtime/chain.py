"""Forward–backward for the MarkovChain local factor (Rabiner 1989, in log space).

The chain's variational posterior is the exact distribution

    q(z_0..z_{n−1}) ∝ exp(Σ_t e_t[z_t] + f[z_0] + Σ_{t≥1} P_t[z_{t−1}, z_t])

with e_t the emission log-potentials of step t (the messages from the children), f the
initial ones (E[log π0]) and P_t the transition ones (E[log A]), one per step as the
generated kernels lay them out. It is the coordinate-ascent optimum of q(z) given the
globals, so the local step is exact.
"""

from __future__ import annotations

import numpy as np
from numba import njit

jit = njit(cache=True, nogil=True)


@jit
def _logsumexp(values: np.ndarray) -> float:
    top = values.max()
    if not np.isfinite(top):
        return top
    total = 0.0
    for v in values:
        total += np.exp(v - top)
    return top + np.log(total)


@jit
def chain_posterior(emission: np.ndarray, first: np.ndarray, pair: np.ndarray,
                    q: np.ndarray, q_first: np.ndarray, q_pair: np.ndarray, n: int) -> float:
    """Marginals of the chain's n steps (rows 0..n−1 of every array).

    emission[t, k], first[t, k] (row 0 used), pair[t, j, k] (rows 1..n−1 used): log-potentials.
    Writes q[t, k] = q(z_t = k), q_first[t] = q(z_0 = ·) at t = 0 and 0 elsewhere, and
    q_pair[t, j, k] = q(z_{t−1} = j, z_t = k) (0 at t = 0). Returns the entropy of q; log Z
    follows as entropy + Σ (q·emission + q_first·first + q_pair·pair).
    """
    if n == 0:
        return 0.0
    k_states = emission.shape[1]
    alpha = np.empty((n, k_states))
    beta = np.empty((n, k_states))
    work = np.empty(k_states)
    for k in range(k_states):
        alpha[0, k] = first[0, k] + emission[0, k]
    for t in range(1, n):
        for k in range(k_states):
            for j in range(k_states):
                work[j] = alpha[t - 1, j] + pair[t, j, k]
            alpha[t, k] = emission[t, k] + _logsumexp(work)
    log_z = _logsumexp(alpha[n - 1])
    beta[n - 1] = 0.0
    for t in range(n - 2, -1, -1):
        for j in range(k_states):
            for k in range(k_states):
                work[k] = pair[t + 1, j, k] + emission[t + 1, k] + beta[t + 1, k]
            beta[t, j] = _logsumexp(work)
    energy = 0.0
    for t in range(n):
        for k in range(k_states):
            q[t, k] = np.exp(alpha[t, k] + beta[t, k] - log_z)
            q_first[t, k] = q[t, k] if t == 0 else 0.0
            energy += q[t, k] * emission[t, k]
        if t == 0:
            for k in range(k_states):
                energy += q[0, k] * first[0, k]
            q_pair[0] = 0.0
            continue
        for j in range(k_states):
            for k in range(k_states):
                value = np.exp(alpha[t - 1, j] + pair[t, j, k] + emission[t, k] + beta[t, k]
                               - log_z)
                q_pair[t, j, k] = value
                if value > 0.0:
                    energy += value * pair[t, j, k]
    return log_z - energy
