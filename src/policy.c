/* policy.c: checkpointing policies and the layouts they give -- what a call keeps, block by
 * block, and the memory that takes, planned to the float before anything is allocated.
 *   none        every block keeps what its backward needs
 *   block       keep only each block's input; re-run the block before its backward
 *   every:K     keep every K-th block input; re-run K-block segments
 *   sqrt        every:round(sqrt(depth))
 *   selective   keep matmul outputs (qkv, fc1), re-compute norms, attention, GELU output
 *   budget:B    the least re-computation whose activation plan fits B bytes
 * The policy only changes what is kept; the arithmetic is identical (see block.c). The plans of
 * the calls themselves are their objectives' step tables (objective.h); the training step's plan
 * against a budget is step_plan.c. */
#include "objective.h"
#include "vit_internal.h"
#include "threads.h"
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
    if (!*u || !strcmp(u, "B"))
        mul = 1;
    else if (!strcmp(u, "k") || !strcmp(u, "K") || !strcmp(u, "KB") || !strcmp(u, "kB"))
        mul = 1e3;
    else if (!strcmp(u, "m") || !strcmp(u, "M") || !strcmp(u, "MB"))
        mul = 1e6;
    else if (!strcmp(u, "g") || !strcmp(u, "G") || !strcmp(u, "GB"))
        mul = 1e9;
    else if (!strcmp(u, "KiB"))
        mul = 1024.0;
    else if (!strcmp(u, "MiB"))
        mul = 1024.0 * 1024;
    else if (!strcmp(u, "GiB"))
        mul = 1024.0 * 1024 * 1024;
    else
        return -1;
    double b = v * mul;
    if (b > 1e18) return -1;
    *out = (uint64_t)b;
    return 0;
}

vt_status vt_parse_bytes(const char *text, uint64_t *bytes) {
    if (!text || parse_bytes(text, bytes))
        return vt_fail(VT_ERR_ARG, "'%.60s' is not a byte count (such as 300000000, 300MB or 256MiB)",
                       text ? text : "(null)");
    return VT_OK;
}

/* The policies as vt_policy_parse reads them, for menus, help and errors (the one list). */
static const char *const policy_names[] = { "none", "block", "every:K", "sqrt", "budget:BYTES", "selective" };
const char *vt_policy_name(int i) {
    return i >= 0 && i < (int)(sizeof policy_names / sizeof policy_names[0]) ? policy_names[i] : NULL;
}

vt_status vt_policy_parse(const char *text, vt_policy *p) {
    memset(p, 0, sizeof *p);
    if (!text) return vt_fail(VT_ERR_ARG, "checkpointing policy is NULL");
    if (strlen(text) >= sizeof p->text)
        return vt_fail(VT_ERR_ARG, "unknown checkpointing policy '%.60s'", text);
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
            return vt_fail(VT_ERR_ARG,
                           "budget:BYTES needs a byte count such as 300000000, 300MB or 256MiB, got '%s'",
                           text);
        p->kind = VT_POL_BUDGET;
    } else {
        char names[96] = "";
        for (int i = 0; vt_policy_name(i); i++)
            snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", i ? ", " : "",
                     vt_policy_name(i));
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

/* ---- threads: the count a plan is made for (the attention's per-thread scratch) ---- */

vt_status vt_model_set_threads(vt_model *m, int n) {
    if (!m) return vt_fail(VT_ERR_ARG, "vt_model_set_threads: model is NULL");
    if (n < 0 || n > VT_MAX_THREADS)
        return vt_fail(VT_ERR_ARG, "threads: %d is not in [0, %d]", n, VT_MAX_THREADS);
    if (n != m->threads) m->last.have_fwd = 0; /* what it kept was planned for the old count */
    m->threads = n;
    return VT_OK;
}
int vt_model_threads(const vt_model *m) { return m->threads ? m->threads : vt_threads_max(); }

