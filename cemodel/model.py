"""Stage 2: AST -> Model (resolved names, plates, shapes) and its networkx view.

The ``Model`` is an immutable IR: dimensions, hyperparameters, covariates,
plates and random variables, with every expression resolved to what its
names mean. The data plate (the top-level plate holding the observations)
splits variables into globals and locals. ``model_graph`` derives a networkx
DiGraph from it for graph algorithms; the graph is a view, not the IR.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import networkx as nx
import numpy as np

from . import syntax as ast
from .errors import CemModelError, CemOptionError, Source, Span, did_you_mean
from .families import CHAIN_FAMILIES, FAMILIES, WRITABLE, FamilySpec
from .families.base import Param
from .options import check_hyper_values

# ---------------------------------------------------------------------------
# Resolved expressions
# ---------------------------------------------------------------------------

ShapeDim = str | int  # a dimension name or a literal size
Shape = tuple[ShapeDim, ...]


@dataclass(frozen=True)
class RConst:
    value: float
    span: Span


@dataclass(frozen=True)
class RHyper:
    name: str
    span: Span


@dataclass(frozen=True)
class PlateIndex:
    plate: str
    span: Span


@dataclass(frozen=True)
class GateIndex:
    """A categorical used as an index: ``beta[z[d, n]]`` selects a component; ``var`` is a
    random variable (latent or observed) or integer data (``lam[group[n]]``)."""

    var: RVar | RData
    span: Span


@dataclass(frozen=True)
class SumIndex:
    """The index ``k`` of ``sum(body for k in K)`` inside ``body``."""

    name: str
    span: Span


RIndex = PlateIndex | GateIndex | SumIndex


@dataclass(frozen=True)
class RVar:
    """A reference to a random variable (latent or observed) at given indices. ``part``:
    which member of a joint block (``mean`` or ``precision``, see ``cemodel.blocks``) it
    reads; None for a plain variable."""

    name: str
    indices: tuple[RIndex, ...]
    span: Span
    part: str | None = None


@dataclass(frozen=True)
class RData:
    """A reference to a covariate declared with ``data``; a position may take the index of
    an enclosing ``sum(... for k in K)`` (``sum(A[i, k] * lam[k] for k in K)``)."""

    name: str
    indices: tuple[PlateIndex | SumIndex, ...]
    span: Span


@dataclass(frozen=True)
class RRepeat:
    """``Dirichlet(a, K)``: the scalar ``a`` repeated along dimension ``dim``."""

    value: RExpr
    dim: ShapeDim
    span: Span


@dataclass(frozen=True)
class RCall:
    func: str
    args: tuple[RExpr, ...]
    span: Span


@dataclass(frozen=True)
class RBin:
    op: str
    left: RExpr
    right: RExpr
    span: Span


@dataclass(frozen=True)
class RNeg:
    operand: RExpr
    span: Span


@dataclass(frozen=True)
class RVector:
    items: tuple[RExpr, ...]
    span: Span


@dataclass(frozen=True)
class RDimSize:
    """A dimension used as a number (e.g. ``eye(D)``)."""

    name: str
    span: Span


@dataclass(frozen=True)
class RSum:
    """``sum(body for index in dim)``: the body summed over a new index (SumIndex inside)."""

    index: str
    dim: str
    body: RExpr
    span: Span


RExpr = (RConst | RHyper | RVar | RData | RRepeat | RCall | RBin | RNeg | RVector | RDimSize
         | RSum)

# ---------------------------------------------------------------------------
# Declarations
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class DimDef:
    name: str
    default: int | None
    ragged_over: str | None  # the dimension this ragged length is indexed by
    span: Span


@dataclass(frozen=True)
class HyperDef:
    name: str
    value: RExpr
    shape: Shape
    span: Span


@dataclass(frozen=True)
class DataDef:
    """A covariate: ``data x[n] : vector(P)`` (real vector) or ``: real`` / ``: int``."""

    name: str
    plates: tuple[str, ...]
    kind: str  # real, int, vector
    shape: Shape
    span: Span
    index_range: str | None = None  # the dimension it indexes, when used as an index


@dataclass(frozen=True)
class PlateDef:
    name: str
    index: str
    dim: str
    ragged: bool
    parent: str | None
    span: Span


@dataclass(frozen=True)
class VarDef:
    name: str
    plates: tuple[str, ...]
    family: str
    args: tuple[RExpr, ...]  # one per family parameter, in the family's order
    observed: bool
    shape: Shape  # event shape
    categories: ShapeDim | None  # number of categories for a categorical variable
    span: Span
    dist_span: Span


@dataclass(frozen=True)
class Introduced:
    """A latent variable the compiler adds to make a model conditionally conjugate (see
    ``cemodel.augment``) for observed ``of``: split counts over ``dim``, or (``dim`` None) a
    precision scale (``cemodel.augment_student_t``)."""

    name: str
    of: str
    dim: str | None
    why: str


@dataclass(frozen=True)
class Block:
    """A mean and the precision its prior is scaled by, fitted as one joint factor
    q(mean, precision) (see ``cemodel.blocks``): the variable ``name`` replaces both."""

    name: str
    mean: VarDef
    precision: VarDef
    why: str


@dataclass(frozen=True)
class Model:
    name: str
    source: Source
    dims: tuple[DimDef, ...]
    hypers: tuple[HyperDef, ...]
    data: tuple[DataDef, ...]
    plates: tuple[PlateDef, ...]
    variables: tuple[VarDef, ...]
    data_plate: str | None
    # ``collapse a, b``: the set KLC-CG integrates out, and where the file says so
    collapse: tuple[str, ...] | None = None
    collapse_span: Span | None = None
    # variables the compiler introduced (cemodel.augment), shown by `cemodel check`
    introduced: tuple[Introduced, ...] = ()
    # means and precisions fitted as one joint factor (cemodel.blocks)
    blocks: tuple[Block, ...] = ()
    # pairs with a Normal-Gamma / Normal-Wishart prior kept as two factors, and why
    declined_blocks: tuple[Block, ...] = ()

    def block(self, name: str) -> Block | None:
        for block in self.blocks:
            if block.name == name:
                return block
        return None

    def member(self, ref: RVar) -> VarDef:
        """The variable a reference reads: a block's member for ``ref.part``, else itself."""
        if ref.part is None:
            return self.var(ref.name)
        block = self.block(ref.name)
        assert block is not None
        return block.mean if ref.part == "mean" else block.precision

    def fresh_name(self, base: str, taken: set[str]) -> str:
        """``base``, with "_" appended until it names nothing in the model nor in ``taken``
        (the names a stage has already given); the result is added to ``taken``."""
        used = taken | {v.name for v in self.variables} | {d.name for d in self.data} | {
            h.name for h in self.hypers} | {d.name for d in self.dims}
        name = base
        while name in used:
            name += "_"
        taken.add(name)
        return name

    def with_introduced(self, variables: list[VarDef], introduced: list[Introduced]) -> Model:
        """The model with ``variables`` in place of its own and ``introduced`` added to what
        earlier stages introduced (``cemodel.augment``); itself when nothing was."""
        if not introduced:
            return self
        return replace(self, variables=tuple(variables),
                       introduced=self.introduced + tuple(introduced))

    def introduced_for(self, name: str) -> Introduced | None:
        for item in self.introduced:
            if item.name == name:
                return item
        return None

    def var(self, name: str) -> VarDef:
        for var in self.variables:
            if var.name == name:
                return var
        raise KeyError(name)

    def plate(self, name: str) -> PlateDef:
        for plate in self.plates:
            if plate.name == name:
                return plate
        raise KeyError(name)

    def dim(self, name: str) -> DimDef:
        for dim in self.dims:
            if dim.name == name:
                return dim
        raise KeyError(name)

    def hyper(self, name: str) -> HyperDef:
        for hyper in self.hypers:
            if hyper.name == name:
                return hyper
        raise KeyError(name)

    def datum(self, name: str) -> DataDef:
        for datum in self.data:
            if datum.name == name:
                return datum
        raise KeyError(name)

    @property
    def latents(self) -> tuple[VarDef, ...]:
        return tuple(v for v in self.variables if not v.observed)

    @property
    def observed(self) -> tuple[VarDef, ...]:
        return tuple(v for v in self.variables if v.observed)

    def is_local(self, var: VarDef) -> bool:
        return self.data_plate is not None and bool(var.plates) and var.plates[0] == self.data_plate

    def family(self, var: VarDef) -> FamilySpec:
        return FAMILIES[var.family]


