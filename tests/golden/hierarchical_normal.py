"""hierarchical_normal: the model (kernels, data layout, start) for cemodel.runtime.drivers, by cemodel 0.1.0.

Model file: hierarchical_normal.cem (sha256 73f89526aed5ecf0)
Regenerate with `cemodel compile hierarchical_normal.cem`; do not edit by hand.

Natural parameters are in coefficient form: q(x) ∝ exp(Σ_s lam_s · t_s(x)).
E_<var>_<stat> holds E_q[t_s]; acc_* hold sums over the data plate.
"""

import numpy as np
from numba import njit

from cemodel import runtime as rt

SOURCE = 'hierarchical_normal.cem'
SOURCE_SHA256 = '73f89526aed5ecf072b76015bcf61f1a3a5a0ea4fe69a7a7642e1c4c33156146'
DEFAULT_START = 'prior'  # nothing to break: every global starts at its prior
LEARNABLE = ()  # hyperparameters empirical Bayes can set (fit(..., learn=...))
DATA_PLATE = 'observations'  # the plate the local step runs over
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
    'exact': 'yes: the items have no latent local, so there is nothing to approximate (the same step as mf)',
    'gibbs': 'no: the item has no categorical local to sample',
    'cvb0': 'no: the item has no categorical local to sample',
}
STREAMING = 'yes'  # fit_svi from an rt.ItemSource (data on disk)
ITEM_DIMS = ('N',)  # sizes set by the items bound
ROLES = {  # the state's arrays by what they hold (executors, checkpoints)
    'data': ('y', 'group', 'n_G'), 'hyper': ('m0', 'k0', 'a0', 'b0'),
    'known': ('present_y', 'log_k0', 'square_m0', 'log_b0', 'lgamma_a0'),
    'global': ('lam_mu_tau_b_log', 'lam_mu_tau_b_value', 'lam_mu_tau_b_prec_mean', 'lam_mu_tau_b_quad', 'lam_tau_w_log', 'lam_tau_w_value', 'lam_theta_value', 'lam_theta_square'),
    'global_exp': ('E_mu_tau_b_log', 'E_mu_tau_b_value', 'E_mu_tau_b_prec_mean', 'E_mu_tau_b_quad', 'E_tau_w_log', 'E_tau_w_value', 'E_theta_value', 'E_theta_square'),
    'item': ('seed_category', 'item_weight'),
    'statistic': ('acc_y_0', 'acc_y_1', 'acc_y_2', 'acc_y_3'),
    'thread': ('acc_y_0_threads', 'acc_y_1_threads', 'acc_y_2_threads', 'acc_y_3_threads'),
}
_THIS = rt.ModelView(globals())  # the model, as the drivers see it

