# wasm/wasm.cmake: the WebAssembly builds of the engine (included by CMakeLists.txt).
# Made by calling emcc, clang-14 and clang-19 directly, beside the native build (no toolchain file):
#   build/wasm/vitrine-simd.{mjs,wasm}    Emscripten, SIMD128, ES module factory (browser + Node)
#   build/wasm/vitrine-scalar.{mjs,wasm}  Emscripten, no SIMD
#   build/wasm/vitrine-wasi-simd.wasm     WASI reactor (clang-14 + wasi-libc + lld), SIMD128
#   build/wasm/vitrine-wasi-scalar.wasm   WASI reactor, no SIMD
#   build/wasm/vitrine-relaxed.wasm       WASI-style reactor, SIMD128 + relaxed SIMD (fused MADD),
#                                         clang-19 -c + wasm-ld-19; loaded by web/vitrine.js's own
#                                         WASI shim in the browser and in Node
#   build/wasm/vitrine-simd-mt.{mjs,wasm,worker.js}, vitrine-wasi-simd-mt.wasm, vitrine-relaxed-mt.wasm
#                                         the SIMD builds over an imported shared memory, for the
#                                         engine's thread pool (web/pool.js, src/threads.c)
# ON when the tools are found; -DVT_WASM=OFF turns it off. See wasm/README.md.
option(VT_WASM "Build the WebAssembly modules when emcc / clang-14 + wasi-libc are found" ON)

