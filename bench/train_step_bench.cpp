// Where a self-play step's time goes, and what the one-engine design saves.
//
// Runs real steps of the trainer (trainer/step.h: the real model generating, the real sandbox,
// a real SQLite buffer holding the shipped test seed tasks) in process, and reports the phases
// (plan, generate, sandbox, update) with tokens/s. The model is the config's, as `azr train`
// makes it (model.path, else a new model.preset): the quickstart's bootstrapped azr-tiny writes
// valid tasks, so the sandbox validates, rolls out and grades as in a run; a new random model
// writes none and the sandbox share is 0. Run it from the repository root (model.path is
// relative to it). The baseline, measured in the same process on
// the same sequences, is the reference's design: it recomputes the "old" log-probs with a
// separate forward pass of the actor before every update (its sampler is another engine, so
// the sampler's log-probs cannot be used). azr takes them from its own sampler; the bench times
// the forward pass that this makes unnecessary and gives it as a share of the step.
//
//   build/bin/train_step_bench [--config configs/quickstart.toml] [--steps 3] [--threads 0]
//                              [--seed-tasks tests/trainer/fixtures/seed_tasks.jsonl]
// Prints a table and one JSON line.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "bench/bench_util.h"
#include "buffer/task_jsonl.h"
#include "kernels/ops.h"
#include "trainer/model_setup.h"
#include "proposer/seed.h"
#include "sandbox/pool.h"
#include "trainer/config.h"
#include "trainer/dist.h"
#include "trainer/policy.h"
#include "trainer/step.h"

namespace fs = std::filesystem;
using namespace azr;

