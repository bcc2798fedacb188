#pragma once
// Which kernels the CUDA Bf16 table's training attention runs (kernels/cuda/cuda_ops.h says what
// each is), and how the environment spells the choice (AZR_CUDA_ATTENTION). Plain C++, outside
// kernels/cuda, so that the parsing is built and tested where there is no CUDA.
#include <stdexcept>
#include <string>

namespace azr::kernels {

enum class CudaAttentionKernel { Simt, TensorCore };

// "" (unset) or "simt": Simt; "tensor": TensorCore; anything else is an std::invalid_argument that
// names the variable, the value and the values it takes.
inline CudaAttentionKernel parse_cuda_attention(const std::string& value) {
  if (value.empty() || value == "simt") return CudaAttentionKernel::Simt;
  if (value == "tensor") return CudaAttentionKernel::TensorCore;
  throw std::invalid_argument("AZR_CUDA_ATTENTION=" + value + ": expected simt or tensor");
}

}  // namespace azr::kernels
