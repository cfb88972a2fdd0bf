"""Forward–backward for the MarkovChain local factor (Rabiner 1989, §V.A: scaling).

The chain's variational posterior is the exact distribution

    q(z_0..z_{n−1}) ∝ exp(Σ_t e_t[z_t] + f[z_0] + Σ_{t≥1} P_t[z_{t−1}, z_t])

with e_t the emission log-potentials of step t (the messages from the children), f the
initial ones (E[log π0]) and P_t the transition ones (E[log A]), one per step as the
generated kernels lay them out. It is the coordinate-ascent optimum of q(z) given the
globals, so the local step is exact.

The recursions run on potentials exponentiated after a shift by their maximum (E'_t =
exp(e_t − max e_t), likewise f and P_t; the shifts go back into log Z) with Rabiner's
normalisers c_t. A homogeneous chain's P_t is the same matrix at every step: it is
exponentiated again only at a step where it differs from the previous one. A chain whose
c_t underflows (an observation all but impossible under the transitions) is redone in log
space, so extreme potentials give the same answer as before, only slower.
"""

from __future__ import annotations

import numpy as np
from numba import njit

jit = njit(cache=True, nogil=True, error_model="numpy")

TINY = 1e-280  # a c_t below this has lost digits: the chain is redone in log space
MASS_TOL = 1e-9  # Σ_k q(z_t = k) = Σ_k α̂_t β̂_t = 1 (Rabiner eq. 97) to round-off


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
    entropy = _scaled(emission, first, pair, q, q_first, q_pair, n)
    if np.isfinite(entropy):
        return entropy
    return _log_space(emission, first, pair, q, q_first, q_pair, n)


@jit
def _scaled(emission: np.ndarray, first: np.ndarray, pair: np.ndarray,
            q: np.ndarray, q_first: np.ndarray, q_pair: np.ndarray, n: int) -> float:
    """chain_posterior by the scaled recursions (n ≥ 1); NaN if they underflowed."""
    k_states = emission.shape[1]
    scaled = np.empty((n, k_states))  # E'_t
    alpha = np.empty((n, k_states))  # α̂_t = q(z_t | e_≤t)
    scale = np.empty(n)  # c_t
    top = np.empty((2, n))  # the shifts: max e_t; max f (t = 0), max P_t (t ≥ 1)
    changed = np.empty(n, dtype=np.bool_)  # P_t differs from P_{t−1}
    transition = np.empty((k_states, k_states))  # P'_t of the step at hand
    # entropy = log Z − energy with the shifts out of both (they cancel: Σ_k q_t = 1):
    # Σ_t log c_t − Σ q·(e − max e) − ..., no difference of two numbers of size n·|e|
    log_z = _forward(emission, first, pair, n, scaled, alpha, scale, top, changed, transition)
    if not np.isfinite(log_z):
        return np.nan
    return log_z - _backward(emission, first, pair, n, scaled, alpha, scale, top, changed,
                             transition, q, q_first, q_pair)


@jit
def _exp_shifted(values: np.ndarray, out: np.ndarray) -> float:
    """out = exp(values − max values) for a vector; returns the max."""
    top = values.max()
    for i in range(values.shape[0]):
        out[i] = np.exp(values[i] - top)
    return top


@jit
def _exp_shifted_matrix(values: np.ndarray, out: np.ndarray) -> float:
    """out = exp(values − max values) for a matrix; returns the max."""
    top = values.max()
    for j in range(values.shape[0]):
        for k in range(values.shape[1]):
            out[j, k] = np.exp(values[j, k] - top)
    return top


@jit
def _differs(matrix: np.ndarray, previous: np.ndarray) -> bool:
    for j in range(matrix.shape[0]):
        for k in range(matrix.shape[1]):
            if matrix[j, k] != previous[j, k]:
                return True
    return False


