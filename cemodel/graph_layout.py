"""The layout of a plate diagram (``graph.Diagram`` -> ``Layout``, positions in inches; x to
the right, y downwards).

Layered left to right: a variable's column is its depth in the model graph (sources pulled
next to their first child), and each plate is a block packed into horizontal lanes of its
parent, so a plate's box holds exactly its members and nested plates sit inside their
parents. Hyperparameters are small dots placed in free space beside the variable they feed.
Nothing here draws or imports matplotlib; ``cemodel.plots.render_diagram`` draws a
``Layout``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import networkx as nx

from .graph import Diagram, Edge, Node, Plate

GREEK = (
    "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho "
    "sigma tau upsilon phi chi psi omega Gamma Delta Theta Lambda Xi Pi Sigma Upsilon Phi Psi "
    "Omega"
).split()

RANK_GAP = 1.45  # between the centres of consecutive columns
RADIUS = 0.3  # of a variable's circle
CAPTION = 0.2  # the family's name under a variable
DOT = 0.045  # a hyperparameter's dot
PAD = 0.14  # between a plate's box and what it holds, per nesting level
LABEL_ROW = 0.24  # the plate's label, at the bottom of its box
LANE_GAP = 0.22  # between lanes inside a plate
ITEM_GAP = 0.16  # between neighbours in one lane
PLATE_FONT = 8.0  # points
HYPER_FONT = 8.0
FAMILY_FONT = 6.5
NODE_FONT = 11.0


def text_width(text: str, points: float) -> float:
    """A generous estimate of the width in inches of ``text`` at ``points``."""
    return len(text) * 0.6 * points / 72


@dataclass(frozen=True)
class Box:
    x0: float
    y0: float
    x1: float
    y1: float

    def overlaps(self, other: Box, margin: float = 0.0) -> bool:
        return (self.x0 < other.x1 + margin and other.x0 < self.x1 + margin
                and self.y0 < other.y1 + margin and other.y0 < self.y1 + margin)

    def union(self, other: Box) -> Box:
        return Box(min(self.x0, other.x0), min(self.y0, other.y0),
                   max(self.x1, other.x1), max(self.y1, other.y1))


@dataclass(frozen=True)
class PlacedNode:
    """A node's position; a hyperparameter is placed once per variable it feeds (``target``),
    beside it, so shared constants never need long edges."""

    node: Node
    x: float
    y: float
    radius: float
    target: str | None = None

    @property
    def box(self) -> Box:
        """What the node covers, with its caption (a family, or a hyperparameter's label)."""
        if self.node.kind == "hyper":
            width = text_width(hyper_text(self.node.name), HYPER_FONT)
            return Box(self.x - DOT - 0.06 - width, self.y - 0.09, self.x + DOT, self.y + 0.09)
        half = _half_width(self.node)
        return Box(self.x - half, self.y - self.radius, self.x + half,
                   self.y + self.radius + CAPTION)


@dataclass(frozen=True)
class PlacedPlate:
    plate: Plate
    box: Box
    depth: int


@dataclass(frozen=True)
class Route:
    """An edge drawn as an arc: ``bend`` is matplotlib's ``arc3`` rad (0: straight)."""

    edge: Edge
    bend: float


@dataclass(frozen=True)
class Layout:
    diagram: Diagram
    nodes: tuple[PlacedNode, ...]
    plates: tuple[PlacedPlate, ...]  # outer plates first
    routes: tuple[Route, ...]
    bounds: Box

    def at(self, name: str, target: str | None = None) -> PlacedNode:
        """Where ``name`` is drawn (for a hyperparameter: its copy beside ``target``)."""
        for placed in self.nodes:
            if placed.node.name == name and placed.target in (None, target):
                return placed
        raise KeyError(name)

    def ends(self, edge: Edge) -> tuple[PlacedNode, PlacedNode]:
        return self.at(edge.source, edge.target), self.at(edge.target)


def caption(node: Node) -> str:
    """The text under a node: its family (MultivariateNormal as its alias MVN), or "data"."""
    if node.kind == "data":
        return "data"
    return {"MultivariateNormal": "MVN"}.get(node.family or "", node.family or "")


def _half_width(node: Node) -> float:
    return max(RADIUS, text_width(caption(node), FAMILY_FONT) / 2)


def label_points(node: Node) -> float:
    """The font size that fits the node's name and indices inside its circle."""
    base, _, suffix = node.name.partition("_")
    if greek_letter(base):
        chars = 1.0 + 0.7 * len(",".join(filter(None, (suffix, *node.indices))))
    else:
        chars = len(node.name) + 0.7 * len(",".join(node.indices))
    width = chars * 0.62 * NODE_FONT / 72
    return max(6.0, min(NODE_FONT, NODE_FONT * 1.55 * RADIUS / width))


def hyper_text(name: str) -> str:
    return greek_letter(name) or name


def greek_letter(name: str) -> str | None:
    """``alpha`` -> ``α``, ``Lambda`` -> ``Λ``; None for other names."""
    if name not in GREEK:
        return None
    lower = "αβγδεζηθικλμνξοπρστυφχψω"
    upper = {"Gamma": "Γ", "Delta": "Δ", "Theta": "Θ", "Lambda": "Λ", "Xi": "Ξ", "Pi": "Π",
             "Sigma": "Σ", "Upsilon": "Υ", "Phi": "Φ", "Psi": "Ψ", "Omega": "Ω"}
    return upper.get(name) or lower[GREEK.index(name)]


def _ranks(d: Diagram) -> dict[str, int]:
    """Column of each variable and covariate: its longest path from a source, with sources
    moved next to their nearest child."""
    graph = nx.DiGraph()
    names = [n.name for n in d.nodes if n.kind != "hyper"]
    graph.add_nodes_from(names)
    graph.add_edges_from((e.source, e.target) for e in d.edges
                         if e.source in graph and e.target in graph)
    rank: dict[str, int] = {}
    for name in nx.lexicographical_topological_sort(graph, key=names.index):
        rank[name] = max((rank[p] + 1 for p in graph.predecessors(name)), default=0)
    for name in names:
        children = list(graph.successors(name))
        if not list(graph.predecessors(name)) and children:
            rank[name] = max(rank[name], min(rank[c] for c in children) - 1)
    return rank


@dataclass
class _Item:
    """A node or a plate block while packing; offsets are from the item's own top."""

    key: str  # a node's or a plate's name ("" for the whole diagram)
    is_plate: bool
    x0: float
    x1: float
    height: float
    anchor: float  # offset of the line its first lane's items are centred on
    lines: dict[str, float]  # each member node (at any depth) -> offset of its centre
    observed: bool
    lanes: list[list[_Item]] | None = None
    offsets: dict[str, float] | None = None  # child key -> offset of the child's top


def _stack(lanes: list[list[_Item]], top: float) -> tuple[dict[str, float], float]:
    """Lanes one under another; in a lane the items share the line their anchors sit on.
    The offset of each item's top, and the bottom of the last lane."""
    offsets: dict[str, float] = {}
    for lane in lanes:
        anchor = max(it.anchor for it in lane)
        for it in lane:
            offsets[it.key] = top + anchor - it.anchor
        top += max(anchor - it.anchor + it.height for it in lane) + LANE_GAP
    return offsets, top - LANE_GAP


class _Packer:
    def __init__(self, d: Diagram, rank: dict[str, int]) -> None:
        self.d = d
        self.rank = rank
        self.order = {n.name: i for i, n in enumerate(d.nodes)}
        self.neighbours: dict[str, set[str]] = {n.name: set() for n in d.nodes}

        def link(a: str, b: str) -> None:
            self.neighbours[a].add(b)
            self.neighbours[b].add(a)

        for e in d.edges:
            link(e.source, e.target)
            for selected in e.selects:  # u[user[n]]: keep u near user
                link(e.source, selected)

    def node_item(self, node: Node) -> _Item:
        x, half = self.rank[node.name] * RANK_GAP, _half_width(node)
        return _Item(node.name, False, x - half, x + half, 2 * RADIUS + CAPTION, RADIUS,
                     {node.name: RADIUS}, node.kind in ("observed", "data"))

    def block(self, plate: str | None) -> _Item:
        items = [self.node_item(n) for n in self.d.nodes
                 if n.kind != "hyper" and (n.plates[-1] if n.plates else None) == plate]
        items += [self.block(p.name) for p in self.d.children(plate)]
        items.sort(key=lambda it: (not it.observed, -len(it.lines), not it.is_plate,
                                   min(self.order[m] for m in it.lines)))
        lanes: list[list[_Item]] = []
        above = 0  # lanes opened above the first
        for item in items:
            index = self.choose_lane(item, lanes, above)
            if index < 0:
                lanes.insert(0, [])
                index, above = 0, above + 1
            elif index == len(lanes):
                lanes.append([])
            lanes[index].append(item)
        offsets, bottom = _stack(lanes, PAD if plate is not None else 0.0)
        x0 = min(it.x0 for it in items)
        x1 = max(it.x1 for it in items)
        lines = {m: offsets[it.key] + y for it in items for m, y in it.lines.items()}
        anchor = offsets[lanes[0][0].key] + lanes[0][0].anchor
        observed = any(it.observed for it in items)
        if plate is None:
            return _Item("", True, x0, x1, bottom, anchor, lines, observed, lanes, offsets)
        label = next(p.label for p in self.d.plates if p.name == plate)
        x0, x1 = x0 - PAD, x1 + PAD
        width = text_width(label, PLATE_FONT) + 0.16
        if x1 - x0 < width:  # widen around the middle to fit the label
            middle = (x0 + x1) / 2
            x0, x1 = middle - width / 2, middle + width / 2
        return _Item(plate, True, x0, x1, bottom + LABEL_ROW, anchor, lines, observed, lanes,
                     offsets)

    def choose_lane(self, item: _Item, lanes: list[list[_Item]], above: int) -> int:
        """The lane that keeps the item's edges shortest: an existing lane it fits in, or a
        new one at the bottom (len(lanes)) or the top (-1); on a tie, the side with fewer
        lanes."""
        def fits(lane: list[_Item]) -> bool:
            return all(item.x1 + ITEM_GAP <= it.x0 or it.x1 + ITEM_GAP <= item.x0 for it in lane)

        def cost(index: int) -> float:
            trial = [list(lane) for lane in lanes]
            if index < 0:
                trial.insert(0, [item])
            elif index == len(trial):
                trial.append([item])
            else:
                trial[index].append(item)
            offsets, _ = _stack(trial, 0.0)
            y = {m: offsets[it.key] + dy for lane in trial for it in lane
                 for m, dy in it.lines.items()}
            total = 0.0
            for m in item.lines:
                for other in sorted(self.neighbours[m]):
                    if other in y and other not in item.lines:
                        distance = abs(y[m] - y[other])
                        total += distance
                        if distance < RADIUS and abs(self.rank[m] - self.rank[other]) > 1:
                            total += 1.5  # a long edge along a line runs through its middle
            return total

        def side(index: int) -> int:  # 0: an existing lane; else how crowded that side is
            if 0 <= index < len(lanes):
                return 0
            return 1 + (above if index < 0 else len(lanes) - 1 - above)

        candidates = [i for i, lane in enumerate(lanes) if fits(lane)]
        candidates += [len(lanes), -1] if lanes else [0]
        costs = {i: round(cost(i), 6) for i in candidates}
        return min(candidates, key=lambda i: (costs[i], side(i), i < 0, i))


def layout_diagram(d: Diagram) -> Layout:
    """Positions of every node and plate box, and a route for every edge."""
    packer = _Packer(d, _ranks(d))
    root = packer.block(None)
    placed: dict[str, PlacedNode] = {}
    plates: list[PlacedPlate] = []

    def place(item: _Item, top: float, depth: int) -> None:
        if not item.is_plate:
            node = d.node(item.key)
            placed[item.key] = PlacedNode(node, (item.x0 + item.x1) / 2, top + RADIUS, RADIUS)
            return
        if item.key:
            plate = next(p for p in d.plates if p.name == item.key)
            plates.append(PlacedPlate(plate, Box(item.x0, top, item.x1, top + item.height),
                                      depth))
        assert item.lanes is not None and item.offsets is not None
        for lane in item.lanes:
            for child in lane:
                place(child, top + item.offsets[child.key], depth + (1 if item.key else 0))

    place(root, 0.0, 0)
    obstacles = list(placed.values())
    routes = {e: _route(e, placed[e.source], placed[e.target], obstacles, plates)
              for e in d.edges if e.source in placed}
    curves = [point for r in routes.values()
              for point in _curve(placed[r.edge.source], placed[r.edge.target], r.bend)]
    hypers: list[PlacedNode] = []
    for name in placed:  # each variable's hyperparameters, in the order it uses them
        group = [d.node(e.source) for e in d.edges
                 if e.target == name and d.node(e.source).kind == "hyper"]
        if group:
            taken = [p.box for p in [*placed.values(), *hypers]] + [pp.box for pp in plates]
            hypers += _place_hypers(group, placed[name], taken, curves)
    nodes = tuple(placed[n.name] for n in d.nodes if n.kind != "hyper") + tuple(hypers)
    for e in d.edges:
        if e not in routes:
            routes[e] = _route(e, _end(nodes, e.source, e.target), placed[e.target],
                               obstacles, plates)
    bounds = nodes[0].box
    for p in nodes:
        bounds = bounds.union(p.box)
    for pp in plates:
        bounds = bounds.union(pp.box)
    return Layout(d, nodes, tuple(plates), tuple(routes[e] for e in d.edges), bounds)


def _end(nodes: tuple[PlacedNode, ...], name: str, target: str | None) -> PlacedNode:
    return next(p for p in nodes if p.node.name == name and p.target in (None, target))


def _curve(a: PlacedNode, b: PlacedNode, bend: float, samples: int = 40
           ) -> list[tuple[float, float]]:
    """Points along an edge drawn as matplotlib's ``arc3`` (a quadratic Bézier)."""
    dx, dy = b.x - a.x, b.y - a.y
    cx, cy = (a.x + b.x) / 2 + bend * dy, (a.y + b.y) / 2 - bend * dx
    return [((1 - t) ** 2 * a.x + 2 * (1 - t) * t * cx + t * t * b.x,
             (1 - t) ** 2 * a.y + 2 * (1 - t) * t * cy + t * t * b.y)
            for t in (i / samples for i in range(1, samples))]


def _place_hypers(group: list[Node], target: PlacedNode, taken: list[Box],
                  curves: list[tuple[float, float]]) -> list[PlacedNode]:
    """The hyperparameters of one variable as a column of dots, in the order of its
    arguments, in the free spot left of it nearest its line, clear of other edges."""
    def free(p: PlacedNode) -> bool:
        box = p.box
        return (not any(box.overlaps(other, 0.04) for other in taken)
                and not any(box.x0 - 0.05 < x < box.x1 + 0.05 and box.y0 - 0.05 < y < box.y1
                            + 0.05 for x, y in curves))

    step = 0.26
    for dx in (0.6, 0.8, 1.0, 1.3, 1.6, 2.0):
        for shift in range(12):
            dy = (shift + 1) // 2 * step * (1 if shift % 2 == 0 else -1)
            column = [PlacedNode(node, target.x - dx * RANK_GAP,
                                 target.y + dy + (i - (len(group) - 1) / 2) * step, DOT,
                                 target.node.name)
                      for i, node in enumerate(group)]
            if all(free(p) for p in column):
                return column
    return [PlacedNode(node, target.x - 2.4 * RANK_GAP, target.y + i * step, DOT,
                       target.node.name) for i, node in enumerate(group)]


def _route(edge: Edge, a: PlacedNode, b: PlacedNode, obstacles: list[PlacedNode],
           plates: list[PlacedPlate]) -> Route:
    """Straight when that passes no other node and no plate holding neither end; otherwise
    the least bent arc that passes fewest of them."""
    others = [p for p in obstacles if p.node.name not in (edge.source, edge.target)]
    foreign = [pp.box for pp in plates
               if pp.plate.name not in a.node.plates + b.node.plates]

    def hits(bend: float) -> tuple[int, int]:
        curve = _curve(a, b, bend)
        nodes = sum(any(math.hypot(x - p.x, y - p.y) < p.radius + 0.06 for x, y in curve)
                    for p in others)
        boxes = sum(any(box.x0 < x < box.x1 and box.y0 < y < box.y1 for x, y in curve)
                    for box in foreign)
        return nodes, boxes

    bends = (0.0, 0.2, -0.2, 0.35, -0.35, 0.5, -0.5)
    return Route(edge, min(bends, key=lambda bend: (hits(bend), bends.index(bend))))
