// The run configuration: defaults against METHOD.md, a file setting every key, the to_toml round
// trip, every error class with its exact file:line:col, --set overrides, and the shipped configs.
#include "trainer/config.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

namespace azr::trainer {
namespace {

namespace fs = std::filesystem;

// The smallest valid file: everything else at its default.
const std::string kMinimal = "[model]\npreset = \"azr-tiny\"\n";

// The message of the ConfigError `f` throws, or a marker that makes any expectation fail.
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("<not a ConfigError: ") + e.what() + ">";
  }
  return "<no error>";
}

std::string parse_error(const std::string& text, const std::vector<std::string>& overrides = {}) {
  return error_of([&] { parse_config(text, "f.toml", overrides); });
}

TrainConfig with_preset(TrainConfig c = {}) {
  c.model.preset = "azr-tiny";
  return c;
}

// Every field differs from its default; the strings need every kind of escaping.
TrainConfig every_field_changed() {
  TrainConfig c;
  c.run.name = "quote\" backslash\\ newline\n tab\t cr\r bell\x07 del\x7f nul" + std::string(1, '\0') +
               " \u00e9\u6f22\U0001F642";
  c.run.run_dir = "C:\\runs\\x y";
  c.run.seed = std::numeric_limits<int64_t>::max();
  c.run.steps = 7;
  c.run.threads = 3;
  c.run.check_replicas = true;
  c.model.path = "/models/Qwen2.5 \"0.5B\"";
  c.model.preset = "";
  c.model.tokenizer = "/tok/tokenizer.json";
  c.model.init_std = 1.0 / 3.0;
  c.algorithm.batch_size = 4;
  c.algorithm.k_references = 2;
  c.algorithm.learnability_rollouts = 3;
  c.algorithm.induction_inputs = 4;
  c.algorithm.solve_order = "same-step";
  c.algorithm.prompt_style = "compact";
  c.algorithm.temperature = 0.7;
  c.algorithm.top_p = 0.95;
  c.algorithm.top_k = 50;
  c.algorithm.max_prompt_tokens = 1000;
  c.algorithm.max_response_tokens = 2000;
  c.algorithm.wrong_answer_reward = -0.25;
  c.algorithm.format_error_reward = -2.0;
  c.algorithm.zero_learnability_reward = 0.0;
  c.algorithm.advantage_eps = 1e-6;
  c.algorithm.clip_eps = 0.28;
  c.algorithm.entropy_coeff = 0.0;
  c.algorithm.lr = 5e-324;  // the smallest denormal: only exact digits bring it back
  c.algorithm.beta1 = 0.8;
  c.algorithm.beta2 = 0.95;
  c.algorithm.adam_eps = 1e-300;
  c.algorithm.weight_decay = 0.1;
  c.algorithm.grad_clip = 0.0;
  c.algorithm.micro_batch_size = 2;
  c.algorithm.generation_batch_size = 16;
  c.seeding.target = 0;
  c.seeding.batch = 8;
  c.seeding.max_rounds = 5;
  c.seeding.import_tasks = "/seeds/7b_coder_seed_io.jsonl";
  c.sandbox.workers = 2;
  c.sandbox.cpu_seconds = 0.1;
  c.sandbox.memory_mib = 1048576;
  c.sandbox.max_output_chars = 100;
  c.buffer.capacity_per_type = 0;
  c.buffer.policy = "keep-oldest";
  c.buffer.rollout_retention_steps = 9;
  c.logging.console = "plain";
  c.logging.tensorboard = false;
  c.logging.print_every = 5;
  c.checkpoint.every = 0;
  c.checkpoint.keep_last = 0;
  c.eval.every = 0;
  c.eval.benchmarks = {"humaneval", "", "a\"b\\c\n\u00fc"};
  c.eval.data_dir = "/data";
  c.eval.limit = 12;
  c.eval.max_tokens = 64;
  c.eval.batch_size = 1;
  c.eval.heldout_tasks = "/runs/boot/heldout.jsonl";
  c.eval.at_start = true;
  c.bootstrap.output = "/models/boot";
  c.bootstrap.tasks_per_type = 10;
  c.bootstrap.heldout_per_type = 0;
  c.bootstrap.difficulty = "hard";
  c.bootstrap.steps = 0;
  c.bootstrap.batch_size = 3;
  c.bootstrap.lr = 0.25;
  c.bootstrap.k_references = 4;
  c.bootstrap.data_offset = 3;
  c.bootstrap.heldout_from = "/runs/boot/heldout.jsonl";
  return c;
}

// ----- defaults ------------------------------------------------------------------------------

