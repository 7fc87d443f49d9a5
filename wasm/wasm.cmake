# wasm/wasm.cmake: the four WebAssembly builds of the engine (included by CMakeLists.txt).
# Made by calling emcc and clang-14 directly, beside the native build (no toolchain file):
#   build/wasm/vitrine-simd.{mjs,wasm}    Emscripten, SIMD128, ES module factory (browser + Node)
#   build/wasm/vitrine-scalar.{mjs,wasm}  Emscripten, no SIMD
#   build/wasm/vitrine-wasi-simd.wasm     WASI reactor (clang-14 + wasi-libc + lld), SIMD128
#   build/wasm/vitrine-wasi-scalar.wasm   WASI reactor, no SIMD
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
    if(variant STREQUAL "simd")
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
    vtw_train_state_save vtw_train_state_load vtw_loss_visualize malloc free)

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
    foreach(variant simd scalar)
      vt_wasm_variant(${variant} vsrc vflags ${VT_WASM_SOURCES})
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
    foreach(variant simd scalar)
      vt_wasm_variant(${variant} vsrc vflags ${VT_WASM_SOURCES})
      set(out ${VT_WASM_DIR}/vitrine-wasi-${variant}.wasm)
      add_custom_command(OUTPUT ${out}
        COMMAND ${VT_WASI_CC} ${VT_WASM_CFLAGS} ${vflags} ${wasi_flags} ${vsrc} -o ${out}
        DEPENDS ${vsrc} ${VT_WASM_HEADERS} ${CMAKE_SOURCE_DIR}/wasm/wasm.cmake
        COMMENT "clang-14: wasm/vitrine-wasi-${variant}.wasm"
        VERBATIM)
      list(APPEND VT_WASM_OUTPUTS ${out})
    endforeach()
    # The SIMD128 kernels against their scalar references, as a WASI command run by Node (ctest).
    if(VT_WASM_SIMD_EXTRA)
      set(ktest ${VT_WASM_DIR}/test_kernels_simd.wasm)
      set(kcore ${CMAKE_SOURCE_DIR}/src/kernels/kernels_ref.c ${CMAKE_SOURCE_DIR}/src/kernels/kernels_simd.c
          ${CMAKE_SOURCE_DIR}/src/kernels/kernels.c ${CMAKE_SOURCE_DIR}/src/kernels/kernels_portable.c
          ${CMAKE_SOURCE_DIR}/src/kernels/kernels_attn.c ${CMAKE_SOURCE_DIR}/src/status.c)
      set(ksrc ${kcore} ${CMAKE_SOURCE_DIR}/tests/test_kernels_simd.c)
      add_custom_command(OUTPUT ${ktest}
        COMMAND ${VT_WASI_CC} --target=wasm32-wasi --sysroot=${VT_WASI_SYSROOT} ${VT_WASM_CFLAGS}
                ${VT_WASM_SIMD_FLAGS} -I${CMAKE_SOURCE_DIR}/src/kernels ${ksrc} -o ${ktest} -lm
        DEPENDS ${ksrc} ${VT_WASM_HEADERS} ${CMAKE_SOURCE_DIR}/tests/kernel_test.h
        COMMENT "clang-14: wasm/test_kernels_simd.wasm"
        VERBATIM)
      list(APPEND VT_WASM_OUTPUTS ${ktest})
      # attention through the dispatch (composed from the SIMD matmuls) against the reference
      set(atest ${VT_WASM_DIR}/test_attention-simd.wasm)
      set(asrc ${kcore} ${CMAKE_SOURCE_DIR}/tests/test_attention.c)
      add_custom_command(OUTPUT ${atest}
        COMMAND ${VT_WASI_CC} --target=wasm32-wasi --sysroot=${VT_WASI_SYSROOT} ${VT_WASM_CFLAGS}
                ${VT_WASM_SIMD_FLAGS} ${asrc} -o ${atest} -lm
        DEPENDS ${asrc} ${VT_WASM_HEADERS} ${CMAKE_SOURCE_DIR}/tests/kernel_test.h
        COMMENT "clang-14: wasm/test_attention-simd.wasm"
        VERBATIM)
      list(APPEND VT_WASM_OUTPUTS ${atest})
      find_program(VT_NODE node)
      if(VT_NODE)
        add_test(NAME kernels_simd_wasm COMMAND ${VT_NODE} ${CMAKE_SOURCE_DIR}/tests/run_wasi.mjs ${ktest})
        add_test(NAME attention_wasm_simd COMMAND ${VT_NODE} ${CMAKE_SOURCE_DIR}/tests/run_wasi.mjs ${atest})
      endif()
    endif()
  else()
    message(STATUS "vitrine: clang-14 / wasm-ld / wasi-libc not found, skipping the WASI builds")
  endif()

  if(VT_WASM_OUTPUTS)
    add_custom_target(vitrine_wasm ALL DEPENDS ${VT_WASM_OUTPUTS})
  endif()
endif()
