"""What a fit reports of stick-breaking weights (``cemodel.augment_sticks``): the expected
weights, the expected number of items of each component and how many components are used."""

from __future__ import annotations

import numpy as np

# a component is used when its expected number of items is at least this share of all items,
# and at least one item
USED_SHARE = 0.01


def stick_components(a: np.ndarray, b: np.ndarray, alpha: float) -> dict[str, object]:
    """From q(v_k) = Beta(a_k, b_k), k = 1 … K (the K-th stick unused, v_K = 1):

    weights  E[π_k] = E[v_k] Π_{j<k} E[1 − v_j]                 (the sticks are independent)
    counts   N_k = a_k − 1 = Σ_n q(z_n = k) for k < K,  N_K = b_{K−1} − α
             (Blei & Jordan 2006, eqs. 18–19: a_k = 1 + N_k, b_k = α + Σ_{j>k} N_j)
    used     the number of components with N_k ≥ max(1, USED_SHARE · Σ_k N_k)
    """
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    weights = weights_of_sticks(a / (a + b))
    counts = a - 1.0
    counts[-1] = b[-2] - alpha if len(b) > 1 else np.nan
    counts = np.maximum(counts, 0.0)  # (round-off of a sum of probabilities)
    total = float(np.nansum(counts))
    used = int(np.sum(counts >= max(1.0, USED_SHARE * total))) if len(b) > 1 else 1
    return {"weights": weights, "counts": counts, "components_used": used}


def weights_of_sticks(sticks: np.ndarray) -> np.ndarray:
    """π_k = v_k Π_{j<k} (1 − v_j) along the last axis, the K-th stick taken as 1: of the
    sticks' means, E[π] (the sticks are independent); of draws of the sticks, draws of π."""
    v = np.array(sticks, dtype=float)
    v[..., -1] = 1.0
    rest = np.cumprod(1.0 - v[..., :-1], axis=-1)
    return v * np.concatenate((np.ones(v.shape[:-1] + (1,)), rest), axis=-1)