TEST(ConfigDefaults, MatchTheMethod) {
  const TrainConfig c = parse_config(kMinimal, "f.toml");
  EXPECT_EQ(c, with_preset());
  // METHOD.md: B = 64, K = 6, n = 8, temperature 1.0, top-p 1.0, PPO clip 0.2, entropy 0.001,
  // AdamW 0.9/0.999, weight decay 0.01, lr 1e-6, gradient clip 1.0, ~500 steps.
  EXPECT_EQ(c.algorithm.batch_size, 64);
  EXPECT_EQ(c.algorithm.k_references, 6);
  EXPECT_EQ(c.algorithm.learnability_rollouts, 8);
  EXPECT_EQ(c.algorithm.temperature, 1.0);
  EXPECT_EQ(c.algorithm.top_p, 1.0);
  EXPECT_EQ(c.algorithm.clip_eps, 0.2);
  EXPECT_EQ(c.algorithm.entropy_coeff, 0.001);
  EXPECT_EQ(c.algorithm.advantage_eps, 1e-8);  // METHOD.md's TRR++: sqrt(var + 1e-8)
  EXPECT_EQ(c.algorithm.beta1, 0.9);
  EXPECT_EQ(c.algorithm.beta2, 0.999);
  EXPECT_EQ(c.algorithm.weight_decay, 0.01);
  EXPECT_EQ(c.algorithm.lr, 1e-6);
  EXPECT_EQ(c.algorithm.grad_clip, 1.0);
  EXPECT_EQ(c.run.steps, 500);
  EXPECT_EQ(c.algorithm.solve_order, "lagged");
  EXPECT_EQ(c.algorithm.prompt_style, "paper");
  EXPECT_EQ(c.buffer.capacity_per_type, 16384);
  EXPECT_EQ(c.buffer.policy, "evict-oldest");
  EXPECT_EQ(c.seeding.target, 256);  // B x 4
  EXPECT_EQ(c.logging.console, "auto");
  EXPECT_EQ(c.eval.benchmarks, (std::vector<std::string>{"cruxeval_o", "cruxeval_i"}));
}

// The ends of the two messages of "exactly one of model.path and model.preset".
const std::string kBothSet =
    "are both set; exactly one must be: the model to load, or the preset a new one is made from (an empty --set "
    "model.path= or --set model.preset= drops one)";
const std::string kNeitherSet =
    "; exactly one must be: model.path = \"DIR\" (a Hugging Face model) or model.preset = \"NAME\" (a new model)";

TEST(ConfigDefaults, EmptyDocumentNeedsAModel) {
  EXPECT_EQ(parse_error(""), "f.toml: neither model.path nor model.preset is set" + kNeitherSet);
}

// ----- a file setting every key --------------------------------------------------------------

const char* kFullFile = R"(# every key, none at its default
[run]
name = "quote\" backslash\\ newline\n tab\t cr\r bell\u0007 del\u007F nul\u0000 é漢🙂"
run_dir = 'C:\runs\x y'
seed = 9223372036854775807
steps = 7
threads = 3
check_replicas = true

[model]
path = '/models/Qwen2.5 "0.5B"'
preset = ""
tokenizer = "/tok/tokenizer.json"
init_std = 0.3333333333333333

[algorithm]
batch_size = 4
k_references = 2
learnability_rollouts = 3
induction_inputs = 4
solve_order = "same-step"
prompt_style = "compact"
temperature = 0.7
top_p = 0.95
top_k = 50
max_prompt_tokens = 1_000
max_response_tokens = 2000
wrong_answer_reward = -0.25
format_error_reward = -2
zero_learnability_reward = 0
advantage_eps = 1e-6
clip_eps = 0.28
entropy_coeff = 0.0
lr = 5e-324
beta1 = 0.8
beta2 = 0.95
adam_eps = 1e-300
weight_decay = 0.1
grad_clip = 0
micro_batch_size = 2
generation_batch_size = 16

[seeding]
target = 0
batch = 8
max_rounds = 5
import_tasks = "/seeds/7b_coder_seed_io.jsonl"

[sandbox]
workers = 2
cpu_seconds = 0.1
memory_mib = 1048576
max_output_chars = 100

[buffer]
capacity_per_type = 0
policy = "keep-oldest"
rollout_retention_steps = 9

[logging]
console = "plain"
tensorboard = false
print_every = 5

[checkpoint]
every = 0
keep_last = 0

[eval]
every = 0
benchmarks = ["humaneval", "", """a"b\\c
ü"""]
data_dir = "/data"
limit = 12
max_tokens = 64
batch_size = 1
heldout_tasks = "/runs/boot/heldout.jsonl"
at_start = true

[bootstrap]
output = "/models/boot"
tasks_per_type = 10
heldout_per_type = 0
difficulty = "hard"
steps = 0
batch_size = 3
lr = 0.25
k_references = 4
data_offset = 3
heldout_from = "/runs/boot/heldout.jsonl"
)";

TEST(ConfigFile, EveryKeySet) {
  const TrainConfig expected = every_field_changed();
  EXPECT_EQ(parse_config(kFullFile, "full.toml"), expected);
  // Sanity of the fixture itself: every section differs from the defaults.
  const TrainConfig d;
  EXPECT_NE(expected.run, d.run);
  EXPECT_NE(expected.model, d.model);
  EXPECT_NE(expected.algorithm, d.algorithm);
  EXPECT_NE(expected.seeding, d.seeding);
  EXPECT_NE(expected.sandbox, d.sandbox);
  EXPECT_NE(expected.buffer, d.buffer);
  EXPECT_NE(expected.logging, d.logging);
  EXPECT_NE(expected.checkpoint, d.checkpoint);
  EXPECT_NE(expected.eval, d.eval);
}

