// GEMMs of the CUDA backend through cuBLASLt, with the bias fused into the forward GEMM's
// epilogue. Row-major [N, C] activations are column-major [C, N] to cuBLAS, so each product is
// written as its transpose: out^T = w^T-view x inp^T-view, and so on (derivations below).
// fp32 in, fp32 out, CUBLAS_COMPUTE_32F (no TF32), so the results match the CPU backend.
// MatmulPrecision::Bf16 (kernels/ops.h): the operands are first rounded to bf16 into scratch
// buffers (__float2bfloat16_rn, as the CPU reference rounds), then multiplied on the tensor cores
// with fp32 outputs and fp32 accumulation; the bias and dbias stay fp32. The _w16 variants take
// the weights already in bf16 (a model's bf16 copy) and round only the activations; the _a16w16
// ones take the activations rounded already too.
#include <cuda_bf16.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/internal.h"
#include "kernels/cuda/streaming.cuh"
#include "kernels/cuda_launch_choice.h"

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
    c.workspace = device_malloc(c.workspace_bytes);
    return c;
  }();
  return ctx;
}

// The largest power of two (at most 256) dividing the address: cuBLASLt's heuristics otherwise
// assume 256-byte alignment, and the model's weights are slices of one flat buffer.
uint32_t alignment_of(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  uint32_t align = 256;
  while (align > 2 && (a % align) != 0) align /= 2;  // 2: a bf16 operand inside a model's bf16 copy
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

// A GEMM's descriptors and algorithm, planned once per shape. Creating the descriptors and asking
// cuBLASLt's heuristic costs tens of microseconds of host time, more than the GPU spends on a
// decode step's small GEMMs, and a model repeats a few dozen shapes. The key is everything the
// plan depends on: transposes, sizes, leading dimensions, operand and output types, the bias
// epilogue and the operands' alignments (the bias pointer itself is set per call).
using PlanKey = std::array<int64_t, 14>;
struct PlanKeyHash {
  size_t operator()(const PlanKey& key) const {
    uint64_t h = 1469598103934665603ull;  // FNV-1a over the fields
    for (int64_t v : key) h = (h ^ uint64_t(v)) * 1099511628211ull;
    return size_t(h);
  }
};
struct Plan {
  Desc d;
  cublasLtMatmulAlgo_t algo{};
};
constexpr size_t kMaxPlans = 4096;  // decode batches shrink row by row: bound the distinct shapes
std::mutex g_plans_mutex;
// Never destroyed, as the other process-lifetime CUDA state (common.cuh's DeviceScratch): a static
// destructor would run after the CUDA runtime has torn down.
std::unordered_map<PlanKey, std::unique_ptr<Plan>, PlanKeyHash>& g_plans =
    *new std::unordered_map<PlanKey, std::unique_ptr<Plan>, PlanKeyHash>();

// The descriptors of column-major C[m, n] = op(A) op(B) + beta C (lt_gemm, below) and the
// preference that bounds the algorithms to the workspace and the operands' alignments. C is fp32
// (cd = CUDA_R_32F) or bf16 (CUDA_R_16BF: the fp32 sums rounded as the epilogue stores them).
void describe(Desc& d, bool ta, bool tb, int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb, int64_t ldc,
              cudaDataType_t ab, cudaDataType_t cd, bool bias, uint32_t al_a, uint32_t al_b, uint32_t al_c) {
  const LtContext& ctx = lt();
  AZR_CUBLAS_CHECK(cublasLtMatmulDescCreate(&d.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  AZR_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof(opa)));
  AZR_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof(opb)));
  if (bias) {
    const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
    AZR_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
  }
  AZR_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&d.a, ab, uint64_t(ta ? k : m), uint64_t(ta ? m : k), lda));
  AZR_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&d.b, ab, uint64_t(tb ? n : k), uint64_t(tb ? k : n), ldb));
  AZR_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&d.c, cd, uint64_t(m), uint64_t(n), ldc));

  AZR_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&d.pref));
  const uint64_t ws = ctx.workspace_bytes;
  AZR_CUBLAS_CHECK(
      cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  AZR_CUBLAS_CHECK(
      cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof(al_a)));
  AZR_CUBLAS_CHECK(
      cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof(al_b)));
  AZR_CUBLAS_CHECK(
      cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_c, sizeof(al_c)));
  AZR_CUBLAS_CHECK(
      cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_c, sizeof(al_c)));
}

