"""Stage 5: InferencePlan -> a Python module of numba kernels for mean-field VB.

The module holds, in order: the SPEC the data binder checks against, one
kernel per local update, the local step (E-step over the data plate), one
kernel per global update, the ELBO of the global factors, and ``fit``, the
driver that runs coordinate ascent. Every kernel's docstring is its update
equation with a pointer to the model line it implements.

Every decision is made first (``lowering.lower``: the KernelPlan) and the kernels are
printed by the functions of ``codegen/kernels`` over an ``EmitContext``; MeanFieldEmitter
holds the driver section (``_prepare``, ``fit``, ``fit_svi``, ...) and hands it what the
kernels decided.
"""

from __future__ import annotations

import hashlib
from types import MappingProxyType

from .. import __version__
from ..conjugacy import Known, Stat
from ..families import FAMILIES
from ..model import (
    Model,
    RBin,
    RCall,
    RExpr,
    RHyper,
    RNeg,
    RRepeat,
    RVector,
    VarDef,
)
from ..plan import SSVI_AUX_DRAWS, InferencePlan
from .context import emit_context
from .interface import entry_points, interface_nodes, roles_table
from .kernels import globals as global_kernels
from .kernels import klc as klc_kernels
from .kernels.assignments import emit_assignment_step, emit_evidence
from .kernels.local import emit_item_elbo, emit_update_local
from .kernels.local_step import emit_local_step
from .kernels.product import emit_collapsed, emit_gather, emit_sums
from .klc import klc_constants, klc_functions
from .knowns import known_numpy
from .knowns import numpy_expr as _np
from .loops import dim_name
from .lowering import Gathered, ImplicitPlan, PartialMessage, ProductMessage, lower
from .pycode import Blank, Block, Comment, Function, Line, Module, Node, print_module

_PARAMS = {
    "dirichlet": ("dirichlet_params", ("alpha",)),
    "categorical": ("categorical_params", ("probs",)),
    "beta": ("beta_params", ("a", "b")),
    "gamma": ("gamma_params", ("shape", "rate")),
    "normal": ("normal_params", ("mean", "precision")),
    "mvn": ("mvn_params", ("mean", "precision")),
    "wishart": ("wishart_params", ("dof", "scale")),
    "bernoulli": ("bernoulli_params", ("p",)),
    "split": ("categorical_params", ("probs",)),
    "normal_gamma": ("normal_gamma_params", ("mean", "beta", "shape", "rate")),
    "normal_wishart": ("normal_wishart_params", ("mean", "beta", "dof", "scale")),
}


def source_hash(model: Model) -> str:
    return hashlib.sha256(model.source.text.encode()).hexdigest()


