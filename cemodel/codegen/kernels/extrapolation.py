"""SQUAREM over an item's local sweeps (``KernelPlan.extrapolated``; the math in
cemodel/runtime/extrapolation.py): the local step keeps the states of the last two sweeps,
and every second sweep ``extrapolate`` moves the item's iterated locals along them."""

from __future__ import annotations

from ...numerics import NATURAL_BOX
from ..context import KERNEL, EmitContext
from ..loops import ArgRecorder
from ..pycode import Block, Function, Line, Node

Callees = dict[str, tuple[str, ...]]


def _state(ctx: EmitContext) -> list[tuple[str, str, tuple]]:
    """(local, λ array, its (low, high) box) of every natural parameter SQUAREM moves."""
    state = []
    for name in ctx.kplan.extrapolated:
        box = NATURAL_BOX[ctx.family(name)]
        for (stat, _), bounds in zip(ctx.stats(name), box, strict=True):
            state.append((name, ctx.layout.lam(name, stat), bounds))
    return state


def _row(ctx: EmitContext, name: str, lam: str, item: str) -> str:
    """The item's row of a λ array, a one-entry slice where it is one number (numba copies
    no scalar into an array)."""
    one = len(ctx.var(name).plates) == 1 and all(rank == 0 for _, rank in ctx.stats(name))
    return f"{lam}[{item}:{item} + 1]" if one else f"{lam}[{item}]"


def buffer_lines(ctx: EmitContext) -> list[Node]:
    """Each thread's copies of the states SQUAREM reads: the cycle's first, its middle and
    the extrapolated point."""
    lines: list[Node] = []
    for name, lam, _ in _state(ctx):
        row = _row(ctx, name, lam, "0")
        lines += [Line(f"first_{lam} = np.empty_like({row})", "SQUAREM: s₀ of the cycle"),
                  Line(f"middle_{lam} = np.empty_like({row})", "SQUAREM: s₁ = F(s₀)"),
                  Line(f"point_{lam} = np.empty_like({row})", "SQUAREM: the extrapolated s′")]
    return lines


def save_nodes(ctx: EmitContext, args: ArgRecorder) -> list[Node]:
    """At the start of a sweep: the item's state is s₀ of a cycle (even sweeps) or s₁."""
    if not ctx.kplan.extrapolated:
        return []
    first, middle = [], []
    for name, lam, _ in _state(ctx):
        row = _row(ctx, name, args.use(lam), ctx.item)
        first.append(Line(f"rt.copy_into(first_{lam}, {row})"))
        middle.append(Line(f"rt.copy_into(middle_{lam}, {row})"))
    return [Block("if sweep % 2 == 0", tuple(first), comment="SQUAREM: a cycle starts"),
            Block("else", tuple(middle))]


def step_nodes(ctx: EmitContext, callees: Callees, args: ArgRecorder) -> list[Node]:
    """After an odd sweep that did not converge (and not the last: the item's result is
    always a sweep's), the extrapolated point; only where the caller asks (``accelerate``:
    batch MF, whose restart guard keeps each item's better state)."""
    if not ctx.kplan.extrapolated:
        return []
    buffers = {f"{kind}_{lam}": f"{kind}_{lam}" for _, lam, _ in _state(ctx)
               for kind in ("first", "middle", "point")}
    return [Block(f"if {args.supply('accelerate')} and sweep % 2 == 1 "
                  f"and sweep + 1 < {args.use('max_local_iter')}",
                  (Line(ctx.call(callees, "extrapolate", buffers, args)),))]


def emit_extrapolate(ctx: EmitContext) -> Function:
    """The SQUAREM step of one item (Varadhan & Roland 2008, scheme SqS3)."""
    args = ArgRecorder()
    item = args.use(ctx.item)
    body: list[Node] = []
    for position, (name, lam, _) in enumerate(_state(ctx)):
        norms = (f"rt.squarem_norms({args.use('first_' + lam)}, {args.use('middle_' + lam)}, "
                 f"{_row(ctx, name, args.use(lam), item)})")
        if position == 0:
            body.append(Line(f"r2, v2 = {norms}"))
        else:
            body += [Line(f"more_r2, more_v2 = {norms}"),
                     Line("r2 += more_r2"), Line("v2 += more_v2")]
    body.append(Line("step = rt.squarem_step(r2, v2)"))
    points: list[Node] = []
    moves: list[Node] = []
    for name, lam, (low, high) in _state(ctx):
        row = _row(ctx, name, lam, item)
        low_text = "-np.inf" if low is None else repr(float(low))
        high_text = "np.inf" if high is None else repr(float(high))
        points.append(Line(
            f"inside = rt.squarem_point(first_{lam}, middle_{lam}, {row}, step, "
            f"{args.use('point_' + lam)}, {low_text}, {high_text})"
            + (" and inside" if points else "")))
        moves.append(Line(f"{row} = point_{lam}"))
    for name in ctx.kplan.extrapolated:
        moves += _expectations(ctx, name, args)
    body.append(Block("while step < -1.0", (
        *points,
        Block("if inside", (*moves, Line("return"))),
        Line("step = rt.backtrack(step)",
             "outside a domain: α halfway towards −1 (the plain sweeps' s₂)"),
    )))
    doc = ("SQUAREM (Varadhan & Roland 2008, SqS3) on the item's iterated locals: from s₀\n"
           "(first_*), s₁ = F(s₀) (middle_*) and s₂ = F(s₁) (the state) of the last two sweeps,\n"
           "s′ = s₀ − 2α·r + α²·v with r = s₁ − s₀, v = s₂ − 2·s₁ + s₀, α = −‖r‖/‖v‖ ≤ −1, halved\n"
           "towards −1 until every natural parameter is in its family's domain; then E[t] of s′.")
    return Function("extrapolate", tuple(args.names), tuple(body), doc, KERNEL)


def _expectations(ctx: EmitContext, name: str, args: ArgRecorder) -> list[Node]:
    """E[t] of the item's rows of ``name`` (what the next sweep reads): exp(E[log ·]) alone
    for a local the sweeps read only through it."""
    var = ctx.var(name)
    row = ctx.row_index(var, args)
    if name in ctx.kplan.exp_only:
        lam, X = args.use(ctx.layout.lam(name, "log")), args.use(f"X_{name}_log")
        return [Line(f"rt.dirichlet_exp_expected({lam}[{row}], {X}[{row}])")]
    return ctx.item_rows(var, [ctx.expect_line(var, row, args),
                               *ctx.exp_lines(var, row, args)], args)