// cuBLASLt's heuristic's first `count` algorithms for the described GEMM, best first.
std::vector<cublasLtMatmulAlgo_t> ranked_algorithms(const Desc& d, int count) {
  std::vector<cublasLtMatmulHeuristicResult_t> heur(static_cast<size_t>(count));
  int found = 0;
  AZR_CUBLAS_CHECK(
      cublasLtMatmulAlgoGetHeuristic(lt().handle, d.op, d.a, d.b, d.c, d.c, d.pref, count, heur.data(), &found));
  if (found == 0) throw std::runtime_error("cuBLASLt: no algorithm for this GEMM");
  std::vector<cublasLtMatmulAlgo_t> algos;
  for (int i = 0; i < found; i++) algos.push_back(heur[size_t(i)].algo);
  return algos;
}

std::unique_ptr<Plan> make_plan(bool ta, bool tb, int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb,
                                int64_t ldc, cudaDataType_t ab, cudaDataType_t cd, bool bias, uint32_t al_a,
                                uint32_t al_b, uint32_t al_c) {
  auto plan = std::make_unique<Plan>();
  describe(plan->d, ta, tb, m, n, k, lda, ldb, ldc, ab, cd, bias, al_a, al_b, al_c);
  plan->algo = ranked_algorithms(plan->d, 1).front();
  return plan;
}

// Enqueues C = A B + beta C (the descriptors' shapes and transposes) under `algo` on op_stream(),
// with the process's workspace: lt_gemm's call and each timed run's.
cublasStatus_t enqueue_matmul(const Desc& d, const cublasLtMatmulAlgo_t& algo, const void* A, const void* B,
                              float beta, void* C) {
  const LtContext& ctx = lt();
  const float alpha = 1.f;
  return cublasLtMatmul(ctx.handle, d.op, &alpha, A, d.a, B, d.b, &beta, C, d.c, C, d.c, &algo, ctx.workspace,
                        ctx.workspace_bytes, op_stream());
}

// The mean milliseconds of `reps` runs of the described product under `algo`, after two warm-ups,
// on op_stream(); NaN when the algorithm refuses the problem at run time. C is written (beta = 0)
// or added to.
double time_algorithm(const Desc& d, const cublasLtMatmulAlgo_t& algo, const void* A, const void* B, float beta,
                      void* C, int reps) {
  auto run = [&] { return enqueue_matmul(d, algo, A, B, beta, C); };
  if (run() != CUBLAS_STATUS_SUCCESS || run() != CUBLAS_STATUS_SUCCESS) return std::nan("");
  const double ms = milliseconds_on_op_stream([&] {
    for (int r = 0; r < reps; r++) AZR_CUBLAS_CHECK(run());
  });
  return ms / reps;
}

// lt_gemm's product (no bias) under each of the heuristic's first `count` algorithms, in its order.
std::vector<double> time_ranked_algorithms(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const void* A,
                                           int64_t lda, const void* B, int64_t ldb, float beta, float* C, int64_t ldc,
                                           cudaDataType_t ab, int count, int reps) {
  Desc d;
  describe(d, ta, tb, m, n, k, lda, ldb, ldc, ab, CUDA_R_32F, false, alignment_of(A), alignment_of(B),
           alignment_of(C));
  std::vector<double> ms;
  for (const cublasLtMatmulAlgo_t& algo : ranked_algorithms(d, count))
    ms.push_back(time_algorithm(d, algo, A, B, beta, C, reps));
  return ms;
}