class MeanFieldEmitter:
    """The module of one plan: the KernelPlan and EmitContext built once, the kernels
    from codegen/kernels, the driver section below. The members before ``spec_literal``
    hand the driver section what the KernelPlan decided, under the names it reads."""

    def __init__(self, plan: InferencePlan) -> None:
        self.plan = plan
        self.model = plan.model
        self.analysis = plan.analysis
        self.kplan = lower(plan)
        self.ctx = emit_context(plan, self.kplan)
        self.layout = self.ctx.layout
        self.known_exprs = self.kplan.knowns  # Known.key -> (name, numpy expr)
        self.known_slots = self.kplan.known_slots
        # module() assigns the same values again (it predates the KernelPlan)
        self.implicit = self.kplan.implicit
        self.product_form = self.kplan.product_form
        self.exp_only = self.kplan.exp_only
        self.kernels: list[Function] = []
        self.kernel_args: dict[str, tuple[str, ...]] = {}  # kernel -> parameters (drivers)

    # -- the KernelPlan, under the driver section's names ----------------------------------
    @property
    def exp_needed(self) -> MappingProxyType:
        return self.kplan.exp_needed

    def _plan_exp_arrays(self) -> None:
        """Nothing left to do: the KernelPlan holds the exp(E[log ·]) arrays."""

    def var(self, name: str) -> VarDef:
        return self.model.var(name)

    def family(self, name: str) -> str:
        return self.ctx.family(name)

    def stats(self, name: str) -> tuple[tuple[str, int], ...]:
        return self.ctx.stats(name)

    def model_plate_names(self) -> set[str]:
        return {p.name for p in self.model.plates}

    def hoisted(self) -> MappingProxyType[tuple[str, int], str]:
        return self.kplan.hoisted

    def partial(self) -> MappingProxyType[tuple[str, int], PartialMessage]:
        return self.kplan.partial

    def product_messages(self, name: str) -> tuple[ProductMessage, ...] | None:
        return self.kplan.product.get(name)

    def implicit_plan(self, name: str) -> ImplicitPlan | None:
        return self.kplan.implicit_plans.get(name)

    def gathered_plan(self, name: str) -> Gathered | None:
        return self.kplan.gathered.get(name)

    def thread_private(self) -> list[str]:
        return list(self.kplan.thread_private)

    def _hyper_domains(self) -> dict[str, str]:
        return dict(self.kplan.hyper_domains)

    def _seeded_chains(self) -> list[str]:
        return list(self.kplan.seeded_chains)

    def _fast_guard(self) -> str | None:
        return self.kplan.fast_guard

    def _kept_arrays(self) -> list[str]:
        return list(self.kplan.kept_arrays)

    def _log_data_names(self) -> list[str]:
        return list(self.kplan.log_data_names)

    def _known_numpy(self, slot: Known, prefix: str = "") -> tuple[str, str]:
        return known_numpy(self.model, slot, prefix)

    def _check_possible_lines(self) -> list[Line]:
        """Where data enter through their log, a positive count can meet a rate of 0: the
        ELBO then holds count · rt.LOG_ZERO, and the fit refuses the data (rt.check_possible)."""
        names = self._log_data_names()
        if not names:
            return []
        return [Line(f"rt.check_possible(elbo, {_tuple(repr(n) for n in names)})",
                     "data of probability 0 (a count where its rate has a factor 0)")]

    def _hoisted_shape(self, name: str, m: int) -> str:
        var = self.var(name)
        message = self.analysis.conditional(name).messages[m]
        rank = dict(self.stats(name))[message.target.stat]
        shape = [dim_name(self.model.plate(p).dim) for p in var.plates[1:]]
        shape += self._stat_shape(var, message.target.stat, rank)
        return _tuple(shape or ["1"])

    # -- the kernels (codegen/kernels), their parameters recorded for the drivers -------------
    def _built(self, fn: Function) -> Function:
        self.kernel_args[fn.name] = fn.args
        return fn

    def local_update_kernel(self, name: str) -> Function:
        return self._built(emit_update_local(self.ctx, name))

    def gather_kernel(self, name: str) -> Function:
        return self._built(emit_gather(self.ctx, name))

    def implicit_kernel(self, name: str) -> Function:
        return self._built(emit_sums(self.ctx, name))

    def collapsed_kernel(self, name: str) -> Function:
        return self._built(emit_collapsed(self.ctx, name))

    def item_elbo_kernel(self, without: tuple[str, ...] = ()) -> Function:
        return self._built(emit_item_elbo(self.ctx, without))

    def local_step_kernel(self) -> Function:
        return self._built(emit_local_step(self.ctx, MappingProxyType(self.kernel_args)))

    def global_update_kernel(self, name: str) -> Function:
        return self._built(global_kernels.emit_update_global(self.ctx, name))

    def refresh_kernel(self) -> Function:
        return self._built(global_kernels.emit_refresh(self.ctx))

    def elbo_global_kernel(self) -> Function:
        return self._built(global_kernels.emit_elbo_global(self.ctx))

    def evidence_kernel(self, name: str) -> Function:
        return self._built(emit_evidence(self.ctx, name))

    def assignment_step_kernel(self, mode: str) -> Function:
        return self._built(emit_assignment_step(self.ctx, mode,
                                                MappingProxyType(self.kernel_args)))

    def klc_stats_kernel(self) -> Function:
        return self._built(klc_kernels.emit_klc_stats(self.ctx,
                                                      MappingProxyType(self.kernel_args)))

    def klc_gradient_kernel(self) -> Function:
        return self._built(klc_kernels.emit_klc_gradient(self.ctx,
                                                         MappingProxyType(self.kernel_args)))

    def klc_functions(self) -> list[Function]:
        return klc_functions(self.ctx, self._driver_call, self._array_shape)

    # -- the driver ------------------------------------------------------------
    def spec_literal(self) -> list[Node]:
        m = self.model
        lines = ["SPEC = {", f"    \"model\": {m.name!r},", "    \"dims\": {"]
        for d in m.dims:
            lines.append(f"        {d.name!r}: {{\"default\": {d.default!r}, "
                         f"\"ragged_over\": {d.ragged_over!r}}},")
        lines.append("    },")
        lines.append("    \"plates\": {")
        # the time plates of chains keep their order (no bag of words)
        ordered = {v.plates[-1] for v in m.variables if v.family == "MarkovChain"}
        for p in m.plates:
            mark = ", \"ordered\": True" if p.name in ordered else ""
            lines.append(f"        {p.name!r}: {{\"dim\": {p.dim!r}, \"parent\": {p.parent!r}, "
                         f"\"ragged\": {p.ragged!r}{mark}}},")
        lines.append("    },")
        lines.append("    \"observed\": {")
        for v in m.observed:
            fam = FAMILIES[v.family]
            lines.append(f"        {v.name!r}: {{\"plates\": {list(v.plates)!r}, "
                         f"\"support\": {fam.support!r}, \"shape\": {list(v.shape)!r}, "
                         f"\"categories\": {v.categories!r}}},")
        lines.append("    },")
        lines.append("    \"covariates\": {")
        logged = self._log_data_names()
        for c in m.data:
            index = f", \"categories\": {c.index_range!r}" if c.index_range else ""
            index += ", \"nonnegative\": True" if c.name in logged else ""
            lines.append(f"        {c.name!r}: {{\"plates\": {list(c.plates)!r}, "
                         f"\"kind\": {c.kind!r}, \"shape\": {list(c.shape)!r}{index}}},")
        lines.append("    },")
        lines.append("}")
        return [Line(text) for text in lines]

    def _state_names(self) -> list[str]:
        """Every name a driver passes to a kernel: held by the state ``_prepare`` returns."""
        names: list[str] = []
        called = ["local_step", "local_step_gibbs", "local_step_cvb0", "refresh_globals",
                  "elbo_global", *[f"update_{n}" for n in self.plan.globals]]
        for kernel in called:
            for a in self.kernel_args.get(kernel, ()):
                if a not in names and a not in _DRIVER_ARGS:
                    names.append(a)
        return names

    def item_dims(self) -> tuple[str, ...]:
        """The sizes that vary with the items bound: the data plate's and those of the ragged
        plates inside it (a minibatch bound on its own has its own); a fixed-size inner plate
        has the same size for every item."""
        m = self.model
        if m.data_plate is None:
            return ()
        inside = [m.data_plate]  # the data plate's own size first
        for p in m.plates:  # parents come before their children
            if p.parent in inside:
                inside.append(p.name)
        return tuple(dict.fromkeys(m.plate(p).dim for p in inside
                                   if p == m.data_plate or m.plate(p).ragged))

    def streaming(self) -> str:
        """Whether fit_svi can read its items from an rt.ItemSource, one minibatch at a time
        ('yes', or 'no: <reason>'): no global, hyperparameter or outside data may be sized by
        the items."""
        m = self.model
        if m.data_plate is None:
            return "no: the model has no data plate to read in minibatches"
        items = set(self.item_dims())
        for name in self.plan.globals:
            var = self.var(name)
            for plate in var.plates:
                if self.model.plate(plate).dim in items:
                    return (f"no: the global {name} has a row per element of plate {plate}, "
                            f"whose size {self.model.plate(plate).dim} varies with the items")
            for d in var.shape:
                if d in items:
                    return f"no: the size {d} of the global {name} varies with the items"
        for h in m.hypers:
            for d in h.shape:
                if d in items:
                    return f"no: the hyperparameter {h.name} is sized by {d}, one per item"
        return "yes"

    def _prepare_nodes(self, shares: bool) -> list[Node]:
        """The binding and allocations of ``_prepare``; ``shares`` (out of core): given the
        fit's state ``share``, a minibatch's own data, locals and buffers, and the globals,
        hyperparameters and statistics of ``share``, shared rather than copied."""
        m = self.model
        body: list[Node] = []
        body.append(Line(f"hypers = rt.check_hyper_names(hypers, {[h.name for h in m.hypers]!r})"))
        body.append(Line("bound = rt.bind_data(SPEC, data, dims)"))
        for d in m.dims:
            if d.ragged_over is None:
                body.append(Line(f"{dim_name(d.name)} = bound.dims[{d.name!r}]"))
        for p in m.plates:
            if p.ragged:
                body.append(Line(f"{p.name}_ptr = bound.arrays[{p.name + '_ptr'!r}]"))
                body.append(Line(f"{p.name}_weight = bound.arrays[{p.name + '_weight'!r}]"))
        for v in (*m.observed, *m.data):
            if v.plates or v.shape:
                body.append(Line(f"{v.name} = bound.arrays[{v.name!r}]"))
            else:  # a single number: the kernels read it as a scalar
                body.append(Line(f"{v.name} = bound.arrays[{v.name!r}].item()"))
        body.append(Comment("hyperparameters (defaults from the model file"
                            + ("; out of core the fit's current values)" if shares else ")")))
        domains = self._hyper_domains()
        for h in m.hypers:
            shape = _tuple([dim_name(s) for s in h.shape])
            domain = f", domain={domains[h.name]!r}" if h.name in domains else ""
            default = _np(h.value)
            if " / " in default:  # evaluated only when not given: a size may make it 1/0
                default = f"lambda: {default}"
            value = f"rt.hyper_value(hypers, {h.name!r}, {default}, {shape}{domain})"
            body.append(Line(f"{h.name} = " + _shared(h.name, value, shares)))
        body.append(Comment("known quantities: functions of hyperparameters and data"))
        for key, (name, expr) in self.known_exprs.items():
            if name == expr:
                continue
            body.append(Line(f"{name} = {expr}", key))
        body.append(Comment("variational parameters (natural, coefficient form) and E[t]"))
        for name in self.plan.globals + self.plan.locals:
            var = self.var(name)
            shape = self._array_shape(var)
            for stat, rank in self.stats(name):
                event = self._stat_shape(var, stat, rank)
                full = _tuple(shape + event)
                for array in (self.layout.lam(name, stat), self.layout.E(name, stat)):
                    shared = shares and name in self.plan.globals
                    body.append(Line(f"{array} = " + _shared(array, f"np.zeros({full})",
                                                             shared)))
        for name, layouts in self.exp_needed.items():
            E = self.layout.E(name, "log")
            shared = shares and name in self.plan.globals
            for transposed in sorted(layouts):
                if transposed:
                    body.append(Line(f"XT_{name}_log = " + _shared(
                        f"XT_{name}_log", f"np.zeros({E}.shape[::-1])", shared),
                        f"exp(E[log {name}]), statistic axis first"))
                    body.append(Line(f"ET_{name}_log = " + _shared(
                        f"ET_{name}_log", f"np.zeros({E}.shape[::-1])", shared),
                        f"E[log {name}], statistic axis first"))
                else:
                    body.append(Line(f"X_{name}_log = " + _shared(
                        f"X_{name}_log", f"np.zeros_like({E})", shared), f"exp(E[log {name}])"))
        for (name, m), pre in self.hoisted().items():
            body.append(Line(f"{pre} = np.zeros({self._hoisted_shape(name, m)})",
                             f"a message to q({name}) that no item changes (hoist_messages)"))
        for (name, m), (pre, _, _, key) in self.partial().items():
            dims = dict(self.analysis.factors[
                self.analysis.conditional(name).messages[m].factor].index_dims)
            body.append(Line(f"{pre} = np.zeros({_tuple(dim_name(dims[e]) for e in key)})",
                             f"the global part of a message to q({name}) (hoist_messages)"))
        for name in self.plan.locals:
            if self.family(name) == "markov":
                body.append(Line(f"H_{name} = np.zeros(1)",
                                 f"entropy of the current item's chains q({name})"))
        for name in self.product_form:
            stat = self.stats(name)[0][0]
            body.append(Line(f"H_{name} = np.zeros({self.layout.E(name, stat)}.shape[0])",
                             f"entropy of each row of q({name})"))
            body.append(Line(f"logZ_{name} = np.zeros_like(H_{name})",
                             f"log Σ_c exp λ_c of each row of q({name})"))
        for name in self.implicit:
            size = dim_name(self.var(name).categories)
            body.append(Line(f"A_{name} = np.zeros({size})",
                             f"the item-constant part of q({name}) (see sums_{name})"))
            body.append(Line(f"S_{name} = np.zeros({size})", f"Σ_rows w·q({name} = c)"))
            if self.gathered_plan(name) is not None:
                rows = f"rt.max_length({self.gathered_plan(name)[2]}_ptr)"
                body.append(Line(f"B_{name} = np.zeros(({rows}, {size}))",
                                 f"one item's rows of the per-row factor of q({name})"))
                body.append(Line(f"s_{name} = np.zeros({rows})", "per-row normalisers"))
        body.append(Comment("sufficient statistics the local step hands to the global step"
                            + (" (out of core added up over minibatches)" if shares else "")))
        for acc in self.plan.stored_accumulators:
            factor = self.analysis.factors[acc.factor]
            dims = [dim_name(self.model.plate(k[1:]).dim) if k.startswith("@")
                    else dim_name(factor.dim_of(k)) for k in acc.key]
            body.append(Line(f"{acc.name} = " + _shared(acc.name, f"np.zeros({_tuple(dims)})",
                                                        shares)))
        if self.model.data_plate is not None:
            body.append(Line("n_threads = rt.thread_count()",
                             "the local step's threads (NUMBA_NUM_THREADS, --threads)"))
            private = self.thread_private()
            if private:
                body.append(Line(", ".join(f"{n}_threads" for n in private)
                                 + (" =" if len(private) > 1 else ", =")
                                 + f" rt.per_thread(n_threads, {', '.join(private)})",
                                 "each thread's own scratch arrays"))
            for name in [a.name for a in self.plan.stored_accumulators]:
                body.append(Line(f"{name}_threads = " + _shared(
                    f"{name}_threads", f"np.zeros((n_threads,) + {name}.shape)", shares)))
            item_dim = dim_name(self.model.plate(self.model.data_plate).dim)
            body.append(Line(f"all_items = np.arange({item_dim})",
                             "the local step runs over these"))
            body.append(Line(f"item_weight = np.ones({item_dim})",
                             "each item's weight in the statistics (SVI+ perturbs it)"))
            chains = self._seeded_chains()
            if chains:
                plates = self.var(chains[0]).plates
                body.append(Line(f"seed_category = rt.no_seed_steps(SPEC, bound.arrays, "
                                 f"{plates!r})", "a state per step of the chain, −1: none"))
            else:
                body.append(Line(f"seed_category = np.full({item_dim}, -1)"))
        return body

    def _state_line(self) -> Line:
        names = ["bound", *[h.name for h in self.model.hypers], *self._state_names()]
        if self.model.data_plate is not None:
            names.append("all_items")
        names = list(dict.fromkeys(names))
        return Line("return rt.State(" + ", ".join(f"{n}={n}" for n in names) + ")")

    def _exp_arrays(self, name: str) -> list[str]:
        """The copies of E[log name] the kernels read: exp(E) (X_), and statistic-axis-first
        exp(E) and E (XT_, ET_), as its layouts need (see _plan_exp_arrays)."""
        return [a for transposed in sorted(self.exp_needed[name])
                for a in ((f"XT_{name}_log", f"ET_{name}_log") if transposed
                          else (f"X_{name}_log",))]

    def _streaming_constants(self) -> list[Node]:
        """What fit_svi needs to read its items from disk a minibatch at a time."""
        nodes: list[Node] = [
            Line(f"STREAMING = {self.streaming()!r}",
                 "fit_svi from an rt.ItemSource (data on disk)"),
            Line(f"ITEM_DIMS = {self.item_dims()!r}", "sizes set by the items bound"),
        ]
        return nodes

    def prepare_function(self) -> Function:
        shares = self.streaming() == "yes"
        body = self._prepare_nodes(shares)
        if shares:
            body.append(Block("if share is not None", (self._state_line(),),
                              comment="out of core: a minibatch's state, sharing the fit's"))
        body.append(Comment("start every global at its prior"))
        for name in self.plan.globals:
            body.append(self._driver_call(f"update_{name}", {"data_scale": "0.0"}, prefix=""))
        state = ", ".join(f"{self.layout.lam(n, s)!r}: {self.layout.lam(n, s)}"
                          for n in self.plan.globals for s, _ in self.stats(n))
        if self.plan.globals:
            body.append(Block("if init is not None", (
                Line(f"rt.load_state(init, {{{state}}})"),
                self._driver_call("refresh_globals", {}, prefix=""),
            ), comment="warm start: the globals' natural parameters from an earlier fit"))
        categorical = [n for n in self.plan.locals if self.family(n) == "categorical"]
        draws: list[Node] = []
        moved: list[str] = []  # what the draws do, for the comment
        for name in self.plan.globals:
            if self.family(name) in ("normal", "mvn"):
                moved.append("each Normal/MVN global's mean drawn from its prior")
                second = self.stats(name)[1][0]
                draws.append(Line(f"rt.start_at_draw({self.family(name)!r}, "
                                  f"{self.layout.lam(name, 'value')}, "
                                  f"{self.layout.lam(name, second)}, rng)"))
            elif name in self._gamma_products():
                moved.append("each Gamma global concentrated near its prior mean, jittered")
                draws.append(Line(f"rt.start_gamma_near_mean({self.layout.lam(name, 'log')}, "
                                  f"{self.layout.lam(name, 'value')}, rng)"))
        count_lams = [self.layout.lam(n, st) for n in self.plan.globals
                      if self.family(n) in ("dirichlet", "beta") for st, _ in self.stats(n)]
        pseudo = [Line(f"{lam} += rng.gamma(100.0, 0.01, {lam}.shape)") for lam in count_lams]
        # a chain's states (no categorical to seed from) start from random pseudo-counts
        # spread as a Dirichlet(1) draw's: the chain's symmetric start is a saddle that the
        # narrow LDA-style counts above leave too slowly
        chains = self._seeded_chains()
        counts = [Line(f"{lam} += rng.exponential(1.0, {lam}.shape)") for lam in count_lams
                  ] if self.default_start() == "random" or chains else []
        seed_locals = (categorical or chains) if self.model.data_plate is not None else []
        seeded = bool(seed_locals)
        if not (draws or counts) and not seeded:
            # one start only: anything else named is refused, not ignored
            body.append(Block("if init is None and start not in (None, 'prior')", (Line(
                "raise rt.CemDataError(f\"start: expected 'prior' (the only start of this "
                "model: nothing to break), found {start!r}\")"),)))
        if (draws or counts) and not seeded:
            why = [Comment("random pseudo-counts on the count-type globals")] if counts else []
            if draws:
                why.append(Comment(", ".join(dict.fromkeys(moved)) + ": breaks the symmetry "
                                   "of products of latent variables"))
            body.append(Block("if start is None", (Line("start = DEFAULT_START"),)))
            body.append(Block("if init is None and start == 'random'", (
                *why,
                Line("rng = np.random.default_rng(seed)"),
                *counts,
                *draws,
                self._driver_call("refresh_globals", {}, prefix=""),
            )))
            body.append(Block("elif init is None and start != 'prior'", (Line(
                "raise rt.CemDataError(f\"start: expected 'random' or 'prior', "
                "found {start!r}\")"),)))
        if seeded:
            sizes = ", ".join(dim_name(self.var(n).categories) for n in seed_locals)
            n_cat = sizes if len(seed_locals) == 1 else f"max({sizes})"
            item_dim = dim_name(self.model.plate(self.model.data_plate).dim)
            choose = Line(
                f"seed_category = rt.seed_categories(SPEC, bound.arrays, "
                f"{self.model.data_plate!r}, {item_dim}, {n_cat}, seed)" if categorical else
                f"seed_category = rt.seed_chain_steps(SPEC, bound.arrays, "
                f"{self.var(chains[0]).plates!r}, {n_cat}, seed)")
            seeding: list[Node] = [
                Comment(f"start from k-means++ seed {'items' if categorical else 'steps'} "
                        "(see cemodel.runtime.seeding); not part of the ELBO trace"),
                choose,
                *[Line(f"{acc.name}[...] = 0.0") for acc in self.plan.stored_accumulators],
                self._driver_call("local_step", {
                    "seeding": "True", "items": "all_items", "warm": "False",
                    "guard": "False"}, prefix=""),
                *[self._driver_call(f"update_{n}", {"data_scale": "1.0"}, prefix="")
                  for n in self.plan.globals],
            ]
            random_start: list[Node] = [
                Comment("start from random pseudo-counts on the count-type globals "
                        "(Hoffman et al. 2010)"),
                Line("rng = np.random.default_rng(seed)"),
            ]
            random_start += (counts if chains else pseudo) + draws
            if self.plan.globals:
                random_start.append(self._driver_call("refresh_globals", {}, prefix=""))
            else:
                random_start = [Comment("no global latent to start: the locals' first step "
                                        "starts from the prior"), Line("pass")]
            body.append(Block("if start is None", (Line("start = DEFAULT_START"),)))
            body.append(Block("if init is None and start == 'seeds'", tuple(seeding)))
            body.append(Block("elif init is None and start == 'random'", tuple(random_start)))
            body.append(Block("elif init is None", (Line(
                "raise rt.CemDataError(f\"start: expected 'seeds' or 'random', "
                "found {start!r}\")"),)))
        body.append(self._state_line())
        doc = ("Bind and check the data, evaluate hyperparameters and known quantities, "
               "allocate\nthe variational parameters and start the globals (see fit).")
        args = ("data", "hypers", "dims", "seed", "init", "start", "max_local_iter",
                "local_tol")
        if shares:
            doc += ("\nshare: out of core, the fit's state; `data` holds one minibatch, "
                    "whose globals, hyperparameters\nand statistics are share's (not copied).")
            args += ("share=None",)
        return Function("_prepare", args, tuple(body), doc)

    def learn_function(self) -> Function:
        """Empirical Bayes for the learnable hyperparameters, then the knowns that use them."""
        body: list[Node] = []
        for item in self.plan.learnable:
            var = self.var(item.var)
            # a local's rows: only the minibatch's are fresh in a stochastic step
            rows = "[items]" if self.model.is_local(var) else ""
            if item.kind == "dirichlet":
                E_log = self.layout.E(var.name, "log")
                call = f"rt.learn_symmetric_dirichlet(s.{item.hyper}, s.{E_log}{rows})"
            elif item.kind == "gamma_shape":
                other = f"s.{item.other}" if item.other.isidentifier() else item.other
                call = (f"rt.learn_gamma_shape({other}, "
                        f"s.{self.layout.E(var.name, 'log')}{rows})")
            else:
                other = f"s.{item.other}" if item.other.isidentifier() else item.other
                call = (f"rt.learn_gamma_rate({other}, "
                        f"s.{self.layout.E(var.name, 'value')}{rows})")
            body.append(Block(f"if {item.hyper!r} in learn", (
                Line(f"s.{item.hyper} = (1.0 - rho) * s.{item.hyper} + rho * {call}"),),
                comment=f"the prior of {item.var}"))
        body.append(Comment("known quantities that depend on hyperparameters"))
        learned = {i.hyper for i in self.plan.learnable}
        for key, slot in self.known_slots.items():
            if not any(_mentions(o, learned) for o in slot.operands):
                continue
            _, expr = self._known_numpy(slot, "s.")
            name = self.known_exprs[key][0]
            if f"s.{name}" == expr:
                continue
            body.append(Line(f"s.{name} = {expr}"))
        return Function("_learn", ("s", "learn", "rho=1.0", "items=slice(None)"), tuple(body),
                        "Empirical Bayes (Minka 2000): each learned hyperparameter to its "
                        "ELBO maximiser given q (rho = 1),\nor a Robbins–Monro step rho towards "
                        "the maximiser given the minibatch's rows `items`.")

    def result_function(self) -> Function:
        m = self.model
        body: list[Node] = [Line("posterior = {}")]
        state = "state = {" + ", ".join(
            f"{self.layout.lam(n, st)!r}: s.{self.layout.lam(n, st)}"
            for n in self.plan.globals for st, _ in self.stats(n)) + "}"
        body.append(Line(state))
        per_item: list[Node] = []
        for name in self.plan.globals + self.plan.kept_locals:
            into = per_item if name in self.plan.kept_locals else body
            var = self.var(name)
            fn, names = _PARAMS[self.family(name)]
            lams = ", ".join(f"s.{self.layout.lam(name, st)}" for st, _ in self.stats(name))
            unpack = ", ".join(f"{name}__{n}" for n in names)
            into.append(Line(f"{unpack} = rt.{fn}({lams})"))
            squeeze = "[0]" if not var.plates else ""
            for n in names:
                into.append(Line(f"posterior[{name + '.' + n!r}] = {name}__{n}{squeeze}"))
            block = m.block(name)
            if block is not None:  # the members' marginals: q(precision) exactly, E[mean]
                into.append(Comment(f"q({block.precision.name}) is the block's marginal; "
                                    f"E[{block.mean.name}] its mean"))
                for n in names[2:]:
                    into.append(Line(f"posterior[{block.precision.name + '.' + n!r}] = "
                                     f"{name}__{n}{squeeze}"))
                into.append(Line(f"posterior[{block.mean.name + '.mean'!r}] = "
                                 f"{name}__mean{squeeze}"))
            for st, _ in self.stats(name):
                into.append(Line(f"posterior[{'E[' + st + ' ' + name + ']'!r}] = "
                                 f"s.{self.layout.E(name, st)}{squeeze}"))
            if name in self.plan.kept_locals:
                for st, _ in self.stats(name):
                    lam = self.layout.lam(name, st)
                    into.append(Line(f"state[{lam!r}] = s.{lam}"))
        args = ("s", "trace", "converged", "seconds", "items=True")
        if per_item and self.streaming() == "yes":
            body.append(Block("if items", tuple(per_item),
                              comment="out of core the state holds one minibatch's items"))
        else:
            body += per_item
        body.append(Line(
            "return rt.FitResult(posterior=posterior, elbo=np.array(trace), "
            "iterations=len(trace), converged=converged, seconds=seconds, "
            "dims=dict(s.bound.dims), hypers={"
            + ", ".join(f"{h.name!r}: s.{h.name}" for h in m.hypers) + "}, state=state)"))
        return Function("_result", args, tuple(body),
                        "The posterior in usual parameters, expectations and the state"
                        + ("; items=False: the globals only." if per_item and
                           self.streaming() == "yes" else "."))

    def _ssvi_applies(self) -> bool:
        return bool(self.plan.globals) and all(self.family(n) in SSVI_AUX_DRAWS
                                               for n in self.plan.globals)

    def _warmable(self) -> bool:
        """Whether the local step can start from the kept locals' previous values."""
        return "warm" in self.kernel_args.get("local_step", ())

    def default_start(self) -> str:
        """'random' when every global selected by a categorical is count-type (Dirichlet or
        Beta: topic models, mixtures of categoricals/Bernoullis), else 'seeds'."""
        return self._default_start()[0]

    def _default_start(self) -> tuple[str, str]:
        """The default start and why (the generated module's comment)."""
        gated = set()
        for factor in self.analysis.factors:
            gates = dict(factor.gates)
            for monomial in factor.monomials:
                for slot in monomial.slots:
                    if isinstance(slot, Stat) and any(i in gates for i in slot.index):
                        if slot.var in self.plan.globals:
                            gated.add(slot.var)
        if gated and all(self.family(n) in ("dirichlet", "beta") for n in gated):
            return "random", "random pseudo-counts: every gated global is a Dirichlet or Beta"
        if self._seeded_chains():
            return "seeds", "k-means++ seed steps for the chain's states"
        categorical = any(self.family(n) == "categorical" for n in self.plan.locals)
        if not categorical:
            if any(self.family(n) in ("normal", "mvn") for n in self.plan.globals):
                return "random", "Normal/MVN means drawn from the prior: breaks the symmetry"
            if self._gamma_products():
                return "random", ("Gamma components of a summed product start apart: breaks "
                                  "their symmetry")
            return "prior", "nothing to break: every global starts at its prior"
        return "seeds", "k-means++ seed items for the categorical locals"

    def _gamma_products(self) -> tuple[str, ...]:
        """Gamma globals whose components a term sums over, each multiplied by another
        latent's value (Σ_k θ_k·W_fk·H_kt): such exchangeable components only separate from a
        random start."""
        plates = self.model_plate_names()
        found: list[str] = []
        for factor in self.analysis.factors:
            for monomial in factor.monomials:
                values = [s for s in monomial.slots if isinstance(s, Stat) and s.stat == "value"]
                if len({s.var for s in values}) < 2:
                    continue
                for slot in values:
                    summed = any(i not in plates for i in slot.index)
                    if (summed and slot.var in self.plan.globals
                            and self.family(slot.var) == "gamma" and slot.var not in found):
                        found.append(slot.var)
        return tuple(sorted(found))

    def _driver_call(self, kernel: str, overrides: dict[str, str], result: str | None = None,
                     prefix: str = "s.") -> Line:
        """A kernel call from a driver: arguments from the state ``s`` unless overridden."""
        call_args = []
        for a in self.kernel_args[kernel]:
            if a in overrides:
                call_args.append(overrides[a])
            elif a == "expect":
                call_args.append("True")
            elif a in _DRIVER_ARGS:
                call_args.append(a)
            else:
                call_args.append(prefix + a)
        text = f"{kernel}({', '.join(call_args)})"
        return Line(f"{result} = {text}" if result else text)

    def _array_shape(self, var: VarDef, full: bool = False) -> list[str]:
        """The rows of a variable's arrays: the item's rows for a scratch local, else one
        per element of its plates (ragged plates flattened); ``full``: never scratch."""
        if not var.plates:
            return ["1"]
        if var.name in self.layout.scratch and not full:
            shape = []
            for plate in var.plates[1:]:
                pdef = self.model.plate(plate)
                if pdef.ragged:
                    shape.append(f"rt.max_length({plate}_ptr)")
                else:
                    shape.append(dim_name(pdef.dim))
            return shape
        shape = []
        for plate in var.plates:
            pdef = self.model.plate(plate)
            if pdef.ragged:
                shape.pop()
                shape.append(f"len({plate}_weight)")
            else:
                shape.append(dim_name(pdef.dim))
        return shape

    def _stat_shape(self, var: VarDef, stat: str, rank: int) -> list[str]:
        if stat in ("onehot", "first"):
            return [dim_name(var.categories)]
        if stat == "pair":
            return [dim_name(var.categories)] * 2
        if rank == 0:
            return []
        if stat == "outer":
            return [dim_name(var.shape[0])] * 2
        return [dim_name(s) for s in var.shape[:rank]]

    # -- module ------------------------------------------------------------------
    def module(self) -> Module:
        m = self.model
        self._plan_exp_arrays()
        self.implicit = tuple(n for n in self.plan.locals if self.implicit_plan(n) is not None)
        self.product_form = tuple(n for n in self.plan.locals if self.product_messages(n))
        # kept Dirichlet locals read through exp(E[log ·]) inside the sweeps (LDA's theta)
        self.exp_only = tuple(
            n for n in self.plan.kept_locals if self.plan.local_iterations
            and self.family(n) == "dirichlet" and self.exp_needed.get(n) == {False})
        for name in self.plan.locals:
            self.kernels.append(self.local_update_kernel(name))
        for name in self.implicit:
            if self.gathered_plan(name) is not None:
                self.kernels.append(self.gather_kernel(name))
            self.kernels.append(self.implicit_kernel(name))
        if m.data_plate is not None:
            if self.plan.local_iterations and self.plan.kept_locals:
                fast = self._fast_guard()
                if fast is not None:
                    self.kernels.append(self.collapsed_kernel(fast))
                    self.kernels.append(self.item_elbo_kernel((fast,)))
                else:
                    self.kernels.append(self.item_elbo_kernel())
            self.kernels.append(self.local_step_kernel())
            if self.plan.assignment_locals:
                for name in self.plan.assignment_locals:
                    self.kernels.append(self.evidence_kernel(name))
                self.kernels.append(self.assignment_step_kernel("gibbs"))
                self.kernels.append(self.assignment_step_kernel("cvb0"))
        for name in self.plan.globals:
            self.kernels.append(self.global_update_kernel(name))
        if self.plan.globals:
            self.kernels.append(self.refresh_kernel())
        self.kernels.append(self.elbo_global_kernel())
        klc = self.plan.collapse is not None
        if klc:
            self.kernels += [self.klc_stats_kernel(), self.klc_gradient_kernel()]
        drivers: list[Node] = [self.prepare_function(), self.result_function()]
        if self.plan.learnable:
            drivers.insert(1, self.learn_function())
        drivers += interface_nodes(self)
        drivers += entry_points(self)
        if klc:
            drivers += self.klc_functions()
        doc = (f"{m.name}: the model's kernels for variational inference, generated by cemodel "
               f"{__version__}.\nThe fitting algorithms are cemodel.runtime.drivers (see fit, "
               "fit_svi, ...).\n\n"
               f"Model file: {m.source.filename} (sha256 {source_hash(m)[:16]})\n"
               f"Regenerate with `cemodel compile {m.source.filename}`; do not edit by hand.\n\n"
               "Natural parameters are in coefficient form: q(x) ∝ exp(Σ_s lam_s · t_s(x)).\n"
               "E_<var>_<stat> holds E_q[t_s]; acc_* hold sums over the data plate.")
        body: list[Node] = [
            Line(f"SOURCE = {m.source.filename!r}"),
            Line(f"SOURCE_SHA256 = {source_hash(m)!r}"),
            Line(f"DEFAULT_START = {self.default_start()!r}", self._default_start()[1]),
            Line(f"LEARNABLE = {tuple(i.hyper for i in self.plan.learnable)!r}",
                 "hyperparameters empirical Bayes can set (fit(..., learn=...))"),
            Line(f"DATA_PLATE = {m.data_plate!r}", "the plate the local step runs over"),
            Comment("the global steps (fit, fit_svi, ..., fit_klc) and whether each applies"),
            Line("METHODS = {"),
            *[Line(f"    {k!r}: {v!r},") for k, v in self.plan.methods],
            Line("}"),
            Comment("the E-steps (fit_svi(..., local=...)) and whether each applies"),
            Line("LOCAL_STEPS = {"),
            *[Line(f"    {k!r}: {v!r},") for k, v in self.plan.local_steps],
            Line("}"),
            *(self._streaming_constants() if m.data_plate is not None else []),
            *(klc_constants(self.ctx) if klc else []),
            *roles_table(self),
            Line("_THIS = sys.modules[__name__]", "the model, as the drivers see it"),
            Blank(),
            *self.spec_literal(),
            *self.kernels,
            *drivers,
        ]
        imports = ("import sys", "", "import numpy as np", "from numba import njit, prange", "",
                   "from cemodel import runtime as rt")
        return Module(doc, imports, tuple(body))


