"""StickBreaking(alpha, K): the truncated stick-breaking (GEM) weights of a Dirichlet process.

    v_k ~ Beta(1, α) for k < K,  v_K = 1,   π_k = v_k Π_{j<k} (1 − v_j)

(Sethuraman 1994; truncated as in Blei & Jordan 2006, "Variational inference for Dirichlet
process mixtures", §3–4). A model file writes ``pi ~ StickBreaking(alpha, K)`` wherever a
Dirichlet vector would select a component (``z[n] ~ Categorical(pi)``). The compiler
replaces ``pi`` by its Beta sticks (``cemodel.augment_sticks``), through which every read
log π_k = log v_k + Σ_{j<k} log(1 − v_j) is linear in the sticks' statistics; so this
family has no log density of its own: it never reaches the conjugacy analysis.
"""

from .base import SHAPE_SMALLEST, FamilySpec, Param

SPEC = FamilySpec(
    name="StickBreaking",
    # StickBreaking(alpha, K): the concentration repeated along the truncation K (one per stick)
    params=(Param("alpha", 1, "positive", SHAPE_SMALLEST),),
    support="simplex",
    event_rank=1,
    variational="sticks",
    stats=(("log", 1),),
    shape_from="alpha",
    log_density=(),
    doc="StickBreaking(alpha, K): Dirichlet-process weights truncated at K components",
)
