// The CUDA op table, device queries and device memory (kernels/cuda/cuda_ops.h).
#include "kernels/cuda/cuda_ops.h"

#include <cuda_profiler_api.h>

#include <cstdio>
#include <cstring>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/internal.h"

namespace azr::kernels {
namespace {

using namespace cuda_detail;

void* alloc_zeroed(size_t bytes) {
  void* p = device_malloc(std::max<size_t>(bytes, 1));
  AZR_CUDA_CHECK(cudaMemset(p, 0, std::max<size_t>(bytes, 1)));
  return p;
}
void release(void* p) {
  (void)device_free(p);  // no throw: called from destructors
}
// Small uploads are staged in pinned memory and copied asynchronously on the op stream (small
// downloads use the same slots, below). Every decode step uploads its tokens, slots and positions,
// and generation the sampler's uniforms, and a synchronous copy from pageable memory first waits
// for the device to finish what it has queued (the recorded step) and then stages the bytes: the
// device idled while the host caught up, a few microseconds a copy, where a batch-1 step is about a
// millisecond. Queued instead, the uniforms' copy and the sampler's kernels follow the step on the
// device with no gap. Every op that reads the destination runs on the op stream, after the copy,
// and a download waits for the stream. The host bytes are copied into a slot before upload returns,
// so the caller may reuse them at once; a slot is reused after its copy has run (its event). Larger
// uploads (weights, prompts) keep the synchronous copy, as does the CPU's memcpy.
constexpr size_t kStagedUploadBytes = size_t(64) << 10;
constexpr int kStagingSlots = 16;

// One a device, with its own lock: a copy may wait for its device (a burst of uploads, or a
// download), and a thread driving another device must not wait with it (data-parallel training:
// each device's all-reduce waits for the others' threads to queue theirs).
struct UploadStaging {
  std::mutex mutex;
  char* host = nullptr;  // kStagingSlots slots of kStagedUploadBytes, pinned
  cudaEvent_t done[kStagingSlots] = {};
  int next = 0;
  // A started download whose bytes are still in their slot (download_start): where they go, and
  // its ticket's number. Delivered by download_wait or, at the latest, before the slot is reused.
  struct Pending {
    void* host = nullptr;
    size_t bytes = 0;
    uint64_t number = 0;
  } pending[kStagingSlots];
  uint64_t downloads_started = 0;
};

// The current device's staging, made at its first small upload; kept for the process.
UploadStaging& upload_staging() {
  static std::mutex mutex;
  static UploadStaging* staging[64] = {};
  int device = 0;
  AZR_CUDA_CHECK(cudaGetDevice(&device));
  if (device >= 64) throw std::runtime_error("upload: device index " + std::to_string(device) + " past 63");
  const std::lock_guard<std::mutex> lock(mutex);
  if (!staging[device]) {
    auto* s = new UploadStaging;
    AZR_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&s->host), kStagingSlots * kStagedUploadBytes,
                                 cudaHostAllocDefault));
    for (cudaEvent_t& e : s->done) AZR_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    staging[device] = s;
  }
  return *staging[device];
}

// A recording must not upload or download (kernels/ops.h, OpRecorder): the synchronous copies
// fail inside a capture, and a staged one would be recorded with the slot's bytes of the moment.
void check_not_recording(const char* what) {
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  AZR_CUDA_CHECK(cudaStreamIsCapturing(op_stream(), &capturing));
  if (capturing != cudaStreamCaptureStatusNone)
    throw std::runtime_error(std::string(what) + ": the op stream is being recorded, and a recording must not " + what);
}

// With the slot's lock held: a started download's bytes in `slot` go to their host memory, once the
// copy into the slot has run. Taken from the slot first: where the wait throws, the download is
// dropped, not delivered by the slot's next use into host memory its owner has freed since.
void deliver_pending(UploadStaging& s, int slot) {
  const UploadStaging::Pending p = std::exchange(s.pending[slot], UploadStaging::Pending{});
  if (!p.host) return;
  AZR_CUDA_CHECK(cudaEventSynchronize(s.done[slot]));
  std::memcpy(p.host, s.host + size_t(slot) * kStagedUploadBytes, p.bytes);
}

