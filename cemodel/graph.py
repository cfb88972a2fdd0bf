"""Plate diagrams of a model: the ``Diagram`` and its DOT text (its layout:
``graph_layout``).

Pure functions of the Model IR (its dataclasses and ``model_graph``): nothing here
draws or imports matplotlib; ``cemodel.plots.render_diagram`` draws a ``Layout``.

    Model --diagram--> Diagram --layout_diagram--> Layout   (positions in inches)
                               --to_dot----------> DOT text (one cluster per plate)

The layout is layered left to right: a variable's column is its depth in the model
graph (sources pulled next to their first child), and each plate is a block packed
into horizontal lanes of its parent, so a plate's box holds exactly its members and
nested plates sit inside their parents. Hyperparameters are small dots placed in free
space beside the variable they feed.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from .model import (
    GateIndex,
    Model,
    RData,
    RExpr,
    RHyper,
    RVar,
    model_graph,
    sub_exprs,
)

# ---------------------------------------------------------------------------
# The diagram: what is drawn
# ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Node:
    """A random variable (``latent`` or ``observed``), a covariate (``data``) or a ``hyper``."""

    name: str
    kind: str
    family: str | None
    plates: tuple[str, ...]  # outermost first
    indices: tuple[str, ...]  # the enclosing plates' indices, for subscripts
    collapsed: bool = False  # integrated out by KLC-CG (the plan's collapse set X)


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    roles: tuple[str, ...]  # the parameters of the target it appears in, or "gate"
    selects: tuple[str, ...] = ()  # a gate: the variables it indexes (z in beta[z[d, n]])

    @property
    def gate(self) -> bool:
        return "gate" in self.roles


@dataclass(frozen=True)
class Plate:
    name: str
    label: str  # "docs d ∈ D", "tokens n ∈ N[d]", "topics k ∈ K=20"
    parent: str | None


@dataclass(frozen=True)
class Diagram:
    name: str
    nodes: tuple[Node, ...]
    edges: tuple[Edge, ...]
    plates: tuple[Plate, ...]  # parents before children

    def node(self, name: str) -> Node:
        for node in self.nodes:
            if node.name == name:
                return node
        raise KeyError(name)

    def children(self, plate: str | None) -> tuple[Plate, ...]:
        return tuple(p for p in self.plates if p.parent == plate)


def _leaves(expr: RExpr) -> Iterator[tuple[str, str, bool]]:
    """(name, "hyper" | "data", used as an index) for each hyperparameter and covariate."""
    if isinstance(expr, RHyper):
        yield expr.name, "hyper", False
    elif isinstance(expr, RData):
        yield expr.name, "data", False
    elif isinstance(expr, RVar):
        for index in expr.indices:
            if isinstance(index, GateIndex) and isinstance(index.var, RData):
                yield index.var.name, "data", True
    for child in sub_exprs(expr):
        yield from _leaves(child)


def _gates(expr: RExpr) -> Iterator[tuple[str, str]]:
    """(index, indexed) for each categorical or integer datum used as an index."""
    if isinstance(expr, RVar):
        for index in expr.indices:
            if isinstance(index, GateIndex):
                yield index.var.name, expr.name
    for child in sub_exprs(expr):
        yield from _gates(child)


def plate_label(model: Model, name: str) -> str:
    """``docs d ∈ D``; ragged ``tokens n ∈ N[d]``; a dimension with a size ``K=20``."""
    plate = model.plate(name)
    dim = model.dim(plate.dim)
    size = plate.dim
    if dim.ragged_over is not None:
        outer = plate.parent
        while outer is not None and model.plate(outer).dim != dim.ragged_over:
            outer = model.plate(outer).parent
        size += f"[{model.plate(outer).index if outer else dim.ragged_over}]"
    elif dim.default is not None:
        size += f"={dim.default}"
    return f"{plate.name} {plate.index} ∈ {size}"


def diagram(model: Model, hypers: bool = True, collapsed: tuple[str, ...] = ()) -> Diagram:
    """The nodes, edges and plates of ``model``'s plate diagram (hyperparameters optional);
    ``collapsed``: the variables KLC-CG integrates out, marked."""
    graph = model_graph(model)
    index_of = {p.name: p.index for p in model.plates}
    roles: dict[tuple[str, str], set[str]] = {}
    order: list[tuple[str, str]] = []

    def add(source: str, target: str, role: str) -> None:
        if (source, target) not in roles:
            roles[(source, target)] = set()
            order.append((source, target))
        roles[(source, target)].add(role)

    used: dict[str, str] = {}  # hyperparameters and covariates, in order of first use
    selects: dict[tuple[str, str], set[str]] = {}
    for var in model.variables:
        for param, arg in zip(model.family(var).params, var.args, strict=True):
            for gate, indexed in _gates(arg):
                selects.setdefault((gate, var.name), set()).add(indexed)
            for name, kind, gate in _leaves(arg):
                if kind == "hyper" and not hypers:
                    continue
                used.setdefault(name, kind)
                add(name, var.name, "gate" if gate else param.name)
    for source, target, attrs in graph.edges(data=True):
        for role in attrs["roles"]:
            add(source, target, role)

    nodes: list[Node] = []
    for name, kind in used.items():
        if kind == "hyper":
            nodes.append(Node(name, "hyper", None, (), ()))
    for datum in model.data:
        if datum.name in used:
            nodes.append(Node(datum.name, "data", None, datum.plates,
                              tuple(index_of[p] for p in datum.plates)))
    for var in model.variables:
        nodes.append(Node(var.name, "observed" if var.observed else "latent",
                          model.family(var).name, var.plates,
                          tuple(index_of[p] for p in var.plates), var.name in collapsed))
    rank = {node.name: i for i, node in enumerate(nodes)}
    edges = tuple(Edge(s, t, tuple(sorted(roles[(s, t)])),
                       tuple(sorted(selects.get((s, t), ()))))
                  for s, t in sorted(order, key=lambda e: (rank[e[1]], rank[e[0]])))
    plates = tuple(Plate(p.name, plate_label(model, p.name), p.parent) for p in model.plates)
    return Diagram(model.name, tuple(nodes), edges, plates)


# ---------------------------------------------------------------------------
# DOT
# ---------------------------------------------------------------------------

_DOT_KEYWORDS = {"node", "edge", "graph", "digraph", "subgraph", "strict"}


def _dot_id(name: str) -> str:
    if name.lower() in _DOT_KEYWORDS or not name.replace("_", "a").isalnum() or name[0].isdigit():
        return _dot_str(name)
    return name


def _dot_str(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _dot_node(node: Node) -> str:
    label = node.name + (f"[{', '.join(node.indices)}]" if node.indices else "")
    if node.kind == "hyper":
        attrs = f"shape=point, width=0.08, xlabel={_dot_str(node.name)}"
    elif node.kind == "data":
        attrs = f"shape=box, style=filled, fillcolor=gray85, label={_dot_str(label)}"
    elif node.kind == "observed":
        attrs = (f"shape=circle, style=filled, fillcolor=gray80, label={_dot_str(label)}, "
                 f"tooltip={_dot_str(node.family or '')}")
    elif node.collapsed:
        attrs = (f"shape=circle, style=dashed, label={_dot_str(label)}, "
                 f"tooltip={_dot_str((node.family or '') + ', collapsed (KLC)')}")
    else:
        attrs = f"shape=circle, label={_dot_str(label)}, tooltip={_dot_str(node.family or '')}"
    return f"{_dot_id(node.name)} [{attrs}];"


def to_dot(d: Diagram) -> str:
    """DOT text: one ``subgraph cluster_<plate>`` per plate, nested as the plates are."""
    lines = [
        f"// plate diagram of model {d.name}, written by cemodel graph",
        f"digraph {_dot_id(d.name)} {{",
        "  rankdir=LR;",
        '  node [fontname="Helvetica"];',
        '  edge [arrowsize=0.7];',
    ]

    def members(plate: str | None, indent: str) -> None:
        for node in d.nodes:
            if (node.plates[-1] if node.plates else None) == plate:
                lines.append(indent + _dot_node(node))
        for child in d.children(plate):
            lines.append(f"{indent}subgraph {_dot_id('cluster_' + child.name)} {{")
            lines.append(f"{indent}  label={_dot_str(child.label)};")
            lines.append(f"{indent}  labeljust=r; labelloc=b; style=rounded;")
            members(child.name, indent + "  ")
            lines.append(f"{indent}}}")

    members(None, "  ")
    for edge in d.edges:
        style = " [style=dashed]" if edge.gate else ""
        lines.append(f"  {_dot_id(edge.source)} -> {_dot_id(edge.target)}{style};"
                     f"  // {', '.join(edge.roles)}")
    lines.append("}")
    return "\n".join(lines) + "\n"
