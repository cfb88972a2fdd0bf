"""Stage 2: the Model IR (resolved names, plates, shapes) and its networkx view.

``resolve.build_model`` makes a ``Model`` from the AST. The ``Model`` is an immutable IR:
dimensions, hyperparameters, covariates, plates and random variables, with every expression
resolved to what its names mean. The data plate (the top-level plate holding the
observations) splits variables into globals and locals. ``model_graph`` derives a networkx
DiGraph from it for graph algorithms; the graph is a view, not the IR.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import networkx as nx

from .errors import Source, Span
from .families import FAMILIES, FamilySpec

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
    # added by the compiler (a StickBreaking's sticks, ``cemodel.augment_sticks``), not the file's
    introduced: bool = False


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
    # dimensions without a default that nothing mentions: left out of the model (no data
    # could set them), and named by `cemodel check`
    unused_dims: tuple[DimDef, ...] = ()
    # the --set values applied over the file's (compiler.apply_settings): the generated
    # module's header repeats them, so that regenerating it gives the same module
    settings: tuple[tuple[str, float | int], ...] = ()

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
