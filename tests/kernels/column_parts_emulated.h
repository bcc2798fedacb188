#pragma once
// add_column_parts (kernels/cuda/ordered_sums.cu) on the CPU stand-in for the device
// (tests/kernels/cuda_emulation.h, included first by the suites that use this): the kernel at the
// values a thread and the grid the launch takes, for the suites of the kernels whose partial sums
// it adds (ordered sums, RMSNorm's and RoPE's backward).
#include "tests/kernels/cuda_emulation.h"
//
#include "kernels/cuda/ordered_sums.cuh"

namespace azr::kernels::cuda_detail::testing {

inline void emulated_add_column_parts(float* dst, const float* parts, int64_t P, int64_t C) {
  if (add_column_parts_values(dst, parts, C) == 4)
    emu::launch({add_column_parts_blocks(C, 4), 1, 1}, kPartThreads, 0, add_column_parts_kernel<4>, dst, parts, P, C);
  else
    emu::launch({add_column_parts_blocks(C, 1), 1, 1}, kPartThreads, 0, add_column_parts_kernel<1>, dst, parts, P, C);
}

}  // namespace azr::kernels::cuda_detail::testing
