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

from .collapse import Collapse, CollapseError, choose_collapse
from .errors import CemError, CemModelError
from .families import CHAIN_FAMILIES, CHAIN_POSTERIORS, FAMILIES
from .model import Model, model_graph
from .terms import Analysis, Known, Monomial, Slot, Stat, letter_text


@dataclass(frozen=True)
class Accumulator:
    """Σ over the data plate of the local part of one monomial, by ``key`` letters. Monomials
    of one factor with the same local part and key share one array (``name``): the
    Normal-Wishart's log|Λ| and μᵀΛμ terms both need Σ_n q(z_n = k)."""

    name: str
    factor: int
    monomial: int
    local: tuple[Slot, ...]
    glob: tuple[Stat, ...]
    key: tuple[str, ...]
    # letters of observed indices kept per data entry instead of as axes: the array is laid
    # out as the data over ``plates`` (the factor's), and whoever reads it binds these letters
    # from the data (a rating's user and item) -- see ``per_entry``
    entries: tuple[str, ...] = ()
    plates: tuple[str, ...] = ()

    @property
    def per_entry(self) -> bool:
        return bool(self.entries)


@dataclass(frozen=True)
class Learnable:
    """A scalar hyperparameter that empirical Bayes can set: the symmetric concentration of a
    Dirichlet, the shape or rate of a Gamma, or a parameter of a Beta, of a variable whose q
    is kept."""

    hyper: str
    var: str
    kind: str  # dirichlet, gamma_shape, gamma_rate, beta_a, beta_b
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
    # (local step, "yes: why" or "no: why"): the E-steps that apply to this model
    local_steps: tuple[tuple[str, str], ...] = ()
    # Gibbs / CVB0: local Dirichlet proportions integrated out, and the categoricals updated
    collapsed_locals: tuple[str, ...] = ()
    assignment_locals: tuple[str, ...] = ()
    # KLC-CG: the collapsed set X and the softmax-parameterised Z (None: KLC does not apply)
    collapse: Collapse | None = None

    @property
    def stored_accumulators(self) -> tuple[Accumulator, ...]:
        """One accumulator per array: what the local step allocates, zeroes and fills."""
        seen: dict[str, Accumulator] = {}
        for acc in self.accumulators:
            seen.setdefault(acc.name, acc)
        return tuple(seen.values())

    def accumulator_for(self, factor: int, monomial: int) -> Accumulator | None:
        for acc in self.accumulators:
            if acc.factor == factor and acc.monomial == monomial:
                return acc
        return None

    def in_data_plate(self, plates: tuple[str, ...]) -> bool:
        return self.model.data_plate is not None and bool(plates) and (
            plates[0] == self.model.data_plate
        )


def _letters(slots: tuple[Slot, ...], plates: set[str]) -> set[str]:
    """The tensor letters of the slots, with the gate and sum letters of their indices."""
    found: set[str] = set()
    for slot in slots:
        found.update(slot.tensor)
        if isinstance(slot, Stat):
            found.update(i for i in slot.index if i not in plates)
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


def _check_not_per_item(model: Model, child: str, glob: tuple[Stat, ...]) -> None:
    """A global read at the data plate's own index has one row per item: it is local to
    the items, which the global steps (a minibatch moves every global) cannot treat."""
    for slot in glob:
        if model.data_plate in slot.index:
            var = model.var(slot.var)
            plate = next(p for p, i in zip(var.plates, slot.index, strict=False)
                         if i == model.data_plate)
            raise CemModelError(
                f"'{slot.var}' is declared in plate '{plate}', outside the data plate "
                f"'{model.data_plate}', but '{child}' reads it at the data plate's own index: "
                f"each of its rows then belongs to one item of '{model.data_plate}'",
                var.span, model.source,
                hint=f"declare '{slot.var}' inside plate {model.data_plate} (a local of each "
                     "item), or index it with integer data (a row id)")


