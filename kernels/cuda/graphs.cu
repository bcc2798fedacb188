// Ops::recorder for the CUDA tables (kernels/ops.h, OpRecorder): CUDA graphs of the op stream.
// Recording is stream capture of op_stream() (common.cuh), where every op enqueues its kernels,
// cuBLASLt products and memsets; a replay is one cudaGraphLaunch on the same stream.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/internal.h"

namespace azr::kernels::cuda_detail {

void graph_begin() {
  // Global mode: a call anywhere in the process that a recording cannot hold (a synchronous copy,
  // an allocation, a free) fails at once, instead of running outside the graph it was meant for.
  AZR_CUDA_CHECK(cudaStreamBeginCapture(op_stream(), cudaStreamCaptureModeGlobal));
}

OpGraph* graph_end() {
  cudaGraph_t graph = nullptr;
  AZR_CUDA_CHECK(cudaStreamEndCapture(op_stream(), &graph));
  cudaGraphExec_t exec = nullptr;
  const cudaError_t instantiated = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);  // the executable graph is a copy
  AZR_CUDA_CHECK(instantiated);
  return reinterpret_cast<OpGraph*>(exec);
}

void graph_abandon() {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(op_stream(), &status) == cudaSuccess && status != cudaStreamCaptureStatusNone) {
    cudaGraph_t graph = nullptr;
    // Fails for a recording an illegal call invalidated; there is nothing to keep either way.
    if (cudaStreamEndCapture(op_stream(), &graph) == cudaSuccess && graph) cudaGraphDestroy(graph);
  }
  cudaGetLastError();  // the recording's error is not a kernel's: clear it for the ops that follow
}

void graph_replay(OpGraph* g) {
  AZR_CUDA_CHECK(cudaGraphLaunch(reinterpret_cast<cudaGraphExec_t>(g), op_stream()));
}

void graph_release(OpGraph* g) {
  if (g) cudaGraphExecDestroy(reinterpret_cast<cudaGraphExec_t>(g));  // no throw: called from destructors
}

uint64_t graph_scratch_generation() { return scratch_generation(); }

}  // namespace azr::kernels::cuda_detail
