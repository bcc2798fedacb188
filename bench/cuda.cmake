# The CUDA op table's hot kernels against the CPU backend and the device's bandwidth (GPU only;
# without a device it prints why and a "skipped" JSON line). Included by bench/CMakeLists.txt and,
# for AZR_GPU_CHECKS_ONLY builds, by the top-level CMakeLists.txt.
add_executable(cuda_ops_bench ${CMAKE_SOURCE_DIR}/bench/cuda_ops_bench.cpp)
target_link_libraries(cuda_ops_bench PRIVATE azr_kernels azr_kernels_cuda CLI11::CLI11
                      nlohmann_json::nlohmann_json)
target_include_directories(cuda_ops_bench PRIVATE ${CMAKE_SOURCE_DIR})
include(${CMAKE_SOURCE_DIR}/bench/option_tests.cmake)
azr_bench_rejects(cuda_ops_bench "not expected:.*--bogus" --bogus 1)
azr_bench_rejects(cuda_ops_bench "--reps: 1 required" --reps)
azr_bench_rejects(cuda_ops_bench "--reps: Value 0 not in range" --reps 0)
azr_bench_rejects(cuda_ops_bench "--reps: Value 3x not in range" --reps 3x)
azr_bench_rejects(cuda_ops_bench "--only: nonsense not in" --only nonsense)
