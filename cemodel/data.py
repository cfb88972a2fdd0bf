"""Reading data files for the command line.

:func:`load_data` turns a file into the mapping :func:`cemodel.runtime.binding.bind_data`
takes; it reads and names arrays, and leaves every check of the values to the binding. Formats:

* ``.npz``: one array per variable name (``numpy.savez``), or a sparse matrix saved with
  ``scipy.sparse.save_npz`` for the model's bag-of-words variable; a ragged plate ``p`` may be
  stored flat with its offsets under ``p_ptr`` (a bag of words' ids with their counts under
  ``p_weight``);
* ``.npy``, ``.csv``: a single array, for a model with one observed variable and no covariates;
* ``.mtx`` (MatrixMarket) and UCI ``docword*.txt`` (optionally ``.gz``): a sparse document ×
  word count matrix.
"""

from __future__ import annotations

import gzip
import itertools
import zipfile
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import scipy.io
from scipy import sparse

from .errors import CemDataError
from .runtime.flat import split_ragged
from .runtime.memory import describe_bytes, physical_memory

__all__ = ["describe_binding", "load_data", "single_target", "sparse_target"]

_FORMATS = ".npz, .npy, .csv, .mtx or a UCI docword*.txt file"


# ---------------------------------------------------------------------------------------------
# What the model wants
# ---------------------------------------------------------------------------------------------


def _names(spec: Mapping[str, Any]) -> list[str]:
    return list(spec.get("observed", {})) + list(spec.get("covariates", {}))


def _bag_of_words(spec: Mapping[str, Any]) -> str | None:
    """The observed categorical variable that alone fills a ragged plate, if there is one."""
    plates = spec.get("plates", {})
    covariates = spec.get("covariates", {})
    observed = spec.get("observed", {})
    found = []
    for name, info in observed.items():
        var_plates = list(info.get("plates", ()))
        if len(var_plates) != 2 or not plates[var_plates[1]].get("ragged"):
            continue
        if info.get("support") != "category" or info.get("shape"):
            continue
        ragged = var_plates[1]
        others = [n for n, i in {**observed, **covariates}.items()
                  if n != name and ragged in i.get("plates", ())]
        if not others:
            found.append(name)
    return found[0] if len(found) == 1 else None


def _single(spec: Mapping[str, Any], path: Path, what: str) -> str:
    """The one variable a single-array file can hold."""
    observed = list(spec.get("observed", {}))
    covariates = list(spec.get("covariates", {}))
    if len(observed) == 1 and not covariates:
        return observed[0]
    names = ", ".join(_names(spec))
    raise CemDataError(
        f"data file '{path}': {what} holds a single array, but the model expects several named "
        f"arrays ({names})",
        hint="save them by name in an .npz file: numpy.savez(path, "
        + ", ".join(f"{n}=..." for n in _names(spec)) + ")",
    )


def _for_sparse(spec: Mapping[str, Any], path: Path, matrix: object, what: str) -> dict:
    """A sparse count matrix goes to the bag-of-words variable (or the only variable)."""
    name = _bag_of_words(spec)
    if name is not None:
        return {name: matrix}
    observed = list(spec.get("observed", {}))
    if len(observed) == 1 and not spec.get("covariates"):
        return {observed[0]: matrix}
    raise CemDataError(
        f"data file '{path}': {what} holds one sparse matrix, but the model has no single "
        f"bag-of-words variable (a categorical observed alone in a ragged plate) to give it to; "
        f"it expects {', '.join(_names(spec))}",
        hint="save the arrays by name in an .npz file with numpy.savez",
    )


def single_target(spec: Mapping[str, Any], path: Path, what: str) -> str:
    """The variable a file of a single array (``what``) fills, or an error saying why none."""
    return _single(spec, path, what)


def sparse_target(spec: Mapping[str, Any], path: Path, what: str) -> str:
    """The variable a sparse count matrix (``what``) fills, or an error saying why none."""
    return next(iter(_for_sparse(spec, path, None, what)))


# ---------------------------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------------------------


