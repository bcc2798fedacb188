// One training step's sandbox load for the task engine (proposer/validate.h, solver/grade.h), on
// CRUXEval programs standing in for proposals, for each of the three task types (B = 64):
//   validate   64 deduction + 64 abduction + 64 induction proposals (10 inputs each)
//   learn      8 answers per valid task (n = 8 learnability rollouts), half right, half wrong,
//              each written apart (a rollout's own spaces or comment: no run or literal twice);
//              --repeated-answers: the right ones one text, the wrong ones another, so grading
//              that runs each distinct run once runs two a task (the other end of the range)
//   solve      64 solver answers per type
// at the pool's default size and, as the baseline in the same run, with one worker (and one
// alternate). A second baseline on the full-size pool: learnability and solve graded again with
// a job per run and a parse job per answer (GradeSettings::share_jobs = false, grading before
// 2026-11-28), which must give the same grades. Prints a table and one JSON line. Never asserts on time.
//
//   task_engine_bench [--data FILE] [--batch B] [--rollouts N] [--alternates A] [--repeated-answers]
// (--alternates: alternate workers of the full-size pool; default the pool's own, max(1, workers/2))
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "proposer/validate.h"
#include "solver/grade.h"

namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;
namespace sb = azr::sandbox;
namespace pr = azr::proposer;
namespace sv = azr::solver;
using azr::buffer::Task;
using azr::buffer::TaskType;

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

struct Item {
  std::string code, input, output;
};

struct Phase {
  double seconds = 0;
  uint64_t jobs = 0;
};

json run_step(sb::Pool& pool, const std::vector<Item>& items, size_t batch, int rollouts, bool repeated,
              bool apart_baseline) {
  // Proposals: deduction from items [0, B), abduction from [B, 2B), induction from [2B, 3B)
  // (one program, its recorded input repeated with small variations is not possible in general,
  // so the ten inputs are the recorded one ten times, each with its own number of trailing
  // spaces: ten texts, as a proposal's ten inputs are, at the cost of ten distinct ones).
  std::vector<pr::Proposal> props;
  for (size_t i = 0; i < 3 * batch; ++i) {
    pr::Proposal p;
    p.type = i < batch ? TaskType::Deduction : i < 2 * batch ? TaskType::Abduction : TaskType::Induction;
    p.program = items[i].code;
    if (p.type == TaskType::Induction) {
      for (size_t k = 0; k < 10; ++k) p.inputs.push_back(items[i].input + std::string(k, ' '));
      p.message = "bench";
    } else {
      p.input = items[i].input;
    }
    props.push_back(std::move(p));
  }
  pr::ValidateSettings vs;
  vs.limits.cpu_seconds = 5;
  sv::GradeSettings gs;
  gs.limits.cpu_seconds = 5;

  json phases = json::object();
  uint64_t jobs0 = pool.stats().completed;
  auto t0 = Clock::now();

  auto t = Clock::now();
  uint64_t j = pool.stats().completed;
  auto val = pr::validate(pool, props, vs);
  std::vector<Task> tasks;
  std::vector<size_t> src;
  for (size_t i = 0; i < val.size(); ++i)
    if (val[i].check.ok) {
      tasks.push_back(val[i].task);
      src.push_back(i);
    }
  phases["validate"] = {{"seconds", since(t)}, {"jobs", pool.stats().completed - j}, {"valid", tasks.size()},
                        {"proposals", props.size()}};

  auto answer = [&](size_t k, bool right) -> std::string {
    const Task& tk = tasks[k];
    const Item& it = items[src[k]];
    switch (tk.type) {
      case TaskType::Deduction: return right ? tk.output : "[" + tk.output + "]";
      case TaskType::Abduction: return right ? it.input : "None";
      case TaskType::Induction: return right ? it.code : "def f(*a, **k):\n    return None";
    }
    return "";
  };

  t = Clock::now();
  j = pool.stats().completed;
  std::vector<sv::Answer> learn;
  for (size_t k = 0; k < tasks.size(); ++k)
    for (int r = 0; r < rollouts; ++r) {
      std::string a = answer(k, r % 2 == 0);
      // Spaces after a literal or an argument list, a comment after a program: the same answer
      // to the grader, another text to a cache.
      if (!repeated)
        a += tasks[k].type == TaskType::Induction ? "\n# rollout " + std::to_string(r) : std::string(size_t(r), ' ');
      learn.push_back({k, std::move(a)});
    }
  auto lg = sv::grade(pool, tasks, learn, gs);
  size_t lcorrect = 0;
  for (const auto& g : lg) lcorrect += g.correct;
  phases["learnability"] = {{"seconds", since(t)}, {"jobs", pool.stats().completed - j}, {"answers", learn.size()},
                            {"correct", lcorrect}};

  t = Clock::now();
  j = pool.stats().completed;
  std::vector<sv::Answer> solve;
  for (size_t k = 0; k < tasks.size(); ++k) solve.push_back({k, answer(k, k % 3 != 0)});
  auto sg = sv::grade(pool, tasks, solve, gs);
  size_t scorrect = 0;
  for (const auto& g : sg) scorrect += g.correct;
  phases["solve"] = {{"seconds", since(t)}, {"jobs", pool.stats().completed - j}, {"answers", solve.size()},
                     {"correct", scorrect}};

  double total = since(t0);
  uint64_t jobs = pool.stats().completed - jobs0;

  if (apart_baseline) {
    sv::GradeSettings apart = gs;
    apart.share_jobs = false;
    apart.induction_first_pair_first = false;  // grading as before 2026-11-28: every run its own job
    size_t differ = 0;
    auto regrade = [&](const char* name, const std::vector<sv::Answer>& answers, const std::vector<sv::Grade>& want) {
      t = Clock::now();
      j = pool.stats().completed;
      auto g = sv::grade(pool, tasks, answers, apart);
      phases[name] = {{"seconds", since(t)}, {"jobs", pool.stats().completed - j}, {"answers", answers.size()}};
      for (size_t k = 0; k < g.size(); ++k) differ += g[k].correct != want[k].correct || g[k].reason != want[k].reason;
    };
    regrade("learnability_apart", learn, lg);
    regrade("solve_apart", solve, sg);
    phases["grades_differing_apart"] = differ;
  }
  return {{"workers", pool.primary_workers()},
          {"alternates", pool.alternate_workers()},
          {"seconds", total},
          {"jobs", jobs},
          {"jobs_per_second", total > 0 ? static_cast<double>(jobs) / total : 0.0},
          {"phases", phases}};
}

}  // namespace

