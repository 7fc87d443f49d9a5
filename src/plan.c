/* plan.c: what a call needs before it runs -- its inputs checked, the checkpointing policy turned
 * into per-block layouts (the budget search included), and the activation memory planned to the
 * float, so that the arena is sized once and nothing is allocated for a call that cannot run.
 *   none        every block keeps what its backward needs
 *   block       keep only each block's input; re-run the block before its backward
 *   every:K     keep every K-th block input; re-run K-block segments
 *   sqrt        every:round(sqrt(depth))
 *   selective   keep matmul outputs (qkv, fc1), re-compute norms, attention, GELU output
 *   budget:B    the least re-computation whose activation plan fits B bytes
 * The policy only changes what is kept; the arithmetic is identical (see block.c). The plans of
 * the calls themselves are step tables next to the code that allocates (vit.c, objectives.c);
 * vt_plan_train_step answers "does a training step fit, and if not, what would" in one call. */
#include "vit_internal.h"
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- policies ------------------------------------------------------------------------------- */

static int parse_bytes(const char *s, uint64_t *out) {
    char *end;
    if (!isdigit((unsigned char)*s)) return -1;
    double v = strtod(s, &end);
    if (end == s || v < 0) return -1;
    double mul = 1;
    const char *u = end;
    if (!*u || !strcmp(u, "B")) mul = 1;
    else if (!strcmp(u, "k") || !strcmp(u, "K") || !strcmp(u, "KB") || !strcmp(u, "kB")) mul = 1e3;
    else if (!strcmp(u, "m") || !strcmp(u, "M") || !strcmp(u, "MB")) mul = 1e6;
    else if (!strcmp(u, "g") || !strcmp(u, "G") || !strcmp(u, "GB")) mul = 1e9;
    else if (!strcmp(u, "KiB")) mul = 1024.0;
    else if (!strcmp(u, "MiB")) mul = 1024.0 * 1024;
    else if (!strcmp(u, "GiB")) mul = 1024.0 * 1024 * 1024;
    else return -1;
    double b = v * mul;
    if (b > 1e18) return -1;
    *out = (uint64_t)b;
    return 0;
}

vt_status vt_parse_bytes(const char *text, uint64_t *bytes) {
    if (!text || parse_bytes(text, bytes))
        return vt_fail(VT_ERR_ARG, "'%.60s' is not a byte count (such as 300000000, 300MB or 256MiB)", text ? text : "(null)");
    return VT_OK;
}

/* The policies as vt_policy_parse reads them, for menus, help and errors (the one list). */
static const char *const policy_names[] = {"none", "block", "every:K", "sqrt", "budget:BYTES", "selective"};
const char *vt_policy_name(int i) {
    return i >= 0 && i < (int)(sizeof policy_names / sizeof policy_names[0]) ? policy_names[i] : NULL;
}

vt_status vt_policy_parse(const char *text, vt_policy *p) {
    memset(p, 0, sizeof *p);
    if (!text) return vt_fail(VT_ERR_ARG, "checkpointing policy is NULL");
    if (strlen(text) >= sizeof p->text) return vt_fail(VT_ERR_ARG, "unknown checkpointing policy '%.60s'", text);
    strcpy(p->text, text);
    if (!strcmp(text, "none") || !strcmp(text, "false") || !strcmp(text, "off")) {
        p->kind = VT_POL_NONE;
        strcpy(p->text, "none");
    } else if (!strcmp(text, "block") || !strcmp(text, "true") || !strcmp(text, "on")) {
        p->kind = VT_POL_BLOCK; /* timm/lightly set_grad_checkpointing(True) */
        strcpy(p->text, "block");
    } else if (!strcmp(text, "sqrt")) {
        p->kind = VT_POL_SQRT;
    } else if (!strcmp(text, "selective")) {
        p->kind = VT_POL_SELECTIVE;
    } else if (!strncmp(text, "every:", 6)) {
        char *end;
        long k = strtol(text + 6, &end, 10);
        if (end == text + 6 || *end || k < 1 || k > VT_MAX_DEPTH)
            return vt_fail(VT_ERR_ARG, "every:K needs an integer K in 1..%d, got '%s'", VT_MAX_DEPTH, text);
        p->kind = VT_POL_EVERY;
        p->every = (int)k;
    } else if (!strncmp(text, "budget:", 7)) {
        if (parse_bytes(text + 7, &p->budget))
            return vt_fail(VT_ERR_ARG, "budget:BYTES needs a byte count such as 300000000, 300MB or 256MiB, got '%s'", text);
        p->kind = VT_POL_BUDGET;
    } else {
        char names[96] = "";
        for (int i = 0; vt_policy_name(i); i++)
            snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", i ? ", " : "", vt_policy_name(i));
        return vt_fail(VT_ERR_ARG, "unknown checkpointing policy '%s' (%s)", text, names);
    }
    return VT_OK;
}

