// Issue 9's speed criteria on one device: decode tokens/s at several batch sizes and a training
// step's tokens/s and MFU, for real model configs with random weights, against Hugging Face
// transformers on the same device in the same run (bench/hf_speed_baseline.py: HF `generate` in
// bf16, and a PyTorch training step of the same model in bf16 autocast and in fp32), and against
// the hardware's bounds.
//
//   decode  G prompts of P random tokens, N new tokens each (temperature 1, no stop tokens).
//           tok/s = G*N / seconds of one generate(), prefill included, as HF generate is timed.
//           The decode step alone is (t(N) - t(1)) / (N - 1), from a second run that stops after
//           one token, which cancels the prefill on both sides.
//           Bytes one decode step must read: every weight once (the embedding table only through
//           its G rows unless it is also the LM head) and each sequence's cached keys and values,
//           at the run's mean position, in the types azr stores them in (below). "bw" = those
//           bytes per step / step time / the peak bandwidth: at batch 1
//           this is the criterion ">= 60% of the HBM bandwidth bound". "bf16 bound" is the
//           tokens/s a batch-1 decode would reach reading bf16 weights and cache at the peak.
//           On a table that records (a GPU), each batch runs eagerly, with the step recorded as a
//           CUDA graph ("graphs"), and where the GPU has it (sm_90) recorded with programmatic
//           dependent launch ("graphs pdl", kernels/cuda/cuda_ops.h), in the same process; at batch
//           1, recorded once more with the layers as one persistent kernel ("persistent",
//           kernels/cuda/decode_layers.cuh), programmatic launch as in "graphs pdl"; with
//           --persistent-sweep, that row again under other tunings of the kernel ("pf=": what a
//           block prefetches before each grid barrier; "gu=": the slices of gate and up it asks
//           for while the attention runs; "dn=": of down while gate and up run; "1/SM": one block
//           a multiprocessor). And
//           "apart" (recorded where the table records): the step with its norms, residual adds,
//           RoPE and cache store in launches of their own and q/k/v and gate/up in GEMMs of
//           their own, as before they were folded (the table without decode_linear_w16,
//           rope_kv_store_w16 and swiglu_rows_w16, on a second copy of the model): those folds'
//           baseline, in the same process. Every mode launches step t+1 before the host reads step
//           t's tokens (SamplingParams::launch_ahead); "one-step", the fastest mode again with each
//           step launched after the host has read the last: what launching ahead hides.
//   azr runs once per --matmul-precision (default both: fp32, and bf16 GEMM operands with fp32
//   sums, kernels/ops.h); the decode "bw" counts the weights and KV cache azr reads: fp32, or with
//   bf16 the model's bf16 copy of the weights and its bf16 cache.
//   train   random ids [B, T], the step of bench/model_workloads.h (zero_grad, forward, loss,
//           backward, clip, AdamW); --micro-batches K: K forward/backward passes of [B, T], the
//           gradients accumulating, per clip and AdamW step (an RL step's shape: the update's cost
//           shared by K micro-batches), the baseline likewise; tokens/s counts all K. Where the
//           table has the bf16 step's joined products (q/k/v and gate/up as one GEMM each, the
//           attention's operands made once in bf16), the same step again with them apart
//           ("apart": Transformer::set_joined_products(false)), their baseline in the same process.
//           In the bf16 step, the same step again with zero_grad() filling every gradient ("zero
//           filled": Transformer::set_deferred_zero_grad(false)), where by default the first
//           backward's weight-gradient GEMMs write them. On a GPU, the same step again with the
//           sums over rows in float atomics ("atomic sums": AZR_CUDA_GRADIENT_SUMS=atomic), the
//           baseline of the ordered sums that make a step's bits the same every run.
//           MFU = model FLOPs per second / the device's dense bf16 peak,
//           with model FLOPs per token = 6 * (matmul weights, the LM head included) +
//           12 * layers * q_dim * T (PaLM's appendix B; recomputation is not counted, so
//           recompute runs report model FLOPs, not hardware FLOPs). The same formula is applied
//           to the baseline's tokens/s.
// Peaks: the bandwidth is the CUDA device's (bus width x memory clock) or, on the CPU, the read
// bandwidth this program measures with sum_squares over 1 GiB; the bf16 peak comes from the
// device's name (a table below) or --peak-tflops. Unknown peaks print "n/a".
// Prints a table and one JSON line; exits 1 only when the baseline was asked for and failed.
//
//   model_speed_bench [--device cuda] [--configs a.json,b.json|preset] [--decode-batches 1,64,256]
//                     [--prompt-len 128] [--new 128] [--train-batch 4] [--seq 1024] [--steps 3]
//                     [--micro-batches 1]
//                     [--warmup 1] [--recompute] [--matmul-precision fp32,bf16] [--no-decode]
//                     [--no-train] [--no-baseline] [--no-graphs] [--op-profile] [--persistent-sweep]
//                     [--profile-range] [--ahead-sweep] [--python EXE] [--peak-tflops X] [--peak-gbs X]
//                     [--source-dir DIR]
// --op-profile: the models run on the op table's profiled twin (kernels/op_profile.h), and after
// each timed workload one more decode run, or one more training step, is split by op: calls, ms
// and share per op. Each op is then timed alone (the profile waits for the device after each), so
// the split is exact for a training step's large ops and overstates small ones (a batch-1 decode
// step's kernels: Nsight Compute measures those, scripts/gpu_check.sh profile); the profiled
// table cannot record, so there are no graphs rows.
// --ahead-sweep (cuda): at batch 1, the recorded step again with the o projection's launch asking
// L2 for 4, 8, 16 and 32 MiB of gate's and of up's weights each while the attention runs
// (DecodeLayersTuning::gate_up_ahead_bytes; 0, the default, in the rows before), for the GPU run
// that picks it; once with the few-row products' weights loaded after their wait (`no-hold`,
// DecodeLayersTuning::hold_first_weights off), the baseline of holding their first packs before it;
// and once with products of more blocks than the GPU holds as one wave taking turns (`one-wave`).
// --profile-range (cuda): after each batch's fastest row (graphs with programmatic launch where
// they apply; eager under --no-graphs), one more decode run of it inside the profilers' capture
// range (kernels/cuda/cuda_ops.h, cuda_profiler_range), so that `ncu --profile-from-start off` or
// `nsys profile --capture-range=cudaProfilerApi` measures that run's kernels alone: one prefill and
// --new - 1 decode steps, whatever the start-up and the timed runs launched before it
// (gpu_check.sh pending).
// Defaults: the Qwen2.5-0.5B and 1.5B configs of tests/model/configs, python3 ($AZR_TORCH_PYTHON).
// scripts/gpu_check.sh runs it on a GPU machine (its `bench` stage).
#include <stdlib.h>  // mkdtemp

