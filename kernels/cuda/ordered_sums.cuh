#pragma once
// Gradient sums in an order that the shapes alone fix, never the order in which blocks finish, so
// that a CUDA training step gives the same bits every run (and a run and its resume agree to the
// bit, as on the CPU). They replace float atomics at five places of the step: the bias gradients'
// column sums, RMSNorm's weight gradient, RoPE's bias sums, the embedding's gradient, and the
// gradient norm's sum of squares. AZR_CUDA_GRADIENT_SUMS=atomic (kernels/cuda_launch_choice.h)
// takes the atomics back, for speed against reproducibility and as cuda_ops_bench's baseline.
//
// The pattern where blocks each sum a share of the rows: each block writes its partial sums to
// row p of a scratch `parts` [P, C] instead of adding them to the gradient, and
// add_column_parts_kernel then adds the P parts of each column to it in a fixed order (below).
//
// The embedding's gradient (rows of dout added at rows ids[n] of dwte, ids repeating) cannot take
// that pattern: its columns are a table of 151,936 rows. There the (id, row) pairs are sorted by id,
// stably (ordered_sums.cu, through CUB), so that each id's rows lie in one run of the sorted
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

// add_column_parts_kernel: a block takes kPartGroups groups of V columns (V = 4: quads, where C
// and the pointers allow; else 1), and its threads kPartRuns runs of consecutive parts (run k:
// parts k P/32 .., rounded up), so that RMSNorm's 512 parts at 1.5B (3 MB) are 16 loads a thread,
// all out before their adds: one round trip to memory, not 512 in turn. A warp reads 4 runs' 8
// consecutive groups, 128 bytes each in quads.
//
// Launched programmatically where the device has it (common.cuh, launch_after_prior): the kernel
// before it (RMSNorm's or RoPE's backward, the column sums) lets it start early (release_next_grid
// at its own start), so its blocks are resident and wait, and the launch gap goes. Those producers
// must stay ordinary launches: one released before its wait, itself launched programmatically,
// would let the kernel after it overlap the kernel before it (device_or_emulation.cuh).
constexpr int kPartGroups = 8, kPartRuns = 32, kPartThreads = kPartGroups * kPartRuns;

// dst[c] += the sum of parts[p C + c] over p < P: each run in part order, then the runs in order.
template <int V>
__global__ void __launch_bounds__(kPartThreads)
    add_column_parts_kernel(float* dst, const float* parts, int64_t P, int64_t C) {
  wait_for_prior_grids();  // the parts are the kernel before's
  release_next_grid();
  __shared__ float runs[kPartRuns][kPartGroups * V];
  const int group = int(threadIdx.x % kPartGroups), run = int(threadIdx.x / kPartGroups);
  const int64_t g = int64_t(blockIdx.x) * kPartGroups + group, groups = C / V;
  const int64_t per_run = (P + kPartRuns - 1) / kPartRuns;
  const int64_t p0 = run * per_run, p1 = p0 + per_run < P ? p0 + per_run : P;
  Group<V> s{};
  if (g < groups) {
    int64_t p = p0;
    for (; p + 8 <= p1; p += 8) {  // eight parts' loads out together, added in order
      Group<V> r[8];
#pragma unroll
      for (int k = 0; k < 8; k++) r[k] = load_group<V>(parts + (p + k) * C, g);
#pragma unroll
      for (int k = 0; k < 8; k++)
#pragma unroll
        for (int j = 0; j < V; j++) s.v[j] += r[k].v[j];
    }
    for (; p < p1; p++) {
      const Group<V> r = load_group<V>(parts + p * C, g);
#pragma unroll
      for (int j = 0; j < V; j++) s.v[j] += r.v[j];
    }
  }
#pragma unroll
  for (int j = 0; j < V; j++) runs[run][group * V + j] = s.v[j];
  __syncthreads();
  if (run != 0 || g >= groups) return;
  Group<V> total = s, d = load_group<V>(dst, g);
  for (int k = 1; k < kPartRuns; k++)
#pragma unroll
    for (int j = 0; j < V; j++) total.v[j] += runs[k][group * V + j];
#pragma unroll
  for (int j = 0; j < V; j++) d.v[j] += total.v[j];
  store_group<V>(dst, g, d);
}

