"""Out-of-core data: the items of a data plate read from disk a minibatch at a time.

:func:`open_source` turns a data file into a :class:`cemodel.runtime.ItemSource` that a
generated ``fit_svi`` reads one minibatch at a time, so SVI and its variants run on data larger
than memory with peak memory bounded by the minibatch and the global parameters. Formats (the
same as :func:`cemodel.data.load_data`, except CSV):

* ``.npy`` (``numpy.save``): one row per item, read in place;
* ``.npz``: arrays by variable name (``numpy.savez``; a ragged plate ``p`` stored flat with its
  offsets ``p_ptr``, a bag of words' counts beside its ids as ``p_weight``), or a sparse CSR
  matrix (``scipy.sparse.save_npz``);
* ``.mtx`` (MatrixMarket coordinate) and UCI ``docword*.txt`` (optionally ``.gz``): a document ×
  word count matrix.

Reading is by ``os.pread`` of the rows asked for (no memory map, whose pages would count in the
process's memory): the index arrays are never loaded whole. The text formats and ``.npz``
members are first converted, once, into ``.npy`` files under ``$CEMODEL_CACHE/streams`` (keyed
by the file's path, size and modification time; written to a temporary directory and renamed,
so an interrupted conversion leaves nothing behind). The conversion reads the file in blocks
of a few MB, twice (counts per row, then the entries into place): it holds one integer per
item, not the data.
"""

from __future__ import annotations

import errno
import gzip
import hashlib
import io
import json
import os
import shutil
import tempfile
import zipfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
from scipy import sparse

from .data import (
    check_docword_header,
    check_sparse_size,
    first_bad,
    single_target,
    sparse_target,
)
from .errors import CemDataError
from .files import CemWriteError, reason
from .runtime.data_values import takes_count_matrix
from .runtime.flat import check_flat, check_offsets
from .runtime.source import ItemSource

__all__ = ["DiskSource", "open_model_source", "open_source"]

_BLOCK = 1 << 24  # bytes of text parsed at a time by the converters
_FORMATS = ".npy, .npz, .mtx or a UCI docword*.txt file"


def _read_npy_header(f) -> tuple[tuple[int, ...], bool, np.dtype]:
    """(shape, fortran_order, dtype) of the .npy stream ``f``, left at its data."""
    version = np.lib.format.read_magic(f)
    if version == (1, 0):
        return np.lib.format.read_array_header_1_0(f)
    return np.lib.format.read_array_header_2_0(f)


