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
};

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