// The launch's values a thread: quads where the width and both pointers allow.
inline int add_column_parts_values(const float* dst, const float* parts, int64_t C) {
  return C % 4 == 0 && quads_fit({dst, parts}, {}) ? 4 : 1;
}
inline unsigned add_column_parts_blocks(int64_t C, int V) {
  return unsigned((C / V + kPartGroups - 1) / kPartGroups);
}

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
  release_next_grid();  // the parts' sum may launch now and wait (an ordinary launch)
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

// Sentinel key past either end of the sorted order: below every id (ids are at least 0).
constexpr int32_t kNoKey = -1;
// dout rows (and dwte rows) a thread has in flight while it walks a piece in order.
constexpr int kEmbeddingRowsAtOnce = 8;

// The piece's keys, with its neighbours' at each end, and its rows, staged in shared memory by the
// block together (one round trip), so that finding the runs costs no more: keys[i + 1] is position
// first + i's key, keys[0] and keys[n + 1] the positions before and after the piece (kNoKey past
// either end of the order).
struct PieceStage {
  int32_t keys[kEmbeddingPiece + 2];
  int32_t rows[kEmbeddingPiece];
};

// Whether the run of `id` that starts at the piece's position i lies wholly inside the piece: it did
// not begin before the piece, and does not go on past it (it reaches the piece's end, position n - 1,
// and the next position holds its id too).
AZR_DEVICE_INLINE bool run_inside_piece(const PieceStage& st, int i, int n, int32_t id) {
  return !(i == 0 && st.keys[0] == id) && !(st.keys[n] == id && st.keys[n + 1] == id);
}

// Walks the piece's n positions in order, kEmbeddingRowsAtOnce at a time: their dout rows loaded
// together, and with them the dwte row of each run that starts there and lies wholly inside the
// piece; then summed in position order. A run inside the piece is added to its id's row; a run at
// the piece's start that began before it is written to heads, and one at its end that goes on
// past it to tails (the one run of a piece of one id: both).
template <int V>
AZR_DEVICE_INLINE void sum_piece_runs(const EmbeddingSortedArgs& a, const PieceStage& st, int64_t k, int n,
                                      int64_t g) {
  Group<V> sum{}, dst{};
  int run_start = 0;
  bool inside = false;  // the current run's, from its start
  for (int c0 = 0; c0 < n; c0 += kEmbeddingRowsAtOnce) {
    Group<V> r[kEmbeddingRowsAtOnce], d[kEmbeddingRowsAtOnce]{};  // d: only where a whole run starts
#pragma unroll
    for (int j = 0; j < kEmbeddingRowsAtOnce; j++) {
      const int i = c0 + j;
      if (i >= n) break;
      r[j] = load_group<V>(a.dout + int64_t(st.rows[i]) * a.C, g);
      const int32_t id = st.keys[i + 1];
      if ((i == 0 || st.keys[i] != id) && run_inside_piece(st, i, n, id))
        d[j] = load_group<V>(a.dwte + int64_t(id) * a.C, g);
    }
#pragma unroll
    for (int j = 0; j < kEmbeddingRowsAtOnce; j++) {
      const int i = c0 + j;
      if (i >= n) break;
      const int32_t id = st.keys[i + 1];
      if (i == 0 || st.keys[i] != id)
        sum = Group<V>{}, dst = d[j], run_start = i, inside = run_inside_piece(st, i, n, id);
#pragma unroll
      for (int v = 0; v < V; v++) sum.v[v] += r[j].v[v];
      if (i + 1 < n && st.keys[i + 2] == id) continue;  // the run goes on inside the piece
      if (inside) {
#pragma unroll
        for (int v = 0; v < V; v++) dst.v[v] += sum.v[v];
        store_group<V>(a.dwte + int64_t(id) * a.C, g, dst);
      } else {
        if (run_start == 0) store_group<V>(a.heads + k * a.C, g, sum);
        if (i + 1 == n) store_group<V>(a.tails + k * a.C, g, sum);
      }
    }
  }
}

