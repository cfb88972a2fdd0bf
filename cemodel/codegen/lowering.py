"""Stage 5a: InferencePlan -> KernelPlan, every "which trick applies" decision of the code
generator, made once and up front (``lower``), before anything is printed.

The kernel emitters (``codegen/kernels``) only read a KernelPlan: which locals take the
product form (the LDA E-step), which are summed implicitly and over gathered rows, which
exp(E[log ·]) arrays exist and in which layout, which messages are hoisted out of the items'
loop, the restart guard, the default start, and so on. ``lower`` is a pure function of the
plan, and a KernelPlan is immutable (tuples, frozensets and read-only mappings).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import NamedTuple

from ..families import CHAIN_POSTERIORS, FAMILIES
from ..families.base import support_signs
from ..model import Model, RBin, RConst, RHyper, RRepeat, RVar, VarDef
from ..numerics import NATURAL_BOX
from ..plan import InferencePlan
from ..terms import Factor, Known, Message, Monomial, Stat
from .knowns import collect_knowns, log_data_names
from .loops import E_name, lam_name, onehot_binding, plate_var
from .starts import default_start, drawn_means, family, gamma_products, klc_start, seeded_chains
from .symmetries import ScaleSymmetry, scale_symmetries


class ProductMessage(NamedTuple):
    """A message to a product-form local: one E[log ·] read (``stat``)."""

    message: Message
    factor: Factor
    monomial: Monomial
    stat: Stat


class ImplicitPlan(NamedTuple):
    """How a categorical local's per-item sums are computed without building its q."""

    constant: tuple[ProductMessage, ...]  # item-constant exp(E[log ·]) factors (A)
    rows: tuple[ProductMessage, ...]  # per-row factors (B)
    consumers: tuple[tuple[str, Message, Factor, Monomial], ...]  # who reads the sums


class Gathered(NamedTuple):
    """Implicit sums whose one per-row factor is read at an observed index (LDA)."""

    stat: Stat
    known: Known  # the one-hot of the observed index
    plate: str  # the ragged plate of the rows


# (name, m) -> (array, global slots, data slots, the array's letters)
PartialMessage = tuple[str, tuple, tuple, tuple[str, ...]]


@dataclass(frozen=True)
class KernelPlan:
    """What the kernels of one model compute, decided before any is printed."""

    knowns: Mapping[str, tuple[str, str]]  # Known.key -> (name, numpy expression)
    known_slots: Mapping[str, Known]  # Known.key -> the slot
    log_data_names: tuple[str, ...]  # covariates taken the log of (checked ≥ 0)
    scratch: frozenset[str]  # locals stored for the current item only
    product: Mapping[str, tuple[ProductMessage, ...]]  # local -> its product-form messages
    product_form: tuple[str, ...]  # locals whose q is a product of exp(E[log ·]) arrays
    implicit_plans: Mapping[str, ImplicitPlan]
    implicit: tuple[str, ...]  # locals summed without building q in the sweeps
    gathered: Mapping[str, Gathered]  # implicit locals whose rows are gathered once
    exp_arrays: Mapping[Stat, tuple[str, bool]]  # stat -> exp(E[stat]) array, transposed?
    log_arrays: Mapping[Stat, tuple[str, bool]]  # stat -> transposed copy of E[stat]
    exp_needed: Mapping[str, frozenset[bool]]  # var -> layouts (transposed?) of exp(E[log])
    exp_only: tuple[str, ...]  # kept Dirichlet locals read only through exp(E[log ·])
    hoisted: Mapping[tuple[str, int], str]  # (local, message) -> pre_ array
    partial: Mapping[tuple[str, int], PartialMessage]
    needs_start: tuple[str, ...]  # locals a sweep reads before updating them
    extrapolated: tuple[str, ...]  # the iterated locals SQUAREM moves (empty: plain sweeps)
    fast_guard: str | None  # the scratch local the restart guard collapses
    kept_arrays: tuple[str, ...]  # state arrays of the kept locals (warm start)
    guard_arrays: tuple[str, ...]  # arrays the restart guard keeps (empty: no guard)
    thread_private: tuple[str, ...]  # arrays each thread of the local step owns
    hyper_domains: Mapping[str, str]  # hyperparameter -> domain checked when bound
    seeded_chains: tuple[str, ...]  # MarkovChain locals started from seed steps
    gamma_products: tuple[str, ...]  # Gamma globals started apart (summed products)
    scale_symmetries: tuple[ScaleSymmetry, ...]  # Gamma globals seen only as a product
    drawn_means: tuple[str, ...]  # Normal/MVN globals whose random start is a prior draw
    default_start: str  # 'prior', 'random' or 'seeds'
    default_start_reason: str
    klc_start: str  # 'seeds': KLC-CG's θ from q(Z) after the seeded start, else 'random'
    ssvi_applies: bool  # SSVI's V-step (plan.methods) for a model with globals
    warm_start_applies: bool  # the local step can continue from the kept locals
    roles: Mapping[str, str]  # every array the module allocates -> its role (see ROLES)

    def implicit_source(self, consumer: str, monomial: Monomial) -> str | None:
        """The implicit categorical whose sums this monomial (to ``consumer``) reads."""
        return _implicit_source(self.implicit_plans, consumer, monomial)


