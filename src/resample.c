/* resample.c: pos_embed and patch_embed at another grid, as timm loads a checkpoint into a model
 * of another size (resample.h). Scalar, float32 in PyTorch's order of operations; called once per
 * load, never in a step. */
#include "resample.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SIDE 4096 /* a grid side or kernel side (VT_MAX_TOKENS bounds any grid anyway) */

/* One axis of a resize: for each output, `count` taps (source index, weight), in the order
 * PyTorch sums them. */
typedef struct {
    int n_out, stride; /* taps per output at most */
    int *count, *idx;  /* [n_out], [n_out * stride] */
    float *w;          /* [n_out * stride] */
} axis_taps;

static void taps_free(axis_taps *a) {
    free(a->count);
    free(a->idx);
    free(a->w);
    memset(a, 0, sizeof *a);
}
static vt_status taps_alloc(axis_taps *a, int n_out, int stride) {
    memset(a, 0, sizeof *a);
    a->n_out = n_out;
    a->stride = stride;
    a->count = calloc((size_t)n_out, sizeof *a->count);
    a->idx = calloc((size_t)n_out * (size_t)stride, sizeof *a->idx);
    a->w = calloc((size_t)n_out * (size_t)stride, sizeof *a->w);
    if (!a->count || !a->idx || !a->w) {
        taps_free(a);
        return vt_fail(VT_ERR_NOMEM, "out of memory: resampling taps %d x %d", n_out, stride);
    }
    return VT_OK;
}

/* upsample_bicubic2d (align_corners=False): Keys' cubic convolution with A = -0.75 on the 4
 * source samples around x = scale * (o + 0.5) - 0.5, indices clamped to the border. The
 * arithmetic of PyTorch's kernel: scale in float, the source position in double, the coefficients
 * in float (ATen/native/UpSample.h get_cubic_upsample_coefficients). */
static float cubic1(float x, float A) { return ((A + 2) * x - (A + 3)) * x * x + 1; }
static float cubic2(float x, float A) { return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A; }
static vt_status taps_bicubic(axis_taps *a, int n_in, int n_out) {
    vt_status rc = taps_alloc(a, n_out, 4);
    if (rc) return rc;
    const float scale = (float)n_in / (float)n_out, A = -0.75f;
    for (int o = 0; o < n_out; o++) {
        double real = (double)scale * ((double)o + 0.5) - 0.5;
        int base = (int)floor(real);
        float t = (float)(real - (double)base);
        float c[4] = { cubic2((float)((double)t + 1.0), A), cubic1(t, A), 0, 0 };
        float t2 = (float)(1.0 - (double)t);
        c[2] = cubic1(t2, A);
        c[3] = cubic2((float)((double)t2 + 1.0), A);
        a->count[o] = 4;
        for (int j = 0; j < 4; j++) {
            int s = base + j - 1;
            a->idx[o * 4 + j] = s < 0 ? 0 : s > n_in - 1 ? n_in - 1 : s;
            a->w[o * 4 + j] = c[j];
        }
    }
    return VT_OK;
}

/* _upsample_bicubic2d_aa: Pillow's bicubic (a = -0.5) over the source interval of each output,
 * the filter widened by the scale when shrinking, weights normalised to sum 1 (PyTorch's
 * _compute_indices_weights_aa: float, with its double literals). */
