#include "trainer/config.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <string_view>
#include <toml++/toml.h>
#include <type_traits>
#include <variant>

#include "sandbox/limits.h"

namespace azr::trainer {
namespace {

// ---------------------------------------------------------------------------------------------
// Schema machinery. A key's TOML type is the C++ type of the field it is bound to:
// std::string -> string, int / int64_t / uint64_t -> integer, double -> float, bool -> boolean,
// std::vector<std::string> -> array of strings.

using FieldRef = std::variant<std::string*, int*, int64_t*, uint64_t*, double*, bool*,
                              std::vector<std::string>*>;
using Binder = FieldRef (*)(TrainConfig&);

template <auto Section, auto Member>
FieldRef bind(TrainConfig& c) {
  return &((c.*Section).*Member);
}

struct Any {};
struct NonEmpty {};
struct IntRange {
  int64_t lo, hi;
};
struct FloatRange {
  double lo, hi;
  bool lo_open, hi_open;
};
struct OneOf {
  std::vector<std::string_view> values;
};
using Check = std::variant<Any, NonEmpty, IntRange, FloatRange, OneOf>;

constexpr int64_t kIntMax = INT_MAX;  // the bound of every `int` field
constexpr double kInf = std::numeric_limits<double>::infinity();

// `int` fields stop at INT_MAX, int64_t and uint64_t fields at INT64_MAX (TOML's own limit).
Check int_min(int64_t lo) { return IntRange{lo, kIntMax}; }
Check i64_min(int64_t lo) { return IntRange{lo, std::numeric_limits<int64_t>::max()}; }
Check float_min(double lo) { return FloatRange{lo, kInf, false, true}; }
Check float_above(double lo) { return FloatRange{lo, kInf, true, true}; }
Check float_in(char open, double lo, double hi, char close) {
  return FloatRange{lo, hi, open == '(', close == ')'};
}
Check finite() { return FloatRange{-kInf, kInf, true, true}; }
// A value the optimizer takes: it computes in float, where a double past float's range is inf
// (a learning rate of 1e300 made every weight NaN at the first step, found only at the save).
// Below 0x1.ffffffp+127, halfway between float's largest and 2^128, a double rounds to a finite
// float (float's largest in any spelling, 3.4028235e38 too); from it on, to inf.
Check positive_float32() { return FloatRange{0.0, 0x1.ffffffp+127, true, true}; }
Check one_of(std::initializer_list<std::string_view> v) { return OneOf{v}; }

struct KeySpec {
  std::string_view section;
  std::string_view name;
  Binder ref;
  Check check;
  std::string_view doc;
  // Names people are likely to type instead (never accepted, only suggested from).
  std::vector<std::string_view> aliases = {};