# ---------------------------------------------------------------------------
# Building
# ---------------------------------------------------------------------------

_HYPER_FUNCS = {"eye": 1, "zeros": 1, "ones": 1, "full": 2}
_EXPR_FUNCS = {"dot": 2, "exp": 1, "log": 1, "logistic": 1}
# families written F(a, K) (a scalar repeated along dimension K); False: only in that form
_REPEAT_FORMS = {"Dirichlet": True, "StickBreaking": False}
_DATA_KINDS = {"real": 0, "int": 0, "count": 0, "vector": 1}


@dataclass(frozen=True)
class _Scope:
    """The plates enclosing a statement, outermost first."""

    plates: tuple[PlateDef, ...]
    sums: tuple[tuple[str, str], ...] = ()  # (index, dim) of enclosing sum(... for k in K)

    def by_index(self, index: str) -> PlateDef | None:
        for plate in self.plates:
            if plate.index == index:
                return plate
        return None

    def sum_dim(self, index: str) -> str | None:
        for name, dim in self.sums:
            if name == index:
                return dim
        return None


class _Builder:
    def __init__(self, program: ast.Program) -> None:
        self.program = program
        self.source = program.source
        self.model_name: str | None = None
        self.collapse: ast.CollapseDecl | None = None
        self.dims: dict[str, DimDef] = {}
        self.hypers: dict[str, HyperDef] = {}
        self.data: dict[str, DataDef] = {}
        self.plates: dict[str, PlateDef] = {}
        # first pass: every random variable's declaration with its scope
        self.decls: dict[str, tuple[ast.Sample, _Scope]] = {}
        self.vars: dict[str, VarDef] = {}
        self.in_progress: list[str] = []
        self.index_data: dict[str, str] = {}  # int data used as an index -> its range (a dim)

    def error(self, message: str, span: Span, hint: str | None = None) -> CemModelError:
        return CemModelError(message, span, self.source, hint=hint)

    # -- names -------------------------------------------------------------
    def _all_names(self) -> dict[str, str]:
        names: dict[str, str] = {}
        for kind, table in (
            ("dimension", self.dims), ("hyperparameter", self.hypers), ("data", self.data),
        ):
            for name in table:
                names[name] = kind
        for name in self.decls:
            names[name] = "random variable"
        return names

    def _declare(self, name: str, span: Span) -> None:
        if name in self._all_names() or name in {p.name for p in self.plates.values()}:
            raise self.error(f"'{name}' is declared twice", span)
        if name in _HYPER_FUNCS or name in _EXPR_FUNCS:
            raise self.error(f"'{name}' is a built-in function and cannot be redeclared", span)

    # -- pass 1: declarations ---------------------------------------------
    def collect(self, statements: tuple[ast.Stmt, ...], scope: _Scope) -> None:
        for stmt in statements:
            if isinstance(stmt, ast.ModelDecl):
                if scope.plates:
                    raise self.error("'model' must be at the top level", stmt.span)
                if self.model_name is not None:
                    raise self.error("the model is named twice", stmt.span)
                self.model_name = stmt.name
            elif isinstance(stmt, ast.DimDecl):
                self._top_level_only(stmt, scope, "dim")
                self._declare(stmt.name, stmt.span)
                ragged = None
                if stmt.ragged_over is not None:
                    ragged = stmt.ragged_over.id
                    if ragged not in self.dims:
                        raise self.error(
                            f"unknown dimension '{ragged}'", stmt.ragged_over.span,
                            hint=did_you_mean(ragged, self.dims),
                        )
                    if stmt.default is not None:
                        raise self.error(
                            "a ragged dimension takes its lengths from the data; it has no default",
                            stmt.span,
                        )
                if stmt.default is not None and stmt.default < 1:
                    raise self.error("a dimension must be at least 1", stmt.span)
                self.dims[stmt.name] = DimDef(stmt.name, stmt.default, ragged, stmt.span)
            elif isinstance(stmt, ast.CollapseDecl):
                self._top_level_only(stmt, scope, "collapse")
                if self.collapse is not None:
                    raise self.error("the collapse set is given twice", stmt.span,
                                     hint=f"the first is on line {self.collapse.span.line}")
                self.collapse = stmt
            elif isinstance(stmt, ast.HyperDecl):
                self._top_level_only(stmt, scope, "hyper")
                self._declare(stmt.name, stmt.span)
                value = self.resolve_hyper_expr(stmt.value)
                self._check_hyper_range(stmt, value)
                self.hypers[stmt.name] = HyperDef(
                    stmt.name, value, self.hyper_shape(value), stmt.span
                )
            elif isinstance(stmt, ast.DataDecl):
                self._declare(stmt.name, stmt.span)
                self._check_target_indices(stmt.name, stmt.indices, scope, stmt.span)
                kind = stmt.type.name
                if kind not in _DATA_KINDS:
                    raise self.error(
                        f"unknown data type '{kind}'", stmt.type.span,
                        hint=did_you_mean(kind, _DATA_KINDS) or "use real, int or vector(P)",
                    )
                shape: Shape = ()
                if _DATA_KINDS[kind] == 1:
                    if stmt.type.arg is None or not isinstance(stmt.type.arg, ast.Name):
                        raise self.error("vector data needs its length: vector(P)", stmt.type.span)
                    shape = (self._dim_name(stmt.type.arg),)
                elif stmt.type.arg is not None:
                    raise self.error(f"'{kind}' takes no length", stmt.type.span)
                self.data[stmt.name] = DataDef(
                    stmt.name, tuple(p.name for p in scope.plates), kind, shape, stmt.span
                )
            elif isinstance(stmt, ast.Plate):
                plate = self._plate(stmt, scope)
                self.collect(stmt.body, _Scope(scope.plates + (plate,)))
            elif isinstance(stmt, ast.Sample):
                name = stmt.target.name
                self._declare(name, stmt.target.span)
                self._check_target_indices(name, stmt.target.indices, scope, stmt.target.span)
                self.decls[name] = (stmt, scope)

    def _check_hyper_range(self, stmt: ast.HyperDecl, value: RExpr) -> None:
        """A number the file gives a hyperparameter (a scalar, or the entries of a vector
        literal) whose prior cannot be represented is refused here, not by a fit gone NaN."""
        items = value.items if isinstance(value, RVector) else (value,)
        for item in items:
            number = self.constant(item)
            if number is None:
                continue
            try:
                check_hyper_values(f"hyperparameter '{stmt.name}'", np.array(number))
            except CemOptionError as exc:
                raise self.error(exc.message, stmt.value.span,
                                 hint="rescale the model (and its data) so that the "
                                      "hyperparameters are nearer 1") from None

    def _top_level_only(self, stmt: ast.Stmt, scope: _Scope, word: str) -> None:
        if scope.plates:
            raise self.error(f"'{word}' declarations belong at the top level, not inside a plate",
                             stmt.span)

    def _dim_name(self, name: ast.Name) -> str:
        if name.id not in self.dims:
            raise self.error(
                f"unknown dimension '{name.id}'", name.span,
                hint=did_you_mean(name.id, self.dims) or f"declare it with 'dim {name.id}'",
            )
        return name.id

    def _plate(self, stmt: ast.Plate, scope: _Scope) -> PlateDef:
        if stmt.name in self.plates:
            raise self.error(f"plate '{stmt.name}' is declared twice", stmt.span)
        if scope.by_index(stmt.index) is not None:
            raise self.error(
                f"index '{stmt.index}' is already the index of an enclosing plate", stmt.span
            )
        if stmt.size is None:
            raise self.error(
                f"plate '{stmt.name}' needs a size: plate {stmt.name} {stmt.index} in DIM:",
                stmt.span,
            )
        dim = self._dim_name(stmt.size.dim)
        dim_def = self.dims[dim]
        parent = scope.plates[-1] if scope.plates else None
        ragged = dim_def.ragged_over is not None
        if ragged:
            if stmt.size.ragged_index is None:
                raise self.error(
                    f"'{dim}' is ragged (one length per {dim_def.ragged_over}); "
                    f"write it as {dim}[index]", stmt.size.span,
                )
            if parent is None or stmt.size.ragged_index.id != parent.index:
                raise self.error(
                    "a ragged plate must be indexed by the index of the plate that directly "
                    "encloses it", stmt.size.ragged_index.span,
                )
            if parent.dim != dim_def.ragged_over:
                raise self.error(
                    f"'{dim}' has one length per element of '{dim_def.ragged_over}', but the "
                    f"enclosing plate '{parent.name}' runs over '{parent.dim}'", stmt.size.span,
                )
            if parent.parent is not None:
                raise self.error(
                    "a ragged plate must sit directly inside a top-level plate", stmt.span
                )
        elif stmt.size.ragged_index is not None:
            raise self.error(
                f"'{dim}' is not ragged; declare it as 'dim {dim}[...]' to give each element "
                "its own length", stmt.size.span,
            )
        plate = PlateDef(stmt.name, stmt.index, dim, ragged, parent.name if parent else None,
                         stmt.span)
        self.plates[stmt.name] = plate
        return plate

    def _check_target_indices(
        self, name: str, indices: tuple[ast.Name, ...], scope: _Scope, span: Span
    ) -> None:
        expected = tuple(p.index for p in scope.plates)
        found = tuple(i.id for i in indices)
        if found != expected:
            where = ", ".join(f"{p.name}({p.index})" for p in scope.plates)
            written = f"{name}[{', '.join(expected)}]" if expected else name
            if not expected:
                message = f"'{name}' is declared outside any plate and takes no indices"
            else:
                message = (
                    f"'{name}' is declared inside plates {where} and must be indexed by exactly "
                    f"their indices, in order"
                )
            raise self.error(message, span, hint=f"write {written}")

    # -- hyperparameter expressions ---------------------------------------
    def resolve_hyper_expr(self, expr: ast.Expr) -> RExpr:
        if isinstance(expr, ast.Number):
            return RConst(expr.value, expr.span)
        if isinstance(expr, ast.Name):
            if expr.id in self.hypers:
                return RHyper(expr.id, expr.span)
            if expr.id in self.dims:
                return RDimSize(expr.id, expr.span)
            raise self.error(
                f"unknown name '{expr.id}' in a hyperparameter", expr.span,
                hint=did_you_mean(expr.id, list(self.hypers) + list(self.dims))
                or "hyperparameters may use numbers, earlier hyperparameters and dimensions",
            )
        if isinstance(expr, ast.VectorLit):
            items = tuple(self.resolve_hyper_expr(i) for i in expr.items)
            for item in items:
                if self.hyper_shape(item) != ():
                    raise self.error("vector literals hold numbers", item.span)
            return RVector(items, expr.span)
        if isinstance(expr, ast.Neg):
            return RNeg(self.resolve_hyper_expr(expr.operand), expr.span)
        if isinstance(expr, ast.BinOp):
            left = self.resolve_hyper_expr(expr.left)
            right = self.resolve_hyper_expr(expr.right)
            self._broadcast(self.hyper_shape(left), self.hyper_shape(right), expr.span)
            self._check_divisor(expr.op, right)
            return RBin(expr.op, left, right, expr.span)
        if isinstance(expr, ast.Call):
            func = expr.func.id
            if func not in _HYPER_FUNCS:
                raise self.error(
                    f"unknown function '{func}' in a hyperparameter", expr.func.span,
                    hint=did_you_mean(func, _HYPER_FUNCS)
                    or "use eye(D), zeros(D), ones(D) or full(D, value)",
                )
            if len(expr.args) != _HYPER_FUNCS[func]:
                raise self.error(
                    f"{func}() takes {_HYPER_FUNCS[func]} argument(s), got {len(expr.args)}",
                    expr.span,
                )
            size = expr.args[0]
            if isinstance(size, ast.Name) and size.id in self.dims:
                first: RExpr = RDimSize(size.id, size.span)
            elif isinstance(size, ast.Number) and size.is_int:
                first = RConst(size.value, size.span)
            else:
                raise self.error(f"the first argument of {func}() is a dimension", size.span)
            rest = tuple(self.resolve_hyper_expr(a) for a in expr.args[1:])
            return RCall(func, (first,) + rest, expr.span)
        raise self.error("this expression is not allowed in a hyperparameter", expr.span)

    def hyper_shape(self, expr: RExpr) -> Shape:
        if isinstance(expr, (RConst, RDimSize)):
            return ()
        if isinstance(expr, RHyper):
            return self.hypers[expr.name].shape
        if isinstance(expr, RVector):
            return (len(expr.items),)
        if isinstance(expr, RNeg):
            return self.hyper_shape(expr.operand)
        if isinstance(expr, RBin):
            return self._broadcast(self.hyper_shape(expr.left), self.hyper_shape(expr.right),
                                   expr.span)
        if isinstance(expr, RCall):
            size = _size_of(expr.args[0])
            return (size, size) if expr.func == "eye" else (size,)
        raise AssertionError(expr)

    def constant(self, expr: RExpr) -> float | None:
        """The value of a scalar expression the model file fixes (numbers and scalar
        hyperparameters); None when it depends on dimensions, data or random variables."""
        if isinstance(expr, RConst):
            return expr.value
        if isinstance(expr, RHyper):
            hyper = self.hypers[expr.name]
            return self.constant(hyper.value) if hyper.shape == () else None
        if isinstance(expr, RNeg):
            value = self.constant(expr.operand)
            return None if value is None else -value
        if isinstance(expr, RBin):
            a, b = self.constant(expr.left), self.constant(expr.right)
            if a is None or b is None:
                return None
            if expr.op == "/":
                return a / b if b != 0 else None
            return {"+": a + b, "-": a - b, "*": a * b}[expr.op]
        return None

    def _check_divisor(self, op: str, right: RExpr) -> None:
        if op == "/" and self.constant(right) == 0:
            raise self.error("division by zero", right.span,
                             hint="the divisor of this expression is always 0")

    def _check_domain(self, family: FamilySpec, param: Param, value: RExpr, span: Span) -> None:
        """A parameter the model file fixes to a value outside its domain (``Beta(0, 1)``,
        ``Gamma(a, b)`` with ``hyper b = -1``, ``Dirichlet(zeros(K))``, a shape of 1e-20) is
        refused here."""
        if param.domain != "positive":
            return
        param_name = param.name
        hint = None
        if isinstance(value, RRepeat):
            value = value.value
        if isinstance(value, RHyper):
            line = self.hypers[value.name].span.line
            hint = f"'{value.name}' is set on line {line}; give it a positive value"
            if self.hypers[value.name].shape:
                value = self.hypers[value.name].value
        if isinstance(value, RVector):
            items = list(value.items)
        elif isinstance(value, RCall) and value.func == "zeros":
            items = [RConst(0.0, value.span)]
        elif isinstance(value, RCall) and value.func == "full":
            items = [value.args[1]]
        else:
            items = [value]
        for item in items:
            number = self.constant(item)
            if number is not None and not number > 0:
                raise self.error(
                    f"the {param_name} of {family.name} must be positive, found {number:g}",
                    span, hint=hint,
                )
            if number is not None and number < param.smallest:
                raise self.error(
                    f"the {param_name} of {family.name} must be at least {param.smallest:.3g} "
                    f"(it is held as {param_name} − 1 in double precision), found {number:g}",
                    span, hint=hint and hint.replace("a positive value",
                                                     f"a value of at least {param.smallest:.3g}"),
                )

    def _broadcast(self, a: Shape, b: Shape, span: Span) -> Shape:
        if a == ():
            return b
        if b == () or a == b:
            return a
        raise self.error(f"shape mismatch: {_show(a)} and {_show(b)}", span,
                         hint=_literal_size_hint(a, b))

    # -- pass 2: random variables -------------------------------------------
    def build_var(self, name: str) -> VarDef:
        if name in self.vars:
            return self.vars[name]
        stmt, scope = self.decls[name]
        if name in self.in_progress:
            cycle = " -> ".join(self.in_progress[self.in_progress.index(name):] + [name])
            raise self.error(f"the model has a cycle: {cycle}", stmt.target.span)
        self.in_progress.append(name)
        family = FAMILIES.get(stmt.dist.id)
        writable = sorted(WRITABLE)
        if family is None:
            raise self.error(
                f"unknown distribution '{stmt.dist.id}'", stmt.dist.span,
                hint=did_you_mean(stmt.dist.id, writable)
                or "known: " + ", ".join(sorted({FAMILIES[n].name for n in writable})),
            )
        if not stmt.observed and family.variational is None:
            raise self.error(
                f"a {family.name} variable must be observed: it has no conjugate variational "
                f"family in cemodel", stmt.span,
                hint=f"write 'observe {stmt.target.name}...' if it is data{family.latent_hint}",
            )
        args = self._family_args(family, stmt, scope)
        shape, categories = self._event(family, args, stmt)
        var = VarDef(
            name, tuple(p.name for p in scope.plates), family.name, args, stmt.observed,
            shape, categories, stmt.span, stmt.dist.span,
        )
        self.in_progress.pop()
        self.vars[name] = var
        return var

    def _family_args(self, family: FamilySpec, stmt: ast.Sample, scope: _Scope) -> tuple:
        args = stmt.args
        nparams = len(family.params)
        usage = f"{family.name}({', '.join(p.name for p in family.params)})"
        if family.name in _REPEAT_FORMS and len(args) == 2:
            # Dirichlet(a, K): a symmetric Dirichlet of size K (StickBreaking(a, K): K sticks)
            size = args[1]
            if not isinstance(size, ast.Name) or size.id not in self.dims:
                raise self.error(
                    f"the second argument of {family.name}(a, K) is a dimension", size.span,
                    hint=did_you_mean(size.id, self.dims) if isinstance(size, ast.Name) else
                    f"declare one ('dim K = 10') and write {family.name}(a, K)",
                )
            value = self.resolve_expr(args[0], scope)
            if self.shape_of(value) != ():
                raise self.error(f"{family.name}(a, K) takes a scalar a", args[0].span)
            param = family.params[0]
            self._check_domain(family, Param("a", 0, param.domain, param.smallest), value,
                               args[0].span)
            return (RRepeat(value, size.id, stmt.span),)
        if _REPEAT_FORMS.get(family.name) is False:  # StickBreaking(a, K) only
            raise self.error(f"{family.name} takes 2 arguments (a, K), got {len(args)}",
                             stmt.dist.span, hint=f"write {family.name}(a, K), K a dimension")
        if len(args) != nparams:
            extra = " or Dirichlet(a, K)" if family.name == "Dirichlet" else ""
            raise self.error(
                f"{family.name} takes {nparams} argument(s), got {len(args)}", stmt.dist.span,
                hint=f"write {usage}{extra}",
            )
        resolved = []
        for param, arg in zip(family.params, args, strict=True):
            value = self._whole_matrix(family, param, arg) or self.resolve_expr(arg, scope)
            rank = len(self.matrix_shape(value))
            if rank != param.rank:
                kinds = {0: "a scalar", 1: "a vector", 2: "a matrix"}
                raise self.error(
                    f"the {param.name} of {family.name} must be {kinds[param.rank]}, "
                    f"found {kinds.get(rank, 'an array')} of shape "
                    f"{_show(self.matrix_shape(value))}", arg.span,
                )
            self._check_domain(family, param, value, arg.span)
            resolved.append(value)
        return tuple(resolved)

    def _whole_matrix(self, family: FamilySpec, param: Param, arg: ast.Expr) -> RVar | None:
        """``MarkovChain(pi0, A)``: a variable with one plate, named without indices where a
        chain expects an array one rank above its value, is that array (row = its plate):
        a matrix of vectors ``A[k]``, a vector of scalars ``noise[i]``."""
        if (family.name not in CHAIN_FAMILIES or param.rank == 0
                or not isinstance(arg, ast.Name)):
            return None
        if arg.id not in self.decls:
            return None
        var = self.build_var(arg.id)
        if not var.plates:
            return None
        if len(var.plates) != 1 or len(var.shape) != param.rank - 1:
            what, value = (("a K × K matrix", "a vector value") if param.rank == 2 else
                           ("a vector", "a scalar value"))
            raise self.error(
                f"the {param.name} of {family.name} is {what}: '{arg.id}' would need one "
                f"plate and {value}, but it has {len(var.plates)} plate(s) and shape "
                f"{_show(var.shape)}", arg.span,
            )
        return RVar(arg.id, (), arg.span)

    def matrix_shape(self, expr: RExpr) -> Shape:
        """``shape_of``, where a whole plated variable (``A`` for A[k]) has its plate first."""
        if isinstance(expr, RVar) and not expr.indices:
            var = self.build_var(expr.name)
            if var.plates:
                return (self.plates[var.plates[0]].dim, *var.shape)
        return self.shape_of(expr)

    def _event(self, family: FamilySpec, args: tuple, stmt: ast.Sample):
        by_name = dict(zip((p.name for p in family.params), args, strict=True))
        if family.name == "MarkovChain":
            init, transition = self.shape_of(by_name["init"]), self.matrix_shape(
                by_name["transition"])
            if transition != (init[0], init[0]):
                raise self.error(
                    f"shape mismatch: init has length {_show(init)} but the transition matrix "
                    f"is {_show(transition)}; it must be K × K", stmt.span,
                )
        if family.name == "MultivariateNormal":
            m, p = self.shape_of(by_name["mean"]), self.shape_of(by_name["precision"])
            if p != (m[0], m[0]):
                raise self.error(
                    f"shape mismatch: mean has length {_show(m)} but precision is {_show(p)}",
                    stmt.span, hint=_literal_size_hint(m, p),
                )
        if family.variational == "gaussian_chain":  # GaussianChain, GaussianChainDiag
            m = self.shape_of(by_name["init_mean"])
            for param in family.params[1:]:
                want = (m[0],) * param.rank
                if self.matrix_shape(by_name[param.name]) != want:
                    raise self.error(
                        f"shape mismatch: init_mean has length {_show(m)} but the {param.name} "
                        f"of {family.name} is {_show(self.matrix_shape(by_name[param.name]))}; "
                        f"it must be {_show(want)}", stmt.span)
        if family.name == "Wishart":
            s = self.shape_of(by_name["scale"])
            if s[0] != s[1]:
                raise self.error(f"the Wishart scale must be square, found {_show(s)}", stmt.span)
        if family.shape_from is None:
            return (), None
        shape = self.shape_of(by_name[family.shape_from])
        if family.support == "category":
            return (), shape[0]
        return shape, None

    def resolve_expr(self, expr: ast.Expr, scope: _Scope) -> RExpr:
        if isinstance(expr, ast.Number):
            return RConst(expr.value, expr.span)
        if isinstance(expr, ast.Name):
            return self._resolve_ref(expr, (), expr.span, scope)
        if isinstance(expr, ast.Index):
            return self._resolve_ref(expr.base, expr.indices, expr.span, scope)
        if isinstance(expr, ast.Neg):
            return RNeg(self.resolve_expr(expr.operand, scope), expr.span)
        if isinstance(expr, ast.BinOp):
            left = self.resolve_expr(expr.left, scope)
            right = self.resolve_expr(expr.right, scope)
            self._check_divisor(expr.op, right)
            if expr.op in "*/" and self.shape_of(left) and self.shape_of(right):
                raise self.error(
                    f"'{expr.op}' multiplies a scalar with a scalar or an array; "
                    "use dot(a, b) for the inner product of vectors", expr.span,
                )
            if expr.op in "+-":
                self._broadcast(self.shape_of(left), self.shape_of(right), expr.span)
            return RBin(expr.op, left, right, expr.span)
        if isinstance(expr, ast.Call):
            func = expr.func.id
            if func in _HYPER_FUNCS:
                return self.resolve_hyper_expr(expr)
            if func not in _EXPR_FUNCS:
                raise self.error(
                    f"unknown function '{func}'", expr.func.span,
                    hint=did_you_mean(func, list(_EXPR_FUNCS) + list(_HYPER_FUNCS)),
                )
            if len(expr.args) != _EXPR_FUNCS[func]:
                raise self.error(
                    f"{func}() takes {_EXPR_FUNCS[func]} argument(s), got {len(expr.args)}",
                    expr.span,
                )
            args = tuple(self.resolve_expr(a, scope) for a in expr.args)
            if func == "dot":
                a, b = (self.shape_of(x) for x in args)
                if len(a) != 1 or a != b:
                    raise self.error(
                        f"dot() takes two vectors of the same length, found {_show(a)} and "
                        f"{_show(b)}", expr.span,
                    )
            return RCall(func, args, expr.span)
        if isinstance(expr, ast.VectorLit):
            return self.resolve_hyper_expr(expr)
        if isinstance(expr, ast.Reduce):
            return self._resolve_sum(expr, scope)
        raise AssertionError(expr)

    def _resolve_sum(self, expr: ast.Reduce, scope: _Scope) -> RSum:
        """``sum(body for k in K)``; the index ``k`` is new and runs over dimension ``K``."""
        if expr.func.id != "sum":
            raise self.error(
                f"unknown reduction '{expr.func.id}(... for ...)'", expr.func.span,
                hint="only sum(body for k in K) is supported",
            )
        index = expr.index.id
        if scope.by_index(index) is not None or scope.sum_dim(index) is not None:
            raise self.error(f"index '{index}' is already the index of an enclosing plate or "
                             "sum", expr.index.span, hint="give the sum its own index name")
        if index in self._all_names() or index in self.dims:
            raise self.error(f"'{index}' is already the name of a {self._all_names()[index]}; "
                             "a sum needs a new index name", expr.index.span)
        dim = self._dim_name(expr.dim)
        if self.dims[dim].ragged_over is not None:
            raise self.error(f"a sum runs over a fixed dimension; '{dim}' is ragged",
                             expr.dim.span)
        inner = _Scope(scope.plates, scope.sums + ((index, dim),))
        body = self.resolve_expr(expr.body, inner)
        if self.shape_of(body) != ():
            raise self.error("the body of sum(... for k in K) must be a scalar, found shape "
                             f"{_show(self.shape_of(body))}", expr.body.span)
        if not _mentions_sum_index(body, index):
            raise self.error(f"the body of this sum does not use its index '{index}'",
                             expr.body.span, hint=f"multiply by {dim} instead of summing")
        return RSum(index, dim, body, expr.span)

    def _resolve_ref(
        self, base: ast.Name, indices: tuple[ast.Expr, ...], span: Span, scope: _Scope
    ) -> RExpr:
        name = base.id
        if name in self.hypers:
            if indices:
                plate = scope.plates[-1] if scope.plates else None
                where = f"plate {plate.name}" if plate else "the plate it varies over"
                index = plate.index if plate else "k"
                raise self.error(
                    f"hyperparameter '{name}' takes no indices: a hyperparameter is used "
                    "whole", span,
                    hint=f"for one value per element of a plate, declare it as data in "
                         f"{where} ('data {name}[{index}] : real') and pass it with the data")
            return RHyper(name, base.span)
        if name in self.dims:
            if indices:
                raise self.error(f"dimension '{name}' takes no indices", span)
            return RDimSize(name, base.span)
        if scope.by_index(name) is not None or scope.sum_dim(name) is not None:
            kind = "plate" if scope.by_index(name) is not None else "sum"
            raise self.error(
                f"'{name}' is a {kind} index; it can only appear inside [...]", base.span
            )
        if name in self.data:
            datum = self.data[name]
            plates = self._resolve_indices(name, datum.plates, indices, span, scope, gates=False)
            return RData(name, plates, span)
        if name in self.decls:
            var = self.build_var(name)
            resolved = self._resolve_indices(name, var.plates, indices, span, scope, gates=True)
            return RVar(name, resolved, span)
        raise self.error(
            f"unknown name '{name}'", base.span,
            hint=did_you_mean(name, list(self._all_names()) + [p.index for p in scope.plates]),
        )

    def _resolve_indices(
        self, name: str, plates: tuple[str, ...], indices: tuple[ast.Expr, ...], span: Span,
        scope: _Scope, gates: bool,
    ) -> tuple:
        if len(indices) != len(plates):
            want = ", ".join(self.plates[p].index for p in plates)
            vector = name in self.data and self.data[name].shape and len(indices) > len(plates)
            raise self.error(
                f"'{name}' has {len(plates)} index(es) ({want or 'none'}), "
                f"but {len(indices)} given", span,
                hint="a vector datum is used whole (dot(w, x[n])); to take its entries at a "
                     "sum's index, declare them in a plate: plate cols j in K:, then "
                     "data x[n, j] : real" if vector else None,
            )
        resolved = []
        for plate_name, index in zip(plates, indices, strict=True):
            plate = self.plates[plate_name]
            sum_dim = scope.sum_dim(index.id) if isinstance(index, ast.Name) else None
            if sum_dim is not None:
                if sum_dim != plate.dim or plate.ragged:
                    raise self.error(
                        f"sum index '{index.id}' runs over {sum_dim}, but this position of "
                        f"'{name}' runs over plate '{plate.name}' ({plate.dim})", index.span,
                    )
                resolved.append(SumIndex(index.id, index.span))
                continue
            if isinstance(index, ast.Name) and scope.by_index(index.id) is not None:
                used = scope.by_index(index.id)
                # another plate over the same (non-ragged) dimension indexes it too
                same_dim = used.dim == plate.dim and not used.ragged and not plate.ragged
                if used.name != plate.name and not same_dim:
                    raise self.error(
                        f"index '{index.id}' runs over plate '{used.name}' ({used.dim}), but "
                        f"this position of '{name}' runs over plate '{plate.name}' ({plate.dim})",
                        index.span,
                        hint=f"use '{plate.index}' here, inside plate {plate.name}"
                        if scope.by_index(plate.index) else None,
                    )
                resolved.append(PlateIndex(used.name, index.span))
                continue
            if isinstance(index, ast.Name) and index.id not in self.decls:
                raise self.error(
                    f"'{index.id}' is not the index of an enclosing plate", index.span,
                    hint=did_you_mean(index.id, [p.index for p in scope.plates]),
                )
            if not gates:
                raise self.error("data can only be indexed by plate indices", index.span)
            gate = self.resolve_expr(index, scope)
            if isinstance(gate, RData):
                # an observed group label selects an element: lam[group[n]]
                datum = self.data[gate.name]
                if datum.kind not in ("int", "count") or datum.shape:
                    raise self.error(
                        f"'{gate.name}' indexes '{name}' but is {datum.kind} data; an index "
                        "must be declared 'int'", index.span,
                    )
                if plate.ragged:
                    raise self.error("data cannot select along a ragged plate", index.span)
                if any(isinstance(i, SumIndex) for i in gate.indices):
                    raise self.error(
                        f"'{gate.name}' selects an element of '{name}' and takes a sum's "
                        "index: a selection that varies along a sum is not supported",
                        index.span, hint="sum over the selected plate instead, with the "
                        "membership as 0/1 data: sum(m[n, g] * lam[g] for g in G)")
                self.index_data[gate.name] = plate.dim
                resolved.append(GateIndex(gate, index.span))
                continue
            if not isinstance(gate, RVar) or self.build_var(gate.name).categories is None:
                raise self.error(
                    "an index must be a plate index or a categorical variable", index.span
                )
            if any(isinstance(i, GateIndex) for i in gate.indices):
                raise self.error("a categorical index may not itself be gated", index.span)
            cats = self.build_var(gate.name).categories
            if plate.ragged:
                raise self.error("a categorical cannot select along a ragged plate", index.span)
            if cats != plate.dim:
                raise self.error(
                    f"shape mismatch: '{gate.name}' takes {cats} values but plate '{plate.name}' "
                    f"of '{name}' has {plate.dim} elements", index.span,
                    hint=_literal_size_hint((cats,), (plate.dim,)),
                )
            resolved.append(GateIndex(gate, index.span))
        return tuple(resolved)

    def shape_of(self, expr: RExpr) -> Shape:
        if isinstance(expr, (RConst, RDimSize)):
            return ()
        if isinstance(expr, RHyper):
            return self.hypers[expr.name].shape
        if isinstance(expr, RVar):
            return self.build_var(expr.name).shape
        if isinstance(expr, RData):
            return self.data[expr.name].shape
        if isinstance(expr, RRepeat):
            return (expr.dim,)
        if isinstance(expr, RVector):
            return (len(expr.items),)
        if isinstance(expr, RNeg):
            return self.shape_of(expr.operand)
        if isinstance(expr, RBin):
            return self._broadcast(self.shape_of(expr.left), self.shape_of(expr.right), expr.span)
        if isinstance(expr, RCall):
            if expr.func == "dot":
                return ()
            if expr.func in ("exp", "log", "logistic"):
                return self.shape_of(expr.args[0])
            return self.hyper_shape(expr)
        if isinstance(expr, RSum):
            return ()
        raise AssertionError(expr)

    # -- driver -------------------------------------------------------------
    def build(self) -> Model:
        self.collect(self.program.statements, _Scope(()))
        if self.model_name is None:
            raise self.error("the file does not name its model", Span(1, 1, 1, 2),
                             hint="start it with 'model NAME'")
        for name in self.decls:
            self.build_var(name)
        variables = tuple(self.vars[name] for name in self.decls)
        if not any(v.observed for v in variables):
            raise self.error("the model observes nothing", Span(1, 1, 1, 2),
                             hint="mark the data with 'observe x ~ ...'")
        data_plate = self._data_plate(variables)
        for var in variables:
            if var.family in CHAIN_FAMILIES:
                self._check_chain(var, data_plate)
        data = tuple(replace(d, index_range=self.index_data.get(d.name)) for d in
                     self.data.values())
        collapse = None
        if self.collapse is not None:
            collapse = tuple(self._collapsed_name(n) for n in self.collapse.names)
        return Model(
            self.model_name, self.source, tuple(self.dims.values()), tuple(self.hypers.values()),
            data, tuple(self.plates.values()), variables, data_plate, collapse,
            None if self.collapse is None else self.collapse.span,
        )

    def _check_chain(self, var: VarDef, data_plate: str | None) -> None:
        """A chain runs along a plate directly inside the data plate (its sequences), so that
        each item of the local step holds whole chains."""
        if var.observed:
            raise self.error(f"an observed {var.family} is not supported; observe the "
                             "emissions of a latent chain instead", var.span)
        inner = self.plates[var.plates[-1]] if var.plates else None
        if (data_plate is None or len(var.plates) != 2 or var.plates[0] != data_plate
                or inner is None or inner.parent != data_plate):
            raise self.error(
                f"{var.family} '{var.name}' must sit in a plate of time steps directly inside "
                f"the data plate of sequences: plate seqs s in S: plate steps t in T[s]: "
                f"{var.name}[s, t] ~ {var.family}(...)", var.span,
                hint="the sequences are the items of the local step; each holds whole chains",
            )

    def _collapsed_name(self, name: ast.Name) -> str:
        """A name of ``collapse``: a latent variable of the model."""
        if name.id not in self.vars:
            latent = [n for n, v in self.vars.items() if not v.observed]
            raise self.error(f"'{name.id}' in collapse is not a variable of the model",
                             name.span, hint=did_you_mean(name.id, latent))
        if self.vars[name.id].observed:
            raise self.error(f"'{name.id}' is observed; only latent variables are collapsed",
                             name.span)
        return name.id

    def _data_plate(self, variables: tuple[VarDef, ...]) -> str | None:
        """The one top-level plate that holds observations (SVI subsamples over it)."""
        tops = {v.plates[0] for v in variables if v.observed and v.plates}
        if any(v.observed and not v.plates for v in variables) or len(tops) != 1:
            return None
        return next(iter(tops))


