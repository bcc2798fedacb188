# The CUDA op table's hot kernels against the CPU backend and the device's bandwidth (GPU only;
# without a device it prints why and a "skipped" JSON line). Included by bench/CMakeLists.txt and,
# for AZR_GPU_CHECKS_ONLY builds, by the top-level CMakeLists.txt.
add_executable(cuda_ops_bench ${CMAKE_SOURCE_DIR}/bench/cuda_ops_bench.cpp)
target_link_libraries(cuda_ops_bench PRIVATE azr_kernels azr_kernels_cuda nlohmann_json::nlohmann_json)
target_include_directories(cuda_ops_bench PRIVATE ${CMAKE_SOURCE_DIR})
# Bad options: one named error and exit status 2, before any device work (so with or without a GPU).
foreach(bad "--bogus 1" "--reps" "--reps 0" "--reps 3x" "--only nonsense")
  string(REPLACE " " ";" bad_args "${bad}")
  string(MAKE_C_IDENTIFIER "${bad}" bad_name)
  add_test(NAME CudaOpsBench.RejectsOption${bad_name}
           COMMAND sh -c "out=$(\"$0\" \"$@\" 2>&1); rc=$?; echo \"$out\"; [ $rc -eq 2 ] && echo \"$out\" | grep -q '^cuda_ops_bench: .*\\(unknown option\\|wants a value\\|not 1..1000000\\|no such section\\)'"
                   $<TARGET_FILE:cuda_ops_bench> ${bad_args})
endforeach()