  std::string full() const { return std::string(section) + "." + std::string(name); }
};

#define AZR_KEY(sec, key) #sec, #key, &bind<&TrainConfig::sec, &decltype(TrainConfig::sec)::key>

// The schema: every key of the run configuration, in the order to_toml writes them.
// Floats must always be finite (NaN and inf are rejected even where no range is given).
const std::vector<KeySpec>& schema() {
  static const std::vector<KeySpec> keys = {
      // [run]
      {AZR_KEY(run, name), NonEmpty{}, "run name; the default run directory is runs/<name>"},
      {AZR_KEY(run, run_dir), Any{}, "run directory; \"\" = runs/<name> (the CLI's --run-dir wins)", {"dir", "output_dir"}},
      {AZR_KEY(run, seed), i64_min(0), "every random choice of the run derives from it"},
      {AZR_KEY(run, steps), i64_min(0), "self-play steps (the paper: ~500)", {"max_steps", "num_steps"}},
      {AZR_KEY(run, threads), int_min(0), "CPU threads for the model; 0 = all cores", {"num_threads"}},
      {AZR_KEY(run, check_replicas), Any{},
       "after every step, check that every rank holds bit-identical weights (a hash; stops the run if not)"},
      {AZR_KEY(run, profile_step), i64_min(0),
       "profile this step op by op: each op of the model timed alone, the device waited for after each (the step "
       "runs slower, and the run without decode graphs); the split goes to op_profile_step<N>.json in the run "
       "directory and the log. 0 = none",
       {"profile", "profile_ops"}},
      {AZR_KEY(run, gradient_allreduce), one_of({"host", "nccl"}),
       "how the ranks of a model.device = \"cuda\" run sum their gradients: \"host\" (through a host copy and the "
       "launch's MPI or TCP communicator, in rank order) or \"nccl\" (on the GPUs, no copy; needs a build with "
       "NCCL; opt-in until it has run on several GPUs). Runs on the CPU and single-rank runs ignore it",
       {"allreduce", "dist_backend", "nccl"}},
      // [model]
      {AZR_KEY(model, path), Any{}, "a Hugging Face checkpoint directory (exactly one of path / preset)", {"model_path", "checkpoint"}},
      {AZR_KEY(model, preset), Any{},
       "a new random model by preset name, e.g. \"azr-tiny\", \"azr-25m\" (the trainer checks the name)"},
      {AZR_KEY(model, tokenizer), Any{}, "tokenizer.json; \"\" = path/tokenizer.json, or the byte tokenizer for a preset"},
      {AZR_KEY(model, init_std), float_above(0.0), "standard deviation of a preset's random initialisation"},
      {AZR_KEY(model, device), one_of({"cpu", "cuda", "cpu-guarded"}),
       "where the model runs: \"cpu\", \"cuda\" (each rank takes GPU local_rank), or \"cpu-guarded\" (the CPU kernels "
       "behind memory the host cannot touch: checks a run's device path without a GPU; tiny models only)",
       {"backend", "gpu"}},
      {AZR_KEY(model, recompute), Any{},
       "activation recomputation: keep each layer's input only and rerun the layer in backward (less memory, one "
       "more forward)", {"gradient_checkpointing", "activation_checkpointing"}},
      {AZR_KEY(model, decode_graphs), Any{},
       "record each decode step once per batch size and replay it: CUDA graphs, one launch per step instead of "
       "hundreds, for rollouts at small batches (no effect on the CPU)",
       {"cuda_graphs", "use_cuda_graphs"}},
      {AZR_KEY(model, matmul_precision), one_of({"auto", "fp32", "bf16"}),
       "how the GEMMs multiply: \"fp32\", or \"bf16\" (each operand rounded to bfloat16, sums in fp32: the GPU's "
       "tensor cores; on the CPU a slower reference), or \"auto\": bf16 on a GPU, fp32 elsewhere (as azr eval "
       "and azr logprobs choose). Generation and learning use the same, so the sampler's log-probs stay the "
       "learner's", {"precision", "dtype", "mixed_precision"}},
      {AZR_KEY(model, memory_gib), float_min(0.0),
       "device memory that algorithm.micro_batch_size = 0 plans for (and a given micro_batch_size is warned "
       "against), GiB; 0 = the GPU's memory (model.device = \"cuda\"), or this machine's on the CPU", {"memory", "budget_gib", "gpu_memory"}},
      // [algorithm]
      {AZR_KEY(algorithm, batch_size), int_min(1), "prompts per task x role group and step (B)", {"b", "batch"}},
      {AZR_KEY(algorithm, k_references), int_min(1), "references in a deduction/abduction proposer prompt (K)", {"k", "references"}},
      {AZR_KEY(algorithm, learnability_rollouts), int_min(1), "solver rollouts per valid proposal (n)", {"n", "rollouts"}},
      {AZR_KEY(algorithm, induction_inputs), int_min(2), "inputs an induction proposal writes (half shown, half hidden)"},
      {AZR_KEY(algorithm, solve_order), one_of({"lagged", "same-step"}),
       "\"lagged\": the solver batch is drawn before the step's proposals enter the buffer (the reference code); "
       "\"same-step\": after (the paper's Algorithm 1)"},
      {AZR_KEY(algorithm, prompt_style), one_of({"paper", "compact"}),
       "task prompt wording: \"paper\" (the reference's instructions, for pretrained models) or \"compact\" "
       "(one-line instructions, for tiny models made by azr bootstrap); the answer format is the same"},
      {AZR_KEY(algorithm, temperature), float_min(0.0), "sampling temperature; 0 = greedy"},
      {AZR_KEY(algorithm, top_p), float_in('(', 0.0, 1.0, ']'), "nucleus sampling mass", {"nucleus"}},
      {AZR_KEY(algorithm, top_k), int_min(0), "top-k sampling; 0 = off"},
      {AZR_KEY(algorithm, max_prompt_tokens), int_min(1), "longest prompt, in tokens", {"max_prompt_length"}},
      {AZR_KEY(algorithm, max_response_tokens), int_min(1), "longest response, in tokens", {"max_response_length", "max_new_tokens"}},
      {AZR_KEY(algorithm, wrong_answer_reward), finite(), "reward of a well-formed but wrong answer"},
      {AZR_KEY(algorithm, format_error_reward), finite(), "reward of a response that does not follow the format"},
      {AZR_KEY(algorithm, zero_learnability_reward), finite(),
       "proposer reward when the solver solves all or none of the rollouts (the paper's equation: 0)"},
      {AZR_KEY(algorithm, advantage_eps), float_above(0.0),
       "TRR++'s epsilon: each task type x role group's advantages are (R - mean) / sqrt(var + advantage_eps)",
       {"whiten_eps", "advantage_epsilon"}},
      {AZR_KEY(algorithm, clip_eps), float_above(0.0), "PPO clip range (epsilon)", {"clip", "clip_ratio", "epsilon"}},
      {AZR_KEY(algorithm, entropy_coeff), float_min(0.0), "entropy bonus coefficient", {"entropy", "entropy_coef"}},
      {AZR_KEY(algorithm, lr), positive_float32(),
       "AdamW learning rate (constant); at most a float's largest, as the optimizer computes in float",
       {"learning_rate"}},
      {AZR_KEY(algorithm, beta1), float_in('[', 0.0, 1.0, ')'), "AdamW first-moment decay"},
      {AZR_KEY(algorithm, beta2), float_in('[', 0.0, 1.0, ')'), "AdamW second-moment decay"},
      {AZR_KEY(algorithm, adam_eps), float_above(0.0), "AdamW denominator epsilon", {"eps"}},
      {AZR_KEY(algorithm, weight_decay), float_min(0.0), "AdamW decoupled weight decay", {"wd"}},
      {AZR_KEY(algorithm, grad_clip), float_min(0.0), "global gradient-norm clip; 0 = off", {"max_grad_norm", "clip_grad_norm"}},
      {AZR_KEY(algorithm, micro_batch_size), int_min(0),
       "sequences per forward/backward (gradients accumulate exactly); 0 = the largest whose training peak, in the "
       "memory plan (azr memory) for max_prompt_tokens + max_response_tokens, fits model.memory_gib"},
      {AZR_KEY(algorithm, generation_batch_size), int_min(1), "sequences per generate() call"},
      // [seeding]
      {AZR_KEY(seeding, target), i64_min(0), "tasks per type in the buffer before step 1 (B x 4)"},
      {AZR_KEY(seeding, batch), int_min(1), "proposer prompts per type and seeding round"},
      {AZR_KEY(seeding, max_rounds), int_min(1), "give up after this many rounds (a model that proposes nothing valid)"},
      {AZR_KEY(seeding, import_tasks), Any{},
       "a JSONL file of tasks (as `azr buffer export` writes them) inserted before seeding; \"\" = none",
       {"seed_file", "seed_tasks"}},
      // [sandbox]
      {AZR_KEY(sandbox, workers), int_min(0), "sandbox worker processes per rank; 0 = one per core"},
      {AZR_KEY(sandbox, cpu_seconds), float_in('[', sandbox::kMinCpuSeconds, sandbox::kMaxCpuSeconds, ']'),
       "CPU time limit per job, in seconds", {"timeout"}},
      {AZR_KEY(sandbox, memory_mib), float_in('[', sandbox::kMinMemoryMib, sandbox::kMaxMemoryMib, ']'),
       "address-space limit per job, in MiB", {"memory"}},
      {AZR_KEY(sandbox, max_output_chars), int_min(1), "longest repr of a task's output, in characters"},
      // [buffer]
      {AZR_KEY(buffer, capacity_per_type), i64_min(0), "tasks kept per type; 0 = unbounded", {"capacity"}},
      {AZR_KEY(buffer, policy), one_of({"evict-oldest", "keep-oldest"}),
       "what a full buffer does: \"evict-oldest\" or \"keep-oldest\" (the reference code)"},
      {AZR_KEY(buffer, rollout_retention_steps), i64_min(0), "keep the responses of the last N steps; 0 = none"},
      // [logging]
      {AZR_KEY(logging, console), one_of({"auto", "progress", "plain", "off"}),
       "\"auto\" (a progress view on a TTY, plain lines otherwise), \"progress\", \"plain\" or \"off\""},
      {AZR_KEY(logging, tensorboard), Any{}, "write TensorBoard event files into the run directory"},
      {AZR_KEY(logging, print_every), int_min(1), "plain console lines every N steps"},
      // [checkpoint]
      {AZR_KEY(checkpoint, every), int_min(0), "steps between checkpoints; 0 = only at the end and on Ctrl-C"},
      {AZR_KEY(checkpoint, keep_last), int_min(0), "checkpoints kept (older ones are deleted); 0 = keep all"},
      // [eval]
      {AZR_KEY(eval, every), int_min(0), "steps between evaluations; 0 = off"},
      {AZR_KEY(eval, benchmarks), Any{}, "benchmarks evaluated (names as `azr eval` takes them)"},
      {AZR_KEY(eval, data_dir), Any{}, "benchmark data; \"\" = $AZR_BENCHMARKS, else ../shared/benchmarks"},
      {AZR_KEY(eval, limit), i64_min(0), "first N items of each benchmark; 0 = all"},
      {AZR_KEY(eval, max_tokens), int_min(1), "longest response, in tokens"},
      {AZR_KEY(eval, batch_size), int_min(1), "sequences per generate() call"},
      {AZR_KEY(eval, heldout_tasks), Any{},
       "a JSONL of tasks (`azr bootstrap` writes heldout.jsonl): greedy solver accuracy per type on them; \"\" = none"},
      {AZR_KEY(eval, at_start), Any{}, "also evaluate before step 1 (a metrics line for step 0)"},
      // [bootstrap]
      {AZR_KEY(bootstrap, output), NonEmpty{}, "the model directory `azr bootstrap` writes (HF format, heldout.jsonl, bootstrap.json)"},
      // At most 10^7: the generator counts in int (2^31 + 1 made 1 task, silently), and ten
      // million a type is hours of sandbox time already.
      {AZR_KEY(bootstrap, tasks_per_type), IntRange{1, 10'000'000}, "generated training tasks per type"},
      {AZR_KEY(bootstrap, heldout_per_type), IntRange{0, 10'000'000},
       "generated held-out tasks per type (another seed; never trained on)"},
      {AZR_KEY(bootstrap, difficulty), one_of({"easy", "medium", "hard"}), "program size, nesting and constructs"},
      {AZR_KEY(bootstrap, steps), int_min(0), "warm-start optimizer steps"},
      {AZR_KEY(bootstrap, batch_size), int_min(1), "transcripts per warm-start step"},
      {AZR_KEY(bootstrap, lr), positive_float32(),
       "warm-start peak learning rate; at most a float's largest, as the optimizer computes in float"},
      {AZR_KEY(bootstrap, k_references), int_min(1), "references in the rendered proposer prompts"},
      {AZR_KEY(bootstrap, data_offset), i64_min(0),
       "0: the training tasks of run.seed; N > 0: another N-th set of tasks (a control run's extra data)"},
      {AZR_KEY(bootstrap, heldout_from), Any{},
       "a heldout.jsonl to evaluate on (and keep out of training) instead of generating one; \"\" = generate"},
  };
  return keys;
}

#undef AZR_KEY

std::vector<std::string_view> section_names() {
  std::vector<std::string_view> out;
  for (const auto& k : schema())
    if (std::find(out.begin(), out.end(), k.section) == out.end()) out.push_back(k.section);
  return out;
}

const KeySpec* find_key(std::string_view section, std::string_view name) {
  for (const auto& k : schema())
    if (k.section == section && k.name == name) return &k;
  return nullptr;
}

// ---------------------------------------------------------------------------------------------
// Did-you-mean.

// Optimal string alignment distance (Levenshtein plus adjacent transpositions).
size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[a.size()][b.size()];
}

// Edits a typo of `target` may contain: two edits to a short name make another word ("lr" and
// "dir"), so names up to four characters get one.
size_t typo_budget(std::string_view target) {
  return target.size() <= 4 ? 1 : std::max<size_t>(2, target.size() / 3);
}

// Close enough to be a typo of `target`; a truncation ("keep" for "keep_last") counts too,
// ranked as the weakest acceptable typo.
bool close_to(std::string_view input, std::string_view target, size_t* dist) {
  *dist = edit_distance(input, target);
  if (*dist <= typo_budget(target) && *dist < target.size()) return true;  // "x" is no typo of "b"
  const std::string_view shorter = input.size() < target.size() ? input : target;
  const std::string_view longer = input.size() < target.size() ? target : input;
  if (shorter.size() >= 4 && longer.starts_with(shorter)) {
    *dist = typo_budget(target);
    return true;
  }
  return false;
}

struct Suggestion {
  size_t score = SIZE_MAX;
  std::string text;
  void offer(size_t s, std::string t) {
    if (s < score) score = s, text = std::move(t);
  }
};

// The known key nearest to `section.name` (section may be "" for a top-level key): by the key's
// name or a common alias, in the same section if anything there is close, else in another;
// or, where the section is not a known one, by the whole dotted path (a misspelt section).
std::string suggest_key(std::string_view section, std::string_view name) {
  Suggestion best;
  const std::string full = std::string(section) + "." + std::string(name);
  const auto sections = section_names();
  const bool known_section = std::find(sections.begin(), sections.end(), section) != sections.end();
  for (const auto& k : schema()) {
    const size_t penalty = k.section == section ? 0 : 1000;
    size_t d;
    if (close_to(name, k.name, &d)) best.offer(d + penalty, k.full());
    for (auto alias : k.aliases)
      if (close_to(name, alias, &d)) best.offer(d + penalty, k.full());
    if (!section.empty() && !known_section && close_to(full, k.full(), &d)) best.offer(d, k.full());
  }
  return best.text;
}

std::string suggest_section(std::string_view name) {
  Suggestion best;
  for (auto s : section_names()) {
    size_t d;
    if (close_to(name, s, &d)) best.offer(d, std::string(s));
  }
  return best.text;
}

std::string did_you_mean(const std::string& s) {
  return s.empty() ? "" : " (did you mean '" + s + "'?)";
}

// ---------------------------------------------------------------------------------------------
// Formatting of values, for messages and for to_toml.

std::string format_float(double v) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, v);  // shortest text that reads back exactly
  std::string s(buf, r.ptr);
  if (std::isfinite(v) && s.find_first_of(".eE") == std::string::npos) s += ".0";
  return s;
}

