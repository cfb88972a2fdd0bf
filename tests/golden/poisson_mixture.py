"""poisson_mixture: the model (kernels, data layout, start) for cemodel.runtime.drivers, by cemodel 0.1.0.

Model file: poisson_mixture.cem (sha256 6c7b4c337855db5d)
Regenerate with `cemodel compile poisson_mixture.cem`; do not edit by hand.

Natural parameters are in coefficient form: q(x) ∝ exp(Σ_s lam_s · t_s(x)).
E_<var>_<stat> holds E_q[t_s]; acc_* hold sums over the data plate.
"""

import numpy as np
from numba import njit

from cemodel import runtime as rt

SOURCE = 'poisson_mixture.cem'
SOURCE_SHA256 = '6c7b4c337855db5d6804bd5765455d766e176d077ea201fd8388f2986c3300e2'
DEFAULT_START = 'seeds'  # k-means++ seed items for the categorical locals
LEARNABLE = ('alpha', 'a', 'b')  # hyperparameters empirical Bayes can set (fit(..., learn=...))
DATA_PLATE = 'points'  # the plate the local step runs over
# the global steps (fit, fit_svi, ..., fit_klc) and whether each applies
METHODS = {
    'mf': 'yes',
    'svi': 'yes',
    'svi+': 'yes',
    'svi-avg': 'yes',
    'ssvi-a': 'yes',
    'ssvi': 'yes',
    'klc': 'yes: collapses pi, rate, parameterises z',
}
# the E-steps (fit_svi(..., local=...)) and whether each applies
LOCAL_STEPS = {
    'mf': 'yes: local mean field',
    'exact': 'yes: given the globals each local depends only on data, so the local update is its exact conditional p(z_n | y_n, β)',
    'gibbs': 'yes: samples z',
    'cvb0': 'yes: updates q(z), zero-order collapsed VB',
}
STREAMING = 'yes'  # fit_svi from an rt.ItemSource (data on disk)
ITEM_DIMS = ('N',)  # sizes set by the items bound
KLC_LOCALS = ('z',)  # KLC-CG's parameterised Z
KLC_START = 'seeds'  # θ's default start: q(Z) after the seeded start's local step
ROLES = {  # the state's arrays by what they hold (executors, checkpoints)
    'data': ('n_K', 'x'), 'hyper': ('alpha', 'a', 'b'),
    'known': ('present_x', 'lgamma1p_x', 'lgamma_sum_alpha', 'lgamma_alpha', 'log_b', 'lgamma_a'),
    'global': ('lam_pi_log', 'lam_rate_log', 'lam_rate_value'),
    'global_exp': ('E_pi_log', 'E_rate_log', 'E_rate_value'),
    'kept_local': ('E_z_onehot', 'lam_z_onehot'), 'item': ('seed_category', 'item_weight'),
    'statistic': ('acc_z_0', 'acc_x_0', 'acc_x_1'),
    'thread': ('acc_z_0_threads', 'acc_x_0_threads', 'acc_x_1_threads'),
}
_THIS = rt.ModelView(globals())  # the model, as the drivers see it