class _NpyFile:
    """An ``.npy`` file read by rows with ``os.pread``: C order, any numeric dtype."""

    def __init__(self, path: Path, what: str) -> None:
        self.path = path
        try:
            with open(path, "rb") as f:
                shape, fortran, dtype = _read_npy_header(f)
                self.offset = f.tell()
        except (OSError, ValueError) as exc:
            raise CemDataError(f"data file '{what}': could not read it as a NumPy .npy array "
                               f"({exc})") from None
        if dtype.hasobject or dtype.kind not in "biuf":
            raise CemDataError(f"data file '{what}': holds {dtype} values, expected numbers")
        if fortran and len(shape) > 1:
            raise CemDataError(f"data file '{what}': the array is in Fortran order; out of core "
                               "reads rows, so expected C order",
                               hint="save numpy.ascontiguousarray(array)")
        if not shape:
            raise CemDataError(f"data file '{what}': holds a single number, expected one row "
                               "per item")
        self.shape: tuple[int, ...] = tuple(shape)
        self.dtype = dtype
        self.row_bytes = int(np.prod(shape[1:], dtype=np.int64)) * dtype.itemsize
        expected = self.offset + self.shape[0] * self.row_bytes
        if os.path.getsize(path) < expected:
            raise CemDataError(f"data file '{what}': truncated: the header promises "
                               f"{self.shape} {dtype} values ({expected} bytes), the file has "
                               f"{os.path.getsize(path)}")
        self.fd = os.open(path, os.O_RDONLY)

    def __del__(self) -> None:
        fd = getattr(self, "fd", None)
        if fd is not None:
            os.close(fd)

    def _run(self, first: int, count: int) -> np.ndarray:
        size = count * self.row_bytes
        buffer = os.pread(self.fd, size, self.offset + first * self.row_bytes)
        return np.frombuffer(buffer, self.dtype, count * (self.row_bytes // self.dtype.itemsize))

    def largest(self) -> int:
        """The largest finite value in the file (read in blocks), -1 if there is none: NaN is
        a missing entry, and infinities are the binding's to refuse, with their place."""
        step = max(1, _BLOCK // max(1, self.row_bytes))
        top = -1
        for first in range(0, self.shape[0], step):
            block = self._run(first, min(step, self.shape[0] - first))
            block = block[np.isfinite(block)] if block.dtype.kind == "f" else block
            if block.size:
                top = max(top, int(np.floor(block.max())))
        return top

    def rows(self, items: np.ndarray) -> np.ndarray:
        """Rows ``items`` in that order; consecutive items are read in one call."""
        items = np.asarray(items, dtype=np.int64)
        out = np.empty((items.size,) + self.shape[1:], self.dtype)
        if items.size == 0:
            return out
        order = np.argsort(items, kind="stable")
        ranked = items[order]
        cuts = np.flatnonzero(np.diff(ranked) != 1) + 1
        for a, b in zip(np.r_[0, cuts], np.r_[cuts, items.size], strict=True):
            block = self._run(int(ranked[a]), int(b - a))
            out[order[a:b]] = block.reshape((int(b - a),) + self.shape[1:])
        return out

    def ranges(self, starts: np.ndarray, stops: np.ndarray) -> list[np.ndarray]:
        """Elements ``starts[i]:stops[i]`` of a 1-D file, for each i; ranges that touch are
        read in one call."""
        out: list[np.ndarray] = [np.empty(0, self.dtype)] * len(starts)
        order = np.argsort(starts, kind="stable")
        i = 0
        while i < len(order):
            j = i + 1
            while j < len(order) and starts[order[j]] == stops[order[j - 1]]:
                j += 1
            first, last = int(starts[order[i]]), int(stops[order[j - 1]])
            block = self._run(first, last - first)
            for k in order[i:j]:
                out[k] = block[starts[k] - first:stops[k] - first]
            i = j
        return out


class DiskSource(ItemSource):
    """The items of a data file: ``read(items)`` gives the dict a generated ``fit`` binds."""

    def __init__(self, path: Path, n_items: int, fingerprint: str,
                 reader: Callable[[np.ndarray], dict[str, Any]], what: str,
                 dims: dict[str, int] | None = None) -> None:
        self.path = path
        self.dims = dict(dims or {})
        self.n_items = int(n_items)
        self._fingerprint = fingerprint
        self._reader = reader
        self.what = what

    def __repr__(self) -> str:
        return f"DiskSource({str(self.path)!r}, {self.n_items} items, {self.what})"

    def read(self, items: np.ndarray) -> dict[str, Any]:
        return self._reader(np.asarray(items, dtype=np.int64))

    def fingerprint(self) -> str:
        return self._fingerprint


# ---------------------------------------------------------------------------------------------
# Opening
# ---------------------------------------------------------------------------------------------


def open_source(path: str | Path, spec: Mapping[str, Any], data_plate: str,
                cache: str | Path | None = None) -> DiskSource:
    """The items of plate ``data_plate`` in the file ``path`` for a model with data ``spec``
    (the generated module's SPEC). ``cache``: where converted files go (default
    ``$CEMODEL_CACHE/streams``)."""
    path = Path(path)
    if not path.exists():
        raise CemDataError(f"data file '{path}' not found", hint=f"expected one of {_FORMATS}")
    if path.is_dir():
        raise CemDataError(f"data file '{path}' is a directory, expected a file ({_FORMATS})")
    if cache is None:
        from .compiler import cache_dir

        cache = cache_dir() / "streams"
    stat = path.stat()
    key = hashlib.sha256(f"{path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}".encode())
    fingerprint = key.hexdigest()
    store = Path(cache) / fingerprint[:32]
    name = path.name.lower()
    if name.startswith("docword") and (name.endswith(".txt") or name.endswith(".txt.gz")):
        what = "a UCI docword file"
        target = sparse_target(spec, path, what)
        return _csr_source(path, _converted(store, path, _convert_docword), target,
                           fingerprint, what, spec)
    suffix = path.suffix.lower()
    if suffix == ".mtx":
        what = "the MatrixMarket file"
        target = sparse_target(spec, path, what)
        return _csr_source(path, _converted(store, path, _convert_mtx), target, fingerprint,
                           what, spec)
    if suffix == ".npy":
        rows = _NpyFile(path, str(path))
        target = single_target(spec, path, "an .npy file")
        return DiskSource(path, rows.shape[0], fingerprint,
                          lambda items: {target: rows.rows(items)}, "an .npy array",
                          _fixed_sizes(spec, {target: rows}))
    if suffix == ".npz":
        return _npz_source(path, store, spec, data_plate, fingerprint)
    hint = ("convert a CSV file once with numpy.save(path, numpy.loadtxt(...))"
            if suffix == ".csv" else f"expected {_FORMATS}")
    raise CemDataError(f"data file '{path}': format '{suffix or path.name}' cannot be read "
                       "out of core", hint=hint)


def _categories(spec: Mapping[str, Any], name: str) -> str | None:
    """The size a variable's values index (observed categories, integer covariates)."""
    info = {**spec.get("observed", {}), **spec.get("covariates", {})}.get(name, {})
    return info.get("categories")


def _fixed_sizes(spec: Mapping[str, Any], files: Mapping[str, _NpyFile]) -> dict[str, int]:
    """The sizes the values of whole files show: the columns of a count matrix (a bag of
    categories as a 2-D array), else the largest index + 1 (a minibatch alone could miss the
    largest). They size only the dims the model and the user leave open (``ItemSource.sizes``);
    a file passing a fixed one is refused (``ItemSource.check_sizes``)."""
    dims: dict[str, int] = {}
    for name, f in files.items():
        dim = _categories(spec, name)
        if dim is None:
            continue
        if len(f.shape) == 2 and takes_count_matrix(spec, name):
            size = f.shape[1]
        else:
            size = f.largest() + 1
        dims[dim] = max(dims.get(dim, 0), size)
    return dims


def open_model_source(module: Any, data_plate: str | None, path: str | Path) -> DiskSource:
    """``open_source`` for a generated module, refused with the reason where its fit_svi
    cannot read items a minibatch at a time (its STREAMING)."""
    why = getattr(module, "STREAMING", "no: the model has no data plate to read in minibatches")
    if data_plate is None or not why.startswith("yes"):
        raise CemDataError(f"out-of-core data does not apply to this model: "
                           f"{why.removeprefix('no: ')}")
    return open_source(path, module.SPEC, data_plate)


def _csr_source(path: Path, store: Path, target: str, fingerprint: str, what: str,
                spec: Mapping[str, Any], shape: tuple[int, int] | None = None) -> DiskSource:
    n_rows, n_cols = shape or json.loads((store / "meta.json").read_text())["shape"]
    indptr = _NpyFile(store / "indptr.npy", str(path))
    indices = _NpyFile(store / "indices.npy", str(path))
    values = _NpyFile(store / "data.npy", str(path))

    def read(items: np.ndarray) -> dict[str, Any]:
        starts = indptr.rows(items)
        stops = indptr.rows(items + 1)
        cols = indices.ranges(starts, stops)
        vals = values.ranges(starts, stops)
        ptr = np.zeros(items.size + 1, dtype=np.int64)
        np.cumsum(stops - starts, out=ptr[1:])
        matrix = sparse.csr_array((np.concatenate(vals).astype(np.float64),
                                   np.concatenate(cols), ptr), shape=(items.size, n_cols))
        matrix.sum_duplicates()  # canonical rows, as the in-memory readers give
        return {target: matrix}

    dim = _categories(spec, target)
    return DiskSource(path, n_rows, fingerprint, read, f"a {n_rows} × {n_cols} sparse matrix",
                      {dim: n_cols} if dim is not None else {})


def _npz_source(path: Path, store: Path, spec: Mapping[str, Any], data_plate: str,
                fingerprint: str) -> DiskSource:
    if not zipfile.is_zipfile(path):
        raise CemDataError(f"data file '{path}': expected a NumPy .npz archive (a zip file from "
                           "numpy.savez), found a file that is not a zip archive")
    store = _converted(store, path, _convert_npz)
    names = json.loads((store / "meta.json").read_text())["members"]
    if {"format", "shape", "indptr", "indices", "data"} <= set(names):
        fmt = np.load(store / "format.npy").item()
        fmt = fmt.decode() if isinstance(fmt, bytes) else str(fmt)
        if fmt != "csr":
            raise CemDataError(f"data file '{path}': a sparse {fmt} matrix; out of core reads "
                               "rows, so expected CSR",
                               hint="scipy.sparse.save_npz(path, matrix.tocsr())")
        n_rows, n_cols = (int(v) for v in np.load(store / "shape.npy"))
        target = sparse_target(spec, path, "the sparse .npz file")
        return _csr_source(path, store, target, fingerprint, "the sparse .npz file", spec,
                           (n_rows, n_cols))
    tables = {**spec.get("observed", {}), **spec.get("covariates", {})}
    plates = spec.get("plates", {})
    per_item: dict[str, _NpyFile] = {}
    ragged: dict[str, tuple[_NpyFile, _NpyFile]] = {}
    constant: dict[str, np.ndarray] = {}
    for name in names:
        if name.endswith("_ptr"):
            continue
        info = tables.get(name) or _weights_info(plates, name)
        var_plates = list(info.get("plates", ())) if info else []
        if not var_plates or var_plates[0] != data_plate:
            constant[name] = np.load(store / f"{name}.npy", allow_pickle=False)
            continue
        inner = next((p for p in var_plates[1:] if plates[p].get("ragged")), None)
        if inner is not None:
            if f"{inner}_ptr" not in names:
                raise CemDataError(f"data file '{path}': '{name}' is in the ragged plate "
                                   f"{inner}, so expected it flat with offsets '{inner}_ptr'")
            ragged[name] = _flat(path, store, name, inner, plates[inner].get("parent"))
        else:
            per_item[name] = _NpyFile(store / f"{name}.npy", str(path))
    sizes = {f.shape[0] for f in per_item.values()} | {p.shape[0] - 1 for p, _ in ragged.values()}
    if not sizes:
        raise CemDataError(f"data file '{path}': no array has a row per element of the data "
                           f"plate {data_plate}; found {', '.join(names) or 'none'}")
    if len(sizes) > 1:
        found = ", ".join(f"{n}: {f.shape[0]}" for n, f in per_item.items())
        raise CemDataError(f"data file '{path}': the arrays of plate {data_plate} disagree on "
                           f"its size ({found})")

    def read(items: np.ndarray) -> dict[str, Any]:
        out: dict[str, Any] = dict(constant)
        for name, rows in per_item.items():
            out[name] = rows.rows(items)
        for name, (ptr, flat) in ragged.items():
            out[name] = flat.ranges(ptr.rows(items), ptr.rows(items + 1))
        return out

    fixed = _fixed_sizes(spec, {**per_item, **{n: flat for n, (_, flat) in ragged.items()}})
    return DiskSource(path, sizes.pop(), fingerprint, read, "arrays by name", fixed)


def _weights_info(plates: Mapping[str, Any], name: str) -> dict[str, Any] | None:
    """A ragged plate's weights 'p_weight' (the counts of a bag of words' ids) are read as
    its variables are; None for any other name."""
    plate = name.removesuffix("_weight")
    if name == plate or not plates.get(plate, {}).get("ragged"):
        return None
    return {"plates": (plates[plate]["parent"], plate)}


def _flat(path: Path, store: Path, name: str, plate: str,
          parent: str | None) -> tuple[_NpyFile, _NpyFile]:
    """The offsets 'plate_ptr' and the flat entries of ``name``, checked as in memory (the
    offsets are read whole once: one integer per item)."""
    key = f"{plate}_ptr"
    ptr = _NpyFile(store / f"{key}.npy", str(path))
    check_offsets(f"data file '{path}'", key, parent, np.load(ptr.path, allow_pickle=False))
    flat = _NpyFile(store / f"{name}.npy", str(path))
    check_flat(f"data file '{path}'", name, plate, int(ptr.rows(np.array([ptr.shape[0] - 1]))[0]),
               flat.shape)
    return ptr, flat


# ---------------------------------------------------------------------------------------------
# One-time conversion into .npy files
# ---------------------------------------------------------------------------------------------


def _converted(store: Path, path: Path, convert: Callable[[Path, Path], None]) -> Path:
    """``store``, converting ``path`` into it first if needed (atomically)."""
    if (store / "meta.json").exists():
        return store
    try:
        store.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=store.parent, prefix=f".{store.name}."))
    except OSError as exc:
        raise CemWriteError(store.parent, reason(exc), hint="--stream converts the data file "
                            "there once; set CEMODEL_CACHE to a writable directory") from None
    try:
        try:
            convert(path, tmp)
        except OSError as exc:
            if exc.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EROFS):
                raise
            raise CemWriteError(store, reason(exc)) from None
        try:
            tmp.rename(store)
        except OSError as exc:  # converted meanwhile by another process, or a full disk
            if not (store / "meta.json").exists():
                raise CemWriteError(store, reason(exc)) from None
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return store


