// `azr bootstrap` through the real binary, small: generated tasks, a few warm-start steps, the
// saved model loads in the other commands and in the trainer, the held-out set is disjoint
// from nothing it should not be, and bad input exits 2 without writing.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>

#include "tests/test_support.h"

namespace {

namespace fs = std::filesystem;
using azr::testing::env_or_fail;
using azr::testing::run_process;
using nlohmann::json;

std::string azr() { return env_or_fail("AZR_BIN"); }

const azr::testing::ProcessScratch& kScratch = azr::testing::register_process_scratch("azr-bootstrap-test");

fs::path scratch(const std::string& name) {
  fs::path p = kScratch.dir() / name;
  fs::remove_all(p);
  fs::create_directories(p.parent_path());
  return p;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<std::string> small(const fs::path& out) {
  return {azr(),
          "bootstrap",
          env_or_fail("AZR_TESTS_DIR") + "/trainer/fixtures/tiny_train.toml",
          "--output",
          out.string(),
          "--set",
          "bootstrap.tasks_per_type=8",
          "--set",
          "bootstrap.heldout_per_type=4",
          "--set",
          "bootstrap.steps=3",
          "--set",
          "bootstrap.batch_size=4",
          "--set",
          "eval.max_tokens=16"};
}

TEST(BootstrapCli, WritesAModelItsHeldOutSetAndAReport) {
  const fs::path out = scratch("boot");
  std::vector<std::string> args = small(out);
  args.insert(args.end(), {"--set", "algorithm.prompt_style=compact", "--set",
                            "eval.data_dir=" + env_or_fail("AZR_SHARED_DIR") + "/benchmarks"});
  auto r = run_process(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* f : {"config.json", "model.safetensors", "tokenizer.json", "heldout.jsonl", "bootstrap.json"})
    EXPECT_TRUE(fs::exists(out / f)) << f;
  const json rep = json::parse(slurp(out / "bootstrap.json"));
  EXPECT_EQ(rep["warm_start"]["steps"], 3);
  EXPECT_EQ(rep["warm_start"]["loss"].size(), 3u);
  // 8 tasks per type, each a proposer and a solver transcript.
  EXPECT_EQ(rep["transcripts"], 48);
  EXPECT_EQ(rep["prompt_style"], "compact");
  // CRUXEval-O/I (the default eval.benchmarks) on the fixture's eval.limit = 2 items, before and after.
  EXPECT_EQ(rep["benchmarks"]["limit"], 2);
  for (const char* when : {"before", "after"}) {
    ASSERT_EQ(rep["benchmarks"][when].size(), 2u) << rep["benchmarks"].dump();
    for (const char* b : {"cruxeval_o", "cruxeval_i"}) {
      const double p = rep["benchmarks"][when][b];
      EXPECT_TRUE(p == 0.0 || p == 0.5 || p == 1.0) << when << " " << b << " " << p;  // k of 2 items
    }
  }
  for (const char* t : {"deduction", "abduction", "induction"}) {
    EXPECT_EQ(rep["tasks"][t]["train"], 8) << t;
    EXPECT_EQ(rep["tasks"][t]["heldout"], 4) << t;
    for (const char* when : {"before", "after"}) {
      const double a = rep["heldout_accuracy"][when][t];
      EXPECT_GE(a, 0.0);
      EXPECT_LE(a, 1.0);
    }
  }
  // The held-out tasks import as a buffer (valid task lines) and are all distinct.
  r = run_process({azr(), "buffer", "import", (out / "buffer.db").string(), (out / "heldout.jsonl").string(), "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(json::parse(r.out)["imported"], 12) << r.out;
  // The model is a Hugging Face directory the other commands load.
  r = run_process({azr(), "generate", "--model", out.string(), "--prompt", "def f(", "--max-tokens", "4"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  // ... and self-play starts from it.
  const fs::path run = scratch("train-from-boot");
  r = run_process({azr(), "train", env_or_fail("AZR_TESTS_DIR") + "/trainer/fixtures/tiny_train.toml", "--run-dir",
                   run.string(), "--set", "model.preset=", "--set", "model.path=" + out.string(), "--set", "run.steps=1",
                   "--set", "eval.every=1", "--set", "eval.benchmarks=", "--set",
                   "eval.heldout_tasks=" + (out / "heldout.jsonl").string(), "--set", "eval.max_tokens=16"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(slurp(run / "metrics.jsonl").find("heldout/accuracy/deduction"), std::string::npos);
  // A tokenizer changed under model.path since the checkpoint: the resume is refused, where it
  // trained the weights on other token ids and copied the new file into the next checkpoint.
  const std::string tokenizer = slurp(out / "tokenizer.json");
  std::ofstream(out / "tokenizer.json", std::ios::trunc) << tokenizer << " ";
  auto resumed = run_process({azr(), "train", "--resume", run.string(), "--set", "run.steps=2"});
  EXPECT_EQ(resumed.exit_code, 2) << resumed.err;
  EXPECT_NE(resumed.err.find("model.path: " + (out / "tokenizer.json").string() +
                             " differs from the checkpoint's copy"),
            std::string::npos)
      << resumed.err;
  EXPECT_FALSE(fs::exists(run / "checkpoints" / "step-2"));
  std::ofstream(out / "tokenizer.json", std::ios::trunc) << tokenizer;
  // The fixture keeps the paper wording, which this model never saw: the log says so.
  EXPECT_NE(slurp(run / "log.txt").find("learned prompt_style \"compact\", but algorithm.prompt_style is \"paper\""),
            std::string::npos)
      << slurp(run / "log.txt");
}

// The shipped quickstart: configs/quickstart.toml with its bootstrapped models/quickstart. The
// point of that model is that self-play has valid tasks from the start; a new random model writes
// none (tests/trainer/step_test.cpp needs scripted responses for that reason). Two steps, run
// from the repository root as scripts/run.sh does.
TEST(BootstrapCli, ShippedQuickstartModelProposesValidTasks) {
  const fs::path repo = fs::path(env_or_fail("AZR_TESTS_DIR")).parent_path();
  const fs::path run = scratch("quickstart");
  auto r = run_process({"/bin/sh", "-c",
                        "cd '" + repo.string() + "' && '" + azr() + "' train configs/quickstart.toml --run-dir '" +
                            run.string() +
                            "' --set run.steps=2 --set eval.every=0 --set checkpoint.every=0 --set logging.console=off"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  double valid = 0;
  int steps = 0;
  std::istringstream lines(slurp(run / "metrics.jsonl"));
  for (std::string line; std::getline(lines, line);) {
    const json m = json::parse(line);
    if (!m.contains("proposer/valid_rate/deduction")) continue;
    steps++;
    for (const char* t : {"deduction", "abduction", "induction"}) valid += m["proposer/valid_rate/" + std::string(t)].get<double>();
  }
  EXPECT_EQ(steps, 2);
  EXPECT_GT(valid / (3.0 * std::max(steps, 1)), 0.1) << slurp(run / "metrics.jsonl");
  // The model and the config agree on the wording, so no warning.
  EXPECT_EQ(slurp(run / "log.txt").find("prompt_style"), std::string::npos) << slurp(run / "log.txt");
}

// A report that cannot be written (here a directory in its place; a full disk wrote 0 bytes and
// exited 0) is an error naming it, and the weights, which mark a finished bootstrap, are not
// written: the rerun is not refused, where a kill part-way once left a directory every rerun
// refused that held no loadable model.
TEST(BootstrapCli, AFailedWriteIsAnErrorAndLeavesNoModel) {
  const fs::path out = scratch("unwritable");
  fs::create_directories(out / "bootstrap.json");
  const auto r = run_process(small(out));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find((out / "bootstrap.json").string() + ": write failed"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(out / "model.safetensors"));
}

TEST(BootstrapCli, BadInputExitsTwoAndWritesNothing) {
  const fs::path out = scratch("bad");
  std::vector<std::string> args = small(out);
  args.push_back("--set");
  args.push_back("bootstrap.difficulty=extreme");
  auto r = run_process(args);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("bootstrap.difficulty"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(out));
  // A benchmark data dir that is not there: exit 2 before any generation, nothing written.
  args = small(out);
  args.insert(args.end(), {"--set", "eval.data_dir=/nonexistent/benchmarks"});
  r = run_process(args);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("/nonexistent/benchmarks"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(out));
  // An output that already holds a model is never overwritten.
  fs::create_directories(out);
  std::ofstream(out / "model.safetensors") << "x";
  r = run_process(small(out));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("already holds a model"), std::string::npos) << r.err;
  EXPECT_EQ(slurp(out / "model.safetensors"), "x");
  EXPECT_EQ(r.err.find("no [bootstrap] section"), std::string::npos) << "its --set bootstrap.* say what runs";
  // A config without [bootstrap] and no --set of one (a training config given by mistake) runs on
  // the defaults: said first, with the output and the size of the work they mean.
  const std::string train_config = env_or_fail("AZR_TESTS_DIR") + "/trainer/fixtures/tiny_train.toml";
  r = run_process({azr(), "bootstrap", train_config, "--output", out.string()});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("azr bootstrap: warning: " + train_config + " has no [bootstrap] section; its keys take "
                       "their defaults (256 tasks per type, 300 warm-start steps; the model goes to " + out.string() +
                       ")"),
            std::string::npos)
      << r.err;
  // So does one holding a sharded model (save_pretrained shards past 4 GiB): its index marks it.
  fs::remove(out / "model.safetensors");
  std::ofstream(out / "model.safetensors.index.json") << "{}";
  r = run_process(small(out));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("already holds a model"), std::string::npos) << r.err;

  // Nor is a directory holding a file the bootstrap writes that no stopped bootstrap left: a
  // user's config.json was written over. Files it does not write (a README) do not matter.
  const fs::path theirs = scratch("theirs");
  fs::create_directories(theirs);
  std::ofstream(theirs / "config.json") << "mine";
  std::ofstream(theirs / "README.md") << "mine";
  r = run_process(small(theirs));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find(theirs.string() + ": holds config.json, which the bootstrap would write over"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(slurp(theirs / "config.json"), "mine");
  fs::remove(theirs / "config.json");
  std::ofstream(theirs / "tokenizer.json") << "mine";
  r = run_process(small(theirs));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find(theirs.string() + ": holds tokenizer.json, which the bootstrap would write over"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(slurp(theirs / "tokenizer.json"), "mine");
  // What a bootstrap stopped part-way left is not refused (the rerun writes over it): here the run
  // goes on to the next check, a benchmark directory that is not there.
  fs::create_directories(theirs / ".model.tmp");
  std::ofstream(theirs / "heldout.jsonl") << "";
  std::ofstream(theirs / "bootstrap.json") << "{}";
  std::ofstream(theirs / "config.json") << "{}";
  args = small(theirs);
  args.insert(args.end(), {"--set", "eval.data_dir=/nonexistent/benchmarks"});
  r = run_process(args);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err.find("would write over"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("/nonexistent/benchmarks"), std::string::npos) << r.err;

  // A learning rate past a float: the weights were NaN from the first step, found at the save.
  const fs::path lr_out = scratch("lr-out");
  args = small(lr_out);
  args.insert(args.end(), {"--set", "bootstrap.lr=1e300"});
  r = run_process(args);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--set bootstrap.lr=1e300: must be in (0, 3.4028235677973366e+38), got 1e+300"),
            std::string::npos)
      << r.err;
  EXPECT_FALSE(fs::exists(lr_out));
  // A directory as the held-out task file ran with no held-out tasks, its accuracy 0.000 before
  // and after; bad lines were said one, with nlohmann's tag. (An empty file is read as no tasks,
  // and said: azr bootstrap writes one with bootstrap.heldout_per_type = 0.)
  const fs::path tasks_dir = scratch("heldout-files");
  fs::create_directories(tasks_dir);
  const std::string bad = (tasks_dir / "bad.jsonl").string();
  std::ofstream(bad) << "{\"type\":\"deduction\",\"program\":\"def f(x):\\n    return x\",\"input\":\"1\","
                        "\"output\":\"1\"}\nhello\n{}\n";
  for (const auto& [file, said] : std::vector<std::pair<std::string, std::string>>{
           {tasks_dir.string(), tasks_dir.string() + ": a directory, not a file"},
           {bad, bad + ": 2 invalid line(s):\n  " + bad + ":2: not valid JSON (parse error at line 1, column 1"}}) {
    args = small(scratch("heldout-out"));
    args.insert(args.end(), {"--set", "bootstrap.heldout_from=" + file});
    r = run_process(args);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_NE(r.err.find("bootstrap.heldout_from: " + said), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("json.exception"), std::string::npos) << r.err;
  }
  EXPECT_NE(r.err.find(bad + ":3: field 'type' is missing"), std::string::npos) << r.err;

  // An empty file is no tasks (azr bootstrap writes one with bootstrap.heldout_per_type = 0): the
  // bootstrap runs, and says its held-out accuracies are over none.
  const std::string empty = (tasks_dir / "empty.jsonl").string();
  std::ofstream(empty) << "";
  const fs::path empty_out = scratch("heldout-empty-out");
  args = small(empty_out);
  args.insert(args.end(), {"--set", "bootstrap.heldout_from=" + empty, "--set", "bootstrap.steps=0"});
  r = run_process(args);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("bootstrap: bootstrap.heldout_from " + empty +
                       " holds no tasks: the held-out accuracies are over none (0.000)"),
            std::string::npos)
      << r.err;
  EXPECT_TRUE(fs::exists(empty_out / "bootstrap.json"));

  // An output path that is a file: said before any work, where it failed at the end, after
  // generation, both evaluations and the warm start, with create_directories' own error, exit 1.
  const fs::path file = scratch("a-file");
  std::ofstream(file) << "x";
  r = run_process(small(file));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("bootstrap output " + file.string() + " (--output, bootstrap.output): " + file.string() +
                       " is not a directory"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find("heldout"), std::string::npos) << "work ran first: " << r.err;
  EXPECT_EQ(slurp(file), "x");
  // More tasks than the generator counts (int): refused by the config, where 2^31 made none.
  args = small(scratch("many"));
  args.insert(args.end(), {"--set", "bootstrap.tasks_per_type=2147483648"});
  r = run_process(args);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("bootstrap.tasks_per_type=2147483648: must be in [1, 10000000]"), std::string::npos) << r.err;
}

}  // namespace
