// Answer grading on the real sandbox (solver/grade.h), with CRUXEval as ground truth: 800
// programs written by others, each with the output CPython recorded for its input.
#include <gtest/gtest.h>

#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <vector>

#include "proposer/validate.h"
#include "solver/grade.h"
#include "solver/literal_parses.h"
#include "tests/test_support.h"

namespace azr::solver {
namespace {

namespace sb = azr::sandbox;
using buffer::Task;
using buffer::TaskType;

struct Crux {
  std::string id, code, input, output;
};

std::vector<Crux> load_cruxeval() {
  std::string path = azr::testing::env_or_fail("AZR_SHARED_DIR") + "/benchmarks/cruxeval/cruxeval.jsonl";
  std::ifstream in(path);
  EXPECT_TRUE(in) << "cannot open " << path;
  std::vector<Crux> out;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    auto j = nlohmann::json::parse(line);
    out.push_back({j.at("id"), j.at("code"), j.at("input"), j.at("output")});
  }
  return out;
}

Task task(TaskType type, std::string program, std::string input, std::string output) {
  Task t;
  t.type = type;
  t.program = std::move(program);
  t.input = std::move(input);
  t.output = std::move(output);
  return t;
}

class Grading : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { pool_ = std::make_unique<sb::Pool>(sb::PoolOptions{}); }
  static void TearDownTestSuite() { pool_.reset(); }
  static GradeSettings settings() {
    GradeSettings s;
    s.limits.cpu_seconds = 5;  // a few CRUXEval programs are deliberately slow-ish string loops
    return s;
  }
  static std::unique_ptr<sb::Pool> pool_;
};
std::unique_ptr<sb::Pool> Grading::pool_;

TEST_F(Grading, CruxEvalDeductionRecordedOutputsAreCorrectPerturbedAreWrong) {
  auto items = load_cruxeval();
  ASSERT_EQ(items.size(), 800u);
  std::vector<Task> tasks;
  std::vector<Answer> answers;
  for (size_t i = 0; i < items.size(); ++i) {
    tasks.push_back(task(TaskType::Deduction, items[i].code, items[i].input, items[i].output));
    answers.push_back({i, items[i].output});                               // recorded: correct
    answers.push_back({i, "[" + items[i].output + "]"});                   // a changed value: wrong
    answers.push_back({i, "(" + items[i].output + ", None)"});             // another changed value
  }
  auto g = grade(*pool_, tasks, answers, settings());
  ASSERT_EQ(g.size(), answers.size());
  for (size_t i = 0; i < items.size(); ++i) {
    SCOPED_TRACE(items[i].id);
    EXPECT_TRUE(g[3 * i].correct) << g[3 * i].reason << ": " << g[3 * i].detail;
    EXPECT_EQ(g[3 * i].accuracy, 1.0);
    EXPECT_FALSE(g[3 * i + 1].correct);
    EXPECT_EQ(g[3 * i + 1].reason, "wrong");
    EXPECT_FALSE(g[3 * i + 2].correct);
    EXPECT_EQ(g[3 * i + 2].reason, "wrong");
  }
}