#include <CLI/CLI.hpp>
#include <cblas.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "bench/bench_device.h"
#include "bench/bench_util.h"
#include "bench/model_workloads.h"
#include "kernels/backend.h"
#include "kernels/buffer.h"
#include "kernels/op_profile.h"
#include "model/hf_config.h"
#include "model/memory_plan.h"
#include "model/presets.h"
#ifdef AZR_HAVE_CUDA_KERNELS
#include "kernels/cuda/cuda_ops.h"
#endif

#ifndef AZR_SOURCE_DIR
#define AZR_SOURCE_DIR "."
#endif

namespace {

namespace fs = std::filesystem;
namespace m = azr::model;
using json = nlohmann::json;
using namespace azr::bench;

struct Options {
  std::string device = "cuda";
  std::vector<std::string> configs;
  std::vector<int64_t> decode_batches = {1, 64, 256};
  int64_t prompt_len = 128, new_tokens = 128;
  int64_t train_batch = 4, seq = 1024;
  int micro_batches = 1;  // --micro-batches: forward/backward passes of [train_batch, seq] per optimizer step
  int steps = 3, warmup = 1;
  bool recompute = false, decode = true, train = true, baseline = true;
  bool graphs = true;  // also decode with recorded steps where the table can record (--no-graphs: eager only)
  bool op_profile = false;
  bool profile_range = false;
  bool ahead_sweep = false;  // --ahead-sweep: the five launches' gate/up prefetch during the attention
  bool persistent_sweep = false;  // --persistent-sweep: the persistent decode kernel's tunings too
  std::vector<azr::kernels::MatmulPrecision> precisions = {azr::kernels::MatmulPrecision::Fp32,
                                                           azr::kernels::MatmulPrecision::Bf16};
  double peak_tflops = 0, peak_gbs = 0;
  std::string python = env_or("AZR_TORCH_PYTHON", "python3");
  std::string source_dir = env_or("AZR_SOURCE_DIR", AZR_SOURCE_DIR);
};

// Dense bf16 tensor-core peaks (no sparsity) from NVIDIA's data sheets, by a substring of the
// device name; the first match wins, so the more specific names come first.
double bf16_peak_flops(const std::string& device_name) {
  static const std::pair<const char*, double> table[] = {
      {"H100 PCIe", 756.5e12}, {"H100 NVL", 835.5e12}, {"H100", 989.4e12}, {"H200", 989.4e12},
      {"GH200", 989.4e12},     {"B200", 2250e12},      {"A100", 312e12},   {"L40S", 362.1e12},
      {"A10G", 70e12},         {"L4", 121e12},
  };
  for (const auto& [name, flops] : table)
    if (device_name.find(name) != std::string::npos) return flops;
  return 0;
}

// Bytes per second of a read of 1 GiB of written memory (a full pass, timed after one warm pass).
// Written: a never-written allocation reads the kernel's shared zero page, which stays in cache
// (it measured 5x this machine's memory bandwidth). On a device, through the backend's
// sum_squares; on the host, through OpenBLAS's sdot of the buffer with itself (vectorised
// whatever this file's flags, -Og in CI's check build; sum_squares' strict double sum is bound by
// its add latency, not by memory).
double measured_read_bandwidth(const azr::kernels::Ops& ops) {
  const int64_t n = int64_t(1) << 28;
  const int reps = 3;
  std::vector<float> ones(size_t(n), 1.f);
  if (ops.host_memory) {
    volatile float sink = cblas_sdot(int(n), ones.data(), 1, ones.data(), 1);
    const auto t0 = Clock::now();
    for (int i = 0; i < reps; ++i) sink = cblas_sdot(int(n), ones.data(), 1, ones.data(), 1);
    (void)sink;
    return double(reps) * double(n) * sizeof(float) / secs_since(t0);
  }
  azr::kernels::Buffer<float> x(ops, size_t(n));
  x.upload(ones.data(), size_t(n));
  ops.sum_squares(x.data(), n);
  const auto t0 = Clock::now();
  for (int i = 0; i < reps; ++i) ops.sum_squares(x.data(), n);  // returns a value: synchronous
  return double(reps) * double(n) * sizeof(float) / secs_since(t0);
}

struct Shapes {
  int64_t params = 0;          // every parameter
  int64_t matmul_weights = 0;  // weights of the GEMMs, the LM head included
  int64_t kv_row = 0;          // kv_heads * head_dim
  int64_t layers = 0, q_dim = 0, hidden = 0, vocab = 0;
  bool tied = false;
};

Shapes shapes_of(const m::ModelConfig& c) {
  Shapes s;
  s.params = m::parameter_count(c);
  s.layers = c.num_hidden_layers;
  s.hidden = c.hidden_size;
  s.vocab = c.vocab_size;
  s.q_dim = c.num_attention_heads * c.head_dim;
  s.kv_row = c.num_key_value_heads * c.head_dim;
  s.tied = c.tie_word_embeddings;
  const int64_t per_layer = s.hidden * s.q_dim * 2 + s.hidden * s.kv_row * 2 + 3 * s.hidden * c.intermediate_size;
  s.matmul_weights = s.layers * per_layer + s.vocab * s.hidden;
  return s;
}

// Bytes one decode step of R rows reads at mean cache position `pos`, with weights and the KV
// cache stored in `weight_bytes` and `kv_bytes` per value.
double decode_step_bytes(const Shapes& s, int64_t R, double pos, int weight_bytes, int kv_bytes) {
  const double weights = double(s.params - (s.tied ? 0 : s.vocab * s.hidden)) + double(R * s.hidden);
  const double kv = double(R) * double(s.layers) * 2.0 * double(s.kv_row) * (pos + 1.0);
  return weights * weight_bytes + kv * kv_bytes;
}

double flops_per_token(const Shapes& s, int64_t T) {
  return 6.0 * double(s.matmul_weights) + 12.0 * double(s.layers) * double(s.q_dim) * double(T);
}

m::ModelConfig config_of(const std::string& spec) {
  if (spec.find('/') == std::string::npos && spec.find(".json") == std::string::npos) return m::preset_config(spec);
  return m::load_config(spec);
}

std::string stem(const std::string& spec) { return fs::path(spec).stem().string(); }

std::string fmt(double v, const char* f = "%.1f") {
  if (!(v > 0)) return "n/a";
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

std::string pct(double fraction) { return fraction > 0 ? fmt(100 * fraction) + "%" : "n/a"; }

// One workload's op split: each op's calls and time per step (per decode run for decode), its share
// of the ops' summed time, for the products their achieved TFLOP/s (kernels/op_profile.h counts
// their FLOPs), and the share of the step's wall time the ops account for (the rest is host code
// between ops). Returns the JSON rows.
json print_op_profile(const std::string& title, const std::vector<azr::kernels::OpTime>& ops, double wall_s) {
  double sum = 0;
  for (const auto& t : ops) sum += t.seconds;
  std::printf("    op profile, %s: %.2f ms in ops of %.2f ms wall (%s)\n", title.c_str(), 1e3 * sum, 1e3 * wall_s,
              pct(wall_s > 0 ? sum / wall_s : 0).c_str());
  json rows = json::array();
  for (const auto& t : ops) {
    const double tflops = t.flops > 0 && t.seconds > 0 ? t.flops / t.seconds / 1e12 : 0;
    std::printf("      %-30s %7lld calls %10.3f ms %6s", t.op.c_str(), (long long)t.calls, 1e3 * t.seconds,
                pct(sum > 0 ? t.seconds / sum : 0).c_str());
    if (tflops > 0) std::printf(" %9.2f TFLOP/s", tflops);
    std::printf("\n");
    json row = {{"op", t.op}, {"calls", t.calls}, {"ms", 1e3 * t.seconds}};
    if (t.flops > 0) row["flops"] = t.flops, row["tflops"] = tflops;
    rows.push_back(row);
  }
  return rows;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  std::vector<std::string> precision_names;
  bool no_decode = false, no_train = false, no_baseline = false, no_graphs = false;
  CLI::App app{"Decode and training speed on a device against Hugging Face transformers and the hardware's bounds"};
  app.add_option("--device", o.device)->capture_default_str()->check(CLI::IsMember(azr::kernels::backend_names()));
  app.add_option("--configs", o.configs, "config.json files or presets (default: Qwen2.5-0.5B and 1.5B)")
      ->delimiter(',');
  app.add_option("--decode-batches", o.decode_batches, "decode batch sizes")
      ->delimiter(',')
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 16));
  app.add_option("--prompt-len", o.prompt_len, "decode: prompt tokens")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--new", o.new_tokens, "decode: new tokens")->capture_default_str()->check(CLI::Range(2, 1 << 20));
  app.add_option("--train-batch", o.train_batch, "train: sequences")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 16));
  app.add_option("--seq", o.seq, "train: tokens a sequence")->capture_default_str()->check(CLI::Range(2, 1 << 20));
  app.add_option("--steps", o.steps, "timed steps")->capture_default_str()->check(CLI::Range(1, 100000));
  app.add_option("--micro-batches", o.micro_batches, "train: forward/backward passes a step")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  app.add_option("--warmup", o.warmup, "untimed steps first")->capture_default_str()->check(CLI::Range(0, 100000));
  app.add_flag("--recompute", o.recompute, "train with activation recomputation");
  app.add_option("--matmul-precision", precision_names, "fp32, bf16 or both (default: both)")
      ->delimiter(',')
      ->check(CLI::IsMember(azr::kernels::matmul_precision_names()));
  app.add_flag("--no-decode", no_decode);
  app.add_flag("--no-train", no_train);
  app.add_flag("--no-baseline", no_baseline, "no Hugging Face / PyTorch baseline");
  app.add_flag("--no-graphs", no_graphs, "decode eagerly only");
  app.add_flag("--op-profile", o.op_profile, "split each workload by op");
  app.add_flag("--persistent-sweep", o.persistent_sweep, "the persistent decode kernel's tunings too");
  app.add_flag("--ahead-sweep", o.ahead_sweep,
               "cuda: batch 1 again with gate/up asked of L2 during the attention, without held weights, in one wave");
  app.add_flag("--profile-range", o.profile_range, "cuda: each batch's fastest row once more, in a profiler range");
  app.add_option("--python", o.python, "the baseline's Python (AZR_TORCH_PYTHON)")->capture_default_str();
  app.add_option("--peak-tflops", o.peak_tflops, "bf16 peak (default: from the device name)")
      ->check(CLI::PositiveNumber);
  app.add_option("--peak-gbs", o.peak_gbs, "bandwidth peak (default: the device's)")->check(CLI::PositiveNumber);
  app.add_option("--source-dir", o.source_dir, "the checkout (configs, baseline script)")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  o.decode = !no_decode, o.train = !no_train, o.baseline = !no_baseline, o.graphs = !no_graphs;
  for (const auto& [on, flag, what] : {std::tuple{o.profile_range, "--profile-range", "the profilers' range is CUDA's"},
                                       std::tuple{o.ahead_sweep, "--ahead-sweep", "a tuning of the CUDA decode step"}})
    if (on && o.device != "cuda") {
      std::fprintf(stderr, "model_speed_bench: %s: %s; --device is %s\n", flag, what, o.device.c_str());
      return 2;
    }
  if (!precision_names.empty()) {
    o.precisions.clear();
    for (const std::string& x : precision_names) o.precisions.push_back(azr::kernels::parse_matmul_precision(x));
  }
  if (o.configs.empty())
    o.configs = {o.source_dir + "/tests/model/configs/qwen2.5-0.5b.json",
                 o.source_dir + "/tests/model/configs/qwen2.5-1.5b.json"};

  if (skipped_for_device("model_speed", o.device)) return 0;
  const azr::kernels::Ops* ops = &ops_for("model_speed", o.device);

  std::string device_name = o.device;
  double peak_bw = o.peak_gbs * 1e9, peak_flops = o.peak_tflops * 1e12;
  const double measured_bw = measured_read_bandwidth(*ops);
