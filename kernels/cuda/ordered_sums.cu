// The launches of the ordered gradient sums (ordered_sums.cuh says why and in what order), the
// choice between them and float atomics (AZR_CUDA_GRADIENT_SUMS), and the three ops they serve
// alone: the bias gradients' column sums, the embedding's backward and the sum of squares behind
// the global grad norm. RMSNorm's and RoPE's backward take add_column_parts from here.
#include <cub/device/device_radix_sort.cuh>

#include <algorithm>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/internal.h"
#include "kernels/cuda/ordered_sums.cuh"
#include "kernels/cuda_launch_choice.h"

namespace azr::kernels {
namespace cuda_detail {

bool& gradient_sums_ordered() {  // cuda_set_gradient_sums_ordered
  static bool ordered = [] {
    const char* e = std::getenv("AZR_CUDA_GRADIENT_SUMS");
    return parse_cuda_gradient_sums(e ? e : "");
  }();
  return ordered;
}

namespace {

// The ordered form's grow-only buffers, one set for the process (ops run in order on one stream):
// the partial sums; CUB's temporary storage, the rows in order and the sorted pairs (int32: a
// batch past 2^31 rows is far beyond any memory plan), and the pieces' heads and tails of the
// embedding's gradient; the sum of squares' total and parts.
DeviceScratch<float> g_parts;
struct EmbeddingScratch {
  DeviceScratch<unsigned char> sort_temp;
  DeviceScratch<int32_t> pairs;  // rows in order [N], sorted keys [N], sorted rows [N]
  DeviceScratch<float> ends;     // heads, tails [pieces, C] each
} g_embedding;
DeviceScratch<double> g_squares;  // the total, then kSquaresBlocks parts

}  // namespace

float* column_parts(int64_t rows, int64_t C) {
  if (!gradient_sums_ordered() || rows < 2) return nullptr;
  return g_parts.get(std::max<size_t>(size_t(rows) * size_t(C), 1));
}

size_t cuda_gradient_sums_scratch_bytes() {
  return g_parts.bytes() + g_embedding.sort_temp.bytes() + g_embedding.pairs.bytes() + g_embedding.ends.bytes() +
         g_squares.bytes();
}

void add_column_parts(float* dst, const float* parts, int64_t P, int64_t C) {
  if (P == 0 || C == 0) return;
  const int V = add_column_parts_values(dst, parts, C);
  launch_after_prior(V == 4 ? add_column_parts_kernel<4> : add_column_parts_kernel<1>,
                     dim3(add_column_parts_blocks(C, V)), dim3(kPartThreads), 0, dst, parts, P, C);
}

// The grid: about kColumnSumBlocks blocks, in chunks of at least kMinChunkRows rows. The bias
// gradients of q, k and v (1.5B: 4,096 x 1,536 and 4,096 x 256) had 64-row chunks, 64 blocks for a
// 256-wide k, fewer than the multiprocessors. cuda_ops_bench's "bias grads q, k, v" row times the
// three calls: 1,165 GB/s on an H200 (2026-11-27), 24% of the bandwidth, with the old grid not
// timed beside it. The step's op profile put them at 25 us a call against 23 in an earlier run of
// the old grid on another H200 whose GEMMs ran 5% faster too: no gain shown, none ruled out.
constexpr int64_t kMinChunkRows = 8;
using ordered_sums::kColumnSumBlocks;

void column_sums_accumulate(float* dst, const float* src, int64_t N, int64_t C) {
  if (N * C == 0) return;
  const int64_t column_blocks = (C + 255) / 256;
  const int64_t aim = std::clamp<int64_t>((kColumnSumBlocks + column_blocks - 1) / column_blocks, 1,
                                          (N + kMinChunkRows - 1) / kMinChunkRows);
  const int64_t rows = (N + std::min<int64_t>(aim, 65535) - 1) / std::min<int64_t>(aim, 65535);
  const int64_t chunks = (N + rows - 1) / rows;  // those with rows: the rounding may leave fewer
  float* parts = column_parts(chunks, C);
  column_sums_kernel<<<dim3(unsigned(column_blocks), unsigned(chunks)), 256, 0, op_stream()>>>(dst, parts, src, N, C,
                                                                                              rows);
  AZR_CUDA_LAUNCHED();
  if (parts) add_column_parts(dst, parts, chunks, C);
}

namespace {

// The atomic form: one thread a value, each added to its id's row with an atomic.
__global__ void embedding_backward_atomic_kernel(float* dwte, const float* dout, const int32_t* ids, int64_t N,
                                                 int64_t C) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < N * C; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t n = i / C, c = i % C;
    atomicAdd(dwte + int64_t(ids[n]) * C + c, dout[i]);
  }
}

__global__ void iota_kernel(int32_t* rows, int64_t N) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < N; i += int64_t(gridDim.x) * blockDim.x)
    rows[i] = int32_t(i);
}

