// errors.js: what every engine failure and every bad argument found in JavaScript throws.

/** VitrineError.code for each vt_status: its name in src/status.h (tests/node/errors.test.mjs
 * checks the two against each other). Errors found in JS carry the status the engine would give. */
export const STATUS_CODES = Object.freeze({
  [-1]: 'VT_ERR_ARG',
  [-2]: 'VT_ERR_NOMEM',
  [-3]: 'VT_ERR_FORMAT',
  [-4]: 'VT_ERR_MISMATCH',
  [-5]: 'VT_ERR_NUMERIC',
  [-6]: 'VT_ERR_BUDGET',
  [-7]: 'VT_ERR_STATE',
  [-8]: 'VT_ERR_IO',
});

export class VitrineError extends Error {
  constructor(message, status) {
    super(message);
    this.name = 'VitrineError';
    this.status = status; // the engine's vt_status (negative)
    this.code = STATUS_CODES[status] || 'VT_ERR_UNKNOWN'; // e.g. 'VT_ERR_ARG'
  }
}

/** What goes wrong with data: a VitrineError (VT_ERR_ARG) whose message names the image / file. */
export class DataError extends VitrineError {
  constructor(message) {
    super(message, -1);
    this.name = 'DataError';
  }
}

/** A run or an operation its owner ended, not a failure: kind 'disposed' (dispose() while it ran or
 * waited) or 'aborted'. VT_ERR_STATE; named 'AbortError' as the platform's aborted operations are. */
export class AbortError extends VitrineError {
  constructor(message, kind = 'aborted') {
    super(message, -7);
    this.name = 'AbortError';
    this.kind = kind; // 'disposed' | 'aborted'
  }
}
