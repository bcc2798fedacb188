// The table's decode_layers_w16 (kernels/ops.h): a decode step's layers at one row, as one
// persistent kernel (decode_layers.cuh, which says why) where it is chosen and applies, else as
// the five launches a layer of kernels/decode_layers.h.
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <map>
#include <mutex>
#include <stdexcept>
#include <tuple>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/decode_layers.cuh"
#include "kernels/cuda/internal.h"
#include "kernels/cuda_launch_choice.h"
#include "kernels/decode_layers.h"

namespace azr::kernels {
namespace cuda_detail {
namespace {

bool& persistent_choice() {
  static bool choice = [] {
    const char* e = std::getenv("AZR_CUDA_DECODE_LAYERS");
    return parse_cuda_decode_layers(e ? e : "");
  }();
  return choice;
}

DecodeLayersTuning& tuning() {
  static DecodeLayersTuning t;
  return t;
}
static_assert(DecodeLayersTuning{}.prefetch_bytes_per_block == decode_layers::kPrefetchBytesPerBlock &&
                  DecodeLayersTuning{}.gate_up_slices_at_attention == decode_layers::kGateUpSlicesAtAttention &&
                  DecodeLayersTuning{}.down_slices_at_gate_up == decode_layers::kDownSlicesAtGateUp,
              "cuda_ops.h's defaults are the kernel's");

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Whether the current device launches cooperative grids: asked once a device, as every eager
// decode step at one row asks.
bool cooperative_launches() { return current_device_attribute(cudaDevAttrCooperativeLaunch) != 0; }

// Where the kernel applies: a head dim of the tile attention, 16-byte loads in every product of
// every layer (the kernel has no scalar variant: rows of whole 16-byte packs, each layer's weights
// 16-byte aligned), the normalized row within a block's shared memory, and a device that launches
// cooperative grids.
bool persistent_applies(const DecodeLayers& a) {
  if (a.d != 32 && a.d != 64 && a.d != 128) return false;
  if (a.H % 8 != 0 || a.heads * a.d % 8 != 0 || a.I % 8 != 0 || a.param_stride % 8 != 0) return false;
  if (a.H > kDecodeNormedMaxElements) return false;
  for (const void* p : {static_cast<const void*>(a.wq), static_cast<const void*>(a.wk),
                        static_cast<const void*>(a.wv), static_cast<const void*>(a.wo),
                        static_cast<const void*>(a.wg), static_cast<const void*>(a.wu),
                        static_cast<const void*>(a.wd), static_cast<const void*>(a.att16),
                        static_cast<const void*>(a.mlp16)})
    if (!aligned16(p)) return false;
  return cooperative_launches();
}

std::atomic<uint64_t> g_persistent_launches{0};

// grid_barrier's word: zero before the first launch, and each launch leaves its count at zero
// (its top bit flipped once a barrier).
unsigned* barrier_word() {
  static ZeroedCounts word;
  return word.get(1);
}

// The kernel's blocks per multiprocessor at `smem` bytes, and its opt-in past 48 KiB: queried once
// per (kernel, device, size), in the eager steps that come before a recording (model/decode_graphs.h).
template <class Kernel>
int resident_blocks(Kernel kernel, size_t smem) {
  static std::mutex mutex;
  static std::map<std::tuple<const void*, int, size_t>, int> known;
  int device = 0;
  AZR_CUDA_CHECK(cudaGetDevice(&device));
  const std::lock_guard<std::mutex> lock(mutex);
  const auto key = std::make_tuple(reinterpret_cast<const void*>(kernel), device, smem);
  auto it = known.find(key);
  if (it != known.end()) return it->second;
  if (smem > 48 * 1024)
    AZR_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  int per_sm = 0;
  AZR_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, decode_layers::kThreads, smem));
  if (per_sm < 1) throw std::runtime_error("decode_layers_w16: the persistent kernel does not fit a multiprocessor");
  known[key] = per_sm;
  return per_sm;
}

template <int D>
void launch_persistent(const DecodeLayers& a) {
  const AttentionShape shape{0, 0, a.heads, a.kv_heads, a.d, a.slot_stride, nullptr};
  const DecodeSplit split = decode_split(1, shape, /*tiles=*/true);
  const decode_layers::Plan plan =
      decode_layers::plan_for(a, split.head_chunks, split.splits, split.chunk, tuning().prefetch_bytes_per_block,
                              tuning().gate_up_slices_at_attention, tuning().down_slices_at_gate_up);
  float* part = split.splits > 1 ? decode_partials(size_t(a.heads * split.splits * (a.d + 2))) : nullptr;
  unsigned* counts = split.splits > 1 ? decode_merge_counts(size_t(a.kv_heads * split.head_chunks)) : nullptr;
  const size_t smem = decode_layers::smem_bytes<D>(a);
  auto* kernel = decode_layers::decode_layers_kernel<D>;
  int per_sm = resident_blocks(kernel, smem);
  if (tuning().blocks_per_multiprocessor > 0) per_sm = std::min(per_sm, tuning().blocks_per_multiprocessor);
  const int64_t blocks = std::min<int64_t>(int64_t(per_sm) * multiprocessors(), decode_layers::most_turns(plan));
  // Cooperative: the launch fails, rather than start, if the grid cannot be resident all at once.
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeCooperative;
  attribute.val.cooperative = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(unsigned(blocks));
  config.blockDim = dim3(decode_layers::kThreads);
  config.dynamicSmemBytes = smem;
  config.stream = op_stream();
  config.attrs = &attribute;
  config.numAttrs = 1;
  AZR_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, a, plan, part, counts, barrier_word()));
  next_launch_ordinary() = true;  // no programmatic edge out of a cooperative node (common.cuh)
  g_persistent_launches++;
}

}  // namespace