def _open_text(path: Path):
    return gzip.open(path, "rb") if path.name.lower().endswith(".gz") else open(path, "rb")


def _blocks(handle, first_line: int, path: Path) -> Iterator[tuple[np.ndarray, int]]:
    """(entries, line number of the first) for blocks of whole lines of numbers."""
    line = first_line
    rest = b""
    while True:
        chunk = handle.read(_BLOCK)
        data = rest + chunk
        if not chunk:
            rest = b""
        else:
            cut = data.rfind(b"\n") + 1
            data, rest = data[:cut], data[cut:]
        if data.strip():
            try:
                table = np.loadtxt(io.BytesIO(data), dtype=np.float64, ndmin=2)
            except ValueError:
                text = enumerate(data.decode(errors="replace").split("\n"), line)
                raise CemDataError(f"data file '{path}': expected lines of numbers, "
                                   f"{first_bad(text, str.split)}") from None
            yield table, line
        line += data.count(b"\n")
        if not chunk:
            return


def _check_entries(path: Path, table: np.ndarray, line: int, shape: tuple[int, int],
                   labels: tuple[str, str], columns: int) -> None:
    if table.shape[1] != columns:
        raise CemDataError(f"data file '{path}': expected {columns} numbers per line, found "
                           f"{table.shape[1]} near line {line}")
    for axis, (top, label) in enumerate(zip(shape, labels, strict=True)):
        values = table[:, axis]
        bad = (values < 1) | (values > top) | (values != np.floor(values))
        if bad.any():
            at = int(np.flatnonzero(bad)[0])
            raise CemDataError(f"data file '{path}': expected {label} in [1, {top}] (1-based), "
                               f"found {values[at]:g} on line {line + at}")


