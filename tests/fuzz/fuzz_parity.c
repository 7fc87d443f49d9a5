/* fuzz_parity: a whole parity run (harness/parity.c: read the file, build the model, run the call
 * forward and backward, compare) on any bytes, plain and under a checkpointing policy; its JSON
 * result must be valid JSON (vt_json_parse), whatever the numbers (NaN, Inf). Files describing
 * models larger than fz_small_enough are skipped: sizes are tests/test_hardening.c's part. */
#include "fuzz_common.h"
#include "json.h"
#include "parity.h"
#include "safetensors.h"
#include <stdint.h>

static int skip(const uint8_t *data, size_t size) {
    vt_st_file f;
    if (vt_st_parse(data, size, &f)) return 0; /* the harness refuses it itself */
    const char *module = vt_st_meta(&f, "module"), *cfg = vt_st_meta(&f, "config");
    int too_big = 0;
    if (module && cfg) {
        vt_kind kinds[] = { VT_KIND_TIMM, VT_KIND_LIGHTLY, VT_KIND_CAUSAL, VT_KIND_MAE, VT_KIND_AIM };
        for (int k = 0; k < 5 && !too_big; k++) {
            vt_model_config c;
            if (!vt_model_config_from_json(cfg, strlen(cfg), kinds[k], &c) && !fz_small_enough(&c))
                too_big = 1;
        }
    }
    vt_st_free(&f);
    return too_big;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (skip(data, size)) return 0;
    const char *policies[] = { NULL, "block" };
    for (int p = 0; p < 2; p++) {
        vt_parity_result r;
        vt_parity_run(data, size, policies[p], p == 0, &r);
        char *js = NULL;
        size_t n = 0;
        if (vt_parity_json(&r, "f", &js, &n)) abort();
        /* the result must be JSON: no inf / nan tokens; an infinite error is written 1e999 (valid
         * JSON that JSON.parse reads as Infinity), which vt_json_parse refuses as out of range,
         * so it is checked as 1e300 */
        for (char *q = js; (q = strstr(q, "1e999")); q += 5) memcpy(q, "1e300", 5);
        vt_json *j = NULL;
        if (vt_json_parse(js, n, &j)) abort();
        vt_json_free(j);
        free(js);
        vt_st_file d;
        if (r.dump && vt_st_parse(r.dump, r.dump_len, &d)) abort(); /* the dump must be safetensors */
        if (r.dump) vt_st_free(&d);
        vt_parity_free(&r);
    }
    return 0;
}
