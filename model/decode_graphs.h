#pragma once
// A model's recorded decode steps (kernels/ops.h, OpRecorder: CUDA graphs on a GPU), one per row
// count. A decode step at a few rows is hundreds of small launches whose latency outweighs their
// work; its replay is one launch.
//
// A recording holds every pointer and size the step was recorded with: the model's activations,
// weights, RoPE tables and step inputs, the KV cache, the ops' own scratch. The model describes
// those as a Key; when the key changes (a buffer grew, another cache, an op's scratch reallocated)
// every recording is dropped, and each row count records anew once it has run eagerly
// kEagerStepsBeforeRecording times with the new key. The eager steps size every buffer for the row
// count (nothing may allocate while recording) and show that the count recurs: generation's row
// count falls as sequences finish, and a count seen once is not worth a recording.
#include <cstdint>
#include <map>
#include <vector>

#include "kernels/ops.h"

namespace azr::model {

class DecodeGraphs {
 public:
  using Key = std::vector<uint64_t>;
  static constexpr int kEagerStepsBeforeRecording = 2;
  // Recordings kept at most; past it all are dropped (a long generation at a large batch passes
  // through many row counts, and each recording holds device memory).
  static constexpr size_t kMaxRecordings = 64;

  explicit DecodeGraphs(const kernels::Ops& ops) : ops_(&ops) {}
  ~DecodeGraphs() { clear(); }
  DecodeGraphs(DecodeGraphs&& o) noexcept;
  DecodeGraphs& operator=(DecodeGraphs&& o) noexcept;
  DecodeGraphs(const DecodeGraphs&) = delete;
  DecodeGraphs& operator=(const DecodeGraphs&) = delete;

  // Drops every recording and count if `key` is not the one they were made with.
  void use_key(const Key& key);
  // The recording of a step of R rows under the current key, or null.
  kernels::OpGraph* find(int64_t R) const;
  // True when R has run eagerly kEagerStepsBeforeRecording times under the current key.
  bool ready_to_record(int64_t R) const;
  void note_eager_step(int64_t R) { eager_steps_[R]++; }
  void add(int64_t R, kernels::OpGraph* g);  // takes ownership
  void note_replay() { replays_++; }
  void clear();  // drops every recording and count

  // For tests and benchmarks: recordings made and replays run, over the object's life.
  int64_t recordings_made() const { return recordings_made_; }
  int64_t replays() const { return replays_; }

 private:
  void release_recordings();  // the recordings only; the eager-step counts stay

  const kernels::Ops* ops_;
  Key key_;
  std::map<int64_t, kernels::OpGraph*> graphs_;
  std::map<int64_t, int> eager_steps_;
  int64_t recordings_made_ = 0, replays_ = 0;
};

}  // namespace azr::model
