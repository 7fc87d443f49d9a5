/* status.h: the error convention of the whole engine.
 * Every public function returns a vt_status (0 = OK, negative = failure) and, on failure, leaves
 * a human-readable message for vt_last_error(). The library never prints, exits or aborts on bad
 * input (internal invariants, bugs in vitrine, are assert()s in the .c files, never in a header). */
#ifndef VT_STATUS_H
#define VT_STATUS_H

typedef enum {
    VT_OK = 0,
    VT_ERR_ARG = -1,      /* bad argument: wrong shape, index out of range, unknown option */
    VT_ERR_NOMEM = -2,    /* an allocation failed (the message says how many bytes) */
    VT_ERR_FORMAT = -3,   /* a corrupt, truncated or hostile file */
    VT_ERR_MISMATCH = -4, /* missing / unexpected / mis-shaped tensors */
    VT_ERR_NUMERIC = -5,  /* NaN or Inf where a finite number is required */
    VT_ERR_BUDGET = -6,   /* a plan does not fit the memory budget */
    VT_ERR_STATE = -7,    /* call made in the wrong state (e.g. backward without forward) */
    VT_ERR_IO = -8        /* file system error (tools only; the engine itself does no I/O) */
} vt_status;

/* Sets the last error message (printf-style) and returns `code`, so that callers can write
 * `return vt_fail(VT_ERR_ARG, "idx_keep[%d] = %lld out of range", i, v);` */
vt_status vt_fail(int code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
const char *vt_last_error(void);
void vt_clear_error(void);
const char *vt_status_name(int code);

#endif