def lower(plan: InferencePlan) -> KernelPlan:
    """Every decision of the kernel emitters for ``plan`` (pure)."""
    model = plan.model
    knowns, slots = collect_knowns(plan)
    scratch = frozenset(v for v in plan.locals if v not in plan.kept_locals)
    product = {}
    for name in plan.locals:
        found = _product_messages(plan, name)
        if found:
            product[name] = found
    exp_arrays, log_arrays, exp_needed = _exp_arrays(plan, product)
    implicit_plans = {}
    for name in plan.locals:
        found = _implicit_plan(plan, name, product, scratch)
        if found is not None:
            implicit_plans[name] = found
    gathered = {}
    for name, implicit in implicit_plans.items():
        found = _gathered(plan, name, implicit, exp_arrays)
        if found is not None:
            gathered[name] = found
    hoisted = _hoisted(plan, implicit_plans)
    kept_arrays = _kept_arrays(plan, exp_needed)
    guarded = plan.local_iterations and bool(plan.kept_locals)
    needs_start = tuple(n for n in plan.locals if _read_before_update(plan, n))
    chains = seeded_chains(plan)
    gamma = gamma_products(plan)
    drawn = drawn_means(plan)
    start, reason = default_start(plan, chains, gamma, drawn)
    thread_private = _thread_private(plan, scratch, product, implicit_plans, gathered)
    return KernelPlan(
        knowns=MappingProxyType(knowns),
        known_slots=MappingProxyType(slots),
        log_data_names=log_data_names(slots.values()),
        scratch=scratch,
        product=MappingProxyType(product),
        product_form=tuple(product),
        implicit_plans=MappingProxyType(implicit_plans),
        implicit=tuple(implicit_plans),
        gathered=MappingProxyType(gathered),
        exp_arrays=MappingProxyType(exp_arrays),
        log_arrays=MappingProxyType(log_arrays),
        exp_needed=MappingProxyType(exp_needed),
        exp_only=tuple(n for n in plan.kept_locals if plan.local_iterations
                       and family(model, n) == "dirichlet" and exp_needed.get(n) == {False}),
        hoisted=MappingProxyType(hoisted),
        partial=MappingProxyType(_partial(plan, implicit_plans, hoisted)),
        needs_start=needs_start,
        extrapolated=_extrapolated(plan, needs_start),
        fast_guard=_fast_guard(plan, scratch, implicit_plans, gathered),
        kept_arrays=kept_arrays,
        guard_arrays=kept_arrays if guarded else (),
        thread_private=thread_private,
        hyper_domains=MappingProxyType(_hyper_domains(plan)),
        seeded_chains=chains,
        gamma_products=gamma,
        scale_symmetries=scale_symmetries(plan),
        drawn_means=drawn,
        default_start=start,
        default_start_reason=reason,
        klc_start=klc_start(plan, start),
        ssvi_applies=bool(plan.globals) and dict(plan.methods).get("ssvi") == "yes",
        warm_start_applies=(model.data_plate is not None and plan.local_iterations
                            and any(n in plan.kept_locals for n in needs_start)),
        roles=MappingProxyType(array_roles(plan, knowns, exp_needed, thread_private)),
    )


