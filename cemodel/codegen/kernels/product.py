"""The product form of a categorical local (the LDA E-step trick, for any model of that
shape): q_c ∝ Π_messages exp(E[log ·])_c from precomputed exp arrays (fused_product); and
its implicit sums S_c = Σ_rows w·q(z = c), which the item's other locals need, computed
without building q (sums_<z>), over rows gathered once per item (gather_<z>), with the
collapsed terms of the restart guard (collapsed_<z>)."""

from __future__ import annotations

from ...model import VarDef
from ..context import KERNEL, EmitContext
from ..loops import ArgRecorder, dim_name, plate_var
from ..pycode import Block, Function, Line, Node


def _exp_factors(ctx: EmitContext, var: VarDef, items, args: ArgRecorder, nodes: list[Node],
                 comment: bool = False) -> tuple[list[str], list[dict]]:
    """exp(E[log ·]) of each product message at category t_c, with the environments (the
    observed categories' lines go to ``nodes``)."""
    factors: list[str] = []
    envs: list[dict] = []
    for m, (message, factor, monomial, stat) in enumerate(items):
        env = ctx.message_env(var, m, message, factor, monomial, args, nodes, comment=comment)
        factors.append(ctx.layout.stat_ref(stat, env, args, ctx.kplan.exp_arrays))
        envs.append(env)
    return factors, envs


def fused_product(ctx: EmitContext, var: VarDef, product, args: ArgRecorder) -> list[Node]:
    """q_c ∝ Π_messages exp(E[log ·])_c in one pass over the categories, then normalise
    (a split's E[c] = n·q: the count it splits times the probabilities)."""
    first = ctx.stats(var.name)[0][0]
    E = args.use(ctx.layout.E(var.name, first))
    row = ctx.row_index(var, args)
    size = args.use(ctx.categories(var))
    nodes: list[Node] = []
    factors, envs = _exp_factors(ctx, var, product, args, nodes, comment=True)
    # the natural parameter itself (for the entropy): the same messages in log space
    log_terms = [ctx.layout.stat_ref(stat, env_m, args, ctx.kplan.log_arrays)
                 for (_, _, _, stat), env_m in zip(product, envs, strict=True)]
    lam = args.use(ctx.layout.lam(var.name, first))
    H = args.use(f"H_{var.name}")
    logZ = args.use('logZ_' + var.name)
    if ctx.family(var.name) == "split":  # E[c] = n·φ
        n = ctx.split_total(var, args)
        normalise = [Line(f"count = {n}", "the count it splits"),
                     Line("to_mean = count / total")]
        entropy = Line(f"{H}[{row}] = count * {logZ}[{row}] - cross",
                       "H = n·log Σ_c exp λ_c − Σ_c λ_c E[c_c], without the base measure")
    else:
        normalise = [Line("to_mean = 1.0 / total")]
        entropy = Line(f"{H}[{row}] = {logZ}[{row}] - cross",
                       "H = log Σ_c exp λ_c − Σ_c λ_c q_c")
    mean = [Block(f"for t_c in range({size})", (Line(f"{E}[{row}, t_c] *= to_mean"),))]
    full: list[Node] = [
        Line("cross = 0.0"),
        Block(f"for t_c in range({size})", (
            Line(f"{E}[{row}, t_c] *= to_mean"),
            Line(f"{lam}[{row}, t_c] = {' + '.join(log_terms)}"),
            Line(f"cross += {lam}[{row}, t_c] * {E}[{row}, t_c]"),
        )),
        Line(f"{logZ}[{row}] = np.log(total)", "log Σ_c exp λ_c"),
        entropy,
    ]
    if var.name in ctx.kplan.implicit and var.name in ctx.layout.scratch:
        # the local step's last update may want q alone (local_step._entropy_wanted)
        full = [Block(f"if {args.supply('entropy')}", tuple(full)),
                Block("else", tuple(mean), comment="q alone: λ, log Σ_c exp λ_c and H only "
                      "feed the ELBO and the guard")]
    nodes += [
        Line("total = 0.0"),
        Block(f"for t_c in range({size})", (
            Line(f"{E}[{row}, t_c] = {' * '.join(factors)}"),
            Line(f"total += {E}[{row}, t_c]"),
        )),
        Block("if total > 0.0 and np.isfinite(total)", (
            *normalise,
            *full,
            Line("done = True"),
        )),
    ]
    return nodes


