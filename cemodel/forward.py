"""The model as a program that runs forwards: its plates laid out over some data, and every
expression of the model file evaluated in NumPy, row by row (``cemodel.predictive`` draws from
it, ``cemodel.scoring`` scores with it).

The walk follows the declared model (``compiler.built_model``): each variable's family, its
arguments (resolved expressions: plates, gates ``beta[z[d, n]]``, sums, covariates, hyper-
parameters) and its plates. Nothing here knows a particular model.

Layout. A variable's values are one array: the sizes of its plates, then its event shape, as
the kernels hold data (``runtime.binding``); a ragged plate (always the second of a variable's
plates) is flattened, its rows following the offsets ``ptr`` of the parent plate. A variable
with no plates has its event shape only. An expression evaluated for a variable has one row
per element of the variable's plates (C order, the layout's order) first.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
from scipy import special

from . import model as ir
from .errors import CemInternalError

Array = np.ndarray


@dataclass(frozen=True)
class Scope:
    """The rows an expression is evaluated over: the index of each plate (and of each
    enclosing ``sum(... for k in K)``) in every row."""

    rows: int
    plates: Mapping[str, Array]
    sums: Mapping[str, Array] = field(default_factory=dict)

    def take(self, rows: slice) -> Scope:
        plates = {p: v[rows] for p, v in self.plates.items()}
        return Scope(len(range(*rows.indices(self.rows))), plates,
                     {s: v[rows] for s, v in self.sums.items()})


@dataclass(frozen=True)
class Layout:
    """The data's sizes and ragged offsets: what lays a variable's plates out in rows."""

    model: ir.Model
    sizes: Mapping[str, int]
    ptrs: Mapping[str, Array]  # ragged plate -> offsets over its parent plate

    def size(self, dim: str | int) -> int:
        return dim if isinstance(dim, int) else int(self.sizes[dim])

    def shape(self, plates: tuple[str, ...]) -> tuple[int, ...]:
        """The leading axes of a variable in these plates."""
        shape: list[int] = []
        for plate in plates:
            info = self.model.plate(plate)
            if info.ragged:
                shape[-1:] = [int(self.ptrs[plate][-1])]
            else:
                shape.append(self.size(info.dim))
        return tuple(shape)

    def scope(self, plates: tuple[str, ...]) -> Scope:
        """One row per element of ``plates``, in the layout's order."""
        index: dict[str, Array] = {}
        rows = 1
        for plate in plates:
            info = self.model.plate(plate)
            if info.ragged:  # each row of the parent plate becomes its entries
                ptr = self.ptrs[plate]
                parent = index[info.parent]
                counts = ptr[parent + 1] - ptr[parent]
                index = {p: np.repeat(v, counts) for p, v in index.items()}
                rows = int(counts.sum())
                index[plate] = np.arange(rows) - np.repeat(np.cumsum(counts) - counts, counts)
            else:
                n = self.size(info.dim)
                index = {p: np.repeat(v, n) for p, v in index.items()}
                index[plate] = np.tile(np.arange(n), rows)
                rows *= n
        return Scope(rows, index)

    def position(self, plates: tuple[str, ...], index: list[Array]) -> tuple[Array, ...]:
        """Where rows with these indices of the first ``len(index)`` plates are held."""
        ragged = len(plates) > 1 and self.model.plate(plates[1]).ragged
        if not ragged:
            return tuple(index)
        if len(index) < 2:
            raise CemInternalError(f"a ragged plate {plates[1]} read without its index")
        return (self.ptrs[plates[1]][index[0]] + index[1], *index[2:])


