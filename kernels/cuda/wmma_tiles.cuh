// The WMMA conventions the tensor-core kernels share (the training attention,
// attention_tensor_core.cuh, and the decode attention in tiles, attention_decode_tiles.cuh): bf16
// 16 x 16 x 16 fragments with fp32 accumulators, and the padded row stride of a bf16 tile in
// shared memory. A header of its own because those two cannot include each other:
// attention_tensor_core.cuh defines a non-template __global__ function, which two .cu files
// including it would each define.
#pragma once

#ifndef AZR_CUDA_EMULATION
#include <mma.h>
#endif
#include "kernels/cuda/device_or_emulation.cuh"

namespace azr::kernels::cuda_detail::wmma_tiles {

namespace wmma = nvcuda::wmma;
using bf16 = __nv_bfloat16;

using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major>;
using FragBRow = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major>;
using FragBCol = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major>;
using FragC = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

// bf16 stride of a tile row of D values (queries, keys, values, output gradients): rows start 16
// bytes apart in alignment, and the 8 extra values shift each row's banks, so a warp reading a
// column of rows meets fewer bank conflicts.
template <int D>
constexpr int kLd = D + 8;

}  // namespace azr::kernels::cuda_detail::wmma_tiles
