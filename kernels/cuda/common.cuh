#pragma once
// Helpers shared by the CUDA kernels: grid sizes, device scratch, the checked launch; the warp and
// block reductions are in reductions.cuh.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <utility>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_or_emulation.cuh"
#include "kernels/memory_meter.h"
#include "kernels/cuda/reductions.cuh"

namespace azr::kernels::cuda_detail {

// One attribute of a device (cudaDeviceGetAttribute, checked).
inline int device_attribute(cudaDeviceAttr a, int device) {
  int v = 0;
  AZR_CUDA_CHECK(cudaDeviceGetAttribute(&v, a, device));
  return v;
}

// One attribute of the current device, queried once per device and attribute (a query is a driver
// call, and launches ask on every call) by each thread: ops run from several threads, one a
// device, and a cache of each thread's own needs no lock on a launch's path.
inline int current_device_attribute(cudaDeviceAttr a) {
  thread_local std::map<std::pair<int, int>, int> known;
  int device = 0;
  AZR_CUDA_CHECK(cudaGetDevice(&device));
  const auto key = std::make_pair(device, int(a));
  auto it = known.find(key);
  if (it == known.end()) it = known.emplace(key, device_attribute(a, device)).first;
  return it->second;
}

// The current device's multiprocessor count, which launches size their grids by.
inline int multiprocessors() { return current_device_attribute(cudaDevAttrMultiProcessorCount); }

// The stream every op runs on, one per device, created on first use. A stream of its own rather
// than the legacy default stream, because only such a stream can be recorded into a CUDA graph
// (graphs.cu); a blocking one (cudaStreamDefault), so the table's synchronous upload, download and
// allocation, which run on the legacy stream, still wait for the ops queued before them and the
// ops after them wait for those: outside a recording, the order is the one stream's of before.
inline cudaStream_t op_stream() {
  static cudaStream_t streams[64] = {};
  int device = 0;
  AZR_CUDA_CHECK(cudaGetDevice(&device));
  if (device >= 64) return cudaStreamLegacy;
  if (!streams[device]) AZR_CUDA_CHECK(cudaStreamCreateWithFlags(&streams[device], cudaStreamDefault));
  return streams[device];
}

// Counts every reallocation of an op's scratch (DeviceScratch below), and every switch that changes
// what a recorded decode step would launch (the decode kernel, merge, layer and launch choices). A
// recorded graph holds its ops' scratch pointers and kernels, so one recorded before would use freed
// memory or the old kernel: the model records anew when this has changed (kernels/ops.h,
// Ops::scratch_generation).
inline uint64_t& scratch_generation() {
  static uint64_t generation = 0;
  return generation;
}

// Every device allocation azr makes goes through these two, so that the meter (cuda_ops.h,
// cuda_memory_meter) sees the process's peak; the devices of the process share one meter.
inline MemoryMeter& device_memory_meter() {
  // Never destroyed: a static buffer released at exit may outlive any static meter.
  static MemoryMeter* meter = new MemoryMeter;
  return *meter;
}
inline void* device_malloc(size_t bytes) {
  void* p = nullptr;
  AZR_CUDA_CHECK(cudaMalloc(&p, bytes));
  device_memory_meter().allocated(p, bytes);
  return p;
}
// Returns cudaFree's error rather than throwing: release() runs in destructors.
inline cudaError_t device_free(void* p) {
  if (!p) return cudaSuccess;
  device_memory_meter().released(p);
  return cudaFree(p);
}

// Whether launch_after_prior launches with programmatic dependent launch now: chosen
// (cuda_set_programmatic_launch, AZR_CUDA_PDL; kernels/cuda/cuda_ops.h), and both the current
// device and the code compiled for it are sm_90 or later (programmatic_launch.cu).
bool programmatic_launch_applies();

// Set by a launch that no programmatic launch may follow, and cleared by the next
// launch_after_prior, which then launches the ordinary way: the persistent decode kernel
// (decode_layers.cu), a cooperative launch, after which a programmatic edge in a recorded graph
// has not been tried on a GPU. What it costs: the one kernel after it (the final norm) starts
// after a launch gap, a few microseconds a step. And the kernels that write weights (AdamW, the
// bf16 copy's rounding), which the kernels launched programmatically may read before their wait
// (device_or_emulation.cuh): once after each update, not in a decode step. One flag a thread:
// each drives its own device.
inline bool& next_launch_ordinary() {
  thread_local bool ordinary = false;
  return ordinary;
}

// kernel<<<grid, block, smem, op_stream()>>>(args...), or, where programmatic_launch_applies(),
// the same launch allowed to start before the kernel ahead of it on the stream has finished
// (cudaLaunchAttributeProgrammaticStreamSerialization; also in a recorded graph). Only for kernels
// that call wait_for_prior_grids before they read what an earlier kernel wrote or write anything
// (device_or_emulation.cuh): the decode step's kernels at few rows, whose weights then stream in
// while the kernel before finishes, instead of after a launch gap.
template <class... Params, class... Args>
void launch_after_prior(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, Args... args) {
  if (!programmatic_launch_applies() || std::exchange(next_launch_ordinary(), false)) {
    kernel<<<grid, block, smem, op_stream()>>>(args...);
    AZR_CUDA_CHECK(cudaGetLastError());
    return;
  }
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = op_stream();
  config.attrs = &attribute;
  config.numAttrs = 1;
  AZR_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, args...));
}

