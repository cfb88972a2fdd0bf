"""How ``binding`` reads each observed variable or covariate: a dense array, a count matrix
(a bag of categories) or a list of ragged rows, into the final layout (``Parsed``), and the
places its messages name (``Readers``, a mixin of ``binding._Binder``: the binder supplies the
data, the plates, the values' checks and the dimensions found so far). Plain NumPy/SciPy."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from scipy import sparse

from ..errors import CemDataError
from .data_values import (
    MAX_STATISTIC,
    DataVar,
    Parsed,
    describe_value,
    first_index,
    fmt_value,
    kind_problem,
    shape_text,
    to_numeric,
    where_text,
)
from .missing import split_missing


class Readers:
    """The reading half of ``binding._Binder``, which supplies these and ``_check_values``,
    ``_found``, ``_dim_of`` and ``_bow``."""

    data: Mapping[str, object]
    plates: Mapping[str, Mapping[str, Any]]
    found_lengths: dict[str, list[tuple[np.ndarray, str]]]
    allow_missing: bool
    missing: dict[str, np.ndarray]

    # -- reading -----------------------------------------------------------------------------

    def _read(self, var: DataVar) -> Parsed:
        value = self.data[var.name]
        if var.ragged is None:
            return self._read_dense(var, value)
        counts_form = sparse.issparse(value) or (
            isinstance(value, np.ndarray) and value.dtype != object
        )
        if self._bow(var) and counts_form:
            if f"{var.ragged}_weight" in self.data:
                parent = self.plates[var.ragged]["parent"]
                raise CemDataError(
                    f"data '{var.ragged}_weight': the counts of the ids of {var.label}, so "
                    f"expected {var.label} as a list of id arrays, one per element of "
                    f"{parent} (in an .npz file flat, with its offsets '{var.ragged}_ptr'); "
                    f"found {describe_value(value)}",
                    hint="a count matrix holds its counts itself: give it without weights"
                    if np.ndim(value) == 2 else None)
            return self._read_counts(var, value)
        parsed = self._read_ragged(var, value)
        if self._bow(var) and f"{var.ragged}_weight" in self.data:
            parsed.weights = self._read_weights(var, parsed.lengths)
        return parsed

    def _read_dense(self, var: DataVar, value: object) -> Parsed:
        n_plates, n_event = len(var.plates), len(var.event)
        absent = None
        if var.role == "covariate" or var.missing is not None:  # (None: a SPEC without it)
            allowed = var.missing if self.allow_missing or var.missing != "yes" else (
                "no: this step takes complete data only (missing entries are fitted by fit "
                "and its methods)")
            value, absent = split_missing(var.label, value, var.support, n_plates, allowed,
                                          lambda idx: self._where_dense(var, idx))
        arr = to_numeric(var.label, value)
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
                f"{describe_value(arr) if arr.ndim else 'a single value'}",
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
        return Parsed(var, values, trailing=tuple(values.shape[1:]))

    def _record_event(self, var: DataVar, shape: Sequence[int], first_axis: int) -> None:
        for k, (dim, size) in enumerate(zip(var.event, shape, strict=True)):
            self._found(dim, size, f"data '{var.name}' (axis {first_axis + k})", var)

    def _read_counts(self, var: DataVar, value: object) -> Parsed:
        """A (parent × categories) count matrix, sparse or dense, for a bag of categories."""
        parent = self.plates[var.ragged]["parent"]
        what = f"a ({self._dim_of(parent)} × {var.categories}) matrix of counts"
        if sparse.issparse(value):
            if len(value.shape) != 2:
                raise CemDataError(
                    f"{var.label}: expected {what}, found a sparse array of shape "
                    f"{shape_text(value.shape)}"
                )
            try:
                mat = sparse.csr_array(value, copy=True)
            except Exception as exc:
                raise CemDataError(f"{var.label}: could not read the sparse matrix ({exc})") \
                    from None
            problem = kind_problem(mat.data.dtype)
            if problem is not None:
                raise CemDataError(f"{var.label}: expected {what}, found {problem}")
            counts = mat.data.astype(np.float64)
            indptr = mat.indptr.astype(np.int64)
            indices = mat.indices.astype(np.int64)

            def where(k: int) -> str:
                row = int(np.searchsorted(indptr, k, side="right") - 1)
                return f"row {row} ({parent}[{row}]), column {int(indices[k])}"

            self._check_counts(var.label, counts, lambda mask: where(first_index(mask)[0]))
            mat.sum_duplicates()
            mat.eliminate_zeros()
            ptr = mat.indptr.astype(np.int64)
            ids = mat.indices.astype(np.int64)
            weights = mat.data.astype(np.float64)
            n_rows, n_cols = mat.shape
        else:
            arr = to_numeric(var.label, value)
            if arr.ndim != 2:
                raise CemDataError(
                    f"{var.label}: expected {what} or a list of {self._dim_of(parent)} integer "
                    f"arrays of category ids, found an array of shape {shape_text(arr.shape)}"
                )
            dense = arr.astype(np.float64)
            self._check_counts(
                var.label, dense,
                lambda mask: "row {0} ({1}[{0}]), column {2}".format(
                    first_index(mask)[0], parent, first_index(mask)[1]
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
        return Parsed(var, np.ascontiguousarray(ids), lengths=lengths, weights=weights,
                       trailing=())

    def _check_counts(self, label: str, counts: np.ndarray,
                      where: Callable[[np.ndarray], str],
                      what: str = "counts (finite, non-negative whole numbers) in the count "
                      "matrix") -> None:
        for bad in (~np.isfinite(counts), counts < 0, counts != np.floor(counts)):
            if bad.any():
                found = counts[first_index(bad)]
                raise CemDataError(
                    f"{label}: expected {what}, found {fmt_value(found)} at {where(bad)}"
                )
        with np.errstate(over="ignore"):
            total = float(np.sum(counts))
        if counts.size and not total < MAX_STATISTIC:
            bad = counts == counts.max()
            raise CemDataError(
                f"{label}: expected {what} with a finite total, found "
                f"{fmt_value(counts.max())} "
                f"at {where(bad)}: the total count overflows (above {MAX_STATISTIC:.0e})",
                hint="counts this large carry no more information than smaller ones; scale "
                "them down",
            )

    def _read_weights(self, var: DataVar, lengths: np.ndarray) -> np.ndarray:
        """'<plate>_weight': the count of each id of ``var``, a bag of categories given as
        lists of ids (``lengths`` of them per element of the parent), flat."""
        key = f"{var.ragged}_weight"
        value, label = self.data[key], f"data '{key}'"
        parent = self.plates[var.ragged]["parent"]
        if sparse.issparse(value) or not isinstance(value, list | tuple | np.ndarray) or (
                len(value) != lengths.size):
            raise CemDataError(
                f"{label}: expected a list of {lengths.size} arrays, one per element of "
                f"{parent}, with the count of each id of {var.label}; found "
                f"{describe_value(value)}")
        pieces = [to_numeric(label, row, f" at {parent}[{d}]") for d, row in enumerate(value)]
        for d, row in enumerate(pieces):
            if row.shape != (lengths[d],):
                raise CemDataError(
                    f"{label}: expected {lengths[d]} counts at {parent}[{d}], one per id of "
                    f"{var.label} there, found an array of shape {shape_text(row.shape)}")
        counts = np.concatenate([np.zeros(0), *pieces]).astype(np.float64)
        ptr = np.concatenate([[0], np.cumsum(lengths)])
        self._check_counts(label, counts,
                           lambda mask: self._where_ragged(var, first_index(mask), ptr)[4:],
                           "counts (finite, non-negative whole numbers)")
        return counts

    def _found_lengths(self, var: DataVar, lengths: np.ndarray) -> None:
        parent = self.plates[var.ragged]["parent"]
        dim = self._dim_of(var.ragged)
        self.found_lengths.setdefault(dim, []).append(
            (lengths, f"data '{var.name}' (plate {var.ragged} in {parent})")
        )

    def _read_ragged(self, var: DataVar, value: object) -> Parsed:
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
                f"{describe_value(value)}"
            )
        elements = list(value) if not isinstance(value, np.ndarray) or value.ndim else [value]
        pieces: list[np.ndarray] = []
        lengths = np.zeros(len(elements), dtype=np.int64)
        trailing: tuple[int, ...] | None = None
        first_at = -1
        for d, element in enumerate(elements):
            where = f" at {parent}[{d}]"
            arr = to_numeric(var.label, element, where)
            if arr.ndim != want:
                if arr.size == 0:
                    continue
                flat = isinstance(value, np.ndarray) and value.ndim == want
                # a flat array is read as its elements: say what was given, not its first
                found = (f"one array of shape {shape_text(value.shape)} (its elements would "
                         f"be the {parent})" if flat else
                         f"an array of shape {shape_text(arr.shape)}{where}")
                raise CemDataError(
                    f"{var.label}: expected one {want}-dimensional array per element of "
                    f"{parent} (axes {', '.join([var.ragged, *var.plates[2:]])}"
                    f"{''.join(', ' + str(e) for e in var.event)}), found {found}",
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
                    f"found {shape_text(arr.shape)} at {parent}[{d}] but "
                    f"{shape_text((lengths[first_at], *trailing))} at {parent}[{first_at}]"
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
            return Parsed(var, None, lengths=lengths, trailing=trailing)
        flat = np.concatenate(pieces, axis=0)
        if flat.dtype.kind not in "biuf":  # concatenating bools and ints is still numeric
            flat = flat.astype(np.float64)
        ptr = np.concatenate([[0], np.cumsum(lengths)])
        values = self._check_values(var, flat, lambda idx: self._where_ragged(var, idx, ptr))
        return Parsed(var, values, lengths=lengths, trailing=trailing)

    # -- locations ---------------------------------------------------------------------------

    def _where_dense(self, var: DataVar, idx: tuple[int, ...]) -> str:
        if var.plates:
            parts = [f"{p}[{i}]" for p, i in zip(var.plates, idx, strict=False)]
            event = idx[len(var.plates):]
        else:
            parts, event = [], idx[1:]
        return where_text(parts, event)

    def _where_ragged(self, var: DataVar, idx: tuple[int, ...], ptr: np.ndarray) -> str:
        flat = idx[0]
        d = int(np.searchsorted(ptr, flat, side="right") - 1)
        parts = [f"{var.plates[0]}[{d}]", f"{var.ragged}[{flat - int(ptr[d])}]"]
        rest = var.plates[2:]
        parts += [f"{p}[{i}]" for p, i in zip(rest, idx[1:], strict=False)]
        return where_text(parts, idx[1 + len(rest):])
