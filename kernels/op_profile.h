#pragma once
// Where a step's time goes, op by op: a table that runs another table's ops and, while an
// OpProfile is alive, times each call and counts it under the op's name.
//
// Each op is timed alone. After every call the profile waits for the backend to finish (a 4-byte
// download, which on a GPU waits for everything queued on the op stream), so an op's time on a
// GPU is its launch plus its run, with nothing overlapping it. Those waits make a profiled run
// slower than a plain one, the more so the smaller the ops: a decode step at batch 1 is hundreds
// of kernels of a few microseconds, where the waits cost about as much as the kernels (Nsight
// Compute measures those better: scripts/gpu_check.sh profile). A training step's ops take
// milliseconds at real sizes, and there the profile is the step's own split. Host code between
// ops, and ops called through any other table, are not counted.
//
// The profiled table shares its base table's memory (the same alloc_zeroed and release), so a
// model, KV cache or buffer made with either works with the other. It has no recorder: a
// recording cannot wait for the backend, so a profiled model decodes eagerly.
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/ops.h"

namespace azr::kernels {

// The table that times `base`'s ops, one per distinct base (at most 8 in a process; more
// throws std::logic_error). Its name is base's with "+profiled" appended.
const Ops& profiled_ops(const Ops& base);

struct OpTime {
  std::string op;  // the Ops field: "matmul_backward_a16w16", "attention_forward", ...
  int64_t calls = 0;
  double seconds = 0;
  // The products' FLOPs of the calls (op_flops below); 0 for the ops that are not products. With
  // seconds, the op's achieved FLOP/s: which products run below the device's peak, and by how much.
  double flops = 0;
};

// FLOPs a call of a product op does, counted as a model counts them (2 per multiply-add, nothing
// recomputed or padded away), from its arguments:
// - the GEMMs (matmul_forward and its _w16, _a16w16 twins): 2 N IC OC; their backward, 2 N IC OC
//   for each of dinp and dw asked for (the bias gradient is a sum, not counted);
// - attention_forward: q k^T and p v over the causal triangle of every sequence at full length T
//   (the shape's lengths live on the device), 2 products x 2 B heads d T(T+1)/2; its backward
//   has five such products (s again for p, dv, dp, dq, dk), 2.5 times the forward's.
// Every other op (decode's fused products included: they are bound by reading the weights) is 0.
double gemm_flops(int64_t N, int64_t IC, int64_t OC);
double attention_forward_flops(const AttentionShape& s);
double attention_backward_flops(const AttentionShape& s);

// Collects the times of every op called through a profiled table, on any thread, from its
// construction to take(). One at a time in a process: a second throws std::logic_error.
class OpProfile {
 public:
  OpProfile();
  ~OpProfile();
  OpProfile(const OpProfile&) = delete;
  OpProfile& operator=(const OpProfile&) = delete;

  // The ops called since construction or the last take(), the most time first (ties by name),
  // and a fresh start.
  std::vector<OpTime> take();
};

}  // namespace azr::kernels
