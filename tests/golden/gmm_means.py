"""gmm_means: the model (kernels, data layout, start) for cemodel.runtime.drivers, by cemodel 0.1.0.

Model file: gmm_means.cem (sha256 12022da4eb345557)
Regenerate with `cemodel compile gmm_means.cem`; do not edit by hand.

Natural parameters are in coefficient form: q(x) ∝ exp(Σ_s lam_s · t_s(x)).
E_<var>_<stat> holds E_q[t_s]; acc_* hold sums over the data plate.
"""

import numpy as np
from numba import njit

from cemodel import runtime as rt

SOURCE = 'gmm_means.cem'
SOURCE_SHA256 = '12022da4eb345557725d0ccce180763f651a8a1e9ba9af8d634efd7d4bf6b3db'
DEFAULT_START = 'seeds'  # k-means++ seed items for the categorical locals
LEARNABLE = ('alpha',)  # hyperparameters empirical Bayes can set (fit(..., learn=...))
DATA_PLATE = 'points'  # the plate the local step runs over
# the global steps (fit, fit_svi, ..., fit_klc) and whether each applies
METHODS = {
    'mf': 'yes',
    'svi': 'yes',
    'svi+': 'yes',
    'svi-avg': 'yes',
    'ssvi-a': 'yes',
    'ssvi': 'yes',
    'klc': 'yes: collapses pi, mu, parameterises z',
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
    'data': ('n_K', 'n_D', 'x'), 'hyper': ('alpha', 'm0', 'P0', 'P'),
    'known': ('present_x', 'logdet_P', 'dim_x', 'lgamma_sum_alpha', 'lgamma_alpha', 'logdet_P0', 'outer_m0', 'dim_mu'),
    'global': ('lam_mu_value', 'lam_mu_outer', 'lam_pi_log'),
    'global_exp': ('E_pi_log', 'E_mu_value', 'E_mu_outer'),
    'kept_local': ('E_z_onehot', 'lam_z_onehot'), 'item': ('seed_category', 'item_weight'),
    'statistic': ('acc_z_0', 'acc_x_2', 'acc_x_3'),
    'thread': ('acc_z_0_threads', 'acc_x_2_threads', 'acc_x_3_threads'),
}
_THIS = rt.ModelView(globals())  # the model, as the drivers see it

