"""hierarchical_logistic: the model (kernels, data layout, start) for cemodel.runtime.drivers, by cemodel 0.1.0.

Model file: hierarchical_logistic.cem (sha256 3fe12368c0aa51c8)
Regenerate with `cemodel compile hierarchical_logistic.cem`; do not edit by hand.

Natural parameters are in coefficient form: q(x) ∝ exp(Σ_s lam_s · t_s(x)).
E_<var>_<stat> holds E_q[t_s]; acc_* hold sums over the data plate.
"""

import numpy as np
from numba import njit

from cemodel import runtime as rt

SOURCE = 'hierarchical_logistic.cem'
SOURCE_SHA256 = '3fe12368c0aa51c85e2110637b039a5fee8b84f1e137a3043ac5dc018bb2f81c'
DEFAULT_START = 'prior'  # nothing to break: every global starts at its prior
LEARNABLE = ('a0', 'b0')  # hyperparameters empirical Bayes can set (fit(..., learn=...))
DATA_PLATE = 'points'  # the plate the local step runs over
# the global steps (fit, fit_svi, ..., fit_klc) and whether each applies
METHODS = {
    'mf': 'yes',
    'svi': 'yes',
    'svi+': 'yes',
    'svi-avg': 'yes',
    'ssvi-a': 'yes',
    'ssvi': 'yes',
    'klc': 'no: KLC-CG keeps the categorical assignments of the data plate in Z (softmax-parameterised), and this model has none',
}
# the E-steps (fit_svi(..., local=...)) and whether each applies
LOCAL_STEPS = {
    'mf': 'yes: local mean field',
    'exact': 'yes: given the globals each local depends only on data, so the local update is its exact conditional p(z_n | y_n, β)',
    'gibbs': 'no: the item has no categorical local to sample',
    'cvb0': 'no: the item has no categorical local to sample',
}
STREAMING = 'yes'  # fit_svi from an rt.ItemSource (data on disk)
ITEM_DIMS = ('N',)  # sizes set by the items bound
ROLES = {  # the state's arrays by what they hold (executors, checkpoints)
    'data': ('n_P', 'x', 'group', 'y', 'n_G'), 'hyper': ('c', 'k0', 'a0', 'b0'),
    'known': ('logdet_eye_P_c', 'eye_P_c', 'dim_w', 'log_k0', 'log_b0', 'lgamma_a0'),
    'global': ('lam_mu_value', 'lam_mu_square', 'lam_tau_log', 'lam_tau_value', 'lam_b_value', 'lam_b_square', 'lam_w_value', 'lam_w_outer'),
    'global_exp': ('E_w_outer', 'E_w_value', 'E_b_value', 'E_b_square', 'E_mu_value', 'E_mu_square', 'E_tau_log', 'E_tau_value'),
    'kept_local': ('lam_y_omega_value', 'E_y_omega_value'),
    'item': ('seed_category', 'item_weight'),
    'statistic': ('acc_y_0', 'acc_y_1', 'acc_y_2', 'acc_y_3', 'acc_y_5', 'acc_y_6', 'acc_y_7'),
    'thread': ('acc_y_0_threads', 'acc_y_1_threads', 'acc_y_2_threads', 'acc_y_3_threads', 'acc_y_5_threads', 'acc_y_6_threads', 'acc_y_7_threads'),
}
_THIS = rt.ModelView(globals())  # the model, as the drivers see it

