"""dp_gmm: the model (kernels, data layout, start) for cemodel.runtime.drivers, by cemodel 0.1.0.

Model file: dp_gmm.cem (sha256 da3b1d9f556dea0f)
Regenerate with `cemodel compile dp_gmm.cem`; do not edit by hand.

Natural parameters are in coefficient form: q(x) ∝ exp(Σ_s lam_s · t_s(x)).
E_<var>_<stat> holds E_q[t_s]; acc_* hold sums over the data plate.
"""

import numpy as np
from numba import njit

from cemodel import runtime as rt

SOURCE = 'dp_gmm.cem'
SOURCE_SHA256 = 'da3b1d9f556dea0f209e7bf88e034acfc254e1e5ea6f39b9e7acb349c480254f'
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
    'klc': "no: 'mu' and 'Lambda' are not d-separated given z and the data: the path mu → x ← Lambda is active",
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
ROLES = {  # the state's arrays by what they hold (executors, checkpoints)
    'data': ('n_D', 'n_K', 'x'), 'hyper': ('alpha', 'm0', 'P0', 'nu0', 'W0'),
    'known': ('stick_keep_K', 'stick_below_K', 'present_x', 'dim_x', 'lbeta_c_alpha', 'logdet_P0', 'outer_m0', 'dim_mu', 'dim_Lambda', 'inv_W0', 'wishart_lognorm_nu0_W0'),
    'global': ('lam_Lambda_value', 'lam_Lambda_logdet', 'lam_mu_value', 'lam_mu_outer', 'lam_pi_sticks_log', 'lam_pi_sticks_log1m'),
    'global_exp': ('E_Lambda_value', 'E_mu_value', 'E_mu_outer', 'E_pi_sticks_log', 'E_pi_sticks_log1m', 'E_Lambda_logdet'),
    'kept_local': ('E_z_onehot', 'lam_z_onehot'), 'item': ('seed_category', 'item_weight'),
    'statistic': ('acc_z_0', 'acc_z_1', 'acc_x_0', 'acc_x_1', 'acc_x_2'),
    'thread': ('acc_z_0_threads', 'acc_z_1_threads', 'acc_x_0_threads', 'acc_x_1_threads', 'acc_x_2_threads'),
    'scratch': ('pre_z_4', 'pre_z_5'),
}
_THIS = rt.ModelView(globals())  # the model, as the drivers see it

SPEC = {
    "model": 'dp_gmm',
    "dims": {
        'K': {"default": 20, "ragged_over": None},
        'D': {"default": None, "ragged_over": None},
        'N': {"default": None, "ragged_over": None},
    },
    "plates": {
        'components': {"dim": 'K', "parent": None, "ragged": False},
        'points': {"dim": 'N', "parent": None, "ragged": False},
        'sticks_pi': {"dim": 'K', "parent": None, "ragged": False},
    },
    "observed": {
        'x': {"plates": ['points'], "support": 'vector', "shape": ['D'], "categories": None, "missing": 'yes'},
    },
    "covariates": {},
    "not_data": {'alpha': 'hyperparameter', 'm0': 'hyperparameter', 'P0': 'hyperparameter', 'nu0': 'hyperparameter', 'W0': 'hyperparameter', 'mu': 'latent', 'Lambda': 'latent', 'z': 'latent'},
}
MISSING = {  # observed entries that may be missing: their q (rt.missing_posteriors)
    'x': {"family": 'MultivariateNormal', "data_plate": 'a', "why_not": None,
        "terms": ((-0.5, ('value', 'value'), 'acd', (('E_Lambda_value', 'bcd'), ('E_z_onehot', 'ab'))), (1.0, ('value',), 'ac', (('E_Lambda_value', 'bcd'), ('E_mu_value', 'bd'), ('E_z_onehot', 'ab'))))},
}


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def update_z(
        i_points,
        with_children,
        lam_z_onehot,
        n_K,
        stick_keep_K,
        E_pi_sticks_log,
        stick_below_K,
        E_pi_sticks_log1m,
        E_Lambda_logdet,
        present_x,
        n_D,
        E_Lambda_value,
        x,
        pre_z_4,
        pre_z_5,
        E_z_onehot,
):
    """q(z[n]) = Categorical
        log q(z[n] = v) = [v < K]·E[log pi_sticks[v]] + Σ_{i} [i < v]·E[log(1 − pi_sticks[i])] + 0.5·E[log|Lambda[v]|] - 0.5·Σ_{i,j} E[Lambda[v]]_ij·x[n]_i·x[n]_j + Σ_{i,j} x[n]_i·E[Lambda[v]]_ij·E[mu[v]]_j - 0.5·Σ_{i,j} E[Lambda[v]]_ij·E[mu[v] mu[v]ᵀ]_ij + const

    (dp_gmm.cem:30:5)
    """
    lam_z_onehot[i_points] = 0.0
    # from z ~ Categorical (dp_gmm.cem:30:5)
    for t_k in range(n_K):
        lam_z_onehot[i_points, t_k] += stick_keep_K[t_k] * E_pi_sticks_log[t_k]
    # from z ~ Categorical (dp_gmm.cem:30:5)
    for t_k in range(n_K):
        partial_sum = 0.0
        for t_i0 in range(n_K):
            partial_sum += stick_below_K[t_k, t_i0] * E_pi_sticks_log1m[t_i0]
        lam_z_onehot[i_points, t_k] += partial_sum
    if with_children:
        # from x ~ MultivariateNormal (dp_gmm.cem:31:5)
        for t_g0 in range(n_K):
            lam_z_onehot[i_points, t_g0] += 0.5 * E_Lambda_logdet[t_g0] * present_x[i_points]
        # from x ~ MultivariateNormal (dp_gmm.cem:31:5)
        for t_g0 in range(n_K):
            partial_sum = 0.0
            for t_i in range(n_D):
                for t_j in range(n_D):
                    partial_sum += E_Lambda_value[t_g0, t_i, t_j] * x[i_points, t_i] * x[i_points, t_j] * present_x[i_points]
            lam_z_onehot[i_points, t_g0] += -0.5 * partial_sum
        # from x ~ MultivariateNormal (dp_gmm.cem:31:5), its global part precomputed by hoist_messages
        for t_g0 in range(n_K):
            partial_sum = 0.0
            for t_i in range(n_D):
                partial_sum += x[i_points, t_i] * present_x[i_points] * pre_z_4[t_g0, t_i]
            lam_z_onehot[i_points, t_g0] += partial_sum
        # from x ~ MultivariateNormal (dp_gmm.cem:31:5), its global part precomputed by hoist_messages
        for t_g0 in range(n_K):
            lam_z_onehot[i_points, t_g0] += -0.5 * present_x[i_points] * pre_z_5[t_g0]
    rt.categorical_expected_stats(lam_z_onehot[i_points], E_z_onehot[i_points])


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def hoist_messages(pre_z_4, n_D, n_K, E_Lambda_value, E_mu_value, pre_z_5, E_mu_outer):
    """The item-independent messages to the locals, into their pre_ arrays."""
    # pre_z_4: the global part of a message to q(z) from x ~ MultivariateNormal (dp_gmm.cem:31:5)
    pre_z_4[...] = 0.0
    for t_g0 in range(n_K):
        for t_i in range(n_D):
            partial_sum = 0.0
            for t_j in range(n_D):
                partial_sum += E_Lambda_value[t_g0, t_i, t_j] * E_mu_value[t_g0, t_j]
            pre_z_4[t_g0, t_i] += partial_sum
    # pre_z_5: the global part of a message to q(z) from x ~ MultivariateNormal (dp_gmm.cem:31:5)
    pre_z_5[...] = 0.0
    for t_g0 in range(n_K):
        partial_sum = 0.0
        for t_i in range(n_D):
            for t_j in range(n_D):
                partial_sum += E_Lambda_value[t_g0, t_i, t_j] * E_mu_outer[t_g0, t_i, t_j]
        pre_z_5[t_g0] += partial_sum


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
        stick_keep_K,
        E_pi_sticks_log,
        stick_below_K,
        E_pi_sticks_log1m,
        E_Lambda_logdet,
        present_x,
        n_D,
        E_Lambda_value,
        x,
        pre_z_4,
        pre_z_5,
        item_weight,
        dim_x,
        evaluate,
        acc_z_0_threads,
        acc_z_1_threads,
        acc_x_0_threads,
        acc_x_1_threads,
        acc_x_2_threads,
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
        acc_z_1_t = acc_z_1_threads[thread]
        acc_x_0_t = acc_x_0_threads[thread]
        acc_x_1_t = acc_x_1_threads[thread]
        acc_x_2_t = acc_x_2_threads[thread]
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
                update_z(i_points, True, lam_z_onehot, n_K, stick_keep_K, E_pi_sticks_log, stick_below_K, E_pi_sticks_log1m, E_Lambda_logdet, present_x, n_D, E_Lambda_value, x, pre_z_4, pre_z_5, E_z_onehot)
            # acc_z_0[k] += q(z[points]=k) · stick_keep(K)  (dp_gmm.cem:30:5)
            for t_k in range(n_K):
                acc_z_0_t[t_k] += item_weight[i_points] * E_z_onehot[i_points, t_k] * stick_keep_K[t_k]
            # acc_z_1[i0] += q(z[points]=k) · stick_below(K)  (dp_gmm.cem:30:5)
            for t_k in range(n_K):
                for t_i0 in range(n_K):
                    acc_z_1_t[t_i0] += item_weight[i_points] * E_z_onehot[i_points, t_k] * stick_below_K[t_k, t_i0]
            # acc_x_0[g0] += q(z[points]=g0) · present(x[points])  (dp_gmm.cem:31:5)
            for t_g0 in range(n_K):
                acc_x_0_t[t_g0] += item_weight[i_points] * E_z_onehot[i_points, t_g0] * present_x[i_points]
            # acc_x_1[g0, i, j] += x[points] · x[points] · q(z[points]=g0) · present(x[points])  (dp_gmm.cem:31:5)
            for t_g0 in range(n_K):
                for t_i in range(n_D):
                    for t_j in range(n_D):
                        acc_x_1_t[t_g0, t_i, t_j] += item_weight[i_points] * x[i_points, t_i] * x[i_points, t_j] * E_z_onehot[i_points, t_g0] * present_x[i_points]
            # acc_x_2[g0, i] += x[points] · q(z[points]=g0) · present(x[points])  (dp_gmm.cem:31:5)
            for t_g0 in range(n_K):
                for t_i in range(n_D):
                    acc_x_2_t[t_g0, t_i] += item_weight[i_points] * x[i_points, t_i] * E_z_onehot[i_points, t_g0] * present_x[i_points]
            # ELBO: local terms and local entropies (a stochastic step has no use for them)
            if evaluate:
                elbo += -0.9189385332046727 * dim_x * present_x[i_points]
                elbo += (rt.categorical_entropy(E_z_onehot[i_points]))
        shares_total += elbo  # summed in share order, as rt.run_shares sums
    return shares_total


