#pragma once
// One function pair per subcommand: add_X_command declares its flags, run_X_command runs it
// and returns the exit code. Errors the user caused throw UsageError (exit 2).
#include <CLI/CLI.hpp>

#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace azr::cli {

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// For path options and arguments: "" (`--run-dir "$RUN"` with $RUN unset) is refused. It read as
// the option left out (the default directory, stdout) or, for a buffer, as SQLite's temporary
// database, so `azr buffer import '' tasks.jsonl` said it imported them and kept none.
inline CLI::Validator non_empty_path() {
  return CLI::Validator(
      [](std::string& text) {
        return text.empty() ? std::string("an empty path (an unset variable?)") : std::string();
      },
      "");
}

struct ExecOptions {
  std::string file;       // a program file (FILE.py)
  std::string input;      // its argument list
  std::string jsonl;      // or: a JSONL file of {program, input}, "-" for stdin
  std::string entry = "f";
  double timeout = 2.0;   // CPU seconds per job
  double wall_timeout = 0;
  double memory_mib = 512;
  uint64_t output_limit = 64 << 10;
  int workers = 0;
  bool determinism = false;
  std::string input_mode = "literal";
};

CLI::App* add_exec_command(CLI::App& app, ExecOptions& o);
int run_exec(const ExecOptions& o);

struct BufferOptions {
  std::string action;  // set by the chosen subcommand
  std::string db;
  bool json = false;
  // list
  std::string type, origin, steps, sort = "id";
  bool descending = false;
  int64_t limit = 50;
  // show
  int64_t id = 0;
  // export
  std::string format = "jsonl", output;
  bool core = false;
  // import
  std::string file;
  bool skip_invalid = false;
  int64_t capacity = 0;  // an import evicts nothing already there unless asked (--capacity)
  std::string policy = "evict-oldest";
  double wait_seconds = 5;  // for another writer's lock
};

CLI::App* add_buffer_command(CLI::App& app, BufferOptions& o);
int run_buffer(const BufferOptions& o);

struct TokenizeOptions {
  std::string tokenizer, jsonl;
  std::optional<std::string> text;  // set even when empty: "" is a string to encode
  bool decode = false;
};

CLI::App* add_tokenize_command(CLI::App& app, TokenizeOptions& o);
int run_tokenize(const TokenizeOptions& o);

// Shared by generate and logprobs (defined in cmd_generate.cpp). Load failures the user can fix
// (a missing or invalid model directory or tokenizer) throw UsageError naming the path.
}  // namespace azr::cli
namespace azr::model {
class Transformer;
class BpeTokenizer;
}  // namespace azr::model
namespace azr::cli {
// Where a command's model runs and how its GEMMs multiply (kernels/backend.h).
struct DeviceOptions {
  std::string device = "cpu";             // --device
  std::string matmul_precision = "auto";  // --matmul-precision (kernels::resolve_matmul_precision)
  bool decode_graphs = true;              // --no-decode-graphs (Transformer::set_decode_graphs)
};
// The model in the memory of the device; an unusable device or an unknown precision is a
// UsageError saying why.
model::Transformer load_model(const std::string& dir, const DeviceOptions& device = {});
// --device and --matmul-precision, for the commands that run a model; --decode-graphs too for
// those that generate.
void add_device_option(CLI::App* command, DeviceOptions& device, bool generates = true);
// --tokenizer (tokenizer.json or a directory holding it) if given, else MODEL_DIR/tokenizer.json.
std::unique_ptr<model::BpeTokenizer> load_model_tokenizer(const std::string& model_dir, const std::string& tokenizer_arg);
// --max-tokens past this is refused up front (generate, eval): 100,000,000 reached the KV cache's
// allocation and ended in std::bad_alloc. It is far past any model's context (Qwen2.5: 32,768 to
// 131,072).
inline constexpr int32_t kMaxNewTokens = 1 << 20;
// --num-samples (generate) and --n (eval) past this are refused up front: 2^31 - 1 ended in a bare
// std::bad_alloc. pass@k estimates use tens to hundreds of samples.
inline constexpr int32_t kMaxSamples = 1 << 16;
// CPU threads a command may be given: past any machine's cores, within an int (a larger number
// failed CLI11's conversion with a bare "Could not convert").
inline constexpr int32_t kMaxThreads = 1 << 16;
// Throws UsageError (prefixed by `where`) when an encoded id has no row in the model's embedding:
// a tokenizer of another model, which the forward would reject with no word of the flag.
void check_ids_fit_model(const std::vector<int32_t>& ids, int64_t vocab_rows, const std::string& where);

struct GenerateOptions {
  std::string model, tokenizer;
  std::optional<std::string> prompt;  // set even when empty, so "" gets the empty-prompt error
  int32_t max_tokens = 256;
  float temperature = 1.f, top_p = 1.f;
  int32_t top_k = 0;
  uint64_t seed = 0;
  std::vector<std::string> stop;
  std::vector<int32_t> stop_ids;
  bool ignore_eos = false, json = false;
  int32_t num_samples = 1;
  int threads = 0;
  DeviceOptions device;
};

CLI::App* add_generate_command(CLI::App& app, GenerateOptions& o);
int run_generate(const GenerateOptions& o);

struct LogprobsOptions {
  std::string model, tokenizer, jsonl;
  int32_t batch_size = 8;
  int threads = 0;
  DeviceOptions device;
};

CLI::App* add_logprobs_command(CLI::App& app, LogprobsOptions& o);
int run_logprobs(const LogprobsOptions& o);

}  // namespace azr::cli

