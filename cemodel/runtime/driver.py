"""Pieces of the fitting loop shared by every generated module."""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np


class ElboDecreaseWarning(UserWarning):
    """A mean-field iteration lowered the ELBO: a sign of a wrong update."""


@dataclass
class FitResult:
    """What ``fit`` returns: posterior parameters, expectations and the ELBO trace."""

    posterior: dict[str, np.ndarray]
    elbo: np.ndarray
    iterations: int
    converged: bool
    seconds: float
    dims: dict[str, int] = field(default_factory=dict)
    hypers: dict[str, object] = field(default_factory=dict)
    state: dict[str, np.ndarray] = field(default_factory=dict)  # natural parameters

    def __getitem__(self, key: str) -> np.ndarray:
        return self.posterior[key]


def check_elbo_increase(trace: list[float], warn: bool, rtol: float = 1e-9) -> None:
    """Warn loudly when the last coordinate-ascent iteration lowered the ELBO."""
    if not warn or len(trace) < 2:
        return
    before, after = trace[-2], trace[-1]
    if after < before - rtol * max(1.0, abs(before)):
        warnings.warn(
            f"the ELBO decreased at iteration {len(trace) - 1}: {before:.10g} -> {after:.10g}. "
            "Mean-field updates never lower it; this is a bug in cemodel. Please report it "
            "with the model file.",
            ElboDecreaseWarning,
            stacklevel=3,
        )


def converged(trace: list[float], tol: float) -> bool:
    """Relative change of the ELBO below ``tol``."""
    if len(trace) < 2:
        return False
    before, after = trace[-2], trace[-1]
    return abs(after - before) <= tol * max(1.0, abs(after))


def max_length(ptr: np.ndarray) -> int:
    """The longest segment of a CSR offset array (sizes per-item scratch arrays)."""
    if len(ptr) < 2:
        return 0
    return int(np.max(np.diff(ptr)))


def load_state(init: dict, arrays: dict[str, np.ndarray]) -> None:
    """Copy natural parameters from ``init`` (an earlier result's ``state``) into ``arrays``."""
    from ..errors import CemDataError

    if hasattr(init, "state"):
        init = init.state
    for name, target in arrays.items():
        if name not in init:
            raise CemDataError(f"init: missing '{name}'; pass the `state` of an earlier fit "
                               "of the same model")
        value = np.asarray(init[name], dtype=float)
        if value.shape != target.shape:
            raise CemDataError(f"init '{name}': expected shape {target.shape}, found {value.shape}")
        if not np.all(np.isfinite(value)):
            raise CemDataError(f"init '{name}': expected finite values, found NaN or inf")
        target[...] = value

