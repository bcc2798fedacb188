#pragma once
// Sets one of the CUDA backend's process-wide choices (kernels/cuda/cuda_ops.h: the training
// attention's kernels, the decode step's launches) for one scope of a test, and restores the
// previous value, so a test of one path never leaks into the next.
#include "kernels/cuda/cuda_ops.h"

namespace azr::kernels::testing {

template <class T, T (*Get)(), void (*Set)(T)>
class ScopedCudaSetting {
 public:
  explicit ScopedCudaSetting(T value) : saved_(Get()) { Set(value); }
  ~ScopedCudaSetting() { Set(saved_); }
  ScopedCudaSetting(const ScopedCudaSetting&) = delete;
  ScopedCudaSetting& operator=(const ScopedCudaSetting&) = delete;

 private:
  T saved_;
};

// Which kernels run (cuda_set_attention_kernel).
using AttentionChoice = ScopedCudaSetting<CudaAttentionKernel, cuda_attention_kernel, cuda_set_attention_kernel>;
// The query rows a warp of the Mma forward owns (cuda_set_attention_warp_rows).
using AttentionWarpRows = ScopedCudaSetting<int, cuda_attention_warp_rows, cuda_set_attention_warp_rows>;
// How the Mma backward runs dQ (cuda_set_attention_backward).
using AttentionBackwardChoice =
    ScopedCudaSetting<CudaAttentionBackward, cuda_attention_backward, cuda_set_attention_backward>;
// Programmatic dependent launch of the decode step (cuda_set_programmatic_launch).
using ProgrammaticLaunch = ScopedCudaSetting<bool, cuda_programmatic_launch, cuda_set_programmatic_launch>;
// A decode step's layers at one row as one persistent kernel (cuda_set_decode_layers_persistent).
using PersistentDecodeLayers =
    ScopedCudaSetting<bool, cuda_decode_layers_persistent, cuda_set_decode_layers_persistent>;
// That kernel's prefetch and grid (cuda_set_decode_layers_tuning).
using DecodeLayersTuningScope =
    ScopedCudaSetting<DecodeLayersTuning, cuda_decode_layers_tuning, cuda_set_decode_layers_tuning>;

// The training step's sums over rows in a fixed order, or with atomics
// (cuda_set_gradient_sums_ordered).
using GradientSumsOrdered = ScopedCudaSetting<bool, cuda_gradient_sums_ordered, cuda_set_gradient_sums_ordered>;

}  // namespace azr::kernels::testing
