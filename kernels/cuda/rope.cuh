#pragma once
// RoPE's training kernel (elementwise.cu launches it): one thread per rotated pair (i, i + d/2) of
// one head of one row, the forward rotation (Sign 1) or its inverse for the backward (Sign -1),
// in place, with rope_pair's arithmetic (decode_epilogues.cuh): the CPU's bits.
//
// Index is the type of the pair's index and of what is divided out of it. A 64-bit division on the
// device is a software routine of dozens of instructions, and each pair takes three; on an H100
// (2026-11-26) RoPE took 3.7 ms of a 1.5B training step, about twice its memory time. Where
// N x heads x d fits in 31 bits (every real batch: 4 x 1,024 tokens x 12 heads x 128 is 6.3M) the
// launch takes uint32_t: the pair index stays below 2^30 and the grid's stride below 2^27, so
// nothing wraps.
//
// In this header, apart from the launch, so that tests/kernels/rope_emulated_test.cpp runs it on
// the CPU through tests/kernels/cuda_emulation.h.
#include "kernels/cuda/decode_epilogues.cuh"  // rope_pair, first_item, grid_stride, fits_32_bit_index
#include "kernels/cuda/device_or_emulation.cuh"

#include <cstdint>

namespace azr::kernels::cuda_detail {

template <int Sign, class Index>
__global__ void rope_kernel(float* x, const int32_t* pos, const float* cos, const float* sin, Index N, Index heads,
                            Index d) {
  const Index half = d / 2, total = N * heads * half;
  for (Index e = first_item<Index>(); e < total; e += grid_stride<Index>()) {
    const Index i = e % half, nh = e / half, n = nh / heads;
    const int64_t table = int64_t(pos[n]) * int64_t(half) + int64_t(i);
    float* v = x + int64_t(nh) * int64_t(d);
    rope_pair(v[i], v[i + half], cos[table], Sign * sin[table], v[i], v[i + half]);
  }
}

// Whether a call of N rows of heads x d values takes the 32-bit index.
inline bool rope_fits_32_bits(int64_t N, int64_t heads, int64_t d) { return fits_32_bit_index(N * heads * d); }

}  // namespace azr::kernels::cuda_detail