@jit
def _forward(emission, first, pair, n, scaled, alpha, scale, top, changed,
             transition) -> float:
    """α̂_t = (α̂_{t−1} P'_t) ∘ E'_t / c_t, α̂_0 = f' ∘ E'_0 / c_0 (Rabiner eq. 91–92) on the
    shifted potentials, whose shifts it writes to top. Returns Σ_t log c_t (log Z less the
    shifts), or NaN if a c_t is below TINY or not a number (a row of potentials all −∞)."""
    k_states = emission.shape[1]
    for t in range(n):
        top[0, t] = _exp_shifted(emission[t], scaled[t])
    top[1, 0] = _exp_shifted(first[0], alpha[0])
    log_scale = 0.0
    for t in range(n):
        if t == 0:
            alpha[0] *= scaled[0]
        else:
            changed[t] = t == 1 or _differs(pair[t], pair[t - 1])
            top[1, t] = (_exp_shifted_matrix(pair[t], transition) if changed[t]
                         else top[1, t - 1])
            alpha[t] = 0.0
            for j in range(k_states):
                a = alpha[t - 1, j]
                for k in range(k_states):
                    alpha[t, k] += a * transition[j, k]
            for k in range(k_states):
                alpha[t, k] *= scaled[t, k]
        total = alpha[t].sum()
        if not total >= TINY:
            return np.nan
        scale[t] = total
        alpha[t] /= total
        log_scale += np.log(total)
    return log_scale


@jit
def _energy(prob: float, log_potential: float) -> float:
    """prob · log_potential, 0 where prob = 0 (a −∞ potential has prob 0, not NaN)."""
    return prob * log_potential if prob > 0.0 else 0.0


@jit
def _backward(emission, first, pair, n, scaled, alpha, scale, top, changed, transition,
              q, q_first, q_pair) -> float:
    """β̂_{t−1} = P'_t (E'_t ∘ β̂_t) / c_t, β̂_{n−1} = 1 (Rabiner eq. 93–94); q_t = α̂_t ∘ β̂_t
    and q_pair_t[j, k] = α̂_{t−1}[j] P'_t[j, k] E'_t[k] β̂_t[k] / c_t (eq. 37 scaled).
    Returns the energy of the shifted potentials Σ q·(e − max e) + q_0·(f − max f) +
    Σ q_pair·(P − max P), or NaN if a row of q does not sum to 1. On entry transition
    holds P'_{n−1} (the forward pass's last); q_pair is summed over each run of equal P_t
    before its energy is taken."""
    k_states = emission.shape[1]
    beta = np.ones(k_states)
    weighted = np.empty(k_states)
    mass_pair = np.zeros((k_states, k_states))  # Σ q_pair over the steps sharing P'_t
    energy = 0.0
    for t in range(n - 1, -1, -1):
        mass = 0.0
        for k in range(k_states):
            q[t, k] = alpha[t, k] * beta[k]
            q_first[t, k] = 0.0
            mass += q[t, k]
            energy += _energy(q[t, k], emission[t, k] - top[0, t])
        if not abs(mass - 1.0) < MASS_TOL:
            return np.nan
        if t == 0:
            break
        if t < n - 1 and changed[t + 1]:
            energy += _pair_energy(mass_pair, pair[t + 1], top[1, t + 1])
            _exp_shifted_matrix(pair[t], transition)
        for k in range(k_states):
            weighted[k] = scaled[t, k] * beta[k] / scale[t]
        for j in range(k_states):
            a, total = alpha[t - 1, j], 0.0
            for k in range(k_states):
                value = transition[j, k] * weighted[k]
                total += value
                q_pair[t, j, k] = a * value
                mass_pair[j, k] += a * value
            beta[j] = total
    if n > 1:
        energy += _pair_energy(mass_pair, pair[1], top[1, 1])
    q_pair[0] = 0.0
    for k in range(k_states):
        q_first[0, k] = q[0, k]
        energy += _energy(q[0, k], first[0, k] - top[1, 0])
    return energy


@jit
def _pair_energy(mass, log_potential, shift) -> float:
    """Σ_jk mass·(P − shift) over the steps that share P (then mass = 0): one K² pass per
    run of equal transitions, not one per step."""
    total = 0.0
    for j in range(mass.shape[0]):
        for k in range(mass.shape[1]):
            total += _energy(mass[j, k], log_potential[j, k] - shift)
            mass[j, k] = 0.0
    return total


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
def _log_space(emission: np.ndarray, first: np.ndarray, pair: np.ndarray,
               q: np.ndarray, q_first: np.ndarray, q_pair: np.ndarray, n: int) -> float:
    """chain_posterior by log-space forward–backward (3K² exp per step): for the chains whose
    scaled recursion underflows."""
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
            energy += _energy(q[t, k], emission[t, k])
        if t == 0:
            for k in range(k_states):
                energy += _energy(q[0, k], first[0, k])
            q_pair[0] = 0.0
            continue
        for j in range(k_states):
            for k in range(k_states):
                value = np.exp(alpha[t - 1, j] + pair[t, j, k] + emission[t, k] + beta[t, k]
                               - log_z)
                q_pair[t, j, k] = value
                energy += _energy(value, pair[t, j, k])
    return log_z - energy