// A TOML basic string. Non-ASCII UTF-8 passes through unchanged (TOML strings are UTF-8).
std::string quote(std::string_view s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\t': out += "\\t"; break;
      case '\n': out += "\\n"; break;
      case '\f': out += "\\f"; break;
      case '\r': out += "\\r"; break;
      default:
        if (c < 0x20 || c == 0x7f) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04X", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

std::string format_value(const FieldRef& ref) {
  return std::visit(
      [](auto* p) -> std::string {
        using T = std::remove_pointer_t<decltype(p)>;
        if constexpr (std::is_same_v<T, std::string>) {
          return quote(*p);
        } else if constexpr (std::is_same_v<T, bool>) {
          return *p ? "true" : "false";
        } else if constexpr (std::is_same_v<T, double>) {
          return format_float(*p);
        } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
          std::string out = "[";
          for (size_t i = 0; i < p->size(); ++i) out += (i ? ", " : "") + quote((*p)[i]);
          return out + "]";
        } else {
          return std::to_string(*p);
        }
      },
      ref);
}

// Bounds read best as written in the schema: "(0, 1]", not "(0.0, 1.0]".
std::string format_float_bound(double v) {
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  char buf[64];
  return std::string(buf, std::to_chars(buf, buf + sizeof buf, v).ptr);
}