// A timing's two events, destroyed on every way out (a failed check throws).
struct TimingEvents {
  cudaEvent_t start = nullptr, stop = nullptr;
  TimingEvents() {
    AZR_CUDA_CHECK(cudaEventCreate(&start));
    AZR_CUDA_CHECK(cudaEventCreate(&stop));
  }
  ~TimingEvents() {
    if (stop) cudaEventDestroy(stop);
    if (start) cudaEventDestroy(start);
  }
  TimingEvents(const TimingEvents&) = delete;
  TimingEvents& operator=(const TimingEvents&) = delete;
};

// Milliseconds on op_stream() between events recorded around what `enqueue` queues there, waited
// for: the benches' timings of the library's own work (matmul.cu's algorithms, grid barriers).
template <class Enqueue>
double milliseconds_on_op_stream(Enqueue&& enqueue) {
  const TimingEvents events;
  AZR_CUDA_CHECK(cudaEventRecord(events.start, op_stream()));
  enqueue();
  AZR_CUDA_CHECK(cudaEventRecord(events.stop, op_stream()));
  AZR_CUDA_CHECK(cudaEventSynchronize(events.stop));
  float elapsed = 0.f;
  AZR_CUDA_CHECK(cudaEventElapsedTime(&elapsed, events.start, events.stop));
  return double(elapsed);
}

// Blocks for a grid-stride loop over n elements: enough to fill the device, no more than needed.
inline unsigned grid_for(int64_t n, int threads = 256) {
  const int64_t blocks = (n + threads - 1) / threads;
  return unsigned(std::clamp<int64_t>(blocks, 1, 65535 * 8));
}

// A grow-only device buffer for an op's scratch (attention backward's row dots, the bf16 table's
// rounded operands). Never freed: it lives as long as the process, and freeing device memory in a
// static destructor would run after the CUDA runtime has torn the context down.
template <class T = float>
class DeviceScratch {
 public:
  T* get(size_t n) {
    if (n > capacity_) {
      // cudaFree waits for the device: the ops queued before, which used the old buffer, finish first
      if (ptr_) AZR_CUDA_CHECK(device_free(ptr_));
      ptr_ = nullptr;
      capacity_ = 0;
      ptr_ = static_cast<T*>(device_malloc(n * sizeof(T)));
      capacity_ = n;
      scratch_generation()++;
    }
    return ptr_;
  }
  size_t bytes() const { return capacity_ * sizeof(T); }  // what it holds now

 private:
  T* ptr_ = nullptr;
  size_t capacity_ = 0;
};

// Scratch that is zero before every launch because its kernels leave it so: the counts of
// last_block_done (reductions.cuh), one per merged item (a sampled row, a decode row and head
// chunk), which each item's last block sets back; the filtered sampler's bins and list counts,
// which their last reader zeroes. Only a grown buffer is cleared, once. Grows in an eager call,
// never inside a recording.
template <class T>
class ZeroedScratch {
 public:
  T* get(size_t n) {
    T* p = scratch_.get(n);
    if (n > zeroed_) {
      AZR_CUDA_CHECK(cudaMemsetAsync(p, 0, n * sizeof(T), op_stream()));
      zeroed_ = n;
    }
    return p;
  }
  size_t bytes() const { return scratch_.bytes(); }

 private:
  DeviceScratch<T> scratch_;
  size_t zeroed_ = 0;
};
using ZeroedCounts = ZeroedScratch<unsigned>;

}  // namespace azr::kernels::cuda_detail

// Checks a launch's configuration at once; errors inside the kernel surface at the next sync.
#define AZR_CUDA_LAUNCHED() AZR_CUDA_CHECK(cudaGetLastError())
