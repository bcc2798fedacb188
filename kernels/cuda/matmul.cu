// GEMMs of the CUDA backend through cuBLASLt, with the bias fused into the forward GEMM's
// epilogue. Row-major [N, C] activations are column-major [C, N] to cuBLAS, so each product is
// written as its transpose: out^T = w^T-view x inp^T-view, and so on (derivations below).
// fp32 in, fp32 out, CUBLAS_COMPUTE_32F (no TF32), so the results match the CPU backend.
#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/internal.h"

namespace azr::kernels::cuda_detail {
namespace {

// One handle and one workspace for the process (ops run on one stream).
struct LtContext {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = size_t(32) << 20;  // what cuBLASLt's docs suggest for Hopper
};

LtContext& lt() {
  static LtContext ctx = [] {
    LtContext c;
    AZR_CUBLAS_CHECK(cublasLtCreate(&c.handle));
    AZR_CUDA_CHECK(cudaMalloc(&c.workspace, c.workspace_bytes));
    return c;
  }();
  return ctx;
}

// The largest power of two (at most 256) dividing the address: cuBLASLt's heuristics otherwise
// assume 256-byte alignment, and the model's weights are slices of one flat buffer.
uint32_t alignment_of(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  uint32_t align = 256;
  while (align > 4 && (a % align) != 0) align /= 2;
  return align;
}

// RAII for the four descriptor kinds, so an error thrown mid-setup leaks nothing.
struct Desc {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  ~Desc() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

// Column-major C[m, n] = op(A) op(B) + beta C (+ bias[m] broadcast over columns, when given).
// A is stored [m, k] (or [k, m] when ta), B [k, n] (or [n, k] when tb).
void lt_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* A, int64_t lda, const float* B,
             int64_t ldb, float beta, float* C, int64_t ldc, const float* bias) {
  if (m == 0 || n == 0) return;
  if (k == 0) {  // an empty sum: C = beta C (+ bias), which cuBLASLt does not promise for k = 0
    if (beta != 1.f || bias) throw std::logic_error("lt_gemm: k == 0 with beta != 1 or a bias");
    return;
  }
  LtContext& ctx = lt();
  Desc d;
  AZR_CUBLAS_CHECK(cublasLtMatmulDescCreate(&d.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  AZR_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof(opa)));
  AZR_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof(opb)));
  if (bias) {
    const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
    AZR_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
    AZR_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
  }
  AZR_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&d.a, CUDA_R_32F, uint64_t(ta ? k : m), uint64_t(ta ? m : k), lda));
  AZR_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&d.b, CUDA_R_32F, uint64_t(tb ? n : k), uint64_t(tb ? k : n), ldb));
  AZR_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&d.c, CUDA_R_32F, uint64_t(m), uint64_t(n), ldc));

  AZR_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&d.pref));
  const uint64_t ws = ctx.workspace_bytes;
  AZR_CUBLAS_CHECK(
      cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  const uint32_t al_a = alignment_of(A), al_b = alignment_of(B), al_c = alignment_of(C);
  AZR_CUBLAS_CHECK(
      cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof(al_a)));
  AZR_CUBLAS_CHECK(
      cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof(al_b)));
  AZR_CUBLAS_CHECK(
      cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_c, sizeof(al_c)));
  AZR_CUBLAS_CHECK(
      cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_c, sizeof(al_c)));

  cublasLtMatmulHeuristicResult_t heur{};
  int found = 0;
  AZR_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(ctx.handle, d.op, d.a, d.b, d.c, d.c, d.pref, 1, &heur, &found));
  if (found == 0) throw std::runtime_error("cuBLASLt: no algorithm for this GEMM");
  const float alpha = 1.f;
  AZR_CUBLAS_CHECK(cublasLtMatmul(ctx.handle, d.op, &alpha, A, d.a, B, d.b, &beta, C, d.c, C, d.c, &heur.algo,
                                  ctx.workspace, ctx.workspace_bytes, /*stream=*/0));
}

}  // namespace

// out[N, OC] = inp[N, IC] w[OC, IC]^T + bias. Column-major: out^T [OC, N] = (w viewed [IC, OC])^T
// x (inp viewed [IC, N]).
void matmul_forward(float* out, const float* inp, const float* w, const float* bias, int64_t N, int64_t IC,
                    int64_t OC) {
  lt_gemm(true, false, OC, N, IC, w, IC, inp, IC, 0.f, out, OC, bias);
}

void matmul_backward(float* dinp, float* dw, float* dbias, const float* dout, const float* inp, const float* w,
                     int64_t N, int64_t IC, int64_t OC) {
  // dinp[N, IC] += dout[N, OC] w[OC, IC]: dinp^T [IC, N] += (w viewed [IC, OC]) (dout viewed [OC, N]).
  if (dinp) lt_gemm(false, false, IC, N, OC, w, IC, dout, OC, 1.f, dinp, IC, nullptr);
  // dw[OC, IC] += dout^T inp: dw^T [IC, OC] += (inp viewed [IC, N]) (dout viewed [OC, N])^T.
  if (dw && N > 0) lt_gemm(false, true, IC, OC, N, inp, IC, dout, OC, 1.f, dw, IC, nullptr);
  if (dbias) column_sums_accumulate(dbias, dout, N, OC);
}

}  // namespace azr::kernels::cuda_detail
