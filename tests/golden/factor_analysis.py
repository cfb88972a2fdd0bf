"""factor_analysis: the model (kernels, data layout, start) for cemodel.runtime.drivers, by cemodel 0.1.0.

Model file: factor_analysis.cem (sha256 a26a6829d024ce42)
Regenerate with `cemodel compile factor_analysis.cem`; do not edit by hand.

Natural parameters are in coefficient form: q(x) ∝ exp(Σ_s lam_s · t_s(x)).
E_<var>_<stat> holds E_q[t_s]; acc_* hold sums over the data plate.
"""

import numpy as np
from numba import njit

from cemodel import runtime as rt

SOURCE = 'factor_analysis.cem'
SOURCE_SHA256 = 'a26a6829d024ce420699d6d145eeaab06a863575c7acb01ddd4c412778aac578'
DEFAULT_START = 'random'  # Normal/MVN means drawn from the prior: breaks the symmetry
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
    'data': ('n_K', 'n_P', 'y'), 'hyper': ('c', 'a0', 'b0'),
    'known': ('eye_K', 'present_y', 'logdet_eye_K', 'dim_f', 'logdet_eye_K_c', 'eye_K_c', 'dim_W', 'log_b0', 'lgamma_a0'),
    'global': ('lam_W_value', 'lam_W_outer', 'lam_psi_log', 'lam_psi_value'),
    'global_exp': ('E_psi_value', 'E_W_value', 'E_W_outer', 'E_psi_log'),
    'kept_local': ('lam_f_value', 'lam_f_outer', 'E_f_value', 'E_f_outer'),
    'item': ('seed_category', 'item_weight'),
    'statistic': ('acc_y_0', 'acc_y_1', 'acc_y_2', 'acc_y_3'),
    'thread': ('acc_y_0_threads', 'acc_y_1_threads', 'acc_y_2_threads', 'acc_y_3_threads'),
}
_THIS = rt.ModelView(globals())  # the model, as the drivers see it

