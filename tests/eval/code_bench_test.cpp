// Code benchmarks on the real sandbox: every benchmark loads with its documented size, every
// canonical solution passes (base tests and EvalPlus plus inputs), and systematically wrong
// completions pass none.
#include <gtest/gtest.h>

#include <chrono>
#include <iostream>
#include <fstream>
#include <map>
#include <unistd.h>

#include "eval/code_bench.h"
#include "eval/evalplus_inputs.h"
#include "tests/test_support.h"

namespace azr::eval {
namespace {

std::filesystem::path data_dir() {
  return std::filesystem::path(azr::testing::env_or_fail("AZR_SHARED_DIR")) / "benchmarks";
}

sandbox::Pool& pool() {
  static sandbox::Pool p([] {
    sandbox::PoolOptions o;
    o.alternate_workers = 0;
    o.preimports = code_bench_preimports();
    return o;
  }());
  return p;
}

struct Counts {
  size_t passed = 0;
  std::map<std::string, int> reasons;
};

Counts summarize(const std::string& label, const std::vector<CodeProblem>& ps, const std::vector<CodeVerdict>& vs,
                 bool print_failures) {
  Counts c;
  for (size_t i = 0; i < vs.size(); ++i) {
    c.passed += vs[i].passed;
    ++c.reasons[vs[i].reason];
    if (print_failures && !vs[i].passed)
      std::cout << "  " << ps[i].id << ": " << vs[i].reason << " " << vs[i].detail << "\n";
  }
  std::cout << label << ": " << c.passed << " / " << vs.size() << " passed;";
  for (const auto& [r, n] : c.reasons) std::cout << " " << r << "=" << n;
  std::cout << "\n";
  return c;
}

class CodeBench : public ::testing::TestWithParam<std::pair<std::string, size_t>> {};

TEST_P(CodeBench, LoadsGoldPassesWrongFails) {
  auto [name, count] = GetParam();
  auto t0 = std::chrono::steady_clock::now();
  auto ps = load_code_benchmark(name, data_dir());
  ASSERT_EQ(ps.size(), count);
  bool plus = name.find("plus") != std::string::npos;
  for (const auto& p : ps) {
    EXPECT_FALSE(p.id.empty());
    EXPECT_FALSE(p.entry_point.empty()) << p.id;
    EXPECT_EQ(p.test.empty(), plus) << p.id;  // EvalPlus grades on its inputs alone
    EXPECT_NE(p.prompt.find(name.rfind("mbpp", 0) == 0 ? "" : "def " + p.entry_point), std::string::npos) << p.id;
    EXPECT_EQ(p.plus_inputs.empty(), !plus) << p.id;
  }

  std::vector<std::string> gold, wrong_none, wrong_other;
  for (size_t i = 0; i < ps.size(); ++i) {
    gold.push_back(ps[i].canonical_solution);
    // Canonical solution with the entry point redefined to return None.
    wrong_none.push_back(ps[i].canonical_solution + "\n\ndef " + ps[i].entry_point +
                         "(*args, **kwargs):\n    return None\n");
    // Another problem's solution, renamed to this problem's entry point.
    const auto& o = ps[(i + 1) % ps.size()];
    wrong_other.push_back(o.canonical_solution + "\n\n" + ps[i].entry_point + " = " + o.entry_point + "\n");
  }
  // Mbpp/123 (sum of amicable numbers below 9999) takes ~2-3 s of CPU in its canonical form, over
  // the sandbox's 2 s default: benchmarks are graded with a 10 s per-job budget (azr eval's
  // default is 5 s). Here 30 s, so that a slow or busy machine cannot turn a gold solution into a
  // timeout: the test is about the graders and the data, not the budget.
  sandbox::Limits limits;
  limits.cpu_seconds = 30;
  CanonicalResults kept;  // the canonical runs once, as in `azr eval`
  auto vg = grade_code(pool(), ps, gold, limits, &kept);
  auto t1 = std::chrono::steady_clock::now();
  auto cg = summarize(name + " gold", ps, vg, true);
  // EvalPlus holds each plus input to 4x the canonical solution's own time on it, measured in its
  // own job: a timing rule, not the graders' or the data's. On a VM the same call's CPU time
  // varied up to 4.8x between the two jobs (Mbpp/255's 1.66 million tuples: 0.91 s, then 4.39 s
  // of CPU, page faults counted), so a canonical solution over that one rule, said in its detail,
  // is allowed once; any other failure, or a second such, fails.
  size_t timed_out_by_the_4x_rule = 0;
  for (size_t i = 0; i < vg.size(); ++i)
    if (!vg[i].passed && vg[i].reason == "timeout" && vg[i].detail.find("4x the reference's") != std::string::npos)
      ++timed_out_by_the_4x_rule;
  EXPECT_LE(timed_out_by_the_4x_rule, 1u);
  EXPECT_EQ(cg.passed + timed_out_by_the_4x_rule, ps.size()) << name << ": every canonical solution must pass";

  auto vn = grade_code(pool(), ps, wrong_none, limits, &kept);
  auto vo = grade_code(pool(), ps, wrong_other, limits, &kept);
  auto t2 = std::chrono::steady_clock::now();
  auto cn = summarize(name + " return-None", ps, vn, false);
  auto co = summarize(name + " other-problem", ps, vo, false);
  for (size_t i = 0; i < ps.size(); ++i) {
    EXPECT_FALSE(vn[i].passed) << ps[i].id << " passes with `return None`";
    EXPECT_FALSE(vo[i].passed) << ps[i].id << " passes with another problem's solution";
  }
  EXPECT_EQ(cn.reasons.count("internal_error"), 0u);
  std::cout << name << " timing: gold " << std::chrono::duration<double>(t1 - t0).count() << " s, wrong x2 "
            << std::chrono::duration<double>(t2 - t1).count() << " s\n";
}

INSTANTIATE_TEST_SUITE_P(All, CodeBench,
                         ::testing::Values(std::make_pair(std::string("humaneval"), size_t{164}),
                                           std::make_pair(std::string("humanevalplus"), size_t{164}),
                                           std::make_pair(std::string("mbpp"), size_t{500}),
                                           std::make_pair(std::string("mbppplus"), size_t{378})),
                         [](const auto& info) { return info.param.first; });

// A canonical result of `n` calls that each returned `status`.
sandbox::JobResult canonical_result(size_t n, sandbox::Status status) {
  sandbox::JobResult r;
  for (size_t i = 0; i < n; ++i) {
    sandbox::CallResult c;
    c.status = status;
    if (status == sandbox::Status::Ok) {
      c.value = sandbox::Value::integer(int64_t(i));
      c.repr = std::to_string(i);
    } else {
      c.error_type = "ValueError";
    }
    r.calls.push_back(std::move(c));
  }
  return r;
}

TEST(CanonicalResults, KeepsTheProgramsAnswersNotTheMachinesStates) {
  CodeProblem p;
  p.id = "Mbpp/2";
  p.entry_point = "f";
  p.canonical_solution = "def f(x):\n    return x\n";
  p.plus_inputs = {"1", "2", "3"};
  const sandbox::Limits caps = canonical_run_limits({});
  CanonicalResults kept;
  EXPECT_EQ(kept.find(p, caps), nullptr);
  // A result per input, each returned, raised or over an output cap: what the program, its
  // inputs and the caps decide.
  sandbox::JobResult answers = canonical_result(3, sandbox::Status::Ok);
  answers.calls[1] = canonical_result(1, sandbox::Status::Error).calls[0];
  answers.calls[0] = canonical_result(1, sandbox::Status::OutputLimit).calls[0];
  ASSERT_TRUE(kept.keep(p, caps, answers));
  ASSERT_NE(kept.find(p, caps), nullptr);
  EXPECT_EQ(kept.find(p, caps)->calls[0].status, sandbox::Status::OutputLimit);
  EXPECT_EQ(kept.find(p, caps)->calls[1].error_type, "ValueError");
  EXPECT_EQ(kept.find(p, caps)->calls[2].repr, "2");
  // Under other output caps the answers may differ.
  sandbox::Limits larger_result = caps, larger_output = caps, more_cpu = caps;
  larger_result.max_result_bytes *= 2;
  larger_output.max_output_bytes *= 2;
  more_cpu.cpu_seconds *= 2;
  EXPECT_EQ(kept.find(p, larger_result), nullptr);
  EXPECT_EQ(kept.find(p, larger_output), nullptr);
  EXPECT_NE(kept.find(p, more_cpu), nullptr) << "a kept answer never depended on the CPU budget";
  // What a busy or failing machine can produce is asked again next time.
  for (auto st : {sandbox::Status::Timeout, sandbox::Status::Memory, sandbox::Status::Violation,
                  sandbox::Status::Crashed, sandbox::Status::Internal}) {
    CanonicalResults fresh;
    sandbox::JobResult r = canonical_result(3, sandbox::Status::Ok);
    r.calls[2] = canonical_result(1, st).calls[0];
    EXPECT_FALSE(fresh.keep(p, caps, r)) << sandbox::status_name(st);
    EXPECT_EQ(fresh.find(p, caps), nullptr) << sandbox::status_name(st);
  }
  CanonicalResults short_result;
  EXPECT_FALSE(short_result.keep(p, caps, canonical_result(2, sandbox::Status::Ok))) << "a call missing";
  // The same id with another program or other inputs is another problem.
  CodeProblem other_program = p, other_inputs = p, other_entry = p, inputs_joined = p;
  other_program.canonical_solution += "# changed\n";
  other_inputs.plus_inputs[2] = "4";
  other_entry.entry_point = "g";
  inputs_joined.plus_inputs = {"1", "23"};  // the same characters, split elsewhere
  for (const CodeProblem* q : {&other_program, &other_inputs, &other_entry, &inputs_joined})
    EXPECT_EQ(kept.find(*q, caps), nullptr);
  EXPECT_EQ(kept.size(), 1u);
}

// A second grading with the kept canonical results runs no canonical solution again and grades
// alike; the candidates are compared with exactly the kept results (tampered ones fail the gold
// answers), and a problem changed under the same id is run again.
TEST(CanonicalResults, ASecondGradingUsesTheKeptResults) {
  std::vector<CodeProblem> ps = load_code_benchmark("humanevalplus", data_dir());
  ps.resize(8);
  std::vector<std::string> gold;
  for (const CodeProblem& p : ps) gold.push_back(p.canonical_solution);
  sandbox::Limits limits;
  limits.cpu_seconds = 30;
  const size_t n = ps.size();
  size_t parts = 0;  // a candidate's input jobs: the base inputs, then, passed, the plus inputs
  for (const CodeProblem& p : ps) parts += p.base_inputs < p.plus_inputs.size() ? 2 : 1;
  ASSERT_GT(parts, n);
  auto jobs_of = [&](auto grade) {
    const uint64_t before = pool().stats().submitted;
    std::vector<CodeVerdict> v = grade();
    return std::make_pair(v, pool().stats().submitted - before);
  };

  CanonicalResults kept;
  auto [first, first_jobs] = jobs_of([&] { return grade_code(pool(), ps, gold, limits, &kept); });
  EXPECT_EQ(first_jobs, 2 * n + parts) << "the program's run, canonical and candidate on the inputs";
  EXPECT_EQ(kept.size(), n);
  auto [second, second_jobs] = jobs_of([&] { return grade_code(pool(), ps, gold, limits, &kept); });
  EXPECT_EQ(second_jobs, n + parts) << "no canonical solution runs again";
  auto [alone, alone_jobs] = jobs_of([&] { return grade_code(pool(), ps, gold, limits); });
  EXPECT_EQ(alone_jobs, 2 * n + parts);
  for (size_t i = 0; i < n; ++i) {
    EXPECT_TRUE(first[i].passed) << ps[i].id << ": " << first[i].reason << " " << first[i].detail;
    EXPECT_EQ(second[i].passed, first[i].passed) << ps[i].id;
    EXPECT_EQ(alone[i].passed, first[i].passed) << ps[i].id;
  }

  CanonicalResults tampered;
  for (const CodeProblem& p : ps) {
    sandbox::JobResult r = *kept.find(p, canonical_run_limits(limits));
    r.calls[0].status = sandbox::Status::Ok;
    r.calls[0].value = sandbox::Value::str("tampered");
    r.calls[0].repr = "'tampered'";
    ASSERT_TRUE(tampered.keep(p, canonical_run_limits(limits), r));
  }
  auto [against_tampered, tampered_jobs] = jobs_of([&] { return grade_code(pool(), ps, gold, limits, &tampered); });
  EXPECT_EQ(tampered_jobs, 2 * n);
  for (size_t i = 0; i < n; ++i) {
    EXPECT_FALSE(against_tampered[i].passed) << ps[i].id;
    EXPECT_NE(against_tampered[i].detail.find("plus input 0 "), std::string::npos) << against_tampered[i].detail;
  }

  std::vector<CodeProblem> changed = ps;
  changed[0].plus_inputs.pop_back();
  auto [regraded, regraded_jobs] = jobs_of([&] { return grade_code(pool(), changed, gold, limits, &kept); });
  EXPECT_EQ(regraded_jobs, n + parts + 1) << "only the changed problem's canonical solution runs again";
  EXPECT_TRUE(regraded[0].passed) << regraded[0].reason << " " << regraded[0].detail;
  EXPECT_EQ(kept.find(changed[0], canonical_run_limits(limits))->calls.size(), changed[0].plus_inputs.size());
}

CodeProblem he_problem() {
  CodeProblem p;
  p.id = "HumanEval/0";
  p.entry_point = "add";
  p.prompt = "def add(a, b):\n    \"\"\"Add.\"\"\"\n";
  return p;
}

TEST(ExtractCode, LastPythonBlock) {
  CodeProblem p = he_problem();
  std::string r = "First:\n```python\ndef add(a, b):\n    return 0\n```\nBetter:\n```python\ndef add(a, b):\n    return a + b\n```\nDone.";
  EXPECT_EQ(extract_code(r, p), "def add(a, b):\n    return a + b\n");
}

TEST(ExtractCode, BareBlockAndOtherLanguagesIgnored) {
  CodeProblem p = he_problem();
  std::string r = "```\ndef add(a, b):\n    return a + b\n```\n```bash\nls\n```\n";
  EXPECT_EQ(extract_code(r, p), "def add(a, b):\n    return a + b\n");
}

// A solution followed by a block that only uses it: the solution, not the usage (which failed
// every test with the prompt prepended). A block tagged in another case is still Python.
TEST(ExtractCode, TheLastBlockThatDefinesTheEntryPoint) {
  CodeProblem p = he_problem();
  std::string r = "```python\ndef add(a, b):\n    return a + b\n```\nUsage:\n```python\nprint(add(1, 2))\n```\n";
  EXPECT_EQ(extract_code(r, p), "def add(a, b):\n    return a + b\n");
  EXPECT_EQ(extract_code("```Python3\ndef add(a, b):\n    return a + b\n```", p), "def add(a, b):\n    return a + b\n");
  EXPECT_EQ(extract_code("```PY\ndef add(a, b):\n    return a + b\n```", p), "def add(a, b):\n    return a + b\n");
}

TEST(ExtractCode, HumanEvalBodyGetsPrompt) {
  CodeProblem p = he_problem();
  std::string r = "```python\n    return a + b\n```";
  EXPECT_EQ(extract_code(r, p), p.prompt + "    return a + b\n");
}

TEST(ExtractCode, NoBlockUsesWholeResponse) {
  CodeProblem p = he_problem();
  p.id = "Mbpp/2";
  EXPECT_EQ(extract_code("def add(a, b): return a + b", p), "def add(a, b): return a + b");
  // MBPP never gets the prompt prepended.
  EXPECT_EQ(extract_code("```python\nx = 1\n```", p), "x = 1\n");
}

TEST(ExtractCode, UnterminatedBlock) {
  CodeProblem p = he_problem();
  EXPECT_EQ(extract_code("```python\ndef add(a, b):\n    return a + b\n", p), "def add(a, b):\n    return a + b\n");
}

TEST(JsonToPython, Literals) {
  EXPECT_EQ(json_to_python(R"([true, false, null, -Infinity, Infinity, 1.5e3, 123456789012345678901234567890])"),
            "[True, False, None, -1e999, 1e999, 1.5e3, 123456789012345678901234567890]");
  EXPECT_EQ(json_to_python(R"("a\/b\"c\\\n\u00e9\ud83d\ude00\ud800")"), "\"a/b\\\"c\\\\\\né😀\\ud800\"");
  EXPECT_EQ(json_to_python(R"({"k": [1, {}]})"), "{\"k\": [1, {}]}");
  EXPECT_THROW(json_to_python("[1,"), std::runtime_error);
}

// Every argument list azr makes of the EvalPlus files is what EvalPlus passes the function: the
// same values and types, tuples and complex numbers included (tests/eval/evalplus_inputs_reference.py,
// Python's json module and EvalPlus's conversions). Checks all 542 problems' inputs.
TEST(EvalPlusInputs, AreWhatEvalPlusPassesTheFunction) {
  const std::string python = azr::testing::env_or_fail("AZR_PYTHON");
  const std::string script = azr::testing::env_or_fail("AZR_TESTS_DIR") + "/eval/evalplus_inputs_reference.py";
  for (const auto& [name, file] : {std::pair{"humanevalplus", "humanevalplus/HumanEvalPlus-v0.1.10.jsonl.gz"},
                                   std::pair{"mbppplus", "mbppplus/MbppPlus-v0.2.0.jsonl.gz"}}) {
    nlohmann::json ours = nlohmann::json::object();
    for (const CodeProblem& p : load_code_benchmark(name, data_dir())) ours[p.id] = p.plus_inputs;
    auto r = azr::testing::run_process({python, "-I", "-S", script, (data_dir() / file).string()}, ours.dump());
    std::cout << name << ": " << r.out << r.err;
    EXPECT_EQ(r.exit_code, 0) << name;
  }
}

TEST(EvalPlusInputs, ConversionsThatDoNotFitAreErrors) {
  EXPECT_EQ(evalplus_argument_lists(R"([[[1, 2], [3]], [[], [4]]])", "Mbpp/2"),
            (std::vector<std::string>{"(1, 2), (3,)", "(), (4,)"}));
  EXPECT_EQ(evalplus_argument_lists(R"j([["2", "-1.5e3-2j"], [1, "(0+1j)"]])j", "Mbpp/124"),
            (std::vector<std::string>{"2.0, (-1500.0-2.0j)", "1.0, (0.0+1.0j)"}));
  EXPECT_EQ(evalplus_argument_lists(R"([[[1, 2]]])", "HumanEval/2"), std::vector<std::string>{"[1, 2]"});
  EXPECT_EQ(evalplus_argument_lists("{}", "Mbpp/793"), std::vector<std::string>{});
  for (const char* bad : {R"([[1, [2]]])", R"([[[1], 2]])"}) {
    try {
      evalplus_argument_lists(bad, "Mbpp/2");
      ADD_FAILURE() << bad << " converted";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("Mbpp/2 input 0"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(evalplus_argument_lists(R"([["x", "1j"]])", "Mbpp/124"), std::runtime_error);
  EXPECT_THROW(evalplus_argument_lists(R"([[[1]]])", "Mbpp/106"), std::runtime_error);  // takes two
  EXPECT_THROW(evalplus_argument_lists(R"([[NaN]])", "Mbpp/1"), std::runtime_error);
}

// Candidates EvalPlus passes and fails, on the real problems. Each "passes" line failed before
// azr used EvalPlus's inputs and oracles: the assertion field's order (Mbpp/769), a list where
// EvalPlus passes a tuple (Mbpp/2), a bool where the reference returns a re.Match (Mbpp/737), the
// second reference (Mbpp/581, 558).
TEST(EvalPlusGrading, PassesWhatEvalPlusPassesAndFailsTheRest) {
  std::map<std::string, CodeProblem> by_id;
  for (CodeProblem& p : load_code_benchmark("mbppplus", data_dir())) by_id[p.id] = std::move(p);
  for (CodeProblem& p : load_code_benchmark("humanevalplus", data_dir())) by_id[p.id] = std::move(p);
  EXPECT_EQ(by_id.at("Mbpp/2").oracle, PlusOracle::SetEqual);
  EXPECT_EQ(by_id.at("Mbpp/794").oracle, PlusOracle::NotNone);
  EXPECT_EQ(by_id.at("Mbpp/558").oracle, PlusOracle::OrReference);
  EXPECT_EQ(by_id.at("HumanEval/32").oracle, PlusOracle::FindZero);
  EXPECT_EQ(by_id.at("Mbpp/3").oracle, PlusOracle::Equal);
  struct Case {
    const char* id;
    const char* program;
    bool passes;
  };
  const Case cases[] = {
      {"Mbpp/769", "def Diff(a, b):\n    return list(set(b) - set(a)) + list(set(a) - set(b))\n", true},
      {"Mbpp/769", "def Diff(a, b):\n    return list(set(a) - set(b))\n", false},
      {"Mbpp/2", "def similar_elements(a, b):\n    return a[:0] + tuple(set(a) & set(b))\n", true},
      {"Mbpp/2", "def similar_elements(a, b):\n    return tuple(set(a) | set(b))\n", false},
      {"Mbpp/2", "def similar_elements(a, b):\n    return iter(set(a) & set(b))\n", true},  // set() reads it there
      {"Mbpp/737", "import re\ndef check_str(s):\n    return bool(re.match('[aeiouAEIOU]', s))\n", true},
      {"Mbpp/737", "import re\ndef check_str(s):\n    return re.match('[aeiouAEIOU]', s)\n", true},
      {"Mbpp/737", "def check_str(s):\n    return True\n", false},
      {"Mbpp/737", "def check_str(s):\n    return 'yes' if s[:1] in 'aeiouAEIOU' else None\n", false},  // '' in s
      {"Mbpp/581",
       "import math\ndef surface_Area(b, h):\n    return round(b * b + 2 * b * math.sqrt(b * b / 4 + h * h))\n", true},
      {"Mbpp/581", "def surface_Area(b, h):\n    return b * b + 2 * b * h + 1\n", false},
      {"Mbpp/558",
       "def digit_distance_nums(a, b):\n    x, y = str(a), str(b)\n    n = max(len(x), len(y))\n"
       "    return sum(abs(int(p) - int(q)) for p, q in zip(x.zfill(n), y.zfill(n)))\n",
       true},
      {"Mbpp/558", "def digit_distance_nums(a, b):\n    return abs(a - b)\n", false},
  };
  std::vector<CodeProblem> ps;
  std::vector<std::string> programs;
  for (const Case& c : cases) {
    ps.push_back(by_id.at(c.id));
    programs.push_back(c.program);
  }
  sandbox::Limits limits;
  limits.cpu_seconds = 30;
  std::vector<CodeVerdict> v = grade_code(pool(), ps, programs, limits);
  for (size_t i = 0; i < ps.size(); ++i)
    EXPECT_EQ(v[i].passed, cases[i].passes) << ps[i].id << " " << cases[i].program << v[i].reason << " " << v[i].detail;
}

// Each (problem, candidate program) graded, in order.
std::vector<CodeVerdict> grade_pairs(const std::vector<std::pair<CodeProblem, std::string>>& cases) {
  std::vector<CodeProblem> ps;
  std::vector<std::string> programs;
  for (const auto& [p, program] : cases) {
    ps.push_back(p);
    programs.push_back(program);
  }
  return grade_code(pool(), ps, programs);
}

// The oracles and the tolerance rule on hand-made problems, whose answers are worked out by hand.
TEST(EvalPlusGrading, AnyRootAndTolerancesOnlyForFloats) {
  CodeProblem roots;  // x^3 - 6x^2 + 11x - 6 = (x - 1)(x - 2)(x - 3)
  roots.id = "HumanEval/32";
  roots.entry_point = "find_zero";
  roots.canonical_solution = "def find_zero(xs):\n    return 1.0\n";
  roots.plus_inputs = {"[-6, 11, -6, 1]"};
  roots.base_inputs = 1;
  roots.atol = 1e-4;
  roots.oracle = PlusOracle::FindZero;
  CodeProblem ints;  // an int answer: no tolerance
  ints.id = "Mbpp/9001";
  ints.entry_point = "f";
  ints.canonical_solution = "def f():\n    return 2\n";
  ints.plus_inputs = {""};
  CodeProblem floats = ints;  // a float answer: 1e-6 + 1e-7 * |exp|
  floats.id = "Mbpp/9002";
  floats.canonical_solution = "def f():\n    return [2.0, 4.0]\n";
  // EvalPlus's tolerance is its loop's: an expected float answer turns 1e-6 on for the rest of
  // the run (base inputs, then plus inputs, are two runs).
  CodeProblem sticky = ints;
  sticky.id = "Mbpp/9003";
  sticky.entry_point = "g";
  sticky.canonical_solution = "def g(k):\n    return [1.5, 2.0] if k == 0 else [1, 2]\n";
  sticky.plus_inputs = {"0", "1"};
  sticky.base_inputs = 2;  // one run
  CodeProblem ints_first = sticky;
  ints_first.id = "Mbpp/9004";
  ints_first.plus_inputs = {"1", "0"};
  CodeProblem two_runs = sticky;
  two_runs.id = "Mbpp/9005";
  two_runs.base_inputs = 1;
  const std::string near_ints = "def g(k):\n    return [1.5, 2.0] if k == 0 else [1.0000001, 2]\n";
  CodeProblem sets = floats;  // set equality, then the tolerance on the answers as returned
  sets.id = "Mbpp/9006";
  sets.oracle = PlusOracle::SetEqual;
  const std::vector<std::pair<CodeProblem, std::string>> cases = {
      {roots, "def find_zero(xs):\n    return 3.0\n"},          // another root: passes
      {roots, "def find_zero(xs):\n    return 2.00001\n"},      // |p(x)| = 1e-5: passes
      {roots, "def find_zero(xs):\n    return 2.5\n"},          // |p(2.5)| = 0.375: fails
      {roots, "def abs(x):\n    return 0\n\ndef find_zero(xs):\n    return 2.5\n"},  // the oracle's abs: fails
      {ints, "def f():\n    return 2.0\n"},                    // 2.0 == 2: passes
      {ints, "def f():\n    return 2.0000001\n"},              // close, but exp is an int: fails
      {floats, "def f():\n    return [2.0000005, 4.0]\n"},     // within 1e-6: passes
      {floats, "def f():\n    return (2.0, 4.0)\n"},           // a tuple for a list: fails
      {floats, "def f():\n    return [2.00001, 4.0]\n"},       // 1e-5 off: fails
      {sticky, near_ints},                                      // 1e-6 on since input 0: passes
      {ints_first, near_ints},                                  // not yet on at [1, 2]: fails
      {two_runs, near_ints},                                    // a new run starts at 0: fails
      {sets, "def f():\n    return [4.0, 2.0]\n"},           // the same set: passes
      {sets, "def f():\n    return [2.0000005, 4.0]\n"},     // another set, but all close: passes
      {sets, "def f():\n    return [4.0, 2.0000005]\n"},     // another set, not close in order: fails
  };
  const std::vector<bool> passes = {true,  true,  false, false, true, false, true, false,
                                    false, true,  false, false, true, true,  false};
  const std::vector<CodeVerdict> v = grade_pairs(cases);
  for (size_t i = 0; i < cases.size(); ++i)
    EXPECT_EQ(v[i].passed, passes[i]) << cases[i].second << v[i].reason << " " << v[i].detail;
}

// A NaN answer fails, even against a NaN reference: EvalPlus's `out == exp` compares objects made
// in two processes (Python's `nan == nan` is False, and a list's `==` is True for one NaN object
// only), and np.allclose never calls NaN close.
TEST(EvalPlusGrading, ANaNAnswerFailsAsInEvalPlus) {
  CodeProblem scalar;
  scalar.id = "Mbpp/9101";
  scalar.entry_point = "f";
  scalar.canonical_solution = "def f():\n    return float('nan')\n";
  scalar.plus_inputs = {""};
  CodeProblem list = scalar;
  list.id = "Mbpp/9102";
  list.canonical_solution = "def f():\n    return [1.0, float('nan')]\n";
  CodeProblem other = scalar;  // the second reference's path (Mbpp/558's oracle) compares with == too
  other.id = "Mbpp/558";
  other.entry_point = "digit_distance_nums";
  other.canonical_solution = "def digit_distance_nums(a, b):\n    return float('nan')\n";
  other.plus_inputs = {"1, 2"};
  other.oracle = PlusOracle::OrReference;
  const std::vector<std::pair<CodeProblem, std::string>> cases = {
      {scalar, "def f():\n    return float('nan')\n"},
      {scalar, "import math\ndef f():\n    return math.nan\n"},
      {list, "def f():\n    return [1.0, float('nan')]\n"},
      {other, "def digit_distance_nums(a, b):\n    return float('nan')\n"},
  };
  const std::vector<CodeVerdict> v = grade_pairs(cases);
  for (size_t i = 0; i < cases.size(); ++i)
    EXPECT_FALSE(v[i].passed) << cases[i].second << v[i].reason << " " << v[i].detail;
}

// EvalPlus limits each input to max(1 s, 4x the reference's time on it), not the whole run: a
// right answer that takes 1.3 s of CPU on one input fails; one that takes 0.7 s on each of two
// passes, though it takes longer in all. The candidates spend their CPU time exactly, on the
// process clock (time.process_time), so the verdicts do not depend on the machine's speed.
TEST(EvalPlusGrading, EachInputHasItsOwnTimeLimit) {
  CodeProblem p;
  p.id = "Mbpp/9101";
  p.entry_point = "f";
  p.canonical_solution = "def f(n):\n    return n + 1\n";
  p.plus_inputs = {"1", "2"};
  auto burning = [](const std::string& seconds_on_1, const std::string& seconds_on_2) {
    return "import time\n"
           "def f(n):\n"
           "    start = time.process_time()\n"
           "    while time.process_time() - start < (" + seconds_on_1 + " if n == 1 else " + seconds_on_2 + "):\n"
           "        pass\n"
           "    return n + 1\n";
  };
  // The job's own limits far above the calls' (10 CPU-s, 20 s of wall clock): a loaded machine
  // must not end a job on its wall clock, which would fail it for another reason.
  sandbox::Limits limits;
  limits.cpu_seconds = 10;
  const std::vector<CodeVerdict> v =
      grade_code(pool(), {p, p, p}, {burning("0.0", "1.3"), burning("0.7", "0.7"), burning("0.0", "0.0")}, limits);
  EXPECT_FALSE(v[0].passed);
  EXPECT_EQ(v[0].reason, "timeout");
  EXPECT_EQ(v[0].detail.rfind("plus input 1 (2): ", 0), 0u) << v[0].detail;
  EXPECT_NE(v[0].detail.find("over its limit of 1.0"), std::string::npos) << v[0].detail;
  EXPECT_TRUE(v[1].passed) << v[1].reason << " " << v[1].detail;
  EXPECT_TRUE(v[2].passed) << v[2].reason << " " << v[2].detail;
}

// A candidate a little slow on many inputs takes more than one job's limit in all, which failed it
// here (each job had limits.cpu_seconds + 4x the canonical's time); under EvalPlus it passes, each
// input within its limit and the set within min(60 s, the limits summed) + 1 s = 7 s. The job that
// runs out of time is continued from the input it was in. An input that loops for ever is stopped
// at about its own limit and named.
TEST(EvalPlusGrading, ASlowCandidateIsContinuedAndALoopStoppedAtItsInput) {
  CodeProblem p;
  p.id = "Mbpp/9102";
  p.entry_point = "f";
  p.canonical_solution = "def f(n):\n    return n + 1\n";
  p.plus_inputs = {"1", "2", "3", "4", "5", "6"};
  const std::string slow =
      "import time\n"
      "def f(n):\n"
      "    start = time.process_time()\n"
      "    while time.process_time() - start < 0.6:\n"
      "        pass\n"
      "    return n + 1\n";
  const std::string loops_on_3 =
      "def f(n):\n"
      "    while n == 3:\n"
      "        pass\n"
      "    return n + 1\n";
  sandbox::Limits limits;
  limits.cpu_seconds = 1;  // each job: 1 s + max(1 s, ~0): about 3 of the slow inputs
  const std::vector<CodeVerdict> v = grade_code(pool(), {p, p}, {slow, loops_on_3}, limits);
  EXPECT_TRUE(v[0].passed) << v[0].reason << " " << v[0].detail;
  EXPECT_FALSE(v[1].passed);
  EXPECT_EQ(v[1].reason, "timeout");
  // Named at its input either way: by its own limit, or, on a machine loaded past its cores (the
  // job then gets less CPU than wall-clock time), by the job's wall-clock limit first.
  EXPECT_EQ(v[1].detail.rfind("plus input 2 (3): ", 0), 0u) << v[1].detail;
  EXPECT_TRUE(v[1].detail.find("over its limit of 1.0") != std::string::npos ||
              v[1].detail.find("WallTimeout") != std::string::npos)
      << v[1].detail;
}

// EvalPlus's cap on an input set counts the program's start-up: 3 inputs (limits 1 s each, a cap
// of 4 s) at 0.9 s each after 2 s of start-up is 4.7 s, a timeout there; each input alone is
// within its limit. The job's own limit (5 s + 1 s) is above it, so only the cap can fail it.
TEST(EvalPlusGrading, AnInputSetHasEvalPlussCap) {
  CodeProblem p;
  p.id = "Mbpp/9103";
  p.entry_point = "f";
  p.canonical_solution = "def f(n):\n    return n + 1\n";
  p.plus_inputs = {"1", "2", "3"};
  auto candidate = [](const std::string& start_up) {
    return "import time\n"
           "start = time.process_time()\n"
           "while time.process_time() - start < " + start_up + ":\n"
           "    pass\n"
           "def f(n):\n"
           "    start = time.process_time()\n"
           "    while time.process_time() - start < 0.9:\n"
           "        pass\n"
           "    return n + 1\n";
  };
  sandbox::Limits limits;
  limits.cpu_seconds = 5;
  const std::vector<CodeVerdict> v = grade_code(pool(), {p, p}, {candidate("2.0"), candidate("0.0")}, limits);
  EXPECT_FALSE(v[0].passed);
  EXPECT_EQ(v[0].reason, "timeout");
  EXPECT_NE(v[0].detail.find("over EvalPlus's cap on the set of 4.0"), std::string::npos) << v[0].detail;
  EXPECT_TRUE(v[1].passed) << v[1].reason << " " << v[1].detail;
}

TEST(LoadCodeBenchmark, Errors) {
  EXPECT_THROW(load_code_benchmark("nope", data_dir()), std::runtime_error);
  // Of this process: ctest runs test processes side by side, and a second build tree's too.
  auto dir = std::filesystem::temp_directory_path() / ("azr_code_bench_test-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir / "mbpp");
  {
    std::ofstream(dir / "mbpp" / "mbpp.jsonl") << "{\"task_id\": 11, \"text\": \"x\"\n";
  }
  try {
    load_code_benchmark("mbpp", dir);
    FAIL() << "no throw";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("mbpp.jsonl:1"), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(dir);
}

TEST(GradeCode, Reasons) {
  CodeProblem p = he_problem();
  p.test = "assert add(1, 2) == 3\n";
  std::vector<CodeProblem> ps(5, p);
  std::vector<std::string> cs = {"def add(a, b):\n    return a + b\n", "def add(a, b):\n    return a - b\n",
                                 "def add(a, b)\n    return a + b\n", "def add(a, b):\n    while True: pass\n",
                                 "def add(a, b):\n    raise ValueError('no')\n"};
  sandbox::Limits l;
  l.cpu_seconds = 0.5;
  auto vs = grade_code(pool(), ps, cs, l);
  EXPECT_TRUE(vs[0].passed);
  EXPECT_EQ(vs[0].reason, "ok");
  EXPECT_EQ(vs[1].reason, "failed_test");
  EXPECT_EQ(vs[2].reason, "syntax_error") << vs[2].detail;
  EXPECT_EQ(vs[3].reason, "timeout");
  EXPECT_EQ(vs[4].reason, "exception");
}

// A correct solution that imports a standard-library module must not fail for the import: a
// child cannot load one from disk, so each is pre-imported (MBPP/397 with statistics.median).
TEST(GradeCode, StandardLibraryImportsAreAvailable) {
  CodeProblem p = he_problem();
  p.test = "assert add(1, 2) == 3\n";
  std::vector<CodeProblem> ps;
  std::vector<std::string> cs;
  for (const char* m : {"statistics", "datetime", "calendar", "json", "textwrap", "dataclasses", "pprint", "difflib",
                        "base64", "hashlib", "collections", "heapq", "math", "re", "queue", "doctest", "unittest"}) {
    ps.push_back(p);
    cs.push_back(std::string("import ") + m + "\ndef add(a, b):\n    return a + b\n");
  }
  auto vs = grade_code(pool(), ps, cs);
  for (size_t i = 0; i < vs.size(); ++i) EXPECT_TRUE(vs[i].passed) << cs[i] << vs[i].reason << " " << vs[i].detail;
}

// A correct solution with a `__main__` block passes, as under EvalPlus's exec(code, {}), where
// `__name__` reads "builtins" and the block never runs: a doctest run, a demo reading input() (an
// EOFError here), a demo that raises. The base tests and the plus inputs alike.
CodeProblem plus_problem(const std::string& id, const std::string& entry_point, const std::string& canonical,
                         const std::string& test, std::vector<std::string> plus_inputs) {
  CodeProblem p;
  p.id = id;
  p.entry_point = entry_point;
  p.canonical_solution = canonical;
  p.test = test;
  p.plus_inputs = std::move(plus_inputs);
  return p;
}

TEST(GradeCode, AMainBlockDoesNotRunAsUnderEvalPlus) {
  const CodeProblem p = plus_problem("Mbpp/901", "add", "def add(a, b):\n    return a + b\n",
                                     "assert add(1, 2) == 3\n", {"4, 5", "-1, 1"});
  const std::string add = p.canonical_solution;
  std::vector<std::string> cs = {
      add + "if __name__ == '__main__':\n    import doctest\n    doctest.testmod()\n",
      add + "if __name__ == \"__main__\":\n    print(add(*map(int, input().split())))\n",
      add + "if __name__ == '__main__':\n    raise SystemExit(1)\n",
      "def add(a, b):\n    return a - b\nif __name__ == '__main__':\n    print(add(1, 2))\n"};
  std::vector<CodeProblem> ps(cs.size(), p);
  auto vs = grade_code(pool(), ps, cs);
  for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(vs[i].passed) << cs[i] << vs[i].reason << " " << vs[i].detail;
  EXPECT_FALSE(vs[3].passed);
}

TEST(GradeCode, PlusInputsAndTolerance) {
  CodeProblem p = plus_problem("Mbpp/900", "half", "def half(x):\n    return x / 2\n",
                               "assert abs(half(2) - 1) < 0.01\n", {"3", "1e999", "7"});
  p.atol = 1e-3;
  std::vector<CodeProblem> ps(3, p);
  std::vector<std::string> cs = {p.canonical_solution, "def half(x):\n    return x / 2 + 1e-4\n",
                                 "def half(x):\n    return 1.0 if x == 2 else x / 2 + 1\n"};
  auto vs = grade_code(pool(), ps, cs);
  EXPECT_TRUE(vs[0].passed) << vs[0].reason << " " << vs[0].detail;
  EXPECT_TRUE(vs[1].passed) << vs[1].reason << " " << vs[1].detail;  // within atol
  EXPECT_FALSE(vs[2].passed);
  EXPECT_EQ(vs[2].reason, "wrong_output");
}

// Candidates that are the same program for the same problem run once and share the verdict;
// the same text for a problem that only shares the id runs on its own. The grades are those of a
// grading that runs every candidate, in fewer jobs (counts by hand below).
TEST(GradeCode, IdenticalCandidatesAreGradedOnce) {
  CodeProblem add = he_problem();
  add.test = "assert add(1, 2) == 3\n";
  CodeProblem add_other_test = add;  // the same id, another problem: its own jobs
  add_other_test.test = "assert add(1, 1) == 5\n";
  CodeProblem half;
  half.id = "Mbpp/900";
  half.entry_point = "half";
  half.canonical_solution = "def half(x):\n    return x / 2\n";
  half.test = "assert abs(half(2) - 1) < 0.01\n";
  half.plus_inputs = {"3", "7"};
  const std::string add_right = "def add(a, b):\n    return a + b\n", add_wrong = "def add(a, b):\n    return a - b\n";
  const std::string half_close = "def half(x):\n    return x / 2 + 1e-4\n";
  const std::string half_wrong = "def half(x):\n    return 1.0 if x == 2 else x / 2 + 1\n";  // passes the base test
  half.atol = 1e-3;
  const std::vector<CodeProblem> ps = {add, add, add, add, add, add_other_test, half, half, half, half};
  const std::vector<std::string> cs = {add_right, add_wrong, add_right, add_right, add_wrong, add_right,
                                       half.canonical_solution, half_close, half.canonical_solution, half_wrong};
  auto jobs_of = [&](bool share) {
    const uint64_t before = pool().stats().submitted;
    std::vector<CodeVerdict> v = grade_code(pool(), ps, cs, {}, nullptr, share);
    return std::make_pair(v, pool().stats().submitted - before);
  };
  auto [alone, alone_jobs] = jobs_of(false);
  auto [shared, shared_jobs] = jobs_of(true);
  // Alone: 10 base tests, half's canonical solution once, 4 plus-input runs (every half passes its
  // base test). Shared: add's 2 programs, add_other_test's 1, half's 3; its canonical; 3 plus runs.
  EXPECT_EQ(alone_jobs, 15u);
  EXPECT_EQ(shared_jobs, 10u);
  const std::vector<std::string> want = {"ok", "failed_test", "ok", "ok", "failed_test", "failed_test",
                                         "ok", "ok", "ok", "wrong_output"};
  for (size_t i = 0; i < ps.size(); ++i) {
    EXPECT_EQ(alone[i].reason, want[i]) << i << ": " << alone[i].detail;
    EXPECT_EQ(shared[i].passed, alone[i].passed) << i;
    EXPECT_EQ(shared[i].reason, alone[i].reason) << i;
    EXPECT_EQ(shared[i].detail, alone[i].detail) << i;
  }
}

}  // namespace
}  // namespace azr::eval
