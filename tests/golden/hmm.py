"""hmm: the model (kernels, data layout, start) for cemodel.runtime.drivers, by cemodel 0.1.0.

Model file: hmm.cem (sha256 ad58c15a635874c2)
Regenerate with `cemodel compile hmm.cem`; do not edit by hand.

Natural parameters are in coefficient form: q(x) ∝ exp(Σ_s lam_s · t_s(x)).
E_<var>_<stat> holds E_q[t_s]; acc_* hold sums over the data plate.
"""

import numpy as np
from numba import njit

from cemodel import runtime as rt

SOURCE = 'hmm.cem'
SOURCE_SHA256 = 'ad58c15a635874c2639db9cc3e69429cbf28163d9fa342c3d922c6e08341ee1c'
DEFAULT_START = 'seeds'  # k-means++ seed steps for the chain's states
LEARNABLE = ('eta',)  # hyperparameters empirical Bayes can set (fit(..., learn=...))
DATA_PLATE = 'seqs'  # the plate the local step runs over
# the global steps (fit, fit_svi, ..., fit_klc) and whether each applies
METHODS = {
    'mf': 'yes',
    'svi': 'yes',
    'svi+': 'yes',
    'svi-avg': 'yes',
    'ssvi-a': 'yes',
    'ssvi': 'yes',
    'klc': "no: KLC-CG keeps independent categorical assignments of the data plate in Z (softmax-parameterised); 'z' is a MarkovChain, whose states depend on each other along the steps",
}
# the E-steps (fit_svi(..., local=...)) and whether each applies
LOCAL_STEPS = {
    'mf': 'yes: local mean field',
    'exact': 'yes: given the globals each local depends only on data, so the local update is its exact conditional p(z_n | y_n, β)',
    'gibbs': "no: 'z' is a MarkovChain, a chain whose steps depend on each other; the sampled steps draw independent categorical assignments (the exact step smooths the whole chain instead)",
    'cvb0': "no: 'z' is a MarkovChain, a chain whose steps depend on each other; the sampled steps draw independent categorical assignments (the exact step smooths the whole chain instead)",
}
STREAMING = 'yes'  # fit_svi from an rt.ItemSource (data on disk)
ITEM_DIMS = ('S', 'T')  # sizes set by the items bound
ROLES = {  # the state's arrays by what they hold (executors, checkpoints)
    'data': ('n_K', 'steps_ptr', 'x', 'steps_weight', 'n_V'), 'hyper': ('alpha', 'eta'),
    'known': ('lgamma_sum_alpha', 'lgamma_alpha', 'lgamma_sum_eta', 'lgamma_eta'),
    'global': ('lam_A_log', 'lam_phi_log', 'lam_pi0_log'),
    'global_exp': ('E_pi0_log', 'E_A_log', 'E_phi_log'), 'item': ('seed_category', 'item_weight'),
    'statistic': ('acc_z_0', 'acc_z_1', 'acc_x_0'),
    'thread': ('lam_z_onehot_threads', 'lam_z_first_threads', 'lam_z_pair_threads', 'E_z_onehot_threads', 'E_z_first_threads', 'E_z_pair_threads', 'H_z_threads', 'acc_z_0_threads', 'acc_z_1_threads', 'acc_x_0_threads'),
}
_THIS = rt.ModelView(globals())  # the model, as the drivers see it