vt_status vt_model_set_whole_rows(vt_model *m, int on) {
    if (!m) return vt_fail(VT_ERR_ARG, "vt_model_set_whole_rows: model is NULL");
    if (!!on != m->whole_rows) m->last.have_fwd = 0; /* what it kept was planned for the other layout */
    m->whole_rows = !!on;
    return VT_OK;
}
int vt_model_whole_rows(const vt_model *m) { return m ? m->whole_rows : 0; }

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

/* ---- the chains a call runs ---------------------------------------------------------------- */

static void call_chains(const vt_model *m, vt_fn fn, const vt_inputs *in, const vt_chain *c[VT_CHAINS],
                        int T[VT_CHAINS]) {
    for (int k = 0; k < VT_CHAINS; k++) c[k] = NULL, T[k] = 0;
    vt_call_objective(m, fn)->chains(m, fn, in, c, T);
}

uint64_t vt_plan_floats(const vt_model *m, vt_fn fn, const vt_inputs *in, int need_grad,
                        const vt_chain_layout *lays) {
    return vt_call_objective(m, fn)->plan(m, fn, in, need_grad, lays);
}

/* Forward flops the layouts re-compute during the backward (block.c's mirror of the backward:
 * what the recorded step counts). */
double vt_layouts_flops(const vt_model *m, vt_fn fn, const vt_inputs *in, const vt_chain_layout *lays) {
    const vt_chain *cs[VT_CHAINS];
    int T[VT_CHAINS];
    call_chains(m, fn, in, cs, T);
    double f = 0;
    for (int k = 0; k < VT_CHAINS; k++)
        if (cs[k]) f += vt_chain_recompute_flops(cs[k], &lays[k], in->batch, T[k], 1);
    return f;
}

/* ---- the plan of a call, and the budget search ---------------------------------------------------- */

/* No layout yet, planned for the model's thread count (the attention scratch is per thread). */
void vt_layouts_clear(const vt_model *m, vt_chain_layout lays[VT_CHAINS]) {
    memset(lays, 0, VT_CHAINS * sizeof *lays);
    for (int k = 0; k < VT_CHAINS; k++)
        lays[k].threads = vt_model_threads(m), lays[k].whole_rows = m->whole_rows;
}

void vt_layouts_for_policy(const vt_model *m, const vt_policy *p, vt_fn fn, const vt_inputs *in,
                           vt_chain_layout lays[VT_CHAINS]) {
    const vt_chain *cs[VT_CHAINS];
    int T[VT_CHAINS];
    call_chains(m, fn, in, cs, T);
    vt_layouts_clear(m, lays);
    for (int k = 0; k < VT_CHAINS; k++) {
        if (cs[k]) layout_for_policy(p, cs[k], k == 0 && vt_fn_is_inter(fn), &lays[k]);
        lays[k].threads = vt_model_threads(m);
        lays[k].whole_rows = m->whole_rows;
    }
}

/* budget: a single move can raise the peak (it adds a re-computation slot), so search the whole
 * (checkpointed, selective) grid of the encoder, other chains in proportion, and keep the fitting
 * layout with the least re-computed flops. 1 when one fits (into lays), 0 when none does. */
