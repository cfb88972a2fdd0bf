"""The lazy stochastic step: globals with an ``rt.LazyColumns`` layout moved only at the
minibatch's categories (``cemodel.runtime.lazy`` has the algebra, ``cemodel.codegen.lazy``
the rule that says which globals qualify).

It is SVI's step exactly, λ ← (1 − ρ_t)λ + ρ_t λ̂, computed in O(rows × |categories of the
minibatch|) instead of O(rows × all categories): on GCIDE (37,895 words, 18 tokens a
document) a minibatch of 256 documents holds ~7% of the vocabulary. The other entries catch
up when next read (``catch_up``); ``settle`` brings every entry up to date for whatever
reads the whole global (the per-epoch ELBO, a callback, a checkpoint, the result). Only the
rounding differs from moving every entry at every step.

A global read ``alone`` (``rt.LazyColumns``) hands the local step compact arrays, row j for
the minibatch's j-th category, and the observed categories renumbered to match: the rows a
step writes and reads (E[log β]ᵀ and its exp, the statistics, λ caught up) are then 2 MB
that stay in cache instead of 2,600 scattered rows of 30 MB arrays (GCIDE, K = 100), and
there is nothing to gather or zero in the full statistics. A ``direct`` one blends straight
from its compact statistic (λ̂ = P + data_scale · S) without running its update kernel.

It serves plain SVI; SVI+, SSVI, SSVI-A, averaging, adaptive rates and empirical Bayes read
or perturb the whole λ at every step and keep the eager step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import lazy as kernels
from ..driver import State
from .interface import Global, ModelInterface, zero_statistics

# below exp(-600) the decay of unvisited columns is renormalised into λ (settle)
_SMALLEST_SCALE = -600.0


class _Proxy:
    """``s`` with some arrays replaced: an update kernel run on the minibatch's columns."""

    def __init__(self, s: State, replaced: dict[str, Any]) -> None:
        self._s, self._replaced = s, replaced

    def __getattr__(self, name: str) -> Any:
        replaced = self.__dict__["_replaced"]
        return replaced[name] if name in replaced else getattr(self.__dict__["_s"], name)


@dataclass
class LazyGlobal:
    """One lazily moved global: λᵀ (categories × rows: the kernels' copy, λ itself is
    written back when the fit settles), its prior natural parameter Pᵀ (× 1 when all rows
    share it), each row's Σ_v (P_v + 1) and Σ_v (λ_v − P_v), and each column's log Π(1 − ρ)
    at its last visit."""

    g: Global
    lt: np.ndarray
    prior: np.ndarray
    total_prior: np.ndarray
    excess: np.ndarray
    last: np.ndarray
    mark: np.ndarray
    columns: np.ndarray | None = None
    # alone (rt.LazyColumns): each category's row among the minibatch's columns, the index
    # renumbered by it at the minibatch's entries, and the minibatch's compact statistics
    position: np.ndarray | None = None
    renumbered: np.ndarray | None = None
    compact: dict[str, np.ndarray] = field(default_factory=dict)
    caught_up: np.ndarray | None = None  # λᵀ at the minibatch's columns, caught up

    @property
    def lam(self) -> str:
        return self.g.lam[0]


@dataclass
class Lazy:
    """The lazy globals of a fit and the decay ``scale`` = log Π_s (1 − ρ_s) so far."""

    globals: tuple[LazyGlobal, ...]
    eager: tuple[Global, ...]
    scale: float = 0.0
    dirty: bool = True  # the statistics may hold more than zeros (a full pass read them)


def applies(model: ModelInterface, o: Any, first_rho: float) -> bool:
    """Plain SVI on a model with a lazy global, steps below 1 (a step of 1 or more leaves no
    decay to defer)."""
    plain = (o.effective_batch_size is None and not o.sample_globals and not o.apply_v
             and o.learning_rate in (None, "decay") and not o.learn and not o.average)
    return plain and first_rho < 1.0 and any(
        getattr(g, "lazy", None) is not None for g in model.GLOBALS)


