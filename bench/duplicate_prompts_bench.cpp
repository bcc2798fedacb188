// Generation of identical prompts, the shape of a self-play step's learnability rollouts (each
// valid proposal's solver prompt sampled n times: the paper's n = 8 is 24 of every 30 sequences a
// step generates) and of pass@k evaluation. The model prefills each distinct prompt once and copies
// its keys, values and logits to the other copies (Transformer::set_prefill_duplicates_once); the
// baseline, in the same process on the same prompts and seeds, computes every copy, as azr did
// before. Reports generate() wall time, prompt tokens the layers ran on, and whether both modes
// sampled the same tokens (they must: a copy's cache is its first copy's bytes). Median of
// alternating repeats. Never asserts on time.
//
//   duplicate_prompts_bench [--device cpu] [--matmul-precision fp32] [--config azr-25m|path.json]
//                           [--prompts 4] [--copies 8] [--prompt-len 512] [--new 32] [--repeats 3]
//                           [--threads 0]
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_device.h"
#include "bench/bench_util.h"
#include "kernels/backend.h"
#include "kernels/ops.h"
#include "model/generate.h"
#include "model/hf_config.h"
#include "model/presets.h"
#include "model/transformer.h"

int main(int argc, char** argv) {
  using namespace azr;
  std::string device = "cpu", precision = "fp32", config = "azr-25m";
  int64_t prompts = 4, copies = 8, prompt_len = 512, new_tokens = 32;
  int repeats = 3, threads = 0;
  CLI::App app{"Identical prompts prefilled once against every copy computed"};
  app.add_option("--device", device)->capture_default_str()->check(CLI::IsMember(kernels::backend_names()));
  app.add_option("--matmul-precision", precision)
      ->capture_default_str()
      ->check(CLI::IsMember(kernels::matmul_precision_names()));
  app.add_option("--config", config, "a preset or a config.json")->capture_default_str();
  app.add_option("--prompts", prompts, "distinct prompts")->capture_default_str()->check(CLI::Range(1, 1 << 16));
  app.add_option("--copies", copies, "copies of each")->capture_default_str()->check(CLI::Range(1, 1 << 16));
  app.add_option("--prompt-len", prompt_len)->capture_default_str()->check(CLI::Range(1, 1 << 20));
  app.add_option("--new", new_tokens, "tokens generated")->capture_default_str()->check(CLI::Range(1, 1 << 20));
  app.add_option("--repeats", repeats, "timed repeats (median)")->capture_default_str()->check(CLI::Range(1, 1000));
  app.add_option("--threads", threads, "CPU threads (0: all)")->capture_default_str()->check(CLI::Range(0, 4096));
  CLI11_PARSE(app, argc, argv);
  if (bench::skipped_for_device("duplicate_prompts", device)) return 0;
  kernels::set_cpu_threads(threads);
  model::ModelConfig c;
  try {
    const bool path = config.find('/') != std::string::npos || config.find(".json") != std::string::npos;
    c = path ? model::load_config(config) : model::preset_config(config);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "duplicate_prompts_bench: --config: %s\n", e.what());
    return 2;
  }
  const kernels::Ops& ops = bench::ops_for("duplicate_prompts", device, kernels::parse_matmul_precision(precision));
  model::Transformer m = model::Transformer::random(c, 1, 0.02f, ops);

  // Copies of a prompt side by side, as the trainer lays out a proposal's rollouts.
  std::mt19937 rng(7);
  std::vector<std::vector<int32_t>> batch;
  std::vector<uint64_t> seeds;
  for (int64_t p = 0; p < prompts; p++) {
    std::vector<int32_t> ids(static_cast<size_t>(prompt_len));
    for (int32_t& id : ids) id = int32_t(rng() % uint32_t(c.vocab_size));
    for (int64_t k = 0; k < copies; k++) {
      batch.push_back(ids);
      seeds.push_back(uint64_t(p * copies + k + 1));
    }
  }
  model::SamplingParams sp;
  sp.temperature = 1.f, sp.max_new_tokens = int32_t(new_tokens), sp.sequence_seeds = seeds;

  struct Mode {
    const char* name;
    bool once;
    std::vector<double> secs;
    model::PrefillStats stats;
    std::vector<std::vector<int32_t>> tokens;
  };
  Mode modes[2] = {{"every copy (baseline)", false, {}, {}, {}}, {"each distinct prompt once", true, {}, {}, {}}};
  auto run = [&](Mode& md) {
    m.set_prefill_duplicates_once(md.once);
    const auto t0 = bench::Clock::now();
    const std::vector<model::Completion> out = model::generate(m, batch, sp);
    md.secs.push_back(bench::secs_since(t0));
    md.stats = m.prefill_stats();
    md.tokens.clear();
    for (const model::Completion& o : out) md.tokens.push_back(o.tokens);
  };
  for (Mode& md : modes) run(md);  // warm-up: sizes the buffers of both
  for (Mode& md : modes) md.secs.clear();
  for (int r = 0; r < repeats; r++)
    for (Mode& md : modes) run(md);
  const bool same = modes[0].tokens == modes[1].tokens;
  const double base = bench::median(modes[0].secs), once = bench::median(modes[1].secs);
  const int64_t generated = int64_t(batch.size()) * new_tokens;

  std::printf("duplicate_prompts_bench: %s on %s (%s), %lld prompts x %lld copies, %lld prompt + %lld new tokens, "
              "median of %d\n",
              config.c_str(), ops.name, precision.c_str(), (long long)prompts, (long long)copies,
              (long long)prompt_len, (long long)new_tokens, repeats);
  for (const Mode& md : modes)
    std::printf("  %-28s %8.3f s   %9.1f new tok/s   prefilled %lld of %lld prompt tokens\n", md.name,
                bench::median(md.secs), double(generated) / bench::median(md.secs), (long long)md.stats.computed_tokens,
                (long long)md.stats.tokens);
  std::printf("  speed-up x%.2f; the same samples in both: %s\n", base / once, same ? "yes" : "NO");
  const nlohmann::json out = {{"bench", "duplicate_prompts"},
                              {"config", config},
                              {"device", ops.name},
                              {"precision", precision},
                              {"prompts", prompts},
                              {"copies", copies},
                              {"prompt_len", prompt_len},
                              {"new_tokens", new_tokens},
                              {"threads", kernels::cpu_threads()},
                              {"baseline_s", base},
                              {"once_s", once},
                              {"speedup", base / once},
                              {"baseline_prefilled_tokens", modes[0].stats.computed_tokens},
                              {"once_prefilled_tokens", modes[1].stats.computed_tokens},
                              {"same_samples", same}};
  std::printf("%s\n", out.dump().c_str());
  return same ? 0 : 1;
}
