#pragma once
// An array in a backend's memory (kernels/ops.h: host memory for the CPU, device memory for
// CUDA), owned: allocated zeroed through the op table, released on destruction. Grow-only
// scratch uses ensure(); nothing is copied when it grows.
#include <cstddef>
#include <span>
#include <utility>
#include <vector>

#include "kernels/ops.h"

namespace azr::kernels {

// Backend memory readable on the host: `dev` itself where the backend's memory is host memory
// (Ops::host_memory), else a copy downloaded into `copy`.
template <class T>
std::span<const T> host_view(const Ops& ops, std::span<const T> dev, std::vector<T>& copy) {
  if (ops.host_memory) return dev;
  copy.resize(dev.size());
  ops.download(copy.data(), dev.data(), dev.size_bytes());
  return copy;
}

template <class T>
class Buffer {
 public:
  explicit Buffer(const Ops& ops) : ops_(&ops) {}
  Buffer(const Ops& ops, size_t n) : ops_(&ops) { assign_zero(n); }
  ~Buffer() { ops_->release(ptr_); }
  Buffer(Buffer&& o) noexcept : ops_(o.ops_), ptr_(std::exchange(o.ptr_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  Buffer& operator=(Buffer&& o) noexcept {
    if (this != &o) {
      ops_->release(ptr_);
      ops_ = o.ops_, ptr_ = std::exchange(o.ptr_, nullptr), n_ = std::exchange(o.n_, 0);
    }
    return *this;
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  // n zeroed elements (a new allocation unless the size is already n; then just zeroed).
  void assign_zero(size_t n) {
    if (n != n_) {
      ops_->release(ptr_);
      ptr_ = nullptr, n_ = 0;
      ptr_ = static_cast<T*>(ops_->alloc_zeroed(n * sizeof(T)));
      n_ = n;
    } else if (n > 0) {
      ops_->fill_zero(reinterpret_cast<float*>(ptr_), int64_t(n * sizeof(T) / sizeof(float)));
    }
  }
  // At least n elements; contents unspecified after growth.
  void ensure(size_t n) {
    if (n > n_) assign_zero(n);
  }
  void upload(const T* host, size_t n, size_t offset = 0) { ops_->upload(ptr_ + offset, host, n * sizeof(T)); }
  void download(T* host, size_t n, size_t offset = 0) const { ops_->download(host, ptr_ + offset, n * sizeof(T)); }

  T* data() { return ptr_; }
  const T* data() const { return ptr_; }
  size_t size() const { return n_; }
  std::span<T> span() { return {ptr_, n_}; }
  std::span<const T> span() const { return {ptr_, n_}; }
  const Ops& ops() const { return *ops_; }

 private:
  const Ops* ops_;
  T* ptr_ = nullptr;
  size_t n_ = 0;
};

}  // namespace azr::kernels