def _extrapolated(plan: InferencePlan, needs_start: tuple[str, ...]) -> tuple[str, ...]:
    """The locals whose sweeps SQUAREM extrapolates (runtime/extrapolation.py): every local
    the sweeps iterate, when each is kept per item with a row of at most one axis and a
    family whose natural parameters range over a box (``NATURAL_BOX``: the point is checked
    entry by entry), and a sweep reads no scratch local before updating it (so a sweep is a
    map of the kept locals alone). Otherwise none: a matrix family's domain (positive
    definite) would need a factorisation per point, and a scratch local's rows are the
    whole scratch array."""
    model = plan.model
    if not (plan.local_iterations and plan.kept_locals) or model.data_plate is None:
        return ()
    if any(n not in plan.kept_locals for n in needs_start):
        return ()
    for name in plan.kept_locals:
        inner = len(model.var(name).plates) - 1
        if family(model, name) not in NATURAL_BOX or any(
                inner + rank > 1 for _, rank in stats(model, name)):
            return ()
    return plan.kept_locals


ROLES = ("data", "hyper", "known", "global", "global_exp", "local", "kept_local", "item",
         "item_count", "statistic", "entry_statistic", "thread", "scratch")


def array_roles(plan: InferencePlan, knowns: Mapping[str, tuple[str, str]],
                exp_needed: Mapping[str, frozenset[bool]],
                thread_private: tuple[str, ...]) -> dict[str, str]:
    """What each array of the fit state holds: ``data`` (bound, never changed), ``hyper``,
    ``known`` (functions of hyperparameters and data), ``global`` (a global's λ),
    ``global_exp`` (its E[t] and the exp(E[log ·]) copies the kernels read), ``local`` and
    ``kept_local`` (q of a local: the item's rows only, or one row per item), ``item`` (per-item
    inputs: SVI+ weights, seed categories), ``item_count`` (per-item counts the local step
    writes: its inner sweeps), ``statistic`` (the accumulated sufficient
    statistics), ``entry_statistic`` (statistics kept per data entry, ``Accumulator.entries``:
    out of core a minibatch's own), ``thread`` (a thread's own copy) and ``scratch``
    (buffers of one local step)."""
    model = plan.model
    roles: dict[str, str] = {}
    for name in (*plan.globals, *plan.locals):
        arrays = [f(name, st) for st, _ in stats(model, name) for f in (lam_name, E_name)]
        for transposed in sorted(exp_needed.get(name, ())):
            arrays += [f"XT_{name}_log", f"ET_{name}_log"] if transposed else [f"X_{name}_log"]
        for array in arrays:
            if name in plan.globals:
                roles[array] = "global" if array.startswith("lam_") else "global_exp"
            else:
                roles[array] = "kept_local" if name in plan.kept_locals else "local"
    for acc in plan.stored_accumulators:
        roles[acc.name] = "entry_statistic" if acc.per_entry else "statistic"
    for name in (*thread_private, *[a.name for a in plan.stored_accumulators
                                    if not a.per_entry]):
        roles[f"{name}_threads"] = "thread"
    roles.update(item_weight="item", seed_category="item")
    if plan.local_iterations:
        roles["local_sweeps"] = "item_count"
    for v in (*model.observed, *model.data):
        roles[v.name] = "data"
    for p in model.plates:
        if p.ragged:
            roles[f"{p.name}_ptr"] = roles[f"{p.name}_weight"] = "data"
    for d in model.dims:
        roles[f"n_{d.name}"] = "data"
    for h in model.hypers:
        roles[h.name] = "hyper"
    for name, _ in knowns.values():
        roles.setdefault(name, "known")
    return roles


