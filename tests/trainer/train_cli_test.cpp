// `azr train` end to end, through the real binary, on the smallest real run
// (tests/trainer/fixtures/tiny_train.toml: a new azr-tiny model, the real sandbox, a real SQLite
// buffer, real checkpoints):
//   - resume: 3 steps in one go == 1 step, then --resume for 2 more (bit for bit: metrics apart
//     from timings, weights, optimizer state, the buffer's tasks);
//   - kill -9 at several moments (at once, seeding, mid-step, inside a checkpoint write), resuming each
//     time, ends exactly where the uninterrupted run does, and the buffer always opens;
//   - Ctrl-C (SIGINT) finishes the step, checkpoints and exits 130; resuming finishes the run;
//   - mpirun -np 2 gives every rank identical weights after every step and matches one process
//     (within float reduction-order tolerance);
//   - bad configs and bad usage: one message, exit 2, nothing written.
// The uninterrupted reference run is made once per build and shared by the tests (under a lock).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <ctime>
#include <iomanip>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "model/transformer.h"
#include "tests/test_support.h"

extern char** environ;

namespace {

namespace fs = std::filesystem;
using azr::testing::env_or_fail;
using azr::testing::run_process;
using nlohmann::json;

constexpr int kSteps = 3;

std::string azr() { return env_or_fail("AZR_BIN"); }
std::string fixture() { return env_or_fail("AZR_TESTS_DIR") + "/trainer/fixtures/tiny_train.toml"; }

// Every run of these tests: the fixture plus the flags that make it a 3-step run checkpointed
// after every step, with the benchmarks from the shared data.
std::vector<std::string> train_args(const std::string& run_dir, int steps = kSteps) {
  return {azr(),
          "train",
          fixture(),
          "--run-dir",
          run_dir,
          "--set",
          "run.steps=" + std::to_string(steps),
          "--set",
          "checkpoint.every=1",
          "--set",
          "eval.every=2",
          "--set",
          "eval.data_dir=" + env_or_fail("AZR_SHARED_DIR") + "/benchmarks",
          "--set",
          "seeding.import_tasks=" + env_or_fail("AZR_TESTS_DIR") + "/trainer/fixtures/seed_tasks.jsonl"};
}
std::vector<std::string> resume_args(const std::string& run_dir, int steps = kSteps) {
  return {azr(), "train", "--resume", run_dir, "--set", "run.steps=" + std::to_string(steps)};
}

const azr::testing::ProcessScratch& kScratch = azr::testing::register_process_scratch("azr-train-test");

fs::path scratch(const std::string& name) {
  fs::path p = kScratch.dir() / name;
  fs::remove_all(p);
  fs::create_directories(p.parent_path());
  return p;
}

// Starts a process with stdout/stderr into `log`; returns its pid.
pid_t start(const std::vector<std::string>& args, const fs::path& log) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, args[0].c_str(), &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  return rc == 0 ? pid : -1;
}

