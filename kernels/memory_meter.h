#pragma once
// The bytes a backend's allocations hold now, and the most they held since the last reset_peak():
// the CUDA table's meter counts every cudaMalloc azr makes (the op table's buffers, the ops'
// grow-only scratch, cuBLASLt's workspace), so a run can report its peak device memory beside the
// memory plan (model/memory_plan.h) without nvidia-smi sampling next to it. Not counted: the CUDA
// context, and what libraries allocate on their own (NCCL's buffers).
//
// Thread-safe; releasing a pointer the meter never saw (or a null one) changes nothing.
#include <cstddef>
#include <mutex>
#include <unordered_map>

namespace azr::kernels {

class MemoryMeter {
 public:
  void allocated(const void* p, size_t bytes) {
    if (!p) return;
    std::lock_guard<std::mutex> lock(mutex_);
    auto [it, fresh] = sizes_.try_emplace(p, bytes);
    if (!fresh) {  // an address handed out again without a release we saw: the old entry is stale
      in_use_ -= it->second;
      it->second = bytes;
    }
    in_use_ += bytes;
    if (in_use_ > peak_) peak_ = in_use_;
  }
  void released(const void* p) {
    if (!p) return;
    std::lock_guard<std::mutex> lock(mutex_);
    const auto it = sizes_.find(p);
    if (it == sizes_.end()) return;
    in_use_ -= it->second;
    sizes_.erase(it);
  }
  size_t in_use() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return in_use_;
  }
  size_t peak() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return peak_;
  }
  // The peak starts again from what is held now.
  void reset_peak() {
    std::lock_guard<std::mutex> lock(mutex_);
    peak_ = in_use_;
  }

 private:
  mutable std::mutex mutex_;
  std::unordered_map<const void*, size_t> sizes_;
  size_t in_use_ = 0, peak_ = 0;
};

}  // namespace azr::kernels