TEST(ConfigFile, IntegerAcceptedForFloat) {
  const TrainConfig c = parse_config(kMinimal + "[algorithm]\nlr = 1\ntemperature = 0\n", "f.toml");
  EXPECT_EQ(c.algorithm.lr, 1.0);
  EXPECT_EQ(c.algorithm.temperature, 0.0);
}

TEST(ConfigFile, DottedKeysAndInlineTables) {
  const TrainConfig c =
      parse_config("model.preset = \"azr-25m\"\nalgorithm = { lr = 2e-6, top_k = 4 }\n", "f.toml");
  EXPECT_EQ(c.model.preset, "azr-25m");
  EXPECT_EQ(c.algorithm.lr, 2e-6);
  EXPECT_EQ(c.algorithm.top_k, 4);
}

// ----- to_toml --------------------------------------------------------------------------------

TEST(ConfigToToml, RoundTripsEveryField) {
  const TrainConfig c = every_field_changed();
  const std::string text = to_toml(c);
  EXPECT_EQ(parse_config(text, "resolved.toml"), c) << text;
  // Written out, read back, written out again: the same text.
  EXPECT_EQ(to_toml(parse_config(text, "resolved.toml")), text);
}

TEST(ConfigToToml, RoundTripsDefaultsAndAwkwardFloats) {
  EXPECT_EQ(parse_config(to_toml(with_preset()), "r.toml"), with_preset());
  TrainConfig c = with_preset();
  for (double v : {0.1, 1.0 / 3.0, 1e-6, 123456789.0, 1e22, 2.5e-8, 0.30000000000000004}) {
    c.algorithm.lr = v;
    c.algorithm.format_error_reward = -v;
    const TrainConfig back = parse_config(to_toml(c), "r.toml");
    EXPECT_EQ(back.algorithm.lr, v);
    EXPECT_EQ(back.algorithm.format_error_reward, -v);
  }
}

TEST(ConfigToToml, EveryKeyDocumentedInSchemaOrder) {
  const std::string text = to_toml(with_preset());
  std::istringstream in(text);
  std::string line, previous;
  std::vector<std::string> sections;
  int keys = 0;
  while (std::getline(in, line)) {
    if (line.starts_with("[")) {
      sections.push_back(line);
    } else if (line.find(" = ") != std::string::npos && !line.starts_with("#")) {
      ++keys;
      EXPECT_TRUE(previous.starts_with("# ") && previous.size() > 3) << "no doc above: " << line;
    }
    previous = line;
  }
  // Fields of config.h, counted by hand: run 8, model 9, algorithm 25, seeding 4, sandbox 4,
  // buffer 3, logging 3, checkpoint 2, eval 8, bootstrap 10.
  EXPECT_EQ(keys, 76);
  EXPECT_EQ(sections, (std::vector<std::string>{"[run]", "[model]", "[algorithm]", "[seeding]", "[sandbox]",
                                                "[buffer]", "[logging]", "[checkpoint]", "[eval]",
                                                "[bootstrap]"}));
  EXPECT_NE(text.find("\nlr = 1e-06\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\ntemperature = 1.0\n"), std::string::npos) << text;  // a float, not 1
  EXPECT_NE(text.find("\nbenchmarks = [\"cruxeval_o\", \"cruxeval_i\"]\n"), std::string::npos) << text;
}

// ----- errors: syntax, unknown keys ------------------------------------------------------------

TEST(ConfigErrors, SyntaxErrorHasPosition) {
  const std::string e = parse_error(kMinimal + "[algorithm]\nlr = = 1\n");
  EXPECT_TRUE(e.starts_with("f.toml:4:6: TOML syntax error: ")) << e;
  const std::string dup = parse_error(kMinimal + "[run]\nsteps = 1\nsteps = 2\n");
  EXPECT_TRUE(dup.starts_with("f.toml:5:")) << dup;
  EXPECT_NE(dup.find("TOML syntax error: "), std::string::npos) << dup;
}

TEST(ConfigErrors, UnknownKeySuggestsByAlias) {
  EXPECT_EQ(parse_error(kMinimal + "\n[algorithm]\nlerning_rate = 1e-6\n"),
            "f.toml:5:1: unknown key 'algorithm.lerning_rate' (did you mean 'algorithm.lr'?)");
}

TEST(ConfigErrors, UnknownKeySuggestsByName) {
  EXPECT_EQ(parse_error(kMinimal + "[algorithm]\nlr = 1e-6\n  top_pp = 0.9\n"),
            "f.toml:5:3: unknown key 'algorithm.top_pp' (did you mean 'algorithm.top_p'?)");
  // A transposition is one edit.
  EXPECT_EQ(parse_error(kMinimal + "[algorithm]\ntemperatrue = 0.9\n"),
            "f.toml:4:1: unknown key 'algorithm.temperatrue' (did you mean 'algorithm.temperature'?)");
}

