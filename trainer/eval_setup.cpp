#include "trainer/eval_setup.h"

#include "trainer/model_setup.h"

namespace azr::trainer {

namespace {

// The keys load_eval_benchmarks reads: the names, and a data_dir given.
void check_benchmark_keys(const TrainConfig& c) {
  for (const std::string& name : c.eval.benchmarks)
    if (!eval::find_benchmark(name))
      throw UserError("eval.benchmarks: unknown benchmark '" + name + "' (known: " + eval::benchmark_names() + ")");
  if (!c.eval.data_dir.empty()) try {
      eval::resolve_data_dir(c.eval.data_dir);
    } catch (const eval::BenchmarkError& e) {
      throw UserError(std::string("eval.data_dir: ") + e.what());
    }
}

}  // namespace

void check_eval_keys(const TrainConfig& c) {
  check_benchmark_keys(c);
  if (!c.eval.heldout_tasks.empty() && !std::filesystem::is_regular_file(c.eval.heldout_tasks))
    throw UserError("eval.heldout_tasks: " + c.eval.heldout_tasks + ": no such file (or not a file)");
}

std::vector<eval::Benchmark> load_eval_benchmarks(const TrainConfig& c, std::string* off_reason) {
  check_benchmark_keys(c);  // not heldout_tasks: azr bootstrap writes it, azr train reads it
  std::filesystem::path data;
  try {
    data = eval::resolve_data_dir(c.eval.data_dir);
  } catch (const eval::BenchmarkError& e) {
    if (!c.eval.data_dir.empty()) throw UserError(std::string("eval.data_dir: ") + e.what());
    if (off_reason) *off_reason = std::string(e.what()) + "; set eval.data_dir";
    return {};
  }
  std::vector<eval::Benchmark> benches;
  try {
    for (const std::string& name : c.eval.benchmarks) benches.push_back(eval::load_benchmark(name, data));
  } catch (const eval::BenchmarkError& e) {
    throw UserError(std::string(c.eval.data_dir.empty() ? "eval: " : "eval.data_dir: ") + e.what());
  }
  return benches;
}

eval::ModelEvalSettings model_eval_settings(const TrainConfig& c) {
  eval::ModelEvalSettings es;
  es.max_tokens = c.eval.max_tokens;
  es.batch_size = c.eval.batch_size;
  es.limit = size_t(c.eval.limit);
  // The benchmarks in the wording the policy is trained on.
  if (prompt_style(c) == model::PromptStyle::Compact) es.tmpl = eval::Template::Compact;
  return es;
}

sandbox::Limits sandbox_limits(const TrainConfig& c) {
  sandbox::Limits lim;
  lim.cpu_seconds = c.sandbox.cpu_seconds;
  lim.memory_bytes = uint64_t(c.sandbox.memory_mib * 1024 * 1024);
  return lim;
}

eval::TaskEvalSettings task_eval_settings(const TrainConfig& c) {
  eval::TaskEvalSettings ts;
  ts.max_tokens = c.eval.max_tokens;
  ts.batch_size = c.eval.batch_size;
  ts.limits = sandbox_limits(c);
  ts.prompt_style = prompt_style(c);
  return ts;
}

}  // namespace azr::trainer