vt_status vt_set_grad_checkpointing(vt_model *m, const char *policy) {
    vt_policy p;
    vt_status rc = vt_policy_parse(policy, &p);
    if (rc) return rc;
    m->policy = p;
    m->last.have_fwd = 0;
    return VT_OK;
}

const char *vt_get_grad_checkpointing(const vt_model *m) { return m->policy.text; }

/* ---- layouts ---------------------------------------------------------------------------------- */

/* Segments of K blocks: the first block of each keeps its input, the others keep nothing. */
static void layout_every(const vt_chain *c, int K, vt_chain_layout *l) {
    if (K > c->depth) K = c->depth > 0 ? c->depth : 1;
    l->seg = K;
    for (int i = 0; i < c->depth; i++) l->store[i] = (i % K == 0) ? VT_STORE_INPUT : VT_STORE_NONE;
}

/* The first blocks kept in full, then n_sel selective, then the last n_ckpt checkpointed one by
 * one (the last block's internals are then handed from the forward to the backward, block.c). */
static void layout_mix(const vt_chain *c, int n_ckpt, int n_sel, vt_chain_layout *l) {
    int n_full = c->depth - n_ckpt - n_sel;
    l->seg = 1;
    for (int i = 0; i < c->depth; i++)
        l->store[i] = i < n_full ? VT_STORE_FULL : i < n_full + n_sel ? VT_STORE_SELECTIVE : VT_STORE_INPUT;
}

/* Layout of a chain for a non-budget policy. force_all_inputs: every block output is kept anyway
 * (forward_intermediates), so segments longer than one block would re-compute for nothing. */
static void layout_for_policy(const vt_policy *p, const vt_chain *c, int force_all_inputs,
                              vt_chain_layout *l) {
    memset(l, 0, sizeof *l);
    switch (p->kind) {
    case VT_POL_BLOCK: layout_every(c, 1, l); break;
    case VT_POL_EVERY: layout_every(c, force_all_inputs ? 1 : p->every, l); break;
    case VT_POL_SQRT: {
        int k = (int)lround(sqrt((double)c->depth));
        layout_every(c, force_all_inputs || k < 1 ? 1 : k, l);
        break;
    }
    case VT_POL_SELECTIVE: layout_mix(c, 0, c->depth, l); break;
    default: layout_mix(c, 0, 0, l); break; /* none (budget is resolved by the caller) */
    }
}

/* Forward flops of one block per call, and what selective re-computes: used to rank budget
 * choices by re-computation. */
static double block_flops(const vt_chain *c, int B, int T, int selective_only) {
    double M = (double)B * T, D = c->D, F = c->F;
    double attn = c->has_attn ? 4.0 * M * T * D : 0;
    double proj = c->has_attn ? 2.0 * M * D * D : 0;
    if (selective_only) return attn + (c->layerscale ? 0 : proj) + 10.0 * M * (D + F);
    return attn + proj + (c->has_attn ? 6.0 * M * D * D : 0) + 4.0 * M * D * F + 10.0 * M * (D + F);
}

/* ---- which chains a call runs ------------------------------------------------------------------- */

static int is_encoder_fn(vt_fn fn) {
    return fn == VT_FN_ENCODE || fn == VT_FN_FORWARD || fn == VT_FN_TIMM_FORWARD || fn == VT_FN_INTERMEDIATES ||
           fn == VT_FN_INTERMEDIATES_NORM;
}