// Queues a copy of at most kStagedUploadBytes through the current device's next slot, once the
// slot's last copy has run (at once, but in a burst) and any download left in it has been
// delivered: host to device (upload, the bytes staged first), or device to host into the slot
// (download and download_start, which deliver it). Returns the slot.
int queue_staged_copy(UploadStaging& s, void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  const int slot = s.next;
  s.next = (slot + 1) % kStagingSlots;
  deliver_pending(s, slot);
  AZR_CUDA_CHECK(cudaEventSynchronize(s.done[slot]));
  char* staged = s.host + size_t(slot) * kStagedUploadBytes;
  const bool up = kind == cudaMemcpyHostToDevice;
  if (up) std::memcpy(staged, src, bytes);
  AZR_CUDA_CHECK(cudaMemcpyAsync(up ? dst : staged, up ? staged : src, bytes, kind, op_stream()));
  AZR_CUDA_CHECK(cudaEventRecord(s.done[slot], op_stream()));
  return slot;
}

// Host to device queued on the op stream (upload); device to host queued, then waited for, where
// a copy to pageable memory is staged by the driver on top of the wait (download: a step's sampled
// tokens and log-probs, before generation started them ahead).
void staged_copy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, const char* what) {
  check_not_recording(what);
  UploadStaging& s = upload_staging();
  const std::lock_guard<std::mutex> lock(s.mutex);
  const int slot = queue_staged_copy(s, dst, src, bytes, kind);
  if (kind == cudaMemcpyHostToDevice) return;
  s.pending[slot] = {dst, bytes, 0};
  deliver_pending(s, slot);
}

void upload(void* dst, const void* host, size_t bytes) {
  if (bytes > kStagedUploadBytes)
    AZR_CUDA_CHECK(cudaMemcpy(dst, host, bytes, cudaMemcpyHostToDevice));
  else if (bytes)
    staged_copy(dst, host, bytes, cudaMemcpyHostToDevice, "upload");
}
void download(void* host, const void* src, size_t bytes) {
  if (bytes > kStagedUploadBytes)
    AZR_CUDA_CHECK(cudaMemcpy(host, src, bytes, cudaMemcpyDeviceToHost));
  else if (bytes)
    staged_copy(host, src, bytes, cudaMemcpyDeviceToHost, "download");
}
// A ticket is (number << 8) | slot, numbers counting from 1; 0 is a download already done (empty,
// or too large for a slot and copied synchronously). Waiting on a ticket whose slot has since been
// reused finds another number there: its bytes were delivered then. A ticket is its device's (the
// staging of the device current at download_start): wait with that device current, as generation,
// on one device throughout, does.
static_assert(kStagingSlots <= 256, "a ticket keeps its slot in 8 bits");
int64_t download_start(void* host, const void* src, size_t bytes) {
  if (bytes == 0) return 0;
  if (bytes > kStagedUploadBytes) {
    AZR_CUDA_CHECK(cudaMemcpy(host, src, bytes, cudaMemcpyDeviceToHost));
    return 0;
  }
  check_not_recording("download");
  UploadStaging& s = upload_staging();
  const std::lock_guard<std::mutex> lock(s.mutex);
  const int slot = queue_staged_copy(s, host, src, bytes, cudaMemcpyDeviceToHost);
  const uint64_t number = ++s.downloads_started;
  s.pending[slot] = {host, bytes, number};
  return int64_t(number << 8 | uint64_t(slot));
}
void download_wait(int64_t ticket) {
  if (ticket == 0) return;
  UploadStaging& s = upload_staging();
  const std::lock_guard<std::mutex> lock(s.mutex);
  const int slot = int(ticket & 0xff);
  if (slot < kStagingSlots && s.pending[slot].number == uint64_t(ticket) >> 8) deliver_pending(s, slot);
}
void copy(void* dst, const void* src, size_t bytes) {
  if (bytes) AZR_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, op_stream()));
}
void fill_zero(float* x, int64_t n) {
  if (n > 0) AZR_CUDA_CHECK(cudaMemsetAsync(x, 0, sizeof(float) * size_t(n), op_stream()));
}

