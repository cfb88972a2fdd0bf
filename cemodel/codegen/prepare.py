"""``_prepare``: bind and check the data, evaluate the hyperparameters and known quantities,
allocate every array the kernels read, and start the globals (the model's start: prior,
random pseudo-counts and draws, or k-means++ seeds). Out of core (``share=``) it binds one
minibatch whose globals, hyperparameters and statistics are the fit's."""

from __future__ import annotations

from ..families import CHAIN_POSTERIORS
from ..model import VarDef
from .calls import KernelCalls
from .context import EmitContext
from .knowns import numpy_expr
from .loops import dim_name, entry_plates
from .memory import entry_rows, memory_line, size_code, stat_sizes, var_rows
from .pycode import Block, Comment, Function, Line, Node

# the kernels whose parameters the fit state holds (what the drivers' glue passes them)
STATE_KERNELS = ("local_step", "local_step_gibbs", "local_step_cvb0", "refresh_globals",
                 "elbo_global")


def prepare_function(ctx: EmitContext, calls: KernelCalls, shares: bool) -> Function:
    """``_prepare``; ``shares``: the module reads its items from disk (out of core)."""
    body = _binding(ctx, shares) + _allocations(ctx, shares)
    if shares:
        body.append(Block("if share is not None", (state_line(ctx, calls),),
                          comment="out of core: a minibatch's state, sharing the fit's"))
    body += _start(ctx, calls)
    body.append(state_line(ctx, calls))
    doc = ("Bind and check the data, evaluate hyperparameters and knowns, allocate the "
           "arrays, start the globals.")
    args = ("data", "hypers", "dims", "seed", "init", "start", "max_local_iter", "local_tol")
    if shares:
        doc += ("\nshare: out of core, the fit's state, whose globals, hyperparameters and "
                "statistics `data`'s minibatch shares.")
        args += ("share=None",)
    return Function("_prepare", args, tuple(body), doc)


def state_names(ctx: EmitContext, calls: KernelCalls) -> list[str]:
    """Every array and value the fit state holds: what the drivers' glue passes to kernels."""
    kernels = (*STATE_KERNELS, *[f"update_{n}" for n in ctx.plan.globals])
    names = ["bound", *[h.name for h in ctx.model.hypers], *calls.state_names(kernels)]
    if ctx.model.data_plate is not None:  # the drivers set the weights even where no kernel
        names += ["item_weight", "all_items"]  # reads them (a model without a global)
    return list(dict.fromkeys(names))


def state_line(ctx: EmitContext, calls: KernelCalls) -> Line:
    names = state_names(ctx, calls)
    return Line("return rt.State(" + ", ".join(f"{n}={n}" for n in names) + ")")


def _shared(name: str, value: str, shared: bool) -> str:
    """``value``, or out of core the fit's own (``share``)."""
    return f"{value} if share is None else share.{name}" if shared else value


def _unpack(names: list[str], values: list[str]) -> Line:
    """``a, b = x, y`` (or ``a = x``)."""
    return Line(f"{', '.join(names)} = {', '.join(values)}")


def _shared_pair(names: tuple[str, str], value: str, shared: bool) -> str:
    """``value`` (two arrays), or out of core the fit's own two."""
    if not shared:
        return value
    return f"({value}) if share is None else ({', '.join(f'share.{n}' for n in names)})"