int main(int argc, char** argv) {
  std::string data = AZR_DEFAULT_CRUXEVAL;
  size_t batch = 64;
  int rollouts = 8;
  int alternates = -1;
  bool repeated = false;
  CLI::App app{"One training step's sandbox load for the task engine, against one sandbox worker"};
  app.add_option("--data", data, "CRUXEval JSONL, standing in for proposals")->capture_default_str();
  app.add_option("--batch", batch, "proposals and solver answers per task type")->capture_default_str();
  app.add_option("--rollouts", rollouts, "learnability answers per valid task")->capture_default_str();
  app.add_option("--alternates", alternates, "alternate workers of the full-size pool; -1 = the pool's own")
      ->capture_default_str();
  app.add_flag("--repeated-answers", repeated, "a task's right rollouts one text, its wrong ones another");
  CLI11_PARSE(app, argc, argv);
  std::ifstream in(data);
  if (!in) {
    std::fprintf(stderr, "task_engine_bench: cannot open %s (pass --data)\n", data.c_str());
    return 2;
  }
  std::vector<Item> all;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    auto j = json::parse(line);
    all.push_back({j.at("code"), j.at("input"), j.at("output")});
  }

  json runs = json::array();
  std::vector<Item> items;
  for (int workers : {0, 1}) {
    sb::PoolOptions po;
    po.workers = workers;
    po.alternate_workers = workers == 1 ? 1 : alternates;
    sb::Pool pool(po);
    {
      // Untimed, on each pool alike (its workers' pages faulted in before the timed step): keep
      // programs whose recorded input is a literal argument list (proposals must be).
      std::vector<sb::EvalRequest> reqs;
      for (const auto& it : all) reqs.push_back({it.code, it.input});
      sb::Limits lim;
      lim.cpu_seconds = 5;
      auto r = sb::evaluate(pool, reqs, lim);
      if (items.empty())
        for (size_t i = 0; i < all.size(); ++i)
          if (r[i].status == sb::Status::Ok) items.push_back(all[i]);
      if (items.size() < 3 * batch) {
        std::fprintf(stderr, "task_engine_bench: only %zu usable programs\n", items.size());
        return 2;
      }
    }
    json r = run_step(pool, items, batch, rollouts, repeated, workers == 0);
    std::printf("workers %d (+%d alternate): %.2f s, %llu jobs, %.0f jobs/s  [validate %.2f s, learnability %.2f s, "
                "solve %.2f s]\n",
                r["workers"].get<int>(), r["alternates"].get<int>(), r["seconds"].get<double>(),
                static_cast<unsigned long long>(r["jobs"].get<uint64_t>()), r["jobs_per_second"].get<double>(),
                r["phases"]["validate"]["seconds"].get<double>(), r["phases"]["learnability"]["seconds"].get<double>(),
                r["phases"]["solve"]["seconds"].get<double>());
    if (r["phases"].contains("learnability_apart")) {
      const json& ph = r["phases"];
      std::printf("  a job per run, a parse job per answer (baseline): learnability %.2f s, %llu jobs (shared: %llu); "
                  "solve %.2f s, %llu jobs (shared: %llu); grades differing: %zu\n",
                  ph["learnability_apart"]["seconds"].get<double>(),
                  static_cast<unsigned long long>(ph["learnability_apart"]["jobs"].get<uint64_t>()),
                  static_cast<unsigned long long>(ph["learnability"]["jobs"].get<uint64_t>()),
                  ph["solve_apart"]["seconds"].get<double>(),
                  static_cast<unsigned long long>(ph["solve_apart"]["jobs"].get<uint64_t>()),
                  static_cast<unsigned long long>(ph["solve"]["jobs"].get<uint64_t>()),
                  ph["grades_differing_apart"].get<size_t>());
    }
    runs.push_back(r);
  }
  json out = {{"bench", "task_engine"}, {"batch", batch}, {"rollouts", rollouts}, {"repeated_answers", repeated},
              {"runs", runs}};
  if (runs.size() == 2 && runs[0]["seconds"].get<double>() > 0)
    out["speedup_vs_one_worker"] = runs[1]["seconds"].get<double>() / runs[0]["seconds"].get<double>();
  std::cout << out.dump() << "\n";
  return 0;
}
