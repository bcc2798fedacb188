// What a grid barrier (grid_barrier.cuh) costs on this device, against what it replaces: the
// boundary between two kernels of a recorded graph. For cuda_ops_bench's grid_barrier section:
// the persistent decode kernel (decode_layers.cuh) meets at 139 barriers a 1.5B step where the
// launches had 145 kernel boundaries, and whether it can win turns on the ratio of the two.
#include <algorithm>
#include <stdexcept>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/grid_barrier.cuh"
#include "kernels/cuda/internal.h"

namespace azr::kernels::cuda_detail {
namespace {

// The persistent decode kernel's block size (decode_layers.cuh's kThreads), so that the barrier
// is timed with as many warps waiting behind each block's thread 0.
constexpr int kBlockThreads = 256;

__global__ void barriers_kernel(unsigned* arrived, int barriers) {
  for (int i = 0; i < barriers; i++) grid_barrier(arrived);
}

__global__ void empty_kernel() {}

}  // namespace

BarrierTiming time_grid_barriers(int blocks_per_multiprocessor, int barriers) {
  if (blocks_per_multiprocessor < 1 || barriers < 1)
    throw std::invalid_argument("time_grid_barriers: blocks_per_multiprocessor and barriers must be positive");
  int device = 0;
  AZR_CUDA_CHECK(cudaGetDevice(&device));
  if (!device_attribute(cudaDevAttrCooperativeLaunch, device))
    throw std::runtime_error("time_grid_barriers: the device launches no cooperative grids");
  int fit = 0;
  AZR_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&fit, barriers_kernel, kBlockThreads, 0));
  BarrierTiming t;
  t.blocks = std::min(fit, blocks_per_multiprocessor) * multiprocessors();
  static ZeroedCounts word;  // zero before its first barrier; each launch leaves the count at zero
  unsigned* arrived = word.get(1);
  const cudaStream_t stream = op_stream();

  cudaLaunchAttribute cooperative{};
  cooperative.id = cudaLaunchAttributeCooperative;
  cooperative.val.cooperative = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(unsigned(t.blocks));
  config.blockDim = dim3(kBlockThreads);
  config.stream = stream;
  config.attrs = &cooperative;
  config.numAttrs = 1;
  auto launch = [&](int n) { AZR_CUDA_CHECK(cudaLaunchKernelEx(&config, barriers_kernel, arrived, n)); };
  // The launch's own cost, timed with no barrier and taken off: what is left is the barriers'.
  launch(barriers);  // warm-up
  const double none_ms = milliseconds_on_op_stream([&] { launch(0); });
  t.barrier_s = 1e-3 * std::max(0.0, milliseconds_on_op_stream([&] { launch(barriers); }) - none_ms) / barriers;

  // The baseline: as many launches of an empty kernel on the same grid, recorded and replayed,
  // so that each boundary is a graph's, as in a recorded decode step.
  cudaStream_t capture = nullptr;
  AZR_CUDA_CHECK(cudaStreamCreateWithFlags(&capture, cudaStreamNonBlocking));
  AZR_CUDA_CHECK(cudaStreamBeginCapture(capture, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < barriers; i++) empty_kernel<<<unsigned(t.blocks), kBlockThreads, 0, capture>>>();
  cudaGraph_t graph = nullptr;
  AZR_CUDA_CHECK(cudaGetLastError());
  AZR_CUDA_CHECK(cudaStreamEndCapture(capture, &graph));
  cudaGraphExec_t exec = nullptr;
  AZR_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  AZR_CUDA_CHECK(cudaGraphLaunch(exec, stream));  // warm-up (the first replay uploads the graph)
  t.launch_s = 1e-3 * milliseconds_on_op_stream([&] { AZR_CUDA_CHECK(cudaGraphLaunch(exec, stream)); }) / barriers;
  AZR_CUDA_CHECK(cudaGraphExecDestroy(exec));
  AZR_CUDA_CHECK(cudaGraphDestroy(graph));
  AZR_CUDA_CHECK(cudaStreamDestroy(capture));
  return t;
}

}  // namespace azr::kernels::cuda_detail
