/* train_bench.c: one training step of a ViT (forward with need_grad, backward, zero_grad + AdamW),
 * measured per checkpointing policy, with where its time goes. One source, four builds: native
 * SSE2 and native FMA (build/train_bench, train_bench_fma), wasm SIMD128 and relaxed SIMD
 * (build/wasm/train_bench-{simd,relaxed}.wasm, WASI commands run by bench/wasi_run.mjs;
 * bench/bench.cmake). One thread. A benchmark: it reports, it never fails on a time.
 *
 * Per (preset, objective, batch): one model per policy (same weights, same inputs), and the
 * policies' steps interleaved round by round (none, block, ..., none, block, ...), so that every
 * policy's step sees the same machine. The statistic: ms per step = median over the rounds; the
 * time of a policy against none = median over rounds of the per-round ratio, with its min and max.
 * Also per policy: forward / backward / optimizer parts, images/s, achieved GFLOP/s (model FLOPs
 * below), the planned and measured activation bytes and the total (params + grads + AdamW state +
 * activations), and the step broken down by kernel (matmul forward / backward, attention,
 * layernorm, GELU, optimizer, the rest): the kernels' public names are wrapped at link time
 * (-Wl,--wrap=vt_matmul_forward ...), so the engine itself is measured unchanged.
 *
 * Objectives: "encode" = lightly MaskedVisionTransformerTIMM.encode over all 197 tokens, backward
 * of a fixed random upstream gradient (normal * 1e-3); "mae" = lightly's MAE example
 * (VT_KIND_MAE, mask ratio --mask-ratio, default 0.75: 50 of 197 tokens encoded; decoder as
 * lightly's example examples/pytorch/mae.py: decoder_dim 512, decoder_depth 1, 16 heads,
 * mlp_ratio 4), loss = MSE on the masked patches. No image gradient is asked for (training does
 * not need it).
 *
 * Model FLOPs (multiply+add = 2; matmuls and attention only, norms/GELU/softmax/AdamW ignored;
 * re-computation under checkpointing NOT counted, so that policies compare at equal work):
 *   block(T, D)    = (8 + 4r) T D^2 + 4 T^2 D     (qkv 6TD^2, proj 2TD^2, fc1+fc2 4rTD^2 with r the
 *                                                  mlp ratio: 24 T D^2 at r 4; QK^T, PV)
 *   encode fwd     = 2*N*Kp*D + depth * block(N+1, D)     (N patches of Kp = C P^2 values: 196, 768 at
 *                                                          224 px, patch 16)
 *   mae fwd        = 2*N*Kp*D + depth * block(n_keep, D) + 2*n_keep*D*Dd + block(N+1, Dd)
 *                    + 2*n_mask*Dd*Kp                    (Dd: the decoder's width, 512 here)
 *   step           = B * (3 * fwd - 2*N*Kp*D)    (backward = 2x forward, minus the patch
 *                                                 embedding's input gradient, not computed)
 *
 *   train_bench [--preset NAME]... | [--config JSON] [--kind encode|mae]... [--batch B]...
 *               [--policy P]... [--repeat R] [--warmup W] [--mask-ratio R] [--clock wall|cpu]
 *               [--threads N]   (native builds only: the pool's pthreads)
 *                                                               (JSON to stdout, one object per line) */
#include "bench_util.h"
#include "vitrine.h"
#include "kernels/kernels.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* --clock cpu: the thread's CPU time instead of wall time (to compare variants on a busy machine;
 * the tables use wall time) */
static int cpu_clock = 0;
static double now_ms(void) {
    if (!cpu_clock) return 1e3 * now_s();
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return 1e3 * ((double)t.tv_sec + 1e-9 * t.tv_nsec);
}

/* ---- kernel time, by link-time wrapping of the dispatch functions ---------------------------- */

enum { K_MM_F, K_MM_B, K_ATT_F, K_ATT_B, K_LN_F, K_LN_B, K_GELU_F, K_GELU_B, K_N };
static const char *k_name[K_N] = { "matmul_fwd",    "matmul_bwd",    "attention_fwd", "attention_bwd",
                                   "layernorm_fwd", "layernorm_bwd", "gelu_fwd",      "gelu_bwd" };
