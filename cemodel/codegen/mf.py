"""Stage 5: InferencePlan -> a Python module of numba kernels for mean-field VB.

The module holds, in order: the SPEC the data binder checks against, one
kernel per local update, the local step (E-step over the data plate), one
kernel per global update, the ELBO of the global factors, and ``fit``, the
driver that runs coordinate ascent. Every kernel's docstring is its update
equation with a pointer to the model line it implements.
"""

from __future__ import annotations

import hashlib

from .. import __version__
from ..conjugacy import Factor, Known, Monomial, Stat, render_expr
from ..families import FAMILIES
from ..model import (
    Model,
    RBin,
    RCall,
    RConst,
    RData,
    RDimSize,
    RExpr,
    RHyper,
    RNeg,
    RRepeat,
    RVar,
    RVector,
    SumIndex,
    VarDef,
    data_refs,
)
from ..plan import SSVI_AUX_DRAWS, InferencePlan, describe_slot
from .assignments import AssignmentStep
from .interface import entry_points, interface_nodes, roles_table
from .klc import KlcEmitter
from .loops import (
    ArgRecorder,
    Contraction,
    Layout,
    dim_name,
    emit_contraction,
    fmt_float,
    plate_var,
)
from .pycode import Blank, Block, Comment, Function, Line, Module, Node, print_module

KERNEL = "njit(cache=True, nogil=True, fastmath={\"reassoc\", \"contract\", \"arcp\"})"

