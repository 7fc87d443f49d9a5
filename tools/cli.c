/* cli.c: the native command line, build/vitrine (the engine itself is src/, the parity harness
 * harness/).
 *   vitrine parity FILE... [--grad-checkpointing POLICY] [--dump DIR] [--json] [--threads N]
 *   vitrine plan --preset NAME --batch B [--tokens-kept K] [--grad-checkpointing POLICY] [--json] [--threads N]
 *   vitrine trace [--preset NAME | --config JSON|FILE] [--objective mae|aim|classify|encode] [--batch B]
 *                 [--grad-checkpointing POLICY] [--threads N] [--json] ...  (one step as kernel calls)
 * --threads N: kernel threads (default: every online core); the same bits at any count.
 * Exit status: 0 when everything passed, 1 when a check failed or a file could not be run,
 * 2 on a usage error or (parity) a file that could not be read. The Node CLI (web/cli.js) has the same contract over the wasm build. */
#include "parity.h"
#include "vitrine.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#define VT_MAX_CLI_THREADS 64

/* Reads a regular file only (a FIFO or /dev/zero would hang or never end), opened without
 * blocking and checked with fstat, at most 1 GiB (no parity file is near that). */
static vt_status read_file(const char *path, uint8_t **out, size_t *len) {
    int fd = open(path, O_RDONLY | O_NONBLOCK);
    if (fd < 0) return vt_fail(VT_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
        close(fd);
        return vt_fail(VT_ERR_IO, "cannot open %s: not a regular file (%s)", path,
                       S_ISFIFO(st.st_mode)  ? "a FIFO"
                       : S_ISDIR(st.st_mode) ? "a directory"
                                             : "a device");
    }
    if (st.st_size > (1 << 30)) {
        close(fd);
        return vt_fail(VT_ERR_IO, "cannot open %s: %lld bytes, more than 1 GiB", path, (long long)st.st_size);
    }
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        close(fd);
        return vt_fail(VT_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    }
    uint8_t *buf = NULL;
    size_t cap = 0, n = 0;
    for (;;) {
        if (n == cap) {
            cap = cap ? 2 * cap : 1 << 20;
            uint8_t *nb = realloc(buf, cap);
            if (!nb) {
                free(buf);
                fclose(f);
                return vt_fail(VT_ERR_NOMEM, "out of memory reading %s", path);
            }
            buf = nb;
        }
        size_t r = fread(buf + n, 1, cap - n, f);
        n += r;
        if (r == 0) break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return vt_fail(VT_ERR_IO, "error reading %s", path);
    }
    *out = buf;
    *len = n;
    return VT_OK;
}

static vt_status write_file(const char *path, const uint8_t *data, size_t len) {
    FILE *f = fopen(path, "wb");
    if (!f) return vt_fail(VT_ERR_IO, "cannot write %s: %s", path, strerror(errno));
    size_t w = fwrite(data, 1, len, f);
    int bad = fclose(f) != 0 || w != len;
    if (bad) remove(path); /* no half file (a full disk) */
    return bad ? vt_fail(VT_ERR_IO, "error writing %s (removed)", path) : VT_OK;
}

