// `azr task validate|grade|prompt` through the real binary and the real sandbox, against a
// hand-written corpus of raw model responses whose outcomes were derived by hand
// (tests/task/fixtures/pipeline/*.jsonl: each line is the input plus "name" and "expect").
#include <gtest/gtest.h>
#include <filesystem>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "tests/test_support.h"

#ifndef AZR_TASK_FIXTURES
#error "AZR_TASK_FIXTURES must name tests/task/fixtures/pipeline"
#endif

namespace {

using azr::testing::json_lines;
using azr::testing::run_process;
using nlohmann::json;

std::string azr() { return azr::testing::env_or_fail("AZR_BIN"); }

std::vector<json> read_fixture(const std::string& name) {
  std::ifstream in(std::string(AZR_TASK_FIXTURES) + "/" + name);
  EXPECT_TRUE(in) << name;
  std::vector<json> v;
  std::string l;
  while (std::getline(in, l))
    if (!l.empty()) v.push_back(json::parse(l));
  return v;
}

int counter = 0;
std::string temp_file(const std::string& text) {
  std::string path = ::testing::TempDir() + "azr_task_" + std::to_string(getpid()) + "_" + std::to_string(counter++) + ".jsonl";
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

// Fixture lines of one type, minus "name"/"expect", with the line index as "id".
std::string input_for(const std::vector<json>& cases, const std::string& type, std::vector<size_t>& picked) {
  std::string text;
  for (size_t i = 0; i < cases.size(); ++i) {
    const json& c = cases[i];
    std::string t = c.contains("type") ? c["type"].get<std::string>() : c["task"]["type"].get<std::string>();
    if (t != type) continue;
    json in = c;
    in.erase("name");
    in.erase("expect");
    in.erase("type");
    in["id"] = i;
    text += in.dump() + "\n";
    picked.push_back(i);
  }
  return text;
}

// Feeds the fixture's cases of `type` (without their "expect") to `azr task COMMAND` and returns
// the cases, which of them were sent, and one output line per case.
struct CorpusRun {
  json cases;
  std::vector<size_t> picked;
  std::vector<json> out;
};

CorpusRun run_corpus(const std::string& fixture, const std::string& command, const std::string& type) {
  CorpusRun run;
  run.cases = read_fixture(fixture);
  std::string path = temp_file(input_for(run.cases, type, run.picked));
  EXPECT_FALSE(run.picked.empty());
  auto r = run_process({azr(), "task", command, "--type", type, "--jsonl", path, "--workers", "2", "--timeout", "1"});
  std::remove(path.c_str());
  EXPECT_EQ(r.exit_code, 0) << r.err;
  run.out = json_lines(r.out);
  EXPECT_EQ(run.out.size(), run.picked.size()) << r.out;
  if (run.out.size() != run.picked.size()) run.picked.clear();
  return run;
}

class ValidateCorpus : public ::testing::TestWithParam<std::string> {};

TEST_P(ValidateCorpus, EveryResponseGetsItsHandDerivedOutcome) {
  const std::string type = GetParam();
  const CorpusRun run = run_corpus("validate.jsonl", "validate", type);
  const json& cases = run.cases;
  const std::vector<size_t>& picked = run.picked;
  const std::vector<json>& out = run.out;
  for (size_t k = 0; k < picked.size(); ++k) {
    const json& c = cases[picked[k]];
    const json& e = c["expect"];
    const json& o = out[k];
    SCOPED_TRACE(c["name"].get<std::string>() + " -> " + o.dump());
    EXPECT_EQ(o["id"], picked[k]);
    EXPECT_EQ(o["valid"], e["valid"]);
    ASSERT_TRUE(o["reason"].is_string());
    ASSERT_TRUE(o["detail"].is_string());
    if (e.contains("reason")) {
      EXPECT_EQ(o["reason"], e["reason"]);
    }
    if (!e["valid"].get<bool>()) {
      EXPECT_FALSE(o.contains("task"));
      continue;
    }
    EXPECT_EQ(o["reason"], "ok");
    ASSERT_TRUE(o.contains("task"));
    const json& t = o["task"];
    EXPECT_EQ(t["type"], type);
    EXPECT_NE(t["program"].get<std::string>().find("def f("), std::string::npos) << "entry renamed to f";
    if (e.contains("output")) {
      EXPECT_EQ(t["output"], e["output"]);
    }
    if (e.contains("outputs")) {
      EXPECT_EQ(t["outputs"], e["outputs"]);
    }
    if (e.contains("program_has")) {
      EXPECT_NE(t["program"].get<std::string>().find(e["program_has"].get<std::string>()), std::string::npos);
    }
    if (type == "induction") {
      EXPECT_EQ(t["program"], c["program"]);
      EXPECT_TRUE(t["message"].is_string());
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Types, ValidateCorpus, ::testing::Values("deduction", "abduction", "induction"));

class GradeCorpus : public ::testing::TestWithParam<std::string> {};

TEST_P(GradeCorpus, EveryAnswerGetsItsHandDerivedGradeAndReward) {
  const std::string type = GetParam();
  const CorpusRun run = run_corpus("grade.jsonl", "grade", type);
  const json& cases = run.cases;
  const std::vector<size_t>& picked = run.picked;
  const std::vector<json>& out = run.out;
  for (size_t k = 0; k < picked.size(); ++k) {
    const json& c = cases[picked[k]];
    const json& e = c["expect"];
    const json& o = out[k];
    SCOPED_TRACE(c["name"].get<std::string>() + " -> " + o.dump());
    EXPECT_EQ(o["id"], picked[k]);
    EXPECT_EQ(o["correct"], e["correct"]);
    ASSERT_TRUE(o["reward"].is_number());
    EXPECT_DOUBLE_EQ(o["reward"].get<double>(), e["reward"].get<double>());
    ASSERT_TRUE(o["reason"].is_string());
    if (e.contains("reason")) {
      EXPECT_EQ(o["reason"], e["reason"]);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Types, GradeCorpus, ::testing::Values("deduction", "abduction", "induction"));

const json kTask = {{"type", "deduction"}, {"program", "def f(a):\n    return a"}, {"input", "1"}, {"output", "1"}};
const std::string kGood = "t\n</think>\n<answer>\n```output\n1\n```\n</answer>";

void expect_bad(const std::vector<std::string>& args, const std::string& input, const std::string& where,
                const std::string& says) {
  auto r = run_process(args, input);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find(where), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(says), std::string::npos) << r.err;
  EXPECT_EQ(r.out, "");  // checked before anything ran
}

TEST(TaskCli, GradeRejectsBadLinesWithFileAndLine) {
  const std::vector<std::string> cmd = {azr(), "task", "grade", "--type", "deduction", "--jsonl", "-"};
  const std::string good = json{{"task", kTask}, {"response", kGood}}.dump() + "\n";
  expect_bad(cmd, good + "{not json\n", "<stdin>:2", "not valid JSON");
  expect_bad(cmd, good + "\n" + json{{"response", kGood}}.dump() + "\n", "<stdin>:3", "'task'");
  expect_bad(cmd, json{{"task", kTask}}.dump() + "\n", "<stdin>:1", "'response'");
  json abd = kTask;
  abd["type"] = "abduction";
  expect_bad(cmd, good + json{{"task", abd}, {"response", kGood}}.dump() + "\n", "<stdin>:2", "abduction");
  json broken = kTask;
  broken.erase("output");
  expect_bad(cmd, json{{"task", broken}, {"response", kGood}}.dump() + "\n", "<stdin>:1", "output");
  expect_bad(cmd, "[1, 2]\n", "<stdin>:1", "object");
  // From a file: the file's name.
  std::string path = temp_file(good + json{{"task", kTask}, {"response", 3}}.dump() + "\n");
  expect_bad({azr(), "task", "grade", "--type", "deduction", "--jsonl", path}, "", path + ":2", "'response'");
  std::remove(path.c_str());
}

TEST(TaskCli, ValidateRejectsBadLinesWithFileAndLine) {
  const std::string good = json{{"response", "x</think><answer></answer>"}}.dump() + "\n";
  expect_bad({azr(), "task", "validate", "--type", "deduction", "--jsonl", "-"}, good + "{\"id\": 1}\n", "<stdin>:2",
             "'response'");
  expect_bad({azr(), "task", "validate", "--type", "induction", "--jsonl", "-"}, good, "<stdin>:1", "'program'");
  expect_bad({azr(), "task", "validate", "--type", "deduction", "--jsonl", "-"}, good + "nope\n", "<stdin>:2",
             "not valid JSON");
  auto r = run_process({azr(), "task", "validate", "--type", "nonsense", "--jsonl", "-"}, good);
  EXPECT_EQ(r.exit_code, 2);
  r = run_process({azr(), "task", "validate", "--type", "deduction", "--jsonl", "/nonexistent/x.jsonl"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("/nonexistent/x.jsonl"), std::string::npos) << r.err;
}

TEST(TaskCli, GradeFromStdinCopiesIds) {
  std::string input = json{{"id", "a"}, {"task", kTask}, {"response", kGood}}.dump() + "\n" +
                      json{{"task", kTask}, {"response", "no answer at all"}}.dump() + "\n";
  auto r = run_process({azr(), "task", "grade", "--type", "deduction", "--jsonl", "-", "--workers", "1"}, input);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto out = json_lines(r.out);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0]["id"], "a");
  EXPECT_EQ(out[0]["correct"], true);
  EXPECT_FALSE(out[1].contains("id"));
  EXPECT_EQ(out[1]["reward"], -1.0);
  EXPECT_EQ(out[1]["reason"], "no_answer");
}

bool ends_with(const std::string& s, const std::string& suffix) {
  std::string t = s;
  while (!t.empty() && t.back() == '\n') t.pop_back();
  return t.size() >= suffix.size() && t.compare(t.size() - suffix.size(), suffix.size(), suffix) == 0;
}

TEST(TaskCli, PromptWithoutBufferUsesTheIdentitySeed) {
  for (std::string role : {"proposer", "solver"}) {
    for (std::string type : {"deduction", "abduction", "induction"}) {
      SCOPED_TRACE(role + " " + type);
      auto r = run_process({azr(), "task", "prompt", "--role", role, "--type", type, "--seed", "1"});
      ASSERT_EQ(r.exit_code, 0) << r.err;
      if (role == "solver" && type == "induction") {
        // The solver of an induction task never sees the program: the seed's message and pairs.
        EXPECT_NE(r.out.find("Write a function that returns whatever you input"), std::string::npos) << r.out;
        EXPECT_NE(r.out.find("'Hello world'"), std::string::npos) << r.out;
      } else {
        EXPECT_NE(r.out.find("def f(a):\n    return a"), std::string::npos) << r.out;
      }
      EXPECT_TRUE(ends_with(r.out, "Assistant: <think>")) << r.out;

      auto j = run_process({azr(), "task", "prompt", "--role", role, "--type", type, "--json"});
      ASSERT_EQ(j.exit_code, 0) << j.err;
      auto o = json::parse(j.out);
      EXPECT_TRUE(ends_with(o["prompt"].get<std::string>(), "Assistant: <think>"));
      EXPECT_EQ(o["task_ids"], json::array());
    }
  }
}

// --prompt-style compact prints the compact wording (model/chat_format.h) of the same task.
TEST(TaskCli, PromptStyleCompact) {
  for (std::string role : {"proposer", "solver"}) {
    SCOPED_TRACE(role);
    auto r = run_process({azr(), "task", "prompt", "--role", role, "--type", "deduction", "--prompt-style", "compact"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out.rfind("User: ", 0), 0u) << r.out;
    EXPECT_EQ(r.out.find("A conversation between User and Assistant"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("def f(a):\n    return a"), std::string::npos) << r.out;
    EXPECT_TRUE(ends_with(r.out, "Assistant: <think>")) << r.out;
  }
  auto bad = run_process({azr(), "task", "prompt", "--role", "solver", "--type", "deduction", "--prompt-style", "short"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("--prompt-style"), std::string::npos) << bad.err;
}

TEST(TaskCli, PromptFromABufferShowsItsTasks) {
  const std::string dir = ::testing::TempDir() + "azr_task_prompt_" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  const std::string db = dir + "/buffer.db", tasks = dir + "/tasks.jsonl";
  {
    std::ofstream f(tasks);
    f << R"({"type": "deduction", "program": "def f(x):\n    return x * 31", "input": "2", "output": "62"})" << "\n"
      << R"({"type": "deduction", "program": "def f(s):\n    return s[::-1]", "input": "'ab'", "output": "'ba'"})" << "\n"
      << R"({"type": "abduction", "program": "def f(n):\n    return n + 977", "input": "1", "output": "978"})" << "\n";
  }
  auto imp = run_process({azr(), "buffer", "import", db, tasks});
  ASSERT_EQ(imp.exit_code, 0) << imp.err;

  // Proposer: both deduction tasks as references (k = 6 > 2 available), never the abduction one.
  auto p = run_process({azr(), "task", "prompt", "--role", "proposer", "--type", "deduction", "--db", db, "--json"});
  ASSERT_EQ(p.exit_code, 0) << p.err;
  const json pj = json::parse(p.out);
  const std::string prompt = pj["prompt"];
  EXPECT_NE(prompt.find("return x * 31"), std::string::npos);
  EXPECT_NE(prompt.find("return s[::-1]"), std::string::npos);
  EXPECT_EQ(prompt.find("n + 977"), std::string::npos);
  EXPECT_EQ(pj["task_ids"].size(), 2u);

  // Induction proposer: one program from deduction or abduction.
  auto ind = run_process({azr(), "task", "prompt", "--role", "proposer", "--type", "induction", "--db", db, "--seed", "3"});
  ASSERT_EQ(ind.exit_code, 0) << ind.err;
  int shown = 0;
  for (const char* body : {"return x * 31", "return s[::-1]", "return n + 977"}) shown += ind.out.find(body) != std::string::npos;
  EXPECT_EQ(shown, 1) << ind.out;

  // Solver, a chosen task: its program and input, not its output.
  auto s = run_process({azr(), "task", "prompt", "--role", "solver", "--type", "abduction", "--db", db, "--task-id", "3"});
  ASSERT_EQ(s.exit_code, 0) << s.err;
  EXPECT_NE(s.out.find("return n + 977"), std::string::npos);
  EXPECT_NE(s.out.find("978"), std::string::npos);  // abduction shows the output
  // A task id of another type, or not in the database, is refused.
  auto other =
      run_process({azr(), "task", "prompt", "--role", "solver", "--type", "deduction", "--db", db, "--task-id", "3"});
  EXPECT_EQ(other.exit_code, 2);
  EXPECT_EQ(other.err, "azr: task prompt: task 3 is abduction, not deduction\n");
  auto absent =
      run_process({azr(), "task", "prompt", "--role", "solver", "--type", "abduction", "--db", db, "--task-id", "99"});
  EXPECT_EQ(absent.exit_code, 2);
  EXPECT_EQ(absent.err, "azr: task prompt: no task 99 in " + db + "\n");
  std::filesystem::remove_all(dir);
}

TEST(TaskCli, PromptBadUsage) {
  const std::pair<std::vector<std::string>, std::string> cases[] = {
      {{"--role", "judge", "--type", "deduction"}, "azr: --role: judge not in {proposer,solver}\n"},
      {{"--role", "solver", "--type", "deduction", "--task-id", "3"}, "azr: task prompt: --task-id needs --db\n"},
      {{"--role", "proposer", "--type", "deduction", "--task-id", "3", "--db", "x.db"},
       "azr: task prompt: --task-id goes with --role solver\n"},
      {{"--role", "solver", "--type", "deduction", "--db", "/nonexistent/b.db"},
       "azr: /nonexistent/b.db: no such file\n"},
      // --k where no prompt takes references: it was ignored without a word.
      {{"--role", "solver", "--type", "deduction", "--k", "3"},
       "azr: task prompt: --k (references) goes with --role proposer and --type deduction or abduction; an induction "
       "proposer's prompt holds one program, a solver's its one task\n"},
      {{"--role", "proposer", "--type", "induction", "--k", "3"},
       "azr: task prompt: --k (references) goes with --role proposer and --type deduction or abduction; an induction "
       "proposer's prompt holds one program, a solver's its one task\n"},
  };
  for (const auto& [args, message] : cases) {
    std::vector<std::string> argv = {azr(), "task", "prompt"};
    argv.insert(argv.end(), args.begin(), args.end());
    const auto r = run_process(argv);
    EXPECT_EQ(r.exit_code, 2) << message;
    EXPECT_EQ(r.err.substr(0, r.err.find("Run with --help")), message);
  }
}

}  // namespace