SPEC = {
    "model": 'hierarchical_logistic',
    "dims": {
        'P': {"default": None, "ragged_over": None},
        'G': {"default": None, "ragged_over": None},
        'N': {"default": None, "ragged_over": None},
    },
    "plates": {
        'groups': {"dim": 'G', "parent": None, "ragged": False},
        'points': {"dim": 'N', "parent": None, "ragged": False},
    },
    "observed": {
        'y': {"plates": ['points'], "support": 'binary', "shape": [], "categories": None, "missing": 'no: the factor of y (hierarchical_logistic.cem:32:5) is rewritten with the introduced y_omega, which a missing entry would leave undetermined'},
    },
    "covariates": {
        'x': {"plates": ['points'], "kind": 'vector', "shape": ['P']},
        'group': {"plates": ['points'], "kind": 'int', "shape": [], "categories": 'G'},
    },
    "not_data": {'c': 'hyperparameter', 'k0': 'hyperparameter', 'a0': 'hyperparameter', 'b0': 'hyperparameter', 'w': 'latent', 'mu': 'latent', 'tau': 'latent', 'b': 'latent'},
}


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def update_y_omega(
        i_points,
        with_children,
        lam_y_omega_value,
        n_P,
        x,
        E_w_outer,
        group,
        E_w_value,
        E_b_value,
        E_b_square,
        E_y_omega_value,
):
    """q(y_omega[n]) = PolyaGamma(1, c)
        c² = Σ_{m,u} x[n]_m·x[n]_u·E[w wᵀ]_mu + 2·Σ_{l} x[n]_l·E[w]_l·E[b[group[n]]] + E[b[group[n]]²]

    (hierarchical_logistic.cem:32:5)
    """
    lam_y_omega_value[i_points] = 0.0
    if with_children:
        # from y ~ Bernoulli·PG (hierarchical_logistic.cem:32:5)
        for t_i3 in range(n_P):
            for t_i4 in range(n_P):
                lam_y_omega_value[i_points] += -0.5 * x[i_points, t_i3] * x[i_points, t_i4] * E_w_outer[0, t_i3, t_i4]
        # from y ~ Bernoulli·PG (hierarchical_logistic.cem:32:5)
        t_g0 = group[i_points]
        for t_i2 in range(n_P):
            lam_y_omega_value[i_points] += -x[i_points, t_i2] * E_w_value[0, t_i2] * E_b_value[t_g0]
        # from y ~ Bernoulli·PG (hierarchical_logistic.cem:32:5)
        t_g0 = group[i_points]
        lam_y_omega_value[i_points] += -0.5 * E_b_square[t_g0]
    E_y_omega_value[i_points] = rt.polyagamma_expected_stats(lam_y_omega_value[i_points], 1.0)


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
        lam_y_omega_value,
        n_P,
        x,
        E_w_outer,
        group,
        E_w_value,
        E_b_value,
        E_b_square,
        E_y_omega_value,
        item_weight,
        y,
        evaluate,
        acc_y_0_threads,
        acc_y_1_threads,
        acc_y_2_threads,
        acc_y_3_threads,
        acc_y_5_threads,
        acc_y_6_threads,
        acc_y_7_threads,
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
        acc_y_0_t = acc_y_0_threads[thread]
        acc_y_1_t = acc_y_1_threads[thread]
        acc_y_2_t = acc_y_2_threads[thread]
        acc_y_3_t = acc_y_3_threads[thread]
        acc_y_5_t = acc_y_5_threads[thread]
        acc_y_6_t = acc_y_6_threads[thread]
        acc_y_7_t = acc_y_7_threads[thread]
        elbo = 0.0
        stop_position = (thread + 1) * items.shape[0] // n_threads
        for position in range(thread * items.shape[0] // n_threads, stop_position):
            i_points = items[position]
            # the next item's memory, asked for while this one computes
            if position + 1 < stop_position and items[position + 1] != i_points + 1:
                rt.prefetch_row(item_weight, items[position + 1])
                rt.prefetch_row(lam_y_omega_value, items[position + 1])
                rt.prefetch_row(E_y_omega_value, items[position + 1])
                rt.prefetch_row(y, items[position + 1])
                rt.prefetch_row(x, items[position + 1])
                rt.prefetch_row(group, items[position + 1])
            update_y_omega(i_points, True, lam_y_omega_value, n_P, x, E_w_outer, group, E_w_value, E_b_value, E_b_square, E_y_omega_value)
            # acc_y_0[i0] += y[points] · x[points]  (hierarchical_logistic.cem:32:5)
            for t_i0 in range(n_P):
                acc_y_0_t[t_i0] += item_weight[i_points] * y[i_points] * x[i_points, t_i0]
            # acc_y_1[g0] += y[points] · onehot(group[points])  (hierarchical_logistic.cem:32:5)
            t_g0 = group[i_points]
            acc_y_1_t[t_g0] += item_weight[i_points] * y[i_points]
            # acc_y_2[i1] += x[points]  (hierarchical_logistic.cem:32:5)
            for t_i1 in range(n_P):
                acc_y_2_t[t_i1] += item_weight[i_points] * x[i_points, t_i1]
            # acc_y_3[g0] += onehot(group[points])  (hierarchical_logistic.cem:32:5)
            t_g0 = group[i_points]
            acc_y_3_t[t_g0] += item_weight[i_points]
            # acc_y_5[i3, i4] += E[y_omega[points]] · x[points] · x[points]  (hierarchical_logistic.cem:32:5)
            for t_i3 in range(n_P):
                for t_i4 in range(n_P):
                    acc_y_5_t[t_i3, t_i4] += item_weight[i_points] * E_y_omega_value[i_points] * x[i_points, t_i3] * x[i_points, t_i4]
            # acc_y_6[g0, i2] += E[y_omega[points]] · x[points] · onehot(group[points])  (hierarchical_logistic.cem:32:5)
            t_g0 = group[i_points]
            for t_i2 in range(n_P):
                acc_y_6_t[t_g0, t_i2] += item_weight[i_points] * E_y_omega_value[i_points] * x[i_points, t_i2]
            # acc_y_7[g0] += E[y_omega[points]] · onehot(group[points])  (hierarchical_logistic.cem:32:5)
            t_g0 = group[i_points]
            acc_y_7_t[t_g0] += item_weight[i_points] * E_y_omega_value[i_points]
            # ELBO: local terms and local entropies (a stochastic step has no use for them)
            if evaluate:
                elbo += -0.6931471805599453
                elbo += (rt.polyagamma_log_normalizer(lam_y_omega_value[i_points], 1.0) - lam_y_omega_value[i_points] * E_y_omega_value[i_points])
        shares_total += elbo  # summed in share order, as rt.run_shares sums
    return shares_total


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def update_mu(
        data_scale,
        lam_mu_value,
        lam_mu_square,
        k0,
        n_G,
        E_tau_value,
        E_b_value,
        expect,
        E_mu_value,
        E_mu_square,
):
    """q(mu) = Normal(mean, precision)
        precision = k0 + Σ_{g} E[tau]
        precision·mean = Σ_{g} E[tau]·E[b[g]]

    (hierarchical_logistic.cem:25:1)
    """
    lam_mu_value[0] = 0.0
    lam_mu_square[0] = 0.0
    # from mu ~ Normal (hierarchical_logistic.cem:25:1)
    lam_mu_square[0] += -0.5 * k0
    # from b ~ Normal (hierarchical_logistic.cem:28:5)
    for i_groups in range(n_G):
        lam_mu_value[0] += E_tau_value[0] * E_b_value[i_groups]
    # from b ~ Normal (hierarchical_logistic.cem:28:5)
    for i_groups in range(n_G):
        lam_mu_square[0] += -0.5 * E_tau_value[0]
    if expect:  # a stochastic step mixes λ first (λ̂ may be invalid)
        E_mu_value[0], E_mu_square[0] = rt.normal_expected_stats(lam_mu_value[0], lam_mu_square[0])


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def update_tau(
        data_scale,
        lam_tau_log,
        lam_tau_value,
        a0,
        b0,
        n_G,
        E_b_square,
        E_b_value,
        E_mu_value,
        E_mu_square,
        expect,
        E_tau_log,
        E_tau_value,
):
    """q(tau) = Gamma(shape, rate)
        shape = a0 + 0.5·Σ_{g} 1
        rate = b0 + 0.5·Σ_{g} E[b[g]²] - Σ_{g} E[b[g]]·E[mu] + 0.5·Σ_{g} E[mu²]

    (hierarchical_logistic.cem:26:1)
    """
    lam_tau_log[0] = 0.0
    lam_tau_value[0] = 0.0
    # from tau ~ Gamma (hierarchical_logistic.cem:26:1)
    lam_tau_log[0] += a0
    # from tau ~ Gamma (hierarchical_logistic.cem:26:1)
    lam_tau_log[0] += -1.0
    # from tau ~ Gamma (hierarchical_logistic.cem:26:1)
    lam_tau_value[0] += -b0
    # from b ~ Normal (hierarchical_logistic.cem:28:5)
    for i_groups in range(n_G):
        lam_tau_log[0] += 0.5
    # from b ~ Normal (hierarchical_logistic.cem:28:5)
    for i_groups in range(n_G):
        lam_tau_value[0] += -0.5 * E_b_square[i_groups]
    # from b ~ Normal (hierarchical_logistic.cem:28:5)
    for i_groups in range(n_G):
        lam_tau_value[0] += E_b_value[i_groups] * E_mu_value[0]
    # from b ~ Normal (hierarchical_logistic.cem:28:5)
    for i_groups in range(n_G):
        lam_tau_value[0] += -0.5 * E_mu_square[0]
    if expect:  # a stochastic step mixes λ first (λ̂ may be invalid)
        E_tau_log[0], E_tau_value[0] = rt.gamma_expected_stats(lam_tau_log[0], lam_tau_value[0])


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def update_b(
        data_scale,
        lam_b_value,
        lam_b_square,
        E_tau_value,
        E_mu_value,
        acc_y_1,
        acc_y_3,
        n_P,
        acc_y_6,
        E_w_value,
        acc_y_7,
        expect,
        E_b_value,
        E_b_square,
        n_G,
):
    """q(b[g]) = Normal(mean, precision)
        precision = E[tau] + Σ_{n} E[y_omega[n]]·[group[n] = g]
        precision·mean = E[tau]·E[mu] + Σ_{n} y[n]·[group[n] = g] - 0.5·Σ_{n} [group[n] = g] - Σ_{n,j} E[y_omega[n]]·x[n]_j·E[w]_j·[group[n] = g]

    (hierarchical_logistic.cem:28:5)
    """
    for i_groups in range(n_G):
        lam_b_value[i_groups] = 0.0
        lam_b_square[i_groups] = 0.0
        # from b ~ Normal (hierarchical_logistic.cem:28:5)
        lam_b_square[i_groups] += -0.5 * E_tau_value[0]
        # from b ~ Normal (hierarchical_logistic.cem:28:5)
        lam_b_value[i_groups] += E_tau_value[0] * E_mu_value[0]
        # from y ~ Bernoulli·PG (hierarchical_logistic.cem:32:5)
        lam_b_value[i_groups] += data_scale * acc_y_1[i_groups]
        # from y ~ Bernoulli·PG (hierarchical_logistic.cem:32:5)
        lam_b_value[i_groups] += -0.5 * data_scale * acc_y_3[i_groups]
        # from y ~ Bernoulli·PG (hierarchical_logistic.cem:32:5)
        for t_i2 in range(n_P):
            lam_b_value[i_groups] += -data_scale * acc_y_6[i_groups, t_i2] * E_w_value[0, t_i2]
        # from y ~ Bernoulli·PG (hierarchical_logistic.cem:32:5)
        lam_b_square[i_groups] += -0.5 * data_scale * acc_y_7[i_groups]
        if expect:  # a stochastic step mixes λ first (λ̂ may be invalid)
            E_b_value[i_groups], E_b_square[i_groups] = rt.normal_expected_stats(lam_b_value[i_groups], lam_b_square[i_groups])


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def update_w(
        data_scale,
        lam_w_value,
        lam_w_outer,
        n_P,
        eye_P_c,
        acc_y_0,
        acc_y_2,
        acc_y_5,
        n_G,
        acc_y_6,
        E_b_value,
        expect,
        E_w_value,
        E_w_outer,
):
    """q(w) = MultivariateNormal(mean, precision)
        precision_vi = (eye(P) * c)_vi + Σ_{n} E[y_omega[n]]·x[n]_v·x[n]_i
        precision·mean_v = Σ_{n} y[n]·x[n]_v - 0.5·Σ_{n} x[n]_v - Σ_{n} E[y_omega[n]]·x[n]_v·E[b[group[n]]]

    (hierarchical_logistic.cem:24:1)
    """
    lam_w_value[0] = 0.0
    lam_w_outer[0] = 0.0
    # from w ~ MultivariateNormal (hierarchical_logistic.cem:24:1)
    for t_i in range(n_P):
        for t_j in range(n_P):
            lam_w_outer[0, t_i, t_j] += -0.5 * eye_P_c[t_i, t_j]
    # from y ~ Bernoulli·PG (hierarchical_logistic.cem:32:5)
    for t_i0 in range(n_P):
        lam_w_value[0, t_i0] += data_scale * acc_y_0[t_i0]
    # from y ~ Bernoulli·PG (hierarchical_logistic.cem:32:5)
    for t_i1 in range(n_P):
        lam_w_value[0, t_i1] += -0.5 * data_scale * acc_y_2[t_i1]
    # from y ~ Bernoulli·PG (hierarchical_logistic.cem:32:5)
    for t_i3 in range(n_P):
        for t_i4 in range(n_P):
            lam_w_outer[0, t_i3, t_i4] += -0.5 * data_scale * acc_y_5[t_i3, t_i4]
    # from y ~ Bernoulli·PG (hierarchical_logistic.cem:32:5)
    for t_g0 in range(n_G):
        for t_i2 in range(n_P):
            lam_w_value[0, t_i2] += -data_scale * acc_y_6[t_g0, t_i2] * E_b_value[t_g0]
    if expect:  # a stochastic step mixes λ first (λ̂ may be invalid)
        rt.mvn_expected_stats(lam_w_value[0], lam_w_outer[0], E_w_value[0], E_w_outer[0])


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def refresh_globals(
        lam_mu_value,
        E_mu_value,
        lam_mu_square,
        E_mu_square,
        lam_tau_log,
        E_tau_log,
        lam_tau_value,
        E_tau_value,
        lam_b_value,
        E_b_value,
        lam_b_square,
        E_b_square,
        n_G,
        lam_w_value,
        E_w_value,
        lam_w_outer,
        E_w_outer,
):
    """Expected statistics of the globals from their natural parameters."""
    E_mu_value[0], E_mu_square[0] = rt.normal_expected_stats(lam_mu_value[0], lam_mu_square[0])
    E_tau_log[0], E_tau_value[0] = rt.gamma_expected_stats(lam_tau_log[0], lam_tau_value[0])
    for i_groups in range(n_G):
        E_b_value[i_groups], E_b_square[i_groups] = rt.normal_expected_stats(lam_b_value[i_groups], lam_b_square[i_groups])
    rt.mvn_expected_stats(lam_w_value[0], lam_w_outer[0], E_w_value[0], E_w_outer[0])


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def elbo_global(
        logdet_eye_P_c,
        n_P,
        eye_P_c,
        E_w_outer,
        dim_w,
        log_k0,
        k0,
        E_mu_square,
        a0,
        log_b0,
        lgamma_a0,
        E_tau_log,
        b0,
        E_tau_value,
        n_G,
        E_b_square,
        E_b_value,
        E_mu_value,
        acc_y_0,
        E_w_value,
        acc_y_1,
        acc_y_2,
        acc_y_3,
        acc_y_5,
        acc_y_6,
        acc_y_7,
        lam_mu_value,
        lam_mu_square,
        lam_tau_log,
        lam_tau_value,
        lam_b_value,
        lam_b_square,
        lam_w_value,
        lam_w_outer,
):
    """ELBO terms of the global factors (see elbo_terms in the README)."""
    elbo = 0.0
    # E[log p(w | ...)]  (hierarchical_logistic.cem:24:1)
    elbo += 0.5 * logdet_eye_P_c
    for t_i in range(n_P):
        for t_j in range(n_P):
            elbo += -0.5 * eye_P_c[t_i, t_j] * E_w_outer[0, t_i, t_j]
    elbo += -0.9189385332046727 * dim_w
    # E[log p(mu | ...)]  (hierarchical_logistic.cem:25:1)
    elbo += 0.5 * log_k0
    elbo += -0.5 * k0 * E_mu_square[0]
    elbo += -0.9189385332046727
    # E[log p(tau | ...)]  (hierarchical_logistic.cem:26:1)
    elbo += a0 * log_b0
    elbo += -lgamma_a0
    elbo += a0 * E_tau_log[0]
    elbo += -E_tau_log[0]
    elbo += -b0 * E_tau_value[0]
    # E[log p(b | ...)]  (hierarchical_logistic.cem:28:5)
    for i_groups in range(n_G):
        elbo += 0.5 * E_tau_log[0]
    for i_groups in range(n_G):
        elbo += -0.5 * E_tau_value[0] * E_b_square[i_groups]
    for i_groups in range(n_G):
        elbo += E_tau_value[0] * E_b_value[i_groups] * E_mu_value[0]
    for i_groups in range(n_G):
        elbo += -0.5 * E_tau_value[0] * E_mu_square[0]
    for i_groups in range(n_G):
        elbo += -0.9189385332046727
    # E[log p(y_omega | ...)]  (hierarchical_logistic.cem:32:5)
    # E[log p(y | ...)]  (hierarchical_logistic.cem:32:5)
    for t_i0 in range(n_P):
        elbo += acc_y_0[t_i0] * E_w_value[0, t_i0]
    for t_g0 in range(n_G):
        elbo += acc_y_1[t_g0] * E_b_value[t_g0]
    for t_i1 in range(n_P):
        elbo += -0.5 * acc_y_2[t_i1] * E_w_value[0, t_i1]
    for t_g0 in range(n_G):
        elbo += -0.5 * acc_y_3[t_g0] * E_b_value[t_g0]
    for t_i3 in range(n_P):
        for t_i4 in range(n_P):
            elbo += -0.5 * acc_y_5[t_i3, t_i4] * E_w_outer[0, t_i3, t_i4]
    for t_g0 in range(n_G):
        for t_i2 in range(n_P):
            elbo += -acc_y_6[t_g0, t_i2] * E_w_value[0, t_i2] * E_b_value[t_g0]
    for t_g0 in range(n_G):
        elbo += -0.5 * acc_y_7[t_g0] * E_b_square[t_g0]
    # entropy of q(mu)
    elbo += rt.normal_log_normalizer(lam_mu_value[0], lam_mu_square[0]) - lam_mu_value[0] * E_mu_value[0] - lam_mu_square[0] * E_mu_square[0]
    # entropy of q(tau)
    elbo += rt.gamma_log_normalizer(lam_tau_log[0], lam_tau_value[0]) - lam_tau_log[0] * E_tau_log[0] - lam_tau_value[0] * E_tau_value[0]
    # entropy of q(b)
    for i_groups in range(n_G):
        elbo += rt.normal_log_normalizer(lam_b_value[i_groups], lam_b_square[i_groups]) - lam_b_value[i_groups] * E_b_value[i_groups] - lam_b_square[i_groups] * E_b_square[i_groups]
    # entropy of q(w)
    elbo += rt.mvn_log_normalizer(lam_w_value[0], lam_w_outer[0]) - rt.frobenius(lam_w_value[0], E_w_value[0]) - rt.frobenius(lam_w_outer[0], E_w_outer[0])
    return elbo


def _prepare(data, hypers, dims, seed, init, start, max_local_iter, local_tol, share=None):
    """Bind and check the data, evaluate hyperparameters and knowns, allocate the arrays, start the globals.
    share: out of core, the fit's state, whose globals, hyperparameters and statistics `data`'s minibatch shares.
    """
    hypers = rt.check_hyper_names(hypers, ['c', 'k0', 'a0', 'b0'])
    bound = rt.bind_data(SPEC, data, dims, missing=True)
    n_P, n_G, n_N = bound.dims['P'], bound.dims['G'], bound.dims['N']
    # refuse before allocating more than the machine's memory
    rt.check_memory(bound, {(1,): 8, ('G',): 7, (1, 'P'): 2, (1, 'P', 'P'): 2, ('N',): 5, ('P',): 2, ('threads', 'P'): 2, ('threads', 'G'): 3, ('P', 'P'): 1, ('threads', 'P', 'P'): 1, ('G', 'P'): 1, ('threads', 'G', 'P'): 1})
    y, x, group = bound.arrays['y'], bound.arrays['x'], bound.arrays['group']
    # hyperparameters (defaults from the model file; out of core the fit's current values)
    c = rt.hyper_value(hypers, 'c', 1.0, ()) if share is None else share.c
    k0 = rt.hyper_value(hypers, 'k0', 0.1, (), domain='positive') if share is None else share.k0
    a0 = rt.hyper_value(hypers, 'a0', 1.0, (), domain='shape') if share is None else share.a0
    b0 = rt.hyper_value(hypers, 'b0', 1.0, (), domain='positive') if share is None else share.b0
    # known quantities: functions of hyperparameters and data
    logdet_eye_P_c = rt.logdet((np.eye(n_P) * c))  # logdet((eye(P) * c))
    eye_P_c = (np.eye(n_P) * c)  # value((eye(P) * c))
    dim_w = n_P  # dim(w)
    log_k0 = rt.log_data(k0, "hyperparameter 'k0'")  # log(k0)
    log_b0 = rt.log_data(b0, "hyperparameter 'b0'")  # log(b0)
    lgamma_a0 = rt.gammaln(a0)  # lgamma(a0)
    # variational parameters (natural, coefficient form) and E[t]
    lam_mu_value, E_mu_value = (np.zeros((1,)), np.zeros((1,))) if share is None else (share.lam_mu_value, share.E_mu_value)
    lam_mu_square, E_mu_square = (np.zeros((1,)), np.zeros((1,))) if share is None else (share.lam_mu_square, share.E_mu_square)
    lam_tau_log, E_tau_log = (np.zeros((1,)), np.zeros((1,))) if share is None else (share.lam_tau_log, share.E_tau_log)
    lam_tau_value, E_tau_value = (np.zeros((1,)), np.zeros((1,))) if share is None else (share.lam_tau_value, share.E_tau_value)
    lam_b_value, E_b_value = (np.zeros((n_G,)), np.zeros((n_G,))) if share is None else (share.lam_b_value, share.E_b_value)
    lam_b_square, E_b_square = (np.zeros((n_G,)), np.zeros((n_G,))) if share is None else (share.lam_b_square, share.E_b_square)
    lam_w_value, E_w_value = (np.zeros((1, n_P)), np.zeros((1, n_P))) if share is None else (share.lam_w_value, share.E_w_value)
    lam_w_outer, E_w_outer = (np.zeros((1, n_P, n_P)), np.zeros((1, n_P, n_P))) if share is None else (share.lam_w_outer, share.E_w_outer)
    lam_y_omega_value, E_y_omega_value = np.zeros((n_N,)), np.zeros((n_N,))
    # sufficient statistics the local step hands to the global step (out of core added up over minibatches)
    acc_y_0 = np.zeros((n_P,)) if share is None else share.acc_y_0
    acc_y_1 = np.zeros((n_G,)) if share is None else share.acc_y_1
    acc_y_2 = np.zeros((n_P,)) if share is None else share.acc_y_2
    acc_y_3 = np.zeros((n_G,)) if share is None else share.acc_y_3
    acc_y_5 = np.zeros((n_P, n_P)) if share is None else share.acc_y_5
    acc_y_6 = np.zeros((n_G, n_P)) if share is None else share.acc_y_6
    acc_y_7 = np.zeros((n_G,)) if share is None else share.acc_y_7
    # the local step's shares: one per thread, fewer for small data
    n_threads = rt.share_count(bound)
    acc_y_0_threads = rt.thread_copies(n_threads, acc_y_0) if share is None else share.acc_y_0_threads
    acc_y_1_threads = rt.thread_copies(n_threads, acc_y_1) if share is None else share.acc_y_1_threads
    acc_y_2_threads = rt.thread_copies(n_threads, acc_y_2) if share is None else share.acc_y_2_threads
    acc_y_3_threads = rt.thread_copies(n_threads, acc_y_3) if share is None else share.acc_y_3_threads
    acc_y_5_threads = rt.thread_copies(n_threads, acc_y_5) if share is None else share.acc_y_5_threads
    acc_y_6_threads = rt.thread_copies(n_threads, acc_y_6) if share is None else share.acc_y_6_threads
    acc_y_7_threads = rt.thread_copies(n_threads, acc_y_7) if share is None else share.acc_y_7_threads
    all_items = np.arange(n_N)  # the local step runs over these
    item_weight = np.ones(n_N)  # each item's weight in the statistics (SVI+ perturbs it)
    seed_category = np.full(n_N, -1)
    if share is not None:  # out of core: a minibatch's state, sharing the fit's
        return rt.State(bound=bound, c=c, k0=k0, a0=a0, b0=b0, seed_category=seed_category, lam_y_omega_value=lam_y_omega_value, n_P=n_P, x=x, E_w_outer=E_w_outer, group=group, E_w_value=E_w_value, E_b_value=E_b_value, E_b_square=E_b_square, E_y_omega_value=E_y_omega_value, item_weight=item_weight, y=y, acc_y_0_threads=acc_y_0_threads, acc_y_1_threads=acc_y_1_threads, acc_y_2_threads=acc_y_2_threads, acc_y_3_threads=acc_y_3_threads, acc_y_5_threads=acc_y_5_threads, acc_y_6_threads=acc_y_6_threads, acc_y_7_threads=acc_y_7_threads, acc_y_0=acc_y_0, acc_y_1=acc_y_1, acc_y_2=acc_y_2, acc_y_3=acc_y_3, acc_y_5=acc_y_5, acc_y_6=acc_y_6, acc_y_7=acc_y_7, lam_mu_value=lam_mu_value, E_mu_value=E_mu_value, lam_mu_square=lam_mu_square, E_mu_square=E_mu_square, lam_tau_log=lam_tau_log, E_tau_log=E_tau_log, lam_tau_value=lam_tau_value, E_tau_value=E_tau_value, lam_b_value=lam_b_value, lam_b_square=lam_b_square, n_G=n_G, lam_w_value=lam_w_value, lam_w_outer=lam_w_outer, logdet_eye_P_c=logdet_eye_P_c, eye_P_c=eye_P_c, dim_w=dim_w, log_k0=log_k0, log_b0=log_b0, lgamma_a0=lgamma_a0, all_items=all_items)
    # start every global at its prior
    update_mu(0.0, lam_mu_value, lam_mu_square, k0, n_G, E_tau_value, E_b_value, True, E_mu_value, E_mu_square)
    update_tau(0.0, lam_tau_log, lam_tau_value, a0, b0, n_G, E_b_square, E_b_value, E_mu_value, E_mu_square, True, E_tau_log, E_tau_value)
    update_b(0.0, lam_b_value, lam_b_square, E_tau_value, E_mu_value, acc_y_1, acc_y_3, n_P, acc_y_6, E_w_value, acc_y_7, True, E_b_value, E_b_square, n_G)
    update_w(0.0, lam_w_value, lam_w_outer, n_P, eye_P_c, acc_y_0, acc_y_2, acc_y_5, n_G, acc_y_6, E_b_value, True, E_w_value, E_w_outer)
    if init is not None:  # warm start: the globals' natural parameters from an earlier fit
        rt.load_state(init, {'lam_mu_value': lam_mu_value, 'lam_mu_square': lam_mu_square, 'lam_tau_log': lam_tau_log, 'lam_tau_value': lam_tau_value, 'lam_b_value': lam_b_value, 'lam_b_square': lam_b_square, 'lam_w_value': lam_w_value, 'lam_w_outer': lam_w_outer})
        refresh_globals(lam_mu_value, E_mu_value, lam_mu_square, E_mu_square, lam_tau_log, E_tau_log, lam_tau_value, E_tau_value, lam_b_value, E_b_value, lam_b_square, E_b_square, n_G, lam_w_value, E_w_value, lam_w_outer, E_w_outer)
    if init is None and start not in (None, 'prior'):
        raise rt.CemDataError(f"start: expected 'prior' (the only start of this model: nothing to break), found {start!r}")
    return rt.State(bound=bound, c=c, k0=k0, a0=a0, b0=b0, seed_category=seed_category, lam_y_omega_value=lam_y_omega_value, n_P=n_P, x=x, E_w_outer=E_w_outer, group=group, E_w_value=E_w_value, E_b_value=E_b_value, E_b_square=E_b_square, E_y_omega_value=E_y_omega_value, item_weight=item_weight, y=y, acc_y_0_threads=acc_y_0_threads, acc_y_1_threads=acc_y_1_threads, acc_y_2_threads=acc_y_2_threads, acc_y_3_threads=acc_y_3_threads, acc_y_5_threads=acc_y_5_threads, acc_y_6_threads=acc_y_6_threads, acc_y_7_threads=acc_y_7_threads, acc_y_0=acc_y_0, acc_y_1=acc_y_1, acc_y_2=acc_y_2, acc_y_3=acc_y_3, acc_y_5=acc_y_5, acc_y_6=acc_y_6, acc_y_7=acc_y_7, lam_mu_value=lam_mu_value, E_mu_value=E_mu_value, lam_mu_square=lam_mu_square, E_mu_square=E_mu_square, lam_tau_log=lam_tau_log, E_tau_log=E_tau_log, lam_tau_value=lam_tau_value, E_tau_value=E_tau_value, lam_b_value=lam_b_value, lam_b_square=lam_b_square, n_G=n_G, lam_w_value=lam_w_value, lam_w_outer=lam_w_outer, logdet_eye_P_c=logdet_eye_P_c, eye_P_c=eye_P_c, dim_w=dim_w, log_k0=log_k0, log_b0=log_b0, lgamma_a0=lgamma_a0, all_items=all_items)


def _learn(s, learn, rho=1.0, items=slice(None)):
    """Empirical Bayes (Minka 2000): each learned hyperparameter a step rho towards its ELBO maximiser given q."""
    if 'a0' in learn:  # the prior of tau
        s.a0 = (1.0 - rho) * s.a0 + rho * rt.learn_gamma_shape(s.b0, s.E_tau_log)
    if 'b0' in learn:  # the prior of tau
        s.b0 = (1.0 - rho) * s.b0 + rho * rt.learn_gamma_rate(s.a0, s.E_tau_value)
    # known quantities that depend on hyperparameters
    s.log_b0 = rt.log_data(s.b0, "hyperparameter 'b0'")
    s.lgamma_a0 = rt.gammaln(s.a0)


def _result(s, trace, converged, seconds, items=True):
    """The posterior in usual parameters, expectations and the state; items=False: the globals only."""
    posterior = {}
    state = {'lam_mu_value': s.lam_mu_value, 'lam_mu_square': s.lam_mu_square, 'lam_tau_log': s.lam_tau_log, 'lam_tau_value': s.lam_tau_value, 'lam_b_value': s.lam_b_value, 'lam_b_square': s.lam_b_square, 'lam_w_value': s.lam_w_value, 'lam_w_outer': s.lam_w_outer}
    mu__mean, mu__precision = rt.normal_params(s.lam_mu_value, s.lam_mu_square)
    posterior['mu.mean'] = mu__mean[0]
    posterior['mu.precision'] = mu__precision[0]
    posterior['E[value mu]'] = s.E_mu_value[0]
    posterior['E[square mu]'] = s.E_mu_square[0]
    tau__shape, tau__rate = rt.gamma_params(s.lam_tau_log, s.lam_tau_value)
    posterior['tau.shape'] = tau__shape[0]
    posterior['tau.rate'] = tau__rate[0]
    posterior['E[log tau]'] = s.E_tau_log[0]
    posterior['E[value tau]'] = s.E_tau_value[0]
    b__mean, b__precision = rt.normal_params(s.lam_b_value, s.lam_b_square)
    posterior['b.mean'] = b__mean
    posterior['b.precision'] = b__precision
    posterior['E[value b]'] = s.E_b_value
    posterior['E[square b]'] = s.E_b_square
    w__mean, w__precision = rt.mvn_params(s.lam_w_value, s.lam_w_outer)
    posterior['w.mean'] = w__mean[0]
    posterior['w.precision'] = w__precision[0]
    posterior['E[value w]'] = s.E_w_value[0]
    posterior['E[outer w]'] = s.E_w_outer[0]
    if items:  # out of core the state holds one minibatch's items
        y_omega__c = rt.polyagamma_params(s.lam_y_omega_value)
        posterior['y_omega.c'] = y_omega__c
        posterior['E[value y_omega]'] = s.E_y_omega_value
        state['lam_y_omega_value'] = s.lam_y_omega_value
    return rt.FitResult(posterior=posterior, elbo=np.array(trace), iterations=len(trace), converged=converged, seconds=seconds, dims=dict(s.bound.dims), hypers={'c': s.c, 'k0': s.k0, 'a0': s.a0, 'b0': s.b0}, state=state)


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
    return rt.run_shares(local_step, s.acc_y_0_threads.shape[0], (seeding, items, s.seed_category, max_local_iter, local_tol, s.lam_y_omega_value, s.n_P, s.x, s.E_w_outer, s.group, s.E_w_value, s.E_b_value, s.E_b_square, s.E_y_omega_value, s.item_weight, s.y, evaluate, s.acc_y_0_threads, s.acc_y_1_threads, s.acc_y_2_threads, s.acc_y_3_threads, s.acc_y_5_threads, s.acc_y_6_threads, s.acc_y_7_threads,), ((s.acc_y_0, s.acc_y_0_threads), (s.acc_y_1, s.acc_y_1_threads), (s.acc_y_2, s.acc_y_2_threads), (s.acc_y_3, s.acc_y_3_threads), (s.acc_y_5, s.acc_y_5_threads), (s.acc_y_6, s.acc_y_6_threads), (s.acc_y_7, s.acc_y_7_threads),))


def _update_mu(s, data_scale, expect=True):
    update_mu(data_scale, s.lam_mu_value, s.lam_mu_square, s.k0, s.n_G, s.E_tau_value, s.E_b_value, expect, s.E_mu_value, s.E_mu_square)


def _update_tau(s, data_scale, expect=True):
    update_tau(data_scale, s.lam_tau_log, s.lam_tau_value, s.a0, s.b0, s.n_G, s.E_b_square, s.E_b_value, s.E_mu_value, s.E_mu_square, expect, s.E_tau_log, s.E_tau_value)


def _update_b(s, data_scale, expect=True):
    update_b(data_scale, s.lam_b_value, s.lam_b_square, s.E_tau_value, s.E_mu_value, s.acc_y_1, s.acc_y_3, s.n_P, s.acc_y_6, s.E_w_value, s.acc_y_7, expect, s.E_b_value, s.E_b_square, s.n_G)


def _update_w(s, data_scale, expect=True):
    update_w(data_scale, s.lam_w_value, s.lam_w_outer, s.n_P, s.eye_P_c, s.acc_y_0, s.acc_y_2, s.acc_y_5, s.n_G, s.acc_y_6, s.E_b_value, expect, s.E_w_value, s.E_w_outer)


def refresh(s):
    refresh_globals(s.lam_mu_value, s.E_mu_value, s.lam_mu_square, s.E_mu_square, s.lam_tau_log, s.E_tau_log, s.lam_tau_value, s.E_tau_value, s.lam_b_value, s.E_b_value, s.lam_b_square, s.E_b_square, s.n_G, s.lam_w_value, s.E_w_value, s.lam_w_outer, s.E_w_outer)


def elbo_of_globals(s):
    return elbo_global(s.logdet_eye_P_c, s.n_P, s.eye_P_c, s.E_w_outer, s.dim_w, s.log_k0, s.k0, s.E_mu_square, s.a0, s.log_b0, s.lgamma_a0, s.E_tau_log, s.b0, s.E_tau_value, s.n_G, s.E_b_square, s.E_b_value, s.E_mu_value, s.acc_y_0, s.E_w_value, s.acc_y_1, s.acc_y_2, s.acc_y_3, s.acc_y_5, s.acc_y_6, s.acc_y_7, s.lam_mu_value, s.lam_mu_square, s.lam_tau_log, s.lam_tau_value, s.lam_b_value, s.lam_b_square, s.lam_w_value, s.lam_w_outer)


GLOBALS = (  # the globals as the stochastic drivers move them
    rt.Global('mu', 'normal', lam=('lam_mu_value', 'lam_mu_square'), E=('E_mu_value', 'E_mu_square'),
              update=_update_mu, aux_draws=1, after_sample=None),
    rt.Global('tau', 'gamma', lam=('lam_tau_log', 'lam_tau_value'), E=('E_tau_log', 'E_tau_value'),
              update=_update_tau, aux_draws=1, after_sample=None),
    rt.Global('b', 'normal', lam=('lam_b_value', 'lam_b_square'), E=('E_b_value', 'E_b_square'),
              update=_update_b, aux_draws=1, after_sample=None),
    rt.Global('w', 'mvn', lam=('lam_w_value', 'lam_w_outer'), E=('E_w_value', 'E_w_outer'),
              update=_update_w, aux_draws=1, after_sample=None),
)


def fit(data, **options):
    """Batch mean-field VB (options: cemodel.runtime.drivers.mf.fit). One iteration:
        statistics ← 0; elbo = run_local_step(s, s.all_items, ...)  # E-step
        _update_mu(s, 1.0)  # q(mu)
        _update_tau(s, 1.0)  # q(tau)
        _update_b(s, 1.0)  # q(b)
        _update_w(s, 1.0)  # q(w)
        elbo += elbo_of_globals(s)
    """
    return rt.drivers.mf.fit(_THIS, data, **options)


def fit_svi(data, **options):
    """SVI, SVI+ (options: cemodel.runtime.drivers.svi.fit). One step on a minibatch S:
        statistics ← 0; run_local_step(s, S, ...)
        _update_mu(s, N / len(S), expect=False)  # λ̂ of q(mu)
        _update_tau(s, N / len(S), expect=False)  # λ̂ of q(tau)
        _update_b(s, N / len(S), expect=False)  # λ̂ of q(b)
        _update_w(s, N / len(S), expect=False)  # λ̂ of q(w)
        λ ← (1 − ρ)λ + ρλ̂ (rt.blend); refresh(s)
    """
    return rt.drivers.svi.fit(_THIS, data, **options)


def fit_ssvi_a(data, **options):
    """SSVI-A (Hoffman & Blei 2015, eq. 10): fit_svi with the local step given a draw β ~ q(β)."""
    return rt.drivers.svi.fit(_THIS, data, sample_globals=True, **options)


def fit_ssvi(data, **options):
    """SSVI (Hoffman & Blei 2015, eq. 7): fit_ssvi_a with λ̂ = η + V(β, λ)·N/|S| Σ η̂_n(β)."""
    return rt.drivers.svi.fit(_THIS, data, sample_globals=True, apply_v=True, **options)
