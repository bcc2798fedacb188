// Launches of the few-row kernels (gemv.cuh, which describes them): the shape of the launch (rows
// rounded up to a compiled row count, 16-byte or scalar loads, warps per item) is chosen here. They
// launch after the kernel before them where programmatic dependent launch is on (common.cuh).
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_ops.h"  // cuda_decode_layers_tuning
#include "kernels/cuda/gemv.cuh"
#include "kernels/cuda/internal.h"

namespace azr::kernels::cuda_detail {
namespace {

using namespace gemv;
static_assert(gemv::kMaxRows == kDecodeFusedMaxRows, "the fused decode ops take what the kernels take");

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Calls launch(hold_c), an integral constant: whether the kernel's threads hold their first packs
// of weights before the wait (gemv.cuh, HeldPacks), as DecodeLayersTuning::hold_first_weights asks,
// with 16-byte loads only.
template <class Launch>
void with_hold(bool vec8, Launch&& launch) {
  if (vec8 && cuda_decode_layers_tuning().hold_first_weights)
    launch(std::true_type{});
  else
    launch(std::false_type{});
}

// The input rows allow 16-byte loads: normalized into shared memory (16-byte aligned, kSmemBytes)
// or bf16 rows from a 16-byte boundary, k a multiple of 8 either way.
bool input_vec8(const DecodeInput& in, int64_t k) { return k % 8 == 0 && (in.norm || aligned16(in.x16)); }

void check_input(const char* op, const DecodeInput& in, int64_t R, int64_t k) {
  if (!gemv_applies(R)) throw std::invalid_argument(std::string(op) + ": more rows than kDecodeFusedMaxRows");
  if (in.norm && R * k > kDecodeNormedMaxElements)
    throw std::invalid_argument(std::string(op) + ": " + std::to_string(R * k) +
                                " input elements to normalize, more than kDecodeNormedMaxElements");
}

// A launch after the kernel before it of `blocks` blocks' items, with `turns` appended to the
// kernel's arguments: `single`, one turn a block; or, where DecodeLayersTuning::one_wave asks and
// the device holds fewer of `turns_kernel`'s blocks at once, that kernel as one wave of blocks
// taking turns (gemv.cuh, one_wave; 16-byte loads only: null for the scalar kernels; it holds no
// weights before its wait, which would cost it registers and a block a multiprocessor). Past 48 KiB
// of shared memory (normalized rows of a wide model) with the kernel's opt-in. The attribute and
// the blocks the device holds belong to the kernel in the current device's context; both are found
// once per kernel, device and size (the attribute to the most any launch asked): so not while a
// decode step is recorded (a CUDA graph), since eager steps of the same size come first
// (model/decode_graphs.h), and a recording may not be the place for calls outside its stream.
int current_device() {
  int device = 0;
  AZR_CUDA_CHECK(cudaGetDevice(&device));
  return device;
}

template <class Kernel>
void allow_shared_memory(Kernel kernel, size_t smem) {
  if (smem <= 48 * 1024) return;
  const int device = current_device();
  static std::mutex mutex;
  static std::map<std::pair<const void*, int>, size_t> allowed;
  const std::lock_guard<std::mutex> lock(mutex);
  size_t& most = allowed[{reinterpret_cast<const void*>(kernel), device}];
  if (smem > most) {
    AZR_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    most = smem;
  }
}

// The blocks of `kernel` the device holds at once; 0 (not known) where the op stream is being
// recorded and no eager launch has asked yet, whose launch then takes one turn a block.
template <class Kernel>
int64_t resident_blocks(Kernel kernel, size_t smem) {
  const int device = current_device();
  static std::mutex mutex;
  static std::map<std::tuple<const void*, int, size_t>, int64_t> resident;
  const std::lock_guard<std::mutex> lock(mutex);
  const auto key = std::tuple{reinterpret_cast<const void*>(kernel), device, smem};
  if (const auto at = resident.find(key); at != resident.end()) return at->second;
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  AZR_CUDA_CHECK(cudaStreamIsCapturing(op_stream(), &capturing));
  if (capturing != cudaStreamCaptureStatusNone) return 0;
  int per_multiprocessor = 0;
  AZR_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_multiprocessor, kernel, kThreads, smem));
  return resident[key] = int64_t(per_multiprocessor) * multiprocessors();
}