const Ops kCudaOps = {
    "cuda",
    /*host_memory=*/false,
    alloc_zeroed,
    release,
    upload,
    download,
    download_start,
    download_wait,
    copy,
    fill_zero,
    gather_rows,
    scatter_add_rows,
    embedding_forward,
    embedding_backward,
    rmsnorm_forward,
    rmsnorm_backward,
    matmul_forward,
    matmul_backward,
    rope_forward,
    rope_backward,
    attention_forward,
    attention_backward,
    attention_decode,
    kv_store,
    swiglu_forward,
    swiglu_backward,
    add,
    token_stats,
    token_stats_backward,
    sample_rows,
    sum_squares,
    scale,
    adamw,
    /*to_bf16=*/nullptr,
    /*matmul_forward_w16=*/nullptr,
    /*matmul_backward_w16=*/nullptr,
    /*kv_store_w16=*/nullptr,
    /*attention_decode_w16=*/nullptr,
    /*rmsnorm_forward_w16=*/nullptr,
    /*matmul_forward_a16w16=*/nullptr,
    /*matmul_backward_a16w16=*/nullptr,
    /*matmul_forward_o16=*/nullptr,
    /*residual_rmsnorm_forward_w16=*/nullptr,
    /*swiglu_forward_w16=*/nullptr,
    /*decode_qkv_w16=*/nullptr,
    /*gate_up_swiglu_w16=*/nullptr,
    /*rope_kv_store_w16=*/nullptr,
    /*swiglu_rows_w16=*/nullptr,
    /*decode_linear_w16=*/nullptr,
    /*decode_layers_w16=*/nullptr,
    /*swiglu_backward_w16=*/nullptr,
    /*matmul_backward_g16=*/nullptr,
    /*matmul_backward_g16_dinp16=*/nullptr,
    /*adamw_w16=*/nullptr,
    /*rmsnorm_backward_w16=*/nullptr,
    /*token_stats_backward_w16=*/nullptr,
    /*rope_round_qkv_w16=*/nullptr,
    /*attention_forward_w16=*/nullptr,
    /*attention_backward_w16=*/nullptr,
    /*rope_backward_round_w16=*/nullptr,
    /*swiglu_rows_backward_w16=*/nullptr,
    /*recorder=*/{graph_begin, graph_end, graph_abandon, graph_replay, graph_release, graph_scratch_generation},
};

}  // namespace

const Ops& cuda_ops() { return kCudaOps; }

const Ops& cuda_bf16_matmul_ops() {
  static const Ops table = [] {
    Ops t = kCudaOps;
    t.name = "cuda+bf16";
    t.matmul_forward = matmul_forward_bf16;
    t.matmul_backward = matmul_backward_bf16;
    t.to_bf16 = to_bf16;
    t.matmul_forward_w16 = matmul_forward_w16;
    t.matmul_backward_w16 = matmul_backward_w16;
    t.attention_forward = attention_forward_bf16;
    t.attention_backward = attention_backward_bf16;
    t.kv_store_w16 = kv_store_w16;
    t.attention_decode_w16 = attention_decode_w16;
    t.rmsnorm_forward_w16 = rmsnorm_forward_w16;
    t.matmul_forward_a16w16 = matmul_forward_a16w16;
    t.matmul_backward_a16w16 = matmul_backward_a16w16;
    t.matmul_forward_o16 = matmul_forward_o16;
    t.residual_rmsnorm_forward_w16 = residual_rmsnorm_forward_w16;
    t.swiglu_forward_w16 = swiglu_forward_w16;
    t.decode_qkv_w16 = decode_qkv_w16;
    t.gate_up_swiglu_w16 = gate_up_swiglu_w16;
    t.rope_kv_store_w16 = rope_kv_store_w16;
    t.swiglu_rows_w16 = swiglu_rows_w16;
    t.decode_linear_w16 = gemv_linear;
    t.decode_layers_w16 = decode_layers_w16;
    t.swiglu_backward_w16 = swiglu_backward_w16;
    t.matmul_backward_g16 = matmul_backward_g16;
    t.matmul_backward_g16_dinp16 = matmul_backward_g16_dinp16;
    t.adamw_w16 = adamw_w16;
    t.rmsnorm_backward_w16 = rmsnorm_backward_w16;
    t.token_stats_backward_w16 = token_stats_backward_w16;
    t.rope_round_qkv_w16 = rope_round_qkv_w16;
    t.attention_forward_w16 = attention_forward_w16;
    t.attention_backward_w16 = attention_backward_w16;
    t.rope_backward_round_w16 = rope_backward_round_w16;
    t.swiglu_rows_backward_w16 = swiglu_rows_backward_w16;
    return t;
  }();
  return table;
}