SPEC = {
    "model": 'gmm_means',
    "dims": {
        'K': {"default": 8, "ragged_over": None},
        'D': {"default": None, "ragged_over": None},
        'N': {"default": None, "ragged_over": None},
    },
    "plates": {
        'components': {"dim": 'K', "parent": None, "ragged": False},
        'points': {"dim": 'N', "parent": None, "ragged": False},
    },
    "observed": {
        'x': {"plates": ['points'], "support": 'vector', "shape": ['D'], "categories": None, "missing": 'yes'},
    },
    "covariates": {},
    "not_data": {'alpha': 'hyperparameter', 'm0': 'hyperparameter', 'P0': 'hyperparameter', 'P': 'hyperparameter', 'pi': 'latent', 'mu': 'latent', 'z': 'latent'},
}
MISSING = {  # observed entries that may be missing: their q (rt.missing_posteriors)
    'x': {"family": 'MultivariateNormal', "data_plate": 'a', "why_not": None,
        "terms": ((-0.5, ('value', 'value'), 'abc', (('P', 'bc'),)), (1.0, ('value',), 'ab', (('P', 'bc'), ('E_mu_value', 'dc'), ('E_z_onehot', 'ad'))))},
}


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def update_z(
        i_points,
        with_children,
        lam_z_onehot,
        n_K,
        E_pi_log,
        n_D,
        x,
        P,
        E_mu_value,
        present_x,
        E_mu_outer,
        E_z_onehot,
):
    """q(z[n]) = Categorical
        log q(z[n] = v) = E[log pi]_v + Σ_{i,j} x[n]_i·P_ij·E[mu[v]]_j - 0.5·Σ_{i,j} P_ij·E[mu[v] mu[v]ᵀ]_ij + const

    (gmm_means.cem:25:5)
    """
    lam_z_onehot[i_points] = 0.0
    # from z ~ Categorical (gmm_means.cem:25:5)
    for t_k in range(n_K):
        lam_z_onehot[i_points, t_k] += E_pi_log[0, t_k]
    if with_children:
        # from x ~ MultivariateNormal (gmm_means.cem:26:5)
        for t_g0 in range(n_K):
            partial_sum = 0.0
            for t_i in range(n_D):
                for t_j in range(n_D):
                    partial_sum += x[i_points, t_i] * P[t_i, t_j] * E_mu_value[t_g0, t_j] * present_x[i_points]
            lam_z_onehot[i_points, t_g0] += partial_sum
        # from x ~ MultivariateNormal (gmm_means.cem:26:5)
        for t_g0 in range(n_K):
            partial_sum = 0.0
            for t_i in range(n_D):
                for t_j in range(n_D):
                    partial_sum += P[t_i, t_j] * E_mu_outer[t_g0, t_i, t_j] * present_x[i_points]
            lam_z_onehot[i_points, t_g0] += -0.5 * partial_sum
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
        n_D,
        x,
        P,
        E_mu_value,
        present_x,
        E_mu_outer,
        item_weight,
        logdet_P,
        dim_x,
        evaluate,
        acc_z_0_threads,
        acc_x_2_threads,
        acc_x_3_threads,
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
        acc_x_2_t = acc_x_2_threads[thread]
        acc_x_3_t = acc_x_3_threads[thread]
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
                update_z(i_points, True, lam_z_onehot, n_K, E_pi_log, n_D, x, P, E_mu_value, present_x, E_mu_outer, E_z_onehot)
            # acc_z_0[k] += q(z[points]=k)  (gmm_means.cem:25:5)
            for t_k in range(n_K):
                acc_z_0_t[t_k] += item_weight[i_points] * E_z_onehot[i_points, t_k]
            # acc_x_2[g0, j] += x[points] · P · q(z[points]=g0) · present(x[points])  (gmm_means.cem:26:5)
            for t_i in range(n_D):
                for t_g0 in range(n_K):
                    for t_j in range(n_D):
                        acc_x_2_t[t_g0, t_j] += item_weight[i_points] * x[i_points, t_i] * P[t_i, t_j] * E_z_onehot[i_points, t_g0] * present_x[i_points]
            # acc_x_3[g0, i, j] += P · q(z[points]=g0) · present(x[points])  (gmm_means.cem:26:5)
            for t_g0 in range(n_K):
                for t_i in range(n_D):
                    for t_j in range(n_D):
                        acc_x_3_t[t_g0, t_i, t_j] += item_weight[i_points] * P[t_i, t_j] * E_z_onehot[i_points, t_g0] * present_x[i_points]
            # ELBO: local terms and local entropies (a stochastic step has no use for them)
            if evaluate:
                elbo += 0.5 * logdet_P * present_x[i_points]
                for t_i in range(n_D):
                    for t_j in range(n_D):
                        elbo += -0.5 * P[t_i, t_j] * x[i_points, t_i] * x[i_points, t_j] * present_x[i_points]
                elbo += -0.9189385332046727 * dim_x * present_x[i_points]
                elbo += (rt.categorical_entropy(E_z_onehot[i_points]))
        shares_total += elbo  # summed in share order, as rt.run_shares sums
    return shares_total


@njit(cache=True, nogil=True, error_model="numpy")
def evidence_z(
        i_points,
        lam_z_onehot,
        n_K,
        E_pi_log,
        n_D,
        x,
        P,
        E_mu_value,
        present_x,
        E_mu_outer,
):
    """lam_z_onehot[row, c] = exp(λ_c − max_c λ_c), λ the messages to z from data and globals
    (every message but the integrated-out proportions'): the part of its conditional that
    stays fixed during a Gibbs or CVB0 step.
    """
    lam_z_onehot[i_points] = 0.0
    # from z ~ Categorical (gmm_means.cem:25:5)
    for t_k in range(n_K):
        lam_z_onehot[i_points, t_k] += E_pi_log[0, t_k]
    # from x ~ MultivariateNormal (gmm_means.cem:26:5)
    for t_g0 in range(n_K):
        partial_sum = 0.0
        for t_i in range(n_D):
            for t_j in range(n_D):
                partial_sum += x[i_points, t_i] * P[t_i, t_j] * E_mu_value[t_g0, t_j] * present_x[i_points]
        lam_z_onehot[i_points, t_g0] += partial_sum
    # from x ~ MultivariateNormal (gmm_means.cem:26:5)
    for t_g0 in range(n_K):
        partial_sum = 0.0
        for t_i in range(n_D):
            for t_j in range(n_D):
                partial_sum += P[t_i, t_j] * E_mu_outer[t_g0, t_i, t_j] * present_x[i_points]
        lam_z_onehot[i_points, t_g0] += -0.5 * partial_sum
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
        n_D,
        x,
        P,
        E_mu_value,
        present_x,
        E_mu_outer,
        E_z_onehot,
        item_weight,
        acc_z_0,
        acc_x_2,
        acc_x_3,
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
        evidence_z(i_points, lam_z_onehot, n_K, E_pi_log, n_D, x, P, E_mu_value, present_x, E_mu_outer)
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
        # acc_z_0[k] += q(z[points]=k)  (gmm_means.cem:25:5)
        for t_k in range(n_K):
            acc_z_0[t_k] += item_weight[i_points] * E_z_onehot[i_points, t_k]
        # acc_x_2[g0, j] += x[points] · P · q(z[points]=g0) · present(x[points])  (gmm_means.cem:26:5)
        for t_i in range(n_D):
            for t_g0 in range(n_K):
                for t_j in range(n_D):
                    acc_x_2[t_g0, t_j] += item_weight[i_points] * x[i_points, t_i] * P[t_i, t_j] * E_z_onehot[i_points, t_g0] * present_x[i_points]
        # acc_x_3[g0, i, j] += P · q(z[points]=g0) · present(x[points])  (gmm_means.cem:26:5)
        for t_g0 in range(n_K):
            for t_i in range(n_D):
                for t_j in range(n_D):
                    acc_x_3[t_g0, t_i, t_j] += item_weight[i_points] * P[t_i, t_j] * E_z_onehot[i_points, t_g0] * present_x[i_points]


