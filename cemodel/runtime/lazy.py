"""Kernels of the lazy stochastic step (``drivers.lazy``): a Dirichlet global over the
categories of observed data moved only at the minibatch's categories.

With P the global's prior natural parameter, every category v the minibatch does not hold
gets λ̂_v = P_v, so its step is λ_v ← P_v + (1 − ρ_t)(λ_v − P_v). The columns keep the value
of their last visit and ``last[v]``, log Π(1 − ρ_s) then; ``scale`` is that sum now, so
λ_v = P_v + (λ_v^stored − P_v)·exp(scale − last[v]) (``catch_up``). Each row's total
Σ_v α_v = Σ_v (P_v + 1) + Σ_v (λ_v − P_v) keeps its second part, ``excess``, up to date by
the same step (``blend_columns``), which is all ψ(Σ_v α_v) needs (``dirichlet_compact``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numba
import numpy as np

from .fastexp import exp_nonpositive
from .special import digamma, digamma_shifted

# disk-cached: these call nothing from another file (whose change numba would not see)
jit = numba.njit(nogil=True, cache=True, error_model="numpy")
# the generated kernels' flags: digamma and exp of a row vectorize; not disk-cached where they
# inline special's digamma or fastexp's exp (a stale copy when that file changes)
fast_jit = numba.njit(nogil=True, cache=True, error_model="numpy",
                      fastmath={"reassoc", "contract", "arcp"})
uncached_fast_jit = numba.njit(nogil=True, error_model="numpy",
                               fastmath={"reassoc", "contract", "arcp"})


@dataclass(frozen=True)
class LazyColumns:
    """A global the SVI driver may move by the minibatch's columns (``cemodel.codegen.lazy``
    says when): ``size`` the state name of the number of categories, ``index`` the observed
    data holding them (``pointer``: its ragged plate's, None: a row per item),
    ``statistics`` the accumulators keyed by them (name, axis), ``exp`` and ``transposed``
    the copies of E[log β] the kernels read besides E itself (exp(E) row-major; Eᵀ, exp(E)ᵀ),
    ``expected`` whether the local step reads E itself (if not, a step leaves it to
    ``settle``: written row-major, each visited entry cost a cache line); ``alone`` whether
    the local step reads ``index`` and the category axis only through this global (its E,
    copies and statistics): then a step hands the local step compact arrays, one row per
    minibatch category, and ``index`` renumbered to match (``dirichlet_compact``);
    ``direct`` whether its update is λ̂[r, v] = P[r, v] + data_scale · S[v, r] with S its one
    statistic (categories × rows): then the step blends from S without the update kernel
    (``blend_columns`` with ``direct``)."""

    size: str
    index: str
    pointer: str | None
    statistics: tuple[tuple[str, int], ...]
    exp: str | None
    transposed: tuple[str, str] | None
    expected: bool = True  # E itself read by the local step (False: its copies only)
    alone: bool = False  # the local step reads the categories only through this global
    direct: bool = False  # λ̂[r, v] = P[r, v] + data_scale · S[v, r], S its one statistic


@jit
def ragged_columns(values: np.ndarray, pointer: np.ndarray, items: np.ndarray,
                   mark: np.ndarray) -> np.ndarray:
    """The distinct values in 0 ≤ v < len(mark) of the items' ragged rows, ascending
    (``mark`` all False on entry and on return)."""
    count = 0
    for item in items:
        count += pointer[item + 1] - pointer[item]
    gathered = np.empty(count, dtype=values.dtype)
    count = 0
    for item in items:
        for i in range(pointer[item], pointer[item + 1]):
            gathered[count] = values[i]
            count += 1
    return dense_columns(gathered, mark)


@jit
def dense_columns(values: np.ndarray, mark: np.ndarray) -> np.ndarray:
    """The distinct values in 0 ≤ v < len(mark) of ``values`` (any shape), ascending."""
    flat = values.reshape(-1)
    found = np.empty(flat.shape[0], dtype=np.int64)
    count = 0
    for i in range(flat.shape[0]):
        v = flat[i]
        if 0 <= v < mark.shape[0] and not mark[v]:
            mark[v] = True
            found[count] = v
            count += 1
    columns = np.sort(found[:count])
    for v in columns:
        mark[v] = False
    return columns


@jit
def catch_up(lt: np.ndarray, prior: np.ndarray, last: np.ndarray, scale: float,
             columns: np.ndarray) -> None:
    """λᵀ[v] ← Pᵀ[v] + (λᵀ[v] − Pᵀ[v])·exp(scale − last[v]) at the columns: their steps
    since their last visit, at which no data reached them; then last[v] = scale. ``prior``
    (categories × rows, or × 1 when every row's P is the same)."""
    factors = _factors(last, scale, columns)
    one = prior.shape[1] == 1
    for j in range(columns.shape[0]):
        v = columns[j]
        for r in range(lt.shape[1]):
            p = prior[v, 0] if one else prior[v, r]
            lt[v, r] = p + (lt[v, r] - p) * factors[j]


@jit
def _factors(last: np.ndarray, scale: float, columns: np.ndarray) -> np.ndarray:
    factors = np.empty(columns.shape[0])
    for j in range(columns.shape[0]):
        factors[j] = math.exp(scale - last[columns[j]])
        last[columns[j]] = scale
    return factors


@jit
def remap_ragged(values: np.ndarray, pointer: np.ndarray, items: np.ndarray,
                 position: np.ndarray, out: np.ndarray) -> None:
    """out[i] = position[values[i]] over the items' ragged rows (the other entries of
    ``out`` are left as they are)."""
    for item in items:
        for i in range(pointer[item], pointer[item + 1]):
            out[i] = position[values[i]]


@uncached_fast_jit
def _digamma_all(flat: np.ndarray) -> None:
    # its own loop (not inlined into the caller's): LLVM vectorizes it alone
    for i in range(flat.shape[0]):
        flat[i] = digamma_shifted(flat[i])


@uncached_fast_jit
def _exp_all(flat: np.ndarray, out: np.ndarray) -> None:
    for i in range(flat.shape[0]):
        out[i] = exp_nonpositive(flat[i])


@uncached_fast_jit
def dirichlet_compact(lt: np.ndarray, prior: np.ndarray, last: np.ndarray, scale: float,
                      total_prior: np.ndarray, excess: np.ndarray, columns: np.ndarray,
                      LC: np.ndarray, ET: np.ndarray, XT: np.ndarray, E: np.ndarray,
                      X: np.ndarray, expected: bool, plain_exp: bool,
                      transposed: bool) -> None:
    """The minibatch's columns caught up, then E[log β_rv] = ψ(λ_rv + 1) − ψ(Σ_v α_rv)
    there, the row totals from ``total_prior`` + ``excess``; into compact arrays, row j of
    them for category columns[j]: LC (columns × rows) = λᵀ there caught up (λᵀ itself and
    ``last`` are left for ``blend_columns``, which writes the step's result), ET = E[log β]ᵀ
    there, XT = exp of it (with ``transposed`` or ``plain_exp``), E and X (rows × columns)
    the same row-major (with ``expected``, ``plain_exp``). ET is written in any case: it is
    the flat buffer digamma and exp run over as long vectorized loops (a row of 20 topics is
    too short). A global read ``alone`` hands these to the local step, where they stay in
    cache (full-size copies cost a cache miss per row: GCIDE, K = 100, 2,600 rows of a
    38,000-row array per minibatch); the others' are scattered (``scatter_columns``)."""
    rows, n = lt.shape[1], columns.shape[0]
    one = prior.shape[1] == 1
    psi_total = np.empty(rows)
    for r in range(rows):
        psi_total[r] = digamma(total_prior[r] + excess[r])
    flat = ET.reshape(-1)
    for j in range(n):
        v = columns[j]
        factor = math.exp(scale - last[v])
        for r in range(rows):
            p = prior[v, 0] if one else prior[v, r]
            current = p + (lt[v, r] - p) * factor
            LC[j, r] = current
            flat[j * rows + r] = current + 1.0
    _digamma_all(flat)
    for j in range(n):
        for r in range(rows):
            flat[j * rows + r] -= psi_total[r]
    exps = XT.reshape(-1)
    if transposed or plain_exp:
        _exp_all(flat, exps)
    if expected:
        for j in range(n):
            for r in range(rows):
                E[r, j] = flat[j * rows + r]
    if plain_exp:
        for j in range(n):
            for r in range(rows):
                X[r, j] = exps[j * rows + r]


@jit
def scatter_columns(columns: np.ndarray, ET: np.ndarray, XT: np.ndarray, E: np.ndarray,
                    X: np.ndarray, E_full: np.ndarray, X_full: np.ndarray,
                    ET_full: np.ndarray, XT_full: np.ndarray, expected: bool, plain_exp: bool,
                    transposed: bool) -> None:
    """``dirichlet_compact``'s rows into the full-size arrays at their categories: E and X
    (rows × categories) with ``expected``, ``plain_exp``; Eᵀ and exp(E)ᵀ with ``transposed``
    (for a global not read ``alone``)."""
    rows = ET.shape[1]
    for j in range(columns.shape[0]):
        v = columns[j]
        for r in range(rows):
            if expected:
                E_full[r, v] = E[r, j]
            if plain_exp:
                X_full[r, v] = X[r, j]
            if transposed:
                ET_full[v, r] = ET[j, r]
                XT_full[v, r] = XT[j, r]


@fast_jit
def blend_columns(lt: np.ndarray, LC: np.ndarray, hat: np.ndarray, prior: np.ndarray,
                  excess: np.ndarray, columns: np.ndarray, rho: float, bound: float,
                  direct: bool, data_scale: float) -> bool:
    """The step at the minibatch's columns, λᵀ[v] ← (1 − ρ)·LC[j] + ρ·λ̂[:, j] for
    v = columns[j], LC the caught-up rows of ``dirichlet_compact``. λ̂ is ``hat`` (rows ×
    columns), or, ``direct``,
    P[v] + data_scale · hat[j] (hat the compact statistic, columns × rows). Each row's
    Σ_v (λ_v − P_v) moves the same way: elsewhere λ̂ − P is 0, so the sum becomes
    (1 − ρ)·sum + ρ·Σ_j (λ̂_j − P_v). Returns whether every new λ > ``bound`` there (the
    family's domain; elsewhere λ moved towards its prior). λ̂ is read into a block of
    columns first: a column of the rows × columns λ̂ read down its rows touches a page per
    row (4 ns an entry at 100 rows, 1.7 ns by blocks)."""
    keep = 1.0 - rho
    rows, n = lt.shape[1], columns.shape[0]
    one = prior.shape[1] == 1
    added = np.zeros(rows)
    valid = True
    block = np.empty((_BLOCK, rows))
    for start in range(0, n, _BLOCK):
        stop = min(start + _BLOCK, n)
        if direct:
            for j in range(start, stop):
                v = columns[j]
                for r in range(rows):
                    p = prior[v, 0] if one else prior[v, r]
                    block[j - start, r] = p + data_scale * hat[j, r]
        else:
            for r in range(rows):
                for j in range(start, stop):
                    block[j - start, r] = hat[r, j]
        for j in range(start, stop):
            v = columns[j]
            for r in range(rows):
                p = prior[v, 0] if one else prior[v, r]
                h = block[j - start, r]
                added[r] += h - p
                new = keep * LC[j, r] + rho * h
                lt[v, r] = new
                valid &= new > bound  # NaN fails it too
    for r in range(rows):
        excess[r] = keep * excess[r] + rho * added[r]
    return valid


_BLOCK = 64  # columns of λ̂ at a time (blend_columns)


def by_rows(a: np.ndarray, axis: int) -> np.ndarray | None:
    """``a`` as a 2-D view, one row per entry along ``axis`` (None if no view has that
    shape: then the callers index the moved array instead)."""
    moved = np.moveaxis(a, axis, 0)
    flat = moved.reshape(moved.shape[0], -1)
    return flat if np.may_share_memory(flat, a) else None


def zero_rows(acc: np.ndarray, axis: int, columns: np.ndarray) -> None:
    """acc[v] = 0 for v in columns along ``axis`` (a minibatch's categories)."""
    flat = by_rows(acc, axis)
    if flat is None:
        np.moveaxis(acc, axis, 0)[columns] = 0.0
    else:
        _zero_rows(flat, columns)


def add_rows(total: np.ndarray, part: np.ndarray, axis: int, rows: np.ndarray) -> None:
    """total[v] += part[v], then part[v] = 0, for v in rows along ``axis`` (a share's
    statistics at a minibatch's categories)."""
    flat_total, flat_part = by_rows(total, axis), by_rows(part, axis)
    if flat_total is None or flat_part is None:
        moved_total, moved_part = np.moveaxis(total, axis, 0), np.moveaxis(part, axis, 0)
        moved_total[rows] += moved_part[rows]
        moved_part[rows] = 0.0
    else:
        _add_rows(flat_total, flat_part, rows)


# element by element: a row slice per category (acc[v] += ...) cost a view each, ~0.4 ms
# per GCIDE minibatch of ~3,000 categories, as much as a quarter of the step
@jit
def _zero_rows(acc: np.ndarray, columns: np.ndarray) -> None:
    for v in columns:
        for j in range(acc.shape[1]):
            acc[v, j] = 0.0


@jit
def _add_rows(total: np.ndarray, part: np.ndarray, rows: np.ndarray) -> None:
    for v in rows:
        for j in range(total.shape[1]):
            total[v, j] += part[v, j]
            part[v, j] = 0.0