def emit_gather(ctx: EmitContext, name: str) -> Function:
    """B = exp(E[log ·])[observed index of each of the item's rows], gathered once per item
    into a flat buffer (``rt.gather_rows``: categories × rows when they are few)."""
    stat, known, plate = ctx.kplan.gathered[name]
    args = ArgRecorder()
    item = args.use(ctx.item)
    B = args.use(f"B_{name}")
    X = args.use(ctx.kplan.exp_arrays[stat][0])
    obs = args.use(known.operands[0].name)
    ptr = args.use(f"{plate}_ptr")
    body: list[Node] = [
        Line(f"rt.gather_rows({B}, {X}, {obs}, {ptr}[{item}], "
             f"{ptr}[{item} + 1] - {ptr}[{item}])"),
    ]
    return Function(f"gather_{name}", tuple(args.names), tuple(body),
                    f"The item's rows of {X}, contiguous for sums_{name}.", KERNEL)


def _gathered_view(B: str, size: str) -> Line:
    return Line(f"G = rt.gathered({B}, n, {size})", "the item's rows as gather stored them")


def emit_sums(ctx: EmitContext, name: str) -> Function:
    """S_c = A_c Σ_rows (w / s) B_c: the sums the item's other locals need from q(name)."""
    var = ctx.var(name)
    constant, rows, _ = ctx.kplan.implicit_plans[name]
    args = ArgRecorder()
    args.use(ctx.item)
    size = args.use(dim_name(var.categories))
    A, S = args.use(f"A_{name}"), args.use(f"S_{name}")
    head: list[Node] = []
    a_factors, _ = _exp_factors(ctx, var, constant, args, head)
    set_A = Line(f"{A}[t_c] = {' * '.join(a_factors)}")
    if name in ctx.kplan.gathered:
        body = [*head, Block(f"for t_c in range({size})", (set_A,)),
                *_gathered_sums(ctx, name, size, args)]
        doc = (f"Σ_rows w·q({name} = c) for the item's other locals, without building "
               f"q({name}):\nS_c = A_c Σ_n (w_n / s_n) B_nc, s_n = Σ_c A_c B_nc, with the "
               f"item's rows B gathered by gather_{name}.")
        return Function(f"sums_{name}", tuple(args.names), tuple(body), doc, KERNEL)
    body = [*head, Block(f"for t_c in range({size})", (set_A, Line(f"{S}[t_c] = 0.0")))]
    body += _row_sums(ctx, var, rows, size, args)
    body += [Block(f"for t_c in range({size})", (Line(f"{S}[t_c] *= {A}[t_c]"),)),
             Line("return True")]
    doc = (f"Σ_rows w·q({name} = c) for the item's other locals, without building "
           f"q({name}):\nS_c = A_c Σ_rows (w / s) B_c, s = Σ_c A_c B_c (product form of "
           f"q({name})).")
    return Function(f"sums_{name}", tuple(args.names), tuple(body), doc, KERNEL)


def _underflow_check(value: str) -> Block:
    return Block(f"if not ({value} > 0.0 and np.isfinite({value}))", (Line("return False"),),
                 comment="underflow: the caller takes the explicit path")


