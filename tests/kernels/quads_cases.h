#pragma once
// What the emulated tests of the four-values-a-thread kernels share (swiglu, streaming; see
// kernels/cuda/quads.cuh): lengths that leave every tail of n % 4, grids of one block and of more
// blocks than a small n needs (the grid-stride loops wrap), and buffers with a sentinel past n.
// Include after tests/kernels/cuda_emulation.h (it names __nv_bfloat16).
#include <cmath>
#include <cstdint>
#include <vector>

#include "tests/kernels/same_bits.h"

namespace azr::kernels::testing {

inline constexpr int64_t kQuadLengths[] = {1, 3, 4, 5, 6, 7, 37, 64, 1027};
inline constexpr unsigned kQuadBlocks[] = {1, 3};
inline constexpr unsigned kQuadThreads = 64;

inline constexpr uint16_t kUnwritten16 = 0xFFFF;  // a NaN's bits, which no bf16 rounding of a number gives

// n values and one sentinel past them.
inline std::vector<float> floats(int64_t n) { return std::vector<float>(size_t(n) + 1, NAN); }
inline std::vector<uint16_t> halves(int64_t n) { return std::vector<uint16_t>(size_t(n) + 1, kUnwritten16); }
inline __nv_bfloat16* bf(std::vector<uint16_t>& v) { return reinterpret_cast<__nv_bfloat16*>(v.data()); }

}  // namespace azr::kernels::testing
