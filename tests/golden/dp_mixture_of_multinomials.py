"""dp_mixture_of_multinomials: the model (kernels, data layout, start) for cemodel.runtime.drivers, by cemodel 0.1.0.

Model file: dp_mixture_of_multinomials.cem (sha256 c94f2cd54fd01f58)
Regenerate with `cemodel compile dp_mixture_of_multinomials.cem`; do not edit by hand.

Natural parameters are in coefficient form: q(x) ∝ exp(Σ_s lam_s · t_s(x)).
E_<var>_<stat> holds E_q[t_s]; acc_* hold sums over the data plate.
"""

import numpy as np
from numba import njit

from cemodel import runtime as rt

SOURCE = 'dp_mixture_of_multinomials.cem'
SOURCE_SHA256 = 'c94f2cd54fd01f589e9e3882ba1767f57c302d9691192597b9177eafdced12fe'
DEFAULT_START = 'seeds'  # k-means++ seed items for the categorical locals
LEARNABLE = ('eta', 'alpha')  # hyperparameters empirical Bayes can set (fit(..., learn=...))
DATA_PLATE = 'docs'  # the plate the local step runs over
# the global steps (fit, fit_svi, ..., fit_klc) and whether each applies
METHODS = {
    'mf': 'yes',
    'svi': 'yes',
    'svi+': 'yes',
    'svi-avg': 'yes',
    'ssvi-a': 'yes',
    'ssvi': 'yes',
    'klc': 'yes: collapses pi_sticks, phi, parameterises c',
}
# the E-steps (fit_svi(..., local=...)) and whether each applies
LOCAL_STEPS = {
    'mf': 'yes: local mean field',
    'exact': 'yes: given the globals each local depends only on data, so the local update is its exact conditional p(z_n | y_n, β)',
    'gibbs': 'yes: samples c',
    'cvb0': 'yes: updates q(c), zero-order collapsed VB',
}
STREAMING = 'yes'  # fit_svi from an rt.ItemSource (data on disk)
ITEM_DIMS = ('D', 'N')  # sizes set by the items bound
KLC_LOCALS = ('c',)  # KLC-CG's parameterised Z
KLC_START = 'seeds'  # θ's default start: q(Z) after the seeded start's local step
ROLES = {  # the state's arrays by what they hold (executors, checkpoints)
    'data': ('n_K', 'tokens_ptr', 'w', 'tokens_weight', 'n_V'), 'hyper': ('alpha', 'eta'),
    'known': ('stick_keep_K', 'stick_below_K', 'lbeta_c_alpha', 'lgamma_sum_eta', 'lgamma_eta'),
    'global': ('lam_phi_log', 'lam_pi_sticks_log', 'lam_pi_sticks_log1m'),
    'global_exp': ('E_pi_sticks_log', 'E_pi_sticks_log1m', 'E_phi_log'),
    'kept_local': ('E_c_onehot', 'lam_c_onehot'), 'item': ('seed_category', 'item_weight'),
    'statistic': ('acc_c_0', 'acc_c_1', 'acc_w_0'),
    'thread': ('acc_c_0_threads', 'acc_c_1_threads', 'acc_w_0_threads'),
}
_THIS = rt.ModelView(globals())  # the model, as the drivers see it

