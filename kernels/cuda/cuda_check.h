#pragma once
// Error checks for the CUDA runtime and cuBLAS(Lt): a failed call throws std::runtime_error with
// the call, the file and line, and the library's own error string. Kernel launches are checked
// with AZR_CUDA_CHECK(cudaGetLastError()) right after the launch (a bad launch configuration).
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace azr::kernels::cuda_detail {

[[noreturn]] inline void cuda_fail(cudaError_t e, const char* what, const char* file, int line) {
  throw std::runtime_error(std::string("CUDA error: ") + what + " failed at " + file + ":" + std::to_string(line) +
                           ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}

[[noreturn]] inline void cublas_fail(cublasStatus_t s, const char* what, const char* file, int line) {
  throw std::runtime_error(std::string("cuBLAS error: ") + what + " failed at " + file + ":" + std::to_string(line) +
                           ": status " + std::to_string(int(s)));
}

}  // namespace azr::kernels::cuda_detail

#define AZR_CUDA_CHECK(call)                                                                \
  do {                                                                                      \
    const cudaError_t azr_err_ = (call);                                                    \
    if (azr_err_ != cudaSuccess) ::azr::kernels::cuda_detail::cuda_fail(azr_err_, #call, __FILE__, __LINE__); \
  } while (0)

#define AZR_CUBLAS_CHECK(call)                                                                  \
  do {                                                                                          \
    const cublasStatus_t azr_st_ = (call);                                                      \
    if (azr_st_ != CUBLAS_STATUS_SUCCESS)                                                       \
      ::azr::kernels::cuda_detail::cublas_fail(azr_st_, #call, __FILE__, __LINE__);             \
  } while (0)