def _binding(ctx: EmitContext, shares: bool) -> list[Node]:
    """The data bound and checked, sizes, hyperparameters and known quantities."""
    m = ctx.model
    body: list[Node] = [
        Line(f"hypers = rt.check_hyper_names(hypers, {[h.name for h in m.hypers]!r})"),
        Line("bound = rt.bind_data(SPEC, data, dims, missing=True)"),
    ]
    sizes = [d.name for d in m.dims if d.ragged_over is None]
    if sizes:
        body.append(_unpack([dim_name(d) for d in sizes], [f"bound.dims[{d!r}]" for d in sizes]))
    body.append(memory_line(ctx))
    arrays = [f"{p.name}_{k}" for p in m.plates if p.ragged for k in ("ptr", "weight")]
    arrays += [v.name for v in (*m.observed, *m.data)]
    scalars = {v.name for v in (*m.observed, *m.data) if not (v.plates or v.shape)}
    if arrays:  # a single number (no plate, no shape): the kernels read it as a scalar
        body.append(_unpack(arrays, [f"bound.arrays[{a!r}]" + (".item()" if a in scalars
                                                                 else "") for a in arrays]))
    body.append(Comment("hyperparameters (defaults from the model file"
                        + ("; out of core the fit's current values)" if shares else ")")))
    domains = ctx.kplan.hyper_domains
    for h in m.hypers:
        shape = tuple_text([dim_name(s) for s in h.shape])
        domain = f", domain={domains[h.name]!r}" if h.name in domains else ""
        default = numpy_expr(h.value)
        if " / " in default:  # evaluated only when not given: a size may make it 1/0
            default = f"lambda: {default}"
        value = f"rt.hyper_value(hypers, {h.name!r}, {default}, {shape}{domain})"
        body.append(Line(f"{h.name} = " + _shared(h.name, value, shares)))
    body.append(Comment("known quantities: functions of hyperparameters and data"))
    for key, (name, expr) in ctx.kplan.knowns.items():
        if name != expr:
            body.append(Line(f"{name} = {expr}", key))
    return body


def _allocations(ctx: EmitContext, shares: bool) -> list[Node]:
    """The variational parameters and E[t], the kernels' buffers and the statistics."""
    plan, kplan, layout = ctx.plan, ctx.kplan, ctx.layout
    body: list[Node] = [Comment("variational parameters (natural, coefficient form) and E[t]")]
    for name in plan.globals + plan.locals:
        var = ctx.var(name)
        shape = array_shape(ctx, var)
        shared = shares and name in plan.globals
        for stat, rank in ctx.stats(name):
            full = tuple_text(shape + stat_shape(var, stat, rank))
            lam, E = layout.lam(name, stat), layout.E(name, stat)
            body.append(Line(f"{lam}, {E} = " + _shared_pair(
                (lam, E), f"np.zeros({full}), np.zeros({full})", shared)))
    for name, layouts in kplan.exp_needed.items():
        E = layout.E(name, "log")
        shared = shares and name in plan.globals
        for transposed in sorted(layouts):
            if transposed:
                body.append(Line(f"XT_{name}_log, ET_{name}_log = " + _shared_pair(
                    (f"XT_{name}_log", f"ET_{name}_log"),
                    f"np.zeros({E}.shape[::-1]), np.zeros({E}.shape[::-1])", shared),
                    f"exp(E[log {name}]) and E[log {name}], statistic axis first"))
            else:
                body.append(Line(f"X_{name}_log = " + _shared(
                    f"X_{name}_log", f"np.zeros_like({E})", shared), f"exp(E[log {name}])"))
    body += _buffers(ctx)
    body.append(Comment("sufficient statistics the local step hands to the global step"
                        + (" (out of core added up over minibatches)" if shares else "")))
    for acc in plan.stored_accumulators:
        factor = plan.analysis.factors[acc.factor]
        dims = [dim_name(ctx.model.plate(k[1:]).dim) if k.startswith("@")
                else dim_name(factor.dim_of(k)) for k in acc.key]
        if acc.per_entry:  # one row per data entry: out of core the minibatch's own
            rows = [size_code(r) for r in entry_rows(ctx.model, acc.plates)]
            body.append(Line(f"{acc.name} = np.zeros({tuple_text(rows + dims)})",
                             f"per {', '.join(entry_plates(ctx.model, acc.plates))} entry"))
            continue
        body.append(Line(f"{acc.name} = " + _shared(acc.name, f"np.zeros({tuple_text(dims)})",
                                                    shares)))
    if ctx.model.data_plate is not None:
        body += _item_arrays(ctx, shares)
    return body