@njit(cache=True, nogil=True, error_model="numpy")
def local_step_cvb0(
        items,
        max_local_iter,
        local_tol,
        lam_z_onehot,
        n_K,
        E_pi_log,
        n_D,
        x,
        P,
        E_mu_value,
        present_x,
        E_mu_outer,
        E_z_onehot,
        item_weight,
        acc_z_0,
        acc_x_2,
        acc_x_3,
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
        evidence_z(i_points, lam_z_onehot, n_K, E_pi_log, n_D, x, P, E_mu_value, present_x, E_mu_outer)
        # start: each row given the ones before it
        total = 0.0
        for t_c in range(n_K):
            p_z[t_c] = lam_z_onehot[i_points, t_c]
            total += p_z[t_c]
        w_row = 1.0
        for t_c in range(n_K):
            E_z_onehot[i_points, t_c] = p_z[t_c] / total
        # acc_z_0[k] += q(z[points]=k)  (gmm_means.cem:25:5)
        for t_k in range(n_K):
            acc_z_0[t_k] += item_weight[i_points] * E_z_onehot[i_points, t_k]
        # acc_x_2[g0, j] += x[points] · P · q(z[points]=g0) · present(x[points])  (gmm_means.cem:26:5)
        for t_i in range(n_D):
            for t_g0 in range(n_K):
                for t_j in range(n_D):
                    acc_x_2[t_g0, t_j] += item_weight[i_points] * x[i_points, t_i] * P[t_i, t_j] * E_z_onehot[i_points, t_g0] * present_x[i_points]
        # acc_x_3[g0, i, j] += P · q(z[points]=g0) · present(x[points])  (gmm_means.cem:26:5)
        for t_g0 in range(n_K):
            for t_i in range(n_D):
                for t_j in range(n_D):
                    acc_x_3[t_g0, t_i, t_j] += item_weight[i_points] * P[t_i, t_j] * E_z_onehot[i_points, t_g0] * present_x[i_points]


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def update_mu(
        data_scale,
        lam_mu_value,
        lam_mu_outer,
        n_D,
        P0,
        m0,
        acc_x_2,
        acc_x_3,
        expect,
        E_mu_value,
        E_mu_outer,
        n_K,
):
    """q(mu[k]) = MultivariateNormal(mean, precision)
        precision_vi = P0_vi + Σ_{n} P_vi·q(z[n] = k)
        precision·mean_v = Σ_{i} P0_vi·m0_i + Σ_{n,i} x[n]_i·P_iv·q(z[n] = k)

    (gmm_means.cem:22:5)
    """
    for i_components in range(n_K):
        lam_mu_value[i_components] = 0.0
        lam_mu_outer[i_components] = 0.0
        # from mu ~ MultivariateNormal (gmm_means.cem:22:5)
        for t_i in range(n_D):
            for t_j in range(n_D):
                lam_mu_outer[i_components, t_i, t_j] += -0.5 * P0[t_i, t_j]
        # from mu ~ MultivariateNormal (gmm_means.cem:22:5)
        for t_i in range(n_D):
            partial_sum = 0.0
            for t_j in range(n_D):
                partial_sum += P0[t_i, t_j] * m0[t_j]
            lam_mu_value[i_components, t_i] += partial_sum
        # from x ~ MultivariateNormal (gmm_means.cem:26:5)
        for t_j in range(n_D):
            lam_mu_value[i_components, t_j] += data_scale * acc_x_2[i_components, t_j]
        # from x ~ MultivariateNormal (gmm_means.cem:26:5)
        for t_i in range(n_D):
            for t_j in range(n_D):
                lam_mu_outer[i_components, t_i, t_j] += -0.5 * data_scale * acc_x_3[i_components, t_i, t_j]
        if expect:  # a stochastic step mixes λ first (λ̂ may be invalid)
            rt.mvn_expected_stats(lam_mu_value[i_components], lam_mu_outer[i_components], E_mu_value[i_components], E_mu_outer[i_components])


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def update_pi(data_scale, lam_pi_log, n_K, alpha, acc_z_0, expect, E_pi_log):
    """q(pi) = Dirichlet(α)
        α_v = alpha + Σ_{n} q(z[n] = v)

    (gmm_means.cem:20:1)
    """
    lam_pi_log[0] = 0.0
    # from pi ~ Dirichlet (gmm_means.cem:20:1)
    for t_k in range(n_K):
        lam_pi_log[0, t_k] += alpha
    # from pi ~ Dirichlet (gmm_means.cem:20:1)
    for t_k in range(n_K):
        lam_pi_log[0, t_k] += -1.0
    # from z ~ Categorical (gmm_means.cem:25:5)
    for t_k in range(n_K):
        lam_pi_log[0, t_k] += data_scale * acc_z_0[t_k]
    if expect:  # a stochastic step mixes λ first (λ̂ may be invalid)
        rt.dirichlet_expected_stats(lam_pi_log[0], E_pi_log[0])


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def refresh_globals(lam_mu_value, E_mu_value, lam_mu_outer, E_mu_outer, n_K, lam_pi_log, E_pi_log):
    """Expected statistics of the globals from their natural parameters."""
    for i_components in range(n_K):
        rt.mvn_expected_stats(lam_mu_value[i_components], lam_mu_outer[i_components], E_mu_value[i_components], E_mu_outer[i_components])
    rt.dirichlet_expected_stats(lam_pi_log[0], E_pi_log[0])


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def elbo_global(
        n_K,
        alpha,
        E_pi_log,
        lgamma_sum_alpha,
        lgamma_alpha,
        logdet_P0,
        n_D,
        P0,
        E_mu_outer,
        E_mu_value,
        m0,
        outer_m0,
        dim_mu,
        acc_z_0,
        acc_x_2,
        acc_x_3,
        lam_mu_value,
        lam_mu_outer,
        lam_pi_log,
):
    """ELBO terms of the global factors (see elbo_terms in the README)."""
    elbo = 0.0
    # E[log p(pi | ...)]  (gmm_means.cem:20:1)
    for t_k in range(n_K):
        elbo += alpha * E_pi_log[0, t_k]
    for t_k in range(n_K):
        elbo += -E_pi_log[0, t_k]
    elbo += lgamma_sum_alpha
    for t_k in range(n_K):
        elbo += -lgamma_alpha
    # E[log p(mu | ...)]  (gmm_means.cem:22:5)
    for i_components in range(n_K):
        elbo += 0.5 * logdet_P0
    for i_components in range(n_K):
        for t_i in range(n_D):
            for t_j in range(n_D):
                elbo += -0.5 * P0[t_i, t_j] * E_mu_outer[i_components, t_i, t_j]
    for i_components in range(n_K):
        for t_i in range(n_D):
            for t_j in range(n_D):
                elbo += E_mu_value[i_components, t_i] * P0[t_i, t_j] * m0[t_j]
    for i_components in range(n_K):
        for t_i in range(n_D):
            for t_j in range(n_D):
                elbo += -0.5 * P0[t_i, t_j] * outer_m0[t_i, t_j]
    for i_components in range(n_K):
        elbo += -0.9189385332046727 * dim_mu
    # E[log p(z | ...)]  (gmm_means.cem:25:5)
    for t_k in range(n_K):
        elbo += acc_z_0[t_k] * E_pi_log[0, t_k]
    # E[log p(x | ...)]  (gmm_means.cem:26:5)
    for t_g0 in range(n_K):
        for t_j in range(n_D):
            elbo += acc_x_2[t_g0, t_j] * E_mu_value[t_g0, t_j]
    for t_g0 in range(n_K):
        for t_i in range(n_D):
            for t_j in range(n_D):
                elbo += -0.5 * acc_x_3[t_g0, t_i, t_j] * E_mu_outer[t_g0, t_i, t_j]
    # entropy of q(mu)
    for i_components in range(n_K):
        elbo += rt.mvn_log_normalizer(lam_mu_value[i_components], lam_mu_outer[i_components]) - rt.frobenius(lam_mu_value[i_components], E_mu_value[i_components]) - rt.frobenius(lam_mu_outer[i_components], E_mu_outer[i_components])
    # entropy of q(pi)
    elbo += rt.dirichlet_log_normalizer(lam_pi_log[0]) - rt.frobenius(lam_pi_log[0], E_pi_log[0])
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
        n_D,
        x,
        P,
        present_x,
        logdet_P,
        dim_x,
        acc_z_0_threads,
        acc_x_2_threads,
        acc_x_3_threads,
):
    """KLC statistics: q(Z) = softmax(θ), each collapsed local's mean-field update given q(Z),
    and the collapsed globals' sufficient statistics (accumulators).
    Returns the ELBO terms that involve only local variables and data.
    """
    shares_total = 0.0
    for thread in range(share_start, share_stop):  # one call runs these shares, one after another
        acc_z_0_t = acc_z_0_threads[thread]
        acc_x_2_t = acc_x_2_threads[thread]
        acc_x_3_t = acc_x_3_threads[thread]
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
            # acc_z_0[k] += q(z[points]=k)  (gmm_means.cem:25:5)
            for t_k in range(n_K):
                acc_z_0_t[t_k] += item_weight[i_points] * E_z_onehot[i_points, t_k]
            # acc_x_2[g0, j] += x[points] · P · q(z[points]=g0) · present(x[points])  (gmm_means.cem:26:5)
            for t_i in range(n_D):
                for t_g0 in range(n_K):
                    for t_j in range(n_D):
                        acc_x_2_t[t_g0, t_j] += item_weight[i_points] * x[i_points, t_i] * P[t_i, t_j] * E_z_onehot[i_points, t_g0] * present_x[i_points]
            # acc_x_3[g0, i, j] += P · q(z[points]=g0) · present(x[points])  (gmm_means.cem:26:5)
            for t_g0 in range(n_K):
                for t_i in range(n_D):
                    for t_j in range(n_D):
                        acc_x_3_t[t_g0, t_i, t_j] += item_weight[i_points] * P[t_i, t_j] * E_z_onehot[i_points, t_g0] * present_x[i_points]
            # ELBO: local terms and local entropies
            elbo += 0.5 * logdet_P * present_x[i_points]
            for t_i in range(n_D):
                for t_j in range(n_D):
                    elbo += -0.5 * P[t_i, t_j] * x[i_points, t_i] * x[i_points, t_j] * present_x[i_points]
            elbo += -0.9189385332046727 * dim_x * present_x[i_points]
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
        n_D,
        x,
        P,
        E_mu_value,
        present_x,
        E_mu_outer,
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
            update_z(i_points, True, lam_z_onehot, n_K, E_pi_log, n_D, x, P, E_mu_value, present_x, E_mu_outer, E_z_onehot)
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
    hypers = rt.check_hyper_names(hypers, ['alpha', 'm0', 'P0', 'P'])
    bound = rt.bind_data(SPEC, data, dims, missing=True)
    n_K, n_D, n_N = bound.dims['K'], bound.dims['D'], bound.dims['N']
    # refuse before allocating more than the machine's memory
    rt.check_memory(bound, {('D',): 1, ('D', 'D'): 2, ('K', 'D'): 3, ('K', 'D', 'D'): 3, (1, 'K'): 2, ('N', 'K'): 2, ('K',): 1, ('threads', 'K'): 1, ('threads', 'K', 'D'): 1, ('threads', 'K', 'D', 'D'): 1, ('N',): 3})
    x = bound.arrays['x']
    # hyperparameters (defaults from the model file; out of core the fit's current values)
    alpha = rt.hyper_value(hypers, 'alpha', 1.0, (), domain='shape') if share is None else share.alpha
    m0 = rt.hyper_value(hypers, 'm0', np.zeros(n_D), (n_D,)) if share is None else share.m0
    P0 = rt.hyper_value(hypers, 'P0', (np.eye(n_D) * 0.01), (n_D, n_D), domain='spd') if share is None else share.P0
    P = rt.hyper_value(hypers, 'P', np.eye(n_D), (n_D, n_D), domain='spd') if share is None else share.P
    # known quantities: functions of hyperparameters and data
    lgamma_sum_alpha = rt.gammaln(n_K * alpha)  # lgamma_sum(repeat(alpha, K))
    lgamma_alpha = rt.gammaln(alpha)  # lgamma(repeat(alpha, K))
    logdet_P0 = rt.logdet(P0)  # logdet(P0)
    outer_m0 = np.outer(m0, m0)  # outer(m0)
    dim_mu = n_D  # dim(mu[components])
    logdet_P = rt.logdet(P)  # logdet(P)
    present_x = rt.present(bound, 'x')  # present(x[points])
    dim_x = n_D  # dim(x[points])
    # variational parameters (natural, coefficient form) and E[t]
    lam_mu_value, E_mu_value = (np.zeros((n_K, n_D)), np.zeros((n_K, n_D))) if share is None else (share.lam_mu_value, share.E_mu_value)
    lam_mu_outer, E_mu_outer = (np.zeros((n_K, n_D, n_D)), np.zeros((n_K, n_D, n_D))) if share is None else (share.lam_mu_outer, share.E_mu_outer)
    lam_pi_log, E_pi_log = (np.zeros((1, n_K)), np.zeros((1, n_K))) if share is None else (share.lam_pi_log, share.E_pi_log)
    lam_z_onehot, E_z_onehot = np.zeros((n_N, n_K)), np.zeros((n_N, n_K))
    # sufficient statistics the local step hands to the global step (out of core added up over minibatches)
    acc_z_0 = np.zeros((n_K,)) if share is None else share.acc_z_0
    acc_x_2 = np.zeros((n_K, n_D)) if share is None else share.acc_x_2
    acc_x_3 = np.zeros((n_K, n_D, n_D)) if share is None else share.acc_x_3
    # the local step's shares: one per thread, fewer for small data
    n_threads = rt.share_count(bound)
    acc_z_0_threads = rt.thread_copies(n_threads, acc_z_0) if share is None else share.acc_z_0_threads
    acc_x_2_threads = rt.thread_copies(n_threads, acc_x_2) if share is None else share.acc_x_2_threads
    acc_x_3_threads = rt.thread_copies(n_threads, acc_x_3) if share is None else share.acc_x_3_threads
    all_items = np.arange(n_N)  # the local step runs over these
    item_weight = np.ones(n_N)  # each item's weight in the statistics (SVI+ perturbs it)
    seed_category = np.full(n_N, -1)
    if share is not None:  # out of core: a minibatch's state, sharing the fit's
        return rt.State(bound=bound, alpha=alpha, m0=m0, P0=P0, P=P, seed_category=seed_category, E_z_onehot=E_z_onehot, n_K=n_K, lam_z_onehot=lam_z_onehot, E_pi_log=E_pi_log, n_D=n_D, x=x, E_mu_value=E_mu_value, present_x=present_x, E_mu_outer=E_mu_outer, item_weight=item_weight, logdet_P=logdet_P, dim_x=dim_x, acc_z_0_threads=acc_z_0_threads, acc_x_2_threads=acc_x_2_threads, acc_x_3_threads=acc_x_3_threads, acc_z_0=acc_z_0, acc_x_2=acc_x_2, acc_x_3=acc_x_3, lam_mu_value=lam_mu_value, lam_mu_outer=lam_mu_outer, lam_pi_log=lam_pi_log, lgamma_sum_alpha=lgamma_sum_alpha, lgamma_alpha=lgamma_alpha, logdet_P0=logdet_P0, outer_m0=outer_m0, dim_mu=dim_mu, all_items=all_items)
    # start every global at its prior
    update_mu(0.0, lam_mu_value, lam_mu_outer, n_D, P0, m0, acc_x_2, acc_x_3, True, E_mu_value, E_mu_outer, n_K)
    update_pi(0.0, lam_pi_log, n_K, alpha, acc_z_0, True, E_pi_log)
    if init is not None:  # warm start: the globals' natural parameters from an earlier fit
        rt.load_state(init, {'lam_mu_value': lam_mu_value, 'lam_mu_outer': lam_mu_outer, 'lam_pi_log': lam_pi_log})
        refresh_globals(lam_mu_value, E_mu_value, lam_mu_outer, E_mu_outer, n_K, lam_pi_log, E_pi_log)
    start = DEFAULT_START if start is None else start
    if init is None and start == 'seeds':
        # start from k-means++ seed items (see cemodel.runtime.seeding); not part of the ELBO trace
        seed_category = rt.seed_categories(SPEC, bound.arrays, 'points', n_N, n_K, seed, bound.missing)
        # the globals start from the seed items' statistics alone
        seed_items = np.flatnonzero(seed_category >= 0)
        acc_z_0[...] = 0.0
        acc_x_2[...] = 0.0
        acc_x_3[...] = 0.0
        rt.run_shares(local_step, acc_z_0_threads.shape[0], (True, seed_items, seed_category, max_local_iter, local_tol, E_z_onehot, n_K, lam_z_onehot, E_pi_log, n_D, x, P, E_mu_value, present_x, E_mu_outer, item_weight, logdet_P, dim_x, False, acc_z_0_threads, acc_x_2_threads, acc_x_3_threads,), ((acc_z_0, acc_z_0_threads), (acc_x_2, acc_x_2_threads), (acc_x_3, acc_x_3_threads),))
        update_mu(1.0, lam_mu_value, lam_mu_outer, n_D, P0, m0, acc_x_2, acc_x_3, True, E_mu_value, E_mu_outer, n_K)
        update_pi(1.0, lam_pi_log, n_K, alpha, acc_z_0, True, E_pi_log)
    elif init is None and start == 'random':
        # start from random pseudo-counts on the count-type globals (Hoffman et al. 2010)
        rng = np.random.default_rng(seed)
        lam_pi_log += rng.gamma(100.0, 0.01, lam_pi_log.shape)
        rt.start_at_draw('mvn', lam_mu_value, lam_mu_outer, rng)
        refresh_globals(lam_mu_value, E_mu_value, lam_mu_outer, E_mu_outer, n_K, lam_pi_log, E_pi_log)
    elif init is None and start == 'prior':
        raise rt.CemDataError("start: expected 'seeds' or 'random', found 'prior' (from the prior the components start alike and stay alike)")
    elif init is None:
        raise rt.CemDataError(f"start: expected 'seeds' or 'random', found {start!r}")
    return rt.State(bound=bound, alpha=alpha, m0=m0, P0=P0, P=P, seed_category=seed_category, E_z_onehot=E_z_onehot, n_K=n_K, lam_z_onehot=lam_z_onehot, E_pi_log=E_pi_log, n_D=n_D, x=x, E_mu_value=E_mu_value, present_x=present_x, E_mu_outer=E_mu_outer, item_weight=item_weight, logdet_P=logdet_P, dim_x=dim_x, acc_z_0_threads=acc_z_0_threads, acc_x_2_threads=acc_x_2_threads, acc_x_3_threads=acc_x_3_threads, acc_z_0=acc_z_0, acc_x_2=acc_x_2, acc_x_3=acc_x_3, lam_mu_value=lam_mu_value, lam_mu_outer=lam_mu_outer, lam_pi_log=lam_pi_log, lgamma_sum_alpha=lgamma_sum_alpha, lgamma_alpha=lgamma_alpha, logdet_P0=logdet_P0, outer_m0=outer_m0, dim_mu=dim_mu, all_items=all_items)