def make_plan(analysis: Analysis, collapse: tuple[str, ...] | None = None) -> InferencePlan:
    """``collapse``: the KLC set X asked for on the command line or through the API (it
    overrides the model file's ``collapse``); an invalid one is refused with the reason."""
    model = analysis.model
    graph = model_graph(model)
    latent_names = [v.name for v in model.latents]
    local_set = {v.name for v in model.latents if model.is_local(v)}

    def scratch_last(name: str) -> tuple[bool, str]:
        # among locals the graph leaves unordered (co-parents of one factor), the kept ones
        # first: a sweep runs the reverse, so a scratch local is computed from the kept
        # locals' start (their prior, or their previous q) and never itself started blind
        return name in local_set and not _kept(model, name), name

    order = list(nx.lexicographical_topological_sort(graph, key=scratch_last))
    globals_ = tuple(n for n in order if n in latent_names and n not in local_set)
    locals_ = tuple(n for n in order if n in local_set)
    kept = tuple(n for n in locals_ if _kept(model, n))
    coupled = _coupled_locals(analysis, locals_)
    iterate = coupled is not None

    accumulators = []
    for fi, factor in enumerate(analysis.factors):
        if model.data_plate is None or not factor.plates or factor.plates[0] != model.data_plate:
            continue
        for mi, monomial in enumerate(factor.monomials):
            local, glob = _split(model, monomial, local_set)
            if not glob:
                continue
            _check_not_per_item(model, factor.child, glob)
            # G slots read inside an inner plate of the item (p[z[n], j]) keep that plate
            inner = {f"@{i}" for s in glob for i in s.index
                     if i in factor.plates and i != model.data_plate}
            # letters fixed by observed data (the word of a token) first: the local step
            # then writes each token's statistics contiguously
            plates = {p.name for p in model.plates}
            shared = _letters(local, plates) & _letters(glob, plates)
            observed = {s.tensor[0] for s in local if isinstance(s, Known)
                        and s.fn == "onehot" and s.tensor} & shared
            entries: tuple[str, ...] = ()
            if len(observed) >= 2 and _flat_entries(model, factor.plates):
                # keyed by two observed indices (a rating's user and item), a dense array
                # would have one cell per pair, U·I, and every global update would contract
                # over all of them; per entry it has one per observation
                entries, observed, inner = tuple(sorted(observed)), set(), set()
            key = (tuple(sorted(observed)) + tuple(sorted(shared - observed - set(entries)))
                   + tuple(sorted(inner)))
            name = next((a.name for a in accumulators if a.factor == fi and a.local == local
                         and a.key == key and a.entries == entries),
                        f"acc_{factor.child}_{mi}")
            accumulators.append(Accumulator(name, fi, mi, local, glob, key, entries,
                                            factor.plates if entries else ()))

    klc, chosen = _klc(analysis, graph, collapse)
    methods = _methods(model) + (("klc", klc),)
    learnable = tuple(item for item in _learnable(model, globals_ + kept)
                      if _uses_of(model, item.hyper) == 1)
    steps, collapsed, assignments = _local_steps(model, graph, locals_, coupled)
    return InferencePlan(model, analysis, globals_, locals_, kept, iterate, tuple(accumulators),
                         methods, learnable, steps, collapsed, assignments, chosen)


def _klc(analysis: Analysis, graph: nx.DiGraph,
         requested: tuple[str, ...] | None) -> tuple[str, Collapse | None]:
    """Whether KLC-CG applies and with which split. A set the user or the model file names
    must be valid (refused with the reason); the default may simply not apply."""
    model = analysis.model
    if requested is not None:
        try:
            chosen = choose_collapse(analysis, graph, requested, "user")
        except CollapseError as exc:
            raise CemError(f"--collapse {','.join(requested)}: {exc}") from None
    elif model.collapse is not None:
        try:
            chosen = choose_collapse(analysis, graph, model.collapse, "model file")
        except CollapseError as exc:
            assert model.collapse_span is not None
            raise CemModelError(str(exc), model.collapse_span, model.source) from None
    else:
        try:
            chosen = choose_collapse(analysis, graph)
        except CollapseError as exc:
            return f"no: {exc}", None
    return (f"yes: collapses {', '.join(chosen.collapsed)}, parameterises "
            f"{', '.join(chosen.parameterised)}"), chosen


def _flat_entries(model: Model, plates: tuple[str, ...]) -> bool:
    """Whether arrays laid out as the data over ``plates`` have one index per entry: the data
    plate's, or a ragged inner plate's (flattened). A fixed inner plate would need two."""
    return all(model.plate(p).ragged for p in plates[1:])


def _kept(model: Model, name: str) -> bool:
    """Whether a local's q is stored for every item (warm starts between iterations, and the
    fit's output) rather than in per-item scratch: a local of the data plate alone, or one
    over fixed-size inner plates (GaP-NMF's activations H[t, k]) that is neither an
    assignment (categorical or chain: recomputed from the rest) nor introduced by the
    compiler (split counts: as large as the data)."""
    var = model.var(name)
    if len(var.plates) == 1:
        return True
    inner_fixed = not any(model.plate(p).ragged for p in var.plates[1:])
    assignment = FAMILIES[var.family].variational in ("categorical", *CHAIN_POSTERIORS)
    return inner_fixed and not assignment and model.introduced_for(name) is None


def _coupled_locals(analysis: Analysis, locals_: tuple[str, ...]) -> tuple[str, str] | None:
    """Two locals whose complete conditionals read each other's statistics (a parent and its
    child, or co-parents of one factor such as H and the split counts of GaP-NMF), if any:
    then the local step iterates, and the item's locals have no joint closed form."""
    for name in locals_:
        for message in analysis.conditional(name).messages:
            factor = analysis.factors[message.factor]
            monomial = factor.monomials[message.monomial]
            for slot in monomial.without(message.target):
                if isinstance(slot, Stat) and slot.var in locals_ and slot.var != name:
                    return name, slot.var
    return None


