# bench/bench.cmake: the benchmark programs (included by CMakeLists.txt). Built, never run as tests;
# `bash bench/run.sh` builds the target vitrine_bench and runs everything (see bench/run.mjs).
#   native SSE2:  build/kernel_bench (peak + matmul/attention kernels), build/train_bench (training
#                 step per checkpointing policy: time, memory, kernel breakdown)
#   native FMA:   build/kernel_bench_fma, build/train_bench_fma (over vitrine_fma, the relaxed
#                 wasm build's twin; x86-64 with -mfma only)
#   wasm (target vitrine_bench, not built by default): build/wasm/kernel_bench-{simd,relaxed}.wasm,
#                 train_bench-{simd,relaxed}.wasm (WASI commands, bench/wasi_run.mjs) and
#                 peak-{simd,relaxed}.wasm (reactors: the peak loop for bench/step_bench.mjs)
# The kernels' dispatch functions, wrapped at link time so train_bench can time each kernel
set(VT_BENCH_WRAPPED vt_matmul_forward vt_matmul_backward vt_attention_forward vt_attention_backward
    vt_layernorm_forward vt_layernorm_backward vt_gelu_forward vt_gelu_backward)
set(VT_BENCH_WRAP_FLAGS)
foreach(s ${VT_BENCH_WRAPPED})
  list(APPEND VT_BENCH_WRAP_FLAGS -Wl,--wrap=${s})
endforeach()
set(VT_BENCH_HEADERS ${CMAKE_SOURCE_DIR}/bench/bench_util.h ${CMAKE_SOURCE_DIR}/bench/peak_loop.h
    ${CMAKE_SOURCE_DIR}/bench/peak_wasm.h)