// Autotuning (cuda_ops.h, cuda_set_cublaslt_autotune; AZR_CUBLASLT_AUTOTUNE): products of at least
// this many FLOPs, a training step's and a large decode batch's; smaller ones take microseconds,
// where the heuristic's choice matters least and a decode step's shrinking batch would make a new
// plan, and a tuning, at every size.
constexpr double kAutotuneFlops = double(1 << 30);
constexpr int kAutotuneCandidates = 8, kAutotuneReps = 3;

bool& autotune_choice() {
  static bool choice = [] {
    const char* e = std::getenv("AZR_CUBLASLT_AUTOTUNE");
    return parse_cublaslt_autotune(e ? e : "");
  }();
  return choice;
}

// Whether a new plan of this product is timed: chosen, large enough, and not made while a stream
// records a graph (timing there would enqueue the candidates into the graph).
bool autotune_applies(int64_t m, int64_t n, int64_t k) {
  if (!autotune_choice() || 2.0 * double(m) * double(n) * double(k) < kAutotuneFlops) return false;
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  AZR_CUDA_CHECK(cudaStreamIsCapturing(op_stream(), &status));
  return status == cudaStreamCaptureStatusNone;
}

// The fastest of the heuristic's first candidates for the plan's product on this call's operands,
// writing into a scratch C of the call's shape (the call's own C may be added to, beta = 1, and
// must see one product only; fp32-sized, so a bf16 C fits too). The plan's bias pointer is this
// call's.
cublasLtMatmulAlgo_t fastest_algorithm(const Plan& plan, const void* A, const void* B, float beta, int64_t n,
                                       int64_t ldc) {
  struct Scratch {  // freed on every way out; cudaFree waits for the timed runs
    float* p;
    ~Scratch() { (void)device_free(p); }
  } scratch{static_cast<float*>(device_malloc(sizeof(float) * size_t(ldc) * size_t(n)))};
  cublasLtMatmulAlgo_t best = plan.algo;  // the heuristic's first, kept if every candidate refuses
  double best_ms = INFINITY;
  for (const cublasLtMatmulAlgo_t& algo : ranked_algorithms(plan.d, kAutotuneCandidates)) {
    const double ms = time_algorithm(plan.d, algo, A, B, beta, scratch.p, kAutotuneReps);
    if (ms < best_ms) best = algo, best_ms = ms;  // a refusal's NaN never compares less
  }
  return best;
}