// Which recorded inputs are literal argument lists is decided by the sandbox itself (Literal
// mode, as training grades solver answers). Every literal one must grade correct: that each
// recorded input reproduces its output at all is the next test's bar (all 800 in the
// expression mode), so a failure here is the literal mode's.
TEST_F(Grading, CruxEvalAbductionRecordedInputsAreCorrectPerturbedAreWrong) {
  auto items = load_cruxeval();
  ASSERT_EQ(items.size(), 800u);
  std::vector<sb::EvalRequest> reqs;
  for (const auto& it : items) reqs.push_back({it.code, it.input});
  auto lits = sb::evaluate(*pool_, reqs, settings().limits, sb::InputMode::Literal);

  std::vector<Task> tasks;
  std::vector<Answer> answers;
  for (size_t i = 0; i < items.size(); ++i) {
    tasks.push_back(task(TaskType::Abduction, items[i].code, items[i].input, items[i].output));
    tasks.push_back(task(TaskType::Abduction, items[i].code, items[i].input, "[" + items[i].output + "]"));
    answers.push_back({2 * i, items[i].input});      // the recorded input: correct
    answers.push_back({2 * i + 1, items[i].input});  // produces an output different from the task's
  }
  auto g = grade(*pool_, tasks, answers, settings());
  size_t correct = 0, not_literal = 0;
  std::map<std::string, int> reasons;
  for (size_t i = 0; i < items.size(); ++i) {
    SCOPED_TRACE(items[i].id);
    const auto& good = g[2 * i];
    const auto& bad = g[2 * i + 1];
    ++reasons[good.reason];
    EXPECT_FALSE(bad.correct);
    bool literal = !(lits[i].status == sb::Status::Error && lits[i].error_type == sb::kInputError);
    if (!literal) {
      ++not_literal;
      EXPECT_EQ(good.reason, "not_a_literal");
      EXPECT_EQ(bad.reason, "not_a_literal");
      continue;
    }
    EXPECT_TRUE(good.correct) << good.reason << ": " << good.detail;
    EXPECT_EQ(bad.reason, "wrong") << bad.detail;
    if (good.correct) ++correct;
  }
  for (const auto& [r, n] : reasons) std::cout << "  reason " << r << ": " << n << "\n";
  std::cout << "  correct " << correct << ", inputs not literal " << not_literal << "\n";
  EXPECT_EQ(correct + not_literal, 800u);
  EXPECT_LE(not_literal, 20u);
}

// The bar: every recorded CRUXEval input grades correct. The 12 that are expressions
// (dict(...), lambda, ...) need the expression mode, which training never uses for solver answers.
TEST_F(Grading, CruxEvalAbductionAllRecordedInputsCorrectInExpressionMode) {
  auto items = load_cruxeval();
  ASSERT_EQ(items.size(), 800u);
  std::vector<Task> tasks;
  std::vector<std::string> answers;
  for (const auto& it : items) {
    tasks.push_back(task(TaskType::Abduction, it.code, it.input, it.output));
    answers.push_back(it.input);
  }
  GradeSettings s = settings();
  s.abduction_input_mode = sb::InputMode::Expression;
  auto g = grade(*pool_, tasks, answers, s);
  size_t correct = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    EXPECT_TRUE(g[i].correct) << items[i].id << ": " << g[i].reason << " " << g[i].detail;
    correct += g[i].correct;
  }
  EXPECT_EQ(correct, 800u);
}

TEST_F(Grading, InjectionAnswersAreWrongAndNeverRun) {
  // The program would record that it ran in its output if any of these were executed; grading a
  // deduction answer never runs the program, and the answer itself is only parsed.
  Task t = task(TaskType::Deduction, "def f(x):\n    return x + 1", "1", "2");
  std::vector<std::string> inj = {"0) or (True", "__import__('os').system('x')", "f(1)", "x", "2 if True else 3",
                                  "(lambda: 2)()", "[2][0]", "2; 2", "True", "", "2\n)"};
  std::vector<Answer> answers;
  for (const auto& a : inj) answers.push_back({0, a});
  auto g = grade(*pool_, {t}, answers);
  for (size_t i = 0; i < inj.size(); ++i) {
    SCOPED_TRACE(inj[i]);
    EXPECT_FALSE(g[i].correct);
    if (inj[i] == "True") EXPECT_EQ(g[i].reason, "wrong");  // True == 1, not 2
    else EXPECT_EQ(g[i].reason, "not_a_literal") << g[i].detail;
  }
  // Abduction: the answer is an argument list of literals only.
  Task a = task(TaskType::Abduction, "def f(x):\n    return x + 1", "1", "2");
  auto ga = grade(*pool_, {a, a, a, a, a}, std::vector<std::string>{"0) or (True", "*[1]", "x=1", "1", "int('1')"});
  EXPECT_EQ(ga[0].reason, "not_a_literal");
  EXPECT_EQ(ga[1].reason, "not_a_literal");
  EXPECT_TRUE(ga[3].correct);
  EXPECT_EQ(ga[4].reason, "not_a_literal");
  EXPECT_TRUE(ga[2].correct) << ga[2].reason << " " << ga[2].detail;  // keyword literals are allowed
}

