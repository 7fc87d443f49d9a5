/* test_threads.c: the same bits at every thread count (native pthreads). Every fixture's parity
 * run (forward and backward; the dump holds every output and gradient) under every
 * checkpointing policy at 2, 3 and 5 threads against 1 thread, byte for byte; and a few MAE and
 * AIM training steps (AdamW included) likewise. Splitting is forced down to the smallest shapes
 * (vt_threads_set_min_work(0)), so the tiny fixtures still cut every kernel into pieces. Built twice:
 * test_threads (SIMD128 kernels over SSE2) and test_threads_fma (the native FMA build, whose fused
 * multiply-adds must not change with the split either). */
#include "test_util.h"
#include "parity.h"
#include "threads.h"

static const char *policies[] = { "none", "block", "selective", "every:2" };
static const int counts[] = { 2, 3, 5 };

static void test_fixtures_in(char **files, int n, const char *dir) {
    CHECK(n > 0, "parity files found in %s", dir);
    for (int f = 0; f < n; f++) {
        size_t len = 0;
        uint8_t *bytes = tu_read_file(files[f], &len);
        for (size_t p = 0; p < sizeof policies / sizeof *policies; p++) {
            vt_set_threads(1);
            vt_parity_result ref;
            memset(&ref, 0, sizeof ref);
            int rc = vt_parity_run(bytes, len, policies[p], 1, &ref);
            CHECK(rc == 0 && ref.pass && ref.dump, "%s %s: 1 thread passes (%s)", files[f], policies[p],
                  ref.error);
            for (size_t c = 0; c < sizeof counts / sizeof *counts; c++) {
                CHECK(vt_set_threads(counts[c]) == counts[c], "set %d threads: %s", counts[c],
                      vt_last_error());
                vt_parity_result r;
                memset(&r, 0, sizeof r);
                rc = vt_parity_run(bytes, len, policies[p], 1, &r);
                CHECK(rc == 0 && r.pass && r.dump && r.dump_len == ref.dump_len &&
                          !memcmp(r.dump, ref.dump, ref.dump_len),
                      "%s %s: %d threads give the bits of 1", files[f], policies[p], counts[c]);
                vt_parity_free(&r);
            }
            vt_parity_free(&ref);
        }
        free(bytes);
        free(files[f]);
    }
    free(files);
}
/* the shared fixtures, and tests/parity's options of timm's ViT */
static void test_fixtures(void) {
    int n = 0;
    char **files = tu_list_fixtures(&n);
    test_fixtures_in(files, n, VT_FIXTURES_DIR);
    files = tu_list_parity(&n);
    test_fixtures_in(files, n, VT_PARITY_DIR);
}

static vt_model *small(vt_kind kind) {
    vt_model_config mc;
    vt_model_config_default(&mc, kind);
    mc.enc.img_size = 32;
    mc.enc.patch_size = 4;
    mc.enc.embed_dim = 48;
    mc.enc.depth = 2;
    mc.enc.num_heads = 3;
    mc.decoder_dim = 32;
    mc.decoder_depth = 1;
    mc.decoder_heads = 2;
    mc.head_hidden_dim = 36;
    mc.head_blocks = 1;
    vt_model *m = NULL;
    CHECK_OK(vt_model_create(&mc, &m), "create");
    return m;
}

/* state bytes after `steps` steps at `threads` threads */
static uint8_t *train(vt_kind kind, int threads, const char *policy, size_t *len) {
    int B = 5, n = B * 3 * 32 * 32, steps = 3;
    float *img = tu_xmalloc(n * sizeof(float));
    for (int i = 0; i < n; i++) img[i] = cosf(0.37f * i) + 0.1f * sinf(0.011f * i);
    vt_train_config tc;
    vt_train_config_default(&tc, kind);
    tc.lr = 1e-3f;
    tc.warmup_steps = 1;
    tc.total_steps = 10;
    tc.seed = 5;
    tc.clip_norm = 1.0f;
    vt_model *m = small(kind);
    vt_set_threads(threads);
    vt_init_weights(m, 3);
    vt_set_grad_checkpointing(m, policy);
    CHECK_OK(vt_trainer_init(m, &tc), "trainer init");
    for (int s = 0; s < steps; s++) CHECK_OK(vt_train_step(m, img, B, NULL), "train step");
    uint8_t *st = NULL;
    CHECK_OK(vt_train_state_save(m, &st, len), "state save");
    vt_model_free(m);
    free(img);
    return st;
}