SPEC = {
    "model": 'hierarchical_normal',
    "dims": {
        'G': {"default": None, "ragged_over": None},
        'N': {"default": None, "ragged_over": None},
    },
    "plates": {
        'groups': {"dim": 'G', "parent": None, "ragged": False},
        'observations': {"dim": 'N', "parent": None, "ragged": False},
    },
    "observed": {
        'y': {"plates": ['observations'], "support": 'real', "shape": [], "categories": None, "missing": 'yes'},
    },
    "covariates": {
        'group': {"plates": ['observations'], "kind": 'int', "shape": [], "categories": 'G'},
    },
    "not_data": {'m0': 'hyperparameter', 'k0': 'hyperparameter', 'a0': 'hyperparameter', 'b0': 'hyperparameter', 'mu_tau_b': 'latent', 'tau_w': 'latent', 'theta': 'latent'},
}
MISSING = {  # observed entries that may be missing: their q (rt.missing_posteriors)
    'y': {"family": 'Normal', "data_plate": 'a', "why_not": None,
        "terms": ((-0.5, ('value', 'value'), 'a', (('E_tau_w_value', '0'),)), (1.0, ('value',), 'a', (('E_tau_w_value', '0'), ('E_theta_value', 'b'), ('group', 'onehot:n_G:ab'))))},
}


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
        item_weight,
        acc_y_0_threads,
        present_y,
        acc_y_1_threads,
        y,
        group,
        evaluate,
        acc_y_2_threads,
        acc_y_3_threads,
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
        acc_y_2_t = acc_y_2_threads[thread]
        acc_y_3_t = acc_y_3_threads[thread]
        elbo = 0.0
        stop_position = (thread + 1) * items.shape[0] // n_threads
        for position in range(thread * items.shape[0] // n_threads, stop_position):
            i_observations = items[position]
            # the next item's memory, asked for while this one computes
            if position + 1 < stop_position and items[position + 1] != i_observations + 1:
                rt.prefetch_row(item_weight, items[position + 1])
                rt.prefetch_row(y, items[position + 1])
                rt.prefetch_row(group, items[position + 1])
            # acc_y_0[] += present(y[observations])  (hierarchical_normal.cem:30:5)
            acc_y_0_threads[thread] += item_weight[i_observations] * present_y[i_observations]
            # acc_y_1[] += y[observations] · y[observations] · present(y[observations])  (hierarchical_normal.cem:30:5)
            acc_y_1_threads[thread] += item_weight[i_observations] * y[i_observations] * y[i_observations] * present_y[i_observations]
            # acc_y_2[g0] += y[observations] · onehot(group[observations]) · present(y[observations])  (hierarchical_normal.cem:30:5)
            t_g0 = group[i_observations]
            acc_y_2_t[t_g0] += item_weight[i_observations] * y[i_observations] * present_y[i_observations]
            # acc_y_3[g0] += onehot(group[observations]) · present(y[observations])  (hierarchical_normal.cem:30:5)
            t_g0 = group[i_observations]
            acc_y_3_t[t_g0] += item_weight[i_observations] * present_y[i_observations]
            # ELBO: local terms and local entropies (a stochastic step has no use for them)
            if evaluate:
                elbo += -0.9189385332046727 * present_y[i_observations]
        shares_total += elbo  # summed in share order, as rt.run_shares sums
    return shares_total


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def update_mu_tau_b(
        data_scale,
        lam_mu_tau_b_log,
        lam_mu_tau_b_value,
        lam_mu_tau_b_prec_mean,
        lam_mu_tau_b_quad,
        k0,
        m0,
        square_m0,
        a0,
        b0,
        n_G,
        E_theta_square,
        E_theta_value,
        expect,
        E_mu_tau_b_log,
        E_mu_tau_b_value,
        E_mu_tau_b_prec_mean,
        E_mu_tau_b_quad,
):
    """q(mu_tau_b) = Normal-Gamma(mean, β, shape, rate)
        β = k0 + Σ_{g} 1
        β·mean = k0·m0 + Σ_{g} E[theta[g]]
        shape = a0 + 0.5·Σ_{g} 1
        rate + β·mean²/2 = 0.5·k0·square(m0) + b0 + 0.5·Σ_{g} E[theta[g]²]

    (hierarchical_normal.cem:24:1)
    """
    lam_mu_tau_b_log[0] = 0.0
    lam_mu_tau_b_value[0] = 0.0
    lam_mu_tau_b_prec_mean[0] = 0.0
    lam_mu_tau_b_quad[0] = 0.0
    # from mu_tau_b ~ Normal-Gamma (hierarchical_normal.cem:24:1)
    lam_mu_tau_b_log[0] += -0.5
    # from mu_tau_b ~ Normal-Gamma (hierarchical_normal.cem:24:1)
    lam_mu_tau_b_quad[0] += -0.5 * k0
    # from mu_tau_b ~ Normal-Gamma (hierarchical_normal.cem:24:1)
    lam_mu_tau_b_prec_mean[0] += k0 * m0
    # from mu_tau_b ~ Normal-Gamma (hierarchical_normal.cem:24:1)
    lam_mu_tau_b_value[0] += -0.5 * k0 * square_m0
    # from mu_tau_b ~ Normal-Gamma (hierarchical_normal.cem:24:1)
    lam_mu_tau_b_log[0] += a0
    # from mu_tau_b ~ Normal-Gamma (hierarchical_normal.cem:24:1)
    lam_mu_tau_b_value[0] += -b0
    # from theta ~ Normal (hierarchical_normal.cem:27:5)
    for i_groups in range(n_G):
        lam_mu_tau_b_log[0] += 0.5
    # from theta ~ Normal (hierarchical_normal.cem:27:5)
    for i_groups in range(n_G):
        lam_mu_tau_b_value[0] += -0.5 * E_theta_square[i_groups]
    # from theta ~ Normal (hierarchical_normal.cem:27:5)
    for i_groups in range(n_G):
        lam_mu_tau_b_prec_mean[0] += E_theta_value[i_groups]
    # from theta ~ Normal (hierarchical_normal.cem:27:5)
    for i_groups in range(n_G):
        lam_mu_tau_b_quad[0] += -0.5
    if expect:  # a stochastic step mixes λ first (λ̂ may be invalid)
        E_mu_tau_b_log[0], E_mu_tau_b_value[0], E_mu_tau_b_prec_mean[0], E_mu_tau_b_quad[0] = rt.normal_gamma_expected_stats(lam_mu_tau_b_log[0], lam_mu_tau_b_value[0], lam_mu_tau_b_prec_mean[0], lam_mu_tau_b_quad[0])


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def update_tau_w(
        data_scale,
        lam_tau_w_log,
        lam_tau_w_value,
        a0,
        b0,
        acc_y_0,
        acc_y_1,
        n_G,
        acc_y_2,
        E_theta_value,
        acc_y_3,
        E_theta_square,
        expect,
        E_tau_w_log,
        E_tau_w_value,
):
    """q(tau_w) = Gamma(shape, rate)
        shape = a0 + 0.5·Σ_{n} 1
        rate = b0 + 0.5·Σ_{n} y[n]·y[n] - Σ_{n} y[n]·E[theta[group[n]]] + 0.5·Σ_{n} E[theta[group[n]]²]

    (hierarchical_normal.cem:25:1)
    """
    lam_tau_w_log[0] = 0.0
    lam_tau_w_value[0] = 0.0
    # from tau_w ~ Gamma (hierarchical_normal.cem:25:1)
    lam_tau_w_log[0] += a0
    # from tau_w ~ Gamma (hierarchical_normal.cem:25:1)
    lam_tau_w_log[0] += -1.0
    # from tau_w ~ Gamma (hierarchical_normal.cem:25:1)
    lam_tau_w_value[0] += -b0
    # from y ~ Normal (hierarchical_normal.cem:30:5)
    lam_tau_w_log[0] += 0.5 * data_scale * acc_y_0
    # from y ~ Normal (hierarchical_normal.cem:30:5)
    lam_tau_w_value[0] += -0.5 * data_scale * acc_y_1
    # from y ~ Normal (hierarchical_normal.cem:30:5)
    for t_g0 in range(n_G):
        lam_tau_w_value[0] += data_scale * acc_y_2[t_g0] * E_theta_value[t_g0]
    # from y ~ Normal (hierarchical_normal.cem:30:5)
    for t_g0 in range(n_G):
        lam_tau_w_value[0] += -0.5 * data_scale * acc_y_3[t_g0] * E_theta_square[t_g0]
    if expect:  # a stochastic step mixes λ first (λ̂ may be invalid)
        E_tau_w_log[0], E_tau_w_value[0] = rt.gamma_expected_stats(lam_tau_w_log[0], lam_tau_w_value[0])


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def update_theta(
        data_scale,
        lam_theta_value,
        lam_theta_square,
        E_mu_tau_b_value,
        E_mu_tau_b_prec_mean,
        acc_y_2,
        E_tau_w_value,
        acc_y_3,
        expect,
        E_theta_value,
        E_theta_square,
        n_G,
):
    """q(theta[g]) = Normal(mean, precision)
        precision = E[tau_b] + Σ_{n} E[tau_w]·[group[n] = g]
        precision·mean = E[tau_b·mu] + Σ_{n} E[tau_w]·y[n]·[group[n] = g]

    (hierarchical_normal.cem:27:5)
    """
    for i_groups in range(n_G):
        lam_theta_value[i_groups] = 0.0
        lam_theta_square[i_groups] = 0.0
        # from theta ~ Normal (hierarchical_normal.cem:27:5)
        lam_theta_square[i_groups] += -0.5 * E_mu_tau_b_value[0]
        # from theta ~ Normal (hierarchical_normal.cem:27:5)
        lam_theta_value[i_groups] += E_mu_tau_b_prec_mean[0]
        # from y ~ Normal (hierarchical_normal.cem:30:5)
        lam_theta_value[i_groups] += data_scale * acc_y_2[i_groups] * E_tau_w_value[0]
        # from y ~ Normal (hierarchical_normal.cem:30:5)
        lam_theta_square[i_groups] += -0.5 * data_scale * acc_y_3[i_groups] * E_tau_w_value[0]
        if expect:  # a stochastic step mixes λ first (λ̂ may be invalid)
            E_theta_value[i_groups], E_theta_square[i_groups] = rt.normal_expected_stats(lam_theta_value[i_groups], lam_theta_square[i_groups])


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def refresh_globals(
        lam_mu_tau_b_log,
        E_mu_tau_b_log,
        lam_mu_tau_b_value,
        E_mu_tau_b_value,
        lam_mu_tau_b_prec_mean,
        E_mu_tau_b_prec_mean,
        lam_mu_tau_b_quad,
        E_mu_tau_b_quad,
        lam_tau_w_log,
        E_tau_w_log,
        lam_tau_w_value,
        E_tau_w_value,
        lam_theta_value,
        E_theta_value,
        lam_theta_square,
        E_theta_square,
        n_G,
):
    """Expected statistics of the globals from their natural parameters."""
    E_mu_tau_b_log[0], E_mu_tau_b_value[0], E_mu_tau_b_prec_mean[0], E_mu_tau_b_quad[0] = rt.normal_gamma_expected_stats(lam_mu_tau_b_log[0], lam_mu_tau_b_value[0], lam_mu_tau_b_prec_mean[0], lam_mu_tau_b_quad[0])
    E_tau_w_log[0], E_tau_w_value[0] = rt.gamma_expected_stats(lam_tau_w_log[0], lam_tau_w_value[0])
    for i_groups in range(n_G):
        E_theta_value[i_groups], E_theta_square[i_groups] = rt.normal_expected_stats(lam_theta_value[i_groups], lam_theta_square[i_groups])


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def elbo_global(
        log_k0,
        E_mu_tau_b_log,
        k0,
        E_mu_tau_b_quad,
        m0,
        E_mu_tau_b_prec_mean,
        square_m0,
        E_mu_tau_b_value,
        a0,
        log_b0,
        lgamma_a0,
        b0,
        E_tau_w_log,
        E_tau_w_value,
        n_G,
        E_theta_square,
        E_theta_value,
        acc_y_0,
        acc_y_1,
        acc_y_2,
        acc_y_3,
        lam_mu_tau_b_log,
        lam_mu_tau_b_value,
        lam_mu_tau_b_prec_mean,
        lam_mu_tau_b_quad,
        lam_tau_w_log,
        lam_tau_w_value,
        lam_theta_value,
        lam_theta_square,
):
    """ELBO terms of the global factors (see elbo_terms in the README)."""
    elbo = 0.0
    # E[log p(mu_tau_b | ...)]  (hierarchical_normal.cem:24:1)
    elbo += 0.5 * log_k0
    elbo += -0.5 * E_mu_tau_b_log[0]
    elbo += -0.5 * k0 * E_mu_tau_b_quad[0]
    elbo += k0 * m0 * E_mu_tau_b_prec_mean[0]
    elbo += -0.5 * k0 * square_m0 * E_mu_tau_b_value[0]
    elbo += -0.9189385332046727
    elbo += a0 * log_b0
    elbo += -lgamma_a0
    elbo += a0 * E_mu_tau_b_log[0]
    elbo += -b0 * E_mu_tau_b_value[0]
    # E[log p(tau_w | ...)]  (hierarchical_normal.cem:25:1)
    elbo += a0 * log_b0
    elbo += -lgamma_a0
    elbo += a0 * E_tau_w_log[0]
    elbo += -E_tau_w_log[0]
    elbo += -b0 * E_tau_w_value[0]
    # E[log p(theta | ...)]  (hierarchical_normal.cem:27:5)
    for i_groups in range(n_G):
        elbo += 0.5 * E_mu_tau_b_log[0]
    for i_groups in range(n_G):
        elbo += -0.5 * E_theta_square[i_groups] * E_mu_tau_b_value[0]
    for i_groups in range(n_G):
        elbo += E_theta_value[i_groups] * E_mu_tau_b_prec_mean[0]
    for i_groups in range(n_G):
        elbo += -0.5 * E_mu_tau_b_quad[0]
    for i_groups in range(n_G):
        elbo += -0.9189385332046727
    # E[log p(y | ...)]  (hierarchical_normal.cem:30:5)
    elbo += 0.5 * acc_y_0 * E_tau_w_log[0]
    elbo += -0.5 * acc_y_1 * E_tau_w_value[0]
    for t_g0 in range(n_G):
        elbo += acc_y_2[t_g0] * E_tau_w_value[0] * E_theta_value[t_g0]
    for t_g0 in range(n_G):
        elbo += -0.5 * acc_y_3[t_g0] * E_tau_w_value[0] * E_theta_square[t_g0]
    # entropy of q(mu_tau_b)
    elbo += rt.normal_gamma_log_normalizer(lam_mu_tau_b_log[0], lam_mu_tau_b_value[0], lam_mu_tau_b_prec_mean[0], lam_mu_tau_b_quad[0]) - lam_mu_tau_b_log[0] * E_mu_tau_b_log[0] - lam_mu_tau_b_value[0] * E_mu_tau_b_value[0] - lam_mu_tau_b_prec_mean[0] * E_mu_tau_b_prec_mean[0] - lam_mu_tau_b_quad[0] * E_mu_tau_b_quad[0]
    # entropy of q(tau_w)
    elbo += rt.gamma_log_normalizer(lam_tau_w_log[0], lam_tau_w_value[0]) - lam_tau_w_log[0] * E_tau_w_log[0] - lam_tau_w_value[0] * E_tau_w_value[0]
    # entropy of q(theta)
    for i_groups in range(n_G):
        elbo += rt.normal_log_normalizer(lam_theta_value[i_groups], lam_theta_square[i_groups]) - lam_theta_value[i_groups] * E_theta_value[i_groups] - lam_theta_square[i_groups] * E_theta_square[i_groups]
    return elbo


def _prepare(data, hypers, dims, seed, init, start, max_local_iter, local_tol, share=None):
    """Bind and check the data, evaluate hyperparameters and knowns, allocate the arrays, start the globals.
    share: out of core, the fit's state, whose globals, hyperparameters and statistics `data`'s minibatch shares.
    """
    hypers = rt.check_hyper_names(hypers, ['m0', 'k0', 'a0', 'b0'])
    bound = rt.bind_data(SPEC, data, dims, missing=True)
    n_G, n_N = bound.dims['G'], bound.dims['N']
    # refuse before allocating more than the machine's memory
    rt.check_memory(bound, {(1,): 14, ('G',): 6, ('threads',): 2, ('threads', 'G'): 2, ('N',): 3})
    y, group = bound.arrays['y'], bound.arrays['group']
    # hyperparameters (defaults from the model file; out of core the fit's current values)
    m0 = rt.hyper_value(hypers, 'm0', 0.0, ()) if share is None else share.m0
    k0 = rt.hyper_value(hypers, 'k0', 0.001, (), domain='positive') if share is None else share.k0
    a0 = rt.hyper_value(hypers, 'a0', 1.0, (), domain='shape') if share is None else share.a0
    b0 = rt.hyper_value(hypers, 'b0', 1.0, (), domain='positive') if share is None else share.b0
    # known quantities: functions of hyperparameters and data
    log_k0 = rt.log_data(k0, "hyperparameter 'k0'")  # log(k0)
    square_m0 = np.square(m0)  # square(m0)
    log_b0 = rt.log_data(b0, "hyperparameter 'b0'")  # log(b0)
    lgamma_a0 = rt.gammaln(a0)  # lgamma(a0)
    present_y = rt.present(bound, 'y')  # present(y[observations])
    # variational parameters (natural, coefficient form) and E[t]
    lam_mu_tau_b_log, E_mu_tau_b_log = (np.zeros((1,)), np.zeros((1,))) if share is None else (share.lam_mu_tau_b_log, share.E_mu_tau_b_log)
    lam_mu_tau_b_value, E_mu_tau_b_value = (np.zeros((1,)), np.zeros((1,))) if share is None else (share.lam_mu_tau_b_value, share.E_mu_tau_b_value)
    lam_mu_tau_b_prec_mean, E_mu_tau_b_prec_mean = (np.zeros((1,)), np.zeros((1,))) if share is None else (share.lam_mu_tau_b_prec_mean, share.E_mu_tau_b_prec_mean)
    lam_mu_tau_b_quad, E_mu_tau_b_quad = (np.zeros((1,)), np.zeros((1,))) if share is None else (share.lam_mu_tau_b_quad, share.E_mu_tau_b_quad)
    lam_tau_w_log, E_tau_w_log = (np.zeros((1,)), np.zeros((1,))) if share is None else (share.lam_tau_w_log, share.E_tau_w_log)
    lam_tau_w_value, E_tau_w_value = (np.zeros((1,)), np.zeros((1,))) if share is None else (share.lam_tau_w_value, share.E_tau_w_value)
    lam_theta_value, E_theta_value = (np.zeros((n_G,)), np.zeros((n_G,))) if share is None else (share.lam_theta_value, share.E_theta_value)
    lam_theta_square, E_theta_square = (np.zeros((n_G,)), np.zeros((n_G,))) if share is None else (share.lam_theta_square, share.E_theta_square)
    # sufficient statistics the local step hands to the global step (out of core added up over minibatches)
    acc_y_0 = np.zeros(()) if share is None else share.acc_y_0
    acc_y_1 = np.zeros(()) if share is None else share.acc_y_1
    acc_y_2 = np.zeros((n_G,)) if share is None else share.acc_y_2
    acc_y_3 = np.zeros((n_G,)) if share is None else share.acc_y_3
    # the local step's shares: one per thread, fewer for small data
    n_threads = rt.share_count(bound)
    acc_y_0_threads = rt.thread_copies(n_threads, acc_y_0) if share is None else share.acc_y_0_threads
    acc_y_1_threads = rt.thread_copies(n_threads, acc_y_1) if share is None else share.acc_y_1_threads
    acc_y_2_threads = rt.thread_copies(n_threads, acc_y_2) if share is None else share.acc_y_2_threads
    acc_y_3_threads = rt.thread_copies(n_threads, acc_y_3) if share is None else share.acc_y_3_threads
    all_items = np.arange(n_N)  # the local step runs over these
    item_weight = np.ones(n_N)  # each item's weight in the statistics (SVI+ perturbs it)
    seed_category = np.full(n_N, -1)
    if share is not None:  # out of core: a minibatch's state, sharing the fit's
        return rt.State(bound=bound, m0=m0, k0=k0, a0=a0, b0=b0, seed_category=seed_category, item_weight=item_weight, acc_y_0_threads=acc_y_0_threads, present_y=present_y, acc_y_1_threads=acc_y_1_threads, y=y, group=group, acc_y_2_threads=acc_y_2_threads, acc_y_3_threads=acc_y_3_threads, acc_y_0=acc_y_0, acc_y_1=acc_y_1, acc_y_2=acc_y_2, acc_y_3=acc_y_3, lam_mu_tau_b_log=lam_mu_tau_b_log, E_mu_tau_b_log=E_mu_tau_b_log, lam_mu_tau_b_value=lam_mu_tau_b_value, E_mu_tau_b_value=E_mu_tau_b_value, lam_mu_tau_b_prec_mean=lam_mu_tau_b_prec_mean, E_mu_tau_b_prec_mean=E_mu_tau_b_prec_mean, lam_mu_tau_b_quad=lam_mu_tau_b_quad, E_mu_tau_b_quad=E_mu_tau_b_quad, lam_tau_w_log=lam_tau_w_log, E_tau_w_log=E_tau_w_log, lam_tau_w_value=lam_tau_w_value, E_tau_w_value=E_tau_w_value, lam_theta_value=lam_theta_value, E_theta_value=E_theta_value, lam_theta_square=lam_theta_square, E_theta_square=E_theta_square, n_G=n_G, log_k0=log_k0, square_m0=square_m0, log_b0=log_b0, lgamma_a0=lgamma_a0, all_items=all_items)
    # start every global at its prior
    update_mu_tau_b(0.0, lam_mu_tau_b_log, lam_mu_tau_b_value, lam_mu_tau_b_prec_mean, lam_mu_tau_b_quad, k0, m0, square_m0, a0, b0, n_G, E_theta_square, E_theta_value, True, E_mu_tau_b_log, E_mu_tau_b_value, E_mu_tau_b_prec_mean, E_mu_tau_b_quad)
    update_tau_w(0.0, lam_tau_w_log, lam_tau_w_value, a0, b0, acc_y_0, acc_y_1, n_G, acc_y_2, E_theta_value, acc_y_3, E_theta_square, True, E_tau_w_log, E_tau_w_value)
    update_theta(0.0, lam_theta_value, lam_theta_square, E_mu_tau_b_value, E_mu_tau_b_prec_mean, acc_y_2, E_tau_w_value, acc_y_3, True, E_theta_value, E_theta_square, n_G)
    if init is not None:  # warm start: the globals' natural parameters from an earlier fit
        rt.load_state(init, {'lam_mu_tau_b_log': lam_mu_tau_b_log, 'lam_mu_tau_b_value': lam_mu_tau_b_value, 'lam_mu_tau_b_prec_mean': lam_mu_tau_b_prec_mean, 'lam_mu_tau_b_quad': lam_mu_tau_b_quad, 'lam_tau_w_log': lam_tau_w_log, 'lam_tau_w_value': lam_tau_w_value, 'lam_theta_value': lam_theta_value, 'lam_theta_square': lam_theta_square})
        refresh_globals(lam_mu_tau_b_log, E_mu_tau_b_log, lam_mu_tau_b_value, E_mu_tau_b_value, lam_mu_tau_b_prec_mean, E_mu_tau_b_prec_mean, lam_mu_tau_b_quad, E_mu_tau_b_quad, lam_tau_w_log, E_tau_w_log, lam_tau_w_value, E_tau_w_value, lam_theta_value, E_theta_value, lam_theta_square, E_theta_square, n_G)
    if init is None and start not in (None, 'prior'):
        raise rt.CemDataError(f"start: expected 'prior' (the only start of this model: nothing to break), found {start!r}")
    return rt.State(bound=bound, m0=m0, k0=k0, a0=a0, b0=b0, seed_category=seed_category, item_weight=item_weight, acc_y_0_threads=acc_y_0_threads, present_y=present_y, acc_y_1_threads=acc_y_1_threads, y=y, group=group, acc_y_2_threads=acc_y_2_threads, acc_y_3_threads=acc_y_3_threads, acc_y_0=acc_y_0, acc_y_1=acc_y_1, acc_y_2=acc_y_2, acc_y_3=acc_y_3, lam_mu_tau_b_log=lam_mu_tau_b_log, E_mu_tau_b_log=E_mu_tau_b_log, lam_mu_tau_b_value=lam_mu_tau_b_value, E_mu_tau_b_value=E_mu_tau_b_value, lam_mu_tau_b_prec_mean=lam_mu_tau_b_prec_mean, E_mu_tau_b_prec_mean=E_mu_tau_b_prec_mean, lam_mu_tau_b_quad=lam_mu_tau_b_quad, E_mu_tau_b_quad=E_mu_tau_b_quad, lam_tau_w_log=lam_tau_w_log, E_tau_w_log=E_tau_w_log, lam_tau_w_value=lam_tau_w_value, E_tau_w_value=E_tau_w_value, lam_theta_value=lam_theta_value, E_theta_value=E_theta_value, lam_theta_square=lam_theta_square, E_theta_square=E_theta_square, n_G=n_G, log_k0=log_k0, square_m0=square_m0, log_b0=log_b0, lgamma_a0=lgamma_a0, all_items=all_items)


def _result(s, trace, converged, seconds, items=True):
    """The posterior in usual parameters, expectations and the state."""
    posterior = {}
    state = {'lam_mu_tau_b_log': s.lam_mu_tau_b_log, 'lam_mu_tau_b_value': s.lam_mu_tau_b_value, 'lam_mu_tau_b_prec_mean': s.lam_mu_tau_b_prec_mean, 'lam_mu_tau_b_quad': s.lam_mu_tau_b_quad, 'lam_tau_w_log': s.lam_tau_w_log, 'lam_tau_w_value': s.lam_tau_w_value, 'lam_theta_value': s.lam_theta_value, 'lam_theta_square': s.lam_theta_square}
    mu_tau_b__mean, mu_tau_b__beta, mu_tau_b__shape, mu_tau_b__rate = rt.normal_gamma_params(s.lam_mu_tau_b_log, s.lam_mu_tau_b_value, s.lam_mu_tau_b_prec_mean, s.lam_mu_tau_b_quad)
    posterior['mu_tau_b.mean'] = mu_tau_b__mean[0]
    posterior['mu_tau_b.beta'] = mu_tau_b__beta[0]
    posterior['mu_tau_b.shape'] = mu_tau_b__shape[0]
    posterior['mu_tau_b.rate'] = mu_tau_b__rate[0]
    # q(tau_b) is the block's marginal; E[mu] its mean
    posterior['tau_b.shape'] = mu_tau_b__shape[0]
    posterior['tau_b.rate'] = mu_tau_b__rate[0]
    posterior['mu.mean'] = mu_tau_b__mean[0]
    posterior['E[log mu_tau_b]'] = s.E_mu_tau_b_log[0]
    posterior['E[value mu_tau_b]'] = s.E_mu_tau_b_value[0]
    posterior['E[prec_mean mu_tau_b]'] = s.E_mu_tau_b_prec_mean[0]
    posterior['E[quad mu_tau_b]'] = s.E_mu_tau_b_quad[0]
    tau_w__shape, tau_w__rate = rt.gamma_params(s.lam_tau_w_log, s.lam_tau_w_value)
    posterior['tau_w.shape'] = tau_w__shape[0]
    posterior['tau_w.rate'] = tau_w__rate[0]
    posterior['E[log tau_w]'] = s.E_tau_w_log[0]
    posterior['E[value tau_w]'] = s.E_tau_w_value[0]
    theta__mean, theta__precision = rt.normal_params(s.lam_theta_value, s.lam_theta_square)
    posterior['theta.mean'] = theta__mean
    posterior['theta.precision'] = theta__precision
    posterior['E[value theta]'] = s.E_theta_value
    posterior['E[square theta]'] = s.E_theta_square
    missing = rt.missing_posteriors(s, MISSING) if items else {}
    return rt.FitResult(posterior=posterior, elbo=np.array(trace), iterations=len(trace), converged=converged, seconds=seconds, dims=dict(s.bound.dims), hypers={'m0': s.m0, 'k0': s.k0, 'a0': s.a0, 'b0': s.b0}, state=state, missing=missing)


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
    return rt.run_shares(local_step, s.acc_y_0_threads.shape[0], (seeding, items, s.seed_category, max_local_iter, local_tol, s.item_weight, s.acc_y_0_threads, s.present_y, s.acc_y_1_threads, s.y, s.group, evaluate, s.acc_y_2_threads, s.acc_y_3_threads,), ((s.acc_y_0, s.acc_y_0_threads), (s.acc_y_1, s.acc_y_1_threads), (s.acc_y_2, s.acc_y_2_threads), (s.acc_y_3, s.acc_y_3_threads),))


def _update_mu_tau_b(s, data_scale, expect=True):
    update_mu_tau_b(data_scale, s.lam_mu_tau_b_log, s.lam_mu_tau_b_value, s.lam_mu_tau_b_prec_mean, s.lam_mu_tau_b_quad, s.k0, s.m0, s.square_m0, s.a0, s.b0, s.n_G, s.E_theta_square, s.E_theta_value, expect, s.E_mu_tau_b_log, s.E_mu_tau_b_value, s.E_mu_tau_b_prec_mean, s.E_mu_tau_b_quad)


def _update_tau_w(s, data_scale, expect=True):
    update_tau_w(data_scale, s.lam_tau_w_log, s.lam_tau_w_value, s.a0, s.b0, s.acc_y_0, s.acc_y_1, s.n_G, s.acc_y_2, s.E_theta_value, s.acc_y_3, s.E_theta_square, expect, s.E_tau_w_log, s.E_tau_w_value)


def _update_theta(s, data_scale, expect=True):
    update_theta(data_scale, s.lam_theta_value, s.lam_theta_square, s.E_mu_tau_b_value, s.E_mu_tau_b_prec_mean, s.acc_y_2, s.E_tau_w_value, s.acc_y_3, expect, s.E_theta_value, s.E_theta_square, s.n_G)


def refresh(s):
    refresh_globals(s.lam_mu_tau_b_log, s.E_mu_tau_b_log, s.lam_mu_tau_b_value, s.E_mu_tau_b_value, s.lam_mu_tau_b_prec_mean, s.E_mu_tau_b_prec_mean, s.lam_mu_tau_b_quad, s.E_mu_tau_b_quad, s.lam_tau_w_log, s.E_tau_w_log, s.lam_tau_w_value, s.E_tau_w_value, s.lam_theta_value, s.E_theta_value, s.lam_theta_square, s.E_theta_square, s.n_G)


def elbo_of_globals(s):
    return elbo_global(s.log_k0, s.E_mu_tau_b_log, s.k0, s.E_mu_tau_b_quad, s.m0, s.E_mu_tau_b_prec_mean, s.square_m0, s.E_mu_tau_b_value, s.a0, s.log_b0, s.lgamma_a0, s.b0, s.E_tau_w_log, s.E_tau_w_value, s.n_G, s.E_theta_square, s.E_theta_value, s.acc_y_0, s.acc_y_1, s.acc_y_2, s.acc_y_3, s.lam_mu_tau_b_log, s.lam_mu_tau_b_value, s.lam_mu_tau_b_prec_mean, s.lam_mu_tau_b_quad, s.lam_tau_w_log, s.lam_tau_w_value, s.lam_theta_value, s.lam_theta_square)


GLOBALS = (  # the globals as the stochastic drivers move them
    rt.Global('mu_tau_b', 'normal_gamma', lam=('lam_mu_tau_b_log', 'lam_mu_tau_b_value', 'lam_mu_tau_b_prec_mean', 'lam_mu_tau_b_quad'), E=('E_mu_tau_b_log', 'E_mu_tau_b_value', 'E_mu_tau_b_prec_mean', 'E_mu_tau_b_quad'),
              update=_update_mu_tau_b, aux_draws=2, after_sample=None),
    rt.Global('tau_w', 'gamma', lam=('lam_tau_w_log', 'lam_tau_w_value'), E=('E_tau_w_log', 'E_tau_w_value'),
              update=_update_tau_w, aux_draws=1, after_sample=None),
    rt.Global('theta', 'normal', lam=('lam_theta_value', 'lam_theta_square'), E=('E_theta_value', 'E_theta_square'),
              update=_update_theta, aux_draws=1, after_sample=None),
)


def fit(data, **options):
    """Batch mean-field VB (options: cemodel.runtime.drivers.mf.fit). One iteration:
        statistics ← 0; elbo = run_local_step(s, s.all_items, ...)  # E-step
        _update_mu_tau_b(s, 1.0)  # q(mu_tau_b)
        _update_tau_w(s, 1.0)  # q(tau_w)
        _update_theta(s, 1.0)  # q(theta)
        elbo += elbo_of_globals(s)
    """
    return rt.drivers.mf.fit(_THIS, data, **options)


def fit_svi(data, **options):
    """SVI, SVI+ (options: cemodel.runtime.drivers.svi.fit). One step on a minibatch S:
        statistics ← 0; run_local_step(s, S, ...)
        _update_mu_tau_b(s, N / len(S), expect=False)  # λ̂ of q(mu_tau_b)
        _update_tau_w(s, N / len(S), expect=False)  # λ̂ of q(tau_w)
        _update_theta(s, N / len(S), expect=False)  # λ̂ of q(theta)
        λ ← (1 − ρ)λ + ρλ̂ (rt.blend); refresh(s)
    """
    return rt.drivers.svi.fit(_THIS, data, **options)


def fit_ssvi_a(data, **options):
    """SSVI-A (Hoffman & Blei 2015, eq. 10): fit_svi with the local step given a draw β ~ q(β)."""
    return rt.drivers.svi.fit(_THIS, data, sample_globals=True, **options)


def fit_ssvi(data, **options):
    """SSVI (Hoffman & Blei 2015, eq. 7): fit_ssvi_a with λ̂ = η + V(β, λ)·N/|S| Σ η̂_n(β)."""
    return rt.drivers.svi.fit(_THIS, data, sample_globals=True, apply_v=True, **options)
