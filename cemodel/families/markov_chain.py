"""MarkovChain(init, transition): a chain of categorical states along the innermost plate.

``z[s, t] ~ MarkovChain(pi0, A)`` inside ``plate seqs s in S: plate steps t in T[s]`` means
z[s, 0] ~ Categorical(pi0) and z[s, t] ~ Categorical(A[z[s, t − 1]]) for t ≥ 1, with A a
K × K matrix (a plated variable ``A[k] ~ Dirichlet(...)`` passed whole, or a hyperparameter).

Statistics, one per step t (so that the log density is a sum over the steps):
  onehot(x)_k       [z_t = k]                      (what the emissions see, as a Categorical)
  first(x)_k        [t = 0]·[z_t = k]              (the initial state)
  pair(x)_{j k}     [t ≥ 1]·[z_{t−1} = j]·[z_t = k] (the transitions into step t)
The variational posterior is the exact chain given the rest (forward–backward), not a
product over steps: its statistics are the step marginals and the pairwise marginals.
"""

from .base import CHILD, FamilySpec, Param, t, v

x = CHILD
SPEC = FamilySpec(
    name="MarkovChain",
    params=(Param("init", 1, "simplex"), Param("transition", 2, "simplex")),
    support="category",
    event_rank=0,
    variational="markov",
    stats=(("onehot", 1), ("first", 1), ("pair", 2)),
    shape_from="init",
    # log p = Σ_k first_k log init_k + Σ_{j,k} pair_{jk} log transition_{jk}
    # (the row letter of the transition starts with "g": it selects a row, as a gate does)
    log_density=(
        t(1.0, v("first", x, "k"), v("log", "init", "k")),
        t(1.0, v("pair", x, "gj", "k"), v("log", "transition", "gj", "k")),
    ),
    doc="MarkovChain(init, transition): z[s, 0] ~ Categorical(init), z[s, t] ~ "
        "Categorical(transition[z[s, t - 1]]) along the innermost plate",
)