static float aa_cubic(float xf) {
    double x = fabs((double)xf), a = -0.5;
    if (x < 1.0) return (float)(((a + 2.0) * x - (a + 3.0)) * x * x + 1);
    if (x < 2.0) return (float)((((x - 5) * x + 8) * x - 4) * a);
    return 0.0f;
}
static vt_status taps_bicubic_aa(axis_taps *a, int n_in, int n_out) {
    const float scale = (float)n_in / (float)n_out;
    const float support = scale >= 1.0f ? (float)(4 * 0.5 * (double)scale) : 2.0f;
    const float invscale = scale >= 1.0f ? (float)(1.0 / (double)scale) : 1.0f;
    int stride = (int)ceilf(support) * 2 + 1;
    vt_status rc = taps_alloc(a, n_out, stride);
    if (rc) return rc;
    for (int o = 0; o < n_out; o++) {
        float center = (float)((double)scale * ((double)o + 0.5));
        long long lo = (long long)((double)(center - support) + 0.5),
                  hi = (long long)((double)(center + support) + 0.5);
        int xmin = lo < 0 ? 0 : (int)lo;
        int xsize = (int)((hi < n_in ? hi : n_in) - xmin);
        if (xsize > stride) xsize = stride; /* cannot happen: the support spans fewer samples */
        float total = 0.0f;
        for (int j = 0; j < xsize; j++) {
            float w = aa_cubic((float)(((double)((float)(j + xmin) - center) + 0.5) * (double)invscale));
            a->w[o * stride + j] = w;
            a->idx[o * stride + j] = xmin + j;
            total += w;
        }
        for (int j = 0; j < xsize; j++)
            if (total != 0.0f) a->w[o * stride + j] /= total;
        a->count[o] = xsize > 0 ? xsize : 0;
    }
    return VT_OK;
}

static vt_status axis(axis_taps *a, int n_in, int n_out, int antialias) {
    return antialias ? taps_bicubic_aa(a, n_in, n_out) : taps_bicubic(a, n_in, n_out);
}

static vt_status check_sides(const char *what, int a, int b, int c, int d) {
    if (a < 1 || b < 1 || c < 1 || d < 1 || a > MAX_SIDE || b > MAX_SIDE || c > MAX_SIDE || d > MAX_SIDE)
        return vt_fail(VT_ERR_ARG, "%s: sizes %dx%d -> %dx%d (each 1..%d)", what, a, b, c, d, MAX_SIDE);
    return VT_OK;
}

/* One separable pass of the antialiased resize along rows (dim 1 of [h][w][C], along = 1) or
 * columns (along = 0): out = t0 w0 + t1 w1 + ... in float, left to right. */
static void pass(const float *in, int h, int w, int C, float *out, const axis_taps *a, int along_w) {
    int oh = along_w ? h : a->n_out, ow = along_w ? a->n_out : w;
    for (int y = 0; y < oh; y++)
        for (int x = 0; x < ow; x++) {
            int o = along_w ? x : y, n = a->count[o];
            const int *id = a->idx + (size_t)o * a->stride;
            const float *wt = a->w + (size_t)o * a->stride;
            float *dst = out + ((size_t)y * ow + x) * C;
            for (int c = 0; c < C; c++) {
                float acc = 0.0f;
                for (int j = 0; j < n; j++) {
                    const float *s =
                        along_w ? in + ((size_t)y * w + id[j]) * C : in + ((size_t)id[j] * w + x) * C;
                    acc = j ? acc + s[c] * wt[j] : s[c] * wt[j];
                }
                dst[c] = acc;
            }
        }
}

vt_status vt_resample_grid(const float *in, int old_h, int old_w, int C, float *out, int new_h, int new_w,
                           int antialias) {
    if (!in || !out) return vt_fail(VT_ERR_ARG, "vt_resample_grid: NULL argument");
    vt_status rc = check_sides("vt_resample_grid", old_h, old_w, new_h, new_w);
    if (rc) return rc;
    if (C < 1 || C > 1000000) return vt_fail(VT_ERR_ARG, "vt_resample_grid: %d channels", C);
    axis_taps ay = { 0 }, ax = { 0 };
    if ((rc = axis(&ay, old_h, new_h, antialias)) || (rc = axis(&ax, old_w, new_w, antialias))) goto done;
    if (!antialias) { /* upsample_bicubic2d: rows of 4 taps, each row's 4 column taps first */
        for (int y = 0; y < new_h; y++)
            for (int x = 0; x < new_w; x++)
                for (int c = 0; c < C; c++) {
                    float acc = 0.0f;
                    for (int i = 0; i < 4; i++) {
                        const float *row = in + (size_t)ay.idx[y * 4 + i] * old_w * C;
                        float t = 0.0f;
                        for (int j = 0; j < 4; j++) {
                            float v = row[(size_t)ax.idx[x * 4 + j] * C + c];
                            t = j ? t + v * ax.w[x * 4 + j] : v * ax.w[x * 4 + j];
                        }
                        acc = i ? acc + t * ay.w[y * 4 + i] : t * ay.w[y * 4 + i];
                    }
                    out[((size_t)y * new_w + x) * C + c] = acc;
                }
        goto done;
    }
    /* antialiased: PyTorch resizes along the last (contiguous) dimension first, then the other;
     * a dimension whose size does not change is not resampled */
    const float *src = in;
    float *tmp = NULL;
    int h = old_h, w = old_w;
    if (old_w != new_w) {
        float *dst = old_h == new_h ? out : (tmp = malloc((size_t)old_h * new_w * C * sizeof(float)));
        if (!dst) {
            rc = vt_fail(VT_ERR_NOMEM, "out of memory resampling a %dx%d grid", old_h, new_w);
            goto done;
        }
        pass(src, h, w, C, dst, &ax, 1);
        src = dst;
        w = new_w;
    }
    if (old_h != new_h)
        pass(src, h, w, C, out, &ay, 0);
    else if (src == in)
        memcpy(out, in, (size_t)old_h * old_w * C * sizeof(float));
    free(tmp);
done:
    taps_free(&ay);
    taps_free(&ax);
    return rc;
}

