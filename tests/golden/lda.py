"""lda: the model (kernels, data layout, start) for cemodel.runtime.drivers, by cemodel 0.1.0.

Model file: lda.cem (sha256 62ac1137aac8c2c4)
Regenerate with `cemodel compile lda.cem`; do not edit by hand.

Natural parameters are in coefficient form: q(x) ∝ exp(Σ_s lam_s · t_s(x)).
E_<var>_<stat> holds E_q[t_s]; acc_* hold sums over the data plate.
"""

import numpy as np
from numba import njit

from cemodel import runtime as rt

SOURCE = 'lda.cem'
SOURCE_SHA256 = '62ac1137aac8c2c458ee0a8b9a285f7d1f30b7d1d96aeea2639a874fa1328625'
DEFAULT_START = 'random'  # random pseudo-counts: assignments below the items, gated counts
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
    'klc': 'yes: collapses beta, theta, parameterises z',
}
# the E-steps (fit_svi(..., local=...)) and whether each applies
LOCAL_STEPS = {
    'mf': 'yes: local mean field',
    'exact': "no: local 'z' depends on local 'theta', so p(locals | data, β) of an item does not factorise into one conditional per local, which is what the exact step computes",
    'gibbs': 'yes: samples z with theta integrated out',
    'cvb0': 'yes: updates q(z) with theta integrated out, zero-order collapsed VB',
}
STREAMING = 'yes'  # fit_svi from an rt.ItemSource (data on disk)
ITEM_DIMS = ('D', 'N')  # sizes set by the items bound
KLC_LOCALS = ('z',)  # KLC-CG's parameterised Z
KLC_START = 'random'  # θ's default start: N(0, 1) logits
ROLES = {  # the state's arrays by what they hold (executors, checkpoints)
    'data': ('n_K', 'tokens_ptr', 'tokens_weight', 'w', 'n_V'), 'hyper': ('alpha', 'eta'),
    'known': ('lgamma_sum_alpha', 'lgamma_alpha', 'lgamma_sum_eta', 'lgamma_eta'),
    'global': ('lam_beta_log',), 'global_exp': ('ET_beta_log', 'XT_beta_log', 'E_beta_log'),
    'local': ('E_z_onehot', 'lam_z_onehot'),
    'kept_local': ('lam_theta_log', 'X_theta_log', 'E_theta_log'),
    'item': ('seed_category', 'item_weight'), 'item_count': ('local_sweeps',),
    'statistic': ('acc_w_0',),
    'thread': ('lam_z_onehot_threads', 'E_z_onehot_threads', 'H_z_threads', 'logZ_z_threads', 'A_z_threads', 'S_z_threads', 'B_z_threads', 's_z_threads', 'acc_w_0_threads'),
    'scratch': ('S_z',),
}
_THIS = rt.ModelView(globals())  # the model, as the drivers see it