TEST(ConfigErrors, UnknownKeySuggestsAnotherSection) {
  EXPECT_EQ(parse_error(kMinimal + "[run]\nlr = 1e-6\n"),
            "f.toml:4:1: unknown key 'run.lr' (did you mean 'algorithm.lr'?)");
  EXPECT_EQ(parse_error("lr = 1e-6\n" + kMinimal), "f.toml:1:1: unknown key 'lr' (did you mean 'algorithm.lr'?)");
  EXPECT_EQ(parse_error(kMinimal + "[run]\nlw = 1\n"), "f.toml:4:1: unknown key 'run.lw' (did you mean 'algorithm.lr'?)");
  // The section's own near miss beats an exact name elsewhere (there is an algorithm.batch_size).
  EXPECT_EQ(parse_error(kMinimal + "[seeding]\nbatch_size = 8\n"),
            "f.toml:4:1: unknown key 'seeding.batch_size' (did you mean 'seeding.batch'?)");
}

TEST(ConfigErrors, UnknownKeyFarFromEverythingHasNoSuggestion) {
  EXPECT_EQ(parse_error(kMinimal + "[eval]\nzzzzzz = 1\n"), "f.toml:4:1: unknown key 'eval.zzzzzz'");
  // Two edits would turn "xy" into "lr", but that is a different word, not a typo.
  EXPECT_EQ(parse_error(kMinimal + "[algorithm]\nxy = 1\n"), "f.toml:4:1: unknown key 'algorithm.xy'");
  EXPECT_EQ(parse_error(kMinimal + "[algorithm]\nx = 1\n"), "f.toml:4:1: unknown key 'algorithm.x'");
  // Two edits to a short name make another word, not a typo (run.run_dir has the alias "dir").
  EXPECT_EQ(parse_error(kMinimal + "[run]\ndxy = 1\n"), "f.toml:4:1: unknown key 'run.dxy'");
}

TEST(ConfigErrors, UnknownSection) {
  EXPECT_EQ(parse_error(kMinimal + "\n[algoritm]\nlr = 1e-6\n"),
            "f.toml:4:2: unknown section 'algoritm' (did you mean 'algorithm'?)");
  EXPECT_EQ(parse_error(kMinimal + "[wandb]\nproject = \"x\"\n"), "f.toml:3:2: unknown section 'wandb'");
  EXPECT_EQ(parse_error(kMinimal + "[model.extra]\nx = 1\n"), "f.toml:3:8: unknown key 'model.extra'");
}

TEST(ConfigErrors, EarliestErrorInTheFileIsReported) {
  // toml++ hands tables over sorted by name; the error on the earlier line must still win.
  EXPECT_EQ(parse_error("[run]\nstepz = 1\n[algorithm]\nlr = \"x\"\n" + kMinimal),
            "f.toml:2:1: unknown key 'run.stepz' (did you mean 'run.steps'?)");
}

// ----- errors: types -----------------------------------------------------------------------------

TEST(ConfigErrors, WrongTypes) {
  EXPECT_EQ(parse_error(kMinimal + "[algorithm]\nlr = \"fast\"\n"),
            "f.toml:4:6: algorithm.lr: expected a float, got a string");
  EXPECT_EQ(parse_error(kMinimal + "[algorithm]\nbatch_size = 64.0\n"),
            "f.toml:4:14: algorithm.batch_size: expected an integer, got a float");
  EXPECT_EQ(parse_error(kMinimal + "[logging]\ntensorboard = 1\n"),
            "f.toml:4:15: logging.tensorboard: expected a boolean, got an integer");
  EXPECT_EQ(parse_error(kMinimal + "[run]\nname = 3\n"), "f.toml:4:8: run.name: expected a string, got an integer");
  EXPECT_EQ(parse_error(kMinimal + "[run]\nname = 1979-05-27\n"),
            "f.toml:4:8: run.name: expected a string, got a date");
  EXPECT_EQ(parse_error(kMinimal + "[eval]\nbenchmarks = \"cruxeval_o\"\n"),
            "f.toml:4:14: eval.benchmarks: expected an array of strings, got a string");
  EXPECT_EQ(parse_error(kMinimal + "[eval]\nbenchmarks = [\"a\", 2]\n"),
            "f.toml:4:20: eval.benchmarks: element 1: expected a string, got an integer");
  EXPECT_EQ(parse_error("algorithm = 5\n" + kMinimal), "f.toml:1:13: algorithm: expected a table, got an integer");
  EXPECT_EQ(parse_error(kMinimal + "[[run]]\nsteps = 1\n"), "f.toml:3:1: run: expected a table, got an array");
}

// ----- errors: ranges ----------------------------------------------------------------------------

