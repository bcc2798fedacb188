// Sandbox throughput and latency on the CRUXEval workload (800 real programs, each called on
// its recorded input), at 1..N workers, against process-per-job baselines measured in the same
// run, N processes in parallel, with no sandbox at all:
//   python3 per job         a fresh interpreter as harnesses usually start one (site, no flags)
//   python3 -I -S per job   the fastest a fresh interpreter starts (isolated, no site)
// and, for the grading shape (a program on 8 inputs), python3 -I -S once per program.
//
//   sandbox_bench [--data FILE] [--rounds R] [--max-workers N] [--baseline-jobs M]
//
// Prints a table and one JSON line. Never asserts on time.
#include <CLI/CLI.hpp>
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_util.h"
#include "sandbox/pool.h"

extern char** environ;

namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;
namespace sb = azr::sandbox;

struct Task {
  std::string program, input;
};

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t i = static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

std::vector<Task> load(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    std::fprintf(stderr, "sandbox_bench: cannot open %s (pass --data)\n", path.c_str());
    std::exit(2);
  }
  std::vector<Task> tasks;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    json j = json::parse(line);
    tasks.push_back({j.at("code").get<std::string>(), j.at("input").get<std::string>()});
  }
  return tasks;
}

struct Run {
  int workers = 0;
  int jobs = 0;
  int ok = 0;
  double seconds = 0;
  double jobs_per_s = 0;
  double p50_ms = 0, p99_ms = 0;  // latency of one job submitted alone (request -> result)
  double cpu_ms_per_job = 0;      // supervisor + workers + children, all CPUs (load-independent)
  int calls_per_job = 1;
};

// inputs_per_job > 1: one child runs the same program on that many inputs (the shape of
// abduction and induction grading); throughput is then counted in calls.
Run run_pool(const std::vector<Task>& tasks, int workers, int rounds, int inputs_per_job = 1) {
  double cpu0 = azr::bench::process_usage().cpu_s;
  int executed = 0;
  Run r;
  r.workers = workers;
  r.calls_per_job = inputs_per_job;
  {
    sb::PoolOptions o;
    o.workers = workers;
    o.alternate_workers = 0;
    sb::Pool pool(o);
    auto make = [&](const Task& t) {
      sb::Job j;
      j.program = t.program;
      j.inputs.assign(static_cast<size_t>(inputs_per_job), t.input);
      j.input_mode = sb::protocol::InputMode::Expression;  // CRUXEval inputs include lambda, dict(...), range(...)
      return j;
    };
    // Warm-up: first faults of every zygote's pages.
    for (size_t i = 0; i < 50 && i < tasks.size(); ++i, ++executed) pool.wait(pool.submit(make(tasks[i])));

    // Throughput: everything submitted at once, as a training step does.
    std::vector<sb::Job> jobs;
    for (int k = 0; k < rounds; ++k)
      for (const auto& t : tasks) jobs.push_back(make(t));
    r.jobs = static_cast<int>(jobs.size()) * inputs_per_job;
    executed += static_cast<int>(jobs.size());
    auto t0 = Clock::now();
    auto results = pool.run(std::move(jobs));
    r.seconds = seconds_since(t0);
    for (const auto& res : results)
      for (const auto& c : res.calls) r.ok += c.status == sb::Status::Ok;
    r.jobs_per_s = r.jobs / r.seconds;

    // Latency: one job at a time, round trip through the supervisor.
    std::vector<double> lat;
    for (size_t i = 0; i < tasks.size(); i += 2, ++executed) {
      auto t = Clock::now();
      pool.wait(pool.submit(make(tasks[i])));
      lat.push_back(seconds_since(t) * 1e3);
    }
    r.p50_ms = percentile(lat, 0.5);
    r.p99_ms = percentile(lat, 0.99);
  }
  r.cpu_ms_per_job = (azr::bench::process_usage().cpu_s - cpu0) * 1e3 / executed;
  return r;
}