// "must be >= 1", "must be in (0, 1]", "must be one of ..."; "" when anything goes.
std::string describe(const Check& check) {
  if (std::holds_alternative<NonEmpty>(check)) return "must not be empty";
  if (auto* r = std::get_if<IntRange>(&check)) {
    const bool open_top = r->hi == kIntMax || r->hi == std::numeric_limits<int64_t>::max();
    if (open_top) return "must be >= " + std::to_string(r->lo);
    return "must be in [" + std::to_string(r->lo) + ", " + std::to_string(r->hi) + "]";
  }
  if (auto* r = std::get_if<FloatRange>(&check)) {
    if (std::isinf(r->lo) && std::isinf(r->hi)) return "must be finite";
    if (std::isinf(r->hi)) return std::string("must be ") + (r->lo_open ? "> " : ">= ") + format_float_bound(r->lo);
    return std::string("must be in ") + (r->lo_open ? "(" : "[") + format_float_bound(r->lo) + ", " +
           format_float_bound(r->hi) + (r->hi_open ? ")" : "]");
  }
  if (auto* r = std::get_if<OneOf>(&check)) {
    std::string out = "must be one of ";
    for (size_t i = 0; i < r->values.size(); ++i) out += (i ? ", " : "") + quote(r->values[i]);
    return out;
  }
  return "";
}