TEST(ConfigErrors, OutOfRange) {
  const auto bad = [](const std::string& section, const std::string& line) {
    return parse_error(kMinimal + "[" + section + "]\n" + line + "\n");
  };
  EXPECT_EQ(bad("algorithm", "top_p = 1.5"), "f.toml:4:9: algorithm.top_p: must be in (0, 1], got 1.5");
  EXPECT_EQ(bad("algorithm", "top_p = 0"), "f.toml:4:9: algorithm.top_p: must be in (0, 1], got 0.0");
  EXPECT_EQ(bad("algorithm", "beta1 = 1"), "f.toml:4:9: algorithm.beta1: must be in [0, 1), got 1.0");
  EXPECT_EQ(bad("algorithm", "beta2 = -0.1"), "f.toml:4:9: algorithm.beta2: must be in [0, 1), got -0.1");
  EXPECT_EQ(bad("algorithm", "batch_size = 0"), "f.toml:4:14: algorithm.batch_size: must be >= 1, got 0");
  EXPECT_EQ(bad("algorithm", "lr = 0"), "f.toml:4:6: algorithm.lr: must be in (0, 3.4028235677973366e+38), got 0.0");
  EXPECT_EQ(bad("algorithm", "lr = nan"), "f.toml:4:6: algorithm.lr: must be in (0, 3.4028235677973366e+38), got nan");
  EXPECT_EQ(bad("algorithm", "temperature = -1"), "f.toml:4:15: algorithm.temperature: must be >= 0, got -1.0");
  EXPECT_EQ(bad("algorithm", "clip_eps = 0.0"), "f.toml:4:12: algorithm.clip_eps: must be > 0, got 0.0");
  // 0 would make a group of equal rewards 0 / 0: NaN advantages.
  EXPECT_EQ(bad("algorithm", "advantage_eps = 0"), "f.toml:4:17: algorithm.advantage_eps: must be > 0, got 0.0");
  EXPECT_EQ(bad("algorithm", "entropy_coeff = -1e-3"),
            "f.toml:4:17: algorithm.entropy_coeff: must be >= 0, got -0.001");
  EXPECT_EQ(bad("algorithm", "weight_decay = -0.01"), "f.toml:4:16: algorithm.weight_decay: must be >= 0, got -0.01");
  EXPECT_EQ(bad("algorithm", "wrong_answer_reward = -inf"),
            "f.toml:4:23: algorithm.wrong_answer_reward: must be finite, got -inf");
  EXPECT_EQ(bad("algorithm", "induction_inputs = 1"), "f.toml:4:20: algorithm.induction_inputs: must be >= 2, got 1");
  EXPECT_EQ(bad("algorithm", "max_response_tokens = 0"),
            "f.toml:4:23: algorithm.max_response_tokens: must be >= 1, got 0");
  EXPECT_EQ(bad("algorithm", "solve_order = \"random\""),
            "f.toml:4:15: algorithm.solve_order: must be one of \"lagged\", \"same-step\", got \"random\"");
  EXPECT_EQ(bad("algorithm", "prompt_style = \"short\""),
            "f.toml:4:16: algorithm.prompt_style: must be one of \"paper\", \"compact\", got \"short\"");
  EXPECT_EQ(bad("buffer", "policy = \"evict-newest\""),
            "f.toml:4:10: buffer.policy: must be one of \"evict-oldest\", \"keep-oldest\", got \"evict-newest\"");
  EXPECT_EQ(bad("logging", "console = \"loud\""),
            "f.toml:4:11: logging.console: must be one of \"auto\", \"progress\", \"plain\", \"off\", got \"loud\"");
  EXPECT_EQ(bad("run", "seed = -1"), "f.toml:4:8: run.seed: must be >= 0, got -1");
  EXPECT_EQ(bad("run", "steps = -1"), "f.toml:4:9: run.steps: must be >= 0, got -1");
  EXPECT_EQ(bad("run", "threads = 3000000000"), "f.toml:4:11: run.threads: must be <= 2147483647, got 3000000000");
  EXPECT_EQ(bad("run", "name = \"\""), "f.toml:4:8: run.name: must not be empty, got \"\"");
  EXPECT_EQ(bad("sandbox", "cpu_seconds = 0"), "f.toml:4:15: sandbox.cpu_seconds: must be in [0.001, 3600], got 0.0");
  // Beyond these a job's limit would be refused by the sandbox itself, every result lost.
  EXPECT_EQ(bad("sandbox", "cpu_seconds = 1e300"),
            "f.toml:4:15: sandbox.cpu_seconds: must be in [0.001, 3600], got 1e+300");
  // The optimizer computes in float: from 0x1.ffffffp+127 (3.4028235677973366e38, halfway between
  // float's largest, 2^128 - 2^104, and 2^128) on, a double rounds to inf there; below it, to a
  // finite float. Float's largest is kept in both of its usual spellings.
  EXPECT_EQ(bad("algorithm", "lr = 1e300"),
            "f.toml:4:6: algorithm.lr: must be in (0, 3.4028235677973366e+38), got 1e+300");
  EXPECT_EQ(bad("bootstrap", "lr = 3.5e38"),
            "f.toml:4:6: bootstrap.lr: must be in (0, 3.4028235677973366e+38), got 3.5e+38");
  EXPECT_EQ(bad("algorithm", "lr = 3.4028234663852886e38"), "<no error>");
  EXPECT_EQ(bad("algorithm", "lr = 3.4028235e38"), "<no error>");
  EXPECT_EQ(bad("algorithm", "lr = 3.4028235677973366e38"),
            "f.toml:4:6: algorithm.lr: must be in (0, 3.4028235677973366e+38), got 3.4028235677973366e+38");
  EXPECT_EQ(bad("sandbox", "memory_mib = 8"), "f.toml:4:14: sandbox.memory_mib: must be in [16, 1048576], got 8.0");
  EXPECT_EQ(bad("sandbox", "workers = -1"), "f.toml:4:11: sandbox.workers: must be >= 0, got -1");
  EXPECT_EQ(bad("seeding", "target = -5"), "f.toml:4:10: seeding.target: must be >= 0, got -5");
  EXPECT_EQ(bad("checkpoint", "keep_last = -1"), "f.toml:4:13: checkpoint.keep_last: must be >= 0, got -1");
  EXPECT_EQ(bad("eval", "every = -1"), "f.toml:4:9: eval.every: must be >= 0, got -1");
}

