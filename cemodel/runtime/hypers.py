"""Hyperparameters a fit is given: their names checked against the model's, their values
read, shaped and checked against their domains (``hyper_value``, ``check_hyper_names``).
Plain NumPy."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from ..errors import CemDataError
from ..numerics import SHAPE_SMALLEST
from ..options import check_hyper_values
from .data_values import (
    SYMMETRY_TOL,
    describe_value,
    first_index,
    fmt_value,
    shape_text,
    suggest,
    to_numeric,
)


def _shape_words(shape: tuple[int, ...]) -> str:
    if not shape:
        return "a scalar"
    return f"an array of shape {shape_text(shape)}"


def hyper_value(
    hypers: Mapping[str, object], name: str, default: object, shape: tuple[int, ...],
    domain: str | None = None,
) -> float | np.ndarray:
    """``hypers[name]`` if given, else ``default`` (a value, or a function that computes it),
    checked finite, of ``shape`` and, when
    ``domain`` is given, in it: ``positive`` (every entry > 0), ``shape`` (positive and at
    least SHAPE_SMALLEST: a shape held as α − 1), ``spd`` (a symmetric positive-definite
    matrix), ``unit`` (a probability) or ``simplex`` (probabilities summing to 1), the
    domains of the family parameters it is used as.

    A scalar shape ``()`` returns a Python float; anything else a float64 array. A scalar
    default is broadcast to ``shape`` (a user's value must have the shape exactly).
    """
    shape = tuple(int(s) for s in shape)
    given = name in hypers
    label = f"hyperparameter '{name}'"
    value = hypers[name] if given else default
    if not given and callable(default):  # a default that depends on the sizes
        try:
            value = default()
        except ZeroDivisionError:
            raise CemDataError(
                f"{label}: its default from the model file divides by zero for these sizes",
                hint=f"give it: hypers={{'{name}': ...}} (--set {name}=...), or change the "
                "sizes",
            ) from None
    arr = to_numeric(label, value)
    if not given and arr.ndim == 0 and shape:
        arr = np.broadcast_to(arr, shape)
    if arr.shape != shape:
        raise CemDataError(
            f"{label}: expected {_shape_words(shape)}, found {_shape_words(arr.shape)}",
            hint=None if shape else "give a single number",
        )
    out = np.array(arr, dtype=np.float64)
    finite = np.isfinite(out)
    if not finite.all():
        idx = first_index(~finite) if out.ndim else ()
        at = f" at [{', '.join(map(str, idx))}]" if idx else ""
        raise CemDataError(f"{label}: expected finite numbers, found {fmt_value(out[idx])}{at}")
    check_hyper_values(label, out)
    if domain in ("positive", "shape") and not np.all(out > 0):
        idx = first_index(out <= 0) if out.ndim else ()
        at = f" at [{', '.join(map(str, idx))}]" if idx else ""
        raise CemDataError(f"{label}: expected positive numbers, found {fmt_value(out[idx])}{at}")
    if domain == "shape" and not np.all(out >= SHAPE_SMALLEST):
        idx = first_index(out < SHAPE_SMALLEST) if out.ndim else ()
        at = f" at [{', '.join(map(str, idx))}]" if idx else ""
        raise CemDataError(
            f"{label}: expected shapes of at least {SHAPE_SMALLEST:.3g} (they are held as "
            f"shape − 1 in double precision), found {fmt_value(out[idx])}{at}")
    if domain == "spd" and out.ndim == 2 and out.shape[0] == out.shape[1]:
        symmetric = np.allclose(out, out.T, rtol=SYMMETRY_TOL, atol=0.0)
        if not symmetric or np.linalg.eigvalsh(0.5 * (out + out.T))[0] <= 0:
            found = "a matrix that is not symmetric" if not symmetric else (
                f"a matrix with smallest eigenvalue "
                f"{fmt_value(float(np.linalg.eigvalsh(out)[0]))}")
            raise CemDataError(f"{label}: expected a symmetric positive-definite matrix, "
                               f"found {found}")
    if domain in ("unit", "simplex"):
        _check_probabilities(label, out, domain)
    if not shape:
        return float(out)
    return out


# how far a known probability vector's sum may be from 1 (values typed or saved in decimal)
SIMPLEX_TOL = 1e-6


def _check_probabilities(label: str, out: np.ndarray, domain: str) -> None:
    """A known probability (``unit``: each entry in [0, 1]) or probability vector
    (``simplex``: entries ≥ 0 summing to 1 along the last axis, a row each for a matrix):
    anything else makes the ELBO no bound (a Categorical of p summing to 1.5), so it is
    refused, not normalised."""
    bad = (out < 0) | (out > 1) if domain == "unit" else out < 0
    if bad.any():
        idx = first_index(bad) if out.ndim else ()
        at = f" at [{', '.join(map(str, idx))}]" if idx else ""
        raise CemDataError(f"{label}: expected probabilities (in [0, 1]), found "
                           f"{fmt_value(out[idx])}{at}")
    if domain == "simplex" and out.ndim:
        sums = out.sum(axis=-1)
        off = np.abs(sums - 1.0) > SIMPLEX_TOL
        if off.any():
            idx = first_index(off) if sums.ndim else ()
            row = f" (row [{', '.join(map(str, idx))}])" if idx else ""
            raise CemDataError(
                f"{label}: expected probabilities summing to 1, found a sum of "
                f"{fmt_value(sums[idx])}{row}", hint="normalise it: p / p.sum(axis=-1)")


def check_hyper_names(hypers: Mapping[str, object] | None,
                      known: Sequence[str]) -> dict[str, object]:
    """``hypers`` as a dict (None: no values given), names that are not hyperparameters of the
    model refused."""
    hypers = {} if hypers is None else hypers
    if not isinstance(hypers, Mapping):
        raise CemDataError(
            f"expected hyperparameters as a mapping from names to values, found "
            f"{describe_value(hypers)}"
        )
    for key in hypers:
        if key not in known:
            listed = ", ".join(known) if known else "none"
            raise CemDataError(
                f"unknown hyperparameter '{key}'; the model's hyperparameters are: {listed}",
                hint=suggest(str(key), known),
            )
    return dict(hypers)