def references(expr: ir.RExpr) -> list[ir.RVar]:
    """Every random variable an expression reads, gates and sums included, in order."""
    found: list[ir.RVar] = []

    def visit(e: object) -> None:
        if isinstance(e, ir.RVar):
            found.append(e)
            for i in e.indices:
                visit(i)
        elif isinstance(e, ir.GateIndex):
            visit(e.var)
        elif isinstance(e, ir.RData):
            pass
        elif isinstance(e, (ir.RBin,)):
            visit(e.left)
            visit(e.right)
        elif isinstance(e, ir.RNeg):
            visit(e.operand)
        elif isinstance(e, (ir.RCall, ir.RVector)):
            for a in (e.args if isinstance(e, ir.RCall) else e.items):
                visit(a)
        elif isinstance(e, ir.RRepeat):
            visit(e.value)
        elif isinstance(e, ir.RSum):
            visit(e.body)

    visit(expr)
    return found


def parents(var: ir.VarDef) -> tuple[str, ...]:
    return tuple(dict.fromkeys(r.name for a in var.args for r in references(a)))


def in_order(model: ir.Model) -> tuple[ir.VarDef, ...]:
    """The variables, each after the variables it reads (the model has no cycle)."""
    done: dict[str, ir.VarDef] = {}

    def visit(var: ir.VarDef) -> None:
        if var.name in done:
            return
        for name in parents(var):
            visit(model.var(name))
        done[var.name] = var

    for var in model.variables:
        visit(var)
    return tuple(done.values())


def _align(a: Array, b: Array) -> tuple[Array, Array]:
    """A scalar per row against an array per row: the scalar's axes appended."""
    if a.ndim < b.ndim:
        a = a.reshape(a.shape + (1,) * (b.ndim - a.ndim))
    elif b.ndim < a.ndim:
        b = b.reshape(b.shape + (1,) * (a.ndim - b.ndim))
    return a, b


BLOCK_ELEMENTS = 1 << 22  # parameter entries evaluated at once (~32 MB)