SPEC = {
    "model": 'hmm',
    "dims": {
        'K': {"default": 4, "ragged_over": None},
        'V': {"default": None, "ragged_over": None},
        'S': {"default": None, "ragged_over": None},
        'T': {"default": None, "ragged_over": 'S'},
    },
    "plates": {
        'states': {"dim": 'K', "parent": None, "ragged": False},
        'seqs': {"dim": 'S', "parent": None, "ragged": False},
        'steps': {"dim": 'T', "parent": 'seqs', "ragged": True, "ordered": True},
    },
    "observed": {
        'x': {"plates": ['seqs', 'steps'], "support": 'category', "shape": [], "categories": 'V', "missing": 'no: x (hmm.cem:27:9) lies in the ragged plate steps, and missing entries are supported in dense arrays only'},
    },
    "covariates": {},
    "not_data": {'alpha': 'hyperparameter', 'eta': 'hyperparameter', 'pi0': 'latent', 'A': 'latent', 'phi': 'latent', 'z': 'latent'},
}


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def update_z(
        i_seqs,
        with_children,
        lam_z_onehot,
        lam_z_first,
        lam_z_pair,
        n_K,
        E_pi0_log,
        E_A_log,
        x,
        E_phi_log,
        steps_ptr,
        E_z_onehot,
        E_z_first,
        E_z_pair,
        H_z,
):
    """q(z[s, t]) = MarkovChain, exact by forward–backward over each sequence, with log-potentials
        emission_v = E[log phi[v]]_{x[s, t]}
        initial_v = E[log pi0]_v
        transition_vi = E[log A[v]]_i

    (hmm.cem:26:9)
    """
    base_steps = steps_ptr[i_seqs]
    for i_steps in range(steps_ptr[i_seqs], steps_ptr[i_seqs + 1]):
        lam_z_onehot[i_steps - base_steps] = 0.0
        lam_z_first[i_steps - base_steps] = 0.0
        lam_z_pair[i_steps - base_steps] = 0.0
        # from z ~ MarkovChain (hmm.cem:26:9)
        for t_k in range(n_K):
            lam_z_first[i_steps - base_steps, t_k] += E_pi0_log[0, t_k]
        # from z ~ MarkovChain (hmm.cem:26:9)
        for t_gj in range(n_K):
            for t_k in range(n_K):
                lam_z_pair[i_steps - base_steps, t_gj, t_k] += E_A_log[t_gj, t_k]
        if with_children:
            # from x ~ Categorical (hmm.cem:27:9)
            t_k = x[i_steps]
            for t_g0 in range(n_K):
                lam_z_onehot[i_steps - base_steps, t_g0] += E_phi_log[t_g0, t_k]
    # q(chain) ∝ exp(Σ_t emission_t[z_t] + initial[z_0] + Σ_t transition_t[z_t−1, z_t]): marginals, pairwise marginals and its entropy
    H_z[0] = rt.chain_posterior(lam_z_onehot, lam_z_first, lam_z_pair, E_z_onehot, E_z_first, E_z_pair, steps_ptr[i_seqs + 1] - steps_ptr[i_seqs])


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
        n_K,
        steps_ptr,
        E_pi0_log,
        E_A_log,
        x,
        E_phi_log,
        item_weight,
        steps_weight,
        evaluate,
        lam_z_onehot_threads,
        lam_z_first_threads,
        lam_z_pair_threads,
        E_z_onehot_threads,
        E_z_first_threads,
        E_z_pair_threads,
        H_z_threads,
        acc_z_0_threads,
        acc_z_1_threads,
        acc_x_0_threads,
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
        lam_z_onehot = lam_z_onehot_threads[thread]
        lam_z_first = lam_z_first_threads[thread]
        lam_z_pair = lam_z_pair_threads[thread]
        E_z_onehot = E_z_onehot_threads[thread]
        E_z_first = E_z_first_threads[thread]
        E_z_pair = E_z_pair_threads[thread]
        H_z = H_z_threads[thread]
        acc_z_0_t = acc_z_0_threads[thread]
        acc_z_1_t = acc_z_1_threads[thread]
        acc_x_0_t = acc_x_0_threads[thread]
        elbo = 0.0
        stop_position = (thread + 1) * items.shape[0] // n_threads
        for position in range(thread * items.shape[0] // n_threads, stop_position):
            i_seqs = items[position]
            # the next item's memory, asked for while this one computes
            if position + 1 < stop_position and items[position + 1] != i_seqs + 1:
                rt.prefetch_row(item_weight, items[position + 1])
                rt.prefetch_rows(x, steps_ptr[items[position + 1]], steps_ptr[items[position + 1] + 1])
                rt.prefetch_rows(steps_weight, steps_ptr[items[position + 1]], steps_ptr[items[position + 1] + 1])
            if position + 2 < stop_position and items[position + 2] != i_seqs + 2:
                rt.prefetch_row(steps_ptr, items[position + 2])
            base_steps = steps_ptr[i_seqs]
            if seeding:  # k-means++ seed steps: seed c in state c
                for i_steps in range(steps_ptr[i_seqs], steps_ptr[i_seqs + 1]):
                    E_z_onehot[i_steps - base_steps] = 0.0
                    E_z_first[i_steps - base_steps] = 0.0
                    E_z_pair[i_steps - base_steps] = 0.0
                    if 0 <= seed_category[i_steps] < n_K:
                        E_z_onehot[i_steps - base_steps, seed_category[i_steps]] = 1.0
                H_z[0] = 0.0  # the seeding pass is not part of the ELBO
            else:
                update_z(i_seqs, True, lam_z_onehot, lam_z_first, lam_z_pair, n_K, E_pi0_log, E_A_log, x, E_phi_log, steps_ptr, E_z_onehot, E_z_first, E_z_pair, H_z)
            # acc_z_0[k] += q(first z[seqs, steps]=k)  (hmm.cem:26:9)
            for i_steps in range(steps_ptr[i_seqs], steps_ptr[i_seqs + 1]):
                for t_k in range(n_K):
                    acc_z_0_t[t_k] += item_weight[i_seqs] * E_z_first[i_steps - base_steps, t_k] * steps_weight[i_steps]
            # acc_z_1[gj, k] += q(previous z[seqs, steps]=gj, z[seqs, steps]=k)  (hmm.cem:26:9)
            for i_steps in range(steps_ptr[i_seqs], steps_ptr[i_seqs + 1]):
                for t_gj in range(n_K):
                    for t_k in range(n_K):
                        acc_z_1_t[t_gj, t_k] += item_weight[i_seqs] * E_z_pair[i_steps - base_steps, t_gj, t_k] * steps_weight[i_steps]
            # acc_x_0[k, g0] += onehot(x[seqs, steps]) · q(z[seqs, steps]=g0)  (hmm.cem:27:9)
            for i_steps in range(steps_ptr[i_seqs], steps_ptr[i_seqs + 1]):
                t_k = x[i_steps]
                for t_g0 in range(n_K):
                    acc_x_0_t[t_k, t_g0] += item_weight[i_seqs] * E_z_onehot[i_steps - base_steps, t_g0] * steps_weight[i_steps]
            # ELBO: local terms and local entropies (a stochastic step has no use for them)
            if evaluate:
                elbo += H_z[0]
        shares_total += elbo  # summed in share order, as rt.run_shares sums
    return shares_total


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def update_A(data_scale, lam_A_log, n_K, alpha, acc_z_1, expect, E_A_log):
    """q(A[k]) = Dirichlet(α)
        α_v = alpha + Σ_{s,t} q(z[s, t − 1] = k, z[s, t] = v)

    (hmm.cem:21:5)
    """
    for i_states in range(n_K):
        lam_A_log[i_states] = 0.0
        # from A ~ Dirichlet (hmm.cem:21:5)
        for t_k in range(n_K):
            lam_A_log[i_states, t_k] += alpha
        # from A ~ Dirichlet (hmm.cem:21:5)
        for t_k in range(n_K):
            lam_A_log[i_states, t_k] += -1.0
        # from z ~ MarkovChain (hmm.cem:26:9)
        for t_k in range(n_K):
            lam_A_log[i_states, t_k] += data_scale * acc_z_1[i_states, t_k]
        if expect:  # a stochastic step mixes λ first (λ̂ may be invalid)
            rt.dirichlet_expected_stats(lam_A_log[i_states], E_A_log[i_states])


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def update_phi(data_scale, lam_phi_log, n_V, eta, acc_x_0, expect, E_phi_log, n_K):
    """q(phi[k]) = Dirichlet(α)
        α_v = eta + Σ_{s,t} [x[s, t] = v]·q(z[s, t] = k)

    (hmm.cem:22:5)
    """
    for i_states in range(n_K):
        lam_phi_log[i_states] = 0.0
        # from phi ~ Dirichlet (hmm.cem:22:5)
        for t_k in range(n_V):
            lam_phi_log[i_states, t_k] += eta
        # from phi ~ Dirichlet (hmm.cem:22:5)
        for t_k in range(n_V):
            lam_phi_log[i_states, t_k] += -1.0
        # from x ~ Categorical (hmm.cem:27:9)
        for t_k in range(n_V):
            lam_phi_log[i_states, t_k] += data_scale * acc_x_0[t_k, i_states]
        if expect:  # a stochastic step mixes λ first (λ̂ may be invalid)
            rt.dirichlet_expected_stats(lam_phi_log[i_states], E_phi_log[i_states])


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def update_pi0(data_scale, lam_pi0_log, n_K, alpha, acc_z_0, expect, E_pi0_log):
    """q(pi0) = Dirichlet(α)
        α_v = alpha + Σ_{s,t} [first step]·q(z[s, t] = v)

    (hmm.cem:19:1)
    """
    lam_pi0_log[0] = 0.0
    # from pi0 ~ Dirichlet (hmm.cem:19:1)
    for t_k in range(n_K):
        lam_pi0_log[0, t_k] += alpha
    # from pi0 ~ Dirichlet (hmm.cem:19:1)
    for t_k in range(n_K):
        lam_pi0_log[0, t_k] += -1.0
    # from z ~ MarkovChain (hmm.cem:26:9)
    for t_k in range(n_K):
        lam_pi0_log[0, t_k] += data_scale * acc_z_0[t_k]
    if expect:  # a stochastic step mixes λ first (λ̂ may be invalid)
        rt.dirichlet_expected_stats(lam_pi0_log[0], E_pi0_log[0])


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def refresh_globals(lam_A_log, E_A_log, n_K, lam_phi_log, E_phi_log, lam_pi0_log, E_pi0_log):
    """Expected statistics of the globals from their natural parameters."""
    for i_states in range(n_K):
        rt.dirichlet_expected_stats(lam_A_log[i_states], E_A_log[i_states])
    for i_states in range(n_K):
        rt.dirichlet_expected_stats(lam_phi_log[i_states], E_phi_log[i_states])
    rt.dirichlet_expected_stats(lam_pi0_log[0], E_pi0_log[0])


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def refresh_eager_globals(lam_A_log, E_A_log, n_K, lam_pi0_log, E_pi0_log):
    """Expected statistics of A, pi0 from their natural parameters (a lazy SVI step moves the others by columns)."""
    for i_states in range(n_K):
        rt.dirichlet_expected_stats(lam_A_log[i_states], E_A_log[i_states])
    rt.dirichlet_expected_stats(lam_pi0_log[0], E_pi0_log[0])


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def elbo_global(
        n_K,
        alpha,
        E_pi0_log,
        lgamma_sum_alpha,
        lgamma_alpha,
        E_A_log,
        n_V,
        eta,
        E_phi_log,
        lgamma_sum_eta,
        lgamma_eta,
        acc_z_0,
        acc_z_1,
        acc_x_0,
        lam_A_log,
        lam_phi_log,
        lam_pi0_log,
):
    """ELBO terms of the global factors (see elbo_terms in the README)."""
    elbo = 0.0
    # E[log p(pi0 | ...)]  (hmm.cem:19:1)
    for t_k in range(n_K):
        elbo += alpha * E_pi0_log[0, t_k]
    for t_k in range(n_K):
        elbo += -E_pi0_log[0, t_k]
    elbo += lgamma_sum_alpha
    for t_k in range(n_K):
        elbo += -lgamma_alpha
    # E[log p(A | ...)]  (hmm.cem:21:5)
    for i_states in range(n_K):
        for t_k in range(n_K):
            elbo += alpha * E_A_log[i_states, t_k]
    for i_states in range(n_K):
        for t_k in range(n_K):
            elbo += -E_A_log[i_states, t_k]
    for i_states in range(n_K):
        elbo += lgamma_sum_alpha
    for i_states in range(n_K):
        for t_k in range(n_K):
            elbo += -lgamma_alpha
    # E[log p(phi | ...)]  (hmm.cem:22:5)
    for i_states in range(n_K):
        for t_k in range(n_V):
            elbo += eta * E_phi_log[i_states, t_k]
    for i_states in range(n_K):
        for t_k in range(n_V):
            elbo += -E_phi_log[i_states, t_k]
    for i_states in range(n_K):
        elbo += lgamma_sum_eta
    for i_states in range(n_K):
        for t_k in range(n_V):
            elbo += -lgamma_eta
    # E[log p(z | ...)]  (hmm.cem:26:9)
    for t_k in range(n_K):
        elbo += acc_z_0[t_k] * E_pi0_log[0, t_k]
    for t_gj in range(n_K):
        for t_k in range(n_K):
            elbo += acc_z_1[t_gj, t_k] * E_A_log[t_gj, t_k]
    # E[log p(x | ...)]  (hmm.cem:27:9)
    for t_g0 in range(n_K):
        for t_k in range(n_V):
            elbo += acc_x_0[t_k, t_g0] * E_phi_log[t_g0, t_k]
    # entropy of q(A)
    for i_states in range(n_K):
        elbo += rt.dirichlet_log_normalizer(lam_A_log[i_states]) - rt.frobenius(lam_A_log[i_states], E_A_log[i_states])
    # entropy of q(phi)
    for i_states in range(n_K):
        elbo += rt.dirichlet_log_normalizer(lam_phi_log[i_states]) - rt.frobenius(lam_phi_log[i_states], E_phi_log[i_states])
    # entropy of q(pi0)
    elbo += rt.dirichlet_log_normalizer(lam_pi0_log[0]) - rt.frobenius(lam_pi0_log[0], E_pi0_log[0])
    return elbo


def _prepare(data, hypers, dims, seed, init, start, max_local_iter, local_tol, share=None):
    """Bind and check the data, evaluate hyperparameters and knowns, allocate the arrays, start the globals.
    share: out of core, the fit's state, whose globals, hyperparameters and statistics `data`'s minibatch shares.
    """
    hypers = rt.check_hyper_names(hypers, ['alpha', 'eta'])
    bound = rt.bind_data(SPEC, data, dims, missing=True)
    n_K, n_V, n_S = bound.dims['K'], bound.dims['V'], bound.dims['S']
    # refuse before allocating more than the machine's memory
    rt.check_memory(bound, {('K', 'K'): 3, ('K', 'V'): 2, (1, 'K'): 2, ('max(steps)', 'K'): 4, ('max(steps)', 'K', 'K'): 2, ('K',): 1, ('threads', 'K'): 1, ('threads', 'K', 'K'): 1, ('V', 'K'): 1, ('threads', 'V', 'K'): 1, ('S',): 3})
    steps_ptr, steps_weight, x = bound.arrays['steps_ptr'], bound.arrays['steps_weight'], bound.arrays['x']
    # hyperparameters (defaults from the model file; out of core the fit's current values)
    alpha = rt.hyper_value(hypers, 'alpha', 1.0, (), domain='shape') if share is None else share.alpha
    eta = rt.hyper_value(hypers, 'eta', 0.5, (), domain='shape') if share is None else share.eta
    # known quantities: functions of hyperparameters and data
    lgamma_sum_alpha = rt.gammaln(n_K * alpha)  # lgamma_sum(repeat(alpha, K))
    lgamma_alpha = rt.gammaln(alpha)  # lgamma(repeat(alpha, K))
    lgamma_sum_eta = rt.gammaln(n_V * eta)  # lgamma_sum(repeat(eta, V))
    lgamma_eta = rt.gammaln(eta)  # lgamma(repeat(eta, V))
    # variational parameters (natural, coefficient form) and E[t]
    lam_A_log, E_A_log = (np.zeros((n_K, n_K)), np.zeros((n_K, n_K))) if share is None else (share.lam_A_log, share.E_A_log)
    lam_phi_log, E_phi_log = (np.zeros((n_K, n_V)), np.zeros((n_K, n_V))) if share is None else (share.lam_phi_log, share.E_phi_log)
    lam_pi0_log, E_pi0_log = (np.zeros((1, n_K)), np.zeros((1, n_K))) if share is None else (share.lam_pi0_log, share.E_pi0_log)
    lam_z_onehot, E_z_onehot = np.zeros((rt.max_length(steps_ptr), n_K)), np.zeros((rt.max_length(steps_ptr), n_K))
    lam_z_first, E_z_first = np.zeros((rt.max_length(steps_ptr), n_K)), np.zeros((rt.max_length(steps_ptr), n_K))
    lam_z_pair, E_z_pair = np.zeros((rt.max_length(steps_ptr), n_K, n_K)), np.zeros((rt.max_length(steps_ptr), n_K, n_K))
    H_z = np.zeros(1)  # entropy of the current item's chains q(z)
    # sufficient statistics the local step hands to the global step (out of core added up over minibatches)
    acc_z_0 = np.zeros((n_K,)) if share is None else share.acc_z_0
    acc_z_1 = np.zeros((n_K, n_K)) if share is None else share.acc_z_1
    acc_x_0 = np.zeros((n_V, n_K)) if share is None else share.acc_x_0
    # the local step's shares: one per thread, fewer for small data
    n_threads = rt.share_count(bound)
    lam_z_onehot_threads, lam_z_first_threads, lam_z_pair_threads, E_z_onehot_threads, E_z_first_threads, E_z_pair_threads, H_z_threads = rt.per_thread(n_threads, lam_z_onehot, lam_z_first, lam_z_pair, E_z_onehot, E_z_first, E_z_pair, H_z)
    acc_z_0_threads = rt.thread_copies(n_threads, acc_z_0) if share is None else share.acc_z_0_threads
    acc_z_1_threads = rt.thread_copies(n_threads, acc_z_1) if share is None else share.acc_z_1_threads
    acc_x_0_threads = rt.thread_copies(n_threads, acc_x_0) if share is None else share.acc_x_0_threads
    all_items = np.arange(n_S)  # the local step runs over these
    item_weight = np.ones(n_S)  # each item's weight in the statistics (SVI+ perturbs it)
    # a state per step of the chain, −1: none
    seed_category = rt.no_seed_steps(SPEC, bound.arrays, ('seqs', 'steps'))
    if share is not None:  # out of core: a minibatch's state, sharing the fit's
        return rt.State(bound=bound, alpha=alpha, eta=eta, seed_category=seed_category, n_K=n_K, steps_ptr=steps_ptr, E_pi0_log=E_pi0_log, E_A_log=E_A_log, x=x, E_phi_log=E_phi_log, item_weight=item_weight, steps_weight=steps_weight, lam_z_onehot_threads=lam_z_onehot_threads, lam_z_first_threads=lam_z_first_threads, lam_z_pair_threads=lam_z_pair_threads, E_z_onehot_threads=E_z_onehot_threads, E_z_first_threads=E_z_first_threads, E_z_pair_threads=E_z_pair_threads, H_z_threads=H_z_threads, acc_z_0_threads=acc_z_0_threads, acc_z_1_threads=acc_z_1_threads, acc_x_0_threads=acc_x_0_threads, acc_z_0=acc_z_0, acc_z_1=acc_z_1, acc_x_0=acc_x_0, lam_A_log=lam_A_log, lam_phi_log=lam_phi_log, lam_pi0_log=lam_pi0_log, lgamma_sum_alpha=lgamma_sum_alpha, lgamma_alpha=lgamma_alpha, n_V=n_V, lgamma_sum_eta=lgamma_sum_eta, lgamma_eta=lgamma_eta, all_items=all_items)
    # start every global at its prior
    update_A(0.0, lam_A_log, n_K, alpha, acc_z_1, True, E_A_log)
    update_phi(0.0, lam_phi_log, n_V, eta, acc_x_0, True, E_phi_log, n_K)
    update_pi0(0.0, lam_pi0_log, n_K, alpha, acc_z_0, True, E_pi0_log)
    if init is not None:  # warm start: the globals' natural parameters from an earlier fit
        rt.load_state(init, {'lam_A_log': lam_A_log, 'lam_phi_log': lam_phi_log, 'lam_pi0_log': lam_pi0_log})
        refresh_globals(lam_A_log, E_A_log, n_K, lam_phi_log, E_phi_log, lam_pi0_log, E_pi0_log)
    start = DEFAULT_START if start is None else start
    if init is None and start == 'seeds':
        # start from k-means++ seed steps (see cemodel.runtime.seeding); not part of the ELBO trace
        seed_category = rt.seed_chain_steps(SPEC, bound.arrays, ('seqs', 'steps'), n_K, seed)
        acc_z_0[...] = 0.0
        acc_z_1[...] = 0.0
        acc_x_0[...] = 0.0
        rt.run_shares(local_step, lam_z_onehot_threads.shape[0], (True, all_items, seed_category, max_local_iter, local_tol, n_K, steps_ptr, E_pi0_log, E_A_log, x, E_phi_log, item_weight, np.where(seed_category >= 0, bound.arrays['steps_weight'], 0.0), False, lam_z_onehot_threads, lam_z_first_threads, lam_z_pair_threads, E_z_onehot_threads, E_z_first_threads, E_z_pair_threads, H_z_threads, acc_z_0_threads, acc_z_1_threads, acc_x_0_threads,), ((acc_z_0, acc_z_0_threads), (acc_z_1, acc_z_1_threads), (acc_x_0, acc_x_0_threads),))
        update_A(1.0, lam_A_log, n_K, alpha, acc_z_1, True, E_A_log)
        update_phi(1.0, lam_phi_log, n_V, eta, acc_x_0, True, E_phi_log, n_K)
        update_pi0(1.0, lam_pi0_log, n_K, alpha, acc_z_0, True, E_pi0_log)
    elif init is None and start == 'random':
        # start from random pseudo-counts on the count-type globals (Hoffman et al. 2010)
        rng = np.random.default_rng(seed)
        lam_A_log += rng.exponential(1.0, lam_A_log.shape)
        lam_phi_log += rng.exponential(1.0, lam_phi_log.shape)
        lam_pi0_log += rng.exponential(1.0, lam_pi0_log.shape)
        refresh_globals(lam_A_log, E_A_log, n_K, lam_phi_log, E_phi_log, lam_pi0_log, E_pi0_log)
    elif init is None and start == 'prior':
        raise rt.CemDataError("start: expected 'seeds' or 'random', found 'prior' (from the prior the components start alike and stay alike)")
    elif init is None:
        raise rt.CemDataError(f"start: expected 'seeds' or 'random', found {start!r}")
    return rt.State(bound=bound, alpha=alpha, eta=eta, seed_category=seed_category, n_K=n_K, steps_ptr=steps_ptr, E_pi0_log=E_pi0_log, E_A_log=E_A_log, x=x, E_phi_log=E_phi_log, item_weight=item_weight, steps_weight=steps_weight, lam_z_onehot_threads=lam_z_onehot_threads, lam_z_first_threads=lam_z_first_threads, lam_z_pair_threads=lam_z_pair_threads, E_z_onehot_threads=E_z_onehot_threads, E_z_first_threads=E_z_first_threads, E_z_pair_threads=E_z_pair_threads, H_z_threads=H_z_threads, acc_z_0_threads=acc_z_0_threads, acc_z_1_threads=acc_z_1_threads, acc_x_0_threads=acc_x_0_threads, acc_z_0=acc_z_0, acc_z_1=acc_z_1, acc_x_0=acc_x_0, lam_A_log=lam_A_log, lam_phi_log=lam_phi_log, lam_pi0_log=lam_pi0_log, lgamma_sum_alpha=lgamma_sum_alpha, lgamma_alpha=lgamma_alpha, n_V=n_V, lgamma_sum_eta=lgamma_sum_eta, lgamma_eta=lgamma_eta, all_items=all_items)


def _learn(s, learn, rho=1.0, items=slice(None)):
    """Empirical Bayes (Minka 2000): each learned hyperparameter a step rho towards its ELBO maximiser given q."""
    if 'eta' in learn:  # the prior of phi
        s.eta = (1.0 - rho) * s.eta + rho * rt.learn_symmetric_dirichlet(s.eta, s.E_phi_log)
    # known quantities that depend on hyperparameters
    s.lgamma_sum_eta = rt.gammaln(s.n_V * s.eta)
    s.lgamma_eta = rt.gammaln(s.eta)


def _result(s, trace, converged, seconds, items=True):
    """The posterior in usual parameters, expectations and the state."""
    posterior = {}
    state = {'lam_A_log': s.lam_A_log, 'lam_phi_log': s.lam_phi_log, 'lam_pi0_log': s.lam_pi0_log}
    A__alpha = rt.dirichlet_params(s.lam_A_log)
    posterior['A.alpha'] = A__alpha
    posterior['E[log A]'] = s.E_A_log
    phi__alpha = rt.dirichlet_params(s.lam_phi_log)
    posterior['phi.alpha'] = phi__alpha
    posterior['E[log phi]'] = s.E_phi_log
    pi0__alpha = rt.dirichlet_params(s.lam_pi0_log)
    posterior['pi0.alpha'] = pi0__alpha[0]
    posterior['E[log pi0]'] = s.E_pi0_log[0]
    return rt.FitResult(posterior=posterior, elbo=np.array(trace), iterations=len(trace), converged=converged, seconds=seconds, dims=dict(s.bound.dims), hypers={'alpha': s.alpha, 'eta': s.eta}, state=state)


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
    return rt.run_shares(local_step, s.lam_z_onehot_threads.shape[0], (seeding, items, s.seed_category, max_local_iter, local_tol, s.n_K, s.steps_ptr, s.E_pi0_log, s.E_A_log, s.x, s.E_phi_log, s.item_weight, s.steps_weight, evaluate, s.lam_z_onehot_threads, s.lam_z_first_threads, s.lam_z_pair_threads, s.E_z_onehot_threads, s.E_z_first_threads, s.E_z_pair_threads, s.H_z_threads, s.acc_z_0_threads, s.acc_z_1_threads, s.acc_x_0_threads,), ((s.acc_z_0, s.acc_z_0_threads), (s.acc_z_1, s.acc_z_1_threads), (s.acc_x_0, s.acc_x_0_threads),))


def _update_A(s, data_scale, expect=True):
    update_A(data_scale, s.lam_A_log, s.n_K, s.alpha, s.acc_z_1, expect, s.E_A_log)


def _update_phi(s, data_scale, expect=True):
    update_phi(data_scale, s.lam_phi_log, s.n_V, s.eta, s.acc_x_0, expect, s.E_phi_log, s.n_K)


def _update_pi0(s, data_scale, expect=True):
    update_pi0(data_scale, s.lam_pi0_log, s.n_K, s.alpha, s.acc_z_0, expect, s.E_pi0_log)


def refresh(s):
    refresh_globals(s.lam_A_log, s.E_A_log, s.n_K, s.lam_phi_log, s.E_phi_log, s.lam_pi0_log, s.E_pi0_log)


def refresh_eager(s):
    refresh_eager_globals(s.lam_A_log, s.E_A_log, s.n_K, s.lam_pi0_log, s.E_pi0_log)


def elbo_of_globals(s):
    return elbo_global(s.n_K, s.alpha, s.E_pi0_log, s.lgamma_sum_alpha, s.lgamma_alpha, s.E_A_log, s.n_V, s.eta, s.E_phi_log, s.lgamma_sum_eta, s.lgamma_eta, s.acc_z_0, s.acc_z_1, s.acc_x_0, s.lam_A_log, s.lam_phi_log, s.lam_pi0_log)


GLOBALS = (  # the globals as the stochastic drivers move them
    rt.Global('A', 'dirichlet', lam=('lam_A_log',), E=('E_A_log',),
              update=_update_A, aux_draws=1, after_sample=None),
    rt.Global('phi', 'dirichlet', lam=('lam_phi_log',), E=('E_phi_log',),
              update=_update_phi, aux_draws=1, after_sample=None,
              lazy=rt.LazyColumns('n_V', 'x', 'steps_ptr', (('acc_x_0', 0),), None, None, expected=True, alone=True, direct=True)),
    rt.Global('pi0', 'dirichlet', lam=('lam_pi0_log',), E=('E_pi0_log',),
              update=_update_pi0, aux_draws=1, after_sample=None),
)


def fit(data, **options):
    """Batch mean-field VB (options: cemodel.runtime.drivers.mf.fit). One iteration:
        statistics ← 0; elbo = run_local_step(s, s.all_items, ...)  # E-step
        _update_A(s, 1.0)  # q(A)
        _update_phi(s, 1.0)  # q(phi)
        _update_pi0(s, 1.0)  # q(pi0)
        elbo += elbo_of_globals(s)
    """
    return rt.drivers.mf.fit(_THIS, data, **options)


def fit_svi(data, **options):
    """SVI, SVI+ (options: cemodel.runtime.drivers.svi.fit). One step on a minibatch S:
        statistics ← 0; run_local_step(s, S, ...)
        _update_A(s, N / len(S), expect=False)  # λ̂ of q(A)
        _update_phi(s, N / len(S), expect=False)  # λ̂ of q(phi)
        _update_pi0(s, N / len(S), expect=False)  # λ̂ of q(pi0)
        λ ← (1 − ρ)λ + ρλ̂ (rt.blend); refresh(s)
    """
    return rt.drivers.svi.fit(_THIS, data, **options)


def fit_ssvi_a(data, **options):
    """SSVI-A (Hoffman & Blei 2015, eq. 10): fit_svi with the local step given a draw β ~ q(β)."""
    return rt.drivers.svi.fit(_THIS, data, sample_globals=True, **options)


def fit_ssvi(data, **options):
    """SSVI (Hoffman & Blei 2015, eq. 7): fit_ssvi_a with λ̂ = η + V(β, λ)·N/|S| Σ η̂_n(β)."""
    return rt.drivers.svi.fit(_THIS, data, sample_globals=True, apply_v=True, **options)
