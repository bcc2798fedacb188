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

// The same for the query rows a warp of the Mma forward owns (cuda_set_attention_warp_rows).
class AttentionWarpRows {
 public:
  explicit AttentionWarpRows(int rows) : saved_(cuda_attention_warp_rows()) { cuda_set_attention_warp_rows(rows); }
  ~AttentionWarpRows() { cuda_set_attention_warp_rows(saved_); }
  AttentionWarpRows(const AttentionWarpRows&) = delete;
  AttentionWarpRows& operator=(const AttentionWarpRows&) = delete;

 private:
  int saved_;
};

// The same for how the Mma backward runs dQ (cuda_set_attention_backward).
class AttentionBackwardChoice {
 public:
  explicit AttentionBackwardChoice(CudaAttentionBackward backward) : saved_(cuda_attention_backward()) {
    cuda_set_attention_backward(backward);
  }
  ~AttentionBackwardChoice() { cuda_set_attention_backward(saved_); }
  AttentionBackwardChoice(const AttentionBackwardChoice&) = delete;
  AttentionBackwardChoice& operator=(const AttentionBackwardChoice&) = delete;

 private:
  CudaAttentionBackward saved_;
};

}  // namespace azr::kernels::testing
