# The CUDA op table's hot kernels against the CPU backend and the device's bandwidth (GPU only;
# without a device it prints why and a "skipped" JSON line). Included by bench/CMakeLists.txt and,
# for AZR_GPU_CHECKS_ONLY builds, by the top-level CMakeLists.txt.
add_executable(cuda_ops_bench ${CMAKE_SOURCE_DIR}/bench/cuda_ops_bench.cpp)
target_link_libraries(cuda_ops_bench PRIVATE azr_kernels azr_kernels_cuda nlohmann_json::nlohmann_json)
target_include_directories(cuda_ops_bench PRIVATE ${CMAKE_SOURCE_DIR})