static double k_ms[K_N];
/* A kernel called by another (attention's matmuls) counts as the outer kernel's time. */
static int k_depth;
#define TIMED(k, call)                                                                                       \
    do {                                                                                                     \
        if (k_depth++) {                                                                                     \
            call;                                                                                            \
        } else {                                                                                             \
            double t0_ = now_ms();                                                                           \
            call;                                                                                            \
            k_ms[k] += now_ms() - t0_;                                                                       \
        }                                                                                                    \
        k_depth--;                                                                                           \
    } while (0)

void __real_vt_matmul_forward(float *, const float *, const float *, const float *, int, int, int);
void __real_vt_matmul_backward(float *, float *, float *, const float *, const float *, const float *, int,
                               int, int);
void __real_vt_attention_forward(float *, float *, float *, const float *, const float *, int, const float *,
                                 int, const uint8_t *, int, int, int, int, int, float);
void __real_vt_attention_backward(float *, float *, float *, float *, const float *, const float *,
                                  const float *, const float *, int, const float *, int, int, int, int, int,
                                  int, float);
void __real_vt_layernorm_forward(float *, float *, float *, const float *, const float *, const float *, int,
                                 int, float);
void __real_vt_layernorm_backward(float *, float *, float *, const float *, const float *, const float *,
                                  const float *, const float *, int, int);
void __real_vt_gelu_forward(float *, const float *, size_t);
void __real_vt_gelu_backward(float *, const float *, const float *, size_t);

void __wrap_vt_matmul_forward(float *o, const float *i, const float *w, const float *b, int M, int K, int N) {
    TIMED(K_MM_F, __real_vt_matmul_forward(o, i, w, b, M, K, N));
}
void __wrap_vt_matmul_backward(float *di, float *dw, float *db, const float *d, const float *i,
                               const float *w, int M, int K, int N) {
    TIMED(K_MM_B, __real_vt_matmul_backward(di, dw, db, d, i, w, M, K, N));
}
void __wrap_vt_attention_forward(float *o, float *att, float *sc, const float *q, const float *k, int qk_rs,
                                 const float *v, int v_rs, const uint8_t *cm, int B, int T, int H, int hd,
                                 int nt, float s) {
    TIMED(K_ATT_F, __real_vt_attention_forward(o, att, sc, q, k, qk_rs, v, v_rs, cm, B, T, H, hd, nt, s));
}
void __wrap_vt_attention_backward(float *dq, float *dk, float *dv, float *sc, const float *d,
                                  const float *att, const float *q, const float *k, int qk_rs, const float *v,
                                  int v_rs, int B, int T, int H, int hd, int nt, float s) {
    TIMED(K_ATT_B,
          __real_vt_attention_backward(dq, dk, dv, sc, d, att, q, k, qk_rs, v, v_rs, B, T, H, hd, nt, s));
}
void __wrap_vt_layernorm_forward(float *o, float *mean, float *rstd, const float *i, const float *w,
                                 const float *b, int M, int D, float eps) {
    TIMED(K_LN_F, __real_vt_layernorm_forward(o, mean, rstd, i, w, b, M, D, eps));
}
void __wrap_vt_layernorm_backward(float *di, float *dw, float *db, const float *d, const float *i,
                                  const float *w, const float *mean, const float *rstd, int M, int D) {
    TIMED(K_LN_B, __real_vt_layernorm_backward(di, dw, db, d, i, w, mean, rstd, M, D));
}
void __wrap_vt_gelu_forward(float *o, const float *i, size_t n) {
    TIMED(K_GELU_F, __real_vt_gelu_forward(o, i, n));
}
void __wrap_vt_gelu_backward(float *di, const float *i, const float *d, size_t n) {
    TIMED(K_GELU_B, __real_vt_gelu_backward(di, i, d, n));
}

/* ---- model FLOPs -------------------------------------------------------------------------------- */

