#pragma once
// Small helpers the benchmarks share.
#include <chrono>
#include <cstdlib>
#include <string>

namespace azr::bench {

using Clock = std::chrono::steady_clock;

inline double secs_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

inline std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::string(v) : fallback;
}

}  // namespace azr::bench
