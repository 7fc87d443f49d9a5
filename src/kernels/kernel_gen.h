/* kernel_gen.h: the preprocessor vocabulary that turns kernel_list.h into code (exec.c): the
 * kernel enum, the typed entry points the orchestration calls, the dispatcher that runs a call
 * (directly or from a recorded list), each call's operand lengths and FLOPs, and the names the
 * trace and the docs print. Only here are macros iterated; the list itself stays a table.
 *
 * An entry is X(name, ints, floats, operands, flops, call, doc):
 *   ints      (M, K, N)          names of the integer arguments (int64 in a record)
 *   floats    (eps)              names of the float arguments
 *   operands  ((out, F32, W, M * N), ...)  buffer operands in call order: name, element type
 *             (F32 F64 I64 I32 U8), access (R read, W every element written, RW read and / or
 *             partly written), length in elements: an expression of the ints
 *   flops     an expression of the ints (operand names test presence: an operand may be NULL)
 *   call      the implementation called with those names (kernels.h, ops.h)
 *   doc       one line of semantics */
#ifndef VT_KERNEL_GEN_H
#define VT_KERNEL_GEN_H

#define VT_CAT_(a, b)    a##b
#define VT_CAT(a, b)     VT_CAT_(a, b)
#define VT_UNPACK(...)   __VA_ARGS__
#define VT_APPLY(m, ...) m(__VA_ARGS__)
/* number of arguments, 0..14 (GNU ##__VA_ARGS__: no argument gives 0) */
#define VT_NARG(...)                                                                      VT_NARG_(0, ##__VA_ARGS__, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0)
#define VT_NARG_(_0, _1, _2, _3, _4, _5, _6, _7, _8, _9, _10, _11, _12, _13, _14, N, ...) N
/* f(i, item) for each item of a parenthesised list, i = 0, 1, ... (as an expression) */
#define VT_EACH(f, list)         VT_EACH_X(f, VT_UNPACK list)
#define VT_EACH_X(f, ...)        VT_EACH_(f, __VA_ARGS__) /* expands the items before they are counted */
#define VT_EACH_(f, ...)         VT_CAT(VT_EACH_, VT_NARG(__VA_ARGS__))(f, 0, ##__VA_ARGS__)
#define VT_EACH_0(f, i, ...)     /* an empty list still passes one empty item */
#define VT_EACH_1(f, i, a)       f(i, a)
#define VT_EACH_2(f, i, a, ...)  f(i, a) VT_EACH_1(f, i + 1, __VA_ARGS__)
#define VT_EACH_3(f, i, a, ...)  f(i, a) VT_EACH_2(f, i + 1, __VA_ARGS__)
#define VT_EACH_4(f, i, a, ...)  f(i, a) VT_EACH_3(f, i + 1, __VA_ARGS__)
#define VT_EACH_5(f, i, a, ...)  f(i, a) VT_EACH_4(f, i + 1, __VA_ARGS__)
#define VT_EACH_6(f, i, a, ...)  f(i, a) VT_EACH_5(f, i + 1, __VA_ARGS__)
#define VT_EACH_7(f, i, a, ...)  f(i, a) VT_EACH_6(f, i + 1, __VA_ARGS__)
#define VT_EACH_8(f, i, a, ...)  f(i, a) VT_EACH_7(f, i + 1, __VA_ARGS__)
#define VT_EACH_9(f, i, a, ...)  f(i, a) VT_EACH_8(f, i + 1, __VA_ARGS__)
#define VT_EACH_10(f, i, a, ...) f(i, a) VT_EACH_9(f, i + 1, __VA_ARGS__)
#define VT_EACH_11(f, i, a, ...) f(i, a) VT_EACH_10(f, i + 1, __VA_ARGS__)
#define VT_EACH_12(f, i, a, ...) f(i, a) VT_EACH_11(f, i + 1, __VA_ARGS__)
#define VT_EACH_13(f, i, a, ...) f(i, a) VT_EACH_12(f, i + 1, __VA_ARGS__)
#define VT_EACH_14(f, i, a, ...) f(i, a) VT_EACH_13(f, i + 1, __VA_ARGS__)
#define VT_COUNT(list)           VT_APPLY(VT_NARG, VT_UNPACK list)

/* element types: C type, size */
#define VT_CT_F32 float
#define VT_CT_F64 double
#define VT_CT_I64 int64_t
#define VT_CT_I32 int32_t
#define VT_CT_U8  uint8_t
/* access: the const of the pointer a read-only operand gets */
#define VT_CQ_R const
#define VT_CQ_W
#define VT_CQ_RW

/* an operand as a parameter `, const float *inp`, as a local from op_[i], as its element-size /
 * type / access row */
#define VT_OP_PARAM(i, t)                   VT_APPLY(VT_OP_PARAM_, i, VT_UNPACK t)
#define VT_OP_PARAM_(i, name, dt, acc, len) , VT_CQ_##acc VT_CT_##dt *name
#define VT_OP_BIND(i, t)                    VT_APPLY(VT_OP_BIND_, i, VT_UNPACK t)
#define VT_OP_BIND_(i, name, dt, acc, len)                                                                   \
    VT_CQ_##acc VT_CT_##dt *name = (VT_CQ_##acc VT_CT_##dt *)op_[i];                                         \
    (void)name;
#define VT_OP_PTR(i, t)                   VT_APPLY(VT_OP_PTR_, i, VT_UNPACK t)
#define VT_OP_PTR_(i, name, dt, acc, len) (void *)name,
#define VT_OP_LEN(i, t)                   VT_APPLY(VT_OP_LEN_, i, VT_UNPACK t)
#define VT_OP_LEN_(i, name, dt, acc, len) len_[i] = (uint64_t)(len);
#define VT_OP_ROW(i, t)                   VT_APPLY(VT_OP_ROW_, i, VT_UNPACK t)
#define VT_OP_ROW_(i, name, dt, acc, len) { #name, VT_DT_##dt, VT_ACC_##acc, #len },
/* integer and float arguments */
#define VT_INT_PARAM(i, name) , int64_t name
#define VT_INT_BIND(i, name)                                                                                 \
    int64_t name = ia_[i];                                                                                   \
    (void)name;
#define VT_FLT_PARAM(i, name) , float name
#define VT_FLT_BIND(i, name)                                                                                 \
    float name = fa_[i];                                                                                     \
    (void)name;
#define VT_ARG_VALUE(i, name) name,
#define VT_NAME_STR(i, name)  #name,
#endif
