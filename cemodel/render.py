"""Readable math for a plan: each variable's complete conditional in its family's usual
parameters (``cemodel check`` prints it; generated kernels carry it in their docstrings).
A stage of its own so that both the report and the code generator read it."""

from __future__ import annotations

from collections import defaultdict

from .augment_logistic import count_text
from .augment_sticks import STICK_TEXT
from .families import FAMILIES
from .missing import PRESENT
from .model import RData, RRepeat, RVar, SumIndex
from .plan import InferencePlan
from .terms import Known, Slot, Stat, letter_text, render_expr

# usual parameter = scale · λ[stat] + offsets; offsets are (coefficient, symbol) with the
# symbol "" for the number one and "D" for the variable's dimension
_USUAL = {
    "dirichlet": ("Dirichlet(α)", [("α", "log", 1.0, [(1.0, "")])]),
    "categorical": ("Categorical", [("log q", "onehot", 1.0, [])]),
    "split": ("Multinomial", [("log φ", "value", 1.0, [])]),
    "beta": ("Beta(a, b)", [("a", "log", 1.0, [(1.0, "")]), ("b", "log1m", 1.0, [(1.0, "")])]),
    "gamma": ("Gamma(shape, rate)",
              [("shape", "log", 1.0, [(1.0, "")]), ("rate", "value", -1.0, [])]),
    "normal": ("Normal(mean, precision)",
               [("precision", "square", -2.0, []), ("precision·mean", "value", 1.0, [])]),
    "mvn": ("MultivariateNormal(mean, precision)",
            [("precision", "outer", -2.0, []), ("precision·mean", "value", 1.0, [])]),
    "wishart": ("Wishart(dof, scale)",
                [("dof", "logdet", 2.0, [(1.0, "D"), (1.0, "")]),
                 ("scale⁻¹", "value", -2.0, [])]),
    "bernoulli": ("Bernoulli", [("logit p", "value", 1.0, [])]),
    "polyagamma": ("PolyaGamma", [("c²", "value", -2.0, [])]),
    # a joint block (cemodel.blocks): τ ~ Gamma(shape, rate), μ | τ ~ Normal(mean, β·τ)
    "normal_gamma": ("Normal-Gamma(mean, β, shape, rate)",
                     [("β", "quad", -2.0, []), ("β·mean", "prec_mean", 1.0, []),
                      ("shape", "log", 1.0, [(0.5, "")]),
                      ("rate + β·mean²/2", "value", -1.0, [])]),
    "normal_wishart": ("Normal-Wishart(mean, β, dof, scale)",
                       [("β", "quad", -2.0, []), ("β·mean", "prec_mean", 1.0, []),
                        ("dof", "logdet", 2.0, [(1.0, "D")]),
                        ("scale⁻¹ + β·mean meanᵀ", "value", -2.0, [])]),
    "markov": ("MarkovChain, exact by forward–backward over each sequence, with log-potentials",
               [("emission", "onehot", 1.0, []), ("initial", "first", 1.0, []),
                ("transition", "pair", 1.0, [])]),
    # log q = Σ_t hᵀx_t − ½ xᵀJx: J's blocks J_tt (from x_t x_tᵀ and x_{t+1}'s transition) and
    # J_{t,t−1} (from x_t x_{t−1}ᵀ)
    "gaussian_chain": ("GaussianChain, exact by the Kalman/RTS smoother over each sequence: "
                       "h_t = h (+ h[first] at t = 0), J_tt = J + J[first] at t = 0 or "
                       "J[not first] after, + J[previous] of step t + 1, J_{t,t−1} = J[cross]",
                       [("h", "value", 1.0, []), ("h[first]", "start_value", 1.0, []),
                        ("J", "outer", -2.0, []), ("J[first]", "start_outer", -2.0, []),
                        ("J[not first]", "step_outer", -2.0, []),
                        ("J[previous]", "prev_outer", -2.0, []),
                        ("J[cross]", "cross", -1.0, [])]),
}

_LETTER_POOL = ("v", "i", "j", "l", "m", "u", "r", "s", "p", "q")


