"""pmf: the model (kernels, data layout, start) for cemodel.runtime.drivers, by cemodel 0.1.0.

Model file: pmf.cem (sha256 3bfabfe4d3eaede1)
Regenerate with `cemodel compile pmf.cem`; do not edit by hand.

Natural parameters are in coefficient form: q(x) ∝ exp(Σ_s lam_s · t_s(x)).
E_<var>_<stat> holds E_q[t_s]; acc_* hold sums over the data plate.
"""

import numpy as np
from numba import njit

from cemodel import runtime as rt

SOURCE = 'pmf.cem'
SOURCE_SHA256 = '3bfabfe4d3eaede13df174541d4783b15dff9312c895a3245e9a4091dd9188fe'
DEFAULT_START = 'random'  # Normal/MVN means drawn from the prior: breaks the symmetry
LEARNABLE = ('a0', 'b0')  # hyperparameters empirical Bayes can set (fit(..., learn=...))
DATA_PLATE = 'ratings'  # the plate the local step runs over
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
    'data': ('y', 'n_U', 'n_I', 'n_K', 'n_N', 'user', 'item'), 'hyper': ('c', 'a0', 'b0'),
    'known': ('present_y', 'log_b0', 'lgamma_a0', 'logdet_eye_K_c', 'eye_K_c', 'dim_u', 'dim_v'),
    'global': ('lam_tau_log', 'lam_tau_value', 'lam_u_value', 'lam_u_outer', 'lam_v_value', 'lam_v_outer'),
    'global_exp': ('E_tau_log', 'E_tau_value', 'E_u_value', 'E_u_outer', 'E_v_value', 'E_v_outer'),
    'item': ('seed_category', 'item_weight'), 'statistic': ('acc_y_0', 'acc_y_1'),
    'entry_statistic': ('acc_y_2', 'acc_y_3'), 'thread': ('acc_y_0_threads', 'acc_y_1_threads'),
}
_THIS = rt.ModelView(globals())  # the model, as the drivers see it

