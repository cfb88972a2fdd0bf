"""Stage 2, pass 2 of ``resolve``: each random variable's declaration resolved into a
``VarDef``, its arguments' expressions with their shapes, indices and event shapes.

``VariableResolution`` is the second half of ``resolve._Builder`` (a mixin): pass 1 has
collected the dimensions, hyperparameters, data, plates and declarations it reads, and the
builder resolves hyperparameter expressions for it (``resolve_hyper_expr``, ``hyper_shape``,
``constant``, ``_broadcast``, ``_check_domain``).
"""

from __future__ import annotations

from dataclasses import dataclass

from . import syntax as ast
from .errors import Source, Span, did_you_mean
from .families import CHAIN_FAMILIES, FAMILIES, WRITABLE, FamilySpec
from .families.base import Param
from .model import (
    DataDef,
    DimDef,
    GateIndex,
    HyperDef,
    PlateDef,
    PlateIndex,
    RBin,
    RCall,
    RConst,
    RData,
    RDimSize,
    RExpr,
    RHyper,
    RNeg,
    RRepeat,
    RSum,
    RVar,
    RVector,
    Shape,
    ShapeDim,
    SumIndex,
    VarDef,
    sub_exprs,
)

HYPER_FUNCS = {"eye": 1, "zeros": 1, "ones": 1, "full": 2}
EXPR_FUNCS = {"dot": 2, "exp": 1, "log": 1, "logistic": 1}
# families written F(a, K) (a scalar repeated along dimension K); False: only in that form
_REPEAT_FORMS = {"Dirichlet": True, "StickBreaking": False}


@dataclass(frozen=True)
class Scope:
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


class VariableResolution:
    """Pass 2 of the builder: random variables and the expressions in their arguments."""

    source: Source
    dims: dict[str, DimDef]
    hypers: dict[str, HyperDef]
    data: dict[str, DataDef]
    plates: dict[str, PlateDef]
    decls: dict[str, tuple[ast.Sample, Scope]]
    vars: dict[str, VarDef]
    in_progress: list[str]
    index_data: dict[str, str]

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

    def _family_args(self, family: FamilySpec, stmt: ast.Sample, scope: Scope) -> tuple:
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
                    f"{show_shape(self.matrix_shape(value))}", arg.span,
                )
            self._check_domain(family, param, value, arg.span)
            resolved.append(value)
        if family.name == "Wishart":
            self._check_wishart_dof(resolved[0], resolved[1], args[0].span)
        return tuple(resolved)

    def _check_wishart_dof(self, dof: RExpr, scale: RExpr, span) -> None:
        """ν > D − 1 where the file fixes both (a Wishart(1.0, eye(2)) has no density)."""
        number = self.constant(dof)
        sizes = [self.dims[d].default if isinstance(d, str) and d in self.dims else None
                 for d in self.matrix_shape(scale)]
        if number is None or not sizes or sizes[-1] is None:
            return
        if not number > sizes[-1] - 1:
            raise self.error(
                f"the dof of Wishart must be above D − 1 = {sizes[-1] - 1} for a "
                f"{sizes[-1]} × {sizes[-1]} scale, found {number:g}", span,
                hint=f"a dof of at least {sizes[-1]} (D) is the usual weakest prior")

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
                f"{show_shape(var.shape)}", arg.span,
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
                    f"shape mismatch: init has length {show_shape(init)} but the transition matrix "
                    f"is {show_shape(transition)}; it must be K × K", stmt.span,
                )
        if family.name == "MultivariateNormal":
            m, p = self.shape_of(by_name["mean"]), self.shape_of(by_name["precision"])
            if p != (m[0], m[0]):
                raise self.error(
                    f"shape mismatch: mean has length {show_shape(m)} but precision is "
                    f"{show_shape(p)}",
                    stmt.span, hint=literal_size_hint(m, p),
                )
        if family.variational == "gaussian_chain":  # GaussianChain, GaussianChainDiag
            m = self.shape_of(by_name["init_mean"])
            for param in family.params[1:]:
                want = (m[0],) * param.rank
                if self.matrix_shape(by_name[param.name]) != want:
                    found = self.matrix_shape(by_name[param.name])
                    raise self.error(
                        f"shape mismatch: init_mean has length {show_shape(m)} but the "
                        f"{param.name} of {family.name} is {show_shape(found)}; "
                        f"it must be {show_shape(want)}", stmt.span)
        if family.name == "Wishart":
            s = self.shape_of(by_name["scale"])
            if s[0] != s[1]:
                raise self.error(f"the Wishart scale must be square, found {show_shape(s)}",
                                 stmt.span)
        if family.shape_from is None:
            return (), None
        shape = self.shape_of(by_name[family.shape_from])
        if family.support == "category":
            return (), shape[0]
        return shape, None

    def resolve_expr(self, expr: ast.Expr, scope: Scope) -> RExpr:
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
            if func in HYPER_FUNCS:
                return self.resolve_hyper_expr(expr)
            if func not in EXPR_FUNCS:
                raise self.error(
                    f"unknown function '{func}'", expr.func.span,
                    hint=did_you_mean(func, list(EXPR_FUNCS) + list(HYPER_FUNCS)),
                )
            if len(expr.args) != EXPR_FUNCS[func]:
                raise self.error(
                    f"{func}() takes {EXPR_FUNCS[func]} argument(s), got {len(expr.args)}",
                    expr.span,
                )
            args = tuple(self.resolve_expr(a, scope) for a in expr.args)
            if func == "dot":
                a, b = (self.shape_of(x) for x in args)
                if len(a) != 1 or a != b:
                    raise self.error(
                        f"dot() takes two vectors of the same length, found {show_shape(a)} and "
                        f"{show_shape(b)}", expr.span,
                    )
            return RCall(func, args, expr.span)
        if isinstance(expr, ast.VectorLit):
            return self.resolve_hyper_expr(expr)
        if isinstance(expr, ast.Reduce):
            return self._resolve_sum(expr, scope)
        raise AssertionError(expr)

    def _resolve_sum(self, expr: ast.Reduce, scope: Scope) -> RSum:
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
        inner = Scope(scope.plates, scope.sums + ((index, dim),))
        body = self.resolve_expr(expr.body, inner)
        if self.shape_of(body) != ():
            raise self.error("the body of sum(... for k in K) must be a scalar, found shape "
                             f"{show_shape(self.shape_of(body))}", expr.body.span)
        if not _mentions_sum_index(body, index):
            raise self.error(f"the body of this sum does not use its index '{index}'",
                             expr.body.span, hint=f"multiply by {dim} instead of summing")
        return RSum(index, dim, body, expr.span)

    def _resolve_ref(
        self, base: ast.Name, indices: tuple[ast.Expr, ...], span: Span, scope: Scope
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
        scope: Scope, gates: bool,
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
                    hint=literal_size_hint((cats,), (plate.dim,)),
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


def _mentions_sum_index(expr: RExpr, index: str) -> bool:
    if isinstance(expr, RVar):
        return any(isinstance(i, SumIndex) and i.name == index for i in expr.indices)
    return any(_mentions_sum_index(child, index) for child in sub_exprs(expr))


def size_of(expr: RExpr) -> ShapeDim:
    if isinstance(expr, RDimSize):
        return expr.name
    if isinstance(expr, RConst):
        return int(expr.value)
    raise AssertionError(expr)


def literal_size_hint(*shapes: Shape) -> str | None:
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


def show_shape(shape: Shape) -> str:
    return "(" + ", ".join(str(s) for s in shape) + ")" if shape else "scalar"
