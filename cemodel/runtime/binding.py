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
Plain NumPy/SciPy: nothing here is compiled.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy import sparse

from ..errors import CemDataError, did_you_mean
from ..numerics import SHAPE_SMALLEST
from ..options import check_hyper_values
from .missing import split_missing

__all__ = ["BoundData", "bind_data", "check_hyper_names", "hyper_value"]


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
_COVARIATE_SUPPORT = {"real": "real", "int": "integer", "count": "count", "vector": "vector"}
_INTEGER_SUPPORTS = {"binary", "count", "trials", "integer", "category"}
_SIMPLEX_TOL = 1e-6
_SYMMETRY_TOL = 1e-8
# The statistics of the data (Σx for counts and positive values, Σx² for reals and vectors)
# must stay finite with room to spare: beyond this the ELBO overflows to inf
_MAX_STATISTIC = 1e300


# ---------------------------------------------------------------------------------------------
# Small helpers
# ---------------------------------------------------------------------------------------------


def _fmt(value: Any) -> str:
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


def _shape(shape: Sequence[int]) -> str:
    return "(" + ", ".join(str(s) for s in shape) + ("," if len(shape) == 1 else "") + ")"


def _kind_problem(dtype: np.dtype) -> str | None:
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


def _describe_value(value: object) -> str:
    if sparse.issparse(value):
        return f"a sparse matrix of shape {_shape(value.shape)}"
    if isinstance(value, np.ndarray):
        return f"an array of shape {_shape(value.shape)}"
    if isinstance(value, list | tuple):
        return f"a {type(value).__name__} of length {len(value)}"
    return f"a value of type {type(value).__name__}"


def _to_numeric(label: str, value: object, where: str = "") -> np.ndarray:
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
            found = f"{_describe_value(value)} that NumPy cannot read ({text})"
        raise CemDataError(
            f"{label}: expected a numeric array{where}, found {found}",
            hint="give a rectangular array of numbers",
        ) from None
    problem = _kind_problem(arr.dtype)
    if problem is not None:
        raise CemDataError(f"{label}: expected numbers{where}, found {problem}")
    return arr


def _as_int(label: str, value: object) -> int:
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


def _suggest(word: str, candidates: Sequence[str] | Mapping[str, object]) -> str | None:
    """A did-you-mean hint, also for a name that differs only in case."""
    names = list(candidates)
    same = [c for c in names if c.lower() == str(word).lower()]
    if same:
        return f"did you mean '{same[0]}'?"
    return did_you_mean(str(word), names)


def _first(mask: np.ndarray) -> tuple[int, ...]:
    return tuple(int(i) for i in np.argwhere(mask)[0])


# ---------------------------------------------------------------------------------------------
# The variables of a spec
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Var:
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
class _Parsed:
    """One variable after reading: values in the final layout (ragged plates flattened)."""

    var: _Var
    values: np.ndarray | None  # None: a ragged variable with no entries at all (built later)
    lengths: np.ndarray | None = None  # per parent element, for a ragged variable
    weights: np.ndarray | None = None  # bag-of-words counts
    trailing: tuple[int, ...] | None = None  # shape after the leading axis, when known


def _spec_vars(spec: Mapping[str, Any]) -> list[_Var]:
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
                    support = _COVARIATE_SUPPORT[info["kind"]]
                event = tuple(info.get("shape", ()))
                categories = None
            var_plates = tuple(info.get("plates", ()))
            ragged = next((p for p in var_plates if plates[p]["ragged"]), None)
            missing = None if role == "covariate" else info.get("missing")
            out.append(_Var(name, role, support, var_plates, event, categories, ragged,
                            missing))
    return out


