// The CPU backend's MatmulPrecision::Bf16 GEMMs: round the operands of each product to bf16 in
// scratch copies, then run the fp32 GEMM on them. A product of two bf16 values is exact in fp32
// (8 + 8 significant bits fit in 24), so this is the tensor cores' arithmetic up to the order of
// the fp32 sums: the reference the CUDA backend's bf16 GEMMs are checked against.
#include "kernels/cpu/bf16_matmul.h"

#include <omp.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/ops.h"

namespace azr::kernels {

float round_to_bf16(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  if ((bits & 0x7F800000u) == 0x7F800000u && (bits & 0x007FFFFFu) != 0) {
    bits = (bits | 0x00400000u) & 0xFFFF0000u;  // NaN: keep sign and top payload, make it quiet
  } else {
    bits += 0x7FFFu + ((bits >> 16) & 1u);  // round half to even on the 16 bits dropped
    bits &= 0xFFFF0000u;
  }
  float r;
  std::memcpy(&r, &bits, sizeof r);
  return r;
}

namespace {

constexpr int64_t kParallelMin = 1 << 15;

// Scratch per thread that calls an op (the trainer runs ops from one thread); grown, never shrunk.
struct Scratch {
  std::vector<float> a, b;
};
thread_local Scratch t_scratch;

const float* rounded(std::vector<float>& dst, const float* src, int64_t n) {
  dst.resize(size_t(n));
  float* d = dst.data();
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; i++) d[i] = round_to_bf16(src[i]);
  return d;
}

void matmul_forward(float* out, const float* inp, const float* w, const float* bias, int64_t N, int64_t IC,
                    int64_t OC) {
  const float* inp16 = rounded(t_scratch.a, inp, N * IC);
  const float* w16 = rounded(t_scratch.b, w, OC * IC);
  cpu_ops().matmul_forward(out, inp16, w16, bias, N, IC, OC);
}

void matmul_backward(float* dinp, float* dw, float* dbias, const float* dout, const float* inp, const float* w,
                     int64_t N, int64_t IC, int64_t OC) {
  const Ops& fp32 = cpu_ops();
  if (dinp || dw) {
    // dout is needed by both products: keep its rounding in `a`, and the other operand in `b`.
    const float* dout16 = rounded(t_scratch.a, dout, N * OC);
    if (dinp) fp32.matmul_backward(dinp, nullptr, nullptr, dout16, nullptr, rounded(t_scratch.b, w, OC * IC), N, IC, OC);
    if (dw) fp32.matmul_backward(nullptr, dw, nullptr, dout16, rounded(t_scratch.b, inp, N * IC), nullptr, N, IC, OC);
  }
  if (dbias) fp32.matmul_backward(nullptr, nullptr, dbias, dout, nullptr, nullptr, N, IC, OC);
}

Ops make_table() {
  Ops t = cpu_ops();
  t.name = "cpu+bf16";
  t.matmul_forward = matmul_forward;
  t.matmul_backward = matmul_backward;
  return t;
}

}  // namespace

const Ops& cpu_bf16_matmul_ops() {
  static const Ops table = make_table();
  return table;
}

}  // namespace azr::kernels