// The baseline harness: what a careful process-per-job runner does (isolated interpreter, no
// site, literal-only input parsing), minus any sandboxing.
// The program comes first, then its inputs, each after a NUL; every input is one call, as a
// process-per-program grader runs a program on all of its inputs.
constexpr const char* kBaselineHarness =
    "import sys, ast\n"
    "prog, *inputs = sys.stdin.read().split('\\0')\n"
    "g = {}\n"
    "exec(compile(prog, '<program>', 'exec'), g)\n"
    "for inp in inputs:\n"
    "    call = ast.parse('f(' + inp + '\\n)', mode='eval').body\n"
    "    args = [eval(compile(ast.Expression(a), '<input>', 'eval'), g) for a in call.args]\n"
    "    sys.stdout.write(repr(g['f'](*args)))\n";

bool run_one_process(const std::string& python, bool tuned, const Task& t, int inputs, std::string& out) {
  int in[2], outp[2];
  if (pipe2(in, O_CLOEXEC) || pipe2(outp, O_CLOEXEC)) return false;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, in[0], 0);
  posix_spawn_file_actions_adddup2(&fa, outp[1], 1);
  std::vector<std::string> args = {python, "-c", kBaselineHarness};
  if (tuned) args.insert(args.begin() + 1, {"-I", "-S"});
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  char* envp[] = {nullptr};
  pid_t pid;
  int rc = posix_spawn(&pid, python.c_str(), &fa, nullptr, argv.data(), envp);
  posix_spawn_file_actions_destroy(&fa);
  close(in[0]);
  close(outp[1]);
  if (rc != 0) {
    close(in[1]);
    close(outp[0]);
    return false;
  }
  std::string payload = t.program;
  for (int i = 0; i < inputs; ++i) payload += '\0' + t.input;
  [[maybe_unused]] ssize_t w = write(in[1], payload.data(), payload.size());
  close(in[1]);
  char buf[4096];
  ssize_t n;
  out.clear();
  while ((n = read(outp[0], buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  close(outp[0]);
  int st;
  waitpid(pid, &st, 0);
  return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

// `jobs` programs spread evenly over the whole workload (the pool runs all of it: the same mix of
// slow and fast programs on both sides), after a warm-up of 20 (the interpreter's files in the
// page cache, as the pool's 50 warm-up jobs fault in its zygotes). inputs > 1: one process runs
// the program on that many inputs; jobs and throughput then count calls, the CPU per process.
Run run_baseline(const std::vector<Task>& tasks, const std::string& python, bool tuned, int workers, int jobs,
                 int inputs = 1) {
  auto task = [&](int i) -> const Task& {
    return tasks[static_cast<size_t>(int64_t(i) * int64_t(tasks.size()) / std::max(jobs, 1)) % tasks.size()];
  };
  std::string out;
  for (int i = 0; i < 20; ++i)
    run_one_process(python, tuned, tasks[static_cast<size_t>(i * 37) % tasks.size()], inputs, out);
  double cpu0 = azr::bench::process_usage().cpu_s;
  Run r;
  r.workers = workers;
  r.jobs = jobs * inputs;
  r.calls_per_job = inputs;
  std::vector<int> ok(static_cast<size_t>(workers), 0);
  auto t0 = Clock::now();
  std::vector<std::thread> threads;
  for (int w = 0; w < workers; ++w)
    threads.emplace_back([&, w] {
      std::string got;
      for (int i = w; i < jobs; i += workers)
        ok[static_cast<size_t>(w)] += run_one_process(python, tuned, task(i), inputs, got) ? inputs : 0;
    });
  for (auto& t : threads) t.join();
  r.seconds = seconds_since(t0);
  for (int v : ok) r.ok += v;
  r.jobs_per_s = r.jobs / r.seconds;
  std::vector<double> lat;
  for (int i = 0; i < 100; ++i) {
    auto t = Clock::now();
    run_one_process(python, tuned, tasks[static_cast<size_t>(i * 7) % tasks.size()], inputs, out);
    lat.push_back(seconds_since(t) * 1e3);
  }
  r.p50_ms = percentile(lat, 0.5);
  r.p99_ms = percentile(lat, 0.99);
  r.cpu_ms_per_job = (azr::bench::process_usage().cpu_s - cpu0) * 1e3 / (jobs + 100);
  return r;
}

json to_json(const Run& r) {
  return {{"workers", r.workers},     {"jobs", r.jobs},         {"ok", r.ok},
          {"seconds", r.seconds},     {"jobs_per_s", r.jobs_per_s}, {"p50_ms", r.p50_ms},
          {"p99_ms", r.p99_ms},       {"cpu_ms_per_job", r.cpu_ms_per_job},
          {"calls_per_job", r.calls_per_job}};
}

}  // namespace

int main(int argc, char** argv) {
  std::string data = AZR_DEFAULT_CRUXEVAL;
  std::string python = "/usr/bin/python3";
  int rounds = 3, max_workers = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  int baseline_jobs = 400;
  CLI::App app{"Sandbox throughput and latency on CRUXEval against a python3 process per job"};
  app.add_option("--data", data, "CRUXEval JSONL")->capture_default_str();
  app.add_option("--rounds", rounds, "passes over the programs at each pool size")->capture_default_str();
  app.add_option("--max-workers", max_workers, "pool and baseline sizes run: 1..N")->capture_default_str();
  app.add_option("--baseline-jobs", baseline_jobs, "jobs of each process-per-job baseline")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000));
  app.add_option("--python", python, "interpreter of the baselines")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  auto tasks = load(data);
  std::printf("CRUXEval workload: %zu programs x %d rounds; %u CPUs\n\n", tasks.size(), rounds,
              std::thread::hardware_concurrency());
  std::printf("%-30s %7s %7s %6s %10s %9s %9s %11s\n", "design", "workers", "jobs", "ok", "jobs/s", "p50 ms",
              "p99 ms", "CPU ms/job");
  json runs = json::array();
  std::vector<Run> pool_runs, base_runs;
  auto row = [](const char* name, const Run& r) {
    std::printf("%-30s %7d %7d %6d %10.0f %9.2f %9.2f %11.3f\n", name, r.workers, r.jobs, r.ok, r.jobs_per_s, r.p50_ms,
                r.p99_ms, r.cpu_ms_per_job);
  };
  for (int w = 1; w <= max_workers; ++w) {
    Run r = run_pool(tasks, w, rounds);
    row("zygote pool, full policy", r);
    pool_runs.push_back(r);
  }
  Run graded = run_pool(tasks, max_workers, 1, 8);
  row("  same, 8 inputs per child *", graded);
  std::vector<Run> tuned_runs;
  for (int w = 1; w <= max_workers; ++w) {
    Run b = run_baseline(tasks, python, false, w, baseline_jobs);
    row("python3 per job", b);
    base_runs.push_back(b);
  }
  for (int w = 1; w <= max_workers; ++w) {
    Run b = run_baseline(tasks, python, true, w, baseline_jobs);
    row("python3 -I -S per job", b);
    tuned_runs.push_back(b);
  }
  // The grading shape against its own baseline: one fresh interpreter per program, running it on
  // the same 8 inputs (a per-call comparison with one input per process would credit the pool
  // with spreading a child over 8 calls, which a process-per-program grader does too).
  Run graded_base = run_baseline(tasks, python, true, max_workers, std::max(1, baseline_jobs / 2), 8);
  row("python3 -I -S, 8 inputs each *", graded_base);
  double speedup = pool_runs.back().jobs_per_s / base_runs.back().jobs_per_s;
  double speedup_tuned = pool_runs.back().jobs_per_s / tuned_runs.back().jobs_per_s;
  double speedup_graded = graded.jobs_per_s / graded_base.jobs_per_s;
  std::printf("\n* one child (one process) runs the program on 8 inputs (the shape of abduction/induction "
              "grading); jobs = calls, CPU ms per child\n");
  std::printf("at %d workers: %.1fx python3 per job, %.1fx python3 -I -S per job; 8 inputs a child: %.1fx "
              "python3 -I -S per program\n",
              max_workers, speedup, speedup_tuned, speedup_graded);
  json out = {{"bench", "sandbox"}, {"workload", "cruxeval"}, {"cpus", std::thread::hardware_concurrency()},
              {"speedup_vs_python3", speedup}, {"speedup_vs_python3_isolated", speedup_tuned},
              {"speedup_8_inputs_vs_python3_isolated_per_program", speedup_graded}};
  for (auto& r : pool_runs) out["pool"].push_back(to_json(r));
  out["pool_8_inputs_per_child"] = to_json(graded);
  out["baseline_python3_isolated_8_inputs_per_process"] = to_json(graded_base);
  for (auto& r : base_runs) out["baseline_python3"].push_back(to_json(r));
  for (auto& r : tuned_runs) out["baseline_python3_isolated"].push_back(to_json(r));
  std::printf("%s\n", out.dump().c_str());
  return 0;
}