#ifdef AZR_HAVE_CUDA_KERNELS
  if (o.device == "cuda") {
    device_name = azr::kernels::cuda_device_description(0);
    if (peak_bw == 0) peak_bw = azr::kernels::cuda_peak_bandwidth(0);
    // The bf16 rows' training attention (AZR_CUDA_ATTENTION, kernels/cuda/cuda_ops.h).
    switch (azr::kernels::cuda_attention_kernel()) {
      case azr::kernels::CudaAttentionKernel::TensorCore: device_name += "; bf16 attention: tensor cores"; break;
      case azr::kernels::CudaAttentionKernel::Mma:
        device_name += "; bf16 attention: mma.sync";
        // AZR_CUDA_ATTENTION_WARP_ROWS (kernels/cuda/cuda_ops.h): the forward's query rows a warp.
        if (azr::kernels::cuda_attention_warp_rows() != 16)
          device_name += ", forward " + std::to_string(azr::kernels::cuda_attention_warp_rows()) + " rows a warp";
        // AZR_CUDA_ATTENTION_BACKWARD: dQ added from the dK/dV kernel.
        if (azr::kernels::cuda_attention_backward() == azr::kernels::CudaAttentionBackward::Merged)
          device_name += ", merged backward";
        break;
      case azr::kernels::CudaAttentionKernel::Simt: device_name += "; bf16 attention: simt"; break;
    }
    // AZR_CUBLASLT_AUTOTUNE (kernels/cuda/cuda_ops.h): the GEMM plans time their candidates.
    if (azr::kernels::cuda_cublaslt_autotune()) device_name += "; GEMM plans autotuned";
  }