SPEC = {
    "model": 'poisson_mixture',
    "dims": {
        'K': {"default": 3, "ragged_over": None},
        'N': {"default": None, "ragged_over": None},
    },
    "plates": {
        'components': {"dim": 'K', "parent": None, "ragged": False},
        'points': {"dim": 'N', "parent": None, "ragged": False},
    },
    "observed": {
        'x': {"plates": ['points'], "support": 'count', "shape": [], "categories": None, "missing": 'yes'},
    },
    "covariates": {},
    "not_data": {'alpha': 'hyperparameter', 'a': 'hyperparameter', 'b': 'hyperparameter', 'pi': 'latent', 'rate': 'latent', 'z': 'latent'},
}
MISSING = {  # observed entries that may be missing: their q (rt.missing_posteriors)
    'x': {"family": 'Poisson', "data_plate": 'a', "why_not": None,
        "terms": ((1.0, ('value',), 'a', (('E_rate_log', 'b'), ('E_z_onehot', 'ab'))), (-1.0, ('lgamma1p',), 'a', ()))},
}


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def update_z(
        i_points,
        with_children,
        lam_z_onehot,
        n_K,
        E_pi_log,
        x,
        E_rate_log,
        present_x,
        E_rate_value,
        E_z_onehot,
):
    """q(z[n]) = Categorical
        log q(z[n] = v) = E[log pi]_v + x[n]·E[log rate[v]] - E[rate[v]] + const

    (poisson_mixture.cem:21:5)
    """
    lam_z_onehot[i_points] = 0.0
    # from z ~ Categorical (poisson_mixture.cem:21:5)
    for t_k in range(n_K):
        lam_z_onehot[i_points, t_k] += E_pi_log[0, t_k]
    if with_children:
        # from x ~ Poisson (poisson_mixture.cem:22:5)
        for t_g0 in range(n_K):
            lam_z_onehot[i_points, t_g0] += x[i_points] * E_rate_log[t_g0] * present_x[i_points]
        # from x ~ Poisson (poisson_mixture.cem:22:5)
        for t_g0 in range(n_K):
            lam_z_onehot[i_points, t_g0] += -E_rate_value[t_g0] * present_x[i_points]
    rt.categorical_expected_stats(lam_z_onehot[i_points], E_z_onehot[i_points])


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def local_step(
        share_start,
        share_stop,
        n_threads,
        seeding,
        items,
        seed_category,
        max_local_iter,
        local_tol,
        E_z_onehot,
        n_K,
        lam_z_onehot,
        E_pi_log,
        x,
        E_rate_log,
        present_x,
        E_rate_value,
        item_weight,
        lgamma1p_x,
        evaluate,
        acc_z_0_threads,
        acc_x_0_threads,
        acc_x_1_threads,
):
    """Local step: each item's local factors to convergence, then the sufficient statistics.

    Shares `share_start` to `share_stop` of `n_threads` of the items, each with its own
    scratch arrays and accumulators (<name>_threads[thread]); rt.run_shares runs the
    shares (all in one call, or one call per share on the threads) and sums their
    statistics in share order. Returns the shares' ELBO terms that involve only local
    variables and data.
    """
    shares_total = 0.0
    for thread in range(share_start, share_stop):  # one call runs these shares, one after another
        acc_z_0_t = acc_z_0_threads[thread]
        acc_x_0_t = acc_x_0_threads[thread]
        acc_x_1_t = acc_x_1_threads[thread]
        elbo = 0.0
        stop_position = (thread + 1) * items.shape[0] // n_threads
        for position in range(thread * items.shape[0] // n_threads, stop_position):
            i_points = items[position]
            # the next item's memory, asked for while this one computes
            if position + 1 < stop_position and items[position + 1] != i_points + 1:
                rt.prefetch_row(item_weight, items[position + 1])
                rt.prefetch_row(lam_z_onehot, items[position + 1])
                rt.prefetch_row(E_z_onehot, items[position + 1])
                rt.prefetch_row(x, items[position + 1])
            if seeding:  # k-means++ seed items: seed c is all category c
                E_z_onehot[i_points] = 0.0
                if 0 <= seed_category[i_points] < n_K:
                    E_z_onehot[i_points, seed_category[i_points]] = 1.0
            else:
                update_z(i_points, True, lam_z_onehot, n_K, E_pi_log, x, E_rate_log, present_x, E_rate_value, E_z_onehot)
            # acc_z_0[k] += q(z[points]=k)  (poisson_mixture.cem:21:5)
            for t_k in range(n_K):
                acc_z_0_t[t_k] += item_weight[i_points] * E_z_onehot[i_points, t_k]
            # acc_x_0[g0] += x[points] · q(z[points]=g0) · present(x[points])  (poisson_mixture.cem:22:5)
            for t_g0 in range(n_K):
                acc_x_0_t[t_g0] += item_weight[i_points] * x[i_points] * E_z_onehot[i_points, t_g0] * present_x[i_points]
            # acc_x_1[g0] += q(z[points]=g0) · present(x[points])  (poisson_mixture.cem:22:5)
            for t_g0 in range(n_K):
                acc_x_1_t[t_g0] += item_weight[i_points] * E_z_onehot[i_points, t_g0] * present_x[i_points]
            # ELBO: local terms and local entropies (a stochastic step has no use for them)
            if evaluate:
                elbo += -lgamma1p_x[i_points] * present_x[i_points]
                elbo += (rt.categorical_entropy(E_z_onehot[i_points]))
        shares_total += elbo  # summed in share order, as rt.run_shares sums
    return shares_total


@njit(cache=True, nogil=True, error_model="numpy")
def evidence_z(i_points, lam_z_onehot, n_K, E_pi_log, x, E_rate_log, present_x, E_rate_value):
    """lam_z_onehot[row, c] = exp(λ_c − max_c λ_c), λ the messages to z from data and globals
    (every message but the integrated-out proportions'): the part of its conditional that
    stays fixed during a Gibbs or CVB0 step.
    """
    lam_z_onehot[i_points] = 0.0
    # from z ~ Categorical (poisson_mixture.cem:21:5)
    for t_k in range(n_K):
        lam_z_onehot[i_points, t_k] += E_pi_log[0, t_k]
    # from x ~ Poisson (poisson_mixture.cem:22:5)
    for t_g0 in range(n_K):
        lam_z_onehot[i_points, t_g0] += x[i_points] * E_rate_log[t_g0] * present_x[i_points]
    # from x ~ Poisson (poisson_mixture.cem:22:5)
    for t_g0 in range(n_K):
        lam_z_onehot[i_points, t_g0] += -E_rate_value[t_g0] * present_x[i_points]
    top = lam_z_onehot[i_points].max()
    for t_c in range(n_K):
        lam_z_onehot[i_points, t_c] = np.exp(lam_z_onehot[i_points, t_c] - top)


@njit(cache=True, nogil=True, error_model="numpy")
def local_step_gibbs(
        items,
        sweeps,
        burn_in,
        lam_z_onehot,
        n_K,
        E_pi_log,
        x,
        E_rate_log,
        present_x,
        E_rate_value,
        E_z_onehot,
        item_weight,
        acc_z_0,
        acc_x_0,
        acc_x_1,
):
    """Gibbs local step: each item's assignments sampled from their conditionals with no proportions integrated out,
    `sweeps` sweeps, q(z) = the one-hot counts averaged over the sweeps after burn_in (Mimno et al. 2012).

        p(z_i = c | z_¬i, y, β) ∝ · exp(Σ_children log p(y | z_i = c, β))_c

    Then the sufficient statistics, as local_step.
    """
    p_z = np.empty(n_K)
    assign_z = np.empty(64, np.int64)  # one assignment per token instance, grown as needed
    for position in range(items.shape[0]):
        i_points = items[position]
        # the fixed part of the conditional
        evidence_z(i_points, lam_z_onehot, n_K, E_pi_log, x, E_rate_log, present_x, E_rate_value)
        needed_z = 0
        needed_z += int(1.0 + 0.5)
        if needed_z > assign_z.shape[0]:
            assign_z = np.empty(2 * needed_z, np.int64)
        # start: each token drawn given the ones before it
        position_z = 0
        E_z_onehot[i_points] = 0.0
        for j in range(int(1.0 + 0.5)):
            total = 0.0
            for t_c in range(n_K):
                p_z[t_c] = lam_z_onehot[i_points, t_c]
                total += p_z[t_c]
            uniform = np.random.random() * total
            t_c = 0
            cumulative = p_z[0]
            while cumulative < uniform and t_c < n_K - 1:
                t_c += 1
                cumulative += p_z[t_c]
            assign_z[position_z] = t_c
            position_z += 1
        for sweep in range(sweeps):
            position_z = 0
            for j in range(int(1.0 + 0.5)):
                t_c = assign_z[position_z]
                total = 0.0
                for t_c in range(n_K):
                    p_z[t_c] = lam_z_onehot[i_points, t_c]
                    total += p_z[t_c]
                uniform = np.random.random() * total
                t_c = 0
                cumulative = p_z[0]
                while cumulative < uniform and t_c < n_K - 1:
                    t_c += 1
                    cumulative += p_z[t_c]
                assign_z[position_z] = t_c
                if sweep >= burn_in:
                    E_z_onehot[i_points, t_c] += 1.0
                position_z += 1
        instances = int(1.0 + 0.5)
        if instances > 0:
            E_z_onehot[i_points] /= instances * (sweeps - burn_in)
        else:
            E_z_onehot[i_points] = lam_z_onehot[i_points] / lam_z_onehot[i_points].sum()
        # acc_z_0[k] += q(z[points]=k)  (poisson_mixture.cem:21:5)
        for t_k in range(n_K):
            acc_z_0[t_k] += item_weight[i_points] * E_z_onehot[i_points, t_k]
        # acc_x_0[g0] += x[points] · q(z[points]=g0) · present(x[points])  (poisson_mixture.cem:22:5)
        for t_g0 in range(n_K):
            acc_x_0[t_g0] += item_weight[i_points] * x[i_points] * E_z_onehot[i_points, t_g0] * present_x[i_points]
        # acc_x_1[g0] += q(z[points]=g0) · present(x[points])  (poisson_mixture.cem:22:5)
        for t_g0 in range(n_K):
            acc_x_1[t_g0] += item_weight[i_points] * E_z_onehot[i_points, t_g0] * present_x[i_points]


@njit(cache=True, nogil=True, error_model="numpy")
def local_step_cvb0(
        items,
        max_local_iter,
        local_tol,
        lam_z_onehot,
        n_K,
        E_pi_log,
        x,
        E_rate_log,
        present_x,
        E_rate_value,
        E_z_onehot,
        item_weight,
        acc_z_0,
        acc_x_0,
        acc_x_1,
):
    """CVB0 local step: each item's q(z) updated with no proportions integrated out, until the mean absolute
    change of q(z) is below local_tol (Asuncion et al. 2009).

        q(z_i = c) ∝ · exp(Σ_children E[log p(y | z_i = c, β)])_c

    Then the sufficient statistics, as local_step.
    """
    p_z = np.empty(n_K)
    for position in range(items.shape[0]):
        i_points = items[position]
        # the fixed part of the conditional
        evidence_z(i_points, lam_z_onehot, n_K, E_pi_log, x, E_rate_log, present_x, E_rate_value)
        # start: each row given the ones before it
        total = 0.0
        for t_c in range(n_K):
            p_z[t_c] = lam_z_onehot[i_points, t_c]
            total += p_z[t_c]
        w_row = 1.0
        for t_c in range(n_K):
            E_z_onehot[i_points, t_c] = p_z[t_c] / total
        # acc_z_0[k] += q(z[points]=k)  (poisson_mixture.cem:21:5)
        for t_k in range(n_K):
            acc_z_0[t_k] += item_weight[i_points] * E_z_onehot[i_points, t_k]
        # acc_x_0[g0] += x[points] · q(z[points]=g0) · present(x[points])  (poisson_mixture.cem:22:5)
        for t_g0 in range(n_K):
            acc_x_0[t_g0] += item_weight[i_points] * x[i_points] * E_z_onehot[i_points, t_g0] * present_x[i_points]
        # acc_x_1[g0] += q(z[points]=g0) · present(x[points])  (poisson_mixture.cem:22:5)
        for t_g0 in range(n_K):
            acc_x_1[t_g0] += item_weight[i_points] * E_z_onehot[i_points, t_g0] * present_x[i_points]


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def update_pi(data_scale, lam_pi_log, n_K, alpha, acc_z_0, expect, E_pi_log):
    """q(pi) = Dirichlet(α)
        α_v = alpha + Σ_{n} q(z[n] = v)

    (poisson_mixture.cem:16:1)
    """
    lam_pi_log[0] = 0.0
    # from pi ~ Dirichlet (poisson_mixture.cem:16:1)
    for t_k in range(n_K):
        lam_pi_log[0, t_k] += alpha
    # from pi ~ Dirichlet (poisson_mixture.cem:16:1)
    for t_k in range(n_K):
        lam_pi_log[0, t_k] += -1.0
    # from z ~ Categorical (poisson_mixture.cem:21:5)
    for t_k in range(n_K):
        lam_pi_log[0, t_k] += data_scale * acc_z_0[t_k]
    if expect:  # a stochastic step mixes λ first (λ̂ may be invalid)
        rt.dirichlet_expected_stats(lam_pi_log[0], E_pi_log[0])


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def update_rate(
        data_scale,
        lam_rate_log,
        lam_rate_value,
        a,
        b,
        acc_x_0,
        acc_x_1,
        expect,
        E_rate_log,
        E_rate_value,
        n_K,
):
    """q(rate[k]) = Gamma(shape, rate)
        shape = a + Σ_{n} x[n]·q(z[n] = k)
        rate = b + Σ_{n} q(z[n] = k)

    (poisson_mixture.cem:18:5)
    """
    for i_components in range(n_K):
        lam_rate_log[i_components] = 0.0
        lam_rate_value[i_components] = 0.0
        # from rate ~ Gamma (poisson_mixture.cem:18:5)
        lam_rate_log[i_components] += a
        # from rate ~ Gamma (poisson_mixture.cem:18:5)
        lam_rate_log[i_components] += -1.0
        # from rate ~ Gamma (poisson_mixture.cem:18:5)
        lam_rate_value[i_components] += -b
        # from x ~ Poisson (poisson_mixture.cem:22:5)
        lam_rate_log[i_components] += data_scale * acc_x_0[i_components]
        # from x ~ Poisson (poisson_mixture.cem:22:5)
        lam_rate_value[i_components] += -data_scale * acc_x_1[i_components]
        if expect:  # a stochastic step mixes λ first (λ̂ may be invalid)
            E_rate_log[i_components], E_rate_value[i_components] = rt.gamma_expected_stats(lam_rate_log[i_components], lam_rate_value[i_components])


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def refresh_globals(
        lam_pi_log,
        E_pi_log,
        lam_rate_log,
        E_rate_log,
        lam_rate_value,
        E_rate_value,
        n_K,
):
    """Expected statistics of the globals from their natural parameters."""
    rt.dirichlet_expected_stats(lam_pi_log[0], E_pi_log[0])
    for i_components in range(n_K):
        E_rate_log[i_components], E_rate_value[i_components] = rt.gamma_expected_stats(lam_rate_log[i_components], lam_rate_value[i_components])


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def elbo_global(
        n_K,
        alpha,
        E_pi_log,
        lgamma_sum_alpha,
        lgamma_alpha,
        a,
        log_b,
        lgamma_a,
        E_rate_log,
        b,
        E_rate_value,
        acc_z_0,
        acc_x_0,
        acc_x_1,
        lam_pi_log,
        lam_rate_log,
        lam_rate_value,
):
    """ELBO terms of the global factors (see elbo_terms in the README)."""
    elbo = 0.0
    # E[log p(pi | ...)]  (poisson_mixture.cem:16:1)
    for t_k in range(n_K):
        elbo += alpha * E_pi_log[0, t_k]
    for t_k in range(n_K):
        elbo += -E_pi_log[0, t_k]
    elbo += lgamma_sum_alpha
    for t_k in range(n_K):
        elbo += -lgamma_alpha
    # E[log p(rate | ...)]  (poisson_mixture.cem:18:5)
    for i_components in range(n_K):
        elbo += a * log_b
    for i_components in range(n_K):
        elbo += -lgamma_a
    for i_components in range(n_K):
        elbo += a * E_rate_log[i_components]
    for i_components in range(n_K):
        elbo += -E_rate_log[i_components]
    for i_components in range(n_K):
        elbo += -b * E_rate_value[i_components]
    # E[log p(z | ...)]  (poisson_mixture.cem:21:5)
    for t_k in range(n_K):
        elbo += acc_z_0[t_k] * E_pi_log[0, t_k]
    # E[log p(x | ...)]  (poisson_mixture.cem:22:5)
    for t_g0 in range(n_K):
        elbo += acc_x_0[t_g0] * E_rate_log[t_g0]
    for t_g0 in range(n_K):
        elbo += -acc_x_1[t_g0] * E_rate_value[t_g0]
    # entropy of q(pi)
    elbo += rt.dirichlet_log_normalizer(lam_pi_log[0]) - rt.frobenius(lam_pi_log[0], E_pi_log[0])
    # entropy of q(rate)
    for i_components in range(n_K):
        elbo += rt.gamma_log_normalizer(lam_rate_log[i_components], lam_rate_value[i_components]) - lam_rate_log[i_components] * E_rate_log[i_components] - lam_rate_value[i_components] * E_rate_value[i_components]
    return elbo


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def klc_stats(
        share_start,
        share_stop,
        n_threads,
        items,
        lam_z_onehot,
        E_z_onehot,
        theta_z,
        item_weight,
        n_K,
        x,
        present_x,
        lgamma1p_x,
        acc_z_0_threads,
        acc_x_0_threads,
        acc_x_1_threads,
):
    """KLC statistics: q(Z) = softmax(θ), each collapsed local's mean-field update given q(Z),
    and the collapsed globals' sufficient statistics (accumulators).
    Returns the ELBO terms that involve only local variables and data.
    """
    shares_total = 0.0
    for thread in range(share_start, share_stop):  # one call runs these shares, one after another
        acc_z_0_t = acc_z_0_threads[thread]
        acc_x_0_t = acc_x_0_threads[thread]
        acc_x_1_t = acc_x_1_threads[thread]
        elbo = 0.0
        stop_position = (thread + 1) * items.shape[0] // n_threads
        for position in range(thread * items.shape[0] // n_threads, stop_position):
            i_points = items[position]
            # the next item's memory, asked for while this one computes
            if position + 1 < stop_position and items[position + 1] != i_points + 1:
                rt.prefetch_row(item_weight, items[position + 1])
                rt.prefetch_row(lam_z_onehot, items[position + 1])
                rt.prefetch_row(E_z_onehot, items[position + 1])
                rt.prefetch_row(x, items[position + 1])
            # q(z) = softmax(θ) per row
            lam_z_onehot[i_points] = theta_z[i_points]
            rt.categorical_expected_stats(lam_z_onehot[i_points], E_z_onehot[i_points])
            # acc_z_0[k] += q(z[points]=k)  (poisson_mixture.cem:21:5)
            for t_k in range(n_K):
                acc_z_0_t[t_k] += item_weight[i_points] * E_z_onehot[i_points, t_k]
            # acc_x_0[g0] += x[points] · q(z[points]=g0) · present(x[points])  (poisson_mixture.cem:22:5)
            for t_g0 in range(n_K):
                acc_x_0_t[t_g0] += item_weight[i_points] * x[i_points] * E_z_onehot[i_points, t_g0] * present_x[i_points]
            # acc_x_1[g0] += q(z[points]=g0) · present(x[points])  (poisson_mixture.cem:22:5)
            for t_g0 in range(n_K):
                acc_x_1_t[t_g0] += item_weight[i_points] * E_z_onehot[i_points, t_g0] * present_x[i_points]
            # ELBO: local terms and local entropies
            elbo += -lgamma1p_x[i_points] * present_x[i_points]
            elbo += (rt.categorical_entropy(E_z_onehot[i_points]))
        shares_total += elbo  # summed in share order, as rt.run_shares sums
    return shares_total


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def klc_gradient(
        share_start,
        share_stop,
        n_threads,
        items,
        lam_z_onehot,
        E_z_onehot,
        theta_z,
        natgrad_z,
        grad_z,
        n_K,
        E_pi_log,
        x,
        E_rate_log,
        present_x,
        E_rate_value,
):
    """KLC gradients at θ, with the collapsed variables at q*(X) (klc_stats and the global updates
    first): natgrad = θ̂ − θ (eq. 15), grad = w (diag(q) − q qᵀ) natgrad.
    Returns ⟨natgrad, grad⟩, the squared Riemannian norm (eq. 16).
    """
    shares_total = 0.0
    for thread in range(share_start, share_stop):  # one call runs these shares, one after another
        norm = 0.0
        stop_position = (thread + 1) * items.shape[0] // n_threads
        for position in range(thread * items.shape[0] // n_threads, stop_position):
            i_points = items[position]
            # the next item's memory, asked for while this one computes
            if position + 1 < stop_position and items[position + 1] != i_points + 1:
                rt.prefetch_row(lam_z_onehot, items[position + 1])
                rt.prefetch_row(E_z_onehot, items[position + 1])
                rt.prefetch_row(x, items[position + 1])
            # q(Z) = softmax(θ) per row
            lam_z_onehot[i_points] = theta_z[i_points]
            rt.categorical_expected_stats(lam_z_onehot[i_points], E_z_onehot[i_points])
            # θ̂ = the mean-field target of q(z) given q*(X)
            update_z(i_points, True, lam_z_onehot, n_K, E_pi_log, x, E_rate_log, present_x, E_rate_value, E_z_onehot)
            natgrad_z[i_points] = lam_z_onehot[i_points] - theta_z[i_points]  # g̃ = θ̂ − θ
            # q(z) back to softmax(θ) for the other rows' targets
            lam_z_onehot[i_points] = theta_z[i_points]
            rt.categorical_expected_stats(lam_z_onehot[i_points], E_z_onehot[i_points])
            mean = 0.0
            for t_c in range(n_K):
                mean += E_z_onehot[i_points, t_c] * natgrad_z[i_points, t_c]
            for t_c in range(n_K):
                # g = w (diag(q) − q qᵀ) g̃
                grad_z[i_points, t_c] = E_z_onehot[i_points, t_c] * (natgrad_z[i_points, t_c] - mean)
                norm += grad_z[i_points, t_c] * natgrad_z[i_points, t_c]
        shares_total += norm  # summed in share order, as rt.run_shares sums
    return shares_total


def _prepare(data, hypers, dims, seed, init, start, max_local_iter, local_tol, share=None):
    """Bind and check the data, evaluate hyperparameters and knowns, allocate the arrays, start the globals.
    share: out of core, the fit's state, whose globals, hyperparameters and statistics `data`'s minibatch shares.
    """
    hypers = rt.check_hyper_names(hypers, ['alpha', 'a', 'b'])
    bound = rt.bind_data(SPEC, data, dims, missing=True)
    n_K, n_N = bound.dims['K'], bound.dims['N']
    # refuse before allocating more than the machine's memory
    rt.check_memory(bound, {(1, 'K'): 2, ('K',): 7, ('N', 'K'): 2, ('threads', 'K'): 3, ('N',): 3})
    x = bound.arrays['x']
    # hyperparameters (defaults from the model file; out of core the fit's current values)
    alpha = rt.hyper_value(hypers, 'alpha', 1.0, (), domain='shape') if share is None else share.alpha
    a = rt.hyper_value(hypers, 'a', 1.0, (), domain='shape') if share is None else share.a
    b = rt.hyper_value(hypers, 'b', 0.1, (), domain='positive') if share is None else share.b
    # known quantities: functions of hyperparameters and data
    lgamma_sum_alpha = rt.gammaln(n_K * alpha)  # lgamma_sum(repeat(alpha, K))
    lgamma_alpha = rt.gammaln(alpha)  # lgamma(repeat(alpha, K))
    log_b = rt.log_data(b, "hyperparameter 'b'")  # log(b)
    lgamma_a = rt.gammaln(a)  # lgamma(a)
    present_x = rt.present(bound, 'x')  # present(x[points])
    lgamma1p_x = rt.gammaln(x + 1.0)  # lgamma1p(x[points])
    # variational parameters (natural, coefficient form) and E[t]
    lam_pi_log, E_pi_log = (np.zeros((1, n_K)), np.zeros((1, n_K))) if share is None else (share.lam_pi_log, share.E_pi_log)
    lam_rate_log, E_rate_log = (np.zeros((n_K,)), np.zeros((n_K,))) if share is None else (share.lam_rate_log, share.E_rate_log)
    lam_rate_value, E_rate_value = (np.zeros((n_K,)), np.zeros((n_K,))) if share is None else (share.lam_rate_value, share.E_rate_value)
    lam_z_onehot, E_z_onehot = np.zeros((n_N, n_K)), np.zeros((n_N, n_K))
    # sufficient statistics the local step hands to the global step (out of core added up over minibatches)
    acc_z_0 = np.zeros((n_K,)) if share is None else share.acc_z_0
    acc_x_0 = np.zeros((n_K,)) if share is None else share.acc_x_0
    acc_x_1 = np.zeros((n_K,)) if share is None else share.acc_x_1
    # the local step's shares: one per thread, fewer for small data
    n_threads = rt.share_count(bound)
    acc_z_0_threads = rt.thread_copies(n_threads, acc_z_0) if share is None else share.acc_z_0_threads
    acc_x_0_threads = rt.thread_copies(n_threads, acc_x_0) if share is None else share.acc_x_0_threads
    acc_x_1_threads = rt.thread_copies(n_threads, acc_x_1) if share is None else share.acc_x_1_threads
    all_items = np.arange(n_N)  # the local step runs over these
    item_weight = np.ones(n_N)  # each item's weight in the statistics (SVI+ perturbs it)
    seed_category = np.full(n_N, -1)
    if share is not None:  # out of core: a minibatch's state, sharing the fit's
        return rt.State(bound=bound, alpha=alpha, a=a, b=b, seed_category=seed_category, E_z_onehot=E_z_onehot, n_K=n_K, lam_z_onehot=lam_z_onehot, E_pi_log=E_pi_log, x=x, E_rate_log=E_rate_log, present_x=present_x, E_rate_value=E_rate_value, item_weight=item_weight, lgamma1p_x=lgamma1p_x, acc_z_0_threads=acc_z_0_threads, acc_x_0_threads=acc_x_0_threads, acc_x_1_threads=acc_x_1_threads, acc_z_0=acc_z_0, acc_x_0=acc_x_0, acc_x_1=acc_x_1, lam_pi_log=lam_pi_log, lam_rate_log=lam_rate_log, lam_rate_value=lam_rate_value, lgamma_sum_alpha=lgamma_sum_alpha, lgamma_alpha=lgamma_alpha, log_b=log_b, lgamma_a=lgamma_a, all_items=all_items)
    # start every global at its prior
    update_pi(0.0, lam_pi_log, n_K, alpha, acc_z_0, True, E_pi_log)
    update_rate(0.0, lam_rate_log, lam_rate_value, a, b, acc_x_0, acc_x_1, True, E_rate_log, E_rate_value, n_K)
    if init is not None:  # warm start: the globals' natural parameters from an earlier fit
        rt.load_state(init, {'lam_pi_log': lam_pi_log, 'lam_rate_log': lam_rate_log, 'lam_rate_value': lam_rate_value})
        refresh_globals(lam_pi_log, E_pi_log, lam_rate_log, E_rate_log, lam_rate_value, E_rate_value, n_K)
    start = DEFAULT_START if start is None else start
    if init is None and start == 'seeds':
        # start from k-means++ seed items (see cemodel.runtime.seeding); not part of the ELBO trace
        seed_category = rt.seed_categories(SPEC, bound.arrays, 'points', n_N, n_K, seed, bound.missing)
        # the globals start from the seed items' statistics alone
        seed_items = np.flatnonzero(seed_category >= 0)
        acc_z_0[...] = 0.0
        acc_x_0[...] = 0.0
        acc_x_1[...] = 0.0
        rt.run_shares(local_step, acc_z_0_threads.shape[0], (True, seed_items, seed_category, max_local_iter, local_tol, E_z_onehot, n_K, lam_z_onehot, E_pi_log, x, E_rate_log, present_x, E_rate_value, item_weight, lgamma1p_x, False, acc_z_0_threads, acc_x_0_threads, acc_x_1_threads,), ((acc_z_0, acc_z_0_threads), (acc_x_0, acc_x_0_threads), (acc_x_1, acc_x_1_threads),))
        update_pi(1.0, lam_pi_log, n_K, alpha, acc_z_0, True, E_pi_log)
        update_rate(1.0, lam_rate_log, lam_rate_value, a, b, acc_x_0, acc_x_1, True, E_rate_log, E_rate_value, n_K)
    elif init is None and start == 'random':
        # start from random pseudo-counts on the count-type globals (Hoffman et al. 2010)
        rng = np.random.default_rng(seed)
        lam_pi_log += rng.gamma(100.0, 0.01, lam_pi_log.shape)
        refresh_globals(lam_pi_log, E_pi_log, lam_rate_log, E_rate_log, lam_rate_value, E_rate_value, n_K)
    elif init is None and start == 'prior':
        raise rt.CemDataError("start: expected 'seeds' or 'random', found 'prior' (from the prior the components start alike and stay alike)")
    elif init is None:
        raise rt.CemDataError(f"start: expected 'seeds' or 'random', found {start!r}")
    return rt.State(bound=bound, alpha=alpha, a=a, b=b, seed_category=seed_category, E_z_onehot=E_z_onehot, n_K=n_K, lam_z_onehot=lam_z_onehot, E_pi_log=E_pi_log, x=x, E_rate_log=E_rate_log, present_x=present_x, E_rate_value=E_rate_value, item_weight=item_weight, lgamma1p_x=lgamma1p_x, acc_z_0_threads=acc_z_0_threads, acc_x_0_threads=acc_x_0_threads, acc_x_1_threads=acc_x_1_threads, acc_z_0=acc_z_0, acc_x_0=acc_x_0, acc_x_1=acc_x_1, lam_pi_log=lam_pi_log, lam_rate_log=lam_rate_log, lam_rate_value=lam_rate_value, lgamma_sum_alpha=lgamma_sum_alpha, lgamma_alpha=lgamma_alpha, log_b=log_b, lgamma_a=lgamma_a, all_items=all_items)


def _learn(s, learn, rho=1.0, items=slice(None)):
    """Empirical Bayes (Minka 2000): each learned hyperparameter a step rho towards its ELBO maximiser given q."""
    if 'alpha' in learn:  # the prior of pi
        s.alpha = (1.0 - rho) * s.alpha + rho * rt.learn_symmetric_dirichlet(s.alpha, s.E_pi_log)
    if 'a' in learn:  # the prior of rate
        s.a = (1.0 - rho) * s.a + rho * rt.learn_gamma_shape(s.b, s.E_rate_log)
    if 'b' in learn:  # the prior of rate
        s.b = (1.0 - rho) * s.b + rho * rt.learn_gamma_rate(s.a, s.E_rate_value)
    # known quantities that depend on hyperparameters
    s.lgamma_sum_alpha = rt.gammaln(s.n_K * s.alpha)
    s.lgamma_alpha = rt.gammaln(s.alpha)
    s.log_b = rt.log_data(s.b, "hyperparameter 'b'")
    s.lgamma_a = rt.gammaln(s.a)


def _result(s, trace, converged, seconds, items=True):
    """The posterior in usual parameters, expectations and the state; items=False: the globals only."""
    posterior = {}
    state = {'lam_pi_log': s.lam_pi_log, 'lam_rate_log': s.lam_rate_log, 'lam_rate_value': s.lam_rate_value}
    pi__alpha = rt.dirichlet_params(s.lam_pi_log)
    posterior['pi.alpha'] = pi__alpha[0]
    posterior['E[log pi]'] = s.E_pi_log[0]
    rate__shape, rate__rate = rt.gamma_params(s.lam_rate_log, s.lam_rate_value)
    posterior['rate.shape'] = rate__shape
    posterior['rate.rate'] = rate__rate
    posterior['E[log rate]'] = s.E_rate_log
    posterior['E[value rate]'] = s.E_rate_value
    if items:  # out of core the state holds one minibatch's items
        z__probs = rt.categorical_params(s.lam_z_onehot)
        posterior['z.probs'] = z__probs
        posterior['E[onehot z]'] = s.E_z_onehot
        state['lam_z_onehot'] = s.lam_z_onehot
    missing = rt.missing_posteriors(s, MISSING) if items else {}
    return rt.FitResult(posterior=posterior, elbo=np.array(trace), iterations=len(trace), converged=converged, seconds=seconds, dims=dict(s.bound.dims), hypers={'alpha': s.alpha, 'a': s.a, 'b': s.b}, state=state, missing=missing)


# -- the model's side of the fitting drivers (cemodel.runtime.drivers) ------------------------------
def run_local_step(
        s,
        items,
        max_local_iter,
        local_tol,
        seeding=False,
        warm=False,
        guard=False,
        evaluate=True,
        accelerate=False,
):
    """local_step over `items`: adds their statistics to acc_*, returns their ELBO terms."""
    return rt.run_shares(local_step, s.acc_z_0_threads.shape[0], (seeding, items, s.seed_category, max_local_iter, local_tol, s.E_z_onehot, s.n_K, s.lam_z_onehot, s.E_pi_log, s.x, s.E_rate_log, s.present_x, s.E_rate_value, s.item_weight, s.lgamma1p_x, evaluate, s.acc_z_0_threads, s.acc_x_0_threads, s.acc_x_1_threads,), ((s.acc_z_0, s.acc_z_0_threads), (s.acc_x_0, s.acc_x_0_threads), (s.acc_x_1, s.acc_x_1_threads),))


def run_local_step_gibbs(s, items, sweeps, burn_in):
    return local_step_gibbs(items, sweeps, burn_in, s.lam_z_onehot, s.n_K, s.E_pi_log, s.x, s.E_rate_log, s.present_x, s.E_rate_value, s.E_z_onehot, s.item_weight, s.acc_z_0, s.acc_x_0, s.acc_x_1)


def run_local_step_cvb0(s, items, max_local_iter, local_tol):
    return local_step_cvb0(items, max_local_iter, local_tol, s.lam_z_onehot, s.n_K, s.E_pi_log, s.x, s.E_rate_log, s.present_x, s.E_rate_value, s.E_z_onehot, s.item_weight, s.acc_z_0, s.acc_x_0, s.acc_x_1)


def _update_pi(s, data_scale, expect=True):
    update_pi(data_scale, s.lam_pi_log, s.n_K, s.alpha, s.acc_z_0, expect, s.E_pi_log)


def _update_rate(s, data_scale, expect=True):
    update_rate(data_scale, s.lam_rate_log, s.lam_rate_value, s.a, s.b, s.acc_x_0, s.acc_x_1, expect, s.E_rate_log, s.E_rate_value, s.n_K)


def refresh(s):
    refresh_globals(s.lam_pi_log, s.E_pi_log, s.lam_rate_log, s.E_rate_log, s.lam_rate_value, s.E_rate_value, s.n_K)


def elbo_of_globals(s):
    return elbo_global(s.n_K, s.alpha, s.E_pi_log, s.lgamma_sum_alpha, s.lgamma_alpha, s.a, s.log_b, s.lgamma_a, s.E_rate_log, s.b, s.E_rate_value, s.acc_z_0, s.acc_x_0, s.acc_x_1, s.lam_pi_log, s.lam_rate_log, s.lam_rate_value)


GLOBALS = (  # the globals as the stochastic drivers move them
    rt.Global('pi', 'dirichlet', lam=('lam_pi_log',), E=('E_pi_log',),
              update=_update_pi, aux_draws=1, after_sample=None),
    rt.Global('rate', 'gamma', lam=('lam_rate_log', 'lam_rate_value'), E=('E_rate_log', 'E_rate_value'),
              update=_update_rate, aux_draws=1, after_sample=None),
)


def fit(data, **options):
    """Batch mean-field VB (options: cemodel.runtime.drivers.mf.fit). One iteration:
        statistics ← 0; elbo = run_local_step(s, s.all_items, ...)  # E-step
        _update_pi(s, 1.0)  # q(pi)
        _update_rate(s, 1.0)  # q(rate)
        elbo += elbo_of_globals(s)
    """
    return rt.drivers.mf.fit(_THIS, data, **options)


def fit_svi(data, **options):
    """SVI, SVI+ (options: cemodel.runtime.drivers.svi.fit). One step on a minibatch S:
        statistics ← 0; run_local_step(s, S, ...)
        _update_pi(s, N / len(S), expect=False)  # λ̂ of q(pi)
        _update_rate(s, N / len(S), expect=False)  # λ̂ of q(rate)
        λ ← (1 − ρ)λ + ρλ̂ (rt.blend); refresh(s)
    """
    return rt.drivers.svi.fit(_THIS, data, **options)


def fit_ssvi_a(data, **options):
    """SSVI-A (Hoffman & Blei 2015, eq. 10): fit_svi with the local step given a draw β ~ q(β)."""
    return rt.drivers.svi.fit(_THIS, data, sample_globals=True, **options)


def fit_ssvi(data, **options):
    """SSVI (Hoffman & Blei 2015, eq. 7): fit_ssvi_a with λ̂ = η + V(β, λ)·N/|S| Σ η̂_n(β)."""
    return rt.drivers.svi.fit(_THIS, data, sample_globals=True, apply_v=True, **options)


def _klc_bound(s, theta):
    """L_KL(θ) (eq. 4): the mean-field ELBO with X at q*(X) given q(Z) = softmax(θ) (eq. 9)."""
    s.acc_z_0[...] = 0.0
    s.acc_x_0[...] = 0.0
    s.acc_x_1[...] = 0.0
    value = rt.run_shares(klc_stats, s.acc_z_0_threads.shape[0], (s.all_items, s.lam_z_onehot, s.E_z_onehot, theta[0], s.item_weight, s.n_K, s.x, s.present_x, s.lgamma1p_x, s.acc_z_0_threads, s.acc_x_0_threads, s.acc_x_1_threads,), ((s.acc_z_0, s.acc_z_0_threads), (s.acc_x_0, s.acc_x_0_threads), (s.acc_x_1, s.acc_x_1_threads),))
    # the collapsed globals at their optimum given q(Z)
    update_pi(1.0, s.lam_pi_log, s.n_K, s.alpha, s.acc_z_0, True, s.E_pi_log)
    update_rate(1.0, s.lam_rate_log, s.lam_rate_value, s.a, s.b, s.acc_x_0, s.acc_x_1, True, s.E_rate_log, s.E_rate_value, s.n_K)
    return value + elbo_global(s.n_K, s.alpha, s.E_pi_log, s.lgamma_sum_alpha, s.lgamma_alpha, s.a, s.log_b, s.lgamma_a, s.E_rate_log, s.b, s.E_rate_value, s.acc_z_0, s.acc_x_0, s.acc_x_1, s.lam_pi_log, s.lam_rate_log, s.lam_rate_value)


def _klc_gradient(s, theta, natgrad, grad):
    """natgrad, grad and ⟨natgrad, grad⟩ at θ (call _klc_bound(s, θ) first)."""
    return rt.run_shares(klc_gradient, rt.share_count(s.bound), (s.all_items, s.lam_z_onehot, s.E_z_onehot, theta[0], natgrad[0], grad[0], s.n_K, s.E_pi_log, s.x, s.E_rate_log, s.present_x, s.E_rate_value,), ())


def _klc_shapes(s):
    """The shapes of the softmax parameters θ of q(Z), one per member of KLC_LOCALS."""
    return [(s.bound.dims['N'], s.bound.dims['K'],)]


def _klc_logits(s):
    """θ of q(Z) as the state holds it (its natural parameters), one per member of KLC_LOCALS."""
    return [s.lam_z_onehot.copy()]


def fit_klc(data, **options):
    """KLC-CG (Hensman et al. 2012): pi, rate integrated out, q(z) by Riemannian CG."""
    return rt.drivers.klc.fit(_THIS, data, **options)
