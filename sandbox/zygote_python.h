#pragma once
// The embedded interpreter of a zygote, and what a forked child does with it.
//
// The zygote initialises CPython once (isolated config, empty environment, fixed hash seed, no
// site, no signal handlers), pre-imports an allowlist of pure-computation modules, compiles the
// trusted harness (input parsing), then freezes the heap (gc.freeze) so children's copy-on-write
// stays small. Children run exactly one job and _exit.
#include <string>
#include <vector>

#include "sandbox/preimports.h"
#include "sandbox/protocol.h"

namespace azr::sandbox {

struct PythonInit {
  long hash_seed = 0;
  std::vector<std::string> preimports;
};

struct PythonInfo {
  std::string version;
  std::vector<std::string> missing_preimports;  // allowlisted but not importable here
};

// Initialises the interpreter; throws std::runtime_error with Python's message on failure.
PythonInfo init_python(const PythonInit& init);

// Fork helpers around CPython's own before/after-fork hooks.
void python_before_fork();
void python_after_fork_parent();
void python_after_fork_child();

// In a locked-down child: runs `req`, writes result records to fd `result_fd`, then _exit(0).
[[noreturn]] void run_job_in_child(const protocol::Request& req, int result_fd);

}  // namespace azr::sandbox
