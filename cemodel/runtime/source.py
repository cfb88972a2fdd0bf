"""Items read from somewhere else than memory: what an out-of-core ``fit_svi`` asks of its data.

A generated ``fit_svi`` given an :class:`ItemSource` instead of a dict binds one minibatch at a
time (``_bind_items``): the source hands over the data of the items asked for, in the order
asked, and nothing else is held. ``cemodel.streaming`` has the sources for files on disk.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import numpy as np

from ..errors import CemDataError
from .binding import bind_data


class ItemSource:
    """The items of a data plate, ``n_items`` of them, read on demand.

    Subclasses implement :meth:`read` and :meth:`fingerprint` and set ``n_items``.
    """

    n_items: int = 0
    # sizes the whole data set shows and one minibatch may not (the largest category or index
    # of any item + 1, the columns of a count matrix): they size only the dims that the model
    # (a default) and the user leave open, as the in-memory binding's largest id does
    dims: dict[str, int] = {}

    def read(self, items: np.ndarray) -> dict[str, Any]:
        """The data of ``items`` (indices into the plate), in that order, as the dict a
        generated ``fit`` takes: item ``i`` of the result is item ``items[i]``."""
        raise NotImplementedError

    def fingerprint(self) -> str:
        """Changes when the data change (checkpoints refuse other data)."""
        raise NotImplementedError

    def sizes(self, dims: dict[str, int] | None, spec: Mapping[str, Any],
              item_dims: tuple[str, ...]) -> dict[str, int]:
        """The sizes to bind minibatches with: ``dims`` (the user's), and the source's for the
        dims that neither they nor the model's defaults (its ``spec``) fix, as in memory the
        data size only those; without those of the items (``item_dims``, the data plate's
        first), which vary by minibatch."""
        dims = dict(dims or {})
        if item_dims and item_dims[0] in dims and int(dims[item_dims[0]]) != self.n_items:
            raise CemDataError(f"dims: {item_dims[0]}={dims[item_dims[0]]} given, but the data "
                               f"on disk have {self.n_items} items")
        fixed = _fixed(spec, dims)
        merged = {**{k: v for k, v in self.dims.items() if k not in fixed}, **dims}
        return {k: v for k, v in merged.items() if k not in item_dims}

    def check_sizes(self, spec: Mapping[str, Any], plate: str, sizes: dict[str, int],
                    chunk: int) -> None:
        """Refuse, before the fit, data whose values pass a size the model or the user fixes
        (an id 7 with the model's ``dim K = 6``): the in-memory binding's error, from the first
        chunk of items that shows it (a minibatch alone may not)."""
        fixed = _fixed(spec, sizes)
        over = {k: v for k, v in self.dims.items() if k in fixed and v > fixed[k]}
        if not over:
            return
        for items in self.chunks(chunk):
            with places_in_data(plate, items):
                bind_data(spec, self.read(items), sizes, missing=True)
        name, size = next(iter(over.items()))  # every chunk bound: a size no item shows
        raise CemDataError(f"dimension '{name}' is {fixed[name]}, but the data on disk need "
                           f"{size} (their largest category id + 1)")

    def chunks(self, size: int) -> Iterator[np.ndarray]:
        """Consecutive runs of at most ``size`` items covering the plate once, in order."""
        size = max(1, int(size))
        for begin in range(0, self.n_items, size):
            yield np.arange(begin, min(begin + size, self.n_items))

    def start_items(self, size: int | None, seed: int) -> np.ndarray:
        """The items a fit starts from (k-means++ seeds are drawn among them): a random
        minibatch, in increasing order, from a stream of its own."""
        n = self.n_items if size is None else min(int(size), self.n_items)
        rng = np.random.default_rng([seed, 4])
        return np.sort(rng.choice(self.n_items, size=n, replace=False))


def _fixed(spec: Mapping[str, Any], dims: Mapping[str, int]) -> dict[str, int]:
    """The sizes the user (``dims``) or the model (a default) fixes."""
    defaults = {k: int(info["default"]) for k, info in spec.get("dims", {}).items()
                if info.get("default") is not None}
    return {**defaults, **{k: int(v) for k, v in dims.items()}}


def item_source(data: object, streaming: str) -> ItemSource | None:
    """``data`` if it is an :class:`ItemSource` and the model can read its items a minibatch at
    a time (``streaming``, the module's STREAMING: 'yes' or 'no: why'), None for in-memory
    data; an error with the reason otherwise."""
    if not isinstance(data, ItemSource):
        return None
    if not streaming.startswith("yes"):
        raise CemDataError("out-of-core data (a stream from disk) does not apply to this "
                           f"model: {streaming.removeprefix('no: ')}")
    if data.n_items < 1:
        raise CemDataError("out-of-core data: expected at least one item, found none")
    return data


@contextmanager
def places_in_data(plate: str | None, items: np.ndarray | None) -> Iterator[None]:
    """Errors of binding the items ``items`` of plate ``plate`` on their own (a minibatch read
    from a source) name the items as the whole data numbers them: the minibatch's
    ``rolls[22]`` is the file's ``rolls[437]``. A no-op for ``items`` None (data in memory)."""
    try:
        yield
    except CemDataError as exc:
        if plate is None or items is None:
            raise
        raise _renumbered(exc, plate, items) from None


def _renumbered(exc: CemDataError, plate: str, items: np.ndarray) -> CemDataError:
    # the places the binder names: "rolls[3]", "docs[3], tokens[5]", "row 3 (docs[3])"
    place = re.compile(rf"(\brow \d+ \()?(?<![\w.]){re.escape(plate)}\[(\d+)\]")

    def renumber(match: re.Match) -> str:
        at = int(match.group(2))
        if at >= len(items):
            return match.group(0)
        item = int(items[at])
        return (f"row {item} (" if match.group(1) else "") + f"{plate}[{item}]"

    return type(exc)(place.sub(renumber, exc.message), hint=exc.hint)
