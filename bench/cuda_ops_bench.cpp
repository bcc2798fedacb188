// The CUDA op table's hot kernels at Qwen2.5-1.5B shapes, against the CPU backend on the same
// ops in the same process (the baseline), and against the device's own limits: GEMM and
// attention in TFLOP/s, the memory-bound ops (AdamW, token statistics, decode attention, token
// sampling: logits bytes over time, although a filtered row reads them several times) in GB/s
// and as a fraction of the peak memory bandwidth.
//
//   build/bin/cuda_ops_bench [--reps N] [--only SECTION]
//
// SECTION: gemm, gemm_bwd, gemm_algos, grads16, attention, decode_products, decode_attention, token_stats,
// sampling, adamw, swiglu, rope, rmsnorm, attention_operands, mlp_rows, grid_barrier or gradient_sums
// (default: all).
//
// Without a CUDA device it says so, prints {"bench":"cuda_ops","skipped":"..."} and exits 0.
// fp32 kernels (the op table's), and the Bf16 table's GEMM and training attention (tensor cores)
// against their fp32 / Simt counterparts, a 1.5B training step's GEMMs forward and backward,
// and its few-row decode products and fused decode ops against cuBLASLt and the unfused ops;
// SwiGLU's, AdamW's, add's and to_bf16's four-values-a-thread kernels against their one-value
// ones; RoPE; RMSNorm's one-pass backward with dx's bf16 rounding, the LM head's bf16 dlogits,
// a training layer's attention block with its operands made once in bf16, and its gate and up
// as one GEMM, against what they replace; the persistent decode kernel's grid barrier against a
// recorded graph's kernel boundary, in microseconds; the training step's gradient sums in a fixed
// order against the float atomics they replaced (AZR_CUDA_GRADIENT_SUMS), in microseconds.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "kernels/buffer.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/internal.h"
#include "kernels/ops.h"

namespace {

using namespace azr::kernels;
using azr::bench::Clock;
using azr::bench::secs_since;

std::vector<float> randn(size_t n, uint64_t seed, float scale = 1.f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

Buffer<float> upload(const std::vector<float>& h) {
  Buffer<float> d(cuda_ops(), h.size());
  d.upload(h.data(), h.size());
  return d;
}

// Median seconds per call of fn over reps calls (after one warm-up), synchronising each call.
double time_gpu(const std::function<void()>& fn, int reps) {
  fn();
  cuda_synchronize();
  std::vector<double> t;
  for (int i = 0; i < reps; i++) {
    const auto t0 = Clock::now();
    fn();
    cuda_synchronize();
    t.push_back(secs_since(t0));
  }
  std::nth_element(t.begin(), t.begin() + long(t.size() / 2), t.end());
  return t[t.size() / 2];
}

// Seconds per call of fn over `calls` calls queued back to back, the median of reps such batches:
// for kernels of a few microseconds, where a synchronisation per call would measure the host.
double time_gpu_queued(const std::function<void()>& fn, int reps, int calls = 100) {
  return time_gpu([&] { for (int i = 0; i < calls; i++) fn(); }, reps) / calls;
}

std::vector<uint16_t> bf16_of(const std::vector<float>& x) {
  std::vector<uint16_t> out(x.size());
  cpu_bf16_matmul_ops().to_bf16(out.data(), x.data(), int64_t(x.size()));
  return out;
}

Buffer<uint16_t> upload16(const std::vector<float>& h) {
  const std::vector<uint16_t> b = bf16_of(h);
  Buffer<uint16_t> d(cuda_ops(), b.size());
  d.upload(b.data(), b.size());
  return d;
}

double time_cpu(const std::function<void()>& fn) {
  fn();
  const auto t0 = Clock::now();
  fn();
  return secs_since(t0);
}

struct Row {
  std::string op, shape, unit;  // unit: GB/s or TFLOP/s (rates), or us (a time)
  double gpu_rate, cpu_rate, fraction_of_peak;  // fraction < 0: no bound given
};

}  // namespace

int main(int argc, char** argv) {
  int reps = 20;
  std::string only;  // one section, for a device session with minutes to spend
  const std::vector<std::string> sections = {"gemm",        "gemm_bwd", "gemm_algos", "grads16", "attention",
                                             "decode_products", "decode_attention", "token_stats", "sampling",
                                             "adamw",       "swiglu",   "rope",       "rmsnorm", "attention_operands",
                                             "mlp_rows",    "grid_barrier", "gradient_sums"};
  CLI::App app{"The CUDA op table's hot kernels against the CPU backend and the device's limits"};
  app.add_option("--reps", reps, "timed repeats of each kernel")->capture_default_str()->check(CLI::Range(1, 1000000));
  app.add_option("--only", only, "one section (default: all)")->check(CLI::IsMember(sections));
  CLI11_PARSE(app, argc, argv);
  const auto want = [&](const char* section) { return only.empty() || only == section; };
  std::string why;
  if (cuda_device_count(&why) == 0) {
    std::printf("cuda_ops_bench: no CUDA device (%s); nothing measured\n", why.c_str());
    std::printf("%s\n", nlohmann::json{{"bench", "cuda_ops"}, {"device", "cuda"}, {"skipped", why}}.dump().c_str());
    return 0;
  }
  const std::string device = cuda_device_description(0);
  const double peak_bw = cuda_peak_bandwidth(0);
  const Ops& gpu = cuda_ops();
  const Ops& cpu = cpu_ops();
  std::vector<Row> rows;

  // Qwen2.5-1.5B: hidden 1536, MLP 8960, 12 heads of 128 (2 KV heads), vocabulary 151,936.
  const int64_t H = 1536, I = 8960, nh = 12, nkv = 2, d = 128, V = 151936;
  // A 1.5B training step's GEMM shapes at 4,096 rows: N rows, IC inputs, OC outputs. The LM head's
  // is one 4,096-column block of its tiling at 4,096 rows (model/memory_plan.h, plan_head_tiles).
  struct StepGemm {
    const char* what;
    int64_t N, IC, OC;
  };
  const std::vector<StepGemm> step_gemms = {{"q, o", 4096, H, H},        {"k, v", 4096, H, nkv * d},
                                            {"gate, up", 4096, H, I},    {"down", 4096, I, H},
                                            {"LM head block", 4096, H, 4096}};

  if (want("gemm")) {  // MLP up-projection GEMM: 4096 tokens on the GPU, 256 on the CPU (same rate measure)
    const int64_t N = 4096, Nc = 256;
    auto x = randn(N * H, 1), w = randn(I * H, 2, 0.02f);
    auto dx = upload(x), dw = upload(w);
    Buffer<float> dout(cuda_ops(), N * I);
    const double g = time_gpu([&] { gpu.matmul_forward(dout.data(), dx.data(), dw.data(), nullptr, N, H, I); }, reps);
    std::vector<float> out(Nc * I);
    const double c = time_cpu([&] { cpu.matmul_forward(out.data(), x.data(), w.data(), nullptr, Nc, H, I); });
    rows.push_back({"matmul_forward", "4096x1536 . 1536x8960", "TFLOP/s", 2.0 * N * H * I / g / 1e12,
                    2.0 * Nc * H * I / c / 1e12, -1});
    // The same GEMM with MatmulPrecision::Bf16 (tensor cores; the operands' rounding included),
    // against the fp32 GPU GEMM above as its baseline in the "cpu" column's place.
    const Ops& gpu16 = cuda_bf16_matmul_ops();
    const double g16 =
        time_gpu([&] { gpu16.matmul_forward(dout.data(), dx.data(), dw.data(), nullptr, N, H, I); }, reps);
    rows.push_back({"matmul_fwd bf16", "same; baseline = the fp32 GPU GEMM", "TFLOP/s",
                    2.0 * N * H * I / g16 / 1e12, 2.0 * N * H * I / g / 1e12, -1});
  }
  if (want("gemm_bwd")) {  // A 1.5B training step's GEMMs as the Bf16 model calls them (bf16 activations and weights, fp32
     // results and gradients: matmul_*_a16w16), 4,096 rows: the forward, and the backward's dinp
     // and dW (both accumulated, as Transformer::backward asks) in TFLOP/s, against the forward on
     // the same shape (the baseline, in the "cpu" column's place: both rates are printed). A
     // backward slower per FLOP than its forward shows here, shape by shape.
    const Ops& gpu16 = cuda_bf16_matmul_ops();
    for (const StepGemm& m : step_gemms) {
      auto x = upload16(randn(size_t(m.N * m.IC), 31)), w = upload16(randn(size_t(m.OC * m.IC), 32, 0.02f));
      auto dout = upload(randn(size_t(m.N * m.OC), 33));
      Buffer<float> out(cuda_ops(), size_t(m.N * m.OC)), dx(cuda_ops(), size_t(m.N * m.IC)),
          dw(cuda_ops(), size_t(m.OC * m.IC));
      const double flops = 2.0 * double(m.N) * double(m.IC) * double(m.OC);
      const double fwd = time_gpu([&] { gpu16.matmul_forward_a16w16(out.data(), x.data(), w.data(), nullptr, m.N, m.IC, m.OC); }, reps);
      const double bwd = time_gpu([&] { gpu16.matmul_backward_a16w16(dx.data(), dw.data(), nullptr, dout.data(), x.data(), w.data(), m.N, m.IC, m.OC); }, reps);
      const std::string shape = std::to_string(m.N) + "x" + std::to_string(m.IC) + "x" + std::to_string(m.OC) + " " + m.what;
      rows.push_back({"gemm bwd bf16", shape + "; base = its fwd", "TFLOP/s", 2 * flops / bwd / 1e12, flops / fwd / 1e12, -1});
    }
  }
  if (want("gemm_algos")) {  // The same GEMMs, each product apart, under each of cuBLASLt's eight best-ranked
    // algorithms (cuda_detail::gemm_algorithm_ms): the fastest of them against the heuristic's
    // first (the one the ops run, in the "cpu" column's place). Whether autotuning the plans
    // would pay, shape by shape; NaN rows mean an algorithm refused.
    for (const StepGemm& m : step_gemms) {
      auto x = upload16(randn(size_t(m.N * m.IC), 31)), w = upload16(randn(size_t(m.OC * m.IC), 32, 0.02f));
      auto dout = upload16(randn(size_t(m.N * m.OC), 33));
      Buffer<float> out(cuda_ops(), size_t(std::max({m.N * m.OC, m.N * m.IC, m.OC * m.IC})));
      const double flops = 2.0 * double(m.N) * double(m.IC) * double(m.OC);
      struct Product {
        cuda_detail::GemmProduct which;
        const char* name;
      };
      for (const Product p : {Product{cuda_detail::GemmProduct::Forward, "fwd"},
                              Product{cuda_detail::GemmProduct::BackwardDinp, "dinp"},
                              Product{cuda_detail::GemmProduct::BackwardDw, "dW"}}) {
        const std::vector<double> ms =
            cuda_detail::gemm_algorithm_ms(p.which, out.data(), x.data(), w.data(), dout.data(), m.N, m.IC, m.OC, 8, reps);
        size_t best = 0;
        for (size_t i = 1; i < ms.size(); i++)
          if (ms[i] < ms[best]) best = i;  // a refused algorithm's NaN never compares less
        const std::string shape = std::string(p.name) + " " + std::to_string(m.N) + "x" + std::to_string(m.IC) + "x" +
                                  std::to_string(m.OC) + " " + m.what + "; base = heuristic's first; best #" +
                                  std::to_string(best) + " of " + std::to_string(ms.size());
        rows.push_back({"gemm algos bf16", shape, "TFLOP/s", flops / (ms[best] * 1e-3) / 1e12,
                        flops / (ms[0] * 1e-3) / 1e12, -1});
      }
    }
  }
  if (want("grads16")) {  // A 1.5B layer's backward with the GEMM output gradients in bf16 (Transformer::
     // layer_backward_grads16) against the fp32 gradients' ops it replaces, in the same process:
     // the MLP's gate and up (SwiGLU's backward writing dgate and dup rounded; the first product
     // writing dln) against swiglu_backward, a fill_zero and two GEMMs that each round their fp32
     // dout; the down projection (dres rounded once, dact written) against a fill_zero and a GEMM
     // that rounds dres. Rates are the GEMMs' FLOPs over the whole sequence's time.
    const Ops& gpu16 = cuda_bf16_matmul_ops();
    const int64_t N = 4096;
    auto gate = upload(randn(size_t(N * I), 41, 3.f)), up = upload(randn(size_t(N * I), 42));
    auto dact = upload(randn(size_t(N * I), 43)), dres = upload(randn(size_t(N * H), 44));
    auto ln2 = upload16(randn(size_t(N * H), 45)), act = upload16(randn(size_t(N * I), 46));
    auto wg = upload16(randn(size_t(I * H), 47, 0.02f)), wu = upload16(randn(size_t(I * H), 48, 0.02f));
    auto wd = upload16(randn(size_t(H * I), 49, 0.02f));
    Buffer<float> dgate(cuda_ops(), size_t(N * I)), dup(cuda_ops(), size_t(N * I)), dln(cuda_ops(), size_t(N * H));
    Buffer<float> dwg(cuda_ops(), size_t(I * H)), dwu(cuda_ops(), size_t(I * H)), dwd(cuda_ops(), size_t(H * I));
    Buffer<float> dact_out(cuda_ops(), size_t(N * I));
    Buffer<uint16_t> g16(cuda_ops(), size_t(N * I)), u16(cuda_ops(), size_t(N * I)), dres16(cuda_ops(), size_t(N * H));
    const double mlp_flops = 2 * 2 * 2.0 * double(N) * double(H) * double(I);  // two GEMMs, dinp and dW each
    const double old_mlp = time_gpu([&] {
      gpu16.swiglu_backward(dgate.data(), dup.data(), dact.data(), gate.data(), up.data(), N * I);
      gpu16.fill_zero(dln.data(), N * H);
      gpu16.matmul_backward_a16w16(dln.data(), dwg.data(), nullptr, dgate.data(), ln2.data(), wg.data(), N, H, I);
      gpu16.matmul_backward_a16w16(dln.data(), dwu.data(), nullptr, dup.data(), ln2.data(), wu.data(), N, H, I);
    }, reps);
    const double new_mlp = time_gpu([&] {
      gpu16.swiglu_backward_w16(g16.data(), u16.data(), dact.data(), gate.data(), up.data(), N * I);
      gpu16.matmul_backward_g16(dln.data(), dwg.data(), g16.data(), ln2.data(), wg.data(), N, H, I, kWriteDinp);
      gpu16.matmul_backward_g16(dln.data(), dwu.data(), u16.data(), ln2.data(), wu.data(), N, H, I, kAddBoth);
    }, reps);
    rows.push_back({"grads16 gate, up", "4096 rows, SwiGLU bwd + 2 GEMMs; base = fp32 grads", "TFLOP/s",
                    mlp_flops / new_mlp / 1e12, mlp_flops / old_mlp / 1e12, -1});
    const double down_flops = 2 * 2.0 * double(N) * double(H) * double(I);
    const double old_down = time_gpu([&] {
      gpu16.fill_zero(dact_out.data(), N * I);
      gpu16.matmul_backward_a16w16(dact_out.data(), dwd.data(), nullptr, dres.data(), act.data(), wd.data(), N, I, H);
    }, reps);
    const double new_down = time_gpu([&] {
      gpu16.to_bf16(dres16.data(), dres.data(), N * H);
      gpu16.matmul_backward_g16(dact_out.data(), dwd.data(), dres16.data(), act.data(), wd.data(), N, I, H, kWriteDinp);
    }, reps);
    rows.push_back({"grads16 down", "4096 rows, dact written; base = fill + add", "TFLOP/s",
                    down_flops / new_down / 1e12, down_flops / old_down / 1e12, -1});
  }
  if (want("attention")) {  // causal attention forward, 4 sequences of 1024 (GPU) / 1 of 256 (CPU)
    auto run = [&](const Ops& ops, int64_t B, int64_t T, bool on_gpu) {
      const int64_t qn = B * T * nh * d, kn = B * T * nkv * d;
      auto q = randn(qn, 3), k = randn(kn, 4), v = randn(kn, 5);
      AttentionShape s{B, T, nh, nkv, d, T * nkv * d, nullptr};
      if (on_gpu) {
        auto dq = upload(q), dk = upload(k), dv = upload(v);
        Buffer<float> out(cuda_ops(), qn), lse(cuda_ops(), B * nh * T);
        return time_gpu([&] { ops.attention_forward(out.data(), lse.data(), dq.data(), dk.data(), dv.data(), s); }, reps);
      }
      std::vector<float> out(qn), lse(B * nh * T);
      return time_cpu([&] { ops.attention_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), s); });
    };
    // causal: ~half of the T x T scores, two GEMM-like products of d each
    auto flops = [&](int64_t B, int64_t T) { return 2.0 * 2.0 * double(B) * nh * d * double(T) * double(T) / 2.0; };
    const double g = run(gpu, 4, 1024, true), c = run(cpu, 1, 256, false);
    rows.push_back({"attention_forward", "4 x 1024 tokens, 12/2 heads x 128", "TFLOP/s", flops(4, 1024) / g / 1e12,
                    flops(1, 256) / c / 1e12, -1});