static const char *base_name(const char *p) {
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

/* a whole number in [min, 2^31 - 1], decimal digits only (atoi took "99999999999" as 1215752191) */
static int whole(const char *cmd, const char *flag, const char *s, int min, int *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (!*s || *s == '-' || *s == '+' || *end || errno || v < min || v > 2147483647) {
        fprintf(stderr, "vitrine %s: %s: '%s' is not a whole number in %d..2147483647\n", cmd, flag, s, min);
        return 0;
    }
    *out = (int)v;
    return 1;
}

/* --threads N (default: every online core): the engine's kernel threads (vt_set_threads) */
static int threads_opt = -1; /* -1: not given */
static int start_threads(const char *cmd) {
    int n = threads_opt;
    if (n == 0) {
        fprintf(stderr, "vitrine %s: --threads needs a whole number >= 1\n", cmd);
        return -1;
    }
    if (n < 0) {
        long c = sysconf(_SC_NPROCESSORS_ONLN);
        n = c < 1 ? 1 : c > VT_MAX_CLI_THREADS ? VT_MAX_CLI_THREADS : (int)c;
    }
    if (vt_set_threads(n) < 0 && (threads_opt > 0 || vt_set_threads(1) < 0)) {
        fprintf(stderr, "vitrine %s: %s\n", cmd, vt_last_error());
        return -1;
    }
    return 0;
}

static int cmd_parity(int argc, char **argv) {
    const char *policy = NULL, *dump = NULL;
    int json = 0, nfiles = 0, failed = 0, unreadable = 0;
    const char **files = calloc((size_t)argc + 1, sizeof *files);
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--grad-checkpointing") && i + 1 < argc)
            policy = argv[++i];
        else if (!strcmp(argv[i], "--dump") && i + 1 < argc)
            dump = argv[++i];
        else if (!strcmp(argv[i], "--json"))
            json = 1;
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
            if (!whole("parity", argv[i], argv[i + 1], 1, &threads_opt)) {
                free(files);
                return 2;
            }
            i++;
        } else if (!strncmp(argv[i], "--", 2)) {
            fprintf(stderr, "vitrine parity: unknown option %s\n", argv[i]);
            free(files);
            return 2;
        } else
            files[nfiles++] = argv[i];
    }
    if (!nfiles) {
        fprintf(stderr, "usage: vitrine parity FILE... [--grad-checkpointing POLICY] [--dump DIR] [--json] "
                        "[--threads N]\n");
        free(files);
        return 2;
    }
    struct stat ds;
    if (dump && mkdir(dump, 0777) && (errno != EEXIST || stat(dump, &ds) || !S_ISDIR(ds.st_mode))) {
        fprintf(stderr, "vitrine parity: --dump %s: %s\n", dump,
                errno == EEXIST ? "not a directory" : strerror(errno));
        free(files);
        return 2;
    }
    if (start_threads("parity")) {
        free(files);
        return 2;
    }
    if (json)
        printf("[");
    else
        printf("pass rule: every expect/ tensor has err = max|ours - expect| / max|expect| <= %.3e\n",
               VT_PARITY_TOL);
    for (int i = 0; i < nfiles; i++) {
        size_t len = 0;
        uint8_t *bytes = NULL;
        vt_parity_result r;
        int rc = read_file(files[i], &bytes, &len);
        if (rc) unreadable++;
        if (rc)
            vt_parity_fail(&r, rc, vt_last_error());
        else
            vt_parity_run(bytes, len, policy, dump != NULL, &r);
        free(bytes);
        if (!r.pass) failed++;
        if (dump && r.dump) { /* pass or fail: what was computed */
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", dump, base_name(files[i]));
            if (write_file(path, r.dump, r.dump_len)) {
                fprintf(stderr, "%s\n", vt_last_error());
                failed++;
            }
        }
        const vt_parity_tensor *w = r.worst >= 0 ? &r.t[r.worst] : NULL;
        char *text = NULL;
        if (json && vt_parity_json(&r, files[i], &text, NULL)) {
            fprintf(stderr, "vitrine parity: %s\n", vt_last_error());
            failed++;
        } else if (json) {
            printf("%s\n %s", i ? "," : "", text);
            free(text);
        } else if (r.error[0]) {
            printf("FAIL %s: %s\n", files[i], r.error);
        } else if (w) { /* a torch32 error the file does not have is left out */
            char t32[48] = "", max32[48] = "";
            if (w->torch32_err >= 0) snprintf(t32, sizeof t32, " torch32_err %.3e", w->torch32_err);
            if (vt_parity_max_torch32(&r) >= 0)
                snprintf(max32, sizeof max32, ", max torch32_err %.3e", vt_parity_max_torch32(&r));
            printf("%s %s  worst %s err %.3e%s  (%d tensors%s)\n", r.pass ? "PASS" : "FAIL", files[i],
                   w->name, w->err, t32, r.n, max32);
        }
        vt_parity_free(&r);
    }
    if (json)
        printf("\n]\n");
    else
        printf("%d passed, %d failed\n", nfiles - failed, failed);
    free(files);
    return unreadable ? 2 : failed ? 1 : 0; /* 2: a file could not be read (as a usage error) */
}