TEST_F(Grading, DeductionValueEquality) {
  struct Case {
    std::string gold, answer;
    bool correct;
  };
  std::vector<Case> cases = {
      {"{1, 2, 3}", "{3, 2, 1}", true},          {"{'a': 1, 'b': 2}", "{'b': 2, 'a': 1}", true},
      {"1", "1.0", true},                        {"[1, 2]", "(1, 2)", false},
      {"'abc'", "\"abc\"", true},                {"'abc'", "b'abc'", false},
      {"float('nan')", "float('nan')", false},   {"[1, [2, {3}]]", "[1, [2, {3}]]", true},
      {"-0.5", "-.5", true},                     {"1e3", "1000", true},
  };
  std::vector<Task> tasks;
  std::vector<std::string> answers;
  for (const auto& c : cases) {
    tasks.push_back(task(TaskType::Deduction, "def f(x):\n    return x", "0", c.gold));
    answers.push_back(c.answer);
  }
  auto g = grade(*pool_, tasks, answers);
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(cases[i].gold + " vs " + cases[i].answer);
    EXPECT_EQ(g[i].correct, cases[i].correct) << g[i].reason << " " << g[i].detail;
  }
  EXPECT_EQ(g[6].reason, "bad_task");  // float('nan') is not a literal; the task itself is unusable
  // nan as a real value: the program returns it, the answer cannot equal it.
  Task n = task(TaskType::Abduction, "def f(x):\n    return x * float('inf') * 0", "1", "[]");
  EXPECT_EQ(grade(*pool_, {n}, std::vector<std::string>{"1"})[0].reason, "wrong");
}

TEST_F(Grading, AbductionFailures) {
  Task t = task(TaskType::Abduction, "def f(x):\n    if x == 0:\n        raise ValueError('zero')\n"
                                     "    while x < 0:\n        pass\n    return 10 // x",
                "5", "2");
  auto g = grade(*pool_, {t, t, t, t, t}, std::vector<std::string>{"5", "4", "0", "-1", "1, 2"}, GradeSettings{});
  EXPECT_TRUE(g[0].correct);
  EXPECT_TRUE(g[1].correct);  // any input that reproduces the output is right
  EXPECT_EQ(g[2].reason, "exception");
  EXPECT_EQ(g[2].detail, "ValueError: zero");
  EXPECT_EQ(g[3].reason, "timeout");
  EXPECT_EQ(g[4].reason, "exception");  // TypeError: too many arguments
}

TEST_F(Grading, Induction) {
  // The task comes out of validation, as in training.
  proposer::Proposal p;
  p.type = TaskType::Induction;
  p.program = "def f(x):\n    return x * x + 1";
  for (int i = 1; i <= 10; ++i) p.inputs.push_back(std::to_string(i));
  p.message = "square and add one";
  auto v = proposer::validate(*pool_, {p}).at(0);
  ASSERT_TRUE(v.check.ok) << v.check.reason;
  const Task& t = v.task;
  ASSERT_EQ(t.outputs.back(), "101");

  std::vector<std::string> programs = {
      "def f(a):\n    return a ** 2 + 1",                          // correct
      "def f(x):\n    return x * x + 1 if x <= 5 else 0",          // right on the shown half only
      "def f(x):\n    return x * x + 1 if x <= 7 else 0",          // 2 of 5 hidden
      "def f(x):\n    raise RuntimeError('no idea')",               // raises
      "def f(x)\n    return x",                                    // does not parse
      "def f(x):\n    return float(x * x + 1)",                    // 1 == 1.0: correct
      "def g(x):\n    return x",                                   // no f
  };
  std::vector<Task> tasks(programs.size(), t);
  auto g = grade(*pool_, tasks, programs);
  EXPECT_TRUE(g[0].correct);
  EXPECT_EQ(g[0].reason, "ok");
  EXPECT_EQ(g[0].accuracy, 1.0);
  EXPECT_FALSE(g[1].correct);
  EXPECT_EQ(g[1].reason, "wrong");
  EXPECT_EQ(g[1].accuracy, 0.0);
  EXPECT_EQ(g[1].detail.rfind("hidden 0: ", 0), 0u) << g[1].detail;
  EXPECT_FALSE(g[2].correct);
  EXPECT_DOUBLE_EQ(g[2].accuracy, 0.4);
  EXPECT_EQ(g[2].detail.rfind("hidden 2: ", 0), 0u) << g[2].detail;
  EXPECT_EQ(g[3].reason, "exception");
  EXPECT_EQ(g[3].detail, "hidden 0: RuntimeError: no idea");
  EXPECT_FALSE(g[4].correct);
  EXPECT_EQ(g[4].reason, "exception") << g[4].detail;
  EXPECT_TRUE(g[5].correct);
  EXPECT_FALSE(g[6].correct);

  Task empty = t;
  empty.inputs.clear();
  empty.outputs.clear();
  EXPECT_EQ(grade(*pool_, {empty}, std::vector<std::string>{programs[0]})[0].reason, "bad_task");
}