int vt_budget_search(const vt_model *m, vt_fn fn, const vt_inputs *in, int need_grad, uint64_t budget_floats,
                     vt_chain_layout lays[VT_CHAINS]) {
    const vt_chain *cs[VT_CHAINS];
    int T[VT_CHAINS];
    call_chains(m, fn, in, cs, T);
    const vt_chain *c0 = cs[0];
    int d0 = c0->depth;
    double best_cost = -1;
    vt_chain_layout best_lay[VT_CHAINS], tl[VT_CHAINS];
    for (int a = 0; a <= d0; a++)
        for (int s = 0; a + s <= d0; s++) {
            memcpy(tl, lays, sizeof tl);
            for (int k = 0; k < VT_CHAINS; k++) {
                const vt_chain *c = cs[k];
                if (!c) continue;
                int ak = d0 ? (int)lround((double)a * c->depth / d0) : 0;
                int sk = d0 ? (int)lround((double)s * c->depth / d0) : 0;
                if (ak + sk > c->depth) sk = c->depth - ak;
                layout_mix(c, ak, sk, &tl[k]);
            }
            double cost = vt_layouts_flops(m, fn, in, tl);
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
int vt_policy_named(const vt_model *m, vt_fn fn, const vt_inputs *in, int i, vt_policy *p) {
    static const char *first[] = { "block", "selective", "sqrt" };
    if (i < 3) return vt_policy_parse(first[i], p) == VT_OK;
    const vt_chain *cs[VT_CHAINS];
    int T[VT_CHAINS], K = i - 1, deepest = 0;
    call_chains(m, fn, in, cs, T);
    for (int k = 0; k < VT_CHAINS; k++)
        if (cs[k] && cs[k]->depth > deepest) deepest = cs[k]->depth;
    if (K > deepest || K > VT_MAX_DEPTH) return 0;
    char t[24];
    snprintf(t, sizeof t, "every:%d", K);
    return vt_policy_parse(t, p) == VT_OK;
}

int vt_named_policy(const vt_model *m, int i, char text[VT_POLICY_TEXT_MAX]) {
    vt_policy p;
    vt_inputs in;
    memset(&in, 0, sizeof in); /* the chains of the model's own call; their tokens do not matter here */
    if (!m || i < 0 || !vt_policy_named(m, VT_FN_LOSS, &in, i, &p)) return 0;
    snprintf(text, VT_POLICY_TEXT_MAX, "%s", p.text);
    return 1;
}

/* The smallest activation plan any named policy reaches, its layouts and its name. */
uint64_t vt_least_plan(const vt_model *m, vt_fn fn, const vt_inputs *in, int need_grad,
                       vt_chain_layout lays[VT_CHAINS], char name[VT_POLICY_TEXT_MAX]) {
    uint64_t best = UINT64_MAX;
    vt_policy p;
    vt_chain_layout tl[VT_CHAINS];
    for (int i = 0; vt_policy_named(m, fn, in, i, &p); i++) {
        vt_layouts_for_policy(m, &p, fn, in, tl);
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
int vt_resolve(const vt_model *m, const vt_policy *p, vt_fn fn, const vt_inputs *in, int need_grad,
               vt_chain_layout lays[VT_CHAINS]) {
    vt_layouts_for_policy(m, p, fn, in, lays);
    if (p->kind != VT_POL_BUDGET || !need_grad) return 1;
    if (vt_budget_search(m, fn, in, need_grad, p->budget / sizeof(float), lays)) return 1;
    char name[VT_POLICY_TEXT_MAX];
    vt_least_plan(m, fn, in, need_grad, lays, name);
    return 0;
}

vt_status vt_resolve_layouts(const vt_model *m, vt_fn fn, const vt_inputs *in, int need_grad,
                             vt_chain_layout lays[VT_CHAINS]) {
    if (vt_resolve(m, &m->policy, fn, in, need_grad, lays)) return VT_OK;
    char name[VT_POLICY_TEXT_MAX];
    uint64_t best = vt_least_plan(m, fn, in, need_grad, lays, name);
    return vt_fail(VT_ERR_BUDGET,
                   "checkpointing budget of %llu bytes is too small: the smallest "
                   "activation plan needs %llu bytes (policy %s)",
                   (unsigned long long)m->policy.budget, (unsigned long long)(best * sizeof(float)), name);
}

void vt_plan_bytes_of(const vt_model *m, int need_grad, uint64_t act_floats, vt_plan_bytes *out) {
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
    vt_plan_bytes_of(m, need_grad, vt_plan_floats(m, fn, in, need_grad, lays), out);
    return VT_OK;
}
