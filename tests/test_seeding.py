"""k-means++ seeds compare counts on Anscombe's scale (cemodel.runtime.seeding): one seed per
component of a Poisson mixture whose rates differ by orders of magnitude."""

from __future__ import annotations

import numpy as np

from cemodel.runtime.seeding import seed_categories, seed_chain_steps

RATES = np.array([2.0, 25.0, 200.0])


def _counts(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    z = rng.permutation(np.repeat(np.arange(3), [37, 59, 103]))  # the rare low rates
    return z, rng.poisson(RATES[z]).astype(float)


def _components_seeded(z: np.ndarray, assignment: np.ndarray) -> int:
    return len(set(z[assignment >= 0]))


def test_mixture_seeds_fall_one_per_rate():
    """On the raw scale the 200-rate items' spread (sd 14) outweighs the gap from 2 to 25:
    k-means++ put two seeds among them in 6 of 20 seeds (measured on a Poisson chain of this
    kind); on 2√(y + 3/8) every seed lands one per component."""
    z, x = _counts(np.random.default_rng(0))
    spec = {"observed": {"x": {"plates": ["points"], "support": "count"}},
            "plates": {"points": {"ragged": False}}}
    found = [_components_seeded(z, seed_categories(spec, {"x": x}, "points", len(x), 3, seed))
             for seed in range(20)]
    assert found == [3] * 20, found
    raw = {"observed": {"x": {"plates": ["points"], "support": "real"}},
           "plates": {"points": {"ragged": False}}}
    assert min(_components_seeded(z, seed_categories(raw, {"x": x}, "points", len(x), 3, s))
               for s in range(20)) < 3  # the same values read as reals: a seed is doubled


def test_chain_seed_steps_fall_one_per_rate():
    z, x = _counts(np.random.default_rng(1))
    spec = {"observed": {"y": {"plates": ["seqs", "steps"], "support": "count"}},
            "plates": {"seqs": {"ragged": False}, "steps": {"ragged": True}}}
    arrays = {"y": x, "steps_ptr": np.array([0, 100, len(x)])}
    found = [_components_seeded(z, seed_chain_steps(spec, arrays, ("seqs", "steps"), 3, seed))
             for seed in range(20)]
    assert found == [3] * 20, found


def test_item_features_of_ragged_values_with_empty_items():
    """An item with no values has features 0 wherever it lies (first, between, last, all),
    and the others their mean: np.add.reduceat alone gave an empty item the next row and
    failed on a trailing one (a grouped mixture whose last group had no points)."""
    from cemodel.runtime.seeding import item_features

    spec = {"observed": {"x": {"plates": ["groups", "items"], "support": "count"}},
            "plates": {"groups": {"ragged": False}, "items": {"ragged": True}}}
    values = np.array([1.0, 3.0, 5.0, 10.0])
    for ptr, expected in (([0, 0, 2, 2, 4, 4], [0, 2, 0, 7.5, 0]),
                          ([0, 4, 4], [4.75, 0]),
                          ([0, 0, 0], [0, 0])):
        ptr = np.array(ptr)
        x = values[:ptr[-1]]
        arrays = {"x": x, "items_ptr": ptr, "items_weight": np.ones(len(x))}
        features = item_features(spec, arrays, "groups", len(ptr) - 1)
        np.testing.assert_allclose(features.ravel(), expected)