bool satisfies(const Check& check, const FieldRef& ref) {
  if (auto* d = std::get_if<double*>(&ref))
    if (!std::isfinite(**d)) return false;
  if (std::holds_alternative<NonEmpty>(check)) return !std::get<std::string*>(ref)->empty();
  if (auto* r = std::get_if<IntRange>(&check)) {
    return std::visit(
        [&](auto* p) {
          using T = std::remove_pointer_t<decltype(p)>;
          if constexpr (std::is_same_v<T, uint64_t>) {
            return r->lo >= 0 && *p >= static_cast<uint64_t>(r->lo) && *p <= static_cast<uint64_t>(r->hi);
          } else if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
            return static_cast<int64_t>(*p) >= r->lo && static_cast<int64_t>(*p) <= r->hi;
          } else {
            return true;
          }
        },
        ref);
  }
  if (auto* r = std::get_if<FloatRange>(&check)) {
    const double v = *std::get<double*>(ref);
    const bool lo_ok = r->lo_open ? v > r->lo : v >= r->lo;
    const bool hi_ok = r->hi_open ? v < r->hi : v <= r->hi;
    return lo_ok && hi_ok;
  }
  if (auto* r = std::get_if<OneOf>(&check)) {
    const std::string& v = *std::get<std::string*>(ref);
    return std::find(r->values.begin(), r->values.end(), v) != r->values.end();
  }
  return true;
}

// What a value failing its check is told: "must be in (0, 1], got 1.5".
std::string range_message(const KeySpec& key, const FieldRef& ref) {
  std::string rule = describe(key.check);
  if (rule.empty()) rule = "must be finite";  // only a double can fail an Any check
  return rule + ", got " + format_value(ref);
}

// ---------------------------------------------------------------------------------------------
// Reading a TOML node into a field.

std::string type_name(const toml::node& n) {
  switch (n.type()) {
    case toml::node_type::string: return "a string";
    case toml::node_type::integer: return "an integer";
    case toml::node_type::floating_point: return "a float";
    case toml::node_type::boolean: return "a boolean";
    case toml::node_type::array: return "an array";
    case toml::node_type::table: return "a table";
    case toml::node_type::date: return "a date";
    case toml::node_type::time: return "a time";
    case toml::node_type::date_time: return "a date-time";
    default: return "nothing";
  }
}

std::string expected_name(const FieldRef& ref) {
  return std::visit(
      [](auto* p) -> std::string {
        using T = std::remove_pointer_t<decltype(p)>;
        if constexpr (std::is_same_v<T, std::string>) return "a string";
        else if constexpr (std::is_same_v<T, bool>) return "a boolean";
        else if constexpr (std::is_same_v<T, double>) return "a float";
        else if constexpr (std::is_same_v<T, std::vector<std::string>>) return "an array of strings";
        else return "an integer";
      },
      ref);
}

