/* init.c: what training starts from. A seeded generator of our own (same seed, same bits on
 * every platform), the weight initialisation timm and lightly apply, lightly's random masks, and
 * the fixed 2-D sin-cos positional table. */
#include "vit_internal.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- generator: xoshiro128** with splitmix64 seeding (32-bit ops: identical in wasm) ---- */
static uint32_t rotl(uint32_t x, int k) { return (x << k) | (x >> (32 - k)); }

void vt_rng_seed(vt_rng *r, uint64_t seed) {
    for (int i = 0; i < 4; i++) {
        seed += 0x9E3779B97F4A7C15ull;
        uint64_t z = seed;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        r->s[i] = (uint32_t)(z ^ (z >> 31));
    }
    if (!(r->s[0] | r->s[1] | r->s[2] | r->s[3])) r->s[0] = 1;
}

uint32_t vt_rng_u32(vt_rng *r) {
    uint32_t *s = r->s, res = rotl(s[1] * 5, 7) * 9, t = s[1] << 9;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 11);
    return res;
}

/* uniform in [0, 1) with 24 random bits: exactly representable in float */
float vt_rng_uniform(vt_rng *r) { return (float)(vt_rng_u32(r) >> 8) * (1.0f / 16777216.0f); }

float vt_rng_normal(vt_rng *r) { /* Box-Muller in double, rounded once */
    double u1 = ((double)(vt_rng_u32(r) >> 8) + 1.0) / 16777217.0,
           u2 = (double)(vt_rng_u32(r) >> 8) / 16777216.0;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

static void fill_uniform(vt_rng *r, float *x, size_t n, float bound) {
    for (size_t i = 0; i < n; i++) x[i] = (2.0f * vt_rng_uniform(r) - 1.0f) * bound;
}
static void fill_normal(vt_rng *r, float *x, size_t n, float std) {
    for (size_t i = 0; i < n; i++) x[i] = vt_rng_normal(r) * std;
}
/* timm trunc_normal_(std, a=-2, b=2): absolute bounds, so with std .02 a redraw never happens */
static void fill_trunc_normal(vt_rng *r, float *x, size_t n, float std) {
    for (size_t i = 0; i < n; i++) {
        float v;
        do v = vt_rng_normal(r) * std;
        while (v < -2.0f || v > 2.0f);
        x[i] = v;
    }
}
static void fill(float *x, size_t n, float v) {
    for (size_t i = 0; i < n; i++) x[i] = v;
}

/* ---- initialisation -------------------------------------------------------------------- */

enum { LIN_XAVIER, LIN_TRUNC, LIN_TORCH };

static void init_linear(vt_model *m, vt_rng *r, int w, int b, int scheme) {
    if (w < 0) return;
    const vt_param *p = &m->pt.p[w];
    int64_t out = p->shape[0], in = p->numel / (size_t)out;
    float *W = vt_P(m, w);
    if (scheme == LIN_XAVIER)
        fill_uniform(r, W, p->numel, sqrtf(6.0f / (float)(in + out)));
    else if (scheme == LIN_TRUNC)
        fill_trunc_normal(r, W, p->numel, 0.02f);
    else
        fill_uniform(r, W, p->numel, 1.0f / sqrtf((float)in)); /* kaiming_uniform(a=sqrt 5) */
    if (b >= 0) {
        if (scheme == LIN_TORCH)
            fill_uniform(r, vt_P(m, b), m->pt.p[b].numel, 1.0f / sqrtf((float)in));
        else
            fill(vt_P(m, b), m->pt.p[b].numel, 0.0f);
    }
}
static void init_norm(vt_model *m, int w, int b) {
    if (w >= 0) fill(vt_P(m, w), m->pt.p[w].numel, 1.0f);
    if (b >= 0) fill(vt_P(m, b), m->pt.p[b].numel, 0.0f);
}

static void init_chain(vt_model *m, vt_rng *r, const vt_chain *c, int scheme, float ls) {
    for (int i = 0; i < c->depth; i++) {
        const vt_block_params *p = &c->blk[i];
        init_norm(m, p->n1w, p->n1b);
        init_linear(m, r, p->qkvw, p->qkvb, scheme);
        init_norm(m, p->qnw, p->qnb);
        init_norm(m, p->knw, p->knb);
        init_norm(m, p->anw, p->anb);
        init_linear(m, r, p->projw, p->projb, scheme);
        if (p->ls1 >= 0) fill(vt_P(m, p->ls1), m->pt.p[p->ls1].numel, ls);
        init_norm(m, p->n2w, p->n2b);
        init_linear(m, r, p->fc1w, p->fc1b, scheme);
        init_norm(m, p->mnw, p->mnb);
        init_linear(m, r, p->fc2w, p->fc2b, scheme);
        if (p->ls2 >= 0) fill(vt_P(m, p->ls2), m->pt.p[p->ls2].numel, ls);
    }
}

static void init_sincos(vt_model *m, int pos, int P) {
    const vt_param *p = &m->pt.p[pos];
    int rows = (int)p->shape[1], D = (int)p->shape[2], G = (int)lround(sqrt((double)(rows - P)));
    vt_sincos_table(vt_P(m, pos), D, G, P);
}

vt_status vt_init_weights(vt_model *m, uint64_t seed) {
    if (!m) return vt_fail(VT_ERR_ARG, "vt_init_weights: model is NULL");
    vt_rng r;
    vt_rng_seed(&r, seed);
    const vt_vit_config *c = &m->cfg.enc;
    const vt_encoder *e = &m->enc;
    int lightly = m->cfg.kind == VT_KIND_LIGHTLY || m->cfg.kind == VT_KIND_MAE;
    int scheme = lightly ? LIN_XAVIER : LIN_TRUNC;
    if (c->pos_embed && (m->cfg.kind == VT_KIND_AIM || lightly) && c->embed_dim % 4)
        return vt_fail(VT_ERR_ARG, "the sin-cos pos_embed needs embed_dim divisible by 4 (got %d)",
                       c->embed_dim);
    if (c->pos_embed && (m->cfg.kind == VT_KIND_AIM || lightly) && e->Gh != e->Gw)
        return vt_fail(VT_ERR_ARG,
                       "lightly's sin-cos pos_embed is made for a square grid (this one is %dx%d)", e->Gh,
                       e->Gw);
    /* timm VisionTransformer.__init__ + init_weights */
    const vt_param *pe = &m->pt.p[e->pe_w];
    size_t fan_in = pe->numel / (size_t)pe->shape[0];
    if (lightly) /* lightly: xavier_uniform on the weight viewed as [D, C*p*p] */
        fill_uniform(&r, vt_P(m, e->pe_w), pe->numel, sqrtf(6.0f / (float)(pe->shape[0] + (int64_t)fan_in)));
    else
        fill_uniform(&r, vt_P(m, e->pe_w), pe->numel, 1.0f / sqrtf((float)fan_in));
    if (e->pe_b >= 0) fill_uniform(&r, vt_P(m, e->pe_b), m->pt.p[e->pe_b].numel, 1.0f / sqrtf((float)fan_in));
    if (e->cls >= 0) fill_normal(&r, vt_P(m, e->cls), m->pt.p[e->cls].numel, lightly ? 0.02f : 1e-6f);
    if (e->reg >= 0) fill_normal(&r, vt_P(m, e->reg), m->pt.p[e->reg].numel, 1e-6f);
    if (e->dist >= 0) fill_trunc_normal(&r, vt_P(m, e->dist), m->pt.p[e->dist].numel, 0.02f); /* DeiT */
    if (e->mask_token >= 0) fill(vt_P(m, e->mask_token), m->pt.p[e->mask_token].numel, 0.0f);
    init_norm(m, e->en_w, e->en_b);
    init_norm(m, e->pn_w, e->pn_b);
    init_chain(m, &r, &e->chain, scheme, c->init_values);
    init_norm(m, e->norm_w, e->norm_b);
    if (e->ap.latent >= 0) { /* AttentionPoolLatent: latent trunc_normal_tf(std D^-0.5), timm's Linears */
        const vt_attn_pool *ap = &e->ap;
        fill_trunc_normal(&r, vt_P(m, ap->latent), m->pt.p[ap->latent].numel,
                          1.0f / sqrtf((float)c->embed_dim));
        init_linear(m, &r, ap->qw, ap->qb, scheme);
        init_linear(m, &r, ap->kvw, ap->kvb, scheme);
        init_linear(m, &r, ap->pw, ap->pb, scheme);
        init_norm(m, ap->nw, ap->nb);
        init_linear(m, &r, ap->f1w, ap->f1b, scheme);
        init_linear(m, &r, ap->f2w, ap->f2b, scheme);
    }
    init_norm(m, e->fcn_w, e->fcn_b);
    init_linear(m, &r, e->head_w, e->head_b, scheme);
    init_linear(m, &r, e->hdist_w, e->hdist_b, scheme);
    if (e->pos >= 0) {
        if (lightly || m->cfg.kind == VT_KIND_AIM)
            init_sincos(m, e->pos, c->no_embed_class ? 0 : e->P);
        else
            fill_trunc_normal(&r, vt_P(m, e->pos), m->pt.p[e->pos].numel, 0.02f);
    }
    if (m->cfg.kind == VT_KIND_MAE) {
        init_linear(m, &r, m->de_w, m->de_b, LIN_XAVIER);
        fill_normal(&r, vt_P(m, m->d_mask_token), m->pt.p[m->d_mask_token].numel, 0.02f);
        if (m->cfg.decoder_dim % 4)
            return vt_fail(VT_ERR_ARG, "the decoder's sin-cos table needs decoder_dim divisible by 4");
        init_sincos(m, m->d_pos, e->P);
        init_chain(m, &r, &m->dec, LIN_XAVIER, 0);
        init_norm(m, m->dn_w, m->dn_b);
        init_linear(m, &r, m->pred_w, m->pred_b, LIN_XAVIER);
    }
    if (m->cfg.kind == VT_KIND_AIM) { /* AIMPredictionHead keeps PyTorch's default init */
        init_linear(m, &r, m->h_in_w, -1, LIN_TORCH);
        init_chain(m, &r, &m->head, LIN_TORCH, 0);
        init_norm(m, m->hn_w, m->hn_b);
        init_linear(m, &r, m->h_out_w, -1, LIN_TORCH);
    }
    return VT_OK;
}

/* ---- lightly's random masks --------------------------------------------------------------- */

int vt_mask_keep_count(int L, float mask_ratio, int mask_class_token) {
    int n_keep = (int)((float)(L - (mask_class_token ? 0 : 1)) * (1.0f - mask_ratio));
    if (!mask_class_token) n_keep = n_keep + 1 > 1 ? n_keep + 1 : 1;
    return n_keep > L ? L : n_keep;
}

vt_status vt_random_token_mask(vt_rng *r, int B, int L, float mask_ratio, int mask_class_token,
                               int64_t *idx_keep, int64_t *idx_mask, int *n_keep_out) {
    if (B < 1 || L < 1 || L > 65536 || !(mask_ratio >= 0 && mask_ratio < 1))
        return vt_fail(VT_ERR_ARG, "random_token_mask: batch >= 1, 1 <= L <= 65536, 0 <= mask_ratio < 1");
    int n_keep = vt_mask_keep_count(L, mask_ratio, mask_class_token);
    *n_keep_out = n_keep;
    /* scratch on the heap: this runs before a step, and wasm stacks are small */
    float *noise = malloc((size_t)L * sizeof *noise);
    int *order = malloc((size_t)L * sizeof *order);
    if (!noise || !order) {
        free(noise);
        free(order);
        return vt_fail(VT_ERR_NOMEM, "out of memory: %zu bytes", (size_t)L * 8);
    }
    for (int b = 0; b < B; b++) {
        for (int l = 0; l < L; l++) {
            noise[l] = vt_rng_uniform(r);
            order[l] = l;
        }
        if (!mask_class_token) noise[0] = -1.0f; /* the class token is always kept, first */
        /* stable insertion sort by noise (argsort) */
        for (int i = 1; i < L; i++) {
            int o = order[i], j = i;
            while (j > 0 && noise[order[j - 1]] > noise[o]) {
                order[j] = order[j - 1];
                j--;
            }
            order[j] = o;
        }
        for (int k = 0; k < n_keep; k++) idx_keep[(size_t)b * n_keep + k] = order[k];
        for (int k = n_keep; k < L; k++) idx_mask[(size_t)b * (L - n_keep) + k - n_keep] = order[k];
    }
    free(noise);
    free(order);
    return VT_OK;
}

vt_status vt_random_prefix_mask(vt_rng *r, int B, int N, int max_prefix_length, uint8_t *mask) {
    if (B < 1 || N < 1 || max_prefix_length < 1)
        return vt_fail(VT_ERR_ARG, "random_prefix_mask: batch, N and max_prefix_length must be >= 1");
    for (int b = 0; b < B; b++) {
        int pre = (int)(vt_rng_u32(r) % (uint32_t)max_prefix_length); /* randint(0, max): max excluded */
        for (int j = 0; j < N; j++) mask[(size_t)b * N + j] = j >= pre;
    }
    return VT_OK;
}

/* out [(P + G*G), D]: P zero rows, then for token t = row*G + col:
 * [sin(col w), cos(col w), sin(row w), cos(row w)], each D/4 wide, w_k = 1 / 10000^(k / (D/4)).
 * (meshgrid(w, h) puts the column index in the first half, as lightly's table does.) */
vt_status vt_sincos_table(float *out, int D, int G, int P) {
    if (!out || D <= 0 || D % 4 || G <= 0 || P < 0)
        return vt_fail(
            VT_ERR_ARG,
            "sin-cos table: embed_dim %d must be a positive multiple of 4, grid %d >= 1, prefix %d >= 0", D,
            G, P);
    if ((uint64_t)P + (uint64_t)G * G > VT_MAX_FLOATS / (uint64_t)D) /* 64-bit, no wrap: G*G < 2^62 */
        return vt_fail(VT_ERR_NOMEM, "sin-cos table: %d x %d grid + %d rows of %d exceed the address space",
                       G, G, P, D);
    int q = D / 4;
    memset(out, 0, (size_t)P * D * sizeof(float));
    for (int r = 0; r < G; r++)
        for (int c = 0; c < G; c++) {
            float *o = out + ((size_t)P + (size_t)r * G + c) * D;
            for (int k = 0; k < q; k++) {
                /* float32 like numpy's float32 recipe: omega, then the products */
                float omega = 1.0f / powf(10000.0f, (float)k / (float)q);
                float ac = (float)c * omega, ar = (float)r * omega;
                o[k] = sinf(ac);
                o[q + k] = cosf(ac);
                o[2 * q + k] = sinf(ar);
                o[3 * q + k] = cosf(ar);
            }
        }
    return VT_OK;
}