TEST(ConfigErrors, RangeBoundariesAccepted) {
  const TrainConfig c = parse_config(kMinimal +
                                         "[algorithm]\ntop_p = 1\nbeta1 = 0\ntemperature = 0\ninduction_inputs = 2\n"
                                         "[run]\nseed = 9223372036854775807\nthreads = 2147483647\n",
                                     "f.toml");
  EXPECT_EQ(c.algorithm.top_p, 1.0);
  EXPECT_EQ(c.algorithm.beta1, 0.0);
  EXPECT_EQ(c.algorithm.induction_inputs, 2);
  EXPECT_EQ(c.run.seed, uint64_t{9223372036854775807u});
  EXPECT_EQ(c.run.threads, 2147483647);
}

// ----- validate ----------------------------------------------------------------------------------

TEST(ConfigValidate, ExactlyOneOfPathAndPreset) {
  // Each named where it was set (the value's line and column).
  EXPECT_EQ(parse_error("[model]\npath = \"/m\"\npreset = \"azr-tiny\"\n"),
            "f.toml: model.path (f.toml:2:8) and model.preset (f.toml:3:10) " + kBothSet);
  EXPECT_EQ(parse_error("[model]\ntokenizer = \"t.json\"\n"),
            "f.toml: neither model.path nor model.preset is set" + kNeitherSet);
  EXPECT_EQ(parse_error("[model]\npath = \"\"\n"),
            "f.toml: neither model.path nor model.preset is set; model.path is empty (f.toml:2:8)" + kNeitherSet);
  EXPECT_EQ(parse_config("[model]\npath = \"/m\"\n", "f.toml").model.path, "/m");
  // The preset name itself is the trainer's to check (it knows model::preset_names()).
  EXPECT_EQ(parse_config("[model]\npreset = \"anything\"\n", "f.toml").model.preset, "anything");
}

TEST(ConfigValidate, ChecksRangesOfConfigsBuiltInCode) {
  TrainConfig c = with_preset();
  EXPECT_EQ(error_of([&] { validate(c, "code"); }), "<no error>");
  c.algorithm.top_p = 2;
  EXPECT_EQ(error_of([&] { validate(c, "code"); }), "code: algorithm.top_p: must be in (0, 1], got 2.0");
  c = with_preset();
  c.run.seed = uint64_t{1} << 63;  // beyond what TOML can write back
  EXPECT_EQ(error_of([&] { validate(c, "code"); }),
            "code: run.seed: must be >= 0, got 9223372036854775808");
}

// ----- --set -------------------------------------------------------------------------------------

TEST(ConfigSet, Numbers) {
  const TrainConfig c = parse_config(
      kMinimal, "f.toml", {"algorithm.lr=3e-4", "algorithm.batch_size=32", "run.seed=42", "algorithm.top_p=1"});
  EXPECT_EQ(c.algorithm.lr, 3e-4);
  EXPECT_EQ(c.algorithm.batch_size, 32);
  EXPECT_EQ(c.run.seed, 42u);
  EXPECT_EQ(c.algorithm.top_p, 1.0);
}

TEST(ConfigSet, Strings) {
  const TrainConfig c = parse_config(kMinimal, "f.toml",
                                     {"model.preset=", "model.path=/models/x y", "run.name=\"my \\\"run\\\"\"",
                                      "model.tokenizer='C:\\t.json'", "run.run_dir=2024", "eval.data_dir=true",
                                      " logging.console = plain "});
  EXPECT_EQ(c.model.preset, "");
  EXPECT_EQ(c.model.path, "/models/x y");
  EXPECT_EQ(c.run.name, "my \"run\"");
  EXPECT_EQ(c.model.tokenizer, "C:\\t.json");
  EXPECT_EQ(c.run.run_dir, "2024");    // a string key keeps the text, not the integer
  EXPECT_EQ(c.eval.data_dir, "true");
  EXPECT_EQ(c.logging.console, "plain");
}

