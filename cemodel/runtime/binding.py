"""Binding user data to a compiled model: validation, dimension inference and the flat layout.

Generated modules call :func:`bind_data` with their ``SPEC`` and the user's data. The result
holds every dimension, one array per observed variable and covariate in the exact layout the
kernels index, and the offsets and weights of every ragged plate:

* a variable whose plates hold no ragged plate is an array of shape (plate sizes..., event
  shape...), float64 except ``category`` (int64); a variable with no plates gets a leading axis
  of length 1;
* a ragged plate ``p`` is flattened CSR-style: its variables have one leading axis over all
  entries, ``arrays[p + "_ptr"]`` (int64, one more than the parent plate) holds the offsets and
  ``arrays[p + "_weight"]`` (float64) the weight of every entry (the counts of a bag of words).

Every problem with the data raises :class:`~cemodel.errors.CemDataError` naming the variable,
what was expected and what was found; no NumPy or SciPy exception escapes for bad data.
Reading each variable (dense, count matrix, ragged rows) is ``data_reading``'s; the shared
conversions, message words and the SPEC's variables are ``data_values``'; hyperparameters are
``hypers``'. Plain NumPy/SciPy: nothing here is compiled.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import CemDataError
from .data_reading import Readers
from .data_values import (
    MAX_STATISTIC,
    SYMMETRY_TOL,
    DataVar,
    Parsed,
    as_int,
    bag_of_categories,
    describe_value,
    first_index,
    fmt_value,
    shape_text,
    spec_vars,
    suggest,
)
from .flat import split_ragged

__all__ = ["BoundData", "bind_data"]


@dataclass(frozen=True)
class BoundData:
    """Data bound to a model, in the layout the generated kernels index."""

    dims: dict[str, int]  # every non-ragged dimension, resolved
    arrays: dict[str, np.ndarray]  # variables, covariates, "<plate>_ptr", "<plate>_weight"
    n_items: dict[str, int]  # length of every plate's axis in the flat layout
    # observed variables that may miss entries -> where they do (bool over their plates)
    missing: dict[str, np.ndarray] = field(default_factory=dict)


# What each support means, for messages. ``integer`` is the support of an ``int`` covariate.
_EXPECTED = {
    "real": "finite real numbers",
    "positive": "positive numbers (> 0)",
    "unit": "numbers strictly between 0 and 1",
    "binary": "binary values (0 or 1)",
    "count": "counts (non-negative whole numbers)",
    "nonnegative": "numbers ≥ 0 (the model takes their log)",
    "trials": "numbers of trials (whole numbers ≥ 1)",
    "integer": "whole numbers",
    "vector": "finite real vectors",
    "spd": "symmetric positive-definite matrices",
    "simplex": "probability vectors (non-negative, summing to 1)",
}
_INTEGER_SUPPORTS = {"binary", "count", "trials", "integer", "category"}
_SIMPLEX_TOL = 1e-6


# ---------------------------------------------------------------------------------------------
# Binding
# ---------------------------------------------------------------------------------------------


class SizesFrom(dict):
    """Sizes for ``bind_data``'s ``dims`` that say where each came from (``sources``: dim ->
    "the fit"), so that a disagreement with the data names that, not the user's ``dims``
    (``Model.infer`` and ``score`` bind new items with the fit's sizes)."""

    def __init__(self, sizes: Mapping[str, int], sources: Mapping[str, str]) -> None:
        super().__init__(sizes)
        self.sources = {k: v for k, v in sources.items() if k in self}


def bind_data(
    spec: Mapping[str, Any],
    data: Mapping[str, object],
    dims: Mapping[str, int] | None = None,
    missing: bool = False,
) -> BoundData:
    """Validate ``data`` against a model's ``SPEC`` and lay it out for the kernels.

    ``dims`` overrides the model's default sizes; sizes with no default and not given are
    inferred from the data. ``missing``: the caller handles missing entries (the generated
    ``_prepare``, ``cemodel.runtime.missing``). See the module docstring for the layout.
    """
    # an ItemSource (runtime/source.py, which binds its minibatches with this function, so
    # known here by what it has, not imported)
    if hasattr(data, "n_items") and callable(getattr(data, "read", None)):
        raise CemDataError("out-of-core data (a stream from disk) is read by fit_svi and its "
                           "variants (svi, svi+, ssvi-a, ssvi) only: the batch methods visit "
                           "every item at every iteration",
                           hint="load the data into memory for mf and klc")
    if isinstance(data, Mapping):  # a ragged plate stored flat, as in an .npz: p_ptr
        data = split_ragged(spec, "data", data)
    return _Binder(spec, data, dims or {}, missing).bind()


class _Binder(Readers):
    def __init__(self, spec: Mapping[str, Any], data: Mapping[str, object],
                 dims: Mapping[str, int], missing: bool = False) -> None:
        if not isinstance(data, Mapping):
            raise CemDataError(
                f"expected the data as a mapping from variable names to arrays, found "
                f"{describe_value(data)}"
            )
        if not isinstance(dims, Mapping):
            raise CemDataError(
                f"expected dims as a mapping from dimension names to sizes, found "
                f"{describe_value(dims)}"
            )
        self.spec = spec
        self.data = data
        self.dim_specs: Mapping[str, Mapping[str, Any]] = spec.get("dims", {})
        self.plates: Mapping[str, Mapping[str, Any]] = spec.get("plates", {})
        self.vars = spec_vars(spec)
        self.user_dims = self._read_user_dims(dims)
        # where a given size came from, where not the user's dims (SizesFrom)
        self.dim_sources: dict[str, str] = dict(getattr(dims, "sources", {}))
        # dim -> [(size, where it came from)]
        self.found: dict[str, list[tuple[int, str]]] = {}
        # ragged dim -> [(lengths, where they came from)]
        self.found_lengths: dict[str, list[tuple[np.ndarray, str]]] = {}
        # category dim -> largest id seen + 1 (used only if nothing else fixes the dim)
        self.max_ids: dict[str, int] = {}
        self.sizes: dict[str, int] = {}
        self.lengths: dict[str, np.ndarray] = {}
        self.allow_missing = missing
        self.missing: dict[str, np.ndarray] = {}  # observed name -> missing elements

    # -- names -------------------------------------------------------------------------------

    def _read_user_dims(self, dims: Mapping[str, int]) -> dict[str, int]:
        out = {}
        for name, value in dims.items():
            if name in self.spec.get("unused_dims", ()):
                raise CemDataError(
                    f"dims['{name}']: dimension '{name}' is declared and used nowhere in the "
                    "model, so its size would change nothing",
                    hint=f"leave '{name}' out of dims, or use {name} in the model")
            if name not in self.dim_specs:
                known = ", ".join(self.dim_specs) or "none"
                raise CemDataError(
                    f"unknown dimension '{name}' in dims; the model's dimensions are: {known}",
                    hint=suggest(name, self.dim_specs),
                )
            over = self.dim_specs[name].get("ragged_over")
            if over is not None:
                raise CemDataError(
                    f"dimension '{name}' is ragged (one length per element of '{over}'), so it "
                    f"cannot be set in dims; found {value!r}",
                    hint="its lengths come from the data of the plates over it",
                )
            size = as_int(f"dims['{name}']", value)
            if size < 1:
                raise CemDataError(f"dims['{name}']: expected a size of at least 1, found {size}")
            out[name] = size
        return out

    def _check_names(self) -> None:
        expected = [v.name for v in self.vars]
        counted = {f"{v.ragged}_weight" for v in self.vars if self._bow(v)}
        for key in self.data:
            if key in expected or key in counted:
                continue
            if isinstance(key, str) and self.plates.get(key.removesuffix("_weight"), {}).get(
                    "ragged") and key.endswith("_weight"):
                raise CemDataError(
                    f"unknown data '{key}': a ragged plate's weights are the counts of a bag "
                    f"of categories (a categorical observed alone in an unordered ragged "
                    f"plate), and plate {key.removesuffix('_weight')} holds none; the model "
                    f"expects: {', '.join(expected)}")
            if not isinstance(key, str):
                raise CemDataError(
                    f"data keys must be variable names (strings), found {key!r}; the model "
                    f"expects: {', '.join(expected) or 'no data'}"
                )
            kind = self.spec.get("not_data", {}).get(key)
            if key in self.dim_specs:
                hint = f"'{key}' is a dimension: pass it as dims={{'{key}': ...}} (--set {key}=...)"
            elif kind == "hyperparameter":
                hint = (f"'{key}' is a hyperparameter: pass it as hypers={{'{key}': ...}} "
                        f"(--set {key}=...)")
            elif kind == "latent":
                hint = (f"'{key}' is a latent variable, which the fit infers; to give its "
                        "values, declare it 'data' in the model")
            else:  # a misspelled name, or a ragged plate's offsets (the flat form)
                offsets = [f"{p}_ptr" for p, info in self.plates.items() if info.get("ragged")]
                hint = suggest(key, expected + offsets)
                if hint is None and key.endswith("_ptr") and offsets:
                    hint = (f"a ragged plate's offsets are named after it: "
                            f"{', '.join(offsets)}")
            raise CemDataError(
                f"unknown data '{key}'; the model expects: {', '.join(expected) or 'no data'}",
                hint=hint,
            )
        missing = [name for name in expected if name not in self.data]
        if missing:
            which = ", ".join(f"'{m}'" for m in missing)
            raise CemDataError(
                f"missing data for {which}; the model expects: {', '.join(expected)}",
                hint=f"the model's data are {self._roles()}",
            )

    def _roles(self) -> str:
        obs = [v.name for v in self.vars if v.role == "observed"]
        cov = [v.name for v in self.vars if v.role == "covariate"]
        text = f"observed {', '.join(obs) or '(none)'}"
        if cov:
            text += f" and covariates {', '.join(cov)}"
        return text

    # -- constraints -------------------------------------------------------------------------

    def _found(self, dim: str | int, size: int, source: str, var: DataVar) -> None:
        """Record that the data fixes ``dim`` (a name, or a literal size) to ``size``."""
        if isinstance(dim, int):
            if size != dim:
                raise CemDataError(
                    f"{var.label}: expected length {dim} on {source}, found {size}"
                )
            return
        self.found.setdefault(dim, []).append((int(size), source))

    def _dim_of(self, plate: str) -> str:
        return self.plates[plate]["dim"]

    def _bow(self, var: DataVar) -> bool:
        """Does ``var`` alone fill its ragged plate as a bag of categories?"""
        return bag_of_categories(var, self.vars, self.plates)

    # -- values ------------------------------------------------------------------------------

    def _check_values(self, var: DataVar, arr: np.ndarray,
                      where: Callable[[tuple[int, ...]], str]) -> np.ndarray:
        """Check ``arr`` against the support (all but the category upper bound); returns the
        values as float64, or int64 for categories."""
        support = var.support
        expected = _EXPECTED.get(support, "category ids (non-negative whole numbers)")
        values = arr.astype(np.float64)

        def fail(mask: np.ndarray, found: str | None = None) -> None:
            idx = first_index(mask)
            if found is None:
                found = fmt_value(values[idx])
            raise CemDataError(f"{var.label}: expected {expected}, found {found}{where(idx)}")

        finite = np.isfinite(values)
        if not finite.all():
            fail(~finite)
        self._check_magnitude(var, values, where)
        if arr.dtype.kind == "f" and support in _INTEGER_SUPPORTS:
            whole = values == np.floor(values)
            if not whole.all():
                fail(~whole)
        if support in ("count", "category", "simplex", "nonnegative"):
            bad = values < 0
            if bad.any():
                fail(bad)
        if support == "trials":
            bad = values < 1
            if bad.any():
                fail(bad)
        if support == "positive":
            bad = values <= 0
            if bad.any():
                fail(bad)
        elif support == "unit":
            bad = (values <= 0) | (values >= 1)
            if bad.any():
                fail(bad)
        elif support == "binary":
            bad = (values != 0) & (values != 1)
            if bad.any():
                fail(bad)
        elif support == "category":
            if values.size:
                top = float(values.max())
                if top >= 2.0**62:
                    fail(values >= 2.0**62)
                cats = var.categories
                if isinstance(cats, str):
                    self.max_ids[cats] = max(self.max_ids.get(cats, 0), int(top) + 1)
            return np.ascontiguousarray(values.astype(np.int64))
        elif support == "simplex":
            total = values.sum(axis=-1)
            bad = np.abs(total - 1.0) > _SIMPLEX_TOL
            if bad.any():
                fail(bad, f"a vector summing to {fmt_value(float(total[first_index(bad)]))}")
            if values.size:
                values = values / total[..., np.newaxis]
        elif support == "spd":
            values = self._check_spd(var, values, fail)
        return np.ascontiguousarray(values)

    @staticmethod
    def _check_magnitude(var: DataVar, values: np.ndarray,
                         where: Callable[[tuple[int, ...]], str]) -> None:
        """Refuse values whose statistics overflow: Σx² of reals and whole-number covariates
        (they enter means and products as reals do), Σx of counts and positives."""
        if var.support in ("real", "vector", "integer"):
            statistic, power = "sum of squares", 2
        elif var.support in ("count", "trials", "positive"):
            statistic, power = "sum", 1
        else:
            return
        if not values.size:
            return
        with np.errstate(over="ignore"):
            total = float(np.sum(np.abs(values) ** power))
        if total < MAX_STATISTIC:
            return
        idx = tuple(int(i) for i in np.unravel_index(np.argmax(np.abs(values)), values.shape))
        raise CemDataError(
            f"{var.label}: expected {_EXPECTED[var.support]} whose {statistic} is finite, "
            f"found {fmt_value(values[idx])}{where(idx)}: the {statistic} of the data overflows "
            f"(above {MAX_STATISTIC:.0e})",
            hint="rescale the data (divide by its scale) and the hyperparameters with it",
        )

    @staticmethod
    def _check_spd(var: DataVar, values: np.ndarray, fail: Callable[..., None]) -> np.ndarray:
        if values.ndim < 3 or values.shape[-1] != values.shape[-2]:
            raise CemDataError(
                f"{var.label}: expected square matrices, found matrices of shape "
                f"{shape_text(values.shape[-2:])}"
            )
        if values.size == 0:
            return values
        swapped = np.swapaxes(values, -1, -2)
        scale = np.maximum(np.abs(values).max(axis=(-2, -1)), 1.0)
        asym = np.abs(values - swapped).max(axis=(-2, -1))
        bad = asym > SYMMETRY_TOL * scale
        if bad.any():
            fail(bad, "a matrix that is not symmetric")
        values = 0.5 * (values + swapped)
        try:
            np.linalg.cholesky(values)
        except np.linalg.LinAlgError:
            smallest = np.linalg.eigvalsh(values)[..., 0]
            bad = smallest <= 0
            if not bad.any():  # cholesky failed on a numerically borderline matrix
                bad = smallest <= smallest.min()
            low = float(smallest[first_index(bad)])
            fail(bad, f"a matrix with smallest eigenvalue {fmt_value(low)}")
        return values

    # -- dimensions --------------------------------------------------------------------------

    def _resolve_dims(self) -> None:
        for name, info in self.dim_specs.items():
            if info.get("ragged_over") is not None:
                continue
            found = self.found.get(name, [])
            default = info.get("default")
            if name in self.user_dims:
                size = self.user_dims[name]
                source = self.dim_sources.get(name, f"dims['{name}'] (--set {name}=...)")
            elif found:
                size, source = found[0]
            elif default is not None:
                size, source = int(default), "the model's default"
            elif name in self.max_ids:
                size, source = self.max_ids[name], "the largest category id in the data + 1"
            else:
                raise CemDataError(
                    f"dimension '{name}' is not set: it has no default in the model and the "
                    "data does not determine it",
                    hint=f"pass it, e.g. dims={{'{name}': ...}} (or --set {name}=... on the "
                    "command line)",
                )
            checks = list(found)
            if name not in self.user_dims and found and default is not None:
                checks.append((int(default), "the model's default"))
            for other, other_source in checks:
                if other != size:
                    hint = (
                        f"items are read with {source}'s {name}={size}: give data of that size"
                        if name in self.dim_sources else
                        f"the data has {name}={other}; change or drop dims['{name}']"
                        if name in self.user_dims else
                        f"make them agree, or set the size explicitly with "
                        f"dims={{'{name}': ...}} (--set {name}=...)"
                    )
                    raise CemDataError(
                        f"dimension '{name}' is {size} from {source} but {other} from "
                        f"{other_source}",
                        hint=hint,
                    )
            if size < 1:
                raise CemDataError(
                    f"dimension '{name}' must be at least 1, found {size} from {source}"
                )
            self.sizes[name] = size

    def _resolve_lengths(self) -> None:
        for name, info in self.dim_specs.items():
            over = info.get("ragged_over")
            if over is None:
                continue
            found = self.found_lengths.get(name)
            if not found:
                plates = [p for p, pi in self.plates.items() if pi["dim"] == name]
                if not plates:
                    continue
                raise CemDataError(
                    f"cannot determine the lengths of ragged dimension '{name}': no data lies "
                    f"in plate {plates[0]}",
                    hint="a ragged dimension takes its lengths from the data in its plate",
                )
            lengths, source = found[0]
            for other, other_source in found[1:]:
                if other.shape == lengths.shape and np.array_equal(other, lengths):
                    continue
                if other.shape != lengths.shape:  # already a conflict on the parent dimension
                    raise CemDataError(
                        f"{source} has {lengths.size} elements but {other_source} has "
                        f"{other.size}"
                    )
                d = int(np.flatnonzero(other != lengths)[0])
                plate = next(p for p, pi in self.plates.items() if pi["dim"] == name)
                parent = self.plates[plate]["parent"]
                raise CemDataError(
                    f"{source} and {other_source} disagree on the length of plate {plate} "
                    f"(dimension '{name}') at {parent}[{d}]: {int(lengths[d])} vs "
                    f"{int(other[d])}",
                    hint="every variable in a ragged plate needs one entry per position",
                )
            self.lengths[name] = lengths

    # -- assembling --------------------------------------------------------------------------

    def _finish(self, parsed: Parsed, ptrs: dict[str, np.ndarray]) -> np.ndarray:
        var = parsed.var
        if parsed.values is None:  # a ragged variable with no entries
            tail = [self.sizes[self._dim_of(p)] for p in var.plates[2:]]
            tail += [e if isinstance(e, int) else self.sizes[e] for e in var.event]
            dtype = np.int64 if var.support == "category" else np.float64
            return np.zeros((0, *tail), dtype=dtype)
        values = parsed.values
        if var.support == "category" and values.size:
            cats = var.categories
            n_cat = cats if isinstance(cats, int) else self.sizes[cats]
            bad = values >= n_cat
            if bad.any():
                idx = first_index(bad)
                if var.ragged is not None:
                    where = self._where_ragged(var, idx, ptrs[var.ragged])
                else:
                    where = self._where_dense(var, idx)
                bound = f"{cats}={n_cat}" if isinstance(cats, str) else str(n_cat)
                raise CemDataError(
                    f"{var.label}: expected category ids in [0, {bound}), found "
                    f"{fmt_value(values[idx])}{where}",
                    hint=None if not isinstance(cats, str) else
                    f"{cats}={n_cat} is {self.dim_sources[cats]}'s: ids count from 0 and stay "
                    f"below it" if cats in self.dim_sources else
                    f"ids count from 0; if there are more categories, pass dims={{'{cats}': ...}} "
                    f"(--set {cats}=...)",
                )
        return values

    def _check_something_observed(self, parsed: list) -> None:
        """Data whose every observed entry is missing would fit the prior and report it as
        a fit: refused, as data with no entries is."""
        observed = [p.var.name for p in parsed if p.var.role == "observed"]
        if observed and all(name in self.missing and self.missing[name].size
                            and bool(np.all(self.missing[name])) for name in observed):
            names = ", ".join(f"'{name}'" for name in observed)
            raise CemDataError(f"every entry of the observed data ({names}) is missing (NaN "
                               "or masked): nothing to fit",
                               hint="give at least one observed value")

    def bind(self) -> BoundData:
        self._check_names()
        parsed = [self._read(var) for var in self.vars]
        self._resolve_dims()
        self._resolve_lengths()

        arrays: dict[str, np.ndarray] = {}
        n_items: dict[str, int] = {}
        ptrs: dict[str, np.ndarray] = {}
        for plate, info in self.plates.items():
            dim = info["dim"]
            if info.get("ragged"):
                lengths = self.lengths.get(dim, np.zeros(0, dtype=np.int64))
                ptr = np.zeros(lengths.size + 1, dtype=np.int64)
                np.cumsum(lengths, out=ptr[1:])
                ptrs[plate] = ptr
                n_items[plate] = int(ptr[-1])
            else:
                n_items[plate] = self.sizes[dim]
        self._check_something_observed(parsed)
        for item in parsed:
            arrays[item.var.name] = self._finish(item, ptrs)
        for plate, ptr in ptrs.items():
            weights = next((p.weights for p in parsed
                            if p.var.ragged == plate and p.weights is not None), None)
            arrays[f"{plate}_ptr"] = ptr
            arrays[f"{plate}_weight"] = (
                np.ascontiguousarray(weights, dtype=np.float64) if weights is not None
                else np.ones(int(ptr[-1]), dtype=np.float64)
            )
        return BoundData(dict(self.sizes), arrays, n_items, self.missing)