#endif
  if (peak_bw == 0) peak_bw = measured_bw;
  if (peak_flops == 0) peak_flops = bf16_peak_flops(device_name);
  std::printf("model_speed_bench: %s; peak bandwidth %.0f GB/s (a read of 1 GiB measured at %.0f GB/s); "
              "bf16 peak %s TFLOP/s\n",
              device_name.c_str(), peak_bw / 1e9, measured_bw / 1e9, fmt(peak_flops / 1e12).c_str());
  std::printf("baseline: %s\n\n", o.baseline ? (o.python + " bench/hf_speed_baseline.py").c_str() : "off");

  char tmpl[] = "/tmp/azr-speedbench-XXXXXX";
  if (!mkdtemp(tmpl)) {
    std::perror("mkdtemp");
    return 1;
  }
  const fs::path tmp = tmpl;
  bool baseline_ok = true;
  json results = json::array();
  struct Row {
    std::string config, workload, azr, hf, ratio, notes;
  };
  std::vector<Row> table;

  for (const std::string& spec : o.configs) {
    m::ModelConfig cfg;
    try {
      cfg = config_of(spec);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "model_speed_bench: --configs: %s\n", e.what());
      return 2;
    }
    const std::string name = stem(spec);
    const Shapes sh = shapes_of(cfg);
    const fs::path cfg_json = tmp / (name + ".json");
    m::write_config(cfg, cfg_json.string());
    std::printf("%s: %lld parameters (hidden %lld, layers %lld, heads %lld/%lld, mlp %lld, vocab %lld)\n", name.c_str(),
                (long long)sh.params, (long long)cfg.hidden_size, (long long)cfg.num_hidden_layers,
                (long long)cfg.num_attention_heads, (long long)cfg.num_key_value_heads,
                (long long)cfg.intermediate_size, (long long)cfg.vocab_size);
    std::fflush(stdout);

    // The baseline first, in its own process, so the two never hold device memory at once.
    json hf = nullptr;
    if (o.baseline) {
      std::string batches;
      for (int64_t g : o.decode_batches) batches += (batches.empty() ? "" : ",") + std::to_string(g);
      const std::string cmd =
          "PYTHONUNBUFFERED=1 " + sh_quote(o.python) + " " + sh_quote(o.source_dir + "/bench/hf_speed_baseline.py") +
          " --config " + sh_quote(cfg_json.string()) + " --device " + (o.device == "cuda" ? "cuda" : "cpu") +
          (o.decode ? " --decode-batches " + batches : std::string(" --decode-batches ''")) +
          " --prompt-len " + std::to_string(o.prompt_len) + " --new " + std::to_string(o.new_tokens) +
          (o.train ? " --train-batch " + std::to_string(o.train_batch) : std::string(" --train-batch 0")) +
          " --seq " + std::to_string(o.seq) + " --steps " + std::to_string(o.steps) + " --micro-batches " +
          std::to_string(o.micro_batches) + " --warmup " +
          std::to_string(o.warmup) + (o.recompute ? " --recompute" : "");
      hf = run_for_json_line(cmd, (tmp / "hf.json").string(), "model_speed_bench");
      if (!hf.is_object()) baseline_ok = false;
    }
    auto hf_decode = [&](int64_t G) -> json {
      if (hf.is_object())
        for (const json& d : hf.value("decode", json::array()))
          if (d.value("batch", int64_t(0)) == G) return d;
      return nullptr;
    };
    auto hf_train = [&](const std::string& precision) -> json {
      if (hf.is_object())
        for (const json& t : hf.value("train", json::array()))
          if (t.value("precision", "") == precision) return t;
      return nullptr;
    };

    // One random initialisation per config (most of a minute at 1.5B), kept on the host and copied
    // onto each precision's table.
    const m::Transformer initial = m::Transformer::random(cfg, 0, 0.02f);
    for (const azr::kernels::MatmulPrecision precision : o.precisions) {
      const azr::kernels::Ops& device_ops = ops_for("model_speed", o.device, precision);
      // Outside an OpProfile the profiled table only forwards each call (kernels/op_profile.h).
      const azr::kernels::Ops& precision_ops = o.op_profile ? azr::kernels::profiled_ops(device_ops) : device_ops;
      const std::string tag = std::string(" [") + azr::kernels::matmul_precision_name(precision) + "]";
#ifdef AZR_HAVE_CUDA_KERNELS
      // The peak of azr's device allocations from here (the model, its decode and training), for
      // the memory plan's check: the ops' grow-only scratch of earlier rows stays counted, so that
      // check runs one config and one precision (bench/RESULTS.md, the 3B plan).
      const bool metered = o.device == "cuda";
      if (metered) azr::kernels::cuda_reset_memory_peak();
#endif
      m::Transformer model = initial.copy_to(precision_ops);
      model.set_recompute(o.recompute);

      // The "apart" rows' table and model (above): only where the table has the folds, and not
      // under --op-profile, whose split by op needs no second model.
      azr::kernels::Ops apart_ops = precision_ops;
      apart_ops.decode_linear_w16 = nullptr;
      apart_ops.rope_kv_store_w16 = nullptr;
      apart_ops.swiglu_rows_w16 = nullptr;
      std::optional<m::Transformer> apart_model;
      if (o.decode && !o.op_profile &&
          (precision_ops.decode_linear_w16 || precision_ops.rope_kv_store_w16 || precision_ops.swiglu_rows_w16))
        apart_model.emplace(initial.copy_to(apart_ops));

      if (o.decode) {
        const int64_t P = o.prompt_len, N = o.new_tokens;
        const double mean_pos = double(P) + double(N - 1) / 2.0;
        // Each batch eagerly, and where the table can record (a GPU) also with the decode step recorded
        // and replayed (CUDA graphs, Transformer::set_decode_graphs): the same process, the same prompts.
        // On a GPU with programmatic dependent launch (sm_90), the recorded step a third time with it
        // (kernels/cuda/cuda_ops.h, cuda_set_programmatic_launch): "graphs pdl"; the other rows run
        // without it whatever AZR_CUDA_PDL says.
        // At batch 1 on a GPU, the recorded step once more with its layers as one persistent kernel
        // (kernels/cuda/decode_layers.cuh, cuda_set_decode_layers_persistent): "persistent", with
        // programmatic launch where "graphs pdl" has it, so that those two rows differ by the kernel.
        // With --persistent-sweep, the persistent row again under other tunings of the kernel
        // (cuda_set_decode_layers_tuning: what a block prefetches before each barrier, blocks a
        // multiprocessor), which change no value: for the GPU run that picks the defaults.
        struct DecodeMode {
          bool graphs, pdl, apart, persistent = false;
          bool one_row = false;  // batch 1 only (the --ahead-sweep rows)
#ifdef AZR_HAVE_CUDA_KERNELS
          azr::kernels::DecodeLayersTuning tuning{};
#endif
          bool one_step = false;  // SamplingParams::launch_ahead = false
        };
        std::vector<DecodeMode> modes = {{false, false, false}};
        const bool records = o.graphs && precision_ops.recorder.begin;
        if (records) modes.push_back({true, false, false});
        if (apart_model) modes.push_back({records, false, true});
#ifdef AZR_HAVE_CUDA_KERNELS
        const bool pdl_choice = o.device == "cuda" && azr::kernels::cuda_programmatic_launch();
        const bool persistent_choice = o.device == "cuda" && azr::kernels::cuda_decode_layers_persistent();
        if (o.device == "cuda" && o.graphs && precision_ops.recorder.begin) {
          azr::kernels::cuda_set_programmatic_launch(true);
          const bool pdl = azr::kernels::cuda_programmatic_launch_applies();
          if (pdl) modes.push_back({true, true, false});
          if (precision_ops.decode_layers_w16 && o.ahead_sweep) {
            for (const int64_t mib : {4, 8, 16, 32}) {
              DecodeMode m{true, pdl, false, false, true};
              m.tuning.gate_up_ahead_bytes = mib << 20;
              modes.push_back(m);
            }
            // The few-row products' weights loaded after their wait, as before 2026-11-29: the
            // baseline of holding their first packs before it (DecodeLayersTuning::hold_first_weights).
            DecodeMode m{true, pdl, false, false, true};
            m.tuning.hold_first_weights = false;
            modes.push_back(m);
            // Products of more blocks than the GPU holds at once as one wave of blocks taking turns
            // (DecodeLayersTuning::one_wave; off by default, written 2026-11-29 without a GPU).
            m.tuning = {};
            m.tuning.one_wave = true;
            modes.push_back(m);
          }
          if (precision_ops.decode_layers_w16) {
            modes.push_back({true, pdl, false, true});
            if (o.persistent_sweep)
              for (const azr::kernels::DecodeLayersTuning t : std::initializer_list<azr::kernels::DecodeLayersTuning>{
                       {0, 0, 0, 0}, {16384, 0, 2, 1}, {65536, 0, 2, 1}, {131072, 0, 2, 1}, {32768, 1, 2, 1},
                       {32768, 0, 1, 1}, {32768, 0, 4, 1}, {65536, 0, 4, 1}, {32768, 0, 2, 2}, {32768, 0, 2, 4}})
                modes.push_back({true, pdl, false, true, false, t});
          }
        }
        const azr::kernels::DecodeLayersTuning tuning_choice = azr::kernels::cuda_decode_layers_tuning();
#endif
        // The last of the launches' modes, the fastest configuration: --profile-range's row, and
        // again with each step launched only once the host has read the last one's tokens (the
        // baseline for launching ahead, model/generate.cpp): what the host's part of a step costs,
        // in the same process.
        DecodeMode profiled = modes.front();
        for (const DecodeMode& dm : modes)
          if (!dm.apart && !dm.persistent && !dm.one_row) profiled = dm;
        DecodeMode one_step = profiled;
        one_step.one_step = true;
        modes.push_back(one_step);
        // Every batch's rows, then the persistent kernel's at batch 1 (it is for one row), last: a
        // fault in it (a grid barrier that timed out) then costs no other row.
        std::vector<std::pair<int64_t, DecodeMode>> runs_in_order;
        for (const int64_t G : o.decode_batches)
          for (const DecodeMode& dm : modes)
            if (!dm.persistent && (!dm.one_row || G == 1)) runs_in_order.push_back({G, dm});
        for (const DecodeMode& dm : modes)
          if (dm.persistent && std::count(o.decode_batches.begin(), o.decode_batches.end(), int64_t(1)))
            runs_in_order.push_back({1, dm});
        for (const auto& [G, dm] : runs_in_order) {
          const bool graphs = dm.graphs;
          m::Transformer& runs = dm.apart ? *apart_model : model;
          runs.set_decode_graphs(graphs);
#ifdef AZR_HAVE_CUDA_KERNELS
          if (o.device == "cuda") {
            azr::kernels::cuda_set_programmatic_launch(dm.pdl);
            azr::kernels::cuda_set_decode_layers_persistent(dm.persistent);
            azr::kernels::cuda_set_decode_layers_tuning(dm.tuning);
          }
          const uint64_t persistent_before = azr::kernels::cuda_decode_layers_persistent_launches();
#endif
          std::string mode = tag + (graphs ? " graphs" : "") + (dm.pdl ? " pdl" : "") + (dm.apart ? " apart" : "") +
                             (dm.persistent ? " persistent" : "") + (dm.one_step ? " one-step" : "");
#ifdef AZR_HAVE_CUDA_KERNELS
          if (dm.persistent && o.persistent_sweep) {
            const int per_sm = dm.tuning.blocks_per_multiprocessor;
            mode += " pf=" + std::to_string(dm.tuning.prefetch_bytes_per_block / 1024) + "K" +
                    " gu=" + std::to_string(dm.tuning.gate_up_slices_at_attention) +
                    " dn=" + std::to_string(dm.tuning.down_slices_at_gate_up) +
                    (per_sm ? " " + std::to_string(per_sm) + "/SM" : "");
          }
          if (dm.tuning.gate_up_ahead_bytes > 0)
            mode += " ahead=" + std::to_string(dm.tuning.gate_up_ahead_bytes >> 20) + "M";
          if (!dm.tuning.hold_first_weights) mode += " no-hold";
          if (dm.tuning.one_wave) mode += " one-wave";
#endif
          const auto prompts = random_prompts(G, P, cfg.vocab_size, 1);
          const double t_n = timed_generate(runs, prompts, N, /*warm_up=*/true, !dm.one_step);
          const double t_1 = timed_generate(runs, prompts, 1, /*warm_up=*/false, !dm.one_step);
          const double step_s = (t_n - t_1) / double(N - 1);
          const double tps = double(G * N) / t_n;
          // A Bf16 table's model reads its bf16 copy of the weights and a bf16 KV cache.
          const int value_bytes = precision == azr::kernels::MatmulPrecision::Bf16 ? 2 : 4;
          const double bytes = decode_step_bytes(sh, G, mean_pos, value_bytes, value_bytes);
          const double bw = step_s > 0 ? bytes / step_s / peak_bw : 0;
          const double bf16_bound_tps = double(G) * peak_bw / decode_step_bytes(sh, G, mean_pos, 2, 2);
          json j = {{"config", name},
                    {"workload", "decode"},
                    {"batch", G},
                    {"matmul_precision", azr::kernels::matmul_precision_name(precision)},
                    {"prompt_len", P},
                    {"new_tokens", N},
                    {"azr_tokens_per_s", tps},
                    {"azr_seconds", t_n},
                    {"azr_seconds_one_token", t_1},
                    {"azr_decode_step_ms", 1e3 * step_s},
                    {"azr_step_bytes", bytes},
                    {"azr_bandwidth_fraction", bw},
                    {"bf16_bound_tokens_per_s", bf16_bound_tps},
                    {"decode_graphs", graphs},
                    {"programmatic_launch", dm.pdl},
                    {"ops_apart", dm.apart},
                    {"decode_layers_persistent", dm.persistent},
                    {"launch_ahead", !dm.one_step}};
#ifdef AZR_HAVE_CUDA_KERNELS
          if (dm.persistent) {
            j["decode_layers_prefetch_bytes"] = dm.tuning.prefetch_bytes_per_block;
            j["decode_layers_blocks_per_sm"] = dm.tuning.blocks_per_multiprocessor;  // 0: as many as fit
            j["decode_layers_gate_up_slices_at_attention"] = dm.tuning.gate_up_slices_at_attention;
            j["decode_layers_down_slices_at_gate_up"] = dm.tuning.down_slices_at_gate_up;
          }
          if (dm.tuning.gate_up_ahead_bytes > 0) j["decode_layers_gate_up_ahead_bytes"] = dm.tuning.gate_up_ahead_bytes;
          if (o.device == "cuda") j["decode_hold_first_weights"] = dm.tuning.hold_first_weights;
          if (o.device == "cuda") j["decode_one_wave"] = dm.tuning.one_wave;
          if (dm.persistent && azr::kernels::cuda_decode_layers_persistent_launches() == persistent_before) {
            std::printf("  note: the persistent decode kernel did not apply to %s: this row ran its launches\n",
                        name.c_str());
            j["decode_layers_persistent"] = false;
          }
#endif
          const json h = hf_decode(G);
          double ratio = 0;
          if (h.is_object()) {
            j["hf"] = h;
            if (h.value("tokens_per_s", 0.0) > 0) ratio = tps / h.value("tokens_per_s", 0.0);
            j["azr_over_hf"] = ratio;
          }
          if (o.op_profile) {
            azr::kernels::OpProfile profile;
            const double wall = timed_generate(runs, prompts, N, /*warm_up=*/false, !dm.one_step);
            j["azr_op_profile"] = print_op_profile("decode G=" + std::to_string(G) + mode + ", " +
                                                       std::to_string(N) + " new tokens", profile.take(), wall);
          }
#ifdef AZR_HAVE_CUDA_KERNELS
          // The profiled row alone: the one-step row is its copy, launched one step at a time, and a
          // second range would double the steps the profile's per-step figures divide by.
          if (o.profile_range && o.device == "cuda" && dm.graphs == profiled.graphs && dm.pdl == profiled.pdl &&
              !dm.apart && !dm.persistent && !dm.one_row && !dm.one_step) {
            azr::kernels::cuda_profiler_range(true);
            timed_generate(runs, prompts, N, /*warm_up=*/false);
            azr::kernels::cuda_profiler_range(false);
          }
#endif
          results.push_back(j);
          char notes[160];
          std::snprintf(notes, sizeof notes, "step %.2f ms, bw %.0f%% of peak, bf16 bound %.0f tok/s", 1e3 * step_s,
                        100 * bw, bf16_bound_tps);
          table.push_back({name, "decode G=" + std::to_string(G) + mode, fmt(tps),
                           h.is_object() ? fmt(h.value("tokens_per_s", 0.0)) : "n/a", fmt(ratio, "%.2f"), notes});
          std::printf("  %-27s azr %9.1f tok/s  %s\n", ("decode G=" + std::to_string(G) + mode).c_str(), tps, notes);
          std::fflush(stdout);
        }
        model.set_decode_graphs(false);
        apart_model.reset();
#ifdef AZR_HAVE_CUDA_KERNELS
        if (o.device == "cuda") azr::kernels::cuda_set_programmatic_launch(pdl_choice);
        if (o.device == "cuda") azr::kernels::cuda_set_decode_layers_persistent(persistent_choice);
        if (o.device == "cuda") azr::kernels::cuda_set_decode_layers_tuning(tuning_choice);
#endif
      }

      if (o.train) {
        m::AdamWSettings as;
        as.lr = 1e-5;
        as.weight_decay = 0.01;
        m::AdamW opt(model.ops(), model.parameters().size(), as);
        const TrainResult tr = train_steps(model, opt, o.train_batch, o.seq, o.warmup, o.steps, o.micro_batches);
        const double fpt = flops_per_token(sh, o.seq);
        auto mfu = [&](double tps) { return peak_flops > 0 ? tps * fpt / peak_flops : 0.0; };
        json j = {{"config", name},
                  {"workload", "train"},
                  {"matmul_precision", azr::kernels::matmul_precision_name(precision)},
                  {"batch", o.train_batch},
                  {"seq", o.seq},
                  {"steps", o.steps},
                  {"micro_batches", o.micro_batches},
                  {"recompute", o.recompute},
                  {"flops_per_token", fpt},
                  {"azr_tokens_per_s", tr.tokens_per_s},
                  {"azr_mfu", mfu(tr.tokens_per_s)},
                  {"azr_loss", tr.loss},
                  {"azr_phase_ms_per_step", tr.phase_ms}};
        const std::string wl = "train B=" + std::to_string(o.train_batch) + " T=" + std::to_string(o.seq) +
                               (o.micro_batches > 1 ? " x" + std::to_string(o.micro_batches) : "") + tag;
        for (const char* precision : {"bf16-autocast", "fp32"}) {
          const json h = hf_train(precision);
          if (!h.is_object()) continue;
          const double htps = h.value("tokens_per_s", 0.0);  // 0 when it failed (its "error" says why)
          j[std::string("torch_") + precision] = h;
          j[std::string("torch_") + precision + "_mfu"] = mfu(htps);
          char notes[160];
          std::snprintf(notes, sizeof notes, "MFU azr %s, torch %s %s", pct(mfu(tr.tokens_per_s)).c_str(), precision,
                        pct(mfu(htps)).c_str());
          table.push_back({name, wl + " vs " + precision, fmt(tr.tokens_per_s), fmt(htps), fmt(htps > 0 ? tr.tokens_per_s / htps : 0, "%.2f"),
                           notes});
        }
        if (!hf_train("fp32").is_object() && !hf_train("bf16-autocast").is_object())
          table.push_back({name, wl, fmt(tr.tokens_per_s), "n/a", "n/a",
                           "MFU azr " + pct(mfu(tr.tokens_per_s))});
        std::printf("  %-20s azr %9.1f tok/s  MFU %s  phases %s\n", wl.c_str(), tr.tokens_per_s,
                    pct(mfu(tr.tokens_per_s)).c_str(), json(tr.phase_ms).dump().c_str());
        // The same model's step again with one change turned off (`off`, then `on` again): its
        // baseline in the same process, as JSON azr_<key>_* and a table row "<wl> <key words>".
        auto step_without = [&](const std::string& key, const std::string& row, const std::string& versus,
                                const char* what, auto&& off, auto&& on) {
          off();
          const TrainResult b = train_steps(model, opt, o.train_batch, o.seq, o.warmup, o.steps, o.micro_batches);
          on();
          j["azr_" + key + "_tokens_per_s"] = b.tokens_per_s;
          j["azr_" + key + "_mfu"] = mfu(b.tokens_per_s);
          j["azr_" + key + "_phase_ms_per_step"] = b.phase_ms;
          table.push_back({name, wl + " " + row, fmt(b.tokens_per_s), "n/a", "n/a",
                           "MFU azr " + pct(mfu(b.tokens_per_s)) + "; " + versus + " " + pct(mfu(tr.tokens_per_s))});
          std::printf("  %-20s azr %9.1f tok/s  MFU %s  phases %s (%s)\n", wl.c_str(), b.tokens_per_s,
                      pct(mfu(b.tokens_per_s)).c_str(), json(b.phase_ms).dump().c_str(), what);
        };
        // "apart": the joined products run apart (q, k and v as three GEMMs with the attention
        // rounding its own operands, gate and up as two; Transformer::set_joined_products), where
        // the table has them.
        if (!o.op_profile && (precision_ops.rope_round_qkv_w16 || precision_ops.swiglu_rows_backward_w16))
          step_without("apart", "apart", "joined", "joined products apart", [&] { model.set_joined_products(false); },
                       [&] { model.set_joined_products(true); });
        // "zero filled": zero_grad() filling every gradient and the first backward's weight-gradient
        // GEMMs adding to the zeros (Transformer::set_deferred_zero_grad), the baseline of the products
        // that write them. Only the bf16 step defers; elsewhere both rows would run the same code.
        if (!o.op_profile && model.defers_zero_grad())
          step_without("zero_filled", "zero filled", "deferred", "zero_grad filling every gradient",
                       [&] { model.set_deferred_zero_grad(false); }, [&] { model.set_deferred_zero_grad(true); });
#ifdef AZR_HAVE_CUDA_KERNELS
        // "atomic sums": the step's sums over rows with float atomics (AZR_CUDA_GRADIENT_SUMS=atomic),
        // the baseline of the ordered sums (kernels/cuda/ordered_sums.cuh) that give the same bits
        // every run: what those cost in MFU.
        if (!o.op_profile && o.device == "cuda" && azr::kernels::cuda_gradient_sums_ordered())
          step_without("atomic_sums", "atomic sums", "ordered", "gradient sums with atomics",
                       [] { azr::kernels::cuda_set_gradient_sums_ordered(false); },
                       [] { azr::kernels::cuda_set_gradient_sums_ordered(true); });
        if (metered) {
          // The plan's training peak less its reserve (the CUDA context, fragmentation), which the
          // meter does not see: what azr's own allocations should come to.
          m::MemoryPlanSettings ps;
          ps.precision = precision == azr::kernels::MatmulPrecision::Bf16 ? m::Precision::Fp32Bf16Gemm : m::Precision::Fp32;
          ps.seq_len = o.seq;
          ps.micro_batch = o.train_batch;
          ps.recompute = o.recompute;
          const m::MemoryPlan plan = m::plan_memory(cfg, ps);
          const double peak = double(azr::kernels::cuda_memory_peak()), planned = plan.training_peak() - plan.reserve;
          j["azr_peak_device_bytes"] = peak;
          j["azr_peak_includes_decode"] = o.decode;
          j["plan_training_bytes"] = planned;
          std::printf("  %-20s device memory: peak of azr's allocations %.2f GiB%s; plan (%s, less its reserve) %.2f GiB\n",
                      "", peak / double(1ull << 30), o.decode ? " (decode included)" : "", m::precision_name(ps.precision),
                      planned / double(1ull << 30));
        }
#endif
        if (o.op_profile) {
          azr::kernels::OpProfile profile;
          const TrainResult one = train_steps(model, opt, o.train_batch, o.seq, /*warmup=*/0, /*steps=*/1);
          j["azr_op_profile"] = print_op_profile("one training step", profile.take(), one.seconds);
        }
        results.push_back(j);
        std::fflush(stdout);
      }
    }
    std::printf("\n");
  }

  std::printf("%-12s %-32s %10s %10s %7s  %s\n", "config", "workload", "azr tok/s", "HF tok/s", "azr/HF", "notes");
  for (const Row& r : table)
    std::printf("%-12s %-32s %10s %10s %7s  %s\n", r.config.c_str(), r.workload.c_str(), r.azr.c_str(), r.hf.c_str(),
                r.ratio.c_str(), r.notes.c_str());
  std::printf(
      "\ndecode: HF generate in bf16 (sdpa attention); azr [fp32] reads fp32 weights and KV cache, [bf16] bf16 ones;\n"
      "tok/s includes the prefill; step = (t(N) - t(1)) / (N - 1); bw = the bytes a step must read / step time / peak\n"
      "bandwidth.\n"
      "train: torch = transformers' Qwen2ForCausalLM with labels, clip_grad_norm_, AdamW(fused), in bf16 autocast\n"
      "over fp32 weights and in fp32 (TF32 off, as azr's GEMMs); MFU = 6N + 12 L q_dim T FLOPs per token over the\n"
      "dense bf16 peak.\n\n");
  std::error_code ec;
  fs::remove_all(tmp, ec);
  json out = {{"bench", "model_speed"},     {"device", device_name},       {"peak_bandwidth", peak_bw},
              {"measured_read_bandwidth", measured_bw}, {"bf16_peak_flops", peak_flops},
              {"baseline", o.baseline},      {"baseline_ok", baseline_ok},  {"results", results}};
  std::printf("%s\n", out.dump().c_str());
  return (o.baseline && !baseline_ok) ? 1 : 0;
}
