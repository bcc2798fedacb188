// CPU training and generation throughput of azr's Transformer against the same model in eager
// PyTorch (bench/torch_transformer_bench.py, run with /usr/bin/python3 = Debian torch 1.13.1 CPU)
// on the same machine, in the same run, with the same shapes and thread count.
//   configs: preset_config("azr-tiny") (0.77M params) and preset_config("azr-25m") (25.3M).
//   train:    random ids [B, T]; one step = score(batch, 1, true) -> cross_entropy_loss (mask
//             t >= 1: token-mean over B*(T-1)) -> backward -> clip_grad_norm(1.0) ->
//             AdamW(lr 1e-5, wd 0.01).step, zero_grad before each step. torch: forward,
//             log_softmax, the same loss, backward, clip_grad_norm_, AdamW.step, zero_grad.
//             tokens/s = B*T*steps / seconds, after warm-up steps. Phases are timed on the same steps.
//   generate: G prompts of P random tokens, N new tokens each at temperature 1 (no stop tokens, so
//             every sequence runs N tokens); azr: model::generate (KV cache); torch: prefill + one
//             token per step with a KV cache and torch.multinomial. new tokens/s = G*N / seconds,
//             prefill included, after one short warm-up generation.
// torch runs twice per repeat, both with OPENBLAS_NUM_THREADS = the thread count: with
// torch.set_num_threads(threads) and with torch.set_num_threads(1) (Debian's torch keeps its OpenMP
// pool beside OpenBLAS's pthreads, which oversubscribes the cores; intra-op 1 is usually faster).
// The ratio is against the faster of the two.
// Each measurement is repeated --repeats times (azr and torch alternating); the table shows the
// median. Prints a table and one JSON line. Never asserts on time; exits 1 only when the torch
// baseline cannot run.
//
//   transformer_bench [--threads N] [--configs azr-tiny,azr-25m] [--repeats R] [--quick]
//                     [--tiny-batch 8] [--25m-batch 4] [--seq 256] [--steps 5] [--25m-steps 3]
//                     [--warmup 2] [--gen-prompts 8] [--prompt-len 32] [--new 128]
//                     [--no-train] [--no-generate] [--no-torch] [--python EXE] [--source-dir DIR]
// Defaults: threads = all cores, python /usr/bin/python3 ($AZR_TORCH_PYTHON), source dir = the
// compile-time CMAKE_SOURCE_DIR ($AZR_SOURCE_DIR).
#include <CLI/CLI.hpp>
#include <stdlib.h>  // mkdtemp
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_util.h"
#include "bench/model_workloads.h"
#include "kernels/ops.h"
#include "model/adamw.h"
#include "model/generate.h"
#include "model/hf_config.h"
#include "model/losses.h"
#include "model/presets.h"
#include "model/transformer.h"

#ifndef AZR_SOURCE_DIR
#define AZR_SOURCE_DIR "."
#endif

