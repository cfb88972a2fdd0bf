"""local_step: the E-step over a share of the items of the data plate. Per item:
its start (k-means++ seeding, or the locals' priors, or a warm start), the sweeps to
convergence (children first), the restart guard, the sufficient statistics into the
accumulators and the item's local ELBO terms. ``threaded_kernel``, ``accumulate_nodes``
and ``local_elbo_nodes`` serve the KLC kernels too."""

from __future__ import annotations

from collections.abc import Mapping

from ...model import VarDef
from ...plan import describe_slot
from ...terms import letter_text
from ..context import KERNEL, EmitContext, entry_slots
from ..loops import (
    ArgRecorder,
    Contraction,
    dim_name,
    emit_contraction,
    entry_plates,
    plate_var,
)
from ..pycode import Block, Comment, Function, Line, Node, Shares
from . import extrapolation

Callees = Mapping[str, tuple[str, ...]]  # kernel -> its parameters, for calls to it


def emit_local_step(ctx: EmitContext, callees: Callees) -> Function:
    """E-step over every item of the data plate; accumulates the sufficient statistics."""
    plan = ctx.plan
    args = ArgRecorder()
    args.supply("seeding")
    args.supply("items")
    args.use("seed_category")
    args.supply("max_local_iter")
    args.supply("local_tol")
    categorical = [n for n in plan.locals if ctx.family(n) == "categorical"]
    chains = ctx.kplan.seeded_chains
    init_random = _seeding(ctx, callees, categorical, args)
    if plan.local_iterations:
        init_sweeps = _sweeps(ctx, callees, args)
    else:
        init_sweeps = [ctx.call_update(callees, n, "True", args) for n in plan.locals]
    if plan.local_iterations and plan.kept_locals:
        before, after = _guard_nodes(ctx, callees, args)
        args.supply("guard")
        init_sweeps = [Block("if guard", tuple(before)), *init_sweeps,
                       Block("if guard", tuple(after))]
    per_item: list[Node] = []
    if categorical or chains:
        per_item.append(Block("if seeding", tuple(init_random),
                              comment="k-means++ seed items: seed c is all category c"
                              if categorical else "k-means++ seed steps: seed c in state c"))
        per_item.append(Block("else", tuple(init_sweeps)))
    else:  # nothing to seed: start=seeds needs a categorical local
        per_item += init_sweeps
    per_item += accumulate_nodes(ctx, args, suffix="_t")
    elbo_nodes = local_elbo_nodes(ctx, args)
    if elbo_nodes:
        per_item.append(Block(f"if {args.supply('evaluate')}", tuple(elbo_nodes),
                              comment="ELBO: local terms and local entropies (a stochastic "
                              "step has no use for them)"))
    per_item = ctx.bases(per_item, args) + per_item
    doc = ("Local step: each item's local factors to convergence, then the sufficient "
           "statistics.\n\n"
           "Shares `share_start` to `share_stop` of `n_threads` of the items, each with its own\n"
           "scratch arrays and accumulators (<name>_threads[thread]); rt.run_shares runs the\n"
           "shares (all in one call, or one call per share on the threads) and sums their\n"
           "statistics in share order. Returns the shares' ELBO terms that involve only local\n"
           "variables and data.")
    return threaded_kernel(ctx, "local_step", per_item, args, doc, buffers=_buffers(ctx),
                           hoist=True)


def _buffers(ctx: EmitContext) -> tuple[Node, ...]:
    """Each thread's copies of the previous sweep and of the item's state (the guard)."""
    buffers: list[Node] = []
    if ctx.plan.local_iterations:
        scalar = _scalar_rows(ctx)
        for name in ctx.plan.kept_locals or ctx.plan.locals:
            lam = ctx.layout.lam(name, ctx.stats(name)[0][0])
            row = "" if name in ctx.layout.scratch else _row(scalar, name, "0")
            buffers.append(Line(f"old_{name} = np.empty_like({lam}{row})",
                                "the previous sweep, for the convergence test"))
        for a in ctx.kplan.guard_arrays:
            buffers.append(Line(f"keep_{a} = np.empty_like({a}{_row(scalar, a, '0')})",
                                "the item's previous state, for the restart guard"))
        buffers += extrapolation.buffer_lines(ctx)
    return tuple(buffers)


