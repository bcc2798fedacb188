// Launches of the few-row kernels (gemv.cuh, which describes them): the shape of the launch (rows
// rounded up to a compiled row count, 16-byte or scalar loads, warps per item) is chosen here. They
// launch after the kernel before them where programmatic dependent launch is on (common.cuh).
#include <stdexcept>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gemv.cuh"
#include "kernels/cuda/internal.h"

namespace azr::kernels::cuda_detail {
namespace {

using namespace gemv;
static_assert(gemv::kMaxRows == kDecodeFusedMaxRows, "the fused decode ops take what the kernels take");

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

bool gemv_applies(int64_t rows) { return rows >= 1 && rows <= kMaxRows; }

void gemv_linear(float* out, const uint16_t* x16, const uint16_t* w16, const float* bias, int64_t R, int64_t IC,
                 int64_t OC) {
  if (OC == 0) return;
  const bool vec8 = IC % 8 == 0 && aligned16(x16) && aligned16(w16);
  const int split = split_for(OC, IC);
  dispatch(R, vec8, [&](auto rows_c, auto vec_c) {
    constexpr int kRows = decltype(rows_c)::value, kVec = decltype(vec_c)::value;
    constexpr size_t smem = kSmemBytes<1, kRows>;
    launch_after_prior(gemv_linear_kernel<kRows, kVec>, blocks_for(OC, split), kThreads, smem, out, x16, w16, bias,
                       int(R), IC, OC, split);
  });
}

void decode_qkv_w16(const DecodeQkv& a) {
  if (!gemv_applies(a.R)) throw std::invalid_argument("decode_qkv_w16: more rows than kDecodeFusedMaxRows");
  const QkvArgs args{a.x16, a.wq, a.wk, a.wv, a.bq, a.bk, a.bv, a.cos, a.sin, a.slot, a.pos, a.q,
                     reinterpret_cast<__nv_bfloat16*>(a.kcache), reinterpret_cast<__nv_bfloat16*>(a.vcache),
                     a.H, a.heads, a.kv_heads, a.d, a.slot_stride};
  const int64_t items = (a.heads + 2 * a.kv_heads) * (a.d / 2);
  if (items == 0) return;
  const bool vec8 = a.H % 8 == 0 && aligned16(a.x16) && aligned16(a.wq) && aligned16(a.wk) && aligned16(a.wv);
  const int split = split_for(items, a.H);
  dispatch(a.R, vec8, [&](auto rows_c, auto vec_c) {
    constexpr int kRows = decltype(rows_c)::value, kVec = decltype(vec_c)::value;
    constexpr size_t smem = kSmemBytes<2, kRows>;
    launch_after_prior(gemv_qkv_kernel<kRows, kVec>, blocks_for(items, split), kThreads, smem, args, int(a.R), split);
  });
}

void gate_up_swiglu_w16(uint16_t* out16, const uint16_t* x16, const uint16_t* wg, const float* bg, const uint16_t* wu,
                        const float* bu, int64_t R, int64_t IC, int64_t I) {
  if (!gemv_applies(R)) throw std::invalid_argument("gate_up_swiglu_w16: more rows than kDecodeFusedMaxRows");
  if (I == 0) return;
  const bool vec8 = IC % 8 == 0 && aligned16(x16) && aligned16(wg) && aligned16(wu);
  const int split = split_for(I, IC);
  dispatch(R, vec8, [&](auto rows_c, auto vec_c) {
    constexpr int kRows = decltype(rows_c)::value, kVec = decltype(vec_c)::value;
    constexpr size_t smem = kSmemBytes<2, kRows>;
    launch_after_prior(gemv_gate_up_kernel<kRows, kVec>, blocks_for(I, split), kThreads, smem,
                       reinterpret_cast<__nv_bfloat16*>(out16), x16, wg, bg, wu, bu, int(R), IC, I, split);
  });
}

}  // namespace azr::kernels::cuda_detail