SPEC = {
    "model": 'pmf',
    "dims": {
        'K': {"default": 5, "ragged_over": None},
        'U': {"default": None, "ragged_over": None},
        'I': {"default": None, "ragged_over": None},
        'N': {"default": None, "ragged_over": None},
    },
    "plates": {
        'users': {"dim": 'U', "parent": None, "ragged": False},
        'items': {"dim": 'I', "parent": None, "ragged": False},
        'ratings': {"dim": 'N', "parent": None, "ragged": False},
    },
    "observed": {
        'y': {"plates": ['ratings'], "support": 'real', "shape": [], "categories": None, "missing": 'yes'},
    },
    "covariates": {
        'user': {"plates": ['ratings'], "kind": 'int', "shape": [], "categories": 'U'},
        'item': {"plates": ['ratings'], "kind": 'int', "shape": [], "categories": 'I'},
    },
    "not_data": {'c': 'hyperparameter', 'a0': 'hyperparameter', 'b0': 'hyperparameter', 'tau': 'latent', 'u': 'latent', 'v': 'latent'},
}
MISSING = {  # observed entries that may be missing: their q (rt.missing_posteriors)
    'y': {"family": 'Normal', "data_plate": 'a', "why_not": None,
        "terms": ((-0.5, ('value', 'value'), 'a', (('E_tau_value', '0'),)), (1.0, ('value',), 'a', (('E_tau_value', '0'), ('E_u_value', 'bc'), ('E_v_value', 'dc'), ('user', 'onehot:n_U:ab'), ('item', 'onehot:n_I:ad'))))},
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
        acc_y_2,
        acc_y_3,
        evaluate,
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
        elbo = 0.0
        stop_position = (thread + 1) * items.shape[0] // n_threads
        for position in range(thread * items.shape[0] // n_threads, stop_position):
            i_ratings = items[position]
            # the next item's memory, asked for while this one computes
            if position + 1 < stop_position and items[position + 1] != i_ratings + 1:
                rt.prefetch_row(item_weight, items[position + 1])
                rt.prefetch_row(y, items[position + 1])
            # acc_y_0[] += present(y[ratings])  (pmf.cem:31:5)
            acc_y_0_threads[thread] += item_weight[i_ratings] * present_y[i_ratings]
            # acc_y_1[] += y[ratings] · y[ratings] · present(y[ratings])  (pmf.cem:31:5)
            acc_y_1_threads[thread] += item_weight[i_ratings] * y[i_ratings] * y[i_ratings] * present_y[i_ratings]
            # acc_y_2[ratings] += y[ratings] · present(y[ratings])  (pmf.cem:31:5)
            acc_y_2[i_ratings] += item_weight[i_ratings] * y[i_ratings] * present_y[i_ratings]
            # acc_y_3[ratings] += present(y[ratings])  (pmf.cem:31:5)
            acc_y_3[i_ratings] += item_weight[i_ratings] * present_y[i_ratings]
            # ELBO: local terms and local entropies (a stochastic step has no use for them)
            if evaluate:
                elbo += -0.9189385332046727 * present_y[i_ratings]
        shares_total += elbo  # summed in share order, as rt.run_shares sums
    return shares_total


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def update_tau(
        data_scale,
        lam_tau_log,
        lam_tau_value,
        a0,
        b0,
        acc_y_0,
        acc_y_1,
        n_N,
        user,
        item,
        n_K,
        acc_y_2,
        E_u_value,
        E_v_value,
        acc_y_3,
        E_u_outer,
        E_v_outer,
        expect,
        E_tau_log,
        E_tau_value,
):
    """q(tau) = Gamma(shape, rate)
        shape = a0 + 0.5·Σ_{n} 1
        rate = b0 + 0.5·Σ_{n} y[n]·y[n] - Σ_{n,m} y[n]·E[u[user[n]]]_m·E[v[item[n]]]_m + 0.5·Σ_{n,u,r} E[u[user[n]] u[user[n]]ᵀ]_ur·E[v[item[n]] v[item[n]]ᵀ]_ur

    (pmf.cem:22:1)
    """
    lam_tau_log[0] = 0.0
    lam_tau_value[0] = 0.0
    # from tau ~ Gamma (pmf.cem:22:1)
    lam_tau_log[0] += a0
    # from tau ~ Gamma (pmf.cem:22:1)
    lam_tau_log[0] += -1.0
    # from tau ~ Gamma (pmf.cem:22:1)
    lam_tau_value[0] += -b0
    # from y ~ Normal (pmf.cem:31:5)
    lam_tau_log[0] += 0.5 * data_scale * acc_y_0
    # from y ~ Normal (pmf.cem:31:5)
    lam_tau_value[0] += -0.5 * data_scale * acc_y_1
    # from y ~ Normal (pmf.cem:31:5)
    for i_ratings in range(n_N):
        t_g0 = user[i_ratings]
        t_g1 = item[i_ratings]
        for t_i0 in range(n_K):
            lam_tau_value[0] += data_scale * acc_y_2[i_ratings] * E_u_value[t_g0, t_i0] * E_v_value[t_g1, t_i0]
    # from y ~ Normal (pmf.cem:31:5)
    for i_ratings in range(n_N):
        t_g0 = user[i_ratings]
        t_g1 = item[i_ratings]
        for t_i1 in range(n_K):
            for t_i2 in range(n_K):
                lam_tau_value[0] += -0.5 * data_scale * acc_y_3[i_ratings] * E_u_outer[t_g0, t_i1, t_i2] * E_v_outer[t_g1, t_i1, t_i2]
    if expect:  # a stochastic step mixes λ first (λ̂ may be invalid)
        E_tau_log[0], E_tau_value[0] = rt.gamma_expected_stats(lam_tau_log[0], lam_tau_value[0])


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def update_u(
        data_scale,
        lam_u_value,
        lam_u_outer,
        n_K,
        eye_K_c,
        n_N,
        user,
        item,
        acc_y_2,
        E_tau_value,
        E_v_value,
        acc_y_3,
        E_v_outer,
        expect,
        E_u_value,
        E_u_outer,
        n_U,
):
    """q(u[i]) = MultivariateNormal(mean, precision)
        precision_vl = (eye(K) * c)_vl + Σ_{n} E[tau]·E[v[item[n]] v[item[n]]ᵀ]_vl·[user[n] = i]
        precision·mean_v = Σ_{n} E[tau]·y[n]·E[v[item[n]]]_v·[user[n] = i]

    (pmf.cem:24:5)
    """
    for i_users in range(n_U):
        lam_u_value[i_users] = 0.0
        lam_u_outer[i_users] = 0.0
        # from u ~ MultivariateNormal (pmf.cem:24:5)
        for t_i in range(n_K):
            for t_j in range(n_K):
                lam_u_outer[i_users, t_i, t_j] += -0.5 * eye_K_c[t_i, t_j]
    # from y ~ Normal (pmf.cem:31:5)
    for i_ratings in range(n_N):
        t_g0 = user[i_ratings]
        t_g1 = item[i_ratings]
        for t_i0 in range(n_K):
            lam_u_value[t_g0, t_i0] += data_scale * acc_y_2[i_ratings] * E_tau_value[0] * E_v_value[t_g1, t_i0]
    # from y ~ Normal (pmf.cem:31:5)
    for i_ratings in range(n_N):
        t_g0 = user[i_ratings]
        t_g1 = item[i_ratings]
        for t_i1 in range(n_K):
            for t_i2 in range(n_K):
                lam_u_outer[t_g0, t_i1, t_i2] += -0.5 * data_scale * acc_y_3[i_ratings] * E_tau_value[0] * E_v_outer[t_g1, t_i1, t_i2]
    for i_users in range(n_U):
        if expect:  # a stochastic step mixes λ first (λ̂ may be invalid)
            rt.mvn_expected_stats(lam_u_value[i_users], lam_u_outer[i_users], E_u_value[i_users], E_u_outer[i_users])


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def update_v(
        data_scale,
        lam_v_value,
        lam_v_outer,
        n_K,
        eye_K_c,
        n_N,
        user,
        item,
        acc_y_2,
        E_tau_value,
        E_u_value,
        acc_y_3,
        E_u_outer,
        expect,
        E_v_value,
        E_v_outer,
        n_I,
):
    """q(v[j]) = MultivariateNormal(mean, precision)
        precision_vl = (eye(K) * c)_vl + Σ_{n} E[tau]·E[u[user[n]] u[user[n]]ᵀ]_vl·[item[n] = j]
        precision·mean_v = Σ_{n} E[tau]·y[n]·E[u[user[n]]]_v·[item[n] = j]

    (pmf.cem:26:5)
    """
    for i_items in range(n_I):
        lam_v_value[i_items] = 0.0
        lam_v_outer[i_items] = 0.0
        # from v ~ MultivariateNormal (pmf.cem:26:5)
        for t_i in range(n_K):
            for t_j in range(n_K):
                lam_v_outer[i_items, t_i, t_j] += -0.5 * eye_K_c[t_i, t_j]
    # from y ~ Normal (pmf.cem:31:5)
    for i_ratings in range(n_N):
        t_g0 = user[i_ratings]
        t_g1 = item[i_ratings]
        for t_i0 in range(n_K):
            lam_v_value[t_g1, t_i0] += data_scale * acc_y_2[i_ratings] * E_tau_value[0] * E_u_value[t_g0, t_i0]
    # from y ~ Normal (pmf.cem:31:5)
    for i_ratings in range(n_N):
        t_g0 = user[i_ratings]
        t_g1 = item[i_ratings]
        for t_i1 in range(n_K):
            for t_i2 in range(n_K):
                lam_v_outer[t_g1, t_i1, t_i2] += -0.5 * data_scale * acc_y_3[i_ratings] * E_tau_value[0] * E_u_outer[t_g0, t_i1, t_i2]
    for i_items in range(n_I):
        if expect:  # a stochastic step mixes λ first (λ̂ may be invalid)
            rt.mvn_expected_stats(lam_v_value[i_items], lam_v_outer[i_items], E_v_value[i_items], E_v_outer[i_items])


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def refresh_globals(
        lam_tau_log,
        E_tau_log,
        lam_tau_value,
        E_tau_value,
        lam_u_value,
        E_u_value,
        lam_u_outer,
        E_u_outer,
        n_U,
        lam_v_value,
        E_v_value,
        lam_v_outer,
        E_v_outer,
        n_I,
):
    """Expected statistics of the globals from their natural parameters."""
    E_tau_log[0], E_tau_value[0] = rt.gamma_expected_stats(lam_tau_log[0], lam_tau_value[0])
    for i_users in range(n_U):
        rt.mvn_expected_stats(lam_u_value[i_users], lam_u_outer[i_users], E_u_value[i_users], E_u_outer[i_users])
    for i_items in range(n_I):
        rt.mvn_expected_stats(lam_v_value[i_items], lam_v_outer[i_items], E_v_value[i_items], E_v_outer[i_items])


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def elbo_global(
        a0,
        log_b0,
        lgamma_a0,
        E_tau_log,
        b0,
        E_tau_value,
        n_U,
        logdet_eye_K_c,
        n_K,
        eye_K_c,
        E_u_outer,
        dim_u,
        n_I,
        E_v_outer,
        dim_v,
        acc_y_0,
        acc_y_1,
        lam_tau_log,
        lam_tau_value,
        lam_u_value,
        E_u_value,
        lam_u_outer,
        lam_v_value,
        E_v_value,
        lam_v_outer,
):
    """ELBO terms of the global factors (see elbo_terms in the README)."""
    elbo = 0.0
    # E[log p(tau | ...)]  (pmf.cem:22:1)
    elbo += a0 * log_b0
    elbo += -lgamma_a0
    elbo += a0 * E_tau_log[0]
    elbo += -E_tau_log[0]
    elbo += -b0 * E_tau_value[0]
    # E[log p(u | ...)]  (pmf.cem:24:5)
    for i_users in range(n_U):
        elbo += 0.5 * logdet_eye_K_c
    for i_users in range(n_U):
        for t_i in range(n_K):
            for t_j in range(n_K):
                elbo += -0.5 * eye_K_c[t_i, t_j] * E_u_outer[i_users, t_i, t_j]
    for i_users in range(n_U):
        elbo += -0.9189385332046727 * dim_u
    # E[log p(v | ...)]  (pmf.cem:26:5)
    for i_items in range(n_I):
        elbo += 0.5 * logdet_eye_K_c
    for i_items in range(n_I):
        for t_i in range(n_K):
            for t_j in range(n_K):
                elbo += -0.5 * eye_K_c[t_i, t_j] * E_v_outer[i_items, t_i, t_j]
    for i_items in range(n_I):
        elbo += -0.9189385332046727 * dim_v
    # E[log p(y | ...)]  (pmf.cem:31:5)
    elbo += 0.5 * acc_y_0 * E_tau_log[0]
    elbo += -0.5 * acc_y_1 * E_tau_value[0]
    # entropy of q(tau)
    elbo += rt.gamma_log_normalizer(lam_tau_log[0], lam_tau_value[0]) - lam_tau_log[0] * E_tau_log[0] - lam_tau_value[0] * E_tau_value[0]
    # entropy of q(u)
    for i_users in range(n_U):
        elbo += rt.mvn_log_normalizer(lam_u_value[i_users], lam_u_outer[i_users]) - rt.frobenius(lam_u_value[i_users], E_u_value[i_users]) - rt.frobenius(lam_u_outer[i_users], E_u_outer[i_users])
    # entropy of q(v)
    for i_items in range(n_I):
        elbo += rt.mvn_log_normalizer(lam_v_value[i_items], lam_v_outer[i_items]) - rt.frobenius(lam_v_value[i_items], E_v_value[i_items]) - rt.frobenius(lam_v_outer[i_items], E_v_outer[i_items])
    return elbo


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def elbo_entries(
        n_N,
        user,
        item,
        n_K,
        acc_y_2,
        E_tau_value,
        E_u_value,
        E_v_value,
        acc_y_3,
        E_u_outer,
        E_v_outer,
):
    """ELBO terms through the statistics kept per data entry."""
    elbo = 0.0
    # E[log p(y | ...)]  (pmf.cem:31:5)
    for i_ratings in range(n_N):
        t_g0 = user[i_ratings]
        t_g1 = item[i_ratings]
        for t_i0 in range(n_K):
            elbo += acc_y_2[i_ratings] * E_tau_value[0] * E_u_value[t_g0, t_i0] * E_v_value[t_g1, t_i0]
    for i_ratings in range(n_N):
        t_g0 = user[i_ratings]
        t_g1 = item[i_ratings]
        for t_i1 in range(n_K):
            for t_i2 in range(n_K):
                elbo += -0.5 * acc_y_3[i_ratings] * E_tau_value[0] * E_u_outer[t_g0, t_i1, t_i2] * E_v_outer[t_g1, t_i1, t_i2]
    return elbo


def _prepare(data, hypers, dims, seed, init, start, max_local_iter, local_tol, share=None):
    """Bind and check the data, evaluate hyperparameters and knowns, allocate the arrays, start the globals.
    share: out of core, the fit's state, whose globals, hyperparameters and statistics `data`'s minibatch shares.
    """
    hypers = rt.check_hyper_names(hypers, ['c', 'a0', 'b0'])
    bound = rt.bind_data(SPEC, data, dims, missing=True)
    n_K, n_U, n_I, n_N = bound.dims['K'], bound.dims['U'], bound.dims['I'], bound.dims['N']
    # refuse before allocating more than the machine's memory
    rt.check_memory(bound, {(1,): 6, ('U', 'K'): 2, ('U', 'K', 'K'): 2, ('I', 'K'): 2, ('I', 'K', 'K'): 2, ('threads',): 2, ('N',): 5})
    y, user, item = bound.arrays['y'], bound.arrays['user'], bound.arrays['item']
    # hyperparameters (defaults from the model file; out of core the fit's current values)
    c = rt.hyper_value(hypers, 'c', 1.0, ()) if share is None else share.c
    a0 = rt.hyper_value(hypers, 'a0', 1.0, (), domain='shape') if share is None else share.a0
    b0 = rt.hyper_value(hypers, 'b0', 1.0, (), domain='positive') if share is None else share.b0
    # known quantities: functions of hyperparameters and data
    log_b0 = rt.log_data(b0, "hyperparameter 'b0'")  # log(b0)
    lgamma_a0 = rt.gammaln(a0)  # lgamma(a0)
    logdet_eye_K_c = rt.logdet((np.eye(n_K) * c))  # logdet((eye(K) * c))
    eye_K_c = (np.eye(n_K) * c)  # value((eye(K) * c))
    dim_u = n_K  # dim(u[users])
    dim_v = n_K  # dim(v[items])
    present_y = rt.present(bound, 'y')  # present(y[ratings])
    # variational parameters (natural, coefficient form) and E[t]
    lam_tau_log, E_tau_log = (np.zeros((1,)), np.zeros((1,))) if share is None else (share.lam_tau_log, share.E_tau_log)
    lam_tau_value, E_tau_value = (np.zeros((1,)), np.zeros((1,))) if share is None else (share.lam_tau_value, share.E_tau_value)
    lam_u_value, E_u_value = (np.zeros((n_U, n_K)), np.zeros((n_U, n_K))) if share is None else (share.lam_u_value, share.E_u_value)
    lam_u_outer, E_u_outer = (np.zeros((n_U, n_K, n_K)), np.zeros((n_U, n_K, n_K))) if share is None else (share.lam_u_outer, share.E_u_outer)
    lam_v_value, E_v_value = (np.zeros((n_I, n_K)), np.zeros((n_I, n_K))) if share is None else (share.lam_v_value, share.E_v_value)
    lam_v_outer, E_v_outer = (np.zeros((n_I, n_K, n_K)), np.zeros((n_I, n_K, n_K))) if share is None else (share.lam_v_outer, share.E_v_outer)
    # sufficient statistics the local step hands to the global step (out of core added up over minibatches)
    acc_y_0 = np.zeros(()) if share is None else share.acc_y_0
    acc_y_1 = np.zeros(()) if share is None else share.acc_y_1
    acc_y_2 = np.zeros((n_N,))  # per ratings entry
    acc_y_3 = np.zeros((n_N,))  # per ratings entry
    # the local step's shares: one per thread, fewer for small data
    n_threads = rt.share_count(bound)
    acc_y_0_threads = rt.thread_copies(n_threads, acc_y_0) if share is None else share.acc_y_0_threads
    acc_y_1_threads = rt.thread_copies(n_threads, acc_y_1) if share is None else share.acc_y_1_threads
    all_items = np.arange(n_N)  # the local step runs over these
    item_weight = np.ones(n_N)  # each item's weight in the statistics (SVI+ perturbs it)
    seed_category = np.full(n_N, -1)
    if share is not None:  # out of core: a minibatch's state, sharing the fit's
        return rt.State(bound=bound, c=c, a0=a0, b0=b0, seed_category=seed_category, item_weight=item_weight, acc_y_0_threads=acc_y_0_threads, present_y=present_y, acc_y_1_threads=acc_y_1_threads, y=y, acc_y_2=acc_y_2, acc_y_3=acc_y_3, acc_y_0=acc_y_0, acc_y_1=acc_y_1, lam_tau_log=lam_tau_log, E_tau_log=E_tau_log, lam_tau_value=lam_tau_value, E_tau_value=E_tau_value, lam_u_value=lam_u_value, E_u_value=E_u_value, lam_u_outer=lam_u_outer, E_u_outer=E_u_outer, n_U=n_U, lam_v_value=lam_v_value, E_v_value=E_v_value, lam_v_outer=lam_v_outer, E_v_outer=E_v_outer, n_I=n_I, log_b0=log_b0, lgamma_a0=lgamma_a0, logdet_eye_K_c=logdet_eye_K_c, n_K=n_K, eye_K_c=eye_K_c, dim_u=dim_u, dim_v=dim_v, n_N=n_N, user=user, item=item, all_items=all_items)
    # start every global at its prior
    update_tau(0.0, lam_tau_log, lam_tau_value, a0, b0, acc_y_0, acc_y_1, n_N, user, item, n_K, acc_y_2, E_u_value, E_v_value, acc_y_3, E_u_outer, E_v_outer, True, E_tau_log, E_tau_value)
    update_u(0.0, lam_u_value, lam_u_outer, n_K, eye_K_c, n_N, user, item, acc_y_2, E_tau_value, E_v_value, acc_y_3, E_v_outer, True, E_u_value, E_u_outer, n_U)
    update_v(0.0, lam_v_value, lam_v_outer, n_K, eye_K_c, n_N, user, item, acc_y_2, E_tau_value, E_u_value, acc_y_3, E_u_outer, True, E_v_value, E_v_outer, n_I)
    if init is not None:  # warm start: the globals' natural parameters from an earlier fit
        rt.load_state(init, {'lam_tau_log': lam_tau_log, 'lam_tau_value': lam_tau_value, 'lam_u_value': lam_u_value, 'lam_u_outer': lam_u_outer, 'lam_v_value': lam_v_value, 'lam_v_outer': lam_v_outer})
        refresh_globals(lam_tau_log, E_tau_log, lam_tau_value, E_tau_value, lam_u_value, E_u_value, lam_u_outer, E_u_outer, n_U, lam_v_value, E_v_value, lam_v_outer, E_v_outer, n_I)
    start = DEFAULT_START if start is None else start
    if init is None and start == 'random':
        # each Normal/MVN global's mean drawn from its prior: breaks the symmetry of products of latent variables
        rng = np.random.default_rng(seed)
        rt.start_at_draw('mvn', lam_u_value, lam_u_outer, rng)
        rt.start_at_draw('mvn', lam_v_value, lam_v_outer, rng)
        refresh_globals(lam_tau_log, E_tau_log, lam_tau_value, E_tau_value, lam_u_value, E_u_value, lam_u_outer, E_u_outer, n_U, lam_v_value, E_v_value, lam_v_outer, E_v_outer, n_I)
    elif init is None and start == 'seeds':
        raise rt.CemDataError("start: expected 'random' or 'prior', found 'seeds' (there is no categorical assignment to seed)")
    elif init is None and start != 'prior':
        raise rt.CemDataError(f"start: expected 'random' or 'prior', found {start!r}")
    return rt.State(bound=bound, c=c, a0=a0, b0=b0, seed_category=seed_category, item_weight=item_weight, acc_y_0_threads=acc_y_0_threads, present_y=present_y, acc_y_1_threads=acc_y_1_threads, y=y, acc_y_2=acc_y_2, acc_y_3=acc_y_3, acc_y_0=acc_y_0, acc_y_1=acc_y_1, lam_tau_log=lam_tau_log, E_tau_log=E_tau_log, lam_tau_value=lam_tau_value, E_tau_value=E_tau_value, lam_u_value=lam_u_value, E_u_value=E_u_value, lam_u_outer=lam_u_outer, E_u_outer=E_u_outer, n_U=n_U, lam_v_value=lam_v_value, E_v_value=E_v_value, lam_v_outer=lam_v_outer, E_v_outer=E_v_outer, n_I=n_I, log_b0=log_b0, lgamma_a0=lgamma_a0, logdet_eye_K_c=logdet_eye_K_c, n_K=n_K, eye_K_c=eye_K_c, dim_u=dim_u, dim_v=dim_v, n_N=n_N, user=user, item=item, all_items=all_items)


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
    """The posterior in usual parameters, expectations and the state."""
    posterior = {}
    state = {'lam_tau_log': s.lam_tau_log, 'lam_tau_value': s.lam_tau_value, 'lam_u_value': s.lam_u_value, 'lam_u_outer': s.lam_u_outer, 'lam_v_value': s.lam_v_value, 'lam_v_outer': s.lam_v_outer}
    tau__shape, tau__rate = rt.gamma_params(s.lam_tau_log, s.lam_tau_value)
    posterior['tau.shape'] = tau__shape[0]
    posterior['tau.rate'] = tau__rate[0]
    posterior['E[log tau]'] = s.E_tau_log[0]
    posterior['E[value tau]'] = s.E_tau_value[0]
    u__mean, u__precision = rt.mvn_params(s.lam_u_value, s.lam_u_outer)
    posterior['u.mean'] = u__mean
    posterior['u.precision'] = u__precision
    posterior['E[value u]'] = s.E_u_value
    posterior['E[outer u]'] = s.E_u_outer
    v__mean, v__precision = rt.mvn_params(s.lam_v_value, s.lam_v_outer)
    posterior['v.mean'] = v__mean
    posterior['v.precision'] = v__precision
    posterior['E[value v]'] = s.E_v_value
    posterior['E[outer v]'] = s.E_v_outer
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
    return rt.run_shares(local_step, s.acc_y_0_threads.shape[0], (seeding, items, s.seed_category, max_local_iter, local_tol, s.item_weight, s.acc_y_0_threads, s.present_y, s.acc_y_1_threads, s.y, s.acc_y_2, s.acc_y_3, evaluate,), ((s.acc_y_0, s.acc_y_0_threads), (s.acc_y_1, s.acc_y_1_threads),))


def _update_tau(s, data_scale, expect=True):
    update_tau(data_scale, s.lam_tau_log, s.lam_tau_value, s.a0, s.b0, s.acc_y_0, s.acc_y_1, s.n_N, s.user, s.item, s.n_K, s.acc_y_2, s.E_u_value, s.E_v_value, s.acc_y_3, s.E_u_outer, s.E_v_outer, expect, s.E_tau_log, s.E_tau_value)


def _update_u(s, data_scale, expect=True):
    update_u(data_scale, s.lam_u_value, s.lam_u_outer, s.n_K, s.eye_K_c, s.n_N, s.user, s.item, s.acc_y_2, s.E_tau_value, s.E_v_value, s.acc_y_3, s.E_v_outer, expect, s.E_u_value, s.E_u_outer, s.n_U)


def _update_v(s, data_scale, expect=True):
    update_v(data_scale, s.lam_v_value, s.lam_v_outer, s.n_K, s.eye_K_c, s.n_N, s.user, s.item, s.acc_y_2, s.E_tau_value, s.E_u_value, s.acc_y_3, s.E_u_outer, expect, s.E_v_value, s.E_v_outer, s.n_I)


def refresh(s):
    refresh_globals(s.lam_tau_log, s.E_tau_log, s.lam_tau_value, s.E_tau_value, s.lam_u_value, s.E_u_value, s.lam_u_outer, s.E_u_outer, s.n_U, s.lam_v_value, s.E_v_value, s.lam_v_outer, s.E_v_outer, s.n_I)


def elbo_of_entries(s):
    """The ELBO terms through the statistics kept per entry (ROLES 'entry_statistic')."""
    return elbo_entries(s.n_N, s.user, s.item, s.n_K, s.acc_y_2, s.E_tau_value, s.E_u_value, s.E_v_value, s.acc_y_3, s.E_u_outer, s.E_v_outer)


def elbo_of_globals(s):
    return elbo_global(s.a0, s.log_b0, s.lgamma_a0, s.E_tau_log, s.b0, s.E_tau_value, s.n_U, s.logdet_eye_K_c, s.n_K, s.eye_K_c, s.E_u_outer, s.dim_u, s.n_I, s.E_v_outer, s.dim_v, s.acc_y_0, s.acc_y_1, s.lam_tau_log, s.lam_tau_value, s.lam_u_value, s.E_u_value, s.lam_u_outer, s.lam_v_value, s.E_v_value, s.lam_v_outer) + elbo_of_entries(s)


GLOBALS = (  # the globals as the stochastic drivers move them
    rt.Global('tau', 'gamma', lam=('lam_tau_log', 'lam_tau_value'), E=('E_tau_log', 'E_tau_value'),
              update=_update_tau, aux_draws=1, after_sample=None),
    rt.Global('u', 'mvn', lam=('lam_u_value', 'lam_u_outer'), E=('E_u_value', 'E_u_outer'),
              update=_update_u, aux_draws=1, after_sample=None),
    rt.Global('v', 'mvn', lam=('lam_v_value', 'lam_v_outer'), E=('E_v_value', 'E_v_outer'),
              update=_update_v, aux_draws=1, after_sample=None),
)


def fit(data, **options):
    """Batch mean-field VB (options: cemodel.runtime.drivers.mf.fit). One iteration:
        statistics ← 0; elbo = run_local_step(s, s.all_items, ...)  # E-step
        _update_tau(s, 1.0)  # q(tau)
        _update_u(s, 1.0)  # q(u)
        _update_v(s, 1.0)  # q(v)
        elbo += elbo_of_globals(s)
    """
    return rt.drivers.mf.fit(_THIS, data, **options)


def fit_svi(data, **options):
    """SVI, SVI+ (options: cemodel.runtime.drivers.svi.fit). One step on a minibatch S:
        statistics ← 0; run_local_step(s, S, ...)
        _update_tau(s, N / len(S), expect=False)  # λ̂ of q(tau)
        _update_u(s, N / len(S), expect=False)  # λ̂ of q(u)
        _update_v(s, N / len(S), expect=False)  # λ̂ of q(v)
        λ ← (1 − ρ)λ + ρλ̂ (rt.blend); refresh(s)
    """
    return rt.drivers.svi.fit(_THIS, data, **options)


def fit_ssvi_a(data, **options):
    """SSVI-A (Hoffman & Blei 2015, eq. 10): fit_svi with the local step given a draw β ~ q(β)."""
    return rt.drivers.svi.fit(_THIS, data, sample_globals=True, **options)


def fit_ssvi(data, **options):
    """SSVI (Hoffman & Blei 2015, eq. 7): fit_ssvi_a with λ̂ = η + V(β, λ)·N/|S| Σ η̂_n(β)."""
    return rt.drivers.svi.fit(_THIS, data, sample_globals=True, apply_v=True, **options)
