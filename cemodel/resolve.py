"""Stage 2: AST -> Model (resolved names, plates, shapes).

Two passes over the parsed program: pass 1 collects the declarations (dimensions,
hyperparameters, data, plates, and each random variable's statement with its scope) and
checks their names; pass 2 (``resolve_vars``) resolves each random variable and the
expressions in its arguments. Hyperparameter expressions are resolved here, for both.
Every mistake is a ``CemModelError`` at the statement's file, line and column.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import numpy as np

from . import syntax as ast
from .errors import CemModelError, CemOptionError, Span, did_you_mean
from .families import CHAIN_FAMILIES, FAMILIES, FamilySpec
from .families.base import Param, support_signs
from .model import (
    DataDef,
    DimDef,
    HyperDef,
    Model,
    PlateDef,
    RBin,
    RCall,
    RConst,
    RDimSize,
    RExpr,
    RHyper,
    RNeg,
    RRepeat,
    RVar,
    RVector,
    Shape,
    VarDef,
)
from .options import check_hyper_values
from .resolve_vars import (
    EXPR_FUNCS,
    HYPER_FUNCS,
    Scope,
    VariableResolution,
    literal_size_hint,
    show_shape,
    size_of,
)

_DATA_KINDS = {"real": 0, "int": 0, "count": 0, "vector": 1}


def _sum_signs(x: int, y: int) -> frozenset[int]:
    """The signs of a + b where a has sign x and b sign y."""
    if x == y or y == 0:
        return frozenset({x})
    if x == 0:
        return frozenset({y})
    return frozenset({-1, 0, 1})


class _Builder(VariableResolution):
    def __init__(self, program: ast.Program,
                 settings: Mapping[str, float | int] | None = None) -> None:
        self.program = program
        # checked --set values (compiler.apply_settings) in place of the file's, so that
        # the file's checks of its values (a Gamma rate, a Wishart dof) see them
        self.settings = dict(settings or {})
        self.source = program.source
        self.model_name: str | None = None
        self.collapse: ast.CollapseDecl | None = None
        self.dims: dict[str, DimDef] = {}
        self.hypers: dict[str, HyperDef] = {}
        self.data: dict[str, DataDef] = {}
        self.plates: dict[str, PlateDef] = {}
        # first pass: every random variable's declaration with its scope
        self.decls: dict[str, tuple[ast.Sample, Scope]] = {}
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
        if name in HYPER_FUNCS or name in EXPR_FUNCS:
            raise self.error(f"'{name}' is a built-in function and cannot be redeclared", span)

    # -- pass 1: declarations ---------------------------------------------
    def collect(self, statements: tuple[ast.Stmt, ...], scope: Scope) -> None:
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
                default = self.settings.get(stmt.name, stmt.default)
                self.dims[stmt.name] = DimDef(stmt.name, default, ragged, stmt.span)
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
                if stmt.name in self.settings and self.hyper_shape(value) == ():
                    value = RConst(float(self.settings[stmt.name]), stmt.value.span)
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
                self.collect(stmt.body, Scope(scope.plates + (plate,)))
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

    def _top_level_only(self, stmt: ast.Stmt, scope: Scope, word: str) -> None:
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

    def _plate(self, stmt: ast.Plate, scope: Scope) -> PlateDef:
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
        self, name: str, indices: tuple[ast.Name, ...], scope: Scope, span: Span
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
                    raise self.error(
                        "vector literals hold numbers (a matrix is not written as a literal)",
                        item.span, hint="declare a matrix by a default such as eye(D) * x, "
                                        "and give its entries with fit(..., hypers={...})")
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
            if func not in HYPER_FUNCS:
                raise self.error(
                    f"unknown function '{func}' in a hyperparameter", expr.func.span,
                    hint=did_you_mean(func, HYPER_FUNCS)
                    or "use eye(D), zeros(D), ones(D) or full(D, value)",
                )
            if len(expr.args) != HYPER_FUNCS[func]:
                raise self.error(
                    f"{func}() takes {HYPER_FUNCS[func]} argument(s), got {len(expr.args)}",
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
            size = size_of(expr.args[0])
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
        if isinstance(expr, RCall) and expr.func in ("exp", "log") and len(expr.args) == 1:
            a = self.constant(expr.args[0])
            if a is None or (expr.func == "log" and not a > 0):
                return None
            return float(np.exp(a)) if expr.func == "exp" and a < 710 else (
                float("inf") if expr.func == "exp" else float(np.log(a)))
        return None

    def signs(self, expr: RExpr) -> frozenset[int] | None:
        """The signs (−1, 0, 1) an expression can take, from its constants and the supports
        of the variables it reads (a Gamma's value is positive, a count ≥ 0; eye(n) and a
        Wishart's value count as positive definite); None where that says nothing (data,
        a real-valued variable, a call)."""
        number = self.constant(expr)
        if number is not None:
            return frozenset({int(np.sign(number))})
        if isinstance(expr, RCall) and expr.func == "eye":
            return frozenset({1})
        if isinstance(expr, RVar) and expr.name in self.decls:
            return support_signs(FAMILIES[self.decls[expr.name][0].dist.id].support)
        if isinstance(expr, RNeg):
            inner = self.signs(expr.operand)
            return None if inner is None else frozenset(-x for x in inner)
        if not isinstance(expr, RBin):
            return None
        a, b = self.signs(expr.left), self.signs(expr.right)
        if a is None or b is None:
            return None
        if expr.op == "*" or (expr.op == "/" and 0 not in b):
            return frozenset(x * y for x in a for y in b)
        if expr.op in "+-":
            b = b if expr.op == "+" else frozenset(-y for y in b)
            return frozenset().union(*(_sum_signs(x, y) for x in a for y in b))
        return None

    def _check_divisor(self, op: str, right: RExpr) -> None:
        if op == "/" and self.constant(right) == 0:
            raise self.error("division by zero", right.span,
                             hint="the divisor of this expression is always 0")

    def _check_domain(self, family: FamilySpec, param: Param, value: RExpr, span: Span) -> None:
        """A parameter the model file fixes to a value outside its domain (``Beta(0, 1)``,
        ``Gamma(a, b)`` with ``hyper b = -1``, ``Dirichlet(zeros(K))``, a shape of 1e-20) is
        refused here."""
        if param.domain == "spd":
            found = self.signs(value)
            if found is not None and 1 not in found:
                raise self.error(f"the {param.name} of {family.name} must be positive "
                                 "definite, and this matrix never is", span,
                                 hint="eye(n) scaled by a positive number is")
            return
        if param.domain != "positive":
            return
        found = self.signs(value)
        if found is not None and 1 not in found and self.constant(value) is None:
            raise self.error(
                f"the {param.name} of {family.name} must be positive, and this expression "
                "never is (by the signs of its constants and the supports of its variables)",
                span, hint="a positive rate, precision or shape times a negative number is "
                           "negative: drop the sign")
        param_name = param.name
        hint = None
        if isinstance(value, RRepeat):
            value = value.value
        if isinstance(value, RHyper):
            line = self.hypers[value.name].span.line
            hint = (f"give --set {value.name} a positive value" if value.name in self.settings
                    else f"'{value.name}' is set on line {line}; give it a positive value")
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
            if number is not None and not np.isfinite(number):
                raise self.error(f"the {param_name} of {family.name} must be finite, found "
                                 f"{number:g}", span, hint=hint)
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
        raise self.error(f"shape mismatch: {show_shape(a)} and {show_shape(b)}", span,
                         hint=literal_size_hint(a, b))

    # -- driver -------------------------------------------------------------
    def build(self) -> Model:
        self.collect(self.program.statements, Scope(()))
        if self.model_name is None:
            raise self.error("the file does not name its model", Span(1, 1, 1, 2),
                             hint="start it with 'model NAME'")
        unused = self._unused_dims()
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
            self.model_name, self.source, tuple(d for d in self.dims.values() if d not in unused),
            tuple(self.hypers.values()), data, tuple(self.plates.values()), variables,
            data_plate, collapse, None if self.collapse is None else self.collapse.span,
            unused_dims=unused,
        )

    def _unused_dims(self) -> tuple[DimDef, ...]:
        """The dimensions with no default that the source mentions nowhere but in their own
        declaration: nothing reads them and no data could set them, so they are left out of
        the model (a fit would otherwise stop at 'dimension not set')."""
        mentions: dict[str, int] = {}
        for name, *_ in ast.user_name_tokens(self.source.text):
            mentions[name] = mentions.get(name, 0) + 1
        return tuple(d for d in self.dims.values() if d.default is None
                     and d.ragged_over is None and mentions.get(d.name) == 1)

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


def build_model(program: ast.Program, settings: Mapping[str, float | int] | None = None
                ) -> Model:
    """Resolve a parsed program into a ``Model``; raises ``CemModelError``. ``settings``
    (checked ``--set`` values) replace the file's values of those dimensions and scalar
    hyperparameters in its checks (``compiler.check_set_values``)."""
    return _Builder(program, settings).build()
