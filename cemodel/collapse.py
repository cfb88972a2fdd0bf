"""Which variables the KL-corrected bound collapses (part of stage 4, the plan).

Hensman, Rattray & Lawrence (2012) §3.4: the bound L_KL = ln ∫ p(X) exp{L1} dX is a
function of q(Z) alone when the members of the collapsed set X are mutually d-separated
given the parameterised set Z and the data; then q*(X) = Π_i q*(X_i), each the mean-field
update of X_i given q(Z) (eq. 5), and L_KL equals the mean-field bound right after those
updates (eq. 9).

Two checks make that hold for a plate model:

* between variables: every pair of X is d-separated given Z and the observed variables on
  the model graph (one node per variable); a pair that is not is refused with the active
  path that connects them;
* within a variable: its replicas (mu[k] for each k) must not meet in one term of the
  expected log joint (a product mu[j]·mu[k]); otherwise q*(X_i) is not the product of its
  rows' updates.

cemodel parameterises q(Z) by a softmax per row, so Z must be categorical variables of the
data plate with no dependency among them (each row's mean-field target then depends on the
other Z only through their current q). The default collapses every other latent variable:
the largest X that keeps the local assignments in Z (mixtures and topic models collapse
parameters and proportions and keep the assignments).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import networkx as nx

from .terms import Analysis, Stat


@dataclass(frozen=True)
class Collapse:
    """The KLC split: collapsed X, parameterised Z, and why (``cemodel check`` prints it)."""

    collapsed: tuple[str, ...]
    parameterised: tuple[str, ...]
    reasons: tuple[str, ...]
    chosen_by: str  # "default", "model file" or "user"


class CollapseError(ValueError):
    """A collapse set that cannot be used; the message names the reason (a path, a term)."""


def active_path(graph: nx.DiGraph, source: str, target: str,
                given: set[str]) -> list[str] | None:
    """A trail from ``source`` to ``target`` that is active given ``given`` (Bayes ball,
    Koller & Friedman 2009, alg. 3.1), or None when they are d-separated."""
    # a node has an observed descendant: conditioning on it opens the v-structure
    opened = set(given)
    for node in given:
        opened |= nx.ancestors(graph, node)
    # state: (node, arrived going up from a child?)
    start = (source, True)
    previous: dict[tuple[str, bool], tuple[str, bool] | None] = {start: None}
    queue = deque([start])
    while queue:
        node, up = queue.popleft()
        if node == target:
            trail = []
            state: tuple[str, bool] | None = (node, up)
            while state is not None:
                trail.append(state[0])
                state = previous[state]
            return trail[::-1]
        steps: list[tuple[str, bool]] = []
        if up and node not in given:
            steps += [(p, True) for p in graph.predecessors(node)]
            steps += [(c, False) for c in graph.successors(node)]
        elif not up:
            if node not in given:
                steps += [(c, False) for c in graph.successors(node)]
            if node in opened:
                steps += [(p, True) for p in graph.predecessors(node)]
        for step in steps:
            if step not in previous:
                previous[step] = (node, up)
                queue.append(step)
    return None


def render_path(graph: nx.DiGraph, trail: list[str]) -> str:
    """``mu → x ← Lambda``."""
    text = trail[0]
    for a, b in zip(trail, trail[1:], strict=False):
        text += f" → {b}" if graph.has_edge(a, b) else f" ← {b}"
    return text


def _replica_coupling(analysis: Analysis, name: str) -> str | None:
    """A term of the expected log joint in which two rows of ``name`` meet, described."""
    for factor in analysis.factors:
        for monomial in factor.monomials:
            stats = [s for s in monomial.slots if isinstance(s, Stat) and s.var == name]
            if len(stats) > 1:
                return f"the term of '{factor.child}' (line {factor.span.line}) multiplies two " \
                       f"rows of '{name}'"
    return None


def choose_collapse(analysis: Analysis, graph: nx.DiGraph,
                    requested: tuple[str, ...] | None = None,
                    chosen_by: str = "user") -> Collapse:
    """The collapse set: ``requested`` checked, or the default. Raises CollapseError."""
    model = analysis.model
    latents = [v.name for v in model.latents]
    observed = {v.name for v in model.observed}
    assignments = [v.name for v in model.latents
                   if v.family == "Categorical" and model.is_local(v)]
    if model.data_plate is None:
        raise CollapseError("the model has no data plate, so it has no local assignments to "
                            "keep in Z")
    if requested is None:
        chosen_by = "default"
        chains = [v.name for v in model.latents
                  if v.family == "MarkovChain" and model.is_local(v)]
        if not assignments and chains:
            raise CollapseError(f"KLC-CG keeps independent categorical assignments of the data "
                                f"plate in Z (softmax-parameterised); '{chains[0]}' is a "
                                "MarkovChain, whose states depend on each other along the "
                                "steps")
        if not assignments:
            raise CollapseError("KLC-CG keeps the categorical assignments of the data plate in "
                                "Z (softmax-parameterised), and this model has none")
        collapsed = [n for n in latents if n not in assignments]
    else:
        for name in requested:
            if name in observed:
                raise CollapseError(f"'{name}' is observed; only latent variables are collapsed")
            joint = next((b for b in model.blocks if name in (b.mean.name, b.precision.name)),
                         None)
            if joint is not None and name not in latents:  # fitted as one factor with another
                raise CollapseError(f"'{name}' is fitted jointly with its "
                                    f"{'precision' if name == joint.mean.name else 'mean'} as "
                                    f"'{joint.name}' (one factor q({joint.mean.name}, "
                                    f"{joint.precision.name})): collapse '{joint.name}'")
            if name not in latents:
                raise CollapseError(f"'{name}' is not a variable of the model; its latent "
                                    f"variables are: {', '.join(latents)}")
        collapsed = list(dict.fromkeys(requested))
    params = [n for n in latents if n not in collapsed]
    if not collapsed:
        raise CollapseError("nothing to collapse: X is empty")
    # Z: categorical rows of the data plate, parameterised by a softmax each
    for name in params:
        var = model.var(name)
        if var.family != "Categorical" or not model.is_local(var):
            where = "a global" if not model.is_local(var) else "a local"
            raise CollapseError(
                f"'{name}' ({where} {var.family}) would be parameterised; cemodel's KLC "
                f"parameterises categorical variables of the data plate only (a softmax per "
                f"row), so collapse '{name}' too")
    for a in params:
        for b in params:
            if graph.has_edge(a, b):
                raise CollapseError(f"'{b}' depends on '{a}' and both are parameterised; the "
                                    "rows of Z must be independent given X")
    given = set(params) | observed
    reasons = []
    for i, a in enumerate(collapsed):
        for b in collapsed[i + 1:]:
            trail = active_path(graph, a, b, given)
            if trail is not None:
                raise CollapseError(
                    f"'{a}' and '{b}' are not d-separated given {_names(params)} and the data: "
                    f"the path {render_path(graph, trail)} is active")
        coupled = _replica_coupling(analysis, a)
        if coupled is not None:
            raise CollapseError(f"'{a}' cannot be collapsed: {coupled}, so q*({a}) does not "
                                "factorise over its rows")
    if len(collapsed) > 1:
        reasons.append(f"{_names(collapsed)} are mutually d-separated given {_names(params)} "
                       "and the data")
    reasons.append(f"each collapsed variable's effective likelihood given {_names(params)} is "
                   "conjugate to its prior (its mean-field update), so L_KL has a closed form")
    reasons.append(f"{_names(params)}: a softmax per row; the natural gradient is the "
                   "mean-field target minus the current parameters (eq. 15)")
    return Collapse(tuple(collapsed), tuple(params), tuple(reasons), chosen_by)


def _names(names: list[str] | tuple[str, ...]) -> str:
    return ", ".join(names)
