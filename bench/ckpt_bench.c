/* ckpt_bench.c: gradient checkpointing, measured. For each timm preset at 224 px, batch size and
 * policy: one training step (forward with need_grad, backward, AdamW) -- ms per step (median of
 * the timed repeats after a warm-up), the planned and measured activation bytes, and ratios to the
 * policy-none run measured in the same process, side by side. A benchmark reports; it never fails
 * on a time.
 *   ckpt_bench [--preset NAME]... [--batch B]... [--policy P]... [--repeat R] [--mae] [--json FILE] */
#include "vitrine.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef struct { double ms; size_t planned, peak; } result;

static int step(vt_model *m, const vt_inputs *in, vt_fn fn, float *dimg, const float *dout) {
    int rc = vt_forward(m, fn, in, 1);
    const float *d[1] = {dout};
    if (!rc) rc = vt_backward(m, fn == VT_FN_LOSS ? NULL : d, fn == VT_FN_LOSS ? 0 : 1, dimg, 1);
    if (!rc) rc = vt_optimizer_step(m, 1e-4f);
    return rc;
}

int main(int argc, char **argv) {
    const char *presets[8], *policies[16], *json = NULL;
    int np = 0, npol = 0, nb = 0, batches[8], repeat = 3, mae = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--preset") && i + 1 < argc && np < 8) presets[np++] = argv[++i];
        else if (!strcmp(argv[i], "--batch") && i + 1 < argc && nb < 8) batches[nb++] = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--policy") && i + 1 < argc && npol < 16) policies[npol++] = argv[++i];
        else if (!strcmp(argv[i], "--repeat") && i + 1 < argc) repeat = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--mae")) mae = 1;
        else if (!strcmp(argv[i], "--json") && i + 1 < argc) json = argv[++i];
        else { fprintf(stderr, "unknown option %s\n", argv[i]); return 2; }
    }
    if (!np) presets[np++] = "vit_tiny_patch16_224";
    if (!nb) { batches[nb++] = 1; batches[nb++] = 4; }
    if (!npol) {
        const char *d[] = {"none", "block", "every:2", "sqrt", "selective", "budget:60MB"};
        for (int i = 0; i < 6; i++) policies[npol++] = d[i];
    }
    if (repeat < 1) repeat = 1;
    FILE *jf = json ? fopen(json, "w") : NULL;
    if (jf) fprintf(jf, "[");
    int first = 1;
    printf("| model | batch | policy | ms/step | x time | activations (MiB) | x less memory | planned == measured |\n");
    printf("|---|---|---|---|---|---|---|---|\n");
    for (int p = 0; p < np; p++)
        for (int b = 0; b < nb; b++) {
            vt_model_config mc;
            vt_model_config_default(&mc, mae ? VT_KIND_MAE : VT_KIND_LIGHTLY);
            if (vt_preset(presets[p], &mc.enc)) { fprintf(stderr, "%s\n", vt_last_error()); return 1; }
            mc.enc.mask_token = 1;
            vt_model *m = NULL;
            int rc = vt_model_create(&mc, &m);
            if (!rc) rc = vt_init_weights(m, 1);
            vt_adamw_config oc = {1e-4f, 0.9f, 0.95f, 1e-8f, 0.05f};
            if (!rc) rc = vt_optimizer_init(m, &oc);
            if (rc) { fprintf(stderr, "%s\n", vt_last_error()); return 1; }
            int B = batches[b], S = mc.enc.img_size, C = mc.enc.in_chans;
            size_t nimg = (size_t)B * C * S * S;
            float *img = malloc(nimg * sizeof(float)), *dimg = calloc(nimg, sizeof(float));
            vt_rng r;
            vt_rng_seed(&r, 7);
            for (size_t i = 0; i < nimg; i++) img[i] = vt_rng_normal(&r);
            int L = (S / mc.enc.patch_size) * (S / mc.enc.patch_size) + 1, nk = 0;
            int64_t *keep = malloc((size_t)B * L * 8), *msk = malloc((size_t)B * L * 8);
            vt_random_token_mask(&r, B, L, 0.75f, 0, keep, msk, &nk);
            vt_inputs in = {0};
            in.images = img;
            in.batch = B;
            if (mae) { in.idx_keep = keep; in.n_keep = nk; in.idx_mask = msk; in.n_mask = L - nk; }
            vt_fn fn = mae ? VT_FN_LOSS : VT_FN_ENCODE;
            size_t nout = (size_t)B * L * mc.enc.embed_dim;
            float *dout = malloc(nout * sizeof(float));
            for (size_t i = 0; i < nout; i++) dout[i] = vt_rng_normal(&r) * 1e-3f;
            result base = {0};
            for (int q = 0; q < npol; q++) {
                rc = vt_set_grad_checkpointing(m, policies[q]);
                vt_plan_bytes pb;
                if (!rc) rc = vt_plan(m, fn, &in, 1, &pb);
                if (!rc) rc = step(m, &in, fn, dimg, dout); /* warm-up, sizes the arena */
                double *t = malloc((size_t)repeat * sizeof(double));
                for (int k = 0; k < repeat && !rc; k++) {
                    double t0 = now_ms();
                    rc = step(m, &in, fn, dimg, dout);
                    t[k] = now_ms() - t0;
                }
                if (rc) { printf("| %s | %d | %s | error: %s |\n", presets[p], B, policies[q], vt_last_error()); free(t); continue; }
                qsort(t, (size_t)repeat, sizeof(double), cmp_d);
                vt_arena_stats st;
                vt_arena_get_stats(m, &st);
                result res = {t[repeat / 2], pb.activations, st.peak};
                free(t);
                if (q == 0) base = res;
                printf("| %s%s | %d | %s | %.0f | %.2f | %.1f | %.2f | %s |\n", presets[p], mae ? " MAE" : "", B,
                       policies[q], res.ms, res.ms / base.ms, res.peak / 1048576.0, (double)base.peak / res.peak,
                       res.planned == res.peak ? "yes" : "NO");
                fflush(stdout);
                if (jf) {
                    fprintf(jf, "%s\n {\"model\": \"%s\", \"objective\": \"%s\", \"batch\": %d, \"policy\": \"%s\", \"ms_per_step\": %.3f, "
                                "\"time_ratio\": %.4f, \"activation_bytes\": %zu, \"planned_bytes\": %zu, \"memory_ratio\": %.4f}",
                            first ? "" : ",", presets[p], mae ? "mae" : "encode", B, policies[q], res.ms, res.ms / base.ms,
                            res.peak, res.planned, (double)base.peak / res.peak);
                    first = 0;
                }
            }
            free(img); free(dimg); free(keep); free(msk); free(dout);
            vt_model_free(m);
        }
    if (jf) { fprintf(jf, "\n]\n"); fclose(jf); }
    return 0;
}