void embedding_backward_sorted(float* dwte, const float* dout, const int32_t* ids, int64_t N, int64_t C) {
  EmbeddingScratch& scratch = g_embedding;
  size_t temp_bytes = 0;
  const int n = int(N);
  AZR_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, ids, static_cast<int32_t*>(nullptr),
                                                 static_cast<const int32_t*>(nullptr),
                                                 static_cast<int32_t*>(nullptr), n, 0, 32, op_stream()));
  void* temp = scratch.sort_temp.get(std::max<size_t>(temp_bytes, 1));  // null would ask for the size again
  int32_t* rows_in = scratch.pairs.get(3 * size_t(N));
  int32_t *keys = rows_in + N, *rows = keys + N;
  iota_kernel<<<grid_for(N), 256, 0, op_stream()>>>(rows_in, N);
  AZR_CUDA_LAUNCHED();
  // LSD radix sort: stable, so each id's rows stay ascending.
  AZR_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, ids, keys, rows_in, rows, n, 0, 32, op_stream()));
  const int64_t pieces = (N + kEmbeddingPiece - 1) / kEmbeddingPiece;
  float* heads = scratch.ends.get(2 * size_t(pieces * C));
  const EmbeddingSortedArgs a{dwte, heads, heads + pieces * C, dout, keys, rows, N, C, kEmbeddingPiece};
  const bool quads = C % 4 == 0 && quads_fit({dwte, dout, heads, heads + pieces * C}, {});
  const int64_t groups = quads ? C / 4 : C;
  const unsigned x = unsigned((groups + kEmbeddingThreads - 1) / kEmbeddingThreads);
  auto launch = [&](auto pieces_kernel, auto crossing_kernel) {
    pieces_kernel<<<dim3(x, unsigned(pieces)), kEmbeddingThreads, 0, op_stream()>>>(a);
    AZR_CUDA_LAUNCHED();
    if (pieces < 2) return;
    launch_after_prior(crossing_kernel, dim3(x, unsigned(pieces - 1)), dim3(kEmbeddingThreads), 0, a);
  };
  if (quads)
    launch(embedding_piece_sums_kernel<4>, embedding_crossing_sums_kernel<4>);
  else
    launch(embedding_piece_sums_kernel<1>, embedding_crossing_sums_kernel<1>);
}

}  // namespace

void embedding_backward(float* dwte, const float* dout, const int32_t* ids, int64_t N, int64_t C) {
  if (N * C == 0) return;
  if (gradient_sums_ordered()) {
    if (N > ordered_sums::kEmbeddingRowsPerCall)  // the pieces' grid rows (model::micro_batch_limit)
      throw std::invalid_argument("embedding_backward: " + std::to_string(N) + " rows, past the " +
                                  std::to_string(ordered_sums::kEmbeddingRowsPerCall) +
                                  " its ordered sums take a call");
    return embedding_backward_sorted(dwte, dout, ids, N, C);
  }
  embedding_backward_atomic_kernel<<<grid_for(N * C), 256, 0, op_stream()>>>(dwte, dout, ids, N, C);
  AZR_CUDA_LAUNCHED();
}

namespace {

// The atomic form: per-thread sums in double, one atomic a block.
__global__ void sum_squares_atomic_kernel(double* total, const float* x, int64_t n) {
  __shared__ double shared[32];
  double acc = 0.0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    acc += double(x[i]) * x[i];
  acc = block_sum(acc, shared);
  if (threadIdx.x == 0) atomicAdd(total, acc);
}

}  // namespace

double sum_squares(const float* x, int64_t n) {
  if (n == 0) return 0.0;
  // One device total and its parts for the process: ops run in order on one stream, and this call
  // waits for its result before returning, so the next call cannot race it.
  double* total = g_squares.get(1 + kSquaresBlocks);
  static ZeroedCounts count;
  const unsigned blocks = std::min(grid_for(n, kSquaresThreads), unsigned(kSquaresBlocks));
  if (gradient_sums_ordered()) {
    sum_squares_ordered_kernel<<<blocks, kSquaresThreads, 0, op_stream()>>>(total, total + 1, count.get(1), x, n);
  } else {
    AZR_CUDA_CHECK(cudaMemsetAsync(total, 0, sizeof(double), op_stream()));
    sum_squares_atomic_kernel<<<blocks, kSquaresThreads, 0, op_stream()>>>(total, x, n);
  }
  AZR_CUDA_LAUNCHED();
  double host = 0.0;
  AZR_CUDA_CHECK(cudaMemcpy(&host, total, sizeof(double), cudaMemcpyDeviceToHost));
  return host;
}

}  // namespace cuda_detail

void cuda_set_gradient_sums_ordered(bool ordered) { cuda_detail::gradient_sums_ordered() = ordered; }
bool cuda_gradient_sums_ordered() { return cuda_detail::gradient_sums_ordered(); }

}  // namespace azr::kernels
