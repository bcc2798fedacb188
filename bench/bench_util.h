#pragma once
// Small helpers the benchmarks share.
#include <sys/resource.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace azr::bench {

using Clock = std::chrono::steady_clock;

inline double secs_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// CPU seconds and minor page faults of this process and of every reaped descendant (a sandbox
// pool's zygotes are reaped when the pool is destroyed, their children by the zygotes).
struct ProcessUsage {
  double cpu_s = 0;
  long minflt = 0;
};
inline ProcessUsage process_usage() {
  rusage self{}, kids{};
  getrusage(RUSAGE_SELF, &self);
  getrusage(RUSAGE_CHILDREN, &kids);
  auto s = [](const timeval& t) { return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) * 1e-6; };
  return {s(self.ru_utime) + s(self.ru_stime) + s(kids.ru_utime) + s(kids.ru_stime), self.ru_minflt + kids.ru_minflt};
}

// The middle value (the mean of the two middle ones of an even count); 0 for none.
inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

inline std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::string(v) : fallback;
}

// Single-quoted for /bin/sh.
inline std::string sh_quote(const std::string& s) {
  std::string r = "'";
  for (char c : s) r += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return r + "'";
}

// Runs `cmd` through the shell with stdout sent to `out_path`, and returns the last non-empty
// line of that output parsed as JSON (a baseline script's result line), or null when the command
// fails or prints no JSON; the failure is reported on stderr under `who`.
inline nlohmann::json run_for_json_line(const std::string& cmd, const std::string& out_path, const char* who) {
  const std::string full = cmd + " >" + sh_quote(out_path);
  const int rc = std::system(full.c_str());
  if (!WIFEXITED(rc) || WEXITSTATUS(rc) != 0) {
    std::fprintf(stderr, "%s: failed: %s\n", who, full.c_str());
    return nullptr;
  }
  std::ifstream f(out_path);
  std::string line, last;
  while (std::getline(f, line))
    if (!line.empty()) last = line;
  nlohmann::json j = nlohmann::json::parse(last, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    std::fprintf(stderr, "%s: no JSON line from: %s\n", who, full.c_str());
    return nullptr;
  }
  return j;
}

}  // namespace azr::bench
