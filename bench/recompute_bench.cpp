// What activation recomputation costs and saves: a training step (score with activations kept ->
// backward) with every activation kept (the baseline) and with recomputation, on the same model,
// batch and threads, alternating, in one process. Reports tokens/s of each, the slowdown, and
// the activation arena of each (Transformer::activation_bytes, which `azr memory` predicts).
// Recomputation reruns the layers' forward, up to the MLP's up projection, once more per step; the
// arena shrinks by the factor the memory plan gives. Never asserts on time.
//
//   recompute_bench [--config azr-25m] [--batch 4] [--seq 256] [--steps 3] [--repeats 3] [--threads 0]
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_util.h"
#include "kernels/ops.h"
#include "model/presets.h"
#include "model/transformer.h"

int main(int argc, char** argv) {
  using namespace azr;
  std::string config = "azr-25m";
  int64_t B = 4, T = 256;
  int steps = 3, repeats = 3, threads = 0;
  CLI::App app{"Training step time and activation arena with and without activation recomputation"};
  app.add_option("--config", config, "model preset")->capture_default_str();
  app.add_option("--batch", B, "sequences per step")->capture_default_str();
  app.add_option("--seq", T, "tokens per sequence")->capture_default_str();
  app.add_option("--steps", steps, "timed training steps per measurement")->capture_default_str();
  app.add_option("--repeats", repeats, "measurements of each mode, alternating")->capture_default_str();
  app.add_option("--threads", threads, "CPU threads; 0 = all cores")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  kernels::set_cpu_threads(threads);
  const model::ModelConfig c = model::preset_config(config);
  model::Transformer m = model::Transformer::random(c, 1);
  std::mt19937 rng(7);
  std::vector<std::vector<int32_t>> seqs(static_cast<size_t>(B), std::vector<int32_t>(static_cast<size_t>(T)));
  for (auto& s : seqs)
    for (int32_t& id : s) id = int32_t(rng() % uint32_t(c.vocab_size));
  const model::SequenceBatch batch = model::SequenceBatch::from(seqs);
  const std::vector<float> dlogp(size_t(B * T), -1.f / float(B * T));

  // tokens/s of `steps` training steps; the arena of the last.
  auto run = [&](bool recompute, size_t* arena) {
    m.set_recompute(recompute);
    m.score(batch, 1.f, true);  // warm-up: sizes the arena for this mode
    m.backward(dlogp, {});
    const auto t0 = bench::Clock::now();
    for (int s = 0; s < steps; s++) {
      m.score(batch, 1.f, true);
      m.backward(dlogp, {});
    }
    const double secs = bench::secs_since(t0);
    *arena = m.activation_bytes();
    return double(B * T * steps) / secs;
  };
  // The arena only grows, and `m` runs the kept mode first, so its arena is the kept mode's; the
  // recomputing mode's own need comes from a model that has run only that mode.
  size_t kept_bytes = 0, recomputed_bytes = 0;
  {
    model::Transformer fresh = model::Transformer::random(c, 1);
    fresh.set_recompute(true);
    fresh.score(batch, 1.f, true);
    recomputed_bytes = fresh.activation_bytes();
  }
  std::vector<double> kept, recomputed;
  for (int r = 0; r < repeats; r++) {
    size_t ignored = 0;
    kept.push_back(run(false, &kept_bytes));
    recomputed.push_back(run(true, &ignored));
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const double k = median(kept), rc = median(recomputed);
  std::printf("recompute_bench: %s (%zu parameters), batch %lld x %lld tokens, %d steps x %d repeats, %d threads, %u CPUs\n",
              config.c_str(), m.parameters().size(), (long long)B, (long long)T, steps, repeats, kernels::cpu_threads(),
              std::thread::hardware_concurrency());
  std::printf("  %-28s %10.1f tokens/s   activations %8.1f MiB\n", "kept (baseline)", k, double(kept_bytes) / (1 << 20));
  std::printf("  %-28s %10.1f tokens/s   activations %8.1f MiB\n", "recomputed", rc,
              double(recomputed_bytes) / (1 << 20));
  std::printf("  step time x%.2f, activation memory x%.3f\n", k / rc, double(recomputed_bytes) / double(kept_bytes));
  const nlohmann::json out = {{"bench", "recompute"},
                              {"config", config},
                              {"batch", B},
                              {"seq", T},
                              {"threads", kernels::cpu_threads()},
                              {"kept_tokens_per_s", k},
                              {"recomputed_tokens_per_s", rc},
                              {"slowdown", k / rc},
                              {"kept_activation_bytes", kept_bytes},
                              {"recomputed_activation_bytes", recomputed_bytes}};
  std::printf("%s\n", out.dump().c_str());
  return 0;
}
