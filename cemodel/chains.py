"""The smoothed states of a fitted GaussianChain: E[x_t] and Cov(x_t) of every sequence.

A chain's posterior is recomputed by the local step from the globals (it is exact given them)
and not kept in the fit, as a MarkovChain's is not. ``smoothed_states`` runs the generated
module's local step one sequence at a time with the fit's globals held fixed and reads the
chain's moments from the step's own arrays: the Kalman/RTS smoother's output for a linear
dynamical system (``cemodel.runtime.gaussian_chain``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np

from .errors import CemError
from .families import FAMILIES
from .model import Model
from .runtime.driver import FitResult


@dataclass(frozen=True)
class Smoothed:
    """One GaussianChain's posterior moments, one array per sequence (T_s steps)."""

    means: tuple[np.ndarray, ...]  # (T_s, D): E[x_t]
    covariances: tuple[np.ndarray, ...]  # (T_s, D, D): Cov(x_t) = E[x_t x_tᵀ] − E[x_t] E[x_t]ᵀ


def smoothed_states(module: ModuleType, model: Model, data: Mapping[str, Any],
                    fit: FitResult, *, max_local_iter: int = 100,
                    local_tol: float = 1e-3) -> dict[str, Smoothed]:
    """{chain: Smoothed} for every GaussianChain of ``model`` on ``data`` given ``fit``'s
    globals and hyperparameters (the data the fit saw, or new sequences)."""
    chains = [v for v in model.variables
              if FAMILIES[v.family].variational == "gaussian_chain"]
    if not chains:
        raise CemError("smoothed states: the model has no GaussianChain")
    item_dim = module.SPEC["plates"][model.data_plate]["dim"]
    dims = {name: size for name, size in fit.dims.items()
            if name != item_dim and name in module.SPEC["dims"]
            and module.SPEC["dims"][name].get("ragged_over") is None}
    s = module._prepare(data=data, hypers=fit.hypers, dims=dims, seed=0, init=fit.state,
                        start=None, max_local_iter=max_local_iter, local_tol=local_tol)
    moments: dict[str, tuple[list, list]] = {v.name: ([], []) for v in chains}
    for item in s.all_items:
        # one item: it runs on the last thread (items are shared out in contiguous ranges)
        module.run_local_step(s, np.array([item]), max_local_iter, local_tol)
        for var in chains:
            ptr = s.bound.arrays[f"{var.plates[-1]}_ptr"]
            n = int(ptr[item + 1] - ptr[item])
            mean = getattr(s, f"E_{var.name}_value_threads")[-1, :n].copy()
            second = getattr(s, f"E_{var.name}_outer_threads")[-1, :n]
            moments[var.name][0].append(mean)
            moments[var.name][1].append(second - mean[:, :, None] * mean[:, None, :])
    return {name: Smoothed(tuple(m), tuple(c)) for name, (m, c) in moments.items()}
