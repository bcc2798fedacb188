#pragma once
// Which kernels the CUDA Bf16 table's training attention runs (kernels/cuda/cuda_ops.h says what
// each is), and how the environment spells the choice (AZR_CUDA_ATTENTION). Plain C++, outside
// kernels/cuda, so that the parsing is built and tested where there is no CUDA.
#include <stdexcept>
#include <string>

namespace azr::kernels {

enum class CudaAttentionKernel { Simt, TensorCore, Mma };

// "" (unset) or "mma": Mma (the default since its GPU tests passed on an H100, 2026-11-26, where
// it made a 1.5B training step 1.12x faster than TensorCore: 28,152 against 25,049 tokens/s);
// "tensor": TensorCore (WMMA; the default before, 1.6x faster than Simt on an H200); "simt": Simt;
// anything else is an std::invalid_argument that names the variable, the value and the values it
// takes.
inline CudaAttentionKernel parse_cuda_attention(const std::string& value) {
  if (value.empty() || value == "mma") return CudaAttentionKernel::Mma;
  if (value == "tensor") return CudaAttentionKernel::TensorCore;
  if (value == "simt") return CudaAttentionKernel::Simt;
  throw std::invalid_argument("AZR_CUDA_ATTENTION=" + value + ": expected simt, tensor or mma");
}

// The query rows each warp of the Mma forward owns (kernels/cuda/attention_mma.cuh: 16, a block of
// 64 walking 64-key tiles; or 32, FlashAttention-2's geometry, a block of 128 walking 32-key
// tiles), from AZR_CUDA_ATTENTION_WARP_ROWS: "" (unset) or "16": 16, the default until a GPU
// measures 32 (cuda_ops_bench --only attention); "32": 32; anything else is an
// std::invalid_argument that names the variable, the value and the values it takes.
inline int parse_cuda_attention_warp_rows(const std::string& value) {
  if (value.empty() || value == "16") return 16;
  if (value == "32") return 32;
  throw std::invalid_argument("AZR_CUDA_ATTENTION_WARP_ROWS=" + value + ": expected 16 or 32");
}

// How the Mma backward runs (kernels/cuda/attention_mma_backward.cuh): Split, dQ in its own kernel
// beside the dK/dV kernel (7 products a pair of tiles; each output written once, so the same bits
// every run); Merged, one kernel adds dQ, dK and dV with atomics (5 products; the bits depend on
// the order of the adds). From AZR_CUDA_ATTENTION_BACKWARD: "" (unset) or "split": Split, the
// default until a GPU measures Merged (cuda_ops_bench --only attention; model_speed_bench under the
// variable); "merged": Merged; anything else is an std::invalid_argument that names the variable,
// the value and the values it takes.
enum class CudaAttentionBackward { Split, Merged };

inline CudaAttentionBackward parse_cuda_attention_backward(const std::string& value) {
  if (value.empty() || value == "split") return CudaAttentionBackward::Split;
  if (value == "merged") return CudaAttentionBackward::Merged;
  throw std::invalid_argument("AZR_CUDA_ATTENTION_BACKWARD=" + value + ": expected split or merged");
}

}  // namespace azr::kernels
