/* status.c: last-error message storage (the engine is single-threaded, as wasm is by default). */
#include "status.h"
#include <stdarg.h>
#include <stdio.h>

static char vt_errbuf[1024];

vt_status vt_fail(int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(vt_errbuf, sizeof vt_errbuf, fmt, ap);
    va_end(ap);
    return code;
}

const char *vt_last_error(void) { return vt_errbuf; }
void vt_clear_error(void) { vt_errbuf[0] = 0; }

const char *vt_status_name(int code) {
    switch (code) {
        case VT_OK: return "ok";
        case VT_ERR_ARG: return "bad argument";
        case VT_ERR_NOMEM: return "out of memory";
        case VT_ERR_FORMAT: return "bad file format";
        case VT_ERR_MISMATCH: return "tensor mismatch";
        case VT_ERR_NUMERIC: return "non-finite number";
        case VT_ERR_BUDGET: return "over memory budget";
        case VT_ERR_STATE: return "bad state";
        case VT_ERR_IO: return "i/o error";
        default: return "unknown error";
    }
}
