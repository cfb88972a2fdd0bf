"""The global kernels: update_<global> (its natural parameters from the accumulated
statistics, scaled by data_scale), refresh_globals (E[t] from λ) and elbo_global (the ELBO
terms outside the data plate or through the accumulators, and the global entropies)."""

from __future__ import annotations

from ..context import KERNEL, EmitContext, acc_slot, entry_slots
from ..loops import ArgRecorder, Contraction, emit_contraction, letter_var
from ..pycode import Block, Comment, Function, Line, Node


def _key_plates(acc) -> tuple[str, ...]:
    """Inner plates an accumulator keeps (``@plate`` entries of its key)."""
    return tuple(k[1:] for k in acc.key if k.startswith("@"))


def emit_update_global(ctx: EmitContext, name: str) -> Function:
    """update_<name>(data_scale, ..., expect): λ = η + data_scale · Σ statistics; E[t]
    only when ``expect`` (a stochastic step blends λ first). A message from a per-entry
    accumulator whose entries say which row they reach (a rating's user) is scattered from
    one loop over the entries after every row has its other terms."""
    var = ctx.var(name)
    args = ArgRecorder()
    args.supply("data_scale")
    row = ctx.row_index(var, args)
    inner: list[Node] = []
    scattered: list[Node] = []
    for stat, _ in ctx.stats(name):
        inner.append(Line(f"{args.use(ctx.layout.lam(name, stat))}[{row}] = 0.0"))
    for message, factor, monomial in ctx.messages_to(name):
        acc = ctx.plan.accumulator_for(message.factor, message.monomial)
        comment = Comment(f"from {factor.child} ~ {factor.family} "
                          f"({ctx.factor_comment(factor)})")
        if acc is None:
            inner += [comment, *ctx.contribution(factor, monomial, message.target, var, args, {})]
            continue
        # data_scale · coef · acc[key] · Π E[other global slots]
        others = tuple(s for s in acc.glob if s != message.target)
        lam = args.use(ctx.layout.lam(name, message.target.stat))
        contraction = Contraction(monomial.coef, (acc_slot(acc), *entry_slots(acc), *others),
                                  acc.plates or _key_plates(acc), dict(factor.index_dims),
                                  extra=("data_scale",))
        if set(message.target.index) & set(acc.entries):
            # the entry's gates, and the letters the contraction sums over (a part k of
            # U[row[n], k] · V[col[n], k]), bound to their loop variables
            plates = {p.name for p in ctx.model.plates}
            gates = {g: letter_var(g) for g in (*acc.entries, *message.target.index)
                     if g not in plates}
            target_row = ctx.layout.row(name, message.target.index, gates, args)
            scattered += [comment, *emit_contraction(
                ctx.layout, args, contraction, lam, tuple(target_row) + message.target.tensor,
                {}, {}, weighted=False)]
            continue
        plates, letters = ctx.target_bindings(var, message.target)
        target_row = ctx.layout.row(name, var.plates, {}, args)
        inner += [comment, *emit_contraction(
            ctx.layout, args, contraction, lam, tuple(target_row) + message.target.tensor,
            plates, letters, weighted=not acc.per_entry)]
    expect = args.supply("expect")
    expect_block = Block(f"if {expect}", (ctx.expect_line(var, row, args),
                                          *ctx.exp_lines(var, row, args)),
                         comment="a stochastic step mixes λ first (λ̂ may be invalid)")
    if not scattered:
        nodes = ctx.in_rows(var, set(), [*inner, expect_block], args)
    else:
        nodes = [*ctx.in_rows(var, set(), inner, args), *scattered,
                 *ctx.in_rows(var, set(), [expect_block], args)]
    after = ctx.exp_after_rows(var, args)
    if after:
        nodes.append(Block(f"if {expect}", tuple(after)))
    return Function(f"update_{name}", tuple(args.names), tuple(nodes),
                    ctx.conditional_doc(var), KERNEL, supplied=tuple(args.supplied))