def _learn(s, learn, rho=1.0, items=slice(None)):
    """Empirical Bayes (Minka 2000): each learned hyperparameter a step rho towards its ELBO maximiser given q."""
    if 'alpha' in learn:  # the prior of pi
        s.alpha = (1.0 - rho) * s.alpha + rho * rt.learn_symmetric_dirichlet(s.alpha, s.E_pi_log)
    # known quantities that depend on hyperparameters
    s.lgamma_sum_alpha = rt.gammaln(s.n_K * s.alpha)
    s.lgamma_alpha = rt.gammaln(s.alpha)


def _result(s, trace, converged, seconds, items=True):
    """The posterior in usual parameters, expectations and the state; items=False: the globals only."""
    posterior = {}
    state = {'lam_mu_value': s.lam_mu_value, 'lam_mu_outer': s.lam_mu_outer, 'lam_pi_log': s.lam_pi_log}
    mu__mean, mu__precision = rt.mvn_params(s.lam_mu_value, s.lam_mu_outer)
    posterior['mu.mean'] = mu__mean
    posterior['mu.precision'] = mu__precision
    posterior['E[value mu]'] = s.E_mu_value
    posterior['E[outer mu]'] = s.E_mu_outer
    pi__alpha = rt.dirichlet_params(s.lam_pi_log)
    posterior['pi.alpha'] = pi__alpha[0]
    posterior['E[log pi]'] = s.E_pi_log[0]
    if items:  # out of core the state holds one minibatch's items
        z__probs = rt.categorical_params(s.lam_z_onehot)
        posterior['z.probs'] = z__probs
        posterior['E[onehot z]'] = s.E_z_onehot
        state['lam_z_onehot'] = s.lam_z_onehot
    missing = rt.missing_posteriors(s, MISSING) if items else {}
    return rt.FitResult(posterior=posterior, elbo=np.array(trace), iterations=len(trace), converged=converged, seconds=seconds, dims=dict(s.bound.dims), hypers={'alpha': s.alpha, 'm0': s.m0, 'P0': s.P0, 'P': s.P}, state=state, missing=missing)


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
    return rt.run_shares(local_step, s.acc_z_0_threads.shape[0], (seeding, items, s.seed_category, max_local_iter, local_tol, s.E_z_onehot, s.n_K, s.lam_z_onehot, s.E_pi_log, s.n_D, s.x, s.P, s.E_mu_value, s.present_x, s.E_mu_outer, s.item_weight, s.logdet_P, s.dim_x, evaluate, s.acc_z_0_threads, s.acc_x_2_threads, s.acc_x_3_threads,), ((s.acc_z_0, s.acc_z_0_threads), (s.acc_x_2, s.acc_x_2_threads), (s.acc_x_3, s.acc_x_3_threads),))


