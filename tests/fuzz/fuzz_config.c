/* fuzz_config: a model config as JSON (the CLI's --config, parity files, checkpoints) for every
 * kind; one that validates must print to JSON and read back to the same JSON (what a checkpoint
 * records is what it loads). Sizes are validated without building the model. */
#include "vitrine.h"
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    for (int k = 0; k < 5; k++) {
        vt_model_config c, d;
        if (vt_model_config_from_json((const char *)data, size, (vt_kind)k, &c)) continue;
        if (vt_config_validate(&c)) continue;
        char a[4096], b[4096];
        if (vt_model_config_to_json(&c, a, sizeof a)) abort();
        if (vt_model_config_from_json(a, strlen(a), (vt_kind)k, &d)) abort();
        if (vt_config_validate(&d) || vt_model_config_to_json(&d, b, sizeof b) || strcmp(a, b)) abort();
    }
    vt_vit_config v;
    vt_vit_config_default(&v);
    vt_vit_config_from_json((const char *)data, size, &v);
    return 0;
}
