# tests/fuzz/fuzz.cmake: the libFuzzer harnesses (sanitizer build only, included by CMakeLists.txt
# when VT_SANITIZE). ctest runs fuzz_seeds (the seed corpus, written by the tests, never committed)
# then each harness for a fixed number of runs; `bash tests/fuzz.sh SECONDS` runs them for longer.
set(VT_FUZZ_HARNESSES safetensors config weights checkpoint parity train meta api)
set(VT_FUZZ_RUNS 20000 CACHE STRING "runs of each harness in ctest")
# the harnesses that train or rebuild whole states run fewer (a few ms each under ASan; fuzz_checkpoint
# loads each input twice into three trainers: ~50 runs/s on a loaded 2-core machine)
set(VT_FUZZ_RUNS_checkpoint 5000)
set(VT_FUZZ_RUNS_train 5000)
set(VT_FUZZ_RUNS_meta 5000)
# every C test under the sanitizers: an allocation that fails must return NULL (the engine checks),
# UBSan stops at the first finding
set(VT_SAN_ENV "ASAN_OPTIONS=allocator_may_return_null=1:detect_leaks=1:abort_on_error=0"
    "UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1")
get_property(VT_ALL_TESTS DIRECTORY ${CMAKE_SOURCE_DIR} PROPERTY TESTS)
foreach(t ${VT_ALL_TESTS})
  set_tests_properties(${t} PROPERTIES ENVIRONMENT "${VT_SAN_ENV}" TIMEOUT 900) # ASan: ~3-10x slower
endforeach()
if(VT_HAS_LIBFUZZER)
  string(REPLACE ";" " " VT_SAN_ENV_SH "${VT_SAN_ENV}")
  set(VT_FUZZ_CORPUS ${CMAKE_BINARY_DIR}/fuzz-corpus)
  add_executable(fuzz_seeds tests/fuzz/fuzz_seeds.c)
  target_link_libraries(fuzz_seeds vitrine_parity)
  add_test(NAME fuzz_seeds COMMAND ${CMAKE_COMMAND} -E env ${VT_SAN_ENV}
           $<TARGET_FILE:fuzz_seeds> ${VT_FUZZ_CORPUS} ${VT_FIXTURES})
  set_tests_properties(fuzz_seeds PROPERTIES FIXTURES_SETUP fuzz_corpus)
  foreach(h ${VT_FUZZ_HARNESSES})
    add_executable(fuzz_${h} tests/fuzz/fuzz_${h}.c)
    target_include_directories(fuzz_${h} PRIVATE tests/fuzz)
    target_link_libraries(fuzz_${h} vitrine_parity)
    target_link_options(fuzz_${h} PRIVATE -fsanitize=fuzzer)
    # a fixed number of runs from a fixed seed over the seeds only; new inputs go to a scratch
    # folder (libFuzzer writes to the first corpus folder), emptied first
    set(scratch ${CMAKE_BINARY_DIR}/fuzz-new/${h})
    set(runs ${VT_FUZZ_RUNS})
    if(DEFINED VT_FUZZ_RUNS_${h})
      set(runs ${VT_FUZZ_RUNS_${h}})
    endif()
    # a dictionary where the inputs are training states (tests/fuzz/state.dict)
    set(dict "")
    if(h STREQUAL "checkpoint" OR h STREQUAL "train" OR h STREQUAL "meta")
      set(dict "-dict=${CMAKE_SOURCE_DIR}/tests/fuzz/state.dict")
    endif()
    add_test(NAME fuzz_${h}_smoke COMMAND sh -c "rm -rf '${scratch}' && mkdir -p '${scratch}' && exec env ${VT_SAN_ENV_SH} \
'$<TARGET_FILE:fuzz_${h}>' -runs=${runs} -seed=1 ${dict} -rss_limit_mb=2048 -timeout=20 -print_final_stats=1 \
-artifact_prefix='${CMAKE_BINARY_DIR}/fuzz-crash-${h}-' '${scratch}' '${VT_FUZZ_CORPUS}/${h}'")
    # passes only on libFuzzer's own closing line (a crash, a leak, a timeout never print it)
    set_tests_properties(fuzz_${h}_smoke PROPERTIES FIXTURES_REQUIRED fuzz_corpus TIMEOUT 300
                         PASS_REGULAR_EXPRESSION "Done ${runs} runs in")
  endforeach()
endif()
