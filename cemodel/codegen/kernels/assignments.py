"""Collapsed local steps: Gibbs sampling and CVB0 of the categorical assignments of an item.

When every local of an item is a categorical assignment z or a Dirichlet θ whose only
children are assignments drawn from it (``InferencePlan.collapsed_locals``), θ integrates out
(Dirichlet–categorical) and the conditional of one assignment given the others is

    p(z_i = c | z_¬i, y, β) ∝ (α_c + n_¬i,c) · exp(Σ_children log p(y | z_i = c, β))_c

with n_¬i,c the assignments of θ's other rows to c. The children's part is fixed during the
step (it reads only data and the globals: E[t(β)] for SVI, t(β) of a draw for SSVI-A), so it
is computed once per item. Gibbs (Mimno et al. 2012, "Gibbs-within-SVI") samples every token
in turn and averages the one-hot counts over the sweeps after burn-in; CVB0 (Asuncion et al.
2009) replaces the counts by expected counts, q_i(c) ∝ (α_c + Σ_{j≠i} q_j(c))·exp(·)_c. Both
hand the globals the same statistics the mean-field step does, Σ_n E[t_n] with q(z) in place,
so they combine with every global step (Hoffman & Blei 2015, §2.5 and appendix D).

The count α_c + n_c lives in θ's natural parameter itself: λ_θ = α − 1 + n, so α_c + n_c is
λ_θ,c + 1. After the step θ gets its mean-field update from the averaged q(z).
"""

from __future__ import annotations

from ..context import EmitContext
from ..loops import ArgRecorder, dim_name
from ..pycode import Block, Comment, Function, Line, Node
from .local_step import Callees, accumulate_nodes

_KERNEL = "njit(cache=True, nogil=True, error_model=\"numpy\")"
_DOC = {
    "gibbs": ("Gibbs local step: each item's assignments sampled from their conditionals with "
              "{hidden}integrated out,\n{sweeps} sweeps, q(z) = the one-hot counts averaged "
              "over the sweeps after burn_in (Mimno et al. 2012).\n\n"
              "    p(z_i = c | z_¬i, y, β) ∝ {prior}· exp(Σ_children log p(y | z_i = c, β))_c\n\n"
              "Then the sufficient statistics, as local_step."),
    "cvb0": ("CVB0 local step: each item's q(z) updated with {hidden}integrated out, until "
             "the mean absolute\nchange of q(z) is below local_tol (Asuncion et al. 2009).\n\n"
             "    q(z_i = c) ∝ {prior}· exp(Σ_children E[log p(y | z_i = c, β)])_c\n\n"
             "Then the sufficient statistics, as local_step."),
}


def emit_evidence(ctx: EmitContext, name: str) -> Function:
    """evidence_<z>: the fixed part of an assignment's conditional, for Gibbs and CVB0:
    P[row, c] = exp(λ_c − max λ) with λ every message but the collapsed prior's."""
    args = ArgRecorder()
    args.use(ctx.item)
    var = ctx.var(name)
    row = ctx.row_index(var, args)
    lam = args.use(ctx.layout.lam(name, "onehot"))
    size = args.use(dim_name(var.categories))
    nodes: list[Node] = [Line(f"{lam}[{row}] = 0.0")]
    for message, factor, monomial in ctx.messages_to(name):
        if any(monomial.stats_of(t) for t in ctx.plan.collapsed_locals):
            continue
        nodes.append(Comment(f"from {factor.child} ~ {factor.family} "
                             f"({ctx.factor_comment(factor)})"))
        nodes += ctx.contribution(factor, monomial, message.target, var, args, {},
                                  transposed=True)
    nodes += [
        Line(f"top = {lam}[{row}].max()"),
        Block(f"for t_c in range({size})", (
            Line(f"{lam}[{row}, t_c] = np.exp({lam}[{row}, t_c] - top)"),)),
    ]
    nodes = ctx.item_rows(var, nodes, args)
    doc = (f"lam_{name}_onehot[row, c] = exp(λ_c − max_c λ_c), λ the messages to {name} "
           "from data and globals\n(every message but the integrated-out proportions'): "
           "the part of its conditional that\nstays fixed during a Gibbs or CVB0 step.")
    return Function(f"evidence_{name}", tuple(args.names), tuple(ctx.bases(nodes, args) + nodes),
                    doc, _KERNEL)


