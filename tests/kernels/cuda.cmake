# The CUDA op table against the CPU one; every test skips with the reason where no GPU is present.
# Labelled gpu: `ctest -L gpu` (scripts/gpu_check.sh) runs just these on a GPU machine. Included by
# tests/CMakeLists.txt and, for AZR_GPU_CHECKS_ONLY builds, by the top-level CMakeLists.txt.
add_executable(cuda_ops_test ${CMAKE_SOURCE_DIR}/tests/kernels/cuda_ops_test.cpp)
target_link_libraries(cuda_ops_test PRIVATE azr_backend azr_kernels azr_kernels_cuda GTest::gtest GTest::gtest_main)
target_include_directories(cuda_ops_test PRIVATE ${CMAKE_SOURCE_DIR})
# PRE_TEST: listing the tests runs the binary, which a carried OpenBLAS lets run only under
# scripts/gpu_check.sh's LD_LIBRARY_PATH; at test time, not build time, that is always set.
gtest_discover_tests(cuda_ops_test DISCOVERY_TIMEOUT 60 DISCOVERY_MODE PRE_TEST PROPERTIES LABELS gpu)

# The whole transformer on the GPU against the CPU model.
if(TARGET azr_model)
  add_executable(cuda_model_test ${CMAKE_SOURCE_DIR}/tests/kernels/cuda_model_test.cpp)
  target_link_libraries(cuda_model_test PRIVATE azr_model azr_kernels_cuda nlohmann_json::nlohmann_json GTest::gtest
                                                GTest::gtest_main)
  target_include_directories(cuda_model_test PRIVATE ${CMAKE_SOURCE_DIR})
  gtest_discover_tests(cuda_model_test DISCOVERY_TIMEOUT 60 DISCOVERY_MODE PRE_TEST PROPERTIES LABELS gpu)
endif()
