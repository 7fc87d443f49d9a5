/* checkpoint.c: gradient-checkpointing policies and how they become per-block storage.
 *   none        every block keeps what its backward needs
 *   block       keep only each block's input; re-run the block before its backward
 *   every:K     keep every K-th block input; re-run K-block segments
 *   sqrt        every:round(sqrt(depth))
 *   selective   keep matmul outputs (qkv, fc1), re-compute norms, attention, GELU output
 *   budget:B    the least re-computation whose activation plan fits B bytes
 * The policy only changes what is kept; the arithmetic is identical (see block.c). */
#include "model.h"
#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

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

int vt_policy_parse(const char *text, vt_policy *p) {
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
        return vt_fail(VT_ERR_ARG, "unknown checkpointing policy '%s' (none, block, every:K, sqrt, "
                                   "budget:BYTES, selective)", text);
    }
    return VT_OK;
}

/* Segments of K blocks: the first block of each keeps its input, the others keep nothing. */
void vt_layout_every(const vt_chain *c, int K, vt_chain_layout *l) {
    if (K > c->depth) K = c->depth > 0 ? c->depth : 1;
    l->seg = K;
    for (int i = 0; i < c->depth; i++) l->store[i] = (i % K == 0) ? VT_STORE_INPUT : VT_STORE_NONE;
}

/* The first blocks kept in full, then n_sel selective, then the last n_ckpt checkpointed one by
 * one (the last block's internals are then handed from the forward to the backward, block.c). */
void vt_layout_mix(const vt_chain *c, int n_ckpt, int n_sel, vt_chain_layout *l) {
    int n_full = c->depth - n_ckpt - n_sel;
    l->seg = 1;
    for (int i = 0; i < c->depth; i++)
        l->store[i] = i < n_full ? VT_STORE_FULL : i < n_full + n_sel ? VT_STORE_SELECTIVE : VT_STORE_INPUT;
}

/* Layout of a chain for a non-budget policy. force_all_inputs: every block output is kept anyway
 * (forward_intermediates), so segments longer than one block would re-compute for nothing. */
void vt_layout_for_policy(const vt_policy *p, const vt_chain *c, int force_all_inputs,
                          vt_chain_layout *l) {
    memset(l, 0, sizeof *l);
    switch (p->kind) {
    case VT_POL_BLOCK: vt_layout_every(c, 1, l); break;
    case VT_POL_EVERY: vt_layout_every(c, force_all_inputs ? 1 : p->every, l); break;
    case VT_POL_SQRT: {
        int k = (int)lround(sqrt((double)c->depth));
        vt_layout_every(c, force_all_inputs || k < 1 ? 1 : k, l);
        break;
    }
    case VT_POL_SELECTIVE: vt_layout_mix(c, 0, c->depth, l); break;
    default: vt_layout_mix(c, 0, 0, l); break; /* none (budget is resolved by the caller) */
    }
}

/* Forward flops of one block per call, and what selective re-computes: used to rank budget
 * choices by re-computation. */
double vt_block_flops(const vt_chain *c, int B, int T, int selective_only) {
    double M = (double)B * T, D = c->D, F = c->F;
    double attn = c->has_attn ? 4.0 * M * T * D : 0;
    double proj = c->has_attn ? 2.0 * M * D * D : 0;
    if (selective_only) return attn + (c->layerscale ? 0 : proj) + 10.0 * M * (D + F);
    return attn + proj + (c->has_attn ? 6.0 * M * D * D : 0) + 4.0 * M * D * F + 10.0 * M * (D + F);
}

int vt_set_grad_checkpointing(vt_model *m, const char *policy) {
    vt_policy p;
    int rc = vt_policy_parse(policy, &p);
    if (rc) return rc;
    m->policy = p;
    m->have_fwd = 0;
    return VT_OK;
}

const char *vt_get_grad_checkpointing(const vt_model *m) { return m->policy.text; }
