#pragma once
// Gradient sums in an order that the shapes alone fix, never the order in which blocks finish, so
// that a CUDA training step gives the same bits every run (and a run and its resume agree to the
// bit, as on the CPU). They replace float atomics at five places of the step: the bias gradients'
// column sums, RMSNorm's weight gradient, RoPE's bias sums, the embedding's gradient, and the
// gradient norm's sum of squares. AZR_CUDA_GRADIENT_SUMS=atomic (kernels/cuda_gradient_sums.h)
// takes the atomics back, for speed against reproducibility and as cuda_ops_bench's baseline.
//
// The pattern where blocks each sum a share of the rows: each block writes its partial sums to
// row p of a scratch `parts` [P, C] instead of adding them to the gradient, and
// add_column_parts_kernel then adds the P parts of each column to it, in part order.
//
// The embedding's gradient (rows of dout added at rows ids[n] of dwte, ids repeating) cannot take
// that pattern: its columns are a table of 151,936 rows. There the (id, row) pairs are sorted by id,
// stably (embedding_backward.cu, through CUB), so that each id's rows lie in one run of the sorted
// order, rows ascending; embedding_piece_sums_kernel and embedding_crossing_sums_kernel below add
// each run's rows to its id's gradient in that order, in fixed pieces of the sorted order so that a
// run of thousands of rows (a prompt template's tokens, repeated in every rollout of a batch) is
// summed by many threads, not walked by one.
//
// Device code that also compiles on the CPU stand-in (tests/kernels/cuda_emulation.h).
#include "kernels/cuda/device_or_emulation.cuh"
#include "kernels/cuda/ordered_sums_limits.h"
#include "kernels/cuda/quads.cuh"
#include "kernels/cuda/reductions.cuh"

#include <cstdint>