// Block (x, k): piece k's runs for kEmbeddingThreads column groups. a.piece is at most
// kEmbeddingPiece (the launch's; tests take smaller ones for more edges).
template <int V>
__global__ void __launch_bounds__(kEmbeddingThreads) embedding_piece_sums_kernel(EmbeddingSortedArgs a) {
  release_next_grid();  // the crossing sums may launch now and wait (an ordinary launch)
  __shared__ PieceStage st;
  const int64_t k = blockIdx.y, first = k * a.piece, end = first + a.piece < a.N ? first + a.piece : a.N;
  const int n = int(end - first);
  for (int i = int(threadIdx.x); i < n + 2; i += int(blockDim.x)) {
    const int64_t p = first - 1 + i;
    st.keys[i] = p >= 0 && p < a.N ? a.keys[p] : kNoKey;
    if (i < n) st.rows[i] = a.rows[first + i];
  }
  __syncthreads();
  const int64_t g = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (g >= a.C / V) return;
  sum_piece_runs<V>(a, st, k, n, g);
}

// Edge k (between pieces k - 1 and k) where one id's run crosses it for the first time: the run's
// tail in piece k - 1, then the heads of pieces k .. j_last in order, to dwte. j_last, the last
// piece the run starts, by a binary search over the pieces' first keys (sorted: the run covers
// pieces k .. j_last from their starts), so that the heads' loads go out kEmbeddingRowsAtOnce at a
// time: a run of padding's id 0 over thousands of rows is tens of round trips, not one a piece.
template <int V>
__global__ void __launch_bounds__(kEmbeddingThreads) embedding_crossing_sums_kernel(EmbeddingSortedArgs a) {
  wait_for_prior_grids();  // the heads and tails are the pieces kernel's
  release_next_grid();
  const int64_t g = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (g >= a.C / V) return;
  const int64_t pieces = (a.N + a.piece - 1) / a.piece, k = int64_t(blockIdx.y) + 1, edge = k * a.piece;
  const int32_t id = a.keys[edge];
  if (a.keys[edge - 1] != id) return;                                // no run crosses this edge
  if (k > 1 && a.keys[edge - a.piece - 1] == id) return;             // it crossed an earlier one
  const Group<V> d = load_group<V>(a.dwte + int64_t(id) * a.C, g);  // out beside the search
  int64_t lo = k, hi = pieces - 1;
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (a.keys[mid * a.piece] == id)
      lo = mid;
    else
      hi = mid - 1;
  }
  Group<V> sum = load_group<V>(a.tails + (k - 1) * a.C, g);
  for (int64_t j0 = k; j0 <= lo; j0 += kEmbeddingRowsAtOnce) {
    Group<V> h[kEmbeddingRowsAtOnce];
#pragma unroll
    for (int t = 0; t < kEmbeddingRowsAtOnce; t++)
      if (j0 + t <= lo) h[t] = load_group<V>(a.heads + (j0 + t) * a.C, g);
#pragma unroll
    for (int t = 0; t < kEmbeddingRowsAtOnce; t++)
      if (j0 + t <= lo)
#pragma unroll
        for (int v = 0; v < V; v++) sum.v[v] += h[t].v[v];
  }
  Group<V> out = d;
#pragma unroll
  for (int v = 0; v < V; v++) out.v[v] += sum.v[v];
  store_group<V>(a.dwte + int64_t(id) * a.C, g, out);
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