/* chain k of a call: 0 the encoder, 1 the MAE decoder or the AIM head */
static const vt_chain *chain_k(const vt_model *m, int k) {
    if (k == 0) return &m->enc.chain;
    if (k == 1 && m->cfg.kind == VT_KIND_MAE) return &m->dec;
    if (k == 1 && m->cfg.kind == VT_KIND_AIM) return &m->head;
    return NULL;
}

/* token counts of the chains for a call: encoder, decoder/head (0 = absent) */
static void chain_tokens(const vt_model *m, vt_fn fn, const vt_inputs *in, int T[VT_CHAINS]) {
    T[0] = in->idx_keep ? in->n_keep : m->enc.T_full;
    T[1] = 0;
    if (fn == VT_FN_LOSS && m->cfg.kind == VT_KIND_MAE) T[1] = m->enc.T_full;
    if (fn == VT_FN_LOSS && m->cfg.kind == VT_KIND_AIM) T[1] = m->enc.T_full;
}

/* Forward flops the layouts re-compute during the backward (a selective block its dropped part,
 * a checkpointed block its whole forward). */
static double layouts_flops(const vt_model *m, vt_fn fn, const vt_inputs *in,
                            const vt_chain_layout *lays) {
    int T[VT_CHAINS];
    chain_tokens(m, fn, in, T);
    double f = 0;
    for (int k = 0; k < VT_CHAINS; k++) {
        const vt_chain *c = chain_k(m, k);
        if (!c) continue;
        for (int i = 0; i < c->depth; i++)
            if (lays[k].store[i] != VT_STORE_FULL)
                f += block_flops(c, in->batch, T[k], lays[k].store[i] == VT_STORE_SELECTIVE);
    }
    return f;
}

/* ---- input checks --------------------------------------------------------------------------------- */

/* Every index in [0, L); repeats refused unless allowed (idx_keep is a gather, so lightly takes a
 * repeated index: the token appears twice and its gradients add up; idx_mask is a scatter). */
static vt_status check_index(const int64_t *idx, int B, int K, int L, const char *what, int allow_repeat,
                             uint8_t *seen) {
    if (K <= 0) return vt_fail(VT_ERR_ARG, "%s: %d indices per row (need at least 1)", what, K);
    for (int b = 0; b < B; b++) {
        memset(seen, 0, (size_t)L);
        for (int k = 0; k < K; k++) {
            int64_t v = idx[(size_t)b * K + k];
            if (v < 0 || v >= L)
                return vt_fail(VT_ERR_ARG, "%s[%d][%d] = %lld is out of range [0, %d) (indices address "
                               "the full sequence, prefix tokens included)", what, b, k, (long long)v, L);
            if (seen[v] && !allow_repeat) return vt_fail(VT_ERR_ARG, "%s[%d] repeats index %lld", what, b, (long long)v);
            seen[v] = 1;
        }
    }
    return VT_OK;
}