struct ReadError {
  std::string message;          // without the location prefix
  toml::source_position where;  // the offending node (an array element where one is wrong)
};

// Stores `node` into the field `key` is bound to and checks its range. The config is left
// partially written on error, which does not matter: the error ends the parse.
std::optional<ReadError> read_value(const KeySpec& key, const toml::node& node, TrainConfig& config) {
  const FieldRef ref = key.ref(config);
  const auto wrong_type = [&](const toml::node& n, std::string expected) {
    return ReadError{"expected " + expected + ", got " + type_name(n), n.source().begin};
  };
  std::optional<ReadError> err = std::visit(
      [&](auto* p) -> std::optional<ReadError> {
        using T = std::remove_pointer_t<decltype(p)>;
        if constexpr (std::is_same_v<T, std::string>) {
          if (!node.is_string()) return wrong_type(node, "a string");
          *p = *node.value<std::string>();
        } else if constexpr (std::is_same_v<T, bool>) {
          if (!node.is_boolean()) return wrong_type(node, "a boolean");
          *p = *node.value<bool>();
        } else if constexpr (std::is_same_v<T, double>) {
          // An integer is a float too (lr = 1); the reverse would silently truncate.
          if (node.is_integer()) *p = static_cast<double>(node.as_integer()->get());
          else if (node.is_floating_point()) *p = node.as_floating_point()->get();
          else return wrong_type(node, "a float");
        } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
          const toml::array* arr = node.as_array();
          if (!arr) return wrong_type(node, "an array of strings");
          std::vector<std::string> out;
          for (size_t i = 0; i < arr->size(); ++i) {
            const toml::node& el = *arr->get(i);
            if (!el.is_string())
              return ReadError{"element " + std::to_string(i) + ": expected a string, got " + type_name(el),
                               el.source().begin};
            out.push_back(*el.value<std::string>());
          }
          *p = std::move(out);
        } else {
          if (!node.is_integer()) return wrong_type(node, "an integer");
          const int64_t v = node.as_integer()->get();
          bool fits;
          if constexpr (std::is_same_v<T, uint64_t>) fits = v >= 0;  // TOML integers stop at INT64_MAX
          else fits = v >= std::numeric_limits<T>::min() && v <= std::numeric_limits<T>::max();
          if (!fits) {
            const std::string rule = v < 0 ? describe(key.check)
                                           : "must be <= " + std::to_string(std::numeric_limits<T>::max());
            return ReadError{rule + ", got " + std::to_string(v), node.source().begin};
          }
          *p = static_cast<T>(v);
        }
        return std::nullopt;
      },
      ref);
  if (err) return err;
  if (!satisfies(key.check, ref)) return ReadError{range_message(key, ref), node.source().begin};
  return std::nullopt;
}

// ---------------------------------------------------------------------------------------------
// The file.

struct LocatedError {
  toml::source_position where;
  std::string message;
};

std::string at(const std::string& source, toml::source_position p) {
  return source + ":" + std::to_string(p.line) + ":" + std::to_string(p.column) + ": ";
}

// Checks and reads every entry of the document. Entries are visited in key order (toml++
// tables are sorted), so all errors are collected and the one earliest in the file is reported.
void read_document(const toml::table& root, const std::string& source, TrainConfig& config) {
  std::vector<LocatedError> errors;
  const auto sections = section_names();
  for (auto&& [section_key, section_node] : root) {
    const std::string section(section_key.str());
    if (std::find(sections.begin(), sections.end(), section) == sections.end()) {
      if (section_node.is_table()) {
        errors.push_back({section_key.source().begin,
                          "unknown section '" + section + "'" + did_you_mean(suggest_section(section))});
      } else {
        std::string s = suggest_key("", section);
        errors.push_back({section_key.source().begin, "unknown key '" + section + "'" + did_you_mean(s)});
      }
      continue;
    }
    const toml::table* table = section_node.as_table();
    if (!table) {
      errors.push_back({section_node.source().begin, section + ": expected a table, got " + type_name(section_node)});
      continue;
    }
    for (auto&& [key_key, node] : *table) {
      const std::string name(key_key.str());
      const KeySpec* key = find_key(section, name);
      if (!key) {
        errors.push_back({key_key.source().begin, "unknown key '" + section + "." + name + "'" +
                                                      did_you_mean(suggest_key(section, name))});
        continue;
      }
      if (auto err = read_value(*key, node, config)) errors.push_back({err->where, key->full() + ": " + err->message});
    }
  }
  if (errors.empty()) return;
  const auto first = std::min_element(errors.begin(), errors.end(), [](const auto& a, const auto& b) {
    return std::pair(a.where.line, a.where.column) < std::pair(b.where.line, b.where.column);
  });
  throw ConfigError(at(source, first->where) + first->message);
}

// ---------------------------------------------------------------------------------------------
// --set overrides.