def _local_steps(model: Model, graph: nx.DiGraph, locals_: tuple[str, ...],
                 coupled: tuple[str, str] | None):
    """Which E-steps apply, and for Gibbs / CVB0 which locals are collapsed and which sampled.

    * mf: local mean field, always.
    * exact: q(z_n | β) = p(z_n | y_n, β) when no local depends on another local (then the
      one-pass local update is the exact conditional given the globals; SSVI §2.5).
    * gibbs / cvb0: every local is a categorical assignment or a Dirichlet whose prior is
      known and whose only children are assignments drawn from it (LDA's θ_d); the Dirichlets
      are integrated out (Dirichlet-categorical) and the assignments sampled (Mimno et al.
      2012) or updated by zero-order collapsed VB (Asuncion et al. 2009).
    """
    from .model import PlateIndex, RVar

    if model.data_plate is None:
        why = "no: the model has no data plate, so it has no local step"
        return (("mf", "yes: nothing is local (no data plate)"), ("exact", why),
                ("gibbs", why), ("cvb0", why)), (), ()
    local_edges = [(a, b) for a, b in graph.edges if a in locals_ and b in locals_]
    if local_edges:
        a, b = local_edges[0]
        exact = (f"no: local '{b}' depends on local '{a}', so p(locals | data, β) of an item "
                 "does not factorise into one conditional per local, which is what the exact "
                 "step computes")
    elif coupled is not None:
        a, b = coupled
        exact = (f"no: locals '{a}' and '{b}' meet in one factor, so p(locals | data, β) of "
                 "an item does not factorise into one conditional per local, which is what the "
                 "exact step computes")
    elif not locals_:
        exact = ("yes: the items have no latent local, so there is nothing to approximate "
                 "(the same step as mf)")
    else:
        exact = ("yes: given the globals each local depends only on data, so the local update "
                 "is its exact conditional p(z_n | y_n, β)")
    assignments = tuple(n for n in locals_ if model.var(n).family == "Categorical")
    collapsed: list[str] = []
    why = ""
    chains = [n for n in locals_ if model.var(n).family in CHAIN_FAMILIES]
    if not assignments and chains:
        why = (f"no: '{chains[0]}' is a {model.var(chains[0]).family}, a chain whose steps "
               "depend on each other; the sampled steps draw independent categorical "
               "assignments (the exact step smooths the whole chain instead)")
    elif not assignments:
        why = "no: the item has no categorical local to sample"
    for name in locals_:
        if why or name in assignments:
            continue
        var = model.var(name)
        children = list(graph.successors(name))
        latent_parents = [p for p in graph.predecessors(name) if not model.var(p).observed]
        if var.family != "Dirichlet":
            why = (f"no: local '{name}' is a {var.family}; only categorical assignments are "
                   "sampled and only Dirichlet proportions integrated out")
        elif latent_parents:
            why = (f"no: the prior of local '{name}' depends on '{latent_parents[0]}', so it "
                   "cannot be integrated out in closed form")
        elif not all(c in assignments and isinstance(model.var(c).args[0], RVar)
                     and model.var(c).args[0].name == name
                     and all(isinstance(i, PlateIndex) for i in model.var(c).args[0].indices)
                     for c in children):
            why = (f"no: local '{name}' is used other than as the probabilities of a "
                   "categorical local, so it cannot be integrated out")
        else:
            collapsed.append(name)
    for name in assignments:
        if why:
            break
        latent_children = [c for c in graph.successors(name) if c in locals_]
        if latent_children:
            why = (f"no: categorical local '{name}' has a latent local child "
                   f"'{latent_children[0]}'; the assignments must be independent given the "
                   "globals and the integrated-out proportions")
    if not why:
        hidden = f" with {', '.join(collapsed)} integrated out" if collapsed else ""
        gibbs = f"yes: samples {', '.join(assignments)}{hidden}"
        cvb0 = f"yes: updates q({'), q('.join(assignments)}){hidden}, zero-order collapsed VB"
    else:
        gibbs = cvb0 = why
    steps = (("mf", "yes: local mean field"), ("exact", exact), ("gibbs", gibbs),
             ("cvb0", cvb0))
    if why:
        return steps, (), ()
    return steps, tuple(collapsed), assignments


def _uses_of(model: Model, hyper: str) -> int:
    """How often a hyperparameter is referred to in the model (arguments and other
    hyperparameters): its references, never a plate, index or variable spelled the same."""
    from .model import RHyper, sub_exprs

    def count(expr) -> int:
        own = isinstance(expr, RHyper) and expr.name == hyper
        return own + sum(count(e) for e in sub_exprs(expr))

    total = sum(count(arg) for var in model.variables for arg in var.args)
    total += sum(count(h.value) for h in model.hypers if h.name != hyper)
    return total