/* The encoder's inputs; check_values: also the index values (a plan reads only the sizes). */
static vt_status check_encoder_inputs(const vt_model *m, const vt_inputs *in, int causal, int check_values) {
    const vt_encoder *e = &m->enc;
    if (!in) return vt_fail(VT_ERR_ARG, "inputs are NULL");
    if (in->batch < 1) return vt_fail(VT_ERR_ARG, "batch must be >= 1, got %d", in->batch);
    if (check_values && !in->images) return vt_fail(VT_ERR_ARG, "images are NULL");
    int L = e->T_full;
    if (in->idx_mask && in->mask && !causal)
        return vt_fail(VT_ERR_ARG, "idx_mask and mask cannot both be given (lightly raises ValueError)");
    if (causal && (in->idx_mask || in->idx_keep))
        return vt_fail(VT_ERR_ARG, "the masked-causal ViT takes no idx_mask/idx_keep (only mask and is_causal)");
    if (in->idx_mask && e->mask_token < 0)
        return vt_fail(VT_ERR_ARG, "idx_mask needs a mask token (config mask_token)");
    if (in->mask && !causal && e->mask_token < 0)
        return vt_fail(VT_ERR_ARG, "mask needs a mask token (config mask_token)");
    if (in->idx_keep && in->n_keep > VT_MAX_TOKENS) /* repeats allowed: K may exceed L */
        return vt_fail(VT_ERR_ARG, "idx_keep has %d indices per row, more than %d tokens", in->n_keep, VT_MAX_TOKENS);
    if (in->idx_mask && in->n_mask > L)
        return vt_fail(VT_ERR_ARG, "idx_mask has %d indices per row, the sequence has %d tokens", in->n_mask, L);
    if (!check_values) {
        if (in->idx_keep && in->n_keep < 1) return vt_fail(VT_ERR_ARG, "idx_keep: %d indices per row", in->n_keep);
        if (in->idx_mask && in->n_mask < 1) return vt_fail(VT_ERR_ARG, "idx_mask: %d indices per row", in->n_mask);
        return VT_OK;
    }
    uint8_t seen[VT_MAX_TOKENS];
    if (L > VT_MAX_TOKENS) return vt_fail(VT_ERR_ARG, "sequence of %d tokens exceeds %d", L, VT_MAX_TOKENS);
    if (in->idx_mask) {
        vt_status rc = check_index(in->idx_mask, in->batch, in->n_mask, L, "idx_mask", 0, seen);
        if (rc) return rc;
    }
    if (in->idx_keep) {
        vt_status rc = check_index(in->idx_keep, in->batch, in->n_keep, L, "idx_keep", 1, seen);
        if (rc) return rc;
    }
    return VT_OK;
}

/* The MAE / AIM loss's inputs. */
static vt_status check_loss_inputs(const vt_model *m, const vt_inputs *in, int values) {
    if (!in) return vt_fail(VT_ERR_ARG, "inputs are NULL");
    if (m->cfg.kind == VT_KIND_MAE) {
        if (!in->idx_keep || !in->idx_mask)
            return vt_fail(VT_ERR_ARG, "the MAE loss needs idx_keep and idx_mask (random_token_mask)");
        if (in->mask) return vt_fail(VT_ERR_ARG, "the MAE loss takes no bool mask");
        /* the encoder sees idx_keep only (lightly's MAE never passes idx_mask to the encoder) */
        vt_inputs e = *in;
        e.idx_mask = NULL;
        e.n_mask = 0;
        vt_status rc = check_encoder_inputs(m, &e, 0, values);
        if (rc) return rc;
        /* the MAE scatters the encoded tokens back to idx_keep: a repeat would be a race in
         * PyTorch's scatter (which write wins is undefined), so it is refused here */
        if (in->n_keep > m->enc.T_full)
            return vt_fail(VT_ERR_ARG, "idx_keep: %d indices per row, the MAE scatters them into %d tokens",
                           in->n_keep, m->enc.T_full);
        for (int b = 0; values && b < in->batch; b++)
            for (int j = 1; j < in->n_keep; j++)
                if (vt_row_has(in->idx_keep + (size_t)b * in->n_keep, j, in->idx_keep[(size_t)b * in->n_keep + j]))
                    return vt_fail(VT_ERR_ARG, "idx_keep[%d] repeats index %lld: the MAE scatters the encoded tokens "
                                   "back to idx_keep, which needs distinct indices", b,
                                   (long long)in->idx_keep[(size_t)b * in->n_keep + j]);
        if (in->n_mask < 1 || in->n_mask > m->enc.T_full)
            return vt_fail(VT_ERR_ARG, "idx_mask: %d indices per row (1..%d)", in->n_mask, m->enc.T_full);
        if (values) {
            int L = m->enc.T_full, P = m->enc.P;
            for (int b = 0; b < in->batch; b++)
                for (int j = 0; j < in->n_mask; j++) {
                    int64_t v = in->idx_mask[(size_t)b * in->n_mask + j];
                    if (v < P || v >= L)
                        return vt_fail(VT_ERR_ARG, "idx_mask[%d][%d] = %lld: MAE masks patches only, indices %d..%d",
                                       b, j, (long long)v, P, L - 1);
                    if (vt_row_has(in->idx_mask + (size_t)b * in->n_mask, j, v))
                        return vt_fail(VT_ERR_ARG, "idx_mask[%d] repeats index %lld", b, (long long)v);
                }
        }
        return VT_OK;
    }
    if (in->idx_keep || in->idx_mask) return vt_fail(VT_ERR_ARG, "the AIM loss takes a prefix mask, not idx_keep/idx_mask");
    return check_encoder_inputs(m, in, 1, values);
}

