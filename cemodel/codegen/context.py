"""EmitContext: what every kernel emitter reads (the plan, its KernelPlan and the array
Layout) and the helpers they share: rows and their loops, messages, expectations and
entropies, calls from one kernel to another."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from ..families import CHAIN_POSTERIORS
from ..model import Model, VarDef
from ..plan import InferencePlan
from ..render import conditional_text
from ..terms import Factor, Known, Monomial, Stat, letter_text
from .loops import (
    ArgRecorder,
    Contraction,
    Layout,
    dim_name,
    emit_contraction,
    plate_loop,
    plate_var,
)
from .lowering import KernelPlan, family, messages_to, stats, target_bindings
from .polyagamma import pg_count
from .pycode import Block, Line, Module, Node, print_module

# error_model="numpy": a division by zero gives inf or nan (which the drivers' finiteness checks
# report) instead of a check and a branch to raise ZeroDivisionError, which kept loops with a
# division in them from vectorizing (3x on the Dirichlet's exp(E[log]) row, issue 22)
KERNEL = ("njit(cache=True, nogil=True, error_model=\"numpy\", "
          "fastmath={\"reassoc\", \"contract\", \"arcp\"})")

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
    "polyagamma": "{E_value} = rt.polyagamma_expected_stats({lam_value}, {total})",
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
    "polyagamma": "rt.polyagamma_log_normalizer({lam_value}, {total})",
    "normal_gamma": "rt.normal_gamma_log_normalizer({lam_log}, {lam_value}, {lam_prec_mean}, "
                    "{lam_quad})",
    "normal_wishart": "rt.normal_wishart_log_normalizer({lam_value}, {lam_logdet}, "
                      "{lam_prec_mean}, {lam_quad})",
}


def pre_slot(pre: str, key: tuple[str, ...]) -> Known:
    """A precomputed product read as a known array indexed by its letters."""
    return Known(pre, (), key, ())


def acc_slot(acc) -> Known:
    """An accumulator read as a known array indexed by its key letters (a per-entry one
    first by the data entry: laid out as the data over its plates)."""
    return Known(acc.name, (), acc.key, acc.plates)


def entry_slots(acc) -> tuple[Known, ...]:
    """The one-hots of observed indices that bind a per-entry accumulator's letters, which a
    contraction reading it binds from the data (``plan.Accumulator.entries``)."""
    return tuple(s for s in acc.local if isinstance(s, Known) and s.fn == "onehot"
                 and s.tensor and s.tensor[0] in acc.entries)


def emit_context(plan: InferencePlan, kplan: KernelPlan) -> EmitContext:
    """The context of ``plan``'s kernels: its Layout knows every known's name up front,
    the precomputed message parts and the accumulators read as knowns included."""
    names = {key: name for key, (name, _) in kplan.knowns.items()}
    for pre, _, _, key in kplan.partial.values():
        names[pre_slot(pre, key).key] = pre
    for acc in plan.accumulators:
        names[acc_slot(acc).key] = acc.name
    return EmitContext(plan, kplan, Layout(plan.model, MappingProxyType(names), kplan.scratch))


@dataclass(frozen=True)
class EmitContext:
    """What a kernel emitter reads: the plan, what lowering decided, the array layout."""

    plan: InferencePlan
    kplan: KernelPlan
    layout: Layout

    # -- the model ---------------------------------------------------------------------
    @property
    def model(self) -> Model:
        return self.plan.model

    @property
    def item(self) -> str:
        """The loop variable of the data plate: the current item."""
        return plate_var(self.model.data_plate)

    def var(self, name: str) -> VarDef:
        return self.model.var(name)

    def family(self, name: str) -> str:
        return family(self.model, name)

    def stats(self, name: str) -> tuple[tuple[str, int], ...]:
        return stats(self.model, name)

    def factor_comment(self, factor: Factor) -> str:
        span = factor.span
        return f"{self.model.source.filename}:{span.line}:{span.column}"

    def conditional_doc(self, var: VarDef) -> str:
        """A kernel's docstring: the conditional it computes and the model line."""
        span = var.span
        where = f"{self.model.source.filename}:{span.line}:{span.column}"
        return f"{conditional_text(self.plan, var.name)}\n\n({where})"

    def messages_to(self, name: str):
        return messages_to(self.plan, name)

    def target_bindings(self, var: VarDef, target: Stat) -> tuple[dict, dict]:
        return target_bindings(self.model, var, target)

    # -- rows ----------------------------------------------------------------------------
    def row_loops(self, var: VarDef, skip: set[str], args: ArgRecorder) -> list[str]:
        """Loop headers over the rows of ``var`` in the plates not in ``skip``."""
        return [plate_loop(self.model, plate, args) for plate in var.plates if plate not in skip]

    def in_rows(self, var: VarDef, skip: set[str], nodes: list[Node],
                args: ArgRecorder) -> list[Node]:
        """``nodes`` inside the loops over the rows of ``var`` (plates in ``skip`` bound)."""
        for header in reversed(self.row_loops(var, skip, args)):
            nodes = [Block(header, tuple(nodes))]
        return nodes

    def item_rows(self, var: VarDef, nodes: list[Node], args: ArgRecorder) -> list[Node]:
        """``nodes`` inside the loops over the current item's rows of ``var``."""
        return self.in_rows(var, {self.model.data_plate}, nodes, args)

    def row_weight(self, var: VarDef, args: ArgRecorder) -> str:
        """A row's count (a token's in a bag of words), else 1."""
        for plate in var.plates[1:]:
            if self.model.plate(plate).ragged:
                return f"{args.use(plate + '_weight')}[{plate_var(plate)}]"
        return "1.0"

    def row_index(self, var: VarDef, args: ArgRecorder) -> str:
        return ", ".join(self.layout.row(var.name, var.plates, {}, args))

    def categories(self, var: VarDef) -> str:
        """The size of a categorical's or a split's last axis (its categories or terms)."""
        return dim_name(var.categories if var.categories is not None else var.shape[0])

    def split_total(self, var: VarDef, args: ArgRecorder) -> str:
        """The observed count that the split counts ``var`` add up to, at the row."""
        of = self.var(self.model.introduced_for(var.name).of)
        index = self.layout.data_row(of.plates, args)
        return f"{args.use(of.name)}[{', '.join(index)}]"

    def bases(self, nodes: list[Node], args: ArgRecorder) -> list[Node]:
        """``base_p = p_ptr[item]`` for each ragged plate whose scratch arrays the nodes read."""
        text = print_module(Module("", (), tuple(nodes)))
        out: list[Node] = []
        for plate in self.model.plates:
            if plate.ragged and f"base_{plate.name}" in text:
                ptr = args.use(f"{plate.name}_ptr")
                out.append(Line(f"base_{plate.name} = {ptr}[{self.item}]"))
        return out

    # -- expectations and entropies -------------------------------------------------------
    def expect_line(self, var: VarDef, row: str, args: ArgRecorder) -> Line:
        """E[t] of the row from its natural parameters."""
        names = {}
        for stat, _ in self.stats(var.name):
            names[f"lam_{stat}"] = args.use(self.layout.lam(var.name, stat)) + f"[{row}]"
            names[f"E_{stat}"] = args.use(self.layout.E(var.name, stat)) + f"[{row}]"
        if self.family(var.name) == "split":  # E[c] = n·φ, n the observed count it splits
            names["total"] = self.split_total(var, args)
        if self.family(var.name) == "polyagamma":  # PG(b, c): b of the count it belongs to
            names["total"] = pg_count(self.model, self.layout, var, args)
        return Line(_ROW_EXPECT[self.family(var.name)].format(**names))

    def transposed_after_rows(self, var: VarDef) -> bool:
        """A global with one row per element of one plate keeps its transposed copies up to
        date after its rows (``exp_after_rows``), not row by row."""
        return (var.name in self.plan.globals and len(var.plates) == 1 and len(var.shape) == 1
                and True in self.kplan.exp_needed.get(var.name, ()))

    def exp_after_rows(self, var: VarDef, args: ArgRecorder) -> list[Node]:
        """ET = E[log ·]ᵀ and XT = exp(E[log ·])ᵀ of a whole global, by tiles (a transposed
        store per entry, row by row, missed the cache every time)."""
        if not self.transposed_after_rows(var):
            return []
        E = args.use(self.layout.E(var.name, "log"))
        XT, ET = args.use(f"XT_{var.name}_log"), args.use(f"ET_{var.name}_log")
        nonpositive = self.family(var.name) in ("dirichlet", "beta")
        why = "E[log x] ≤ 0: exp without a library call" if nonpositive else ""
        return [Line(f"rt.transpose_exp({E}, {ET}, {XT}, {nonpositive})", why)]

    def exp_lines(self, var: VarDef, row: str, args: ArgRecorder) -> list[Node]:
        """Keep exp(E[log ·]) in step with E wherever E[log ·] is computed (a global's
        transposed copies after its rows, ``exp_after_rows``)."""
        nodes: list[Node] = []
        # E[log x] ≤ 0 for a probability: exp without a library call, which vectorizes
        exp = ("rt.exp_nonpositive" if self.family(var.name) in ("dirichlet", "beta")
               else "np.exp")
        for transposed in sorted(self.kplan.exp_needed.get(var.name, ())):
            if transposed and self.transposed_after_rows(var):
                continue
            E = args.use(self.layout.E(var.name, "log"))
            if not transposed:
                X = args.use(f"X_{var.name}_log")
                if not var.shape:  # one value per row (a Gamma over plates)
                    nodes.append(Line(f"{X}[{row}] = {exp}({E}[{row}])"))
                    continue
                size = args.use(dim_name(var.shape[0]))
                nodes.append(Block(f"for t in range({size})",
                                   (Line(f"{X}[{row}, t] = {exp}({E}[{row}, t])"),)))
                continue
            XT = args.use(f"XT_{var.name}_log")
            ET = args.use(f"ET_{var.name}_log")
            size = args.use(dim_name(var.shape[0]))
            nodes.append(Block(f"for t in range({size})", (
                Line(f"{ET}[t, {row}] = {E}[{row}, t]"),
                Line(f"{XT}[t, {row}] = {exp}({E}[{row}, t])"),
            )))
        return nodes

    def entropy_expr(self, var: VarDef, row: str, args: ArgRecorder) -> str:
        """H = A(λ) − Σ_s λ_s·E[t_s]; for a categorical, −Σ q log q (needs no λ)."""
        family_ = self.family(var.name)
        if family_ in ("categorical", "split") and var.name in self.kplan.product_form:
            return f"{args.use('H_' + var.name)}[{row}]"
        if family_ == "categorical":
            return f"rt.categorical_entropy({args.use(self.layout.E(var.name, 'onehot'))}[{row}])"
        if family_ == "split":
            return (f"rt.split_entropy({args.use(self.layout.lam(var.name, 'value'))}[{row}], "
                    f"{args.use(self.layout.E(var.name, 'value'))}[{row}])")
        names = {}
        terms = []
        for stat, rank in self.stats(var.name):
            lam = args.use(self.layout.lam(var.name, stat)) + f"[{row}]"
            E = args.use(self.layout.E(var.name, stat)) + f"[{row}]"
            names[f"lam_{stat}"] = lam
            if family_ == "polyagamma":
                names["total"] = pg_count(self.model, self.layout, var, args)
            terms.append(f"rt.frobenius({lam}, {E})" if rank else f"{lam} * {E}")
        return _LOG_NORMALIZER[family_].format(**names) + " - " + " - ".join(terms)

    def entropy_nodes(self, names, target: str, args: ArgRecorder) -> list[Node]:
        """``target += H[q(name)]`` for every row of the current item (ragged rows weighted)."""
        out: list[Node] = []
        for name in names:
            var = self.var(name)
            if self.family(name) in CHAIN_POSTERIORS:  # the whole chain's, from its smoother
                out.append(Line(f"{target} += {args.use('H_' + name)}[0]"))
                continue
            row = self.row_index(var, args)
            weight = ""
            for plate in var.plates[1:]:
                if self.model.plate(plate).ragged:
                    weight = f"{args.use(plate + '_weight')}[{plate_var(plate)}] * "
            out += self.item_rows(var, [
                Line(f"{target} += {weight}({self.entropy_expr(var, row, args)})")], args)
        return out

    # -- messages ------------------------------------------------------------------------
    def contribution(self, factor: Factor, monomial: Monomial, target: Stat, var: VarDef,
                     args: ArgRecorder, extra_bound: dict[str, str],
                     weighted: bool = True, transposed: bool = False) -> list[Node]:
        """The loop nest adding one message to the natural parameter of ``var``'s row;
        ``transposed``: a global's E[log ·] read from its transposed copy where it keeps
        one (a local's row reads one category's values: contiguous there, and a lazy SVI
        step keeps only the copies the local step reads up to date)."""
        slots = monomial.without(target)
        plates, letters = self.target_bindings(var, target)
        plates.update(extra_bound)
        lam = args.use(self.layout.lam(var.name, target.stat))
        row = self.layout.row(var.name, var.plates, {}, args)
        return emit_contraction(
            self.layout, args,
            Contraction(monomial.coef, slots, factor.plates, dict(factor.index_dims)),
            lam, tuple(row) + target.tensor, plates, letters, weighted,
            reads=dict(self.kplan.log_arrays) if transposed else None,
        )

    def message_env(self, var: VarDef, m: int, message, factor: Factor, monomial: Monomial,
                    args: ArgRecorder, nodes: list[Node], comment: bool = False) -> dict:
        """Index environment of product message ``m``: the target's plates and gates bound to
        the row, its category letter as ``t_c``, and each one-hot data letter bound to the
        observed value by an ``obs{m}_<letter> = ...`` line appended to ``nodes``."""
        plates, letters = self.target_bindings(var, message.target)
        env = dict(letters)
        env.update({f"@{p}": e for p, e in plates.items()})
        env[message.target.tensor[0]] = "t_c"
        for slot in monomial.without(message.target):
            if isinstance(slot, Known):  # one-hot data: the observed category
                ref = slot.operands[0]
                index = self.layout.data_index(slot.plates, env, args)
                name = f"obs{m}_{letter_text(slot.tensor[0])}"
                note = f"{factor.child} ({self.factor_comment(factor)})" if comment else ""
                nodes.append(Line(f"{name} = {args.use(ref.name)}[{', '.join(index)}]", note))
                env[slot.tensor[0]] = name
        return env

    # -- calls between kernels -------------------------------------------------------------
    def no_sums(self) -> dict[str, str]:
        """Overrides turning every implicit local's sums off in an update."""
        return {f"use_sums_{z}": "False" for z in self.kplan.implicit}

    def all_messages(self) -> dict[str, str]:
        """Overrides for an update from all its messages, the children's included."""
        return {"with_children": "True", "exp_only": "False", "entropy": "True",
                **self.no_sums()}

    def call(self, callees: Mapping[str, tuple[str, ...]], kernel: str,
             overrides: dict[str, str], args: ArgRecorder) -> str:
        """A kernel call from inside another kernel: the caller's names, or ``overrides``
        (``callees``: the parameters of the kernels built so far)."""
        call_args = []
        for a in callees[kernel]:
            if a in overrides:
                call_args.append(overrides[a])
            elif a == self.item or a.startswith("use_sums_"):
                call_args.append(a)
            else:
                call_args.append(args.use(a))
        return f"{kernel}({', '.join(call_args)})"

    def call_update(self, callees: Mapping[str, tuple[str, ...]], name: str,
                    with_children: str, args: ArgRecorder, exp_only: str = "False",
                    entropy: str = "True") -> Line:
        """``entropy``: whether a product-form update also writes λ, log Σ_c exp λ_c and H
        (the ELBO's and the restart guard's), or q alone."""
        overrides = {"with_children": with_children, "exp_only": exp_only, "entropy": entropy}
        if with_children == "False":
            overrides.update(self.no_sums())
        return Line(self.call(callees, f"update_{name}", overrides, args))
