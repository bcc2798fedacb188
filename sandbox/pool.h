#pragma once
// The supervisor's pool of sandbox workers: submit many jobs, collect results as they finish.
//
// Each worker is one zygote (sandbox/spawn.h). Primary workers share the pool's hash seed, so
// every ordinary job gives the same result whichever worker runs it; alternate workers use a
// different seed (and have a different address layout) and exist for the second run of a
// determinism check. One I/O thread multiplexes all workers with epoll; a worker that dies or
// stops answering is replaced, the job it was running is reported as internal_error, and jobs
// queued behind it are re-queued, so no job is ever lost. Replacements start on the pool's spawner
// thread, in turn, so the I/O thread goes on serving the running workers while one starts (or
// hangs, to its hello timeout; the replacements queued behind it wait). A replacement that cannot
// start is tried again later (0.5 s, doubling up to a minute); while no worker of a kind runs or
// starts, that kind's jobs complete at once as internal_error (NoWorkers), so no caller waits for
// ever. A zygote dies with the thread that started it (PR_SET_PDEATHSIG): construct a pool on a
// thread that outlives it.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "sandbox/result.h"

namespace azr::sandbox {

struct PoolOptions {
  int workers = 0;             // primary workers; 0 = one per online CPU
  int alternate_workers = -1;  // -1 = max(1, workers / 2); 0 = no determinism runs
  long hash_seed = 0;          // primaries use it, alternates use hash_seed + 1
  std::string zygote_path;     // empty: azr-zygote next to this executable (or $AZR_ZYGOTE)
  std::vector<std::string> preimports;  // empty: the default allowlist
  bool use_namespaces = true;
  int queue_depth = 2;         // jobs handed to a worker at once (1 running + the next, queued)
  // Fault injection, for tests only (as SQLite injects I/O errors): a job for which this returns
  // true is not run and completes as a job on a lost worker does, every call internal_error
  // (error_type "InjectedFault"). A worker's death cannot be arranged on demand for one chosen
  // job; what callers do with the result is the same either way. Called in submit(), under the
  // pool's lock: it must not call the pool.
  std::function<bool(const Job&)> inject_fault;
};

struct WorkerInfo {
  int index = 0;
  SeedClass seed = SeedClass::Primary;
  int pid = -1;  // -1 while the worker is down or its replacement starting
  std::string namespaces;
  std::vector<std::string> warnings;
  std::string python_version;
  uint32_t preimports = 0;
  uint32_t bpf_instructions = 0;
  bool filesystem_hidden = false;
  bool pid_namespace_leader = false;
  int restarts = 0;
};

struct PoolStats {
  uint64_t submitted = 0;
  uint64_t completed = 0;
  uint64_t worker_restarts = 0;
  uint64_t requeued = 0;
  uint64_t failed_starts = 0;  // replacements that could not start (each retried later)
};

class Pool {
 public:
  // Starts every worker before returning; throws std::runtime_error if one cannot start (a wrong
  // path or build is better said at once than retried).
  explicit Pool(PoolOptions options = {});
  ~Pool();
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;

  // Thread-safe. Returns the job id.
  uint64_t submit(Job job);
  // Blocks until some submitted job finishes and returns it (each result is returned once,
  // either here or by wait(id)). Throws std::logic_error if nothing is outstanding.
  JobResult wait_any();
  // Blocks until job `id` finishes.
  JobResult wait(uint64_t id);
  // Submits all, waits for all, returns results in the order of `jobs`.
  std::vector<JobResult> run(std::vector<Job> jobs);

  std::vector<WorkerInfo> workers() const;
  PoolStats stats() const;
  int primary_workers() const;
  int alternate_workers() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace azr::sandbox