def _write_csr(path: Path, out: Path, shape: tuple[int, int], nnz: int,
               entries: Callable[[], Iterator[tuple[np.ndarray, int]]],
               labels: tuple[str, str], columns: int) -> None:
    """Two passes over ``entries`` (1-based row, column, value blocks): counts per row, then
    every entry into its row's place."""
    n_rows, n_cols = shape
    counts = np.zeros(n_rows, dtype=np.int64)
    seen = 0
    for table, line in entries():
        _check_entries(path, table, line, shape, labels, columns)
        counts += np.bincount(table[:, 0].astype(np.int64) - 1, minlength=n_rows)
        seen += table.shape[0]
    if seen != nnz:
        raise CemDataError(f"data file '{path}': the header says {nnz} entries, found {seen}")
    indptr = np.zeros(n_rows + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    np.save(out / "indptr.npy", indptr)
    col_type = np.int32 if n_cols < 2**31 else np.int64
    indices = np.lib.format.open_memmap(out / "indices.npy", "w+", col_type, (nnz,))
    values = np.lib.format.open_memmap(out / "data.npy", "w+", np.float64, (nnz,))
    cursor = indptr[:-1].copy()
    for table, _ in entries():
        rows = table[:, 0].astype(np.int64) - 1
        order = np.argsort(rows, kind="stable")
        ranked = rows[order]
        first = np.r_[0, np.flatnonzero(np.diff(ranked)) + 1]
        group = np.repeat(first, np.diff(np.r_[first, ranked.size]))
        position = cursor[ranked] + np.arange(ranked.size) - group
        indices[position] = table[order, 1].astype(np.int64) - 1
        values[position] = table[order, 2] if table.shape[1] == 3 else 1.0
        cursor += np.bincount(rows, minlength=n_rows)
    indices.flush()
    values.flush()
    del indices, values
    (out / "meta.json").write_text(json.dumps({"shape": [n_rows, n_cols]}))


def _convert_docword(path: Path, out: Path) -> None:
    what = "a UCI docword file (three header lines D, W, NNZ, then 'docID wordID count' lines)"
    with _open_text(path) as f:
        head = [f.readline() for _ in range(3)]
    try:
        n_docs, n_words, nnz = (int(h.strip()) for h in head)
    except ValueError:
        raise CemDataError(f"data file '{path}': expected {what}; the first three lines are "
                           f"{[h.strip().decode(errors='replace') for h in head]}") from None
    check_docword_header(path, n_docs, n_words, nnz)

    def entries() -> Iterator[tuple[np.ndarray, int]]:
        with _open_text(path) as f:
            for _ in range(3):
                f.readline()
            for table, line in _blocks(f, 4, path):
                if (table[:, 2:] < 0).any():
                    at = int(np.flatnonzero(table[:, 2] < 0)[0])
                    raise CemDataError(f"data file '{path}': expected non-negative counts, "
                                       f"found {table[at, 2]:g} on line {line + at}")
                yield table, line

    _write_csr(path, out, (n_docs, n_words), nnz, entries, ("docID", "wordID"), 3)


def _convert_mtx(path: Path, out: Path) -> None:
    with _open_text(path) as f:
        banner = f.readline().decode(errors="replace").split()
        line = 1
        if len(banner) < 5 or banner[0].lower() != "%%matrixmarket":
            raise CemDataError(f"data file '{path}': expected a MatrixMarket file starting "
                               "with '%%MatrixMarket matrix coordinate ...'")
        layout, field, symmetry = (b.lower() for b in banner[2:5])
        if layout != "coordinate" or symmetry != "general" or field == "complex":
            raise CemDataError(f"data file '{path}': a {layout} {field} {symmetry} "
                               "MatrixMarket matrix; out of core reads a coordinate "
                               "(sparse) general matrix of real, integer or pattern values")
        size = f.readline()
        line += 1
        while size.lstrip().startswith(b"%") or not size.strip():
            size = f.readline()
            line += 1
        try:
            n_rows, n_cols, nnz = (int(v) for v in size.split())
        except ValueError:
            raise CemDataError(f"data file '{path}': expected 'rows columns entries' on line "
                               f"{line}, found {size.strip().decode(errors='replace')!r}"
                               ) from None
    check_sparse_size(path, n_rows, nnz, "{} rows",
                      f"line {line} gives rows, columns and entries: check them")
    first = line + 1

    def entries() -> Iterator[tuple[np.ndarray, int]]:
        with _open_text(path) as f:
            for _ in range(first - 1):
                f.readline()
            yield from _blocks(f, first, path)

    _write_csr(path, out, (n_rows, n_cols), nnz, entries, ("row", "column"),
               2 if field == "pattern" else 3)


def _convert_npz(path: Path, out: Path) -> None:
    """Every member of the archive into its own .npy file, copied in blocks."""
    names = []
    try:
        with zipfile.ZipFile(path) as archive:
            for member in archive.namelist():
                if not member.endswith(".npy"):
                    continue
                name = member[:-4]
                with archive.open(member) as f, open(out / f"{name}.npy", "wb") as g:
                    shape, fortran, dtype = _read_npy_header(f)
                    if dtype.hasobject:
                        raise CemDataError(f"data file '{path}': '{name}' holds Python "
                                           "objects, expected numeric arrays")
                    if fortran and len(shape) > 1:
                        raise CemDataError(f"data file '{path}': '{name}' is in Fortran order; "
                                           "expected C order",
                                           hint="save numpy.ascontiguousarray(array)")
                    header = {"descr": np.lib.format.dtype_to_descr(dtype),
                              "fortran_order": False, "shape": shape}
                    np.lib.format.write_array_header_2_0(g, header)
                    shutil.copyfileobj(f, g, _BLOCK)
                names.append(name)
    except CemDataError:
        raise
    except (OSError, ValueError, zipfile.BadZipFile) as exc:
        raise CemDataError(f"data file '{path}': could not read it as a NumPy .npz archive "
                           f"({exc})") from None
    if not names:
        raise CemDataError(f"data file '{path}': the archive is empty, expected arrays")
    (out / "meta.json").write_text(json.dumps({"members": names}))