def _bag_of_categories(var: _Var, all_vars: Sequence[_Var],
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
    found = _spec_vars(spec)
    return any(v.name == name and _bag_of_categories(v, found, spec["plates"]) for v in found)


# ---------------------------------------------------------------------------------------------
# Binding
# ---------------------------------------------------------------------------------------------


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
    from .source import ItemSource

    if isinstance(data, ItemSource):
        raise CemDataError("out-of-core data (a stream from disk) is read by fit_svi and its "
                           "variants (svi, svi+, ssvi-a, ssvi) only: the batch methods visit "
                           "every item at every iteration",
                           hint="load the data into memory for mf and klc")
    return _Binder(spec, data, dims or {}, missing).bind()


class _Binder:
    def __init__(self, spec: Mapping[str, Any], data: Mapping[str, object],
                 dims: Mapping[str, int], missing: bool = False) -> None:
        if not isinstance(data, Mapping):
            raise CemDataError(
                f"expected the data as a mapping from variable names to arrays, found "
                f"{_describe_value(data)}"
            )
        if not isinstance(dims, Mapping):
            raise CemDataError(
                f"expected dims as a mapping from dimension names to sizes, found "
                f"{_describe_value(dims)}"
            )
        self.spec = spec
        self.data = data
        self.dim_specs: Mapping[str, Mapping[str, Any]] = spec.get("dims", {})
        self.plates: Mapping[str, Mapping[str, Any]] = spec.get("plates", {})
        self.vars = _spec_vars(spec)
        self.user_dims = self._read_user_dims(dims)
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
            if name not in self.dim_specs:
                known = ", ".join(self.dim_specs) or "none"
                raise CemDataError(
                    f"unknown dimension '{name}' in dims; the model's dimensions are: {known}",
                    hint=_suggest(name, self.dim_specs),
                )
            over = self.dim_specs[name].get("ragged_over")
            if over is not None:
                raise CemDataError(
                    f"dimension '{name}' is ragged (one length per element of '{over}'), so it "
                    f"cannot be set in dims; found {value!r}",
                    hint="its lengths come from the data of the plates over it",
                )
            size = _as_int(f"dims['{name}']", value)
            if size < 1:
                raise CemDataError(f"dims['{name}']: expected a size of at least 1, found {size}")
            out[name] = size
        return out

    def _check_names(self) -> None:
        expected = [v.name for v in self.vars]
        for key in self.data:
            if key in expected:
                continue
            if not isinstance(key, str):
                raise CemDataError(
                    f"data keys must be variable names (strings), found {key!r}; the model "
                    f"expects: {', '.join(expected) or 'no data'}"
                )
            if key in self.dim_specs:
                hint = f"'{key}' is a dimension: pass it as dims={{'{key}': ...}} (--set {key}=...)"
            else:
                hint = _suggest(key, expected)
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

    def _found(self, dim: str | int, size: int, source: str, var: _Var) -> None:
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

    def _bow(self, var: _Var) -> bool:
        """Does ``var`` alone fill its ragged plate as a bag of categories?"""
        return _bag_of_categories(var, self.vars, self.plates)

    # -- reading -----------------------------------------------------------------------------

    def _read(self, var: _Var) -> _Parsed:
        value = self.data[var.name]
        if var.ragged is None:
            return self._read_dense(var, value)
        counts_form = sparse.issparse(value) or (
            isinstance(value, np.ndarray) and value.dtype != object
        )
        if self._bow(var) and counts_form:
            return self._read_counts(var, value)
        return self._read_ragged(var, value)

    def _read_dense(self, var: _Var, value: object) -> _Parsed:
        n_plates, n_event = len(var.plates), len(var.event)
        absent = None
        if var.role == "covariate" or var.missing is not None:  # (None: a SPEC without it)
            allowed = var.missing if self.allow_missing or var.missing != "yes" else (
                "no: this step takes complete data only (missing entries are fitted by fit "
                "and its methods)")
            value, absent = split_missing(var.label, value, var.support, n_plates, allowed,
                                          lambda idx: self._where_dense(var, idx))
        arr = _to_numeric(var.label, value)
        if n_plates == 0 and arr.ndim == n_event:
            arr = arr[np.newaxis]
        want = max(n_plates, 1) + n_event
        if arr.ndim != want or (n_plates == 0 and arr.shape[0] != 1):
            axes = list(var.plates) + [str(e) for e in var.event]
            if axes:
                described = f"a {len(axes)}-dimensional array with axes ({', '.join(axes)})"
            else:
                described = "a single value"
            raise CemDataError(
                f"{var.label}: expected {described}, found "
                f"{_describe_value(arr) if arr.ndim else 'a single value'}",
                hint=None if n_plates + n_event else "give a single number",
            )
        for axis, plate in enumerate(var.plates):
            self._found(self._dim_of(plate), arr.shape[axis],
                        f"data '{var.name}' (axis {axis}, plate {plate})", var)
        self._record_event(var, arr.shape[max(n_plates, 1):], max(n_plates, 1))
        values = self._check_values(var, arr, lambda idx: self._where_dense(var, idx))
        if var.missing == "yes" and self.allow_missing:
            self.missing[var.name] = (absent if absent is not None
                                      else np.zeros(values.shape[:n_plates], dtype=bool))
        return _Parsed(var, values, trailing=tuple(values.shape[1:]))

    def _record_event(self, var: _Var, shape: Sequence[int], first_axis: int) -> None:
        for k, (dim, size) in enumerate(zip(var.event, shape, strict=True)):
            self._found(dim, size, f"data '{var.name}' (axis {first_axis + k})", var)

    def _read_counts(self, var: _Var, value: object) -> _Parsed:
        """A (parent × categories) count matrix, sparse or dense, for a bag of categories."""
        parent = self.plates[var.ragged]["parent"]
        what = f"a ({self._dim_of(parent)} × {var.categories}) matrix of counts"
        if sparse.issparse(value):
            if len(value.shape) != 2:
                raise CemDataError(
                    f"{var.label}: expected {what}, found a sparse array of shape "
                    f"{_shape(value.shape)}"
                )
            try:
                mat = sparse.csr_array(value, copy=True)
            except Exception as exc:
                raise CemDataError(f"{var.label}: could not read the sparse matrix ({exc})") \
                    from None
            problem = _kind_problem(mat.data.dtype)
            if problem is not None:
                raise CemDataError(f"{var.label}: expected {what}, found {problem}")
            counts = mat.data.astype(np.float64)
            indptr = mat.indptr.astype(np.int64)
            indices = mat.indices.astype(np.int64)

            def where(k: int) -> str:
                row = int(np.searchsorted(indptr, k, side="right") - 1)
                return f"row {row} ({parent}[{row}]), column {int(indices[k])}"

            self._check_counts(var, counts, lambda mask: where(_first(mask)[0]))
            mat.sum_duplicates()
            mat.eliminate_zeros()
            ptr = mat.indptr.astype(np.int64)
            ids = mat.indices.astype(np.int64)
            weights = mat.data.astype(np.float64)
            n_rows, n_cols = mat.shape
        else:
            arr = _to_numeric(var.label, value)
            if arr.ndim != 2:
                raise CemDataError(
                    f"{var.label}: expected {what} or a list of {self._dim_of(parent)} integer "
                    f"arrays of category ids, found an array of shape {_shape(arr.shape)}"
                )
            dense = arr.astype(np.float64)
            self._check_counts(
                var, dense,
                lambda mask: "row {0} ({1}[{0}]), column {2}".format(
                    _first(mask)[0], parent, _first(mask)[1]
                ),
            )
            rows, cols = np.nonzero(dense)
            n_rows, n_cols = dense.shape
            weights = np.ascontiguousarray(dense[rows, cols])
            ids = cols.astype(np.int64)
            ptr = np.zeros(n_rows + 1, dtype=np.int64)
            np.cumsum(np.bincount(rows, minlength=n_rows), out=ptr[1:])
        self._found(self._dim_of(parent), n_rows, f"data '{var.name}' (rows of the count matrix)",
                    var)
        self._found(var.categories, n_cols, f"data '{var.name}' (columns of the count matrix)",
                    var)
        lengths = np.diff(ptr)
        self._found_lengths(var, lengths)
        return _Parsed(var, np.ascontiguousarray(ids), lengths=lengths, weights=weights,
                       trailing=())

    def _check_counts(self, var: _Var, counts: np.ndarray,
                      where: Callable[[np.ndarray], str]) -> None:
        what = "counts (finite, non-negative whole numbers) in the count matrix"
        for bad in (~np.isfinite(counts), counts < 0, counts != np.floor(counts)):
            if bad.any():
                found = counts[_first(bad)]
                raise CemDataError(
                    f"{var.label}: expected {what}, found {_fmt(found)} at {where(bad)}"
                )
        with np.errstate(over="ignore"):
            total = float(np.sum(counts))
        if counts.size and not total < _MAX_STATISTIC:
            bad = counts == counts.max()
            raise CemDataError(
                f"{var.label}: expected {what} with a finite total, found {_fmt(counts.max())} "
                f"at {where(bad)}: the total count overflows (above {_MAX_STATISTIC:.0e})",
                hint="counts this large carry no more information than smaller ones; scale "
                "them down",
            )

    def _found_lengths(self, var: _Var, lengths: np.ndarray) -> None:
        parent = self.plates[var.ragged]["parent"]
        dim = self._dim_of(var.ragged)
        self.found_lengths.setdefault(dim, []).append(
            (lengths, f"data '{var.name}' (plate {var.ragged} in {parent})")
        )

    def _read_ragged(self, var: _Var, value: object) -> _Parsed:
        parent = self.plates[var.ragged]["parent"]
        n_rest = len(var.plates) - 2
        want = 1 + n_rest + len(var.event)
        if sparse.issparse(value) or not isinstance(value, list | tuple | np.ndarray):
            forms = f"a list with one array per element of {parent}"
            if self.plates[var.ragged].get("ordered"):
                forms += (f", each in order (plate {var.ragged} is a chain's steps: a count "
                          "matrix would lose their order)")
            if self._bow(var):
                forms += f", or a ({self._dim_of(parent)} × {var.categories}) count matrix"
            raise CemDataError(
                f"{var.label}: plate {var.ragged} is ragged, so expected {forms}; found "
                f"{_describe_value(value)}"
            )
        elements = list(value) if not isinstance(value, np.ndarray) or value.ndim else [value]
        pieces: list[np.ndarray] = []
        lengths = np.zeros(len(elements), dtype=np.int64)
        trailing: tuple[int, ...] | None = None
        first_at = -1
        for d, element in enumerate(elements):
            where = f" at {parent}[{d}]"
            arr = _to_numeric(var.label, element, where)
            if arr.ndim != want:
                if arr.size == 0:
                    continue
                flat = isinstance(value, np.ndarray) and value.ndim == want
                raise CemDataError(
                    f"{var.label}: expected one {want}-dimensional array per element of "
                    f"{parent} (axes {', '.join([var.ragged, *var.plates[2:]])}"
                    f"{''.join(', ' + str(e) for e in var.event)}), found an array of shape "
                    f"{_shape(arr.shape)}{where}",
                    hint=f"give a list with one array per element of {parent}; in an .npz "
                         f"file, the flat array may come with its offsets as "
                         f"'{var.ragged}_ptr' (length {self._dim_of(parent)} + 1)"
                    if flat else None,
                )
            if trailing is None:
                trailing, first_at = arr.shape[1:], d
            elif arr.shape[1:] != trailing:
                raise CemDataError(
                    f"{var.label}: every element must have the same shape after its first axis; "
                    f"found {_shape(arr.shape)} at {parent}[{d}] but "
                    f"{_shape((lengths[first_at], *trailing))} at {parent}[{first_at}]"
                )
            lengths[d] = arr.shape[0]
            if arr.shape[0]:
                pieces.append(arr)
        self._found(self._dim_of(parent), len(elements),
                    f"data '{var.name}' (the number of arrays in the list, plate {parent})", var)
        if trailing is not None:
            for k, plate in enumerate(var.plates[2:]):
                self._found(self._dim_of(plate), trailing[k],
                            f"data '{var.name}' (axis {k + 1} of each array, plate {plate})", var)
            self._record_event(var, trailing[n_rest:], 1 + n_rest)
        self._found_lengths(var, lengths)
        if not pieces:
            return _Parsed(var, None, lengths=lengths, trailing=trailing)
        flat = np.concatenate(pieces, axis=0)
        if flat.dtype.kind not in "biuf":  # concatenating bools and ints is still numeric
            flat = flat.astype(np.float64)
        ptr = np.concatenate([[0], np.cumsum(lengths)])
        values = self._check_values(var, flat, lambda idx: self._where_ragged(var, idx, ptr))
        return _Parsed(var, values, lengths=lengths, trailing=trailing)

    # -- locations ---------------------------------------------------------------------------

    def _where_dense(self, var: _Var, idx: tuple[int, ...]) -> str:
        if var.plates:
            parts = [f"{p}[{i}]" for p, i in zip(var.plates, idx, strict=False)]
            event = idx[len(var.plates):]
        else:
            parts, event = [], idx[1:]
        return self._where_text(parts, event)

    def _where_ragged(self, var: _Var, idx: tuple[int, ...], ptr: np.ndarray) -> str:
        flat = idx[0]
        d = int(np.searchsorted(ptr, flat, side="right") - 1)
        parts = [f"{var.plates[0]}[{d}]", f"{var.ragged}[{flat - int(ptr[d])}]"]
        rest = var.plates[2:]
        parts += [f"{p}[{i}]" for p, i in zip(rest, idx[1:], strict=False)]
        return self._where_text(parts, idx[1 + len(rest):])

    @staticmethod
    def _where_text(parts: list[str], event: tuple[int, ...]) -> str:
        if event:
            parts = [*parts, f"entry [{', '.join(str(e) for e in event)}]"]
        return " at " + ", ".join(parts) if parts else ""

    # -- values ------------------------------------------------------------------------------

    def _check_values(self, var: _Var, arr: np.ndarray,
                      where: Callable[[tuple[int, ...]], str]) -> np.ndarray:
        """Check ``arr`` against the support (all but the category upper bound); returns the
        values as float64, or int64 for categories."""
        support = var.support
        expected = _EXPECTED.get(support, "category ids (non-negative whole numbers)")
        values = arr.astype(np.float64)

        def fail(mask: np.ndarray, found: str | None = None) -> None:
            idx = _first(mask)
            if found is None:
                found = _fmt(values[idx])
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
                fail(bad, f"a vector summing to {_fmt(float(total[_first(bad)]))}")
            if values.size:
                values = values / total[..., np.newaxis]
        elif support == "spd":
            values = self._check_spd(var, values, fail)
        return np.ascontiguousarray(values)

    @staticmethod
    def _check_magnitude(var: _Var, values: np.ndarray,
                         where: Callable[[tuple[int, ...]], str]) -> None:
        """Refuse values whose statistics overflow: Σx² of reals, Σx of counts and positives."""
        if var.support in ("real", "vector"):
            statistic, power = "sum of squares", 2
        elif var.support in ("count", "trials", "positive"):
            statistic, power = "sum", 1
        else:
            return
        if not values.size:
            return
        with np.errstate(over="ignore"):
            total = float(np.sum(np.abs(values) ** power))
        if total < _MAX_STATISTIC:
            return
        idx = tuple(int(i) for i in np.unravel_index(np.argmax(np.abs(values)), values.shape))
        raise CemDataError(
            f"{var.label}: expected {_EXPECTED[var.support]} whose {statistic} is finite, "
            f"found {_fmt(values[idx])}{where(idx)}: the {statistic} of the data overflows "
            f"(above {_MAX_STATISTIC:.0e})",
            hint="rescale the data (divide by its scale) and the hyperparameters with it",
        )

    @staticmethod
    def _check_spd(var: _Var, values: np.ndarray, fail: Callable[..., None]) -> np.ndarray:
        if values.ndim < 3 or values.shape[-1] != values.shape[-2]:
            raise CemDataError(
                f"{var.label}: expected square matrices, found matrices of shape "
                f"{_shape(values.shape[-2:])}"
            )
        if values.size == 0:
            return values
        swapped = np.swapaxes(values, -1, -2)
        scale = np.maximum(np.abs(values).max(axis=(-2, -1)), 1.0)
        asym = np.abs(values - swapped).max(axis=(-2, -1))
        bad = asym > _SYMMETRY_TOL * scale
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
            fail(bad, f"a matrix with smallest eigenvalue {_fmt(float(smallest[_first(bad)]))}")
        return values

    # -- dimensions --------------------------------------------------------------------------

    def _resolve_dims(self) -> None:
        for name, info in self.dim_specs.items():
            if info.get("ragged_over") is not None:
                continue
            found = self.found.get(name, [])
            default = info.get("default")
            if name in self.user_dims:
                size, source = self.user_dims[name], f"dims['{name}'] (--set {name}=...)"
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

    def _finish(self, parsed: _Parsed, ptrs: dict[str, np.ndarray]) -> np.ndarray:
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
                idx = _first(bad)
                if var.ragged is not None:
                    where = self._where_ragged(var, idx, ptrs[var.ragged])
                else:
                    where = self._where_dense(var, idx)
                bound = f"{cats}={n_cat}" if isinstance(cats, str) else str(n_cat)
                raise CemDataError(
                    f"{var.label}: expected category ids in [0, {bound}), found "
                    f"{_fmt(values[idx])}{where}",
                    hint=None if not isinstance(cats, str) else
                    f"ids count from 0; if there are more categories, pass dims={{'{cats}': ...}}",
                )
        return values

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


# ---------------------------------------------------------------------------------------------
# Hyperparameters
# ---------------------------------------------------------------------------------------------


def _shape_words(shape: tuple[int, ...]) -> str:
    if not shape:
        return "a scalar"
    return f"an array of shape {_shape(shape)}"


def hyper_value(
    hypers: Mapping[str, object], name: str, default: object, shape: tuple[int, ...],
    domain: str | None = None,
) -> float | np.ndarray:
    """``hypers[name]`` if given, else ``default`` (a value, or a function that computes it),
    checked finite, of ``shape`` and, when
    ``domain`` is given, in it: ``positive`` (every entry > 0), ``shape`` (positive and at
    least SHAPE_SMALLEST: a shape held as α − 1) or ``spd`` (a symmetric positive-definite
    matrix), the domains of the family parameters it is used as.

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
    arr = _to_numeric(label, value)
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
        idx = _first(~finite) if out.ndim else ()
        at = f" at [{', '.join(map(str, idx))}]" if idx else ""
        raise CemDataError(f"{label}: expected finite numbers, found {_fmt(out[idx])}{at}")
    check_hyper_values(label, out)
    if domain in ("positive", "shape") and not np.all(out > 0):
        idx = _first(out <= 0) if out.ndim else ()
        at = f" at [{', '.join(map(str, idx))}]" if idx else ""
        raise CemDataError(f"{label}: expected positive numbers, found {_fmt(out[idx])}{at}")
    if domain == "shape" and not np.all(out >= SHAPE_SMALLEST):
        idx = _first(out < SHAPE_SMALLEST) if out.ndim else ()
        at = f" at [{', '.join(map(str, idx))}]" if idx else ""
        raise CemDataError(
            f"{label}: expected shapes of at least {SHAPE_SMALLEST:.3g} (they are held as "
            f"shape − 1 in double precision), found {_fmt(out[idx])}{at}")
    if domain == "spd" and out.ndim == 2 and out.shape[0] == out.shape[1]:
        symmetric = np.allclose(out, out.T, rtol=_SYMMETRY_TOL, atol=0.0)
        if not symmetric or np.linalg.eigvalsh(0.5 * (out + out.T))[0] <= 0:
            found = "a matrix that is not symmetric" if not symmetric else (
                f"a matrix with smallest eigenvalue "
                f"{_fmt(float(np.linalg.eigvalsh(out)[0]))}")
            raise CemDataError(f"{label}: expected a symmetric positive-definite matrix, "
                               f"found {found}")
    if not shape:
        return float(out)
    return out


def check_hyper_names(hypers: Mapping[str, object] | None,
                      known: Sequence[str]) -> dict[str, object]:
    """``hypers`` as a dict (None: no values given), names that are not hyperparameters of the
    model refused."""
    hypers = {} if hypers is None else hypers
    if not isinstance(hypers, Mapping):
        raise CemDataError(
            f"expected hyperparameters as a mapping from names to values, found "
            f"{_describe_value(hypers)}"
        )
    for key in hypers:
        if key not in known:
            listed = ", ".join(known) if known else "none"
            raise CemDataError(
                f"unknown hyperparameter '{key}'; the model's hyperparameters are: {listed}",
                hint=_suggest(str(key), known),
            )
    return dict(hypers)
