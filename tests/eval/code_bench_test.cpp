// Code benchmarks on the real sandbox: every benchmark loads with its documented size, every
// canonical solution passes (base tests and EvalPlus plus inputs), and systematically wrong
// completions pass none.
#include <gtest/gtest.h>

#include <chrono>
#include <iostream>
#include <fstream>
#include <map>

#include "eval/code_bench.h"
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
    EXPECT_FALSE(p.test.empty()) << p.id;
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
  auto vg = grade_code(pool(), ps, gold, limits);
  auto t1 = std::chrono::steady_clock::now();
  auto cg = summarize(name + " gold", ps, vg, true);
  EXPECT_EQ(cg.passed, ps.size()) << name << ": every canonical solution must pass";

  auto vn = grade_code(pool(), ps, wrong_none, limits);
  auto vo = grade_code(pool(), ps, wrong_other, limits);
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
  auto jobs_of = [&](auto grade) {
    const uint64_t before = pool().stats().submitted;
    std::vector<CodeVerdict> v = grade();
    return std::make_pair(v, pool().stats().submitted - before);
  };

  CanonicalResults kept;
  auto [first, first_jobs] = jobs_of([&] { return grade_code(pool(), ps, gold, limits, &kept); });
  EXPECT_EQ(first_jobs, 3 * n) << "base tests, canonical and candidate on the plus inputs";
  EXPECT_EQ(kept.size(), n);
  auto [second, second_jobs] = jobs_of([&] { return grade_code(pool(), ps, gold, limits, &kept); });
  EXPECT_EQ(second_jobs, 2 * n) << "no canonical solution runs again";
  auto [alone, alone_jobs] = jobs_of([&] { return grade_code(pool(), ps, gold, limits); });
  EXPECT_EQ(alone_jobs, 3 * n);
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
  EXPECT_EQ(regraded_jobs, 2 * n + 1) << "only the changed problem's canonical solution runs again";
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

TEST(LoadCodeBenchmark, Errors) {
  EXPECT_THROW(load_code_benchmark("nope", data_dir()), std::runtime_error);
  auto dir = std::filesystem::temp_directory_path() / "azr_code_bench_test";
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
                        "base64", "hashlib", "collections", "heapq", "math", "re"}) {
    ps.push_back(p);
    cs.push_back(std::string("import ") + m + "\ndef add(a, b):\n    return a + b\n");
  }
  auto vs = grade_code(pool(), ps, cs);
  for (size_t i = 0; i < vs.size(); ++i) EXPECT_TRUE(vs[i].passed) << cs[i] << vs[i].reason << " " << vs[i].detail;
}

TEST(GradeCode, PlusInputsAndTolerance) {
  CodeProblem p;
  p.id = "Mbpp/900";
  p.entry_point = "half";
  p.canonical_solution = "def half(x):\n    return x / 2\n";
  p.test = "assert abs(half(2) - 1) < 0.01\n";
  p.plus_inputs = {"3", "1e999", "7"};
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