int wait_exit(pid_t pid) {
  int st = 0;
  waitpid(pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// metrics.jsonl without what depends on the machine's speed.
std::vector<json> metrics(const fs::path& run_dir) {
  std::vector<json> out;
  std::ifstream in(run_dir / "metrics.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    json j = json::parse(line);
    json kept = json::object();
    for (auto& [k, v] : j.items())
      if (k != "time" && k.rfind("time/", 0) != 0 && k.rfind("perf/", 0) != 0) kept[k] = v;
    out.push_back(kept);
  }
  return out;
}

std::string buffer_tasks(const fs::path& run_dir) {
  auto r = run_process({azr(), "buffer", "export", (run_dir / "buffer.db").string()});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return r.out;
}

// The uninterrupted run, made once per build (a lock keeps concurrent test processes from
// making it twice) and kept next to the azr binary's build tree.
fs::path reference_run() {
  const fs::path dir = fs::path(azr()).parent_path().parent_path() / "tests" / "train-reference";
  fs::create_directories(dir.parent_path());
  const int lock = open((dir.string() + ".lock").c_str(), O_CREAT | O_RDWR, 0644);
  flock(lock, LOCK_EX);
  // Stale if the binary changed since it was made.
  struct stat st {};
  stat(azr().c_str(), &st);
  const std::string stamp = std::to_string(st.st_mtime) + ":" + std::to_string(st.st_size) + ":" + slurp(fixture());
  if (slurp(dir / "stamp") != stamp) {
    fs::remove_all(dir);
    auto r = run_process(train_args(dir.string()));
    EXPECT_EQ(r.exit_code, 0) << r.err;
    if (r.exit_code == 0) std::ofstream(dir / "stamp") << stamp;  // a failed run is made again next time
  }
  flock(lock, LOCK_UN);
  close(lock);
  return dir;
}

void expect_same_run(const fs::path& got, const fs::path& ref, int step = kSteps) {
  const std::vector<json> a = metrics(got), b = metrics(ref);
  ASSERT_EQ(a.size(), b.size()) << got;
  for (size_t i = 0; i < a.size(); i++) EXPECT_EQ(a[i], b[i]) << "metrics line " << i + 1;
  const fs::path ck = "checkpoints/step-" + std::to_string(step);
  for (const char* f : {"model.safetensors", "optimizer.safetensors"})
    EXPECT_TRUE(slurp(got / ck / f) == slurp(ref / ck / f)) << f << " differs";
  EXPECT_EQ(buffer_tasks(got), buffer_tasks(ref));
}

// The `time/step_s` the run's metrics line of `step` recorded (0 when there is none).
double step_seconds(const fs::path& run_dir, int64_t step) {
  std::ifstream in(run_dir / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    const json j = json::parse(line, nullptr, false);
    if (j.is_object() && j.value("step", int64_t(-1)) == step) return j.value("time/step_s", 0.0);
  }
  return 0;
}

int64_t last_metrics_step(const fs::path& run_dir) {
  std::ifstream in(run_dir / "metrics.jsonl");
  std::string line;
  int64_t step = 0;
  while (std::getline(in, line)) try {
      step = json::parse(line).at("step").get<int64_t>();
    } catch (...) {
    }
  return step;
}

TEST(TrainCli, ReferenceRunLeavesACompleteRunDirectory) {
  const fs::path ref = reference_run();
  azr::testing::ProcessResult r;
  for (const char* f : {"config.toml", "buffer.db", "metrics.jsonl", "log.txt"}) EXPECT_TRUE(fs::exists(ref / f)) << f;
  bool events = false;
  for (const auto& e : fs::directory_iterator(ref))
    events |= e.path().filename().string().rfind("events.out.tfevents.", 0) == 0;
  EXPECT_TRUE(events);
  for (int s = 0; s <= kSteps; s++)
    for (const char* f : {"config.json", "model.safetensors", "tokenizer.json", "optimizer.safetensors", "buffer.db",
                          "trainer_state.json", "checksums.xxh128"})
      EXPECT_TRUE(fs::exists(ref / ("checkpoints/step-" + std::to_string(s)) / f)) << s << " " << f;
  // Every file of a checkpoint is in its manifest, as Debian's xxh128sum checks it (the README's
  // set-up installs it; without it, this part is skipped, and says so).
  if (run_process({"/bin/sh", "-c", "command -v xxh128sum"}).exit_code != 0) {
    std::cout << "[  NOTE    ] xxh128sum not installed: the manifest is not checked by an independent tool\n";
  } else {
    r = run_process({"/bin/sh", "-c", "cd \"$1\" && xxh128sum --strict -c checksums.xxh128", "sh",
                     (ref / "checkpoints/step-3").string()});
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    for (const char* f : {"config.json", "model.safetensors", "tokenizer.json", "optimizer.safetensors", "buffer.db",
                          "trainer_state.json"})
      EXPECT_NE(r.out.find(std::string(f) + ": OK"), std::string::npos) << f << "\n" << r.out;
  }
  // The wording the model learned, for azr eval's default template (the fixture leaves the key
  // at its default, the paper's prompts).
  EXPECT_EQ(json::parse(slurp(ref / "checkpoints/step-3/trainer_state.json"))["prompt_style"], "paper");
  const std::vector<json> m = metrics(ref);
  ASSERT_EQ(m.size(), size_t(kSteps));
  for (int s = 0; s < kSteps; s++) {
    EXPECT_EQ(m[size_t(s)]["step"], s + 1);
    // 6 groups x batch 2: every group has its two sequences.
    for (const char* g : {"deduction/proposer", "deduction/solver", "abduction/proposer", "abduction/solver",
                          "induction/proposer", "induction/solver"})
      EXPECT_EQ(m[size_t(s)][std::string("count/") + g], 2) << g;
  }
  EXPECT_TRUE(m[1].contains("eval/cruxeval_o/pass@1"));
  // The buffer is a real azr buffer.
  r = run_process({azr(), "buffer", "stats", (ref / "buffer.db").string(), "--json"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  // The saved checkpoint is a model other commands load.
  r = run_process({azr(), "generate", "--model", (ref / "checkpoints/step-3").string(), "--prompt", "def f(",
                   "--max-tokens", "4", "--seed", "1"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  // The resolved config reads back (and holds the run dir it ran in).
  const std::string cfg = slurp(ref / "config.toml");
  EXPECT_NE(cfg.find("steps = 3"), std::string::npos);
  EXPECT_NE(cfg.find(ref.string()), std::string::npos);
}

TEST(TrainCli, ResumeContinuesBitIdentically) {
  const fs::path ref = reference_run();
  const fs::path run = scratch("resume");
  auto r = run_process(train_args(run.string(), 1));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_EQ(last_metrics_step(run), 1);
  // A line that is not metrics (an edit, a damaged disk) goes on resume, and the log says so.
  const std::string before = slurp(run / "metrics.jsonl");
  std::ofstream(run / "metrics.jsonl", std::ios::trunc) << "an edited line\n" << before;
  r = run_process(resume_args(run.string()));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("metrics.jsonl had 1 line(s) that are not metrics (the first at line 1)"), std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find("rank(s), this run has"), std::string::npos) << r.err;  // the same one rank
  expect_same_run(run, ref);
}

// eval.at_start writes its step-0 row after checkpoint 0: a run killed during that evaluation
// resumes from step 0 with no row, and the resume evaluates again; a resume that has the row
// does not write a second one.
TEST(TrainCli, ResumeFromStepZeroWritesTheStartEvaluationItLacks) {
  const fs::path run = scratch("resume-step-0");
  std::vector<std::string> args = train_args(run.string(), 0);
  args.insert(args.end(), {"--set", "eval.at_start=true"});
  auto r = run_process(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::vector<json> first = metrics(run);
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0]["step"], 0);
  EXPECT_TRUE(first[0].contains("eval/cruxeval_o/pass@1")) << first[0];
  ASSERT_TRUE(fs::exists(run / "checkpoints/step-0"));

  r = run_process(resume_args(run.string(), 0));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(metrics(run), first);

  std::ofstream(run / "metrics.jsonl", std::ios::trunc).flush();  // killed during the evaluation
  r = run_process(resume_args(run.string(), 0));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(metrics(run), first);
}

// The whole run on cpu-guarded (backend memory the host cannot touch: kernels/guarded) with
// activation recomputation, resumed half way: generation, learning, evaluation, checkpoints and
// resume must reach the model through the op table alone (else the run stops with a message),
// and neither the device nor recomputation may change a single bit of the run.
TEST(TrainCli, GuardedDeviceWithRecomputationRunsTheSameRunBitForBit) {
  const fs::path ref = reference_run();
  const fs::path run = scratch("guarded");
  auto args = train_args(run.string(), 1);
  args.insert(args.end(), {"--set", "model.device=cpu-guarded", "--set", "model.recompute=true"});
  auto r = run_process(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(slurp(run / "log.txt").find("on cpu-guarded, recomputing activations"), std::string::npos);
  r = run_process(resume_args(run.string()));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  expect_same_run(run, ref);
}

// model.matmul_precision = "bf16" reaches the learner and the sampler (the log names the table):
// one step with recomputation on cpu-guarded+bf16 (backend memory the host cannot touch) is the
// same run as on cpu+bf16 bit for bit (metrics, weights, optimizer state, tasks), and its metrics
// differ from the fp32 reference's step 1 (the rounding is applied). The model's numbers for bf16
// are tests/kernels/bf16_matmul_test.cpp's.
TEST(TrainCli, Bf16MatmulPrecisionRunsTheSameStepOnTheGuardedDevice) {
  const fs::path ref = reference_run();
  auto run_on = [&](const std::string& device) {
    const fs::path run = scratch("bf16-" + device);
    auto args = train_args(run.string(), 1);
    args.insert(args.end(), {"--set", "model.matmul_precision=bf16", "--set", "model.device=" + device, "--set",
                             "model.recompute=true"});
    auto r = run_process(args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return run;
  };
  const fs::path cpu = run_on("cpu"), guarded = run_on("cpu-guarded");
  EXPECT_NE(slurp(cpu / "log.txt").find("on cpu+bf16"), std::string::npos) << slurp(cpu / "log.txt");
  EXPECT_NE(slurp(guarded / "log.txt").find("on cpu-guarded+bf16"), std::string::npos);
  expect_same_run(guarded, cpu, 1);
  const std::vector<json> got = metrics(cpu), want = metrics(ref);
  ASSERT_FALSE(got.empty());
  ASSERT_FALSE(want.empty());
  EXPECT_NE(got[0], want[0]) << "bf16 GEMMs left step 1's metrics exactly fp32's";
}

// run.profile_step: the step's ops, each timed alone, go to op_profile_step<N>.json and a line of
// the log; the model runs on the profiled twin of its op table, so the run is still the reference
// run bit for bit, before and after the profiled step. The counts follow from the architecture:
// every training forward and backward of azr-tiny (4 layers) runs 7 linear maps per layer and the
// LM head, 29 matmul_backward calls, and a step ends with one AdamW update.
TEST(TrainCli, ProfiledStepWritesItsOpSplitAndChangesNothingElse) {
  const fs::path ref = reference_run();
  const fs::path run = scratch("profile");
  auto args = train_args(run.string());
  args.insert(args.end(), {"--set", "run.profile_step=2"});
  auto r = run_process(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  expect_same_run(run, ref);
  EXPECT_NE(slurp(run / "log.txt").find("op profile of step 2: "), std::string::npos) << slurp(run / "log.txt");
  int profiles = 0;
  for (const auto& e : fs::directory_iterator(run)) profiles += e.path().filename().string().rfind("op_profile", 0) == 0;
  EXPECT_EQ(profiles, 1) << "only the named step is profiled";
  const json p = json::parse(slurp(run / "op_profile_step2.json"));
  EXPECT_EQ(p.at("step"), 2);
  EXPECT_EQ(p.at("device"), "cpu");
  std::map<std::string, int64_t> calls;
  double sum = 0;
  for (const json& o : p.at("ops")) {
    const std::string op = o.at("op").get<std::string>();
    calls[op] = o.at("calls").get<int64_t>();
    sum += o.at("seconds").get<double>();
    // FLOPs for the products only (kernels/op_profile.h; their values: op_profile_test)
    EXPECT_EQ(o.contains("flops"), op.rfind("matmul_", 0) == 0 || op.rfind("attention_forward", 0) == 0 ||
                                       op.rfind("attention_backward", 0) == 0)
        << op;
  }
  EXPECT_GT(calls["matmul_backward"], 0);
  EXPECT_EQ(calls["matmul_backward"] % 29, 0) << calls["matmul_backward"];
  EXPECT_EQ(calls["adamw"], 1);
  EXPECT_GT(calls["sample_rows"], 0);  // the step generated
  EXPECT_NEAR(p.at("op_seconds").get<double>(), sum, 1e-9);
  EXPECT_LE(sum, p.at("step_seconds").get<double>());
}

// algorithm.micro_batch_size = 0: the trainer takes the largest micro-batch that `azr memory`
// says fits model.memory_gib for the run's longest sequence (prompt + response limits), logs how
// it chose, and keeps 0 in the saved config; when not even one sequence fits it stops before
// writing anything, with the numbers.
TEST(TrainCli, MicroBatchZeroTakesTheLargestThatFitsTheMemoryPlan) {
  const fs::path run = scratch("auto-micro");
  const auto fit = run_process({azr(), "memory", "azr-tiny", "--precision", "fp32", "--device", "cpu",
                                "--seq-len", "4120", "--budget-gib", "3", "--json"});
  ASSERT_EQ(fit.exit_code, 0) << fit.err;
  const int64_t expected = json::parse(fit.out)["micro_batch"].get<int64_t>();
  ASSERT_GT(expected, 1);
  auto r = run_process({azr(), "train", fixture(), "--run-dir", run.string(), "--set", "run.steps=0", "--set",
                        "algorithm.micro_batch_size=0", "--set", "model.memory_gib=3"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string log = slurp(run / "log.txt");
  EXPECT_NE(log.find("micro-batch: " + std::to_string(expected) + " sequence(s) of up to 4120 tokens"),
            std::string::npos) << log;
  EXPECT_NE(slurp(run / "config.toml").find("micro_batch_size = 0"), std::string::npos);
  // A resume saves the config again, still with 0: the next resume plans for its own device.
  r = run_process({azr(), "train", "--resume", run.string(), "--set", "run.steps=0"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(slurp(run / "config.toml").find("micro_batch_size = 0"), std::string::npos);

  const fs::path none = scratch("auto-micro-none");
  r = run_process({azr(), "train", fixture(), "--run-dir", none.string(), "--set", "algorithm.micro_batch_size=0",
                   "--set", "model.memory_gib=0.5"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("algorithm.micro_batch_size = 0: not even one sequence of 4120 tokens fits 0.50 GiB"),
            std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(none));

  // Training fits, generation does not: 1,000 sequences of 4,120 positions decoded together, the
  // phase `azr memory --kv-slots` plans (its KV cache: 4 layers x K and V x 2 kv heads x 32 dims x
  // 4 bytes = 2 KiB a position, 7.86 GiB).
  const auto gen_plan = run_process({azr(), "memory", "azr-tiny", "--precision", "fp32", "--device", "cpu",
                                     "--seq-len", "4120", "--budget-gib", "3", "--kv-slots", "1000", "--json"});
  ASSERT_EQ(gen_plan.exit_code, 1) << gen_plan.err;  // 1: the plan does not fit the budget
  const json bytes = json::parse(gen_plan.out)["bytes"];
  ASSERT_LE(bytes["training_peak"].get<double>(), 3.0 * double(1ull << 30));
  ASSERT_EQ(bytes["kv_cache"].get<double>(), 2048.0 * 4120 * 1000);
  const fs::path gen = scratch("auto-micro-generation");
  r = run_process({azr(), "train", fixture(), "--run-dir", gen.string(), "--set", "algorithm.micro_batch_size=0",
                   "--set", "model.memory_gib=3", "--set", "algorithm.generation_batch_size=1000"});
  EXPECT_EQ(r.exit_code, 2);
  char want[200];
  std::snprintf(want, sizeof want,
                "training fits 3.00 GiB (model.memory_gib), but generation does not: 1000 sequences of up to 4120 "
                "tokens decoded together peak at %.2f GiB, 7.86 GiB of it the KV cache",
                bytes["generation_peak"].get<double>() / double(1ull << 30));
  EXPECT_NE(r.err.find(want), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(gen));

  // Past what the GPU kernels take in one micro-batch: 2,097,120 tokens / 4,120 = 509 sequences.
  const fs::path big = scratch("micro-past-the-kernels");
  r = run_process({azr(), "train", fixture(), "--run-dir", big.string(), "--set", "algorithm.micro_batch_size=510"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("algorithm.micro_batch_size = 510, max_prompt_tokens + max_response_tokens = 4120: 510 "
                       "sequences of up to 4120 tokens are past the 509 one micro-batch can hold"),
            std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(big));
  // A micro-batch given whose plan passes the memory (above: not even one sequence fits 0.5 GiB):
  // taken, and said at start.
  const fs::path given = scratch("micro-given-too-big");
  r = run_process({azr(), "train", fixture(), "--run-dir", given.string(), "--set", "run.steps=0", "--set",
                   "algorithm.micro_batch_size=4", "--set", "model.memory_gib=0.5"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string given_log = slurp(given / "log.txt");
  EXPECT_NE(given_log.find("warning: algorithm.micro_batch_size = 4: its plan peaks at "), std::string::npos)
      << given_log;
  EXPECT_NE(given_log.find("past the 0.50 GiB of model.memory_gib; the run may run out of memory"), std::string::npos)
      << given_log;
  // A sequence past 2,097,120 tokens fits no micro-batch, whatever the memory.
  r = run_process({azr(), "train", fixture(), "--run-dir", big.string(), "--set", "algorithm.max_prompt_tokens=3000000",
                   "--set", "algorithm.micro_batch_size=0", "--set", "model.memory_gib=1000"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("a sequence of up to 3000024 tokens is past what one micro-batch can hold"), std::string::npos)
      << r.err;
  EXPECT_FALSE(fs::exists(big));
}

TEST(TrainCli, KillNineAtAnyMomentResumesFromTheLastCheckpoint) {
  const fs::path ref = reference_run();
  const fs::path run = scratch("kill");
  const fs::path log = run.string() + ".log";
  // Kill points: at once (before the run's config is written), during start-up/seeding, inside
  // the write of checkpoint step-1 (the moment the temporary directory appears), and in the
  // middle of a later step. The points are found by watching the run directory, not by timing,
  // so a slow machine moves them only within their phase.
  pid_t pid = start(train_args(run.string()), log);
  ASSERT_GT(pid, 0);
  kill(pid, SIGKILL);
  EXPECT_EQ(wait_exit(pid), 128 + SIGKILL);
  // Killed before config.toml (the run's commit point) was renamed into place, the directory is
  // no run yet and a plain rerun takes it; killed after, --resume continues it. Which one
  // happened depends on how far the process got in its first instants, so both are accepted.
  const bool config_written = fs::exists(run / "config.toml");
  pid = start(config_written ? resume_args(run.string()) : train_args(run.string()), log);
  for (int i = 0; i < 120000 && !fs::exists(run / "config.toml"); i++) {
    if (waitpid(pid, nullptr, WNOHANG) == pid) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_TRUE(fs::exists(run / "config.toml")) << slurp(log);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // into start-up/seeding
  kill(pid, SIGKILL);
  EXPECT_EQ(wait_exit(pid), 128 + SIGKILL);

  pid = start(resume_args(run.string()), log);
  bool hit_tmp = false;
  for (int i = 0; i < 120000 && !hit_tmp; i++) {  // up to ~2 min, polling every ms
    if (fs::exists(run / "checkpoints/.step-1.tmp")) {
      kill(pid, SIGKILL);
      hit_tmp = true;
      break;
    }
    if (waitpid(pid, nullptr, WNOHANG) == pid) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_TRUE(hit_tmp) << "never saw checkpoints/.step-1.tmp";
  if (hit_tmp) {
    EXPECT_EQ(wait_exit(pid), 128 + SIGKILL);
  }
  // The killed write left no checkpoint step-1; the buffer opens.
  EXPECT_FALSE(fs::exists(run / "checkpoints/step-1/trainer_state.json"));
  auto r = run_process({azr(), "buffer", "stats", (run / "buffer.db").string()});
  EXPECT_EQ(r.exit_code, 0) << r.err;

  pid = start(resume_args(run.string()), log);
  bool exited = false;
  for (int i = 0; i < 12000 && last_metrics_step(run) < 2; i++) {
    if (waitpid(pid, nullptr, WNOHANG) == pid) {
      exited = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (exited || last_metrics_step(run) != 2) {
    if (!exited) kill(pid, SIGKILL), wait_exit(pid);
    FAIL() << "the resumed run never reached step 2:\n" << slurp(log);
  }
  // Half of step 3 as the reference run timed it, or of step 2 as this run did, the shorter (the
  // reference may have run on a busier machine): the kill lands inside step 3, and the exit
  // status says the run was still going when it came.
  std::this_thread::sleep_for(
      std::chrono::duration<double>(0.5 * std::min(step_seconds(ref, 3), step_seconds(run, 2))));
  kill(pid, SIGKILL);
  EXPECT_EQ(wait_exit(pid), 128 + SIGKILL) << "the run ended before the kill in step 3";
  r = run_process({azr(), "buffer", "stats", (run / "buffer.db").string()});
  EXPECT_EQ(r.exit_code, 0) << r.err;

  r = run_process(resume_args(run.string()));
  ASSERT_EQ(r.exit_code, 0) << r.err << slurp(log);
  expect_same_run(run, ref);
}

// Starts the run of train_args(run) with its output to `log`, and waits until it has finished
// step 1 (up to 2 minutes); returns its pid, or -1 (with a failure) when it did not get there.
pid_t start_past_step_one(const fs::path& run, const fs::path& log) {
  pid_t pid = start(train_args(run.string()), log);
  EXPECT_GT(pid, 0);
  for (int i = 0; pid > 0 && i < 1200 && last_metrics_step(run) < 1; i++)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  if (pid > 0 && last_metrics_step(run) >= 1) return pid;
  ADD_FAILURE() << "the run never finished step 1:\n" << slurp(log);
  if (pid > 0) kill(pid, SIGKILL), wait_exit(pid);
  return -1;
}

// Sends `sig` to pid twice, the second only once the first was delivered (no longer pending to the
// process or a thread): two pending signals of one kind would be one.
void signal_twice(pid_t pid, int sig) {
  kill(pid, sig);
  const unsigned long long bit = 1ull << (sig - 1);
  auto pending = [&] {
    std::istringstream status(slurp("/proc/" + std::to_string(pid) + "/status"));
    for (std::string line; std::getline(status, line);)
      if (line.rfind("ShdPnd:", 0) == 0 || line.rfind("SigPnd:", 0) == 0)
        if (std::stoull(line.substr(7), nullptr, 16) & bit) return true;
    return false;
  };
  for (int i = 0; i < 500 && pending(); i++) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  kill(pid, sig);
}

TEST(TrainCli, CtrlCCheckpointsAndStops) {
  const fs::path ref = reference_run();
  const fs::path run = scratch("sigint");
  const fs::path log = run.string() + ".log";
  const pid_t pid = start_past_step_one(run, log);
  ASSERT_GT(pid, 0);
  kill(pid, SIGINT);
  EXPECT_EQ(wait_exit(pid), 130) << slurp(log);
  const int64_t stopped_at = last_metrics_step(run);
  EXPECT_LT(stopped_at, kSteps);
  EXPECT_TRUE(fs::exists(run / ("checkpoints/step-" + std::to_string(stopped_at)) / "trainer_state.json"))
      << "no checkpoint of the last finished step " << stopped_at;
  EXPECT_NE(slurp(log).find("resume with: azr train --resume"), std::string::npos);
  // Said when the signal came, not only when the step ended (it can take minutes).
  EXPECT_NE(slurp(log).find("azr: Ctrl-C: stopping after this step (or seeding batch); Ctrl-C again stops at once"),
            std::string::npos)
      << slurp(log);
  auto r = run_process(resume_args(run.string()));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  expect_same_run(run, ref);
}

// A second Ctrl-C ends the run at once, as the first one says it will; log.txt used to stop
// without a word of it. Its last line now says so, stamped as the log's other lines are (the
// handler formats the time itself), and how to resume.
TEST(TrainCli, ASecondCtrlCStopsAtOnceAndTheLogSaysSo) {
  // A step can end, and the run with it (exit 130, the clean stop), in the milliseconds between
  // the two signals: then another run is tried. A second Ctrl-C that does not stop the run ends
  // every try that way, and fails; it was once a skip, which ctest counts as passed.
  fs::path run, log;
  int status = 0;
  for (int attempt = 0; attempt < 3; attempt++) {
    run = scratch("sigint-twice-" + std::to_string(attempt));
    log = run.string() + ".log";
    const pid_t pid = start_past_step_one(run, log);
    ASSERT_GT(pid, 0);
    signal_twice(pid, SIGINT);
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status)) break;
  }
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGINT)
      << "three runs each ended by themselves after two Ctrl-Cs (exit " << WEXITSTATUS(status)
      << "): the second did not stop them at once\n"
      << slurp(log);
  const std::string text = slurp(run / "log.txt");
  const size_t last = text.rfind('\n', text.size() - 2);
  const std::string last_line = text.substr(last + 1), before = text.substr(0, last);
  EXPECT_NE(last_line.find("  stopped at once by a second Ctrl-C, without a checkpoint of the step it was in; "
                           "resume from the last one with: azr train --resume " + run.string() + "\n"),
            std::string::npos)
      << text;
  // The stamp: RunLog's form, and within two minutes of the line before's (same clock, same zone).
  EXPECT_TRUE(std::regex_search(last_line, std::regex("^\\d{4}-\\d\\d-\\d\\d \\d\\d:\\d\\d:\\d\\d  stopped")))
      << last_line;
  const size_t previous = before.rfind('\n');
  const std::string previous_line = before.substr(previous == std::string::npos ? 0 : previous + 1);
  auto seconds_of = [](const std::string& line) {
    std::tm t{};
    std::istringstream(line.substr(0, 19)) >> std::get_time(&t, "%Y-%m-%d %H:%M:%S");
    return double(timegm(&t));
  };
  EXPECT_LT(std::abs(seconds_of(last_line) - seconds_of(previous_line)), 120) << previous_line << "\n" << last_line;
}

// The sandbox pool's messages went to stderr alone: a run left in the background kept no record of
// a worker lost and replaced. They are in its log.txt too, stamped as its lines are.
TEST(TrainCli, ALostSandboxWorkerIsRecordedInTheRunsLog) {
  const fs::path run = scratch("worker-lost");
  const fs::path log = run.string() + ".log";
  const pid_t pid = start_past_step_one(run, log);
  ASSERT_GT(pid, 0);
  // The run's sandbox workers are its children running azr-zygote.
  pid_t zygote = -1;
  for (const auto& task : fs::directory_iterator("/proc/" + std::to_string(pid) + "/task")) {
    std::istringstream children(slurp(task.path() / "children"));
    for (pid_t child; zygote < 0 && children >> child;)
      if (slurp("/proc/" + std::to_string(child) + "/comm").rfind("azr-zygote", 0) == 0) zygote = child;
  }
  if (zygote < 0) kill(pid, SIGKILL), wait_exit(pid);
  ASSERT_GT(zygote, 0) << "no azr-zygote child of the run";
  kill(zygote, SIGKILL);
  EXPECT_EQ(wait_exit(pid), 0) << slurp(log);
  const std::string text = slurp(run / "log.txt");
  EXPECT_TRUE(std::regex_search(text, std::regex("\\d\\d:\\d\\d:\\d\\d  warning: sandbox worker \\d+ \\(pid " +
                                                 std::to_string(zygote) + "\\) lost: [^\\n]*; replacing it\\n")))
      << text;
}

// A second trainer in a live run's directory (a --resume typed twice, a new run given the same
// --run-dir) wrote the same checkpoints and buffer as the first, and a buffer import raced the
// trainer's writes. While the run lives both are refused, naming it, and reading is not; a kill -9
// leaves no lock behind. A checkpoint's copy of the buffer takes no write (its checksums would no
// longer match).
TEST(TrainCli, ALiveRunsDirectoryIsRefusedToASecondTrainerAndToBufferWrites) {
  const fs::path ref = reference_run();
  const fs::path run = scratch("live");
  const fs::path log = run.string() + ".log";
  const fs::path tasks = run.string() + ".tasks.jsonl";
  std::ofstream(tasks) << buffer_tasks(ref);
  const pid_t pid = start_past_step_one(run, log);
  ASSERT_GT(pid, 0);
  // Stopped, not ended: a stopped process holds its lock, and the run cannot finish (and let go)
  // while the commands below run, however slow the machine.
  kill(pid, SIGSTOP);
  const std::string holder = "azr train, pid " + std::to_string(pid) + " on host ";
  auto r = run_process(resume_args(run.string()));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find(run.string() + ": in use by another " + holder), std::string::npos) << r.err;
  r = run_process(train_args(run.string()));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find(run.string() + ": in use by " + holder), std::string::npos) << r.err;
  const std::string db = (run / "buffer.db").string();
  // `azr buffer import|migrate DB` must exit 2 saying `refusal`.
  auto expect_writes_refused = [&](const std::string& db, const std::string& refusal) {
    for (const char* action : {"import", "migrate"}) {
      std::vector<std::string> args = {azr(), "buffer", action, db};
      if (std::string(action) == "import") args.push_back(tasks.string());
      const auto w = run_process(args);
      EXPECT_EQ(w.exit_code, 2) << action << ": " << w.err;
      EXPECT_NE(w.err.find(db + refusal), std::string::npos) << w.err;
    }
  };
  expect_writes_refused(db, ": the buffer of a live run (" + holder);
  r = run_process({azr(), "buffer", "stats", db});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  kill(pid, SIGKILL);
  EXPECT_EQ(wait_exit(pid), 128 + SIGKILL) << slurp(log);

  // A complete checkpoint's copy (which steps are there depends on when the stop came).
  std::string copy;
  for (const auto& e : fs::directory_iterator(run / "checkpoints"))
    if (fs::exists(e.path() / "trainer_state.json")) copy = (e.path() / "buffer.db").string();
  ASSERT_FALSE(copy.empty()) << "no complete checkpoint";
  expect_writes_refused(copy, ": a checkpoint's copy of its run's buffer");
  // The killed run's lock went with it, and nothing refused above touched the run.
  r = run_process(resume_args(run.string()));
  ASSERT_EQ(r.exit_code, 0) << r.err << slurp(log);
  expect_same_run(run, ref);
}

// Ctrl-C in seeding killed the process there (the handler came after seeding), with no word and
// the buffer's WAL left behind; the README promises a clean stop. Seeding now ends its round, and
// as a new run has no checkpoint before seeding ends, its directory goes: the same command starts
// it again. Seeding here would run for ever (a target of 10^6 tasks), so exit 130 is the stop.
TEST(TrainCli, CtrlCInSeedingStopsThereAndLeavesNoRun) {
  const fs::path run = scratch("sigint-seeding");
  const fs::path log = run.string() + ".log";
  std::vector<std::string> args = train_args(run.string());
  for (const char* set : {"seeding.target=1000000", "seeding.max_rounds=1000000", "buffer.capacity_per_type=0"})
    args.insert(args.end(), {"--set", set});
  const pid_t pid = start(args, log);
  ASSERT_GT(pid, 0);
  // Seeding starts once the imported tasks are in (the log says so).
  for (int i = 0; i < 1200 && slurp(run / "log.txt").find("seeding: imported") == std::string::npos; i++)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ASSERT_NE(slurp(run / "log.txt").find("seeding: imported"), std::string::npos) << slurp(log);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  kill(pid, SIGINT);
  int st = 0;
  waitpid(pid, &st, 0);
  ASSERT_TRUE(WIFEXITED(st)) << "ended by signal " << (WIFSIGNALED(st) ? WTERMSIG(st) : 0) << "\n" << slurp(log);
  EXPECT_EQ(WEXITSTATUS(st), 130) << slurp(log);
  EXPECT_NE(slurp(log).find("stopped by a signal during seeding, before the run's first checkpoint: nothing was saved "
                            "and what the run wrote in " + run.string() + " is removed; run the same command again"),
            std::string::npos)
      << slurp(log);
  EXPECT_FALSE(fs::exists(run)) << "the run directory is left";
}

// Two ranks' run (`run`, 2 steps, run.check_replicas on) against the one-process reference run:
// the same global batch, split over two ranks.
void expect_two_ranks_match_one_process(const fs::path& run, const fs::path& ref, const std::string& launch) {
  EXPECT_NE(slurp(run / "log.txt").find("2 rank(s) (" + launch + ")"), std::string::npos) << slurp(run / "log.txt");
  // Samples and rewards are the same; the loss and the weights differ only by the order in
  // which the gradient sums were added up.
  const std::vector<json> a = metrics(run), b = metrics(ref);
  ASSERT_EQ(a.size(), 2u);
  for (size_t i = 0; i < a.size(); i++) {
    EXPECT_EQ(a[i]["replicas/identical"], 1.0);
    for (auto& [k, v] : b[i].items()) {
      ASSERT_TRUE(a[i].contains(k)) << k;
      if (k.rfind("loss/", 0) == 0 || k == "optim/grad_norm") {
        EXPECT_NEAR(a[i][k].get<double>(), v.get<double>(), 1e-5 * std::max(1.0, std::fabs(v.get<double>()))) << k;
      } else if (k.rfind("eval/", 0) != 0) {
        EXPECT_EQ(a[i][k], v) << "step " << i + 1 << " " << k;
      }
    }
  }
  const auto ma = azr::model::Transformer::from_pretrained(run / "checkpoints/step-2");
  const auto mb = azr::model::Transformer::from_pretrained(ref / "checkpoints/step-2");
  const auto pa = ma.parameters(), pb = mb.parameters();
  ASSERT_EQ(pa.size(), pb.size());
  double worst = 0;
  for (size_t i = 0; i < pa.size(); i++) worst = std::max(worst, double(std::fabs(pa[i] - pb[i])));
  EXPECT_LT(worst, 1e-5) << "largest weight difference";
  // And the run really trained: step-2 weights moved away from step 0.
  const auto m0 = azr::model::Transformer::from_pretrained(ref / "checkpoints/step-0");
  double moved = 0;
  for (size_t i = 0; i < pa.size(); i++) moved = std::max(moved, double(std::fabs(pa[i] - m0.parameters()[i])));
  EXPECT_GT(moved, 1e-4);
}

TEST(TrainCli, TwoMpiRanksMatchOneProcess) {
  const std::string mpirun = "/usr/bin/mpirun";
  if (!AZR_EXPECT_MPI) GTEST_SKIP() << "this azr was built without MPI (AZR_MPI=OFF)";
  if (!fs::exists(mpirun)) GTEST_SKIP() << "mpirun not installed (Debian openmpi-bin)";
  // mpirun refuses root without these (CI runs as root); shared memory between the two ranks
  // without the single-copy mechanism, which container seccomp profiles often block.
  setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
  setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
  setenv("OMPI_MCA_btl", "self,vader", 1);
  setenv("OMPI_MCA_btl_vader_single_copy_mechanism", "none", 1);
  setenv("OMPI_MCA_rmaps_base_oversubscribe", "1", 1);
  const fs::path ref = reference_run();
  const fs::path run = scratch("mpi");
  std::vector<std::string> args = {mpirun, "-np", "2", "--oversubscribe"};
  for (const std::string& a : train_args(run.string(), 2)) args.push_back(a);
  args.push_back("--set");
  args.push_back("run.check_replicas=true");
  auto r = run_process(args);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  expect_two_ranks_match_one_process(run, ref, "mpirun, mpi");
}

// The same through scripts/local_ranks.sh, torchrun's variables on one machine, and the TCP
// backend: how a build without MPI runs ranks (gpu_check.sh pending's two ranks on one GPU).
TEST(TrainCli, TwoTcpRanksMatchOneProcess) {
  const fs::path ref = reference_run();
  const fs::path run = scratch("tcp");
  const int port = azr::testing::free_loopback_port();
  ASSERT_GT(port, 0);
  std::vector<std::string> args = {"/bin/bash", env_or_fail("AZR_TESTS_DIR") + "/../scripts/local_ranks.sh", "2",
                                   "--port", std::to_string(port),
                                   "--logs", (run.parent_path() / "tcp-rank-logs").string(), "--"};
  for (const std::string& a : train_args(run.string(), 2)) args.push_back(a);
  args.insert(args.end(), {"--set", "run.check_replicas=true", "--dist-timeout", "120"});
  auto r = run_process(args);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  expect_two_ranks_match_one_process(run, ref, "torchrun, tcp");
  // Resumed by one process (no step left to run): taken, and the log says the sums' order changed.
  r = run_process(resume_args(run.string(), 2));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(slurp(run / "log.txt").find("resume: the checkpoint was written by 2 rank(s), this run has 1"),
            std::string::npos)
      << slurp(run / "log.txt");
}

// A rank of two whose config is bad stops at once with the config's message, before it waits for
// the other rank (which, with the same config, stops too): it once met the others first, so rank 0
// waited out the TCP rendezvous (60 s) for a rank that had already stopped, then reported the wait.
// Rank 0 alone, as torchrun starts it; the port is free, so no rank 1 ever comes.
TEST(TrainCli, BadConfigStopsARankBeforeTheRanksMeet) {
  const fs::path dir = scratch("bad-config-ranks");
  const int port = azr::testing::free_loopback_port();
  ASSERT_GT(port, 0);
  const auto r = run_process({"/usr/bin/env", "RANK=0", "WORLD_SIZE=2", "LOCAL_RANK=0", "LOCAL_WORLD_SIZE=2",
                              "MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + std::to_string(port), azr(), "train",
                              fixture(), "--run-dir", (dir / "run").string(), "--set", "algorithm.top_p=2", "--dist",
                              "tcp", "--dist-timeout", "5"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("algorithm.top_p"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir / "run"));
}

// Rank 0's own refusal (here: the run directory already holds a run) reaches the other ranks once
// they meet, and each stops with it: rank 1 once waited out the rendezvous (--dist-timeout) for
// a rank 0 that had left, then reported the wait. Two ranks by scripts/local_ranks.sh, rank 1's
// message in its log.
TEST(TrainCli, RankZerosRefusalStopsEveryRank) {
  const fs::path dir = scratch("root-refusal");
  const fs::path run = dir / "run";
  fs::create_directories(run);
  std::ofstream(run / "config.toml") << "# another run's\n";
  const int port = azr::testing::free_loopback_port();
  ASSERT_GT(port, 0);
  const fs::path logs = dir / "logs";
  std::vector<std::string> args = {"/bin/bash", env_or_fail("AZR_TESTS_DIR") + "/../scripts/local_ranks.sh", "2",
                                   "--port", std::to_string(port), "--logs", logs.string(), "--"};
  for (const std::string& a : train_args(run.string(), 1)) args.push_back(a);
  args.insert(args.end(), {"--dist-timeout", "60"});
  const auto start = std::chrono::steady_clock::now();
  const auto r = run_process(args);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_NE(r.exit_code, 0);
  const std::string rank1 = slurp(logs / "rank1.log");
  EXPECT_NE(rank1.find("rank 0 stopped: " + run.string() + ": already holds a run"), std::string::npos)
      << "rank 1's log:\n" << rank1 << "\n(" << seconds << " s)";
  EXPECT_EQ(slurp(run / "config.toml"), "# another run's\n");
}

// SIGTERM twice, as a rank gets it when both a launcher and `timeout` (or a scheduler) pass one
// stop on: the step still finishes and checkpoints. (A second SIGINT, a second Ctrl-C, would end
// the process at once.)
TEST(TrainCli, SigtermTwiceStillCheckpointsAndStops) {
  const fs::path run = scratch("sigterm");
  const fs::path log = run.string() + ".log";
  const pid_t pid = start_past_step_one(run, log);
  ASSERT_GT(pid, 0);
  signal_twice(pid, SIGTERM);
  int st = 0;
  waitpid(pid, &st, 0);
  ASSERT_TRUE(WIFEXITED(st)) << "ended by signal " << (WIFSIGNALED(st) ? WTERMSIG(st) : 0) << "\n" << slurp(log);
  EXPECT_EQ(WEXITSTATUS(st), 130) << slurp(log);
  const int64_t stopped_at = last_metrics_step(run);
  EXPECT_TRUE(fs::exists(run / ("checkpoints/step-" + std::to_string(stopped_at)) / "trainer_state.json"))
      << "no checkpoint of the last finished step " << stopped_at;
}

TEST(TrainCli, BadConfigAndUsageExitTwoWithOneMessage) {
  const fs::path dir = scratch("bad");
  fs::create_directories(dir);
  std::ofstream(dir / "typo.toml") << "[run]\nsteps = 2\n\n[algorithm]\nlerning_rate = 1e-3\n";
  auto r = run_process({azr(), "train", (dir / "typo.toml").string(), "--run-dir", (dir / "run").string()});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("typo.toml:5:1: unknown key 'algorithm.lerning_rate' (did you mean 'algorithm.lr'?)"),
            std::string::npos)
      << r.err;
  EXPECT_FALSE(fs::exists(dir / "run"));

  r = run_process({azr(), "train", fixture(), "--run-dir", (dir / "run").string(), "--set", "algorithm.top_p=2"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("algorithm.top_p"), std::string::npos) << r.err;

  // Checks the trainer makes after loading name the value's origin, as the schema's do.
  r = run_process({azr(), "train", fixture(), "--run-dir", (dir / "run").string(), "--set", "model.preset=azr-huge"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--set model.preset=azr-huge: model.preset: unknown model preset 'azr-huge'"), std::string::npos)
      << r.err;
  std::string greedy = slurp(fixture());
  greedy.replace(greedy.find("[algorithm]\n"), 12, "[algorithm]\ntemperature = 0.0\n");  // line 12, its value at 15
  std::ofstream(dir / "greedy.toml") << greedy;
  r = run_process({azr(), "train", (dir / "greedy.toml").string(), "--run-dir", (dir / "run").string()});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find((dir / "greedy.toml").string() +
                       ":12:15: algorithm.temperature: training samples, so it must be > 0, got 0"),
            std::string::npos)
      << r.err;
  EXPECT_FALSE(fs::exists(dir / "run"));

  r = run_process({azr(), "train", fixture(), "--run-dir", (dir / "run").string(), "--set", "model.device=tpu"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("model.device"), std::string::npos) << r.err;
  r = run_process({azr(), "train", fixture(), "--run-dir", (dir / "run").string(), "--set",
                   "model.matmul_precision=fp16"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("model.matmul_precision"), std::string::npos) << r.err;
  // A decay that zeroes the weights in a step (1 - lr * weight_decay <= 0).
  r = run_process({azr(), "train", fixture(), "--run-dir", (dir / "run").string(), "--set",
                   "algorithm.weight_decay=1e3"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("algorithm.weight_decay: (1000) times algorithm.lr (0.001) is 1: each step multiplies every "
                       "weight by 1 - lr * weight_decay, which must stay above 0"),
            std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir / "run"));
  // NCCL sums GPU buffers: asked for on the CPU, the run stops before its directory exists.
  r = run_process({azr(), "train", fixture(), "--run-dir", (dir / "run").string(), "--set",
                   "run.gradient_allreduce=nccl"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("run.gradient_allreduce = \"nccl\" sums gradients on GPUs: it needs model.device = \"cuda\" "
                       "(the run has \"cpu\")"),
            std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir / "run"));
  r = run_process({azr(), "train", fixture(), "--run-dir", (dir / "run").string(), "--set",
                   "run.gradient_allreduce=gloo"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("run.gradient_allreduce"), std::string::npos) << r.err;
  // A device the machine cannot use stops the run before its directory exists.
  r = run_process({azr(), "train", fixture(), "--run-dir", (dir / "run").string(), "--set", "model.device=cuda",
                   "--set", "run.steps=0"});
  if (r.exit_code != 0) {  // no usable GPU here, or a build without CUDA
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_NE(r.err.find("model.device: device 'cuda': "), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(dir / "run"));
  }

  r = run_process({azr(), "train"});
  EXPECT_EQ(r.exit_code, 2);
  r = run_process({azr(), "train", fixture(), "--run-dir", (dir / "run").string(), "--dist-timeout", "0"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--dist-timeout"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir / "run"));
  r = run_process({azr(), "train", "--resume", (dir / "nothing-here").string()});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("config.toml"), std::string::npos) << r.err;

  // Nor are the files a run writes, found without a run (a copy of a run's metrics, another
  // program's log): metrics.jsonl was removed and log.txt added to.
  for (const char* name : {"metrics.jsonl", "log.txt", "events.out.tfevents.1700000000.host.1.0"}) {
    const fs::path kept = dir / (std::string("kept-") + name);
    fs::create_directories(kept);
    std::ofstream(kept / name) << "{\"mine\": 1}\n";
    r = run_process({azr(), "train", fixture(), "--run-dir", kept.string(), "--set", "run.steps=0"});
    EXPECT_EQ(r.exit_code, 2) << name;
    EXPECT_NE(r.err.find(kept.string() + ": holds " + name + ", which a new run would"), std::string::npos) << r.err;
    // A log.txt is most often `tee`'s or a scheduler's: the message names that cause, for it alone.
    EXPECT_EQ(r.err.find("a shell's `tee` or a job scheduler's output file?") != std::string::npos,
              std::string(name) == "log.txt")
        << r.err;
    EXPECT_EQ(slurp(kept / name), "{\"mine\": 1}\n");
    EXPECT_EQ(std::distance(fs::directory_iterator(kept), fs::directory_iterator()), 1) << name;
  }

  // A run directory that already holds a run is never overwritten.
  const fs::path ref = reference_run();
  const std::string before = slurp(ref / "metrics.jsonl");
  r = run_process(train_args(ref.string()));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("already holds a run"), std::string::npos) << r.err;
  EXPECT_EQ(slurp(ref / "metrics.jsonl"), before);
}

// A copy of the reference run to break (the reference itself is shared by the tests).
fs::path copy_of_reference(const std::string& name) {
  const fs::path ref = reference_run();
  const fs::path run = scratch(name);
  fs::copy(ref, run, fs::copy_options::recursive);
  return run;
}

// An error that ends a run (here a disk failing the write-back of a checkpoint's weights) was said
// on the console alone, and a run left in the background had a log.txt that just stopped. It is
// the log's last line now, and no checkpoint of that step is left half-written.
TEST(TrainCli, AnErrorThatEndsTheRunIsTheLastLineOfItsLog) {
  const fs::path run = copy_of_reference("disk-fails");
  // A refused resume is not a run that ended: a finished run's log ended with the refusal.
  const std::string finished_log = slurp(run / "log.txt");
  auto refused = run_process({azr(), "train", "--resume", run.string(), "--set", "run.seed=5"});
  EXPECT_EQ(refused.exit_code, 2) << refused.err;
  EXPECT_EQ(slurp(run / "log.txt"), finished_log);
  const azr::testing::ChildEnvironment env({std::string("LD_PRELOAD=") + AZR_SYNC_LOG_LIB,
                                            "AZR_SYNC_FAIL=/checkpoints/.step-4.tmp/model.safetensors"});
  const auto r = run_process(resume_args(run.string(), kSteps + 1), "", env.envp());
  EXPECT_EQ(r.exit_code, 1) << r.err;
  const std::string failed = "model.safetensors: fsync failed: Input/output error";
  EXPECT_NE(r.err.find(failed), std::string::npos) << r.err;
  const std::string log = slurp(run / "log.txt");
  const size_t last = log.rfind('\n', log.size() - 2);
  const std::string last_line = log.substr(last == std::string::npos ? 0 : last + 1);
  EXPECT_NE(last_line.find("  stopped by an error: "), std::string::npos) << log;
  EXPECT_NE(last_line.find(failed), std::string::npos) << log;
  EXPECT_FALSE(fs::exists(run / "checkpoints/step-4"));
  EXPECT_FALSE(fs::exists(run / "checkpoints/.step-4.tmp"));
}

// A resume cuts metrics.jsonl back to its checkpoint by renaming a shorter copy over it; the run
// directory was not synced after, so a power cut could undo the cut under the next checkpoint.
// The calls in order (tests/sync_log.cpp): the copy synced, renamed, then the directory synced,
// before the next checkpoint is published.
TEST(TrainCli, AResumesCutOfTheMetricsIsOnDiskBeforeItsNextCheckpoint) {
  const fs::path run = copy_of_reference("metrics-cut-synced");
  const std::string log = (run.parent_path() / "metrics-cut-synced.calls").string();
  const azr::testing::ChildEnvironment env({std::string("LD_PRELOAD=") + AZR_SYNC_LOG_LIB, "AZR_SYNC_LOG=" + log});
  const auto r = run_process(resume_args(run.string(), kSteps + 1), "", env.envp());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<std::string> calls;
  std::istringstream in(slurp(log));
  for (std::string line; std::getline(in, line);) calls.push_back(line);
  const std::string metrics = (run / "metrics.jsonl").string();
  const auto cut = std::find_if(calls.begin(), calls.end(), [&](const std::string& c) {
    return c.rfind("rename " + metrics + ".tmp.", 0) == 0 && c.size() > metrics.size() &&
           c.compare(c.size() - metrics.size() - 1, std::string::npos, " " + metrics) == 0;
  });
  ASSERT_NE(cut, calls.end()) << "no rename onto " << metrics;
  EXPECT_NE(std::find(calls.begin(), cut, "fsync " + cut->substr(7, cut->find(' ', 7) - 7)), cut)
      << "the shorter copy was not synced before its rename";
  const auto published = std::find_if(cut, calls.end(), [](const std::string& c) {
    return c.rfind("rename ", 0) == 0 && c.find("/checkpoints/.step-4.tmp ") != std::string::npos;
  });
  ASSERT_NE(published, calls.end()) << "step 4's checkpoint was not published";
  EXPECT_NE(std::find(cut, published, "fsync " + run.string()), published)
      << "the run directory was not synced between the cut and the next checkpoint";
}

// The wrong one of the two commands, or the wrong directory, is said with the command that was
// meant: a run directory as the config ("cannot read config file: Is a directory"), a checkpoint
// as the run to resume, a run directory as a model.
TEST(TrainCli, TheWrongDirectoryIsSaidWithTheCommandMeant) {
  const fs::path ref = reference_run();
  auto as_config = run_process({azr(), "train", ref.string()});
  EXPECT_EQ(as_config.exit_code, 2);
  EXPECT_NE(as_config.err.find(ref.string() + " holds a run: to continue it, azr train --resume " + ref.string()),
            std::string::npos)
      << as_config.err;
  auto checkpoint = run_process({azr(), "train", "--resume", (ref / "checkpoints/step-3/").string()});  // a tab's /
  EXPECT_EQ(checkpoint.exit_code, 2);
  EXPECT_NE(checkpoint.err.find("is a checkpoint: --resume takes its run directory (" +
                                fs::absolute(ref).lexically_normal().string() + ")"),
            std::string::npos)
      << checkpoint.err;
  auto nothing = run_process({azr(), "train", "--resume", (ref / "no-such-run").string()});
  EXPECT_EQ(nothing.exit_code, 2);
  EXPECT_NE(nothing.err.find("--resume takes the directory of a run azr train started"), std::string::npos)
      << nothing.err;
  // The right run with a bad --set: the error is the --set's alone.
  auto bad_set = run_process({azr(), "train", "--resume", ref.string(), "--set", "algorithm.lr=abc"});
  EXPECT_EQ(bad_set.exit_code, 2);
  EXPECT_NE(bad_set.err.find("--set algorithm.lr=abc"), std::string::npos) << bad_set.err;
  EXPECT_EQ(bad_set.err.find("--resume takes"), std::string::npos) << bad_set.err;
  auto as_model = run_process({azr(), "eval", "--model", ref.string(), "--bench", "gsm8k", "--data",
                               env_or_fail("AZR_SHARED_DIR") + "/benchmarks"});
  EXPECT_EQ(as_model.exit_code, 2);
  EXPECT_NE(as_model.err.find("--model " + ref.string() + ": is a run directory of azr train, not a model; its "
                              "models are its checkpoints, " + (ref / "checkpoints").string() + "/step-N"),
            std::string::npos)
      << as_model.err;
}

// A run already at run.steps: a resume restores its checkpoint and runs no step, and said only
// "3 of 3 steps in 0s". It now says how to go on; its checkpoints and metrics are as they were.
TEST(TrainCli, ResumingAFinishedRunSaysHowToGoOn) {
  const fs::path run = copy_of_reference("finished");
  auto kept = [&] {
    std::vector<std::pair<std::string, std::string>> files;  // the checkpoints' files and metrics, with their bytes
    for (const auto& e : fs::recursive_directory_iterator(run / "checkpoints"))
      if (e.is_regular_file()) files.emplace_back(fs::relative(e.path(), run).string(), slurp(e.path()));
    files.emplace_back("metrics.jsonl", slurp(run / "metrics.jsonl"));
    std::sort(files.begin(), files.end());
    return files;
  };
  const auto before = kept();
  auto r = run_process(resume_args(run.string()));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const std::string hint = "the run had finished: its newest checkpoint is step 3 and run.steps is 3; to go on, raise "
                           "run.steps (azr train --resume " + run.string() + " --set run.steps=N)";
  EXPECT_NE(r.err.find(hint), std::string::npos) << r.err;
  EXPECT_NE(slurp(run / "log.txt").find(hint), std::string::npos);
  EXPECT_TRUE(kept() == before) << "a finished run's checkpoints or metrics changed";
}

// Every file the config names is checked before the run dir is made: a start that fails leaves
// nothing behind, so the rerun is not refused as "already holds a run" (each once left config.toml,
// log.txt, checkpoints/ and, for most, buffer.db and a step-0 checkpoint), and the message names
// the key to fix.
TEST(TrainCli, BadFilesInTheConfigStopBeforeTheRunDirExists) {
  const fs::path dir = scratch("bad-files");
  fs::create_directories(dir);
  const fs::path run = dir / "run";
  struct Case {
    std::vector<std::string> sets;
    std::string key;
  };
  const std::vector<Case> cases = {
      {{"model.preset=\"\"", "model.path=" + (dir / "no-model").string()}, "model.path: "},
      {{"model.tokenizer=" + (dir / "no-tokenizer.json").string()}, "model.tokenizer: "},
      {{"eval.benchmarks=[\"cruxeval_o\", \"nosuchbench\"]"}, "eval.benchmarks: "},
      {{"eval.data_dir=" + (dir / "no-data").string()}, "eval.data_dir: "},
      {{"eval.heldout_tasks=" + (dir / "no-heldout.jsonl").string()}, "eval.heldout_tasks: "},
      {{"eval.heldout_tasks=" + dir.string()}, "eval.heldout_tasks: "},
      {{"seeding.import_tasks=" + (dir / "no-import.jsonl").string()}, "seeding.import_tasks: "},
      {{"seeding.import_tasks=" + dir.string()}, "seeding.import_tasks: "},
      // Evaluation off: its keys are checked all the same.
      {{"eval.every=0", "eval.benchmarks=[\"nosuchbench\"]"}, "eval.benchmarks: "},
      {{"eval.every=0", "eval.data_dir=" + (dir / "no-data").string()}, "eval.data_dir: "},
      {{"eval.every=0", "eval.heldout_tasks=" + (dir / "no-heldout.jsonl").string()}, "eval.heldout_tasks: "},
      // Qwen's tokenizer (151,665 ids) on azr-tiny (263 rows): it failed at step 1's first prompt,
      // naming no file, exit 1.
      {{"model.tokenizer=" + env_or_fail("AZR_SHARED_DIR") + "/models/qwen-tokenizer"},
       "has 151665 token ids, past the model's 263 embedding rows"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args = train_args(run.string(), 1);
    for (const std::string& set : c.sets) args.insert(args.end(), {"--set", set});
    const auto r = run_process(args);
    EXPECT_EQ(r.exit_code, 2) << c.sets.back() << "\n" << r.err;
    EXPECT_NE(r.err.find(c.key), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("(set model.tokenizer)"), std::string::npos) << r.err;  // set, or no advice needed
    EXPECT_FALSE(fs::exists(run)) << c.sets.back();
    fs::remove_all(run);
  }
}

// A file the config names that is not there is said with where the key was set (FILE:LINE:COL,
// or the --set), and a relative path with the directory it was read from: "model.path:
// models/quickstrat/config.json: cannot open config file" named neither (a run started from
// another directory than the README's).
TEST(TrainCli, AMissingFileIsNamedWithItsKeysLineAndTheWorkingDirectory) {
  const fs::path dir = scratch("key-origin");
  fs::create_directories(dir);
  std::string text = slurp(fixture());
  const std::string preset = "preset = \"azr-tiny\"";
  ASSERT_NE(text.find(preset), std::string::npos);
  text.replace(text.find(preset), preset.size(), "path = \"no-such-model\"");
  const int line = 1 + int(std::count(text.begin(), text.begin() + long(text.find("path = ")), '\n'));
  const fs::path config = dir / "relative.toml";
  std::ofstream(config) << text;
  const fs::path run = dir / "run";
  auto r = run_process({azr(), "train", config.string(), "--run-dir", run.string()});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find(config.string() + ":" + std::to_string(line) + ":"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("model.path: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("(no-such-model is relative: it was read from the working directory, " +
                       fs::current_path().string() + ")"),
            std::string::npos)
      << r.err;
  EXPECT_FALSE(fs::exists(run));
  // Set on the command line: the --set is named.
  const std::string set = "seeding.import_tasks=" + (dir / "no-import.jsonl").string();
  r = run_process({azr(), "train", fixture(), "--run-dir", run.string(), "--set", set});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--set " + set + ": seeding.import_tasks: "), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("is relative"), std::string::npos) << r.err;  // an absolute path
}

// A run directory that cannot be made is said before the model loads, naming the path and the flag,
// where create_directories' own error came after it ("filesystem error: ... Not a directory").
TEST(TrainCli, ARunDirectoryThatCannotBeMadeIsNamed) {
  const fs::path dir = scratch("unmakeable-run-dir");
  fs::create_directories(dir);
  std::ofstream(dir / "a-file") << "not a directory\n";
  // A symlink to nothing passed as a path to make, and failed after the model loaded.
  fs::create_symlink(dir / "gone", dir / "dangling");
  std::vector<std::pair<fs::path, std::string>> cases = {
      {dir / "a-file", (dir / "a-file").string() + " is not a directory"},
      {dir / "a-file" / "run", (dir / "a-file").string() + " is not a directory"},
      {dir / "dangling", (dir / "dangling").string() + " is a symlink to " + (dir / "gone").string() +
                             ", which does not exist"},
  };
  if (geteuid() != 0) {  // root writes through permission bits
    fs::create_directories(dir / "read-only");
    fs::permissions(dir / "read-only", fs::perms::owner_read | fs::perms::owner_exec);
    cases.push_back({dir / "read-only" / "run", "cannot write in " + (dir / "read-only").string()});
  }
  for (const auto& [run, says] : cases) {
    const auto r = run_process(train_args(run.string(), 1));
    EXPECT_EQ(r.exit_code, 2) << run << "\n" << r.err;
    EXPECT_NE(r.err.find("--run-dir"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(says), std::string::npos) << r.err;
  }
  if (fs::exists(dir / "read-only")) fs::permissions(dir / "read-only", fs::perms::owner_all);
}

// An import file that is there but malformed is found only while seeding, after the run dir is
// made: the failed start takes away what it made (all of a run dir it created; in a directory that
// was there, only its own files), and the rerun is a plain start again.
TEST(TrainCli, AStartThatFailsBeforeItsFirstCheckpointLeavesNothingBehind) {
  const fs::path dir = scratch("failed-start");
  fs::create_directories(dir);
  const fs::path bad = dir / "bad_import.jsonl";
  std::ofstream(bad) << "{not json\n";
  const fs::path run = dir / "new" / "run";
  auto args = train_args(run.string(), 1);
  args.insert(args.end(), {"--set", "seeding.import_tasks=" + bad.string()});
  auto r = run_process(args);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("seeding.import_tasks: " + bad.string() + ": 1 invalid line(s); nothing imported:"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find("--skip-invalid"), std::string::npos) << r.err;  // azr buffer import's flag, not train's
  EXPECT_FALSE(fs::exists(dir / "new")) << "the directories it created are gone";
  // Named with a trailing slash: the run directory and the parent it made are gone too.
  args = train_args((dir / "shared" / "run").string() + "/", 1);
  args.insert(args.end(), {"--set", "seeding.import_tasks=" + bad.string()});
  EXPECT_EQ(run_process(args).exit_code, 2);
  EXPECT_FALSE(fs::exists(dir / "shared"));

  const fs::path mine = dir / "existing";
  fs::create_directories(mine);
  std::ofstream(mine / "notes.txt") << "the user's own file\n";
  args = train_args(mine.string(), 1);
  args.insert(args.end(), {"--set", "seeding.import_tasks=" + bad.string()});
  r = run_process(args);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(mine)) left.push_back(e.path().filename().string());
  EXPECT_EQ(left, std::vector<std::string>{"notes.txt"});
  EXPECT_EQ(slurp(mine / "notes.txt"), "the user's own file\n");
}

// An export keeps each task's step in its source run; imported into a new run the tasks are its
// seeds (step 0), or tasks exported at step 40 would be this run's "newest" for 40 steps.
TEST(TrainCli, ImportedTasksEnterAsSeedsWhateverStepTheyWereExportedAt) {
  const fs::path dir = scratch("import-steps");
  fs::create_directories(dir);
  std::ifstream in(env_or_fail("AZR_TESTS_DIR") + "/trainer/fixtures/seed_tasks.jsonl");
  std::ofstream out(dir / "late.jsonl");
  std::set<std::string> programs;
  int lines = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    json j = json::parse(line);
    j["step"] = 40;
    j["note"] = "a field of the user's, not the format's";
    programs.insert(j.at("program").get<std::string>());
    out << j.dump() << "\n";
    lines++;
  }
  out.close();
  ASSERT_FALSE(programs.empty());
  auto args = train_args((dir / "run").string(), 0);
  args.insert(args.end(), {"--set", "seeding.import_tasks=" + (dir / "late.jsonl").string()});
  auto r = run_process(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // The field the format does not have is ignored, and the log says so (step is the format's).
  EXPECT_NE(slurp(dir / "run" / "log.txt")
                .find("seeding: ignored field(s) of " + (dir / "late.jsonl").string() +
                      " that are not in the task format: \"note\" (" + std::to_string(lines) + " lines)\n"),
            std::string::npos)
      << slurp(dir / "run" / "log.txt");
  size_t imported = 0;
  std::istringstream tasks(buffer_tasks(dir / "run"));
  for (std::string line; std::getline(tasks, line);) {
    const json t = json::parse(line);
    if (!programs.count(t.at("program").get<std::string>())) continue;
    ++imported;
    EXPECT_EQ(t.at("step"), 0) << line;
  }
  EXPECT_GT(imported, 0u);
}

// Imported tasks were taken unchecked: an output the program does not give (no rollout could
// ever be graded right), a program importing a banned module (random). Each is now run as grading runs
// it, and a file with such tasks is refused whole, naming each line, before anything is left.
// The verdicts are known by hand: f(1) is 2, not 5; s[::-1] of 'ab' is 'ba'; n % 4 of 9 is 1,
// not 2 (the last of the induction pairs).
TEST(TrainCli, ImportedTasksThatTheirProgramsDoNotGiveAreRefused) {
  const fs::path dir = scratch("import-checked");
  fs::create_directories(dir);
  const fs::path file = dir / "tasks.jsonl";
  std::ofstream(file)
      << R"({"type": "deduction", "program": "def f(a):\n    return a + 1", "input": "1", "output": "5"})" << "\n"
      << R"({"type": "abduction", "program": "def f(s):\n    return s[::-1]", "input": "'ab'", "output": "'ba'"})"
      << "\n\n"
      << R"({"type": "deduction", "program": "import random\ndef f(a):\n    return a", "input": "1", "output": "1"})"
      << "\n"
      << R"({"type": "induction", "program": "def f(n):\n    return n % 4", "inputs": ["5", "9"], )"
      << R"("outputs": ["1", "2"], "message": "m"})" << "\n"
      // Past this run's memory limit: a deduction program grading never runs (a run with larger
      // limits may have written it), so not a problem.
      << R"({"type": "deduction", "program": "def f(a):\n    return [0] * 10**10", "input": "1", "output": "1"})"
      << "\n";
  auto args = train_args((dir / "run").string(), 0);
  args.insert(args.end(), {"--set", "seeding.import_tasks=" + file.string()});
  auto r = run_process(args);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("seeding.import_tasks: 3 of 5 task(s) are not what the run could use; nothing imported"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find(file.string() + ":1: the program does not give the task's output (wrong"), std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find(file.string() + ":2:"), std::string::npos) << r.err;  // 'ba' is right
  EXPECT_NE(r.err.find(file.string() + ":4: the program imports random (banned: random)"), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find(file.string() + ":5: the program does not give the task's outputs (wrong: hidden 1"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find(file.string() + ":6:"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir / "run"));
}

// A limit below a prompt's fixed text (the proposer's instructions, the solver's) is refused
// before any work: the run skipped every prompt, step after step, and finished with exit 0. The
// bound is the longest such text: at it the run starts, one token below it is refused.
TEST(TrainCli, APromptLimitBelowThePromptsFixedTextIsRefused) {
  const fs::path run = scratch("limit-below-text") / "run";
  auto args = train_args(run.string(), 1);
  args.insert(args.end(), {"--set", "algorithm.max_prompt_tokens=20", "--set", "eval.every=0"});
  auto r = run_process(args);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  const std::string said = "--set algorithm.max_prompt_tokens=20: algorithm.max_prompt_tokens: (20) is below the ";
  const size_t at = r.err.find(said);
  ASSERT_NE(at, std::string::npos) << r.err;
  EXPECT_NE(r.err.find(" prompt with no reference and an empty program, which every such prompt holds and more: "
                       "none could be generated for"),
            std::string::npos)
      << r.err;
  EXPECT_FALSE(fs::exists(run)) << "refused before the run directory";
  const int64_t bound = std::stoll(r.err.substr(at + said.size()));
  ASSERT_GT(bound, 20) << r.err;

  args = train_args(run.string(), 1);
  args.insert(args.end(), {"--set", "algorithm.max_prompt_tokens=" + std::to_string(bound - 1), "--set",
                           "eval.every=0"});
  r = run_process(args);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("is below the " + std::to_string(bound) + " tokens of the "), std::string::npos) << r.err;

  // At the bound the run starts. Its prompts hold references, programs and inputs too, so some
  // pass the limit: counted and logged, never generated for.
  args = train_args(run.string(), 1);
  args.insert(args.end(), {"--set", "algorithm.max_prompt_tokens=" + std::to_string(bound), "--set",
                           "eval.every=0"});
  r = run_process(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string log = slurp(run / "log.txt");
  const std::string limit = "algorithm.max_prompt_tokens (" + std::to_string(bound) + ")";
  EXPECT_NE(log.find("prompt(s) passed " + limit + ": not generated for, left out of the update"),
            std::string::npos)
      << log;
  const std::vector<json> m = metrics(run);
  ASSERT_EQ(m.size(), 1u);
  EXPECT_GT(m[0].at("skipped/prompt_too_long/proposer").get<double>() +
                m[0].at("skipped/prompt_too_long/solver").get<double>(),
            0)
      << m[0].dump();
}

// A learning rate that overflows the weights: every gradient after the first update is not finite,
// so no update is made, and the run stops after the third such step in a row with exit 1. Stopped
// between those steps and resumed, it stops at the same step (the count reset on resume: 2 steps
// later, with 2 more checkpoints of weights that could not learn).
TEST(TrainCli, TheNotFiniteStopCountsAcrossAResume) {
  auto run_to = [](const fs::path& run, int steps, bool resume) {
    std::vector<std::string> args = resume ? resume_args(run.string(), steps) : train_args(run.string(), steps);
    // No decay: lr * weight_decay >= 1 is refused before the run (it zeroes the weights).
    if (!resume)
      args.insert(args.end(),
                  {"--set", "algorithm.lr=1e30", "--set", "algorithm.weight_decay=0", "--set", "eval.every=0"});
    return run_process(args);
  };
  const fs::path whole = scratch("not-finite") / "whole", parts = scratch("not-finite") / "parts";
  const auto w = run_to(whole, 8, false);
  ASSERT_EQ(w.exit_code, 1) << w.err;
  EXPECT_NE(w.err.find("the gradient was not finite in 3 steps in a row"), std::string::npos) << w.err;
  const int64_t stop = last_metrics_step(whole);
  ASSERT_GE(stop, 3);
  ASSERT_LT(stop, 8);
  // Stopped one step before the stop, with two steps of the three counted.
  const auto first = run_to(parts, int(stop) - 1, false);
  ASSERT_EQ(first.exit_code, 0) << first.err;
  const auto rest = run_to(parts, 8, true);
  EXPECT_EQ(rest.exit_code, 1) << rest.err;
  EXPECT_NE(rest.err.find("the gradient was not finite in 3 steps in a row"), std::string::npos) << rest.err;
  EXPECT_EQ(last_metrics_step(parts), stop);
}

// A learning rate past a float (1e300) is inf in the optimizer, and inf * weight_decay 0 made
// every weight NaN at the first update; the run went on skipping steps and published checkpoints
// of NaN weights with exit 0, which every loader then refused. It is refused before the run.
// (Weights that are not finite for another reason are not saved: TransformerTest.)
TEST(TrainCli, ALearningRatePastAFloatIsRefused) {
  const fs::path run = scratch("nan-weights") / "run";
  std::vector<std::string> args = train_args(run.string(), 2);
  args.insert(args.end(),
              {"--set", "algorithm.lr=1e300", "--set", "algorithm.weight_decay=0", "--set", "eval.every=0"});
  const auto r = run_process(args);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--set algorithm.lr=1e300: must be in (0, 3.4028235677973366e+38), got 1e+300"),
            std::string::npos)
      << r.err;
  EXPECT_FALSE(fs::exists(run));
}

// --set takes one value, so a config named after it is the config, not a second override (it
// was: "give a CONFIG.toml"), and a --set after the config still applies.
TEST(TrainCli, AConfigAfterSetIsTheConfig) {
  const fs::path run = scratch("set-order") / "run";
  auto r = run_process({azr(), "train", "--set", "run.steps=0", fixture(), "--set", "eval.every=0", "--run-dir",
                        run.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string config = slurp(run / "config.toml");
  EXPECT_NE(config.find("\nsteps = 0\n"), std::string::npos) << config;
  EXPECT_NE(config.find("\nevery = 0\n"), std::string::npos) << config;
}

// The benchmark folder found through $AZR_BENCHMARKS (eval.data_dir unset) is written into the
// resolved config, absolute, so a resume from another directory evaluates the same data; a
// resume where that folder is gone (another machine) looks through the fallbacks again.
TEST(TrainCli, TheBenchmarkFolderFoundIsWrittenIntoTheResolvedConfig) {
  const fs::path run = scratch("data-dir") / "run";
  const std::string data = env_or_fail("AZR_SHARED_DIR") + "/benchmarks";
  ASSERT_EQ(setenv("AZR_BENCHMARKS", data.c_str(), 1), 0);
  auto r = run_process({azr(), "train", fixture(), "--set", "run.steps=0", "--run-dir", run.string()});
  unsetenv("AZR_BENCHMARKS");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string config = slurp(run / "config.toml");
  const std::string want = "data_dir = \"" + fs::absolute(data).lexically_normal().string() + "\"\n";
  EXPECT_NE(config.find(want), std::string::npos) << want << config;

  const fs::path elsewhere = scratch("data-dir-link") / "benchmarks";
  fs::create_directories(elsewhere.parent_path());
  fs::create_directory_symlink(data, elsewhere);
  const fs::path run2 = scratch("data-dir-2") / "run";
  ASSERT_EQ(setenv("AZR_BENCHMARKS", elsewhere.c_str(), 1), 0);
  r = run_process({azr(), "train", fixture(), "--set", "run.steps=0", "--run-dir", run2.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  fs::remove(elsewhere);
  ASSERT_EQ(setenv("AZR_BENCHMARKS", data.c_str(), 1), 0);
  r = run_process(resume_args(run2.string(), 0));
  unsetenv("AZR_BENCHMARKS");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(slurp(run2 / "log.txt").find("eval.data_dir " + elsewhere.string() + " is gone: the benchmarks are read "
                                         "from " + fs::absolute(data).lexically_normal().string()),
            std::string::npos)
      << slurp(run2 / "log.txt");
}

// A checkpoint is a whole model: a resume whose model.path is gone reads the model's config and
// tokenizer from it (it stopped with "model.path: ...: cannot open config file"), and the saved
// config still names model.path. With keep_last = 1 the checkpoint it read from is pruned at the
// next one; the checkpoints after it still get the tokenizer (the run holds its bytes).
TEST(TrainCli, AResumeWhoseModelPathIsGoneUsesTheCheckpoint) {
  const fs::path dir = scratch("model-gone");
  const fs::path model = dir / "model";
  fs::create_directories(model);
  for (const char* f : {"config.json", "tokenizer.json", "model.safetensors"})
    fs::copy_file(reference_run() / "checkpoints" / "step-1" / f, model / f);
  const fs::path run = dir / "run";
  auto args = train_args(run.string(), 1);
  args.insert(args.end(), {"--set", "model.preset=", "--set", "model.path=" + model.string(), "--set", "eval.every=0",
                           "--set", "checkpoint.keep_last=1"});
  auto r = run_process(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  fs::remove_all(model);
  r = run_process(resume_args(run.string(), 3));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(slurp(run / "log.txt").find("model.path " + model.string() + " is gone: the model's config and tokenizer "
                                        "are the checkpoint's (" + (run / "checkpoints" / "step-1").string() + ")"),
            std::string::npos)
      << slurp(run / "log.txt");
  EXPECT_EQ(metrics(run).size(), 3u);
  EXPECT_NE(slurp(run / "config.toml").find("path = \"" + model.string() + "\"\n"), std::string::npos);
  EXPECT_FALSE(fs::exists(run / "checkpoints" / "step-1"));
  EXPECT_EQ(slurp(run / "checkpoints" / "step-3" / "tokenizer.json"),
            slurp(reference_run() / "checkpoints" / "step-1" / "tokenizer.json"));
}

// A buffer capped below the seeding target would seed for all of seeding.max_rounds: refused,
// naming the key where it was set, before anything is written; 0 is no cap.
TEST(TrainCli, ACapacityBelowTheSeedingTargetIsRefused) {
  const fs::path run = scratch("capacity") / "run";
  auto r = run_process({azr(), "train", fixture(), "--run-dir", run.string(), "--set", "buffer.capacity_per_type=3"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("buffer.capacity_per_type: (3) is below seeding.target (4): seeding could never reach its "
                       "target"),
            std::string::npos)
      << r.err;
  EXPECT_FALSE(fs::exists(run));
}

// A bad newest buffer snapshot stops the resume before it replaces the live buffer.db (it once
// deleted it and copied the garbage in), and config.toml is not rewritten.
TEST(TrainCli, ResumeWithABadBufferSnapshotKeepsTheLiveBuffer) {
  const fs::path run = copy_of_reference("bad-snapshot");
  const std::string buffer = slurp(run / "buffer.db"), config = slurp(run / "config.toml");
  ASSERT_FALSE(buffer.empty());
  // The checkpoint's own check (its checksums) off, to reach the buffer's: a checkpoint from before
  // the manifests, or one damaged before its manifest was written.
  azr::testing::as_written_before_manifests(run / ("checkpoints/step-" + std::to_string(kSteps)));
  // Not SQLite; an empty file (SQLite would take it for a new, empty database).
  for (const std::string& garbage : {std::string("garbage\n"), std::string()}) {
    std::ofstream(run / ("checkpoints/step-" + std::to_string(kSteps)) / "buffer.db", std::ios::trunc) << garbage;
    const auto r = run_process(resume_args(run.string(), kSteps + 1));
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.err.find("step-" + std::to_string(kSteps) + "/buffer.db"), std::string::npos) << r.err;
    EXPECT_TRUE(slurp(run / "buffer.db") == buffer) << "the live buffer.db changed";
    EXPECT_EQ(slurp(run / "config.toml"), config);
    for (const auto& e : fs::directory_iterator(run))
      EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << e.path();
  }
}

// A snapshot with a damaged page the task counts never read (the rollouts table's root, zeroed)
// opened and counted fine, so the resume went on and copied the damage into every later
// checkpoint. SQLite's quick_check on the copy finds it: refused, the live buffer kept.
TEST(TrainCli, ResumeWithADamagedSnapshotPageKeepsTheLiveBuffer) {
  const fs::path run = copy_of_reference("damaged-snapshot");
  const fs::path snapshot = run / ("checkpoints/step-" + std::to_string(kSteps)) / "buffer.db";
  azr::testing::as_written_before_manifests(snapshot.parent_path());  // to reach the buffer's own check
  const std::string buffer = slurp(run / "buffer.db");
  // The page: from sqlite_master, read by CPython's sqlite3 (an independent reader).
  const auto page = azr::testing::run_process(
      {env_or_fail("AZR_PYTHON"), "-c",
       "import sqlite3, sys\nc = sqlite3.connect(sys.argv[1])\n"
       "print(c.execute(\"PRAGMA page_size\").fetchone()[0], "
       "c.execute(\"SELECT rootpage FROM sqlite_master WHERE name = 'rollouts'\").fetchone()[0])",
       snapshot.string()});
  ASSERT_EQ(page.exit_code, 0) << page.err;
  int64_t page_size = 0, root = 0;
  std::istringstream(page.out) >> page_size >> root;
  ASSERT_GT(root, 1);
  {
    std::fstream f(snapshot, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp((root - 1) * page_size);
    f.write(std::string(size_t(page_size), '\0').data(), page_size);
    ASSERT_TRUE(f.good());
  }
  const auto r = run_process(resume_args(run.string(), kSteps + 1));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find(snapshot.string() + ": not a usable buffer snapshot"), std::string::npos) << r.err;
  EXPECT_TRUE(slurp(run / "buffer.db") == buffer) << "the live buffer.db changed";
  EXPECT_FALSE(fs::exists(run / ("checkpoints/step-" + std::to_string(kSteps + 1))));
}

// A weight file changed after it was written (one byte, where the safetensors reader cannot see it:
// the file still loads) stops the resume before anything reads it, with the file named.
TEST(TrainCli, ResumeOfADamagedCheckpointStopsAndNamesTheFile) {
  const fs::path run = copy_of_reference("damaged-weights");
  const fs::path model = run / ("checkpoints/step-" + std::to_string(kSteps)) / "model.safetensors";
  const std::string config = slurp(run / "config.toml"), buffer = slurp(run / "buffer.db");
  {
    std::fstream f(model, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-1, std::ios::end);
    const char last = char(f.get());
    f.seekp(-1, std::ios::end);
    f.put(char(last ^ 0x01));  // the low bit of the last weight's bf16 mantissa
    ASSERT_TRUE(f.good());
  }
  auto r = run_process(resume_args(run.string(), kSteps + 1));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("resume: " + model.string() + ": does not match its checksum"), std::string::npos) << r.err;
  EXPECT_EQ(slurp(run / "config.toml"), config);
  EXPECT_TRUE(slurp(run / "buffer.db") == buffer) << "the live buffer.db changed";
  EXPECT_FALSE(fs::exists(run / ("checkpoints/step-" + std::to_string(kSteps + 1))));
  // Its manifest deleted: refused, where it resumed unchecked and wrote the damage into the next
  // checkpoint under a new manifest.
  fs::remove(model.parent_path() / "checksums.xxh128");
  r = run_process(resume_args(run.string(), kSteps + 1));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("checksums.xxh128: missing, though"), std::string::npos) << r.err;
  // A checkpoint from before the manifests resumes, unchecked, and says so.
  azr::testing::as_written_before_manifests(model.parent_path());
  r = run_process(resume_args(run.string(), kSteps + 1));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("written without checksums"), std::string::npos) << r.err;
}

// Failed resumes leave config.toml as it was (they once rewrote run.steps first): a truncated
// model, a missing optimizer state, a broken trainer_state.json.
TEST(TrainCli, FailedResumeLeavesTheConfigUnchanged) {
  const std::string newest = "checkpoints/step-" + std::to_string(kSteps);
  const std::vector<std::pair<std::string, std::function<void(const fs::path&)>>> breaks = {
      {"truncated model", [&](const fs::path& run) { fs::resize_file(run / newest / "model.safetensors", 1000); }},
      {"no optimizer", [&](const fs::path& run) { fs::remove(run / newest / "optimizer.safetensors"); }},
      {"bad state", [&](const fs::path& run) { std::ofstream(run / newest / "trainer_state.json") << "{\n"; }},
  };
  for (const auto& [what, do_break] : breaks) {
    const fs::path run = copy_of_reference("failed-resume");
    const std::string config = slurp(run / "config.toml"), buffer = slurp(run / "buffer.db");
    azr::testing::as_written_before_manifests(run / newest);  // to reach the loaders' own checks
    do_break(run);
    const auto r = run_process(resume_args(run.string(), kSteps + 5));
    EXPECT_NE(r.exit_code, 0) << what;
    EXPECT_EQ(slurp(run / "config.toml"), config) << what;
    EXPECT_TRUE(slurp(run / "buffer.db") == buffer) << what;
  }
}

// Keys a resume cannot take from the command line: run.run_dir (a resume runs where --resume
// says; the --set was ignored and saved), and a model.path that is not there (a typo: it fell back
// to the checkpoint, as for a saved model.path gone since the run began, and was saved). Refused,
// naming the --set, with config.toml as it was.
TEST(TrainCli, AResumeRefusesARunDirOrAMissingModelPathSetForIt) {
  const fs::path run = copy_of_reference("resume-sets");
  const std::string config = slurp(run / "config.toml");
  std::vector<std::string> args = resume_args(run.string(), kSteps + 1);
  args.insert(args.end(), {"--set", "run.run_dir=" + (run.parent_path() / "elsewhere").string()});
  auto dir = run_process(args);
  EXPECT_EQ(dir.exit_code, 2) << dir.err;
  EXPECT_NE(dir.err.find("--set run.run_dir=" + (run.parent_path() / "elsewhere").string() +
                         ": run.run_dir: a resume runs in the directory --resume names; drop this --set"),
            std::string::npos)
      << dir.err;
  args = resume_args(run.string(), kSteps + 1);
  args.insert(args.end(), {"--set", "model.preset=\"\"", "--set", "model.path=" + (run / "no-such-model").string()});
  auto model = run_process(args);
  EXPECT_EQ(model.exit_code, 2) << model.err;
  EXPECT_NE(model.err.find("--set model.path=" + (run / "no-such-model").string() + ": model.path: "),
            std::string::npos)
      << model.err;
  EXPECT_EQ(slurp(run / "config.toml"), config);
  EXPECT_FALSE(fs::exists(run / "checkpoints/step-4"));
}

// A resume trains the checkpoint's weights: [model] naming another architecture is refused (exit
// 2, naming the key and the field), where it was taken, logged as the run's model (azr-25m with
// azr-tiny's parameter count) and saved into config.toml.
TEST(TrainCli, AResumeNamingAnotherModelIsRefused) {
  const fs::path run = copy_of_reference("other-model");
  const std::string config = slurp(run / "config.toml");
  auto args = resume_args(run.string(), kSteps + 1);
  args.insert(args.end(), {"--set", "model.preset=azr-25m"});
  const auto r = run_process(args);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("model.preset: azr-25m: hidden_size is 512, the checkpoint's 128"), std::string::npos) << r.err;
  EXPECT_EQ(slurp(run / "config.toml"), config);
  EXPECT_EQ(last_metrics_step(run), kSteps);
  // A checkpoint's config.json changed on disk is damage, named by the checksums, not a model change.
  const fs::path saved = run / ("checkpoints/step-" + std::to_string(kSteps)) / "config.json";
  std::string text = slurp(saved);
  const size_t at = text.find("\"hidden_size\": 128");
  ASSERT_NE(at, std::string::npos) << text;
  text.replace(at, 19, "\"hidden_size\": 256");
  std::ofstream(saved, std::ios::trunc) << text;
  const auto damaged = run_process(resume_args(run.string(), kSteps + 1));
  EXPECT_EQ(damaged.exit_code, 2) << damaged.err;
  EXPECT_NE(damaged.err.find("config.json"), std::string::npos) << damaged.err;
  EXPECT_EQ(damaged.err.find("hidden_size is"), std::string::npos) << damaged.err;
}

// A resume puts the checkpoint's buffer snapshot in place; the buffer it replaces is kept beside
// it, and the log says so: tasks imported into RUN/buffer.db after the checkpoint (as `azr buffer
// import` allows) were dropped without a word.
TEST(TrainCli, AResumeKeepsTheBufferItReplaces) {
  const fs::path run = copy_of_reference("kept-buffer");
  // Nothing changed since the checkpoint: nothing kept, nothing said.
  auto plain = run_process(resume_args(run.string(), kSteps));
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_FALSE(fs::exists(run / "buffer.db.before-resume"));
  EXPECT_EQ(slurp(run / "log.txt").find("is kept as"), std::string::npos);
  const fs::path extra = run.parent_path() / "kept-buffer-extra.jsonl";
  std::ofstream(extra) << "{\"type\": \"deduction\", \"program\": \"def f(x):\\n    return x * 7 - 5\", "
                          "\"input\": \"4\", \"output\": \"23\"}\n";
  auto r = run_process({azr(), "buffer", "import", (run / "buffer.db").string(), extra.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string with_import = buffer_tasks(run);
  ASSERT_NE(with_import.find("x * 7 - 5"), std::string::npos);

  r = run_process(resume_args(run.string(), kSteps));  // no step to run: the restore alone
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const fs::path kept = run / "buffer.db.before-resume";
  EXPECT_NE(slurp(run / "log.txt").find("buffer.db is checkpoint step-3's snapshot"), std::string::npos);
  EXPECT_NE(slurp(run / "log.txt").find("is kept as " + kept.string()), std::string::npos);
  EXPECT_EQ(buffer_tasks(run), buffer_tasks(reference_run()));  // the snapshot: the run's own tasks
  auto k = run_process({azr(), "buffer", "export", kept.string()});
  ASSERT_EQ(k.exit_code, 0) << k.err;
  EXPECT_EQ(k.out, with_import);
}

// A resume elsewhere whose held-out tasks are not there (azr bootstrap writes them beside the
// model, and a resume works where model.path is gone) says how to go on: a copy, or none.
TEST(TrainCli, AResumeWithoutItsHeldOutTasksSaysHowToGoOn) {
  const fs::path run = copy_of_reference("heldout-gone");
  auto args = resume_args(run.string(), kSteps);
  args.insert(args.end(), {"--set", "eval.heldout_tasks=" + (run / "gone" / "heldout.jsonl").string()});
  const auto r = run_process(args);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("eval.heldout_tasks: " + (run / "gone" / "heldout.jsonl").string() + ": no such file"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("--set eval.heldout_tasks= turns the held-out evaluation off"), std::string::npos) << r.err;
  // Another eval key's error is said without it.
  args.insert(args.end(), {"--set", "eval.benchmarks=[\"nosuchbench\"]"});
  const auto other = run_process(args);
  EXPECT_EQ(other.exit_code, 2) << other.err;
  EXPECT_NE(other.err.find("eval.benchmarks"), std::string::npos) << other.err;
  EXPECT_EQ(other.err.find("held-out evaluation off"), std::string::npos) << other.err;
  // An empty file (azr bootstrap writes one with bootstrap.heldout_per_type = 0) is no tasks, and
  // said so; it was refused, so a run given a bootstrap's own file could not start.
  const fs::path empty = run / "empty-heldout.jsonl";
  std::ofstream(empty).flush();
  auto none = resume_args(run.string(), kSteps);
  none.insert(none.end(), {"--set", "eval.heldout_tasks=" + empty.string()});
  const auto resumed = run_process(none);
  EXPECT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_NE(slurp(run / "log.txt").find("eval: no held-out accuracy (eval.heldout_tasks: " + empty.string() +
                                        " holds no tasks)"),
            std::string::npos)
      << slurp(run / "log.txt");
}

// --resume on a run whose checkpoints are gone refuses to start it over (it once seeded again,
// replacing 100+ buffer tasks and every metrics line): exit 2, naming the checkpoints, nothing
// changed. (A run killed before its first checkpoint still starts over: KillNineAtAnyMoment.)
TEST(TrainCli, ResumeWithoutCheckpointsRefusesToStartOver) {
  const fs::path run = copy_of_reference("no-checkpoints");
  for (const auto& e : fs::directory_iterator(run / "checkpoints")) fs::remove_all(e.path());
  std::map<std::string, std::string> before;
  for (const char* f : {"buffer.db", "metrics.jsonl", "config.toml", "log.txt"}) before[f] = slurp(run / f);
  ASSERT_FALSE(before["metrics.jsonl"].empty());
  auto r = run_process({azr(), "train", "--resume", run.string(), "--set", "run.steps=0", "--set", "eval.every=0"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find((run / "checkpoints").string() + ": no complete checkpoint"), std::string::npos) << r.err;
  for (const auto& [f, bytes] : before) EXPECT_TRUE(slurp(run / f) == bytes) << f << " changed";
  // metrics.jsonl emptied, log.txt still records the checkpoints written: refused all the same.
  std::ofstream(run / "metrics.jsonl", std::ios::trunc).flush();
  r = run_process({azr(), "train", "--resume", run.string(), "--set", "run.steps=0", "--set", "eval.every=0"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(slurp(run / "buffer.db") == before["buffer.db"]);
}

}  // namespace