vt_status vt_check_call(const vt_model *m, vt_fn fn, const vt_inputs *in, int values) {
    int loss_kind = m->cfg.kind == VT_KIND_MAE || m->cfg.kind == VT_KIND_AIM;
    if (fn == VT_FN_LOSS && !loss_kind && !vt_is_classifier(m))
        return vt_fail(VT_ERR_ARG, "loss needs an MAE or AIM model, or a timm classifier (num_classes > 0)");
    if (!is_encoder_fn(fn) && fn != VT_FN_LOSS) return vt_fail(VT_ERR_ARG, "unknown call %d", (int)fn);
    if (fn == VT_FN_LOSS && !loss_kind) {
        vt_status rc = check_encoder_inputs(m, in, 0, values);
        return rc ? rc : vt_classify_check(m, in, values);
    }
    if (fn == VT_FN_LOSS) return check_loss_inputs(m, in, values);
    vt_status rc = check_encoder_inputs(m, in, vt_causal_kind(m), values);
    if (rc) return rc;
    if (fn == VT_FN_TIMM_FORWARD && (in->idx_mask || in->idx_keep || (in->mask && !vt_causal_kind(m))))
        return vt_fail(VT_ERR_ARG, "timm's forward takes no idx_mask / idx_keep / token mask (lightly's "
                                   "encode / forward do)");
    if (fn == VT_FN_TIMM_FORWARD && strcmp(m->cfg.enc.global_pool, "token") && m->cfg.enc.global_pool[0] &&
        m->enc.T_full <= m->enc.P)
        return vt_fail(VT_ERR_ARG, "%s pooling needs at least one token after the %d prefix tokens",
                       m->cfg.enc.global_pool, m->enc.P);
    if (fn == VT_FN_FORWARD && !strcmp(m->cfg.enc.global_pool, "avg") &&
        (in->idx_keep ? in->n_keep : m->enc.T_full) <= m->enc.P)
        return vt_fail(VT_ERR_ARG, "avg pooling needs at least one token after the %d prefix tokens", m->enc.P);
    return VT_OK;
}

/* ---- the plan of a call, and the budget search ---------------------------------------------------- */

uint64_t vt_plan_floats(const vt_model *m, vt_fn fn, const vt_inputs *in, int need_grad,
                        const vt_chain_layout *lays) {
    if (fn == VT_FN_LOSS && vt_is_classifier(m)) return vt_classify_plan(m, in, need_grad, lays);
    if (fn == VT_FN_LOSS) return vt_loss_plan(m, in, need_grad, lays);
    return vt_encoder_call_plan(m, fn, in, need_grad, &lays[0]);
}

static void layouts_for_policy(const vt_model *m, const vt_policy *p, vt_fn fn,
                               vt_chain_layout lays[VT_CHAINS]) {
    memset(lays, 0, VT_CHAINS * sizeof *lays);
    for (int k = 0; k < VT_CHAINS; k++) {
        const vt_chain *c = chain_k(m, k);
        if (c) layout_for_policy(p, c, k == 0 && vt_fn_is_inter(fn), &lays[k]);
    }
}

/* budget: a single move can raise the peak (it adds a re-computation slot), so search the whole
 * (checkpointed, selective) grid of the encoder, other chains in proportion, and keep the fitting
 * layout with the least re-computed flops. 1 when one fits (into lays), 0 when none does. */