def run_local_step_gibbs(s, items, sweeps, burn_in):
    return local_step_gibbs(items, sweeps, burn_in, s.lam_z_onehot, s.n_K, s.E_pi_log, s.n_D, s.x, s.P, s.E_mu_value, s.present_x, s.E_mu_outer, s.E_z_onehot, s.item_weight, s.acc_z_0, s.acc_x_2, s.acc_x_3)


def run_local_step_cvb0(s, items, max_local_iter, local_tol):
    return local_step_cvb0(items, max_local_iter, local_tol, s.lam_z_onehot, s.n_K, s.E_pi_log, s.n_D, s.x, s.P, s.E_mu_value, s.present_x, s.E_mu_outer, s.E_z_onehot, s.item_weight, s.acc_z_0, s.acc_x_2, s.acc_x_3)


def _update_mu(s, data_scale, expect=True):
    update_mu(data_scale, s.lam_mu_value, s.lam_mu_outer, s.n_D, s.P0, s.m0, s.acc_x_2, s.acc_x_3, expect, s.E_mu_value, s.E_mu_outer, s.n_K)


def _update_pi(s, data_scale, expect=True):
    update_pi(data_scale, s.lam_pi_log, s.n_K, s.alpha, s.acc_z_0, expect, s.E_pi_log)