// f(x) = x * x + 1 on 1..10, as validation would record it.
Task squares_plus_one() {
  Task t;
  t.type = TaskType::Induction;
  t.program = "def f(x):\n    return x * x + 1";
  for (int i = 1; i <= 10; ++i) {
    t.inputs.push_back(std::to_string(i));
    t.outputs.push_back(std::to_string(i * i + 1));
  }
  return t;
}

// A hidden pair the sandbox lost (internal_error, which the trainer masks) is the reason only
// when no other pair failed: a pair known wrong makes the answer wrong. The pool loses every run
// of hidden input 8.
TEST(GradingFaults, AHiddenPairTheSandboxLostDecidesOnlyWhenNoOtherFails) {
  sb::PoolOptions o;
  o.workers = 2;
  o.inject_fault = [](const sb::Job& j) {
    return j.op == sb::protocol::Op::RunProgram && j.inputs.size() == 1 && j.inputs[0] == "8";
  };
  sb::Pool pool(o);
  const Task t = squares_plus_one();
  // Hidden inputs 6..10: input 8 is hidden pair 2.
  const std::vector<std::string> programs = {
      "def f(x):\n    return x * x + 1",                   // right wherever it ran
      "def f(x):\n    return x * x + 1 if x < 10 else 0",  // pair 4 wrong
  };
  auto g = grade(pool, {t, t}, programs);
  EXPECT_FALSE(g[0].correct);
  EXPECT_EQ(g[0].reason, "internal_error");
  EXPECT_EQ(g[0].detail.rfind("hidden 2: ", 0), 0u) << g[0].detail;
  EXPECT_DOUBLE_EQ(g[0].accuracy, 0.8);
  EXPECT_EQ(g[1].reason, "wrong");
  EXPECT_EQ(g[1].detail.rfind("hidden 4: ", 0), 0u) << g[1].detail;
  EXPECT_DOUBLE_EQ(g[1].accuracy, 0.6);
}