std::string_view trim(std::string_view s) {
  const auto b = s.find_first_not_of(" \t");
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(" \t") - b + 1);
}

// Raw --set text must be representable in TOML (and so in the written-back config.toml).
bool valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t n;
    uint32_t cp;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c >> 5) == 0x6) {
      n = 1, cp = c & 0x1f;
    } else if ((c >> 4) == 0xe) {
      n = 2, cp = c & 0x0f;
    } else if ((c >> 3) == 0x1e) {
      n = 3, cp = c & 0x07;
    } else {
      return false;
    }
    if (i + n >= s.size()) return false;
    for (size_t j = 1; j <= n; ++j) {
      const auto cc = static_cast<unsigned char>(s[i + j]);
      if ((cc >> 6) != 0x2) return false;
      cp = (cp << 6) | (cc & 0x3f);
    }
    const uint32_t min_for_length[] = {0, 0x80, 0x800, 0x10000};
    if (cp < min_for_length[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    i += n + 1;
  }
  return true;
}

// The value of an override as TOML, or nothing when the text is not one TOML value; `why` then
// holds TOML's reason, where it had one.
std::optional<toml::table> parse_toml_value(std::string_view text, std::string& why) {
  try {
    toml::table t = toml::parse("v = " + std::string(text) + "\n", std::string_view("--set"));
    // "1\nother = 2" parses too, but is not one value.
    if (t.size() != 1 || !t.contains("v")) return std::nullopt;
    return t;
  } catch (const toml::parse_error& e) {
    why = std::string(e.description());
    return std::nullopt;
  }
}

void apply_override(const std::string& text, TrainConfig& config) {
  const std::string prefix = "--set " + text + ": ";
  const auto eq = text.find('=');
  if (eq == std::string::npos) throw ConfigError(prefix + "expected KEY=VALUE");
  const std::string path(trim(std::string_view(text).substr(0, eq)));
  const std::string_view value = trim(std::string_view(text).substr(eq + 1));
  const auto dot = path.find('.');
  const std::string section = dot == std::string::npos ? "" : path.substr(0, dot);
  const std::string name = dot == std::string::npos ? path : path.substr(dot + 1);
  const KeySpec* key = find_key(section, name);
  if (!key) throw ConfigError(prefix + "unknown key" + did_you_mean(suggest_key(section, name)));

  const FieldRef ref = key->ref(config);
  const bool is_string = std::holds_alternative<std::string*>(ref);
  const bool is_list = std::holds_alternative<std::vector<std::string>*>(ref);
  std::string toml_error;
  const auto parsed = parse_toml_value(value, toml_error);
  const toml::node* node = parsed ? parsed->get("v") : nullptr;
  // Text that starts as a TOML string (or, for a key that takes no string, an array or table) but
  // does not parse is a mistake in it, not a bare word: `run.name="x` ran with the name "x (its
  // quote kept), and `algorithm.lr=[1,` said only "expected a float". A string key keeps a bare
  // word that starts with a bracket (`run.name=[exp1]`).
  const std::string_view toml_starts = is_string ? "\"'" : "\"'[{";
  if (!node && !value.empty() && toml_starts.find(value.front()) != std::string_view::npos)
    throw ConfigError(prefix + "not a TOML value" + (toml_error.empty() ? "" : " (" + toml_error + ")") +
                      (is_list && value.front() == '[' ? "; quote the items, [\"a\", \"b\"], or give them bare: a,b"
                                                       : ""));

  // A string key takes the text as written unless it is a TOML string (so paths and names need
  // no quoting, and `run.name=2024` is the name "2024", not an integer).
  if (is_string && (!node || !node->is_string())) {
    if (!valid_utf8(value)) throw ConfigError(prefix + "the value is not valid UTF-8");
    toml::value<std::string> v{std::string(value)};
    if (auto err = read_value(*key, v, config)) throw ConfigError(prefix + err->message);
    return;
  }
  // A list key also takes a bare comma-separated list: `eval.benchmarks=cruxeval_o,humaneval`.
  if (is_list && !node) {
    if (!valid_utf8(value)) throw ConfigError(prefix + "the value is not valid UTF-8");
    toml::array arr;
    std::string_view rest = value;
    while (!rest.empty()) {
      const auto comma = rest.find(',');
      arr.push_back(std::string(trim(rest.substr(0, comma))));
      rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    }
    if (auto err = read_value(*key, arr, config)) throw ConfigError(prefix + err->message);
    return;
  }
  // With TOML's reason where the text starts as a number: 99999999999999999999 is an integer,
  // past 64 bits, which "expected an integer" alone denied.
  const bool numeric =
      !value.empty() && std::string_view("0123456789+-.").find(value.front()) != std::string_view::npos;
  if (!node)
    throw ConfigError(prefix + "expected " + expected_name(ref) +
                      (numeric && !toml_error.empty() ? " (" + toml_error + ")" : ""));
  if (auto err = read_value(*key, *node, config)) throw ConfigError(prefix + err->message);
}

}  // namespace

