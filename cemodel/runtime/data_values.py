"""The user's values as the binding reads them: conversions to numbers, the words and places
of its messages, and the observed variables and covariates of a generated module's ``SPEC``
(``binding``, ``data_reading`` and ``hypers`` share them). Plain NumPy."""

from __future__ import annotations

import math
import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import sparse

from ..errors import CemDataError, did_you_mean

COVARIATE_SUPPORT = {"real": "real", "int": "integer", "count": "count", "vector": "vector"}
SYMMETRY_TOL = 1e-8
# The statistics of the data (Σx for counts and positive values, Σx² for reals and vectors)
# must stay finite with room to spare: beyond this the ELBO overflows to inf
MAX_STATISTIC = 1e300


# ---------------------------------------------------------------------------------------------
# Small helpers
# ---------------------------------------------------------------------------------------------


def fmt_value(value: Any) -> str:
    """A number as a user would write it."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, bool):
        return str(int(value))
    if isinstance(value, float):
        if math.isfinite(value) and value.is_integer() and abs(value) < 1e16:
            return str(int(value))
        return f"{value:.6g}"
    return str(value)


def shape_text(shape: Sequence[int]) -> str:
    return "(" + ", ".join(str(s) for s in shape) + ("," if len(shape) == 1 else "") + ")"


def kind_problem(dtype: np.dtype) -> str | None:
    """Why an array of this dtype cannot hold numbers, or None if it can."""
    kind = dtype.kind
    if kind in "biuf":
        return None
    if kind in "US":
        return f"text (dtype {dtype})"
    if kind == "O":
        return "Python objects (dtype object)"
    if kind == "c":
        return f"complex numbers (dtype {dtype})"
    if kind in "Mm":
        return f"dates or times (dtype {dtype})"
    return f"values of dtype {dtype}"


def describe_value(value: object) -> str:
    if sparse.issparse(value):
        return f"a sparse matrix of shape {shape_text(value.shape)}"
    if isinstance(value, np.ndarray):
        return f"an array of shape {shape_text(value.shape)}"
    if isinstance(value, list | tuple):
        return f"a {type(value).__name__} of length {len(value)}"
    return f"a value of type {type(value).__name__}"


def to_numeric(label: str, value: object, where: str = "") -> np.ndarray:
    """``value`` as a numeric ndarray (bool, int or float), or a CemDataError."""
    if isinstance(value, np.ma.MaskedArray) and np.ma.getmaskarray(value).any():
        raise CemDataError(f"{label}: expected values{where}, found a masked array with masked "
                           "entries, which cannot be missing here",
                           hint="missing entries are allowed only in dense arrays of observed "
                                "variables (see the README's Data section)")
    if sparse.issparse(value):
        try:
            value = value.toarray()
        except Exception as exc:
            raise CemDataError(f"{label}: could not read the sparse matrix ({exc})") from None
    try:
        arr = np.asarray(value)
    except (ValueError, TypeError) as exc:
        text = str(exc)
        if "inhomogeneous" in text or "sequence" in text:
            found = "nested lists of different lengths"
        else:
            found = f"{describe_value(value)} that NumPy cannot read ({text})"
        raise CemDataError(
            f"{label}: expected a numeric array{where}, found {found}",
            hint="give a rectangular array of numbers",
        ) from None
    problem = kind_problem(arr.dtype)
    if problem is not None:
        raise CemDataError(f"{label}: expected numbers{where}, found {problem}")
    return arr


def as_int(label: str, value: object) -> int:
    if isinstance(value, bool | np.bool_):
        raise CemDataError(f"{label}: expected a whole number, found {value!r}")
    try:
        return operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        pass
    if isinstance(value, float | np.floating) and math.isfinite(value):
        if float(value).is_integer():
            return int(value)
    raise CemDataError(f"{label}: expected a whole number, found {value!r}")


def suggest(word: str, candidates: Sequence[str] | Mapping[str, object]) -> str | None:
    """A did-you-mean hint, also for a name that differs only in case."""
    names = list(candidates)
    same = [c for c in names if c.lower() == str(word).lower()]
    if same:
        return f"did you mean '{same[0]}'?"
    return did_you_mean(str(word), names)


def where_text(parts: list[str], event: tuple[int, ...]) -> str:
    """The place of a value in a message: " at items[3], entry [1]" (``parts``: each plate
    with its index; ``event``: the index within the value, if any)."""
    if event:
        parts = [*parts, f"entry [{', '.join(str(e) for e in event)}]"]
    return " at " + ", ".join(parts) if parts else ""


def first_index(mask: np.ndarray) -> tuple[int, ...]:
    return tuple(int(i) for i in np.argwhere(mask)[0])


# ---------------------------------------------------------------------------------------------
# The variables of a spec
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DataVar:
    name: str
    role: str  # "observed" or "covariate"
    support: str
    plates: tuple[str, ...]
    event: tuple[str | int, ...]
    categories: str | int | None
    ragged: str | None  # the ragged plate among ``plates`` (always plates[1]), if any
    missing: str | None = None  # observed: may entries be missing ('yes', 'no: why', None)

    @property
    def label(self) -> str:
        return f"data '{self.name}'"


@dataclass
class Parsed:
    """One variable after reading: values in the final layout (ragged plates flattened)."""

    var: DataVar
    values: np.ndarray | None  # None: a ragged variable with no entries at all (built later)
    lengths: np.ndarray | None = None  # per parent element, for a ragged variable
    weights: np.ndarray | None = None  # bag-of-words counts
    trailing: tuple[int, ...] | None = None  # shape after the leading axis, when known


def spec_vars(spec: Mapping[str, Any]) -> list[DataVar]:
    plates = spec.get("plates", {})
    out = []
    for role, table in (("observed", spec.get("observed", {})),
                        ("covariate", spec.get("covariates", {}))):
        for name, info in table.items():
            if role == "observed":
                support = info["support"]
                event = tuple(info.get("shape", ()))
                categories = info.get("categories")
            elif info.get("categories") is not None:  # integer data used as an index
                support = "category"
                event = tuple(info.get("shape", ()))
                categories = info["categories"]
            else:
                if info.get("nonnegative"):  # the model takes its log
                    support = "count" if info["kind"] == "int" else "nonnegative"
                else:
                    support = COVARIATE_SUPPORT[info["kind"]]
                event = tuple(info.get("shape", ()))
                categories = None
            var_plates = tuple(info.get("plates", ()))
            ragged = next((p for p in var_plates if plates[p]["ragged"]), None)
            missing = None if role == "covariate" else info.get("missing")
            out.append(DataVar(name, role, support, var_plates, event, categories, ragged,
                            missing))
    return out


def bag_of_categories(var: DataVar, all_vars: Sequence[DataVar],
                       plates: Mapping[str, Mapping[str, Any]]) -> bool:
    """Does ``var`` alone fill its ragged plate as a bag of categories (so that it may come
    as a (parent × categories) count matrix)?"""
    if var.ragged is None or var.support != "category" or var.event:
        return False
    if plates[var.ragged].get("ordered"):  # a chain's steps: the order matters
        return False
    if var.plates != (plates[var.ragged]["parent"], var.ragged):
        return False
    return not [v for v in all_vars if v is not var and var.ragged in v.plates]


def takes_count_matrix(spec: Mapping[str, Any], name: str) -> bool:
    """Is data ``name`` of the model with this SPEC a bag of categories, given as a count
    matrix when it comes as a 2-D array of numbers (``cemodel.streaming``'s .npy files)?"""
    found = spec_vars(spec)
    return any(v.name == name and bag_of_categories(v, found, spec["plates"]) for v in found)