# per variational family: how a row's expected statistics and log normaliser are computed
_ROW_EXPECT = {
    "dirichlet": "rt.dirichlet_expected_stats({lam_log}, {E_log})",
    "categorical": "rt.categorical_expected_stats({lam_onehot}, {E_onehot})",
    "beta": "{E_log}, {E_log1m} = rt.beta_expected_stats({lam_log}, {lam_log1m})",
    "gamma": "{E_log}, {E_value} = rt.gamma_expected_stats({lam_log}, {lam_value})",
    "normal": "{E_value}, {E_square} = rt.normal_expected_stats({lam_value}, {lam_square})",
    "mvn": "rt.mvn_expected_stats({lam_value}, {lam_outer}, {E_value}, {E_outer})",
    "wishart": "{E_logdet} = rt.wishart_expected_stats({lam_value}, {lam_logdet}, {E_value})",
    "bernoulli": "{E_value} = rt.bernoulli_expected_stats({lam_value})",
    "split": "rt.split_expected_stats({lam_value}, {E_value}, {total})",
    "normal_gamma": "{E_log}, {E_value}, {E_prec_mean}, {E_quad} = rt.normal_gamma_expected_stats("
                    "{lam_log}, {lam_value}, {lam_prec_mean}, {lam_quad})",
    "normal_wishart": "{E_logdet}, {E_quad} = rt.normal_wishart_expected_stats({lam_value}, "
                      "{lam_logdet}, {lam_prec_mean}, {lam_quad}, {E_value}, {E_prec_mean})",
}
_LOG_NORMALIZER = {
    "dirichlet": "rt.dirichlet_log_normalizer({lam_log})",
    "categorical": "rt.categorical_log_normalizer({lam_onehot})",
    "beta": "rt.beta_log_normalizer({lam_log}, {lam_log1m})",
    "gamma": "rt.gamma_log_normalizer({lam_log}, {lam_value})",
    "normal": "rt.normal_log_normalizer({lam_value}, {lam_square})",
    "mvn": "rt.mvn_log_normalizer({lam_value}, {lam_outer})",
    "wishart": "rt.wishart_log_normalizer({lam_value}, {lam_logdet})",
    "bernoulli": "rt.bernoulli_log_normalizer({lam_value})",
    "normal_gamma": "rt.normal_gamma_log_normalizer({lam_log}, {lam_value}, {lam_prec_mean}, "
                    "{lam_quad})",
    "normal_wishart": "rt.normal_wishart_log_normalizer({lam_value}, {lam_logdet}, "
                      "{lam_prec_mean}, {lam_quad})",
}
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
    def __init__(self, plan: InferencePlan) -> None:
        self.plan = plan
        self.model = plan.model
        self.analysis = plan.analysis
        self.known_exprs: dict[str, tuple[str, str]] = {}  # key -> (name, numpy expr)
        self.known_slots: dict[str, Known] = {}
        self._collect_knowns()
        scratch = frozenset(v for v in plan.locals if v not in plan.kept_locals)
        self.layout = Layout(self.model, {k: n for k, (n, _) in self.known_exprs.items()},
                             scratch)
        self.kernels: list[Function] = []
        self.kernel_args: dict[str, tuple[str, ...]] = {}

    # -- knowns ------------------------------------------------------------
    def _collect_knowns(self) -> None:
        # a known quantity may be named as a data array or hyperparameter only when it is
        # that array or value itself: a constant named 'c' must not overwrite data 'c'
        users = {d.name for d in self.model.data} | {h.name for h in self.model.hypers}
        used: set[str] = set()
        for factor in self.analysis.factors:
            for monomial in factor.monomials:
                for slot in monomial.slots:
                    if not isinstance(slot, Known) or slot.key in self.known_exprs:
                        continue
                    if slot.fn == "value" and isinstance(slot.operands[0], RConst):
                        continue
                    name, expr = self._known_numpy(slot)
                    self.known_slots[slot.key] = slot
                    base, n = name, 1
                    while name in used or (name in users and expr != name):
                        n += 1
                        name = f"{base}_{n}"
                    used.add(name)
                    self.known_exprs[slot.key] = (name, expr)

    def _known_numpy(self, slot: Known, prefix: str = "") -> tuple[str, str]:
        ops = slot.operands
        first = ops[0]
        if slot.fn == "onehot":
            return first.name, first.name
        if isinstance(first, RRepeat) and slot.fn in ("value", "lgamma", "log"):
            # an elementwise view of a repeated scalar is that scalar
            inner = _np(first.value, prefix)
            expr = {"value": inner, "lgamma": f"rt.gammaln({inner})",
                    "log": f"np.log({inner})"}[slot.fn]
            return _ident(slot.fn, first.value), expr
        args = ", ".join(_np(o, prefix) for o in ops)
        if slot.fn == "value":
            if isinstance(first, (RHyper, RVar)) or (isinstance(first, RData)
                                                    and not _summed_axes(first)[0]):
                return first.name, prefix + first.name
            return _ident("value", first), _np(first, prefix)
        if slot.fn == "dim":
            shape = self._event_shape(first)
            return f"dim_{_ident('', first).strip('_')}", prefix + dim_name(shape[0])
        numpy_fn = {
            "log": "np.log({})", "log1m": "np.log1p(-{})", "lgamma": "rt.gammaln({})",
            "lgamma_sum": "rt.lgamma_sum({})", "lgamma1p": "rt.gammaln({} + 1.0)",
            "inv": "rt.inv({})", "logdet": "rt.logdet({})", "square": "np.square({})",
            "lbeta": "rt.lbeta({})", "log_binom": "rt.log_binom({})",
            "log_negbin": "rt.log_negbin({})", "log_multinomial": "rt.log_multinomial({})",
            "wishart_lognorm": "rt.wishart_lognorm({})", "outer": "np.outer({0}, {0})",
        }[slot.fn]
        if slot.fn == "log" and _data_names(first):
            # log 0 of data is finite (rt.LOG_ZERO) so that 0 · log 0 adds 0; < 0 is refused
            what = "data " + ", ".join(f"'{n}'" for n in _data_names(first))
            return _ident("log", *ops), f"rt.log_data({args}, {what!r})"
        if slot.fn == "lgamma_sum" and isinstance(first, RRepeat):
            return (_ident("lgamma_sum", first.value),
                    f"rt.gammaln({prefix}{dim_name(first.dim)} * {_np(first.value, prefix)})")
        return _ident(slot.fn, *ops), numpy_fn.format(args)

    def _log_data_names(self) -> list[str]:
        """Covariates the model takes the log of (an exposure, a loading): they must be ≥ 0."""
        names: list[str] = []
        for slot in self.known_slots.values():
            if slot.fn == "log":
                names += [n for n in _data_names(slot.operands[0]) if n not in names]
        return names

    def _check_possible_lines(self) -> list[Line]:
        """Where data enter through their log, a positive count can meet a rate of 0: the
        ELBO then holds count · rt.LOG_ZERO, and the fit refuses the data (rt.check_possible)."""
        names = self._log_data_names()
        if not names:
            return []
        return [Line(f"rt.check_possible(elbo, {_tuple(repr(n) for n in names)})",
                     "data of probability 0 (a count where its rate has a factor 0)")]

    def _event_shape(self, expr: RExpr):
        if isinstance(expr, RVar):
            return self.model.var(expr.name).shape
        raise AssertionError(expr)

    # -- helpers -------------------------------------------------------------
    def var(self, name: str) -> VarDef:
        return self.model.var(name)

    def family(self, name: str) -> str:
        return FAMILIES[self.var(name).family].variational or ""

    def stats(self, name: str) -> tuple[tuple[str, int], ...]:
        return FAMILIES[self.var(name).family].stats

    def factor_comment(self, factor: Factor) -> str:
        span = factor.span
        return f"{self.model.source.filename}:{span.line}:{span.column}"

    def _row_loops(self, var: VarDef, skip: set[str], args: ArgRecorder) -> list[str]:
        loops = []
        for plate in var.plates:
            if plate in skip:
                continue
            pdef = self.model.plate(plate)
            if pdef.ragged:
                ptr = args.use(f"{plate}_ptr")
                parent = plate_var(pdef.parent)
                loops.append(f"for {plate_var(plate)} in range({ptr}[{parent}], "
                             f"{ptr}[{parent} + 1])")
            else:
                loops.append(f"for {plate_var(plate)} in range({args.use(dim_name(pdef.dim))})")
        return loops

    def _row_index(self, var: VarDef, args: ArgRecorder) -> str:
        parts = self.layout.row(var.name, var.plates, {}, args)
        return ", ".join(parts)

    def _expect_line(self, var: VarDef, row: str, args: ArgRecorder) -> Line:
        family = self.family(var.name)
        names = {}
        for stat, _ in self.stats(var.name):
            names[f"lam_{stat}"] = args.use(self.layout.lam(var.name, stat)) + f"[{row}]"
            names[f"E_{stat}"] = args.use(self.layout.E(var.name, stat)) + f"[{row}]"
        if family == "split":  # E[c] = n·φ, n the observed count it splits
            names["total"] = self._split_total(var, args)
        return Line(_ROW_EXPECT[family].format(**names))

    def _categories(self, var: VarDef) -> str:
        """The size of a categorical's or a split's last axis (its categories or terms)."""
        return dim_name(var.categories if var.categories is not None else var.shape[0])

    def _split_total(self, var: VarDef, args: ArgRecorder) -> str:
        """The observed count that the split counts ``var`` add up to, at the row."""
        introduced = self.model.introduced_for(var.name)
        of = self.var(introduced.of)
        index = self.layout._plate_index(of.plates, of.plates, {}, args, scratch=False)
        return f"{args.use(of.name)}[{', '.join(index)}]"

    def _entropy_expr(self, var: VarDef, row: str, args: ArgRecorder) -> str:
        """H = A(λ) − Σ_s λ_s·E[t_s]; for a categorical, −Σ q log q (needs no λ)."""
        family = self.family(var.name)
        if family in ("categorical", "split") and var.name in self.product_form:
            return f"{args.use('H_' + var.name)}[{row}]"
        if family == "categorical":
            return f"rt.categorical_entropy({args.use(self.layout.E(var.name, 'onehot'))}[{row}])"
        if family == "split":
            return (f"rt.split_entropy({args.use(self.layout.lam(var.name, 'value'))}[{row}], "
                    f"{args.use(self.layout.E(var.name, 'value'))}[{row}])")
        names = {}
        terms = []
        for stat, rank in self.stats(var.name):
            lam = args.use(self.layout.lam(var.name, stat)) + f"[{row}]"
            E = args.use(self.layout.E(var.name, stat)) + f"[{row}]"
            names[f"lam_{stat}"] = lam
            terms.append(f"rt.frobenius({lam}, {E})" if rank else f"{lam} * {E}")
        return _LOG_NORMALIZER[family].format(**names) + " - " + " - ".join(terms)

    def _messages_to(self, var: str):
        cond = self.analysis.conditional(var)
        for message in cond.messages:
            factor = self.analysis.factors[message.factor]
            monomial = factor.monomials[message.monomial]
            yield message, factor, monomial

    def _target_bindings(self, var: VarDef, target: Stat) -> tuple[dict, dict]:
        """Bind the factor's plates/gates at the target to the row loop variables."""
        plates: dict[str, str] = {}
        letters: dict[str, str] = {}
        for own_plate, entry in zip(var.plates, target.index, strict=True):
            if entry in self.model_plate_names():
                plates[entry] = plate_var(own_plate)
            else:
                letters[entry] = plate_var(own_plate)
        return plates, letters

    def model_plate_names(self) -> set[str]:
        return {p.name for p in self.model.plates}

    def _contribution(self, factor: Factor, monomial: Monomial, target: Stat, var: VarDef,
                      args: ArgRecorder, extra_bound: dict[str, str],
                      weighted: bool = True) -> list[Node]:
        slots = monomial.without(target)
        plates, letters = self._target_bindings(var, target)
        plates.update(extra_bound)
        lam = args.use(self.layout.lam(var.name, target.stat))
        row = self.layout.row(var.name, var.plates, {}, args)
        return emit_contraction(
            self.layout, args,
            Contraction(monomial.coef, slots, factor.plates, dict(factor.index_dims)),
            lam, tuple(row) + target.tensor, plates, letters, weighted,
        )

    # -- item-independent messages ----------------------------------------------
    def hoisted(self) -> dict[tuple[str, int], str]:
        """Messages to a local that read only globals and constants but sum over plates or
        letters (GaP-NMF's Σ_f E[θ_k] E[W_fk] to H; a Gaussian mixture's tr(E[Λ_k] E[μ_k μ_kᵀ])
        to z): the same for every item, so hoist_messages contracts them once per local step
        into pre_<local>_<m> instead of once per item and sweep. (message index -> array)"""
        if hasattr(self, "_hoisted"):
            return self._hoisted
        found: dict[tuple[str, int], str] = {}
        data_plate = self.model.data_plate
        for name in self.plan.locals:
            var = self.var(name)
            if self.family(name) == "markov" or any(
                    self.model.plate(p).ragged for p in var.plates[1:]):
                continue
            for m, (message, factor, monomial) in enumerate(self._messages_to(name)):
                if factor.child == name or self._implicit_source(name, monomial) is not None:
                    continue
                others = monomial.without(message.target)
                if not all((isinstance(s, Stat) and s.var in self.plan.globals)
                           or (isinstance(s, Known) and not s.plates
                               and not self.layout.onehot_binding(s)) for s in others):
                    continue
                plates, letters = self._target_bindings(var, message.target)
                free_plates = [p for p in factor.plates if p not in plates and p != data_plate]
                if any(self.model.plate(p).ragged for p in free_plates):
                    continue
                dims = dict(factor.index_dims)
                used = {e for s in others for e in s.tensor
                        + (s.index if isinstance(s, Stat) else ()) if e in dims}
                free_letters = used - set(letters) - set(message.target.tensor)
                if free_plates or free_letters:  # a sum: worth computing once
                    found[(name, m)] = f"pre_{name}_{m}"
        self._hoisted = found
        return found

    def partial(self) -> dict[tuple[str, int], tuple[str, tuple, tuple, tuple[str, ...]]]:
        """Messages to a local of the data plate alone whose global slots, multiplied
        together, sum over a letter the data do not touch: xᵀ E[Λ_k] E[μ_k] in a Gaussian
        mixture is Σ_i x_i (E[Λ_k] E[μ_k])_i, and the product E[Λ_k] E[μ_k] is the same for
        every item. (message -> (array, global slots, data slots, the array's letters))"""
        if hasattr(self, "_partial"):
            return self._partial
        found: dict = {}
        data_plate = self.model.data_plate
        hoisted = self.hoisted()
        for name in self.plan.locals:
            var = self.var(name)
            if self.family(name) == "markov" or len(var.plates) != 1:
                continue
            for m, (message, factor, monomial) in enumerate(self._messages_to(name)):
                if ((name, m) in hoisted or factor.child == name
                        or factor.plates != (data_plate,)
                        or self._implicit_source(name, monomial) is not None):
                    continue
                dims = dict(factor.index_dims)
                glob, data = [], []
                for slot in monomial.without(message.target):
                    if isinstance(slot, Stat) and slot.var in self.plan.globals and all(
                            i in dims for i in slot.index):
                        glob.append(slot)
                    elif isinstance(slot, Known) and not slot.plates and not (
                            self.layout.onehot_binding(slot)):
                        glob.append(slot)
                    elif isinstance(slot, Known):
                        data.append(slot)
                    else:
                        break
                else:
                    if not data or sum(isinstance(g, Stat) for g in glob) < 2:
                        continue
                    _, letters = self._target_bindings(var, message.target)
                    bound = set(letters) | set(message.target.tensor)
                    used = {e for g in glob for e in g.tensor
                            + (g.index if isinstance(g, Stat) else ())}
                    touched = {e for d in data for e in d.tensor}
                    if not used - touched - bound:
                        continue  # nothing to sum ahead of the data
                    key = tuple(e for e in message.target.tensor) + tuple(
                        sorted((used & touched) - set(message.target.tensor)))
                    found[(name, m)] = (f"pre_{name}_{m}", tuple(glob), tuple(data), key)
        self._partial = found
        return found

    def _pre_slot(self, pre: str, key: tuple[str, ...]) -> Known:
        """A precomputed product read as a known array indexed by its letters."""
        slot = Known(pre, (), key, ())
        self.layout.known_names[slot.key] = pre
        return slot

    def _hoisted_read(self, var: VarDef, pre: str) -> str:
        """A hoisted array at the row: indexed by the local's inner plates; whole when it is
        the row's statistic itself (numba reads no a[...]); its one entry for a scalar."""
        inner = [plate_var(p) for p in var.plates[1:]]
        if inner:
            return f"{pre}[{', '.join(inner)}]"
        return pre if self.stats(var.name)[0][1] else f"{pre}[0]"

    def _hoisted_shape(self, name: str, m: int) -> str:
        var = self.var(name)
        message = self.analysis.conditional(name).messages[m]
        rank = dict(self.stats(name))[message.target.stat]
        shape = [dim_name(self.model.plate(p).dim) for p in var.plates[1:]]
        shape += self._stat_shape(var, message.target.stat, rank)
        return _tuple(shape or ["1"])

    def hoist_nodes(self, args: ArgRecorder) -> list[Node]:
        """Contract every hoisted message into its pre_ array (before the items' loop)."""
        data_plate = self.model.data_plate
        nodes: list[Node] = []
        for (name, m), pre in self.hoisted().items():
            var = self.var(name)
            message, factor, monomial = list(self._messages_to(name))[m]
            plates, letters = self._target_bindings(var, message.target)
            plates[data_plate] = "0"  # no operand reads the item
            target_index = tuple(plate_var(p) for p in var.plates[1:]) + message.target.tensor
            inner: list[Node] = emit_contraction(
                self.layout, args,
                Contraction(monomial.coef, monomial.without(message.target), factor.plates,
                            dict(factor.index_dims)),
                args.use(pre), target_index or ("0",), plates, letters,
            )
            for header in reversed(self._row_loops(var, {data_plate}, args)):
                inner = [Block(header, tuple(inner))]
            nodes += [Comment(f"{pre}: to q({name}) from {factor.child} ~ {factor.family} "
                              f"({self.factor_comment(factor)}), the same for every item"),
                      Line(f"{pre}[...] = 0.0"), *inner]
        for (name, m), (pre, glob, _, key) in self.partial().items():
            _, factor, _ = list(self._messages_to(name))[m]
            nodes += [Comment(f"{pre}: the global part of a message to q({name}) from "
                              f"{factor.child} ~ {factor.family} ({self.factor_comment(factor)})"),
                      Line(f"{pre}[...] = 0.0"),
                      *emit_contraction(self.layout, args,
                                        Contraction(1.0, glob, (), dict(factor.index_dims)),
                                        args.use(pre), key, {}, {})]
        return nodes

    # -- product form ----------------------------------------------------------
    def product_messages(self, name: str):
        """The messages to a categorical local if each is one E[log ·] read, else None.

        Then q_k ∝ Π_messages exp(E[log ·])_k: the kernel multiplies precomputed
        exp(E[log ·]) arrays instead of exponentiating per item (the LDA E-step trick,
        derived here for any model of that shape)."""
        var = self.var(name)
        if self.family(name) not in ("categorical", "split") or name not in self.plan.locals:
            return None
        found = []
        for message, factor, monomial in self._messages_to(name):
            others = monomial.without(message.target)
            stats = [s for s in others if isinstance(s, Stat)]
            knowns = [s for s in others if isinstance(s, Known)]
            if monomial.coef != 1.0 or len(stats) != 1 or stats[0].stat != "log":
                return None
            if not all(self.layout.onehot_binding(k) for k in knowns):
                return None
            plates, _ = self._target_bindings(var, message.target)
            if any(p not in plates for p in factor.plates):
                return None
            found.append((message, factor, monomial, stats[0]))
        return found

    def _implicit_source(self, consumer: str, monomial: Monomial) -> str | None:
        """The implicit categorical whose sums this monomial reads, if any."""
        for z in self.implicit:
            _, _, consumers = self.implicit_plan(z)
            if any(c == consumer and m is monomial for c, _, _, m in consumers):
                return z
        return None

    def implicit_plan(self, name: str):
        """When q(z) of a categorical local is needed during the sweeps only through
        per-item sums Σ_n w_n q(z_n = c), return (item-constant messages, row messages,
        consumers); else None.

        Then S_c = A_c Σ_n (w_n / s_n) B_nc with s_n = Σ_c A_c B_nc, where A multiplies the
        item-constant exp(E[log ·]) and B the per-row ones: q itself is only built once the
        sweeps have converged (Hoffman, Blei & Bach 2010 compute LDA's E-step this way)."""
        product = self.product_messages(name)
        if not product or name not in self.layout.scratch:
            return None
        data_plate = self.model.data_plate
        constant, rows = [], []
        for item in product:
            message, factor, monomial, stat = item
            knowns = [s for s in monomial.without(message.target) if isinstance(s, Known)]
            looped = message.target.tensor[0]
            if not knowns and set(stat.index) <= {data_plate, looped} and stat.var in (
                    self.plan.kept_locals) + self.plan.globals:
                constant.append(item)
            else:
                rows.append(item)
        consumers = []
        for other in self.plan.locals:
            if other == name:
                continue
            for message, factor, monomial in self._messages_to(other):
                zs = monomial.stats_of(name)
                if not zs:
                    continue
                u = self.var(other)
                rest = [s for s in monomial.without(message.target) if s not in zs]
                if (other not in self.plan.kept_locals or rest or len(zs) != 1
                        or zs[0].tensor != message.target.tensor or u.plates != (data_plate,)):
                    return None
                consumers.append((other, message, factor, monomial))
        if not consumers or not constant:
            return None
        return constant, rows, consumers

    def gathered_plan(self, name: str):
        """For implicit sums whose one per-row factor is a transposed exp(E[log ·]) array read
        at an observed index (LDA: exp(E[log beta])[w[d, n], ·]): (stat, one-hot slot,
        ragged plate), so the item's rows can be gathered once and each sweep is two
        matrix-vector products; else None."""
        plan = self.implicit_plan(name)
        var = self.var(name)
        if plan is None or len(var.plates) != 2 or not self.model.plate(var.plates[1]).ragged:
            return None
        _, rows, _ = plan
        if len(rows) != 1:
            return None
        message, _, monomial, stat = rows[0]
        knowns = [s for s in monomial.without(message.target) if isinstance(s, Known)]
        if (len(knowns) != 1 or not self.layout.onehot_binding(knowns[0])
                or not self.exp_arrays.get(stat, ("", False))[1]
                or stat.index != message.target.tensor):
            return None
        return stat, knowns[0], var.plates[1]

    def gather_kernel(self, name: str) -> Function:
        """B[r, c] = exp(E[log ·])[observed index of row r, c] for the item's rows."""
        stat, known, plate = self.gathered_plan(name)
        args = ArgRecorder()
        item = args.use(plate_var(self.model.data_plate))
        B = args.use(f"B_{name}")
        X = args.use(self.exp_arrays[stat][0])
        obs = args.use(known.operands[0].name)
        ptr = args.use(f"{plate}_ptr")
        body: list[Node] = [
            Block(f"for {plate_var(plate)} in range({ptr}[{item}], {ptr}[{item} + 1])", (
                Line(f"{B}[{plate_var(plate)} - {ptr}[{item}]] = {X}[{obs}[{plate_var(plate)}]]"),
            )),
        ]
        fn = Function(f"gather_{name}", tuple(args.names), tuple(body),
                      f"The item's rows of {self.exp_arrays[stat][0]}, contiguous for sums_{name}.",
                      KERNEL)
        self.kernel_args[fn.name] = tuple(args.names)
        return fn

    def implicit_kernel(self, name: str) -> Function:
        """S_c = A_c Σ_rows (w / s) B_c: the sums the item's other locals need from q(name)."""
        var = self.var(name)
        constant, rows, _ = self.implicit_plan(name)
        data_plate = self.model.data_plate
        args = ArgRecorder()
        args.use(plate_var(data_plate))
        size = dim_name(var.categories)
        if not size.isdigit():
            args.use(size)
        A, S = args.use(f"A_{name}"), args.use(f"S_{name}")

        def factors_of(items, nodes):
            out = []
            for m, (message, factor, monomial, stat) in enumerate(items):
                env = self._message_env(var, m, message, factor, monomial, args, nodes)
                out.append(self.layout.stat_ref(stat, env, args, self.exp_arrays))
            return out

        head: list[Node] = []
        a_factors = factors_of(constant, head)
        body: list[Node] = [
            *head,
            Block(f"for t_c in range({size})", (
                Line(f"{A}[t_c] = {' * '.join(a_factors)}"),
                Line(f"{S}[t_c] = 0.0"),
            )),
        ]
        gathered = self.gathered_plan(name)
        if gathered is not None:
            _, _, plate = gathered
            ptr = args.use(f"{plate}_ptr")
            weight = args.use(f"{plate}_weight")
            item = plate_var(data_plate)
            B, s = args.use(f"B_{name}"), args.use(f"s_{name}")
            body = [*head, Block(f"for t_c in range({size})",
                                 (Line(f"{A}[t_c] = {' * '.join(a_factors)}"),))]
            body += [
                Line(f"base = {ptr}[{item}]"),
                Line(f"n = {ptr}[{item} + 1] - base"),
                Line(f"np.dot({B}[:n], {A}, {s}[:n])", "s_n = Σ_c A_c B_nc"),
                Block("for r in range(n)", (
                    Block(f"if not ({s}[r] > 0.0 and np.isfinite({s}[r]))",
                          (Line("return False"),),
                          comment="underflow: the caller takes the explicit path"),
                    Line(f"{s}[r] = {weight}[base + r] / {s}[r]"),
                )),
                Line(f"np.dot({s}[:n], {B}[:n], {S})", "Σ_n (w_n / s_n) B_nc"),
                Block(f"for t_c in range({size})", (Line(f"{S}[t_c] *= {A}[t_c]"),)),
                Line("return True"),
            ]
            doc = (f"Σ_rows w·q({name} = c) for the item's other locals, without building "
                   f"q({name}):\nS_c = A_c Σ_n (w_n / s_n) B_nc, s_n = Σ_c A_c B_nc, with the "
                   f"item's rows B gathered by gather_{name}.")
            fn = Function(f"sums_{name}", tuple(args.names), tuple(body), doc, KERNEL)
            self.kernel_args[fn.name] = tuple(args.names)
            return fn
        row_nodes: list[Node] = []
        b_factors = factors_of(rows, row_nodes) or ["1.0"]
        weight = "1.0"
        for plate in var.plates[1:]:
            if self.model.plate(plate).ragged:
                weight = f"{args.use(plate + '_weight')}[{plate_var(plate)}]"
        b = " * ".join(b_factors)
        row_nodes += [
            Line("total = 0.0"),
            Block(f"for t_c in range({size})", (Line(f"total += {A}[t_c] * {b}"),)),
            Block("if not (total > 0.0 and np.isfinite(total))", (Line("return False"),),
                  comment="underflow: the caller takes the explicit path"),
            Line(f"share = {weight} / total"),
            Block(f"for t_c in range({size})", (Line(f"{S}[t_c] += share * {b}"),)),
        ]
        nodes: list[Node] = row_nodes
        for header in reversed(self._row_loops(var, {data_plate}, args)):
            nodes = [Block(header, tuple(nodes))]
        body += nodes
        body += [Block(f"for t_c in range({size})", (Line(f"{S}[t_c] *= {A}[t_c]"),)),
                 Line("return True")]
        doc = (f"Σ_rows w·q({name} = c) for the item's other locals, without building "
               f"q({name}):\nS_c = A_c Σ_rows (w / s) B_c, s = Σ_c A_c B_c (product form of "
               f"q({name})).")
        fn = Function(f"sums_{name}", tuple(args.names), tuple(body), doc, KERNEL)
        self.kernel_args[fn.name] = tuple(args.names)
        return fn

    def _message_env(self, var: VarDef, m: int, message, factor: Factor, monomial: Monomial,
                     args: ArgRecorder, nodes: list[Node], comment: bool = False) -> dict:
        """Index environment of product message ``m``: the target's plates and gates bound to
        the row, its category letter as ``t_c``, and each one-hot data letter bound to the
        observed value by an ``obs{m}_<letter> = ...`` line appended to ``nodes``."""
        plates, letters = self._target_bindings(var, message.target)
        env = dict(letters)
        env.update({f"@{p}": e for p, e in plates.items()})
        env[message.target.tensor[0]] = "t_c"
        for slot in monomial.without(message.target):
            if isinstance(slot, Known):  # one-hot data: the observed category
                ref = slot.operands[0]
                index = self.layout._plate_index(slot.plates, slot.plates, env, args,
                                                 scratch=False)
                name = f"obs{m}_{slot.tensor[0]}"
                note = f"{factor.child} ({self.factor_comment(factor)})" if comment else ""
                nodes.append(Line(f"{name} = {args.use(ref.name)}[{', '.join(index)}]", note))
                env[slot.tensor[0]] = name
        return env

    def _fused_product(self, var: VarDef, product, args: ArgRecorder) -> list[Node]:
        """q_c ∝ Π_messages exp(E[log ·])_c in one pass over the categories, then normalise
        (a split's E[c] = n·q: the count it splits times the probabilities)."""
        first = self.stats(var.name)[0][0]
        E = args.use(self.layout.E(var.name, first))
        row = self._row_index(var, args)
        size = self._categories(var)
        if not size.isdigit():
            args.use(size)
        nodes: list[Node] = []
        factors: list[str] = []
        self._envs = []
        for m, (message, factor, monomial, stat) in enumerate(product):
            env = self._message_env(var, m, message, factor, monomial, args, nodes,
                                    comment=True)
            factors.append(self.layout.stat_ref(stat, env, args, self.exp_arrays))
            self._envs.append(env)
        # the natural parameter itself (for the entropy): the same messages in log space
        log_terms = [self.layout.stat_ref(stat, env_m, args, self.log_arrays)
                     for (_, _, _, stat), env_m in zip(product, self._envs, strict=True)]
        lam = args.use(self.layout.lam(var.name, first))
        H = args.use(f"H_{var.name}")
        logZ = args.use('logZ_' + var.name)
        if self.family(var.name) == "split":  # E[c] = n·φ
            n = self._split_total(var, args)
            normalise = [Line(f"count = {n}", "the count it splits"),
                         Line("to_mean = count / total")]
            entropy = Line(f"{H}[{row}] = count * {logZ}[{row}] - cross",
                           "H = n·log Σ_c exp λ_c − Σ_c λ_c E[c_c], without the base measure")
        else:
            normalise = [Line("to_mean = 1.0 / total")]
            entropy = Line(f"{H}[{row}] = {logZ}[{row}] - cross",
                           "H = log Σ_c exp λ_c − Σ_c λ_c q_c")
        nodes += [
            Line("total = 0.0"),
            Block(f"for t_c in range({size})", (
                Line(f"{E}[{row}, t_c] = {' * '.join(factors)}"),
                Line(f"total += {E}[{row}, t_c]"),
            )),
            Block("if total > 0.0 and np.isfinite(total)", (
                *normalise,
                Line("cross = 0.0"),
                Block(f"for t_c in range({size})", (
                    Line(f"{E}[{row}, t_c] *= to_mean"),
                    Line(f"{lam}[{row}, t_c] = {' + '.join(log_terms)}"),
                    Line(f"cross += {lam}[{row}, t_c] * {E}[{row}, t_c]"),
                )),
                Line(f"{logZ}[{row}] = np.log(total)", "log Σ_c exp λ_c"),
                entropy,
                Line("done = True"),
            )),
        ]
        return nodes

    def _plan_exp_arrays(self) -> None:
        """Which exp(E[log ·]) arrays product-form kernels read, and in which layout."""
        self.exp_arrays: dict[Stat, tuple[str, bool]] = {}
        self.log_arrays: dict[Stat, tuple[str, bool]] = {}
        self.exp_needed: dict[str, set[bool]] = {}  # var -> layouts (transposed?) needed
        for name in self.plan.locals:
            for message, _, _, stat in self.product_messages(name) or ():
                var = self.var(stat.var)
                looped = message.target.tensor[0]
                transposed = (len(var.plates) == 1 and stat.index == (looped,)
                              and len(stat.tensor) == 1)
                prefix = "XT" if transposed else "X"
                self.exp_arrays[stat] = (f"{prefix}_{stat.var}_{stat.stat}", transposed)
                self.exp_needed.setdefault(stat.var, set()).add(transposed)
                if transposed:  # E[log ·] in the same layout, for the entropy
                    self.log_arrays[stat] = (f"ET_{stat.var}_{stat.stat}", True)

    def _exp_lines(self, var: VarDef, row: str, args: ArgRecorder) -> list[Node]:
        """Keep exp(E[log ·]) in step with E wherever E[log ·] is computed."""
        nodes: list[Node] = []
        for transposed in sorted(self.exp_needed.get(var.name, ())):
            E = args.use(self.layout.E(var.name, "log"))
            if not transposed:
                X = args.use(f"X_{var.name}_log")
                if not var.shape:  # one value per row (a Gamma over plates)
                    nodes.append(Line(f"{X}[{row}] = np.exp({E}[{row}])"))
                    continue
                size = args.use(dim_name(var.shape[0]))
                nodes.append(Block(f"for t in range({size})",
                                   (Line(f"{X}[{row}, t] = np.exp({E}[{row}, t])"),)))
                continue
            XT = args.use(f"XT_{var.name}_log")
            ET = args.use(f"ET_{var.name}_log")
            size = args.use(dim_name(var.shape[0]))
            nodes.append(Block(f"for t in range({size})", (
                Line(f"{ET}[t, {row}] = {E}[{row}, t]"),
                Line(f"{XT}[t, {row}] = np.exp({E}[{row}, t])"),
            )))
        return nodes

    # -- local kernels -------------------------------------------------------
    def local_update_kernel(self, name: str) -> Function:
        var = self.var(name)
        data_plate = self.model.data_plate
        args = ArgRecorder()
        args.use(plate_var(data_plate))
        args.use("with_children")
        body: list[Node] = []
        row = self._row_index(var, args)
        inner: list[Node] = []
        for stat, _ in self.stats(name):
            inner.append(Line(f"{args.use(self.layout.lam(name, stat))}[{row}] = 0.0"))
        prior_nodes: list[Node] = []
        child_nodes: list[Node] = []
        hoisted = self.hoisted()
        for m, (message, factor, monomial) in enumerate(self._messages_to(name)):
            if (name, m) in hoisted:  # item-independent: computed once per step
                pre = args.use(hoisted[(name, m)])
                lam = args.use(self.layout.lam(name, message.target.stat))
                nodes = [Line(f"{lam}[{row}] += {self._hoisted_read(var, pre)}",
                              f"precomputed by hoist_messages ({self.factor_comment(factor)})")]
                child_nodes += [Comment(f"from {factor.child} ~ {factor.family}")] + nodes
                continue
            if (name, m) in self.partial():  # its data-free part contracted once per step
                pre, _, data, key = self.partial()[(name, m)]
                plates, letters = self._target_bindings(var, message.target)
                lam = args.use(self.layout.lam(name, message.target.stat))
                nodes = emit_contraction(
                    self.layout, args,
                    Contraction(monomial.coef, data + (self._pre_slot(pre, key),),
                                factor.plates, dict(factor.index_dims)),
                    lam, tuple(self.layout.row(name, var.plates, {}, args))
                    + message.target.tensor, plates, letters,
                )
                child_nodes += [Comment(f"from {factor.child} ~ {factor.family} "
                                        f"({self.factor_comment(factor)}), its global part "
                                        f"precomputed by hoist_messages")] + nodes
                continue
            nodes = self._contribution(factor, monomial, message.target, var, args, {})
            implicit = self._implicit_source(name, monomial)
            if implicit is not None:
                flag, S = args.use(f"use_sums_{implicit}"), args.use(f"S_{implicit}")
                lam = args.use(self.layout.lam(name, message.target.stat))
                size = dim_name(self.var(implicit).categories)
                coef = "" if monomial.coef == 1.0 else f"{fmt_float(monomial.coef)} * "
                nodes = [Block(f"if {flag}", (Block(f"for t_c in range({size})", (
                    Line(f"{lam}[{self._row_index(var, args)}, t_c] += {coef}{S}[t_c]"),)),)),
                         Block("else", tuple(nodes))]
            text = f"from {factor.child} ~ {factor.family} ({self.factor_comment(factor)})"
            if factor.child == name:
                prior_nodes += [Comment(text)] + nodes
            else:
                child_nodes += [Comment(text)] + nodes
        inner += prior_nodes
        if child_nodes:
            inner.append(Block("if with_children", tuple(child_nodes)))
        if self.family(name) == "markov":
            return self._chain_update_kernel(var, inner, args)
        product = self.product_messages(name)
        if product:
            stat = self.stats(name)[0][0]
            lam = self.layout.lam(name, stat)
            E = self.layout.E(name, stat)
            lam_row, E_row = f"{lam}[{row}]", f"{E}[{row}]"
            logZ = args.use("logZ_" + name)
            if self.family(name) == "split":
                n = self._split_total(var, args)
                inner.append(Line(f"{logZ}[{row}] = rt.split_expected_stats({lam_row}, "
                                  f"{E_row}, {n})"))
                inner.append(Line(f"{args.use('H_' + name)}[{row}] = {n} * {logZ}[{row}] - "
                                  f"rt.frobenius({lam_row}, {E_row})"))
            else:
                inner.append(Line(f"{logZ}[{row}] = rt.categorical_expected_stats({lam_row}, "
                                  f"{E_row})"))
                inner.append(Line(f"{args.use('H_' + name)}[{row}] = {logZ}[{row}] - "
                                  f"rt.frobenius({lam_row}, {E_row})"))
        elif name in self.exp_only:
            # inside the sweeps only exp(E[log ·]) is read: computed without logarithms
            X = args.use(f"X_{name}_log")
            lam = args.use(self.layout.lam(name, "log"))
            inner.append(Block(f"if {args.use('exp_only')}", (
                Line(f"rt.dirichlet_exp_expected({lam}[{row}], {X}[{row}])"),)))
            inner.append(Block("else", (self._expect_line(var, row, args),
                                        *self._exp_lines(var, row, args))))
        else:
            inner.append(self._expect_line(var, row, args))
        if name not in self.exp_only:
            inner += self._exp_lines(var, row, args)
        if product:
            inner = [
                Line("done = False"),
                Block("if with_children", tuple(self._fused_product(var, product, args))),
                Block("if not done", tuple(inner),
                      comment="in log space: the prior-only start, or after an underflow"),
            ]
        nodes: list[Node] = list(inner)
        for header in reversed(self._row_loops(var, {data_plate}, args)):
            nodes = [Block(header, tuple(nodes))]
        body += self._bases(nodes, args)
        body += nodes
        doc = self._conditional_doc(var)
        fn = Function(f"update_{name}", tuple(args.names), tuple(body), doc, KERNEL)
        self.kernel_args[fn.name] = tuple(args.names)
        return fn

    def _chain_update_kernel(self, var: VarDef, rows: list[Node],
                             args: ArgRecorder) -> Function:
        """A MarkovChain local: its log-potentials per step (the messages), then the exact
        posterior of each sequence by forward–backward (cemodel.runtime.chain)."""
        data_plate = self.model.data_plate
        item = plate_var(data_plate)
        nodes: list[Node] = list(rows)
        for header in reversed(self._row_loops(var, {data_plate}, args)):
            nodes = [Block(header, tuple(nodes))]
        steps = self.model.plate(var.plates[1])
        if steps.ragged:
            ptr = args.use(f"{steps.name}_ptr")
            length = f"{ptr}[{item} + 1] - {ptr}[{item}]"
        else:
            length = args.use(dim_name(steps.dim))
        arrays = [args.use(self.layout.lam(var.name, st)) for st, _ in self.stats(var.name)]
        arrays += [args.use(self.layout.E(var.name, st)) for st, _ in self.stats(var.name)]
        H = args.use(f"H_{var.name}")
        body = self._bases(nodes, args) + nodes + [
            Comment("q(chain) ∝ exp(Σ_t emission_t[z_t] + initial[z_0] + Σ_t transition_t"
                    "[z_t−1, z_t]): marginals, pairwise marginals and its entropy"),
            Line(f"{H}[0] = rt.chain_posterior({', '.join(arrays)}, {length})"),
        ]
        fn = Function(f"update_{var.name}", tuple(args.names), tuple(body),
                      self._conditional_doc(var), KERNEL)
        self.kernel_args[fn.name] = tuple(args.names)
        return fn

    def _conditional_doc(self, var: VarDef) -> str:
        span = var.span
        where = f"{self.model.source.filename}:{span.line}:{span.column}"
        from ..check import conditional_text

        return f"{conditional_text(self.plan, var.name)}\n\n({where})"

    def local_step_kernel(self) -> Function:
        """E-step over every item of the data plate; accumulates the sufficient statistics."""
        data_plate = self.model.data_plate
        args = ArgRecorder()
        item = plate_var(data_plate)
        for name in ("seeding", "items", "seed_category", "max_local_iter", "local_tol"):
            args.use(name)
        per_item: list[Node] = []
        locals_ = self.plan.locals
        categorical = [n for n in locals_ if self.family(n) == "categorical"]
        chains = self._seeded_chains()
        # initialisation
        init_random: list[Node] = []
        for name in categorical:
            init_random += self._random_categorical(self.var(name), args)
        for name in chains:
            init_random += self._seed_chain(self.var(name), args)
        for name in locals_:
            if name not in categorical and name not in chains:
                init_random.append(Line(self._call(f"update_{name}", {
                    "with_children": "True", "exp_only": "False",
                    **{f"use_sums_{z}": "False" for z in self.implicit}}, args)))
        init_sweeps: list[Node] = []
        if self.plan.local_iterations:
            # a sweep runs children first, so only locals with local children need a start:
            # their prior, or (warm) their value from the previous iteration
            starts: list[Node] = []
            for name in locals_:
                if self._read_before_update(name):
                    if name not in self.plan.kept_locals:
                        init_sweeps.append(self._call_update(name, "False", args))
                    else:
                        starts.append(self._call_update(name, "False", args))
            if starts:
                args.use("warm")
                init_sweeps.append(Block("if not warm", tuple(starts)))
            tracked = self.plan.kept_locals or locals_
            sweep: list[Node] = [Line("change = 0.0")]
            for name in tracked:
                sweep.append(Line(f"old_{name}[...] = {self._tracked(name, args)}"))
            finish = [self._expect_line(self.var(n), item, args) for n in self.exp_only]
            for name in reversed(locals_):
                if name in self.implicit:
                    sweep.append(Line(f"use_sums_{name} = "
                                      + self._call(f"sums_{name}", {}, args)))
                    sweep.append(Block(f"if not use_sums_{name}", (
                        *finish, self._call_update(name, "True", args))))
                else:
                    sweep.append(self._call_update(name, "True", args, exp_only="True"))
            count = []
            for name in tracked:
                sweep.append(Line(f"change += rt.mean_abs_change({self._tracked(name, args)}, "
                                  f"old_{name})"))
                count.append(name)
            mean = "change" if len(count) == 1 else f"change / {len(count)}"
            sweep.append(Block(f"if {mean} < local_tol", (Line("break"),)))
            gathers = [Line(self._call(f"gather_{n}", {}, args)) for n in self.implicit
                       if self.gathered_plan(n) is not None]
            if gathers and self._fast_guard() is not None and self.plan.kept_locals:
                gathers = [Block("if not guard", tuple(gathers),
                                 comment="the guard gathered them already")]
            init_sweeps += gathers
            init_sweeps.append(Block("for sweep in range(max_local_iter)", tuple(sweep)))
            if finish:
                init_sweeps.append(Comment("E[log ·] of the item, once its sweeps converged"))
                init_sweeps += finish
            for name in self.implicit:
                init_sweeps.append(Comment(f"q({name}) itself, from the converged sweeps"))
                init_sweeps.append(self._call_update(name, "True", args))
        else:
            for name in locals_:
                init_sweeps.append(self._call_update(name, "True", args))
        if self.plan.local_iterations and self.plan.kept_locals:
            before, after = self._guard_nodes(args)
            args.use("guard")
            init_sweeps = [Block("if guard", tuple(before)), *init_sweeps,
                           Block("if guard", tuple(after))]
        if categorical or chains:
            per_item.append(Block("if seeding", tuple(init_random),
                                  comment="k-means++ seed items: seed c is all category c"
                                  if categorical else "k-means++ seed steps: seed c in state c"))
            per_item.append(Block("else", tuple(init_sweeps)))
        else:  # nothing to seed: start=seeds needs a categorical local
            per_item += init_sweeps
        per_item += self._accumulate_nodes(args, suffix="_t")
        per_item.append(Comment("ELBO: local terms and local entropies"))
        per_item += self._local_elbo_nodes(args)
        per_item = self._bases(per_item, args) + per_item
        buffers: list[Node] = []
        if self.plan.local_iterations:
            for name in self.plan.kept_locals or locals_:
                lam = self.layout.lam(name, self.stats(name)[0][0])
                row = "" if name in self.layout.scratch else "[0]"
                buffers.append(Line(f"old_{name} = np.empty_like({lam}{row})",
                                    "the previous sweep, for the convergence test"))
            for a in getattr(self, "_guard_arrays", []):
                buffers.append(Line(f"keep_{a} = np.empty_like({a}[0])",
                                    "the item's previous state, for the restart guard"))
        doc = ("Local step: each item's local factors to convergence, then the sufficient "
               "statistics.\n\n"
               "The items are shared among the threads (numba prange), each with its own "
               "scratch arrays\nand accumulators (<name>_threads[thread]); their statistics "
               "are summed in thread order.\n"
               "Returns the ELBO terms that involve only local variables and data.")
        return self.threaded_kernel("local_step", per_item, args, doc, buffers=tuple(buffers),
                                    hoist=True)

    def threaded_kernel(self, name: str, per_item: list[Node], args: ArgRecorder, doc: str,
                        buffers: tuple[Node, ...] = (), accumulate: bool = True,
                        result: str = "elbo", threads: str = "1",
                        hoist: bool = False) -> Function:
        """A kernel over ``items``: each thread runs a contiguous share of them with its own
        scratch arrays and (``accumulate``) accumulators, summed in thread order afterwards;
        it returns the sum of ``result`` over the items. ``threads``: the thread count when
        there is no per-thread array to read it from (a literal or a parameter name).
        ``hoist``: the per-item body calls local updates, so the item-independent messages
        they read are contracted first (hoisted)."""
        item = plate_var(self.model.data_plate)
        private = self.thread_private()
        accs = [a.name for a in self.plan.stored_accumulators] if accumulate else []
        threaded = private + accs
        count = f"{threaded[0]}_threads.shape[0]" if threaded else args.use(threads)
        bind = [Line(f"{n} = {n}_threads[thread]") for n in private]
        vector_accs = [a.name for a in self.plan.stored_accumulators if a.key] if accumulate else []
        bind += [Line(f"{a}_t = {a}_threads[thread]") for a in vector_accs]
        bind += [Line(f"{a}_t[...] = 0.0") for a in vector_accs]
        if accumulate:
            bind += [Line(f"{a.name}_threads[thread] = 0.0") for a in self.plan.stored_accumulators
                     if not a.key]
        body: list[Node] = [
            *(self.hoist_nodes(args) if hoist else ()),
            Line(f"n_threads = {count}"),
            Line(f"{result}_threads = np.zeros(n_threads)"),
            Block("for thread in prange(n_threads)", (
                *bind,
                *buffers,
                Line(f"{result} = 0.0"),
                Block("for position in range(thread * items.shape[0] // n_threads, "
                      "(thread + 1) * items.shape[0] // n_threads)",
                      (Line(f"{item} = items[position]"), *per_item)),
                Line(f"{result}_threads[thread] = {result}"),
            )),
            *[Block("for thread in range(n_threads)", (Line(f"{a} += {a}_threads[thread]"),))
              for a in accs],
            Line(f"return {result}_threads.sum()"),
        ]
        local_names = set(private) | {f"{a}_t" for a in accs}
        params = [a for a in args.names if a not in local_names]
        params += [f"{n}_threads" for n in private + accs] + accs
        fn = Function(name, tuple(dict.fromkeys(params)), tuple(body), doc,
                      KERNEL.replace("nogil=True", "nogil=True, parallel=True"))
        self.kernel_args[fn.name] = fn.args
        return fn

    def _local_elbo_nodes(self, args: ArgRecorder) -> list[Node]:
        """``elbo +=`` the item's ELBO terms that involve only locals and data (the others
        go through the accumulators to elbo_global), and its local entropies."""
        data_plate = self.model.data_plate
        item = plate_var(data_plate)
        nodes: list[Node] = []
        for fi, factor in enumerate(self.analysis.factors):
            if not self.plan.in_data_plate(factor.plates):
                continue
            for mi, monomial in enumerate(factor.monomials):
                if self.plan.accumulator_for(fi, mi) is not None:
                    continue
                nodes += emit_contraction(
                    self.layout, args,
                    Contraction(monomial.coef, monomial.slots, factor.plates,
                                dict(factor.index_dims)),
                    "elbo", (), {data_plate: item}, {},
                )
        return nodes + self._entropy_nodes(self.plan.locals, "elbo", args)

    def _hyper_domains(self) -> dict[str, str]:
        """Hyperparameters used directly as a positive or SPD family parameter: checked to be
        in that domain when a fit binds them (a Dirichlet concentration of 0, a negative rate)."""
        found: dict[str, str] = {}
        for var in self.model.variables:
            for param, arg in zip(FAMILIES[var.family].params, var.args, strict=True):
                inner = arg.value if isinstance(arg, RRepeat) else arg
                if isinstance(inner, RHyper) and param.domain in ("positive", "spd"):
                    domain = "shape" if param.smallest > 0 else param.domain
                    if found.get(inner.name) != "shape":
                        found[inner.name] = domain
        return found

    def thread_private(self) -> list[str]:
        """Arrays the local step writes for the current item only (its scratch rows and
        buffers): one copy per thread."""
        names: list[str] = []
        for name in self.plan.locals:
            if name in self.layout.scratch:
                names += [self.layout.lam(name, st) for st, _ in self.stats(name)]
                names += [self.layout.E(name, st) for st, _ in self.stats(name)]
                if name in self.product_form:
                    names += [f"H_{name}", f"logZ_{name}"]
                if self.family(name) == "markov":
                    names.append(f"H_{name}")
        for name in self.implicit:
            names += [f"A_{name}", f"S_{name}"]
            if self.gathered_plan(name) is not None:
                names += [f"B_{name}", f"s_{name}"]
        return names

    def _accumulate_nodes(self, args: ArgRecorder, suffix: str = "") -> list[Node]:
        """The item's sufficient statistics into the accumulators (``<acc><suffix>``), weighted
        by item_weight."""
        data_plate = self.model.data_plate
        item = plate_var(data_plate)
        nodes: list[Node] = []
        for acc in self.plan.stored_accumulators:
            factor = self.analysis.factors[acc.factor]
            nodes.append(Comment(f"{acc.name}[{', '.join(acc.key)}] += "
                                 + " · ".join(describe_slot(s) for s in acc.local)
                                 + f"  ({self.factor_comment(factor)})"))
            nodes += emit_contraction(
                self.layout, args,
                Contraction(1.0, acc.local, factor.plates, dict(factor.index_dims),
                            extra=(f"{args.use('item_weight')}[{item}]",)),
                self._acc_target(acc, suffix, args), acc.key, {data_plate: item}, {},
            )
        return nodes

    def _acc_target(self, acc, suffix: str, args: ArgRecorder) -> str:
        """Where the local step adds an accumulator's terms: the thread's own copy (a scalar
        one through its thread array, so the addition lands in the array)."""
        if suffix and not acc.key:
            return f"{args.use(acc.name + '_threads')}[thread]"
        return args.use(acc.name + suffix)

    def _entropy_nodes(self, names, target: str, args: ArgRecorder) -> list[Node]:
        """``target += H[q(name)]`` for every row of the current item (ragged rows weighted)."""
        data_plate = self.model.data_plate
        out: list[Node] = []
        for name in names:
            var = self.var(name)
            if self.family(name) == "markov":  # the whole chain's, from forward–backward
                out.append(Line(f"{target} += {args.use('H_' + name)}[0]"))
                continue
            row = self._row_index(var, args)
            weight = ""
            for plate in var.plates[1:]:
                if self.model.plate(plate).ragged:
                    weight = f"{args.use(plate + '_weight')}[{plate_var(plate)}] * "
            nodes: list[Node] = [
                Line(f"{target} += {weight}({self._entropy_expr(var, row, args)})")]
            for header in reversed(self._row_loops(var, {data_plate}, args)):
                nodes = [Block(header, tuple(nodes))]
            out += nodes
        return out

    def item_elbo_kernel(self, without: tuple[str, ...] = ()) -> Function:
        """One item's whole share of the ELBO under the current globals: every data-plate
        monomial (the global slots read E[t] directly) and the item's local entropies;
        ``without`` leaves out the terms of collapsed locals (see collapsed_kernel)."""
        data_plate = self.model.data_plate
        args = ArgRecorder()
        item = args.use(plate_var(data_plate))
        body: list[Node] = [Line("value = 0.0")]
        for factor in self.analysis.factors:
            if not self.plan.in_data_plate(factor.plates):
                continue
            for monomial in factor.monomials:
                if any(monomial.stats_of(n) for n in without):
                    continue
                body += emit_contraction(
                    self.layout, args,
                    Contraction(monomial.coef, monomial.slots, factor.plates,
                                dict(factor.index_dims)),
                    "value", (), {data_plate: item}, {}, reads=self.log_arrays,
                )
        body += self._entropy_nodes([n for n in self.plan.locals if n not in without],
                                    "value", args)
        body = self._bases(body, args) + body + [Line("return value")]
        name = "item_elbo" + "".join(f"_without_{n}" for n in without)
        doc = "One item's share of the ELBO under the current globals (the restart guard)."
        if without:
            doc = (f"One item's share of the ELBO without the terms of {', '.join(without)} "
                   f"(collapsed_{without[0]} adds them at their optimum).")
        fn = Function(name, tuple(args.names), tuple(body), doc, KERNEL)
        self.kernel_args[fn.name] = tuple(args.names)
        return fn

    def collapsed_kernel(self, name: str) -> Function:
        """Σ_rows w log Σ_c exp λ_c: the terms of q(name) at its optimum given the rest."""
        constant, _, _ = self.implicit_plan(name)
        _, _, plate = self.gathered_plan(name)
        var = self.var(name)
        args = ArgRecorder()
        item = args.use(plate_var(self.model.data_plate))
        size = dim_name(var.categories)
        if not size.isdigit():
            args.use(size)
        A, B, s = args.use(f"A_{name}"), args.use(f"B_{name}"), args.use(f"s_{name}")
        factors = []
        for m, (message, factor, monomial, stat) in enumerate(constant):
            env = self._message_env(var, m, message, factor, monomial, args, [])
            factors.append(self.layout.stat_ref(stat, env, args, self.exp_arrays))
        ptr, weight = args.use(f"{plate}_ptr"), args.use(f"{plate}_weight")
        body: list[Node] = [
            Block(f"for t_c in range({size})", (Line(f"{A}[t_c] = {' * '.join(factors)}"),)),
            Line(f"base = {ptr}[{item}]"),
            Line(f"n = {ptr}[{item} + 1] - base"),
            Line(f"np.dot({B}[:n], {A}, {s}[:n])", "s_n = Σ_c exp λ_nc"),
            Line("value = 0.0"),
            Block("for r in range(n)", (Line(f"value += {weight}[base + r] * np.log({s}[r])"),)),
            Line("return value"),
        ]
        doc = (f"Σ_n w_n log Σ_c exp λ_nc: at its optimum q({name}) contributes "
               "Σ_c q_c λ_c + H(q) = log Σ_c exp λ_c per row.")
        fn = Function(f"collapsed_{name}", tuple(args.names), tuple(body), doc, KERNEL)
        self.kernel_args[fn.name] = tuple(args.names)
        return fn

    def _fast_guard(self) -> str | None:
        """The scratch local the guard can collapse (implicit, gathered rows), if any."""
        scratch = [n for n in self.plan.locals if n in self.layout.scratch]
        if len(scratch) == 1 and scratch[0] in self.implicit and self.gathered_plan(scratch[0]):
            return scratch[0]
        return None

    def _guard_nodes(self, args: ArgRecorder) -> tuple[list[Node], list[Node]]:
        """Before and after an item's restarted local step: keep the restart only if it is at
        least as good as the previous state (re-optimised in the scratch locals), so the
        ELBO never decreases."""
        item = plate_var(self.model.data_plate)
        scratch = [n for n in reversed(self.plan.locals) if n in self.layout.scratch]
        arrays = self._kept_arrays()
        rebuild = [self._call_update(n, "True", args) for n in scratch]
        fast = self._fast_guard()
        if fast is not None:
            value = (self._call(f"collapsed_{fast}", {}, args) + " + "
                     + self._call(f"item_elbo_without_{fast}", {}, args))
            before: list[Node] = [
                *[Line(f"keep_{a}[...] = {args.use(a)}[{item}]") for a in arrays],
                Line(self._call(f"gather_{fast}", {}, args)),
                Line(f"previous = {value}", f"the previous state with q({fast}) at its optimum"),
            ]
        else:
            value = self._call("item_elbo", {}, args)
            before = [
                *[Line(f"keep_{a}[...] = {args.use(a)}[{item}]") for a in arrays],
                *rebuild,
                Line(f"previous = {value}",
                     "the previous state, re-optimised in its scratch locals"),
            ]
        if fast is not None:
            plate = self.gathered_plan(fast)[2]
            ptr, weight = args.use(f"{plate}_ptr"), args.use(f"{plate}_weight")
            logZ = args.use(f"logZ_{fast}")
            value = (f"rt.weighted_sum({weight}[{ptr}[{item}]:{ptr}[{item} + 1]], "
                     f"{logZ}[:{ptr}[{item} + 1] - {ptr}[{item}]]) + "
                     + self._call(f"item_elbo_without_{fast}", {}, args))
        after: list[Node] = [
            Block(f"if {value} < previous", (
                Comment("the restart settled lower: keep the previous state"),
                *[Line(f"{a}[{item}] = keep_{a}") for a in arrays],
                *rebuild,
            )),
        ]
        self._guard_arrays = arrays
        return before, after

    def _kept_arrays(self) -> list[str]:
        """The state arrays that hold the kept locals' q: what a warm start continues from."""
        arrays = []
        for name in self.plan.kept_locals:
            for stat, _ in self.stats(name):
                arrays += [self.layout.lam(name, stat), self.layout.E(name, stat)]
            if f"X_{name}_log" in self._state_candidates():
                arrays.append(f"X_{name}_log")
        return arrays

    def _state_candidates(self) -> set[str]:
        names = set()
        for name, layouts in self.exp_needed.items():
            for transposed in layouts:
                names.add(f"XT_{name}_log" if transposed else f"X_{name}_log")
        return names

    def _bases(self, nodes: list[Node], args: ArgRecorder) -> list[Node]:
        """``base_p = p_ptr[item]`` for each ragged plate whose scratch arrays the nodes read."""
        text = print_module(Module("", (), tuple(nodes)))
        out: list[Node] = []
        item = plate_var(self.model.data_plate)
        for plate in self.model.plates:
            if plate.ragged and f"base_{plate.name}" in text:
                ptr = args.use(f"{plate.name}_ptr")
                out.append(Line(f"base_{plate.name} = {ptr}[{item}]"))
        return out

    def _tracked(self, name: str, args: ArgRecorder) -> str:
        """The natural parameters of a local whose change ends the sweeps: the item's row of
        a kept local, the whole scratch array of one stored per item."""
        lam = args.use(self.layout.lam(name, self.stats(name)[0][0]))
        if name in self.layout.scratch:
            return lam
        return f"{lam}[{plate_var(self.model.data_plate)}]"

    def _read_before_update(self, name: str) -> bool:
        """Whether a local updated before ``name`` in a sweep (children first: the reverse
        of the topological order) reads q(name): then ``name`` needs a start. A child reads
        its parent; co-parents of one factor read each other (GaP-NMF's H and split)."""
        locals_ = self.plan.locals
        later = locals_[locals_.index(name) + 1:]
        for reader in later:
            for _, _, monomial in self._messages_to(reader):
                if monomial.stats_of(name):
                    return True
        return False

    def _random_categorical(self, var: VarDef, args: ArgRecorder) -> list[Node]:
        """Seeding: every row of a seed item is its category; other items weigh nothing."""
        row = self._row_index(var, args)
        E = args.use(self.layout.E(var.name, "onehot"))
        k = dim_name(var.categories)
        if not k.isdigit():
            args.use(k)
        item = plate_var(self.model.data_plate)
        nodes: list[Node] = [
            Line(f"{E}[{row}] = 0.0"),
            Block(f"if 0 <= seed_category[{item}] < {k}",
                  (Line(f"{E}[{row}, seed_category[{item}]] = 1.0"),)),
        ]
        for header in reversed(self._row_loops(var, {self.model.data_plate}, args)):
            nodes = [Block(header, tuple(nodes))]
        return nodes

    def _seeded_chains(self) -> list[str]:
        """MarkovChain locals started from seed steps (not in a model that also seeds items
        of a categorical local: one seed array serves one of the two)."""
        locals_ = self.plan.locals
        if any(self.family(n) == "categorical" for n in locals_):
            return []
        return [n for n in locals_ if self.family(n) == "markov"]

    def _seed_chain(self, var: VarDef, args: ArgRecorder) -> list[Node]:
        """Seeding: a chain's seed steps are in their state; its other steps, its first
        state and its transitions weigh nothing."""
        row = self._row_index(var, args)
        E = [args.use(self.layout.E(var.name, st)) for st, _ in self.stats(var.name)]
        seed = f"seed_category[{', '.join(self.layout.data_row(var.plates, args))}]"
        k = dim_name(var.categories)
        if not k.isdigit():
            args.use(k)
        nodes: list[Node] = [
            *[Line(f"{e}[{row}] = 0.0") for e in E],
            Block(f"if 0 <= {seed} < {k}", (Line(f"{E[0]}[{row}, {seed}] = 1.0"),)),
        ]
        for header in reversed(self._row_loops(var, {self.model.data_plate}, args)):
            nodes = [Block(header, tuple(nodes))]
        return [*nodes, Line(f"{args.use(f'H_{var.name}')}[0] = 0.0",
                             "the seeding pass is not part of the ELBO")]

    def _call_update(self, name: str, with_children: str, args: ArgRecorder,
                     exp_only: str = "False") -> Line:
        overrides = {"with_children": with_children, "exp_only": exp_only}
        if with_children == "False":
            overrides.update({f"use_sums_{z}": "False" for z in self.implicit})
        return Line(self._call(f"update_{name}", overrides, args))

    def _call(self, kernel: str, overrides: dict[str, str], args: ArgRecorder) -> str:
        """A kernel call from inside another kernel: the caller's names, or ``overrides``."""
        item = plate_var(self.model.data_plate)
        call_args = []
        for a in self.kernel_args[kernel]:
            if a in overrides:
                call_args.append(overrides[a])
            elif a == item or a.startswith("use_sums_"):
                call_args.append(a)
            else:
                call_args.append(args.use(a))
        return f"{kernel}({', '.join(call_args)})"

    def _acc_slot(self, acc) -> Known:
        """An accumulator read as a known array indexed by its key letters."""
        slot = Known(acc.name, (), acc.key, ())
        self.layout.known_names[slot.key] = acc.name
        return slot

    # -- global kernels ------------------------------------------------------
    def global_update_kernel(self, name: str) -> Function:
        var = self.var(name)
        args = ArgRecorder()
        args.use("data_scale")
        row = self._row_index(var, args)
        inner: list[Node] = []
        for stat, _ in self.stats(name):
            inner.append(Line(f"{args.use(self.layout.lam(name, stat))}[{row}] = 0.0"))
        for message, factor, monomial in self._messages_to(name):
            acc = self.plan.accumulator_for(message.factor, message.monomial)
            inner.append(Comment(f"from {factor.child} ~ {factor.family} "
                                 f"({self.factor_comment(factor)})"))
            if acc is None:
                inner += self._contribution(factor, monomial, message.target, var, args, {})
                continue
            # data_scale · coef · acc[key] · Π E[other global slots]
            others = tuple(s for s in acc.glob if s != message.target)
            acc_slot = self._acc_slot(acc)
            plates, letters = self._target_bindings(var, message.target)
            lam = args.use(self.layout.lam(name, message.target.stat))
            target_row = self.layout.row(name, var.plates, {}, args)
            inner += emit_contraction(
                self.layout, args,
                Contraction(monomial.coef, (acc_slot,) + others, _key_plates(acc),
                            dict(factor.index_dims), extra=("data_scale",)),
                lam, tuple(target_row) + message.target.tensor, plates, letters,
            )
        expect = args.use("expect")
        inner.append(Block(f"if {expect}", (self._expect_line(var, row, args),
                                            *self._exp_lines(var, row, args)),
                           comment="a stochastic step mixes λ first (λ̂ may be invalid)"))
        nodes: list[Node] = list(inner)
        for header in reversed(self._row_loops(var, set(), args)):
            nodes = [Block(header, tuple(nodes))]
        fn = Function(f"update_{name}", tuple(args.names), tuple(nodes),
                      self._conditional_doc(var), KERNEL)
        self.kernel_args[fn.name] = tuple(args.names)
        return fn

    def refresh_kernel(self) -> Function:
        """E[t] (and exp(E[log])) of every global from its natural parameters (warm starts)."""
        args = ArgRecorder()
        body: list[Node] = []
        for name in self.plan.globals:
            var = self.var(name)
            row = self._row_index(var, args)
            nodes: list[Node] = [self._expect_line(var, row, args),
                                 *self._exp_lines(var, row, args)]
            for header in reversed(self._row_loops(var, set(), args)):
                nodes = [Block(header, tuple(nodes))]
            body += nodes
        fn = Function("refresh_globals", tuple(args.names), tuple(body),
                      "Expected statistics of the globals from their natural parameters.", KERNEL)
        self.kernel_args[fn.name] = tuple(args.names)
        return fn

    def elbo_global_kernel(self) -> Function:
        """Σ E[log p] of factors outside the data plate and via the accumulators, plus the
        global entropies."""
        args = ArgRecorder()
        body: list[Node] = [Line("elbo = 0.0")]
        for fi, factor in enumerate(self.analysis.factors):
            inside = self.plan.in_data_plate(factor.plates)
            body.append(Comment(f"E[log p({factor.child} | ...)]  ({self.factor_comment(factor)})"))
            for mi, monomial in enumerate(factor.monomials):
                acc = self.plan.accumulator_for(fi, mi)
                if inside and acc is None:
                    continue  # summed in the local step
                if acc is not None:
                    acc_slot = self._acc_slot(acc)
                    slots = (acc_slot,) + acc.glob
                    plates: tuple[str, ...] = _key_plates(acc)
                else:
                    slots = monomial.slots
                    plates = factor.plates
                body += emit_contraction(
                    self.layout, args,
                    Contraction(monomial.coef, slots, plates, dict(factor.index_dims)),
                    "elbo", (), {}, {},
                )
        for name in self.plan.globals:
            var = self.var(name)
            row = self._row_index(var, args)
            nodes: list[Node] = [Line(f"elbo += {self._entropy_expr(var, row, args)}")]
            for header in reversed(self._row_loops(var, set(), args)):
                nodes = [Block(header, tuple(nodes))]
            body.append(Comment(f"entropy of q({name})"))
            body += nodes
        body.append(Line("return elbo"))
        fn = Function("elbo_global", tuple(args.names), tuple(body),
                      "ELBO terms of the global factors (see elbo_terms in the README).", KERNEL)
        self.kernel_args[fn.name] = tuple(args.names)
        return fn

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
        drivers: list[Node] = [self.prepare_function(), self.result_function()]
        if self.plan.learnable:
            drivers.insert(1, self.learn_function())
        drivers += interface_nodes(self)
        drivers += entry_points(self)
        if klc is not None:
            drivers += klc.functions()
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
            *(klc.constants() if klc is not None else []),
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