namespace azr::cli {

struct TaskOptions {
  std::string action;  // validate | grade | prompt (set by the chosen subcommand)
  std::string type;    // deduction | abduction | induction
  std::string jsonl;   // validate/grade: JSONL file, "-" for stdin
  double timeout = 2.0;    // CPU seconds per sandbox job
  double memory_mib = 512; // address-space limit per job, MiB
  int workers = 0;
  // prompt
  std::string role;    // proposer | solver
  std::string prompt_style = "paper";  // paper | compact (model/chat_format.h)
  std::string db;
  int k = 6;
  bool k_given = false;  // --k on the command line: refused where no prompt takes it
  std::optional<uint64_t> seed;
  int64_t task_id = 0;
  bool json = false;
};

CLI::App* add_task_command(CLI::App& app, TaskOptions& o);
int run_task(const TaskOptions& o);

}  // namespace azr::cli

namespace azr::cli {

// azr eval (cli/cmd_eval.cpp): grade benchmark answers (--answers) or generate them first
// (--model), then print the pass@1 / pass@k table.
struct EvalOptions {
  std::string answers;             // JSONL of {bench, id, response}
  std::string model, tokenizer;    // or: generate with this model
  std::vector<std::string> bench;  // --model: benchmarks to run (comma-separated allowed)
  std::string data;                // benchmark data dir (else $AZR_BENCHMARKS, else ../shared/benchmarks)
  std::string out;                 // per-response results JSONL
  int k = 0;                       // also report pass@k
  int n = 1;                       // --model: samples per item
  int64_t limit = 0;               // --model: first L items of each benchmark; 0 = all
  std::optional<float> temperature;  // --model: default 0 (greedy) when n = 1, else 1.0
  float top_p = 1.f;
  int32_t max_tokens = 1024;
  std::string template_name;        // "" = the wording the model records it learned, else r1
  uint64_t seed = 0;
  int32_t batch_size = 16;
  bool json = false;               // print the summary as JSON instead of the table
  double timeout = 5.0;            // CPU seconds per sandbox job
  double memory_mib = 1024;
  int workers = 0;
  int threads = 0;
  DeviceOptions device;            // --model: where the model runs
};

CLI::App* add_eval_command(CLI::App& app, EvalOptions& o);
int run_eval(const EvalOptions& o);

}  // namespace azr::cli

namespace azr::cli {

// azr train (cli/cmd_train.cpp).
struct TrainCommandOptions {
  std::string config;
  std::vector<std::string> overrides;
  std::string run_dir, resume;
  std::string dist = "auto";
  double dist_timeout = 1800;  // seconds
};

CLI::App* add_train_command(CLI::App& app, TrainCommandOptions& o);
int run_train(const TrainCommandOptions& o);

}  // namespace azr::cli

namespace azr::cli {

// azr bootstrap (cli/cmd_train.cpp).
struct BootstrapCommandOptions {
  std::string config, output;
  std::vector<std::string> overrides;
};

CLI::App* add_bootstrap_command(CLI::App& app, BootstrapCommandOptions& o);
int run_bootstrap(const BootstrapCommandOptions& o);

struct MemoryOptions {
  std::string model;
  std::string precision = "bf16-mixed";
  std::string device = "cuda";  // the reserve beside the plan: model::kGpuReserveBytes or kCpuReserveBytes
  int64_t seq_len = 4096;
  int64_t micro_batch = 0;  // 0 = the largest that fits
  bool recompute = false;
  int64_t kv_slots = 0;
  int64_t kv_capacity = -1;  // -1 = seq_len
  double budget_gib = 80;
  bool json = false;
};

CLI::App* add_memory_command(CLI::App& app, MemoryOptions& o);
int run_memory(const MemoryOptions& o);

}  // namespace azr::cli
