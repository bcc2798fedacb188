// Grading throughput of `azr eval` with gold answers, per benchmark: items graded per second on
// all cores, against one sandbox worker in the same run (the baseline: parallel scaling, not
// another design). Math needs no sandbox and has no baseline, nor HumanEval+ and MBPP+ unless
// --baseline-all (minutes each); their JSON rows say so (`one_worker_items_per_s` null, and
// `no_baseline` why). Gold answers must all grade correct: the bench prints the count so a
// regression in a grader shows here too.
//
// HumanEval+ and MBPP+ are graded a second time on the same Benchmark, as a training run's
// periodic evaluation does: the canonical solutions' plus-input results are then kept ones
// (eval::CanonicalResults), and the "again" columns compare that grading with the first.
//
// --samples K (K > 1): the code benchmarks' gold answers again, each K times, as pass@k sampling
// gives them when a model repeats itself, graded on all cores with identical candidates graded
// once (grade_code's share_identical, `azr eval`'s way) against every candidate graded on its own
// in the same run (the baseline); both cold, nothing kept.
//
//   eval_bench [--data DIR] [--bench A,B] [--baseline-all] [--samples K]
// By default the one-worker baseline skips humanevalplus and mbppplus (minutes each on 2 cores).
#include <algorithm>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <set>
#include <sstream>

#include "bench/bench_util.h"
#include "eval/benchmarks.h"
#include "eval/code_bench.h"
#include "eval/report.h"

namespace {

using azr::bench::Clock;
using azr::bench::secs_since;
namespace ev = azr::eval;

struct Run {
  double seconds = 0;
  size_t correct = 0;
};

// b with nothing kept from an earlier grading.
ev::Benchmark cold(const ev::Benchmark& b) {
  ev::Benchmark c = b;
  if (c.canonical) c.canonical = std::make_shared<ev::CanonicalResults>();
  return c;
}

// The pool and the limits `azr eval` grades with; workers 0: one a core.
azr::sandbox::PoolOptions pool_options(int workers) {
  azr::sandbox::PoolOptions po;
  po.workers = workers;
  po.preimports = ev::code_bench_preimports();
  return po;
}
azr::sandbox::Limits eval_limits() {
  azr::sandbox::Limits limits;
  limits.cpu_seconds = 5;  // `azr eval`'s default (Mbpp/123's reference solution needs more than 2 s)
  limits.memory_bytes = 1024ull << 20;
  return limits;
}

Run grade_gold(const ev::Benchmark& b, int workers) {
  std::vector<ev::Sample> samples;
  for (size_t i = 0; i < b.items.size(); i++) samples.push_back({i, ev::gold_response(b, b.items[i])});
  azr::sandbox::Pool pool(pool_options(workers));  // started before the clock: start-up is not grading
  const auto t0 = Clock::now();
  const std::vector<ev::Verdict> v = ev::grade_samples(pool, b, samples, eval_limits());
  Run r;
  r.seconds = secs_since(t0);
  for (const ev::Verdict& x : v) r.correct += x.correct;
  return r;
}

// b's gold programs, each `samples` times, through grade_code on all cores; nothing kept.
Run grade_repeated_code(const ev::Benchmark& b, int samples, bool share) {
  std::vector<ev::CodeProblem> problems;
  std::vector<std::string> completions;
  for (const ev::BenchItem& item : b.items) {
    const ev::CodeProblem& p = b.code.at(item.code_index);
    const std::string program = ev::extract_code(ev::gold_response(b, item), p);
    for (int k = 0; k < samples; k++) problems.push_back(p), completions.push_back(program);
  }
  azr::sandbox::Pool pool(pool_options(0));
  const auto t0 = Clock::now();
  const std::vector<ev::CodeVerdict> v = ev::grade_code(pool, problems, completions, eval_limits(), nullptr, share);
  Run r;
  r.seconds = secs_since(t0);
  for (const ev::CodeVerdict& x : v) r.correct += x.passed;
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Grading throughput of azr eval with gold answers"};
  std::string data, benches;
  bool baseline_all = false;
  app.add_option("--data", data, "benchmarks folder (default: $AZR_BENCHMARKS or ../shared/benchmarks)");
  app.add_option("--bench", benches, "comma-separated benchmark names (default: all)");
  app.add_flag("--baseline-all", baseline_all, "also run the one-worker baseline on humanevalplus and mbppplus");
  int samples = 1;
  app.add_option("--samples", samples, "code benchmarks: each gold answer this many times, shared and not")
      ->check(CLI::Range(1, 1000));
  CLI11_PARSE(app, argc, argv);

  std::filesystem::path dir;
  try {
    dir = ev::resolve_data_dir(data);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "eval_bench: %s\n", e.what());
    return 2;
  }
  std::set<std::string> wanted;
  std::stringstream ss(benches);
  for (std::string name; std::getline(ss, name, ',');)
    if (!name.empty()) wanted.insert(name);
  for (const std::string& name : wanted) {
    if (!ev::find_benchmark(name)) {
      std::fprintf(stderr, "eval_bench: --bench: unknown benchmark '%s' (%s)\n", name.c_str(),
                   ev::benchmark_names().c_str());
      return 2;
    }
  }

