/* fuzz_weights: safetensors weights into tiny models of every kind, under the prefixes the CLI and
 * the demo use: all-or-nothing (a refused file leaves every parameter as it was); an accepted one
 * saves back to a file that loads again. */
#include "fuzz_common.h"
#include <stdint.h>

static vt_model *models[5];
static float *snap[5];

static size_t param_floats(vt_model *m) { return vt_param_total(m); }
static float *params(vt_model *m) { return vt_param_data(m, 0); } /* one buffer, state_dict order */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* {kind, model prefix, file prefix} */
    static const struct {
        int kind;
        const char *mp, *fp;
    } runs[] = { { VT_KIND_TIMM, "", "" },
                 { VT_KIND_TIMM, "", "model." },
                 { VT_KIND_LIGHTLY, "", "" },
                 { VT_KIND_LIGHTLY, "vit.", "" },
                 { VT_KIND_CAUSAL, "", "" },
                 { VT_KIND_MAE, "", "" },
                 { VT_KIND_MAE, "backbone.vit.", "" },
                 { VT_KIND_AIM, "", "" } };
    for (size_t r = 0; r < sizeof runs / sizeof runs[0]; r++) {
        int k = runs[r].kind;
        if (!models[k]) {
            models[k] = fz_tiny_model((vt_kind)k);
            snap[k] = malloc(param_floats(models[k]) * sizeof(float));
            if (!snap[k]) abort();
        }
        vt_model *m = models[k];
        size_t n = param_floats(m) * sizeof(float);
        memcpy(snap[k], params(m), n);
        int rc = vt_load_safetensors(m, data, size, runs[r].mp, runs[r].fp);
        if (rc && memcmp(snap[k], params(m), n)) abort(); /* refused, yet changed */
        if (!rc) {                                        /* what loaded saves and loads again */
            uint8_t *out = NULL;
            size_t len = 0;
            if (vt_save_safetensors(m, runs[r].mp, runs[r].fp, &out, &len) ||
                vt_load_safetensors(m, out, len, runs[r].mp, runs[r].fp))
                abort();
            vt_free(out);
            memcpy(params(m), snap[k], n);
        }
    }
    return 0;
}
