"""Ragged data stored flat: a ragged plate ``p``'s variables as one array each, with the
offsets ``p_ptr`` (item d's entries are ``flat[ptr[d]:ptr[d + 1]]``), as an .npz file holds
them and as a dict given to ``fit`` may. ``where`` names the source in every message
("data file 'corpus.npz'", or "data" for a dict)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ..errors import CemDataError


def split_ragged(spec: Mapping[str, Any], where: str, arrays: Mapping[str, Any]
                 ) -> dict[str, object]:
    """Variables of a ragged plate ``p`` stored flat with offsets ``p_ptr`` -> lists (and the
    counts of a bag of words' ids, ``p_weight``, which the binding reads)."""
    plates = spec.get("plates", {})
    tables = {**spec.get("observed", {}), **spec.get("covariates", {})}
    out = dict(arrays)
    for plate, info in plates.items():
        key = f"{plate}_ptr"
        if not info.get("ragged") or key not in out:
            continue
        ptr = np.asarray(out.pop(key))
        check_offsets(where, key, info.get("parent"), ptr)
        # the plate's variables, and the counts of a bag of words' ids ('p_weight')
        names = [n for n, var in tables.items() if plate in var.get("plates", ())]
        for name in [*names, f"{plate}_weight"]:
            if name not in out:
                continue
            flat = np.asarray(out[name])
            check_flat(where, name, plate, int(ptr[-1]), flat.shape)
            out[name] = [flat[ptr[d]:ptr[d + 1]] for d in range(ptr.size - 1)]
    return out


def check_offsets(where: str, key: str, parent: str | None, ptr: np.ndarray) -> None:
    """Refuse the offsets ``key`` ('p_ptr') of a ragged plate stored flat unless they are
    non-decreasing integers from 0, one more than the elements of ``parent``."""
    found = None
    if ptr.ndim != 1 or ptr.size < 1 or ptr.dtype.kind not in "iu":
        found = f"a {ptr.dtype} array of shape {ptr.shape}"
    elif ptr[0] != 0:
        found = f"offsets starting at {int(ptr[0])}"
    elif np.any(np.diff(ptr) < 0):
        at = int(np.flatnonzero(np.diff(ptr) < 0)[0])
        found = f"{int(ptr[at])} then {int(ptr[at + 1])} at positions {at} and {at + 1}"
    if found is not None:
        raise CemDataError(
            f"{where}: '{key}' must be non-decreasing integer offsets starting "
            f"at 0 (one more than the elements of {parent}), found {found}"
        )


def check_flat(where: str, name: str, plate: str, entries: int,
               shape: tuple[int, ...]) -> None:
    """Refuse ``name`` stored flat for ragged plate ``plate`` unless it has the ``entries``
    its offsets ('p_ptr') end at."""
    if len(shape) < 1 or shape[0] != entries:
        raise CemDataError(
            f"{where}: '{name}' is stored flat for plate {plate}, so expected "
            f"{entries} entries (the last value of '{plate}_ptr'), found shape "
            f"{tuple(shape)}"
        )