static void test_training(void) {
    vt_kind kinds[] = { VT_KIND_MAE, VT_KIND_AIM };
    for (int k = 0; k < 2; k++)
        for (size_t p = 0; p < sizeof policies / sizeof *policies; p++) {
            size_t l1 = 0;
            uint8_t *s1 = train(kinds[k], 1, policies[p], &l1);
            for (size_t c = 0; c < sizeof counts / sizeof *counts; c++) {
                size_t ln = 0;
                uint8_t *sn = train(kinds[k], counts[c], policies[p], &ln);
                CHECK(s1 && sn && l1 == ln && !memcmp(s1, sn, l1),
                      "%s %s: training state after %d threads == 1 thread", vt_kind_name(kinds[k]),
                      policies[p], counts[c]);
                vt_free(sn);
            }
            vt_free(s1);
        }
}

/* Threads belong to the plan: a model planned for N threads plans what a model following an
 * N-thread pool plans (the attention scratch is per thread), whatever the pool has; its kernels
 * then use at most N threads, so a pool larger than its plan runs it within its arena, with the
 * bits of one thread. */
static void test_model_threads(void) {
    vt_model *m = small(VT_KIND_MAE);
    vt_init_weights(m, 1);
    vt_step_plan p3, p1, pool;
    CHECK(vt_set_threads(3) == 3, "3 threads");
    CHECK_OK(vt_plan_train_step(m, 4, -1, "none", 0, &pool), "plan for the pool's 3");
    CHECK_OK(vt_model_set_threads(m, 1), "the model plans for 1");
    CHECK(vt_model_threads(m) == 1, "vt_model_threads");
    CHECK_OK(vt_plan_train_step(m, 4, -1, "none", 0, &p1), "plan for 1");
    CHECK(vt_set_threads(1) == 1, "1 thread");
    CHECK_OK(vt_model_set_threads(m, 3), "the model plans for 3");
    CHECK_OK(vt_plan_train_step(m, 4, -1, "none", 0, &p3), "plan for 3 on a 1-thread pool");
    CHECK(p3.bytes.activations == pool.bytes.activations && p1.bytes.activations < p3.bytes.activations,
          "plans: 3 threads %llu (pool of 3: %llu), 1 thread %llu", (unsigned long long)p3.bytes.activations,
          (unsigned long long)pool.bytes.activations, (unsigned long long)p1.bytes.activations);
    CHECK(vt_model_set_threads(m, -1) != VT_OK && vt_model_set_threads(m, VT_MAX_THREADS + 1) != VT_OK,
          "counts refused");
    vt_model_free(m);
    /* planned for 1, run on a pool of 5 (split everything): within the plan, the bits of 1 thread */
    uint8_t *st[2] = { NULL, NULL };
    size_t len[2] = { 0, 0 };
    for (int k = 0; k < 2; k++) {
        vt_set_threads(k ? 5 : 1);
        vt_model *x = small(VT_KIND_AIM);
        vt_model_set_threads(x, 1);
        vt_init_weights(x, 2);
        vt_train_config tc;
        vt_train_config_default(&tc, VT_KIND_AIM);
        CHECK_OK(vt_trainer_init(x, &tc), "trainer");
        float *img = tu_xmalloc(5 * 3 * 32 * 32 * sizeof(float));
        for (int i = 0; i < 5 * 3 * 32 * 32; i++) img[i] = cosf(0.3f * i);
        CHECK_OK(vt_train_step(x, img, 5, NULL), "step");
        vt_arena_stats as;
        vt_arena_get_stats(x, &as);
        CHECK(as.peak <= as.planned, "a pool of %d inside a 1-thread plan: peak %zu, planned %zu", k ? 5 : 1,
              as.peak, as.planned);
        CHECK_OK(vt_train_state_save(x, &st[k], &len[k]), "save");
        free(img);
        vt_model_free(x);
    }
    CHECK(len[0] == len[1] && !memcmp(st[0], st[1], len[0]),
          "a 1-thread plan on 5 threads gives the bits of 1");
    vt_free(st[0]), vt_free(st[1]);
}

int main(void) {
#if defined(VT_TEST_EXPECT_FUSED) && defined(__x86_64__) /* test_threads_fma: the native FMA build */
    if (!__builtin_cpu_supports("fma")) {
        puts("skipped: this CPU has no FMA3");
        return 77;
    }
#endif
    vt_threads_set_min_work(0);
    CHECK(vt_set_threads(0) < 0 && vt_set_threads(VT_MAX_THREADS + 1) < 0,
          "thread counts out of range refused");
    CHECK(vt_set_threads(3) == 3 && vt_threads_max() == 3, "3 threads");
    test_fixtures();
    test_training();
    test_model_threads();
    /* the workers really took part (else every comparison above would be 1 thread against 1) */
    for (int t = 1; t < 5; t++)
        CHECK(vt_threads_chunks_run(t) > 0, "worker %d ran %d chunks", t, vt_threads_chunks_run(t));
    vt_threads_shutdown();
    return tu_finish();
}
