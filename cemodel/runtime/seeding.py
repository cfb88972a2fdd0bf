"""Where a fit starts: k-means++ seeding over the items of the data plate.

Mean-field VB for a mixture is symmetric in its components; a start in which
every component sees the same data (random responsibilities) is a saddle it
leaves slowly or into a poor optimum. The generated ``fit`` instead picks C
*seed items* (C = the number of categories of the categorical locals) by
greedy k-means++ (Arthur & Vassilvitskii 2007) on each item's observed data, and
gives seed c all of category c for its first global update. Items are
compared by their observed values flattened to one vector (a bag-of-words
item by its word frequencies), which asks nothing of the model. Counts are compared on
Anscombe's scale 2√(y + 3/8), where Poisson noise has variance ≈ 1 at every rate: on the raw
scale a high-rate component's spread outweighs the gap to a low-rate one, and k-means++ put
two seeds in the high-rate component (a 3-state Poisson HMM of 8 sequences: MF reached its
best optimum from 14 of 20 seeds, from all 20 on Anscombe's scale).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp


def item_features(spec: dict, arrays: dict[str, np.ndarray], data_plate: str,
                  n_items: int) -> np.ndarray | sp.csr_matrix:
    """One row per data-plate item: its observed values, flattened."""
    blocks: list = []
    for name, info in spec["observed"].items():
        plates = info["plates"]
        if not plates or plates[0] != data_plate:
            continue
        values = arrays[name]
        ragged = [p for p in plates if spec["plates"][p]["ragged"]]
        if ragged:
            ptr = arrays[f"{ragged[0]}_ptr"]
            weight = arrays[f"{ragged[0]}_weight"]
            if info["support"] == "category":
                n_cat = int(values.max()) + 1 if len(values) else 1
                counts = sp.csr_matrix((weight, values, ptr), shape=(n_items, n_cat))
                totals = np.asarray(counts.sum(axis=1)).ravel()
                totals[totals == 0] = 1.0
                blocks.append(sp.diags(1.0 / totals) @ counts)
            else:
                width = int(np.prod(values.shape[1:], dtype=np.int64))
                flat = values.reshape(len(values), width) * weight[:, None]
                blocks.append(_item_means(flat, ptr, n_items))
            continue
        flat = values.reshape(n_items, -1).astype(float)
        blocks.append(_compared(flat, info["support"]))
    if not blocks:
        return np.zeros((n_items, 1))
    if any(sp.issparse(b) for b in blocks):
        return sp.hstack([sp.csr_matrix(b) for b in blocks]).tocsr()
    return np.hstack(blocks)


def _item_means(flat: np.ndarray, ptr: np.ndarray, n_items: int) -> np.ndarray:
    """The mean row of each item's span ``flat[ptr[i]:ptr[i + 1]]``, 0 for an empty span
    (``np.add.reduceat`` alone would give an empty span the next row, or fail past the end)."""
    lengths = np.diff(ptr)
    sums = np.zeros((n_items, flat.shape[1]))
    filled = np.flatnonzero(lengths > 0)
    if filled.size:
        sums[filled] = np.add.reduceat(flat, ptr[filled], axis=0)
    return sums / np.maximum(lengths, 1)[:, None]


def _compared(values: np.ndarray, support: str) -> np.ndarray:
    """Observed values as k-means++ compares them: a category as its one-hot, a count on
    Anscombe's variance-stabilising scale 2√(y + 3/8), anything else as it is."""
    if support == "category":
        return _onehot(values)
    if support == "count":
        return 2.0 * np.sqrt(values + 0.375)
    return values


def _onehot(categories: np.ndarray) -> np.ndarray:
    """Rows of category ids (items × positions) as rows of one-hot blocks, one per position."""
    n_cat = int(categories.max()) + 1 if categories.size else 1
    onehot = np.zeros((categories.shape[0], categories.shape[1] * n_cat))
    cols = (np.arange(categories.shape[1]) * n_cat)[None, :] + categories.astype(np.int64)
    np.put_along_axis(onehot, cols, 1.0, axis=1)
    return onehot


