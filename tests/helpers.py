"""Assertions shared by the test modules."""

import numpy as np


def never_decreases(elbo, rtol: float = 1e-9) -> bool:
    """Whether an ELBO trace never drops by more than rtol of its size (round-off): the
    property every mean-field coordinate step must keep."""
    elbo = np.asarray(elbo, dtype=float)
    return bool(np.all(np.diff(elbo) >= -rtol * np.abs(elbo[:-1])))