def load_data(path: str | Path, spec: Mapping[str, Any]) -> dict[str, object]:
    """Read a data file into ``{name: array or sparse matrix}`` for ``bind_data``."""
    path = Path(path)
    if not path.exists():
        raise CemDataError(f"data file '{path}' not found", hint=f"expected one of {_FORMATS}")
    if path.is_dir():
        raise CemDataError(f"data file '{path}' is a directory, expected a file ({_FORMATS})")
    name = path.name.lower()
    if name.startswith("docword") and (name.endswith(".txt") or name.endswith(".txt.gz")):
        return _for_sparse(spec, path, _read_docword(path), "a UCI docword file")
    suffix = path.suffix.lower()
    readers = {".npz": _load_npz, ".npy": _load_npy, ".csv": _load_csv, ".mtx": _load_mtx}
    if suffix not in readers:
        raise CemDataError(
            f"data file '{path}': unsupported format '{suffix or path.name}'",
            hint=f"expected {_FORMATS}",
        )
    return readers[suffix](path, spec)


def _unreadable(path: Path, what: str, exc: BaseException) -> CemDataError:
    reason = "its header is damaged" if isinstance(exc, SyntaxError) else str(exc)
    reason = reason or type(exc).__name__
    return CemDataError(f"data file '{path}': could not read it as {what} ({reason})")


def _load_npz(path: Path, spec: Mapping[str, Any]) -> dict[str, object]:
    what = "a NumPy .npz archive"
    if not zipfile.is_zipfile(path):
        raise CemDataError(
            f"data file '{path}': expected {what} (a zip file from numpy.savez), found a file "
            "that is not a zip archive"
        )
    try:
        with np.load(path, allow_pickle=False) as archive:
            keys = set(archive.files)
            if {"format", "shape"} <= keys and archive["format"].dtype.kind in "SU":
                matrix = sparse.load_npz(path)
                return _for_sparse(spec, path, matrix, "the sparse .npz file")
            arrays = {key: archive[key] for key in archive.files}
    except CemDataError:
        raise
    except ValueError as exc:
        if "pickle" in str(exc):
            raise CemDataError(
                f"data file '{path}': holds Python objects, expected numeric arrays",
                hint="save plain numeric arrays with numpy.savez" + _ragged_hint(spec),
            ) from None
        raise _unreadable(path, what, exc) from None
    except Exception as exc:  # a damaged archive fails in many ways (zip, zlib, header)
        raise _unreadable(path, what, exc) from None
    if not arrays:
        raise CemDataError(
            f"data file '{path}': the archive is empty, expected arrays named "
            f"{', '.join(_names(spec))}"
        )
    return split_ragged(spec, f"data file '{path}'", arrays)


def _ragged_hint(spec: Mapping[str, Any]) -> str:
    """How a file holds a ragged plate (rows of different lengths: an object array cannot be
    read): its variables flat, one row after another, and the rows' offsets."""
    ragged = [p for p, info in spec.get("plates", {}).items() if info.get("ragged")]
    if not ragged:
        return ""
    p = ragged[0]
    tables = {**spec.get("observed", {}), **spec.get("covariates", {})}
    name = next((n for n, info in tables.items() if p in info.get("plates", ())), "x")
    return (f"; the rows of ragged plate '{p}' go flat, one after another, with their offsets "
            f"as '{p}_ptr' (np.savez(path, {name}=np.concatenate(rows), "
            f"{p}_ptr=np.r_[0, np.cumsum([len(r) for r in rows])]))")


def _load_npy(path: Path, spec: Mapping[str, Any]) -> dict[str, object]:
    name = _single(spec, path, "an .npy file")
    what = "a NumPy .npy array"
    try:
        with open(path, "rb") as f:
            magic = f.read(6)
        if magic != b"\x93NUMPY":
            raise CemDataError(
                f"data file '{path}': expected {what} (from numpy.save), found a file without "
                "the .npy header"
            )
        array = np.load(path, allow_pickle=False)
    except CemDataError:
        raise
    except ValueError as exc:
        if "pickle" in str(exc):
            ragged = _ragged_hint(spec)
            raise CemDataError(
                f"data file '{path}': holds Python objects, expected a numeric array",
                hint=("rows of different lengths go in an .npz" + ragged) if ragged else None,
            ) from None
        raise _unreadable(path, what, exc) from None
    except Exception as exc:  # truncated or damaged file
        raise _unreadable(path, what, exc) from None
    return {name: array}


def _is_number(field: str) -> bool:
    try:
        float(field)
    except ValueError:
        return False
    return True


# fields that mark a missing value in other tools' files: data (an error here, with its
# line), never a header's name
_MISSING_MARKERS = {"na", "n/a", "nan", "null", "none", "missing", "?", "-"}


def _is_name(field: str) -> bool:
    """A header's field: a name (a letter or '_' first, quotes aside), not a number, an empty
    field, a missing marker or numbers separated by something else than commas."""
    name = field.strip().strip("\"'")
    return (bool(name) and (name[0].isalpha() or name[0] == "_") and not _is_number(name)
            and name.lower() not in _MISSING_MARKERS)


