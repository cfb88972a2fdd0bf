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
from ..plan import SAMPLED_FAMILIES, SSVI_AUX_DRAWS, InferencePlan
from .context import emit_context
from .kernels import globals as global_kernels
from .kernels import klc as klc_kernels
from .kernels.assignments import emit_assignment_step, emit_evidence
from .kernels.local import emit_item_elbo, emit_update_local
from .kernels.local_step import emit_local_step
from .kernels.product import emit_collapsed, emit_gather, emit_sums
from .klc import klc_functions
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

    def _prepare_nodes(self, items_only: bool) -> list[Node]:
        """The binding and allocations of ``_prepare``; ``items_only`` (``_bind_items``): a
        minibatch's own data, locals and buffers, and the globals, hyperparameters and
        statistics of the fit's state ``fit_state``, shared rather than copied."""
        m = self.model
        body: list[Node] = []
        if items_only:
            body.append(Line("bound = rt.bind_data(SPEC, data, {k: v for k, v in "
                             "fit_state.bound.dims.items() if k not in ITEM_DIMS})",
                             "the sizes of everything but the items are the fit's"))
        else:
            body.append(Line("hypers = dict(hypers or {})"))
            body.append(Line(f"rt.check_hyper_names(hypers, {[h.name for h in m.hypers]!r})"))
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
        if items_only:
            if m.hypers:
                body.append(Comment("hyperparameters: the fit's current values"))
            for h in m.hypers:
                body.append(Line(f"{h.name} = fit_state.{h.name}"))
        else:
            body.append(Comment("hyperparameters (defaults from the model file)"))
        domains = self._hyper_domains()
        for h in m.hypers if not items_only else ():
            shape = _tuple([dim_name(s) for s in h.shape])
            domain = f", domain={domains[h.name]!r}" if h.name in domains else ""
            default = _np(h.value)
            if " / " in default:  # evaluated only when not given: a size may make it 1/0
                default = f"lambda: {default}"
            body.append(Line(f"{h.name} = rt.hyper_value(hypers, {h.name!r}, "
                             f"{default}, {shape}{domain})"))
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
                    shared = items_only and name in self.plan.globals
                    body.append(Line(f"{array} = fit_state.{array}" if shared
                                     else f"{array} = np.zeros({full})"))
        for name, layouts in self.exp_needed.items():
            E = self.layout.E(name, "log")
            if items_only and name in self.plan.globals:
                body += [Line(f"{array} = fit_state.{array}") for array in self._exp_arrays(name)]
                continue
            for transposed in sorted(layouts):
                if transposed:
                    body.append(Line(f"XT_{name}_log = np.zeros({E}.shape[::-1])",
                                     f"exp(E[log {name}]), statistic axis first"))
                    body.append(Line(f"ET_{name}_log = np.zeros({E}.shape[::-1])",
                                     f"E[log {name}], statistic axis first"))
                else:
                    body.append(Line(f"X_{name}_log = np.zeros_like({E})", f"exp(E[log {name}])"))
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
                            + (" (added up over minibatches)" if items_only else "")))
        for acc in self.plan.stored_accumulators:
            if items_only:
                body.append(Line(f"{acc.name} = fit_state.{acc.name}"))
                continue
            factor = self.analysis.factors[acc.factor]
            dims = [dim_name(self.model.plate(k[1:]).dim) if k.startswith("@")
                    else dim_name(factor.dim_of(k)) for k in acc.key]
            body.append(Line(f"{acc.name} = np.zeros({_tuple(dims)})"))
        if self.model.data_plate is not None:
            body.append(Line("n_threads = rt.thread_count()",
                             "the local step's threads (NUMBA_NUM_THREADS, --threads)"))
            for name in self.thread_private():
                body.append(Line(f"{name}_threads = np.zeros((n_threads,) + {name}.shape)"))
            for name in [a.name for a in self.plan.stored_accumulators]:
                body.append(Line(f"{name}_threads = fit_state.{name}_threads" if items_only else
                                 f"{name}_threads = np.zeros((n_threads,) + {name}.shape)"))
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
        if self.streaming() == "yes":
            names = [a for n in self.plan.globals for st, _ in self.stats(n)
                     for a in (self.layout.lam(n, st), self.layout.E(n, st))]
            names += [a for n in self.exp_needed if n in self.plan.globals
                      for a in self._exp_arrays(n)]
            nodes.append(Line(f"GLOBAL_STATE = {tuple(names)!r}",
                              "the arrays an out-of-core checkpoint keeps"))
        return nodes

    def bind_items_function(self) -> Function:
        body = self._prepare_nodes(items_only=True)
        body.append(self._state_line())
        doc = ("Out of core (fit_svi from an rt.ItemSource): the state of one minibatch, `data`\n"
               "holding its items only. Its data, per-item parameters and the local step's "
               "buffers are\nits own, sized by the minibatch; the globals, hyperparameters and "
               "statistics are fit_state's,\nshared (not copied), so the steps on it move the "
               "fit.")
        return Function("_bind_items", ("fit_state", "data"), tuple(body), doc)

    def prepare_function(self) -> Function:
        body = self._prepare_nodes(items_only=False)
        body.append(Comment("start every global at its prior"))
        for name in self.plan.globals:
            body.append(self._driver_call(f"update_{name}", {"data_scale": "0.0"}, prefix=""))
        state = ", ".join(f"{self.layout.lam(n, s)!r}: {self.layout.lam(n, s)}"
                          for n in self.plan.globals for s, _ in self.stats(n))
        if self.plan.globals:
            body.append(Block("if init is not None", (
                Comment("warm start: the globals' natural parameters from an earlier fit"),
                Line(f"rt.load_state(init, {{{state}}})"),
                self._driver_call("refresh_globals", {}, prefix=""),
            )))
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
        return Function("_prepare", ("data", "hypers", "dims", "seed", "init", "start",
                                     "max_local_iter", "local_tol"), tuple(body), doc)

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
                        "Empirical Bayes (Minka 2000): each learned hyperparameter moves to "
                        "the value that maximises the\nELBO given q (rho = 1, batch), or a "
                        "step rho towards the maximiser given the minibatch's\nlocal rows "
                        "`items` (stochastic: a Robbins–Monro step, as Hoffman et al. 2010 "
                        "learn LDA's α).")

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
        args = ("s", "trace", "converged", "seconds")
        if self.streaming() == "yes":
            args += ("items=True",)
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
                        + (";\nitems=False: the globals only." if len(args) > 4 else "."))

    def fit_function(self) -> Function:
        m = self.model
        body: list[Node] = []
        if self.plan.assignment_locals:
            learn = ", learn=learn" if self.plan.learnable else ""
            body.append(Block("if rt.check_local_step(local, LOCAL_STEPS) in "
                              "('gibbs', 'cvb0')", (Line(
                "return fit_svi(data, hypers=hypers, dims=dims, epochs=max_iter, "
                "batch_size=None, kappa=0.0, tau=0.0, step_scale=1.0, "
                "max_local_iter=max_local_iter, local_tol=local_tol, seed=seed, "
                "callback=callback, init=init, start=start, tol=tol, local=local, "
                f"gibbs_sweeps=gibbs_sweeps, gibbs_burn_in=gibbs_burn_in{learn}, "
                "checkpoint=checkpoint, checkpoint_every=checkpoint_every, resume=resume)"),),
                comment="the batch M-step (ρ = 1 on all items) with a collapsed E-step"))
        elif m.data_plate is not None:
            body.append(Line("rt.check_local_step(local, LOCAL_STEPS)"))
        body.append(Line("s = _prepare(data, hypers, dims, seed, init, start, max_local_iter, "
                         "local_tol)"))
        loop: list[Node] = []
        if self.plan.learnable:
            body.append(Line("learn = rt.check_learn(learn, LEARNABLE)"))
            loop.append(Block("if learn and iteration > 0", (Line("_learn(s, learn)"),),
                              comment="empirical Bayes, before the local step"))
        loop += [Line(f"s.{acc.name}[...] = 0.0") for acc in self.plan.stored_accumulators]
        if self.model.data_plate is not None:
            loop.append(self._driver_call(
                "local_step", {"seeding": "False", "items": "s.all_items",
                               "warm": "warm_start and iteration > 0",
                               "guard": "not warm_start and iteration > 0"}, result="elbo_local"))
        else:
            loop.append(Line("elbo_local = 0.0"))
        for name in self.plan.globals:
            loop.append(self._driver_call(f"update_{name}", {"data_scale": "1.0"}))
        loop += [
            self._driver_call("elbo_global", {}, result="elbo"),
            Line("elbo += elbo_local"),
            Line("trace.append(elbo)"),
            Line("rt.check_elbo_increase(trace, warn_decrease)"),
            *self._check_possible_lines(),
            Block("if callback is not None", (
                Line("callback(iteration, elbo, time.perf_counter() - clock)"),)),
            Block("if checkpoint is not None and (iteration + 1) % checkpoint_every == 0", (
                Line("rt.save_checkpoint(checkpoint, s, SOURCE_SHA256, 'fit', "
                     "iteration=iteration + 1, trace=trace)"),),
                comment="atomic: a crash keeps the previous one"),
            Block("if rt.converged(trace, tol)", (Line("converged = True"), Line("break"))),
        ]
        body += [
            Line("trace = []"),
            Line("converged = False"),
            Line("first = 0"),
            Block("if resume is not None", (
                Line("progress = rt.load_checkpoint(resume, s, SOURCE_SHA256, 'fit')"),
                Line("trace, first = progress['trace'], progress['iteration']"),
            ), comment="continue the same trajectory"),
            Line("clock = time.perf_counter()"),
            Block("for iteration in range(first, max_iter)", tuple(loop)),
            Line("return _result(s, trace, converged, time.perf_counter() - clock)"),
        ]
        args = ("data", "*", "hypers=None", "dims=None", "max_iter=200", "tol=1e-6",
                "max_local_iter=100", "local_tol=1e-3", "seed=0", "callback=None",
                "warn_decrease=True", "init=None", "start=None", "warm_start=False",
                "checkpoint=None", "checkpoint_every=1", "resume=None")
        if self.plan.learnable:
            args += ("learn=()",)
        if m.data_plate is not None:
            args += ("local='mf'",)
        if self.plan.assignment_locals:
            args += ("gibbs_sweeps=10", "gibbs_burn_in=5")
        doc = (f"Fit {m.name} by batch mean-field variational Bayes (coordinate ascent).\n\n"
               "data: a mapping from each observed variable (and covariate) to its array; see "
               "SPEC.\n"
               "Stops when the relative change of the ELBO falls below tol.\n"
               "init: the `state` of an earlier result, to continue from its globals.\n"
               "start: 'seeds' (k-means++ seed items) or 'random' (random pseudo-counts on "
               "Dirichlet and Beta globals); default DEFAULT_START.\n"
               "warm_start: start each item's local step from its previous values instead of "
               "its prior\n(fewer sweeps; may settle in a different optimum).\n"
               "learn: hyperparameters to set by empirical Bayes (see LEARNABLE); the learned "
               "values are in result.hypers.\n"
               "checkpoint: a path written atomically every checkpoint_every iterations; "
               "resume: such a path,\nto continue that fit (same data and options) where "
               "it stopped, up to max_iter iterations in all.")
        if self.plan.assignment_locals:
            doc += ("\nlocal: 'mf' (or 'exact' where LOCAL_STEPS allows); 'gibbs' or "
                    "'cvb0' run the batch M-step with\nthat E-step (fit_svi on all items with "
                    "ρ = 1), its trace the mean-field ELBO after each iteration.")
        return Function("fit", args, tuple(body), doc)

    def _aux(self, name: str) -> list[str]:
        """The auxiliary draws V(β, λ) of a global needs (cemodel.runtime.ssvi)."""
        return [f"aux_{name}_{i}" for i in range(SSVI_AUX_DRAWS[self.family(name)])]

    def _sample_lines(self) -> list[Node]:
        """β ~ q(β) for every global, written where E[t(β)] lives (and its exp arrays)."""
        nodes: list[Node] = []
        ssvi = self._ssvi_applies()
        for name in self.plan.globals:
            lams = ", ".join(f"s.{self.layout.lam(name, st)}" for st, _ in self.stats(name))
            outs = ", ".join(f"s.{self.layout.E(name, st)}" for st, _ in self.stats(name))
            draw = Line(f"rt.sample_{self.family(name)}({lams}, sampler, {outs})")
            if ssvi:
                nodes.append(Block("if apply_v", (Line(
                    f"rt.sample_{self.family(name)}_aux({lams}, sampler, {outs}, "
                    f"{', '.join(self._aux(name))})"),), comment="keeps the draws V needs"))
                nodes.append(Block("else", (draw,)))
            else:
                nodes.append(draw)
            E = f"s.{self.layout.E(name, 'log')}"
            for transposed in sorted(self.exp_needed.get(name, ())):
                if transposed:
                    nodes.append(Line(f"s.ET_{name}_log[...] = {E}.T"))
                    nodes.append(Line(f"s.XT_{name}_log[...] = np.exp({E}.T)"))
                else:
                    nodes.append(Line(f"s.X_{name}_log[...] = np.exp({E})"))
        return nodes

    def fit_ssvi_function(self) -> Function:
        doc = (f"Fit {self.model.name} by SSVI (Hoffman & Blei 2015, eq. 7 and algorithm 1): "
               "as SSVI-A, with V(β, λ) of eq. 8\nmaking the step an unbiased natural gradient "
               "of the structured bound (see cemodel.runtime.ssvi):\nλ ← (1 − ρ)λ + ρ(η + V N/|S| "
               "Σ η̂_n), the first step SSVI-A's (V = I). control_variate=True\nmultiplies "
               "the whole step instead, λ ← λ + ρ V (λ̂ − λ): the same mean (E[V] = I), "
               "no noise at\nthe optimum of a model without locals, but larger steps far from "
               "it (a hierarchy can diverge).\nOptions as fit_svi.")
        return Function("fit_ssvi", ("data", "**options"), (
            Line("return fit_svi(data, sample_globals=True, apply_v=True, **options)"),), doc)

    def fit_ssvi_a_function(self) -> Function:
        doc = (f"Fit {self.model.name} by SSVI-A (Hoffman & Blei 2015, eq. 10): each step "
               "samples the globals\nβ ~ q(β), computes the local step given β, and moves λ "
               "towards η + N/|S| Σ_S η̂_n(β).\nOptions as fit_svi (effective_batch_size "
               "combines it with SVI+).")
        return Function("fit_ssvi_a", ("data", "**options"), (
            Line("return fit_svi(data, sample_globals=True, **options)"),), doc)

    def fit_svi_function(self) -> Function:
        """SVI (Hoffman et al. 2013) and SVI+ (Paisley's annealing, Definition 1)."""
        m = self.model
        item_dim = dim_name(self.model.plate(self.model.data_plate).dim)
        globals_ = self.plan.globals
        lams = [(n, st) for n in globals_ for st, _ in self.stats(n)]
        stream_ok = self.streaming() == "yes"
        step: list[Node] = [
            Line("batch = order[begin:begin + batch_size]"),
            *([Block("if source is not None", (
                Line("s = _bind_items(s, source.read(batch))"),
                Line("batch = s.all_items"),
            ), comment="out of core: the minibatch's items, read and bound on their own")]
              if stream_ok else []),
            Line("rho = step_scale * (step + tau) ** (-kappa)"),
            *([Line("v_step = apply_v and step > 1",
                    "SSVI: step 1 is SSVI-A's (V = I): from a start much wider than the "
                    "posterior V's noise is unbounded, and one step brings q to its scale")]
              if self._ssvi_applies() else []),
            Line("s.item_weight[...] = 1.0"),
            Block("if effective_batch_size is not None", (
                Line("size_m = rt.effective_size(effective_batch_size, step, len(batch))"),
                Line("s.item_weight[batch] = rt.annealing_weights(noise, len(batch), size_m)"),
            ), comment="SVI+: E[t_n] weighted by 1 + ε_n − ε̄, ε_n ~ N(0, |S|/M − 1)"),
            *[Line(f"s.{acc.name}[...] = 0.0") for acc in self.plan.stored_accumulators],
            *([Block("if sample_globals", tuple(self._sample_lines()),
                     comment="SSVI-A: the local step sees t(β) of β ~ q(β), not E[t(β)]")]
              if globals_ else []),
            *self._local_step_switch(),
            Comment("λ̂ = η + N/|S| Σ_{n∈S} E[t_n] for every global, each from the current "
                    "q of the others (SSVI-A: from the same draw β the local step saw, so "
                    "that λ̂ estimates E_q(β)[η(β) + Σ_n E_q(z_n|β)[t_n]] without bias); then "
                    "λ ← (1 − ρ)λ + ρλ̂ (rt.blend) and only then E[t]"),
            *[Line(f"old_{n}_{st}[...] = s.{self.layout.lam(n, st)}") for n, st in lams],
            Line(f"seen = {item_dim}_total if not ramp or epoch > 0 else "
                 f"min({item_dim}_total, begin + len(batch))",
                 "N, ramped up over the first sweep if asked (SSVI §2.6)"),
            Block("try", (
                *[self._driver_call(f"update_{n}", {"data_scale": "seen / len(batch)",
                                                     "expect": "False"})
                  for n in globals_],
                *([Block("if v_step", tuple(self._v_lines()),
                         comment="SSVI (eq. 7): λ̂ = η + V(β, λ) N/|S| Σ_S η̂_n(β)")]
                  if self._ssvi_applies() else []),
                *self._blend_lines(lams),
                *([self._driver_call("refresh_globals", {})] if globals_ else []),
            )),
            Block("except (np.linalg.LinAlgError, rt.CemDataError) as exc", (
                Line("raise rt.invalid_step(step, effective_batch_size, exc) from None"),)),
            *([Block("if learn", (Line("_learn(s, learn, rho, batch)"),),
                     comment="empirical Bayes: a step rho towards the batch's maximiser")]
              if self.plan.learnable else []),
            Line("rt.check_step({" + ", ".join(
                f"{self.layout.E(n, st)!r}: s.{self.layout.E(n, st)}"
                for n in globals_ for st, _ in self.stats(n)) + "}, step, effective_batch_size, "
                + _tuple(f"({self.family(n)!r}, " + _tuple(
                    f"s.{self.layout.lam(n, st)}" for st, _ in self.stats(n)) + ")"
                    for n in globals_) + ")"),
            Line("step += 1"),
        ]
        full_elbo = self._driver_call("local_step", {
            "seeding": "False", "items": "s.all_items", "warm": "False", "guard": "False"},
            result="elbo")
        epoch: list[Node] = [
            Line(f"order = rng.permutation({item_dim}_total)"),
            *([Block("if local == 'gibbs'", (Line("rt.seed_kernels(seed * 1000003 + epoch)"),),
                     comment="the Gibbs draws: one stream per epoch, so a resumed fit "
                             "repeats them")]
              if self.plan.assignment_locals else []),
            Block("for begin in range(0, len(order), batch_size)", tuple(step)),
            Block("if on_epoch is not None", (
                Line("paused = time.perf_counter()"),
                Line("on_epoch(epoch, _result(s, trace, False, paused - clock"
                     + (", items=source is None))" if stream_ok else "))")),
                Line("clock += time.perf_counter() - paused", "not part of the fit's time"),
            )),
            Block("if evaluate", (
                Comment("the full-data ELBO at optimal locals for the current globals"),
                *self._keep_warm_lines(stream_ok, "kept_locals = " + _tuple(
                    f"s.{a}.copy()" for a in self._kept_arrays())),
                Line("s.item_weight[...] = 1.0"),
                *[Line(f"s.{acc.name}[...] = 0.0") for acc in self.plan.stored_accumulators],
                *([Block("if source is None", (full_elbo,)),
                   Block("else", (
                       Line("elbo = 0.0"),
                       Block("for chunk in source.chunks(batch_size)", (
                           Line("s = _bind_items(s, source.read(chunk))"),
                           Line(full_elbo.text.replace("elbo = ", "elbo += ", 1)),
                       )),
                   ), comment="out of core: a minibatch at a time; the statistics add up")]
                  if stream_ok else [full_elbo]),
                self._driver_call("elbo_global", {}, result="elbo_global_part"),
                Line("elbo += elbo_global_part"),
                *self._keep_warm_lines(stream_ok, *(
                    f"s.{a}[...] = kept_locals[{i}]"
                    for i, a in enumerate(self._kept_arrays()))),
                Line("trace.append(elbo)"),
                *self._check_possible_lines(),
                Block("if callback is not None", (
                    Line("callback(epoch, elbo, time.perf_counter() - clock)"),)),
            )),
            Block("if checkpoint is not None and (epoch + 1) % checkpoint_every == 0", (
                Line("rt.save_checkpoint(checkpoint, s, SOURCE_SHA256, 'fit_svi', "
                     + ("source=source, keep=GLOBAL_STATE, " if stream_ok else "")
                     + "epoch=epoch + 1, step=step, trace=trace, " + (
                         "shortened=shortened, " if self._ssvi_applies() else "")
                     + "streams=[g.bit_generator.state for g in (rng, noise, sampler)])"),),
                comment="atomic: a crash keeps the previous one"),
            Block("if evaluate and stop is not None and stop.update(elbo)", (
                Line("converged = True"), Line("break"))),
        ]
        opening: list[Node] = [
            Line("source = rt.item_source(data, STREAMING)",
                 "an rt.ItemSource (data on disk), or None"),
            Block("if source is not None", (
                Line("dims = source.sizes(dims, ITEM_DIMS)"),
                Line("data = source.read(source.start_items(batch_size, seed))"),),
                comment="out of core: the start binds one minibatch ('seeds' seeds from it)"),
        ] if stream_ok else [Line("rt.item_source(data, STREAMING)",
                                  "refuses an rt.ItemSource, with the reason")]
        items = ", items=source is None" if stream_ok else ""
        body: list[Node] = [
            *opening,
            Line("s = _prepare(data, hypers, dims, seed, init, start, max_local_iter, "
                 "local_tol)"),
            Line("local = rt.check_local_step(local, LOCAL_STEPS)"),
            *([Line("learn = rt.check_learn(learn, LEARNABLE)")] if self.plan.learnable else []),
            *([Block("if local == 'gibbs'", (
                Line("rt.check_sweeps(gibbs_sweeps, gibbs_burn_in)"),))]
              if self.plan.assignment_locals else []),
            Line(f"{item_dim}_total = len(s.all_items)" if not stream_ok else
                 f"{item_dim}_total = len(s.all_items) if source is None else source.n_items"),
            Line(f"batch_size = {item_dim}_total if batch_size is None else "
                 f"min(int(batch_size), {item_dim}_total)"),
            Line("rng = np.random.default_rng([seed, 1])", "minibatches"),
            Line("noise = np.random.default_rng([seed, 2])", "SVI+ perturbations, a stream "
                 "of their own"),
            Line("sampler = np.random.default_rng([seed, 3])", "SSVI-A draws of the globals"),
            *([Block("if apply_v", tuple(
                Line(f"{a} = np.empty_like(s.{self.layout.lam(n, self.stats(n)[0][0])})")
                for n in globals_ for a in self._aux(n)),
                comment="the draws behind β that V(β, λ) needs")]
              if self._ssvi_applies() else []),
            *[Line(f"old_{n}_{st} = np.empty_like(s.{self.layout.lam(n, st)})",
                   "λ before the step (one buffer, reused)" if i == 0 else "")
              for i, (n, st) in enumerate(lams)],
            Line("trace = []"),
            Line("step = 1", "t = 1, 2, ... (Hoffman et al. 2013)"),
            *([Line("shortened = 0", "SSVI: rows whose step was shortened to stay valid")]
              if self._ssvi_applies() else []),
            Line("converged = False"),
            Line("stop = None if tol is None or not evaluate else "
                 "rt.NoisyStop(window, patience, tol)"),
            Line("first = 0"),
            Block("if resume is not None", (
                Line("progress = rt.load_checkpoint(resume, s, SOURCE_SHA256, 'fit_svi'"
                     + (", source=source, keep=GLOBAL_STATE)" if stream_ok else ")")),
                Line("trace, step, first = progress['trace'], progress['step'], "
                     "progress['epoch']"),
                *([Line("shortened = progress['shortened']")] if self._ssvi_applies() else []),
                Block("for g, state in zip((rng, noise, sampler), progress['streams'])", (
                    Line("rt.restore_generator(g, state)"),)),
            ), comment="continue the same trajectory: state, counters and random streams"),
            Line("clock = time.perf_counter()"),
            Block("for epoch in range(first, epochs)", tuple(epoch)),
            *([Line(f"result = _result(s, trace, converged, time.perf_counter() - clock{items})"),
               Block("if apply_v", (Line("result.notes['shortened_steps'] = shortened"),),
                     comment="rows whose SSVI step was shortened"),
               Line("return result")] if self._ssvi_applies() else
              [Line(f"return _result(s, trace, converged, time.perf_counter() - clock{items})")]),
        ]
        args = ("data", "*", "hypers=None", "dims=None", "epochs=10", "batch_size=256",
                "kappa=0.7", "tau=10.0", "step_scale=1.0", "effective_batch_size=None",
                "max_local_iter=100", "local_tol=1e-3", "seed=0", "callback=None",
                "init=None", "start=None", "tol=None", "window=3", "patience=3",
                "local='mf'", "ramp=False", "evaluate=True", "on_epoch=None",
                "checkpoint=None", "checkpoint_every=1", "resume=None")
        if self.plan.assignment_locals:
            args += ("gibbs_sweeps=10", "gibbs_burn_in=5")
        if self._warmable():
            args += ("warm_start=False",)
        if self.plan.learnable:
            args += ("learn=()",)
        args += ("sample_globals=False",)
        if self._ssvi_applies():
            args += ("apply_v=False", "control_variate=False")
        doc = (f"Fit {m.name} by stochastic variational inference over its data plate.\n\n"
               "Each step draws a minibatch S (without replacement within an epoch), runs the "
               "local step on it,\nand moves every global by ρ_t = step_scale·(t + tau)^−kappa "
               "towards λ̂ = η + N/|S| Σ_S E[t_n].\n"
               "effective_batch_size M (a number, or a function of the step) turns on SVI+: "
               "each E[t_n] is\nweighted by 1 + ε_n − ε̄ with ε_n ~ N(0, |S|/M − 1); "
               "M = |S| is SVI exactly.\n"
               "sample_globals=True is SSVI-A (fit_ssvi_a).\n"
               "local: the E-step, one of LOCAL_STEPS that applies ('mf', 'exact', "
               "'gibbs', 'cvb0'); Gibbs runs\ngibbs_sweeps sweeps per item and averages "
               "those after gibbs_burn_in.\n"
               "ramp: grow N over the first epoch as items are seen (SSVI §2.6).\n"
               + ("warm_start: start each item's local step from its values at its last "
                  "visit (its kept locals),\nnot from their prior: the local step's sweeps "
                  "add up over the steps.\n" if self._warmable() else "")
               + "checkpoint / checkpoint_every / resume: as fit, per epoch.\n"
               "evaluate=False skips the full-data ELBO after each epoch (no trace, no "
               "stopping rule).\non_epoch(epoch, result): called after each epoch's steps "
               "with the fit so far (its time not counted).\n"
               "learn: hyperparameters moved each step by rho towards their empirical Bayes "
               "value given the batch.\n"
               "The ELBO trace holds the full-data bound after each epoch. With tol set, the fit "
               "stops when\nits moving average over `window` epochs has not improved by tol "
               "(relative) for `patience` epochs.\n"
               "data may be an rt.ItemSource (cemodel.streaming.open_source: files on disk) when "
               "STREAMING says\nyes: each minibatch is then read and bound on its own "
               "(_bind_items), the ELBO reads the\nitems a minibatch at a time, and the result "
               "holds the globals only (Model.infer gives the\nlocals of any items).")
        return Function("fit_svi", args, tuple(body), doc)

    def _keep_warm_lines(self, stream_ok: bool, *lines: str) -> list[Node]:
        """Lines run only under warm_start (in memory): the ELBO pass re-solves the kept
        locals at E_q[β], and the fit must continue from its own, so that evaluating never
        changes the trajectory."""
        if not self._warmable():
            return []
        condition = "warm_start and source is None" if stream_ok else "warm_start"
        return [Block(f"if {condition}", tuple(Line(x) for x in lines),
                      comment="the fit continues from its own kept locals, not the ELBO "
                              "pass's")]

    def _blend_lines(self, lams) -> list[Node]:
        """λ ← (1 − ρ)λ + ρλ̂ (SSVI blends inside its V block)."""
        nodes: list[Node] = [Line(f"rt.blend(s.{self.layout.lam(n, st)}, old_{n}_{st}, rho)")
                             for n, st in lams]
        if self._ssvi_applies():
            return [Block("if not v_step", tuple(nodes))]
        return nodes

    def _ssvi_applies(self) -> bool:
        return bool(self.plan.globals) and all(self.family(n) in SSVI_AUX_DRAWS
                                               for n in self.plan.globals)

    def _v_lines(self) -> list[Node]:
        """V(β, λ), at the λ β was drawn from, times a part of each global's λ̂: eq. 7 takes
        the data part (λ̂ minus its update with no data; other globals' messages stay as they
        are, like η); the control variate takes the whole natural gradient λ̂ − λ."""
        nodes: list[Node] = []
        for n in self.plan.globals:
            stats = [st for st, _ in self.stats(n)]
            lams = [f"s.{self.layout.lam(n, st)}" for st in stats]
            nodes += [Line(f"data_{n}_{st} = {lam}.copy()") for st, lam in zip(stats, lams,
                                                                                strict=True)]
            nodes.append(Block("if control_variate", tuple(
                Line(f"{lam}[...] = old_{n}_{st}") for st, lam in zip(stats, lams, strict=True)),
                comment="λ̂ = λ + V(λ̂ − λ): E[V] = I, so the same mean as eq. 7, and no "
                        "noise from V where λ̂ does not depend on β"))
            nodes.append(Block("else", (self._driver_call(
                f"update_{n}", {"data_scale": "0.0", "expect": "False"}),),
                comment="eq. 7: λ̂ = η + V · N/|S| Σ η̂_n(β)"))
            nodes += [Line(f"data_{n}_{st} -= {lam}") for st, lam in zip(stats, lams,
                                                                          strict=True)]
            olds = ", ".join(f"old_{n}_{st}" for st in stats)
            datas = ", ".join(f"data_{n}_{st}" for st in stats)
            nodes.append(Line(f"rt.ssvi_{self.family(n)}({olds}, "
                              f"{', '.join(self._aux(n))}, {datas}, {datas})"))
            nodes += [Line(f"{lam} += data_{n}_{st}") for st, lam in zip(stats, lams,
                                                                          strict=True)]
            nodes.append(Line(f"shortened += rt.ssvi_blend({self.family(n)!r}, rho, "
                              f"{_tuple(f'old_{n}_{st}' for st in stats)}, {_tuple(lams)})",
                              "the step, shortened where V's noise would leave the domain"))
        return nodes

    def _warmable(self) -> bool:
        """Whether the local step can start from the kept locals' previous values."""
        return "warm" in self.kernel_args.get("local_step", ())

    def _local_step_switch(self) -> list[Node]:
        """The chosen E-step on the minibatch."""
        mf = self._driver_call("local_step", {"seeding": "False", "items": "batch",
                                              "warm": "warm_start" if self._warmable() else
                                              "False", "guard": "False"})
        if not self.plan.assignment_locals:
            return [mf]
        return [
            Block("if local == 'gibbs'", (self._driver_call(
                "local_step_gibbs", {"items": "batch", "sweeps": "gibbs_sweeps",
                                     "burn_in": "gibbs_burn_in"}),)),
            Block("elif local == 'cvb0'", (self._driver_call(
                "local_step_cvb0", {"items": "batch"}),)),
            Block("else", (mf,), comment="mean field; 'exact' when no local depends on another"),
        ]

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
                    self.kernels.append(AssignmentStep(self, "gibbs").evidence_kernel(name))
                self.kernels.append(AssignmentStep(self, "gibbs").kernel())
                self.kernels.append(AssignmentStep(self, "cvb0").kernel())
        for name in self.plan.globals:
            self.kernels.append(self.global_update_kernel(name))
        if self.plan.globals:
            self.kernels.append(self.refresh_kernel())
        self.kernels.append(self.elbo_global_kernel())
        klc = KlcEmitter(self) if self.plan.collapse is not None else None
        if klc is not None:
            self.kernels += [klc.stats_kernel(), klc.gradient_kernel()]
        drivers = [self.prepare_function(), self.result_function(), self.fit_function()]
        if self.streaming() == "yes":
            drivers.insert(1, self.bind_items_function())
        if self.plan.learnable:
            drivers.insert(2, self.learn_function())
        if m.data_plate is not None:
            drivers.append(self.fit_svi_function())
            if all(self.family(n) in SAMPLED_FAMILIES for n in self.plan.globals):
                drivers.append(self.fit_ssvi_a_function())
            if self._ssvi_applies():
                drivers.append(self.fit_ssvi_function())
        if klc is not None:
            drivers += klc.functions()
        doc = (f"{m.name}: batch mean-field variational Bayes, generated by cemodel "
               f"{__version__}.\n\n"
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
            Comment("the global steps (fit, fit_svi, ..., fit_klc) and whether each applies"),
            Line("METHODS = {"),
            *[Line(f"    {k!r}: {v!r},") for k, v in self.plan.methods],
            Line("}"),
            Comment("the E-steps (fit_svi(..., local=...)) and whether each applies"),
            Line("LOCAL_STEPS = {"),
            *[Line(f"    {k!r}: {v!r},") for k, v in self.plan.local_steps],
            Line("}"),
            *(self._streaming_constants() if m.data_plate is not None else []),
            Blank(),
            *self.spec_literal(),
            *self.kernels,
            *drivers,
        ]
        imports = ("import time", "", "import numpy as np", "from numba import njit, prange", "",
                   "from cemodel import runtime as rt")
        return Module(doc, imports, tuple(body))