def role_of(roles: Mapping[str, str], name: str) -> str:
    """An array's role; every other buffer of the local step is scratch."""
    return roles.get(name, "scratch")


# -- questions about the plan, shared with the kernel emitters -----------------------------
def stats(model: Model, name: str) -> tuple[tuple[str, int], ...]:
    """A variable's sufficient statistics and their ranks."""
    return FAMILIES[model.var(name).family].stats


def messages_to(plan: InferencePlan, var: str) -> Iterator[tuple[Message, Factor, Monomial]]:
    """The messages of q(var)'s conditional, each with its factor and monomial."""
    for message in plan.analysis.conditional(var).messages:
        factor = plan.analysis.factors[message.factor]
        yield message, factor, factor.monomials[message.monomial]


def target_bindings(model: Model, var: VarDef, target: Stat) -> tuple[dict, dict]:
    """Bind the factor's plates/gates at the target to the row loop variables."""
    plate_names = {p.name for p in model.plates}
    plates: dict[str, str] = {}
    letters: dict[str, str] = {}
    for own_plate, entry in zip(var.plates, target.index, strict=True):
        if entry in plate_names:
            plates[entry] = plate_var(own_plate)
        else:
            letters[entry] = plate_var(own_plate)
    return plates, letters


def _product_messages(plan: InferencePlan, name: str) -> tuple[ProductMessage, ...] | None:
    """The messages to a categorical local if each is one E[log ·] read, else None.

    Then q_k ∝ Π_messages exp(E[log ·])_k: the kernel multiplies precomputed
    exp(E[log ·]) arrays instead of exponentiating per item (the LDA E-step trick,
    derived here for any model of that shape)."""
    model = plan.model
    var = model.var(name)
    if family(model, name) not in ("categorical", "split") or name not in plan.locals:
        return None
    found = []
    for message, factor, monomial in messages_to(plan, name):
        others = monomial.without(message.target)
        stats_ = [s for s in others if isinstance(s, Stat)]
        knowns = [s for s in others if isinstance(s, Known)]
        if monomial.coef != 1.0 or len(stats_) != 1 or stats_[0].stat != "log":
            return None
        if not all(onehot_binding(k) for k in knowns):
            return None
        plates, _ = target_bindings(model, var, message.target)
        if any(p not in plates for p in factor.plates):
            return None
        found.append(ProductMessage(message, factor, monomial, stats_[0]))
    return tuple(found)


# -- the product form and its arrays ---------------------------------------------------------
def _exp_arrays(plan: InferencePlan, product: Mapping[str, tuple[ProductMessage, ...]]):
    """Which exp(E[log ·]) arrays product-form kernels read, and in which layout."""
    exp_arrays: dict[Stat, tuple[str, bool]] = {}
    log_arrays: dict[Stat, tuple[str, bool]] = {}
    needed: dict[str, set[bool]] = {}  # var -> layouts (transposed?) needed
    for name in plan.locals:
        for message, _, _, stat in product.get(name, ()):
            var = plan.model.var(stat.var)
            looped = message.target.tensor[0]
            transposed = (len(var.plates) == 1 and stat.index == (looped,)
                          and len(stat.tensor) == 1)
            prefix = "XT" if transposed else "X"
            exp_arrays[stat] = (f"{prefix}_{stat.var}_{stat.stat}", transposed)
            needed.setdefault(stat.var, set()).add(transposed)
            if transposed:  # E[log ·] in the same layout, for the entropy
                log_arrays[stat] = (f"ET_{stat.var}_{stat.stat}", True)
    return exp_arrays, log_arrays, {k: frozenset(v) for k, v in needed.items()}