template <class Kernel, class... Args>
void launch_gemv(Kernel single, Kernel turns_kernel, unsigned blocks, size_t smem, Args... args) {
  if (turns_kernel && cuda_decode_layers_tuning().one_wave) {
    allow_shared_memory(turns_kernel, smem);  // before the count, which depends on it
    const Wave wave = one_wave(blocks, resident_blocks(turns_kernel, smem));
    if (wave.turns > 1) {
      launch_after_prior(turns_kernel, wave.blocks, kThreads, smem, args..., wave.turns);
      return;
    }
  }
  allow_shared_memory(single, smem);
  launch_after_prior(single, blocks, kThreads, smem, args..., 1);
}

}  // namespace

bool gemv_applies(int64_t rows) { return rows >= 1 && rows <= kMaxRows; }

void gemv_linear(float* out, const DecodeInput& in, const uint16_t* w16, const float* bias, const float* residual,
                 int64_t R, int64_t IC, int64_t OC) {
  gemv_linear_ahead(out, in, w16, bias, residual, R, IC, OC, DecodeAhead{});
}

void gemv_linear_ahead(float* out, const DecodeInput& in, const uint16_t* w16, const float* bias,
                       const float* residual, int64_t R, int64_t IC, int64_t OC, const DecodeAhead& ahead) {
  check_input("decode_linear_w16", in, R, IC);
  if (ahead.bytes < 0 || ahead.bytes % 16 != 0 || !aligned16(ahead.first) || !aligned16(ahead.second))
    throw std::invalid_argument("decode_linear_w16: the weights asked for ahead are not whole 16-byte units");
  if (OC == 0) return;
  const bool vec8 = input_vec8(in, IC) && aligned16(w16);
  const int split = split_for(OC, IC);
  dispatch(R, vec8, [&](auto rows_c, auto vec_c) {
    constexpr int kRows = decltype(rows_c)::value, kVec = decltype(vec_c)::value;
    with_hold(vec8, [&](auto hold_c) {
      constexpr bool kHold = decltype(hold_c)::value && kVec == 8;
      launch_gemv(gemv_linear_kernel<kRows, kVec, kHold>,
                  kVec == 8 ? gemv_linear_kernel<kRows, 8, false, true> : nullptr, blocks_for(OC, split),
                  kSmemBytes<1, kRows> + input_smem_bytes(in, R, IC), out, in, w16, bias, residual, int(R), IC, OC,
                  split, ahead);
    });
  });
}

void decode_qkv_w16(const DecodeQkv& a) {
  check_input("decode_qkv_w16", a.in, a.R, a.H);
  const QkvArgs args = qkv_args(a);
  const int64_t items = (a.heads + 2 * a.kv_heads) * (a.d / 2);
  if (items == 0) return;
  const bool vec8 = input_vec8(a.in, a.H) && aligned16(a.wq) && aligned16(a.wk) && aligned16(a.wv);
  const int split = split_for(items, a.H);
  dispatch(a.R, vec8, [&](auto rows_c, auto vec_c) {
    constexpr int kRows = decltype(rows_c)::value, kVec = decltype(vec_c)::value;
    with_hold(vec8, [&](auto hold_c) {
      constexpr bool kHold = decltype(hold_c)::value && kVec == 8;
      launch_gemv(gemv_qkv_kernel<kRows, kVec, kHold>, kVec == 8 ? gemv_qkv_kernel<kRows, 8, false, true> : nullptr,
                  blocks_for(items, split), kSmemBytes<2, kRows> + input_smem_bytes(a.in, a.R, a.H), args, int(a.R),
                  split);
    });
  });
}

void gate_up_swiglu_w16(uint16_t* out16, const DecodeInput& in, const uint16_t* wg, const float* bg,
                        const uint16_t* wu, const float* bu, int64_t R, int64_t IC, int64_t I, bool round_gate_up) {
  check_input("gate_up_swiglu_w16", in, R, IC);
  if (I == 0) return;
  const bool vec8 = input_vec8(in, IC) && aligned16(wg) && aligned16(wu);
  const int split = split_for(I, IC);
  dispatch(R, vec8, [&](auto rows_c, auto vec_c) {
    constexpr int kRows = decltype(rows_c)::value, kVec = decltype(vec_c)::value;
    with_hold(vec8, [&](auto hold_c) {
      constexpr bool kHold = decltype(hold_c)::value && kVec == 8;
      launch_gemv(gemv_gate_up_kernel<kRows, kVec, kHold>,
                  kVec == 8 ? gemv_gate_up_kernel<kRows, 8, false, true> : nullptr, blocks_for(I, split),
                  kSmemBytes<2, kRows> + input_smem_bytes(in, R, IC), reinterpret_cast<__nv_bfloat16*>(out16), in,
                  wg, bg, wu, bu, int(R), IC, I, split, round_gate_up);
    });
  });
}

}  // namespace azr::kernels::cuda_detail