// ---------------------------------------------------------------------------------------------

namespace {

// Where `key` got its value, for a message: "--set KEY=VALUE" (its last override), "FILE:LINE:COL"
// (where the document sets it), or "" (its default).
std::string key_origin(const toml::table& root, const std::string& source, const std::vector<std::string>& overrides,
                       std::string_view key) {
  for (auto it = overrides.rbegin(); it != overrides.rend(); ++it) {
    const auto eq = it->find('=');
    if (eq != std::string::npos && trim(std::string_view(*it).substr(0, eq)) == key) return "--set " + *it;
  }
  if (const toml::node* node = root.at_path(key).node()) {
    const std::string a = at(source, node->source().begin);
    return a.substr(0, a.size() - 2);  // without at()'s ": "
  }
  return "";
}

// Exactly one of model.path and model.preset, with where each came from: a --set of one on a
// config that sets the other was blamed on the file alone.
void check_one_model_source(const TrainConfig& config, const toml::table& root, const std::string& source,
                            const std::vector<std::string>& overrides) {
  const bool has_path = !config.model.path.empty(), has_preset = !config.model.preset.empty();
  if (has_path != has_preset) return;
  const std::string path_from = key_origin(root, source, overrides, "model.path");
  const std::string preset_from = key_origin(root, source, overrides, "model.preset");
  if (has_path)
    throw ConfigError(source + ": model.path (" + path_from + ") and model.preset (" + preset_from +
                      ") are both set; exactly one must be: the model to load, or the preset a new one is made "
                      "from (an empty --set model.path= or --set model.preset= drops one)");
  std::string emptied;
  if (!path_from.empty()) emptied += "; model.path is empty (" + path_from + ")";
  if (!preset_from.empty()) emptied += "; model.preset is empty (" + preset_from + ")";
  throw ConfigError(source + ": neither model.path nor model.preset is set" + emptied +
                    "; exactly one must be: model.path = \"DIR\" (a Hugging Face model) or model.preset = \"NAME\" "
                    "(a new model)");
}

}  // namespace

TrainConfig parse_config(const std::string& toml_text, const std::string& source_name,
                         const std::vector<std::string>& overrides) {
  toml::table root;
  try {
    root = toml::parse(toml_text, std::string_view(source_name));
  } catch (const toml::parse_error& e) {
    throw ConfigError(at(source_name, e.source().begin) + "TOML syntax error: " + std::string(e.description()));
  }
  TrainConfig config;
  read_document(root, source_name, config);
  for (const auto& o : overrides) apply_override(o, config);
  check_one_model_source(config, root, source_name, overrides);
  validate(config, source_name);
  return config;
}

TrainConfig load_config(const std::string& path, const std::vector<std::string>& overrides) {
  // stdio rather than ifstream: a directory opens fine and only the read says EISDIR.
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) throw ConfigError(path + ": cannot read config file: " + std::strerror(errno));
  std::string text;
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, n);
  const int read_errno = std::ferror(f) ? errno : 0;
  std::fclose(f);
  if (read_errno) throw ConfigError(path + ": cannot read config file: " + std::strerror(read_errno));
  return parse_config(text, path, overrides);
}

std::string config_key_origin(const std::string& path, const std::vector<std::string>& overrides,
                              std::string_view key) {
  toml::table root;
  try {
    root = toml::parse_file(path);
  } catch (const toml::parse_error&) {  // it parsed once already; a file changed since is only named
  }
  const std::string origin = key_origin(root, path, overrides, key);
  return (origin.empty() ? path : origin) + ": ";
}

void validate(const TrainConfig& config, const std::string& source_name) {
  // Configs built in code never went through the parser's range checks.
  TrainConfig copy = config;
  for (const auto& key : schema()) {
    const FieldRef ref = key.ref(copy);
    if (!satisfies(key.check, ref)) throw ConfigError(source_name + ": " + key.full() + ": " + range_message(key, ref));
  }
  const bool has_path = !config.model.path.empty(), has_preset = !config.model.preset.empty();
  if (has_path == has_preset)
    throw ConfigError(source_name + ": exactly one of model.path and model.preset must be set, got " +
                      (has_path ? "both" : "neither"));
}

std::string to_toml(const TrainConfig& config) {
  TrainConfig copy = config;  // the binders hand out mutable pointers
  std::string out =
      "# The resolved run configuration: every key of the schema, with the value this run used.\n";
  std::string_view section;
  for (const auto& key : schema()) {
    if (key.section != section) {
      section = key.section;
      out += "\n[" + std::string(section) + "]\n";
    }
    std::string doc(key.doc);
    const std::string rule = describe(key.check);
    if (!rule.empty() && !std::holds_alternative<OneOf>(key.check)) doc += "; " + rule;
    out += "# " + doc + "\n" + std::string(key.name) + " = " + format_value(key.ref(copy)) + "\n";
  }
  return out;
}

}  // namespace azr::trainer
