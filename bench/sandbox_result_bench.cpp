// Large results through the sandbox: one job whose call returns an N MB value, from the
// child's encoder through the zygote and the supervisor's socket to a decoded CallResult. The
// EvalPlus canonical solutions return up to 147 MB per problem (HumanEval/15's strings), so this
// path is most of what grading HumanEval+ and MBPP+ costs. Baseline, in the same run: a fresh
// `python3 -I -S` computing the same value and writing its repr() to a pipe this process drains,
// which is what any out-of-process harness pays at least.
//
//   sandbox_result_bench [--mb 16,64] [--rounds 3] [--python /usr/bin/python3]
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
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "sandbox/pool.h"

namespace {

using Clock = std::chrono::steady_clock;
namespace sb = azr::sandbox;

struct Shape {
  const char* name;
  const char* program;  // defines f(n), returning about n bytes of encoded result
  double bytes_per_n;   // encoded bytes per unit of n, to size the input
};

// A str is one blob on the wire; a list of ints is an item per 9 bytes, the decoder's worst case.
const Shape kShapes[] = {
    {"str", "def f(n):\n    return 'x' * n\n", 1.0},
    {"list[int]", "def f(n):\n    return list(range(1 << 40, (1 << 40) + n))\n", 9.0},
};

struct Measure {
  double wall_s = 0, cpu_s = 0;
  long minflt = 0;
  size_t bytes = 0;
  bool ok = false;
};

Measure run_sandbox(const Shape& s, long n, uint64_t limit) {
  Measure m;
  const azr::bench::ProcessUsage u0 = azr::bench::process_usage();
  {
    sb::PoolOptions o;
    o.workers = 1;
    o.alternate_workers = 0;
    sb::Pool pool(o);
    sb::Job j;
    j.program = s.program;
    j.inputs = {std::to_string(n)};
    j.limits.cpu_seconds = 60;
    j.limits.memory_bytes = 8 * limit + (1ull << 30);
    j.limits.max_result_bytes = limit;
    auto t = Clock::now();
    sb::JobResult r = pool.wait(pool.submit(std::move(j)));
    m.wall_s = std::chrono::duration<double>(Clock::now() - t).count();
    m.ok = r.calls.size() == 1 && r.calls[0].status == sb::Status::Ok;
    if (m.ok) m.bytes = r.calls[0].repr.size();
  }
  const azr::bench::ProcessUsage u1 = azr::bench::process_usage();
  m.cpu_s = u1.cpu_s - u0.cpu_s;
  m.minflt = u1.minflt - u0.minflt;
  return m;
}

Measure run_baseline(const std::string& python, const Shape& s, long n) {
  Measure m;
  std::string code = std::string("import sys\n") + s.program + "sys.stdout.write(repr(f(" + std::to_string(n) + ")))\n";
  int outp[2];
  if (pipe2(outp, O_CLOEXEC)) return m;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, outp[1], 1);
  std::vector<std::string> args = {python, "-I", "-S", "-c", code};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  char* envp[] = {nullptr};
  const azr::bench::ProcessUsage u0 = azr::bench::process_usage();
  auto t0 = Clock::now();
  pid_t pid;
  int rc = posix_spawn(&pid, python.c_str(), &fa, nullptr, argv.data(), envp);
  posix_spawn_file_actions_destroy(&fa);
  close(outp[1]);
  if (rc != 0) {
    close(outp[0]);
    return m;
  }
  std::string out;
  std::vector<char> buf(1 << 16);
  ssize_t k;
  while ((k = read(outp[0], buf.data(), buf.size())) > 0) out.append(buf.data(), static_cast<size_t>(k));
  close(outp[0]);
  int st = 0;
  waitpid(pid, &st, 0);
  m.wall_s = std::chrono::duration<double>(Clock::now() - t0).count();
  const azr::bench::ProcessUsage u1 = azr::bench::process_usage();
  m.cpu_s = u1.cpu_s - u0.cpu_s;
  m.minflt = u1.minflt - u0.minflt;
  m.ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
  m.bytes = out.size();
  return m;
}

Measure median_of(std::vector<Measure> v) {
  std::sort(v.begin(), v.end(), [](const Measure& a, const Measure& b) { return a.wall_s < b.wall_s; });
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> mbs = {16, 64};
  int rounds = 3;
  std::string python = "/usr/bin/python3";
  CLI::App app{"Large results through the sandbox against a python3 writing the same repr to a pipe"};
  app.add_option("--mb", mbs, "result sizes, MB of encoded result")->delimiter(',')->capture_default_str();
  app.add_option("--rounds", rounds, "runs of each case; the median is reported")->check(CLI::PositiveNumber);
  app.add_option("--python", python, "interpreter of the baseline")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  nlohmann::json rows = nlohmann::json::array();
  std::printf("%-10s %6s | %-30s | %-30s\n", "shape", "MB", "sandbox: s  MB/s  cpu_s  faults",
              "python3 pipe: s  MB/s  cpu_s  faults");
  for (const Shape& s : kShapes)
    for (int mb : mbs) {
      const long n = static_cast<long>(static_cast<double>(mb) * (1 << 20) / s.bytes_per_n);
      const uint64_t limit = static_cast<uint64_t>(mb) * 2 * (1 << 20) + (1 << 20);
      std::vector<Measure> sv, bv;
      for (int r = 0; r < rounds; ++r) {
        sv.push_back(run_sandbox(s, n, limit));
        // CPU and faults are counted when the pool's zygote is reaped, so they include its start
        // and stop: the same pool with an empty result is subtracted.
        Measure empty = run_sandbox(s, 0, limit);
        sv.back().cpu_s -= empty.cpu_s;
        sv.back().minflt -= empty.minflt;
        bv.push_back(run_baseline(python, s, n));
        Measure bempty = run_baseline(python, s, 0);
        bv.back().cpu_s -= bempty.cpu_s;
        bv.back().minflt -= bempty.minflt;
      }
      Measure a = median_of(sv), b = median_of(bv);
      auto mbps = [](const Measure& m) { return m.wall_s > 0 ? static_cast<double>(m.bytes) / m.wall_s / 1e6 : 0.0; };
      std::printf("%-10s %6d | %7.3f %7.0f %6.2f %8ld%s | %7.3f %7.0f %6.2f %8ld%s\n", s.name, mb, a.wall_s, mbps(a),
                  a.cpu_s, a.minflt, a.ok ? "" : " FAILED", b.wall_s, mbps(b), b.cpu_s, b.minflt,
                  b.ok ? "" : " FAILED");
      rows.push_back({{"shape", s.name},
                      {"mb", mb},
                      {"repr_bytes", a.bytes},
                      {"sandbox", {{"wall_s", a.wall_s}, {"cpu_s", a.cpu_s}, {"minflt", a.minflt}, {"ok", a.ok}}},
                      {"python_pipe", {{"wall_s", b.wall_s}, {"cpu_s", b.cpu_s}, {"minflt", b.minflt}, {"ok", b.ok}}}});
    }
  std::printf("%s\n", nlohmann::json{{"bench", "sandbox_result"}, {"rounds", rounds}, {"rows", rows}}.dump().c_str());
  return 0;
}