def emit_assignment_step(ctx: EmitContext, mode: str, callees: Callees) -> Function:
    """local_step_gibbs or local_step_cvb0 (``mode``) over ``items``."""
    plan = ctx.plan
    args = ArgRecorder()
    args.supply("items")
    for name in ("sweeps", "burn_in") if mode == "gibbs" else ("max_local_iter", "local_tol"):
        args.supply(name)
    collapsed = plan.collapsed_locals
    per_item: list[Node] = []
    if collapsed:
        per_item.append(Comment("the proportions' prior: λ = α − 1, so α_c + n_c = λ_c + 1"))
        per_item += [ctx.call_update(callees, t, "False", args) for t in collapsed]
    for name in plan.assignment_locals:
        per_item.append(Line(ctx.call(callees, f"evidence_{name}", {}, args),
                             "the fixed part of the conditional"))
    buffers: list[Node] = [
        Line(f"p_{name} = np.empty({args.use(dim_name(ctx.var(name).categories))})")
        for name in plan.assignment_locals]
    if mode == "gibbs":
        per_item += _gibbs_item(ctx, args, buffers)
    else:
        per_item += _cvb0_item(ctx, args)
    if collapsed:
        per_item.append(Comment("the proportions' mean-field update from the final q(z)"))
        per_item += [Line(ctx.call(callees, f"update_{t}", ctx.all_messages(), args))
                     for t in collapsed]
    per_item += accumulate_nodes(ctx, args)
    per_item = ctx.bases(per_item, args) + per_item
    body: list[Node] = [
        *buffers,
        Block("for position in range(items.shape[0])",
              (Line(f"{ctx.item} = items[position]"), *per_item)),
    ]
    hidden = ", ".join(collapsed)
    prior = " · ".join(f"(α_c + n_¬i,c of {t})" for t in collapsed) or ""
    doc = _DOC[mode].format(hidden=f"{hidden} " if hidden else "no proportions ",
                            sweeps="`sweeps`", prior=f"{prior} " if prior else "")
    return Function(f"local_step_{mode}", tuple(args.names), tuple(body), doc, _KERNEL,
                    supplied=tuple(args.supplied))


def _gibbs_item(ctx: EmitContext, args: ArgRecorder, buffers: list[Node]) -> list[Node]:
    """An item's Gibbs step: its start, its sweeps, q(z) from the counts (``buffers``
    gains the assignment arrays)."""
    sizing: list[Node] = []
    start: list[Node] = []
    sweep: list[Node] = []
    for name in ctx.plan.assignment_locals:
        a, b, c = _gibbs(ctx, name, args)
        buffers.append(Line(f"assign_{name} = np.empty(64, np.int64)",
                            "one assignment per token instance, grown as needed"))
        sizing += [Line(f"needed_{name} = 0"), *a,
                   Block(f"if needed_{name} > assign_{name}.shape[0]", (
                       Line(f"assign_{name} = np.empty(2 * needed_{name}, np.int64)"),))]
        start += [Line(f"position_{name} = 0"), *b]
        sweep += [Line(f"position_{name} = 0"), *c]
    nodes: list[Node] = [*sizing, Comment("start: each token drawn given the ones before it"),
                         *start, Block("for sweep in range(sweeps)", tuple(sweep))]
    for name in ctx.plan.assignment_locals:
        nodes += _gibbs_average(ctx, name, args)
    return nodes


def _cvb0_item(ctx: EmitContext, args: ArgRecorder) -> list[Node]:
    """An item's CVB0 step: its start, then sweeps until q(z) stops changing."""
    start: list[Node] = []
    sweep: list[Node] = []
    for name in ctx.plan.assignment_locals:
        a, b = _cvb0(ctx, name, args)
        start += a
        sweep += b
    nodes: list[Node] = [Comment("start: each row given the ones before it"), *start]
    if sweep:
        nodes.append(Block("for sweep in range(max_local_iter)", (
            Line("change = 0.0"),
            Line("rows = 0"),
            *sweep,
            Block("if change < local_tol * max(rows, 1)", (Line("break"),)),
        )))
    return nodes


def _count(ctx: EmitContext, name: str, prelude: list[Node], args: ArgRecorder) -> str | None:
    """The expression α_c + n_c (at category ``t_c``) of the collapsed proportions an
    assignment is drawn from, or None when its prior is not collapsed."""
    var = ctx.var(name)
    for m, (message, factor, monomial) in enumerate(ctx.messages_to(name)):
        for theta in ctx.plan.collapsed_locals:
            stats = monomial.stats_of(theta)
            if not stats:
                continue
            env = ctx.message_env(var, m, message, factor, monomial, args, prelude)
            lam = ctx.layout.lam(theta, "log")
            return ctx.layout.stat_ref(stats[0], env, args, {stats[0]: (lam, False)})
    return None


def _conditional(ctx: EmitContext, name: str, count: str | None, exclude: str,
                 args: ArgRecorder) -> list[Node]:
    """p[c] ∝ (α_c + n_c − exclude_c)·P[row, c] into ``p_<name>``, with its total."""
    var = ctx.var(name)
    row = ctx.row_index(var, args)
    P = f"{ctx.layout.lam(name, 'onehot')}[{row}, t_c]"
    factor = P if count is None else f"({count} + 1.0{exclude}) * {P}"
    return [
        Line("total = 0.0"),
        Block(f"for t_c in range({dim_name(var.categories)})", (
            Line(f"p_{name}[t_c] = {factor}"),
            Line(f"total += p_{name}[t_c]"),
        )),
    ]