static int budget_search(const vt_model *m, vt_fn fn, const vt_inputs *in, int need_grad,
                         uint64_t budget_floats, vt_chain_layout lays[VT_CHAINS]) {
    int T[VT_CHAINS];
    chain_tokens(m, fn, in, T);
    const vt_chain *c0 = chain_k(m, 0);
    int d0 = c0->depth;
    double best_cost = -1;
    vt_chain_layout best_lay[VT_CHAINS], tl[VT_CHAINS];
    for (int a = 0; a <= d0; a++)
        for (int s = 0; a + s <= d0; s++) {
            double cost = 0;
            memcpy(tl, lays, sizeof tl);
            for (int k = 0; k < VT_CHAINS; k++) {
                const vt_chain *c = chain_k(m, k);
                if (!c) continue;
                int ak = d0 ? (int)lround((double)a * c->depth / d0) : 0;
                int sk = d0 ? (int)lround((double)s * c->depth / d0) : 0;
                if (ak + sk > c->depth) sk = c->depth - ak;
                layout_mix(c, ak, sk, &tl[k]);
                double full = block_flops(c, in->batch, T[k], 0), selc = block_flops(c, in->batch, T[k], 1);
                cost += ak * full + sk * selc;
            }
            if (best_cost >= 0 && cost >= best_cost) continue;
            if (vt_plan_floats(m, fn, in, need_grad, tl) <= budget_floats) {
                best_cost = cost;
                memcpy(best_lay, tl, sizeof best_lay);
            }
        }
    if (best_cost < 0) return 0;
    memcpy(lays, best_lay, sizeof best_lay);
    return 1;
}

/* The named policies in the order they are tried: block, selective, sqrt, then every:K for
 * K = 2.. up to the deepest chain. i past the end: 0. */
static int named_policy(const vt_model *m, int i, vt_policy *p) {
    static const char *first[] = {"block", "selective", "sqrt"};
    if (i < 3) return vt_policy_parse(first[i], p) == VT_OK;
    int K = i - 1, deepest = 0;
    for (int k = 0; k < VT_CHAINS; k++)
        if (chain_k(m, k) && chain_k(m, k)->depth > deepest) deepest = chain_k(m, k)->depth;
    if (K > deepest || K > VT_MAX_DEPTH) return 0;
    char t[24];
    snprintf(t, sizeof t, "every:%d", K);
    return vt_policy_parse(t, p) == VT_OK;
}

int vt_named_policy(const vt_model *m, int i, char text[VT_POLICY_TEXT_MAX]) {
    vt_policy p;
    if (!m || i < 0 || !named_policy(m, i, &p)) return 0;
    snprintf(text, VT_POLICY_TEXT_MAX, "%s", p.text);
    return 1;
}

/* The smallest activation plan any named policy reaches, its layouts and its name. */
static uint64_t least_plan(const vt_model *m, vt_fn fn, const vt_inputs *in, int need_grad,
                           vt_chain_layout lays[VT_CHAINS], char name[VT_POLICY_TEXT_MAX]) {
    uint64_t best = UINT64_MAX;
    vt_policy p;
    vt_chain_layout tl[VT_CHAINS];
    for (int i = 0; named_policy(m, i, &p); i++) {
        layouts_for_policy(m, &p, fn, tl);
        uint64_t f = vt_plan_floats(m, fn, in, need_grad, tl);
        if (f < best) {
            best = f;
            snprintf(name, VT_POLICY_TEXT_MAX, "%s", p.text);
            memcpy(lays, tl, sizeof tl);
        }
    }
    return best;
}

/* Layouts of every chain under policy p. budget: the least re-computation that fits; 0 when
 * none does (lays then hold the smallest plan's layouts). */
static int resolve(const vt_model *m, const vt_policy *p, vt_fn fn, const vt_inputs *in,
                   int need_grad, vt_chain_layout lays[VT_CHAINS]) {
    layouts_for_policy(m, p, fn, lays);
    if (p->kind != VT_POL_BUDGET || !need_grad) return 1;
    if (budget_search(m, fn, in, need_grad, p->budget / sizeof(float), lays)) return 1;
    char name[VT_POLICY_TEXT_MAX];
    least_plan(m, fn, in, need_grad, lays, name);
    return 0;
}

vt_status vt_resolve_layouts(const vt_model *m, vt_fn fn, const vt_inputs *in, int need_grad,
                             vt_chain_layout lays[VT_CHAINS]) {
    if (resolve(m, &m->policy, fn, in, need_grad, lays)) return VT_OK;
    char name[VT_POLICY_TEXT_MAX];
    uint64_t best = least_plan(m, fn, in, need_grad, lays, name);
    return vt_fail(VT_ERR_BUDGET, "checkpointing budget of %llu bytes is too small: the smallest "
                   "activation plan needs %llu bytes (policy %s)", (unsigned long long)m->policy.budget,
                   (unsigned long long)(best * sizeof(float)), name);
}

