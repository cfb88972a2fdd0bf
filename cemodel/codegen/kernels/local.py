"""update_<local>: a local's natural parameters from its messages, then E[t] (a MarkovChain
local by forward–backward); item_elbo: one item's share of the ELBO (the restart guard)."""

from __future__ import annotations

from ...families import CHAIN_POSTERIORS
from ...model import VarDef
from ..context import KERNEL, EmitContext, pre_slot
from ..loops import ArgRecorder, Contraction, dim_name, emit_contraction, fmt_float, plate_var
from ..pycode import Block, Comment, Function, Line, Node
from .product import fused_product


def emit_update_local(ctx: EmitContext, name: str) -> Function:
    """update_<name>(item, with_children, ...): q(name) on the item's rows; without children
    only its prior's messages (a start)."""
    var = ctx.var(name)
    args = ArgRecorder()
    args.use(ctx.item)
    args.use("with_children")
    row = ctx.row_index(var, args)
    inner: list[Node] = []
    for stat, _ in ctx.stats(name):
        inner.append(Line(f"{args.use(ctx.layout.lam(name, stat))}[{row}] = 0.0"))
    prior_nodes, child_nodes = _messages(ctx, var, row, args)
    inner += prior_nodes
    if child_nodes:
        inner.append(Block("if with_children", tuple(child_nodes)))
    if ctx.family(name) in CHAIN_POSTERIORS:
        return _chain_update(ctx, var, inner, args)
    product = ctx.kplan.product.get(name)
    inner += _expectations(ctx, var, row, args)
    if product:
        inner = [
            Line("done = False"),
            Block("if with_children", tuple(fused_product(ctx, var, product, args))),
            Block("if not done", tuple(inner),
                  comment="in log space: the prior-only start, or after an underflow"),
        ]
    nodes = ctx.item_rows(var, inner, args)
    body = ctx.bases(nodes, args) + nodes
    return Function(f"update_{name}", tuple(args.names), tuple(body), ctx.conditional_doc(var),
                    KERNEL)


def _messages(ctx: EmitContext, var: VarDef, row: str,
              args: ArgRecorder) -> tuple[list[Node], list[Node]]:
    """The messages to the row's λ: (from its prior, from its children)."""
    name = var.name
    prior_nodes: list[Node] = []
    child_nodes: list[Node] = []
    hoisted = ctx.kplan.hoisted
    partial = ctx.kplan.partial
    for m, (message, factor, monomial) in enumerate(ctx.messages_to(name)):
        lam = ctx.layout.lam(name, message.target.stat)
        if (name, m) in hoisted:  # item-independent: computed once per step
            pre = args.use(hoisted[(name, m)])
            nodes: list[Node] = [
                Line(f"{args.use(lam)}[{row}] += {_hoisted_read(ctx, var, pre)}",
                     f"precomputed by hoist_messages ({ctx.factor_comment(factor)})")]
            child_nodes += [Comment(f"from {factor.child} ~ {factor.family}")] + nodes
            continue
        if (name, m) in partial:  # its data-free part contracted once per step
            pre, _, data, key = partial[(name, m)]
            plates, letters = ctx.target_bindings(var, message.target)
            nodes = emit_contraction(
                ctx.layout, args,
                Contraction(monomial.coef, data + (pre_slot(pre, key),),
                            factor.plates, dict(factor.index_dims)),
                args.use(lam), tuple(ctx.layout.row(name, var.plates, {}, args))
                + message.target.tensor, plates, letters,
            )
            child_nodes += [Comment(f"from {factor.child} ~ {factor.family} "
                                    f"({ctx.factor_comment(factor)}), its global part "
                                    f"precomputed by hoist_messages")] + nodes
            continue
        nodes = ctx.contribution(factor, monomial, message.target, var, args, {},
                                 transposed=True)
        implicit = ctx.kplan.implicit_source(name, monomial)
        if implicit is not None:
            flag, S = args.use(f"use_sums_{implicit}"), args.use(f"S_{implicit}")
            args.use(lam)
            size = dim_name(ctx.var(implicit).categories)
            coef = "" if monomial.coef == 1.0 else f"{fmt_float(monomial.coef)} * "
            nodes = [Block(f"if {flag}", (Block(f"for t_c in range({size})", (
                Line(f"{lam}[{ctx.row_index(var, args)}, t_c] += {coef}{S}[t_c]"),)),)),
                     Block("else", tuple(nodes))]
        text = f"from {factor.child} ~ {factor.family} ({ctx.factor_comment(factor)})"
        if factor.child == name:
            prior_nodes += [Comment(text)] + nodes
        else:
            child_nodes += [Comment(text)] + nodes
    return prior_nodes, child_nodes


def _hoisted_read(ctx: EmitContext, var: VarDef, pre: str) -> str:
    """A hoisted array at the row: indexed by the local's inner plates; whole when it is
    the row's statistic itself (numba reads no a[...]); its one entry for a scalar."""
    inner = [plate_var(p) for p in var.plates[1:]]
    if inner:
        return f"{pre}[{', '.join(inner)}]"
    return pre if ctx.stats(var.name)[0][1] else f"{pre}[0]"


