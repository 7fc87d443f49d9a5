/* fuzz_checkpoint: training states (vitrine-train/1) into a tiny MAE, AIM and classifier trainer,
 * each input as it is and with its CRC-32s written afresh (so that a mutation also reaches the
 * checks behind them): a refused state leaves parameters, AdamW state, step, generator and
 * schedule as they were; an accepted one holds finite values only (second moments >= 0) and
 * saves again (never a non-JSON number) to bytes that load. */
#include "fuzz_trainer.h"
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    uint8_t *fixed = NULL;
    size_t fixed_len = 0;
    int fix = !fz_fix_crcs(data, size, &fixed, &fixed_len);
    for (int k = 0; k < FZ_TRAINERS; k++) {
        if (!fz_load_checked(k, data, size)) fz_restart(k);
        if (fix && !fz_load_checked(k, fixed, fixed_len)) fz_restart(k);
    }
    free(fixed);
    return 0;
}
