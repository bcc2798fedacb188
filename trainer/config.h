#pragma once
// The run configuration of `azr train`: a TOML file (toml++), checked against one schema, with
// `--set key=value` overrides, written back resolved into the run directory.
//
// Every number of METHOD.md is a key here, with the paper's (or the reference code's) value as
// its default; the quickstart config overrides what a tiny CPU model needs and says why.
//
// Validation: an unknown table or key is an error with a did-you-mean ("file.toml:12:1: unknown
// key 'algorithm.lerning_rate' (did you mean 'algorithm.lr'?)"); a wrong type or a value out of
// range names the file, line and key. `--set` errors name the override instead of a line.
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace azr::trainer {

// One message, already naming the file (or the --set override), line and key.
struct ConfigError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct RunSection {
  std::string name = "azr";       // run name; the default run dir is runs/<name>
  std::string run_dir;            // "" = runs/<name> (the CLI's --run-dir wins)
  uint64_t seed = 0;              // every random choice of the run derives from it
  int64_t steps = 500;            // self-play steps (the paper: ~500)
  int threads = 0;                // CPU threads for the model; 0 = all cores
  bool check_replicas = false;    // after every step, compare a hash of every rank's weights
  int64_t profile_step = 0;       // time this step's ops one by one (kernels/op_profile.h); 0 = none
  std::string gradient_allreduce = "host";  // "host" | "nccl": how a GPU run's ranks sum gradients
  bool operator==(const RunSection&) const = default;
};

struct ModelSection {
  std::string path;               // a Hugging Face checkpoint directory, or
  std::string preset;             // a new random model: "azr-tiny" | "azr-25m" (exactly one of the two)
  std::string tokenizer;          // tokenizer.json; "" = path/tokenizer.json, or the byte tokenizer for a preset
  double init_std = 0.02;         // preset initialisation
  std::string device = "cpu";     // "cpu" | "cuda" | "cpu-guarded" (kernels/backend.h)
  bool recompute = false;         // activation recomputation in backward (Transformer::set_recompute)
  bool decode_graphs = true;      // decode steps recorded and replayed (Transformer::set_decode_graphs)
  // "auto" | "fp32" | "bf16": how the GEMMs multiply (kernels/ops.h); auto: bf16 on a GPU, fp32
  // elsewhere (kernels::resolve_matmul_precision)
  std::string matmul_precision = "auto";
  double memory_gib = 0;  // micro_batch_size = 0 plans for this (a given one is warned against); 0 = the device's
  bool operator==(const ModelSection&) const = default;
};

struct AlgorithmSection {
  int batch_size = 64;              // prompts per task x role group and step (B)
  int k_references = 6;             // references in a deduction/abduction proposer prompt (K)
  int learnability_rollouts = 8;    // solver rollouts per valid proposal (n)
  int induction_inputs = 10;        // inputs an induction proposal writes (half shown, half hidden)
  std::string prompt_style = "paper";  // "paper" | "compact" (model/chat_format.h PromptStyle)
  std::string solve_order = "lagged";  // "lagged": solver batch drawn before the step's proposals
                                       // enter the buffer (the reference code); "same-step":
                                       // after (the paper's Algorithm 1)
  double temperature = 1.0;
  double top_p = 1.0;
  int top_k = 0;                    // 0 = off
  int max_prompt_tokens = 6144;
  int max_response_tokens = 8096;
  // rewards (METHOD.md "Reward"; the reference code's values)
  double wrong_answer_reward = -0.5;
  double format_error_reward = -1.0;
  double zero_learnability_reward = -0.5;  // the paper's equation: 0
  double advantage_eps = 1e-8;             // TRR++: A = (R - mean) / sqrt(var + advantage_eps)
  // the update
  double clip_eps = 0.2;
  double entropy_coeff = 0.001;
  double lr = 1e-6;
  double beta1 = 0.9, beta2 = 0.999, adam_eps = 1e-8;
  double weight_decay = 0.01;
  double grad_clip = 1.0;           // 0 = off
  int micro_batch_size = 8;         // sequences per forward/backward (gradients accumulate exactly); 0 = largest that fits
  int generation_batch_size = 64;   // sequences per generate() call
  bool operator==(const AlgorithmSection&) const = default;
};

struct SeedingSection {
  int64_t target = 256;   // tasks per type before step 1 (B x 4)
  int batch = 64;         // proposer prompts per type and round
  int max_rounds = 100;   // give up after this many rounds (a model that proposes nothing valid)
  std::string import_tasks;  // a JSONL of tasks (as `azr buffer export` writes) put in the buffer first; "" = none
  bool operator==(const SeedingSection&) const = default;
};

struct SandboxSection {
  int workers = 0;               // sandbox worker processes per rank; 0 = one per core
  double cpu_seconds = 2.0;      // per job
  double memory_mib = 512;       // address space per job
  int max_output_chars = 400;    // repr limit of a task's output
  bool operator==(const SandboxSection&) const = default;
};

struct BufferSection {
  int64_t capacity_per_type = 16384;    // 0 = unbounded
  std::string policy = "evict-oldest";  // "evict-oldest" | "keep-oldest" (the reference)
  int64_t rollout_retention_steps = 0;  // keep the responses of the last N steps; 0 = none
  bool operator==(const BufferSection&) const = default;
};

struct LoggingSection {
  std::string console = "auto";  // "auto" (progress view on a TTY, plain lines otherwise) | "progress" | "plain" | "off"
  bool tensorboard = true;       // TensorBoard event files in the run dir
  int print_every = 1;           // plain console lines every N steps
  bool operator==(const LoggingSection&) const = default;
};

struct CheckpointSection {
  int every = 10;      // steps between checkpoints; 0 = only at the end and on Ctrl-C
  int keep_last = 3;   // checkpoints kept (older ones are deleted); 0 = keep all
  bool operator==(const CheckpointSection&) const = default;
};

struct EvalSection {
  int every = 10;                                              // steps between evaluations; 0 = off
  std::vector<std::string> benchmarks = {"cruxeval_o", "cruxeval_i"};
  std::string data_dir;                                        // "" = $AZR_BENCHMARKS, else ../shared/benchmarks
  int64_t limit = 0;                                           // first N items of each; 0 = all
  int max_tokens = 1024;
  int batch_size = 16;
  std::string heldout_tasks;                                   // JSONL of tasks: solver accuracy per type on them; "" = none
  bool at_start = false;                                       // also evaluate before step 1 (a "step 0" metrics line)
  bool operator==(const EvalSection&) const = default;
};

// `azr bootstrap CONFIG`: a new model (model.preset) learns the task formats from programs the
// generator writes (zero human data), before self-play (bootstrap/).
struct BootstrapSection {
  std::string output = "runs/bootstrap/model";  // the model directory written (HF format, + heldout.jsonl, bootstrap.json)
  int64_t tasks_per_type = 256;     // generated training tasks per type
  int64_t heldout_per_type = 64;    // generated held-out tasks per type (another seed; never trained on)
  std::string difficulty = "easy";  // "easy" | "medium" | "hard": program size, nesting, constructs
  int steps = 300;                  // warm-start optimizer steps
  int batch_size = 8;               // transcripts per step
  double lr = 1e-3;
  int k_references = 2;             // references in the rendered proposer prompts
  int64_t data_offset = 0;          // >0: other training tasks from the same run seed (a control run's "more data")
  std::string heldout_from;         // a heldout.jsonl to evaluate on (and keep out of training) instead of generating one
  bool operator==(const BootstrapSection&) const = default;
};

struct TrainConfig {
  RunSection run;
  ModelSection model;
  AlgorithmSection algorithm;
  SeedingSection seeding;
  SandboxSection sandbox;
  BufferSection buffer;
  LoggingSection logging;
  CheckpointSection checkpoint;
  EvalSection eval;
  BootstrapSection bootstrap;
  bool operator==(const TrainConfig&) const = default;
};

// Parses `path` (TOML), applies `overrides` ("section.key=value", in order; the value is TOML
// syntax, and a bare word is taken as a string for string keys), validates everything and
// returns the resolved config. Throws ConfigError.
TrainConfig load_config(const std::string& path, const std::vector<std::string>& overrides = {});
// The same from TOML text; `source_name` is what errors call the file.
TrainConfig parse_config(const std::string& toml_text, const std::string& source_name,
                         const std::vector<std::string>& overrides = {});

// Every key with its resolved value, in schema order, as TOML that parse_config reads back to
// an equal config (the run directory's config.toml).
std::string to_toml(const TrainConfig& config);

// Where a key's value came from, as the prefix of a message about it, for checks made after the
// config is loaded (a preset name, a value the trainer alone refuses): "--set KEY=VALUE: " when an
// override set it (the last one), else "FILE:LINE:COL: " where the file sets it, else "FILE: " (the
// default). `key` is "section.name".
std::string config_key_origin(const std::string& path, const std::vector<std::string>& overrides,
                              std::string_view key);

// Cross-field checks that cannot be one key's range (exactly one of model.path / model.preset,
// known benchmark names are checked by the trainer). Called by parse_config.
void validate(const TrainConfig& config, const std::string& source_name);

}  // namespace azr::trainer