class AssignmentStep:
    """module()'s handle on the Gibbs and CVB0 kernels (codegen/kernels/assignments.py)."""

    def __init__(self, emitter: MeanFieldEmitter, mode: str) -> None:
        self.emitter = emitter
        self.mode = mode

    def evidence_kernel(self, name: str) -> Function:
        return self.emitter.evidence_kernel(name)

    def kernel(self) -> Function:
        return self.emitter.assignment_step_kernel(self.mode)


class KlcEmitter:
    """module()'s handle on the KLC kernels (codegen/kernels/klc.py) and drivers
    (codegen/klc.py)."""

    def __init__(self, emitter: MeanFieldEmitter) -> None:
        self.emitter = emitter

    def stats_kernel(self) -> Function:
        return self.emitter.klc_stats_kernel()

    def gradient_kernel(self) -> Function:
        return self.emitter.klc_gradient_kernel()

    def functions(self) -> list[Function]:
        return self.emitter.klc_functions()


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


def _tuple(items) -> str:
    """Python source of a tuple of expressions: (), (a,), (a, b)."""
    items = list(items)
    if len(items) == 1:
        return f"({items[0]},)"
    return "(" + ", ".join(items) + ")"


def generate_mf(plan: InferencePlan) -> str:
    """The source text of the mean-field module for ``plan``."""
    return print_module(MeanFieldEmitter(plan).module())