class _Renderer:
    """Text of the slots of one message, with index letters renamed for reading."""

    def __init__(self, plan: InferencePlan, factor_index: int, target: Stat) -> None:
        self.model = plan.model
        self.factor = plan.analysis.factors[factor_index]
        self.index_of = {p.name: p.index for p in self.model.plates}
        var = self.model.var(target.var)
        # the factor's plates / gates at the target become the target's own index letters
        self.bound: dict[str, str] = {}
        for own, entry in zip(var.plates, target.index, strict=True):
            self.bound[entry] = self.index_of[own]
        taken = set(self.index_of.values())
        self.names: dict[str, str] = {}
        pool = [x for x in _LETTER_POOL if x not in taken]
        # the target's letters first, so every term of one parameter shows the same letters
        letters = list(target.tensor) + [t for t, _ in self.factor.index_dims
                                         if t not in target.tensor]
        for letter in letters:
            if letter in self.bound or letter in self.names:
                continue
            self.names[letter] = pool.pop(0) if pool else letter_text(letter)
        self.gates = dict(self.factor.gates)
        self.substituted: set[str] = set()

    def substitute_data_indices(self, others: tuple[Slot, ...], target: Stat) -> tuple:
        """[w = l]·f_l summed over l is f at l = w: show the observed index itself. Not when
        l is the target's own index (``lam[z[n]]`` with z observed, at lam[k]): nothing is
        summed over k, and the indicator [z[n] = k] stays."""
        kept = []
        for slot in others:
            if (isinstance(slot, Known) and slot.fn == "onehot" and isinstance(
                    slot.operands[0], (RVar, RData)) and slot.tensor[0] not in target.tensor
                    and slot.tensor[0] not in self.bound):
                first = slot.operands[0]
                self.names[slot.tensor[0]] = self.ref(first.name,
                                                      tuple(i.plate for i in first.indices))
                self.substituted.add(slot.tensor[0])
                continue
            kept.append(slot)
        return tuple(kept)

    def letter(self, letter: str) -> str:
        return self.bound.get(letter, self.names.get(letter, letter_text(letter)))

    def plate_entry(self, entry: str) -> str:
        if entry in self.index_of:
            return self.bound.get(entry, self.index_of[entry])
        return self.letter(entry)

    def ref(self, name: str, entries: tuple[str, ...]) -> str:
        if not entries:
            return name
        return f"{name}[{', '.join(self.plate_entry(e) for e in entries)}]"

    def subscript(self, letters: tuple[str, ...]) -> str:
        if not letters:
            return ""
        shown = [self.letter(t) for t in letters]
        if all(len(s) == 1 for s in shown):
            return "_" + "".join(shown)
        return "_{" + ",".join(shown) + "}"

    def known(self, slot: Known) -> str:
        first = slot.operands[0] if slot.operands else None
        if slot.fn == "onehot" and isinstance(first, (RVar, RData)):
            ref = self.ref(first.name, tuple(i.plate for i in first.indices))
            return f"[{ref} = {self.letter(slot.tensor[0])}]"
        if slot.fn in STICK_TEXT:  # the indicators of log π (cemodel.augment_sticks)
            return STICK_TEXT[slot.fn].format(*map(self.letter, slot.tensor),
                                              K=render_expr(first))
        tensor = slot.tensor
        if isinstance(first, (RVar, RData)):
            # a sum's index taken by data reads the known at the sum's letter (its last axes)
            summed = sum(isinstance(i, SumIndex) for i in first.indices)
            sum_letters = iter(tensor[len(tensor) - summed:])
            tensor = tensor[:len(tensor) - summed]
            text = self.ref(first.name, tuple(
                next(sum_letters) if isinstance(i, SumIndex) else i.plate
                for i in first.indices))
        elif isinstance(first, RRepeat):
            text = render_expr(first.value)
            if slot.fn == "value":
                return text
        elif first is not None:
            text = render_expr(first)
        else:
            text = slot.fn
        sub = self.subscript(tensor)
        if slot.fn == "value":
            return text + sub
        if slot.fn == "dim":
            var = self.model.var(first.name) if isinstance(first, RVar) else None
            return str(var.shape[0]) if var is not None and var.shape else "dim"
        if slot.fn == "inv":
            return f"{text}⁻¹{sub}"
        args = text if isinstance(first, (RVar, RData)) and len(slot.operands) == 1 else (
            ", ".join(render_expr(o) for o in slot.operands))
        return f"{slot.fn}({args}){sub}"

    def stat(self, slot: Stat) -> str:
        ref = self.ref(slot.var, slot.index)
        sub = self.subscript(slot.tensor)
        if slot.stat == "onehot":
            return f"q({ref} = {self.letter(slot.tensor[0])})"
        if slot.stat == "first":  # a chain's initial state
            return f"[first step]·q({ref} = {self.letter(slot.tensor[0])})"
        if slot.stat == "pair":  # a chain's transition into this step
            step = self.plate_entry(slot.index[-1])
            before = ref[:-1] + " − 1]" if ref.endswith(f"{step}]") else f"{ref} before"
            return (f"q({before} = {self.letter(slot.tensor[0])}, "
                    f"{ref} = {self.letter(slot.tensor[1])})")
        block = self.model.block(slot.var)
        if block is not None:  # the joint statistics of a mean and its precision
            mean = self.ref(block.mean.name, slot.index)
            prec = self.ref(block.precision.name, slot.index)
            vector = bool(block.mean.shape)
            return {
                "log": f"E[log {prec}]",
                "logdet": f"E[log|{prec}|]",
                "value": f"E[{prec}]{sub}",
                "prec_mean": f"E[{prec} {mean}]{sub}" if vector else f"E[{prec}·{mean}]",
                "quad": f"E[{mean}ᵀ {prec} {mean}]" if vector else f"E[{prec}·{mean}²]",
            }[slot.stat]
        return {
            "log": f"E[log {ref}]{sub}",
            "log1m": f"E[log(1 − {ref})]",
            "value": f"E[{ref}]{sub}",
            "square": f"E[{ref}²]",
            "outer": f"E[{ref} {ref}ᵀ]{sub}",
            "logdet": f"E[log|{ref}|]",
            # a GaussianChain's statistics (ref is x[s, t])
            "start": f"[{ref} is first]", "start_value": f"E[{ref}]{sub}·[first]",
            "start_outer": f"E[{ref} {ref}ᵀ]{sub}·[first]", "step": f"[{ref} not first]",
            "step_outer": f"E[{ref} {ref}ᵀ]{sub}·[not first]",
            "cross": f"E[{ref} {ref[:-1]} − 1]ᵀ]{sub}", "prev_outer": f"E[{ref[:-1]} − 1] "
                                                                  f"{ref[:-1]} − 1]ᵀ]{sub}",
        }[slot.stat]

    def slot(self, slot: Slot) -> str:
        return self.known(slot) if isinstance(slot, Known) else self.stat(slot)

    def sums(self, others: tuple[Slot, ...], target: Stat) -> list[str]:
        summed = [self.index_of[p] for p in self.factor.plates if p not in self.bound]
        used: list[str] = []
        for slot in others:
            letters = list(slot.tensor)
            if isinstance(slot, Stat):
                letters += [e for e in slot.index if e not in self.index_of]
            for letter in letters:
                if (letter not in target.tensor and letter not in self.bound
                        and letter not in used and letter not in self.substituted):
                    used.append(letter)
        return summed + [self.letter(t) for t in used]