#define MAE_DEC_DIM   512
#define MAE_DEC_DEPTH 1
#define MAE_DEC_HEADS 16
/* qkv 6TD^2, proj 2TD^2, fc1 + fc2 4rTD^2 (r = mlp_ratio); QK^T and PV 4T^2 D */
static double block_flops(double T, double D, double r) { return (8 + 4 * r) * T * D * D + 4 * T * T * D; }
static double step_flops(const vt_model_config *mc, int B, int mae, int n_keep, int n_mask) {
    double P = mc->enc.patch_size,
           N = (double)(mc->enc.img_size / mc->enc.patch_size) * (mc->enc.img_size / mc->enc.patch_size);
    double D = mc->enc.embed_dim, Kp = mc->enc.in_chans * P * P, L = N + 1, fwd = 2 * N * Kp * D;
    if (!mae)
        fwd += mc->enc.depth * block_flops(L, D, mc->enc.mlp_ratio);
    else {
        double Dd = mc->decoder_dim;
        fwd += mc->enc.depth * block_flops(n_keep, D, mc->enc.mlp_ratio) + 2.0 * n_keep * D * Dd +
               mc->decoder_depth * block_flops(L, Dd, mc->decoder_mlp_ratio) + 2.0 * n_mask * Dd * Kp;
    }
    return B * (3 * fwd - 2 * N * Kp * D);
}

/* ---- the step ---------------------------------------------------------------------------------- */

typedef struct {
    double fwd, bwd, opt, total;
} step_ms;

static int step(vt_model *m, const vt_inputs *in, vt_fn fn, const float *dout, step_ms *t) {
    double t0 = now_ms();
    int rc = vt_forward(m, fn, in, 1);
    double t1 = now_ms();
    const float *d[1] = { dout };
    if (!rc) rc = vt_backward(m, fn == VT_FN_LOSS ? NULL : d, fn == VT_FN_LOSS ? 0 : 1, NULL, 1);
    double t2 = now_ms();
    if (!rc) rc = vt_optimizer_step(m, 1e-4f);
    vt_zero_grad(m);
    double t3 = now_ms();
    t->fwd = t1 - t0, t->bwd = t2 - t1, t->opt = t3 - t2, t->total = t3 - t0;
    return rc;
}