def _implicit_plan(plan: InferencePlan, name: str, product, scratch) -> ImplicitPlan | None:
    """When q(z) of a categorical local is needed during the sweeps only through
    per-item sums Σ_n w_n q(z_n = c): (item-constant messages, row messages, consumers).

    Then S_c = A_c Σ_n (w_n / s_n) B_nc with s_n = Σ_c A_c B_nc, where A multiplies the
    item-constant exp(E[log ·]) and B the per-row ones: q itself is only built once the
    sweeps have converged (Hoffman, Blei & Bach 2010 compute LDA's E-step this way)."""
    if not product.get(name) or name not in scratch:
        return None
    data_plate = plan.model.data_plate
    constant, rows = [], []
    for item in product[name]:
        message, _, monomial, stat = item
        knowns = [s for s in monomial.without(message.target) if isinstance(s, Known)]
        looped = message.target.tensor[0]
        if not knowns and set(stat.index) <= {data_plate, looped} and stat.var in (
                plan.kept_locals) + plan.globals:
            constant.append(item)
        else:
            rows.append(item)
    consumers = []
    for other in plan.locals:
        if other == name:
            continue
        for message, factor, monomial in messages_to(plan, other):
            zs = monomial.stats_of(name)
            if not zs:
                continue
            rest = [s for s in monomial.without(message.target) if s not in zs]
            if (other not in plan.kept_locals or rest or len(zs) != 1
                    or zs[0].tensor != message.target.tensor
                    or plan.model.var(other).plates != (data_plate,)):
                return None
            consumers.append((other, message, factor, monomial))
    if not consumers or not constant:
        return None
    return ImplicitPlan(tuple(constant), tuple(rows), tuple(consumers))


def _gathered(plan: InferencePlan, name: str, implicit: ImplicitPlan,
              exp_arrays) -> Gathered | None:
    """For implicit sums whose one per-row factor is a transposed exp(E[log ·]) array read
    at an observed index (LDA: exp(E[log beta])[w[d, n], ·]), the item's rows can be
    gathered once and each sweep is two matrix-vector products."""
    var = plan.model.var(name)
    if len(var.plates) != 2 or not plan.model.plate(var.plates[1]).ragged:
        return None
    if len(implicit.rows) != 1:
        return None
    message, _, monomial, stat = implicit.rows[0]
    knowns = [s for s in monomial.without(message.target) if isinstance(s, Known)]
    if (len(knowns) != 1 or not onehot_binding(knowns[0])
            or not exp_arrays.get(stat, ("", False))[1]
            or stat.index != message.target.tensor):
        return None
    return Gathered(stat, knowns[0], var.plates[1])


def _implicit_source(implicit_plans: Mapping[str, ImplicitPlan], consumer: str,
                     monomial: Monomial) -> str | None:
    for z, implicit in implicit_plans.items():
        if any(c == consumer and m is monomial for c, _, _, m in implicit.consumers):
            return z
    return None


# -- item-independent messages ---------------------------------------------------------------
def _skips_row_plates(plan: InferencePlan, name: str) -> bool:
    """A chain, or a local with a ragged inner plate: no message to it is hoisted."""
    var = plan.model.var(name)
    return family(plan.model, name) in CHAIN_POSTERIORS or any(
        plan.model.plate(p).ragged for p in var.plates[1:])