vt_status vt_resample_pos_embed(const float *in, int prefix, int old_h, int old_w, int dim, float *out,
                                int new_h, int new_w, int antialias) {
    if (!in || !out) return vt_fail(VT_ERR_ARG, "vt_resample_pos_embed: NULL argument");
    if (prefix < 0 || prefix > VT_MAX_TOKENS)
        return vt_fail(VT_ERR_ARG, "vt_resample_pos_embed: %d prefix rows", prefix);
    memcpy(out, in, (size_t)prefix * (size_t)dim * sizeof(float));
    return vt_resample_grid(in + (size_t)prefix * dim, old_h, old_w, dim, out + (size_t)prefix * dim, new_h,
                            new_w, antialias);
}

/* ---- patch_embed: FlexiViT's pseudo-inverse resize -------------------------------------------- */

/* Solves S X = Bm in place for X (S n x n, Bm n x m, row-major, double): Gauss-Jordan with
 * partial pivoting. A pivot that vanishes relative to S's largest entry: rank deficient. */
static int solve(double *S, double *Bm, int n, int m) {
    double big = 0;
    for (int i = 0; i < n * n; i++) big = fmax(big, fabs(S[i]));
    for (int k = 0; k < n; k++) {
        int p = k;
        for (int i = k + 1; i < n; i++)
            if (fabs(S[i * n + k]) > fabs(S[p * n + k])) p = i;
        if (!(fabs(S[p * n + k]) > 1e-12 * big)) return -1;
        if (p != k) {
            for (int j = 0; j < n; j++) {
                double t = S[k * n + j];
                S[k * n + j] = S[p * n + j];
                S[p * n + j] = t;
            }
            for (int j = 0; j < m; j++) {
                double t = Bm[k * m + j];
                Bm[k * m + j] = Bm[p * m + j];
                Bm[p * m + j] = t;
            }
        }
        double d = S[k * n + k];
        for (int i = 0; i < n; i++) {
            if (i == k || S[i * n + k] == 0) continue;
            double f = S[i * n + k] / d;
            for (int j = k; j < n; j++) S[i * n + j] -= f * S[k * n + j];
            for (int j = 0; j < m; j++) Bm[i * m + j] -= f * Bm[k * m + j];
        }
    }
    for (int k = 0; k < n; k++)
        for (int j = 0; j < m; j++) Bm[k * m + j] /= S[k * n + k];
    return 0;
}

/* P = pinv(A^T) [n_out x n_in] of one axis' resize A [n_out x n_in] (A's taps summed, in double):
 * A of full row rank (shrinking): (A A^T)^-1 A; of full column rank (growing): A (A^T A)^-1. */