def _scalar_rows(ctx: EmitContext) -> frozenset[str]:
    """The kept locals with one number per item (a Gamma per data point, as Student-t's
    precision scale, or a Pólya-Gamma ω_n) and their state arrays: numba copies no scalar
    into an array, so their rows are taken as one-element slices."""
    names: set[str] = set()
    for name in ctx.plan.kept_locals:
        stats = ctx.stats(name)
        if len(ctx.var(name).plates) == 1 and all(rank == 0 for _, rank in stats):
            names |= {name, f"X_{name}_log", *(ctx.layout.lam(name, st) for st, _ in stats),
                      *(ctx.layout.E(name, st) for st, _ in stats)}
    return frozenset(names)


def _row(scalar: frozenset[str], name: str, item: str) -> str:
    """The item's row of a kept local's array: ``[item]``, a slice where it is one number."""
    return f"[{item}:{item} + 1]" if name in scalar else f"[{item}]"


def _seeding(ctx: EmitContext, callees: Callees, categorical: list[str],
             args: ArgRecorder) -> list[Node]:
    """The seeding pass of an item: its seed rows one-hot, the other locals from the priors."""
    chains = ctx.kplan.seeded_chains
    nodes: list[Node] = []
    for name in categorical:
        nodes += _seed_categorical(ctx, ctx.var(name), args)
    for name in chains:
        nodes += _seed_chain(ctx, ctx.var(name), args)
    for name in ctx.plan.locals:
        if name not in categorical and name not in chains:
            nodes.append(Line(ctx.call(callees, f"update_{name}", ctx.all_messages(), args)))
    return nodes


def _seed_categorical(ctx: EmitContext, var: VarDef, args: ArgRecorder) -> list[Node]:
    """Seeding: every row of a seed item is its category; other items weigh nothing."""
    row = ctx.row_index(var, args)
    E = args.use(ctx.layout.E(var.name, "onehot"))
    k = args.use(dim_name(var.categories))
    nodes: list[Node] = [
        Line(f"{E}[{row}] = 0.0"),
        Block(f"if 0 <= seed_category[{ctx.item}] < {k}",
              (Line(f"{E}[{row}, seed_category[{ctx.item}]] = 1.0"),)),
    ]
    return ctx.item_rows(var, nodes, args)


def _seed_chain(ctx: EmitContext, var: VarDef, args: ArgRecorder) -> list[Node]:
    """Seeding: a chain's seed steps are in their state; its other steps, its first
    state and its transitions weigh nothing."""
    row = ctx.row_index(var, args)
    E = [args.use(ctx.layout.E(var.name, st)) for st, _ in ctx.stats(var.name)]
    seed = f"seed_category[{', '.join(ctx.layout.data_row(var.plates, args))}]"
    k = args.use(dim_name(var.categories))
    nodes: list[Node] = [
        *[Line(f"{e}[{row}] = 0.0") for e in E],
        Block(f"if 0 <= {seed} < {k}", (Line(f"{E[0]}[{row}, {seed}] = 1.0"),)),
    ]
    return [*ctx.item_rows(var, nodes, args),
            Line(f"{args.use(f'H_{var.name}')}[0] = 0.0",
                 "the seeding pass is not part of the ELBO")]


def _tracked(ctx: EmitContext, name: str, args: ArgRecorder) -> str:
    """The natural parameters of a local whose change ends the sweeps: the item's row of
    a kept local, the whole scratch array of one stored per item."""
    lam = args.use(ctx.layout.lam(name, ctx.stats(name)[0][0]))
    if name in ctx.layout.scratch:
        return lam
    return lam + _row(_scalar_rows(ctx), name, ctx.item)