def _key_plates(acc) -> tuple[str, ...]:
    """Inner plates an accumulator keeps (``@plate`` entries of its key)."""
    return tuple(k[1:] for k in acc.key if k.startswith("@"))


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


def _summed_axes(ref: RData) -> tuple[list[int], list[int]]:
    """Axes of data ``ref`` that take a sum's index and lie before one of its plate axes
    (A[k, i]), and where they go to come last; ([], []) when they are last already."""
    summed = [a for a, i in enumerate(ref.indices) if isinstance(i, SumIndex)]
    plates = [a for a, i in enumerate(ref.indices) if not isinstance(i, SumIndex)]
    if not summed or not plates or max(plates) < min(summed):
        return [], []
    return summed, list(range(len(ref.indices) - len(summed), len(ref.indices)))


def _data_names(expr: RExpr) -> list[str]:
    """The covariates (``data``) a known expression reads, in order. (Observed variables
    under a log are positive by their support: a Gamma's or Beta's value.)"""
    return list(dict.fromkeys(ref.name for ref in data_refs(expr)))


def _ident(fn: str, *operands: RExpr) -> str:
    parts = [fn] if fn and fn != "value" else []
    for op in operands:
        parts.append(_ident_expr(op))
    text = "_".join(p for p in parts if p)
    return text or "c"


