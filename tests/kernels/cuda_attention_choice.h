#pragma once
// Sets one of the CUDA Bf16 table's training attention choices (kernels/cuda/cuda_ops.h) for one
// scope of a test, and restores the previous value, so a test of one path never leaks into the
// next.
#include "kernels/cuda/cuda_ops.h"

namespace azr::kernels::testing {

template <class T, T (*Get)(), void (*Set)(T)>
class ScopedAttentionSetting {
 public:
  explicit ScopedAttentionSetting(T value) : saved_(Get()) { Set(value); }
  ~ScopedAttentionSetting() { Set(saved_); }
  ScopedAttentionSetting(const ScopedAttentionSetting&) = delete;
  ScopedAttentionSetting& operator=(const ScopedAttentionSetting&) = delete;

 private:
  T saved_;
};

// Which kernels run (cuda_set_attention_kernel).
using AttentionChoice =
    ScopedAttentionSetting<CudaAttentionKernel, cuda_attention_kernel, cuda_set_attention_kernel>;
// The query rows a warp of the Mma forward owns (cuda_set_attention_warp_rows).
using AttentionWarpRows = ScopedAttentionSetting<int, cuda_attention_warp_rows, cuda_set_attention_warp_rows>;
// How the Mma backward runs dQ (cuda_set_attention_backward).
using AttentionBackwardChoice =
    ScopedAttentionSetting<CudaAttentionBackward, cuda_attention_backward, cuda_set_attention_backward>;

}  // namespace azr::kernels::testing