/* median of x[0..n), n <= 64 (x is left as it is) */
static double median(const double *x, int n) {
    double t[64];
    memcpy(t, x, (size_t)n * sizeof(double));
    qsort(t, (size_t)n, sizeof(double), cmp_d);
    return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

int main(int argc, char **argv) {
    const char *presets[8], *policies[16], *kinds[4];
    int np = 0, npol = 0, nb = 0, nk = 0, batches[8], repeat = 3, warmup = 1;
    float mask_ratio = 0.75f;
    const char *config = NULL;
    int threads = 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--preset") && i + 1 < argc && np < 8)
            presets[np++] = argv[++i];
        else if (!strcmp(argv[i], "--kind") && i + 1 < argc && nk < 4)
            kinds[nk++] = argv[++i];
        else if (!strcmp(argv[i], "--batch") && i + 1 < argc && nb < 8)
            batches[nb++] = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--policy") && i + 1 < argc && npol < 16)
            policies[npol++] = argv[++i];
        else if (!strcmp(argv[i], "--repeat") && i + 1 < argc)
            repeat = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--warmup") && i + 1 < argc)
            warmup = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--mask-ratio") && i + 1 < argc)
            mask_ratio = (float)atof(argv[++i]);
        else if (!strcmp(argv[i], "--config") && i + 1 < argc)
            config = argv[++i], presets[0] = "config", np = 1;
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--clock") && i + 1 < argc)
            cpu_clock = !strcmp(argv[++i], "cpu");
        else if (!strcmp(argv[i], "--json")) {
        } else {
            fprintf(stderr, "unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (!np) presets[np++] = "vit_tiny_patch16_224";
    if (!nk) kinds[nk++] = "encode";
    if (!nb) batches[nb++] = 1;
    if (!npol) policies[npol++] = "none";
    if (repeat < 1) repeat = 1;
    if (repeat > 64) repeat = 64;
    const char *build = BENCH_BUILD;
    /* native builds: pthreads (the wasm commands have none: asking for 2 fails, said so) */
    if (threads != 1 && vt_set_threads(threads) != threads) {
        fprintf(stderr, "%s\n", vt_last_error());
        return 1;
    }
    for (int p = 0; p < np; p++)
        for (int k = 0; k < nk; k++)
            for (int b = 0; b < nb; b++) {
                int mae = !strcmp(kinds[k], "mae");
                vt_model_config mc;
                if (config) { /* the model as JSON (a small model: the main job's) */
                    if (vt_model_config_from_json(config, strlen(config), mae ? VT_KIND_MAE : VT_KIND_LIGHTLY,
                                                  &mc)) {
                        fprintf(stderr, "%s\n", vt_last_error());
                        return 1;
                    }
                } else {
                    vt_model_config_default(&mc, mae ? VT_KIND_MAE : VT_KIND_LIGHTLY);
                    if (vt_preset(presets[p], &mc.enc)) {
                        fprintf(stderr, "%s\n", vt_last_error());
                        return 1;
                    }
                    mc.decoder_dim = MAE_DEC_DIM, mc.decoder_depth = MAE_DEC_DEPTH,
                    mc.decoder_heads = MAE_DEC_HEADS;
                }
                mc.enc.mask_token = 1;
                /* one model per policy, same weights: the policies' steps interleave */
                vt_model *models[16] = { 0 };
                int rc = 0;
                vt_adamw_config oc = { 1.5e-4f, 0.9f, 0.95f, 1e-8f, 0.05f };
                for (int q = 0; q < npol && !rc; q++) {
                    rc = vt_model_create(&mc, &models[q]);
                    if (!rc) rc = vt_init_weights(models[q], 1);
                    if (!rc) rc = vt_optimizer_init(models[q], &oc);
                    if (!rc) rc = vt_set_grad_checkpointing(models[q], policies[q]);
                }
                if (rc) {
                    fprintf(stderr, "%s\n", vt_last_error());
                    return 1;
                }
                int B = batches[b], S = mc.enc.img_size, C = mc.enc.in_chans;
                size_t nimg = (size_t)B * C * S * S;
                float *img = malloc(nimg * sizeof(float));
                vt_rng r;
                vt_rng_seed(&r, 7);
                for (size_t i = 0; i < nimg; i++) img[i] = vt_rng_normal(&r);
                int L = (S / mc.enc.patch_size) * (S / mc.enc.patch_size) + 1, n_keep = 0;
                int64_t *keep = malloc((size_t)B * L * 8), *msk = malloc((size_t)B * L * 8);
                vt_random_token_mask(&r, B, L, mask_ratio, 0, keep, msk, &n_keep);
                vt_inputs in = { 0 };
                in.images = img;
                in.batch = B;
                if (mae) {
                    in.idx_keep = keep;
                    in.n_keep = n_keep;
                    in.idx_mask = msk;
                    in.n_mask = L - n_keep;
                }
                vt_fn fn = mae ? VT_FN_LOSS : VT_FN_ENCODE;
                size_t nout = (size_t)B * L * mc.enc.embed_dim;
                float *dout = malloc(nout * sizeof(float));
                for (size_t i = 0; i < nout; i++) dout[i] = vt_rng_normal(&r) * 1e-3f;
                double flops = step_flops(&mc, B, mae, n_keep, L - n_keep);
                vt_plan_bytes pb[16] = { { 0 } };
                int err[16] = { 0 };
                for (int q = 0; q < npol; q++) {
                    step_ms s;
                    err[q] = vt_plan(models[q], fn, &in, 1, &pb[q]);
                    for (int w = 0; w < warmup && !err[q]; w++) err[q] = step(models[q], &in, fn, dout, &s);
                }
                /* rounds: every policy once per round, in turn */
                static double tt[16][64], tf[16][64], tb[16][64], to[16][64], kk[16][K_N];
                memset(kk, 0, sizeof kk);
                for (int i = 0; i < repeat; i++)
                    for (int q = 0; q < npol; q++) {
                        if (err[q]) continue;
                        step_ms s;
                        memset(k_ms, 0, sizeof k_ms);
                        err[q] = step(models[q], &in, fn, dout, &s);
                        tt[q][i] = s.total, tf[q][i] = s.fwd, tb[q][i] = s.bwd, to[q][i] = s.opt;
                        for (int j = 0; j < K_N; j++) kk[q][j] += k_ms[j] / repeat;
                    }
                for (int q = 0; q < npol; q++) {
                    if (err[q]) {
                        printf("{\"build\": \"%s\", \"model\": \"%s\", \"objective\": \"%s\", \"batch\": %d, "
                               "\"policy\": \"%s\", "
                               "\"error\": \"%s\"}\n",
                               build, presets[p], kinds[k], B, policies[q], vt_last_error());
                        fflush(stdout);
                        continue;
                    }
                    vt_arena_stats st;
                    vt_arena_get_stats(models[q], &st);
                    double ratio[64], mean = 0,
                                      ksum = 0; /* "other" = mean step - mean optimizer - mean kernels */
                    for (int i = 0; i < repeat; i++) {
                        ratio[i] = err[0] ? 0 : tt[q][i] / tt[0][i];
                        mean += (tt[q][i] - to[q][i]) / repeat;
                    }
                    double rlo = ratio[0], rhi = ratio[0];
                    for (int i = 1; i < repeat; i++)
                        rlo = ratio[i] < rlo ? ratio[i] : rlo, rhi = ratio[i] > rhi ? ratio[i] : rhi;
                    double ms = median(tt[q], repeat), mf = median(tf[q], repeat), mb = median(tb[q], repeat),
                           mo = median(to[q], repeat);
                    printf("{\"build\": \"%s\", \"model\": \"%s\", \"objective\": \"%s\", \"batch\": %d, "
                           "\"policy\": \"%s\", "
                           "\"threads\": %d, \"mask_ratio\": %.3f, \"repeat\": %d, \"ms_per_step\": %.3f, "
                           "\"fwd_ms\": %.3f, \"bwd_ms\": %.3f, \"opt_ms\": %.3f, "
                           "\"time_vs_first_policy\": %.4f, \"time_vs_first_min\": %.4f, "
                           "\"time_vs_first_max\": %.4f, "
                           "\"images_per_s\": %.4f, \"step_gflop\": %.4f, \"gflops\": %.3f, "
                           "\"activation_bytes\": %llu, \"planned_activation_bytes\": %llu, \"param_bytes\": "
                           "%llu, "
                           "\"grad_bytes\": %llu, \"optimizer_bytes\": %llu, \"total_bytes\": %llu, "
                           "\"kernels_ms\": {",
                           build, presets[p], kinds[k], B, policies[q], threads, mae ? mask_ratio : 0.0,
                           repeat, ms, mf, mb, mo, median(ratio, repeat), rlo, rhi, B * 1e3 / ms, flops / 1e9,
                           flops / ms / 1e6, (unsigned long long)st.peak,
                           (unsigned long long)pb[q].activations, (unsigned long long)pb[q].params,
                           (unsigned long long)pb[q].grads, (unsigned long long)pb[q].optimizer,
                           (unsigned long long)(pb[q].params + pb[q].grads + pb[q].optimizer + st.peak));
                    for (int j = 0; j < K_N; j++) {
                        printf("\"%s\": %.3f, ", k_name[j], kk[q][j]);
                        ksum += kk[q][j];
                    }
                    printf("\"optimizer\": %.3f, \"other\": %.3f}}\n", mo, mean - ksum);
                    fflush(stdout);
                }
                free(img);
                free(keep);
                free(msk);
                free(dout);
                for (int q = 0; q < npol; q++) vt_model_free(models[q]);
            }
    return 0;
}