def _expectations(ctx: EmitContext, var: VarDef, row: str, args: ArgRecorder) -> list[Node]:
    """E[t] of the row (and its exp(E[log ·]) arrays); a product-form local's log
    normaliser and entropy; an exp-only local's exp(E[log ·]) alone inside the sweeps."""
    name = var.name
    nodes: list[Node] = []
    exp_only = name in ctx.kplan.exp_only
    if ctx.kplan.product.get(name):
        stat = ctx.stats(name)[0][0]
        lam_row = f"{ctx.layout.lam(name, stat)}[{row}]"
        E_row = f"{ctx.layout.E(name, stat)}[{row}]"
        logZ = args.use("logZ_" + name)
        if ctx.family(name) == "split":
            n = ctx.split_total(var, args)
            nodes.append(Line(f"{logZ}[{row}] = rt.split_expected_stats({lam_row}, "
                              f"{E_row}, {n})"))
            nodes.append(Line(f"{args.use('H_' + name)}[{row}] = {n} * {logZ}[{row}] - "
                              f"rt.frobenius({lam_row}, {E_row})"))
        else:
            nodes.append(Line(f"{logZ}[{row}] = rt.categorical_expected_stats({lam_row}, "
                              f"{E_row})"))
            nodes.append(Line(f"{args.use('H_' + name)}[{row}] = {logZ}[{row}] - "
                              f"rt.frobenius({lam_row}, {E_row})"))
    elif exp_only:
        # inside the sweeps only exp(E[log ·]) is read: computed without logarithms
        X = args.use(f"X_{name}_log")
        lam = args.use(ctx.layout.lam(name, "log"))
        nodes.append(Block(f"if {args.use('exp_only')}", (
            Line(f"rt.dirichlet_exp_expected({lam}[{row}], {X}[{row}])"),)))
        nodes.append(Block("else", (ctx.expect_line(var, row, args),
                                    *ctx.exp_lines(var, row, args))))
    else:
        nodes.append(ctx.expect_line(var, row, args))
    if not exp_only:
        nodes += ctx.exp_lines(var, row, args)
    return nodes


_CHAIN_COMMENTS = {
    "markov": "q(chain) ∝ exp(Σ_t emission_t[z_t] + initial[z_0] + Σ_t transition_t"
              "[z_t−1, z_t]): marginals, pairwise marginals and its entropy",
    "gaussian_chain": "q(chain) ∝ exp(Σ_t λ_t·t(x_t)): one Gaussian with a block-tridiagonal "
                      "precision; its smoothed moments and entropy",
}


def _chain_update(ctx: EmitContext, var: VarDef, rows: list[Node],
                  args: ArgRecorder) -> Function:
    """A chain local: its natural parameters per step (the messages), then the exact
    posterior of each sequence (a MarkovChain by forward–backward, cemodel.runtime.chain; a
    GaussianChain by the Kalman/RTS smoother, cemodel.runtime.gaussian_chain)."""
    nodes = ctx.item_rows(var, list(rows), args)
    steps = ctx.model.plate(var.plates[1])
    if steps.ragged:
        ptr = args.use(f"{steps.name}_ptr")
        length = f"{ptr}[{ctx.item} + 1] - {ptr}[{ctx.item}]"
    else:
        length = args.use(dim_name(steps.dim))
    arrays = [args.use(ctx.layout.lam(var.name, st)) for st, _ in ctx.stats(var.name)]
    arrays += [args.use(ctx.layout.E(var.name, st)) for st, _ in ctx.stats(var.name)]
    H = args.use(f"H_{var.name}")
    family = ctx.family(var.name)
    body = ctx.bases(nodes, args) + nodes + [
        Comment(_CHAIN_COMMENTS[family]),
        Line(f"{H}[0] = rt.{CHAIN_POSTERIORS[family]}({', '.join(arrays)}, {length})"),
    ]
    return Function(f"update_{var.name}", tuple(args.names), tuple(body),
                    ctx.conditional_doc(var), KERNEL)


def emit_item_elbo(ctx: EmitContext, without: tuple[str, ...] = ()) -> Function:
    """One item's whole share of the ELBO under the current globals: every data-plate
    monomial (the global slots read E[t] directly) and the item's local entropies;
    ``without`` leaves out the terms of collapsed locals (see emit_collapsed)."""
    data_plate = ctx.model.data_plate
    args = ArgRecorder()
    item = args.use(plate_var(data_plate))
    body: list[Node] = [Line("value = 0.0")]
    for factor in ctx.plan.analysis.factors:
        if not ctx.plan.in_data_plate(factor.plates):
            continue
        for monomial in factor.monomials:
            if any(monomial.stats_of(n) for n in without):
                continue
            body += emit_contraction(
                ctx.layout, args,
                Contraction(monomial.coef, monomial.slots, factor.plates,
                            dict(factor.index_dims)),
                "value", (), {data_plate: item}, {}, reads=ctx.kplan.log_arrays,
            )
    body += ctx.entropy_nodes([n for n in ctx.plan.locals if n not in without], "value", args)
    body = ctx.bases(body, args) + body + [Line("return value")]
    name = "item_elbo" + "".join(f"_without_{n}" for n in without)
    doc = "One item's share of the ELBO under the current globals (the restart guard)."
    if without:
        doc = (f"One item's share of the ELBO without the terms of {', '.join(without)} "
               f"(collapsed_{without[0]} adds them at their optimum).")
    return Function(name, tuple(args.names), tuple(body), doc, KERNEL)
