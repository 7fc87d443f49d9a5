/* kernels_portable.c: matmul forward for builds without SIMD128 kernels (native, wasm scalar).
 * The reference's one-accumulator dot product is a serial chain the compiler may not reorder;
 * here each output keeps 4 partial sums over k (lanes k mod 4), so that the compiler can map
 * them to vector registers, and 2 rows x 4 columns of outputs share their loads. Same
 * signature and semantics as vt_ref_matmul_forward; sums are associated differently (tested
 * against the reference with a tolerance that scales with K). */
#include "kernels.h"

static inline float dot4(const float *a, const float *w, int K) {
    float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    int k = 0;
    for (; k + 4 <= K; k += 4) {
        s0 += a[k] * w[k];
        s1 += a[k + 1] * w[k + 1];
        s2 += a[k + 2] * w[k + 2];
        s3 += a[k + 3] * w[k + 3];
    }
    for (; k < K; k++) s0 += a[k] * w[k];
    return (s0 + s1) + (s2 + s3);
}

void vt_portable_matmul_forward(float *out, const float *inp, const float *w, const float *bias, int M, int K,
                                int N) {
    int m = 0;
    for (; m + 2 <= M; m += 2) {
        const float *a0 = inp + (size_t)m * K, *a1 = a0 + K;
        int n = 0;
        for (; n + 4 <= N; n += 4) {
            const float *w0 = w + (size_t)n * K, *w1 = w0 + K, *w2 = w1 + K, *w3 = w2 + K;
            float acc[2][4][4] = { { { 0 } } };
            int k = 0;
            for (; k + 4 <= K; k += 4)
                for (int l = 0; l < 4; l++) {
                    float x0 = a0[k + l], x1 = a1[k + l];
                    acc[0][0][l] += x0 * w0[k + l];
                    acc[0][1][l] += x0 * w1[k + l];
                    acc[0][2][l] += x0 * w2[k + l];
                    acc[0][3][l] += x0 * w3[k + l];
                    acc[1][0][l] += x1 * w0[k + l];
                    acc[1][1][l] += x1 * w1[k + l];
                    acc[1][2][l] += x1 * w2[k + l];
                    acc[1][3][l] += x1 * w3[k + l];
                }
            for (; k < K; k++) {
                acc[0][0][0] += a0[k] * w0[k];
                acc[0][1][0] += a0[k] * w1[k];
                acc[0][2][0] += a0[k] * w2[k];
                acc[0][3][0] += a0[k] * w3[k];
                acc[1][0][0] += a1[k] * w0[k];
                acc[1][1][0] += a1[k] * w1[k];
                acc[1][2][0] += a1[k] * w2[k];
                acc[1][3][0] += a1[k] * w3[k];
            }
            for (int r = 0; r < 2; r++)
                for (int j = 0; j < 4; j++) {
                    float s = (acc[r][j][0] + acc[r][j][1]) + (acc[r][j][2] + acc[r][j][3]);
                    out[(size_t)(m + r) * N + n + j] = bias ? s + bias[n + j] : s;
                }
        }
        for (; n < N; n++) {
            const float *wr = w + (size_t)n * K;
            float s0 = dot4(a0, wr, K), s1 = dot4(a1, wr, K);
            out[(size_t)m * N + n] = bias ? s0 + bias[n] : s0;
            out[(size_t)(m + 1) * N + n] = bias ? s1 + bias[n] : s1;
        }
    }
    for (; m < M; m++)
        for (int n = 0; n < N; n++) {
            float s = dot4(inp + (size_t)m * K, w + (size_t)n * K, K);
            out[(size_t)m * N + n] = bias ? s + bias[n] : s;
        }
}
