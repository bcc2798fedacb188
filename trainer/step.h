#pragma once
// One self-play step (METHOD.md "One step"), on every rank at once:
//
//   rank 0 plans   proposer references (and, "lagged", the solver's tasks) from the buffer
//   all ranks      propose -> parse -> validate -> n learnability rollouts -> grade   (own share)
//   gather         every rank's outcomes reach every rank (small records, not tokens)
//   rank 0         inserts valid proposals, records solve statistics ("same-step": now draws
//                  the solver's tasks, including this step's)
//   all ranks      solve -> extract -> grade (own share) -> gather
//   all ranks      rewards -> TRR++ over the six global groups -> one policy update on the own
//                  share, gradients summed over ranks
//
// Item i of a phase is worked on by rank i % world_size with sampling seed derive(seed, step,
// phase, i), so outcomes do not depend on the number of ranks. Rank 0 owns the buffer and the
// data RNG; the other ranks get the plan by broadcast.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "buffer/task_buffer.h"
#include "sandbox/pool.h"
#include "trainer/config.h"
#include "trainer/dist.h"
#include "trainer/metrics.h"
#include "trainer/policy.h"

namespace azr::trainer {

struct ProposerOutcome {
  int64_t index = 0;
  buffer::TaskType type = buffer::TaskType::Deduction;
  // No sequence trained and no reward counted: the prompt did not fit max_prompt_tokens, or the
  // sandbox failed (reason internal_error: validation, or every learnability grade, was lost).
  bool skipped = false;
  bool valid = false;
  std::string reason;             // "ok" or the parse / validation / "prompt_too_long" reason
  buffer::Task task;              // when valid
  int learn_n = 0, learn_k = 0;   // learnability rollouts (less learn_lost) and how many solved it
  int learn_lost = 0;             // rollouts whose grade the sandbox lost: out of the mean
  int sandbox_asked = 0;          // results asked of the sandbox: the validation, the grades
  double solve_rate = 0;
  double reward = 0;
  int64_t prompt_tokens = 0, response_tokens = 0, learn_tokens = 0;
  std::string response;           // kept only when the buffer keeps rollouts
};

struct SolverOutcome {
  int64_t index = 0;
  buffer::TaskType type = buffer::TaskType::Deduction;
  int64_t task_id = 0;
  bool skipped = false;           // as ProposerOutcome::skipped (a grade lost: internal_error)
  bool format_ok = false, correct = false;
  std::string reason;             // extraction reason, else the grade's
  bool sandbox_asked = false;     // the answer went to the sandbox to be graded
  double reward = 0;
  int64_t prompt_tokens = 0, response_tokens = 0;
  std::string response;
};

struct StepTimes {
  double plan = 0, generate = 0, sandbox = 0, update = 0, total = 0;
  // The step less its timed phases: gathering outcomes across ranks, the buffer's writes (the
  // proposals' inserts, solve statistics, served marks, rollouts), rewards and TRR++, parsing.
  // Named so that the phases add up to the step.
  double other() const { return std::max(0.0, total - plan - generate - sandbox - update); }
};

struct StepResult {
  std::vector<ProposerOutcome> proposer;  // global, by index
  std::vector<SolverOutcome> solver;
  std::vector<double> proposer_advantages, solver_advantages;  // per outcome (0 for skipped)
  UpdateStats update;
  StepTimes times;
  buffer::InsertResult inserted;
  int64_t buffer_tasks[3] = {0, 0, 0};    // after the step (rank 0's view, broadcast)
  uint64_t sandbox_jobs = 0;              // this rank
  int64_t generated_tokens = 0;           // all ranks
  // Prompt tokens of the sequences the policy generated, and those its layers ran on (identical
  // prompts in one generate() call are prefilled once), all ranks.
  int64_t prompt_tokens = 0, prefilled_tokens = 0;
};

// Where completions come from: (prompts, one seed each, sampling) -> one completion per prompt.
// The trainer samples from the policy; the step's tests script the responses (a model that
// writes valid tasks on demand is what issue 10's bootstrap makes; these tests need it now).
using Sampler = std::function<std::vector<model::Completion>(const std::vector<std::vector<int32_t>>& prompts,
                                                             const std::vector<uint64_t>& seeds,
                                                             const model::SamplingParams& params)>;

struct StepContext {
  const TrainConfig& config;
  Policy& policy;
  sandbox::Pool& pool;
  dist::Communicator& comm;
  buffer::TaskBuffer* buffer = nullptr;  // rank 0 only
  std::mt19937_64* data_rng = nullptr;   // rank 0 only
  std::function<void(const std::string&)> phase;  // progress text; may be empty
  Sampler sampler;                                // empty: the policy's own generate()
  // Sees this rank's training sequences just before the update (bench/train_step_bench times
  // the forward pass a separate-engine design would spend on them); may be empty.
  std::function<void(const std::vector<TrainSequence>&)> before_update;
};

StepResult run_step(StepContext& ctx, int64_t step);

// The step's metrics (rank-independent except the times and perf/ figures, which are rank 0's).
Scalars step_metrics(const StepResult& r, const TrainConfig& config, double lr);

// Results asked of the sandbox in a step and those it lost (internal_error), all ranks', by role:
// the proposer's (validations, learnability grades) and the solver's (grades).
struct LostOfAsked {
  int64_t asked = 0, lost = 0;
};
struct SandboxLosses {
  LostOfAsked proposer, solver;
  int64_t asked() const { return proposer.asked + solver.asked; }
  int64_t lost() const { return proposer.lost + solver.lost; }
};
SandboxLosses sandbox_losses(const StepResult& r);

// The step's prompts longer than algorithm.max_prompt_tokens, per role: left out of generation
// and the update (metrics skipped/prompt_too_long/<role>; the trainer's log names them).
struct PromptsTooLong {
  int64_t proposer = 0, solver = 0;
};
PromptsTooLong prompts_too_long(const StepResult& r);

// The longest of the six prompts (proposer and solver of each type) with no reference and an
// empty program: every prompt of that kind holds its text and more, so an
// algorithm.max_prompt_tokens below it leaves a kind that is never generated for, nor trained on
// (the trainer refuses such a limit before any work).
struct BarePrompt {
  std::string kind;  // "deduction proposer", "induction solver", ...
  int64_t tokens = 0;
};
BarePrompt longest_bare_prompt(const model::Tokenizer& tok, const TrainConfig& cfg);

// A lost result is masked, so a sandbox that loses everything (no worker of a kind can start)
// would let a run go on for hours training on nothing. This counts, for each role, the steps that
// lost every result the role asked for, in a row; the trainer stops at kStopAfter, the log having
// named each. Per role, since the alternate workers alone failing loses every validation (each
// input runs under both hash seeds) while the solver's grades still come back. Fewer such steps
// (workers lost at once and replaced) only mask; a step that asked nothing changes no count.
// Rank-independent: the outcomes are all ranks'.
class LostStepWatch {
 public:
  static constexpr int kStopAfter = 3;
  // A resumed run's counts (TrainerState), so it stops where the run would have.
  explicit LostStepWatch(int proposer_in_a_row = 0, int solver_in_a_row = 0)
      : proposer_(proposer_in_a_row), solver_(solver_in_a_row) {}
  // Whether the run must stop after this step.
  bool must_stop(const SandboxLosses& l) {
    count(proposer_, l.proposer);
    count(solver_, l.solver);
    return in_a_row() >= kStopAfter;
  }
  int in_a_row() const { return std::max(proposer_, solver_); }
  int proposer_in_a_row() const { return proposer_; }
  int solver_in_a_row() const { return solver_; }

 private:
  static void count(int& in_a_row, const LostOfAsked& l) {
    if (l.asked > 0) in_a_row = l.lost == l.asked ? in_a_row + 1 : 0;
  }
  int proposer_ = 0, solver_ = 0;
};

}  // namespace azr::trainer
