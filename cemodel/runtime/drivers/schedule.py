"""The stochastic methods' step-size schedule and how long they run by default: ρ_t =
step_scale·(t + τ)^−κ, the epochs that forget the start, the small-data rule (issue 18) and
SSVI's warm-up."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

# the decaying schedule's defaults, and on a small data set: κ, τ and the fewest steps (of
# SVI and SVI+; of SSVI-A, whose sampled globals keep the step noisy, averaged; of SSVI, at
# κ = 0.7, τ = 10)
KAPPA, TAU = 0.7, 10.0
SMALL_KAPPA, SMALL_TAU, SMALL_STEPS, SMALL_SAMPLED_STEPS = 0.5, 1.0, 1000, 10000
SMALL_V_STEPS = 3000


def small_data_defaults(o: Any, n_total: int) -> None:
    """κ, τ and epochs where left at None. A data set is small when the default schedule
    needs more than MIN_EPOCHS epochs to forget its start (an epoch of fewer than ~10 steps).
    There ρ_t = (t + 10)^−0.7 sums to too little for a hierarchy's slow mode (issue 18,
    finding 3: on eight schools its precision, once small, recovers by a little each step;
    after 92, 1,000 and 3,000 steps E[τ] was 2.2, 1.8 and 1.3 MF sds below MF's), so the
    default is ρ_t = (t + 1)^−0.5, whose sum grows like 2√T, for at least 1,000 steps (500
    were short: 0.7 sds). Not SSVI: V's noise grows with ρ (a Normal global's precision ended
    37% above the exact posterior's, against within 15%). Elsewhere κ = 0.7, τ = 10 and
    default_epochs.

    SSVI-A's λ̂ stays noisy where the minibatch is the whole data set (it reads a draw β ~
    q(β)), and the last iterate keeps noise of order √ρ_T: on eight schools, against its exact
    fixed point (tests/test_stochastic_defaults.py), the last iterate had its means within
    0.5 of its sds in 4 of 10 seeds after 1,000 steps, 11 of 20 after 5,000, 13 of 20 after
    10,000 and 8 of 10 after 20,000. So on a small data set SSVI-A runs at least 10,000 steps
    and reports the average of the last half's iterates (``average``, as svi-avg): 17 of 20
    seeds within 0.5 sd (5,000 steps averaged: 15 of 20; 20,000: 10 of 10).

    SSVI keeps κ = 0.7, τ = 10 there and runs at least SMALL_V_STEPS = 3,000 steps: the default
    epochs (the start forgotten to 1e-3) left it far below MF on small mixtures, where SVI and
    SSVI-A reach MF's optimum (six data sets each, % of MF's ELBO below it: a 2-D
    three-component gmm.cem, 300 points, 8-11%; linear_regression.cem, 300 points, 1.2-3.0%;
    mixtures of two and three regressions, 800 and 120 points, 0.8-84% and 31-95%). With the
    warm-up of ``warmup_steps``, after 1,000 steps: 0.02-2.4% (4 of 6 within 0.1%), 0.01%, at
    most 0.04% and at most 0.07%; after 3,000: at most 0.02%, 0.01%, 0.02% and 0.04%."""
    if o.learning_rate != "adaptive" and o.kappa is None and o.tau is None:
        large_epochs = default_epochs(replace(o, kappa=KAPPA, tau=TAU), n_total)
        small = large_epochs > MIN_EPOCHS
        if small and o.apply_v and o.epochs is None:  # SSVI: the same schedule, longer
            per_epoch = steps_per_epoch(n_total, o.batch_size)
            o.epochs = max(large_epochs, -(-SMALL_V_STEPS // per_epoch))
        elif small and not o.apply_v:
            o.kappa, o.tau = SMALL_KAPPA, SMALL_TAU
            sampled = o.sample_globals and o.average is None
            if sampled:
                o.average = True
            if o.epochs is None:
                per_epoch = steps_per_epoch(n_total, o.batch_size)
                fewest = SMALL_SAMPLED_STEPS if sampled else SMALL_STEPS
                o.epochs = max(default_epochs(o, n_total), -(-fewest // per_epoch))
    o.average = bool(o.average)
    o.kappa = KAPPA if o.kappa is None else o.kappa
    o.tau = TAU if o.tau is None else o.tau
    o.learning_rate = o.learning_rate or "decay"
    if o.epochs is None:
        o.epochs = default_epochs(o, n_total)


# default_epochs: the start's weight ∏(1 − ρ_t) left in λ when the fit ends, and the bounds
START_WEIGHT, MIN_EPOCHS, MAX_EPOCHS = 1e-3, 10, 200
# warmup_steps: SSVI samples β once the start holds less than this of λ
SAMPLE_WEIGHT = 0.01


def _forgetting_steps(o: Any, weight: float, most: int) -> int:
    """The number of steps after which the start's weight ∏_{t≤T}(1 − ρ_t) in λ_T =
    Σ_t ρ_t ∏_{u>t}(1 − ρ_u) λ̂_t + ∏_t(1 − ρ_t) λ_0 is below ``weight`` (at most ``most``)."""
    log_weight, steps = 0.0, 0
    while log_weight > np.log(weight) and steps < most:
        steps += 1
        rho = o.step_scale * (steps + o.tau) ** (-o.kappa)
        if rho >= 1.0:  # the start is forgotten at once
            break
        log_weight += np.log1p(-rho)
    return steps


def steps_per_epoch(n_total: int, batch_size: int) -> int:
    """Minibatches in an epoch: the last one may be short; one for an empty data set."""
    return -(-n_total // batch_size) if n_total else 1


def default_epochs(o: Any, n_total: int) -> int:
    """At least 10 epochs, and enough steps that λ_T keeps less than 1e-3 of its start λ_0
    (at most 200 epochs). Ten epochs of a large data set are thousands of steps; of 300 items
    in batches of 256 they are 20, after which λ is still 9% its start (ρ_t = (t + 10)^−0.7),
    and SVI ends short of MF's optimum."""
    per_epoch = steps_per_epoch(n_total, o.batch_size)
    steps = _forgetting_steps(o, START_WEIGHT, MAX_EPOCHS * per_epoch)
    return max(MIN_EPOCHS, min(MAX_EPOCHS, -(-steps // per_epoch)))


def warmup_steps(o: Any, most: int = 10 ** 6) -> int:
    """SSVI's first steps are SVI's (the local step sees E[t(β)], V = I): at least one, and
    every step before which the start still holds SAMPLE_WEIGHT = 1% of λ (45 steps with
    ρ_t = (t + 10)^−0.7). The start (a mixture's: each component's q from one seed item and
    the vague prior) is far wider than the posterior; β drawn from it sends the local step
    anywhere (a 2-D mixture's components merged), and V's noise grows with the distance from
    the fixed point. Measured on a 2-D three-component gmm.cem, 10 seeds from the default
    start: within 1% of MF's ELBO in 3 with one SSVI-A step first (the rule before), 2 with
    16 SSVI-A steps (draws, V = I), 3 with 3 SVI steps, 7 with 6, 10 with 12, 16 and 24. Until
    the start held 10% (16 steps), small mixtures fitted for 1,000 steps still merged
    components in some seeds (six data sets each: 300 points of gmm.cem 0.2-5.6% below MF,
    mixtures of three and of two regressions one seed each 76% and 84% below); until 1%, 4 of
    6 within 0.1% (the others 1.0% and 2.4%) and every regression mixture within 0.07%. At
    most ``most`` (the fit's steps)."""
    return max(1, _forgetting_steps(o, SAMPLE_WEIGHT, most))