def first_bad(lines: Iterable[tuple[int, str]], split: Callable[[str], list[str]]) -> str:
    """Where ``lines`` ((line number, text) pairs) stop being a table of numbers: the first
    field that is not a number, or the first line with another number of fields."""
    width, first = 0, 0
    for number, line in lines:
        text = line.split("#", 1)[0]  # as numpy.loadtxt, '#' starts a comment
        if not text.strip():
            continue
        fields = split(text)
        for column, field in enumerate(fields, 1):
            if not _is_number(field):
                shown = repr(field.strip()) if field.strip() else "an empty field"
                return f"found {shown} on line {number}, column {column}"
        if not width:
            width, first = len(fields), number
        elif len(fields) != width:
            return f"found {len(fields)} fields on line {number} but {width} on line {first}"
    return "found a value numpy could not read"


def _csv_hint(found: str, first: bool) -> str:
    """What to do about ``found`` (``first_bad``'s), ``first``: on the file's first line."""
    field = found.removeprefix("found ").split(" on line")[0].strip("'")
    if "\\t" in field or ";" in field:
        return "fields are separated by commas; this file seems to use tabs or ';'"
    if field.lower() in _MISSING_MARKERS:
        return "a missing value is written nan (the README's Data section: missing values)"
    if first and "empty field" not in found:
        return ("line 1 is read as data, not as a header: a header's fields are all names "
                "(a letter first), none empty, a number or a missing marker like NA")
    return "every row needs the same number of numeric fields; no empty fields"


def _load_csv(path: Path, spec: Mapping[str, Any]) -> dict[str, object]:
    name = _single(spec, path, "a .csv file")
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise _unreadable(path, "a CSV text file", exc) from None
    lines = [(n, line.rstrip("\r")) for n, line in enumerate(text.split("\n"), 1)
             if line.strip()]
    if not lines:
        raise CemDataError(f"data file '{path}': the CSV file is empty, expected numbers")
    # line 1 is a header only when every field is a name: a row of numbers with an empty
    # field or a missing marker is data (and refused as such), never dropped
    header = lines[0] if all(_is_name(f) for f in lines[0][1].split(",")) else None
    body = lines[1:] if header else lines
    if header:
        taken = f"line {header[0]} ({header[1].strip()!r}) was taken as a header of names"
    if not body:
        raise CemDataError(f"data file '{path}': {taken}, and no rows of numbers follow")
    try:
        array = np.loadtxt([line for _, line in body], delimiter=",", dtype=np.float64,
                           ndmin=2)
    except ValueError:
        found = first_bad(body, lambda line: line.split(","))
        raise CemDataError(
            f"data file '{path}': expected a table of numbers separated by commas, {found}",
            hint=_csv_hint(found, f" on line {lines[0][0]}," in found)
        ) from None
    if header and len(header[1].split(",")) != array.shape[1]:
        raise CemDataError(
            f"data file '{path}': {taken}, {len(header[1].split(','))} of them, but the rows "
            f"have {array.shape[1]} numbers",
            hint="give one name per column, or no header")
    if array.shape[1] == 1:
        array = array[:, 0]
    return {name: array}


def _load_mtx(path: Path, spec: Mapping[str, Any]) -> dict[str, object]:
    try:
        n_rows, n_cols, nnz, layout, *_ = scipy.io.mminfo(path)
        dense = layout != "coordinate"  # a dense matrix: every value, counted as a row
        check_sparse_size(path, n_rows * n_cols if dense else n_rows, nnz,
                          "{} values" if dense else "{} rows",
                          "the size line gives rows, columns (and entries): check them")
        matrix = scipy.io.mmread(path)
    except CemDataError:
        raise
    except Exception as exc:  # scipy's reader raises many types for a malformed file
        raise _unreadable(path, "a MatrixMarket .mtx file", exc) from None
    if sparse.issparse(matrix):
        matrix = sparse.csr_array(matrix)
        return _for_sparse(spec, path, matrix, "the MatrixMarket file")
    return {_single(spec, path, "a dense MatrixMarket file"): np.asarray(matrix)}


# Reading a sparse count matrix keeps about ROW_ARRAYS arrays of one number per row (the CSR
# offsets and the binder's copies of them, each row's length, the items' weights and seeds)
# and ENTRY_BYTES per entry (the table read, the CSR indices and values, the binder's ids and
# weights): from the header, what the reading would need before it needs it.
ROW_ARRAYS, ENTRY_BYTES = 10, 64


