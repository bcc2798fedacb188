#pragma once
// The ordered gradient sums' grid and scratch sizes (ordered_sums.cuh, ordered_sums.cu, and the
// RMSNorm and RoPE backward launches that use them), in plain C++ so that the memory plan
// (model/memory_plan.cpp) bounds their scratch from the same numbers the kernels use.
#include <algorithm>
#include <cstdint>

namespace azr::kernels::cuda_detail::ordered_sums {

// Blocks the grids aim for: RMSNorm's backward (rmsnorm.cu; a partial of dw each), the column
// sums' and RoPE's bias sums' chunks of rows (ordered_sums.cu, rope.cuh; a partial each).
constexpr int64_t kNormBackwardBlocks = 512;
constexpr int64_t kColumnSumBlocks = 1024;
// Sorted positions a piece of the embedding's gradient (ordered_sums.cuh).
constexpr int64_t kEmbeddingPiece = 32;
// Rows one embedding backward takes: its pieces are grid rows, at most 65,535 (a grid's y).
constexpr int64_t kEmbeddingRowsPerCall = 65535 * kEmbeddingPiece;

// An upper bound of the bytes the scratch reaches in a training step of N rows of width H whose
// widest bias (q, k and v's together) is W wide: the largest set of partials (RMSNorm's, at most
// kNormBackwardBlocks rows of H; a column sum's or RoPE's, at most kColumnSumBlocks chunks of 256
// columns a block, rounded up: 512 x 1024 + W + 512 floats), the embedding's sort (3 N int32, and
// CUB's temporary storage, which holds at most a second copy of the N pairs and its histograms:
// 8 N bytes and 1 MiB), its pieces' heads and tails (2 [N / kEmbeddingPiece + 1, H] floats), and
// the sum of squares' 1,024 doubles.
inline double scratch_bytes(double N, double H, double W) {
  const double parts = std::max(double(kNormBackwardBlocks) * H, 512.0 * double(kColumnSumBlocks) + W + 512.0);
  const double sort = 3.0 * 4.0 * N + 8.0 * N + double(1 << 20);
  const double ends = 2.0 * (N / double(kEmbeddingPiece) + 1.0) * H * 4.0;
  return 4.0 * parts + sort + ends + 8.0 * 1025.0;
}

}  // namespace azr::kernels::cuda_detail::ordered_sums