// Column-major C[m, n] = op(A) op(B) + beta C (+ bias[m] broadcast over columns, when given).
// A is stored [m, k] (or [k, m] when ta), B [k, n] (or [n, k] when tb).
// A and B are fp32 (ab = CUDA_R_32F) or bf16 (CUDA_R_16BF); the bias and the sums are fp32; C is
// fp32 (cd = CUDA_R_32F), or bf16 (CUDA_R_16BF, beta = 0 and no bias: matmul_forward_o16 and
// matmul_backward_g16_dinp16).
void lt_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const void* A, int64_t lda, const void* B,
             int64_t ldb, float beta, void* C, int64_t ldc, const float* bias, cudaDataType_t ab = CUDA_R_32F,
             cudaDataType_t cd = CUDA_R_32F) {
  if (m == 0 || n == 0) return;
  if (k == 0) {  // an empty sum: C = beta C (+ bias), which cuBLASLt does not promise for k = 0
    if (beta != 1.f || bias) throw std::logic_error("lt_gemm: k == 0 with beta != 1 or a bias");
    return;
  }
  const uint32_t al_a = alignment_of(A), al_b = alignment_of(B), al_c = alignment_of(C);
  if (cd != CUDA_R_32F && (beta != 0.f || bias)) throw std::logic_error("lt_gemm: a bf16 C with beta or a bias");
  const PlanKey key = {ta, tb, m, n, k, lda, ldb, ldc, int64_t(ab), int64_t(cd), bias != nullptr, al_a, al_b, al_c};
  // One lock around planning and the enqueue: the plan's descriptor takes this call's bias pointer.
  std::lock_guard<std::mutex> lock(g_plans_mutex);
  auto it = g_plans.find(key);
  const bool made = it == g_plans.end();
  if (made) {
    if (g_plans.size() >= kMaxPlans) g_plans.clear();
    it = g_plans.emplace(key, make_plan(ta, tb, m, n, k, lda, ldb, ldc, ab, cd, bias != nullptr, al_a, al_b, al_c))
             .first;
  }
  Plan& plan = *it->second;
  if (bias)
    AZR_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(plan.d.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
  if (made && autotune_applies(m, n, k)) plan.algo = fastest_algorithm(plan, A, B, beta, n, ldc);
  AZR_CUBLAS_CHECK(enqueue_matmul(plan.d, plan.algo, A, B, beta, C));
}

// Scratch for rounded operands (common.cuh): ops run on one stream, so one buffer per operand of
// a call does: a (dout), b (inp), w (fp32 weights rounded on the call).
using Bf16Scratch = DeviceScratch<__nv_bfloat16>;
Bf16Scratch g_scratch_a, g_scratch_b, g_scratch_w;

// dst = src rounded, four values a thread where the pointers fit (streaming.cuh).
void launch_round_to_bf16(__nv_bfloat16* dst, const float* src, int64_t n) {
  if (quads_fit({src}, {dst}))
    round_to_bf16_kernel<4><<<grid_for((n + 3) / 4), 256, 0, op_stream()>>>(dst, src, n);
  else
    round_to_bf16_kernel<1><<<grid_for(n), 256, 0, op_stream()>>>(dst, src, n);
  AZR_CUDA_LAUNCHED();
}

const __nv_bfloat16* rounded(Bf16Scratch& scratch, const float* src, int64_t n) {
  __nv_bfloat16* dst = scratch.get(size_t(n));
  if (n > 0) launch_round_to_bf16(dst, src, n);
  return dst;
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

void to_bf16(uint16_t* dst, const float* src, int64_t n) {
  if (n <= 0) return;
  launch_round_to_bf16(reinterpret_cast<__nv_bfloat16*>(dst), src, n);
  // The model's bf16 copy of its weights (Transformer::weights16), rounded on the first product
  // that needs it, right before that product's launch: a few-row product launched programmatically
  // would read it before its wait (its held packs, gemv.cuh), so the next launch is an ordinary one.
  next_launch_ordinary() = true;
}

// The products with bf16 weights (a model's bf16 copy), the activation operand rounded here
// (_w16) or by its producer (_a16w16). A few rows (a decode step's) go to gemv.cu's kernel, which
// streams the weights once; cuBLASLt spends several microseconds of latency on such a product.
// Past one row only for small weights (ops.h, decode_few_rows_pay: measured).
void matmul_forward_a16w16_cublaslt(float* out, const uint16_t* inp16, const uint16_t* w16, const float* bias,
                                    int64_t N, int64_t IC, int64_t OC) {
  if (N == 0 || OC == 0) return;
  lt_gemm(true, false, OC, N, IC, w16, IC, inp16, IC, 0.f, out, OC, bias, CUDA_R_16BF);
}

// out16^T = w^T-view x inp16^T-view as matmul_forward_a16w16_cublaslt's, stored in bf16 by the
// epilogue: no fp32 output is written (ops.h, matmul_forward_o16). Always cuBLASLt: its one
// caller, the MLP's gate/up GEMM, takes it past the rows the few-row kernels serve.
void matmul_forward_o16(uint16_t* out16, const uint16_t* inp16, const uint16_t* w16, int64_t N, int64_t IC,
                        int64_t OC) {
  if (N == 0 || OC == 0) return;
  lt_gemm(true, false, OC, N, IC, w16, IC, inp16, IC, 0.f, out16, OC, nullptr, CUDA_R_16BF, CUDA_R_16BF);
}

void matmul_forward_a16w16(float* out, const uint16_t* inp16, const uint16_t* w16, const float* bias, int64_t N,
                           int64_t IC, int64_t OC) {
  if (decode_few_rows_pay(N, IC, OC))
    gemv_linear(out, DecodeInput{.x16 = inp16}, w16, bias, nullptr, N, IC, OC);
  else
    matmul_forward_a16w16_cublaslt(out, inp16, w16, bias, N, IC, OC);
}

void matmul_forward_w16(float* out, const float* inp, const uint16_t* w16, const float* bias, int64_t N, int64_t IC,
                        int64_t OC) {
  if (N == 0 || OC == 0) return;
  matmul_forward_a16w16(out, reinterpret_cast<const uint16_t*>(rounded(g_scratch_b, inp, N * IC)), w16, bias, N, IC,
                        OC);
}

namespace {

// Backward on bf16 weights; inp16() gives the activation operand in bf16, called only when dw is
// wanted (it may round into g_scratch_b).
template <class Input16>
void backward_w16(float* dinp, float* dw, float* dbias, const float* dout, Input16 inp16, const uint16_t* w16,
                  int64_t N, int64_t IC, int64_t OC) {
  if (dinp || (dw && N > 0)) {  // the products of matmul_backward_g16 on dout rounded here, once for both
    const auto* dout16 = reinterpret_cast<const uint16_t*>(rounded(g_scratch_a, dout, N * OC));
    const uint16_t* in16 = dw && N > 0 ? reinterpret_cast<const uint16_t*>(inp16()) : nullptr;
    matmul_backward_g16(dinp, in16 ? dw : nullptr, dout16, in16, w16, N, IC, OC, kAddBoth);
  }
  if (dbias) column_sums_accumulate(dbias, dout, N, OC);
}

}  // namespace

void matmul_backward_w16(float* dinp, float* dw, float* dbias, const float* dout, const float* inp,
                         const uint16_t* w16, int64_t N, int64_t IC, int64_t OC) {
  backward_w16(dinp, dw, dbias, dout, [&] { return rounded(g_scratch_b, inp, N * IC); }, w16, N, IC, OC);
}

void matmul_backward_a16w16(float* dinp, float* dw, float* dbias, const float* dout, const uint16_t* inp16,
                            const uint16_t* w16, int64_t N, int64_t IC, int64_t OC) {
  backward_w16(dinp, dw, dbias, dout, [&] { return reinterpret_cast<const __nv_bfloat16*>(inp16); }, w16, N, IC,
               OC);
}

// dout rounded by its producer (ops.h): no rounding pass here; a write as beta = 0, which cuBLASLt
// reads no C for (a dW write saves reading the 4-byte gradient, besides the fill that it replaces).
void matmul_backward_g16(float* dinp, float* dw, const uint16_t* dout16, const uint16_t* inp16, const uint16_t* w16,
                         int64_t N, int64_t IC, int64_t OC, GemmWrites writes) {
  const bool write_dinp = writes & kWriteDinp, write_dw = writes & kWriteDw;
  if (dinp && OC == 0 && write_dinp && N * IC > 0)  // an empty sum, which lt_gemm leaves to its caller
    AZR_CUDA_CHECK(cudaMemsetAsync(dinp, 0, sizeof(float) * size_t(N * IC), op_stream()));
  else if (dinp)
    lt_gemm(false, false, IC, N, OC, w16, IC, dout16, OC, write_dinp ? 0.f : 1.f, dinp, IC, nullptr, CUDA_R_16BF);
  if (dw && N == 0 && write_dw && OC * IC > 0)  // the same empty sum
    AZR_CUDA_CHECK(cudaMemsetAsync(dw, 0, sizeof(float) * size_t(OC * IC), op_stream()));
  else if (dw && N > 0)
    lt_gemm(false, true, IC, OC, N, inp16, IC, dout16, OC, write_dw ? 0.f : 1.f, dw, IC, nullptr, CUDA_R_16BF);
}

// dinp16^T = the dinp product of matmul_backward_g16, stored in bf16 by the epilogue (beta = 0);
// dw as matmul_backward_g16's.
void matmul_backward_g16_dinp16(uint16_t* dinp16, float* dw, const uint16_t* dout16, const uint16_t* inp16,
                                const uint16_t* w16, int64_t N, int64_t IC, int64_t OC, GemmWrites writes) {
  if (dinp16 && OC == 0 && N * IC > 0)  // an empty sum, which lt_gemm leaves to its caller
    AZR_CUDA_CHECK(cudaMemsetAsync(dinp16, 0, sizeof(uint16_t) * size_t(N * IC), op_stream()));
  else if (dinp16)
    lt_gemm(false, false, IC, N, OC, w16, IC, dout16, OC, 0.f, dinp16, IC, nullptr, CUDA_R_16BF, CUDA_R_16BF);
  matmul_backward_g16(nullptr, dw, dout16, inp16, w16, N, IC, OC, writes);
}

std::vector<double> gemm_algorithm_ms(GemmProduct which, float* out, const uint16_t* x16, const uint16_t* w16,
                                      const uint16_t* dout16, int64_t N, int64_t IC, int64_t OC, int count, int reps) {
  switch (which) {
    case GemmProduct::Forward:  // as matmul_forward_a16w16_cublaslt: out [N, OC]
      return time_ranked_algorithms(true, false, OC, N, IC, w16, IC, x16, IC, 0.f, out, OC, CUDA_R_16BF, count, reps);
    case GemmProduct::BackwardDinp:  // as matmul_backward_g16's dinp, overwritten: out [N, IC]
      return time_ranked_algorithms(false, false, IC, N, OC, w16, IC, dout16, OC, 0.f, out, IC, CUDA_R_16BF, count,
                                    reps);
    case GemmProduct::BackwardDw:  // as matmul_backward_g16's dw, accumulated: out [OC, IC]
      return time_ranked_algorithms(false, true, IC, OC, N, x16, IC, dout16, OC, 1.f, out, IC, CUDA_R_16BF, count,
                                    reps);
  }
  return {};
}

// The same products on fp32 weights: rounded first into their own scratch (the w16 functions
// use the other two).
void matmul_forward_bf16(float* out, const float* inp, const float* w, const float* bias, int64_t N, int64_t IC,
                         int64_t OC) {
  if (N == 0 || OC == 0) return;
  matmul_forward_w16(out, inp, reinterpret_cast<const uint16_t*>(rounded(g_scratch_w, w, OC * IC)), bias, N, IC, OC);
}

void matmul_backward_bf16(float* dinp, float* dw, float* dbias, const float* dout, const float* inp, const float* w,
                          int64_t N, int64_t IC, int64_t OC) {
  const uint16_t* w16 = dinp ? reinterpret_cast<const uint16_t*>(rounded(g_scratch_w, w, OC * IC)) : nullptr;
  matmul_backward_w16(dinp, dw, dbias, dout, inp, w16, N, IC, OC);
}

}  // namespace azr::kernels::cuda_detail

namespace azr::kernels {

void cuda_set_cublaslt_autotune(bool on) {
  std::lock_guard<std::mutex> lock(cuda_detail::g_plans_mutex);
  cuda_detail::autotune_choice() = on;
  cuda_detail::g_plans.clear();  // every shape is planned again, under the new choice
}

bool cuda_cublaslt_autotune() { return cuda_detail::autotune_choice(); }

}  // namespace azr::kernels