// GradeSettings::induction_first_pair_first: the same correct, reason and detail as running every
// hidden input, in fewer children. The pool loses hidden input 6 (pair 0) of the programs marked
// "# lose". By hand (hidden inputs 6..10): right; wrong at pair 0 only; wrong from pair 2; never
// ends; raises; pair 0 lost and pair 3 wrong (wrong: a lost pair decides only alone); pair 0 lost
// and the rest right (internal_error). All pairs run: 7 programs x 5 inputs. First pair first:
// the three that fail their first pair run once, the others five times: 12 children fewer.
TEST(GradingFaults, InductionFirstPairFirstGivesEveryPairsVerdictsInFewerChildren) {
  sb::PoolOptions o;
  o.workers = 2;
  o.inject_fault = [](const sb::Job& j) {
    return j.op == sb::protocol::Op::RunProgram && j.program.find("# lose") != std::string::npos &&
           j.inputs.size() == 1 && j.inputs[0] == "6";
  };
  sb::Pool pool(o);
  const Task t = squares_plus_one();
  const std::vector<std::string> programs = {
      "def f(x):\n    return x * x + 1",
      "def f(x):\n    return x * x + 1 if x != 6 else 0",
      "def f(x):\n    return x * x + 1 if x <= 7 else 0",
      "def f(x):\n    while True:\n        pass",
      "def f(x):\n    raise ValueError(x)",
      "def f(x):  # lose\n    return x * x + 1 if x != 9 else 0",
      "def f(x):  # lose\n    return x * x + 1",
  };
  auto graded = [&](bool first_pair_first, uint64_t& jobs) {
    solver::GradeSettings s;
    s.limits.cpu_seconds = 0.3;
    s.induction_first_pair_first = first_pair_first;
    const uint64_t before = pool.stats().submitted;
    auto g = grade(pool, std::vector<Task>(programs.size(), t), programs, s);
    jobs = pool.stats().submitted - before;
    return g;
  };
  uint64_t jobs_all = 0, jobs_first = 0;
  const std::vector<Grade> all = graded(false, jobs_all), first = graded(true, jobs_first);
  const std::vector<std::string> reasons = {"ok", "wrong", "wrong", "timeout", "exception", "wrong", "internal_error"};
  const std::vector<std::string> details = {"", "hidden 0: ", "hidden 2: ", "hidden 0: ", "hidden 0: ", "hidden 3: ",
                                            "hidden 0: "};
  for (size_t i = 0; i < programs.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(all[i].reason, reasons[i]) << all[i].detail;
    EXPECT_EQ(all[i].detail.rfind(details[i], 0), 0u) << all[i].detail;
    EXPECT_EQ(first[i].correct, all[i].correct);
    EXPECT_EQ(first[i].reason, all[i].reason);
    EXPECT_EQ(first[i].detail, all[i].detail);
  }
  EXPECT_EQ(jobs_all - jobs_first, 12u);
  // accuracy counts the pairs that ran: 4 of 5 are right, but the first pair decided.
  EXPECT_DOUBLE_EQ(all[1].accuracy, 0.8);
  EXPECT_DOUBLE_EQ(first[1].accuracy, 0.0);
  EXPECT_DOUBLE_EQ(first[2].accuracy, all[2].accuracy);
  EXPECT_DOUBLE_EQ(first[5].accuracy, 0.6);  // pairs 1, 2 and 4
}

// A hidden output whose parse the sandbox lost is not the task's fault (bad_task, which counts
// against the solver) but internal_error, masked in training. The pool loses every parse job
// holding "82", the output of hidden input 9 (pair 3), also when parsed again alone.
TEST(GradingFaults, AHiddenOutputTheSandboxLostIsNotTheTasksFault) {
  sb::PoolOptions o;
  o.workers = 2;
  o.inject_fault = [](const sb::Job& j) {
    if (j.op != sb::protocol::Op::ParseLiterals) return false;
    for (const std::string& in : j.inputs)
      if (in == "82") return true;
    return false;
  };
  sb::Pool pool(o);
  const Task t = squares_plus_one();
  auto g = grade(pool, {t}, std::vector<std::string>{"def f(x):\n    return x * x + 1"});
  EXPECT_EQ(g[0].reason, "internal_error");
  EXPECT_EQ(g[0].detail.rfind("hidden 3: ", 0), 0u) << g[0].detail;
  EXPECT_DOUBLE_EQ(g[0].accuracy, 0.8);
}

