"""GaussianChain(init_mean, init_precision, transition, precision): a linear-Gaussian chain.

``x[s, t] ~ GaussianChain(m0, P0, A, Q)`` inside ``plate seqs s in S: plate steps t in T[s]``
means x[s, 0] ~ N(m0, P0⁻¹) and x[s, t] ~ N(A x[s, t − 1], Q⁻¹) for t ≥ 1: both second
arguments are precision matrices, as in MultivariateNormal. With emissions linear in x_t
(``Normal(dot(c, x[s, t]), r)``, ``MultivariateNormal(...)``) it is a linear dynamical system.

Statistics, one per step t (so that the log density is a sum over the steps):
  value, outer                 x_t, x_t x_tᵀ                       (what the emissions see)
  start, start_value, start_outer     [t = 0], [t = 0]·x_t, [t = 0]·x_t x_tᵀ
  step, step_outer             [t ≥ 1], [t ≥ 1]·x_t x_tᵀ
  cross, prev_outer            [t ≥ 1]·x_t x_{t−1}ᵀ, [t ≥ 1]·x_{t−1} x_{t−1}ᵀ
The variational posterior is the exact Gaussian over the whole chain given the rest (the
Kalman/RTS smoother, ``cemodel.runtime.gaussian_chain``), not a product over steps.
"""

import math
from dataclasses import replace

from .base import CHILD, FamilySpec, Param, t, v

x = CHILD
_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)
SPEC = FamilySpec(
    name="GaussianChain",
    params=(Param("init_mean", 1, "real"), Param("init_precision", 2, "spd"),
            Param("transition", 2, "real"), Param("precision", 2, "spd")),
    support="vector",
    event_rank=1,
    variational="gaussian_chain",
    stats=(("value", 1), ("outer", 2), ("start", 0), ("start_value", 1), ("start_outer", 2),
           ("step", 0), ("step_outer", 2), ("cross", 2), ("prev_outer", 2)),
    shape_from="init_mean",
    # t = 0:  ½ log|P0| − ½ tr(P0 x xᵀ) + xᵀ P0 m0 − ½ m0ᵀ P0 m0
    # t ≥ 1:  ½ log|Q| − ½ tr(Q x_t x_tᵀ) + tr(Q A x_{t−1} x_tᵀ) − ½ tr(Aᵀ Q A x_{t−1} x_{t−1}ᵀ)
    # every step: −(D/2) log 2π
    log_density=(
        t(0.5, v("start", x), v("logdet", "init_precision")),
        t(-0.5, v("value", "init_precision", "i", "j"), v("start_outer", x, "i", "j")),
        t(1.0, v("start_value", x, "i"), v("value", "init_precision", "i", "j"),
          v("value", "init_mean", "j")),
        t(-0.5, v("start", x), v("value", "init_precision", "i", "j"),
          v("outer", "init_mean", "i", "j")),
        t(0.5, v("step", x), v("logdet", "precision")),
        t(-0.5, v("value", "precision", "i", "j"), v("step_outer", x, "i", "j")),
        t(1.0, v("value", "precision", "i", "j"), v("value", "transition", "j", "k"),
          v("cross", x, "i", "k")),
        t(-0.5, v("value", "precision", "i", "j"), v("value", "transition", "i", "k"),
          v("value", "transition", "j", "l"), v("prev_outer", x, "k", "l")),
        t(-_HALF_LOG_2PI, v("dim", x)),
    ),
    doc="GaussianChain(m0, P0, A, Q): x[s, 0] ~ N(m0, P0⁻¹), x[s, t] ~ N(A x[s, t − 1], Q⁻¹) "
        "along the innermost plate (P0 and Q are precision matrices)",
    twice_hint="; to learn the transition, make the state noise diagonal: "
               "GaussianChainDiag(m0, P0, A, q) reads one row of A per term",
)

# The same chain with a diagonal state noise, one precision per coordinate (Beal 2003, ch. 5:
# a diagonal, there the identity): x[s, t]_i ~ N(a_iᵀ x[s, t − 1], noise_i⁻¹). The rows a_i of
# A enter only through a_iᵀ x and a_i a_iᵀ, one row per term, so A may be latent (its rows
# MVN, ``A[i] ~ MultivariateNormal``), and so may the precisions (``noise[i] ~ Gamma``).
# t ≥ 1:  Σ_i [½ log q_i − ½ q_i x_ti² + q_i x_ti a_iᵀ x_{t−1}
#               − ½ q_i tr(a_i a_iᵀ x_{t−1} x_{t−1}ᵀ)]
DIAGONAL = replace(
    SPEC,
    name="GaussianChainDiag",
    params=SPEC.params[:3] + (Param("noise", 1, "positive"),),
    log_density=SPEC.log_density[:4] + (
        t(0.5, v("step", x), v("log", "noise", "i")),
        t(-0.5, v("value", "noise", "i"), v("step_outer", x, "i", "i")),
        t(1.0, v("value", "noise", "i"), v("value", "transition", "i", "k"),
          v("cross", x, "i", "k")),
        t(-0.5, v("value", "noise", "i"), v("outer", "transition", "i", "k", "l"),
          v("prev_outer", x, "k", "l")),
        SPEC.log_density[-1],
    ),
    doc="GaussianChainDiag(m0, P0, A, q): x[s, 0] ~ N(m0, P0⁻¹), x[s, t]_i ~ "
        "N((A x[s, t − 1])_i, 1/q_i) along the innermost plate; A may be latent by rows",
    twice_hint="",
)
