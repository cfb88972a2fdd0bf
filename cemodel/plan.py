"""Stage 4: Analysis -> InferencePlan.

Decides what is global and what is local, the order of updates, and how the
sufficient statistics that the local step hands to the global step are laid
out. For each monomial of a factor inside the data plate, the slots split
into a local part L (data and local statistics) and a global part G; the
local step accumulates

    acc[key] = Σ over the factor's plates  Π L          (key = letters L shares with G)

and every global message and ELBO term contracts ``acc`` with E[G]. MF, SVI
and the other stochastic methods differ only in how they weigh ``acc``.
"""

from __future__ import annotations

from dataclasses import dataclass

import networkx as nx

from .conjugacy import Analysis, Known, Monomial, Slot, Stat
from .families import FAMILIES
from .model import Model, model_graph


@dataclass(frozen=True)
class Accumulator:
    """Σ over the data plate of the local part of one monomial, by ``key`` letters."""

    name: str
    factor: int
    monomial: int
    local: tuple[Slot, ...]
    glob: tuple[Stat, ...]
    key: tuple[str, ...]


@dataclass(frozen=True)
class Learnable:
    """A scalar hyperparameter that empirical Bayes can set: the symmetric concentration of a
    Dirichlet, or the shape or rate of a Gamma, of a variable whose q is kept."""

    hyper: str
    var: str
    kind: str  # dirichlet, gamma_shape, gamma_rate
    other: str | None  # the Gamma's other parameter: a hyperparameter name or a number


@dataclass(frozen=True)
class InferencePlan:
    model: Model
    analysis: Analysis
    globals: tuple[str, ...]  # latent variables outside the data plate, topological order
    locals: tuple[str, ...]  # latent variables inside the data plate, topological order
    kept_locals: tuple[str, ...]  # locals indexed by the data plate only: kept for output
    local_iterations: bool  # do locals depend on each other (iterate to convergence)?
    accumulators: tuple[Accumulator, ...]
    methods: tuple[tuple[str, str], ...]  # (method, "yes" or the reason it does not apply)
    learnable: tuple[Learnable, ...] = ()

    def accumulator_for(self, factor: int, monomial: int) -> Accumulator | None:
        for acc in self.accumulators:
            if acc.factor == factor and acc.monomial == monomial:
                return acc
        return None

    def in_data_plate(self, plates: tuple[str, ...]) -> bool:
        return self.model.data_plate is not None and bool(plates) and (
            plates[0] == self.model.data_plate
        )


def _letters(slots: tuple[Slot, ...]) -> set[str]:
    found: set[str] = set()
    for slot in slots:
        found.update(slot.tensor)
        if isinstance(slot, Stat):
            found.update(i for i in slot.index if i.startswith("g"))
    return found


def _split(model: Model, monomial: Monomial, local_vars: set[str]):
    local: list[Slot] = []
    glob: list[Stat] = []
    for slot in monomial.slots:
        if isinstance(slot, Stat) and slot.var not in local_vars:
            glob.append(slot)
        else:
            local.append(slot)
    return tuple(local), tuple(glob)


def make_plan(analysis: Analysis) -> InferencePlan:
    model = analysis.model
    graph = model_graph(model)
    order = [n for n in nx.lexicographical_topological_sort(graph)]
    latent_names = [v.name for v in model.latents]
    local_set = {v.name for v in model.latents if model.is_local(v)}
    globals_ = tuple(n for n in order if n in latent_names and n not in local_set)
    locals_ = tuple(n for n in order if n in local_set)
    kept = tuple(n for n in locals_ if len(model.var(n).plates) == 1)
    local_graph = graph.subgraph(locals_)
    iterate = local_graph.number_of_edges() > 0

    accumulators = []
    for fi, factor in enumerate(analysis.factors):
        if model.data_plate is None or not factor.plates or factor.plates[0] != model.data_plate:
            continue
        for mi, monomial in enumerate(factor.monomials):
            local, glob = _split(model, monomial, local_set)
            if not glob:
                continue
            # G slots read inside an inner plate of the item (p[z[n], j]) keep that plate
            inner = {f"@{i}" for s in glob for i in s.index
                     if i in factor.plates and i != model.data_plate}
            # letters fixed by observed data (the word of a token) first: the local step
            # then writes each token's statistics contiguously
            shared = _letters(local) & _letters(glob)
            observed = {s.tensor[0] for s in local if isinstance(s, Known)
                        and s.fn == "onehot" and s.tensor} & shared
            key = (tuple(sorted(observed)) + tuple(sorted(shared - observed))
                   + tuple(sorted(inner)))
            accumulators.append(Accumulator(f"acc_{factor.child}_{mi}", fi, mi, local, glob, key))

    methods = _methods(model)
    learnable = tuple(item for item in _learnable(model, globals_ + kept)
                      if _uses_of(model, item.hyper) == 1)
    return InferencePlan(model, analysis, globals_, locals_, kept, iterate, tuple(accumulators),
                         methods, learnable)