def _ident_expr(expr: RExpr) -> str:
    if isinstance(expr, (RHyper, RVar, RData, RDimSize)):
        return expr.name
    if isinstance(expr, RConst):
        return "c"
    if isinstance(expr, RRepeat):
        return _ident_expr(expr.value)
    if isinstance(expr, RBin):
        return f"{_ident_expr(expr.left)}_{_ident_expr(expr.right)}"
    if isinstance(expr, RNeg):
        return _ident_expr(expr.operand)
    if isinstance(expr, RCall):
        return expr.func + "_" + "_".join(_ident_expr(a) for a in expr.args)
    return "c"


def _np(expr: RExpr, prefix: str = "") -> str:
    """numpy source for a known expression (hyperparameters, data, dims); ``prefix`` reads
    the names from the state (``s.``)."""
    if isinstance(expr, RConst):
        return repr(float(expr.value))
    if isinstance(expr, RData) and _summed_axes(expr)[0]:
        # the sum's index before a plate's: the summed axes moved last, as the known reads them
        source, destination = _summed_axes(expr)
        return (f"np.ascontiguousarray(np.moveaxis({prefix}{expr.name}, {source!r}, "
                f"{destination!r}))")
    if isinstance(expr, (RHyper, RVar, RData)):
        return prefix + expr.name
    if isinstance(expr, RDimSize):
        return prefix + dim_name(expr.name)
    if isinstance(expr, RRepeat):
        return f"np.full({prefix}{dim_name(expr.dim)}, {_np(expr.value, prefix)})"
    if isinstance(expr, RNeg):
        return f"(-{_np(expr.operand, prefix)})"
    if isinstance(expr, RBin):
        return f"({_np(expr.left, prefix)} {expr.op} {_np(expr.right, prefix)})"
    if isinstance(expr, RVector):
        return "np.array([" + ", ".join(_np(i, prefix) for i in expr.items) + "])"
    if isinstance(expr, RCall):
        a = [_np(x, prefix) for x in expr.args]
        if expr.func in ("eye", "zeros", "ones", "full") and isinstance(expr.args[0], RConst):
            a[0] = str(int(expr.args[0].value))  # a literal size (eye(2))
        if expr.func == "eye":
            return f"np.eye({a[0]})"
        if expr.func == "zeros":
            return f"np.zeros({a[0]})"
        if expr.func == "ones":
            return f"np.ones({a[0]})"
        if expr.func == "full":
            return f"np.full({a[0]}, {a[1]})"
        if expr.func in ("exp", "log"):
            return f"np.{expr.func}({a[0]})"
        if expr.func == "reciprocal":
            return f"(1.0 / {a[0]})"
        if expr.func == "dot":
            return f"np.sum({a[0]} * {a[1]}, axis=-1)"
    raise AssertionError(render_expr(expr))


def generate_mf(plan: InferencePlan) -> str:
    """The source text of the mean-field module for ``plan``."""
    return print_module(MeanFieldEmitter(plan).module())