TEST(ConfigSet, Arrays) {
  const auto benchmarks = [](const std::string& o) {
    return parse_config(kMinimal, "f.toml", {o}).eval.benchmarks;
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(benchmarks("eval.benchmarks=[\"humaneval\", 'mbpp']"), (V{"humaneval", "mbpp"}));
  EXPECT_EQ(benchmarks("eval.benchmarks=humaneval,mbpp"), (V{"humaneval", "mbpp"}));
  EXPECT_EQ(benchmarks("eval.benchmarks=humaneval, mbpp_plus"), (V{"humaneval", "mbpp_plus"}));
  EXPECT_EQ(benchmarks("eval.benchmarks=humaneval"), (V{"humaneval"}));
  EXPECT_EQ(benchmarks("eval.benchmarks=[]"), V{});
  EXPECT_EQ(benchmarks("eval.benchmarks="), V{});
}

TEST(ConfigSet, BoolsAndLaterWins) {
  const TrainConfig c = parse_config(kMinimal + "[algorithm]\nlr = 1e-3\n", "f.toml",
                                     {"logging.tensorboard=false", "algorithm.lr=1e-5", "algorithm.lr=2e-5"});
  EXPECT_FALSE(c.logging.tensorboard);
  EXPECT_EQ(c.algorithm.lr, 2e-5);
}

TEST(ConfigSet, ValidationRunsAfterOverrides) {
  EXPECT_EQ(parse_config("", "f.toml", {"model.preset=azr-tiny"}).model.preset, "azr-tiny");
  // A --set of one on a file that sets the other: the --set is named, not the file alone.
  EXPECT_EQ(parse_error(kMinimal, {"model.path=/m"}),
            "f.toml: model.path (--set model.path=/m) and model.preset (f.toml:2:10) " + kBothSet);
  EXPECT_EQ(parse_error(kMinimal, {"model.preset="}),
            "f.toml: neither model.path nor model.preset is set; model.preset is empty (--set model.preset=)" +
                kNeitherSet);
}

TEST(ConfigSet, Errors) {
  const auto set_error = [](const std::string& o) { return parse_error(kMinimal, {o}); };
  EXPECT_EQ(set_error("algorithm.lr=abc"), "--set algorithm.lr=abc: expected a float");
  EXPECT_EQ(set_error("algorithm.lr=\"abc\""), "--set algorithm.lr=\"abc\": expected a float, got a string");
  EXPECT_EQ(set_error("algorithm.lerning_rate=1"),
            "--set algorithm.lerning_rate=1: unknown key (did you mean 'algorithm.lr'?)");
  EXPECT_EQ(set_error("algoritm.lr=1"), "--set algoritm.lr=1: unknown key (did you mean 'algorithm.lr'?)");
  EXPECT_EQ(set_error("lr=1"), "--set lr=1: unknown key (did you mean 'algorithm.lr'?)");
  EXPECT_EQ(set_error("foo"), "--set foo: expected KEY=VALUE");
  EXPECT_EQ(set_error("algorithm.top_p=1.5"), "--set algorithm.top_p=1.5: must be in (0, 1], got 1.5");
  EXPECT_EQ(set_error("algorithm.batch_size=1.5"),
            "--set algorithm.batch_size=1.5: expected an integer, got a float");
  EXPECT_EQ(set_error("algorithm.batch_size=0"), "--set algorithm.batch_size=0: must be >= 1, got 0");
  EXPECT_EQ(set_error("logging.console=loud"),
            "--set logging.console=loud: must be one of \"auto\", \"progress\", \"plain\", \"off\", got \"loud\"");
  EXPECT_EQ(set_error("logging.tensorboard=yes"), "--set logging.tensorboard=yes: expected a boolean");
  EXPECT_EQ(set_error("eval.benchmarks=[1]"),
            "--set eval.benchmarks=[1]: element 0: expected a string, got an integer");
  EXPECT_EQ(set_error("run.name="), "--set run.name=: must not be empty, got \"\"");
  // One value only: a second line must not smuggle in another key.
  EXPECT_EQ(set_error("algorithm.lr=1\nrun.steps = 3"), "--set algorithm.lr=1\nrun.steps = 3: expected a float");
  EXPECT_EQ(set_error("model.path=\xff"), "--set model.path=\xff: the value is not valid UTF-8");
  // A value that starts as a TOML string, array or table is TOML or an error, not a bare word: the
  // name below was the text "x, its quote kept, and the array said "expected a float".
  EXPECT_EQ(set_error("run.name=\"x"), "--set run.name=\"x: not a TOML value (Error while parsing string: "
                                       "unescaped control characters other than TAB (U+0009) are explicitly "
                                       "prohibited)");
  EXPECT_EQ(set_error("algorithm.lr=[1,"),
            "--set algorithm.lr=[1,: not a TOML value (Error while parsing array: encountered end-of-file)");
  EXPECT_EQ(set_error("eval.benchmarks=[humaneval, mbpp]"),
            "--set eval.benchmarks=[humaneval, mbpp]: not a TOML value (Error while parsing value: could not "
            "determine value type); quote the items, [\"a\", \"b\"], or give them bare: a,b");
  // A string key keeps a bare word that starts with a bracket.
  EXPECT_EQ(parse_config(kMinimal, "f.toml", {"run.name=[exp1]"}).run.name, "[exp1]");
  // A number past 64 bits is said as that, not as no integer at all.
  EXPECT_EQ(set_error("run.steps=99999999999999999999"),
            "--set run.steps=99999999999999999999: expected an integer (Error while parsing decimal integer: "
            "'99999999999999999999' is not representable in 64 bits)");
  EXPECT_EQ(parse_config(kMinimal, "f.toml", {"run.name=x\"y"}).run.name, "x\"y");  // a quote inside: a bare word
}

TEST(ConfigSet, OverriddenConfigRoundTrips) {
  const TrainConfig c = parse_config(kMinimal, "f.toml", {"run.name=tab\there \u00e9", "eval.benchmarks=a\\b,c"});
  EXPECT_EQ(parse_config(to_toml(c), "r.toml"), c);
}

// ----- files ---------------------------------------------------------------------------------------

class ConfigFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("azr_config_test_" + std::to_string(getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& text) {
    const fs::path p = dir_ / name;
    std::ofstream(p, std::ios::binary) << text;
    return p.string();
  }
  fs::path dir_;
};

TEST_F(ConfigFiles, LoadsAndNamesThePath) {
  const std::string path = write("run.toml", kMinimal + "[algorithm]\nlr = 3e-6\n");
  EXPECT_EQ(load_config(path, {"algorithm.batch_size=8"}).algorithm.lr, 3e-6);
  EXPECT_EQ(load_config(path, {"algorithm.batch_size=8"}).algorithm.batch_size, 8);
  const std::string bad = write("bad.toml", "# comment\n" + kMinimal + "\n[checkpoint]\nevery = 10\nkeep = 3\n");
  EXPECT_EQ(error_of([&] { load_config(bad); }),
            bad + ":7:1: unknown key 'checkpoint.keep' (did you mean 'checkpoint.keep_last'?)");
}

TEST_F(ConfigFiles, MissingOrUnreadable) {
  const std::string missing = (dir_ / "nope.toml").string();
  EXPECT_EQ(error_of([&] { load_config(missing); }), missing + ": cannot read config file: No such file or directory");
  EXPECT_EQ(error_of([&] { load_config(dir_.string()); }), dir_.string() + ": cannot read config file: Is a directory");
}

// A check made after loading names where the value came from: the last --set of the key, else the
// key's place in the file (line and column counted by hand below), else the file (a default).
TEST_F(ConfigFiles, AKeysOriginIsTheOverrideOrItsPlaceInTheFile) {
  const std::string path = write("origin.toml", "[run]\nsteps = 2\n\n[algorithm]\n  temperature = 0.0\n");
  EXPECT_EQ(config_key_origin(path, {}, "algorithm.temperature"), path + ":5:17: ");
  EXPECT_EQ(config_key_origin(path, {}, "run.steps"), path + ":2:9: ");
  EXPECT_EQ(config_key_origin(path, {}, "model.preset"), path + ": ");
  EXPECT_EQ(config_key_origin(path, {"algorithm.temperature=1", "algorithm.temperature = 0", "run.steps=3"},
                              "algorithm.temperature"),
            "--set algorithm.temperature = 0: ");
}

TEST_F(ConfigFiles, ToTomlWrittenToDiskLoadsBack) {
  const TrainConfig c = every_field_changed();
  EXPECT_EQ(load_config(write("resolved.toml", to_toml(c))), c);
}

// Every shipped config (configs/**/*.toml: the quickstart and the recipes) must load and round-trip.
TEST(ShippedConfigs, AllParse) {
  const char* tests_dir = std::getenv("AZR_TESTS_DIR");
  const fs::path configs = tests_dir && *tests_dir ? fs::path(tests_dir) / ".." / "configs" : fs::path(AZR_CONFIGS_DIR);
  std::vector<fs::path> files;
  if (fs::is_directory(configs))
    for (const auto& entry : fs::recursive_directory_iterator(configs))
      if (entry.path().extension() == ".toml") files.push_back(entry.path());
  ASSERT_FALSE(files.empty()) << "no configs/*.toml under " << configs;
  EXPECT_TRUE(std::any_of(files.begin(), files.end(), [](const fs::path& f) { return f.filename() == "quickstart.toml"; }));
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    SCOPED_TRACE(f.string());
    const std::string error = error_of([&] { load_config(f.string()); });
    EXPECT_EQ(error, "<no error>");
    if (error != "<no error>") continue;
    const TrainConfig c = load_config(f.string());
    EXPECT_EQ(parse_config(to_toml(c), "r.toml"), c);
  }
}

}  // namespace
}  // namespace azr::trainer
