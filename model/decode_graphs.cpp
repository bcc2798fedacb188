#include "model/decode_graphs.h"

#include <utility>

namespace azr::model {

DecodeGraphs::DecodeGraphs(DecodeGraphs&& o) noexcept
    : ops_(o.ops_),
      key_(std::move(o.key_)),
      graphs_(std::exchange(o.graphs_, {})),
      eager_steps_(std::exchange(o.eager_steps_, {})),
      recordings_made_(o.recordings_made_),
      replays_(o.replays_) {}

DecodeGraphs& DecodeGraphs::operator=(DecodeGraphs&& o) noexcept {
  if (this != &o) {
    clear();
    ops_ = o.ops_;
    key_ = std::move(o.key_);
    graphs_ = std::exchange(o.graphs_, {});
    eager_steps_ = std::exchange(o.eager_steps_, {});
    recordings_made_ = o.recordings_made_;
    replays_ = o.replays_;
  }
  return *this;
}

void DecodeGraphs::use_key(const Key& key) {
  if (key == key_) return;
  clear();
  key_ = key;
}

kernels::OpGraph* DecodeGraphs::find(int64_t R) const {
  const auto it = graphs_.find(R);
  return it == graphs_.end() ? nullptr : it->second;
}

bool DecodeGraphs::ready_to_record(int64_t R) const {
  const auto it = eager_steps_.find(R);
  return it != eager_steps_.end() && it->second >= kEagerStepsBeforeRecording;
}

void DecodeGraphs::add(int64_t R, kernels::OpGraph* g) {
  if (graphs_.size() >= kMaxRecordings) release_recordings();
  kernels::OpGraph*& slot = graphs_[R];
  if (slot) ops_->recorder.release(slot);
  slot = g;
  recordings_made_++;
}

void DecodeGraphs::release_recordings() {
  for (auto& [rows, graph] : graphs_) ops_->recorder.release(graph);
  graphs_.clear();
}

void DecodeGraphs::clear() {
  release_recordings();
  eager_steps_.clear();
}

}  // namespace azr::model