def _gathered_sums(ctx: EmitContext, name: str, size: str, args: ArgRecorder) -> list[Node]:
    """S from the gathered rows B: two matrix-vector products."""
    plate = ctx.kplan.gathered[name].plate
    ptr = args.use(f"{plate}_ptr")
    weight = args.use(f"{plate}_weight")
    item = ctx.item
    A, S = f"A_{name}", f"S_{name}"
    B, s = args.use(f"B_{name}"), args.use(f"s_{name}")
    return [
        Line(f"base = {ptr}[{item}]"),
        Line(f"n = {ptr}[{item} + 1] - base"),
        _gathered_view(B, size),
        Line(f"rt.rows_dot(G, {A}, {s}[:n])", "s_n = Σ_c A_c B_nc"),
        Line("bad = 0", "rows with s_n not positive and finite (no early exit: the loop "
             "vectorizes)"),
        Block("for r in range(n)", (
            Block(f"if not ({s}[r] > 0.0 and {s}[r] < np.inf)", (Line("bad += 1"),)),
            Line(f"{s}[r] = {weight}[base + r] / {s}[r]"),
        )),
        Block("if bad > 0", (Line("return False"),),
              comment="underflow: the caller takes the explicit path"),
        Line(f"rt.rows_weighted_sum(G, {s}[:n], {S})", "Σ_n (w_n / s_n) B_nc"),
        Block(f"for t_c in range({size})", (Line(f"{S}[t_c] *= {A}[t_c]"),)),
        Line("return True"),
    ]


def _row_sums(ctx: EmitContext, var: VarDef, rows, size: str,
              args: ArgRecorder) -> list[Node]:
    """S += (w / s) B row by row (B the per-row exp(E[log ·]) factors)."""
    A, S = f"A_{var.name}", f"S_{var.name}"
    row_nodes: list[Node] = []
    b_factors, _ = _exp_factors(ctx, var, rows, args, row_nodes)
    weight = "1.0"
    for plate in var.plates[1:]:
        if ctx.model.plate(plate).ragged:
            weight = f"{args.use(plate + '_weight')}[{plate_var(plate)}]"
    b = " * ".join(b_factors or ["1.0"])
    row_nodes += [
        Line("total = 0.0"),
        Block(f"for t_c in range({size})", (Line(f"total += {A}[t_c] * {b}"),)),
        _underflow_check("total"),
        Line(f"share = {weight} / total"),
        Block(f"for t_c in range({size})", (Line(f"{S}[t_c] += share * {b}"),)),
    ]
    return ctx.item_rows(var, row_nodes, args)


def emit_collapsed(ctx: EmitContext, name: str) -> Function:
    """Σ_rows w log Σ_c exp λ_c: the terms of q(name) at its optimum given the rest."""
    constant, _, _ = ctx.kplan.implicit_plans[name]
    plate = ctx.kplan.gathered[name].plate
    var = ctx.var(name)
    args = ArgRecorder()
    item = args.use(ctx.item)
    size = args.use(dim_name(var.categories))
    A, B, s = args.use(f"A_{name}"), args.use(f"B_{name}"), args.use(f"s_{name}")
    factors, _ = _exp_factors(ctx, var, constant, args, [])
    ptr, weight = args.use(f"{plate}_ptr"), args.use(f"{plate}_weight")
    body: list[Node] = [
        Block(f"for t_c in range({size})", (Line(f"{A}[t_c] = {' * '.join(factors)}"),)),
        Line(f"base = {ptr}[{item}]"),
        Line(f"n = {ptr}[{item} + 1] - base"),
        _gathered_view(B, size),
        Line(f"rt.rows_dot(G, {A}, {s}[:n])", "s_n = Σ_c exp λ_nc"),
        Line("value = 0.0"),
        Block("for r in range(n)", (Line(f"value += {weight}[base + r] * np.log({s}[r])"),)),
        Line("return value"),
    ]
    doc = (f"Σ_n w_n log Σ_c exp λ_nc: at its optimum q({name}) contributes "
           "Σ_c q_c λ_c + H(q) = log Σ_c exp λ_c per row.")
    return Function(f"collapsed_{name}", tuple(args.names), tuple(body), doc, KERNEL)