def _uses_of(model: Model, hyper: str) -> int:
    """How often a hyperparameter appears in the model (arguments and other hyperparameters)."""
    from .conjugacy import render_expr

    def count(expr) -> int:
        text = render_expr(expr)
        return sum(1 for token in _tokens(text) if token == hyper)

    total = sum(count(arg) for var in model.variables for arg in var.args)
    total += sum(count(h.value) for h in model.hypers if h.name != hyper)
    return total


def _tokens(text: str) -> list[str]:
    import re

    return re.findall(r"[A-Za-z_][A-Za-z_0-9]*", text)


def _learnable(model: Model, kept: tuple[str, ...]) -> tuple[Learnable, ...]:
    from .model import RConst, RHyper, RRepeat

    found: list[Learnable] = []
    for name in kept:
        var = model.var(name)
        if var.family == "Dirichlet":
            arg = var.args[0]
            if isinstance(arg, RRepeat) and isinstance(arg.value, RHyper):
                found.append(Learnable(arg.value.name, name, "dirichlet", None))
        elif var.family == "Gamma":
            shape, rate = var.args
            def text(e):
                if isinstance(e, RHyper):
                    return e.name
                return repr(e.value) if isinstance(e, RConst) else None
            if isinstance(shape, RHyper) and text(rate) is not None:
                found.append(Learnable(shape.name, name, "gamma_shape", text(rate)))
            if isinstance(rate, RHyper) and text(shape) is not None:
                found.append(Learnable(rate.name, name, "gamma_rate", text(shape)))
    return tuple(found)


def _methods(model: Model) -> tuple[tuple[str, str], ...]:
    """Each global step and whether it applies (or why not); only what is implemented."""
    stochastic = "yes" if model.data_plate else (
        "no: the model has no single data plate to subsample (observations must all sit in "
        "one top-level plate)"
    )
    sampled = {"dirichlet", "beta", "gamma", "normal", "mvn", "wishart"}
    unsampled = sorted({FAMILIES[v.family].variational for v in model.latents
                        if not model.is_local(v)} - sampled)
    ssvi_a = stochastic if stochastic != "yes" or not unsampled else (
        f"no: cemodel cannot sample a {', '.join(unsampled)} global")
    return (
        ("mf", "yes"),
        ("svi", stochastic),
        ("svi+", stochastic),
        ("ssvi-a", ssvi_a),
        ("ssvi", "not yet: SSVI with the V(β, λ) correction is planned, not implemented"),
    )


def describe_slot(slot: Slot) -> str:
    """Readable E[...] text for a slot (used by ``cemodel check`` and code comments)."""
    if isinstance(slot, Known):
        if slot.fn == "value":
            return _render_known_operands(slot)
        if slot.fn == "onehot":
            return f"onehot({_render_known_operands(slot)})"
        return f"{slot.fn}({_render_known_operands(slot)})"
    index = ", ".join(slot.index)
    ref = f"{slot.var}[{index}]" if slot.index else slot.var
    word = {
        "log": f"log {ref}", "log1m": f"log(1-{ref})", "value": ref, "square": f"{ref}²",
        "onehot": f"{ref}", "outer": f"{ref}{ref}ᵀ", "logdet": f"log|{ref}|",
    }[slot.stat]
    if slot.stat == "onehot":
        return f"q({ref}={slot.tensor[0]})"
    return f"E[{word}]"


def _render_known_operands(slot: Known) -> str:
    from .conjugacy import render_expr

    return ", ".join(render_expr(o) for o in slot.operands)