def refresh(s):
    refresh_globals(s.lam_mu_value, s.E_mu_value, s.lam_mu_outer, s.E_mu_outer, s.n_K, s.lam_pi_log, s.E_pi_log)


def elbo_of_globals(s):
    return elbo_global(s.n_K, s.alpha, s.E_pi_log, s.lgamma_sum_alpha, s.lgamma_alpha, s.logdet_P0, s.n_D, s.P0, s.E_mu_outer, s.E_mu_value, s.m0, s.outer_m0, s.dim_mu, s.acc_z_0, s.acc_x_2, s.acc_x_3, s.lam_mu_value, s.lam_mu_outer, s.lam_pi_log)


GLOBALS = (  # the globals as the stochastic drivers move them
    rt.Global('mu', 'mvn', lam=('lam_mu_value', 'lam_mu_outer'), E=('E_mu_value', 'E_mu_outer'),
              update=_update_mu, aux_draws=1, after_sample=None),
    rt.Global('pi', 'dirichlet', lam=('lam_pi_log',), E=('E_pi_log',),
              update=_update_pi, aux_draws=1, after_sample=None),
)


def fit(data, **options):
    """Batch mean-field VB (options: cemodel.runtime.drivers.mf.fit). One iteration:
        statistics ← 0; elbo = run_local_step(s, s.all_items, ...)  # E-step
        _update_mu(s, 1.0)  # q(mu)
        _update_pi(s, 1.0)  # q(pi)
        elbo += elbo_of_globals(s)
    """
    return rt.drivers.mf.fit(_THIS, data, **options)