def _sweeps(ctx: EmitContext, callees: Callees, args: ArgRecorder) -> list[Node]:
    """The item's start, its sweeps until the locals stop changing, and what is computed
    once they have converged."""
    plan, kplan = ctx.plan, ctx.kplan
    # a sweep runs children first, so only locals with local children need a start:
    # their prior, or (warm) their value from the previous iteration
    nodes: list[Node] = []
    starts: list[Node] = []
    for name in kplan.needs_start:
        if _corner_start_applies(ctx, name):
            starts += _corner_start(ctx, callees, name, args)
            continue
        start = ctx.call_update(callees, name, "False", args)
        (starts if name in plan.kept_locals else nodes).append(start)
    if starts:
        args.supply("warm")
        nodes.append(Block("if not warm", tuple(starts)))
    tracked = plan.kept_locals or plan.locals
    counter = f"{args.use('local_sweeps')}[{ctx.item}]"
    sweep: list[Node] = [Line(f"{counter} += 1"), Line("change = 0.0")]
    for name in tracked:
        sweep.append(Line(f"rt.copy_into(old_{name}, {_tracked(ctx, name, args)})"))
    sweep += extrapolation.save_nodes(ctx, args)
    finish = [ctx.expect_line(ctx.var(n), ctx.item, args) for n in kplan.exp_only]
    for name in reversed(plan.locals):
        if name in kplan.implicit:
            sweep.append(Line(f"use_sums_{name} = "
                              + ctx.call(callees, f"sums_{name}", {}, args)))
            sweep.append(Block(f"if not use_sums_{name}", (
                *finish, ctx.call_update(callees, name, "True", args))))
        else:
            sweep.append(ctx.call_update(callees, name, "True", args, exp_only="True"))
    for name in tracked:
        sweep.append(Line(f"change += rt.mean_abs_change({_tracked(ctx, name, args)}, "
                          f"old_{name})"))
    mean = "change" if len(tracked) == 1 else f"change / {len(tracked)}"
    sweep.append(Block(f"if {mean} < local_tol", (Line("break"),)))
    sweep += extrapolation.step_nodes(ctx, callees, args)
    gathers: list[Node] = [Line(ctx.call(callees, f"gather_{n}", {}, args))
                           for n in kplan.implicit if n in kplan.gathered]
    if gathers and kplan.fast_guard is not None and plan.kept_locals:
        gathers = [Block("if not guard", tuple(gathers),
                         comment="the guard gathered them already")]
    nodes += gathers
    nodes.append(Line(f"{counter} = 0",
                      "the item's sweeps (MF reports them: FitResult.notes['local_sweeps'])"))
    nodes.append(Block("for sweep in range(max_local_iter)", tuple(sweep)))
    if finish:
        nodes.append(Comment("E[log ·] of the item, once its sweeps converged"))
        nodes += finish
    for name in kplan.implicit:
        nodes.append(Comment(f"q({name}) itself, from the converged sweeps"))
        nodes.append(ctx.call_update(callees, name, "True", args,
                                     entropy=_entropy_wanted(ctx, name, args)))
    return nodes


def _corner_start_applies(ctx: EmitContext, name: str) -> bool:
    """The one kept local, a categorical the sweeps read before updating it, beside scratch
    locals (recomputed from it, as the restart guard does), whose item bound
    (``item_elbo``) reads its q alone (not a product form's λ or entropy array)."""
    return (ctx.family(name) == "categorical" and ctx.plan.kept_locals == (name,)
            and len(ctx.var(name).plates) == 1 and len(ctx.plan.locals) > 1
            and ctx.kplan.fast_guard is None and name not in ctx.kplan.product_form)


def _corner_start(ctx: EmitContext, callees: Callees, name: str,
                  args: ArgRecorder) -> list[Node]:
    """q(name = c) ∝ exp(the item's bound with name = c and the other locals at their
    optimum given c): the softmax of its corners' bounds. From its prior alone, coupled
    locals (split counts under a mixture's z) settle item by item in a wrong component."""
    var = ctx.var(name)
    row = ctx.row_index(var, args)
    E, lam = args.use(ctx.layout.E(name, "onehot")), args.use(ctx.layout.lam(name, "onehot"))
    others = [ctx.call_update(callees, n, "True", args)  # the scratch locals, given c
              for n in reversed(ctx.plan.locals) if n != name]
    corner = (Line(f"{E}[{row}] = 0.0"), Line(f"{E}[{row}, corner] = 1.0"), *others,
              Line(f"{lam}[{row}, corner] = " + ctx.call(callees, "item_elbo", {}, args)))
    return [Block(f"for corner in range({args.use(ctx.categories(var))})", corner,
                  comment=f"start: q({name}) ∝ exp(the item's bound at each {name})"),
            Line(f"rt.categorical_expected_stats({lam}[{row}], {E}[{row}])")]