if(VT_WASM)
  find_program(VT_EMCC emcc)
  find_program(VT_WASI_CC NAMES clang-14 clang)
  find_program(VT_WASM_LD NAMES wasm-ld wasm-ld-14)
  set(VT_WASI_SYSROOT /usr CACHE PATH "sysroot holding wasi-libc (lib/wasm32-wasi, include/wasm32-wasi)")
  set(VT_WASM_DIR ${CMAKE_BINARY_DIR}/wasm)
  file(MAKE_DIRECTORY ${VT_WASM_DIR})

  # Same sources as the native library, plus the JS-facing ABI and the parity harness it exports.
  # The SIMD kernels join the SIMD builds once src/kernels/kernels_simd.c exists (CONFIGURE_DEPENDS
  # re-checks at build time).
  set(VT_WASM_SOURCES wasm/exports.c harness/parity.c)
  foreach(s ${VT_SOURCES})
    list(APPEND VT_WASM_SOURCES ${s})
  endforeach()
  list(TRANSFORM VT_WASM_SOURCES PREPEND ${CMAKE_SOURCE_DIR}/)
  file(GLOB VT_WASM_SIMD_EXTRA CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/kernels/kernels_simd.c)
  file(GLOB VT_WASM_HEADERS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/*.h ${CMAKE_SOURCE_DIR}/src/kernels/*.h
       ${CMAKE_SOURCE_DIR}/harness/*.h)
  set(VT_WASM_SIMD_FLAGS -msimd128)
  if(VT_WASM_SIMD_EXTRA)
    list(APPEND VT_WASM_SIMD_FLAGS -DVT_HAVE_SIMD_KERNELS)
  endif()

  # The sources and flags of one variant (simd: SIMD128 and the SIMD kernels; scalar: neither) of
  # a wasm build of the sources given after the two output variables.
  function(vt_wasm_variant variant out_src out_flags)
    set(src ${ARGN})
    set(flags "")
    if(variant MATCHES "^simd") # simd, simd-mt
      set(flags ${VT_WASM_SIMD_FLAGS})
      list(APPEND src ${VT_WASM_SIMD_EXTRA})
    endif()
    set(${out_src} ${src} PARENT_SCOPE)
    set(${out_flags} ${flags} PARENT_SCOPE)
  endfunction()

  # The one list of exported C functions (wasm/exports.c) plus malloc/free for the JS shell.
  set(VT_WASM_EXPORTS
    vtw_last_error vtw_kernels_simd vtw_preset_name vtw_model_create vtw_model_dims vtw_model_free
    vtw_param_count vtw_param_name vtw_param_ndim vtw_param_dim vtw_param_numel vtw_param_data
    vtw_param_grad vtw_param_requires_grad vtw_set_requires_grad vtw_zero_grad
    vtw_load_safetensors vtw_init_from vtw_save_safetensors vtw_forward vtw_output_count vtw_output
    vtw_loss_value vtw_backward vtw_set_grad_checkpointing vtw_get_grad_checkpointing vtw_plan vtw_plan_train_step
    vtw_arena_stats vtw_activation_timeline vtw_release_activations vtw_parity_run
    vtw_init_weights vtw_train_config_default vtw_trainer_init vtw_train_step vtw_train_step_labels vtw_train_step_count vtw_train_lr
    vtw_train_state_save vtw_train_state_load vtw_loss_visualize
    vtw_worker_run vtw_set_threads vtw_threads_max vtw_threads_ready vtw_threads_shutdown vtw_threads_set_min_work vtw_threads_chunks_run malloc free)

  # -std=gnu11 as the native build (CMAKE_C_EXTENSIONS); no fast-math, no FMA contraction.
  set(VT_WASM_CFLAGS -O3 -std=gnu11 -ffp-contract=off -Wall -Wextra -Wno-unused-parameter
      -I${CMAKE_SOURCE_DIR}/src -I${CMAKE_SOURCE_DIR}/harness)
  set(VT_WASM_OUTPUTS)

  if(VT_EMCC)
    set(em_exports "")
    foreach(e ${VT_WASM_EXPORTS})
      string(APPEND em_exports "_${e},")
    endforeach()
    string(REGEX REPLACE ",$" "" em_exports "${em_exports}")
    set(em_flags -sMODULARIZE=1 -sEXPORT_ES6=1 -sENVIRONMENT=web,worker
        -sEXPORT_NAME=createVitrineModule -sALLOW_MEMORY_GROWTH=1 -sMAXIMUM_MEMORY=4GB
        -sFILESYSTEM=0 -sEXPORTED_FUNCTIONS=${em_exports})
    foreach(variant simd scalar simd-mt)
      vt_wasm_variant(${variant} vsrc vflags ${VT_WASM_SOURCES})
      # -mt: shared memory (imported, a SharedArrayBuffer) for the engine's own worker pool
      # (web/pool.js, src/threads.c); Emscripten's pthread_create is never called.
      if(variant MATCHES "-mt$")
        list(APPEND vflags -pthread -Wno-pthreads-mem-growth)
      endif()
      set(out ${VT_WASM_DIR}/vitrine-${variant}.mjs)
      add_custom_command(OUTPUT ${out} ${VT_WASM_DIR}/vitrine-${variant}.wasm
        COMMAND ${CMAKE_COMMAND} -E env NODE_PATH=/usr/share/nodejs
                ${VT_EMCC} ${VT_WASM_CFLAGS} ${vflags} ${vsrc} ${em_flags} -o ${out}
        DEPENDS ${vsrc} ${VT_WASM_HEADERS} ${CMAKE_SOURCE_DIR}/wasm/wasm.cmake
        COMMENT "emcc: wasm/vitrine-${variant}.mjs"
        VERBATIM)
      list(APPEND VT_WASM_OUTPUTS ${out})
    endforeach()
  else()
    message(STATUS "vitrine: emcc not found, skipping the Emscripten builds")
  endif()

  if(VT_WASI_CC AND VT_WASM_LD AND EXISTS ${VT_WASI_SYSROOT}/lib/wasm32-wasi/libc.a)
    set(wasi_flags --target=wasm32-wasi --sysroot=${VT_WASI_SYSROOT} -mexec-model=reactor
        -Wl,--max-memory=4294967296 -Wl,-z,stack-size=1048576)
    foreach(e ${VT_WASM_EXPORTS})
      list(APPEND wasi_flags -Wl,--export=${e})
    endforeach()
    foreach(variant simd scalar simd-mt)
      vt_wasm_variant(${variant} vsrc vflags ${VT_WASM_SOURCES})
      # -mt: shared, imported memory for the worker pool (web/pool.js). wasi-libc is not built
      # with atomics, hence --no-check-features: only the main thread ever runs libc code;
      # workers run kernels on their own stack (__stack_pointer exported so the pool can set it).
      if(variant MATCHES "-mt$")
        list(APPEND vflags -matomics -mbulk-memory -Wl,--shared-memory -Wl,--import-memory
             -Wl,--no-check-features -Wl,--export=__stack_pointer)
      endif()
      set(out ${VT_WASM_DIR}/vitrine-wasi-${variant}.wasm)
      add_custom_command(OUTPUT ${out}
        COMMAND ${VT_WASI_CC} ${VT_WASM_CFLAGS} ${vflags} ${wasi_flags} ${vsrc} -o ${out}
        DEPENDS ${vsrc} ${VT_WASM_HEADERS} ${CMAKE_SOURCE_DIR}/wasm/wasm.cmake
        COMMENT "clang-14: wasm/vitrine-wasi-${variant}.wasm"
        VERBATIM)
      list(APPEND VT_WASM_OUTPUTS ${out})
    endforeach()
    # The SIMD128 kernels against their scalar references, as a WASI command run by Node (ctest);
    # 1 MB of stack like every other build (the GEMM packs its blocks on the stack: ~100 KB).
    if(VT_WASM_SIMD_EXTRA)
      set(ktest ${VT_WASM_DIR}/test_kernels_simd.wasm)
      set(kcore ${CMAKE_SOURCE_DIR}/src/kernels/kernels_ref.c ${CMAKE_SOURCE_DIR}/src/kernels/kernels_simd.c
          ${CMAKE_SOURCE_DIR}/src/kernels/kernels.c ${CMAKE_SOURCE_DIR}/src/kernels/kernels_portable.c
          ${CMAKE_SOURCE_DIR}/src/kernels/kernels_attn.c ${CMAKE_SOURCE_DIR}/src/status.c
          ${CMAKE_SOURCE_DIR}/src/threads.c)
      set(ksrc ${kcore} ${CMAKE_SOURCE_DIR}/tests/test_kernels_simd.c)
      add_custom_command(OUTPUT ${ktest}
        COMMAND ${VT_WASI_CC} --target=wasm32-wasi --sysroot=${VT_WASI_SYSROOT} ${VT_WASM_CFLAGS}
                ${VT_WASM_SIMD_FLAGS} -I${CMAKE_SOURCE_DIR}/src/kernels -Wl,-z,stack-size=1048576
                ${ksrc} -o ${ktest} -lm
        DEPENDS ${ksrc} ${VT_WASM_HEADERS} ${CMAKE_SOURCE_DIR}/tests/kernel_test.h
        COMMENT "clang-14: wasm/test_kernels_simd.wasm"
        VERBATIM)
      list(APPEND VT_WASM_OUTPUTS ${ktest})
      # attention through the dispatch (composed from the SIMD matmuls) against the reference
      set(atest ${VT_WASM_DIR}/test_attention-simd.wasm)
      set(asrc ${kcore} ${CMAKE_SOURCE_DIR}/tests/test_attention.c)
      add_custom_command(OUTPUT ${atest}
        COMMAND ${VT_WASI_CC} --target=wasm32-wasi --sysroot=${VT_WASI_SYSROOT} ${VT_WASM_CFLAGS}
                ${VT_WASM_SIMD_FLAGS} -Wl,-z,stack-size=1048576 ${asrc} -o ${atest} -lm
        DEPENDS ${asrc} ${VT_WASM_HEADERS} ${CMAKE_SOURCE_DIR}/tests/kernel_test.h
        COMMENT "clang-14: wasm/test_attention-simd.wasm"
        VERBATIM)
      list(APPEND VT_WASM_OUTPUTS ${atest})
      # sizes and untrusted numbers where size_t and long are 32-bit (tests/test_hardening.c)
      set(htest ${VT_WASM_DIR}/test_hardening.wasm)
      set(hsrc ${VT_WASM_SOURCES} ${CMAKE_SOURCE_DIR}/tests/test_hardening.c)
      list(REMOVE_ITEM hsrc ${CMAKE_SOURCE_DIR}/wasm/exports.c)
      add_custom_command(OUTPUT ${htest}
        COMMAND ${VT_WASI_CC} --target=wasm32-wasi --sysroot=${VT_WASI_SYSROOT} ${VT_WASM_CFLAGS}
                -Wno-unused-function -Wl,--max-memory=4294967296 -Wl,-z,stack-size=1048576 ${hsrc} -o ${htest} -lm
        DEPENDS ${hsrc} ${VT_WASM_HEADERS} ${CMAKE_SOURCE_DIR}/tests/test_util.h
        COMMENT "clang-14: wasm/test_hardening.wasm"
        VERBATIM)
      list(APPEND VT_WASM_OUTPUTS ${htest})
      find_program(VT_NODE node)
      if(VT_NODE)
        add_test(NAME kernels_simd_wasm COMMAND ${VT_NODE} ${CMAKE_SOURCE_DIR}/tests/run_wasi.mjs ${ktest})
        add_test(NAME attention_wasm_simd COMMAND ${VT_NODE} ${CMAKE_SOURCE_DIR}/tests/run_wasi.mjs ${atest})
        add_test(NAME hardening_wasm COMMAND ${VT_NODE} ${CMAKE_SOURCE_DIR}/tests/run_wasi.mjs ${htest})
      endif()
    endif()
  else()
    message(STATUS "vitrine: clang-14 / wasm-ld / wasi-libc not found, skipping the WASI builds")
  endif()

  # ---- clang-19 builds: relaxed SIMD (f32x4.relaxed_madd) ------------------------------------
  # Debian's emcc 3.1.6 knows only clang-14, which has no relaxed SIMD; clang-19's driver would
  # run Debian's wasm-opt 108 after linking, which rejects relaxed opcodes. So: compile each
  # source with clang-19 -c, link with wasm-ld-19 ourselves (what the driver would pass, minus
  # wasm-opt). vt_clang19_wasm(OUT file KIND reactor|command SOURCES ... [CFLAGS ...] [LDFLAGS ...])
  # adds the commands; the threads build can reuse it with its own flags.
  find_program(VT_CLANG19 clang-19)
  find_program(VT_WASM_LD19 wasm-ld-19)
  set(VT_CLANG19_RT /usr/lib/llvm-19/lib/clang/19/lib/wasi/libclang_rt.builtins-wasm32.a
      CACHE FILEPATH "compiler-rt builtins for wasm32 (libclang-rt-19-dev-wasm32)")
  if(VT_CLANG19 AND VT_WASM_LD19 AND EXISTS ${VT_CLANG19_RT} AND EXISTS ${VT_WASI_SYSROOT}/lib/wasm32-wasi/libc.a)
    set(VT_WASM_RELAXED ON)
    function(vt_clang19_wasm)
      cmake_parse_arguments(A "" "OUT;KIND" "SOURCES;CFLAGS;LDFLAGS" ${ARGN})
      get_filename_component(name ${A_OUT} NAME_WE)
      set(objdir ${VT_WASM_DIR}/obj-${name})
      file(MAKE_DIRECTORY ${objdir})
      set(objs)
      foreach(src ${A_SOURCES})
        get_filename_component(b ${src} NAME_WE)
        set(o ${objdir}/${b}.o)
        add_custom_command(OUTPUT ${o}
          COMMAND ${VT_CLANG19} --target=wasm32-wasi --sysroot=${VT_WASI_SYSROOT} ${A_CFLAGS} -c ${src} -o ${o}
          DEPENDS ${src} ${VT_WASM_HEADERS} ${CMAKE_SOURCE_DIR}/tests/kernel_test.h ${CMAKE_SOURCE_DIR}/wasm/wasm.cmake
          COMMENT "clang-19: ${name}/${b}.o"
          VERBATIM)
        list(APPEND objs ${o})
      endforeach()
      set(lib ${VT_WASI_SYSROOT}/lib/wasm32-wasi)
      if(A_KIND STREQUAL "reactor")
        set(crt ${lib}/crt1-reactor.o --entry _initialize)
      else()
        set(crt ${lib}/crt1-command.o)
      endif()
      add_custom_command(OUTPUT ${A_OUT}
        COMMAND ${VT_WASM_LD19} -m wasm32 -L${lib} ${crt} ${objs} -lc ${VT_CLANG19_RT}
                --max-memory=4294967296 -z stack-size=1048576 ${A_LDFLAGS} -o ${A_OUT}
        DEPENDS ${objs}
        COMMENT "wasm-ld-19: wasm/${name}.wasm"
        VERBATIM)
    endfunction()
    set(VT_WASM_RELAXED_FLAGS ${VT_WASM_CFLAGS} -msimd128 -mrelaxed-simd -DVT_HAVE_SIMD_KERNELS)
    set(relaxed_exports)
    foreach(e ${VT_WASM_EXPORTS})
      list(APPEND relaxed_exports --export=${e})
    endforeach()
    set(relaxed_src ${VT_WASM_SOURCES} ${CMAKE_SOURCE_DIR}/src/kernels/kernels_simd.c)
    vt_clang19_wasm(OUT ${VT_WASM_DIR}/vitrine-relaxed.wasm KIND reactor SOURCES ${relaxed_src}
                    CFLAGS ${VT_WASM_RELAXED_FLAGS} LDFLAGS ${relaxed_exports})
    list(APPEND VT_WASM_OUTPUTS ${VT_WASM_DIR}/vitrine-relaxed.wasm)
    # its shared-memory twin for the worker pool (web/pool.js, src/threads.c), as vitrine-wasi-simd-mt:
    # atomics, an imported shared memory, --no-check-features (wasi-libc is not built with atomics;
    # only the main thread ever runs libc code), __stack_pointer exported for the workers' stacks
    vt_clang19_wasm(OUT ${VT_WASM_DIR}/vitrine-relaxed-mt.wasm KIND reactor SOURCES ${relaxed_src}
                    CFLAGS ${VT_WASM_RELAXED_FLAGS} -matomics -mbulk-memory
                    LDFLAGS ${relaxed_exports} --shared-memory --import-memory --no-check-features
                            --export=__stack_pointer)
    list(APPEND VT_WASM_OUTPUTS ${VT_WASM_DIR}/vitrine-relaxed-mt.wasm)
    # the kernels and attention tests, relaxed (run by Node with relaxed SIMD enabled)
    set(kcore ${CMAKE_SOURCE_DIR}/src/kernels/kernels_ref.c ${CMAKE_SOURCE_DIR}/src/kernels/kernels_simd.c
        ${CMAKE_SOURCE_DIR}/src/kernels/kernels.c ${CMAKE_SOURCE_DIR}/src/kernels/kernels_portable.c
        ${CMAKE_SOURCE_DIR}/src/kernels/kernels_attn.c ${CMAKE_SOURCE_DIR}/src/status.c
        ${CMAKE_SOURCE_DIR}/src/threads.c)
    vt_clang19_wasm(OUT ${VT_WASM_DIR}/test_kernels_relaxed.wasm KIND command
                    SOURCES ${kcore} ${CMAKE_SOURCE_DIR}/tests/test_kernels_simd.c
                    CFLAGS ${VT_WASM_RELAXED_FLAGS} -I${CMAKE_SOURCE_DIR}/src/kernels)
    vt_clang19_wasm(OUT ${VT_WASM_DIR}/test_attention_relaxed.wasm KIND command
                    SOURCES ${kcore} ${CMAKE_SOURCE_DIR}/tests/test_attention.c CFLAGS ${VT_WASM_RELAXED_FLAGS})
    list(APPEND VT_WASM_OUTPUTS ${VT_WASM_DIR}/test_kernels_relaxed.wasm ${VT_WASM_DIR}/test_attention_relaxed.wasm)
    find_program(VT_NODE node)
    if(VT_NODE)
      add_test(NAME kernels_relaxed_wasm COMMAND ${VT_NODE} ${CMAKE_SOURCE_DIR}/tests/run_wasi.mjs ${VT_WASM_DIR}/test_kernels_relaxed.wasm)
      add_test(NAME attention_wasm_relaxed COMMAND ${VT_NODE} ${CMAKE_SOURCE_DIR}/tests/run_wasi.mjs ${VT_WASM_DIR}/test_attention_relaxed.wasm)
    endif()
  else()
    message(STATUS "vitrine: clang-19 / wasm-ld-19 / libclang-rt-19-dev-wasm32 not found, skipping the relaxed-SIMD build")
  endif()

  if(VT_WASM_OUTPUTS)
    add_custom_target(vitrine_wasm ALL DEPENDS ${VT_WASM_OUTPUTS})
  endif()
endif()