// Shared jobs change how many children grading takes, not a single grade. The job counts follow
// from the layout (solver/grade.h, solver/literal_parses.h): apart, a parse job per answer and a
// RunProgram job per abduction answer and per hidden pair of an induction one; shared, each
// distinct run once and the distinct literals packed into parse jobs.
TEST_F(Grading, SharedJobsGradeAsAJobPerAnswerInFewerJobs) {
  const std::string huge = "'" + std::string(70000, 'a') + "'";  // a value past the result cap
  std::vector<Task> tasks = {
      task(TaskType::Deduction, "def f(x):\n    return [x, 2]", "1", "[1, 2]"),
      task(TaskType::Deduction, "def f(x):\n    return x", "0", "float('nan')"),  // not a literal: bad task
      task(TaskType::Abduction, "def f(x):\n    return x + 1", "1", "2"),
      task(TaskType::Induction, "def f(x):\n    return x * x + 1", "", ""),
  };
  for (int x = 1; x <= 10; ++x) {
    tasks[3].inputs.push_back(std::to_string(x));
    tasks[3].outputs.push_back(std::to_string(x * x + 1));
  }
  const std::vector<Answer> answers = {
      {0, "[1, 2]"}, {0, "[1,2]"},       {0, "(1, 2)"},    {0, "[1, 2]"},
      {0, "0) or (True"}, {0, "'x' * 3"}, {0, huge},       {1, "3"},
      {2, "1"},      {2, "1"},           {2, "2"},
      {3, "def f(a):\n    return a ** 2 + 1"}, {3, "def f(x):\n    return x * x + 1 if x <= 7 else 0"},
      {3, "def f(a):\n    return a ** 2 + 1"},
  };
  GradeSettings s = settings();
  s.limits.max_result_bytes = 64 << 10;  // an eighth, 8 KiB of literal text, to a parse job
  auto graded = [&](bool shared, uint64_t& jobs) {
    s.share_jobs = shared;
    const uint64_t before = pool_->stats().submitted;
    auto g = grade(*pool_, tasks, answers, s);
    jobs = pool_->stats().submitted - before;
    return g;
  };
  uint64_t jobs_apart = 0, jobs_shared = 0;
  const std::vector<Grade> apart = graded(false, jobs_apart), shared = graded(true, jobs_shared);
  // Apart: 8 deduction answers, 3 abduction and 3 induction ones, a parse job each; RunProgram:
  // 3 abduction answers and 3 x 5 hidden pairs.
  EXPECT_EQ(jobs_apart, 14u + 18u);
  // Shared: 14 distinct texts (the first task's output is its first answer's text; the five
  // hidden outputs once for all three programs) in three parse jobs: the five before the huge
  // one, the huge one alone (past 8 KiB), the eight after it; nothing parsed again. RunProgram:
  // the abduction inputs "1" and "2", and 2 distinct programs x 5 hidden pairs.
  EXPECT_EQ(jobs_shared, 3u + 12u);
  ASSERT_EQ(shared.size(), answers.size());
  for (size_t i = 0; i < answers.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(shared[i].correct, apart[i].correct);
    EXPECT_EQ(shared[i].accuracy, apart[i].accuracy);
    EXPECT_EQ(shared[i].reason, apart[i].reason);
    // A parse error's message may name an object's address, which differs from child to child.
    const std::regex address("0x[0-9a-f]+");
    EXPECT_EQ(std::regex_replace(shared[i].detail, address, "0x"), std::regex_replace(apart[i].detail, address, "0x"));
  }
  // And the grades themselves, by hand.
  const std::vector<std::string> reasons = {"ok",        "ok",  "wrong", "ok",    "not_a_literal",
                                            "not_a_literal", "output_too_large", "bad_task",
                                            "ok",        "ok",  "wrong", "ok",    "wrong", "ok"};
  for (size_t i = 0; i < answers.size(); ++i) EXPECT_EQ(shared[i].reason, reasons[i]) << i << " " << shared[i].detail;
  EXPECT_DOUBLE_EQ(shared[12].accuracy, 0.4);
  EXPECT_DOUBLE_EQ(shared[13].accuracy, 1.0);
}

sb::CallResult call(sb::Status status, std::string message = "") {
  sb::CallResult c;
  c.status = status;
  if (status == sb::Status::Ok) c.value = sb::Value::integer(int64_t(1));
  if (status == sb::Status::Error) c.error_type = sb::kInputError;
  c.message = std::move(message);
  return c;
}

