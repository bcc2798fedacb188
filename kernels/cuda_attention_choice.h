#pragma once
// Which kernels the CUDA Bf16 table's training attention runs (kernels/cuda/cuda_ops.h says what
// each is), and how the environment spells the choice (AZR_CUDA_ATTENTION). Plain C++, outside
// kernels/cuda, so that the parsing is built and tested where there is no CUDA.
#include <stdexcept>
#include <string>

namespace azr::kernels {

enum class CudaAttentionKernel { Simt, TensorCore, Mma };

// "" (unset) or "tensor": TensorCore (the default since its GPU tests passed on an H200, where it
// made a 1.5B training step 1.6x faster); "simt": Simt; "mma": Mma (the kernels on mma.sync, not
// yet run on a GPU, so not the default); anything else is an std::invalid_argument that names the
// variable, the value and the values it takes.
inline CudaAttentionKernel parse_cuda_attention(const std::string& value) {
  if (value.empty() || value == "tensor") return CudaAttentionKernel::TensorCore;
  if (value == "simt") return CudaAttentionKernel::Simt;
  if (value == "mma") return CudaAttentionKernel::Mma;
  throw std::invalid_argument("AZR_CUDA_ATTENTION=" + value + ": expected simt, tensor or mma");
}

}  // namespace azr::kernels