def fit_svi(data, **options):
    """SVI, SVI+ (options: cemodel.runtime.drivers.svi.fit). One step on a minibatch S:
        statistics ← 0; run_local_step(s, S, ...)
        _update_mu(s, N / len(S), expect=False)  # λ̂ of q(mu)
        _update_pi(s, N / len(S), expect=False)  # λ̂ of q(pi)
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
    s.acc_x_2[...] = 0.0
    s.acc_x_3[...] = 0.0
    value = rt.run_shares(klc_stats, s.acc_z_0_threads.shape[0], (s.all_items, s.lam_z_onehot, s.E_z_onehot, theta[0], s.item_weight, s.n_K, s.n_D, s.x, s.P, s.present_x, s.logdet_P, s.dim_x, s.acc_z_0_threads, s.acc_x_2_threads, s.acc_x_3_threads,), ((s.acc_z_0, s.acc_z_0_threads), (s.acc_x_2, s.acc_x_2_threads), (s.acc_x_3, s.acc_x_3_threads),))
    # the collapsed globals at their optimum given q(Z)
    update_mu(1.0, s.lam_mu_value, s.lam_mu_outer, s.n_D, s.P0, s.m0, s.acc_x_2, s.acc_x_3, True, s.E_mu_value, s.E_mu_outer, s.n_K)
    update_pi(1.0, s.lam_pi_log, s.n_K, s.alpha, s.acc_z_0, True, s.E_pi_log)
    return value + elbo_global(s.n_K, s.alpha, s.E_pi_log, s.lgamma_sum_alpha, s.lgamma_alpha, s.logdet_P0, s.n_D, s.P0, s.E_mu_outer, s.E_mu_value, s.m0, s.outer_m0, s.dim_mu, s.acc_z_0, s.acc_x_2, s.acc_x_3, s.lam_mu_value, s.lam_mu_outer, s.lam_pi_log)


def _klc_gradient(s, theta, natgrad, grad):
    """natgrad, grad and ⟨natgrad, grad⟩ at θ (call _klc_bound(s, θ) first)."""
    return rt.run_shares(klc_gradient, rt.share_count(s.bound), (s.all_items, s.lam_z_onehot, s.E_z_onehot, theta[0], natgrad[0], grad[0], s.n_K, s.E_pi_log, s.n_D, s.x, s.P, s.E_mu_value, s.present_x, s.E_mu_outer,), ())


def _klc_shapes(s):
    """The shapes of the softmax parameters θ of q(Z), one per member of KLC_LOCALS."""
    return [(s.bound.dims['N'], s.bound.dims['K'],)]


def _klc_logits(s):
    """θ of q(Z) as the state holds it (its natural parameters), one per member of KLC_LOCALS."""
    return [s.lam_z_onehot.copy()]


def fit_klc(data, **options):
    """KLC-CG (Hensman et al. 2012): pi, mu integrated out, q(z) by Riemannian CG."""
    return rt.drivers.klc.fit(_THIS, data, **options)