def _buffers(ctx: EmitContext) -> list[Node]:
    """The hoisted messages and the product-form / implicit-sum buffers of the locals."""
    plan, kplan, layout = ctx.plan, ctx.kplan, ctx.layout
    analysis = plan.analysis
    body: list[Node] = []
    for (name, m), pre in kplan.hoisted.items():
        body.append(Line(f"{pre} = np.zeros({_hoisted_shape(ctx, name, m)})",
                         f"a message to q({name}) that no item changes (hoist_messages)"))
    for (name, m), (pre, _, _, key) in kplan.partial.items():
        dims = dict(analysis.factors[analysis.conditional(name).messages[m].factor].index_dims)
        body.append(Line(f"{pre} = np.zeros({tuple_text(dim_name(dims[e]) for e in key)})",
                         f"the global part of a message to q({name}) (hoist_messages)"))
    for name in plan.locals:
        if ctx.family(name) in CHAIN_POSTERIORS:
            body.append(Line(f"H_{name} = np.zeros(1)",
                             f"entropy of the current item's chains q({name})"))
    for name in kplan.product_form:
        stat = ctx.stats(name)[0][0]
        body.append(Line(f"H_{name} = np.zeros({layout.E(name, stat)}.shape[0])",
                         f"entropy of each row of q({name})"))
        body.append(Line(f"logZ_{name} = np.zeros_like(H_{name})",
                         f"log Σ_c exp λ_c of each row of q({name})"))
    for name in kplan.implicit:
        size = dim_name(ctx.var(name).categories)
        body.append(Line(f"A_{name} = np.zeros({size})",
                         f"the item-constant part of q({name}) (see sums_{name})"))
        body.append(Line(f"S_{name} = np.zeros({size})", f"Σ_rows w·q({name} = c)"))
        if name in kplan.gathered:
            rows = f"rt.max_length({kplan.gathered[name].plate}_ptr)"
            body.append(Line(f"B_{name} = np.zeros({rows} * {size})",
                             f"one item's per-row factors of q({name}) (rt.gather_rows)"))
            body.append(Line(f"s_{name} = np.zeros({rows})", "per-row normalisers"))
    return body


def _item_arrays(ctx: EmitContext, shares: bool) -> list[Node]:
    """The threads' own arrays and the per-item ones (weights, seeds)."""
    plan = ctx.plan
    body: list[Node] = [Line("n_threads = rt.share_count(bound)",
                             "the local step's shares: one per thread, fewer for small data")]
    private = ctx.kplan.thread_private
    if private:
        body.append(Line(", ".join(f"{n}_threads" for n in private)
                         + (" =" if len(private) > 1 else ", =")
                         + f" rt.per_thread(n_threads, {', '.join(private)})"))
    for name in [a.name for a in plan.stored_accumulators if not a.per_entry]:
        body.append(Line(f"{name}_threads = " + _shared(
            f"{name}_threads", f"rt.thread_copies(n_threads, {name})", shares)))
    item_dim = dim_name(ctx.model.plate(ctx.model.data_plate).dim)
    body.append(Line(f"all_items = np.arange({item_dim})", "the local step runs over these"))
    body.append(Line(f"item_weight = np.ones({item_dim})",
                     "each item's weight in the statistics (SVI+ perturbs it)"))
    if plan.local_iterations:
        body.append(Line(f"local_sweeps = np.zeros({item_dim}, dtype=np.int64)",
                         "each item's inner sweeps in its latest local step"))
    chains = ctx.kplan.seeded_chains
    if chains:
        plates = ctx.var(chains[0]).plates
        body.append(Line(f"seed_category = rt.no_seed_steps(SPEC, bound.arrays, {plates!r})",
                         "a state per step of the chain, −1: none"))
    else:
        body.append(Line(f"seed_category = np.full({item_dim}, -1)"))
    return body