namespace {

namespace fs = std::filesystem;
namespace m = azr::model;
using json = nlohmann::json;
using namespace azr::bench;

struct Options {
  int threads = 0;
  std::vector<std::string> configs = {"azr-tiny", "azr-25m"};
  int repeats = 1;
  int64_t tiny_batch = 8, big_batch = 4, seq = 256;
  int steps = 5, big_steps = 3, warmup = 2, big_warmup = 1;
  std::vector<int64_t> gen_prompts = {8, 1};
  int64_t prompt_len = 32, new_tokens = 128;
  bool train = true, gen = true, torch = true;
  std::string python = env_or("AZR_TORCH_PYTHON", "/usr/bin/python3");
  std::string source_dir = env_or("AZR_SOURCE_DIR", AZR_SOURCE_DIR);
};

double azr_generate(m::Transformer& model, int64_t G, int64_t P, int64_t N, double* seconds) {
  *seconds = timed_generate(model, random_prompts(G, P, model.config().vocab_size, 1), N);
  return double(G * N) / *seconds;
}

// Runs the torch script; returns its JSON line or null.
// intra = torch.set_num_threads(intra); OpenBLAS (Debian's pthread build, which set_num_threads
// does not reach) always gets the bench's thread count via OPENBLAS_NUM_THREADS.
json run_torch(const Options& o, const fs::path& config_json, const fs::path& tmp, const std::string& args, int intra) {
  const fs::path out = tmp / "torch.json";
  const fs::path script = fs::path(o.source_dir) / "bench" / "torch_transformer_bench.py";
  const std::string cmd = "OPENBLAS_NUM_THREADS=" + std::to_string(azr::kernels::cpu_threads()) + " " +
                          sh_quote(o.python) + " " + sh_quote(script.string()) + " --config " +
                          sh_quote(config_json.string()) + " --threads " + std::to_string(intra) + " " + args;
  return run_for_json_line(cmd, out.string(), "transformer_bench");
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"CPU training and generation throughput of azr's Transformer against eager PyTorch"};
  app.add_option("--threads", o.threads, "CPU threads; 0 = all cores")->capture_default_str();
  app.add_option("--configs", o.configs, "comma-separated presets")->delimiter(',')->capture_default_str();
  app.add_option("--repeats", o.repeats, "measurements of each workload (median shown), at least 1")
      ->capture_default_str();
  app.add_flag_callback(
      "--quick",
      [&o] {
        o.seq = 64;
        o.steps = o.big_steps = 2;
        o.warmup = o.big_warmup = 1;
        o.new_tokens = 16;
      },
      "short run: --seq 64 --steps 2 --25m-steps 2 --warmup 1 --new 16");
  app.add_option("--tiny-batch", o.tiny_batch, "azr-tiny training batch")->capture_default_str();
  app.add_option("--25m-batch", o.big_batch, "azr-25m training batch")->capture_default_str();
  app.add_option("--seq", o.seq, "training tokens per sequence")->capture_default_str();
  app.add_option("--steps", o.steps, "timed training steps of azr-tiny")->capture_default_str();
  app.add_option("--25m-steps", o.big_steps, "timed training steps of azr-25m")->capture_default_str();
  app.add_option_function<int>(
      "--warmup", [&o](int w) { o.warmup = o.big_warmup = w; },
      "untimed training steps of every config (default 2 for azr-tiny, 1 for azr-25m)");
  app.add_option("--gen-prompts", o.gen_prompts, "comma-separated generation batch sizes")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--prompt-len", o.prompt_len, "tokens per generation prompt")->capture_default_str();
  app.add_option("--new", o.new_tokens, "new tokens per generated sequence")->capture_default_str();
  app.add_flag_callback("--no-train", [&o] { o.train = false; }, "skip the training workloads");
  app.add_flag_callback("--no-generate", [&o] { o.gen = false; }, "skip the generation workloads");
  app.add_flag_callback("--no-torch", [&o] { o.torch = false; }, "skip the PyTorch baseline");
  app.add_option("--python", o.python, "python3 with torch ($AZR_TORCH_PYTHON)")->capture_default_str();
  app.add_option("--source-dir", o.source_dir, "repository root, for the torch script ($AZR_SOURCE_DIR)")
      ->capture_default_str();
  // In command-line order, as before: --quick is a preset that a later option overrides and an
  // earlier one does not.
  for (CLI::Option* opt : app.get_options()) opt->trigger_on_parse();
  CLI11_PARSE(app, argc, argv);
  o.repeats = std::max(1, o.repeats);
  azr::kernels::set_cpu_threads(o.threads);
  const int threads = azr::kernels::cpu_threads();
  const unsigned cpus = std::thread::hardware_concurrency();

  char tmpl[] = "/tmp/azr-tfbench-XXXXXX";
  if (!mkdtemp(tmpl)) {
    std::perror("mkdtemp");
    return 1;
  }
  const fs::path tmp = tmpl;

  std::printf("transformer_bench: %u CPUs, %d threads, ops=%s, %d repeat(s); torch: %s\n\n", cpus, threads,
              azr::kernels::cpu_ops().name, o.repeats, o.torch ? o.python.c_str() : "off");

  json rows = json::array();
  bool torch_ok = true;
  struct Row {
    std::string config, workload;
    double azr = 0, torch_n = 0, torch_1 = 0;
    double best() const { return std::max(torch_n, torch_1); }
  };
  std::vector<Row> table;
  // torch variants: intra-op threads = the bench's count, and 1 (BLAS still on all threads).
  std::vector<int> intras = {threads};
  if (threads > 1) intras.push_back(1);
  auto torch_key = [](int intra) { return "torch_intra" + std::to_string(intra); };