def check_docword_header(path: Path, n_docs: int, n_words: int, nnz: int) -> None:
    """Refuse a UCI docword header before reading on: D or W below 1, no entries (nothing to
    fit), or more documents and entries than the machine's memory can hold."""
    if n_docs < 1 or n_words < 1:
        raise CemDataError(
            f"data file '{path}': expected D >= 1 and W >= 1 in the header, found D={n_docs}, "
            f"W={n_words}"
        )
    if nnz < 1:
        raise CemDataError(f"data file '{path}': the header says NNZ={nnz}: no word counts, "
                           "nothing to fit", hint="expected NNZ >= 1 'docID wordID count' lines")
    check_sparse_size(path, n_docs, nnz, "D={} documents",
                      "the header's first three lines are D, W and NNZ: check them")


def check_sparse_size(path: Path, n_rows: int, nnz: int, rows: str, hint: str) -> None:
    """Refuse a sparse matrix file whose header declares more rows (``rows``: how to say their
    number, ``D={} documents``) and entries than the machine's memory can read."""
    row_bytes, entry_bytes = 8 * (n_rows + 1) * ROW_ARRAYS, ENTRY_BYTES * max(nnz, 0)
    limit = physical_memory()
    if limit is not None and row_bytes + entry_bytes > limit:
        what = rows.format(f"{n_rows:,}") if row_bytes >= entry_bytes else f"{nnz:,} entries"
        raise CemDataError(
            f"data file '{path}': the header declares {what}; reading it would need about "
            f"{describe_bytes(row_bytes + entry_bytes)}, more than this machine's memory "
            f"({describe_bytes(limit)})", hint=hint)


def _read_docword(path: Path) -> sparse.csr_array:
    """A UCI bag-of-words file: D, W, NNZ, then 1-based ``doc word count`` lines."""
    what = "a UCI docword file (three header lines D, W, NNZ, then 'docID wordID count' lines)"
    opener = gzip.open if path.name.lower().endswith(".gz") else open
    try:
        with opener(path, "rt", encoding="ascii") as f:
            head = [f.readline() for _ in range(3)]
            try:
                n_docs, n_words, nnz = (int(h.strip()) for h in head)
            except ValueError:
                raise CemDataError(
                    f"data file '{path}': expected {what}; the first three lines are "
                    f"{[h.strip() for h in head]}"
                ) from None
            check_docword_header(path, n_docs, n_words, nnz)
            first, start = next(((line, n) for n, line in enumerate(f, 4) if line.strip()),
                                (None, 0))
            if first is None:  # numpy would warn and read nothing
                raise CemDataError(f"data file '{path}': the header says NNZ={nnz} entries, "
                                   "found none: the file holds only its header")
            table = np.loadtxt(itertools.chain([first], f), dtype=np.float64, ndmin=2)
    except CemDataError:
        raise
    except ValueError as exc:
        raise _docword_error(path, opener, exc) from None
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        raise _unreadable(path, what, exc) from None
    if table.shape[1] != 3:
        raise CemDataError(
            f"data file '{path}': expected 3 numbers per line (docID wordID count), found "
            f"{table.shape[1]}"
        )
    if table.shape[0] != nnz:
        raise CemDataError(
            f"data file '{path}': the header says NNZ={nnz} entries, found {table.shape[0]}"
        )
    with np.errstate(invalid="ignore"):
        fraction = ~np.isfinite(table) | (table != np.floor(table))
    if fraction.any():
        row, column = (int(i) for i in np.argwhere(fraction)[0])
        raise CemDataError(
            f"data file '{path}': expected whole numbers (docID wordID count), found "
            f"{table[row, column]:g} on line {start + row}, column {column + 1}")
    docs, words, counts = table[:, 0], table[:, 1], table[:, 2]  # whole numbers, as floats
    for values, top, label in ((docs, n_docs, "docID"), (words, n_words, "wordID")):
        bad = (values < 1) | (values > top)
        if bad.any():
            line = int(np.flatnonzero(bad)[0])
            raise CemDataError(
                f"data file '{path}': expected {label} in [1, {top}] (1-based), found "
                f"{int(values[line])} on line {start + line}"
            )
    if (counts < 0).any():
        line = int(np.flatnonzero(counts < 0)[0])
        raise CemDataError(
            f"data file '{path}': expected non-negative counts, found {int(counts[line])} on "
            f"line {start + line}"
        )
    matrix = sparse.csr_array(
        (counts, (docs.astype(np.int64) - 1, words.astype(np.int64) - 1)),
        shape=(n_docs, n_words)
    )
    matrix.sum_duplicates()
    return matrix