int cuda_device_count(std::string* why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    if (why) *why = std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
    cudaGetLastError();  // clear the sticky-free error so later calls start clean
    return 0;
  }
  if (n == 0 && why) *why = "no CUDA device";
  return n;
}

void cuda_select_device(int index) { AZR_CUDA_CHECK(cudaSetDevice(index)); }

double cuda_peak_bandwidth(int index) {
  // Double data rate: two transfers per memory clock, bus width in bits.
  const double clock_hz = double(device_attribute(cudaDevAttrMemoryClockRate, index)) * 1e3;
  const double bus_bytes = double(device_attribute(cudaDevAttrGlobalMemoryBusWidth, index)) / 8.0;
  return 2.0 * clock_hz * bus_bytes;
}

std::string cuda_device_description(int index) {
  cudaDeviceProp p{};
  AZR_CUDA_CHECK(cudaGetDeviceProperties(&p, index));
  char buf[256];
  std::snprintf(buf, sizeof buf, "%s (sm_%d%d, %.1f GiB, %.0f GB/s)", p.name, p.major, p.minor,
                double(p.totalGlobalMem) / double(1ull << 30), cuda_peak_bandwidth(index) / 1e9);
  return buf;
}

double cuda_total_memory(int index) {
  cudaDeviceProp p{};
  AZR_CUDA_CHECK(cudaGetDeviceProperties(&p, index));
  return double(p.totalGlobalMem);
}

std::string cuda_compiled_architectures() {
#ifdef __CUDA_ARCH_LIST__
#define AZR_STRINGIFY_LIST(...) #__VA_ARGS__
#define AZR_STRINGIFY_EXPANDED(x) AZR_STRINGIFY_LIST(x)
  std::stringstream in(AZR_STRINGIFY_EXPANDED(__CUDA_ARCH_LIST__));  // "800,900"
  std::string item, out;
  while (std::getline(in, item, ',')) {
    const int arch = std::stoi(item);
    out += (out.empty() ? "sm_" : " sm_") + std::to_string(arch / 10);
  }
  return out;
#else
  return "unknown";
#endif
}

void* cuda_op_stream() { return static_cast<void*>(op_stream()); }

void cuda_synchronize() { AZR_CUDA_CHECK(cudaDeviceSynchronize()); }

void cuda_profiler_range(bool on) {
  AZR_CUDA_CHECK(cudaDeviceSynchronize());  // the range holds whole kernels: what ran before stays out
  if (on)
    AZR_CUDA_CHECK(cudaProfilerStart());
  else
    AZR_CUDA_CHECK(cudaProfilerStop());
}

size_t cuda_memory_in_use() { return device_memory_meter().in_use(); }
size_t cuda_memory_peak() { return device_memory_meter().peak(); }
void cuda_reset_memory_peak() { device_memory_meter().reset_peak(); }

}  // namespace azr::kernels