def _learnable(model: Model, kept: tuple[str, ...]) -> tuple[Learnable, ...]:
    from .model import RConst, RHyper, RRepeat

    found: list[Learnable] = []
    for name in kept:
        var = model.var(name)
        if var.family == "Dirichlet":
            arg = var.args[0]
            if isinstance(arg, RRepeat) and isinstance(arg.value, RHyper):
                found.append(Learnable(arg.value.name, name, "dirichlet", None))
        elif var.family in ("Gamma", "Beta"):  # one parameter given the other (a number)
            first, second = var.args
            def text(e):
                if isinstance(e, RHyper):
                    return e.name
                return repr(e.value) if isinstance(e, RConst) else None
            kinds = ("gamma_shape", "gamma_rate") if var.family == "Gamma" else (
                "beta_a", "beta_b")
            if isinstance(first, RHyper) and text(second) is not None:
                found.append(Learnable(first.name, name, kinds[0], text(second)))
            if isinstance(second, RHyper) and text(first) is not None:
                found.append(Learnable(second.name, name, kinds[1], text(first)))
    return tuple(found)


# The variational families cemodel.runtime.sampling draws from (its SAMPLERS), and those
# whose V(β, λ) cemodel.runtime.ssvi applies, with the auxiliary draws V keeps (its
# SSVI_FAMILIES); compile-side copies, so that planning imports no numba
# (tests/test_ssvi_runtime.py checks that they match the runtime's)
SAMPLED_FAMILIES = ("dirichlet", "beta", "gamma", "normal", "mvn", "wishart", "normal_gamma",
                    "normal_wishart")
SSVI_AUX_DRAWS = {"dirichlet": 1, "beta": 2, "gamma": 1, "normal": 1, "normal_gamma": 2,
                  "mvn": 1, "wishart": 1, "normal_wishart": 2}


def _methods(model: Model) -> tuple[tuple[str, str], ...]:
    """Each global step and whether it applies (or why not); only what is implemented."""
    stochastic = "yes" if model.data_plate else (
        "no: the model has no single data plate to subsample (observations must all sit in "
        "one top-level plate)"
    )
    unsampled = sorted({FAMILIES[v.family].variational for v in model.latents
                        if not model.is_local(v)} - set(SAMPLED_FAMILIES))
    ssvi_a = stochastic if stochastic != "yes" or not unsampled else (
        f"no: cemodel cannot sample a {', '.join(unsampled)} global")
    no_v = sorted({FAMILIES[v.family].variational for v in model.latents
                   if not model.is_local(v)} - set(SSVI_AUX_DRAWS))
    ssvi = ssvi_a if ssvi_a != "yes" or not no_v else (
        f"no: V(β, λ) needs a differentiable draw of q(β), which cemodel has for "
        f"{', '.join(SSVI_AUX_DRAWS)} globals, not {', '.join(no_v)}")
    return (
        ("mf", "yes"),
        ("svi", stochastic),
        ("svi+", stochastic),
        ("svi-avg", stochastic),
        ("ssvi-a", ssvi_a),
        ("ssvi", ssvi),
    )


def describe_slot(slot: Slot) -> str:
    """Readable E[...] text for a slot (used by ``cemodel check`` and code comments)."""
    if isinstance(slot, Known):
        if slot.fn == "value":
            return _render_known_operands(slot)
        if slot.fn == "onehot":
            return f"onehot({_render_known_operands(slot)})"
        return f"{slot.fn}({_render_known_operands(slot)})"
    index = ", ".join(map(letter_text, slot.index))
    ref = f"{slot.var}[{index}]" if slot.index else slot.var
    tensor = tuple(map(letter_text, slot.tensor))
    word = {
        "log": f"log {ref}", "log1m": f"log(1-{ref})", "value": ref, "square": f"{ref}²",
        "onehot": f"{ref}", "outer": f"{ref}{ref}ᵀ", "logdet": f"log|{ref}|",
        "first": f"first {ref}", "pair": f"pair {ref}",
    }.get(slot.stat, f"{slot.stat} {ref}")  # a GaussianChain's: "cross x[s, t]"
    if slot.stat == "onehot":
        return f"q({ref}={tensor[0]})"
    if slot.stat == "first":  # a chain's initial state
        return f"q(first {ref}={tensor[0]})"
    if slot.stat == "pair":  # a chain's transition into a step
        return f"q(previous {ref}={tensor[0]}, {ref}={tensor[1]})"
    return f"E[{word}]"


def _render_known_operands(slot: Known) -> str:
    from .terms import render_expr

    return ", ".join(render_expr(o) for o in slot.operands)