namespace azr::kernels::cuda_detail {

// add_column_parts_kernel: a block takes 32 columns, and its 8 warps 8 runs of consecutive parts
// (run k: parts k P/8 .. (k + 1) P/8, rounded up), so that P = 512 parts (RMSNorm's blocks) take
// 64 loads a thread, 8 of them in flight, not 512 in turn.
constexpr int kPartColumns = 32, kPartRuns = 8, kPartThreads = kPartColumns * kPartRuns;

// dst[c] += the sum of parts[p C + c] over p < P: each run in part order, then the runs in order.
__global__ void __launch_bounds__(kPartThreads)
    add_column_parts_kernel(float* dst, const float* parts, int64_t P, int64_t C) {
  __shared__ float runs[kPartRuns][kPartColumns];
  const int column = int(threadIdx.x % kPartColumns), run = int(threadIdx.x / kPartColumns);
  const int64_t c = int64_t(blockIdx.x) * kPartColumns + column;
  const int64_t per_run = (P + kPartRuns - 1) / kPartRuns;
  const int64_t p0 = run * per_run, p1 = p0 + per_run < P ? p0 + per_run : P;
  float s = 0.f;
  if (c < C) {
    int64_t p = p0;
    for (; p + 4 <= p1; p += 4) {  // the loads of four parts out together, added in order
      const float a = parts[p * C + c], b = parts[(p + 1) * C + c], d = parts[(p + 2) * C + c],
                  e = parts[(p + 3) * C + c];
      s = s + a + b + d + e;
    }
    for (; p < p1; p++) s += parts[p * C + c];
  }
  runs[run][column] = s;
  __syncthreads();
  if (run != 0 || c >= C) return;
  float total = runs[0][column];
  for (int k = 1; k < kPartRuns; k++) total += runs[k][column];
  dst[c] += total;
}

inline unsigned add_column_parts_blocks(int64_t C) { return unsigned((C + kPartColumns - 1) / kPartColumns); }

// ---- The bias gradients' column sums ----
//
// Threads own columns (coalesced reads of a row); blockIdx.y splits the rows into chunks so a
// tall matrix still fills the device. Each chunk writes its partial sum to row blockIdx.y of
// parts, which add_column_parts then adds to dst in chunk order (ordered_sums.cuh); with parts
// null (AZR_CUDA_GRADIENT_SUMS=atomic) it adds it to dst with one atomic. The unrolled loop issues
// 8 rows' loads before their adds (still added in row order): rolled, each load waited on the add
// before it.
__global__ void column_sums_kernel(float* dst, float* parts, const float* src, int64_t N, int64_t C,
                                   int64_t rows_per_chunk) {
  const int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (c >= C) return;
  const int64_t r0 = blockIdx.y * rows_per_chunk, r1 = r0 + rows_per_chunk < N ? r0 + rows_per_chunk : N;
  float acc = 0.f;
#pragma unroll 8
  for (int64_t r = r0; r < r1; r++) acc += src[r * C + c];
  if (parts)
    parts[blockIdx.y * C + c] = acc;
  else
    atomicAdd(dst + c, acc);
}

// ---- The embedding's gradient over ids sorted by id ----
//
// keys [N]: the ids sorted, stably; rows [N]: the row of dout each came from (ascending within an
// id). The sorted order is cut into pieces of `piece` positions (piece k: positions k piece ..).
// A run of one id that lies inside one piece is summed by that piece's threads and added to dwte
// there. A run that crosses a piece's edge is summed piecewise: each piece writes the sum of its
// first run and of its last run (the same run where the piece holds one) to heads and tails
// [pieces, C], and embedding_crossing_sums_kernel adds the run's tail in its first piece, the heads
// of the pieces after it, in order, to dwte. Each id is written by one thread of each column: no
// two threads add into one element, and the order of the sums is the sorted order's.
//
// The grid: x the column groups of V values (kEmbeddingThreads a block), y the pieces (the
// crossing kernel: the piece edges, 1 .. pieces - 1).
constexpr int kEmbeddingThreads = 128;
using ordered_sums::kEmbeddingPiece;

struct EmbeddingSortedArgs {
  float* dwte;
  float *heads, *tails;  // [pieces, C]
  const float* dout;
  const int32_t *keys, *rows;
  int64_t N, C, piece;
};

// The sum over sorted positions [p0, p1) of dout's column group g, in position order, four rows'
// loads out at a time.
template <int V>
AZR_DEVICE_INLINE Group<V> sum_sorted_rows(const EmbeddingSortedArgs& a, int64_t p0, int64_t p1, int64_t g) {
  Group<V> s{};
  int64_t p = p0;
  for (; p + 4 <= p1; p += 4) {
    Group<V> r[4];
#pragma unroll
    for (int k = 0; k < 4; k++) r[k] = load_group<V>(a.dout + int64_t(a.rows[p + k]) * a.C, g);
#pragma unroll
    for (int k = 0; k < 4; k++)
#pragma unroll
      for (int j = 0; j < V; j++) s.v[j] += r[k].v[j];
  }
  for (; p < p1; p++) {
    const Group<V> r = load_group<V>(a.dout + int64_t(a.rows[p]) * a.C, g);
#pragma unroll
    for (int j = 0; j < V; j++) s.v[j] += r.v[j];
  }
  return s;
}

template <int V>
AZR_DEVICE_INLINE void add_to_row(float* dst, int64_t g, const Group<V>& s) {
  Group<V> d = load_group<V>(dst, g);
#pragma unroll
  for (int j = 0; j < V; j++) d.v[j] += s.v[j];
  store_group<V>(dst, g, d);
}

template <int V>
__global__ void __launch_bounds__(kEmbeddingThreads) embedding_piece_sums_kernel(EmbeddingSortedArgs a) {
  const int64_t g = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (g >= a.C / V) return;
  const int64_t k = blockIdx.y, first = k * a.piece, end = first + a.piece < a.N ? first + a.piece : a.N;
  for (int64_t s = first; s < end;) {  // s: the first position of a run inside the piece
    const int32_t id = a.keys[s];
    int64_t e = s + 1;
    while (e < end && a.keys[e] == id) e++;
    const Group<V> sum = sum_sorted_rows<V>(a, s, e, g);
    const bool starts_before = s == first && first > 0 && a.keys[first - 1] == id;
    const bool ends_after = e == end && end < a.N && a.keys[end] == id;
    if (!starts_before && !ends_after) {
      add_to_row<V>(a.dwte + int64_t(id) * a.C, g, sum);
    } else {
      if (s == first) store_group<V>(a.heads + k * a.C, g, sum);
      if (e == end) store_group<V>(a.tails + k * a.C, g, sum);
    }
    s = e;
  }
}

// Edge k (between pieces k - 1 and k) where one id's run crosses it for the first time: the run's
// tail in piece k - 1, then the heads of pieces k, k + 1, .. while the run goes on, to dwte.
template <int V>
__global__ void __launch_bounds__(kEmbeddingThreads) embedding_crossing_sums_kernel(EmbeddingSortedArgs a) {
  const int64_t g = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (g >= a.C / V) return;
  const int64_t pieces = (a.N + a.piece - 1) / a.piece, k = int64_t(blockIdx.y) + 1, edge = k * a.piece;
  const int32_t id = a.keys[edge];
  if (a.keys[edge - 1] != id) return;                                // no run crosses this edge
  if (k > 1 && a.keys[edge - a.piece - 1] == id) return;             // it crossed an earlier one
  Group<V> sum = load_group<V>(a.tails + (k - 1) * a.C, g);
  for (int64_t j = k;; j++) {
    const Group<V> head = load_group<V>(a.heads + j * a.C, g);
#pragma unroll
    for (int i = 0; i < V; i++) sum.v[i] += head.v[i];
    const int64_t next = (j + 1) * a.piece;
    if (j + 1 >= pieces || a.keys[next - 1] != id || a.keys[next] != id) break;
  }
  add_to_row<V>(a.dwte + int64_t(id) * a.C, g, sum);
}

// ---- The gradient norm's sum of squares ----
//
// Each block's sum of squares of its grid-stride share, in double, to parts[blockIdx.x]; the last
// block to finish (last_block_done, by `count`) sums the parts in a fixed order (each thread its
// parts t, t + blockDim.x, .., then block_sum's tree) into *total.
constexpr int kSquaresThreads = 256, kSquaresBlocks = 1024;

__global__ void __launch_bounds__(kSquaresThreads)
    sum_squares_ordered_kernel(double* total, double* parts, unsigned* count, const float* x, int64_t n) {
  __shared__ double shared[32];
  __shared__ bool last;
  double acc = 0.0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    acc += double(x[i]) * x[i];
  acc = block_sum(acc, shared);
  if (threadIdx.x == 0) parts[blockIdx.x] = acc;
  if (!last_block_done(count, gridDim.x, &last)) return;
  double s = 0.0;
  for (int64_t p = threadIdx.x; p < gridDim.x; p += blockDim.x) s += load_past_l1(parts + p);
  s = block_sum(s, shared);
  if (threadIdx.x == 0) *total = s;
}

}  // namespace azr::kernels::cuda_detail