# The portable peak loop built for AVX2 + FMA, reported beside (NOT vitrine's native flags)
set(VT_BENCH_X86 OFF)
if(CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64|amd64" AND CMAKE_C_COMPILER_ID MATCHES "GNU|Clang")
  set(VT_BENCH_X86 ON)
  set_source_files_properties(bench/peak_avx2.c PROPERTIES COMPILE_OPTIONS "-mavx2;-mfma;-ffp-contract=fast")
  set_source_files_properties(bench/peak_fma128.c PROPERTIES COMPILE_OPTIONS "-mfma;-ffp-contract=fast")
endif()

# native: the SSE2 library, and the FMA library where the top-level build made it
set(VT_BENCH_OUTPUTS)
set(native_libs vitrine)
if(VT_NATIVE_FMA_ON)
  list(APPEND native_libs vitrine_fma)
endif()
foreach(lib ${native_libs})
  set(sfx "")
  if(lib STREQUAL "vitrine_fma")
    set(sfx "_fma")
  endif()
  add_executable(kernel_bench${sfx} bench/kernel_bench.c)
  target_compile_options(kernel_bench${sfx} PRIVATE ${VT_WARN})
  target_include_directories(kernel_bench${sfx} PRIVATE src bench)
  target_link_libraries(kernel_bench${sfx} ${lib})
  if(VT_BENCH_X86)
    target_sources(kernel_bench${sfx} PRIVATE bench/peak_avx2.c)
    target_compile_definitions(kernel_bench${sfx} PRIVATE VT_BENCH_AVX2)
    if(sfx STREQUAL "_fma")
      target_sources(kernel_bench${sfx} PRIVATE bench/peak_fma128.c)
      target_compile_definitions(kernel_bench${sfx} PRIVATE VT_BENCH_FMA128 BENCH_BUILD_NAME="native-fma")
    endif()
  endif()
  add_executable(train_bench${sfx} bench/train_bench.c)
  target_compile_options(train_bench${sfx} PRIVATE ${VT_WARN})
  target_include_directories(train_bench${sfx} PRIVATE src bench)
  target_link_libraries(train_bench${sfx} ${lib} ${VT_BENCH_WRAP_FLAGS})
  if(sfx STREQUAL "_fma")
    target_compile_definitions(train_bench${sfx} PRIVATE BENCH_BUILD_NAME="native-fma")
  endif()
  list(APPEND VT_BENCH_OUTPUTS kernel_bench${sfx} train_bench${sfx})
endforeach()

if(VT_WASM AND VT_WASI_CC AND VT_WASM_LD AND EXISTS ${VT_WASI_SYSROOT}/lib/wasm32-wasi/libc.a)
  set(bench_core ${VT_SOURCES})
  list(TRANSFORM bench_core PREPEND ${CMAKE_SOURCE_DIR}/)
  set(bench_wasi_flags --target=wasm32-wasi --sysroot=${VT_WASI_SYSROOT} ${VT_WASM_CFLAGS}
      -I${CMAKE_SOURCE_DIR}/bench -Wl,--max-memory=4294967296 -Wl,-z,stack-size=1048576)
  set(bench_wasm)
  # wasm SIMD128 (clang-14)
  vt_wasm_variant(simd vsrc vflags ${bench_core})
  foreach(prog kernel_bench train_bench)
    # All the memory up front (pages are touched lazily): under Node 20's node:wasi, memory
    # growth in the middle of the run (the activation arena) crashed V8 at random ("Invalid
    # bytecode", SIGSEGV) - a stale view of the memory on the WASI side, it seems; with no
    # growth it never did.
    set(pflags -Wl,--initial-memory=268435456)
    if(prog STREQUAL "train_bench")
      set(pflags ${VT_BENCH_WRAP_FLAGS} -Wl,--initial-memory=2147483648)
    endif()
    set(out ${VT_WASM_DIR}/${prog}-simd.wasm)
    add_custom_command(OUTPUT ${out}
      COMMAND ${VT_WASI_CC} ${bench_wasi_flags} ${vflags} ${pflags} ${vsrc}
              ${CMAKE_SOURCE_DIR}/bench/${prog}.c -o ${out} -lm
      DEPENDS ${vsrc} ${VT_WASM_HEADERS} ${VT_BENCH_HEADERS} ${CMAKE_SOURCE_DIR}/bench/${prog}.c
              ${CMAKE_SOURCE_DIR}/bench/bench.cmake
      COMMENT "clang-14: wasm/${prog}-simd.wasm"
      VERBATIM)
    list(APPEND bench_wasm ${out})
  endforeach()
  set(out ${VT_WASM_DIR}/peak-simd.wasm)
  add_custom_command(OUTPUT ${out}
    COMMAND ${VT_WASI_CC} --target=wasm32-wasi --sysroot=${VT_WASI_SYSROOT} ${VT_WASM_CFLAGS} -msimd128
            -mexec-model=reactor ${CMAKE_SOURCE_DIR}/bench/peak_module.c -o ${out}
    DEPENDS ${CMAKE_SOURCE_DIR}/bench/peak_module.c ${VT_BENCH_HEADERS}
    COMMENT "clang-14: wasm/peak-simd.wasm"
    VERBATIM)
  list(APPEND bench_wasm ${out})
  # the relaxed-SIMD twins (clang-19 + wasm-ld-19, wasm/wasm.cmake's vt_clang19_wasm)
  if(VT_WASM_RELAXED)
    list(APPEND VT_WASM_HEADERS ${VT_BENCH_HEADERS}) # (vt_clang19_wasm's header dependencies)
    set(wrap_ld)
    foreach(s ${VT_BENCH_WRAPPED})
      list(APPEND wrap_ld --wrap=${s})
    endforeach()
    foreach(prog kernel_bench train_bench)
      set(pl --initial-memory=268435456)
      if(prog STREQUAL "train_bench")
        set(pl ${wrap_ld} --initial-memory=2147483648)
      endif()
      set(out ${VT_WASM_DIR}/${prog}-relaxed.wasm)
      vt_clang19_wasm(OUT ${out} KIND command
        SOURCES ${bench_core} ${CMAKE_SOURCE_DIR}/src/kernels/kernels_simd.c ${CMAKE_SOURCE_DIR}/bench/${prog}.c
        CFLAGS ${VT_WASM_RELAXED_FLAGS} -I${CMAKE_SOURCE_DIR}/bench LDFLAGS ${pl})
      list(APPEND bench_wasm ${out})
    endforeach()
    set(out ${VT_WASM_DIR}/peak-relaxed.wasm)
    vt_clang19_wasm(OUT ${out} KIND reactor SOURCES ${CMAKE_SOURCE_DIR}/bench/peak_module.c
      CFLAGS ${VT_WASM_RELAXED_FLAGS} -I${CMAKE_SOURCE_DIR}/bench)
    list(APPEND bench_wasm ${out})
  endif()
  add_custom_target(vitrine_bench_wasm DEPENDS ${bench_wasm})
  list(APPEND VT_BENCH_OUTPUTS vitrine_bench_wasm)
endif()
add_custom_target(vitrine_bench DEPENDS ${VT_BENCH_OUTPUTS})