@njit(cache=True, nogil=True, error_model="numpy")
def evidence_z(
        i_points,
        lam_z_onehot,
        n_K,
        stick_keep_K,
        E_pi_sticks_log,
        stick_below_K,
        E_pi_sticks_log1m,
        E_Lambda_logdet,
        present_x,
        n_D,
        E_Lambda_value,
        x,
        E_mu_value,
        E_mu_outer,
):
    """lam_z_onehot[row, c] = exp(λ_c − max_c λ_c), λ the messages to z from data and globals
    (every message but the integrated-out proportions'): the part of its conditional that
    stays fixed during a Gibbs or CVB0 step.
    """
    lam_z_onehot[i_points] = 0.0
    # from z ~ Categorical (dp_gmm.cem:30:5)
    for t_k in range(n_K):
        lam_z_onehot[i_points, t_k] += stick_keep_K[t_k] * E_pi_sticks_log[t_k]
    # from z ~ Categorical (dp_gmm.cem:30:5)
    for t_k in range(n_K):
        partial_sum = 0.0
        for t_i0 in range(n_K):
            partial_sum += stick_below_K[t_k, t_i0] * E_pi_sticks_log1m[t_i0]
        lam_z_onehot[i_points, t_k] += partial_sum
    # from x ~ MultivariateNormal (dp_gmm.cem:31:5)
    for t_g0 in range(n_K):
        lam_z_onehot[i_points, t_g0] += 0.5 * E_Lambda_logdet[t_g0] * present_x[i_points]
    # from x ~ MultivariateNormal (dp_gmm.cem:31:5)
    for t_g0 in range(n_K):
        partial_sum = 0.0
        for t_i in range(n_D):
            for t_j in range(n_D):
                partial_sum += E_Lambda_value[t_g0, t_i, t_j] * x[i_points, t_i] * x[i_points, t_j] * present_x[i_points]
        lam_z_onehot[i_points, t_g0] += -0.5 * partial_sum
    # from x ~ MultivariateNormal (dp_gmm.cem:31:5)
    for t_g0 in range(n_K):
        partial_sum = 0.0
        for t_i in range(n_D):
            for t_j in range(n_D):
                partial_sum += x[i_points, t_i] * E_Lambda_value[t_g0, t_i, t_j] * E_mu_value[t_g0, t_j] * present_x[i_points]
        lam_z_onehot[i_points, t_g0] += partial_sum
    # from x ~ MultivariateNormal (dp_gmm.cem:31:5)
    for t_g0 in range(n_K):
        partial_sum = 0.0
        for t_i in range(n_D):
            for t_j in range(n_D):
                partial_sum += E_Lambda_value[t_g0, t_i, t_j] * E_mu_outer[t_g0, t_i, t_j] * present_x[i_points]
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
        stick_keep_K,
        E_pi_sticks_log,
        stick_below_K,
        E_pi_sticks_log1m,
        E_Lambda_logdet,
        present_x,
        n_D,
        E_Lambda_value,
        x,
        E_mu_value,
        E_mu_outer,
        E_z_onehot,
        item_weight,
        acc_z_0,
        acc_z_1,
        acc_x_0,
        acc_x_1,
        acc_x_2,
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
        evidence_z(i_points, lam_z_onehot, n_K, stick_keep_K, E_pi_sticks_log, stick_below_K, E_pi_sticks_log1m, E_Lambda_logdet, present_x, n_D, E_Lambda_value, x, E_mu_value, E_mu_outer)
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
        # acc_z_0[k] += q(z[points]=k) · stick_keep(K)  (dp_gmm.cem:30:5)
        for t_k in range(n_K):
            acc_z_0[t_k] += item_weight[i_points] * E_z_onehot[i_points, t_k] * stick_keep_K[t_k]
        # acc_z_1[i0] += q(z[points]=k) · stick_below(K)  (dp_gmm.cem:30:5)
        for t_k in range(n_K):
            for t_i0 in range(n_K):
                acc_z_1[t_i0] += item_weight[i_points] * E_z_onehot[i_points, t_k] * stick_below_K[t_k, t_i0]
        # acc_x_0[g0] += q(z[points]=g0) · present(x[points])  (dp_gmm.cem:31:5)
        for t_g0 in range(n_K):
            acc_x_0[t_g0] += item_weight[i_points] * E_z_onehot[i_points, t_g0] * present_x[i_points]
        # acc_x_1[g0, i, j] += x[points] · x[points] · q(z[points]=g0) · present(x[points])  (dp_gmm.cem:31:5)
        for t_g0 in range(n_K):
            for t_i in range(n_D):
                for t_j in range(n_D):
                    acc_x_1[t_g0, t_i, t_j] += item_weight[i_points] * x[i_points, t_i] * x[i_points, t_j] * E_z_onehot[i_points, t_g0] * present_x[i_points]
        # acc_x_2[g0, i] += x[points] · q(z[points]=g0) · present(x[points])  (dp_gmm.cem:31:5)
        for t_g0 in range(n_K):
            for t_i in range(n_D):
                acc_x_2[t_g0, t_i] += item_weight[i_points] * x[i_points, t_i] * E_z_onehot[i_points, t_g0] * present_x[i_points]