def _mentions_sum_index(expr: RExpr, index: str) -> bool:
    if isinstance(expr, RVar):
        return any(isinstance(i, SumIndex) and i.name == index for i in expr.indices)
    return any(_mentions_sum_index(child, index) for child in sub_exprs(expr))


def sub_exprs(expr: RExpr) -> tuple[RExpr, ...]:
    """The expressions directly inside ``expr``."""
    if isinstance(expr, RBin):
        return (expr.left, expr.right)
    if isinstance(expr, RNeg):
        return (expr.operand,)
    if isinstance(expr, (RCall, RVector)):
        return expr.args if isinstance(expr, RCall) else expr.items
    if isinstance(expr, RRepeat):
        return (expr.value,)
    if isinstance(expr, RSum):
        return (expr.body,)
    return ()


def data_refs(expr: RExpr) -> list[RData]:
    """The covariate references (``data``) inside ``expr``, in order."""
    if isinstance(expr, RData):
        return [expr]
    return [r for child in sub_exprs(expr) for r in data_refs(child)]


def _size_of(expr: RExpr) -> ShapeDim:
    if isinstance(expr, RDimSize):
        return expr.name
    if isinstance(expr, RConst):
        return int(expr.value)
    raise AssertionError(expr)


def _literal_size_hint(*shapes: Shape) -> str | None:
    """When a literal length (a vector hyperparameter [1, 2, 3]) meets a dimension: the
    dimension may be set to another size, so the two are never taken as equal."""
    sizes = [s for shape in shapes for s in shape]
    dims = [s for s in sizes if isinstance(s, str)]
    if not dims or not any(isinstance(s, int) for s in sizes):
        return None
    return (f"a literal vector has a fixed length, and {dims[0]} may be set to another size: "
            f"declare the hyperparameter over {dims[0]} (ones({dims[0]}), "
            f"full({dims[0]}, x), eye({dims[0]})) and give its values with "
            "fit(..., hypers={...})")