def _entropy_wanted(ctx: EmitContext, name: str, args: ArgRecorder) -> str:
    """When the final update of a product-form local needs its λ, log-normaliser and entropy:
    for the ELBO (``evaluate``) and the restart guard; always for a local kept in the state
    (its λ is part of the result). A stochastic step needs q alone."""
    if name not in ctx.layout.scratch:
        return "True"
    needed = [args.supply("evaluate")]
    if ctx.plan.kept_locals:
        needed.append("guard")  # supplied by emit_local_step with the guard itself
    return " or ".join(needed)


# the restart guard's round-off margin, relative to the item's bound: a sum over an item's
# entries carries ~1e-16 relative error per term, far below this
GUARD_ROUNDOFF = 1e-12


def _guard_nodes(ctx: EmitContext, callees: Callees,
                 args: ArgRecorder) -> tuple[list[Node], list[Node]]:
    """Before and after an item's restarted local step: keep the restart only if it is at
    least as good as the previous state (re-optimised in the scratch locals), so the
    ELBO never decreases."""
    item = ctx.item
    scratch = [n for n in reversed(ctx.plan.locals) if n in ctx.layout.scratch]
    arrays = ctx.kplan.guard_arrays
    scalar = _scalar_rows(ctx)
    rebuild = [ctx.call_update(callees, n, "True", args) for n in scratch]
    keep = [Line(f"rt.copy_into(keep_{a}, {args.use(a)}{_row(scalar, a, item)})") for a in arrays]
    fast = ctx.kplan.fast_guard
    if fast is not None:
        value = (ctx.call(callees, f"collapsed_{fast}", {}, args) + " + "
                 + ctx.call(callees, f"item_elbo_without_{fast}", {}, args))
        before: list[Node] = [
            *keep,
            Line(ctx.call(callees, f"gather_{fast}", {}, args)),
            Line(f"previous = {value}", f"the previous state with q({fast}) at its optimum"),
        ]
        plate = ctx.kplan.gathered[fast].plate
        ptr, weight = args.use(f"{plate}_ptr"), args.use(f"{plate}_weight")
        logZ = args.use(f"logZ_{fast}")
        value = (f"rt.weighted_sum({weight}[{ptr}[{item}]:{ptr}[{item} + 1]], "
                 f"{logZ}[:{ptr}[{item} + 1] - {ptr}[{item}]]) + "
                 + ctx.call(callees, f"item_elbo_without_{fast}", {}, args))
    else:
        value = ctx.call(callees, "item_elbo", {}, args)
        before = [
            *keep,
            *rebuild,
            Line(f"previous = {value}",
                 "the previous state, re-optimised in its scratch locals"),
        ]
    after: list[Node] = [
        # a tie within round-off goes to the restart: decided by the last bits, it would let
        # fits that add the same statistics in another order (threads, Dask) part ways
        Block(f"if {value} < previous - {GUARD_ROUNDOFF!r} * abs(previous)", (
            Comment("the restart settled lower (beyond round-off): keep the previous state"),
            *[Line(f"{a}{_row(scalar, a, item)} = keep_{a}") for a in arrays],
            *rebuild,
        )),
    ]
    return before, after


def threaded_kernel(ctx: EmitContext, name: str, per_item: list[Node], args: ArgRecorder,
                    doc: str, buffers: tuple[Node, ...] = (), accumulate: bool = True,
                    result: str = "elbo", hoist: bool = False) -> Function:
    """A kernel over shares of ``items``: shares ``share_start`` to ``share_stop`` (of
    ``n_threads``), one after another, each a contiguous part of the items with its own
    scratch arrays and (``accumulate``) accumulators; it returns the sum of ``result`` over
    their items, share by share. ``cemodel.runtime.run_shares`` runs
    the shares (in threads when the work pays for them) and sums the accumulators in share
    order, so the result does not depend on how the shares ran. ``hoist``: the per-item
    body calls local updates that read the messages ``hoist_messages`` contracts first."""
    # a per-entry accumulator has no thread copies: each entry belongs to one item, so one share
    stored = tuple(a for a in ctx.plan.stored_accumulators if not a.per_entry)
    private = list(ctx.kplan.thread_private)
    accs = [a.name for a in stored] if accumulate else []
    threaded = private + accs
    bind = [Line(f"{n} = {n}_threads[thread]") for n in private]
    vector_accs = [a.name for a in stored if a.key] if accumulate else []
    # each share's statistics are zero on entry (rt.run_shares zeroes them as it adds them up)
    bind += [Line(f"{a}_t = {a}_threads[thread]") for a in vector_accs]
    share: list[Node] = [
        *bind,
        *buffers,
        Line(f"{result} = 0.0"),
        Line("stop_position = (thread + 1) * items.shape[0] // n_threads"),
        Block("for position in range(thread * items.shape[0] // n_threads, stop_position)",
              (Line(f"{ctx.item} = items[position]"), *prefetch_next(ctx, args), *per_item)),
        Line(f"shares_total += {result}", "summed in share order, as rt.run_shares sums"),
    ]
    body: list[Node] = [
        Line("shares_total = 0.0"),
        Block("for thread in range(share_start, share_stop)", tuple(share),
              comment="one call runs these shares, one after another"),
        Line("return shares_total"),
    ]
    local_names = set(private) | {f"{a}_t" for a in accs}
    params = ["share_start", "share_stop", "n_threads"] + [
        a for a in args.names if a not in local_names]
    params += [f"{n}_threads" for n in threaded]
    hoisted = "hoist_messages" if hoist and (ctx.kplan.hoisted or ctx.kplan.partial) else None
    shares = Shares(f"{threaded[0]}_threads" if threaded else None, tuple(accs), hoisted)
    return Function(name, tuple(dict.fromkeys(params)), tuple(body), doc, KERNEL,
                    supplied=("share_start", "share_stop", "n_threads", *args.supplied),
                    shares=shares)