def start(model: ModelInterface, s: State) -> Lazy:
    """The lazy state at the fit's current λ: P from each update with no data, run on one
    column (the rule, ``cemodel.codegen.lazy``, makes every message but the data's a
    constant, so P is that column repeated)."""
    found, eager = [], []
    for g in model.GLOBALS:
        if getattr(g, "lazy", None) is None:
            eager.append(g)
            continue
        lam = getattr(s, g.lam[0])
        column = np.empty((lam.shape[0], 1))
        replaced: dict[str, Any] = {g.lam[0]: column, g.lazy.size: 1}
        for name, axis in g.lazy.statistics:
            shape = getattr(s, name).shape
            replaced[name] = np.zeros(shape[:axis] + (1,) + shape[axis + 1:])
        g.update(_Proxy(s, replaced), 0.0, expect=False)
        shared = np.all(column == column[:1])  # one row serves all
        prior_t = np.repeat(column[:1].T if shared else column.T, lam.shape[1], axis=0)
        lt = np.ascontiguousarray(lam.T)
        # each row's Σ_v (P_v + 1) and Σ_v (λ_v − P_v) as settle sums them: a resumed fit
        # continues bit for bit
        total_prior = np.array([np.full(lam.shape[1], p + 1.0).sum() for p in column[:, 0]])
        found.append(LazyGlobal(g, lt, prior_t, total_prior, (lt - prior_t).sum(axis=0),
                                np.zeros(lam.shape[1]), np.zeros(lam.shape[1], dtype=np.bool_),
                                position=np.zeros(lam.shape[1], dtype=np.int64)))
    return Lazy(tuple(found), tuple(eager))


def prepare(lazy: Lazy, model: ModelInterface, s: State, items: np.ndarray) -> State | _Proxy:
    """Before the local step on ``items``: their columns of each lazy global caught up (kept
    for ``blend``) and E[log β] and its copies there. Returns the state the local step runs
    on: ``s``, or, with globals read ``alone``, ``s`` with their arrays replaced by compact
    ones."""
    # a lazy global's statistics are zero between lazy steps (each step zeroes its rows, or
    # the compact ones receive them); the others' are zeroed as SVI zeroes them
    zero_statistics(model, s, skip=frozenset() if lazy.dirty else frozenset(
        name for lg in lazy.globals for name, _ in lg.g.lazy.statistics))
    lazy.dirty = False
    replaced: dict[str, Any] = {}
    for lg in lazy.globals:
        spec = lg.g.lazy
        values = getattr(s, spec.index)
        if spec.pointer is None:
            lg.columns = kernels.dense_columns(values[items], lg.mark)
        else:
            lg.columns = kernels.ragged_columns(values, getattr(s, spec.pointer), items, lg.mark)
        compact = _caught_up(lazy, lg)
        if spec.alone:
            replaced.update(_compact(lg, s, values, items, *compact))
        else:
            kernels.scatter_columns(lg.columns, *compact, *_full(lg, s), spec.expected,
                                    spec.exp is not None, spec.transposed is not None)
    return _Proxy(s, replaced) if replaced else s


def _caught_up(lazy: Lazy, lg: LazyGlobal) -> tuple[np.ndarray, ...]:
    """The global at the minibatch's columns caught up (``lg.caught_up``) and its E[log β]
    there, compact (``rt.lazy.dirichlet_compact``): (Eᵀ, exp(E)ᵀ, E, exp(E))."""
    spec = lg.g.lazy
    n, rows = lg.columns.shape[0], lg.lt.shape[1]
    lg.caught_up = np.empty((n, rows))
    ET = np.empty((n, rows))
    exps = spec.exp is not None or spec.transposed is not None
    XT = np.empty((n, rows) if exps else (0, rows))
    E = np.empty((rows, n)) if spec.expected else ET
    X = np.empty((rows, n)) if spec.exp is not None else ET
    kernels.dirichlet_compact(lg.lt, lg.prior, lg.last, lazy.scale, lg.total_prior,
                              lg.excess, lg.columns, lg.caught_up, ET, XT, E, X, spec.expected,
                              spec.exp is not None, spec.transposed is not None)
    return ET, XT, E, X


def _full(lg: LazyGlobal, s: State) -> tuple[np.ndarray, ...]:
    """The global's full-size E, exp(E), Eᵀ, exp(E)ᵀ (E itself where a copy is not kept)."""
    spec = lg.g.lazy
    E = getattr(s, lg.g.E[0])
    X = getattr(s, spec.exp) if spec.exp is not None else E
    ET, XT = ((getattr(s, spec.transposed[0]), getattr(s, spec.transposed[1]))
              if spec.transposed is not None else (E, E))
    return E, X, ET, XT