def _hoisted(plan: InferencePlan, implicit_plans) -> dict[tuple[str, int], str]:
    """Messages to a local that read only globals and constants but sum over plates or
    letters (GaP-NMF's Σ_f E[θ_k] E[W_fk] to H; a Gaussian mixture's tr(E[Λ_k] E[μ_k μ_kᵀ])
    to z): the same for every item, so hoist_messages contracts them once per local step
    into pre_<local>_<m> instead of once per item and sweep. (message index -> array)"""
    model = plan.model
    found: dict[tuple[str, int], str] = {}
    for name in plan.locals:
        if _skips_row_plates(plan, name):
            continue
        var = model.var(name)
        for m, (message, factor, monomial) in enumerate(messages_to(plan, name)):
            if factor.child == name or _implicit_source(implicit_plans, name,
                                                        monomial) is not None:
                continue
            others = monomial.without(message.target)
            if not all((isinstance(s, Stat) and s.var in plan.globals)
                       or (isinstance(s, Known) and not s.plates and not onehot_binding(s))
                       for s in others):
                continue
            plates, letters = target_bindings(model, var, message.target)
            free_plates = [p for p in factor.plates if p not in plates and p != model.data_plate]
            if any(model.plate(p).ragged for p in free_plates):
                continue
            dims = dict(factor.index_dims)
            used = {e for s in others for e in s.tensor
                    + (s.index if isinstance(s, Stat) else ()) if e in dims}
            free_letters = used - set(letters) - set(message.target.tensor)
            if free_plates or free_letters:  # a sum: worth computing once
                found[(name, m)] = f"pre_{name}_{m}"
    return found


def _split_slots(plan: InferencePlan, slots, dims) -> tuple[list, list] | None:
    """A message's other slots as (global part, data part); None if it reads a local."""
    glob, data = [], []
    for slot in slots:
        if isinstance(slot, Stat) and slot.var in plan.globals and all(
                i in dims for i in slot.index):
            glob.append(slot)
        elif isinstance(slot, Known) and not slot.plates and not onehot_binding(slot):
            glob.append(slot)
        elif isinstance(slot, Known):
            data.append(slot)
        else:
            return None
    return glob, data


def _partial(plan: InferencePlan, implicit_plans,
             hoisted) -> dict[tuple[str, int], PartialMessage]:
    """Messages to a local of the data plate alone whose global slots, multiplied
    together, sum over a letter the data do not touch: xᵀ E[Λ_k] E[μ_k] in a Gaussian
    mixture is Σ_i x_i (E[Λ_k] E[μ_k])_i, and the product E[Λ_k] E[μ_k] is the same for
    every item. (message -> (array, global slots, data slots, the array's letters))"""
    model = plan.model
    found: dict[tuple[str, int], PartialMessage] = {}
    for name in plan.locals:
        var = model.var(name)
        if family(model, name) in CHAIN_POSTERIORS or len(var.plates) != 1:
            continue
        for m, (message, factor, monomial) in enumerate(messages_to(plan, name)):
            if ((name, m) in hoisted or factor.child == name
                    or factor.plates != (model.data_plate,)
                    or _implicit_source(implicit_plans, name, monomial) is not None):
                continue
            split = _split_slots(plan, monomial.without(message.target),
                                 dict(factor.index_dims))
            if split is None:
                continue
            glob, data = split
            if not data or sum(isinstance(g, Stat) for g in glob) < 2:
                continue
            _, letters = target_bindings(model, var, message.target)
            bound = set(letters) | set(message.target.tensor)
            used = {e for g in glob for e in g.tensor
                    + (g.index if isinstance(g, Stat) else ())}
            touched = {e for d in data for e in d.tensor}
            if not used - touched - bound:
                continue  # nothing to sum ahead of the data
            key = tuple(e for e in message.target.tensor) + tuple(
                sorted((used & touched) - set(message.target.tensor)))
            found[(name, m)] = (f"pre_{name}_{m}", tuple(glob), tuple(data), key)
    return found