SPEC = {
    "model": 'factor_analysis',
    "dims": {
        'K': {"default": 2, "ragged_over": None},
        'P': {"default": None, "ragged_over": None},
        'N': {"default": None, "ragged_over": None},
    },
    "plates": {
        'outputs': {"dim": 'P', "parent": None, "ragged": False},
        'points': {"dim": 'N', "parent": None, "ragged": False},
        'dims': {"dim": 'P', "parent": 'points', "ragged": False},
    },
    "observed": {
        'y': {"plates": ['points', 'dims'], "support": 'real', "shape": [], "categories": None, "missing": 'yes'},
    },
    "covariates": {},
    "not_data": {'c': 'hyperparameter', 'a0': 'hyperparameter', 'b0': 'hyperparameter', 'W': 'latent', 'psi': 'latent', 'f': 'latent'},
}
MISSING = {  # observed entries that may be missing: their q (rt.missing_posteriors)
    'y': {"family": 'Normal', "data_plate": 'a', "why_not": None,
        "terms": ((-0.5, ('value', 'value'), 'ab', (('E_psi_value', 'b'),)), (1.0, ('value',), 'ab', (('E_psi_value', 'b'), ('E_W_value', 'bc'), ('E_f_value', 'ac'))))},
}


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def update_f(
        i_points,
        with_children,
        lam_f_value,
        lam_f_outer,
        n_K,
        eye_K,
        n_P,
        E_psi_value,
        y,
        E_W_value,
        present_y,
        E_W_outer,
        E_f_value,
        E_f_outer,
):
    """q(f[n]) = MultivariateNormal(mean, precision)
        precision_vi = eye(K)_vi + Σ_{j2} E[psi[j2]]·E[W[j2] W[j2]ᵀ]_vi
        precision·mean_v = Σ_{j2} E[psi[j2]]·y[n, j2]·E[W[j2]]_v

    (factor_analysis.cem:23:5)
    """
    lam_f_value[i_points] = 0.0
    lam_f_outer[i_points] = 0.0
    # from f ~ MultivariateNormal (factor_analysis.cem:23:5)
    for t_i in range(n_K):
        for t_j in range(n_K):
            lam_f_outer[i_points, t_i, t_j] += -0.5 * eye_K[t_i, t_j]
    if with_children:
        # from y ~ Normal (factor_analysis.cem:25:9)
        for i_dims in range(n_P):
            for t_i0 in range(n_K):
                lam_f_value[i_points, t_i0] += E_psi_value[i_dims] * y[i_points, i_dims] * E_W_value[i_dims, t_i0] * present_y[i_points, i_dims]
        # from y ~ Normal (factor_analysis.cem:25:9)
        for i_dims in range(n_P):
            for t_i1 in range(n_K):
                for t_i2 in range(n_K):
                    lam_f_outer[i_points, t_i1, t_i2] += -0.5 * E_psi_value[i_dims] * E_W_outer[i_dims, t_i1, t_i2] * present_y[i_points, i_dims]
    rt.mvn_expected_stats(lam_f_value[i_points], lam_f_outer[i_points], E_f_value[i_points], E_f_outer[i_points])


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
        lam_f_value,
        lam_f_outer,
        n_K,
        eye_K,
        n_P,
        E_psi_value,
        y,
        E_W_value,
        present_y,
        E_W_outer,
        E_f_value,
        E_f_outer,
        item_weight,
        logdet_eye_K,
        dim_f,
        evaluate,
        acc_y_0_threads,
        acc_y_1_threads,
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
        acc_y_0_t = acc_y_0_threads[thread]
        acc_y_1_t = acc_y_1_threads[thread]
        acc_y_2_t = acc_y_2_threads[thread]
        acc_y_3_t = acc_y_3_threads[thread]
        elbo = 0.0
        stop_position = (thread + 1) * items.shape[0] // n_threads
        for position in range(thread * items.shape[0] // n_threads, stop_position):
            i_points = items[position]
            # the next item's memory, asked for while this one computes
            if position + 1 < stop_position and items[position + 1] != i_points + 1:
                rt.prefetch_row(item_weight, items[position + 1])
                rt.prefetch_row(lam_f_value, items[position + 1])
                rt.prefetch_row(E_f_value, items[position + 1])
                rt.prefetch_row(lam_f_outer, items[position + 1])
                rt.prefetch_row(E_f_outer, items[position + 1])
                rt.prefetch_row(y, items[position + 1])
            update_f(i_points, True, lam_f_value, lam_f_outer, n_K, eye_K, n_P, E_psi_value, y, E_W_value, present_y, E_W_outer, E_f_value, E_f_outer)
            # acc_y_0[@dims] += present(y[points, dims])  (factor_analysis.cem:25:9)
            for i_dims in range(n_P):
                acc_y_0_t[i_dims] += item_weight[i_points] * present_y[i_points, i_dims]
            # acc_y_1[@dims] += y[points, dims] · y[points, dims] · present(y[points, dims])  (factor_analysis.cem:25:9)
            for i_dims in range(n_P):
                acc_y_1_t[i_dims] += item_weight[i_points] * y[i_points, i_dims] * y[i_points, i_dims] * present_y[i_points, i_dims]
            # acc_y_2[i0, @dims] += y[points, dims] · E[f[points]] · present(y[points, dims])  (factor_analysis.cem:25:9)
            for i_dims in range(n_P):
                for t_i0 in range(n_K):
                    acc_y_2_t[t_i0, i_dims] += item_weight[i_points] * y[i_points, i_dims] * E_f_value[i_points, t_i0] * present_y[i_points, i_dims]
            # acc_y_3[i1, i2, @dims] += E[f[points]f[points]ᵀ] · present(y[points, dims])  (factor_analysis.cem:25:9)
            for i_dims in range(n_P):
                for t_i1 in range(n_K):
                    for t_i2 in range(n_K):
                        acc_y_3_t[t_i1, t_i2, i_dims] += item_weight[i_points] * E_f_outer[i_points, t_i1, t_i2] * present_y[i_points, i_dims]
            # ELBO: local terms and local entropies (a stochastic step has no use for them)
            if evaluate:
                elbo += 0.5 * logdet_eye_K
                for t_i in range(n_K):
                    for t_j in range(n_K):
                        elbo += -0.5 * eye_K[t_i, t_j] * E_f_outer[i_points, t_i, t_j]
                elbo += -0.9189385332046727 * dim_f
                for i_dims in range(n_P):
                    elbo += -0.9189385332046727 * present_y[i_points, i_dims]
                elbo += (rt.mvn_log_normalizer(lam_f_value[i_points], lam_f_outer[i_points]) - rt.frobenius(lam_f_value[i_points], E_f_value[i_points]) - rt.frobenius(lam_f_outer[i_points], E_f_outer[i_points]))
        shares_total += elbo  # summed in share order, as rt.run_shares sums
    return shares_total


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def update_W(
        data_scale,
        lam_W_value,
        lam_W_outer,
        n_K,
        eye_K_c,
        acc_y_2,
        E_psi_value,
        acc_y_3,
        expect,
        E_W_value,
        E_W_outer,
        n_P,
):
    """q(W[j]) = MultivariateNormal(mean, precision)
        precision_vi = (eye(K) * c)_vi + Σ_{n} E[psi[j]]·E[f[n] f[n]ᵀ]_vi
        precision·mean_v = Σ_{n} E[psi[j]]·y[n, j]·E[f[n]]_v

    (factor_analysis.cem:20:5)
    """
    for i_outputs in range(n_P):
        lam_W_value[i_outputs] = 0.0
        lam_W_outer[i_outputs] = 0.0
        # from W ~ MultivariateNormal (factor_analysis.cem:20:5)
        for t_i in range(n_K):
            for t_j in range(n_K):
                lam_W_outer[i_outputs, t_i, t_j] += -0.5 * eye_K_c[t_i, t_j]
        # from y ~ Normal (factor_analysis.cem:25:9)
        for t_i0 in range(n_K):
            lam_W_value[i_outputs, t_i0] += data_scale * acc_y_2[t_i0, i_outputs] * E_psi_value[i_outputs]
        # from y ~ Normal (factor_analysis.cem:25:9)
        for t_i1 in range(n_K):
            for t_i2 in range(n_K):
                lam_W_outer[i_outputs, t_i1, t_i2] += -0.5 * data_scale * acc_y_3[t_i1, t_i2, i_outputs] * E_psi_value[i_outputs]
        if expect:  # a stochastic step mixes λ first (λ̂ may be invalid)
            rt.mvn_expected_stats(lam_W_value[i_outputs], lam_W_outer[i_outputs], E_W_value[i_outputs], E_W_outer[i_outputs])


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def update_psi(
        data_scale,
        lam_psi_log,
        lam_psi_value,
        a0,
        b0,
        acc_y_0,
        acc_y_1,
        n_K,
        acc_y_2,
        E_W_value,
        acc_y_3,
        E_W_outer,
        expect,
        E_psi_log,
        E_psi_value,
        n_P,
):
    """q(psi[j]) = Gamma(shape, rate)
        shape = a0 + 0.5·Σ_{n} 1
        rate = b0 + 0.5·Σ_{n} y[n, j]·y[n, j] - Σ_{n,v} y[n, j]·E[W[j]]_v·E[f[n]]_v + 0.5·Σ_{n,i,l} E[W[j] W[j]ᵀ]_il·E[f[n] f[n]ᵀ]_il

    (factor_analysis.cem:21:5)
    """
    for i_outputs in range(n_P):
        lam_psi_log[i_outputs] = 0.0
        lam_psi_value[i_outputs] = 0.0
        # from psi ~ Gamma (factor_analysis.cem:21:5)
        lam_psi_log[i_outputs] += a0
        # from psi ~ Gamma (factor_analysis.cem:21:5)
        lam_psi_log[i_outputs] += -1.0
        # from psi ~ Gamma (factor_analysis.cem:21:5)
        lam_psi_value[i_outputs] += -b0
        # from y ~ Normal (factor_analysis.cem:25:9)
        lam_psi_log[i_outputs] += 0.5 * data_scale * acc_y_0[i_outputs]
        # from y ~ Normal (factor_analysis.cem:25:9)
        lam_psi_value[i_outputs] += -0.5 * data_scale * acc_y_1[i_outputs]
        # from y ~ Normal (factor_analysis.cem:25:9)
        for t_i0 in range(n_K):
            lam_psi_value[i_outputs] += data_scale * acc_y_2[t_i0, i_outputs] * E_W_value[i_outputs, t_i0]
        # from y ~ Normal (factor_analysis.cem:25:9)
        for t_i1 in range(n_K):
            for t_i2 in range(n_K):
                lam_psi_value[i_outputs] += -0.5 * data_scale * acc_y_3[t_i1, t_i2, i_outputs] * E_W_outer[i_outputs, t_i1, t_i2]
        if expect:  # a stochastic step mixes λ first (λ̂ may be invalid)
            E_psi_log[i_outputs], E_psi_value[i_outputs] = rt.gamma_expected_stats(lam_psi_log[i_outputs], lam_psi_value[i_outputs])


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def refresh_globals(
        lam_W_value,
        E_W_value,
        lam_W_outer,
        E_W_outer,
        n_P,
        lam_psi_log,
        E_psi_log,
        lam_psi_value,
        E_psi_value,
):
    """Expected statistics of the globals from their natural parameters."""
    for i_outputs in range(n_P):
        rt.mvn_expected_stats(lam_W_value[i_outputs], lam_W_outer[i_outputs], E_W_value[i_outputs], E_W_outer[i_outputs])
    for i_outputs in range(n_P):
        E_psi_log[i_outputs], E_psi_value[i_outputs] = rt.gamma_expected_stats(lam_psi_log[i_outputs], lam_psi_value[i_outputs])


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def elbo_global(
        n_P,
        logdet_eye_K_c,
        n_K,
        eye_K_c,
        E_W_outer,
        dim_W,
        a0,
        log_b0,
        lgamma_a0,
        E_psi_log,
        b0,
        E_psi_value,
        acc_y_0,
        acc_y_1,
        acc_y_2,
        E_W_value,
        acc_y_3,
        lam_W_value,
        lam_W_outer,
        lam_psi_log,
        lam_psi_value,
):
    """ELBO terms of the global factors (see elbo_terms in the README)."""
    elbo = 0.0
    # E[log p(W | ...)]  (factor_analysis.cem:20:5)
    for i_outputs in range(n_P):
        elbo += 0.5 * logdet_eye_K_c
    for i_outputs in range(n_P):
        for t_i in range(n_K):
            for t_j in range(n_K):
                elbo += -0.5 * eye_K_c[t_i, t_j] * E_W_outer[i_outputs, t_i, t_j]
    for i_outputs in range(n_P):
        elbo += -0.9189385332046727 * dim_W
    # E[log p(psi | ...)]  (factor_analysis.cem:21:5)
    for i_outputs in range(n_P):
        elbo += a0 * log_b0
    for i_outputs in range(n_P):
        elbo += -lgamma_a0
    for i_outputs in range(n_P):
        elbo += a0 * E_psi_log[i_outputs]
    for i_outputs in range(n_P):
        elbo += -E_psi_log[i_outputs]
    for i_outputs in range(n_P):
        elbo += -b0 * E_psi_value[i_outputs]
    # E[log p(f | ...)]  (factor_analysis.cem:23:5)
    # E[log p(y | ...)]  (factor_analysis.cem:25:9)
    for i_dims in range(n_P):
        elbo += 0.5 * acc_y_0[i_dims] * E_psi_log[i_dims]
    for i_dims in range(n_P):
        elbo += -0.5 * acc_y_1[i_dims] * E_psi_value[i_dims]
    for i_dims in range(n_P):
        for t_i0 in range(n_K):
            elbo += acc_y_2[t_i0, i_dims] * E_psi_value[i_dims] * E_W_value[i_dims, t_i0]
    for i_dims in range(n_P):
        for t_i1 in range(n_K):
            for t_i2 in range(n_K):
                elbo += -0.5 * acc_y_3[t_i1, t_i2, i_dims] * E_psi_value[i_dims] * E_W_outer[i_dims, t_i1, t_i2]
    # entropy of q(W)
    for i_outputs in range(n_P):
        elbo += rt.mvn_log_normalizer(lam_W_value[i_outputs], lam_W_outer[i_outputs]) - rt.frobenius(lam_W_value[i_outputs], E_W_value[i_outputs]) - rt.frobenius(lam_W_outer[i_outputs], E_W_outer[i_outputs])
    # entropy of q(psi)
    for i_outputs in range(n_P):
        elbo += rt.gamma_log_normalizer(lam_psi_log[i_outputs], lam_psi_value[i_outputs]) - lam_psi_log[i_outputs] * E_psi_log[i_outputs] - lam_psi_value[i_outputs] * E_psi_value[i_outputs]
    return elbo


def _prepare(data, hypers, dims, seed, init, start, max_local_iter, local_tol, share=None):
    """Bind and check the data, evaluate hyperparameters and knowns, allocate the arrays, start the globals.
    share: out of core, the fit's state, whose globals, hyperparameters and statistics `data`'s minibatch shares.
    """
    hypers = rt.check_hyper_names(hypers, ['c', 'a0', 'b0'])
    bound = rt.bind_data(SPEC, data, dims, missing=True)
    n_K, n_P, n_N = bound.dims['K'], bound.dims['P'], bound.dims['N']
    # refuse before allocating more than the machine's memory
    rt.check_memory(bound, {('P', 'K'): 2, ('P', 'K', 'K'): 2, ('P',): 6, ('N', 'K'): 2, ('N', 'K', 'K'): 2, ('threads', 'P'): 2, ('K', 'P'): 1, ('threads', 'K', 'P'): 1, ('K', 'K', 'P'): 1, ('threads', 'K', 'K', 'P'): 1, ('N',): 3})
    y = bound.arrays['y']
    # hyperparameters (defaults from the model file; out of core the fit's current values)
    c = rt.hyper_value(hypers, 'c', 1.0, ()) if share is None else share.c
    a0 = rt.hyper_value(hypers, 'a0', 1.0, (), domain='shape') if share is None else share.a0
    b0 = rt.hyper_value(hypers, 'b0', 1.0, (), domain='positive') if share is None else share.b0
    # known quantities: functions of hyperparameters and data
    logdet_eye_K_c = rt.logdet((np.eye(n_K) * c))  # logdet((eye(K) * c))
    eye_K_c = (np.eye(n_K) * c)  # value((eye(K) * c))
    dim_W = n_K  # dim(W[outputs])
    log_b0 = rt.log_data(b0, "hyperparameter 'b0'")  # log(b0)
    lgamma_a0 = rt.gammaln(a0)  # lgamma(a0)
    logdet_eye_K = rt.logdet(np.eye(n_K))  # logdet(eye(K))
    eye_K = np.eye(n_K)  # value(eye(K))
    dim_f = n_K  # dim(f[points])
    present_y = rt.present(bound, 'y')  # present(y[points, dims])
    # variational parameters (natural, coefficient form) and E[t]
    lam_W_value, E_W_value = (np.zeros((n_P, n_K)), np.zeros((n_P, n_K))) if share is None else (share.lam_W_value, share.E_W_value)
    lam_W_outer, E_W_outer = (np.zeros((n_P, n_K, n_K)), np.zeros((n_P, n_K, n_K))) if share is None else (share.lam_W_outer, share.E_W_outer)
    lam_psi_log, E_psi_log = (np.zeros((n_P,)), np.zeros((n_P,))) if share is None else (share.lam_psi_log, share.E_psi_log)
    lam_psi_value, E_psi_value = (np.zeros((n_P,)), np.zeros((n_P,))) if share is None else (share.lam_psi_value, share.E_psi_value)
    lam_f_value, E_f_value = np.zeros((n_N, n_K)), np.zeros((n_N, n_K))
    lam_f_outer, E_f_outer = np.zeros((n_N, n_K, n_K)), np.zeros((n_N, n_K, n_K))
    # sufficient statistics the local step hands to the global step (out of core added up over minibatches)
    acc_y_0 = np.zeros((n_P,)) if share is None else share.acc_y_0
    acc_y_1 = np.zeros((n_P,)) if share is None else share.acc_y_1
    acc_y_2 = np.zeros((n_K, n_P)) if share is None else share.acc_y_2
    acc_y_3 = np.zeros((n_K, n_K, n_P)) if share is None else share.acc_y_3
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
        return rt.State(bound=bound, c=c, a0=a0, b0=b0, seed_category=seed_category, lam_f_value=lam_f_value, lam_f_outer=lam_f_outer, n_K=n_K, eye_K=eye_K, n_P=n_P, E_psi_value=E_psi_value, y=y, E_W_value=E_W_value, present_y=present_y, E_W_outer=E_W_outer, E_f_value=E_f_value, E_f_outer=E_f_outer, item_weight=item_weight, logdet_eye_K=logdet_eye_K, dim_f=dim_f, acc_y_0_threads=acc_y_0_threads, acc_y_1_threads=acc_y_1_threads, acc_y_2_threads=acc_y_2_threads, acc_y_3_threads=acc_y_3_threads, acc_y_0=acc_y_0, acc_y_1=acc_y_1, acc_y_2=acc_y_2, acc_y_3=acc_y_3, lam_W_value=lam_W_value, lam_W_outer=lam_W_outer, lam_psi_log=lam_psi_log, E_psi_log=E_psi_log, lam_psi_value=lam_psi_value, logdet_eye_K_c=logdet_eye_K_c, eye_K_c=eye_K_c, dim_W=dim_W, log_b0=log_b0, lgamma_a0=lgamma_a0, all_items=all_items)
    # start every global at its prior
    update_W(0.0, lam_W_value, lam_W_outer, n_K, eye_K_c, acc_y_2, E_psi_value, acc_y_3, True, E_W_value, E_W_outer, n_P)
    update_psi(0.0, lam_psi_log, lam_psi_value, a0, b0, acc_y_0, acc_y_1, n_K, acc_y_2, E_W_value, acc_y_3, E_W_outer, True, E_psi_log, E_psi_value, n_P)
    if init is not None:  # warm start: the globals' natural parameters from an earlier fit
        rt.load_state(init, {'lam_W_value': lam_W_value, 'lam_W_outer': lam_W_outer, 'lam_psi_log': lam_psi_log, 'lam_psi_value': lam_psi_value})
        refresh_globals(lam_W_value, E_W_value, lam_W_outer, E_W_outer, n_P, lam_psi_log, E_psi_log, lam_psi_value, E_psi_value)
    start = DEFAULT_START if start is None else start
    if init is None and start == 'random':
        # each Normal/MVN global's mean drawn from its prior: breaks the symmetry of products of latent variables
        rng = np.random.default_rng(seed)
        rt.start_at_draw('mvn', lam_W_value, lam_W_outer, rng)
        refresh_globals(lam_W_value, E_W_value, lam_W_outer, E_W_outer, n_P, lam_psi_log, E_psi_log, lam_psi_value, E_psi_value)
    elif init is None and start == 'seeds':
        raise rt.CemDataError("start: expected 'random' or 'prior', found 'seeds' (there is no categorical assignment to seed)")
    elif init is None and start != 'prior':
        raise rt.CemDataError(f"start: expected 'random' or 'prior', found {start!r}")
    return rt.State(bound=bound, c=c, a0=a0, b0=b0, seed_category=seed_category, lam_f_value=lam_f_value, lam_f_outer=lam_f_outer, n_K=n_K, eye_K=eye_K, n_P=n_P, E_psi_value=E_psi_value, y=y, E_W_value=E_W_value, present_y=present_y, E_W_outer=E_W_outer, E_f_value=E_f_value, E_f_outer=E_f_outer, item_weight=item_weight, logdet_eye_K=logdet_eye_K, dim_f=dim_f, acc_y_0_threads=acc_y_0_threads, acc_y_1_threads=acc_y_1_threads, acc_y_2_threads=acc_y_2_threads, acc_y_3_threads=acc_y_3_threads, acc_y_0=acc_y_0, acc_y_1=acc_y_1, acc_y_2=acc_y_2, acc_y_3=acc_y_3, lam_W_value=lam_W_value, lam_W_outer=lam_W_outer, lam_psi_log=lam_psi_log, E_psi_log=E_psi_log, lam_psi_value=lam_psi_value, logdet_eye_K_c=logdet_eye_K_c, eye_K_c=eye_K_c, dim_W=dim_W, log_b0=log_b0, lgamma_a0=lgamma_a0, all_items=all_items)


def _learn(s, learn, rho=1.0, items=slice(None)):
    """Empirical Bayes (Minka 2000): each learned hyperparameter a step rho towards its ELBO maximiser given q."""
    if 'a0' in learn:  # the prior of psi
        s.a0 = (1.0 - rho) * s.a0 + rho * rt.learn_gamma_shape(s.b0, s.E_psi_log)
    if 'b0' in learn:  # the prior of psi
        s.b0 = (1.0 - rho) * s.b0 + rho * rt.learn_gamma_rate(s.a0, s.E_psi_value)
    # known quantities that depend on hyperparameters
    s.log_b0 = rt.log_data(s.b0, "hyperparameter 'b0'")
    s.lgamma_a0 = rt.gammaln(s.a0)


def _result(s, trace, converged, seconds, items=True):
    """The posterior in usual parameters, expectations and the state; items=False: the globals only."""
    posterior = {}
    state = {'lam_W_value': s.lam_W_value, 'lam_W_outer': s.lam_W_outer, 'lam_psi_log': s.lam_psi_log, 'lam_psi_value': s.lam_psi_value}
    W__mean, W__precision = rt.mvn_params(s.lam_W_value, s.lam_W_outer)
    posterior['W.mean'] = W__mean
    posterior['W.precision'] = W__precision
    posterior['E[value W]'] = s.E_W_value
    posterior['E[outer W]'] = s.E_W_outer
    psi__shape, psi__rate = rt.gamma_params(s.lam_psi_log, s.lam_psi_value)
    posterior['psi.shape'] = psi__shape
    posterior['psi.rate'] = psi__rate
    posterior['E[log psi]'] = s.E_psi_log
    posterior['E[value psi]'] = s.E_psi_value
    if items:  # out of core the state holds one minibatch's items
        f__mean, f__precision = rt.mvn_params(s.lam_f_value, s.lam_f_outer)
        posterior['f.mean'] = f__mean
        posterior['f.precision'] = f__precision
        posterior['E[value f]'] = s.E_f_value
        posterior['E[outer f]'] = s.E_f_outer
        state['lam_f_value'] = s.lam_f_value
        state['lam_f_outer'] = s.lam_f_outer
    missing = rt.missing_posteriors(s, MISSING) if items else {}
    return rt.FitResult(posterior=posterior, elbo=np.array(trace), iterations=len(trace), converged=converged, seconds=seconds, dims=dict(s.bound.dims), hypers={'c': s.c, 'a0': s.a0, 'b0': s.b0}, state=state, missing=missing)


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
    return rt.run_shares(local_step, s.acc_y_0_threads.shape[0], (seeding, items, s.seed_category, max_local_iter, local_tol, s.lam_f_value, s.lam_f_outer, s.n_K, s.eye_K, s.n_P, s.E_psi_value, s.y, s.E_W_value, s.present_y, s.E_W_outer, s.E_f_value, s.E_f_outer, s.item_weight, s.logdet_eye_K, s.dim_f, evaluate, s.acc_y_0_threads, s.acc_y_1_threads, s.acc_y_2_threads, s.acc_y_3_threads,), ((s.acc_y_0, s.acc_y_0_threads), (s.acc_y_1, s.acc_y_1_threads), (s.acc_y_2, s.acc_y_2_threads), (s.acc_y_3, s.acc_y_3_threads),))


def _update_W(s, data_scale, expect=True):
    update_W(data_scale, s.lam_W_value, s.lam_W_outer, s.n_K, s.eye_K_c, s.acc_y_2, s.E_psi_value, s.acc_y_3, expect, s.E_W_value, s.E_W_outer, s.n_P)


def _update_psi(s, data_scale, expect=True):
    update_psi(data_scale, s.lam_psi_log, s.lam_psi_value, s.a0, s.b0, s.acc_y_0, s.acc_y_1, s.n_K, s.acc_y_2, s.E_W_value, s.acc_y_3, s.E_W_outer, expect, s.E_psi_log, s.E_psi_value, s.n_P)


def refresh(s):
    refresh_globals(s.lam_W_value, s.E_W_value, s.lam_W_outer, s.E_W_outer, s.n_P, s.lam_psi_log, s.E_psi_log, s.lam_psi_value, s.E_psi_value)


def elbo_of_globals(s):
    return elbo_global(s.n_P, s.logdet_eye_K_c, s.n_K, s.eye_K_c, s.E_W_outer, s.dim_W, s.a0, s.log_b0, s.lgamma_a0, s.E_psi_log, s.b0, s.E_psi_value, s.acc_y_0, s.acc_y_1, s.acc_y_2, s.E_W_value, s.acc_y_3, s.lam_W_value, s.lam_W_outer, s.lam_psi_log, s.lam_psi_value)


GLOBALS = (  # the globals as the stochastic drivers move them
    rt.Global('W', 'mvn', lam=('lam_W_value', 'lam_W_outer'), E=('E_W_value', 'E_W_outer'),
              update=_update_W, aux_draws=1, after_sample=None),
    rt.Global('psi', 'gamma', lam=('lam_psi_log', 'lam_psi_value'), E=('E_psi_log', 'E_psi_value'),
              update=_update_psi, aux_draws=1, after_sample=None),
)


def fit(data, **options):
    """Batch mean-field VB (options: cemodel.runtime.drivers.mf.fit). One iteration:
        statistics ← 0; elbo = run_local_step(s, s.all_items, ...)  # E-step
        _update_W(s, 1.0)  # q(W)
        _update_psi(s, 1.0)  # q(psi)
        elbo += elbo_of_globals(s)
    """
    return rt.drivers.mf.fit(_THIS, data, **options)


def fit_svi(data, **options):
    """SVI, SVI+ (options: cemodel.runtime.drivers.svi.fit). One step on a minibatch S:
        statistics ← 0; run_local_step(s, S, ...)
        _update_W(s, N / len(S), expect=False)  # λ̂ of q(W)
        _update_psi(s, N / len(S), expect=False)  # λ̂ of q(psi)
        λ ← (1 − ρ)λ + ρλ̂ (rt.blend); refresh(s)
    """
    return rt.drivers.svi.fit(_THIS, data, **options)


def fit_ssvi_a(data, **options):
    """SSVI-A (Hoffman & Blei 2015, eq. 10): fit_svi with the local step given a draw β ~ q(β)."""
    return rt.drivers.svi.fit(_THIS, data, sample_globals=True, **options)


def fit_ssvi(data, **options):
    """SSVI (Hoffman & Blei 2015, eq. 7): fit_ssvi_a with λ̂ = η + V(β, λ)·N/|S| Σ η̂_n(β)."""
    return rt.drivers.svi.fit(_THIS, data, sample_globals=True, apply_v=True, **options)
