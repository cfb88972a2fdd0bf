"""The start a fit takes, decided at lowering (``lower`` records it in the KernelPlan):
which globals a random start moves, whether the default is the k-means++ seeds, random
pseudo-counts and draws, or the prior (and why), and where KLC-CG's θ starts.
"""

from __future__ import annotations

from ..families import FAMILIES
from ..model import Model, RBin, RCall, RVar, sub_exprs
from ..plan import InferencePlan
from ..terms import Known, Stat


def family(model: Model, name: str) -> str:
    """The variational family of a variable ('' for an observed one)."""
    return FAMILIES[model.var(name).family].variational or ""


def seeded_chains(plan: InferencePlan) -> tuple[str, ...]:
    """MarkovChain locals started from seed steps (not in a model that also seeds items
    of a categorical local: one seed array serves one of the two)."""
    families = [family(plan.model, n) for n in plan.locals]
    if "categorical" in families:
        return ()
    return tuple(n for n, f in zip(plan.locals, families, strict=True) if f == "markov")


def gamma_products(plan: InferencePlan) -> tuple[str, ...]:
    """Gamma globals whose components a term sums over, each multiplied by another
    latent's value (Σ_k θ_k·W_fk·H_kt): such exchangeable components only separate from a
    random start."""
    plates = {p.name for p in plan.model.plates}
    found: set[str] = set()
    for factor in plan.analysis.factors:
        for monomial in factor.monomials:
            values = [s for s in monomial.slots if isinstance(s, Stat) and s.stat == "value"]
            # a gate's letter (lam[region[n]]) picks one row: only a summed letter (k) has
            # exchangeable parts
            gates = {t for s in monomial.slots for t in s.tensor
                     if (s.fn if isinstance(s, Known) else s.stat) == "onehot"}
            if len({s.var for s in values}) > 1:
                found.update(s.var for s in values if s.var in plan.globals
                             and family(plan.model, s.var) == "gamma"
                             and any(i not in plates and i not in gates for i in s.index))
    return tuple(sorted(found))


def drawn_means(plan: InferencePlan) -> tuple[str, ...]:
    """Normal/MVN globals whose means a random start draws from the prior: those multiplied
    by another latent in an argument (PMF's dot(u, v), factor analysis' W·z: a start at the
    prior mean 0 is a fixed point of their updates) and a mixture's components (gated: the
    draws tell them apart). Any other (a hierarchy's population mean, regression weights)
    has no symmetry to break, and a draw from a vague prior (sd 100) only starts it far
    away, which stochastic steps take thousands of steps to undo (issue 18, finding 3)."""
    model = plan.model
    multiplied: set[str] = set()
    for var in model.variables:
        for arg in var.args:
            multiplied |= _multiplied_latents(model, arg)
    gated = _gated_globals(plan)
    return tuple(n for n in plan.globals if family(model, n) in ("normal", "mvn")
                 and (n in multiplied or n in gated))


def _multiplied_latents(model: Model, expr) -> set[str]:
    """The latents of ``expr`` that a product (``*``, ``dot``) multiplies by another latent."""
    found: set[str] = set()
    if (isinstance(expr, RBin) and expr.op == "*") or (isinstance(expr, RCall)
                                                      and expr.func == "dot"):
        sides = [_latents(model, side) for side in sub_exprs(expr)]
        if sum(1 for side in sides if side) > 1:
            found = set().union(*sides)
    for child in sub_exprs(expr):
        found |= _multiplied_latents(model, child)
    return found


def _latents(model: Model, expr) -> set[str]:
    if isinstance(expr, RVar):
        return set() if model.var(expr.name).observed else {expr.name}
    return set().union(*(_latents(model, child) for child in sub_exprs(expr)))


def _gated_globals(plan: InferencePlan) -> set[str]:
    """Globals read at an index a latent categorical selects (a mixture's components; not
    those an integer covariate selects, as ``theta[group[n]]``)."""
    found: set[str] = set()
    latent = {v.name for v in plan.model.latents}
    for factor in plan.analysis.factors:
        gates = {letter: var for letter, var in factor.gates if var in latent}
        found.update(slot.var for monomial in factor.monomials for slot in monomial.slots
                     if isinstance(slot, Stat) and slot.var in plan.globals
                     and any(i in gates for i in slot.index))
    return found


def _item_mixture(plan: InferencePlan) -> bool:
    """Every assignment (categorical or chain local) is one per data item: a mixture, not
    a topic model's assignment per token or a chain's per step."""
    model = plan.model
    assigned = [n for n in plan.locals if family(model, n) in ("categorical", "markov")]
    return bool(assigned) and all(len(model.var(n).plates) == 1 for n in assigned)


def klc_start(plan: InferencePlan, start: str) -> str:
    """'seeds' when the default start seeds and every q(Z) KLC-CG parameterises is kept
    per item (its natural parameters, the log-probabilities θ starts from, are in the
    state after a local step); else 'random' (N(0, 1) logits)."""
    collapse = plan.collapse
    if collapse is None or start != "seeds":
        return "random"
    kept = all(z in plan.kept_locals for z in collapse.parameterised)
    return "seeds" if kept else "random"


def default_start(plan: InferencePlan, chains, gamma, drawn) -> tuple[str, str]:
    """Seed steps for a chain; 'random' when the gated globals are all count-type (Dirichlet
    or Beta) and the assignments sit below the items (topic models), else seeds where there is
    something to seed, else a random start where a symmetry needs breaking; and why.
    Mixtures with one assignment per item start from seeds under every method: from random
    pseudo-counts SVI, SSVI-A and KLC end in a merged component on 2 of 5 sparse count
    mixtures where seeds reach MF's optimum on 4 or 5 (benchmarks/RESULTS.md, "Default
    start"). A MarkovChain seeds steps also when its emissions are counts: from random
    pseudo-counts its states stay near the symmetric start, where every state emits the
    data's marginal, and on small data do not leave it (issue 18's random chains of 4 or 10
    sequences, one categorical emission, 24 data sets: 15 of 48 MF and SVI fits below ARI
    0.9, SVI merging the states into one in 4 data sets; from seed steps 4 of 48, MF and SVI
    alike on two data sets of 4 sequences, ARI 0.85 and 0.87). On the HMM of
    tests/test_hmm.py (3,600 steps) both starts reach the best ELBO in 6 of 8 seeds with
    K = 3; with K = 8 states over 6 symbols the seeds end 0.7% lower (a seed step per state,
    but only 6 distinct symbols)."""
    model = plan.model
    gated = _gated_globals(plan)
    if chains:  # whatever the emissions: see the docstring's measurements
        return "seeds", "k-means++ seed steps for the chain's states"
    if (gated and all(family(model, n) in ("dirichlet", "beta") for n in gated)
            and not _item_mixture(plan)):
        return "random", "random pseudo-counts: assignments below the items, gated counts"
    if any(family(model, n) == "categorical" for n in plan.locals):
        return "seeds", "k-means++ seed items for the categorical locals"
    if drawn:
        return "random", "Normal/MVN means drawn from the prior: breaks the symmetry"
    if gamma:
        return "random", ("Gamma components of a summed product start apart: breaks their "
                          "symmetry")
    return "prior", "nothing to break: every global starts at its prior"