def _show(shape: Shape) -> str:
    return "(" + ", ".join(str(s) for s in shape) + ")" if shape else "scalar"


def build_model(program: ast.Program) -> Model:
    """Resolve a parsed program into a ``Model``; raises ``CemModelError``."""
    return _Builder(program).build()


# ---------------------------------------------------------------------------
# The graph view
# ---------------------------------------------------------------------------


def expr_vars(expr: RExpr) -> list[tuple[str, str]]:
    """(variable, how) pairs for every random variable an expression mentions."""
    found: list[tuple[str, str]] = []
    if isinstance(expr, RVar):
        found.append((expr.name, "direct"))
        for index in expr.indices:
            if isinstance(index, GateIndex):
                found.append((index.var.name, "gate"))
    else:
        for child in sub_exprs(expr):
            found += expr_vars(child)
    return found


def model_graph(model: Model) -> nx.DiGraph:
    """One node per random variable (family, plates, observed); an edge per dependency."""
    graph = nx.DiGraph(name=model.name)
    for var in model.variables:
        graph.add_node(
            var.name, family=var.family, plates=var.plates, observed=var.observed,
            local=model.is_local(var),
        )
    for var in model.variables:
        family = model.family(var)
        for param, arg in zip(family.params, var.args, strict=True):
            for parent, how in expr_vars(arg):
                role = "gate" if how == "gate" else param.name
                if graph.has_edge(parent, var.name):
                    roles = graph.edges[parent, var.name]["roles"]
                    graph.edges[parent, var.name]["roles"] = tuple(sorted(set(roles) | {role}))
                else:
                    graph.add_edge(parent, var.name, roles=(role,))
    return graph
