#pragma once
#include <cstdint>

namespace azr::sandbox {

// The limits a user may set (config keys, CLI flags): below 16 MiB Python cannot start; beyond an
// hour of CPU or a TiB of address space a limit no longer limits, and the seconds' conversion to
// RLIMIT_CPU and the MiB's to bytes stay far inside their types.
constexpr double kMinCpuSeconds = 0.001, kMaxCpuSeconds = 3600;
constexpr double kMinMemoryMib = 16, kMaxMemoryMib = 1048576;

// Per-job resource limits. The defaults suit AZR tasks (small pure functions); the reference
// used a 10 s timeout, which lets one bad proposal stall a step, so azr's default is tighter.
struct Limits {
  double cpu_seconds = 2.0;         // CPU budget for the whole child (all inputs of a job)
  double wall_seconds = 0;          // 0: derived, max(2 * cpu, cpu + 1) (sleeping is denied anyway)
  uint64_t memory_bytes = 512ull << 20;  // RLIMIT_AS of the child
  uint64_t max_output_bytes = 64 << 10;  // stdout + stderr; more kills the child (output_limit)
  uint64_t max_result_bytes = 1 << 20;   // encoded results; more is output_limit

  double effective_wall_seconds() const {
    if (wall_seconds > 0) return wall_seconds;
    double a = 2 * cpu_seconds, b = cpu_seconds + 1;
    return a > b ? a : b;
  }
};

}  // namespace azr::sandbox