  for (const std::string& name : o.configs) {
    const m::ModelConfig cfg = m::preset_config(name);
    const fs::path cfg_json = tmp / (name + ".json");
    m::write_config(cfg, cfg_json.string());
    m::Transformer model = m::Transformer::random(cfg, 0);
    const size_t n_params = model.parameters().size();
    std::printf("%s: %zu parameters (hidden %lld, layers %lld, heads %lld/%lld, mlp %lld, vocab %lld)\n",
                name.c_str(), n_params, (long long)cfg.hidden_size, (long long)cfg.num_hidden_layers,
                (long long)cfg.num_attention_heads, (long long)cfg.num_key_value_heads,
                (long long)cfg.intermediate_size, (long long)cfg.vocab_size);
    const bool big = name != "azr-tiny";

    // One workload: azr then each torch variant, `repeats` times; returns the row.
    auto measure = [&](const std::string& wl, json j, auto&& azr_run, const std::string& torch_args) {
      std::vector<double> a_tps;
      std::map<int, std::vector<double>> t_tps;
      json a_runs = json::array();
      std::map<int, json> t_runs;
      for (int r = 0; r < o.repeats; ++r) {
        json ar = azr_run();
        a_tps.push_back(ar["tokens_per_s"].get<double>());
        a_runs.push_back(ar);
        std::printf("  %-26s azr                  %9.1f tok/s %s\n", wl.c_str(), a_tps.back(),
                    ar.contains("phase_ms_per_step") ? ar["phase_ms_per_step"].dump().c_str() : "");
        if (o.torch)
          for (int intra : intras) {
            json tj = run_torch(o, cfg_json, tmp, torch_args, intra);
            if (!tj.is_object()) {
              torch_ok = false;
              continue;
            }
            t_tps[intra].push_back(tj["tokens_per_s"].get<double>());
            t_runs[intra].push_back(tj);
            std::printf("  %-26s torch intra-op %d BLAS %d %9.1f tok/s %s\n", wl.c_str(), intra, threads,
                        t_tps[intra].back(),
                        tj.contains("phase_ms_per_step") ? tj["phase_ms_per_step"].dump().c_str() : "");
          }
        std::fflush(stdout);
      }
      Row row{name, wl, median(a_tps), median(t_tps[threads]), threads > 1 ? median(t_tps[1]) : 0.0};
      j["config"] = name;
      j["params"] = n_params;
      j["azr_tokens_per_s"] = row.azr;
      j["azr_runs"] = a_runs;
      for (int intra : intras)
        if (!t_tps[intra].empty()) {
          j[torch_key(intra) + "_tokens_per_s"] = median(t_tps[intra]);
          j[torch_key(intra) + "_runs"] = t_runs[intra];
        }
      if (row.best() > 0) {
        j["torch_best_tokens_per_s"] = row.best();
        j["ratio_vs_best_torch"] = row.azr / row.best();
      }
      table.push_back(row);
      rows.push_back(j);
    };

    if (o.train) {
      const int64_t B = big ? o.big_batch : o.tiny_batch, T = o.seq;
      const int steps = big ? o.big_steps : o.steps, warmup = big ? o.big_warmup : o.warmup;
      m::AdamWSettings as;
      as.lr = 1e-5;
      as.weight_decay = 0.01;
      m::AdamW opt(model.ops(), n_params, as);
      measure("train B=" + std::to_string(B) + " T=" + std::to_string(T),
              {{"workload", "train"}, {"B", B}, {"T", T}, {"steps", steps}, {"warmup", warmup}},
              [&]() -> json {
                TrainResult tr = train_steps(model, opt, B, T, warmup, steps);
                return {{"tokens_per_s", tr.tokens_per_s}, {"seconds", tr.seconds}, {"loss", tr.loss},
                        {"phase_ms_per_step", tr.phase_ms}};
              },
              "train --batch " + std::to_string(B) + " --seq " + std::to_string(T) + " --warmup " +
                  std::to_string(warmup) + " --steps " + std::to_string(steps));
    }

    if (o.gen) {
      for (const int64_t G : o.gen_prompts) {
        const int64_t P = o.prompt_len, N = o.new_tokens;
        measure("generate G=" + std::to_string(G) + " P=" + std::to_string(P) + " N=" + std::to_string(N),
                {{"workload", "generate"}, {"G", G}, {"P", P}, {"N", N}},
                [&]() -> json {
                  double sec = 0;
                  const double tps = azr_generate(model, G, P, N, &sec);
                  return {{"tokens_per_s", tps}, {"seconds", sec}};
                },
                "generate --prompts " + std::to_string(G) + " --prompt-len " + std::to_string(P) + " --new " +
                    std::to_string(N));
      }
    }
    std::printf("\n");
  }

  std::printf("%-9s %-26s %10s %12s %12s %8s\n", "config", "workload", "azr tok/s", "torch intraN", "torch intra1",
              "azr/best");
  for (const Row& r : table)
    std::printf("%-9s %-26s %10.1f %12.1f %12.1f %8.2f\n", r.config.c_str(), r.workload.c_str(), r.azr, r.torch_n,
                r.torch_1, r.best() > 0 ? r.azr / r.best() : 0.0);
  std::printf(
      "\ntrain tok/s = B*T*steps / s for zero_grad + forward + loss + backward + clip + AdamW. generate tok/s = new\n"
      "tokens / s, prefill included. Medians of %d repeat(s). azr: %d threads (OpenMP + OpenBLAS-openmp). torch:\n"
      "OPENBLAS_NUM_THREADS=%d always; intraN = torch.set_num_threads(%d), intra1 = torch.set_num_threads(1) (Debian's\n"
      "torch runs its OpenMP pool beside OpenBLAS's pthreads, which oversubscribes the cores; intra1 is often faster).\n"
      "azr/best = azr / the faster torch variant.\n\n",
      o.repeats, threads, threads, threads);
  std::error_code ec;
  fs::remove_all(tmp, ec);

  json out = {{"bench", "transformer"}, {"cpus", cpus},       {"threads", threads},
              {"repeats", o.repeats},   {"torch", o.torch},   {"torch_ok", torch_ok},
              {"ops", azr::kernels::cpu_ops().name},          {"results", rows}};
  std::printf("%s\n", out.dump().c_str());
  return (o.torch && !torch_ok) ? 1 : 0;
}