def emit_refresh(ctx: EmitContext, names: tuple[str, ...] | None = None) -> Function:
    """E[t] (and exp(E[log])) of every global from its natural parameters (warm starts);
    with ``names``, of those globals only: ``refresh_eager_globals``, the ones SVI's lazy
    step moves whole (``cemodel.codegen.lazy``)."""
    args = ArgRecorder()
    body: list[Node] = []
    for name in ctx.plan.globals if names is None else names:
        var = ctx.var(name)
        row = ctx.row_index(var, args)
        body += ctx.in_rows(var, set(), [ctx.expect_line(var, row, args),
                                         *ctx.exp_lines(var, row, args)], args)
        body += ctx.exp_after_rows(var, args)
    if names is None:
        return Function("refresh_globals", tuple(args.names), tuple(body),
                        "Expected statistics of the globals from their natural parameters.",
                        KERNEL)
    return Function("refresh_eager_globals", tuple(args.names), tuple(body),
                    f"Expected statistics of {', '.join(names)} from their natural parameters"
                    " (a lazy SVI step moves the others by columns).", KERNEL)


def emit_elbo_global(ctx: EmitContext) -> Function:
    """Σ E[log p] of factors outside the data plate and via the accumulators kept by key,
    plus the global entropies."""
    plan = ctx.plan
    args = ArgRecorder()
    body: list[Node] = [Line("elbo = 0.0")]
    for fi, factor in enumerate(plan.analysis.factors):
        inside = plan.in_data_plate(factor.plates)
        terms: list[Node] = []
        for mi, monomial in enumerate(factor.monomials):
            acc = plan.accumulator_for(fi, mi)
            if inside and (acc is None or acc.per_entry):
                continue  # summed in the local step, or per entry in elbo_entries
            if acc is not None:
                slots = (acc_slot(acc),) + acc.glob
                plates: tuple[str, ...] = _key_plates(acc)
            else:
                slots = monomial.slots
                plates = factor.plates
            terms += emit_contraction(
                ctx.layout, args,
                Contraction(monomial.coef, slots, plates, dict(factor.index_dims)),
                "elbo", (), {}, {},
            )
        if terms or not _has_entries(ctx, fi):
            body += [Comment(f"E[log p({factor.child} | ...)]  ({ctx.factor_comment(factor)})"),
                     *terms]
    for name in plan.globals:
        var = ctx.var(name)
        row = ctx.row_index(var, args)
        body.append(Comment(f"entropy of q({name})"))
        body += ctx.in_rows(var, set(), [Line(f"elbo += {ctx.entropy_expr(var, row, args)}")],
                            args)
    body.append(Line("return elbo"))
    return Function("elbo_global", tuple(args.names), tuple(body),
                    "ELBO terms of the global factors (see elbo_terms in the README).", KERNEL)


def emit_elbo_entries(ctx: EmitContext) -> Function | None:
    """The ELBO terms through the per-entry accumulators: one loop over the entries each,
    their letters bound from the data. Apart from elbo_global so that an out-of-core fit can
    add them up a minibatch at a time (its per-entry statistics are the minibatch's)."""
    plan = ctx.plan
    args = ArgRecorder()
    body: list[Node] = [Line("elbo = 0.0")]
    for fi, factor in enumerate(plan.analysis.factors):
        if not _has_entries(ctx, fi):
            continue
        body.append(Comment(f"E[log p({factor.child} | ...)]  ({ctx.factor_comment(factor)})"))
        for mi, monomial in enumerate(factor.monomials):
            acc = plan.accumulator_for(fi, mi)
            if acc is None or not acc.per_entry:
                continue
            body += emit_contraction(
                ctx.layout, args,
                Contraction(monomial.coef, (acc_slot(acc), *entry_slots(acc), *acc.glob),
                            acc.plates, dict(factor.index_dims)),
                "elbo", (), {}, {}, weighted=False,
            )
    if len(body) == 1:
        return None
    body.append(Line("return elbo"))
    return Function("elbo_entries", tuple(args.names), tuple(body),
                    "ELBO terms through the statistics kept per data entry.", KERNEL)


def _has_entries(ctx: EmitContext, factor: int) -> bool:
    return any(a.per_entry and a.factor == factor for a in ctx.plan.accumulators)
