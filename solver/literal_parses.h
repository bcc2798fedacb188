#pragma once
// The literals grading parses in the sandbox (deduction answers, the tasks' outputs), and how
// they are packed into ParseLiterals jobs, which run no program.
//
// Shared (grading's default), each distinct text is parsed once and up to 64 share a job: a
// step's 8 rollouts of a task parse its output once, and CRUXEval-O's 800 answers take tens of
// jobs, not 800. Each result is the literal's as if parsed alone: parsing is pure
// (ast.literal_eval runs no user code and keeps nothing between literals) and each value has
// its own result budget, so a value or a parse error stands; what the job's limits did (CPU,
// memory, the result stream's cap), a worker lost, or a MemoryError, which the parser reports
// as its own error, may be another literal's doing, and that literal is parsed again in a job of
// its own (independent_of_its_job).
//
// Not shared, each answer's literals (the group added between two end_group calls) are one job,
// as grading did before: task_engine_bench's baseline.
#include <cstddef>
#include <deque>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "sandbox/pool.h"

namespace azr::solver {

// Whether a literal's result in a job it shared with other literals is the one it gets alone.
bool independent_of_its_job(const sandbox::CallResult& r);

class LiteralParses {
 public:
  static constexpr size_t kLiteralsPerJob = 64;  // a step's literals still spread over the workers

  LiteralParses(bool shared, const sandbox::Limits& limits) : shared_(shared), limits_(limits) {}

  // The slot of `text`'s result.
  size_t add(const std::string& text);
  // Not shared: the literals added since the last call are one job.
  void end_group();

  // The parse jobs; call once, after the last add.
  std::vector<sandbox::Job> jobs();
  // jobs()'s results, in order. `run_alone` runs the jobs of the literals parsed again.
  using RunJobs = std::function<std::vector<sandbox::JobResult>(std::vector<sandbox::Job>)>;
  void take(std::vector<sandbox::JobResult> results, const RunJobs& run_alone);

  const sandbox::CallResult& operator[](size_t slot) const { return results_[slot]; }

 private:
  bool shared_;
  sandbox::Limits limits_;
  std::deque<std::string> texts_;  // a deque: growing it moves no text, so slot_of_'s keys stay valid
  std::unordered_map<std::string_view, size_t> slot_of_;  // shared: each text once, its key a view of it
  std::vector<size_t> group_starts_{0};
  std::vector<std::pair<size_t, size_t>> bounds_;  // [begin, end) of texts_, a job each
  std::vector<sandbox::CallResult> results_;
};

}  // namespace azr::solver