def _docword_error(path: Path, opener: Callable[..., Any], exc: ValueError) -> CemDataError:
    """The line and column of what numpy could not read in a docword file's entries (read
    again, line by line: only on the way to an error)."""
    what = "a UCI docword file (three header lines D, W, NNZ, then 'docID wordID count' lines)"
    try:
        with opener(path, "rt", encoding="ascii") as f:
            found = first_bad(itertools.islice(enumerate(f, 1), 3, None), str.split)
    except (OSError, EOFError, UnicodeDecodeError) as again:
        return _unreadable(path, what, again)
    if found.endswith("could not read"):
        return _unreadable(path, what, exc)
    return CemDataError(f"data file '{path}': expected lines of numbers 'docID wordID count', "
                        f"{found}")


# ---------------------------------------------------------------------------------------------
# Documentation
# ---------------------------------------------------------------------------------------------

_SUPPORT_WORDS = {
    "real": "real numbers",
    "positive": "positive numbers",
    "unit": "numbers strictly between 0 and 1",
    "binary": "0/1 values",
    "count": "non-negative whole counts",
    "trials": "numbers of trials (whole numbers ≥ 1)",
    "vector": "real vectors",
    "spd": "symmetric positive-definite matrices",
    "simplex": "probability vectors (non-negative, summing to 1)",
    "int": "whole numbers",
}


def _dim_text(spec: Mapping[str, Any], plate: str) -> str:
    return str(spec["plates"][plate]["dim"])


def describe_binding(spec: Mapping[str, Any]) -> str:
    """A paragraph per observed variable and covariate: what array the model expects."""
    plates = spec.get("plates", {})
    bow = _bag_of_words(spec)
    paragraphs = []
    entries = [(n, i, "observed") for n, i in spec.get("observed", {}).items()]
    entries += [(n, i, "covariate") for n, i in spec.get("covariates", {}).items()]
    for name, info, role in entries:
        var_plates = list(info.get("plates", ()))
        event = [str(e) for e in info.get("shape", ())]
        if role == "observed":
            support = info["support"]
            if support == "category":
                words = f"category ids in [0, {info.get('categories')})"
            else:
                words = _SUPPORT_WORDS.get(support, support)
        else:
            kind = info["kind"]
            words = _SUPPORT_WORDS.get(kind, kind)
            if info.get("nonnegative"):
                words += ", ≥ 0: the model takes their log"
        ragged = next((p for p in var_plates if plates[p].get("ragged")), None)
        head = f"{name} ({role}, {words}):"
        if name == bow:
            parent = var_plates[0]
            n_parent = _dim_text(spec, parent)
            cats = info.get("categories")
            text = (
                f"{head} a bag of categories, one group per element of {parent}. Give a sparse "
                f"({n_parent} × {cats}) count matrix (scipy.sparse; in a file: .npz from "
                f"scipy.sparse.save_npz, .mtx, or UCI docword*.txt), a dense ({n_parent} × "
                f"{cats}) array of counts, or a list of {n_parent} integer arrays of ids, "
                f"optionally with each id's count in '{var_plates[1]}_weight' (arrays of the "
                f"same lengths; in an .npz file both flat, with the offsets in "
                f"'{var_plates[1]}_ptr')."
            )
        elif ragged is not None:
            parent = var_plates[0]
            inner = [_dim_text(spec, ragged) + "_d"]
            inner += [_dim_text(spec, p) for p in var_plates[2:]] + event
            text = (
                f"{head} a list with one array of shape ({', '.join(inner)}"
                f"{',' if len(inner) == 1 else ''}) per element d of "
                f"{parent} (plate {ragged} is ragged; every variable in it must have the same "
                f"lengths). In an .npz file, store it flat along the first axis with the "
                f"offsets in '{ragged}_ptr'."
            )
        else:
            axes = [_dim_text(spec, p) for p in var_plates] + event
            shape = f"an array of shape ({', '.join(axes)}{',' if len(axes) == 1 else ''})"
            if not axes:
                shape = "a single number"
            text = f"{head} {shape}"
            if var_plates:
                text += f", indexed by plate{'s' if len(var_plates) > 1 else ''} " + ", ".join(
                    var_plates
                )
            text += "."
        paragraphs.append(text)
    if not paragraphs:
        return "The model takes no data."
    return "\n\n".join(paragraphs)
