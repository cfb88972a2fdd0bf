"""Reading result files (``cemodel summarize``, ``cemodel plot`` and ``plot --data``): a
file that is empty, cut short, not an ``.npz``, or an archive of arrays no fit writes is an
error naming the file and what is wrong, before any figure or report reads it.
"""

from __future__ import annotations

import zipfile
import zlib
from pathlib import Path

import numpy as np

from .errors import CemError

# what reading a damaged archive raises: a cut or changed byte (a CRC or header error, an
# unknown compression method), arrays of Python objects (ValueError with allow_pickle=False)
_UNREADABLE = (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error,
               NotImplementedError, OverflowError, KeyError)

# each parameter's event rank by family: the axes of one draw (an MVN mean's D, a Wishart
# scale's D × D); the other, leading axes are the plate's, the same for every parameter
EVENT_RANKS = {
    "Dirichlet": {"alpha": 1}, "Categorical": {"probs": 1}, "Beta": {"a": 0, "b": 0},
    "Gamma": {"shape": 0, "rate": 0}, "Normal": {"mean": 0, "precision": 0},
    "MultivariateNormal": {"mean": 1, "precision": 2}, "Wishart": {"dof": 0, "scale": 2},
    "Bernoulli": {"p": 0}, "Normal-Gamma": {"beta": 0, "mean": 0, "rate": 0, "shape": 0},
    "Normal-Wishart": {"beta": 0, "dof": 0, "mean": 1, "scale": 2},
}

# the parameters a report needs of each family (a joint block's member has its mean only)
REQUIRED = {"Beta": ("a", "b"), "Gamma": ("shape", "rate"), "Wishart": ("dof", "scale"),
            "Dirichlet": ("alpha",), "Categorical": ("probs",), "Bernoulli": ("p",)}

POSTERIOR_HINT = "give the .npz written by 'cemodel fit ... -o FILE.npz'"


def read_npz(path: str | Path, what: str, hint: str | None = None) -> dict[str, np.ndarray]:
    """The named arrays of the ``.npz`` file ``path`` (``what``: "posterior", "data file"),
    in file order; a file that is not one is a CemError naming it and the reason."""
    path = Path(path)
    try:
        size = path.stat().st_size
        if path.is_dir():
            raise CemError(f"cannot read {what} {path}: it is a directory")
        if size == 0:
            raise CemError(f"cannot read {what} {path}: the file is empty")
        if not zipfile.is_zipfile(path):
            with open(path, "rb") as handle:
                npy = handle.read(6) == b"\x93NUMPY"
            raise CemError(f"cannot read {what} {path}: " + (
                "it holds one array (.npy), not the named arrays of an .npz" if npy else
                "it is not an .npz archive (or it is cut short)"), hint=hint)
        with open(path, "rb") as handle, np.load(handle, allow_pickle=False) as npz:
            arrays = {k: np.asarray(npz[k]) for k in npz.files}
    except FileNotFoundError:
        raise CemError(f"no such {what} file: {path}") from None
    except _UNREADABLE as exc:
        raise CemError(f"cannot read {what} {path}: it is damaged ({exc})", hint=hint
                       ) from None
    return arrays


def check_numbers(path: Path, name: str, array: np.ndarray) -> None:
    """Refuse an array that holds no real numbers (strings, complex numbers, records)."""
    if array.dtype.kind not in "biuf":
        raise CemError(f"{path}: '{name}' holds {array.dtype} values, expected real numbers",
                       hint=POSTERIOR_HINT)


def check_params(path: Path, name: str, family: str, params: dict[str, np.ndarray]) -> None:
    """The parameters of variable ``name`` are those of ``family``, with one plate shape and
    matching event axes (a damaged or edited posterior has arrays that do not fit)."""
    ranks = EVENT_RANKS.get(family)
    if ranks is None:
        return
    missing = sorted(set(REQUIRED.get(family, ("mean",))) - set(params))
    if missing:
        raise CemError(f"{path}: variable '{name}' ({family}) has no "
                       f"{', '.join(f'{name}.{p}' for p in missing)} array",
                       hint="is --model the model that was fitted?")
    shapes = {p: params[p].shape for p in ranks if p in params}
    plates = {shape[:len(shape) - ranks[p]] for p, shape in shapes.items()
              if len(shape) >= ranks[p]}
    events = [shape[len(shape) - ranks[p]:] for p, shape in shapes.items()]
    sizes = {size for event in events for size in event}
    square = all(len(set(event)) <= 1 for event in events)
    if len(plates) != 1 or any(len(s) < ranks[p] for p, s in shapes.items()) or (
            family != "Dirichlet" and family != "Categorical" and (len(sizes) > 1
                                                                   or not square)):
        found = ", ".join(f"{name}.{p} {shape}" for p, shape in shapes.items())
        raise CemError(f"{path}: the arrays of variable '{name}' ({family}) do not fit "
                       f"together: {found}")
    if any(0 in shape for shape in shapes.values()):
        raise CemError(f"{path}: variable '{name}' ({family}) has an empty array")