#define U(x) ((unsigned long long)(x))

static int cmd_plan(int argc, char **argv) {
    const char *preset = "vit_tiny_patch16_224", *policy = "none";
    int batch = 1, kept = 0, json = 0;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--preset") && i + 1 < argc)
            preset = argv[++i];
        else if (!strcmp(argv[i], "--batch") && i + 1 < argc) {
            if (!whole("plan", argv[i], argv[i + 1], 1, &batch)) return 2;
            i++;
        } else if (!strcmp(argv[i], "--tokens-kept") && i + 1 < argc) {
            if (!whole("plan", argv[i], argv[i + 1], 0, &kept)) return 2;
            i++;
        } else if (!strcmp(argv[i], "--grad-checkpointing") && i + 1 < argc)
            policy = argv[++i];
        else if (!strcmp(argv[i], "--json"))
            json = 1;
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
            if (!whole("plan", argv[i], argv[i + 1], 1, &threads_opt)) return 2;
            i++;
        } else {
            fprintf(stderr, "vitrine plan: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    /* the per-thread scratch (attention) is part of the plan: the model's plan is made for N */
    if (start_threads("plan")) return 2;
    int threads = vt_threads_max();
    vt_model_config mc;
    vt_model_config_default(&mc, VT_KIND_LIGHTLY);
    /* a preset or policy the engine refuses is a usage error naming its flag (as web/cli/plan.js) */
    if (vt_preset(preset, &mc.enc)) {
        fprintf(stderr, "vitrine plan: --preset: %s\n", vt_last_error());
        return 2;
    }
    mc.enc.mask_token = 1;
    vt_model *m = NULL;
    int rc = vt_model_create(&mc, &m);
    if (!rc && vt_set_grad_checkpointing(m, policy)) {
        fprintf(stderr, "vitrine plan: --grad-checkpointing: %s\n", vt_last_error());
        vt_model_free(m);
        return 2;
    }
    if (!rc) rc = vt_model_set_threads(m, threads); /* the plan is made for this count */
    vt_plan_bytes p;
    if (!rc) {
        vt_inputs in;
        memset(&in, 0, sizeof in);
        in.batch = batch;
        int64_t dummy = 0;
        if (kept > 0) {
            in.idx_keep = &dummy;
            in.n_keep = kept;
        }
        rc = vt_plan(m, VT_FN_ENCODE, &in, 1, &p);
    }
    vt_model_free(m);
    if (rc) {
        fprintf(stderr, "vitrine plan: %s\n", vt_last_error());
        return 1;
    }
    if (json)
        printf("{\"preset\": \"%s\", \"batch\": %d, \"tokens_kept\": %d, \"policy\": \"%s\", \"threads\": "
               "%d, \"params\": %llu, "
               "\"grads\": %llu, \"optimizer\": %llu, \"activations\": %llu, \"total\": %llu}\n",
               preset, batch, kept, policy, threads, U(p.params), U(p.grads), U(p.optimizer),
               U(p.activations), U(p.total));
    else
        printf(
            "%s batch %d%s, grad checkpointing %s, %d thread%s\n  params      %12llu bytes\n  grads       "
            "%12llu bytes\n"
            "  optimizer   %12llu bytes\n  activations %12llu bytes\n  total       %12llu bytes (%.1f MiB)\n",
            preset, batch, kept ? " (tokens kept)" : "", policy, threads, threads == 1 ? "" : "s",
            U(p.params), U(p.grads), U(p.optimizer), U(p.activations), U(p.total), p.total / 1048576.0);
    return 0;
}

/* ---- trace: one training step (or an encoder call and its backward) as the kernel calls it is ---- */

#define USAGE_TRACE                                                                                          \
    "vitrine trace [--preset NAME | --config JSON|FILE] [--objective mae|aim|classify|encode] [--batch B]\n" \
    "                     [--grad-checkpointing POLICY] [--threads N] [--mask-ratio R] [--clip-norm X] "     \
    "[--classes C] [--json]\n"                                                                               \
    "       vitrine trace --kernels   (the kernel list, the contract of a backend: docs/kernels.md)"

static int cmd_trace(int argc, char **argv) {
    const char *preset = "fmnist-p7-mlp2", *config = NULL, *objective = "mae", *policy = "block";
    int batch = 64, json = 0, classes = 10;
    double mask_ratio = -1, clip = -1;
    for (int i = 0; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        char *end;
        if (!strcmp(argv[i], "--kernels")) {
            char *text = NULL;
            size_t len = 0;
            if (vt_kernel_contract(&text, &len)) {
                fprintf(stderr, "vitrine trace: %s\n", vt_last_error());
                return 1;
            }
            fwrite(text, 1, len, stdout);
            vt_free(text);
            return 0;
        } else if (!strcmp(argv[i], "--preset") && v)
            preset = argv[++i], config = NULL;
        else if (!strcmp(argv[i], "--config") && v)
            config = argv[++i];
        else if (!strcmp(argv[i], "--objective") && v)
            objective = argv[++i];
        else if (!strcmp(argv[i], "--grad-checkpointing") && v)
            policy = argv[++i];
        else if (!strcmp(argv[i], "--json"))
            json = 1;
        else if (!strcmp(argv[i], "--batch") && v) {
            if (!whole("trace", argv[i], v, 1, &batch)) return 2;
            i++;
        } else if (!strcmp(argv[i], "--classes") && v) {
            if (!whole("trace", argv[i], v, 1, &classes)) return 2;
            i++;
        } else if (!strcmp(argv[i], "--threads") && v) {
            if (!whole("trace", argv[i], v, 1, &threads_opt)) return 2;
            i++;
        } else if (!strcmp(argv[i], "--mask-ratio") && v) {
            mask_ratio = strtod(v, &end);
            if (end == v || *end || !(mask_ratio >= 0 && mask_ratio < 1)) {
                fprintf(stderr, "vitrine trace: --mask-ratio: '%s' is not in [0, 1)\n", v);
                return 2;
            }
            i++;
        } else if (!strcmp(argv[i], "--clip-norm") && v) {
            clip = strtod(v, &end);
            if (end == v || *end || !(clip >= 0 && clip < 1e30)) {
                fprintf(stderr, "vitrine trace: --clip-norm: '%s' is not a number >= 0\n", v);
                return 2;
            }
            i++;
        } else {
            fprintf(stderr, "vitrine trace: unknown option %s\nusage: %s\n", argv[i], USAGE_TRACE);
            return 2;
        }
    }
    vt_kind kind;
    int encode = !strcmp(objective, "encode"), classify = !strcmp(objective, "classify");
    if (!strcmp(objective, "mae"))
        kind = VT_KIND_MAE;
    else if (!strcmp(objective, "aim"))
        kind = VT_KIND_AIM;
    else if (classify)
        kind = VT_KIND_TIMM;
    else if (encode)
        kind = VT_KIND_LIGHTLY;
    else {
        fprintf(stderr, "vitrine trace: --objective '%s': use mae, aim, classify or encode\n", objective);
        return 2;
    }
    if (start_threads("trace")) return 2;
    int threads = threads_opt > 0 ? threads_opt : vt_threads_max();
    vt_model_config mc;
    vt_status rc;
    if (config) {
        uint8_t *bytes = NULL;
        size_t len = 0;
        if (config[0] == '{')
            rc = vt_model_config_from_json(config, strlen(config), kind, &mc);
        else if (!(rc = read_file(config, &bytes, &len)))
            rc = vt_model_config_from_json((const char *)bytes, len, kind, &mc);
        free(bytes);
    } else {
        rc = vt_model_preset(preset, kind, &mc);
        if (!rc && classify) {
            mc.enc.num_classes = classes;
            mc.enc.global_pool = VT_POOL_AVG;
        }
    }
    if (!rc && encode) mc.enc.mask_token = 1;
    vt_model *m = NULL;
    vt_trace *t = NULL;
    float *images = NULL, *douts = NULL;
    int32_t *labels = NULL;
    if (!rc) rc = vt_model_create(&mc, &m);
    if (!rc) rc = vt_init_weights(m, 0);
    if (!rc) rc = vt_set_grad_checkpointing(m, policy);
    if (!rc) rc = vt_model_set_threads(m, threads);
    size_t img = (size_t)batch * mc.enc.in_chans * mc.enc.img_size * vt_img_width(&mc.enc);
    if (!rc && !(images = calloc(img + 1, sizeof *images)))
        rc = vt_fail(VT_ERR_NOMEM, "out of memory: images");
    if (!rc && encode) {
        vt_inputs in;
        memset(&in, 0, sizeof in);
        in.images = images;
        in.batch = batch;
        size_t n = (size_t)batch * (size_t)vt_config_tokens(&mc.enc) * mc.enc.embed_dim;
        if (!(douts = calloc(n + 1, sizeof *douts)))
            rc = vt_fail(VT_ERR_NOMEM, "out of memory: upstream gradient");
        const float *d[1] = { douts };
        if (!rc) rc = vt_trace_call(m, VT_FN_ENCODE, &in, 1, d, 1, NULL, 1, &t);
    } else if (!rc) {
        vt_train_config tc;
        vt_train_config_default(&tc, kind);
        if (mask_ratio >= 0) tc.mask_ratio = (float)mask_ratio;
        if (clip >= 0) tc.clip_norm = (float)clip;
        rc = vt_trainer_init(m, &tc);
        if (!rc && classify && !(labels = calloc((size_t)batch, sizeof *labels)))
            rc = vt_fail(VT_ERR_NOMEM, "out of memory: labels");
        if (!rc) rc = vt_trace_train_step(m, images, labels, batch, &t);
    }
    char *text = NULL;
    size_t len = 0;
    if (!rc) rc = json ? vt_trace_json(t, &text, &len) : vt_trace_summary(t, &text, &len);
    if (!rc) {
        if (!json) printf("%s (%s), ", config ? "config" : preset, objective);
        fwrite(text, 1, len, stdout);
    }
    vt_free(text);
    vt_trace_free(t);
    vt_model_free(m);
    free(images), free(douts), free(labels);
    if (rc) {
        fprintf(stderr, "vitrine trace: %s\n", vt_last_error());
        return 1;
    }
    return 0;
}

/* ---- help: every command answers --help / -h on stdout, exit 0 (as web/cli.js does) ---- */

#define HELP_THREADS                                                                                         \
    "  --threads N                kernel threads (default: every online core; the same bits at any count)\n"
#define HELP_POLICY                                                                                          \
    "POLICY: none, block, every:K, sqrt, budget:BYTES, selective (gradient checkpointing; every policy\n"    \
    "gives the same bits)\n"

static const struct {
    const char *name, *help;
} HELP[] = {
    { "parity",
      "usage: vitrine parity FILE... [--grad-checkpointing POLICY] [--dump DIR] [--json] [--threads N]\n"
      "  Runs the call each parity FILE describes (docs/parity-format.md) through the native engine and\n"
      "  compares every expect/ tensor: err = max|ours - expect| / max|expect|, PASS when every err <= "
      "1e-4,\n"
      "  with PyTorch's own float32 error (torch32_err) beside it. One line per file, then the count.\n"
      "  Exit status: 0 every file passed, 1 a file failed or could not be run, 2 a usage error or a file\n"
      "  that could not be read.\n\n"
      "options:\n"
      "  --grad-checkpointing POLICY the checkpointing policy the call runs under (default none)\n"
      "  --dump DIR                 write what was computed to DIR/<file name> (the expect/ keys)\n"
      "  --json                     one JSON object per file, in an array (the wasm build's, byte for "
      "byte)\n" HELP_THREADS "  -h, --help                 this help\n\n" HELP_POLICY },
    { "plan",
      "usage: vitrine plan [--preset NAME] [--batch B] [--tokens-kept K] [--grad-checkpointing POLICY] "
      "[--json]\n"
      "                    [--threads N]\n"
      "  The bytes an encode pass and its backward need (parameters, gradients, optimizer, activations),\n"
      "  planned before anything is allocated: what `vitrine plan --objective encode` prints.\n"
      "  Exit status: 0 planned, 1 the plan could not be made, 2 a usage error.\n\n"
      "options:\n"
      "  --preset NAME              a timm preset (default vit_tiny_patch16_224)\n"
      "  --batch B                  images (default 1)\n"
      "  --tokens-kept K            tokens each image keeps (MAE's idx_keep; default all)\n"
      "  --grad-checkpointing POLICY the policy (default none)\n"
      "  --json                     one JSON object\n" HELP_THREADS
      "  -h, --help                 this help\n\n" HELP_POLICY },
    { "trace",
      "usage: " USAGE_TRACE "\n"
      "  Records one training step (or an encoder call and its backward) as the kernel calls it is made\n"
      "  of, without running it, and prints a summary (--json: the list, docs/kernels.md).\n"
      "  Exit status: 0 recorded, 1 it could not be, 2 a usage error.\n\n"
      "options:\n"
      "  --preset NAME              a preset (default fmnist-p7-mlp2), or --config JSON|FILE: a model "
      "config\n"
      "  --objective OBJ            mae (default), aim, classify, encode\n"
      "  --batch B                  images (default 64)\n"
      "  --grad-checkpointing POLICY the policy (default block)\n"
      "  --mask-ratio R             MAE's (default the engine's 0.75)\n"
      "  --clip-norm X              gradient clipping (default off)\n"
      "  --classes C                classify: classes (default 10)\n"
      "  --json                     the list as JSON\n"
      "  --kernels                  the kernel table (the contract of a backend)\n" HELP_THREADS
      "  -h, --help                 this help\n\n" HELP_POLICY },
};
#define USAGE_ALL                                                                                            \
    "usage: vitrine parity FILE... [--grad-checkpointing POLICY] [--dump DIR] [--json] [--threads N]\n"      \
    "       vitrine plan --preset NAME --batch B [--tokens-kept K] [--grad-checkpointing POLICY] "           \
    "[--json] [--threads N]\n"                                                                               \
    "       " USAGE_TRACE "\n"                                                                               \
    "       vitrine COMMAND --help   (its options)\n"

static int asks_help(int argc, char **argv) {
    for (int i = 0; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return 1;
    return 0;
}

int main(int argc, char **argv) {
    const char *cmd = argc >= 2 ? argv[1] : "";
    int help_of = !strcmp(cmd, "help") && argc == 3; /* vitrine help COMMAND */
    if (help_of) cmd = argv[2];
    for (size_t k = 0; k < sizeof HELP / sizeof HELP[0]; k++)
        if (!strcmp(cmd, HELP[k].name) && (help_of || asks_help(argc - 2, argv + 2))) {
            fputs(HELP[k].help, stdout);
            return 0;
        }
    if (!strcmp(cmd, "parity")) return cmd_parity(argc - 2, argv + 2);
    if (!strcmp(cmd, "plan")) return cmd_plan(argc - 2, argv + 2);
    if (!strcmp(cmd, "trace")) return cmd_trace(argc - 2, argv + 2);
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
        fputs(USAGE_ALL, stdout);
        return 0;
    }
    if (*cmd) fprintf(stderr, "vitrine: unknown command '%s'\n", cmd);
    fputs(USAGE_ALL, stderr);
    return 2;
}