def blocks(evaluate: Evaluator, args: tuple[ir.RExpr, ...], scope: Scope) -> list[Scope]:
    """The rows of ``scope`` in blocks whose parameters hold at most BLOCK_ELEMENTS entries
    (a gate such as ``beta[z[d, n]]`` reads a whole row of beta for every token)."""
    if scope.rows <= 1:
        return [scope]
    first = scope.take(slice(0, 1))
    width = max(sum(int(np.size(evaluate(arg, first))) for arg in args), 1)
    step = max(BLOCK_ELEMENTS // width, 1)
    return [scope.take(slice(i, i + step)) for i in range(0, scope.rows, step)]


_BINARY = {"+": np.add, "-": np.subtract, "*": np.multiply, "/": np.divide}


@dataclass(frozen=True)
class Evaluator:
    """Evaluates the model's expressions over a ``Scope`` given the values of the variables
    (``values``, in the layout), the hyperparameters and the covariates (``data``)."""

    layout: Layout
    hypers: Mapping[str, Array]
    data: Mapping[str, Array]
    values: Mapping[str, Array]

    def __call__(self, expr: ir.RExpr, scope: Scope) -> Array:
        """The expression in every row of ``scope``: shape (rows, event...)."""
        n = scope.rows
        if isinstance(expr, ir.RConst):
            return np.full(n, float(expr.value))
        if isinstance(expr, ir.RDimSize):
            return np.full(n, float(self.layout.size(expr.name)))
        if isinstance(expr, ir.RHyper):
            value = np.asarray(self.hypers[expr.name], dtype=float)
            return np.broadcast_to(value, (n,) + value.shape)
        if isinstance(expr, ir.RVar):
            var = self.layout.model.var(expr.name)
            return self._read(self.values[expr.name], var.plates, expr.indices, scope)
        if isinstance(expr, ir.RData):
            datum = self.layout.model.datum(expr.name)
            return self._read(self.data[expr.name], datum.plates, expr.indices, scope)
        if isinstance(expr, ir.RRepeat):
            value = self(expr.value, scope)
            return np.broadcast_to(value[:, None], (n, self.layout.size(expr.dim)))
        if isinstance(expr, ir.RNeg):
            return -self(expr.operand, scope)
        if isinstance(expr, ir.RBin):
            return _BINARY[expr.op](*_align(self(expr.left, scope), self(expr.right, scope)))
        if isinstance(expr, ir.RVector):
            return np.stack([self(item, scope) for item in expr.items], axis=-1)
        if isinstance(expr, ir.RCall):
            return self._call(expr, scope)
        if isinstance(expr, ir.RSum):
            return self._sum(expr, scope)
        raise CemInternalError(f"cannot evaluate {type(expr).__name__}")

    def _call(self, expr: ir.RCall, scope: Scope) -> Array:
        n = scope.rows
        if expr.func in ("eye", "zeros", "ones", "full"):
            size = self.layout.size(expr.args[0].name) if isinstance(expr.args[0], ir.RDimSize) \
                else int(expr.args[0].value)
            if expr.func == "eye":
                return np.broadcast_to(np.eye(size), (n, size, size))
            fill = self(expr.args[1], scope)[:, None] if expr.func == "full" else \
                np.full((n, 1), 0.0 if expr.func == "zeros" else 1.0)
            return np.broadcast_to(fill, (n, size))
        args = [self(a, scope) for a in expr.args]
        if expr.func == "dot":  # Σ_i a_i b_i
            return np.einsum("...i,...i->...", *args)
        if expr.func in ("exp", "log"):
            return getattr(np, expr.func)(args[0])
        if expr.func == "logistic":  # σ(η) = 1 / (1 + e^−η)
            return special.expit(args[0])
        raise CemInternalError(f"cannot evaluate the function {expr.func}")

    def _sum(self, expr: ir.RSum, scope: Scope) -> Array:
        """Σ_k body: the body over rows × k, then summed over k."""
        k = self.layout.size(expr.dim)
        inner = Scope(scope.rows * k, {p: np.repeat(v, k) for p, v in scope.plates.items()},
                      {**{s: np.repeat(v, k) for s, v in scope.sums.items()},
                       expr.index: np.tile(np.arange(k), scope.rows)})
        body = self(expr.body, inner)
        return body.reshape((scope.rows, k) + body.shape[1:]).sum(axis=1)

    def index(self, index: ir.PlateIndex | ir.GateIndex | ir.SumIndex, scope: Scope) -> Array:
        if isinstance(index, ir.PlateIndex):
            return scope.plates[index.plate]
        if isinstance(index, ir.SumIndex):
            return scope.sums[index.name]
        return self(index.var, scope).astype(np.int64)

    def _read(self, array: Array, plates: tuple[str, ...], indices: tuple, scope: Scope) -> Array:
        if not indices:
            return np.broadcast_to(array, (scope.rows,) + np.shape(array))
        at = self.layout.position(plates, [self.index(i, scope) for i in indices])
        return np.asarray(array)[at]

    def table(self, expr: ir.RExpr, scope: Scope) -> tuple[Array, Array] | None:
        """An expression that reads a variable at all its indices (``beta[z[d, n]]``,
        ``pi``) as (its table: one row per element of its plates, each row's row in it),
        so that a categorical need not copy a row of probabilities per token; else None."""
        if not isinstance(expr, ir.RVar):
            return None
        var = self.layout.model.var(expr.name)
        if expr.indices and len(expr.indices) != len(var.plates):
            return None
        values = np.asarray(self.values[expr.name])
        table = values.reshape((-1,) + values.shape[len(self.layout.shape(var.plates)):])
        return table, self.rows_of(expr, scope)

    def rows_of(self, ref: ir.RVar, scope: Scope) -> Array:
        """The row of variable ``ref.name`` each row of ``scope`` reads (all its plates
        indexed), counted in the variable's layout."""
        var = self.layout.model.var(ref.name)
        at = self.layout.position(var.plates, [self.index(i, scope) for i in ref.indices])
        shape = self.layout.shape(var.plates)
        return np.ravel_multi_index(at, shape) if at else np.zeros(scope.rows, np.int64)