def prefetch_next(ctx: EmitContext, args: ArgRecorder) -> list[Node]:
    """Ask for the next item's memory while this one computes (``rt.prefetch_row``): its rows
    of the per-item arrays the kernel reads and, for a ragged plate inside the item, its
    entries (the pointer itself two items ahead). SVI draws its minibatches at random, and a
    random item's rows are cache misses the hardware cannot foresee."""
    model, item_plate = ctx.model, ctx.model.data_plate
    used = set(args.names)
    rows = [n for n in ("item_weight", "local_sweeps") if n in used]
    for name in ctx.plan.kept_locals:
        if model.var(name).plates == (item_plate,):
            arrays = [f(name, st) for st, _ in ctx.stats(name)
                      for f in (ctx.layout.lam, ctx.layout.E)] + [f"X_{name}_log"]
            rows += [a for a in arrays if a in used]
    spans: list[tuple[str, str]] = []
    for v in (*model.observed, *model.data):
        if v.name not in used or v.plates[:1] != (item_plate,):
            continue
        inner = model.plate(v.plates[1]) if len(v.plates) > 1 else None
        if inner is None or not inner.ragged:
            rows.append(v.name)
        elif inner.parent == item_plate:
            spans.append((v.name, f"{inner.name}_ptr"))
    for plate in model.plates:
        if plate.ragged and plate.parent == item_plate and f"{plate.name}_weight" in used:
            spans.append((f"{plate.name}_weight", f"{plate.name}_ptr"))
    if not rows and not spans:
        return []
    upcoming = "items[position + 1]"
    # an item next to this one (MF runs the items in order) is the hardware prefetcher's
    nodes: list[Node] = [Block(
        f"if position + 1 < stop_position and {upcoming} != {ctx.item} + 1", (
            *[Line(f"rt.prefetch_row({a}, {upcoming})") for a in rows],
            *[Line(f"rt.prefetch_rows({a}, {args.use(ptr)}[{upcoming}], "
                   f"{ptr}[{upcoming} + 1])") for a, ptr in spans],
        ), comment="the next item's memory, asked for while this one computes")]
    pointers = sorted({ptr for _, ptr in spans})
    if pointers:
        nodes.append(Block(
            f"if position + 2 < stop_position and items[position + 2] != {ctx.item} + 2",
            tuple(Line(f"rt.prefetch_row({ptr}, items[position + 2])") for ptr in pointers)))
    return nodes


def emit_hoist_messages(ctx: EmitContext) -> Function | None:
    """The messages to the locals that no item changes, contracted once before the shares
    of a local step (``threaded_kernel(hoist=True)``) into their pre_ arrays."""
    args = ArgRecorder()
    nodes = hoist_nodes(ctx, args)
    if not nodes:
        return None
    return Function("hoist_messages", tuple(args.names), tuple(nodes),
                    "The item-independent messages to the locals, into their pre_ arrays.",
                    KERNEL, supplied=tuple(args.supplied))


