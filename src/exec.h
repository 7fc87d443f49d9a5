/* exec.h: the one dispatch point between the orchestration and the kernels. The orchestration
 * (vit.c, block.c, objectives.c, classify.c, optim.c, trainer.c, api.c) calls a kernel of the
 * list (kernels/kernel_list.h) only as vt_k_<name>(model, operands..., ints..., floats...), which
 * runs it -- or, while the model records (record.h), appends it to the recorded list instead. */
#ifndef VT_EXEC_H
#define VT_EXEC_H
#include "model.h"
#include "kernels/kernel_gen.h"
#include "kernels/kernel_list.h"

#define VT_KERNEL_ENUM(name, ...) VT_K_##name,
typedef enum { VT_KERNEL_LIST(VT_KERNEL_ENUM) VT_KERNEL_COUNT } vt_kernel;
#undef VT_KERNEL_ENUM

#define VT_KERNEL_PROTO(name, ints, floats, ops, flops, call, doc)                                           \
    void vt_k_##name(struct vt_model *m_ VT_EACH(VT_OP_PARAM, ops) VT_EACH(VT_INT_PARAM, ints)               \
                         VT_EACH(VT_FLT_PARAM, floats));
VT_KERNEL_LIST(VT_KERNEL_PROTO)
#undef VT_KERNEL_PROTO

/* Runs kernel k on the operand pointers and arguments (the direct path and the replay's). */
void vt_kernel_run(int k, void *const *op, const int64_t *ia, const float *fa);
/* An arena buffer zeroed by a fill kernel (NULL past the plan, as vt_arena_alloc). */
float *vt_zalloc(struct vt_model *m, size_t nfloats, const char *name, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
/* Where the calls that follow are, for the recorded list (phase, chain 0/1 or -1, block or -1). */
void vt_exec_mark(struct vt_model *m, int phase, int chain, int block);
/* 1 while the model records: kernels do not run, so the host must not read what they write. */
static inline int vt_exec_recording(const struct vt_model *m) { return m->arena.rec != NULL; }
#endif