def _compact(lg: LazyGlobal, s: State, values: np.ndarray, items: np.ndarray,
             ET: np.ndarray, XT: np.ndarray, E: np.ndarray,
             X: np.ndarray) -> dict[str, np.ndarray]:
    """The arrays of a global read ``alone``, for the local step on ``items``: row j of each
    for category columns[j] (E[log β] and its copies, the statistics zero), and the index
    renumbered so at the items' entries."""
    spec, columns = lg.g.lazy, lg.columns
    lg.position[columns] = np.arange(columns.shape[0])
    if lg.renumbered is None or lg.renumbered.shape != values.shape:
        lg.renumbered = np.empty_like(values)  # read at the minibatch's entries only
    if spec.pointer is None:
        lg.renumbered[items] = lg.position[values[items]]
    else:
        kernels.remap_ragged(values, getattr(s, spec.pointer), items, lg.position,
                             lg.renumbered)
    replaced = {spec.index: lg.renumbered}
    if spec.expected:
        replaced[lg.g.E[0]] = E
    if spec.exp is not None:
        replaced[spec.exp] = X
    if spec.transposed is not None:
        replaced[spec.transposed[0]], replaced[spec.transposed[1]] = ET, XT
    lg.compact = {}
    for name, axis in spec.statistics:
        full = getattr(s, name)
        compact = np.zeros(full.shape[:axis] + (columns.shape[0],) + full.shape[axis + 1:])
        replaced[name] = lg.compact[name] = compact
        shares = getattr(s, f"{name}_threads", None)  # the local step's copies per share
        if shares is not None:
            replaced[f"{name}_threads"] = (compact[None] if shares.shape[0] == 1 else
                                           np.zeros((shares.shape[0],) + compact.shape))
    return replaced


def statistic_rows(lazy: Lazy, s: State) -> list[tuple[np.ndarray, int, np.ndarray]]:
    """(statistic, its categories' axis, the minibatch's categories) of each lazy global:
    the only rows its local step can reach (``rt.shares.only_rows``)."""
    return [(getattr(s, name), axis, lg.columns) for lg in lazy.globals
            if not lg.compact for name, axis in lg.g.lazy.statistics]


def targets(lazy: Lazy, s: State, data_scale: float) -> list[np.ndarray | float]:
    """λ̂ of each lazy global at its minibatch's columns (rows × columns), by its update
    kernel run on those columns alone; for a ``direct`` global read alone, just
    ``data_scale`` (``blend`` reads λ̂ off its compact statistic)."""
    hats: list[np.ndarray | float] = []
    for lg in lazy.globals:
        spec, columns = lg.g.lazy, lg.columns
        if lg.compact and spec.direct:
            hats.append(data_scale)
            continue
        hat = np.empty((getattr(s, lg.lam).shape[0], columns.shape[0]))
        replaced: dict[str, Any] = {lg.lam: hat, spec.size: int(columns.shape[0])}
        for name, axis in spec.statistics:
            replaced[name] = (lg.compact[name] if lg.compact else
                              np.take(getattr(s, name), columns, axis=axis))
        lg.g.update(_Proxy(s, replaced), data_scale, expect=False)
        hats.append(hat)
    return hats


def blend(lazy: Lazy, s: State, hats: list[np.ndarray | float], rho: float) -> str | None:
    """The step at the minibatch's columns (the rest decays in ``scale``), then their
    statistics zeroed for the next step. Returns the first lazy global whose λ left the
    Dirichlet's domain (λ > −1) at the columns, or None."""
    lazy.scale += math.log1p(-rho)
    outside = None
    for lg, hat in zip(lazy.globals, hats, strict=True):
        if isinstance(hat, float):  # direct: λ̂ = P + data_scale · S (targets)
            (statistic,) = lg.compact.values()
            valid = kernels.blend_columns(lg.lt, lg.caught_up, statistic, lg.prior, lg.excess,
                                          lg.columns, rho, -1.0, True, hat)
        else:
            valid = kernels.blend_columns(lg.lt, lg.caught_up, hat, lg.prior, lg.excess,
                                          lg.columns, rho, -1.0, False, 1.0)
        if not valid and outside is None:
            outside = lg.g.name
        lg.last[lg.columns] = lazy.scale
        if lg.compact:  # the full statistics received nothing
            continue
        for name, axis in lg.g.lazy.statistics:
            kernels.zero_rows(getattr(s, name), axis, lg.columns)
    if lazy.scale < _SMALLEST_SCALE:
        settle(lazy, None, s)
    return outside


def settle(lazy: Lazy, model: ModelInterface | None, s: State) -> None:
    """Every entry of the lazy globals up to date (λᵀ and the row sums; with ``model`` also
    λ itself and all expectations), the decay restarted at 1."""
    for lg in lazy.globals:
        kernels.catch_up(lg.lt, lg.prior, lg.last, lazy.scale, np.arange(lg.lt.shape[0]))
        lg.last[...] = 0.0
        lg.excess[...] = (lg.lt - lg.prior).sum(axis=0)
        if model is not None:
            getattr(s, lg.lam)[...] = lg.lt.T
    lazy.scale = 0.0
    if model is not None:
        model.refresh(s)
        lazy.dirty = True
