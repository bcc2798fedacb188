#pragma once
// What `azr train` and `azr bootstrap` both do with [eval]: load the benchmarks and the settings
// they are evaluated with, so a bootstrap's before/after figures and a run's eval/<bench>/pass@1
// are the same measurement.
#include <string>
#include <vector>

#include "eval/benchmarks.h"
#include "eval/model_eval.h"
#include "eval/task_eval.h"
#include "sandbox/limits.h"
#include "trainer/config.h"

namespace azr::trainer {

// eval.benchmarks from eval.data_dir. With no data dir given and no data in the usual places
// (eval::resolve_data_dir), returns nothing and sets *off_reason: the commands then run without
// benchmark evaluation and say so. Any other problem (a bad data dir, an unknown benchmark, a
// broken file) throws UserError.
std::vector<eval::Benchmark> load_eval_benchmarks(const TrainConfig& config, std::string* off_reason);

// The eval keys without loading anything (evaluation may be off): names are known benchmarks, a
// data_dir given is a directory of them, a heldout_tasks given is a file. Each message names its
// key; a typo is a config error even where evaluation is off (UserError).
void check_eval_keys(const TrainConfig& config);

// eval.max_tokens, eval.batch_size, eval.limit, greedy, and the template of the policy's own
// prompt wording (compact for algorithm.prompt_style = "compact", else r1).
eval::ModelEvalSettings model_eval_settings(const TrainConfig& config);

// The held-out solver evaluation (eval.heldout_tasks in azr train, heldout.jsonl in azr
// bootstrap): eval.max_tokens, eval.batch_size, the sandbox limits and the policy's prompt
// wording. One definition, so a bootstrap's "after" and a run's step-0 figure are comparable.
eval::TaskEvalSettings task_eval_settings(const TrainConfig& config);

// The sandbox limits of every program a run executes (validation, grading, both evaluations,
// the bootstrap's validity figure): sandbox.cpu_seconds and sandbox.memory_mib, so a task
// judged in training is judged the same in evaluation.
sandbox::Limits sandbox_limits(const TrainConfig& config);

}  // namespace azr::trainer