static void plan_bytes(const vt_model *m, int need_grad, uint64_t act_floats, vt_plan_bytes *out) {
    memset(out, 0, sizeof *out);
    out->params = (uint64_t)m->pt.total * sizeof(float);
    out->grads = need_grad ? (uint64_t)m->pt.gtotal * sizeof(float) : 0;
    out->optimizer = need_grad ? 2 * (uint64_t)m->pt.gtotal * sizeof(float) : 0; /* AdamW m and v */
    out->activations = act_floats * sizeof(float);
    out->total = out->params + out->grads + out->optimizer + out->activations;
}

vt_status vt_plan(const vt_model *m, vt_fn fn, const vt_inputs *in, int need_grad, vt_plan_bytes *out) {
    if (!m || !out) return vt_fail(VT_ERR_ARG, "vt_plan: NULL argument");
    vt_status rc = vt_check_call(m, fn, in, 0);
    if (rc) return rc;
    vt_chain_layout lays[VT_CHAINS];
    rc = vt_resolve_layouts(m, fn, in, need_grad, lays);
    if (rc) return rc;
    plan_bytes(m, need_grad, vt_plan_floats(m, fn, in, need_grad, lays), out);
    return VT_OK;
}

/* ---- a training step against a budget --------------------------------------------------------------- */

/* The sizes vt_train_step gives its loss call: MAE draws random_token_mask (n_keep tokens kept,
 * the rest masked), AIM a prefix mask. Only sizes: the pointers stand for "given". */
static vt_status train_step_inputs(const vt_model *m, int batch, float mask_ratio, vt_inputs *in) {
    static const int64_t idx = 0;
    static const uint8_t mask = 0;
    static const int32_t label = 0;
    memset(in, 0, sizeof *in);
    in->batch = batch;
    int L = m->enc.T_full;
    if (vt_is_classifier(m)) { /* the classifier: labels, no masks */
        in->labels = &label;
    } else if (m->cfg.kind == VT_KIND_MAE) {
        if (!(mask_ratio >= 0 && mask_ratio < 1))
            return vt_fail(VT_ERR_ARG, "mask_ratio must be in [0, 1), got %g", mask_ratio);
        int nk = vt_mask_keep_count(L, mask_ratio, 0);
        if (nk >= L) return vt_fail(VT_ERR_ARG, "mask_ratio %g masks no patch of %d tokens", mask_ratio, L);
        in->idx_keep = &idx;
        in->n_keep = nk;
        in->idx_mask = &idx;
        in->n_mask = L - nk;
    } else {
        in->mask = &mask;
        in->is_causal = 1;
    }
    return VT_OK;
}

/* Among the named policies and the budget search at `avail` bytes: the least re-computation
 * whose plan fits (ties go to the named policy tried first). 0 when none fits. */
static int cheapest_fit(const vt_model *m, const vt_inputs *in, uint64_t avail, vt_policy *best,
                        vt_chain_layout best_lays[VT_CHAINS], double *best_flops) {
    vt_chain_layout tl[VT_CHAINS];
    vt_policy p;
    int found = 0;
    uint64_t avail_floats = avail / sizeof(float);
    for (int i = -1;; i++) { /* -1: none */
        if (i < 0) vt_policy_parse("none", &p);
        else if (!named_policy(m, i, &p)) break;
        layouts_for_policy(m, &p, VT_FN_LOSS, tl);
        if (vt_plan_floats(m, VT_FN_LOSS, in, 1, tl) > avail_floats) continue;
        double f = layouts_flops(m, VT_FN_LOSS, in, tl);
        if (!found || f < *best_flops) {
            found = 1;
            *best = p;
            *best_flops = f;
            memcpy(best_lays, tl, sizeof tl);
        }
    }
    memset(tl, 0, sizeof tl);
    if (budget_search(m, VT_FN_LOSS, in, 1, avail_floats, tl)) {
        double f = layouts_flops(m, VT_FN_LOSS, in, tl);
        if (!found || f < *best_flops) {
            char t[VT_POLICY_TEXT_MAX];
            snprintf(t, sizeof t, "budget:%llu", (unsigned long long)avail);
            vt_policy_parse(t, &p);
            found = 1;
            *best = p;
            *best_flops = f;
            memcpy(best_lays, tl, sizeof tl);
        }
    }
    return found;
}

