/* parity.h: the parity harness, a test oracle beside the engine (not part of it).
 *
 * It runs a PyTorch reference dump (../shared/docs/parity-format.md) through the engine's public
 * API (src/vitrine.h) and compares every expect/ tensor: err = max|ours - expect| / max|expect|,
 * pass when every err <= VT_PARITY_TOL. It works on bytes (no files), so the native CLI
 * (tools/cli.c) and the wasm export (wasm/exports.c) share it, and it writes the one JSON form
 * of a result that both print. */
#ifndef VT_PARITY_H
#define VT_PARITY_H
#include <stddef.h>
#include <stdint.h>

#include "vitrine.h"

#ifdef __cplusplus
extern "C" {
#endif

#define VT_PARITY_TOL 1e-4

typedef struct {
    char name[160];     /* expect/ key without the prefix */
    double err;         /* max|ours - expect| / max|expect| */
    double torch32_err; /* the same for PyTorch's float32 result (-1 if absent) */
} vt_parity_tensor;

typedef struct {
    int pass;         /* every err <= VT_PARITY_TOL */
    vt_status status; /* VT_OK when the file ran (pass or fail), else why it could not */
    char error[512];  /* non-empty when the file could not be run */
    char module[96], fn[48];
    int n;               /* compared tensors */
    vt_parity_tensor *t; /* n entries */
    int worst;           /* index of the worst err, -1 if none */
    double max_torch32_err;
    uint8_t *dump; /* with want_dump: safetensors of what vitrine computed */
    size_t dump_len;
} vt_parity_result;

/* Runs the call a parity file describes, with the given checkpointing policy (NULL = none), and
 * compares every expect/ tensor. Returns VT_OK when the file ran (pass or fail in r->pass), an
 * error when it could not be run (r->error says why, r->status is the return value). */
vt_status vt_parity_run(const uint8_t *bytes, size_t len, const char *policy, int want_dump,
                        vt_parity_result *r);
/* A file run elsewhere -- a WebGPU replay (web/webgpu/parity.js): vt_parity_open makes the model
 * of a model's file (its config and parameters, the policy; NULL policy = none) and reads the
 * call's inputs; vt_parity_record records the call forward only (where it leaves the outputs) and
 * forward + backward with the file's upstream gradients (parameter gradients, d images when the
 * file expects them): the caller replays both over the model's parameters and the lists' recorded
 * inputs, and writes what it computed as a dump (the --dump layout: the expect/ keys without the
 * prefix); vt_parity_check compares a dump with the file as vt_parity_run compares its own. */
typedef struct vt_parity_job vt_parity_job;
vt_status vt_parity_open(const uint8_t *bytes, size_t len, const char *policy, vt_parity_job **out);
vt_model *vt_parity_model(vt_parity_job *j);
vt_status vt_parity_record(vt_parity_job *j, vt_trace **fwd, vt_trace **full);
/* Output i's name in the file (loss, out, out_dist, intermediates.<k>, intermediates_prefix.<k>), as
 * vt_parity_run names what it computes: another backend names its outputs by it. */
vt_status vt_parity_output_name(const vt_parity_job *j, int i, char *name, size_t len);
vt_status vt_parity_check(const uint8_t *bytes, size_t len, const uint8_t *dump, size_t dump_len,
                          vt_parity_result *r);
void vt_parity_close(vt_parity_job *j);
/* A result for a file that was never run (e.g. it could not be read): pass 0, status, message. */
void vt_parity_fail(vt_parity_result *r, vt_status status, const char *message);
/* The result as one JSON object (malloc'd, NUL-terminated, free with free()):
 *   {"file": ..., "pass": ..., "status": ..., "module": ..., "fn": ..., "error": ...,
 *    "worst": ..., "err": ..., "torch32_err": ..., "max_torch32_err": ...,
 *    "tensors": [{"name": ..., "err": ..., "torch32_err": ...}, ...]}
 * "file" only when file != NULL, "error" only when there is one, "worst" / "err" / "torch32_err"
 * only when a tensor was compared; numbers as %.9e; a torch32 error the file does not have (no
 * torch32/ tensor) is null, and so is max_torch32_err when no tensor has one. */
vt_status vt_parity_json(const vt_parity_result *r, const char *file, char **out, size_t *out_len);
void vt_parity_free(vt_parity_result *r);
/* The largest PyTorch float32 error of the compared tensors; -1 when none has one. */
double vt_parity_max_torch32(const vt_parity_result *r);

#ifdef __cplusplus
}
#endif
#endif
