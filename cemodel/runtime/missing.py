"""Missing entries of observed data: found, filled and masked for the kernels.

An entry of an observed variable given as NaN (a float array) or masked (a
``numpy.ma.MaskedArray``, also for integers) is missing. Where the model allows it (the
module's ``SPEC`` says ``"missing": "yes"``: a dense observed leaf, see
``cemodel.missing``), the entry is latent with its conditional, as JAGS treats NA; for a
leaf, integrating it out drops its factor from the joint, so the kernels multiply every
term of the factor by ``present`` (1 observed, 0 missing) and the value stored in its place
is any one in the support (it is never read with a non-zero weight). Anywhere else a
missing entry is refused, naming the variable, the place and why.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ..errors import CemDataError

__all__ = ["FILL", "present", "split_missing"]

# a value in each support, stored where an entry is missing (finite under every known the
# model computes of the data: log, lgamma(x + 1), a one-hot)
FILL = {"positive": 1.0, "unit": 0.5, "trials": 1.0, "simplex": None, "spd": None}


def _fill_value(support: str, event: tuple[int, ...]) -> np.ndarray | float:
    if support == "simplex":
        return np.full(event, 1.0 / event[-1])
    if support == "spd":
        return np.eye(event[-1])
    return FILL.get(support, 0.0)


def split_missing(label: str, value: object, support: str, n_plates: int,
                  allowed: str | None, where: Callable[[tuple[int, ...]], str]
                  ) -> tuple[object, np.ndarray | None]:
    """``value`` with its missing entries (NaN, masked) filled, and the boolean mask of the
    missing elements over the plate axes (None when nothing is missing).

    ``allowed``: None for a covariate (never missing), else the SPEC's ``missing`` entry of
    the observed variable ('yes' or 'no: <reason>'); ``n_plates`` leading axes are plates,
    the rest an event that is missing only as a whole. ``where(index)`` names a place.
    """
    masked = isinstance(value, np.ma.MaskedArray)
    if masked:
        mask = np.ma.getmaskarray(value)
        arr = np.array(np.ma.getdata(value))
    else:
        if not isinstance(value, np.ndarray) or value.dtype.kind != "f":
            return value, None
        arr = value
        mask = np.isnan(arr)
    if not mask.any():
        return arr, None
    first = tuple(int(i) for i in np.argwhere(mask)[0])
    found = f"a missing entry ({'masked' if masked else 'NaN'}){where(first)}"
    if allowed is None:
        raise CemDataError(
            f"{label}: expected a value for every entry of a covariate (covariates are given, "
            f"not modelled), found {found}",
            hint="drop the items whose covariates are missing, or fill them in (impute) "
                 "before fitting")
    if allowed != "yes":
        raise CemDataError(f"{label}: expected no missing entries, found {found}: "
                           f"{allowed.removeprefix('no: ')}")
    event_axes = tuple(range(max(n_plates, 1), mask.ndim))
    whole = mask.all(axis=event_axes) if event_axes else mask
    partial = mask.any(axis=event_axes) & ~whole if event_axes else np.zeros_like(mask)
    if partial.any():
        at = tuple(int(i) for i in np.argwhere(partial)[0])
        raise CemDataError(
            f"{label}: an observation is a vector (or matrix) here, missing only as a whole; "
            f"found some of its entries missing and others given{where(at)}",
            hint="mark every entry of that observation missing, or fill in the rest")
    arr = np.array(arr)
    arr[whole] = _fill_value(support, arr.shape[max(n_plates, 1):])
    return arr, whole


def present(bound: Any, name: str) -> np.ndarray:
    """1.0 where observed variable ``name`` is given, 0.0 where it is missing, over its
    plates (the multiplier of every term of its factor)."""
    missing: Mapping[str, np.ndarray] = bound.missing
    return np.ascontiguousarray(1.0 - missing[name].astype(np.float64))