SPEC = {
    "model": 'lda',
    "dims": {
        'K': {"default": 20, "ragged_over": None},
        'V': {"default": None, "ragged_over": None},
        'D': {"default": None, "ragged_over": None},
        'N': {"default": None, "ragged_over": 'D'},
    },
    "plates": {
        'topics': {"dim": 'K', "parent": None, "ragged": False},
        'docs': {"dim": 'D', "parent": None, "ragged": False},
        'tokens': {"dim": 'N', "parent": 'docs', "ragged": True},
    },
    "observed": {
        'w': {"plates": ['docs', 'tokens'], "support": 'category', "shape": [], "categories": 'V', "missing": 'no: w (lda.cem:25:9) lies in the ragged plate tokens, and missing entries are supported in dense arrays only'},
    },
    "covariates": {},
    "not_data": {'alpha': 'hyperparameter', 'eta': 'hyperparameter', 'beta': 'latent', 'theta': 'latent', 'z': 'latent'},
}


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def update_theta(
        i_docs,
        with_children,
        lam_theta_log,
        n_K,
        alpha,
        tokens_ptr,
        E_z_onehot,
        tokens_weight,
        use_sums_z,
        S_z,
        X_theta_log,
        exp_only,
        E_theta_log,
):
    """q(theta[d]) = Dirichlet(α)
        α_v = alpha + Σ_{n} q(z[d, n] = v)

    (lda.cem:22:5)
    """
    base_tokens = tokens_ptr[i_docs]
    lam_theta_log[i_docs] = 0.0
    # from theta ~ Dirichlet (lda.cem:22:5)
    for t_k in range(n_K):
        lam_theta_log[i_docs, t_k] += alpha
    # from theta ~ Dirichlet (lda.cem:22:5)
    for t_k in range(n_K):
        lam_theta_log[i_docs, t_k] += -1.0
    if with_children:
        # from z ~ Categorical (lda.cem:24:9)
        if use_sums_z:
            for t_c in range(n_K):
                lam_theta_log[i_docs, t_c] += S_z[t_c]
        else:
            for i_tokens in range(tokens_ptr[i_docs], tokens_ptr[i_docs + 1]):
                for t_k in range(n_K):
                    lam_theta_log[i_docs, t_k] += E_z_onehot[i_tokens - base_tokens, t_k] * tokens_weight[i_tokens]
    if exp_only:
        rt.dirichlet_exp_expected(lam_theta_log[i_docs], X_theta_log[i_docs])
    else:
        rt.dirichlet_expected_stats(lam_theta_log[i_docs], E_theta_log[i_docs])
        for t in range(n_K):
            X_theta_log[i_docs, t] = rt.exp_nonpositive(E_theta_log[i_docs, t])


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def update_z(
        i_docs,
        with_children,
        lam_z_onehot,
        n_K,
        E_theta_log,
        w,
        ET_beta_log,
        logZ_z,
        H_z,
        E_z_onehot,
        X_theta_log,
        XT_beta_log,
        entropy,
        tokens_ptr,
):
    """q(z[d, n]) = Categorical
        log q(z[d, n] = v) = E[log theta[d]]_v + E[log beta[v]]_{w[d, n]} + const

    (lda.cem:24:9)
    """
    base_tokens = tokens_ptr[i_docs]
    for i_tokens in range(tokens_ptr[i_docs], tokens_ptr[i_docs + 1]):
        done = False
        if with_children:
            obs1_k = w[i_tokens]  # w (lda.cem:25:9)
            total = 0.0
            for t_c in range(n_K):
                E_z_onehot[i_tokens - base_tokens, t_c] = X_theta_log[i_docs, t_c] * XT_beta_log[obs1_k, t_c]
                total += E_z_onehot[i_tokens - base_tokens, t_c]
            if total > 0.0 and np.isfinite(total):
                to_mean = 1.0 / total
                if entropy:
                    cross = 0.0
                    for t_c in range(n_K):
                        E_z_onehot[i_tokens - base_tokens, t_c] *= to_mean
                        lam_z_onehot[i_tokens - base_tokens, t_c] = E_theta_log[i_docs, t_c] + ET_beta_log[obs1_k, t_c]
                        cross += lam_z_onehot[i_tokens - base_tokens, t_c] * E_z_onehot[i_tokens - base_tokens, t_c]
                    logZ_z[i_tokens - base_tokens] = np.log(total)  # log Σ_c exp λ_c
                    # H = log Σ_c exp λ_c − Σ_c λ_c q_c
                    H_z[i_tokens - base_tokens] = logZ_z[i_tokens - base_tokens] - cross
                else:  # q alone: λ, log Σ_c exp λ_c and H only feed the ELBO and the guard
                    for t_c in range(n_K):
                        E_z_onehot[i_tokens - base_tokens, t_c] *= to_mean
                done = True
        if not done:  # in log space: the prior-only start, or after an underflow
            lam_z_onehot[i_tokens - base_tokens] = 0.0
            # from z ~ Categorical (lda.cem:24:9)
            for t_k in range(n_K):
                lam_z_onehot[i_tokens - base_tokens, t_k] += E_theta_log[i_docs, t_k]
            if with_children:
                # from w ~ Categorical (lda.cem:25:9)
                t_k = w[i_tokens]
                for t_g0 in range(n_K):
                    lam_z_onehot[i_tokens - base_tokens, t_g0] += ET_beta_log[t_k, t_g0]
            logZ_z[i_tokens - base_tokens] = rt.categorical_expected_stats(lam_z_onehot[i_tokens - base_tokens], E_z_onehot[i_tokens - base_tokens])
            H_z[i_tokens - base_tokens] = logZ_z[i_tokens - base_tokens] - rt.frobenius(lam_z_onehot[i_tokens - base_tokens], E_z_onehot[i_tokens - base_tokens])


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def gather_z(i_docs, B_z, XT_beta_log, w, tokens_ptr):
    """The item's rows of XT_beta_log, contiguous for sums_z."""
    rt.gather_rows(B_z, XT_beta_log, w, tokens_ptr[i_docs], tokens_ptr[i_docs + 1] - tokens_ptr[i_docs])


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def sums_z(i_docs, n_K, A_z, S_z, X_theta_log, tokens_ptr, tokens_weight, B_z, s_z):
    """Σ_rows w·q(z = c) for the item's other locals, without building q(z):
    S_c = A_c Σ_n (w_n / s_n) B_nc, s_n = Σ_c A_c B_nc, with the item's rows B gathered by gather_z.
    """
    for t_c in range(n_K):
        A_z[t_c] = X_theta_log[i_docs, t_c]
    base = tokens_ptr[i_docs]
    n = tokens_ptr[i_docs + 1] - base
    G = rt.gathered(B_z, n, n_K)  # the item's rows as gather stored them
    rt.rows_dot(G, A_z, s_z[:n])  # s_n = Σ_c A_c B_nc
    bad = 0  # rows with s_n not positive and finite (no early exit: the loop vectorizes)
    for r in range(n):
        if not (s_z[r] > 0.0 and s_z[r] < np.inf):
            bad += 1
        s_z[r] = tokens_weight[base + r] / s_z[r]
    if bad > 0:  # underflow: the caller takes the explicit path
        return False
    rt.rows_weighted_sum(G, s_z[:n], S_z)  # Σ_n (w_n / s_n) B_nc
    for t_c in range(n_K):
        S_z[t_c] *= A_z[t_c]
    return True


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def collapsed_z(i_docs, n_K, A_z, B_z, s_z, X_theta_log, tokens_ptr, tokens_weight):
    """Σ_n w_n log Σ_c exp λ_nc: at its optimum q(z) contributes Σ_c q_c λ_c + H(q) = log Σ_c exp λ_c per row."""
    for t_c in range(n_K):
        A_z[t_c] = X_theta_log[i_docs, t_c]
    base = tokens_ptr[i_docs]
    n = tokens_ptr[i_docs + 1] - base
    G = rt.gathered(B_z, n, n_K)  # the item's rows as gather stored them
    rt.rows_dot(G, A_z, s_z[:n])  # s_n = Σ_c exp λ_nc
    value = 0.0
    for r in range(n):
        value += tokens_weight[base + r] * np.log(s_z[r])
    return value


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def item_elbo_without_z(
        i_docs,
        n_K,
        alpha,
        E_theta_log,
        lgamma_sum_alpha,
        lgamma_alpha,
        lam_theta_log,
):
    """One item's share of the ELBO without the terms of z (collapsed_z adds them at their optimum)."""
    value = 0.0
    for t_k in range(n_K):
        value += alpha * E_theta_log[i_docs, t_k]
    for t_k in range(n_K):
        value += -E_theta_log[i_docs, t_k]
    value += lgamma_sum_alpha
    for t_k in range(n_K):
        value += -lgamma_alpha
    value += (rt.dirichlet_log_normalizer(lam_theta_log[i_docs]) - rt.frobenius(lam_theta_log[i_docs], E_theta_log[i_docs]))
    return value


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def extrapolate(
        i_docs,
        first_lam_theta_log,
        middle_lam_theta_log,
        lam_theta_log,
        point_lam_theta_log,
        X_theta_log,
):
    """SQUAREM (Varadhan & Roland 2008, SqS3) on the item's iterated locals: from s₀
    (first_*), s₁ = F(s₀) (middle_*) and s₂ = F(s₁) (the state) of the last two sweeps,
    s′ = s₀ − 2α·r + α²·v with r = s₁ − s₀, v = s₂ − 2·s₁ + s₀, α = −‖r‖/‖v‖ ≤ −1, halved
    towards −1 until every natural parameter is in its family's domain; then E[t] of s′.
    """
    r2, v2 = rt.squarem_norms(first_lam_theta_log, middle_lam_theta_log, lam_theta_log[i_docs])
    step = rt.squarem_step(r2, v2)
    while step < -1.0:
        inside = rt.squarem_point(first_lam_theta_log, middle_lam_theta_log, lam_theta_log[i_docs], step, point_lam_theta_log, -1.0, np.inf)
        if inside:
            lam_theta_log[i_docs] = point_lam_theta_log
            rt.dirichlet_exp_expected(lam_theta_log[i_docs], X_theta_log[i_docs])
            return
        step = rt.backtrack(step)  # outside a domain: α halfway towards −1 (the plain sweeps' s₂)


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
        tokens_ptr,
        lam_theta_log,
        alpha,
        tokens_weight,
        X_theta_log,
        E_theta_log,
        warm,
        local_sweeps,
        w,
        ET_beta_log,
        XT_beta_log,
        accelerate,
        evaluate,
        lgamma_sum_alpha,
        lgamma_alpha,
        guard,
        item_weight,
        lam_z_onehot_threads,
        E_z_onehot_threads,
        H_z_threads,
        logZ_z_threads,
        A_z_threads,
        S_z_threads,
        B_z_threads,
        s_z_threads,
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
        lam_z_onehot = lam_z_onehot_threads[thread]
        E_z_onehot = E_z_onehot_threads[thread]
        H_z = H_z_threads[thread]
        logZ_z = logZ_z_threads[thread]
        A_z = A_z_threads[thread]
        S_z = S_z_threads[thread]
        B_z = B_z_threads[thread]
        s_z = s_z_threads[thread]
        acc_w_0_t = acc_w_0_threads[thread]
        old_theta = np.empty_like(lam_theta_log[0])  # the previous sweep, for the convergence test
        # the item's previous state, for the restart guard
        keep_lam_theta_log = np.empty_like(lam_theta_log[0])
        # the item's previous state, for the restart guard
        keep_E_theta_log = np.empty_like(E_theta_log[0])
        # the item's previous state, for the restart guard
        keep_X_theta_log = np.empty_like(X_theta_log[0])
        first_lam_theta_log = np.empty_like(lam_theta_log[0])  # SQUAREM: s₀ of the cycle
        middle_lam_theta_log = np.empty_like(lam_theta_log[0])  # SQUAREM: s₁ = F(s₀)
        point_lam_theta_log = np.empty_like(lam_theta_log[0])  # SQUAREM: the extrapolated s′
        elbo = 0.0
        stop_position = (thread + 1) * items.shape[0] // n_threads
        for position in range(thread * items.shape[0] // n_threads, stop_position):
            i_docs = items[position]
            # the next item's memory, asked for while this one computes
            if position + 1 < stop_position and items[position + 1] != i_docs + 1:
                rt.prefetch_row(item_weight, items[position + 1])
                rt.prefetch_row(local_sweeps, items[position + 1])
                rt.prefetch_row(lam_theta_log, items[position + 1])
                rt.prefetch_row(E_theta_log, items[position + 1])
                rt.prefetch_row(X_theta_log, items[position + 1])
                rt.prefetch_rows(w, tokens_ptr[items[position + 1]], tokens_ptr[items[position + 1] + 1])
                rt.prefetch_rows(tokens_weight, tokens_ptr[items[position + 1]], tokens_ptr[items[position + 1] + 1])
            if position + 2 < stop_position and items[position + 2] != i_docs + 2:
                rt.prefetch_row(tokens_ptr, items[position + 2])
            base_tokens = tokens_ptr[i_docs]
            if seeding:  # k-means++ seed items: seed c is all category c
                for i_tokens in range(tokens_ptr[i_docs], tokens_ptr[i_docs + 1]):
                    E_z_onehot[i_tokens - base_tokens] = 0.0
                    if 0 <= seed_category[i_docs] < n_K:
                        E_z_onehot[i_tokens - base_tokens, seed_category[i_docs]] = 1.0
                update_theta(i_docs, True, lam_theta_log, n_K, alpha, tokens_ptr, E_z_onehot, tokens_weight, False, S_z, X_theta_log, False, E_theta_log)
            else:
                if guard:
                    rt.copy_into(keep_lam_theta_log, lam_theta_log[i_docs])
                    rt.copy_into(keep_E_theta_log, E_theta_log[i_docs])
                    rt.copy_into(keep_X_theta_log, X_theta_log[i_docs])
                    gather_z(i_docs, B_z, XT_beta_log, w, tokens_ptr)
                    # the previous state with q(z) at its optimum
                    previous = collapsed_z(i_docs, n_K, A_z, B_z, s_z, X_theta_log, tokens_ptr, tokens_weight) + item_elbo_without_z(i_docs, n_K, alpha, E_theta_log, lgamma_sum_alpha, lgamma_alpha, lam_theta_log)
                if not warm:
                    update_theta(i_docs, False, lam_theta_log, n_K, alpha, tokens_ptr, E_z_onehot, tokens_weight, False, S_z, X_theta_log, False, E_theta_log)
                if not guard:  # the guard gathered them already
                    gather_z(i_docs, B_z, XT_beta_log, w, tokens_ptr)
                # the item's sweeps (MF reports them: FitResult.notes['local_sweeps'])
                local_sweeps[i_docs] = 0
                for sweep in range(max_local_iter):
                    local_sweeps[i_docs] += 1
                    change = 0.0
                    rt.copy_into(old_theta, lam_theta_log[i_docs])
                    if sweep % 2 == 0:  # SQUAREM: a cycle starts
                        rt.copy_into(first_lam_theta_log, lam_theta_log[i_docs])
                    else:
                        rt.copy_into(middle_lam_theta_log, lam_theta_log[i_docs])
                    use_sums_z = sums_z(i_docs, n_K, A_z, S_z, X_theta_log, tokens_ptr, tokens_weight, B_z, s_z)
                    if not use_sums_z:
                        rt.dirichlet_expected_stats(lam_theta_log[i_docs], E_theta_log[i_docs])
                        update_z(i_docs, True, lam_z_onehot, n_K, E_theta_log, w, ET_beta_log, logZ_z, H_z, E_z_onehot, X_theta_log, XT_beta_log, True, tokens_ptr)
                    update_theta(i_docs, True, lam_theta_log, n_K, alpha, tokens_ptr, E_z_onehot, tokens_weight, use_sums_z, S_z, X_theta_log, True, E_theta_log)
                    change += rt.mean_abs_change(lam_theta_log[i_docs], old_theta)
                    if change < local_tol:
                        break
                    if accelerate and sweep % 2 == 1 and sweep + 1 < max_local_iter:
                        extrapolate(i_docs, first_lam_theta_log, middle_lam_theta_log, lam_theta_log, point_lam_theta_log, X_theta_log)
                # E[log ·] of the item, once its sweeps converged
                rt.dirichlet_expected_stats(lam_theta_log[i_docs], E_theta_log[i_docs])
                # q(z) itself, from the converged sweeps
                update_z(i_docs, True, lam_z_onehot, n_K, E_theta_log, w, ET_beta_log, logZ_z, H_z, E_z_onehot, X_theta_log, XT_beta_log, evaluate or guard, tokens_ptr)
                if guard:
                    if rt.weighted_sum(tokens_weight[tokens_ptr[i_docs]:tokens_ptr[i_docs + 1]], logZ_z[:tokens_ptr[i_docs + 1] - tokens_ptr[i_docs]]) + item_elbo_without_z(i_docs, n_K, alpha, E_theta_log, lgamma_sum_alpha, lgamma_alpha, lam_theta_log) < previous - 1e-12 * abs(previous):
                        # the restart settled lower (beyond round-off): keep the previous state
                        lam_theta_log[i_docs] = keep_lam_theta_log
                        E_theta_log[i_docs] = keep_E_theta_log
                        X_theta_log[i_docs] = keep_X_theta_log
                        update_z(i_docs, True, lam_z_onehot, n_K, E_theta_log, w, ET_beta_log, logZ_z, H_z, E_z_onehot, X_theta_log, XT_beta_log, True, tokens_ptr)
            # acc_w_0[k, g0] += onehot(w[docs, tokens]) · q(z[docs, tokens]=g0)  (lda.cem:25:9)
            for i_tokens in range(tokens_ptr[i_docs], tokens_ptr[i_docs + 1]):
                t_k = w[i_tokens]
                for t_g0 in range(n_K):
                    acc_w_0_t[t_k, t_g0] += item_weight[i_docs] * E_z_onehot[i_tokens - base_tokens, t_g0] * tokens_weight[i_tokens]
            # ELBO: local terms and local entropies (a stochastic step has no use for them)
            if evaluate:
                for t_k in range(n_K):
                    elbo += alpha * E_theta_log[i_docs, t_k]
                for t_k in range(n_K):
                    elbo += -E_theta_log[i_docs, t_k]
                elbo += lgamma_sum_alpha
                for t_k in range(n_K):
                    elbo += -lgamma_alpha
                for i_tokens in range(tokens_ptr[i_docs], tokens_ptr[i_docs + 1]):
                    for t_k in range(n_K):
                        elbo += E_z_onehot[i_tokens - base_tokens, t_k] * E_theta_log[i_docs, t_k] * tokens_weight[i_tokens]
                elbo += (rt.dirichlet_log_normalizer(lam_theta_log[i_docs]) - rt.frobenius(lam_theta_log[i_docs], E_theta_log[i_docs]))
                for i_tokens in range(tokens_ptr[i_docs], tokens_ptr[i_docs + 1]):
                    elbo += tokens_weight[i_tokens] * (H_z[i_tokens - base_tokens])
        shares_total += elbo  # summed in share order, as rt.run_shares sums
    return shares_total


@njit(cache=True, nogil=True, error_model="numpy")
def evidence_z(i_docs, lam_z_onehot, n_K, w, ET_beta_log, tokens_ptr):
    """lam_z_onehot[row, c] = exp(λ_c − max_c λ_c), λ the messages to z from data and globals
    (every message but the integrated-out proportions'): the part of its conditional that
    stays fixed during a Gibbs or CVB0 step.
    """
    base_tokens = tokens_ptr[i_docs]
    for i_tokens in range(tokens_ptr[i_docs], tokens_ptr[i_docs + 1]):
        lam_z_onehot[i_tokens - base_tokens] = 0.0
        # from w ~ Categorical (lda.cem:25:9)
        t_k = w[i_tokens]
        for t_g0 in range(n_K):
            lam_z_onehot[i_tokens - base_tokens, t_g0] += ET_beta_log[t_k, t_g0]
        top = lam_z_onehot[i_tokens - base_tokens].max()
        for t_c in range(n_K):
            lam_z_onehot[i_tokens - base_tokens, t_c] = np.exp(lam_z_onehot[i_tokens - base_tokens, t_c] - top)


@njit(cache=True, nogil=True, error_model="numpy")
def local_step_gibbs(
        items,
        sweeps,
        burn_in,
        lam_theta_log,
        n_K,
        alpha,
        tokens_ptr,
        E_z_onehot,
        tokens_weight,
        S_z,
        X_theta_log,
        E_theta_log,
        lam_z_onehot,
        w,
        ET_beta_log,
        item_weight,
        acc_w_0,
):
    """Gibbs local step: each item's assignments sampled from their conditionals with theta integrated out,
    `sweeps` sweeps, q(z) = the one-hot counts averaged over the sweeps after burn_in (Mimno et al. 2012).

        p(z_i = c | z_¬i, y, β) ∝ (α_c + n_¬i,c of theta) · exp(Σ_children log p(y | z_i = c, β))_c

    Then the sufficient statistics, as local_step.
    """
    p_z = np.empty(n_K)
    assign_z = np.empty(64, np.int64)  # one assignment per token instance, grown as needed
    for position in range(items.shape[0]):
        i_docs = items[position]
        base_tokens = tokens_ptr[i_docs]
        # the proportions' prior: λ = α − 1, so α_c + n_c = λ_c + 1
        update_theta(i_docs, False, lam_theta_log, n_K, alpha, tokens_ptr, E_z_onehot, tokens_weight, False, S_z, X_theta_log, False, E_theta_log)
        # the fixed part of the conditional
        evidence_z(i_docs, lam_z_onehot, n_K, w, ET_beta_log, tokens_ptr)
        needed_z = 0
        for i_tokens in range(tokens_ptr[i_docs], tokens_ptr[i_docs + 1]):
            needed_z += int(tokens_weight[i_tokens] + 0.5)
        if needed_z > assign_z.shape[0]:
            assign_z = np.empty(2 * needed_z, np.int64)
        # start: each token drawn given the ones before it
        position_z = 0
        for i_tokens in range(tokens_ptr[i_docs], tokens_ptr[i_docs + 1]):
            E_z_onehot[i_tokens - base_tokens] = 0.0
            for j in range(int(tokens_weight[i_tokens] + 0.5)):
                total = 0.0
                for t_c in range(n_K):
                    p_z[t_c] = (lam_theta_log[i_docs, t_c] + 1.0) * lam_z_onehot[i_tokens - base_tokens, t_c]
                    total += p_z[t_c]
                uniform = np.random.random() * total
                t_c = 0
                cumulative = p_z[0]
                while cumulative < uniform and t_c < n_K - 1:
                    t_c += 1
                    cumulative += p_z[t_c]
                assign_z[position_z] = t_c
                lam_theta_log[i_docs, t_c] += 1.0
                position_z += 1
        for sweep in range(sweeps):
            position_z = 0
            for i_tokens in range(tokens_ptr[i_docs], tokens_ptr[i_docs + 1]):
                for j in range(int(tokens_weight[i_tokens] + 0.5)):
                    t_c = assign_z[position_z]
                    lam_theta_log[i_docs, t_c] -= 1.0
                    total = 0.0
                    for t_c in range(n_K):
                        p_z[t_c] = (lam_theta_log[i_docs, t_c] + 1.0) * lam_z_onehot[i_tokens - base_tokens, t_c]
                        total += p_z[t_c]
                    uniform = np.random.random() * total
                    t_c = 0
                    cumulative = p_z[0]
                    while cumulative < uniform and t_c < n_K - 1:
                        t_c += 1
                        cumulative += p_z[t_c]
                    assign_z[position_z] = t_c
                    lam_theta_log[i_docs, t_c] += 1.0
                    if sweep >= burn_in:
                        E_z_onehot[i_tokens - base_tokens, t_c] += 1.0
                    position_z += 1
        for i_tokens in range(tokens_ptr[i_docs], tokens_ptr[i_docs + 1]):
            instances = int(tokens_weight[i_tokens] + 0.5)
            if instances > 0:
                E_z_onehot[i_tokens - base_tokens] /= instances * (sweeps - burn_in)
            else:
                E_z_onehot[i_tokens - base_tokens] = lam_z_onehot[i_tokens - base_tokens] / lam_z_onehot[i_tokens - base_tokens].sum()
        # the proportions' mean-field update from the final q(z)
        update_theta(i_docs, True, lam_theta_log, n_K, alpha, tokens_ptr, E_z_onehot, tokens_weight, False, S_z, X_theta_log, False, E_theta_log)
        # acc_w_0[k, g0] += onehot(w[docs, tokens]) · q(z[docs, tokens]=g0)  (lda.cem:25:9)
        for i_tokens in range(tokens_ptr[i_docs], tokens_ptr[i_docs + 1]):
            t_k = w[i_tokens]
            for t_g0 in range(n_K):
                acc_w_0[t_k, t_g0] += item_weight[i_docs] * E_z_onehot[i_tokens - base_tokens, t_g0] * tokens_weight[i_tokens]


@njit(cache=True, nogil=True, error_model="numpy")
def local_step_cvb0(
        items,
        max_local_iter,
        local_tol,
        lam_theta_log,
        n_K,
        alpha,
        tokens_ptr,
        E_z_onehot,
        tokens_weight,
        S_z,
        X_theta_log,
        E_theta_log,
        lam_z_onehot,
        w,
        ET_beta_log,
        item_weight,
        acc_w_0,
):
    """CVB0 local step: each item's q(z) updated with theta integrated out, until the mean absolute
    change of q(z) is below local_tol (Asuncion et al. 2009).

        q(z_i = c) ∝ (α_c + n_¬i,c of theta) · exp(Σ_children E[log p(y | z_i = c, β)])_c

    Then the sufficient statistics, as local_step.
    """
    p_z = np.empty(n_K)
    for position in range(items.shape[0]):
        i_docs = items[position]
        base_tokens = tokens_ptr[i_docs]
        # the proportions' prior: λ = α − 1, so α_c + n_c = λ_c + 1
        update_theta(i_docs, False, lam_theta_log, n_K, alpha, tokens_ptr, E_z_onehot, tokens_weight, False, S_z, X_theta_log, False, E_theta_log)
        # the fixed part of the conditional
        evidence_z(i_docs, lam_z_onehot, n_K, w, ET_beta_log, tokens_ptr)
        # start: each row given the ones before it
        for i_tokens in range(tokens_ptr[i_docs], tokens_ptr[i_docs + 1]):
            total = 0.0
            for t_c in range(n_K):
                p_z[t_c] = (lam_theta_log[i_docs, t_c] + 1.0) * lam_z_onehot[i_tokens - base_tokens, t_c]
                total += p_z[t_c]
            w_row = tokens_weight[i_tokens]
            for t_c in range(n_K):
                E_z_onehot[i_tokens - base_tokens, t_c] = p_z[t_c] / total
                lam_theta_log[i_docs, t_c] += w_row * E_z_onehot[i_tokens - base_tokens, t_c]
        for sweep in range(max_local_iter):
            change = 0.0
            rows = 0
            for i_tokens in range(tokens_ptr[i_docs], tokens_ptr[i_docs + 1]):
                w_row = tokens_weight[i_tokens]
                own = min(w_row, 1.0)
                total = 0.0
                for t_c in range(n_K):
                    p_z[t_c] = (lam_theta_log[i_docs, t_c] + 1.0 - own * E_z_onehot[i_tokens - base_tokens, t_c]) * lam_z_onehot[i_tokens - base_tokens, t_c]
                    total += p_z[t_c]
                for t_c in range(n_K):
                    delta = p_z[t_c] / total - E_z_onehot[i_tokens - base_tokens, t_c]
                    lam_theta_log[i_docs, t_c] += w_row * delta
                    E_z_onehot[i_tokens - base_tokens, t_c] += delta
                    change += abs(delta)
                rows += 1
            if change < local_tol * max(rows, 1):
                break
        # the proportions' mean-field update from the final q(z)
        update_theta(i_docs, True, lam_theta_log, n_K, alpha, tokens_ptr, E_z_onehot, tokens_weight, False, S_z, X_theta_log, False, E_theta_log)
        # acc_w_0[k, g0] += onehot(w[docs, tokens]) · q(z[docs, tokens]=g0)  (lda.cem:25:9)
        for i_tokens in range(tokens_ptr[i_docs], tokens_ptr[i_docs + 1]):
            t_k = w[i_tokens]
            for t_g0 in range(n_K):
                acc_w_0[t_k, t_g0] += item_weight[i_docs] * E_z_onehot[i_tokens - base_tokens, t_g0] * tokens_weight[i_tokens]


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def update_beta(
        data_scale,
        lam_beta_log,
        n_V,
        eta,
        acc_w_0,
        expect,
        E_beta_log,
        n_K,
        XT_beta_log,
        ET_beta_log,
):
    """q(beta[k]) = Dirichlet(α)
        α_v = eta + Σ_{d,n} [w[d, n] = v]·q(z[d, n] = k)

    (lda.cem:19:5)
    """
    for i_topics in range(n_K):
        lam_beta_log[i_topics] = 0.0
        # from beta ~ Dirichlet (lda.cem:19:5)
        for t_k in range(n_V):
            lam_beta_log[i_topics, t_k] += eta
        # from beta ~ Dirichlet (lda.cem:19:5)
        for t_k in range(n_V):
            lam_beta_log[i_topics, t_k] += -1.0
        # from w ~ Categorical (lda.cem:25:9)
        for t_k in range(n_V):
            lam_beta_log[i_topics, t_k] += data_scale * acc_w_0[t_k, i_topics]
        if expect:  # a stochastic step mixes λ first (λ̂ may be invalid)
            rt.dirichlet_expected_stats(lam_beta_log[i_topics], E_beta_log[i_topics])
    if expect:
        # E[log x] ≤ 0: exp without a library call
        rt.transpose_exp(E_beta_log, ET_beta_log, XT_beta_log, True)


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def refresh_globals(lam_beta_log, E_beta_log, n_K, XT_beta_log, ET_beta_log):
    """Expected statistics of the globals from their natural parameters."""
    for i_topics in range(n_K):
        rt.dirichlet_expected_stats(lam_beta_log[i_topics], E_beta_log[i_topics])
    # E[log x] ≤ 0: exp without a library call
    rt.transpose_exp(E_beta_log, ET_beta_log, XT_beta_log, True)


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def elbo_global(n_K, n_V, eta, E_beta_log, lgamma_sum_eta, lgamma_eta, acc_w_0, lam_beta_log):
    """ELBO terms of the global factors (see elbo_terms in the README)."""
    elbo = 0.0
    # E[log p(beta | ...)]  (lda.cem:19:5)
    for i_topics in range(n_K):
        for t_k in range(n_V):
            elbo += eta * E_beta_log[i_topics, t_k]
    for i_topics in range(n_K):
        for t_k in range(n_V):
            elbo += -E_beta_log[i_topics, t_k]
    for i_topics in range(n_K):
        elbo += lgamma_sum_eta
    for i_topics in range(n_K):
        for t_k in range(n_V):
            elbo += -lgamma_eta
    # E[log p(theta | ...)]  (lda.cem:22:5)
    # E[log p(z | ...)]  (lda.cem:24:9)
    # E[log p(w | ...)]  (lda.cem:25:9)
    for t_g0 in range(n_K):
        for t_k in range(n_V):
            elbo += acc_w_0[t_k, t_g0] * E_beta_log[t_g0, t_k]
    # entropy of q(beta)
    for i_topics in range(n_K):
        elbo += rt.dirichlet_log_normalizer(lam_beta_log[i_topics]) - rt.frobenius(lam_beta_log[i_topics], E_beta_log[i_topics])
    return elbo


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def klc_stats(
        share_start,
        share_stop,
        n_threads,
        items,
        theta_z,
        tokens_ptr,
        lam_theta_log,
        n_K,
        alpha,
        tokens_weight,
        X_theta_log,
        E_theta_log,
        item_weight,
        w,
        lgamma_sum_alpha,
        lgamma_alpha,
        lam_z_onehot_threads,
        E_z_onehot_threads,
        H_z_threads,
        logZ_z_threads,
        A_z_threads,
        S_z_threads,
        B_z_threads,
        s_z_threads,
        acc_w_0_threads,
):
    """KLC statistics: q(Z) = softmax(θ), each collapsed local's mean-field update given q(Z),
    and the collapsed globals' sufficient statistics (accumulators).
    Returns the ELBO terms that involve only local variables and data.
    """
    shares_total = 0.0
    for thread in range(share_start, share_stop):  # one call runs these shares, one after another
        lam_z_onehot = lam_z_onehot_threads[thread]
        E_z_onehot = E_z_onehot_threads[thread]
        H_z = H_z_threads[thread]
        logZ_z = logZ_z_threads[thread]
        A_z = A_z_threads[thread]
        S_z = S_z_threads[thread]
        B_z = B_z_threads[thread]
        s_z = s_z_threads[thread]
        acc_w_0_t = acc_w_0_threads[thread]
        elbo = 0.0
        stop_position = (thread + 1) * items.shape[0] // n_threads
        for position in range(thread * items.shape[0] // n_threads, stop_position):
            i_docs = items[position]
            # the next item's memory, asked for while this one computes
            if position + 1 < stop_position and items[position + 1] != i_docs + 1:
                rt.prefetch_row(item_weight, items[position + 1])
                rt.prefetch_row(lam_theta_log, items[position + 1])
                rt.prefetch_row(E_theta_log, items[position + 1])
                rt.prefetch_row(X_theta_log, items[position + 1])
                rt.prefetch_rows(w, tokens_ptr[items[position + 1]], tokens_ptr[items[position + 1] + 1])
                rt.prefetch_rows(tokens_weight, tokens_ptr[items[position + 1]], tokens_ptr[items[position + 1] + 1])
            if position + 2 < stop_position and items[position + 2] != i_docs + 2:
                rt.prefetch_row(tokens_ptr, items[position + 2])
            base_tokens = tokens_ptr[i_docs]
            # q(z) = softmax(θ) per row
            for i_tokens in range(tokens_ptr[i_docs], tokens_ptr[i_docs + 1]):
                lam_z_onehot[i_tokens - base_tokens] = theta_z[i_tokens]
                logZ_z[i_tokens - base_tokens] = rt.categorical_expected_stats(lam_z_onehot[i_tokens - base_tokens], E_z_onehot[i_tokens - base_tokens])
                # H = log Σ_c exp θ_c − Σ_c θ_c q_c
                H_z[i_tokens - base_tokens] = logZ_z[i_tokens - base_tokens] - rt.frobenius(lam_z_onehot[i_tokens - base_tokens], E_z_onehot[i_tokens - base_tokens])
            # the collapsed locals at their optimum given q(Z): q*(X) (eq. 5)
            update_theta(i_docs, True, lam_theta_log, n_K, alpha, tokens_ptr, E_z_onehot, tokens_weight, False, S_z, X_theta_log, False, E_theta_log)
            # acc_w_0[k, g0] += onehot(w[docs, tokens]) · q(z[docs, tokens]=g0)  (lda.cem:25:9)
            for i_tokens in range(tokens_ptr[i_docs], tokens_ptr[i_docs + 1]):
                t_k = w[i_tokens]
                for t_g0 in range(n_K):
                    acc_w_0_t[t_k, t_g0] += item_weight[i_docs] * E_z_onehot[i_tokens - base_tokens, t_g0] * tokens_weight[i_tokens]
            # ELBO: local terms and local entropies
            for t_k in range(n_K):
                elbo += alpha * E_theta_log[i_docs, t_k]
            for t_k in range(n_K):
                elbo += -E_theta_log[i_docs, t_k]
            elbo += lgamma_sum_alpha
            for t_k in range(n_K):
                elbo += -lgamma_alpha
            for i_tokens in range(tokens_ptr[i_docs], tokens_ptr[i_docs + 1]):
                for t_k in range(n_K):
                    elbo += E_z_onehot[i_tokens - base_tokens, t_k] * E_theta_log[i_docs, t_k] * tokens_weight[i_tokens]
            elbo += (rt.dirichlet_log_normalizer(lam_theta_log[i_docs]) - rt.frobenius(lam_theta_log[i_docs], E_theta_log[i_docs]))
            for i_tokens in range(tokens_ptr[i_docs], tokens_ptr[i_docs + 1]):
                elbo += tokens_weight[i_tokens] * (H_z[i_tokens - base_tokens])
        shares_total += elbo  # summed in share order, as rt.run_shares sums
    return shares_total


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def klc_gradient(
        share_start,
        share_stop,
        n_threads,
        items,
        theta_z,
        tokens_ptr,
        natgrad_z,
        grad_z,
        n_K,
        E_theta_log,
        w,
        ET_beta_log,
        X_theta_log,
        XT_beta_log,
        tokens_weight,
        lam_z_onehot_threads,
        E_z_onehot_threads,
        H_z_threads,
        logZ_z_threads,
        A_z_threads,
        S_z_threads,
        B_z_threads,
        s_z_threads,
):
    """KLC gradients at θ, with the collapsed variables at q*(X) (klc_stats and the global updates
    first): natgrad = θ̂ − θ (eq. 15), grad = w (diag(q) − q qᵀ) natgrad.
    Returns ⟨natgrad, grad⟩, the squared Riemannian norm (eq. 16).
    """
    shares_total = 0.0
    for thread in range(share_start, share_stop):  # one call runs these shares, one after another
        lam_z_onehot = lam_z_onehot_threads[thread]
        E_z_onehot = E_z_onehot_threads[thread]
        H_z = H_z_threads[thread]
        logZ_z = logZ_z_threads[thread]
        A_z = A_z_threads[thread]
        S_z = S_z_threads[thread]
        B_z = B_z_threads[thread]
        s_z = s_z_threads[thread]
        norm = 0.0
        stop_position = (thread + 1) * items.shape[0] // n_threads
        for position in range(thread * items.shape[0] // n_threads, stop_position):
            i_docs = items[position]
            # the next item's memory, asked for while this one computes
            if position + 1 < stop_position and items[position + 1] != i_docs + 1:
                rt.prefetch_row(E_theta_log, items[position + 1])
                rt.prefetch_row(X_theta_log, items[position + 1])
                rt.prefetch_rows(w, tokens_ptr[items[position + 1]], tokens_ptr[items[position + 1] + 1])
                rt.prefetch_rows(tokens_weight, tokens_ptr[items[position + 1]], tokens_ptr[items[position + 1] + 1])
            if position + 2 < stop_position and items[position + 2] != i_docs + 2:
                rt.prefetch_row(tokens_ptr, items[position + 2])
            base_tokens = tokens_ptr[i_docs]
            # q(Z) = softmax(θ) per row
            for i_tokens in range(tokens_ptr[i_docs], tokens_ptr[i_docs + 1]):
                lam_z_onehot[i_tokens - base_tokens] = theta_z[i_tokens]
                logZ_z[i_tokens - base_tokens] = rt.categorical_expected_stats(lam_z_onehot[i_tokens - base_tokens], E_z_onehot[i_tokens - base_tokens])
                # H = log Σ_c exp θ_c − Σ_c θ_c q_c
                H_z[i_tokens - base_tokens] = logZ_z[i_tokens - base_tokens] - rt.frobenius(lam_z_onehot[i_tokens - base_tokens], E_z_onehot[i_tokens - base_tokens])
            # θ̂ = the mean-field target of q(z) given q*(X)
            update_z(i_docs, True, lam_z_onehot, n_K, E_theta_log, w, ET_beta_log, logZ_z, H_z, E_z_onehot, X_theta_log, XT_beta_log, True, tokens_ptr)
            for i_tokens in range(tokens_ptr[i_docs], tokens_ptr[i_docs + 1]):
                # g̃ = θ̂ − θ
                natgrad_z[i_tokens] = lam_z_onehot[i_tokens - base_tokens] - theta_z[i_tokens]
                # q(z) back to softmax(θ) for the other rows' targets
                lam_z_onehot[i_tokens - base_tokens] = theta_z[i_tokens]
                rt.categorical_expected_stats(lam_z_onehot[i_tokens - base_tokens], E_z_onehot[i_tokens - base_tokens])
                mean = 0.0
                for t_c in range(n_K):
                    mean += E_z_onehot[i_tokens - base_tokens, t_c] * natgrad_z[i_tokens, t_c]
                for t_c in range(n_K):
                    # g = w (diag(q) − q qᵀ) g̃
                    grad_z[i_tokens, t_c] = tokens_weight[i_tokens] * E_z_onehot[i_tokens - base_tokens, t_c] * (natgrad_z[i_tokens, t_c] - mean)
                    norm += grad_z[i_tokens, t_c] * natgrad_z[i_tokens, t_c]
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
    rt.check_memory(bound, {('K', 'V'): 4, ('D', 'K'): 3, ('max(tokens)',): 3, ('max(tokens)', 'K'): 3, ('K',): 2, ('V', 'K'): 1, ('threads', 'V', 'K'): 1, ('D',): 4})
    tokens_ptr, tokens_weight, w = bound.arrays['tokens_ptr'], bound.arrays['tokens_weight'], bound.arrays['w']
    # hyperparameters (defaults from the model file; out of core the fit's current values)
    alpha = rt.hyper_value(hypers, 'alpha', 0.1, (), domain='shape') if share is None else share.alpha
    eta = rt.hyper_value(hypers, 'eta', 0.01, (), domain='shape') if share is None else share.eta
    # known quantities: functions of hyperparameters and data
    lgamma_sum_eta = rt.gammaln(n_V * eta)  # lgamma_sum(repeat(eta, V))
    lgamma_eta = rt.gammaln(eta)  # lgamma(repeat(eta, V))
    lgamma_sum_alpha = rt.gammaln(n_K * alpha)  # lgamma_sum(repeat(alpha, K))
    lgamma_alpha = rt.gammaln(alpha)  # lgamma(repeat(alpha, K))
    # variational parameters (natural, coefficient form) and E[t]
    lam_beta_log, E_beta_log = (np.zeros((n_K, n_V)), np.zeros((n_K, n_V))) if share is None else (share.lam_beta_log, share.E_beta_log)
    lam_theta_log, E_theta_log = np.zeros((n_D, n_K)), np.zeros((n_D, n_K))
    lam_z_onehot, E_z_onehot = np.zeros((rt.max_length(tokens_ptr), n_K)), np.zeros((rt.max_length(tokens_ptr), n_K))
    X_theta_log = np.zeros_like(E_theta_log)  # exp(E[log theta])
    # exp(E[log beta]) and E[log beta], statistic axis first
    XT_beta_log, ET_beta_log = (np.zeros(E_beta_log.shape[::-1]), np.zeros(E_beta_log.shape[::-1])) if share is None else (share.XT_beta_log, share.ET_beta_log)
    H_z = np.zeros(E_z_onehot.shape[0])  # entropy of each row of q(z)
    logZ_z = np.zeros_like(H_z)  # log Σ_c exp λ_c of each row of q(z)
    A_z = np.zeros(n_K)  # the item-constant part of q(z) (see sums_z)
    S_z = np.zeros(n_K)  # Σ_rows w·q(z = c)
    # one item's per-row factors of q(z) (rt.gather_rows)
    B_z = np.zeros(rt.max_length(tokens_ptr) * n_K)
    s_z = np.zeros(rt.max_length(tokens_ptr))  # per-row normalisers
    # sufficient statistics the local step hands to the global step (out of core added up over minibatches)
    acc_w_0 = np.zeros((n_V, n_K)) if share is None else share.acc_w_0
    # the local step's shares: one per thread, fewer for small data
    n_threads = rt.share_count(bound)
    lam_z_onehot_threads, E_z_onehot_threads, H_z_threads, logZ_z_threads, A_z_threads, S_z_threads, B_z_threads, s_z_threads = rt.per_thread(n_threads, lam_z_onehot, E_z_onehot, H_z, logZ_z, A_z, S_z, B_z, s_z)
    acc_w_0_threads = rt.thread_copies(n_threads, acc_w_0) if share is None else share.acc_w_0_threads
    all_items = np.arange(n_D)  # the local step runs over these
    item_weight = np.ones(n_D)  # each item's weight in the statistics (SVI+ perturbs it)
    # each item's inner sweeps in its latest local step
    local_sweeps = np.zeros(n_D, dtype=np.int64)
    seed_category = np.full(n_D, -1)
    if share is not None:  # out of core: a minibatch's state, sharing the fit's
        return rt.State(bound=bound, alpha=alpha, eta=eta, seed_category=seed_category, n_K=n_K, tokens_ptr=tokens_ptr, lam_theta_log=lam_theta_log, tokens_weight=tokens_weight, X_theta_log=X_theta_log, E_theta_log=E_theta_log, local_sweeps=local_sweeps, w=w, ET_beta_log=ET_beta_log, XT_beta_log=XT_beta_log, lgamma_sum_alpha=lgamma_sum_alpha, lgamma_alpha=lgamma_alpha, item_weight=item_weight, lam_z_onehot_threads=lam_z_onehot_threads, E_z_onehot_threads=E_z_onehot_threads, H_z_threads=H_z_threads, logZ_z_threads=logZ_z_threads, A_z_threads=A_z_threads, S_z_threads=S_z_threads, B_z_threads=B_z_threads, s_z_threads=s_z_threads, acc_w_0_threads=acc_w_0_threads, acc_w_0=acc_w_0, E_z_onehot=E_z_onehot, S_z=S_z, lam_z_onehot=lam_z_onehot, lam_beta_log=lam_beta_log, E_beta_log=E_beta_log, n_V=n_V, lgamma_sum_eta=lgamma_sum_eta, lgamma_eta=lgamma_eta, all_items=all_items)
    # start every global at its prior
    update_beta(0.0, lam_beta_log, n_V, eta, acc_w_0, True, E_beta_log, n_K, XT_beta_log, ET_beta_log)
    if init is not None:  # warm start: the globals' natural parameters from an earlier fit
        rt.load_state(init, {'lam_beta_log': lam_beta_log})
        refresh_globals(lam_beta_log, E_beta_log, n_K, XT_beta_log, ET_beta_log)
    start = DEFAULT_START if start is None else start
    if init is None and start == 'seeds':
        # start from k-means++ seed items (see cemodel.runtime.seeding); not part of the ELBO trace
        seed_category = rt.seed_categories(SPEC, bound.arrays, 'docs', n_D, n_K, seed, bound.missing)
        # the globals start from the seed items' statistics alone
        seed_items = np.flatnonzero(seed_category >= 0)
        acc_w_0[...] = 0.0
        rt.run_shares(local_step, lam_z_onehot_threads.shape[0], (True, seed_items, seed_category, max_local_iter, local_tol, n_K, tokens_ptr, lam_theta_log, alpha, tokens_weight, X_theta_log, E_theta_log, False, local_sweeps, w, ET_beta_log, XT_beta_log, False, False, lgamma_sum_alpha, lgamma_alpha, False, item_weight, lam_z_onehot_threads, E_z_onehot_threads, H_z_threads, logZ_z_threads, A_z_threads, S_z_threads, B_z_threads, s_z_threads, acc_w_0_threads,), ((acc_w_0, acc_w_0_threads),))
        update_beta(1.0, lam_beta_log, n_V, eta, acc_w_0, True, E_beta_log, n_K, XT_beta_log, ET_beta_log)
    elif init is None and start == 'random':
        # start from random pseudo-counts on the count-type globals (Hoffman et al. 2010)
        rng = np.random.default_rng(seed)
        lam_beta_log += rng.gamma(100.0, 0.01, lam_beta_log.shape)
        refresh_globals(lam_beta_log, E_beta_log, n_K, XT_beta_log, ET_beta_log)
    elif init is None and start == 'prior':
        raise rt.CemDataError("start: expected 'seeds' or 'random', found 'prior' (from the prior the components start alike and stay alike)")
    elif init is None:
        raise rt.CemDataError(f"start: expected 'seeds' or 'random', found {start!r}")
    return rt.State(bound=bound, alpha=alpha, eta=eta, seed_category=seed_category, n_K=n_K, tokens_ptr=tokens_ptr, lam_theta_log=lam_theta_log, tokens_weight=tokens_weight, X_theta_log=X_theta_log, E_theta_log=E_theta_log, local_sweeps=local_sweeps, w=w, ET_beta_log=ET_beta_log, XT_beta_log=XT_beta_log, lgamma_sum_alpha=lgamma_sum_alpha, lgamma_alpha=lgamma_alpha, item_weight=item_weight, lam_z_onehot_threads=lam_z_onehot_threads, E_z_onehot_threads=E_z_onehot_threads, H_z_threads=H_z_threads, logZ_z_threads=logZ_z_threads, A_z_threads=A_z_threads, S_z_threads=S_z_threads, B_z_threads=B_z_threads, s_z_threads=s_z_threads, acc_w_0_threads=acc_w_0_threads, acc_w_0=acc_w_0, E_z_onehot=E_z_onehot, S_z=S_z, lam_z_onehot=lam_z_onehot, lam_beta_log=lam_beta_log, E_beta_log=E_beta_log, n_V=n_V, lgamma_sum_eta=lgamma_sum_eta, lgamma_eta=lgamma_eta, all_items=all_items)


def _learn(s, learn, rho=1.0, items=slice(None)):
    """Empirical Bayes (Minka 2000): each learned hyperparameter a step rho towards its ELBO maximiser given q."""
    if 'eta' in learn:  # the prior of beta
        s.eta = (1.0 - rho) * s.eta + rho * rt.learn_symmetric_dirichlet(s.eta, s.E_beta_log)
    if 'alpha' in learn:  # the prior of theta
        s.alpha = (1.0 - rho) * s.alpha + rho * rt.learn_symmetric_dirichlet(s.alpha, s.E_theta_log[items])
    # known quantities that depend on hyperparameters
    s.lgamma_sum_eta = rt.gammaln(s.n_V * s.eta)
    s.lgamma_eta = rt.gammaln(s.eta)
    s.lgamma_sum_alpha = rt.gammaln(s.n_K * s.alpha)
    s.lgamma_alpha = rt.gammaln(s.alpha)


def _result(s, trace, converged, seconds, items=True):
    """The posterior in usual parameters, expectations and the state; items=False: the globals only."""
    posterior = {}
    state = {'lam_beta_log': s.lam_beta_log}
    beta__alpha = rt.dirichlet_params(s.lam_beta_log)
    posterior['beta.alpha'] = beta__alpha
    posterior['E[log beta]'] = s.E_beta_log
    if items:  # out of core the state holds one minibatch's items
        theta__alpha = rt.dirichlet_params(s.lam_theta_log)
        posterior['theta.alpha'] = theta__alpha
        posterior['E[log theta]'] = s.E_theta_log
        state['lam_theta_log'] = s.lam_theta_log
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
    return rt.run_shares(local_step, s.lam_z_onehot_threads.shape[0], (seeding, items, s.seed_category, max_local_iter, local_tol, s.n_K, s.tokens_ptr, s.lam_theta_log, s.alpha, s.tokens_weight, s.X_theta_log, s.E_theta_log, warm, s.local_sweeps, s.w, s.ET_beta_log, s.XT_beta_log, accelerate, evaluate, s.lgamma_sum_alpha, s.lgamma_alpha, guard, s.item_weight, s.lam_z_onehot_threads, s.E_z_onehot_threads, s.H_z_threads, s.logZ_z_threads, s.A_z_threads, s.S_z_threads, s.B_z_threads, s.s_z_threads, s.acc_w_0_threads,), ((s.acc_w_0, s.acc_w_0_threads),))


def run_local_step_gibbs(s, items, sweeps, burn_in):
    return local_step_gibbs(items, sweeps, burn_in, s.lam_theta_log, s.n_K, s.alpha, s.tokens_ptr, s.E_z_onehot, s.tokens_weight, s.S_z, s.X_theta_log, s.E_theta_log, s.lam_z_onehot, s.w, s.ET_beta_log, s.item_weight, s.acc_w_0)


def run_local_step_cvb0(s, items, max_local_iter, local_tol):
    return local_step_cvb0(items, max_local_iter, local_tol, s.lam_theta_log, s.n_K, s.alpha, s.tokens_ptr, s.E_z_onehot, s.tokens_weight, s.S_z, s.X_theta_log, s.E_theta_log, s.lam_z_onehot, s.w, s.ET_beta_log, s.item_weight, s.acc_w_0)


def _update_beta(s, data_scale, expect=True):
    update_beta(data_scale, s.lam_beta_log, s.n_V, s.eta, s.acc_w_0, expect, s.E_beta_log, s.n_K, s.XT_beta_log, s.ET_beta_log)


def _after_sample_beta(s):
    s.ET_beta_log[...] = s.E_beta_log.T
    s.XT_beta_log[...] = np.exp(s.E_beta_log.T)


def refresh(s):
    refresh_globals(s.lam_beta_log, s.E_beta_log, s.n_K, s.XT_beta_log, s.ET_beta_log)


def elbo_of_globals(s):
    return elbo_global(s.n_K, s.n_V, s.eta, s.E_beta_log, s.lgamma_sum_eta, s.lgamma_eta, s.acc_w_0, s.lam_beta_log)


GLOBALS = (  # the globals as the stochastic drivers move them
    rt.Global('beta', 'dirichlet', lam=('lam_beta_log',), E=('E_beta_log',),
              update=_update_beta, aux_draws=1, after_sample=_after_sample_beta,
              lazy=rt.LazyColumns('n_V', 'w', 'tokens_ptr', (('acc_w_0', 0),), None, ('ET_beta_log', 'XT_beta_log'), expected=False, alone=True, direct=True)),
)


def fit(data, **options):
    """Batch mean-field VB (options: cemodel.runtime.drivers.mf.fit). One iteration:
        statistics ← 0; elbo = run_local_step(s, s.all_items, ...)  # E-step
        _update_beta(s, 1.0)  # q(beta)
        elbo += elbo_of_globals(s)
    """
    return rt.drivers.mf.fit(_THIS, data, **options)


def fit_svi(data, **options):
    """SVI, SVI+ (options: cemodel.runtime.drivers.svi.fit). One step on a minibatch S:
        statistics ← 0; run_local_step(s, S, ...)
        _update_beta(s, N / len(S), expect=False)  # λ̂ of q(beta)
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
    s.acc_w_0[...] = 0.0
    value = rt.run_shares(klc_stats, s.lam_z_onehot_threads.shape[0], (s.all_items, theta[0], s.tokens_ptr, s.lam_theta_log, s.n_K, s.alpha, s.tokens_weight, s.X_theta_log, s.E_theta_log, s.item_weight, s.w, s.lgamma_sum_alpha, s.lgamma_alpha, s.lam_z_onehot_threads, s.E_z_onehot_threads, s.H_z_threads, s.logZ_z_threads, s.A_z_threads, s.S_z_threads, s.B_z_threads, s.s_z_threads, s.acc_w_0_threads,), ((s.acc_w_0, s.acc_w_0_threads),))
    # the collapsed globals at their optimum given q(Z)
    update_beta(1.0, s.lam_beta_log, s.n_V, s.eta, s.acc_w_0, True, s.E_beta_log, s.n_K, s.XT_beta_log, s.ET_beta_log)
    return value + elbo_global(s.n_K, s.n_V, s.eta, s.E_beta_log, s.lgamma_sum_eta, s.lgamma_eta, s.acc_w_0, s.lam_beta_log)


def _klc_gradient(s, theta, natgrad, grad):
    """natgrad, grad and ⟨natgrad, grad⟩ at θ (call _klc_bound(s, θ) first)."""
    return rt.run_shares(klc_gradient, s.lam_z_onehot_threads.shape[0], (s.all_items, theta[0], s.tokens_ptr, natgrad[0], grad[0], s.n_K, s.E_theta_log, s.w, s.ET_beta_log, s.X_theta_log, s.XT_beta_log, s.tokens_weight, s.lam_z_onehot_threads, s.E_z_onehot_threads, s.H_z_threads, s.logZ_z_threads, s.A_z_threads, s.S_z_threads, s.B_z_threads, s.s_z_threads,), ())


def _klc_shapes(s):
    """The shapes of the softmax parameters θ of q(Z), one per member of KLC_LOCALS."""
    return [(len(s.bound.arrays['tokens_weight']), s.bound.dims['K'],)]


def fit_klc(data, **options):
    """KLC-CG (Hensman et al. 2012): beta, theta integrated out, q(z) by Riemannian CG."""
    return rt.drivers.klc.fit(_THIS, data, **options)
