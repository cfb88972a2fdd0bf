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

__all__ = ["FILL", "missing_posteriors", "present", "split_missing"]

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


def given_entries(bound: Any, name: str) -> np.ndarray | None:
    """Where observed variable ``name`` is given (True), over its plates, when some entry is
    missing; None when every entry is given (what a data check such as ``log_binom`` skips:
    a missing entry is held as 0 and its factor drops out)."""
    missing = getattr(bound, "missing", {}).get(name)
    if missing is None or not np.any(missing):
        return None
    return ~np.asarray(missing, dtype=bool)


def _operand(s: Any, name: str, sub: str, rows: np.ndarray, data: str
             ) -> tuple[np.ndarray, str]:
    """One array of a term as einsum reads it: E[t] (a variable in no plate: its row 0), a
    known, or integer data one-hot over a size; the data plate's axis cut to ``rows``."""
    if sub.startswith("onehot:"):
        _, size, sub = sub.split(":")
        n = int(size) if size.isdigit() else int(getattr(s, size))
        ids = np.asarray(getattr(s, name))
        if sub[:1] == data:
            ids = ids[rows]
        return np.eye(n)[ids], sub
    arr = np.asarray(getattr(s, name), dtype=np.float64)
    if sub.startswith("0"):
        arr, sub = arr[0], sub[1:]
    elif sub[:1] == data:
        arr = arr[rows]
    return arr, sub


def _coefficients(s: Any, info: Mapping[str, Any], absent: np.ndarray
                  ) -> dict[tuple[str, ...], np.ndarray]:
    """Σ over the factor's monomials of coef · E_q[the rest] per child view, at each missing
    entry: the natural coefficients of q(y_n) ∝ exp E_q[log p(y_n | θ)]."""
    where = np.argwhere(absent)
    rows, at = np.unique(where[:, 0], return_inverse=True)
    out: dict[tuple[str, ...], np.ndarray] = {}
    data = info["data_plate"]
    for coef, views, result, operands in info["terms"]:
        arrays, subs = [], []
        for name, sub in operands:
            arr, sub = _operand(s, name, sub, rows, data)
            arrays.append(arr)
            subs.append(sub)
        # the output's letters the operands carry; the others (plates no operand varies
        # over, as y[n] ~ Normal(mu, tau)) broadcast: the data plate's cut to ``rows``
        have = "".join(c for c in result if any(c in t for t in subs))
        value = coef * (np.einsum(",".join(subs) + "->" + have, *arrays) if arrays
                        else np.ones(()))
        value = value.reshape(tuple(value.shape[have.index(c)] if c in have else 1
                                    for c in result))
        full = tuple(len(rows) if k == 0 else absent.shape[k] if k < absent.ndim
                     else value.shape[k] for k in range(len(result)))
        value = np.broadcast_to(value, full)
        picked = value[(at, *where[:, 1:].T)]
        out[views] = out.get(views, 0.0) + picked
    return out


def _summary(family: str, coefs: Mapping[tuple[str, ...], np.ndarray], n: int
             ) -> dict[str, np.ndarray]:
    """The family's usual parameters of q(y_n) from its natural coefficients."""
    zero = np.zeros(n)
    c1 = coefs.get(("value",), zero)
    if family == "Normal":  # −½τ y² + τμ y: precision −2·c2, mean c1 / precision
        precision = -2.0 * coefs[("value", "value")]
        return {"mean": c1 / precision, "variance": 1.0 / precision}
    if family == "MultivariateNormal":
        c2 = coefs[("value", "value")]
        precision = -(c2 + np.swapaxes(c2, -1, -2))
        covariance = np.linalg.inv(precision)
        return {"mean": np.einsum("nij,nj->ni", covariance, c1), "covariance": covariance}
    if family == "Categorical":
        logits = coefs[("onehot",)]
        p = np.exp(logits - logits.max(axis=-1, keepdims=True))
        return {"probs": p / p.sum(axis=-1, keepdims=True)}
    if family == "Bernoulli":  # y (E[log p] − E[log(1 − p)])
        return {"p": 1.0 / (1.0 + np.exp(-c1))}
    if family == "Poisson":  # y E[log r] − lgamma(y + 1): Poisson(exp E[log r])
        return {"rate": np.exp(c1)}
    return {"natural " + "·".join(k): v for k, v in coefs.items()}


def missing_posteriors(s: Any, table: Mapping[str, Mapping[str, Any]]
                       ) -> dict[str, dict[str, np.ndarray]]:
    """Per observed variable with missing entries: ``index`` (one row of plate indices per
    missing entry) and the parameters of each entry's mean-field conditional
    q(y_n) ∝ exp E_q[log p(y_n | θ)] (``cemodel.codegen.missing``)."""
    found: dict[str, dict[str, np.ndarray]] = {}
    for name, info in table.items():
        absent = s.bound.missing.get(name)
        if absent is None or not absent.any():
            continue
        index = np.argwhere(absent)
        if info["why_not"] is not None:
            found[name] = {"index": index, "why_not": info["why_not"]}
            continue
        coefs = _coefficients(s, info, absent)
        found[name] = {"index": index, **_summary(info["family"], coefs, len(index))}
    return found