/* whether some policy fits a step of `batch` images into avail bytes of activations */
static int batch_fits(const vt_model *m, int batch, float mask_ratio, uint64_t avail) {
    vt_inputs in;
    if (train_step_inputs(m, batch, mask_ratio, &in)) return 0;
    vt_chain_layout lays[VT_CHAINS];
    char name[VT_POLICY_TEXT_MAX];
    if (least_plan(m, VT_FN_LOSS, &in, 1, lays, name) <= avail / sizeof(float)) return 1;
    memset(lays, 0, sizeof lays);
    return budget_search(m, VT_FN_LOSS, &in, 1, avail / sizeof(float), lays);
}

vt_status vt_plan_train_step(const vt_model *m, int batch, float mask_ratio, const char *policy,
                             uint64_t budget, vt_step_plan *out) {
    if (!m || !out) return vt_fail(VT_ERR_ARG, "vt_plan_train_step: NULL argument");
    memset(out, 0, sizeof *out);
    if (m->cfg.kind != VT_KIND_MAE && m->cfg.kind != VT_KIND_AIM && !vt_is_classifier(m))
        return vt_fail(VT_ERR_ARG, "training needs an MAE or AIM model, or a timm classifier (num_classes > 0)");
    if (batch < 1) return vt_fail(VT_ERR_ARG, "batch must be >= 1, got %d", batch);
    if (mask_ratio < 0) mask_ratio = vt_trainer_mask_ratio(m);
    vt_policy pol = m->policy;
    vt_status rc = policy ? vt_policy_parse(policy, &pol) : VT_OK;
    if (rc) return rc;
    vt_inputs in;
    rc = train_step_inputs(m, batch, mask_ratio, &in);
    if (!rc) rc = vt_check_call(m, VT_FN_LOSS, &in, 0);
    if (rc) return rc;
    out->tokens_kept = m->cfg.kind == VT_KIND_MAE ? in.n_keep : m->enc.T_full;
    out->tokens_masked = m->cfg.kind == VT_KIND_MAE ? in.n_mask : 0;

    vt_chain_layout lays[VT_CHAINS];
    out->policy_met = resolve(m, &pol, VT_FN_LOSS, &in, 1, lays);
    plan_bytes(m, 1, vt_plan_floats(m, VT_FN_LOSS, &in, 1, lays), &out->bytes);
    out->recompute_flops = layouts_flops(m, VT_FN_LOSS, &in, lays);
    if (!budget) return VT_OK;

    out->fits = out->policy_met && out->bytes.total <= budget;
    uint64_t fixed = out->bytes.params + out->bytes.grads + out->bytes.optimizer;
    uint64_t least = least_plan(m, VT_FN_LOSS, &in, 1, lays, out->least_policy);
    plan_bytes(m, 1, least, &out->least_bytes);
    if (budget <= fixed) return VT_OK; /* parameters and optimizer state alone do not fit */
    uint64_t avail = budget - fixed;
    vt_policy best;
    if (cheapest_fit(m, &in, avail, &best, lays, &out->fit_recompute_flops)) {
        snprintf(out->fit_policy, sizeof out->fit_policy, "%s", best.text);
        plan_bytes(m, 1, vt_plan_floats(m, VT_FN_LOSS, &in, 1, lays), &out->fit_bytes);
        out->max_batch = batch;
        return VT_OK;
    }
    /* the largest batch below that fits under some policy (plans grow with the batch) */
    int lo = 0, hi = batch - 1;
    while (lo < hi) {
        int mid = lo + (hi - lo + 1) / 2;
        if (batch_fits(m, mid, mask_ratio, avail)) lo = mid;
        else hi = mid - 1;
    }
    out->max_batch = lo;
    return VT_OK;
}