def kmeanspp(features: np.ndarray | sp.csr_matrix, n_seeds: int, seed: int) -> np.ndarray:
    """Indices of ``n_seeds`` items chosen by greedy k-means++: each seed after the first is
    the best of 2 + ⌊ln n_seeds⌋ candidates drawn by D² sampling, the one that lowers the
    potential Σ_n min_s ‖x_n − x_s‖² most (Arthur & Vassilvitskii 2007, §6; scikit-learn's
    default). Plain D² sampling lands two seeds in one cluster and none in another more
    often, and mean field rarely moves a component across the gap afterwards."""
    rng = np.random.default_rng(seed)
    n_items = features.shape[0]
    n_seeds = min(n_seeds, n_items)
    sparse = sp.issparse(features)
    # D² sampling is invariant to a common scale: data of extreme scale is brought to a
    # largest |value| of 1 so that squared distances neither overflow (values near 1e200)
    # nor underflow (near 1e-200)
    largest = float(abs(features).max()) if features.shape[0] * features.shape[1] else 0.0
    if np.isfinite(largest) and largest > 0 and not 1e-75 < largest < 1e75:
        features = features * (1.0 / largest)
    sq_norms = (np.asarray(features.multiply(features).sum(axis=1)).ravel() if sparse
                else np.einsum("ij,ij->i", features, features))

    def distances(item: int) -> np.ndarray:
        """‖x_n − x_item‖² for every n."""
        row = features[item]
        cross = (np.asarray((features @ row.T).todense()).ravel() if sparse
                 else features @ row)
        return np.maximum(sq_norms - 2 * cross + sq_norms[item], 0.0)

    trials = 2 + int(np.log(max(n_seeds, 1)))
    chosen = [int(rng.integers(n_items))]
    nearest = distances(chosen[0])
    for _ in range(1, n_seeds):
        total = nearest.sum()
        if not total > 0:  # every item equals a seed: any unchosen one
            rest = np.setdiff1d(np.arange(n_items), chosen)
            pick = int(rng.choice(rest))
            chosen.append(pick)
            nearest = np.minimum(nearest, distances(pick))
            continue
        best, best_potential, best_nearest = -1, np.inf, nearest
        for candidate in rng.choice(n_items, size=trials, p=nearest / total):
            closer = np.minimum(nearest, distances(int(candidate)))
            potential = closer.sum()
            if potential < best_potential:
                best, best_potential, best_nearest = int(candidate), potential, closer
        chosen.append(best)
        nearest = best_nearest
    return np.array(chosen, dtype=np.int64)


def seed_categories(spec: dict, arrays: dict[str, np.ndarray], data_plate: str,
                    n_items: int, n_categories: int, seed: int,
                    missing: dict[str, np.ndarray] | None = None) -> np.ndarray:
    """category of each item for the first global update: c for seed c, −1 for the rest.
    Seeds are items with no missing observed entry (``missing``: name -> where), when any."""
    features = item_features(spec, arrays, data_plate, n_items)
    complete = np.ones(n_items, dtype=bool)
    for name, where in (missing or {}).items():
        if spec["observed"][name]["plates"][:1] == [data_plate] and where.size:
            complete &= ~where.reshape(n_items, -1).any(axis=1)
    if complete.all() or not complete.any():
        return _assign_seeds(features, n_categories, seed)
    assignment = np.full(n_items, -1, dtype=np.int64)
    assignment[complete] = _assign_seeds(features[np.flatnonzero(complete)], n_categories,
                                         seed)
    return assignment


def _assign_seeds(features: np.ndarray | sp.csr_matrix, n_categories: int,
                  seed: int) -> np.ndarray:
    """c for the c-th k-means++ seed row of ``features``, −1 for every other row."""
    assignment = np.full(features.shape[0], -1, dtype=np.int64)
    if features.shape[0]:
        seeds = kmeanspp(features, n_categories, seed)
        assignment[seeds] = np.arange(len(seeds))
    return assignment


def _chain_layout(spec: dict, arrays: dict[str, np.ndarray],
                  plates: tuple[str, str]) -> tuple[tuple[int, ...], list[str]]:
    """The shape of a per-step array of a chain over ``plates`` (sequences, steps): flat
    when the steps are ragged, S × T otherwise; and the observed variables read per step
    (those in the chain's plates, or in plates nested in them: a step's emission vector)."""
    seqs, steps = plates
    observed = [n for n, info in spec["observed"].items()
                if tuple(info["plates"][:2]) == plates]
    if spec["plates"][steps]["ragged"]:
        shape: tuple[int, ...] = (int(arrays[f"{steps}_ptr"][-1]),)
    else:
        first = arrays[observed[0]]
        shape = tuple(first.shape[:2])
    return shape, observed


def no_seed_steps(spec: dict, arrays: dict[str, np.ndarray],
                  plates: tuple[str, str]) -> np.ndarray:
    """−1 at every step of a chain (no seeding), shaped as its per-step data."""
    return np.full(_chain_layout(spec, arrays, plates)[0], -1, dtype=np.int64)


def seed_chain_steps(spec: dict, arrays: dict[str, np.ndarray], plates: tuple[str, str],
                     n_categories: int, seed: int) -> np.ndarray:
    """A chain's start: C *seed steps* chosen by greedy k-means++ on each step's emissions
    (the observed values at that step, as ``_compared``), seed c in state c for the
    first global update; −1 (weighing nothing) at every other step. The chain's symmetric
    start (every state alike) is a saddle mean field leaves slowly or into a poor optimum, as
    a mixture's is; its steps, not its sequences, are what a state explains."""
    shape, observed = _chain_layout(spec, arrays, plates)
    n_steps = int(np.prod(shape))
    if n_steps == 0:  # every sequence empty: no step to seed
        return np.full(shape, -1, dtype=np.int64)
    blocks = []
    for name in observed:
        values = arrays[name].reshape(n_steps, -1).astype(float)
        blocks.append(_compared(values, spec["observed"][name]["support"]))
    features = np.hstack(blocks) if blocks else np.zeros((n_steps, 1))
    return _assign_seeds(features, n_categories, seed).reshape(shape)