def _start(ctx: EmitContext, calls: KernelCalls) -> list[Node]:
    """Every global at its prior, then the model's start (DEFAULT_START, or `start`), or
    the globals of an earlier fit (`init`)."""
    plan, layout = ctx.plan, ctx.layout
    body: list[Node] = [Comment("start every global at its prior")]
    body += [calls.call(f"update_{name}", {"data_scale": "0.0"}, prefix="")
             for name in plan.globals]
    state = ", ".join(f"{layout.lam(n, s)!r}: {layout.lam(n, s)}"
                      for n in plan.globals for s, _ in ctx.stats(n))
    if plan.globals:
        body.append(Block("if init is not None", (
            Line(f"rt.load_state(init, {{{state}}})"),
            calls.call("refresh_globals", {}, prefix=""),
        ), comment="warm start: the globals' natural parameters from an earlier fit"))
    draws, moved = _draws(ctx)
    chains = ctx.kplan.seeded_chains
    count_lams = [layout.lam(n, st) for n in plan.globals
                  if ctx.family(n) in ("dirichlet", "beta") for st, _ in ctx.stats(n)]
    # a chain's states (no categorical to seed from) start from random pseudo-counts
    # spread as a Dirichlet(1) draw's: the chain's symmetric start is a saddle that the
    # narrow LDA-style counts leave too slowly
    counts = [Line(f"{lam} += rng.exponential(1.0, {lam}.shape)") for lam in count_lams
              ] if ctx.kplan.default_start == "random" or chains else []
    categorical = [n for n in plan.locals if ctx.family(n) == "categorical"]
    seeded = bool(categorical or chains) and ctx.model.data_plate is not None
    if not seeded and not (draws or counts):
        # one start only: anything else named is refused, not ignored
        return body + [Block("if init is None and start not in (None, 'prior')", (Line(
            "raise rt.CemDataError(f\"start: expected 'prior' (the only start of this "
            "model: nothing to break), found {start!r}\")"),))]
    if not seeded:
        why = [Comment("random pseudo-counts on the count-type globals")] if counts else []
        if draws:
            why.append(Comment(", ".join(dict.fromkeys(moved)) + ": breaks the symmetry "
                               "of products of latent variables"))
        return body + [
            Line("start = DEFAULT_START if start is None else start"),
            Block("if init is None and start == 'random'", (
                *why, Line("rng = np.random.default_rng(seed)"), *counts, *draws,
                calls.call("refresh_globals", {}, prefix=""))),
            Block("elif init is None and start == 'seeds'", (Line(
                "raise rt.CemDataError(\"start: expected 'random' or 'prior', found 'seeds' "
                "(there is no categorical assignment to seed)\")"),)),
            Block("elif init is None and start != 'prior'", (Line(
                "raise rt.CemDataError(f\"start: expected 'random' or 'prior', "
                "found {start!r}\")"),))]
    pseudo = [Line(f"{lam} += rng.gamma(100.0, 0.01, {lam}.shape)") for lam in count_lams]
    return body + _seeded_start(ctx, calls, (counts if chains else pseudo) + draws)


def _gamma_draw(ctx: EmitContext, name: str) -> Line:
    """Gamma global ``name`` concentrated near its current mean, jittered (its parts apart)."""
    return Line(f"rt.start_gamma_near_mean({ctx.layout.lam(name, 'log')}, "
                f"{ctx.layout.lam(name, 'value')}, rng)")


def _draws(ctx: EmitContext) -> tuple[list[Node], list[str]]:
    """The random start's draws that break the symmetry of products of latents, and what
    they do (for the comment)."""
    draws: list[Node] = []
    moved: list[str] = []
    for name in ctx.plan.globals:
        if name in ctx.kplan.drawn_means:
            moved.append("each Normal/MVN global's mean drawn from its prior")
            second = ctx.stats(name)[1][0]
            draws.append(Line(f"rt.start_at_draw({ctx.family(name)!r}, "
                              f"{ctx.layout.lam(name, 'value')}, "
                              f"{ctx.layout.lam(name, second)}, rng)"))
        elif name in ctx.kplan.gamma_products:
            moved.append("each Gamma global concentrated near its prior mean, jittered")
            draws.append(_gamma_draw(ctx, name))
    return draws, moved