def _terms(plan: InferencePlan, name: str, stat: str) -> tuple[list[tuple[float, str]], str]:
    """(coefficient, text) terms of λ[stat] of ``name``, and the target's subscript."""
    cond = plan.analysis.conditional(name)
    terms: list[tuple[float, str]] = []
    subscript = ""
    for message in cond.messages:
        if message.target.stat != stat:
            continue
        factor = plan.analysis.factors[message.factor]
        monomial = factor.monomials[message.monomial]
        renderer = _Renderer(plan, message.factor, message.target)
        others = renderer.substitute_data_indices(monomial.without(message.target),
                                                  message.target)
        subscript = renderer.subscript(message.target.tensor)
        # (a missing entry's factor drops out: its present(y) multiplier is not shown)
        text = "·".join(renderer.slot(s) for s in others
                        if not (isinstance(s, Known) and s.fn == PRESENT))
        sums = renderer.sums(others, message.target)
        if sums:
            text = f"Σ_{{{','.join(sums)}}} {text or '1'}"
        terms.append((monomial.coef, text))
    return terms, subscript


def _combine(terms: list[tuple[float, str]]) -> str:
    merged: dict[str, float] = defaultdict(float)
    order: list[str] = []
    for coef, text in terms:
        if text not in merged:
            order.append(text)
        merged[text] += coef
    parts: list[str] = []
    for text in order:
        coef = merged[text]
        if abs(coef) < 1e-12:
            continue
        if text == "":
            body = f"{abs(coef):g}"
        elif abs(coef) == 1.0:
            body = text
        else:
            body = f"{abs(coef):g}·{text}"
        sign = "-" if coef < 0 else "+"
        parts.append((sign, body))
    if not parts:
        return "0"
    first_sign, first = parts[0]
    out = ("-" if first_sign == "-" else "") + first
    for sign, body in parts[1:]:
        out += f" {sign} {body}"
    return out


def conditional_text(plan: InferencePlan, name: str) -> str:
    """The complete conditional of ``name`` in its family's usual parameters."""
    var = plan.model.var(name)
    family = FAMILIES[var.family].variational or ""
    title, params = _USUAL[family]
    ref = name if not var.plates else (
        f"{name}[{', '.join(plan.model.plate(p).index for p in var.plates)}]")
    introduced = plan.model.introduced_for(name)
    if introduced is not None and family == "polyagamma":  # PG(b, c), b from y's family
        title = f"{title}({count_text(plan.model, plan.model.var(introduced.of))}, c)"
    elif introduced is not None and family == "split":  # Multinomial(y, φ) over y's rate
        of = plan.model.var(introduced.of)
        total = introduced.of if not of.plates else (
            f"{introduced.of}[{', '.join(plan.model.plate(p).index for p in of.plates)}]")
        title = f"{title}({total}, φ), E[{ref}] = {total}·φ"
    lines = [f"q({ref}) = {title}"]
    for label, stat, scale, offsets in params:
        terms, subscript = _terms(plan, name, stat)
        scaled = [(scale * coef, text) for coef, text in terms]
        for coef, symbol in offsets:
            if symbol == "D":
                symbol = str(var.shape[0])
            scaled.append((coef, symbol))
        text = _combine(scaled)
        if family == "categorical":
            lines.append(f"    log q({ref} = {subscript[1:]}) = {text} + const")
        elif family == "split":
            lines.append(f"    log φ{subscript} = {text} + const")
        else:
            lines.append(f"    {label}{subscript} = {text}")
    return "\n".join(lines)