def _draw(ctx: EmitContext, name: str) -> list[Node]:
    """t_c ~ p_<name> / total by inversion of one uniform."""
    size = dim_name(ctx.var(name).categories)
    return [
        Line("uniform = np.random.random() * total"),
        Line("t_c = 0"),
        Line(f"cumulative = p_{name}[0]"),
        Block(f"while cumulative < uniform and t_c < {size} - 1", (
            Line("t_c += 1"),
            Line(f"cumulative += p_{name}[t_c]"),
        )),
    ]


def _gibbs(ctx: EmitContext, name: str,
           args: ArgRecorder) -> tuple[list[Node], list[Node], list[Node]]:
    """(sizing, start, sweep) nodes for one assignment variable."""
    var = ctx.var(name)
    row = ctx.row_index(var, args)
    E = args.use(ctx.layout.E(name, "onehot"))
    prelude: list[Node] = []
    count = _count(ctx, name, prelude, args)
    add = [Line(f"{count} += 1.0")] if count else []
    remove = [Line(f"{count} -= 1.0")] if count else []
    weight = ctx.row_weight(var, args)
    sizing = ctx.item_rows(var, [Line(f"needed_{name} += int({weight} + 0.5)")], args)
    start = ctx.item_rows(var, [
        *prelude,
        Line(f"{E}[{row}] = 0.0"),
        Block(f"for j in range(int({weight} + 0.5))", (
            *_conditional(ctx, name, count, "", args),
            *_draw(ctx, name),
            Line(f"assign_{name}[position_{name}] = t_c"),
            *add,
            Line(f"position_{name} += 1"),
        )),
    ], args)
    sweep = ctx.item_rows(var, [
        *prelude,
        Block(f"for j in range(int({weight} + 0.5))", (
            Line(f"t_c = assign_{name}[position_{name}]"),
            *remove,
            *_conditional(ctx, name, count, "", args),
            *_draw(ctx, name),
            Line(f"assign_{name}[position_{name}] = t_c"),
            *add,
            Block("if sweep >= burn_in", (Line(f"{E}[{row}, t_c] += 1.0"),)),
            Line(f"position_{name} += 1"),
        )),
    ], args)
    return sizing, start, sweep


def _gibbs_average(ctx: EmitContext, name: str, args: ArgRecorder) -> list[Node]:
    """q(z) = counts / (instances × kept sweeps); a row of weight 0 gets P normalised."""
    var = ctx.var(name)
    row = ctx.row_index(var, args)
    E = ctx.layout.E(name, "onehot")
    P = ctx.layout.lam(name, "onehot")
    weight = ctx.row_weight(var, args)
    return ctx.item_rows(var, [
        Line(f"instances = int({weight} + 0.5)"),
        Block("if instances > 0", (
            Line(f"{E}[{row}] /= instances * (sweeps - burn_in)"),)),
        Block("else", (Line(f"{E}[{row}] = {P}[{row}] / {P}[{row}].sum()"),)),
    ], args)


def _cvb0(ctx: EmitContext, name: str, args: ArgRecorder) -> tuple[list[Node], list[Node]]:
    """(start, sweep) nodes for one assignment variable; the sweep adds to ``change``."""
    var = ctx.var(name)
    row = ctx.row_index(var, args)
    E = args.use(ctx.layout.E(name, "onehot"))
    size = dim_name(var.categories)
    prelude: list[Node] = []
    count = _count(ctx, name, prelude, args)
    weight = ctx.row_weight(var, args)
    start = ctx.item_rows(var, [
        *prelude,
        *_conditional(ctx, name, count, "", args),
        Line(f"w_row = {weight}"),
        Block(f"for t_c in range({size})", (
            Line(f"{E}[{row}, t_c] = p_{name}[t_c] / total"),
            *([Line(f"{count} += w_row * {E}[{row}, t_c]")] if count else []),
        )),
    ], args)
    if count is None:
        return start, []
    # the row's own contribution, one instance of it: min(w, 1)·q_i
    exclude = f" - own * {E}[{row}, t_c]"
    sweep = ctx.item_rows(var, [
        *prelude,
        Line(f"w_row = {weight}"),
        Line("own = min(w_row, 1.0)"),
        *_conditional(ctx, name, count, exclude, args),
        Block(f"for t_c in range({size})", (
            Line(f"delta = p_{name}[t_c] / total - {E}[{row}, t_c]"),
            Line(f"{count} += w_row * delta"),
            Line(f"{E}[{row}, t_c] += delta"),
            Line("change += abs(delta)"),
        )),
        Line("rows += 1"),
    ], args)
    return start, sweep
