#pragma once
// Sets the CUDA Bf16 table's training attention kernels (kernels/cuda/cuda_ops.h) for one scope
// of a test, and restores the previous choice, so a test of one path never leaks into the next.
#include "kernels/cuda/cuda_ops.h"

namespace azr::kernels::testing {

class AttentionChoice {
 public:
  explicit AttentionChoice(CudaAttentionKernel kernel) : saved_(cuda_attention_kernel()) {
    cuda_set_attention_kernel(kernel);
  }
  ~AttentionChoice() { cuda_set_attention_kernel(saved_); }
  AttentionChoice(const AttentionChoice&) = delete;
  AttentionChoice& operator=(const AttentionChoice&) = delete;

 private:
  CudaAttentionKernel saved_;
};

}  // namespace azr::kernels::testing