  nlohmann::json rows = nlohmann::json::array();
  std::printf("%-14s %6s %8s %10s %12s %12s %8s %9s %8s\n", "benchmark", "items", "correct", "seconds", "items/s",
              "1 worker/s", "x 1 wkr", "again s", "kept x");
  for (const ev::BenchmarkInfo& info : ev::benchmark_registry()) {
    if (!wanted.empty() && !wanted.count(info.name)) continue;
    const ev::Benchmark loaded = ev::load_benchmark(info.name, dir);
    const ev::Benchmark b = cold(loaded);
    const Run all = grade_gold(b, 0);
    const bool sandboxed = info.category == ev::Category::Code || info.category == ev::Category::Cruxeval;
    const bool slow = info.name == "humanevalplus" || info.name == "mbppplus";
    std::optional<Run> one;
    if (sandboxed && (!slow || baseline_all)) one = grade_gold(cold(loaded), 1);
    std::optional<Run> again;  // b's canonical results are kept from `all`
    if (slow) again = grade_gold(b, 0);
    const double rate = double(b.items.size()) / all.seconds;
    nlohmann::json row = {{"bench", info.name},       {"items", b.items.size()}, {"correct", all.correct},
                          {"seconds", all.seconds},   {"items_per_s", rate},     {"sandbox", sandboxed}};
    char one_rate[32] = "-", speedup[32] = "-", again_s[32] = "-", kept_x[32] = "-";
    if (one) {
      row["one_worker_items_per_s"] = double(b.items.size()) / one->seconds;
      row["speedup_vs_one_worker"] = one->seconds / all.seconds;  // parallel scaling, not another design
      std::snprintf(one_rate, sizeof one_rate, "%.1f", double(b.items.size()) / one->seconds);
      std::snprintf(speedup, sizeof speedup, "%.2fx", one->seconds / all.seconds);
    } else {
      row["one_worker_items_per_s"] = nullptr;
      row["no_baseline"] = sandboxed ? "one worker skipped for a slow benchmark (--baseline-all runs it)"
                                     : "graded in-process: no sandbox workers to compare";
    }
    if (again) {
      row["again_seconds"] = again->seconds;
      row["again_correct"] = again->correct;
      row["kept_speedup"] = all.seconds / again->seconds;
      std::snprintf(again_s, sizeof again_s, "%.2f", again->seconds);
      std::snprintf(kept_x, sizeof kept_x, "%.2fx", all.seconds / again->seconds);
    }
    std::printf("%-14s %6zu %8zu %10.2f %12.1f %12s %8s %9s %8s\n", info.name.c_str(), b.items.size(), all.correct,
                all.seconds, rate, one_rate, speedup, again_s, kept_x);
    if (samples > 1 && info.category == ev::Category::Code) {
      const Run shared = grade_repeated_code(loaded, samples, true), each = grade_repeated_code(loaded, samples, false);
      row["samples"] = samples;
      row["repeated"] = {{"candidates", b.items.size() * size_t(samples)}, {"shared_seconds", shared.seconds},
                         {"shared_correct", shared.correct}, {"each_seconds", each.seconds},
                         {"each_correct", each.correct}, {"speedup", each.seconds / shared.seconds}};
      std::printf("  x%d samples: %zu candidates, shared %.2f s (%zu correct), each its own %.2f s (%zu), %.2fx\n",
                  samples, b.items.size() * size_t(samples), shared.seconds, shared.correct, each.seconds, each.correct,
                  each.seconds / shared.seconds);
    }
    rows.push_back(row);
  }
  std::printf("%s\n", nlohmann::json{{"bench", "eval_grading"}, {"results", rows}}.dump().c_str());
  return 0;
}