def _seeded_start(ctx: EmitContext, calls: KernelCalls, random: list[Node]) -> list[Node]:
    """'seeds' (k-means++ seed items, or seed steps of a chain) or 'random'."""
    plan, m = ctx.plan, ctx.model
    categorical = [n for n in plan.locals if ctx.family(n) == "categorical"]
    chains = ctx.kplan.seeded_chains
    seed_locals = categorical or list(chains)
    sizes = ", ".join(dim_name(ctx.var(n).categories) for n in seed_locals)
    n_cat = sizes if len(seed_locals) == 1 else f"max({sizes})"
    item_dim = dim_name(m.plate(m.data_plate).dim)
    choose = Line(
        f"seed_category = rt.seed_categories(SPEC, bound.arrays, {m.data_plate!r}, "
        f"{item_dim}, {n_cat}, seed, bound.missing)" if categorical else
        f"seed_category = rt.seed_chain_steps(SPEC, bound.arrays, "
        f"{ctx.var(chains[0]).plates!r}, {n_cat}, seed)")
    # the seed items fix the assignments, not the parts a product sums over: those start at
    # their prior, all alike, and the seeded statistics split alike between them for ever
    apart = [_gamma_draw(ctx, n) for n in plan.globals if n in ctx.kplan.gamma_products]
    if apart:
        apart = [Comment("the Gamma globals of summed products start apart (their parts "
                         "are exchangeable)"), Line("rng = np.random.default_rng(seed)"),
                 *apart, calls.call("refresh_globals", {}, prefix="")]
    # the seed items alone: an item without a seed would add the statistics its q(z) does
    # not gate (a shared precision's count, the parts of a split count) and not the others
    pick = [Line("seed_items = np.flatnonzero(seed_category >= 0)",
                 "the globals start from the seed items' statistics alone")] if categorical else []
    overrides = {"seeding": "True", "items": "seed_items" if categorical else "all_items",
                 "warm": "False", "guard": "False", "evaluate": "False", "accelerate": "False"}
    steps = f"{ctx.var(chains[0]).plates[-1]}_weight" if chains else None
    if steps in calls.params.get("local_step", ()):  # a chain's steps without a seed: none
        overrides[steps] = f"np.where(seed_category >= 0, bound.arrays[{steps!r}], 0.0)"
    seeding: list[Node] = [
        Comment(f"start from k-means++ seed {'items' if categorical else 'steps'} "
                "(see cemodel.runtime.seeding); not part of the ELBO trace"),
        *apart,
        choose,
        *pick,
        *[Line(f"{acc.name}[...] = 0.0") for acc in plan.stored_accumulators],
        *calls.run("local_step", overrides, prefix=""),
        *[calls.call(f"update_{n}", {"data_scale": "1.0"}, prefix="") for n in plan.globals],
    ]
    random_start: list[Node] = [
        Comment("start from random pseudo-counts on the count-type globals "
                "(Hoffman et al. 2010)"),
        Line("rng = np.random.default_rng(seed)"), *random]
    if plan.globals:
        random_start.append(calls.call("refresh_globals", {}, prefix=""))
    else:
        random_start = [Comment("no global latent to start: the locals' first step "
                                "starts from the prior"), Line("pass")]
    return [
        Line("start = DEFAULT_START if start is None else start"),
        Block("if init is None and start == 'seeds'", tuple(seeding)),
        Block("elif init is None and start == 'random'", tuple(random_start)),
        Block("elif init is None and start == 'prior'", (Line(
            "raise rt.CemDataError(\"start: expected 'seeds' or 'random', found 'prior' "
            "(from the prior the components start alike and stay alike)\")"),)),
        Block("elif init is None", (Line(
            "raise rt.CemDataError(f\"start: expected 'seeds' or 'random', "
            "found {start!r}\")"),)),
    ]


def array_shape(ctx: EmitContext, var: VarDef, full: bool = False) -> list[str]:
    """The rows of a variable's arrays: the item's rows for a scratch local, else one
    per element of its plates (ragged plates flattened); ``full``: never scratch."""
    return [size_code(size) for size in var_rows(ctx, var, full)]


def stat_shape(var: VarDef, stat: str, rank: int) -> list[str]:
    """The event axes of a statistic's array."""
    return [size_code(size) for size in stat_sizes(var, stat, rank)]


def _hoisted_shape(ctx: EmitContext, name: str, m: int) -> str:
    var = ctx.var(name)
    message = ctx.plan.analysis.conditional(name).messages[m]
    rank = dict(ctx.stats(name))[message.target.stat]
    shape = [dim_name(ctx.model.plate(p).dim) for p in var.plates[1:]]
    shape += stat_shape(var, message.target.stat, rank)
    return tuple_text(shape or ["1"])


def tuple_text(items) -> str:
    """Python source of a tuple of expressions: (), (a,), (a, b)."""
    items = list(items)
    if len(items) == 1:
        return f"({items[0]},)"
    return "(" + ", ".join(items) + ")"