// What a job's limits did can be another literal's doing; what the sandbox cannot be made to do
// on demand (a timeout, a lost worker, a MemoryError among good literals) is given here as job
// results, and LiteralParses must parse exactly those literals again, each alone.
TEST(LiteralParses, ParsesAgainAloneWhatTheJobMayHaveCaused) {
  LiteralParses lp(true, sb::Limits{});
  std::vector<size_t> slot;
  for (const char* t : {"1", "2", "3", "4", "2", "5"}) slot.push_back(lp.add(t));
  EXPECT_EQ(slot, (std::vector<size_t>{0, 1, 2, 3, 1, 4}));  // an equal text is parsed once
  std::vector<sb::Job> jobs = lp.jobs();
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(jobs[0].inputs, (std::vector<std::string>{"1", "2", "3", "4", "5"}));
  EXPECT_EQ(jobs[0].op, sb::protocol::Op::ParseLiterals);

  sb::JobResult r;
  r.calls = {call(sb::Status::Ok), call(sb::Status::Error, "SyntaxError: invalid syntax"),
             call(sb::Status::Error, "MemoryError: "), call(sb::Status::Timeout), call(sb::Status::Internal)};
  std::vector<std::string> again;
  lp.take({r}, [&](std::vector<sb::Job> alone) {
    std::vector<sb::JobResult> out;
    for (const auto& j : alone) {
      EXPECT_EQ(j.inputs.size(), 1u);
      again.push_back(j.inputs.at(0));
      sb::JobResult one;
      one.calls = {call(sb::Status::Ok)};
      out.push_back(one);
    }
    return out;
  });
  EXPECT_EQ(again, (std::vector<std::string>{"3", "4", "5"}));
  EXPECT_EQ(lp[slot[0]].status, sb::Status::Ok);
  EXPECT_EQ(lp[slot[1]].status, sb::Status::Error);  // a parse error stands
  for (size_t k : {2, 3, 5}) EXPECT_EQ(lp[slot[k]].status, sb::Status::Ok) << k;
}

TEST(LiteralParses, PacksByCountAndBytesAndKeepsGroupsApartWhenNotShared) {
  auto sizes_of = [](LiteralParses& lp) {
    std::vector<size_t> sizes;
    for (const auto& j : lp.jobs()) sizes.push_back(j.inputs.size());
    return sizes;
  };
  LiteralParses by_count(true, sb::Limits{});  // 128 KiB of text a job: the count binds
  for (int i = 0; i < 130; ++i) by_count.add(std::to_string(i));
  EXPECT_EQ(sizes_of(by_count), (std::vector<size_t>{64, 64, 2}));

  sb::Limits limits;
  limits.max_result_bytes = 800;  // 100 bytes of text a job
  LiteralParses by_bytes(true, limits);
  for (int i = 0; i < 130; ++i) by_bytes.add(std::to_string(i));
  by_bytes.add(std::string(150, '7'));
  for (int i = 0; i < 40; ++i) by_bytes.add(std::string(9, char('a' + i % 26)) + std::to_string(i));
  // "0".."54": 10 + 45 x 2 = 100 bytes; "55".."102": 90 + 9; "103".."129": 81; the 150 bytes
  // alone; ten texts of 10 bytes; then 11 bytes each, 9 to a job.
  EXPECT_EQ(sizes_of(by_bytes), (std::vector<size_t>{55, 48, 27, 1, 10, 9, 9, 9, 3}));

  LiteralParses apart(false, sb::Limits{});
  for (const char* t : {"1", "1"}) apart.add(t);
  apart.end_group();
  apart.end_group();  // an empty group makes no job
  apart.add("2");
  auto groups = apart.jobs();
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0].inputs, (std::vector<std::string>{"1", "1"}));
  EXPECT_EQ(groups[1].inputs, (std::vector<std::string>{"2"}));
  sb::JobResult timed_out;
  timed_out.calls = {call(sb::Status::Timeout), call(sb::Status::Timeout)};
  sb::JobResult ok;
  ok.calls = {call(sb::Status::Ok)};
  bool ran = false;
  apart.take({timed_out, ok}, [&](std::vector<sb::Job>) {
    ran = true;
    return std::vector<sb::JobResult>{};
  });
  EXPECT_FALSE(ran) << "a job per answer is what grading did before: its results stand";
  EXPECT_EQ(apart[0].status, sb::Status::Timeout);
  EXPECT_EQ(apart[2].status, sb::Status::Ok);
}

}  // namespace
}  // namespace azr::solver