@njit(cache=True, nogil=True, error_model="numpy")
def local_step_cvb0(
        items,
        max_local_iter,
        local_tol,
        lam_z_onehot,
        n_K,
        stick_keep_K,
        E_pi_sticks_log,
        stick_below_K,
        E_pi_sticks_log1m,
        E_Lambda_logdet,
        present_x,
        n_D,
        E_Lambda_value,
        x,
        E_mu_value,
        E_mu_outer,
        E_z_onehot,
        item_weight,
        acc_z_0,
        acc_z_1,
        acc_x_0,
        acc_x_1,
        acc_x_2,
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
        evidence_z(i_points, lam_z_onehot, n_K, stick_keep_K, E_pi_sticks_log, stick_below_K, E_pi_sticks_log1m, E_Lambda_logdet, present_x, n_D, E_Lambda_value, x, E_mu_value, E_mu_outer)
        # start: each row given the ones before it
        total = 0.0
        for t_c in range(n_K):
            p_z[t_c] = lam_z_onehot[i_points, t_c]
            total += p_z[t_c]
        w_row = 1.0
        for t_c in range(n_K):
            E_z_onehot[i_points, t_c] = p_z[t_c] / total
        # acc_z_0[k] += q(z[points]=k) · stick_keep(K)  (dp_gmm.cem:30:5)
        for t_k in range(n_K):
            acc_z_0[t_k] += item_weight[i_points] * E_z_onehot[i_points, t_k] * stick_keep_K[t_k]
        # acc_z_1[i0] += q(z[points]=k) · stick_below(K)  (dp_gmm.cem:30:5)
        for t_k in range(n_K):
            for t_i0 in range(n_K):
                acc_z_1[t_i0] += item_weight[i_points] * E_z_onehot[i_points, t_k] * stick_below_K[t_k, t_i0]
        # acc_x_0[g0] += q(z[points]=g0) · present(x[points])  (dp_gmm.cem:31:5)
        for t_g0 in range(n_K):
            acc_x_0[t_g0] += item_weight[i_points] * E_z_onehot[i_points, t_g0] * present_x[i_points]
        # acc_x_1[g0, i, j] += x[points] · x[points] · q(z[points]=g0) · present(x[points])  (dp_gmm.cem:31:5)
        for t_g0 in range(n_K):
            for t_i in range(n_D):
                for t_j in range(n_D):
                    acc_x_1[t_g0, t_i, t_j] += item_weight[i_points] * x[i_points, t_i] * x[i_points, t_j] * E_z_onehot[i_points, t_g0] * present_x[i_points]
        # acc_x_2[g0, i] += x[points] · q(z[points]=g0) · present(x[points])  (dp_gmm.cem:31:5)
        for t_g0 in range(n_K):
            for t_i in range(n_D):
                acc_x_2[t_g0, t_i] += item_weight[i_points] * x[i_points, t_i] * E_z_onehot[i_points, t_g0] * present_x[i_points]


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def update_Lambda(
        data_scale,
        lam_Lambda_value,
        lam_Lambda_logdet,
        nu0,
        dim_Lambda,
        n_D,
        inv_W0,
        acc_x_0,
        acc_x_1,
        acc_x_2,
        E_mu_value,
        E_mu_outer,
        expect,
        E_Lambda_value,
        E_Lambda_logdet,
        n_K,
):
    """q(Lambda[k]) = Wishart(dof, scale)
        dof = nu0 + Σ_{n} q(z[n] = k)
        scale⁻¹_vi = W0⁻¹_vi + Σ_{n} x[n]_v·x[n]_i·q(z[n] = k) - 2·Σ_{n} x[n]_v·E[mu[k]]_i·q(z[n] = k) + Σ_{n} E[mu[k] mu[k]ᵀ]_vi·q(z[n] = k)

    (dp_gmm.cem:27:5)
    """
    for i_components in range(n_K):
        lam_Lambda_value[i_components] = 0.0
        lam_Lambda_logdet[i_components] = 0.0
        # from Lambda ~ Wishart (dp_gmm.cem:27:5)
        lam_Lambda_logdet[i_components] += 0.5 * nu0
        # from Lambda ~ Wishart (dp_gmm.cem:27:5)
        lam_Lambda_logdet[i_components] += -0.5 * dim_Lambda
        # from Lambda ~ Wishart (dp_gmm.cem:27:5)
        lam_Lambda_logdet[i_components] += -0.5
        # from Lambda ~ Wishart (dp_gmm.cem:27:5)
        for t_i in range(n_D):
            for t_j in range(n_D):
                lam_Lambda_value[i_components, t_i, t_j] += -0.5 * inv_W0[t_i, t_j]
        # from x ~ MultivariateNormal (dp_gmm.cem:31:5)
        lam_Lambda_logdet[i_components] += 0.5 * data_scale * acc_x_0[i_components]
        # from x ~ MultivariateNormal (dp_gmm.cem:31:5)
        for t_i in range(n_D):
            for t_j in range(n_D):
                lam_Lambda_value[i_components, t_i, t_j] += -0.5 * data_scale * acc_x_1[i_components, t_i, t_j]
        # from x ~ MultivariateNormal (dp_gmm.cem:31:5)
        for t_i in range(n_D):
            for t_j in range(n_D):
                lam_Lambda_value[i_components, t_i, t_j] += data_scale * acc_x_2[i_components, t_i] * E_mu_value[i_components, t_j]
        # from x ~ MultivariateNormal (dp_gmm.cem:31:5)
        for t_i in range(n_D):
            for t_j in range(n_D):
                lam_Lambda_value[i_components, t_i, t_j] += -0.5 * data_scale * acc_x_0[i_components] * E_mu_outer[i_components, t_i, t_j]
        if expect:  # a stochastic step mixes λ first (λ̂ may be invalid)
            E_Lambda_logdet[i_components] = rt.wishart_expected_stats(lam_Lambda_value[i_components], lam_Lambda_logdet[i_components], E_Lambda_value[i_components])


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def update_mu(
        data_scale,
        lam_mu_value,
        lam_mu_outer,
        n_D,
        P0,
        m0,
        acc_x_2,
        E_Lambda_value,
        acc_x_0,
        expect,
        E_mu_value,
        E_mu_outer,
        n_K,
):
    """q(mu[k]) = MultivariateNormal(mean, precision)
        precision_vi = P0_vi + Σ_{n} E[Lambda[k]]_vi·q(z[n] = k)
        precision·mean_v = Σ_{i} P0_vi·m0_i + Σ_{n,i} x[n]_i·E[Lambda[k]]_iv·q(z[n] = k)

    (dp_gmm.cem:26:5)
    """
    for i_components in range(n_K):
        lam_mu_value[i_components] = 0.0
        lam_mu_outer[i_components] = 0.0
        # from mu ~ MultivariateNormal (dp_gmm.cem:26:5)
        for t_i in range(n_D):
            for t_j in range(n_D):
                lam_mu_outer[i_components, t_i, t_j] += -0.5 * P0[t_i, t_j]
        # from mu ~ MultivariateNormal (dp_gmm.cem:26:5)
        for t_i in range(n_D):
            partial_sum = 0.0
            for t_j in range(n_D):
                partial_sum += P0[t_i, t_j] * m0[t_j]
            lam_mu_value[i_components, t_i] += partial_sum
        # from x ~ MultivariateNormal (dp_gmm.cem:31:5)
        for t_i in range(n_D):
            for t_j in range(n_D):
                lam_mu_value[i_components, t_j] += data_scale * acc_x_2[i_components, t_i] * E_Lambda_value[i_components, t_i, t_j]
        # from x ~ MultivariateNormal (dp_gmm.cem:31:5)
        for t_i in range(n_D):
            for t_j in range(n_D):
                lam_mu_outer[i_components, t_i, t_j] += -0.5 * data_scale * acc_x_0[i_components] * E_Lambda_value[i_components, t_i, t_j]
        if expect:  # a stochastic step mixes λ first (λ̂ may be invalid)
            rt.mvn_expected_stats(lam_mu_value[i_components], lam_mu_outer[i_components], E_mu_value[i_components], E_mu_outer[i_components])


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def update_pi_sticks(
        data_scale,
        lam_pi_sticks_log,
        lam_pi_sticks_log1m,
        alpha,
        acc_z_0,
        acc_z_1,
        expect,
        E_pi_sticks_log,
        E_pi_sticks_log1m,
        n_K,
):
    """q(pi_sticks[k]) = Beta(a, b)
        a = 1 + Σ_{n} q(z[n] = k)·[k < K]
        b = alpha + Σ_{n,v} q(z[n] = v)·[k < v]

    (dp_gmm.cem:24:1)
    """
    for i_sticks_pi in range(n_K):
        lam_pi_sticks_log[i_sticks_pi] = 0.0
        lam_pi_sticks_log1m[i_sticks_pi] = 0.0
        # from pi_sticks ~ Beta (dp_gmm.cem:24:1)
        lam_pi_sticks_log[i_sticks_pi] += 1.0
        # from pi_sticks ~ Beta (dp_gmm.cem:24:1)
        lam_pi_sticks_log[i_sticks_pi] += -1.0
        # from pi_sticks ~ Beta (dp_gmm.cem:24:1)
        lam_pi_sticks_log1m[i_sticks_pi] += alpha
        # from pi_sticks ~ Beta (dp_gmm.cem:24:1)
        lam_pi_sticks_log1m[i_sticks_pi] += -1.0
        # from z ~ Categorical (dp_gmm.cem:30:5)
        lam_pi_sticks_log[i_sticks_pi] += data_scale * acc_z_0[i_sticks_pi]
        # from z ~ Categorical (dp_gmm.cem:30:5)
        lam_pi_sticks_log1m[i_sticks_pi] += data_scale * acc_z_1[i_sticks_pi]
        if expect:  # a stochastic step mixes λ first (λ̂ may be invalid)
            E_pi_sticks_log[i_sticks_pi], E_pi_sticks_log1m[i_sticks_pi] = rt.beta_expected_stats(lam_pi_sticks_log[i_sticks_pi], lam_pi_sticks_log1m[i_sticks_pi])


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def refresh_globals(
        lam_Lambda_value,
        E_Lambda_value,
        lam_Lambda_logdet,
        E_Lambda_logdet,
        n_K,
        lam_mu_value,
        E_mu_value,
        lam_mu_outer,
        E_mu_outer,
        lam_pi_sticks_log,
        E_pi_sticks_log,
        lam_pi_sticks_log1m,
        E_pi_sticks_log1m,
):
    """Expected statistics of the globals from their natural parameters."""
    for i_components in range(n_K):
        E_Lambda_logdet[i_components] = rt.wishart_expected_stats(lam_Lambda_value[i_components], lam_Lambda_logdet[i_components], E_Lambda_value[i_components])
    for i_components in range(n_K):
        rt.mvn_expected_stats(lam_mu_value[i_components], lam_mu_outer[i_components], E_mu_value[i_components], E_mu_outer[i_components])
    for i_sticks_pi in range(n_K):
        E_pi_sticks_log[i_sticks_pi], E_pi_sticks_log1m[i_sticks_pi] = rt.beta_expected_stats(lam_pi_sticks_log[i_sticks_pi], lam_pi_sticks_log1m[i_sticks_pi])


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def elbo_global(
        n_K,
        E_pi_sticks_log,
        alpha,
        E_pi_sticks_log1m,
        lbeta_c_alpha,
        logdet_P0,
        n_D,
        P0,
        E_mu_outer,
        E_mu_value,
        m0,
        outer_m0,
        dim_mu,
        nu0,
        E_Lambda_logdet,
        dim_Lambda,
        inv_W0,
        E_Lambda_value,
        wishart_lognorm_nu0_W0,
        acc_z_0,
        acc_z_1,
        acc_x_0,
        acc_x_1,
        acc_x_2,
        lam_Lambda_value,
        lam_Lambda_logdet,
        lam_mu_value,
        lam_mu_outer,
        lam_pi_sticks_log,
        lam_pi_sticks_log1m,
):
    """ELBO terms of the global factors (see elbo_terms in the README)."""
    elbo = 0.0
    # E[log p(pi_sticks | ...)]  (dp_gmm.cem:24:1)
    for i_sticks_pi in range(n_K):
        elbo += 1.0 * E_pi_sticks_log[i_sticks_pi]
    for i_sticks_pi in range(n_K):
        elbo += -E_pi_sticks_log[i_sticks_pi]
    for i_sticks_pi in range(n_K):
        elbo += alpha * E_pi_sticks_log1m[i_sticks_pi]
    for i_sticks_pi in range(n_K):
        elbo += -E_pi_sticks_log1m[i_sticks_pi]
    for i_sticks_pi in range(n_K):
        elbo += -lbeta_c_alpha
    # E[log p(mu | ...)]  (dp_gmm.cem:26:5)
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
    # E[log p(Lambda | ...)]  (dp_gmm.cem:27:5)
    for i_components in range(n_K):
        elbo += 0.5 * nu0 * E_Lambda_logdet[i_components]
    for i_components in range(n_K):
        elbo += -0.5 * dim_Lambda * E_Lambda_logdet[i_components]
    for i_components in range(n_K):
        elbo += -0.5 * E_Lambda_logdet[i_components]
    for i_components in range(n_K):
        for t_i in range(n_D):
            for t_j in range(n_D):
                elbo += -0.5 * inv_W0[t_i, t_j] * E_Lambda_value[i_components, t_i, t_j]
    for i_components in range(n_K):
        elbo += -wishart_lognorm_nu0_W0
    # E[log p(z | ...)]  (dp_gmm.cem:30:5)
    for t_k in range(n_K):
        elbo += acc_z_0[t_k] * E_pi_sticks_log[t_k]
    for t_i0 in range(n_K):
        elbo += acc_z_1[t_i0] * E_pi_sticks_log1m[t_i0]
    # E[log p(x | ...)]  (dp_gmm.cem:31:5)
    for t_g0 in range(n_K):
        elbo += 0.5 * acc_x_0[t_g0] * E_Lambda_logdet[t_g0]
    for t_g0 in range(n_K):
        for t_i in range(n_D):
            for t_j in range(n_D):
                elbo += -0.5 * acc_x_1[t_g0, t_i, t_j] * E_Lambda_value[t_g0, t_i, t_j]
    for t_g0 in range(n_K):
        for t_i in range(n_D):
            for t_j in range(n_D):
                elbo += acc_x_2[t_g0, t_i] * E_Lambda_value[t_g0, t_i, t_j] * E_mu_value[t_g0, t_j]
    for t_g0 in range(n_K):
        for t_i in range(n_D):
            for t_j in range(n_D):
                elbo += -0.5 * acc_x_0[t_g0] * E_Lambda_value[t_g0, t_i, t_j] * E_mu_outer[t_g0, t_i, t_j]
    # entropy of q(Lambda)
    for i_components in range(n_K):
        elbo += rt.wishart_log_normalizer(lam_Lambda_value[i_components], lam_Lambda_logdet[i_components]) - rt.frobenius(lam_Lambda_value[i_components], E_Lambda_value[i_components]) - lam_Lambda_logdet[i_components] * E_Lambda_logdet[i_components]
    # entropy of q(mu)
    for i_components in range(n_K):
        elbo += rt.mvn_log_normalizer(lam_mu_value[i_components], lam_mu_outer[i_components]) - rt.frobenius(lam_mu_value[i_components], E_mu_value[i_components]) - rt.frobenius(lam_mu_outer[i_components], E_mu_outer[i_components])
    # entropy of q(pi_sticks)
    for i_sticks_pi in range(n_K):
        elbo += rt.beta_log_normalizer(lam_pi_sticks_log[i_sticks_pi], lam_pi_sticks_log1m[i_sticks_pi]) - lam_pi_sticks_log[i_sticks_pi] * E_pi_sticks_log[i_sticks_pi] - lam_pi_sticks_log1m[i_sticks_pi] * E_pi_sticks_log1m[i_sticks_pi]
    return elbo


def _prepare(data, hypers, dims, seed, init, start, max_local_iter, local_tol, share=None):
    """Bind and check the data, evaluate hyperparameters and knowns, allocate the arrays, start the globals.
    share: out of core, the fit's state, whose globals, hyperparameters and statistics `data`'s minibatch shares.
    """
    hypers = rt.check_hyper_names(hypers, ['alpha', 'm0', 'P0', 'nu0', 'W0'])
    bound = rt.bind_data(SPEC, data, dims, missing=True)
    n_K, n_D, n_N = bound.dims['K'], bound.dims['D'], bound.dims['N']
    # refuse before allocating more than the machine's memory
    rt.check_memory(bound, {('D',): 1, ('D', 'D'): 2, ('K', 'D', 'D'): 5, ('K',): 9, ('K', 'D'): 3, ('N', 'K'): 2, ('threads', 'K'): 3, ('threads', 'K', 'D', 'D'): 1, ('threads', 'K', 'D'): 1, ('N',): 3})
    x = bound.arrays['x']
    # hyperparameters (defaults from the model file; out of core the fit's current values)
    alpha = rt.hyper_value(hypers, 'alpha', 1.0, (), domain='shape') if share is None else share.alpha
    m0 = rt.hyper_value(hypers, 'm0', np.zeros(n_D), (n_D,)) if share is None else share.m0
    P0 = rt.hyper_value(hypers, 'P0', (np.eye(n_D) * 0.01), (n_D, n_D), domain='spd') if share is None else share.P0
    nu0 = rt.hyper_value(hypers, 'nu0', (n_D + 2.0), (), domain='positive') if share is None else share.nu0
    W0 = rt.hyper_value(hypers, 'W0', np.eye(n_D), (n_D, n_D), domain='spd') if share is None else share.W0
    # known quantities: functions of hyperparameters and data
    lbeta_c_alpha = rt.lbeta(1.0, alpha)  # lbeta(1, alpha)
    logdet_P0 = rt.logdet(P0)  # logdet(P0)
    outer_m0 = np.outer(m0, m0)  # outer(m0)
    dim_mu = n_D  # dim(mu[components])
    dim_Lambda = n_D  # dim(Lambda[components])
    inv_W0 = rt.inv(W0)  # inv(W0)
    # wishart_lognorm(nu0, W0)
    wishart_lognorm_nu0_W0 = rt.wishart_lognorm(nu0, W0, 'Wishart scale matrix W0', 'Wishart degrees of freedom nu0')
    stick_keep_K = (np.arange(n_K) < n_K - 1) * 1.0  # stick_keep(K)
    stick_below_K = np.tri(n_K, n_K, -1)  # stick_below(K)
    present_x = rt.present(bound, 'x')  # present(x[points])
    dim_x = n_D  # dim(x[points])
    # variational parameters (natural, coefficient form) and E[t]
    lam_Lambda_value, E_Lambda_value = (np.zeros((n_K, n_D, n_D)), np.zeros((n_K, n_D, n_D))) if share is None else (share.lam_Lambda_value, share.E_Lambda_value)
    lam_Lambda_logdet, E_Lambda_logdet = (np.zeros((n_K,)), np.zeros((n_K,))) if share is None else (share.lam_Lambda_logdet, share.E_Lambda_logdet)
    lam_mu_value, E_mu_value = (np.zeros((n_K, n_D)), np.zeros((n_K, n_D))) if share is None else (share.lam_mu_value, share.E_mu_value)
    lam_mu_outer, E_mu_outer = (np.zeros((n_K, n_D, n_D)), np.zeros((n_K, n_D, n_D))) if share is None else (share.lam_mu_outer, share.E_mu_outer)
    lam_pi_sticks_log, E_pi_sticks_log = (np.zeros((n_K,)), np.zeros((n_K,))) if share is None else (share.lam_pi_sticks_log, share.E_pi_sticks_log)
    lam_pi_sticks_log1m, E_pi_sticks_log1m = (np.zeros((n_K,)), np.zeros((n_K,))) if share is None else (share.lam_pi_sticks_log1m, share.E_pi_sticks_log1m)
    lam_z_onehot, E_z_onehot = np.zeros((n_N, n_K)), np.zeros((n_N, n_K))
    pre_z_4 = np.zeros((n_K, n_D))  # the global part of a message to q(z) (hoist_messages)
    pre_z_5 = np.zeros((n_K,))  # the global part of a message to q(z) (hoist_messages)
    # sufficient statistics the local step hands to the global step (out of core added up over minibatches)
    acc_z_0 = np.zeros((n_K,)) if share is None else share.acc_z_0
    acc_z_1 = np.zeros((n_K,)) if share is None else share.acc_z_1
    acc_x_0 = np.zeros((n_K,)) if share is None else share.acc_x_0
    acc_x_1 = np.zeros((n_K, n_D, n_D)) if share is None else share.acc_x_1
    acc_x_2 = np.zeros((n_K, n_D)) if share is None else share.acc_x_2
    # the local step's shares: one per thread, fewer for small data
    n_threads = rt.share_count(bound)
    acc_z_0_threads = rt.thread_copies(n_threads, acc_z_0) if share is None else share.acc_z_0_threads
    acc_z_1_threads = rt.thread_copies(n_threads, acc_z_1) if share is None else share.acc_z_1_threads
    acc_x_0_threads = rt.thread_copies(n_threads, acc_x_0) if share is None else share.acc_x_0_threads
    acc_x_1_threads = rt.thread_copies(n_threads, acc_x_1) if share is None else share.acc_x_1_threads
    acc_x_2_threads = rt.thread_copies(n_threads, acc_x_2) if share is None else share.acc_x_2_threads
    all_items = np.arange(n_N)  # the local step runs over these
    item_weight = np.ones(n_N)  # each item's weight in the statistics (SVI+ perturbs it)
    seed_category = np.full(n_N, -1)
    if share is not None:  # out of core: a minibatch's state, sharing the fit's
        return rt.State(bound=bound, alpha=alpha, m0=m0, P0=P0, nu0=nu0, W0=W0, pre_z_4=pre_z_4, n_D=n_D, n_K=n_K, E_Lambda_value=E_Lambda_value, E_mu_value=E_mu_value, pre_z_5=pre_z_5, E_mu_outer=E_mu_outer, seed_category=seed_category, E_z_onehot=E_z_onehot, lam_z_onehot=lam_z_onehot, stick_keep_K=stick_keep_K, E_pi_sticks_log=E_pi_sticks_log, stick_below_K=stick_below_K, E_pi_sticks_log1m=E_pi_sticks_log1m, E_Lambda_logdet=E_Lambda_logdet, present_x=present_x, x=x, item_weight=item_weight, dim_x=dim_x, acc_z_0_threads=acc_z_0_threads, acc_z_1_threads=acc_z_1_threads, acc_x_0_threads=acc_x_0_threads, acc_x_1_threads=acc_x_1_threads, acc_x_2_threads=acc_x_2_threads, acc_z_0=acc_z_0, acc_z_1=acc_z_1, acc_x_0=acc_x_0, acc_x_1=acc_x_1, acc_x_2=acc_x_2, lam_Lambda_value=lam_Lambda_value, lam_Lambda_logdet=lam_Lambda_logdet, lam_mu_value=lam_mu_value, lam_mu_outer=lam_mu_outer, lam_pi_sticks_log=lam_pi_sticks_log, lam_pi_sticks_log1m=lam_pi_sticks_log1m, lbeta_c_alpha=lbeta_c_alpha, logdet_P0=logdet_P0, outer_m0=outer_m0, dim_mu=dim_mu, dim_Lambda=dim_Lambda, inv_W0=inv_W0, wishart_lognorm_nu0_W0=wishart_lognorm_nu0_W0, all_items=all_items)
    # start every global at its prior
    update_Lambda(0.0, lam_Lambda_value, lam_Lambda_logdet, nu0, dim_Lambda, n_D, inv_W0, acc_x_0, acc_x_1, acc_x_2, E_mu_value, E_mu_outer, True, E_Lambda_value, E_Lambda_logdet, n_K)
    update_mu(0.0, lam_mu_value, lam_mu_outer, n_D, P0, m0, acc_x_2, E_Lambda_value, acc_x_0, True, E_mu_value, E_mu_outer, n_K)
    update_pi_sticks(0.0, lam_pi_sticks_log, lam_pi_sticks_log1m, alpha, acc_z_0, acc_z_1, True, E_pi_sticks_log, E_pi_sticks_log1m, n_K)
    if init is not None:  # warm start: the globals' natural parameters from an earlier fit
        rt.load_state(init, {'lam_Lambda_value': lam_Lambda_value, 'lam_Lambda_logdet': lam_Lambda_logdet, 'lam_mu_value': lam_mu_value, 'lam_mu_outer': lam_mu_outer, 'lam_pi_sticks_log': lam_pi_sticks_log, 'lam_pi_sticks_log1m': lam_pi_sticks_log1m})
        refresh_globals(lam_Lambda_value, E_Lambda_value, lam_Lambda_logdet, E_Lambda_logdet, n_K, lam_mu_value, E_mu_value, lam_mu_outer, E_mu_outer, lam_pi_sticks_log, E_pi_sticks_log, lam_pi_sticks_log1m, E_pi_sticks_log1m)
    start = DEFAULT_START if start is None else start
    if init is None and start == 'seeds':
        # start from k-means++ seed items (see cemodel.runtime.seeding); not part of the ELBO trace
        seed_category = rt.seed_categories(SPEC, bound.arrays, 'points', n_N, n_K, seed, bound.missing)
        # the globals start from the seed items' statistics alone
        seed_items = np.flatnonzero(seed_category >= 0)
        acc_z_0[...] = 0.0
        acc_z_1[...] = 0.0
        acc_x_0[...] = 0.0
        acc_x_1[...] = 0.0
        acc_x_2[...] = 0.0
        hoist_messages(pre_z_4, n_D, n_K, E_Lambda_value, E_mu_value, pre_z_5, E_mu_outer)
        rt.run_shares(local_step, acc_z_0_threads.shape[0], (True, seed_items, seed_category, max_local_iter, local_tol, E_z_onehot, n_K, lam_z_onehot, stick_keep_K, E_pi_sticks_log, stick_below_K, E_pi_sticks_log1m, E_Lambda_logdet, present_x, n_D, E_Lambda_value, x, pre_z_4, pre_z_5, item_weight, dim_x, False, acc_z_0_threads, acc_z_1_threads, acc_x_0_threads, acc_x_1_threads, acc_x_2_threads,), ((acc_z_0, acc_z_0_threads), (acc_z_1, acc_z_1_threads), (acc_x_0, acc_x_0_threads), (acc_x_1, acc_x_1_threads), (acc_x_2, acc_x_2_threads),))
        update_Lambda(1.0, lam_Lambda_value, lam_Lambda_logdet, nu0, dim_Lambda, n_D, inv_W0, acc_x_0, acc_x_1, acc_x_2, E_mu_value, E_mu_outer, True, E_Lambda_value, E_Lambda_logdet, n_K)
        update_mu(1.0, lam_mu_value, lam_mu_outer, n_D, P0, m0, acc_x_2, E_Lambda_value, acc_x_0, True, E_mu_value, E_mu_outer, n_K)
        update_pi_sticks(1.0, lam_pi_sticks_log, lam_pi_sticks_log1m, alpha, acc_z_0, acc_z_1, True, E_pi_sticks_log, E_pi_sticks_log1m, n_K)
    elif init is None and start == 'random':
        # start from random pseudo-counts on the count-type globals (Hoffman et al. 2010)
        rng = np.random.default_rng(seed)
        lam_pi_sticks_log += rng.gamma(100.0, 0.01, lam_pi_sticks_log.shape)
        lam_pi_sticks_log1m += rng.gamma(100.0, 0.01, lam_pi_sticks_log1m.shape)
        rt.start_at_draw('mvn', lam_mu_value, lam_mu_outer, rng)
        refresh_globals(lam_Lambda_value, E_Lambda_value, lam_Lambda_logdet, E_Lambda_logdet, n_K, lam_mu_value, E_mu_value, lam_mu_outer, E_mu_outer, lam_pi_sticks_log, E_pi_sticks_log, lam_pi_sticks_log1m, E_pi_sticks_log1m)
    elif init is None and start == 'prior':
        raise rt.CemDataError("start: expected 'seeds' or 'random', found 'prior' (from the prior the components start alike and stay alike)")
    elif init is None:
        raise rt.CemDataError(f"start: expected 'seeds' or 'random', found {start!r}")
    return rt.State(bound=bound, alpha=alpha, m0=m0, P0=P0, nu0=nu0, W0=W0, pre_z_4=pre_z_4, n_D=n_D, n_K=n_K, E_Lambda_value=E_Lambda_value, E_mu_value=E_mu_value, pre_z_5=pre_z_5, E_mu_outer=E_mu_outer, seed_category=seed_category, E_z_onehot=E_z_onehot, lam_z_onehot=lam_z_onehot, stick_keep_K=stick_keep_K, E_pi_sticks_log=E_pi_sticks_log, stick_below_K=stick_below_K, E_pi_sticks_log1m=E_pi_sticks_log1m, E_Lambda_logdet=E_Lambda_logdet, present_x=present_x, x=x, item_weight=item_weight, dim_x=dim_x, acc_z_0_threads=acc_z_0_threads, acc_z_1_threads=acc_z_1_threads, acc_x_0_threads=acc_x_0_threads, acc_x_1_threads=acc_x_1_threads, acc_x_2_threads=acc_x_2_threads, acc_z_0=acc_z_0, acc_z_1=acc_z_1, acc_x_0=acc_x_0, acc_x_1=acc_x_1, acc_x_2=acc_x_2, lam_Lambda_value=lam_Lambda_value, lam_Lambda_logdet=lam_Lambda_logdet, lam_mu_value=lam_mu_value, lam_mu_outer=lam_mu_outer, lam_pi_sticks_log=lam_pi_sticks_log, lam_pi_sticks_log1m=lam_pi_sticks_log1m, lbeta_c_alpha=lbeta_c_alpha, logdet_P0=logdet_P0, outer_m0=outer_m0, dim_mu=dim_mu, dim_Lambda=dim_Lambda, inv_W0=inv_W0, wishart_lognorm_nu0_W0=wishart_lognorm_nu0_W0, all_items=all_items)


def _learn(s, learn, rho=1.0, items=slice(None)):
    """Empirical Bayes (Minka 2000): each learned hyperparameter a step rho towards its ELBO maximiser given q."""
    if 'alpha' in learn:  # the prior of pi_sticks
        s.alpha = (1.0 - rho) * s.alpha + rho * rt.learn_beta_param(1.0, s.E_pi_sticks_log1m)
    # known quantities that depend on hyperparameters
    s.lbeta_c_alpha = rt.lbeta(1.0, s.alpha)


def _result(s, trace, converged, seconds, items=True):
    """The posterior in usual parameters, expectations and the state; items=False: the globals only."""
    posterior = {}
    state = {'lam_Lambda_value': s.lam_Lambda_value, 'lam_Lambda_logdet': s.lam_Lambda_logdet, 'lam_mu_value': s.lam_mu_value, 'lam_mu_outer': s.lam_mu_outer, 'lam_pi_sticks_log': s.lam_pi_sticks_log, 'lam_pi_sticks_log1m': s.lam_pi_sticks_log1m}
    Lambda__dof, Lambda__scale = rt.wishart_params(s.lam_Lambda_value, s.lam_Lambda_logdet)
    posterior['Lambda.dof'] = Lambda__dof
    posterior['Lambda.scale'] = Lambda__scale
    posterior['E[value Lambda]'] = s.E_Lambda_value
    posterior['E[logdet Lambda]'] = s.E_Lambda_logdet
    mu__mean, mu__precision = rt.mvn_params(s.lam_mu_value, s.lam_mu_outer)
    posterior['mu.mean'] = mu__mean
    posterior['mu.precision'] = mu__precision
    posterior['E[value mu]'] = s.E_mu_value
    posterior['E[outer mu]'] = s.E_mu_outer
    pi_sticks__a, pi_sticks__b = rt.beta_params(s.lam_pi_sticks_log, s.lam_pi_sticks_log1m)
    posterior['pi_sticks.a'] = pi_sticks__a
    posterior['pi_sticks.b'] = pi_sticks__b
    posterior['E[log pi_sticks]'] = s.E_pi_sticks_log
    posterior['E[log1m pi_sticks]'] = s.E_pi_sticks_log1m
    if items:  # out of core the state holds one minibatch's items
        z__probs = rt.categorical_params(s.lam_z_onehot)
        posterior['z.probs'] = z__probs
        posterior['E[onehot z]'] = s.E_z_onehot
        state['lam_z_onehot'] = s.lam_z_onehot
    components = {}
    components['pi'] = rt.stick_components(pi_sticks__a, pi_sticks__b, s.alpha)
    missing = rt.missing_posteriors(s, MISSING) if items else {}
    return rt.FitResult(posterior=posterior, elbo=np.array(trace), iterations=len(trace), converged=converged, seconds=seconds, dims=dict(s.bound.dims), hypers={'alpha': s.alpha, 'm0': s.m0, 'P0': s.P0, 'nu0': s.nu0, 'W0': s.W0}, state=state, notes={'components': components}, missing=missing)


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
    hoist_messages(s.pre_z_4, s.n_D, s.n_K, s.E_Lambda_value, s.E_mu_value, s.pre_z_5, s.E_mu_outer)
    return rt.run_shares(local_step, s.acc_z_0_threads.shape[0], (seeding, items, s.seed_category, max_local_iter, local_tol, s.E_z_onehot, s.n_K, s.lam_z_onehot, s.stick_keep_K, s.E_pi_sticks_log, s.stick_below_K, s.E_pi_sticks_log1m, s.E_Lambda_logdet, s.present_x, s.n_D, s.E_Lambda_value, s.x, s.pre_z_4, s.pre_z_5, s.item_weight, s.dim_x, evaluate, s.acc_z_0_threads, s.acc_z_1_threads, s.acc_x_0_threads, s.acc_x_1_threads, s.acc_x_2_threads,), ((s.acc_z_0, s.acc_z_0_threads), (s.acc_z_1, s.acc_z_1_threads), (s.acc_x_0, s.acc_x_0_threads), (s.acc_x_1, s.acc_x_1_threads), (s.acc_x_2, s.acc_x_2_threads),))


def run_local_step_gibbs(s, items, sweeps, burn_in):
    return local_step_gibbs(items, sweeps, burn_in, s.lam_z_onehot, s.n_K, s.stick_keep_K, s.E_pi_sticks_log, s.stick_below_K, s.E_pi_sticks_log1m, s.E_Lambda_logdet, s.present_x, s.n_D, s.E_Lambda_value, s.x, s.E_mu_value, s.E_mu_outer, s.E_z_onehot, s.item_weight, s.acc_z_0, s.acc_z_1, s.acc_x_0, s.acc_x_1, s.acc_x_2)


def run_local_step_cvb0(s, items, max_local_iter, local_tol):
    return local_step_cvb0(items, max_local_iter, local_tol, s.lam_z_onehot, s.n_K, s.stick_keep_K, s.E_pi_sticks_log, s.stick_below_K, s.E_pi_sticks_log1m, s.E_Lambda_logdet, s.present_x, s.n_D, s.E_Lambda_value, s.x, s.E_mu_value, s.E_mu_outer, s.E_z_onehot, s.item_weight, s.acc_z_0, s.acc_z_1, s.acc_x_0, s.acc_x_1, s.acc_x_2)


def _update_Lambda(s, data_scale, expect=True):
    update_Lambda(data_scale, s.lam_Lambda_value, s.lam_Lambda_logdet, s.nu0, s.dim_Lambda, s.n_D, s.inv_W0, s.acc_x_0, s.acc_x_1, s.acc_x_2, s.E_mu_value, s.E_mu_outer, expect, s.E_Lambda_value, s.E_Lambda_logdet, s.n_K)


def _update_mu(s, data_scale, expect=True):
    update_mu(data_scale, s.lam_mu_value, s.lam_mu_outer, s.n_D, s.P0, s.m0, s.acc_x_2, s.E_Lambda_value, s.acc_x_0, expect, s.E_mu_value, s.E_mu_outer, s.n_K)


def _update_pi_sticks(s, data_scale, expect=True):
    update_pi_sticks(data_scale, s.lam_pi_sticks_log, s.lam_pi_sticks_log1m, s.alpha, s.acc_z_0, s.acc_z_1, expect, s.E_pi_sticks_log, s.E_pi_sticks_log1m, s.n_K)


def refresh(s):
    refresh_globals(s.lam_Lambda_value, s.E_Lambda_value, s.lam_Lambda_logdet, s.E_Lambda_logdet, s.n_K, s.lam_mu_value, s.E_mu_value, s.lam_mu_outer, s.E_mu_outer, s.lam_pi_sticks_log, s.E_pi_sticks_log, s.lam_pi_sticks_log1m, s.E_pi_sticks_log1m)


def elbo_of_globals(s):
    return elbo_global(s.n_K, s.E_pi_sticks_log, s.alpha, s.E_pi_sticks_log1m, s.lbeta_c_alpha, s.logdet_P0, s.n_D, s.P0, s.E_mu_outer, s.E_mu_value, s.m0, s.outer_m0, s.dim_mu, s.nu0, s.E_Lambda_logdet, s.dim_Lambda, s.inv_W0, s.E_Lambda_value, s.wishart_lognorm_nu0_W0, s.acc_z_0, s.acc_z_1, s.acc_x_0, s.acc_x_1, s.acc_x_2, s.lam_Lambda_value, s.lam_Lambda_logdet, s.lam_mu_value, s.lam_mu_outer, s.lam_pi_sticks_log, s.lam_pi_sticks_log1m)


GLOBALS = (  # the globals as the stochastic drivers move them
    rt.Global('Lambda', 'wishart', lam=('lam_Lambda_value', 'lam_Lambda_logdet'), E=('E_Lambda_value', 'E_Lambda_logdet'),
              update=_update_Lambda, aux_draws=1, after_sample=None),
    rt.Global('mu', 'mvn', lam=('lam_mu_value', 'lam_mu_outer'), E=('E_mu_value', 'E_mu_outer'),
              update=_update_mu, aux_draws=1, after_sample=None),
    rt.Global('pi_sticks', 'beta', lam=('lam_pi_sticks_log', 'lam_pi_sticks_log1m'), E=('E_pi_sticks_log', 'E_pi_sticks_log1m'),
              update=_update_pi_sticks, aux_draws=2, after_sample=None),
)


def fit(data, **options):
    """Batch mean-field VB (options: cemodel.runtime.drivers.mf.fit). One iteration:
        statistics ← 0; elbo = run_local_step(s, s.all_items, ...)  # E-step
        _update_Lambda(s, 1.0)  # q(Lambda)
        _update_mu(s, 1.0)  # q(mu)
        _update_pi_sticks(s, 1.0)  # q(pi_sticks)
        elbo += elbo_of_globals(s)
    """
    return rt.drivers.mf.fit(_THIS, data, **options)


def fit_svi(data, **options):
    """SVI, SVI+ (options: cemodel.runtime.drivers.svi.fit). One step on a minibatch S:
        statistics ← 0; run_local_step(s, S, ...)
        _update_Lambda(s, N / len(S), expect=False)  # λ̂ of q(Lambda)
        _update_mu(s, N / len(S), expect=False)  # λ̂ of q(mu)
        _update_pi_sticks(s, N / len(S), expect=False)  # λ̂ of q(pi_sticks)
        λ ← (1 − ρ)λ + ρλ̂ (rt.blend); refresh(s)
    """
    return rt.drivers.svi.fit(_THIS, data, **options)


def fit_ssvi_a(data, **options):
    """SSVI-A (Hoffman & Blei 2015, eq. 10): fit_svi with the local step given a draw β ~ q(β)."""
    return rt.drivers.svi.fit(_THIS, data, sample_globals=True, **options)


def fit_ssvi(data, **options):
    """SSVI (Hoffman & Blei 2015, eq. 7): fit_ssvi_a with λ̂ = η + V(β, λ)·N/|S| Σ η̂_n(β)."""
    return rt.drivers.svi.fit(_THIS, data, sample_globals=True, apply_v=True, **options)
