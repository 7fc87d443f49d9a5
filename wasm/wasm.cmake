# wasm/wasm.cmake: the WebAssembly builds of the engine (included by CMakeLists.txt).
# Made by calling emcc, clang-14 and clang-19 directly, beside the native build (no toolchain file).
# Two lists are read, never copied:
#   wasm/builds.json   the builds (name, runtime, SIMD, relaxed SIMD, threads, files); each becomes
#                      build/wasm/vitrine-<name>.*, made by emcc (runtime emscripten), clang-14 +
#                      wasi-libc (wasi) or clang-19 + wasm-ld-19 (reactor: relaxed SIMD). It is also
#                      written out as build/wasm/vitrine-builds.js for web/runtime/loader.js (with each browser
#                      build's .wasm named by a literal URL and its glue imported, for bundlers).
#   wasm/exports.c     the functions marked VTW_API: exactly these are exported, by every build.
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
  set(VT_WASM_SOURCES wasm/exports.c harness/parity.c harness/replay.c)
  foreach(s ${VT_SOURCES})
    list(APPEND VT_WASM_SOURCES ${s})
  endforeach()
  list(TRANSFORM VT_WASM_SOURCES PREPEND ${CMAKE_SOURCE_DIR}/)
  file(GLOB VT_WASM_SIMD_EXTRA CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/kernels/kernels_simd.c)
  file(GLOB VT_WASM_HEADERS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/*.h ${CMAKE_SOURCE_DIR}/src/kernels/*.h
       ${CMAKE_SOURCE_DIR}/harness/*.h)
  # -mbulk-memory: memset / memcpy become memory.fill / memory.copy (V8 runs them as native
  # memset / memcpy) instead of calls to libc's loops; the gradients are zeroed every step (22 MB
  # for ViT-Ti: libc's memset was 2.5 % of a batch-1 step under V8). Every engine with SIMD128
  # has bulk memory (it came to browsers first); the scalar build, the fallback, goes without.
  set(VT_WASM_SIMD_FLAGS -msimd128 -mbulk-memory)
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

  # The exported functions: those wasm/exports.c marks VTW_API (the one list), found by their name
  # on the marker's line. (file(STRINGS) splits lines at ';': only the piece holding VTW_API matches.)
  file(STRINGS ${CMAKE_SOURCE_DIR}/wasm/exports.c vt_api_lines REGEX "^VTW_API ")
  set(VT_WASM_EXPORTS)
  foreach(line ${vt_api_lines})
    if(line MATCHES "^VTW_API [^(]*[ *](vtw_[a-z0-9_]+)\\(")
      list(APPEND VT_WASM_EXPORTS ${CMAKE_MATCH_1})
    endif()
  endforeach()
  list(LENGTH VT_WASM_EXPORTS n)
  if(n LESS 10)
    message(FATAL_ERROR "wasm/exports.c: found only ${n} VTW_API functions (${VT_WASM_EXPORTS})")
  endif()
  file(READ ${CMAKE_SOURCE_DIR}/wasm/builds.json VT_BUILDS_JSON)
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS
               ${CMAKE_SOURCE_DIR}/wasm/exports.c ${CMAKE_SOURCE_DIR}/wasm/builds.json)

  # The names of builds.json's builds; given a runtime (emscripten | wasi | reactor), its builds only.
  function(vt_builds out)
    set(names)
    string(JSON n LENGTH "${VT_BUILDS_JSON}" builds)
    math(EXPR last "${n} - 1")
    foreach(i RANGE ${last})
      string(JSON name MEMBER "${VT_BUILDS_JSON}" builds ${i})
      string(JSON rt GET "${VT_BUILDS_JSON}" builds ${name} runtime)
      if(NOT ARGN OR rt STREQUAL ARGN)
        list(APPEND names ${name})
      endif()
    endforeach()
    set(${out} ${names} PARENT_SCOPE)
  endfunction()
  # A build's vt_wasm_variant (simd or scalar, "-mt" with threads) and its files in build/wasm/.
  function(vt_build_info name out_variant out_files)
    string(JSON simd GET "${VT_BUILDS_JSON}" builds ${name} simd)
    string(JSON threads GET "${VT_BUILDS_JSON}" builds ${name} threads)
    set(variant scalar)
    if(simd)
      set(variant simd)
    endif()
    if(threads)
      string(APPEND variant -mt)
    endif()
    string(JSON n LENGTH "${VT_BUILDS_JSON}" builds ${name} files)
    math(EXPR last "${n} - 1")
    set(files)
    foreach(i RANGE ${last})
      string(JSON f GET "${VT_BUILDS_JSON}" builds ${name} files ${i})
      list(APPEND files ${VT_WASM_DIR}/${f})
    endforeach()
    set(${out_variant} ${variant} PARENT_SCOPE)
    set(${out_files} ${files} PARENT_SCOPE)
  endfunction()

  # -std=gnu11 as the native build (CMAKE_C_EXTENSIONS); no fast-math, no FMA contraction.
  set(VT_WASM_CFLAGS -O3 -std=gnu11 -ffp-contract=off -Wall -Wextra -Wno-unused-parameter
      -I${CMAKE_SOURCE_DIR}/src -I${CMAKE_SOURCE_DIR}/harness)
  set(VT_WASM_OUTPUTS)
  set(VT_WASM_GLUES) # the Emscripten builds made here (their glue is imported by vitrine-builds.js)

  if(VT_EMCC)
    set(em_exports "")
    foreach(e ${VT_WASM_EXPORTS})
      string(APPEND em_exports "_${e},")
    endforeach()
    string(REGEX REPLACE ",$" "" em_exports "${em_exports}")
    # MEMORY_GROWTH_GEOMETRIC_STEP=0: memory grows to what malloc asks, not 20% beyond it (up to
    # 96 MB more), as the relaxed build's sbrk does: the demo's budget bounds the wasm memory
    # (demo/plan.js); the engine allocates in a few large blocks, so growth stays rare.
    set(em_flags -sMODULARIZE=1 -sEXPORT_ES6=1 -sENVIRONMENT=web,worker
        -sEXPORT_NAME=createVitrineModule -sALLOW_MEMORY_GROWTH=1 -sMAXIMUM_MEMORY=4GB -sMEMORY_GROWTH_GEOMETRIC_STEP=0
        -sFILESYSTEM=0 -sEXPORTED_FUNCTIONS=${em_exports})
    vt_builds(em_builds emscripten)
    foreach(name ${em_builds})
      vt_build_info(${name} variant files)
      vt_wasm_variant(${variant} vsrc vflags ${VT_WASM_SOURCES})
      # -mt: shared memory (imported, a SharedArrayBuffer) for the engine's own worker pool
      # (web/runtime/pool.js, src/threads.c); Emscripten's pthread_create is never called.
      if(variant MATCHES "-mt$")
        list(APPEND vflags -pthread -Wno-pthreads-mem-growth)
      endif()
      set(out ${VT_WASM_DIR}/vitrine-${name}.mjs)
      add_custom_command(OUTPUT ${files}
        COMMAND ${CMAKE_COMMAND} -E env NODE_PATH=/usr/share/nodejs
                ${VT_EMCC} ${VT_WASM_CFLAGS} ${vflags} ${vsrc} ${em_flags} -o ${out}
        DEPENDS ${vsrc} ${VT_WASM_HEADERS} ${CMAKE_SOURCE_DIR}/wasm/wasm.cmake
        COMMENT "emcc: wasm/vitrine-${name}.mjs"
        VERBATIM)
      list(APPEND VT_WASM_OUTPUTS ${out})
      list(APPEND VT_WASM_GLUES ${name})
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
    vt_builds(wasi_builds wasi)
    foreach(name ${wasi_builds})
      vt_build_info(${name} variant files)
      vt_wasm_variant(${variant} vsrc vflags ${VT_WASM_SOURCES})
      # -mt: shared, imported memory for the worker pool (web/runtime/pool.js). wasi-libc is not built
      # with atomics, hence --no-check-features: only the main thread ever runs libc code;
      # workers run kernels on their own stack (__stack_pointer exported so the pool can set it).
      if(variant MATCHES "-mt$")
        list(APPEND vflags -matomics -mbulk-memory -Wl,--shared-memory -Wl,--import-memory
             -Wl,--no-check-features -Wl,--export=__stack_pointer)
      endif()
      set(out ${VT_WASM_DIR}/vitrine-${name}.wasm)
      add_custom_command(OUTPUT ${out}
        COMMAND ${VT_WASI_CC} ${VT_WASM_CFLAGS} ${vflags} ${wasi_flags} ${vsrc} -o ${out}
        DEPENDS ${vsrc} ${VT_WASM_HEADERS} ${CMAKE_SOURCE_DIR}/wasm/wasm.cmake
        COMMENT "clang-14: wasm/vitrine-${name}.wasm"
        VERBATIM)
      list(APPEND VT_WASM_OUTPUTS ${out})
    endforeach()
    # The SIMD128 kernels against their scalar references, as a WASI command run by Node (ctest);
    # 1 MB of stack like every other build (the GEMM packs its blocks on the stack: ~404 KB).
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
    set(VT_WASM_RELAXED_FLAGS ${VT_WASM_CFLAGS} -msimd128 -mrelaxed-simd -mbulk-memory -DVT_HAVE_SIMD_KERNELS)
    set(relaxed_exports)
    foreach(e ${VT_WASM_EXPORTS})
      list(APPEND relaxed_exports --export=${e})
    endforeach()
    set(relaxed_src ${VT_WASM_SOURCES} ${CMAKE_SOURCE_DIR}/src/kernels/kernels_simd.c)
    vt_builds(reactor_builds reactor)
    foreach(name ${reactor_builds})
      vt_build_info(${name} variant files)
      if(variant MATCHES "-mt$")
        # the shared-memory twin for the worker pool (web/runtime/pool.js, src/threads.c), as vitrine-wasi-simd-mt:
        # atomics, an imported shared memory, --no-check-features (wasi-libc is not built with atomics;
        # only the main thread ever runs libc code), __stack_pointer exported for the workers' stacks
        vt_clang19_wasm(OUT ${files} KIND reactor SOURCES ${relaxed_src}
                        CFLAGS ${VT_WASM_RELAXED_FLAGS} -matomics -mbulk-memory
                        LDFLAGS ${relaxed_exports} --shared-memory --import-memory --no-check-features
                                --export=__stack_pointer)
      else()
        vt_clang19_wasm(OUT ${files} KIND reactor SOURCES ${relaxed_src}
                        CFLAGS ${VT_WASM_RELAXED_FLAGS} LDFLAGS ${relaxed_exports})
      endif()
      list(APPEND VT_WASM_OUTPUTS ${files})
    endforeach()
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

  # build/wasm/vitrine-builds.js: builds.json for web/runtime/loader.js, with the patterns bundlers follow
  # (each browser build's .wasm named by a literal new URL(), the Emscripten glues made here imported)
  set(js "// vitrine-builds.js: written by wasm/wasm.cmake from wasm/builds.json (edit that, not this).\n")
  set(glues)
  set(urls)
  vt_builds(all_builds)
  foreach(name ${all_builds})
    string(JSON browser GET "${VT_BUILDS_JSON}" builds ${name} browser)
    vt_build_info(${name} variant files)
    if(NOT browser)
      continue()
    endif()
    foreach(f ${files})
      get_filename_component(f ${f} NAME)
      if(f MATCHES "\\.wasm$")
        string(APPEND urls "  '${name}': () => new URL('./${f}', import.meta.url),\n")
      elseif(f MATCHES "\\.mjs$" AND name IN_LIST VT_WASM_GLUES)
        string(MAKE_C_IDENTIFIER "glue_${name}" id)
        string(APPEND js "import ${id} from './${f}';\n")
        string(APPEND glues "  '${name}': ${id},\n")
      endif()
    endforeach()
  endforeach()
  string(APPEND js "export const manifest = ${VT_BUILDS_JSON};\nexport const glue = {\n${glues}};\nexport const urls = {\n${urls}};\n")
  file(CONFIGURE OUTPUT ${VT_WASM_DIR}/vitrine-builds.js CONTENT "${js}" @ONLY)

  if(VT_WASM_OUTPUTS)
    add_custom_target(vitrine_wasm ALL DEPENDS ${VT_WASM_OUTPUTS})
  endif()
endif()