# -- the local step ----------------------------------------------------------------------------
def _read_before_update(plan: InferencePlan, name: str) -> bool:
    """Whether a local updated before ``name`` in a sweep (children first: the reverse
    of the topological order) reads q(name): then ``name`` needs a start. A child reads
    its parent; co-parents of one factor read each other (GaP-NMF's H and split)."""
    later = plan.locals[plan.locals.index(name) + 1:]
    return any(monomial.stats_of(name) for reader in later
               for _, _, monomial in messages_to(plan, reader))


def _fast_guard(plan: InferencePlan, scratch, implicit_plans, gathered) -> str | None:
    """The scratch local the guard can collapse (implicit, gathered rows), if any."""
    found = [n for n in plan.locals if n in scratch]
    if len(found) == 1 and found[0] in implicit_plans and found[0] in gathered:
        return found[0]
    return None


def _kept_arrays(plan: InferencePlan, exp_needed) -> tuple[str, ...]:
    """The state arrays that hold the kept locals' q: what a warm start continues from."""
    arrays: list[str] = []
    for name in plan.kept_locals:
        for stat, _ in stats(plan.model, name):
            arrays += [lam_name(name, stat), E_name(name, stat)]
        if False in exp_needed.get(name, ()):
            arrays.append(f"X_{name}_log")
    return tuple(arrays)


def _thread_private(plan: InferencePlan, scratch, product, implicit_plans,
                    gathered) -> tuple[str, ...]:
    """Arrays the local step writes for the current item only (its scratch rows and
    buffers): one copy per thread."""
    names: list[str] = []
    for name in plan.locals:
        if name in scratch:
            names += [lam_name(name, st) for st, _ in stats(plan.model, name)]
            names += [E_name(name, st) for st, _ in stats(plan.model, name)]
            if name in product:
                names += [f"H_{name}", f"logZ_{name}"]
            if family(plan.model, name) in CHAIN_POSTERIORS:
                names.append(f"H_{name}")
    for name in implicit_plans:
        names += [f"A_{name}", f"S_{name}"]
        if name in gathered:
            names += [f"B_{name}", f"s_{name}"]
    return tuple(names)


# -- hyperparameter domains --------------------------------------------------------------------
# a hyperparameter read as parameters of several domains is checked in the strictest
_DOMAIN_RANK = {"positive": 0, "spd": 0, "shape": 1, "unit": 2, "simplex": 2}


def _hyper_domains(plan: InferencePlan) -> dict[str, str]:
    """Hyperparameters used directly as a positive, SPD or probability family parameter:
    checked to be in that domain when a fit binds them (a Dirichlet concentration of 0, a
    negative rate, probabilities summing to 1.5)."""
    found: dict[str, str] = {}
    for var in plan.model.variables:
        for param, arg in zip(FAMILIES[var.family].params, var.args, strict=True):
            inner = arg.value if isinstance(arg, RRepeat) else arg
            if isinstance(inner, RHyper) and param.domain in _DOMAIN_RANK:
                domain = "shape" if param.smallest > 0 else param.domain
                if _DOMAIN_RANK[domain] >= _DOMAIN_RANK.get(found.get(inner.name), -1):
                    found[inner.name] = domain
            elif param.domain == "positive":  # c · lam: positive only where c is
                scale = _sole_hyper_factor(plan.model, inner)
                if scale is not None:
                    found.setdefault(scale, "positive")
    return found


def _sole_hyper_factor(model: Model, expr) -> str | None:
    """The one hyperparameter among the factors of a product whose other factors are
    positive (constants, variables of positive support): the product's sign is its sign."""
    factors, stack = [], [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, RBin) and node.op in "*/":
            stack += [node.left, node.right]
        else:
            factors.append(node)
    hypers = [f for f in factors if isinstance(f, RHyper)]
    positive = all(
        (isinstance(f, RConst) and f.value > 0)
        or (isinstance(f, RVar)
            and support_signs(FAMILIES[model.var(f.name).family].support) == {1})
        for f in factors if not isinstance(f, RHyper))
    return hypers[0].name if len(factors) > 1 and len(hypers) == 1 and positive else None