def _mentions(expr: RExpr, hypers: set[str]) -> bool:
    """Does a known expression read any of these hyperparameters?"""
    if isinstance(expr, RHyper):
        return expr.name in hypers
    if isinstance(expr, RRepeat):
        return _mentions(expr.value, hypers)
    if isinstance(expr, RBin):
        return _mentions(expr.left, hypers) or _mentions(expr.right, hypers)
    if isinstance(expr, RNeg):
        return _mentions(expr.operand, hypers)
    if isinstance(expr, (RCall, RVector)):
        items = expr.args if isinstance(expr, RCall) else expr.items
        return any(_mentions(a, hypers) for a in items)
    return False


# names a driver supplies itself rather than reading from the state
_DRIVER_ARGS = ("data_scale", "seeding", "items", "warm", "guard", "max_local_iter", "local_tol",
                "expect", "sweeps", "burn_in")


def _shared(name: str, value: str, shared: bool) -> str:
    """``value``, or out of core the fit's own (``share``, see _prepare)."""
    return f"{value} if share is None else share.{name}" if shared else value


def _tuple(items) -> str:
    """Python source of a tuple of expressions: (), (a,), (a, b)."""
    items = list(items)
    if len(items) == 1:
        return f"({items[0]},)"
    return "(" + ", ".join(items) + ")"


def generate_mf(plan: InferencePlan) -> str:
    """The source text of the mean-field module for ``plan``."""
    return print_module(MeanFieldEmitter(plan).module())
