"""The smoothed states of a fitted chain, every sequence: a GaussianChain's E[x_t] and
Cov(x_t), a MarkovChain's q(z_t = k).

A chain's posterior is recomputed by the local step from the globals (it is exact given them)
and not kept in the fit (it is as large as the data times K). ``smoothed_states`` runs the
generated module's local step one sequence at a time with the fit's globals held fixed and
reads the chain's marginals from the step's own arrays: the Kalman/RTS smoother's output for
a linear dynamical system (``cemodel.runtime.gaussian_chain``), forward–backward's for a
discrete chain (``rt.chain_posterior``).
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


@dataclass(frozen=True)
class StateProbabilities:
    """One MarkovChain's posterior marginals, one array per sequence (T_s steps)."""

    probs: tuple[np.ndarray, ...]  # (T_s, K): q(z_t = k), each row summing to 1


# the chain families, and the local step's array of the moment each reports
_MOMENTS = {"gaussian_chain": ("value", "outer"), "markov": ("onehot",)}


def smoothed_states(module: ModuleType, model: Model, data: Mapping[str, Any],
                    fit: FitResult, *, max_local_iter: int = 100, local_tol: float = 1e-3
                    ) -> dict[str, Smoothed | StateProbabilities]:
    """{chain: Smoothed or StateProbabilities} for every GaussianChain and MarkovChain of
    ``model`` on ``data`` given ``fit``'s globals and hyperparameters (the data the fit saw,
    or new sequences)."""
    chains = [v for v in model.variables if FAMILIES[v.family].variational in _MOMENTS]
    if not chains:
        raise CemError("smoothed states: the model has no MarkovChain or GaussianChain")
    item_dim = module.SPEC["plates"][model.data_plate]["dim"]
    dims = {name: size for name, size in fit.dims.items()
            if name != item_dim and name in module.SPEC["dims"]
            and module.SPEC["dims"][name].get("ragged_over") is None}
    s = module._prepare(data=data, hypers=fit.hypers, dims=dims, seed=0, init=fit.state,
                        start=None, max_local_iter=max_local_iter, local_tol=local_tol)
    moments: dict[str, list[list[np.ndarray]]] = {v.name: [] for v in chains}
    for item in s.all_items:
        # one item: it runs on the last thread (items are shared out in contiguous ranges)
        module.run_local_step(s, np.array([item]), max_local_iter, local_tol)
        for var in chains:
            ptr = s.bound.arrays[f"{var.plates[-1]}_ptr"]
            n = int(ptr[item + 1] - ptr[item])
            moments[var.name].append(
                [getattr(s, f"E_{var.name}_{moment}_threads")[-1, :n].copy()
                 for moment in _MOMENTS[FAMILIES[var.family].variational]])
    found: dict[str, Smoothed | StateProbabilities] = {}
    for var in chains:
        if FAMILIES[var.family].variational == "markov":
            found[var.name] = StateProbabilities(tuple(p for p, in moments[var.name]))
        else:
            found[var.name] = Smoothed(
                tuple(m for m, _ in moments[var.name]),
                tuple(o - m[:, :, None] * m[:, None, :] for m, o in moments[var.name]))
    return found