int main(int argc, char** argv) {
  CLI::App app{"Phases of a self-play step, and the old-log-prob forward pass azr does not need"};
  std::string config = "configs/quickstart.toml", seed_tasks = "tests/trainer/fixtures/seed_tasks.jsonl";
  int steps = 3, threads = 0;
  app.add_option("--config", config, "run config (model preset, batch sizes)")->capture_default_str();
  app.add_option("--steps", steps, "steps to time (after one warm-up step)")->capture_default_str();
  app.add_option("--threads", threads, "model threads; 0 = all cores")->capture_default_str();
  app.add_option("--seed-tasks", seed_tasks, "JSONL of tasks for the buffer")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  trainer::TrainConfig cfg = trainer::load_config(config);
  try {  // as azr train: micro_batch_size = 0 is planned from memory
    cfg.algorithm.micro_batch_size = trainer::resolve_micro_batch(cfg).size;
  } catch (const trainer::UserError& e) {
    std::fprintf(stderr, "train_step_bench: %s\n", e.what());
    return 2;
  }
  const int cores = int(std::max(1u, std::thread::hardware_concurrency()));
  kernels::set_cpu_threads(threads > 0 ? threads : cores);
  const fs::path dir = fs::temp_directory_path() / ("azr-train-step-bench-" + std::to_string(getpid()));
  fs::create_directories(dir);
  auto buf = buffer::TaskBuffer::open((dir / "buffer.db").string(), buffer::TaskBuffer::Mode::ReadWrite);
  {
    std::ifstream in(seed_tasks);
    if (!in) {
      std::fprintf(stderr, "train_step_bench: cannot read %s\n", seed_tasks.c_str());
      return 2;
    }
    buffer::import_jsonl(buf, in, seed_tasks, false);
  }
  sandbox::Pool pool(sandbox::PoolOptions{.workers = cfg.sandbox.workers > 0 ? cfg.sandbox.workers : cores});
  std::unique_ptr<trainer::Policy> made;
  try {
    made = std::make_unique<trainer::Policy>(trainer::initial_model(cfg), trainer::make_tokenizer(cfg),
                                             trainer::adamw_settings(cfg));
  } catch (const trainer::UserError& e) {
    std::fprintf(stderr, "train_step_bench: %s\n", e.what());
    return 2;
  }
  trainer::Policy& policy = *made;
  trainer::dist::SingleCommunicator comm;
  std::mt19937_64 rng(cfg.run.seed);

  std::vector<trainer::TrainSequence> captured;  // the step's training sequences, for the baseline
  trainer::StepContext ctx{cfg, policy, pool, comm, &buf, &rng, {}, {}, {}};
  ctx.before_update = [&](const std::vector<trainer::TrainSequence>& seqs) { captured = seqs; };
  trainer::StepTimes sum;
  double generated = 0, trained_tokens = 0, processed = 0, sandbox_jobs = 0;
  double recompute_s = 0;
  int proposals = 0, valid = 0, solves = 0, correct = 0;
  std::map<std::string, int> reasons;  // the proposals' and answers' verdicts, for where sandbox time goes
  for (int s = 0; s <= steps; s++) {
    trainer::StepResult r = trainer::run_step(ctx, s + 1);
    if (s == 0) continue;  // warm-up: first-touch allocations, worker start-up
    sum.plan += r.times.plan, sum.generate += r.times.generate, sum.sandbox += r.times.sandbox;
    sum.update += r.times.update, sum.total += r.times.total;
    generated += double(r.generated_tokens), trained_tokens += r.update.tokens;
    processed += r.update.processed_tokens, sandbox_jobs += double(r.sandbox_jobs);
    for (const auto& p : r.proposer) proposals += !p.skipped, valid += p.valid, ++reasons["proposer " + p.reason];
    for (const auto& o : r.solver) solves += !o.skipped, correct += o.correct, ++reasons["solver " + o.reason];
    // The baseline: the reference recomputes the old log-probs of exactly these sequences with
    // a scoring forward pass, in micro-batches of the same size (its compute_log_prob).
    const auto t0 = bench::Clock::now();
    for (size_t b = 0; b < captured.size(); b += size_t(cfg.algorithm.micro_batch_size)) {
      std::vector<std::vector<int32_t>> mb;
      for (size_t i = b; i < std::min(captured.size(), b + size_t(cfg.algorithm.micro_batch_size)); i++) {
        mb.push_back(captured[i].prompt);
        mb.back().insert(mb.back().end(), captured[i].response.begin(), captured[i].response.end());
      }
      (void)policy.model().score(model::SequenceBatch::from(mb), float(cfg.algorithm.temperature), false);
    }
    recompute_s += bench::secs_since(t0);
  }
  fs::remove_all(dir);

  const double n = steps;
  std::printf("train_step_bench: %s, %d timed steps, %d model threads, %d sandbox workers\n", config.c_str(), steps,
              threads > 0 ? threads : cores, pool.primary_workers());
  std::printf("  phase      s/step   share\n");
  for (auto [name, v] : {std::pair{"plan", sum.plan}, std::pair{"generate", sum.generate},
                         std::pair{"sandbox", sum.sandbox}, std::pair{"update", sum.update},
                         std::pair{"other", sum.other()}})
    std::printf("  %-9s %7.2f  %5.1f%%\n", name, v / n, 100 * v / sum.total);
  std::printf("  step      %7.2f\n", sum.total / n);
  std::printf("  generate %.0f tok/s, update %.0f tok/s (prompt + response), sandbox %.0f jobs/s\n",
              generated / sum.generate, processed / sum.update, sum.sandbox > 0 ? sandbox_jobs / sum.sandbox : 0.0);
  std::printf("  valid proposals %d of %d, correct answers %d of %d, sandbox jobs %.0f per step\n", valid, proposals,
              correct, solves, sandbox_jobs / n);
  std::printf("  verdicts:");
  for (const auto& [reason, count] : reasons) std::printf(" %s %d;", reason.c_str(), count);
  std::printf("\n");
  std::printf("  baseline (reference design): old-log-prob forward pass %.2f s/step = +%.1f%% step time; azr: 0\n",
              recompute_s / n, 100 * recompute_s / sum.total);
  nlohmann::json j = {{"bench", "train_step"},
                      {"config", config},
                      {"steps", steps},
                      {"step_s", sum.total / n},
                      {"plan_s", sum.plan / n},
                      {"generate_s", sum.generate / n},
                      {"sandbox_s", sum.sandbox / n},
                      {"update_s", sum.update / n},
                      {"other_s", sum.other() / n},
                      {"generate_tokens_per_s", generated / sum.generate},
                      {"update_tokens_per_s", processed / sum.update},
                      {"sandbox_jobs_per_step", sandbox_jobs / n},
                      {"valid_proposals", valid},
                      {"proposals", proposals},
                      {"correct_answers", correct},
                      {"solver_answers", solves},
                      {"verdicts", reasons},
                      {"trained_response_tokens_per_step", trained_tokens / n},
                      {"baseline_old_logp_forward_s", recompute_s / n},
                      // The reference's old-log-prob pass as a fraction of azr's step: what it would add.
                      {"baseline_added_fraction_of_step", recompute_s / sum.total}};
  std::printf("%s\n", j.dump().c_str());
  return 0;
}