void decode_layers_w16(const DecodeLayers& a) {
  if (a.layers == 0) return;
  if (!persistent_choice() || !persistent_applies(a)) {
    // The five launches a layer; where the tuning asks, the o projection's launch asks L2 for the
    // start of gate's and up's weights (DecodeLayersTuning::gate_up_ahead_bytes), whole 16-byte
    // units of 16-byte aligned matrices, at most each matrix's bytes.
    const int64_t ahead = std::min(tuning().gate_up_ahead_bytes, a.I * a.H * int64_t(sizeof(uint16_t))) / 16 * 16;
    if (ahead <= 0 || !aligned16(a.wg) || !aligned16(a.wu) || a.param_stride % 8 != 0) {
      decode_layers_as_ops(cuda_bf16_matmul_ops(), a);
      return;
    }
    decode_layers_as_ops(cuda_bf16_matmul_ops(), a,
                         [&](int64_t l, float* out, const DecodeInput& in, const uint16_t* w16, const float* bias,
                             const float* residual, int64_t R, int64_t IC, int64_t OC) {
                           const DecodeAhead gate_up{decode_layer_at(a.wg, l, a.param_stride),
                                                     decode_layer_at(a.wu, l, a.param_stride), ahead};
                           gemv_linear_ahead(out, in, w16, bias, residual, R, IC, OC, gate_up);
                         });
    return;
  }
  if (a.d == 32)
    launch_persistent<32>(a);
  else if (a.d == 64)
    launch_persistent<64>(a);
  else
    launch_persistent<128>(a);
}

}  // namespace cuda_detail

void cuda_set_decode_layers_persistent(bool on) {
  if (cuda_detail::persistent_choice() == on) return;
  cuda_detail::persistent_choice() = on;
  cuda_detail::scratch_generation()++;  // recorded decode steps are made anew with the new kernels
}

bool cuda_decode_layers_persistent() { return cuda_detail::persistent_choice(); }

void cuda_set_decode_layers_tuning(DecodeLayersTuning t) {
  check_decode_layers_tuning(t.prefetch_bytes_per_block, t.blocks_per_multiprocessor, t.gate_up_slices_at_attention,
                             t.down_slices_at_gate_up, t.gate_up_ahead_bytes);
  DecodeLayersTuning& now = cuda_detail::tuning();
  if (now.prefetch_bytes_per_block == t.prefetch_bytes_per_block &&
      now.blocks_per_multiprocessor == t.blocks_per_multiprocessor &&
      now.gate_up_slices_at_attention == t.gate_up_slices_at_attention &&
      now.down_slices_at_gate_up == t.down_slices_at_gate_up && now.gate_up_ahead_bytes == t.gate_up_ahead_bytes &&
      now.hold_first_weights == t.hold_first_weights && now.one_wave == t.one_wave)
    return;
  now = t;
  cuda_detail::scratch_generation()++;  // recorded decode steps are made anew with the new grid
}

DecodeLayersTuning cuda_decode_layers_tuning() { return cuda_detail::tuning(); }

uint64_t cuda_decode_layers_persistent_launches() { return cuda_detail::g_persistent_launches.load(); }

}  // namespace azr::kernels