    // The Bf16 table's training attention: the tensor-core kernels against the Simt ones (the
    // baseline, in the "cpu" column's place), forward and backward, at 0.5B's and 1.5B's heads.
    // Backward counts FlashAttention's 2.5x the forward's FLOPs (five products to its two).
    const Ops& gpu16 = cuda_bf16_matmul_ops();
    struct Heads {
      int64_t H, KV, d;
    };
    for (const Heads hd : {Heads{14, 2, 64}, Heads{12, 2, 128}}) {
      const int64_t B = 4, T = 1024, qn = B * T * hd.H * hd.d, kn = B * T * hd.KV * hd.d;
      auto q = upload(randn(qn, 3)), k = upload(randn(kn, 4)), v = upload(randn(kn, 5)), dout = upload(randn(qn, 6));
      Buffer<float> out(cuda_ops(), qn), lse(cuda_ops(), B * hd.H * T), dq(cuda_ops(), qn), dk(cuda_ops(), kn),
          dv(cuda_ops(), kn);
      const AttentionShape s{B, T, hd.H, hd.KV, hd.d, T * hd.KV * hd.d, nullptr};
      const double fwd_flops = 2.0 * 2.0 * double(B) * hd.H * hd.d * double(T) * double(T) / 2.0;
      auto time_with = [&](CudaAttentionKernel kernel, bool backward) {
        cuda_set_attention_kernel(kernel);
        gpu16.attention_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), s);
        const double t = backward ? time_gpu([&] { gpu16.attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), out.data(), lse.data(), q.data(), k.data(), v.data(), s); }, reps)
                                  : time_gpu([&] { gpu16.attention_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), s); }, reps);
        cuda_set_attention_kernel(CudaAttentionKernel::Simt);
        return t;
      };
      const std::string shape = "4 x 1024, " + std::to_string(hd.H) + "/" + std::to_string(hd.KV) + " heads x " +
                                std::to_string(hd.d) + "; base = simt";
      for (const bool backward : {false, true}) {
        const double f = backward ? 2.5 * fwd_flops : fwd_flops;
        const double tc = time_with(CudaAttentionKernel::TensorCore, backward),
                     simt = time_with(CudaAttentionKernel::Simt, backward);
        rows.push_back({backward ? "attn_bwd bf16 tc" : "attn_fwd bf16 tc", shape, "TFLOP/s", f / tc / 1e12,
                        f / simt / 1e12, -1});
      }
      // The kernels on mma.sync (attention_mma.cuh) against the WMMA ones, in the base column.
      for (const bool backward : {false, true}) {
        const double f = backward ? 2.5 * fwd_flops : fwd_flops;
        const double mma = time_with(CudaAttentionKernel::Mma, backward),
                     wmma = time_with(CudaAttentionKernel::TensorCore, backward);
        rows.push_back({backward ? "attn_bwd bf16 mma" : "attn_fwd bf16 mma",
                        "4 x 1024, " + std::to_string(hd.H) + "/" + std::to_string(hd.KV) + " heads x " +
                            std::to_string(hd.d) + "; base = WMMA",
                        "TFLOP/s", f / mma / 1e12, f / wmma / 1e12, -1});
      }
      // The mma.sync forward with 32 query rows a warp (128-query blocks over 32-key tiles,
      // cuda_set_attention_warp_rows) against the default 16, in the base column. Forward only:
      // backward is the same kernels either way.
      {
        const double rows16 = time_with(CudaAttentionKernel::Mma, false);
        cuda_set_attention_warp_rows(32);
        const double rows32 = time_with(CudaAttentionKernel::Mma, false);
        cuda_set_attention_warp_rows(16);
        rows.push_back({"attn_fwd bf16 mma, 32 rows/warp",
                        "4 x 1024, " + std::to_string(hd.H) + "/" + std::to_string(hd.KV) + " heads x " +
                            std::to_string(hd.d) + "; base = 16 rows/warp",
                        "TFLOP/s", fwd_flops / rows32 / 1e12, fwd_flops / rows16 / 1e12, -1});
      }
      // The same kernels against themselves with the causal mask on every tile (as they ran
      // before they skipped the tiles it cannot touch), in the base column.
      for (const bool backward : {false, true}) {
        const double f = backward ? 2.5 * fwd_flops : fwd_flops;
        const double skipping = time_with(CudaAttentionKernel::Mma, backward);
        cuda_set_attention_masks_every_tile(true);
        const double every = time_with(CudaAttentionKernel::Mma, backward);
        cuda_set_attention_masks_every_tile(false);
        rows.push_back({backward ? "attn_bwd bf16 mma, masks" : "attn_fwd bf16 mma, masks",
                        "4 x 1024, " + std::to_string(hd.H) + "/" + std::to_string(hd.KV) + " heads x " +
                            std::to_string(hd.d) + "; base = mask every tile",
                        "TFLOP/s", f / skipping / 1e12, f / every / 1e12, -1});
      }
      // The merged backward (one kernel adds dQ, dK and dV with atomics;
      // cuda_set_attention_backward) against the split one (dQ's own kernel, the dK/dV shares and
      // their group sum), in the base column; the merged time includes zeroing the three.
      {
        const double f = 2.5 * fwd_flops;
        const double split = time_with(CudaAttentionKernel::Mma, true);
        cuda_set_attention_backward(CudaAttentionBackward::Merged);
        const double merged = time_with(CudaAttentionKernel::Mma, true);
        cuda_set_attention_backward(CudaAttentionBackward::Split);
        rows.push_back({"attn_bwd bf16 mma, merged",
                        "4 x 1024, " + std::to_string(hd.H) + "/" + std::to_string(hd.KV) + " heads x " +
                            std::to_string(hd.d) + "; base = split (dQ kernel)",
                        "TFLOP/s", f / merged / 1e12, f / split / 1e12, -1});
      }
    }
  }
  if (want("decode_products")) {  // A decode step's few-row products (kernels/cuda/gemv.cuh) against cuBLASLt on the same
     // product (the baseline, in the "cpu" column's place), back to back as in a decode step: weight
     // bytes over time, at 1, 2, 4 and 8 rows (kDecodeFusedMaxRows: where the crossover lies decides
     // how many rows the fused ops should take). Then the fused decode ops against the ops they
     // fuse, on cuBLASLt (what a step ran before them), at 1, 4 and 8 rows.
    const Ops& gpu16 = cuda_bf16_matmul_ops();
    struct Gemv {
      const char* what;
      int64_t IC, OC;
    };
    for (const Gemv m : {Gemv{"0.5B q/o", 896, 896}, Gemv{"0.5B down", 4864, 896}, Gemv{"1.5B gate/up", 1536, 8960},
                         Gemv{"1.5B down", 8960, 1536}, Gemv{"0.5B LM head", 896, 151936}})
      for (const int64_t R : {int64_t(1), int64_t(2), int64_t(4), int64_t(8)}) {
        auto x = upload16(randn(size_t(R * m.IC), 20)), w = upload16(randn(size_t(m.OC * m.IC), 21, 0.02f));
        Buffer<float> out(cuda_ops(), size_t(R * m.OC));
        const double bytes = 2.0 * double(m.IC) * double(m.OC);
        const double g = time_gpu_queued([&] { gpu16.matmul_forward_a16w16(out.data(), x.data(), w.data(), nullptr, R, m.IC, m.OC); }, reps);
        const double lt = time_gpu_queued([&] { cuda_detail::matmul_forward_a16w16_cublaslt(out.data(), x.data(), w.data(), nullptr, R, m.IC, m.OC); }, reps);
        rows.push_back({"gemv bf16", std::string(m.what) + ", " + std::to_string(R) + " rows; base = cuBLASLt", "GB/s",
                        bytes / g / 1e9, bytes / lt / 1e9, bytes / g / peak_bw});
      }
    struct Layer {
      const char* what;
      int64_t H, I, heads, kv, d;
    };
    for (const Layer L : {Layer{"0.5B", 896, 4864, 14, 2, 64}, Layer{"1.5B", 1536, 8960, 12, 2, 128}})
      for (const int64_t R : {int64_t(1), int64_t(4), int64_t(8)}) {
        const int64_t qd = L.heads * L.d, kd = L.kv * L.d, cap = 64, slots = 9;
        auto x = upload16(randn(size_t(R * L.H), 22)), wq = upload16(randn(size_t(qd * L.H), 23, 0.02f)),
             wk = upload16(randn(size_t(kd * L.H), 24, 0.02f)), wv = upload16(randn(size_t(kd * L.H), 25, 0.02f)),
             wg = upload16(randn(size_t(L.I * L.H), 26, 0.02f)), wu = upload16(randn(size_t(L.I * L.H), 27, 0.02f));
        auto bq = upload(randn(size_t(qd), 28)), bk = upload(randn(size_t(kd), 29)), bv = upload(randn(size_t(kd), 30));
        auto cosv = upload(std::vector<float>(size_t(cap * L.d / 2), 0.6f)),
             sinv = upload(std::vector<float>(size_t(cap * L.d / 2), 0.8f));
        Buffer<int32_t> slot(cuda_ops(), size_t(R)), pos(cuda_ops(), size_t(R));
        std::vector<int32_t> slots_h(static_cast<size_t>(R)), at(static_cast<size_t>(R), 17);
        for (int64_t r = 0; r < R; r++) slots_h[size_t(r)] = int32_t(r + 1);
        slot.upload(slots_h.data(), slots_h.size());
        pos.upload(at.data(), at.size());
        Buffer<uint16_t> kc(cuda_ops(), size_t(slots * cap * kd)), vc(cuda_ops(), size_t(slots * cap * kd)),
            out16(cuda_ops(), size_t(R * L.I));
        Buffer<float> q(cuda_ops(), size_t(R * qd)), k(cuda_ops(), size_t(R * kd)), v(cuda_ops(), size_t(R * kd)),
            gate(cuda_ops(), size_t(R * L.I)), up(cuda_ops(), size_t(R * L.I));
        DecodeQkv a;
        a.in.x16 = x.data(), a.wq = wq.data(), a.wk = wk.data(), a.wv = wv.data(), a.bq = bq.data(), a.bk = bk.data(),
        a.bv = bv.data(), a.cos = cosv.data(), a.sin = sinv.data(), a.slot = slot.data(), a.pos = pos.data(),
        a.q = q.data(), a.kcache = kc.data(), a.vcache = vc.data(), a.R = R, a.H = L.H, a.heads = L.heads,
        a.kv_heads = L.kv, a.d = L.d, a.slot_stride = cap * kd;
        const double qkv_bytes = 2.0 * double(qd + 2 * kd) * double(L.H), mlp_bytes = 2.0 * 2.0 * double(L.I) * double(L.H);
        const double fused = time_gpu_queued([&] { gpu16.decode_qkv_w16(a); }, reps);
        const double unfused = time_gpu_queued([&] {
          cuda_detail::matmul_forward_a16w16_cublaslt(q.data(), x.data(), wq.data(), bq.data(), R, L.H, qd);
          cuda_detail::matmul_forward_a16w16_cublaslt(k.data(), x.data(), wk.data(), bk.data(), R, L.H, kd);
          cuda_detail::matmul_forward_a16w16_cublaslt(v.data(), x.data(), wv.data(), bv.data(), R, L.H, kd);
          gpu16.rope_forward(q.data(), pos.data(), cosv.data(), sinv.data(), R, L.heads, L.d);
          gpu16.rope_forward(k.data(), pos.data(), cosv.data(), sinv.data(), R, L.kv, L.d);
          gpu16.kv_store_w16(kc.data(), vc.data(), k.data(), v.data(), slot.data(), pos.data(), R, kd, cap * kd);
        }, reps);
        const std::string rows_label = ", " + std::to_string(R) + (R == 1 ? " row" : " rows");
        rows.push_back({"decode_qkv_w16", std::string(L.what) + rows_label + "; base = 6 unfused ops", "GB/s",
                        qkv_bytes / fused / 1e9, qkv_bytes / unfused / 1e9, qkv_bytes / fused / peak_bw});
        const double fused_mlp = time_gpu_queued([&] {
          gpu16.gate_up_swiglu_w16(out16.data(), {.x16 = x.data()}, wg.data(), nullptr, wu.data(), nullptr, R, L.H, L.I,
                                   true);
        }, reps);
        const double unfused_mlp = time_gpu_queued([&] {
          cuda_detail::matmul_forward_a16w16_cublaslt(gate.data(), x.data(), wg.data(), nullptr, R, L.H, L.I);
          cuda_detail::matmul_forward_a16w16_cublaslt(up.data(), x.data(), wu.data(), nullptr, R, L.H, L.I);
          gpu16.swiglu_forward_w16(gate.data(), out16.data(), gate.data(), up.data(), R * L.I);
        }, reps);
        rows.push_back({"gate_up_swiglu_w16", std::string(L.what) + rows_label + "; base = 3 unfused ops", "GB/s",
                        mlp_bytes / fused_mlp / 1e9, mlp_bytes / unfused_mlp / 1e9, mlp_bytes / fused_mlp / peak_bw});
        // From attention's output to the down projection's input: the o projection, the residual
        // add, the norm and gate/up. Folded (decode_linear_w16 adds the residual, the gate/up op
        // normalizes its rows): 2 launches; the step before: o, the residual add with the norm, gate/up.
        auto att16 = upload16(randn(size_t(R * qd), 31)), wo = upload16(randn(size_t(L.H * qd), 32, 0.02f));
        auto stream = upload(randn(size_t(R * L.H), 33)), ln2 = upload(randn(size_t(L.H), 34));
        Buffer<float> h(cuda_ops(), size_t(R * L.H)), tmp(cuda_ops(), size_t(R * L.H)), rstd(cuda_ops(), size_t(R));
        Buffer<uint16_t> ln16(cuda_ops(), size_t(R * L.H));
        const double o_bytes = 2.0 * double(qd) * double(L.H) + mlp_bytes;
        const double folded = time_gpu_queued([&] {
          gpu16.decode_linear_w16(h.data(), {.x16 = att16.data()}, wo.data(), nullptr, stream.data(), R, qd, L.H);
          gpu16.gate_up_swiglu_w16(out16.data(), {.x = h.data(), .norm = ln2.data(), .eps = 1e-6f}, wg.data(), nullptr,
                                   wu.data(), nullptr, R, L.H, L.I, true);
        }, reps);
        const double apart = time_gpu_queued([&] {
          gpu16.matmul_forward_a16w16(tmp.data(), att16.data(), wo.data(), nullptr, R, qd, L.H);
          gpu16.residual_rmsnorm_forward_w16(h.data(), nullptr, ln16.data(), rstd.data(), stream.data(), tmp.data(),
                                             ln2.data(), R, L.H, 1e-6f);
          gpu16.gate_up_swiglu_w16(out16.data(), {.x16 = ln16.data()}, wg.data(), nullptr, wu.data(), nullptr, R, L.H,
                                   L.I, true);
        }, reps);
        rows.push_back({"o+norm+gate_up folded", std::string(L.what) + rows_label + "; base = norm apart (3 ops)",
                        "GB/s", o_bytes / folded / 1e9, o_bytes / apart / 1e9, o_bytes / folded / peak_bw});
      }
    // Past the few-row kernels, a 1.5B step at 64 and 256 rows: q/k/v as one GEMM over [Wq; Wk; Wv]
    // and RoPE with the cache store in one op, against three GEMMs, RoPE twice and the cache store;
    // gate/up as one GEMM over [Wg; Wu] into bf16 and SwiGLU on its rows, against two fp32 GEMMs and
    // SwiGLU (a model with MLP biases).
    for (const int64_t R : {int64_t(64), int64_t(256)}) {
      const int64_t H = 1536, I = 8960, heads = 12, kv = 2, d = 128, qd = heads * d, kd = kv * d, cap = 512;
      auto x = upload16(randn(size_t(R * H), 35)), wqkv = upload16(randn(size_t((qd + 2 * kd) * H), 36, 0.02f)),
           wgu = upload16(randn(size_t(2 * I * H), 37, 0.02f));
      auto bqkv = upload(randn(size_t(qd + 2 * kd), 38));
      auto cosv = upload(std::vector<float>(size_t(cap * d / 2), 0.6f)),
           sinv = upload(std::vector<float>(size_t(cap * d / 2), 0.8f));
      Buffer<int32_t> slot(cuda_ops(), size_t(R)), pos(cuda_ops(), size_t(R));
      std::vector<int32_t> slots_h(static_cast<size_t>(R)), at(static_cast<size_t>(R), 300);
      for (int64_t r = 0; r < R; r++) slots_h[size_t(r)] = int32_t(r);
      slot.upload(slots_h.data(), slots_h.size());
      pos.upload(at.data(), at.size());
      Buffer<uint16_t> kc(cuda_ops(), size_t(R * cap * kd)), vc(cuda_ops(), size_t(R * cap * kd)),
          mlp16(cuda_ops(), size_t(R * I)), gu16(cuda_ops(), size_t(R * 2 * I));
      Buffer<float> qkv(cuda_ops(), size_t(R * (qd + 2 * kd))), q(cuda_ops(), size_t(R * qd)),
          k(cuda_ops(), size_t(R * kd)), v(cuda_ops(), size_t(R * kd)), gu(cuda_ops(), size_t(R * 2 * I));
      const uint16_t* wk = wqkv.data() + qd * H;
      const uint16_t* wv = wk + kd * H;
      const double qkv_bytes = 2.0 * double(qd + 2 * kd) * double(H), mlp_bytes = 2.0 * 2.0 * double(I) * double(H);
      const std::string label = "1.5B, " + std::to_string(R) + " rows";
      const double one = time_gpu_queued([&] {
        gpu16.matmul_forward_a16w16(qkv.data(), x.data(), wqkv.data(), bqkv.data(), R, H, qd + 2 * kd);
        gpu16.rope_kv_store_w16(q.data(), qkv.data(), pos.data(), cosv.data(), sinv.data(), slot.data(), kc.data(),
                                vc.data(), R, heads, kv, d, cap * kd);
      }, reps);
      const double apart = time_gpu_queued([&] {
        gpu16.matmul_forward_a16w16(q.data(), x.data(), wqkv.data(), bqkv.data(), R, H, qd);
        gpu16.matmul_forward_a16w16(k.data(), x.data(), wk, bqkv.data() + qd, R, H, kd);
        gpu16.matmul_forward_a16w16(v.data(), x.data(), wv, bqkv.data() + qd + kd, R, H, kd);
        gpu16.rope_forward(q.data(), pos.data(), cosv.data(), sinv.data(), R, heads, d);
        gpu16.rope_forward(k.data(), pos.data(), cosv.data(), sinv.data(), R, kv, d);
        gpu16.kv_store_w16(kc.data(), vc.data(), k.data(), v.data(), slot.data(), pos.data(), R, kd, cap * kd);
      }, reps);
      rows.push_back({"qkv gemm+rope_kv_store", label + "; base = 3 GEMMs + 3 ops", "GB/s", qkv_bytes / one / 1e9,
                      qkv_bytes / apart / 1e9, qkv_bytes / one / peak_bw});
      const double mlp_one = time_gpu_queued([&] {
        gpu16.matmul_forward_o16(gu16.data(), x.data(), wgu.data(), R, H, 2 * I);
        gpu16.swiglu_rows_w16(mlp16.data(), gu16.data(), R, I);
      }, reps);
      const double mlp_apart = time_gpu_queued([&] {
        gpu16.matmul_forward_a16w16(gu.data(), x.data(), wgu.data(), nullptr, R, H, I);
        gpu16.matmul_forward_a16w16(gu.data() + R * I, x.data(), wgu.data() + I * H, nullptr, R, H, I);
        gpu16.swiglu_forward_w16(nullptr, mlp16.data(), gu.data(), gu.data() + R * I, R * I);
      }, reps);
      rows.push_back({"gate/up gemm+swiglu_rows", label + "; base = 2 GEMMs + SwiGLU", "GB/s",
                      mlp_bytes / mlp_one / 1e9, mlp_bytes / mlp_apart / 1e9, mlp_bytes / mlp_one / peak_bw});
    }
  }
  if (want("decode_attention")) {  // decode attention: 64 sequences at position 2047, the KV cache read once per step
    const int64_t R = 64, cap = 2048, stride = cap * nkv * d;
    auto kc = randn(R * stride, 6), vc = randn(R * stride, 7), q = randn(R * nh * d, 8);
    std::vector<int32_t> slot(R), pos(R, int32_t(cap - 1));
    for (int64_t r = 0; r < R; r++) slot[r] = int32_t(r);
    AttentionShape s{0, 0, nh, nkv, d, stride, nullptr};
    auto dkc = upload(kc), dvc = upload(vc), dq = upload(q);
    Buffer<int32_t> dslot(cuda_ops(), R), dpos(cuda_ops(), R);
    Buffer<float> dout(cuda_ops(), R * nh * d);
    dslot.upload(slot.data(), R);
    dpos.upload(pos.data(), R);
    const double bytes = 2.0 * double(R) * double(cap) * double(nkv * d) * 4.0;
    const double g = time_gpu([&] { gpu.attention_decode(dout.data(), dq.data(), dkc.data(), dvc.data(), dslot.data(), dpos.data(), R, s); }, reps);
    std::vector<float> out(R * nh * d);
    const double c = time_cpu([&] { cpu.attention_decode(out.data(), q.data(), kc.data(), vc.data(), slot.data(), pos.data(), R, s); });
    rows.push_back({"attention_decode", "64 rows x 2048 cached positions", "GB/s", bytes / g / 1e9, bytes / c / 1e9,
                    bytes / g / peak_bw});

    // The Bf16 table's decode over a bf16 cache: the shared-memory tiles (attention_decode_tiles.cuh,
    // the default) and the lane-group kernel (attention_decode.cuh), each against one position per
    // warp (the baseline, in the "cpu" column's place), at 1.5B's heads with long rows and at the
    // last step of model_speed_bench's batch 256 (256 positions a row), and at 0.5B's there too.
    // At one row (batch-1 decode: a few blocks, latency-bound) the time a call, in us: at the last
    // step of model_speed_bench's batch 1 for both configs, and at 4,096 positions (an RL rollout's);
    // and at the 256th position of an 8,192-position cache (early in a long generation: 128 splits,
    // 4 of them holding positions), for the 256-position cache's row beside it; and at its last
    // (128 splits, all merged: the merge's cost beside the 4,096-position row's 64).
    const Ops& gpu16 = cuda_bf16_matmul_ops();
    struct DecodeShape {
      int64_t R, cap, H, KV, d, at = -1;  // at: every row's position, -1 for the cache's last
    };
    for (const DecodeShape ds :
         {DecodeShape{64, 2048, 12, 2, 128}, DecodeShape{256, 256, 12, 2, 128}, DecodeShape{256, 256, 14, 2, 64},
          DecodeShape{1, 256, 12, 2, 128}, DecodeShape{1, 256, 14, 2, 64}, DecodeShape{1, 4096, 12, 2, 128},
          DecodeShape{1, 8192, 12, 2, 128, 255}, DecodeShape{1, 8192, 12, 2, 128}}) {
      const int64_t st = ds.cap * ds.KV * ds.d;
      auto k16 = upload16(randn(size_t(ds.R * st), 6)), v16 = upload16(randn(size_t(ds.R * st), 7));
      auto q16 = upload(randn(size_t(ds.R * ds.H * ds.d), 8));
      const int64_t at = ds.at < 0 ? ds.cap - 1 : ds.at;
      std::vector<int32_t> sl(size_t(ds.R)), ps(size_t(ds.R), int32_t(at));
      for (int64_t r = 0; r < ds.R; r++) sl[size_t(r)] = int32_t(r);
      Buffer<int32_t> dsl(cuda_ops(), size_t(ds.R)), dps(cuda_ops(), size_t(ds.R));
      dsl.upload(sl.data(), sl.size());
      dps.upload(ps.data(), ps.size());
      Buffer<float> o(cuda_ops(), size_t(ds.R * ds.H * ds.d));
      Buffer<uint16_t> o16(cuda_ops(), size_t(ds.R * ds.H * ds.d));
      const AttentionShape sh{0, 0, ds.H, ds.KV, ds.d, st, nullptr};
      const double cache_bytes = 2.0 * double(ds.R) * double(at + 1) * double(ds.KV * ds.d) * 2.0;
      using cuda_detail::CudaDecodeKernel;
      auto time_kernel = [&](CudaDecodeKernel kernel) {
        cuda_detail::cuda_set_decode_kernel(kernel);
        const double t = time_gpu_queued([&] { gpu16.attention_decode_w16(o.data(), o16.data(), q16.data(), k16.data(), v16.data(), dsl.data(), dps.data(), ds.R, sh); }, reps, 20);
        cuda_detail::cuda_set_decode_kernel(CudaDecodeKernel::Tiles);
        return t;
      };
      const double tiles = time_kernel(CudaDecodeKernel::Tiles), lg = time_kernel(CudaDecodeKernel::LaneGroups),
                   warp = time_kernel(CudaDecodeKernel::WarpPerPosition);
      const std::string shape = std::to_string(ds.R) + " rows x " + std::to_string(ds.cap) +
                                (ds.at < 0 ? "" : " at " + std::to_string(ds.at)) + ", " +
                                std::to_string(ds.H) + "/" + std::to_string(ds.KV) + " x " + std::to_string(ds.d) +
                                "; base = warp per position";
      if (ds.R == 1) {
        rows.push_back({"attn_decode tiles", shape, "us", 1e6 * tiles, 1e6 * warp, cache_bytes / tiles / peak_bw});
        rows.push_back({"attn_decode lanes", shape, "us", 1e6 * lg, 1e6 * warp, cache_bytes / lg / peak_bw});
        // The split row's merge: each head's weights once (the default, in `tiles`) against each
        // element walking every record on its own (the merge before 2026-11-28's fifth session).
        cuda_detail::cuda_set_decode_merge(cuda_detail::CudaDecodeMerge::EachElement);
        const double each = time_kernel(CudaDecodeKernel::Tiles);
        cuda_detail::cuda_set_decode_merge(cuda_detail::CudaDecodeMerge::WeightsOnce);
        const std::string merge_shape = std::to_string(ds.R) + " rows x " + std::to_string(ds.cap) +
                                        (ds.at < 0 ? "" : " at " + std::to_string(ds.at)) +
                                        ", tiles; base = each element merged on its own";
        rows.push_back(
            {"attn_decode merge", merge_shape, "us", 1e6 * tiles, 1e6 * each, cache_bytes / tiles / peak_bw});
        continue;
      }
      rows.push_back({"attn_decode tiles", shape, "GB/s", cache_bytes / tiles / 1e9, cache_bytes / warp / 1e9,
                      cache_bytes / tiles / peak_bw});
      rows.push_back({"attn_decode lanes", shape, "GB/s", cache_bytes / lg / 1e9, cache_bytes / warp / 1e9,
                      cache_bytes / lg / peak_bw});
    }
  }
  if (want("token_stats")) {  // token statistics: whole rows (512 x 151,936), and one LM-head tile (4,096 rows x 4,096 columns
     // of 151,936, the training head's tile at 4,096 rows: memory_plan.h), each read once
    const int64_t n = 512;
    auto logits = randn(n * V, 9, 3.f);
    std::vector<int32_t> targets(n);
    for (int64_t r = 0; r < n; r++) targets[r] = int32_t((r * 7919) % V);
    auto dl = upload(logits);
    Buffer<int32_t> dt(cuda_ops(), n);
    Buffer<float> lse(cuda_ops(), n), lp(cuda_ops(), n), ent(cuda_ops(), n);
    dt.upload(targets.data(), n);
    const double bytes = double(n) * double(V) * 4.0;
    const double g = time_gpu(
        [&] { gpu.token_stats(lse.data(), lp.data(), ent.data(), nullptr, dl.data(), dt.data(), n, 0, V, V, 1.f); },
        reps);
    std::vector<float> hl(n), hp(n), he(n);
    const double c = time_cpu([&] {
      cpu.token_stats(hl.data(), hp.data(), he.data(), nullptr, logits.data(), targets.data(), n, 0, V, V, 1.f);
    });
    rows.push_back({"token_stats", "512 rows x 151936", "GB/s", bytes / g / 1e9, bytes / c / 1e9, bytes / g / peak_bw});

    const int64_t tr = 4096, tc = 4096, col0 = 8 * tc;  // a middle block: it joins and carries the state
    auto tile = randn(tr * tc, 10, 3.f);
    std::vector<int32_t> tt(tr);
    for (int64_t r = 0; r < tr; r++) tt[r] = int32_t((r * 7919) % V);
    auto d_tile = upload(tile);
    Buffer<int32_t> d_tt(cuda_ops(), tr);
    d_tt.upload(tt.data(), tr);
    Buffer<float> tl(cuda_ops(), tr), tp(cuda_ops(), tr), te(cuda_ops(), tr);
    Buffer<double> st(cuda_ops(), 4 * tr);
    std::vector<double> st_host(4 * tr, 0.0);
    for (int64_t r = 0; r < tr; r++) st_host[4 * r + 1] = 1.0;  // a started row: max 0, one e^0
    st.upload(st_host.data(), st_host.size());
    const double tile_bytes = double(tr) * double(tc) * 4.0;
    const double tg = time_gpu([&] {
      gpu.token_stats(tl.data(), tp.data(), te.data(), st.data(), d_tile.data(), d_tt.data(), tr, col0, tc, V, 1.f);
    }, reps);
    std::vector<float> thl(tr), thp(tr), the(tr);
    const double tcpu = time_cpu([&] {
      cpu.token_stats(thl.data(), thp.data(), the.data(), st_host.data(), tile.data(), tt.data(), tr, col0, tc, V, 1.f);
    });
    rows.push_back({"token_stats, a head tile", "4096 rows x 4096 of 151936 columns", "GB/s", tile_bytes / tg / 1e9,
                    tile_bytes / tcpu / 1e9, tile_bytes / tg / peak_bw});

    // The same tile four values a thread (token_stats.cuh) against one: the tile one float past
    // 16-byte alignment takes the one-value kernel.
    std::vector<float> shifted(tile.size() + 1, 0.f);
    std::copy(tile.begin(), tile.end(), shifted.begin() + 1);
    auto d_tile1 = upload(shifted);
    const double t1 = time_gpu([&] {
      gpu.token_stats(tl.data(), tp.data(), te.data(), st.data(), d_tile1.data() + 1, d_tt.data(), tr, col0, tc, V, 1.f);
    }, reps);
    rows.push_back({"token_stats quads", "the head tile; base = one value a thread", "GB/s", tile_bytes / tg / 1e9,
                    tile_bytes / t1 / 1e9, tile_bytes / tg / peak_bw});
    // The tile's backward as the bf16 training step runs it now, dlogits written in bf16 only
    // (token_stats_backward_w16: 4 bytes read, 2 written a value), against what it ran before: the
    // fp32 gradient in place and the GEMM's rounding of it (4 read, 4 written; then 4 read, 2
    // written). Bytes: the new op's.
    const Ops& gpu16 = cuda_bf16_matmul_ops();
    Buffer<uint16_t> dl16(cuda_ops(), size_t(tr * tc));
    Buffer<float> d_dlogp(cuda_ops(), size_t(tr)), d_dent(cuda_ops(), size_t(tr));
    const double bwd_bytes = 6.0 * double(tr) * double(tc);
    const double b16 = time_gpu([&] {
      gpu16.token_stats_backward_w16(dl16.data(), d_tile.data(), d_tt.data(), tl.data(), te.data(), d_dlogp.data(),
                                     d_dent.data(), tr, col0, tc, 1.f);
    }, reps);
    const double b32 = time_gpu([&] {
      gpu16.token_stats_backward(d_tile.data(), d_tile.data(), d_tt.data(), tl.data(), te.data(), d_dlogp.data(),
                                 d_dent.data(), tr, col0, tc, 1.f);
      gpu16.to_bf16(dl16.data(), d_tile.data(), tr * tc);
    }, reps);
    rows.push_back({"token_stats_bwd bf16", "the head tile; base = fp32 + to_bf16", "GB/s", bwd_bytes / b16 / 1e9,
                    bwd_bytes / b32 / 1e9, bwd_bytes / b16 / peak_bw});
  }
  if (want("sampling")) {  // sampling over the full vocabulary, the logits read once at least: R rows of a decode step
    const int64_t R_max = 256;
    auto logits = randn(R_max * V, 12, 3.f);
    std::vector<double> u(R_max);
    std::mt19937_64 rng(13);
    for (double& x : u) x = std::uniform_real_distribution<double>(0.0, 1.0)(rng);
    auto dl = upload(logits);
    Buffer<double> du(cuda_ops(), R_max);
    du.upload(u.data(), R_max);
    Buffer<int32_t> dtok(cuda_ops(), R_max);
    Buffer<float> dlp(cuda_ops(), R_max);
    std::vector<int32_t> tok(R_max);
    std::vector<float> lp(R_max);
    struct Mode {
      const char* label;
      float temperature;
      int32_t top_k;
      float top_p;
    };
    auto sample_on_gpu = [&](int64_t R, const Mode& m) {
      gpu.sample_rows(dtok.data(), dlp.data(), dl.data(), du.data(), R, V, V, m.temperature, m.top_k, m.top_p);
    };
    for (const Mode m : {Mode{"t=1", 1.f, 0, 1.f}, Mode{"greedy", 0.f, 0, 1.f}, Mode{"top_p=0.9", 1.f, 0, 0.9f},
                         Mode{"top_k=50", 1.f, 50, 1.f}})
      for (const int64_t R : {int64_t(1), int64_t(64), R_max}) {
        const double bytes = double(R) * double(V) * 4.0;
        const double g = time_gpu([&] { sample_on_gpu(R, m); }, reps);
        const double c = time_cpu([&] { cpu.sample_rows(tok.data(), lp.data(), logits.data(), u.data(), R, V, V, m.temperature, m.top_k, m.top_p); });
        rows.push_back({"sample_rows", std::to_string(R) + " rows x 151936, " + m.label, "GB/s", bytes / g / 1e9,
                        bytes / c / 1e9, bytes / g / peak_bw});
      }
    // Filtered sampling split over blocks (bins, a list of the tokens the filters can keep, a walk
    // over it; sampling_filtered.cuh) against a block per row reading its row (the baseline, in the
    // "cpu" column's place). On these N(0, 9) rows top_p 0.9 keeps 5,000-7,500 tokens of 151,936.
    for (const Mode m : {Mode{"top_p=0.9", 1.f, 0, 0.9f}, Mode{"top_k=50", 1.f, 50, 1.f}})
      for (const int64_t R : {int64_t(1), int64_t(64), R_max}) {
        const double bytes = double(R) * double(V) * 4.0;
        auto run = [&] { sample_on_gpu(R, m); };
        const double split = time_gpu(run, reps);
        cuda_detail::cuda_set_filtered_sampling_split(false);
        const double block_per_row = time_gpu(run, reps);
        cuda_detail::cuda_set_filtered_sampling_split(true);
        rows.push_back({"sample_rows split", std::to_string(R) + " rows, " + m.label + "; base = a block a row", "GB/s",
                        bytes / split / 1e9, bytes / block_per_row / 1e9, bytes / split / peak_bw});
      }
    // The temperature and greedy samplers' parts read once (a running maximum and the mass against
    // it, the default since 2026-11-29) against twice (the maxima, then the masses: the baseline,
    // in the "cpu" column's place).
    for (const Mode m : {Mode{"t=1", 1.f, 0, 1.f}, Mode{"greedy", 0.f, 0, 1.f}})
      for (const int64_t R : {int64_t(1), int64_t(64), R_max}) {
        const double bytes = double(R) * double(V) * 4.0;
        auto run = [&] { sample_on_gpu(R, m); };
        const double once = time_gpu(run, reps);
        cuda_detail::cuda_set_split_sampling_one_pass(false);
        const double twice = time_gpu(run, reps);
        cuda_detail::cuda_set_split_sampling_one_pass(true);
        rows.push_back({"sample_rows one pass", std::to_string(R) + " rows, " + m.label + "; base = two passes",
                        "GB/s", bytes / once / 1e9, bytes / twice / 1e9, bytes / once / peak_bw});
      }
    // The samplers that split rows into parts (t=1 and greedy) aiming at 8 blocks per
    // multiprocessor instead of 2 (parts_for): at 64 and 256 rows, against the default (the
    // baseline, in the "cpu" column's place).
    for (const Mode m : {Mode{"t=1", 1.f, 0, 1.f}, Mode{"greedy", 0.f, 0, 1.f}})
      for (const int64_t R : {int64_t(64), R_max}) {
        const double bytes = double(R) * double(V) * 4.0;
        auto run = [&] { sample_on_gpu(R, m); };
        const double base = time_gpu(run, reps);
        cuda_detail::cuda_set_sampling_blocks_per_sm(8);
        const double eight = time_gpu(run, reps);
        cuda_detail::cuda_set_sampling_blocks_per_sm(2);
        rows.push_back({"sample_rows 8/SM", std::to_string(R) + " rows, " + m.label + "; base = 2/SM", "GB/s",
                        bytes / eight / 1e9, bytes / base / 1e9, bytes / eight / peak_bw});
      }
  }
  if (want("adamw")) {  // AdamW over 1.5B-model-sized state: 4 reads + 3 writes of fp32 per parameter (64M here)
    const int64_t n = int64_t(64) << 20;
    auto p = randn(n, 10), gr = randn(n, 11);
    std::vector<float> m(n, 0.f), v(n, 0.f);
    auto dp = upload(p), dg = upload(gr), dm = upload(m), dv = upload(v);
    const double bytes = 7.0 * 4.0 * double(n);
    const double g = time_gpu([&] { gpu.adamw(dp.data(), dg.data(), dm.data(), dv.data(), n, 1e-6f, 0.9f, 0.999f, 1e-8f, 0.01f, 0.1f, 0.001f, 1.f); }, reps);
    const double c = time_cpu([&] { cpu.adamw(p.data(), gr.data(), m.data(), v.data(), n, 1e-6f, 0.9f, 0.999f, 1e-8f, 0.01f, 0.1f, 0.001f, 1.f); });
    rows.push_back({"adamw", "64M parameters", "GB/s", bytes / g / 1e9, bytes / c / 1e9, bytes / g / peak_bw});
    // The Bf16 model's step: AdamW that writes the bf16 copy of the weights as it goes (adamw_w16)
    // against adamw and then to_bf16 over the weights (a second pass), both on the GPU: the fused
    // op's bytes (7 fp32 and one bf16 per parameter) over each one's time.
    const Ops& gpu16 = cuda_bf16_matmul_ops();
    Buffer<uint16_t> p16(cuda_ops(), size_t(n));
    const double bytes16 = (7.0 * 4.0 + 2.0) * double(n);
    const double two_pass = time_gpu([&] {
      gpu16.adamw(dp.data(), dg.data(), dm.data(), dv.data(), n, 1e-6f, 0.9f, 0.999f, 1e-8f, 0.01f, 0.1f, 0.001f, 1.f);
      gpu16.to_bf16(p16.data(), dp.data(), n);
    }, reps);
    const double fused = time_gpu([&] {
      gpu16.adamw_w16(dp.data(), p16.data(), dg.data(), dm.data(), dv.data(), n, 1e-6f, 0.9f, 0.999f, 1e-8f, 0.01f,
                      0.1f, 0.001f, 1.f);
    }, reps);
    rows.push_back({"adamw_w16", "64M parameters; base = adamw + to_bf16", "GB/s", bytes16 / fused / 1e9,
                    bytes16 / two_pass / 1e9, bytes16 / fused / peak_bw});
    // Four values a thread (streaming.cuh) against one: the same op on state one float past
    // 16-byte alignment, which takes the one-value kernel.
    auto dp1 = upload(randn(n + 1, 10)), dg1 = upload(randn(n + 1, 11)), dm1 = upload(std::vector<float>(n + 1, 0.f)),
         dv1 = upload(std::vector<float>(n + 1, 0.f));
    Buffer<uint16_t> p16_1(cuda_ops(), size_t(n + 4));
    const double one = time_gpu([&] {
      gpu16.adamw_w16(dp1.data() + 1, p16_1.data() + 1, dg1.data() + 1, dm1.data() + 1, dv1.data() + 1, n, 1e-6f, 0.9f,
                      0.999f, 1e-8f, 0.01f, 0.1f, 0.001f, 1.f);
    }, reps);
    rows.push_back({"adamw_w16 quads", "64M parameters; base = one value a thread", "GB/s", bytes16 / fused / 1e9,
                    bytes16 / one / 1e9, bytes16 / fused / peak_bw});
  }

  if (want("swiglu")) {
    // SwiGLU at 1.5B's training shape (4096 x 8960), as the bf16 model runs it: the forward writes
    // bf16 only, the backward bf16 dgate and dup. Four values a thread (kernels/cuda/swiglu.cuh)
    // against one: the same op on pointers one float past 16-byte alignment, which take the
    // one-value kernels. Bytes: 8 read and 2 written a value forward, 12 and 4 backward.
    const int64_t n = 4096 * I;
    auto dgate = upload(randn(n + 1, 12, 3.f)), dup = upload(randn(n + 1, 13)), ddout = upload(randn(n + 1, 14));
    const Ops& gpu16 = cuda_bf16_matmul_ops();
    Buffer<uint16_t> a16(cuda_ops(), size_t(n)), b16(cuda_ops(), size_t(n));
    const double fwd_bytes = 10.0 * double(n), bwd_bytes = 16.0 * double(n);
    const double fq = time_gpu([&] { gpu16.swiglu_forward_w16(nullptr, a16.data(), dgate.data(), dup.data(), n); }, reps);
    const double f1 =
        time_gpu([&] { gpu16.swiglu_forward_w16(nullptr, a16.data(), dgate.data() + 1, dup.data() + 1, n); }, reps);
    rows.push_back({"swiglu_fwd bf16", "4096 x 8960; base = one value a thread", "GB/s", fwd_bytes / fq / 1e9,
                    fwd_bytes / f1 / 1e9, fwd_bytes / fq / peak_bw});
    const double bq = time_gpu([&] {
      gpu16.swiglu_backward_w16(a16.data(), b16.data(), ddout.data(), dgate.data(), dup.data(), n);
    }, reps);
    const double b1 = time_gpu([&] {
      gpu16.swiglu_backward_w16(a16.data(), b16.data(), ddout.data() + 1, dgate.data() + 1, dup.data() + 1, n);
    }, reps);
    rows.push_back({"swiglu_bwd bf16", "4096 x 8960; base = one value a thread", "GB/s", bwd_bytes / bq / 1e9,
                    bwd_bytes / b1 / 1e9, bwd_bytes / bq / peak_bw});
  }

  if (want("rope")) {
    // RoPE on q at 1.5B's training shape (4096 rows x 12 heads x 128), in place: 8 bytes read and
    // written a value, the cos/sin tables (2,048 positions) from L2, whose values do not change the
    // time. Against the CPU backend; on the H100 before its 32-bit indices (rope.cuh) the op
    // profile put a call at about 32 us.
    const int64_t N = 4096, T = 2048;
    const std::vector<float> cos_t = randn(T * d / 2, 16), sin_t = randn(T * d / 2, 17);
    std::vector<int32_t> pos(static_cast<size_t>(N));
    for (int64_t n = 0; n < N; n++) pos[size_t(n)] = int32_t(n % 1024);
    auto q = randn(N * nh * d, 15);
    auto dq = upload(q), dcos = upload(cos_t), dsin = upload(sin_t);
    Buffer<int32_t> dpos(cuda_ops(), size_t(N));
    dpos.upload(pos.data(), pos.size());
    const double bytes = 8.0 * double(N * nh * d);
    const double g = time_gpu([&] { gpu.rope_forward(dq.data(), dpos.data(), dcos.data(), dsin.data(), N, nh, d); }, reps);
    const double c = time_cpu([&] { cpu.rope_forward(q.data(), pos.data(), cos_t.data(), sin_t.data(), N, nh, d); });
    rows.push_back({"rope_forward", "4096 rows x 12 heads x 128 (q)", "GB/s", bytes / g / 1e9, bytes / c / 1e9,
                    bytes / g / peak_bw});
  }

  if (want("attention_operands")) {
    // A 1.5B layer's attention block as the bf16 training step runs it (Transformer::attention16):
    // one q/k/v GEMM over [Wq; Wk; Wv], RoPE writing the attention's bf16 operands, the mma.sync
    // forward writing its output's rounding for o; backward from the kept operands, RoPE's
    // backward writing the one q/k/v GEMM's bf16 rows. Against the unfused block in the base
    // column: three q, k, v GEMMs, RoPE on q and k, the attention rounding q, k and v itself (and
    // again in backward), to_bf16 of its output for o (again in backward), one to_bf16 of dq, dk
    // and dv for three GEMMs. 4 x 1,024 tokens; rates are the block's GEMM and attention FLOPs
    // (backward: the GEMMs' dinp and dW, and 2.5x the attention's forward) over its time.
    const Ops& gpu16 = cuda_bf16_matmul_ops();
    const int64_t B = 4, T = 1024, N = B * T, qd = nh * d, kd = nkv * d, width = qd + 2 * kd;
    std::vector<int32_t> pos(static_cast<size_t>(N));
    for (int64_t n = 0; n < N; n++) pos[size_t(n)] = int32_t(n % T);
    Buffer<int32_t> dpos(cuda_ops(), size_t(N));
    dpos.upload(pos.data(), pos.size());
    auto cos_t = upload(randn(T * d / 2, 16)), sin_t = upload(randn(T * d / 2, 17));
    auto ln1 = upload16(randn(size_t(N * H), 51)), w_qkv = upload16(randn(size_t(width * H), 52, 0.02f));
    auto w_o = upload16(randn(size_t(H * qd), 53, 0.02f)), dout16 = upload16(randn(size_t(N * H), 54));
    Buffer<float> q(cuda_ops(), size_t(N * qd)), k(cuda_ops(), size_t(N * kd)), v(cuda_ops(), size_t(N * kd));
    Buffer<float> rows_qkv(cuda_ops(), size_t(N * width)), att(cuda_ops(), size_t(N * qd)),
        lse(cuda_ops(), size_t(B * nh * T));
    Buffer<float> o(cuda_ops(), size_t(N * H)), datt(cuda_ops(), size_t(N * qd)), dq(cuda_ops(), size_t(N * qd));
    Buffer<float> dk(cuda_ops(), size_t(N * kd)), dv(cuda_ops(), size_t(N * kd)), dln(cuda_ops(), size_t(N * H));
    Buffer<float> dw_qkv(cuda_ops(), size_t(width * H)), dw_o(cuda_ops(), size_t(H * qd));
    Buffer<uint16_t> q16(cuda_ops(), size_t(N * qd)), k16(cuda_ops(), size_t(N * kd)), v16(cuda_ops(), size_t(N * kd));
    Buffer<uint16_t> att16(cuda_ops(), size_t(N * qd)), dqkv16(cuda_ops(), size_t(N * width));
    const AttentionShape s{B, T, nh, nkv, d, T * kd, nullptr};
    const uint16_t *wq = w_qkv.data(), *wk = wq + qd * H, *wv = wk + kd * H;
    const double gemm = 2.0 * double(N) * double(H) * double(width + qd);
    const double attn = 2.0 * 2.0 * double(B) * double(nh) * double(d) * double(T) * double(T) / 2.0;
    const CudaAttentionKernel before = cuda_attention_kernel();
    cuda_set_attention_kernel(CudaAttentionKernel::Mma);
    const double old_fwd = time_gpu([&] {
      gpu16.matmul_forward_a16w16(q.data(), ln1.data(), wq, nullptr, N, H, qd);
      gpu16.matmul_forward_a16w16(k.data(), ln1.data(), wk, nullptr, N, H, kd);
      gpu16.matmul_forward_a16w16(v.data(), ln1.data(), wv, nullptr, N, H, kd);
      gpu16.rope_forward(q.data(), dpos.data(), cos_t.data(), sin_t.data(), N, nh, d);
      gpu16.rope_forward(k.data(), dpos.data(), cos_t.data(), sin_t.data(), N, nkv, d);
      gpu16.attention_forward(att.data(), lse.data(), q.data(), k.data(), v.data(), s);
      gpu16.to_bf16(att16.data(), att.data(), N * qd);
      gpu16.matmul_forward_a16w16(o.data(), att16.data(), w_o.data(), nullptr, N, qd, H);
    }, reps);
    const double new_fwd = time_gpu([&] {
      gpu16.matmul_forward_a16w16(rows_qkv.data(), ln1.data(), wq, nullptr, N, H, width);
      gpu16.rope_round_qkv_w16(q16.data(), k16.data(), v16.data(), rows_qkv.data(), dpos.data(), cos_t.data(),
                               sin_t.data(), N, nh, nkv, d);
      gpu16.attention_forward_w16(att.data(), att16.data(), lse.data(), q16.data(), k16.data(), v16.data(), s);
      gpu16.matmul_forward_a16w16(o.data(), att16.data(), w_o.data(), nullptr, N, qd, H);
    }, reps);
    rows.push_back({"attn block fwd", "4 x 1024, 1.5B layer; base = unfused", "TFLOP/s", (gemm + attn) / new_fwd / 1e12,
                    (gemm + attn) / old_fwd / 1e12, -1});
    const double old_bwd = time_gpu([&] {
      gpu16.to_bf16(att16.data(), att.data(), N * qd);
      gpu16.matmul_backward_g16(datt.data(), dw_o.data(), dout16.data(), att16.data(), w_o.data(), N, qd, H,
                                kWriteDinp);
      gpu16.attention_backward(dq.data(), dk.data(), dv.data(), datt.data(), att.data(), lse.data(), q.data(), k.data(),
                               v.data(), s);
      gpu16.rope_backward(dq.data(), dpos.data(), cos_t.data(), sin_t.data(), N, nh, d);
      gpu16.rope_backward(dk.data(), dpos.data(), cos_t.data(), sin_t.data(), N, nkv, d);
      gpu16.to_bf16(dqkv16.data(), dq.data(), N * qd);  // as the model's adjacent dq, dk, dv: one call there
      gpu16.to_bf16(dqkv16.data() + N * qd, dk.data(), N * kd);
      gpu16.to_bf16(dqkv16.data() + N * (qd + kd), dv.data(), N * kd);
      gpu16.matmul_backward_g16(dln.data(), dw_qkv.data(), dqkv16.data(), ln1.data(), wq, N, H, qd, kWriteDinp);
      gpu16.matmul_backward_g16(dln.data(), dw_qkv.data() + qd * H, dqkv16.data() + N * qd, ln1.data(), wk, N, H, kd,
                                kAddBoth);
      gpu16.matmul_backward_g16(dln.data(), dw_qkv.data() + (qd + kd) * H, dqkv16.data() + N * (qd + kd), ln1.data(),
                                wv, N, H, kd, kAddBoth);
    }, reps);
    const double new_bwd = time_gpu([&] {
      gpu16.matmul_backward_g16(datt.data(), dw_o.data(), dout16.data(), att16.data(), w_o.data(), N, qd, H,
                                kWriteDinp);
      gpu16.attention_backward_w16(dq.data(), dk.data(), dv.data(), datt.data(), att.data(), lse.data(), q16.data(),
                                   k16.data(), v16.data(), s);
      gpu16.rope_backward_round_w16(dqkv16.data(), dq.data(), dk.data(), dv.data(), nullptr, dpos.data(),
                                    cos_t.data(), sin_t.data(), N, nh, nkv, d);
      gpu16.matmul_backward_g16(dln.data(), dw_qkv.data(), dqkv16.data(), ln1.data(), wq, N, H, width, kWriteDinp);
    }, reps);
    rows.push_back({"attn block bwd", "4 x 1024, 1.5B layer; base = unfused", "TFLOP/s",
                    (2 * gemm + 2.5 * attn) / new_bwd / 1e12, (2 * gemm + 2.5 * attn) / old_bwd / 1e12, -1});
    cuda_set_attention_kernel(before);
  }

  if (want("mlp_rows")) {
    // A 1.5B layer's gate and up as the bf16 training step runs them (Transformer::mlp_rows16): one
    // GEMM over [Wg; Wu] into bf16 rows [gate | up] (matmul_forward_o16) and SwiGLU on them;
    // backward, SwiGLU's gradients as rows from the bf16 rows and a bf16 dout (the down projection's
    // matmul_backward_g16_dinp16), and one GEMM's dinp and dW. Against
    // two GEMMs with fp32 outputs, SwiGLU on those (2 x 4 bytes a value written and read twice,
    // where the rows take 2 x 2), and two backward GEMMs (the second adding into dln), in the base
    // column: the path of a model with MLP biases. 4,096 rows; rates are the GEMMs'
    // FLOPs over the whole sequence's time. In tiles of 128 x 256 (one of cuBLASLt's shapes), each
    // half's 4096 x 8960 output is 1,120 tiles, 8.5 waves of the H100's 132 multiprocessors with
    // the last half empty; the joined one's 2,240 are 17.0 waves.
    const Ops& gpu16 = cuda_bf16_matmul_ops();
    const int64_t N = 4096;
    auto ln2 = upload16(randn(size_t(N * H), 61)), w_gu = upload16(randn(size_t(2 * I * H), 62, 0.02f));
    auto dact = upload(randn(size_t(N * I), 63));
    auto dact16 = upload16(randn(size_t(N * I), 63));
    Buffer<float> gate_up(cuda_ops(), size_t(2 * N * I)), dln(cuda_ops(), size_t(N * H)),
        dw_gu(cuda_ops(), size_t(2 * I * H));
    Buffer<uint16_t> act16(cuda_ops(), size_t(N * I)), dgu16(cuda_ops(), size_t(2 * N * I)),
        gate_up16(cuda_ops(), size_t(2 * N * I));
    const uint16_t *wg = w_gu.data(), *wu = wg + I * H;
    float *gate = gate_up.data(), *up = gate + N * I;
    const double flops = 2.0 * 2.0 * double(N) * double(H) * double(I);
    const double old_fwd = time_gpu([&] {
      gpu16.matmul_forward_a16w16(gate, ln2.data(), wg, nullptr, N, H, I);
      gpu16.matmul_forward_a16w16(up, ln2.data(), wu, nullptr, N, H, I);
      gpu16.swiglu_forward_w16(nullptr, act16.data(), gate, up, N * I);
    }, reps);
    const double new_fwd = time_gpu([&] {
      gpu16.matmul_forward_o16(gate_up16.data(), ln2.data(), wg, N, H, 2 * I);
      gpu16.swiglu_rows_w16(act16.data(), gate_up16.data(), N, I);
    }, reps);
    rows.push_back({"mlp gate/up fwd", "4096 rows, 1.5B; base = two fp32-out GEMMs", "TFLOP/s", flops / new_fwd / 1e12,
                    flops / old_fwd / 1e12, -1});
    uint16_t *dg16 = dgu16.data(), *du16 = dg16 + N * I;
    const double old_bwd = time_gpu([&] {
      gpu16.swiglu_backward_w16(dg16, du16, dact.data(), gate, up, N * I);
      gpu16.matmul_backward_g16(dln.data(), dw_gu.data(), dg16, ln2.data(), wg, N, H, I, kWriteDinp);
      gpu16.matmul_backward_g16(dln.data(), dw_gu.data() + I * H, du16, ln2.data(), wu, N, H, I, kAddBoth);
    }, reps);
    const double new_bwd = time_gpu([&] {
      gpu16.swiglu_rows_backward_w16(dgu16.data(), dact16.data(), gate_up16.data(), N, I);
      gpu16.matmul_backward_g16(dln.data(), dw_gu.data(), dgu16.data(), ln2.data(), wg, N, H, 2 * I, kWriteDinp);
    }, reps);
    rows.push_back({"mlp gate/up bwd", "4096 rows, 1.5B; base = two fp32-out GEMMs", "TFLOP/s",
                    2 * flops / new_bwd / 1e12,
                    2 * flops / old_bwd / 1e12, -1});
  }

  if (want("rmsnorm")) {
    // RMSNorm's backward at 1.5B's training shape (4096 x 1536) as the bf16 step runs it: dx, dw
    // and dx's bf16 rounding in one pass, four values a thread (rmsnorm_backward.cuh), against the
    // one-value kernel (pointers one float past alignment) and a to_bf16 pass after it, as the
    // step rounded dx before. Bytes: dout, x and dx read, dx and its rounding written, 18 a value.
    const int64_t N = 4096, C = H;
    const Ops& gpu16 = cuda_bf16_matmul_ops();
    auto ddout = upload(randn(N * C + 1, 18)), dx_in = upload(randn(N * C + 1, 19, 2.f)), ddx = upload(randn(N * C + 1, 20));
    auto dw_norm = upload(randn(C + 1, 21)), drstd = upload(std::vector<float>(size_t(N), 0.7f));
    Buffer<float> ddw(cuda_ops(), size_t(C + 1));
    Buffer<uint16_t> dx16(cuda_ops(), size_t(N * C));
    const double bytes = 18.0 * double(N * C);
    const double q = time_gpu([&] {
      gpu16.rmsnorm_backward_w16(ddx.data(), dx16.data(), ddw.data(), ddout.data(), dx_in.data(), dw_norm.data(),
                                 drstd.data(), N, C);
    }, reps);
    const double one = time_gpu([&] {
      gpu16.rmsnorm_backward(ddx.data() + 1, ddw.data() + 1, ddout.data() + 1, dx_in.data() + 1, dw_norm.data() + 1,
                             drstd.data(), N, C);
      gpu16.to_bf16(dx16.data(), ddx.data() + 1, N * C);
    }, reps);
    rows.push_back({"rmsnorm_bwd bf16", "4096 x 1536; base = one value + to_bf16", "GB/s", bytes / q / 1e9,
                    bytes / one / 1e9, bytes / q / peak_bw});
    // The register-held form (the default at this width) against the loop form it replaced, both
    // four values a thread.
    cuda_set_rmsnorm_backward_loop(true);
    const double loop = time_gpu([&] {
      gpu16.rmsnorm_backward_w16(ddx.data(), dx16.data(), ddw.data(), ddout.data(), dx_in.data(), dw_norm.data(),
                                 drstd.data(), N, C);
    }, reps);
    cuda_set_rmsnorm_backward_loop(false);
    rows.push_back({"rmsnorm_bwd bf16 held", "4096 x 1536; base = the loop form", "GB/s", bytes / q / 1e9,
                    bytes / loop / 1e9, bytes / q / peak_bw});
    // The forward with the residual add in front, as every layer's two norms run it: x and delta
    // read, res and the bf16 output written (14 bytes a value), held in registers against the
    // loop form, the same call.
    {
      Buffer<float> fres(cuda_ops(), size_t(N * C)), frstd(cuda_ops(), size_t(N));
      Buffer<uint16_t> fout16(cuda_ops(), size_t(N * C));
      auto forward = [&] {
        gpu16.residual_rmsnorm_forward_w16(fres.data(), nullptr, fout16.data(), frstd.data(), dx_in.data(),
                                           ddout.data(), dw_norm.data(), N, C, 1e-6f);
      };
      const double held_fwd = time_gpu(forward, reps);
      cuda_set_rmsnorm_forward_loop(true);
      const double loop_fwd = time_gpu(forward, reps);
      cuda_set_rmsnorm_forward_loop(false);
      const double fwd_bytes = 14.0 * double(N * C);
      rows.push_back({"residual_rmsnorm_fwd held", "4096 x 1536; base = the loop form", "GB/s",
                      fwd_bytes / held_fwd / 1e9, fwd_bytes / loop_fwd / 1e9, fwd_bytes / held_fwd / peak_bw});
    }
    // The q, k and v bias gradients of a 1.5B layer's backward: column sums of the fp32 dq [4096 x
    // 1536], dk and dv [4096 x 256] (matmul_backward_a16w16 with dinp and dw null), against the
    // CPU table's. Bytes: each value read once.
    {
      const int64_t widths[3] = {C, 256, 256};
      const std::vector<float> host_src = randn(N * (C + 512), 22);
      auto dqkv = upload(host_src);
      Buffer<float> dbias(cuda_ops(), size_t(C + 512));
      auto bias_grads = [&](const Ops& ops, float* bias, const float* src) {
        for (int64_t i = 0, at = 0, col = 0; i < 3; at += N * widths[i], col += widths[i], i++)
          ops.matmul_backward_a16w16(nullptr, nullptr, bias + col, src + at, nullptr, nullptr, N, 0, widths[i]);
      };
      const double gb = time_gpu([&] { bias_grads(gpu16, dbias.data(), dqkv.data()); }, reps);
      std::vector<float> host_bias(size_t(C + 512));
      const double cb = time_cpu([&] { bias_grads(cpu_bf16_matmul_ops(), host_bias.data(), host_src.data()); });
      const double qkv_bytes = 4.0 * double(N * (C + 512));
      rows.push_back({"bias grads q, k, v", "4096 x (1536 + 256 + 256), 3 calls", "GB/s", qkv_bytes / gb / 1e9,
                      qkv_bytes / cb / 1e9, qkv_bytes / gb / peak_bw});
      // RoPE's backward with the roundings and the bias sums in one pass (rope_backward_round_w16
      // with dbias), against it without dbias and the three column sums after it, as the step ran
      // before. Bytes: a q or k value read and written in fp32 and written in bf16 (10), a v value
      // read and written in bf16 (6); the sums' reads of the apart path are not counted.
      const int64_t heads = 12, kv = 2, d = 128, qd = heads * d, kd = kv * d, width = qd + 2 * kd;
      std::vector<int32_t> pos_h(static_cast<size_t>(N));
      for (int64_t n = 0; n < N; n++) pos_h[size_t(n)] = int32_t(n % 1024);
      Buffer<int32_t> rpos(cuda_ops(), size_t(N));
      rpos.upload(pos_h.data(), pos_h.size());
      auto rcos = upload(std::vector<float>(size_t(1024 * d / 2), 0.6f)),
           rsin = upload(std::vector<float>(size_t(1024 * d / 2), 0.8f));
      Buffer<uint16_t> rows16(cuda_ops(), size_t(N * width));
      float *dq = dqkv.data(), *dk = dq + N * qd, *dv = dk + N * kd;
      const double fused = time_gpu([&] {
        gpu16.rope_backward_round_w16(rows16.data(), dq, dk, dv, dbias.data(), rpos.data(), rcos.data(), rsin.data(),
                                      N, heads, kv, d);
      }, reps);
      const double apart = time_gpu([&] {
        gpu16.rope_backward_round_w16(rows16.data(), dq, dk, dv, nullptr, rpos.data(), rcos.data(), rsin.data(), N,
                                      heads, kv, d);
        bias_grads(gpu16, dbias.data(), dqkv.data());
      }, reps);
      const double rope_bytes = double(N) * (10.0 * double(qd + kd) + 6.0 * double(kd));
      rows.push_back({"rope bwd + bias sums", "4096 rows, 1.5B; base = rope bwd + 3 column sums", "GB/s",
                      rope_bytes / fused / 1e9, rope_bytes / apart / 1e9, rope_bytes / fused / peak_bw});
    }
    // The residual add and the activations' to_bf16 at the same shape, four values a thread
    // (streaming.cuh) against one (one float off alignment): 12 and 6 bytes a value.
    const double add4 = time_gpu([&] { gpu16.add(ddx.data(), ddx.data(), ddout.data(), N * C); }, reps);
    const double add1 = time_gpu([&] { gpu16.add(ddx.data() + 1, ddx.data() + 1, ddout.data() + 1, N * C); }, reps);
    rows.push_back({"add", "4096 x 1536; base = one value a thread", "GB/s", 12.0 * double(N * C) / add4 / 1e9,
                    12.0 * double(N * C) / add1 / 1e9, 12.0 * double(N * C) / add4 / peak_bw});
    const double r4 = time_gpu([&] { gpu16.to_bf16(dx16.data(), ddx.data(), N * C); }, reps);
    const double r1 = time_gpu([&] { gpu16.to_bf16(dx16.data(), ddx.data() + 1, N * C); }, reps);
    rows.push_back({"to_bf16", "4096 x 1536; base = one value a thread", "GB/s", 6.0 * double(N * C) / r4 / 1e9,
                    6.0 * double(N * C) / r1 / 1e9, 6.0 * double(N * C) / r4 / peak_bw});
  }

  if (want("grid_barrier")) {  // What the persistent decode kernel's grid barriers cost
    // (kernels/cuda/grid_barrier.cuh; 139 a 1.5B step at one row), against the kernel boundaries
    // of a recorded graph they replace (145 a step): microseconds each, at 2 blocks a
    // multiprocessor (the kernel's grid at 1.5B) and at 1. 10,000 of each; the "speedup" is the
    // boundary's time over the barrier's.
    for (const int per_sm : {2, 1}) {
      const cuda_detail::BarrierTiming t = cuda_detail::time_grid_barriers(per_sm, 10000);
      rows.push_back({"grid barrier", std::to_string(t.blocks) + " blocks of 256; base = a graph's kernel boundary",
                      "us", 1e6 * t.barrier_s, 1e6 * t.launch_s, -1});
    }
  }

  if (want("gradient_sums")) {  // The sums over rows in a fixed order (kernels/cuda/ordered_sums.cuh),
    // each op at a 1.5B micro-batch of 4,096 rows, against the float atomics they replaced in the
    // same process (the "cpu" column: the atomic form's time; the speedup below 1 is what the same
    // bits every run cost). The embedding's ids as a batch of rollouts has them: a third of the rows
    // on four ids, a stretch of 700 rows of one id, the rest spread over 151,936.
    const Ops& gpu16 = cuda_bf16_matmul_ops();
    const int64_t N = 4096, C = 1536, V = 151936, heads = 12, kv = 2, d = 128, width = (heads + 2 * kv) * d;
    std::vector<int32_t> ids_h(static_cast<size_t>(N)), pos_h(static_cast<size_t>(N));
    for (int64_t n = 0; n < N; n++) {
      ids_h[size_t(n)] = n % 3 == 0 ? int32_t(n % 4) : int32_t((n * 7919) % V);
      pos_h[size_t(n)] = int32_t(n % 1024);
    }
    for (int64_t n = N / 2; n < N / 2 + 700; n++) ids_h[size_t(n)] = int32_t(V - 1);
    // And as a right-padded batch has them: 16 sequences of 256 rows, each the back half padding
    // (id 0), so that after the sort one run of 2,048 rows crosses 64 pieces.
    std::vector<int32_t> padded_h = ids_h;
    for (int64_t n = 0; n < N; n++)
      if (n % 256 >= 128) padded_h[size_t(n)] = 0;
    Buffer<int32_t> ids(cuda_ops(), size_t(N)), padded(cuda_ops(), size_t(N)), pos(cuda_ops(), size_t(N));
    ids.upload(ids_h.data(), ids_h.size());
    padded.upload(padded_h.data(), padded_h.size());
    pos.upload(pos_h.data(), pos_h.size());
    auto dout = upload(randn(size_t(N * width), 30)), x = upload(randn(size_t(N * C), 31)),
         w = upload(randn(size_t(C), 32)), rstd = upload(std::vector<float>(size_t(N), 0.9f));
    auto rcos = upload(std::vector<float>(size_t(1024 * d / 2), 0.6f)),
         rsin = upload(std::vector<float>(size_t(1024 * d / 2), 0.8f));
    Buffer<float> dwte(cuda_ops(), size_t(V * C)), dx(cuda_ops(), size_t(N * C)), dw(cuda_ops(), size_t(C)),
        dbias(cuda_ops(), size_t(width)), dq(cuda_ops(), size_t(N * width));
    Buffer<uint16_t> rows16(cuda_ops(), size_t(N * width));
    const float* src = dout.data();
    struct Case {
      const char* op;
      std::string shape;
      std::function<void()> run;
    };
    const std::vector<Case> cases = {
        {"embedding bwd", "4096 x 1536, ids of rollouts",
         [&] { gpu16.embedding_backward(dwte.data(), src, ids.data(), N, C); }},
        {"embedding bwd", "4096 x 1536, half of it padding",
         [&] { gpu16.embedding_backward(dwte.data(), src, padded.data(), N, C); }},
        {"bias grad", "4096 x 1536 column sums",
         [&] { gpu16.matmul_backward_a16w16(nullptr, nullptr, dbias.data(), src, nullptr, nullptr, N, 0, C); }},
        {"rmsnorm_bwd dw", "4096 x 1536, with dx",
         [&] { gpu16.rmsnorm_backward(dx.data(), dw.data(), src, x.data(), w.data(), rstd.data(), N, C); }},
        {"rope bwd + bias", "4096 rows, 1.5B q/k/v",
         [&] {
           gpu16.rope_backward_round_w16(rows16.data(), dq.data(), dq.data() + N * heads * d,
                                         dq.data() + N * (heads + kv) * d, dbias.data(), pos.data(), rcos.data(),
                                         rsin.data(), N, heads, kv, d);
         }},
        {"sum of squares", "151936 x 1536 (the embedding's grad)",
         [&] { (void)gpu16.sum_squares(dwte.data(), V * C); }},
    };
    for (const Case& c : cases) {
      cuda_set_gradient_sums_ordered(true);
      const double ordered = time_gpu(c.run, reps);
      cuda_set_gradient_sums_ordered(false);
      const double atomic = time_gpu(c.run, reps);
      cuda_set_gradient_sums_ordered(true);
      rows.push_back({c.op, c.shape + "; base = atomics", "us", 1e6 * ordered, 1e6 * atomic, -1});
    }
  }

  std::printf("cuda_ops_bench on %s (peak memory bandwidth %.0f GB/s); baseline: the CPU backend, %d threads, "
              "unless the shape names another (\"base = ...\")\n",
              device.c_str(), peak_bw / 1e9, cpu_threads());
  std::printf("%-18s %-36s %10s %10s %9s %8s\n", "op", "shape", "gpu", "baseline", "speedup", "of peak");
  nlohmann::ordered_json j = {{"bench", "cuda_ops"}, {"device", device}, {"peak_bandwidth_gbs", peak_bw / 1e9},
                              {"cpu_threads", cpu_threads()}, {"ops", nlohmann::json::array()}};
  for (const Row& r : rows) {
    // Rates, and times ("us", lower is better: the speedup is the baseline's time over the row's).
    const char* unit = r.unit == "GB/s" ? "GB" : r.unit == "us" ? "us" : "TF";
    const double speedup = r.unit == "us" ? r.cpu_rate / r.gpu_rate : r.gpu_rate / r.cpu_rate;
    std::printf("%-18s %-36s %7.2f %-2s %7.3f %-2s %8.1fx %7s\n", r.op.c_str(), r.shape.c_str(), r.gpu_rate, unit,
                r.cpu_rate, unit, speedup,
                r.fraction_of_peak < 0 ? "-" : (std::to_string(int(r.fraction_of_peak * 100 + 0.5)) + "%").c_str());
    // The baseline a row names in its shape ("...; base = atomics"), else the CPU backend's.
    const size_t base_at = r.shape.find("base = ");
    const size_t name_at = base_at + std::string("base = ").size();
    const std::string baseline_name =
        base_at == std::string::npos ? "cpu backend" : r.shape.substr(name_at, r.shape.find(';', name_at) - name_at);
    j["ops"].push_back({{"op", r.op}, {"shape", r.shape}, {"unit", r.unit}, {"gpu", r.gpu_rate},
                        {"baseline", r.cpu_rate}, {"baseline_name", baseline_name}, {"speedup", speedup},
                        {"fraction_of_peak_bandwidth", r.fraction_of_peak < 0 ? nlohmann::json() : nlohmann::json(r.fraction_of_peak)}});
  }
  std::printf("%s\n", j.dump().c_str());
  return 0;
}