static vt_status pinv_axis(int n_in, int n_out, int antialias, double **out) {
    axis_taps t;
    vt_status rc = axis(&t, n_in, n_out, antialias);
    if (rc) return rc;
    double *A = calloc((size_t)n_out * n_in, sizeof *A), *P = calloc((size_t)n_out * n_in, sizeof *P);
    int k = n_out <= n_in ? n_out : n_in;
    double *S = calloc((size_t)k * k, sizeof *S);
    if (!A || !P || !S) {
        rc = vt_fail(VT_ERR_NOMEM, "out of memory: patch_embed resize %d -> %d", n_in, n_out);
        goto done;
    }
    for (int o = 0; o < n_out; o++)
        for (int j = 0; j < t.count[o]; j++)
            A[(size_t)o * n_in + t.idx[o * t.stride + j]] += t.w[o * t.stride + j];
    if (n_out <= n_in) { /* S = A A^T, P = S^-1 A */
        for (int i = 0; i < k; i++)
            for (int j = 0; j < k; j++) {
                double s = 0;
                for (int q = 0; q < n_in; q++) s += A[i * n_in + q] * A[j * n_in + q];
                S[i * k + j] = s;
            }
        memcpy(P, A, (size_t)n_out * n_in * sizeof *P);
        if (solve(S, P, k, n_in)) goto deficient;
    } else { /* S = A^T A, P = A S^-1 = (S^-1 A^T)^T */
        double *Bt = calloc((size_t)n_in * n_out, sizeof *Bt);
        if (!Bt) {
            rc = vt_fail(VT_ERR_NOMEM, "out of memory: patch_embed resize %d -> %d", n_in, n_out);
            goto done;
        }
        for (int i = 0; i < k; i++)
            for (int j = 0; j < k; j++) {
                double s = 0;
                for (int q = 0; q < n_out; q++) s += A[q * n_in + i] * A[q * n_in + j];
                S[i * k + j] = s;
            }
        for (int i = 0; i < n_in; i++)
            for (int o = 0; o < n_out; o++) Bt[(size_t)i * n_out + o] = A[(size_t)o * n_in + i];
        if (solve(S, Bt, k, n_out)) {
            free(Bt);
            goto deficient;
        }
        for (int o = 0; o < n_out; o++)
            for (int i = 0; i < n_in; i++) P[(size_t)o * n_in + i] = Bt[(size_t)i * n_out + o];
        free(Bt);
    }
    *out = P;
    P = NULL;
    goto done;
deficient:
    rc = vt_fail(VT_ERR_ARG, "patch_embed: the resize %d -> %d has no pseudo-inverse of full rank", n_in,
                 n_out);
done:
    taps_free(&t);
    free(A);
    free(P);
    free(S);
    return rc;
}

vt_status vt_resample_patch_embed(const float *in, int64_t n, int old_h, int old_w, float *out, int new_h,
                                  int new_w, int antialias) {
    if (!in || !out) return vt_fail(VT_ERR_ARG, "vt_resample_patch_embed: NULL argument");
    vt_status rc = check_sides("vt_resample_patch_embed", old_h, old_w, new_h, new_w);
    if (rc) return rc;
    if (n < 1 || n > (int64_t)1 << 40)
        return vt_fail(VT_ERR_ARG, "vt_resample_patch_embed: %lld kernels", (long long)n);
    double *Ph = NULL, *Pw = NULL, *tmp = NULL;
    if ((rc = pinv_axis(old_h, new_h, antialias, &Ph)) || (rc = pinv_axis(old_w, new_w, antialias, &Pw)))
        goto done;
    tmp = malloc((size_t)old_h * new_w * sizeof *tmp);
    if (!tmp) {
        rc = vt_fail(VT_ERR_NOMEM, "out of memory resampling patch_embed");
        goto done;
    }
    for (int64_t k = 0; k < n; k++) { /* K_new = Ph K Pw^T, in double */
        const float *K = in + (size_t)k * old_h * old_w;
        for (int i = 0; i < old_h; i++)
            for (int x = 0; x < new_w; x++) {
                double s = 0;
                for (int j = 0; j < old_w; j++) s += (double)K[i * old_w + j] * Pw[(size_t)x * old_w + j];
                tmp[i * new_w + x] = s;
            }
        float *O = out + (size_t)k * new_h * new_w;
        for (int y = 0; y < new_h; y++)
            for (int x = 0; x < new_w; x++) {
                double s = 0;
                for (int i = 0; i < old_h; i++) s += Ph[(size_t)y * old_h + i] * tmp[i * new_w + x];
                O[y * new_w + x] = (float)s;
            }
    }
done:
    free(Ph);
    free(Pw);
    free(tmp);
    return rc;
}