SPEC = {
    "model": 'dp_mixture_of_multinomials',
    "dims": {
        'K': {"default": 20, "ragged_over": None},
        'V': {"default": None, "ragged_over": None},
        'D': {"default": None, "ragged_over": None},
        'N': {"default": None, "ragged_over": 'D'},
    },
    "plates": {
        'classes': {"dim": 'K', "parent": None, "ragged": False},
        'docs': {"dim": 'D', "parent": None, "ragged": False},
        'tokens': {"dim": 'N', "parent": 'docs', "ragged": True},
        'sticks_pi': {"dim": 'K', "parent": None, "ragged": False},
    },
    "observed": {
        'w': {"plates": ['docs', 'tokens'], "support": 'category', "shape": [], "categories": 'V', "missing": 'no: w (dp_mixture_of_multinomials.cem:28:9) lies in the ragged plate tokens, and missing entries are supported in dense arrays only'},
    },
    "covariates": {},
    "not_data": {'alpha': 'hyperparameter', 'eta': 'hyperparameter', 'phi': 'latent', 'c': 'latent'},
}


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def update_c(
        i_docs,
        with_children,
        lam_c_onehot,
        n_K,
        stick_keep_K,
        E_pi_sticks_log,
        stick_below_K,
        E_pi_sticks_log1m,
        tokens_ptr,
        w,
        E_phi_log,
        tokens_weight,
        E_c_onehot,
):
    """q(c[d]) = Categorical
        log q(c[d] = v) = [v < K]·E[log pi_sticks[v]] + Σ_{i} [i < v]·E[log(1 − pi_sticks[i])] + Σ_{n} E[log phi[v]]_{w[d, n]} + const

    (dp_mixture_of_multinomials.cem:26:5)
    """
    lam_c_onehot[i_docs] = 0.0
    # from c ~ Categorical (dp_mixture_of_multinomials.cem:26:5)
    for t_k in range(n_K):
        lam_c_onehot[i_docs, t_k] += stick_keep_K[t_k] * E_pi_sticks_log[t_k]
    # from c ~ Categorical (dp_mixture_of_multinomials.cem:26:5)
    for t_k in range(n_K):
        partial_sum = 0.0
        for t_i0 in range(n_K):
            partial_sum += stick_below_K[t_k, t_i0] * E_pi_sticks_log1m[t_i0]
        lam_c_onehot[i_docs, t_k] += partial_sum
    if with_children:
        # from w ~ Categorical (dp_mixture_of_multinomials.cem:28:9)
        for i_tokens in range(tokens_ptr[i_docs], tokens_ptr[i_docs + 1]):
            t_k = w[i_tokens]
            for t_g0 in range(n_K):
                lam_c_onehot[i_docs, t_g0] += E_phi_log[t_g0, t_k] * tokens_weight[i_tokens]
    rt.categorical_expected_stats(lam_c_onehot[i_docs], E_c_onehot[i_docs])


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
        E_c_onehot,
        n_K,
        lam_c_onehot,
        stick_keep_K,
        E_pi_sticks_log,
        stick_below_K,
        E_pi_sticks_log1m,
        tokens_ptr,
        w,
        E_phi_log,
        tokens_weight,
        item_weight,
        evaluate,
        acc_c_0_threads,
        acc_c_1_threads,
        acc_w_0_threads,
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
        acc_c_0_t = acc_c_0_threads[thread]
        acc_c_1_t = acc_c_1_threads[thread]
        acc_w_0_t = acc_w_0_threads[thread]
        elbo = 0.0
        stop_position = (thread + 1) * items.shape[0] // n_threads
        for position in range(thread * items.shape[0] // n_threads, stop_position):
            i_docs = items[position]
            # the next item's memory, asked for while this one computes
            if position + 1 < stop_position and items[position + 1] != i_docs + 1:
                rt.prefetch_row(item_weight, items[position + 1])
                rt.prefetch_row(lam_c_onehot, items[position + 1])
                rt.prefetch_row(E_c_onehot, items[position + 1])
                rt.prefetch_rows(w, tokens_ptr[items[position + 1]], tokens_ptr[items[position + 1] + 1])
                rt.prefetch_rows(tokens_weight, tokens_ptr[items[position + 1]], tokens_ptr[items[position + 1] + 1])
            if position + 2 < stop_position and items[position + 2] != i_docs + 2:
                rt.prefetch_row(tokens_ptr, items[position + 2])
            if seeding:  # k-means++ seed items: seed c is all category c
                E_c_onehot[i_docs] = 0.0
                if 0 <= seed_category[i_docs] < n_K:
                    E_c_onehot[i_docs, seed_category[i_docs]] = 1.0
            else:
                update_c(i_docs, True, lam_c_onehot, n_K, stick_keep_K, E_pi_sticks_log, stick_below_K, E_pi_sticks_log1m, tokens_ptr, w, E_phi_log, tokens_weight, E_c_onehot)
            # acc_c_0[k] += q(c[docs]=k) · stick_keep(K)  (dp_mixture_of_multinomials.cem:26:5)
            for t_k in range(n_K):
                acc_c_0_t[t_k] += item_weight[i_docs] * E_c_onehot[i_docs, t_k] * stick_keep_K[t_k]
            # acc_c_1[i0] += q(c[docs]=k) · stick_below(K)  (dp_mixture_of_multinomials.cem:26:5)
            for t_k in range(n_K):
                for t_i0 in range(n_K):
                    acc_c_1_t[t_i0] += item_weight[i_docs] * E_c_onehot[i_docs, t_k] * stick_below_K[t_k, t_i0]
            # acc_w_0[k, g0] += onehot(w[docs, tokens]) · q(c[docs]=g0)  (dp_mixture_of_multinomials.cem:28:9)
            for i_tokens in range(tokens_ptr[i_docs], tokens_ptr[i_docs + 1]):
                t_k = w[i_tokens]
                for t_g0 in range(n_K):
                    acc_w_0_t[t_k, t_g0] += item_weight[i_docs] * E_c_onehot[i_docs, t_g0] * tokens_weight[i_tokens]
            # ELBO: local terms and local entropies (a stochastic step has no use for them)
            if evaluate:
                elbo += (rt.categorical_entropy(E_c_onehot[i_docs]))
        shares_total += elbo  # summed in share order, as rt.run_shares sums
    return shares_total


@njit(cache=True, nogil=True, error_model="numpy")
def evidence_c(
        i_docs,
        lam_c_onehot,
        n_K,
        stick_keep_K,
        E_pi_sticks_log,
        stick_below_K,
        E_pi_sticks_log1m,
        tokens_ptr,
        w,
        E_phi_log,
        tokens_weight,
):
    """lam_c_onehot[row, c] = exp(λ_c − max_c λ_c), λ the messages to c from data and globals
    (every message but the integrated-out proportions'): the part of its conditional that
    stays fixed during a Gibbs or CVB0 step.
    """
    lam_c_onehot[i_docs] = 0.0
    # from c ~ Categorical (dp_mixture_of_multinomials.cem:26:5)
    for t_k in range(n_K):
        lam_c_onehot[i_docs, t_k] += stick_keep_K[t_k] * E_pi_sticks_log[t_k]
    # from c ~ Categorical (dp_mixture_of_multinomials.cem:26:5)
    for t_k in range(n_K):
        partial_sum = 0.0
        for t_i0 in range(n_K):
            partial_sum += stick_below_K[t_k, t_i0] * E_pi_sticks_log1m[t_i0]
        lam_c_onehot[i_docs, t_k] += partial_sum
    # from w ~ Categorical (dp_mixture_of_multinomials.cem:28:9)
    for i_tokens in range(tokens_ptr[i_docs], tokens_ptr[i_docs + 1]):
        t_k = w[i_tokens]
        for t_g0 in range(n_K):
            lam_c_onehot[i_docs, t_g0] += E_phi_log[t_g0, t_k] * tokens_weight[i_tokens]
    top = lam_c_onehot[i_docs].max()
    for t_c in range(n_K):
        lam_c_onehot[i_docs, t_c] = np.exp(lam_c_onehot[i_docs, t_c] - top)


@njit(cache=True, nogil=True, error_model="numpy")
def local_step_gibbs(
        items,
        sweeps,
        burn_in,
        lam_c_onehot,
        n_K,
        stick_keep_K,
        E_pi_sticks_log,
        stick_below_K,
        E_pi_sticks_log1m,
        tokens_ptr,
        w,
        E_phi_log,
        tokens_weight,
        E_c_onehot,
        item_weight,
        acc_c_0,
        acc_c_1,
        acc_w_0,
):
    """Gibbs local step: each item's assignments sampled from their conditionals with no proportions integrated out,
    `sweeps` sweeps, q(z) = the one-hot counts averaged over the sweeps after burn_in (Mimno et al. 2012).

        p(z_i = c | z_¬i, y, β) ∝ · exp(Σ_children log p(y | z_i = c, β))_c

    Then the sufficient statistics, as local_step.
    """
    p_c = np.empty(n_K)
    assign_c = np.empty(64, np.int64)  # one assignment per token instance, grown as needed
    for position in range(items.shape[0]):
        i_docs = items[position]
        # the fixed part of the conditional
        evidence_c(i_docs, lam_c_onehot, n_K, stick_keep_K, E_pi_sticks_log, stick_below_K, E_pi_sticks_log1m, tokens_ptr, w, E_phi_log, tokens_weight)
        needed_c = 0
        needed_c += int(1.0 + 0.5)
        if needed_c > assign_c.shape[0]:
            assign_c = np.empty(2 * needed_c, np.int64)
        # start: each token drawn given the ones before it
        position_c = 0
        E_c_onehot[i_docs] = 0.0
        for j in range(int(1.0 + 0.5)):
            total = 0.0
            for t_c in range(n_K):
                p_c[t_c] = lam_c_onehot[i_docs, t_c]
                total += p_c[t_c]
            uniform = np.random.random() * total
            t_c = 0
            cumulative = p_c[0]
            while cumulative < uniform and t_c < n_K - 1:
                t_c += 1
                cumulative += p_c[t_c]
            assign_c[position_c] = t_c
            position_c += 1
        for sweep in range(sweeps):
            position_c = 0
            for j in range(int(1.0 + 0.5)):
                t_c = assign_c[position_c]
                total = 0.0
                for t_c in range(n_K):
                    p_c[t_c] = lam_c_onehot[i_docs, t_c]
                    total += p_c[t_c]
                uniform = np.random.random() * total
                t_c = 0
                cumulative = p_c[0]
                while cumulative < uniform and t_c < n_K - 1:
                    t_c += 1
                    cumulative += p_c[t_c]
                assign_c[position_c] = t_c
                if sweep >= burn_in:
                    E_c_onehot[i_docs, t_c] += 1.0
                position_c += 1
        instances = int(1.0 + 0.5)
        if instances > 0:
            E_c_onehot[i_docs] /= instances * (sweeps - burn_in)
        else:
            E_c_onehot[i_docs] = lam_c_onehot[i_docs] / lam_c_onehot[i_docs].sum()
        # acc_c_0[k] += q(c[docs]=k) · stick_keep(K)  (dp_mixture_of_multinomials.cem:26:5)
        for t_k in range(n_K):
            acc_c_0[t_k] += item_weight[i_docs] * E_c_onehot[i_docs, t_k] * stick_keep_K[t_k]
        # acc_c_1[i0] += q(c[docs]=k) · stick_below(K)  (dp_mixture_of_multinomials.cem:26:5)
        for t_k in range(n_K):
            for t_i0 in range(n_K):
                acc_c_1[t_i0] += item_weight[i_docs] * E_c_onehot[i_docs, t_k] * stick_below_K[t_k, t_i0]
        # acc_w_0[k, g0] += onehot(w[docs, tokens]) · q(c[docs]=g0)  (dp_mixture_of_multinomials.cem:28:9)
        for i_tokens in range(tokens_ptr[i_docs], tokens_ptr[i_docs + 1]):
            t_k = w[i_tokens]
            for t_g0 in range(n_K):
                acc_w_0[t_k, t_g0] += item_weight[i_docs] * E_c_onehot[i_docs, t_g0] * tokens_weight[i_tokens]


@njit(cache=True, nogil=True, error_model="numpy")
def local_step_cvb0(
        items,
        max_local_iter,
        local_tol,
        lam_c_onehot,
        n_K,
        stick_keep_K,
        E_pi_sticks_log,
        stick_below_K,
        E_pi_sticks_log1m,
        tokens_ptr,
        w,
        E_phi_log,
        tokens_weight,
        E_c_onehot,
        item_weight,
        acc_c_0,
        acc_c_1,
        acc_w_0,
):
    """CVB0 local step: each item's q(z) updated with no proportions integrated out, until the mean absolute
    change of q(z) is below local_tol (Asuncion et al. 2009).

        q(z_i = c) ∝ · exp(Σ_children E[log p(y | z_i = c, β)])_c

    Then the sufficient statistics, as local_step.
    """
    p_c = np.empty(n_K)
    for position in range(items.shape[0]):
        i_docs = items[position]
        # the fixed part of the conditional
        evidence_c(i_docs, lam_c_onehot, n_K, stick_keep_K, E_pi_sticks_log, stick_below_K, E_pi_sticks_log1m, tokens_ptr, w, E_phi_log, tokens_weight)
        # start: each row given the ones before it
        total = 0.0
        for t_c in range(n_K):
            p_c[t_c] = lam_c_onehot[i_docs, t_c]
            total += p_c[t_c]
        w_row = 1.0
        for t_c in range(n_K):
            E_c_onehot[i_docs, t_c] = p_c[t_c] / total
        # acc_c_0[k] += q(c[docs]=k) · stick_keep(K)  (dp_mixture_of_multinomials.cem:26:5)
        for t_k in range(n_K):
            acc_c_0[t_k] += item_weight[i_docs] * E_c_onehot[i_docs, t_k] * stick_keep_K[t_k]
        # acc_c_1[i0] += q(c[docs]=k) · stick_below(K)  (dp_mixture_of_multinomials.cem:26:5)
        for t_k in range(n_K):
            for t_i0 in range(n_K):
                acc_c_1[t_i0] += item_weight[i_docs] * E_c_onehot[i_docs, t_k] * stick_below_K[t_k, t_i0]
        # acc_w_0[k, g0] += onehot(w[docs, tokens]) · q(c[docs]=g0)  (dp_mixture_of_multinomials.cem:28:9)
        for i_tokens in range(tokens_ptr[i_docs], tokens_ptr[i_docs + 1]):
            t_k = w[i_tokens]
            for t_g0 in range(n_K):
                acc_w_0[t_k, t_g0] += item_weight[i_docs] * E_c_onehot[i_docs, t_g0] * tokens_weight[i_tokens]


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def update_phi(data_scale, lam_phi_log, n_V, eta, acc_w_0, expect, E_phi_log, n_K):
    """q(phi[k]) = Dirichlet(α)
        α_v = eta + Σ_{d,n} [w[d, n] = v]·q(c[d] = k)

    (dp_mixture_of_multinomials.cem:24:5)
    """
    for i_classes in range(n_K):
        lam_phi_log[i_classes] = 0.0
        # from phi ~ Dirichlet (dp_mixture_of_multinomials.cem:24:5)
        for t_k in range(n_V):
            lam_phi_log[i_classes, t_k] += eta
        # from phi ~ Dirichlet (dp_mixture_of_multinomials.cem:24:5)
        for t_k in range(n_V):
            lam_phi_log[i_classes, t_k] += -1.0
        # from w ~ Categorical (dp_mixture_of_multinomials.cem:28:9)
        for t_k in range(n_V):
            lam_phi_log[i_classes, t_k] += data_scale * acc_w_0[t_k, i_classes]
        if expect:  # a stochastic step mixes λ first (λ̂ may be invalid)
            rt.dirichlet_expected_stats(lam_phi_log[i_classes], E_phi_log[i_classes])


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def update_pi_sticks(
        data_scale,
        lam_pi_sticks_log,
        lam_pi_sticks_log1m,
        alpha,
        acc_c_0,
        acc_c_1,
        expect,
        E_pi_sticks_log,
        E_pi_sticks_log1m,
        n_K,
):
    """q(pi_sticks[k]) = Beta(a, b)
        a = 1 + Σ_{d} q(c[d] = k)·[k < K]
        b = alpha + Σ_{d,v} q(c[d] = v)·[k < v]

    (dp_mixture_of_multinomials.cem:22:1)
    """
    for i_sticks_pi in range(n_K):
        lam_pi_sticks_log[i_sticks_pi] = 0.0
        lam_pi_sticks_log1m[i_sticks_pi] = 0.0
        # from pi_sticks ~ Beta (dp_mixture_of_multinomials.cem:22:1)
        lam_pi_sticks_log[i_sticks_pi] += 1.0
        # from pi_sticks ~ Beta (dp_mixture_of_multinomials.cem:22:1)
        lam_pi_sticks_log[i_sticks_pi] += -1.0
        # from pi_sticks ~ Beta (dp_mixture_of_multinomials.cem:22:1)
        lam_pi_sticks_log1m[i_sticks_pi] += alpha
        # from pi_sticks ~ Beta (dp_mixture_of_multinomials.cem:22:1)
        lam_pi_sticks_log1m[i_sticks_pi] += -1.0
        # from c ~ Categorical (dp_mixture_of_multinomials.cem:26:5)
        lam_pi_sticks_log[i_sticks_pi] += data_scale * acc_c_0[i_sticks_pi]
        # from c ~ Categorical (dp_mixture_of_multinomials.cem:26:5)
        lam_pi_sticks_log1m[i_sticks_pi] += data_scale * acc_c_1[i_sticks_pi]
        if expect:  # a stochastic step mixes λ first (λ̂ may be invalid)
            E_pi_sticks_log[i_sticks_pi], E_pi_sticks_log1m[i_sticks_pi] = rt.beta_expected_stats(lam_pi_sticks_log[i_sticks_pi], lam_pi_sticks_log1m[i_sticks_pi])


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def refresh_globals(
        lam_phi_log,
        E_phi_log,
        n_K,
        lam_pi_sticks_log,
        E_pi_sticks_log,
        lam_pi_sticks_log1m,
        E_pi_sticks_log1m,
):
    """Expected statistics of the globals from their natural parameters."""
    for i_classes in range(n_K):
        rt.dirichlet_expected_stats(lam_phi_log[i_classes], E_phi_log[i_classes])
    for i_sticks_pi in range(n_K):
        E_pi_sticks_log[i_sticks_pi], E_pi_sticks_log1m[i_sticks_pi] = rt.beta_expected_stats(lam_pi_sticks_log[i_sticks_pi], lam_pi_sticks_log1m[i_sticks_pi])


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def refresh_eager_globals(
        lam_pi_sticks_log,
        E_pi_sticks_log,
        lam_pi_sticks_log1m,
        E_pi_sticks_log1m,
        n_K,
):
    """Expected statistics of pi_sticks from their natural parameters (a lazy SVI step moves the others by columns)."""
    for i_sticks_pi in range(n_K):
        E_pi_sticks_log[i_sticks_pi], E_pi_sticks_log1m[i_sticks_pi] = rt.beta_expected_stats(lam_pi_sticks_log[i_sticks_pi], lam_pi_sticks_log1m[i_sticks_pi])


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def elbo_global(
        n_K,
        E_pi_sticks_log,
        alpha,
        E_pi_sticks_log1m,
        lbeta_c_alpha,
        n_V,
        eta,
        E_phi_log,
        lgamma_sum_eta,
        lgamma_eta,
        acc_c_0,
        acc_c_1,
        acc_w_0,
        lam_phi_log,
        lam_pi_sticks_log,
        lam_pi_sticks_log1m,
):
    """ELBO terms of the global factors (see elbo_terms in the README)."""
    elbo = 0.0
    # E[log p(pi_sticks | ...)]  (dp_mixture_of_multinomials.cem:22:1)
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
    # E[log p(phi | ...)]  (dp_mixture_of_multinomials.cem:24:5)
    for i_classes in range(n_K):
        for t_k in range(n_V):
            elbo += eta * E_phi_log[i_classes, t_k]
    for i_classes in range(n_K):
        for t_k in range(n_V):
            elbo += -E_phi_log[i_classes, t_k]
    for i_classes in range(n_K):
        elbo += lgamma_sum_eta
    for i_classes in range(n_K):
        for t_k in range(n_V):
            elbo += -lgamma_eta
    # E[log p(c | ...)]  (dp_mixture_of_multinomials.cem:26:5)
    for t_k in range(n_K):
        elbo += acc_c_0[t_k] * E_pi_sticks_log[t_k]
    for t_i0 in range(n_K):
        elbo += acc_c_1[t_i0] * E_pi_sticks_log1m[t_i0]
    # E[log p(w | ...)]  (dp_mixture_of_multinomials.cem:28:9)
    for t_g0 in range(n_K):
        for t_k in range(n_V):
            elbo += acc_w_0[t_k, t_g0] * E_phi_log[t_g0, t_k]
    # entropy of q(phi)
    for i_classes in range(n_K):
        elbo += rt.dirichlet_log_normalizer(lam_phi_log[i_classes]) - rt.frobenius(lam_phi_log[i_classes], E_phi_log[i_classes])
    # entropy of q(pi_sticks)
    for i_sticks_pi in range(n_K):
        elbo += rt.beta_log_normalizer(lam_pi_sticks_log[i_sticks_pi], lam_pi_sticks_log1m[i_sticks_pi]) - lam_pi_sticks_log[i_sticks_pi] * E_pi_sticks_log[i_sticks_pi] - lam_pi_sticks_log1m[i_sticks_pi] * E_pi_sticks_log1m[i_sticks_pi]
    return elbo


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def klc_stats(
        share_start,
        share_stop,
        n_threads,
        items,
        lam_c_onehot,
        E_c_onehot,
        theta_c,
        item_weight,
        n_K,
        stick_keep_K,
        stick_below_K,
        tokens_ptr,
        w,
        tokens_weight,
        acc_c_0_threads,
        acc_c_1_threads,
        acc_w_0_threads,
):
    """KLC statistics: q(Z) = softmax(θ), each collapsed local's mean-field update given q(Z),
    and the collapsed globals' sufficient statistics (accumulators).
    Returns the ELBO terms that involve only local variables and data.
    """
    shares_total = 0.0
    for thread in range(share_start, share_stop):  # one call runs these shares, one after another
        acc_c_0_t = acc_c_0_threads[thread]
        acc_c_1_t = acc_c_1_threads[thread]
        acc_w_0_t = acc_w_0_threads[thread]
        elbo = 0.0
        stop_position = (thread + 1) * items.shape[0] // n_threads
        for position in range(thread * items.shape[0] // n_threads, stop_position):
            i_docs = items[position]
            # the next item's memory, asked for while this one computes
            if position + 1 < stop_position and items[position + 1] != i_docs + 1:
                rt.prefetch_row(item_weight, items[position + 1])
                rt.prefetch_row(lam_c_onehot, items[position + 1])
                rt.prefetch_row(E_c_onehot, items[position + 1])
                rt.prefetch_rows(w, tokens_ptr[items[position + 1]], tokens_ptr[items[position + 1] + 1])
                rt.prefetch_rows(tokens_weight, tokens_ptr[items[position + 1]], tokens_ptr[items[position + 1] + 1])
            if position + 2 < stop_position and items[position + 2] != i_docs + 2:
                rt.prefetch_row(tokens_ptr, items[position + 2])
            # q(c) = softmax(θ) per row
            lam_c_onehot[i_docs] = theta_c[i_docs]
            rt.categorical_expected_stats(lam_c_onehot[i_docs], E_c_onehot[i_docs])
            # acc_c_0[k] += q(c[docs]=k) · stick_keep(K)  (dp_mixture_of_multinomials.cem:26:5)
            for t_k in range(n_K):
                acc_c_0_t[t_k] += item_weight[i_docs] * E_c_onehot[i_docs, t_k] * stick_keep_K[t_k]
            # acc_c_1[i0] += q(c[docs]=k) · stick_below(K)  (dp_mixture_of_multinomials.cem:26:5)
            for t_k in range(n_K):
                for t_i0 in range(n_K):
                    acc_c_1_t[t_i0] += item_weight[i_docs] * E_c_onehot[i_docs, t_k] * stick_below_K[t_k, t_i0]
            # acc_w_0[k, g0] += onehot(w[docs, tokens]) · q(c[docs]=g0)  (dp_mixture_of_multinomials.cem:28:9)
            for i_tokens in range(tokens_ptr[i_docs], tokens_ptr[i_docs + 1]):
                t_k = w[i_tokens]
                for t_g0 in range(n_K):
                    acc_w_0_t[t_k, t_g0] += item_weight[i_docs] * E_c_onehot[i_docs, t_g0] * tokens_weight[i_tokens]
            # ELBO: local terms and local entropies
            elbo += (rt.categorical_entropy(E_c_onehot[i_docs]))
        shares_total += elbo  # summed in share order, as rt.run_shares sums
    return shares_total


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def klc_gradient(
        share_start,
        share_stop,
        n_threads,
        items,
        lam_c_onehot,
        E_c_onehot,
        theta_c,
        natgrad_c,
        grad_c,
        n_K,
        stick_keep_K,
        E_pi_sticks_log,
        stick_below_K,
        E_pi_sticks_log1m,
        tokens_ptr,
        w,
        E_phi_log,
        tokens_weight,
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
            i_docs = items[position]
            # the next item's memory, asked for while this one computes
            if position + 1 < stop_position and items[position + 1] != i_docs + 1:
                rt.prefetch_row(lam_c_onehot, items[position + 1])
                rt.prefetch_row(E_c_onehot, items[position + 1])
                rt.prefetch_rows(w, tokens_ptr[items[position + 1]], tokens_ptr[items[position + 1] + 1])
                rt.prefetch_rows(tokens_weight, tokens_ptr[items[position + 1]], tokens_ptr[items[position + 1] + 1])
            if position + 2 < stop_position and items[position + 2] != i_docs + 2:
                rt.prefetch_row(tokens_ptr, items[position + 2])
            # q(Z) = softmax(θ) per row
            lam_c_onehot[i_docs] = theta_c[i_docs]
            rt.categorical_expected_stats(lam_c_onehot[i_docs], E_c_onehot[i_docs])
            # θ̂ = the mean-field target of q(c) given q*(X)
            update_c(i_docs, True, lam_c_onehot, n_K, stick_keep_K, E_pi_sticks_log, stick_below_K, E_pi_sticks_log1m, tokens_ptr, w, E_phi_log, tokens_weight, E_c_onehot)
            natgrad_c[i_docs] = lam_c_onehot[i_docs] - theta_c[i_docs]  # g̃ = θ̂ − θ
            # q(c) back to softmax(θ) for the other rows' targets
            lam_c_onehot[i_docs] = theta_c[i_docs]
            rt.categorical_expected_stats(lam_c_onehot[i_docs], E_c_onehot[i_docs])
            mean = 0.0
            for t_c in range(n_K):
                mean += E_c_onehot[i_docs, t_c] * natgrad_c[i_docs, t_c]
            for t_c in range(n_K):
                # g = w (diag(q) − q qᵀ) g̃
                grad_c[i_docs, t_c] = E_c_onehot[i_docs, t_c] * (natgrad_c[i_docs, t_c] - mean)
                norm += grad_c[i_docs, t_c] * natgrad_c[i_docs, t_c]
        shares_total += norm  # summed in share order, as rt.run_shares sums
    return shares_total


def _prepare(data, hypers, dims, seed, init, start, max_local_iter, local_tol, share=None):
    """Bind and check the data, evaluate hyperparameters and knowns, allocate the arrays, start the globals.
    share: out of core, the fit's state, whose globals, hyperparameters and statistics `data`'s minibatch shares.
    """
    hypers = rt.check_hyper_names(hypers, ['alpha', 'eta'])
    bound = rt.bind_data(SPEC, data, dims, missing=True)
    n_K, n_V, n_D = bound.dims['K'], bound.dims['V'], bound.dims['D']
    # refuse before allocating more than the machine's memory
    rt.check_memory(bound, {('K', 'V'): 2, ('K',): 6, ('D', 'K'): 2, ('threads', 'K'): 2, ('V', 'K'): 1, ('threads', 'V', 'K'): 1, ('D',): 3})
    tokens_ptr, tokens_weight, w = bound.arrays['tokens_ptr'], bound.arrays['tokens_weight'], bound.arrays['w']
    # hyperparameters (defaults from the model file; out of core the fit's current values)
    alpha = rt.hyper_value(hypers, 'alpha', 1.0, (), domain='shape') if share is None else share.alpha
    eta = rt.hyper_value(hypers, 'eta', 0.1, (), domain='shape') if share is None else share.eta
    # known quantities: functions of hyperparameters and data
    lbeta_c_alpha = rt.lbeta(1.0, alpha)  # lbeta(1, alpha)
    lgamma_sum_eta = rt.gammaln(n_V * eta)  # lgamma_sum(repeat(eta, V))
    lgamma_eta = rt.gammaln(eta)  # lgamma(repeat(eta, V))
    stick_keep_K = (np.arange(n_K) < n_K - 1) * 1.0  # stick_keep(K)
    stick_below_K = np.tri(n_K, n_K, -1)  # stick_below(K)
    # variational parameters (natural, coefficient form) and E[t]
    lam_phi_log, E_phi_log = (np.zeros((n_K, n_V)), np.zeros((n_K, n_V))) if share is None else (share.lam_phi_log, share.E_phi_log)
    lam_pi_sticks_log, E_pi_sticks_log = (np.zeros((n_K,)), np.zeros((n_K,))) if share is None else (share.lam_pi_sticks_log, share.E_pi_sticks_log)
    lam_pi_sticks_log1m, E_pi_sticks_log1m = (np.zeros((n_K,)), np.zeros((n_K,))) if share is None else (share.lam_pi_sticks_log1m, share.E_pi_sticks_log1m)
    lam_c_onehot, E_c_onehot = np.zeros((n_D, n_K)), np.zeros((n_D, n_K))
    # sufficient statistics the local step hands to the global step (out of core added up over minibatches)
    acc_c_0 = np.zeros((n_K,)) if share is None else share.acc_c_0
    acc_c_1 = np.zeros((n_K,)) if share is None else share.acc_c_1
    acc_w_0 = np.zeros((n_V, n_K)) if share is None else share.acc_w_0
    # the local step's shares: one per thread, fewer for small data
    n_threads = rt.share_count(bound)
    acc_c_0_threads = rt.thread_copies(n_threads, acc_c_0) if share is None else share.acc_c_0_threads
    acc_c_1_threads = rt.thread_copies(n_threads, acc_c_1) if share is None else share.acc_c_1_threads
    acc_w_0_threads = rt.thread_copies(n_threads, acc_w_0) if share is None else share.acc_w_0_threads
    all_items = np.arange(n_D)  # the local step runs over these
    item_weight = np.ones(n_D)  # each item's weight in the statistics (SVI+ perturbs it)
    seed_category = np.full(n_D, -1)
    if share is not None:  # out of core: a minibatch's state, sharing the fit's
        return rt.State(bound=bound, alpha=alpha, eta=eta, seed_category=seed_category, E_c_onehot=E_c_onehot, n_K=n_K, lam_c_onehot=lam_c_onehot, stick_keep_K=stick_keep_K, E_pi_sticks_log=E_pi_sticks_log, stick_below_K=stick_below_K, E_pi_sticks_log1m=E_pi_sticks_log1m, tokens_ptr=tokens_ptr, w=w, E_phi_log=E_phi_log, tokens_weight=tokens_weight, item_weight=item_weight, acc_c_0_threads=acc_c_0_threads, acc_c_1_threads=acc_c_1_threads, acc_w_0_threads=acc_w_0_threads, acc_c_0=acc_c_0, acc_c_1=acc_c_1, acc_w_0=acc_w_0, lam_phi_log=lam_phi_log, lam_pi_sticks_log=lam_pi_sticks_log, lam_pi_sticks_log1m=lam_pi_sticks_log1m, lbeta_c_alpha=lbeta_c_alpha, n_V=n_V, lgamma_sum_eta=lgamma_sum_eta, lgamma_eta=lgamma_eta, all_items=all_items)
    # start every global at its prior
    update_phi(0.0, lam_phi_log, n_V, eta, acc_w_0, True, E_phi_log, n_K)
    update_pi_sticks(0.0, lam_pi_sticks_log, lam_pi_sticks_log1m, alpha, acc_c_0, acc_c_1, True, E_pi_sticks_log, E_pi_sticks_log1m, n_K)
    if init is not None:  # warm start: the globals' natural parameters from an earlier fit
        rt.load_state(init, {'lam_phi_log': lam_phi_log, 'lam_pi_sticks_log': lam_pi_sticks_log, 'lam_pi_sticks_log1m': lam_pi_sticks_log1m})
        refresh_globals(lam_phi_log, E_phi_log, n_K, lam_pi_sticks_log, E_pi_sticks_log, lam_pi_sticks_log1m, E_pi_sticks_log1m)
    start = DEFAULT_START if start is None else start
    if init is None and start == 'seeds':
        # start from k-means++ seed items (see cemodel.runtime.seeding); not part of the ELBO trace
        seed_category = rt.seed_categories(SPEC, bound.arrays, 'docs', n_D, n_K, seed, bound.missing)
        # the globals start from the seed items' statistics alone
        seed_items = np.flatnonzero(seed_category >= 0)
        acc_c_0[...] = 0.0
        acc_c_1[...] = 0.0
        acc_w_0[...] = 0.0
        rt.run_shares(local_step, acc_c_0_threads.shape[0], (True, seed_items, seed_category, max_local_iter, local_tol, E_c_onehot, n_K, lam_c_onehot, stick_keep_K, E_pi_sticks_log, stick_below_K, E_pi_sticks_log1m, tokens_ptr, w, E_phi_log, tokens_weight, item_weight, False, acc_c_0_threads, acc_c_1_threads, acc_w_0_threads,), ((acc_c_0, acc_c_0_threads), (acc_c_1, acc_c_1_threads), (acc_w_0, acc_w_0_threads),))
        update_phi(1.0, lam_phi_log, n_V, eta, acc_w_0, True, E_phi_log, n_K)
        update_pi_sticks(1.0, lam_pi_sticks_log, lam_pi_sticks_log1m, alpha, acc_c_0, acc_c_1, True, E_pi_sticks_log, E_pi_sticks_log1m, n_K)
    elif init is None and start == 'random':
        # start from random pseudo-counts on the count-type globals (Hoffman et al. 2010)
        rng = np.random.default_rng(seed)
        lam_phi_log += rng.gamma(100.0, 0.01, lam_phi_log.shape)
        lam_pi_sticks_log += rng.gamma(100.0, 0.01, lam_pi_sticks_log.shape)
        lam_pi_sticks_log1m += rng.gamma(100.0, 0.01, lam_pi_sticks_log1m.shape)
        refresh_globals(lam_phi_log, E_phi_log, n_K, lam_pi_sticks_log, E_pi_sticks_log, lam_pi_sticks_log1m, E_pi_sticks_log1m)
    elif init is None and start == 'prior':
        raise rt.CemDataError("start: expected 'seeds' or 'random', found 'prior' (from the prior the components start alike and stay alike)")
    elif init is None:
        raise rt.CemDataError(f"start: expected 'seeds' or 'random', found {start!r}")
    return rt.State(bound=bound, alpha=alpha, eta=eta, seed_category=seed_category, E_c_onehot=E_c_onehot, n_K=n_K, lam_c_onehot=lam_c_onehot, stick_keep_K=stick_keep_K, E_pi_sticks_log=E_pi_sticks_log, stick_below_K=stick_below_K, E_pi_sticks_log1m=E_pi_sticks_log1m, tokens_ptr=tokens_ptr, w=w, E_phi_log=E_phi_log, tokens_weight=tokens_weight, item_weight=item_weight, acc_c_0_threads=acc_c_0_threads, acc_c_1_threads=acc_c_1_threads, acc_w_0_threads=acc_w_0_threads, acc_c_0=acc_c_0, acc_c_1=acc_c_1, acc_w_0=acc_w_0, lam_phi_log=lam_phi_log, lam_pi_sticks_log=lam_pi_sticks_log, lam_pi_sticks_log1m=lam_pi_sticks_log1m, lbeta_c_alpha=lbeta_c_alpha, n_V=n_V, lgamma_sum_eta=lgamma_sum_eta, lgamma_eta=lgamma_eta, all_items=all_items)


def _learn(s, learn, rho=1.0, items=slice(None)):
    """Empirical Bayes (Minka 2000): each learned hyperparameter a step rho towards its ELBO maximiser given q."""
    if 'eta' in learn:  # the prior of phi
        s.eta = (1.0 - rho) * s.eta + rho * rt.learn_symmetric_dirichlet(s.eta, s.E_phi_log)
    if 'alpha' in learn:  # the prior of pi_sticks
        s.alpha = (1.0 - rho) * s.alpha + rho * rt.learn_beta_param(1.0, s.E_pi_sticks_log1m)
    # known quantities that depend on hyperparameters
    s.lbeta_c_alpha = rt.lbeta(1.0, s.alpha)
    s.lgamma_sum_eta = rt.gammaln(s.n_V * s.eta)
    s.lgamma_eta = rt.gammaln(s.eta)


def _result(s, trace, converged, seconds, items=True):
    """The posterior in usual parameters, expectations and the state; items=False: the globals only."""
    posterior = {}
    state = {'lam_phi_log': s.lam_phi_log, 'lam_pi_sticks_log': s.lam_pi_sticks_log, 'lam_pi_sticks_log1m': s.lam_pi_sticks_log1m}
    phi__alpha = rt.dirichlet_params(s.lam_phi_log)
    posterior['phi.alpha'] = phi__alpha
    posterior['E[log phi]'] = s.E_phi_log
    pi_sticks__a, pi_sticks__b = rt.beta_params(s.lam_pi_sticks_log, s.lam_pi_sticks_log1m)
    posterior['pi_sticks.a'] = pi_sticks__a
    posterior['pi_sticks.b'] = pi_sticks__b
    posterior['E[log pi_sticks]'] = s.E_pi_sticks_log
    posterior['E[log1m pi_sticks]'] = s.E_pi_sticks_log1m
    if items:  # out of core the state holds one minibatch's items
        c__probs = rt.categorical_params(s.lam_c_onehot)
        posterior['c.probs'] = c__probs
        posterior['E[onehot c]'] = s.E_c_onehot
        state['lam_c_onehot'] = s.lam_c_onehot
    components = {}
    components['pi'] = rt.stick_components(pi_sticks__a, pi_sticks__b, s.alpha)
    return rt.FitResult(posterior=posterior, elbo=np.array(trace), iterations=len(trace), converged=converged, seconds=seconds, dims=dict(s.bound.dims), hypers={'alpha': s.alpha, 'eta': s.eta}, state=state, notes={'components': components})


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
    return rt.run_shares(local_step, s.acc_c_0_threads.shape[0], (seeding, items, s.seed_category, max_local_iter, local_tol, s.E_c_onehot, s.n_K, s.lam_c_onehot, s.stick_keep_K, s.E_pi_sticks_log, s.stick_below_K, s.E_pi_sticks_log1m, s.tokens_ptr, s.w, s.E_phi_log, s.tokens_weight, s.item_weight, evaluate, s.acc_c_0_threads, s.acc_c_1_threads, s.acc_w_0_threads,), ((s.acc_c_0, s.acc_c_0_threads), (s.acc_c_1, s.acc_c_1_threads), (s.acc_w_0, s.acc_w_0_threads),))


def run_local_step_gibbs(s, items, sweeps, burn_in):
    return local_step_gibbs(items, sweeps, burn_in, s.lam_c_onehot, s.n_K, s.stick_keep_K, s.E_pi_sticks_log, s.stick_below_K, s.E_pi_sticks_log1m, s.tokens_ptr, s.w, s.E_phi_log, s.tokens_weight, s.E_c_onehot, s.item_weight, s.acc_c_0, s.acc_c_1, s.acc_w_0)


def run_local_step_cvb0(s, items, max_local_iter, local_tol):
    return local_step_cvb0(items, max_local_iter, local_tol, s.lam_c_onehot, s.n_K, s.stick_keep_K, s.E_pi_sticks_log, s.stick_below_K, s.E_pi_sticks_log1m, s.tokens_ptr, s.w, s.E_phi_log, s.tokens_weight, s.E_c_onehot, s.item_weight, s.acc_c_0, s.acc_c_1, s.acc_w_0)


def _update_phi(s, data_scale, expect=True):
    update_phi(data_scale, s.lam_phi_log, s.n_V, s.eta, s.acc_w_0, expect, s.E_phi_log, s.n_K)


def _update_pi_sticks(s, data_scale, expect=True):
    update_pi_sticks(data_scale, s.lam_pi_sticks_log, s.lam_pi_sticks_log1m, s.alpha, s.acc_c_0, s.acc_c_1, expect, s.E_pi_sticks_log, s.E_pi_sticks_log1m, s.n_K)


def refresh(s):
    refresh_globals(s.lam_phi_log, s.E_phi_log, s.n_K, s.lam_pi_sticks_log, s.E_pi_sticks_log, s.lam_pi_sticks_log1m, s.E_pi_sticks_log1m)


def refresh_eager(s):
    refresh_eager_globals(s.lam_pi_sticks_log, s.E_pi_sticks_log, s.lam_pi_sticks_log1m, s.E_pi_sticks_log1m, s.n_K)


def elbo_of_globals(s):
    return elbo_global(s.n_K, s.E_pi_sticks_log, s.alpha, s.E_pi_sticks_log1m, s.lbeta_c_alpha, s.n_V, s.eta, s.E_phi_log, s.lgamma_sum_eta, s.lgamma_eta, s.acc_c_0, s.acc_c_1, s.acc_w_0, s.lam_phi_log, s.lam_pi_sticks_log, s.lam_pi_sticks_log1m)


GLOBALS = (  # the globals as the stochastic drivers move them
    rt.Global('phi', 'dirichlet', lam=('lam_phi_log',), E=('E_phi_log',),
              update=_update_phi, aux_draws=1, after_sample=None,
              lazy=rt.LazyColumns('n_V', 'w', 'tokens_ptr', (('acc_w_0', 0),), None, None, expected=True, alone=True, direct=True)),
    rt.Global('pi_sticks', 'beta', lam=('lam_pi_sticks_log', 'lam_pi_sticks_log1m'), E=('E_pi_sticks_log', 'E_pi_sticks_log1m'),
              update=_update_pi_sticks, aux_draws=2, after_sample=None),
)


def fit(data, **options):
    """Batch mean-field VB (options: cemodel.runtime.drivers.mf.fit). One iteration:
        statistics ← 0; elbo = run_local_step(s, s.all_items, ...)  # E-step
        _update_phi(s, 1.0)  # q(phi)
        _update_pi_sticks(s, 1.0)  # q(pi_sticks)
        elbo += elbo_of_globals(s)
    """
    return rt.drivers.mf.fit(_THIS, data, **options)


def fit_svi(data, **options):
    """SVI, SVI+ (options: cemodel.runtime.drivers.svi.fit). One step on a minibatch S:
        statistics ← 0; run_local_step(s, S, ...)
        _update_phi(s, N / len(S), expect=False)  # λ̂ of q(phi)
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


def _klc_bound(s, theta):
    """L_KL(θ) (eq. 4): the mean-field ELBO with X at q*(X) given q(Z) = softmax(θ) (eq. 9)."""
    s.acc_c_0[...] = 0.0
    s.acc_c_1[...] = 0.0
    s.acc_w_0[...] = 0.0
    value = rt.run_shares(klc_stats, s.acc_c_0_threads.shape[0], (s.all_items, s.lam_c_onehot, s.E_c_onehot, theta[0], s.item_weight, s.n_K, s.stick_keep_K, s.stick_below_K, s.tokens_ptr, s.w, s.tokens_weight, s.acc_c_0_threads, s.acc_c_1_threads, s.acc_w_0_threads,), ((s.acc_c_0, s.acc_c_0_threads), (s.acc_c_1, s.acc_c_1_threads), (s.acc_w_0, s.acc_w_0_threads),))
    # the collapsed globals at their optimum given q(Z)
    update_phi(1.0, s.lam_phi_log, s.n_V, s.eta, s.acc_w_0, True, s.E_phi_log, s.n_K)
    update_pi_sticks(1.0, s.lam_pi_sticks_log, s.lam_pi_sticks_log1m, s.alpha, s.acc_c_0, s.acc_c_1, True, s.E_pi_sticks_log, s.E_pi_sticks_log1m, s.n_K)
    return value + elbo_global(s.n_K, s.E_pi_sticks_log, s.alpha, s.E_pi_sticks_log1m, s.lbeta_c_alpha, s.n_V, s.eta, s.E_phi_log, s.lgamma_sum_eta, s.lgamma_eta, s.acc_c_0, s.acc_c_1, s.acc_w_0, s.lam_phi_log, s.lam_pi_sticks_log, s.lam_pi_sticks_log1m)


def _klc_gradient(s, theta, natgrad, grad):
    """natgrad, grad and ⟨natgrad, grad⟩ at θ (call _klc_bound(s, θ) first)."""
    return rt.run_shares(klc_gradient, rt.share_count(s.bound), (s.all_items, s.lam_c_onehot, s.E_c_onehot, theta[0], natgrad[0], grad[0], s.n_K, s.stick_keep_K, s.E_pi_sticks_log, s.stick_below_K, s.E_pi_sticks_log1m, s.tokens_ptr, s.w, s.E_phi_log, s.tokens_weight,), ())


def _klc_shapes(s):
    """The shapes of the softmax parameters θ of q(Z), one per member of KLC_LOCALS."""
    return [(s.bound.dims['D'], s.bound.dims['K'],)]


def _klc_logits(s):
    """θ of q(Z) as the state holds it (its natural parameters), one per member of KLC_LOCALS."""
    return [s.lam_c_onehot.copy()]


def fit_klc(data, **options):
    """KLC-CG (Hensman et al. 2012): pi_sticks, phi integrated out, q(c) by Riemannian CG."""
    return rt.drivers.klc.fit(_THIS, data, **options)