def hoist_nodes(ctx: EmitContext, args: ArgRecorder) -> list[Node]:
    """Contract every hoisted message into its pre_ array (before the items' loop)."""
    data_plate = ctx.model.data_plate
    nodes: list[Node] = []
    for (name, m), pre in ctx.kplan.hoisted.items():
        var = ctx.var(name)
        message, factor, monomial = list(ctx.messages_to(name))[m]
        plates, letters = ctx.target_bindings(var, message.target)
        plates[data_plate] = "0"  # no operand reads the item
        target_index = tuple(plate_var(p) for p in var.plates[1:]) + message.target.tensor
        inner: list[Node] = emit_contraction(
            ctx.layout, args,
            Contraction(monomial.coef, monomial.without(message.target), factor.plates,
                        dict(factor.index_dims)),
            args.use(pre), target_index or ("0",), plates, letters,
        )
        nodes += [Comment(f"{pre}: to q({name}) from {factor.child} ~ {factor.family} "
                          f"({ctx.factor_comment(factor)}), the same for every item"),
                  Line(f"{pre}[...] = 0.0"), *ctx.in_rows(var, {data_plate}, inner, args)]
    for (name, m), (pre, glob, _, key) in ctx.kplan.partial.items():
        _, factor, _ = list(ctx.messages_to(name))[m]
        nodes += [Comment(f"{pre}: the global part of a message to q({name}) from "
                          f"{factor.child} ~ {factor.family} ({ctx.factor_comment(factor)})"),
                  Line(f"{pre}[...] = 0.0"),
                  *emit_contraction(ctx.layout, args,
                                    Contraction(1.0, glob, (), dict(factor.index_dims)),
                                    args.use(pre), key, {}, {})]
    return nodes


def local_elbo_nodes(ctx: EmitContext, args: ArgRecorder) -> list[Node]:
    """``elbo +=`` the item's ELBO terms that involve only locals and data (the others
    go through the accumulators to elbo_global), and its local entropies."""
    data_plate = ctx.model.data_plate
    nodes: list[Node] = []
    for fi, factor in enumerate(ctx.plan.analysis.factors):
        if not ctx.plan.in_data_plate(factor.plates):
            continue
        for mi, monomial in enumerate(factor.monomials):
            if ctx.plan.accumulator_for(fi, mi) is not None:
                continue
            nodes += emit_contraction(
                ctx.layout, args,
                Contraction(monomial.coef, monomial.slots, factor.plates,
                            dict(factor.index_dims)),
                "elbo", (), {data_plate: ctx.item}, {},
            )
    return nodes + ctx.entropy_nodes(ctx.plan.locals, "elbo", args)


def accumulate_nodes(ctx: EmitContext, args: ArgRecorder, suffix: str = "") -> list[Node]:
    """The item's sufficient statistics into the accumulators (``<acc><suffix>``), weighted
    by item_weight; a per-entry one straight into its array, at the item's entries (the
    one-hots binding its letters are left to whoever reads it)."""
    data_plate = ctx.model.data_plate
    nodes: list[Node] = []
    for acc in ctx.plan.stored_accumulators:
        factor = ctx.plan.analysis.factors[acc.factor]
        bound = set(entry_slots(acc))
        local = tuple(s for s in acc.local if s not in bound)
        entry = entry_plates(ctx.model, acc.plates)
        where = tuple(f"@{p}" for p in entry) + acc.key
        nodes.append(Comment(f"{acc.name}[{', '.join((*entry, *map(letter_text, acc.key)))}] += "
                             + " · ".join(describe_slot(s) for s in local)
                             + f"  ({ctx.factor_comment(factor)})"))
        nodes += emit_contraction(
            ctx.layout, args,
            Contraction(1.0, local, factor.plates, dict(factor.index_dims),
                        extra=(f"{args.use('item_weight')}[{ctx.item}]",)),
            _acc_target(acc, suffix, args), where, {data_plate: ctx.item}, {},
        )
    return nodes


def _acc_target(acc, suffix: str, args: ArgRecorder) -> str:
    """Where the local step adds an accumulator's terms: the thread's own copy (a scalar
    one through its thread array, so the addition lands in the array), or a per-entry
    accumulator itself."""
    if acc.per_entry:
        return args.use(acc.name)
    if suffix and not acc.key:
        return f"{args.use(acc.name + '_threads')}[thread]"
    return args.use(acc.name + suffix)
