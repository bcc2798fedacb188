// Functional behaviour of the sandbox through its public API: values, exceptions, the job
// kinds, limits, batches, and worker replacement. Runs the real zygote (real seccomp).
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <iostream>
#include <memory>
#include <set>
#include <thread>
#include <string>
#include <vector>

#include "sandbox/checks.h"
#include "sandbox/pool.h"
#include "sandbox/protocol.h"
#include "sandbox/spawn.h"
#include "tests/test_support.h"

namespace azr::sandbox {
namespace {

const azr::testing::ProcessScratch& kScratch = azr::testing::register_process_scratch("azr-sandbox-test");

Limits fast_limits() {
  Limits l;
  l.cpu_seconds = 1.0;
  l.wall_seconds = 3.0;
  l.memory_bytes = 256ull << 20;
  return l;
}

class SandboxTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    PoolOptions o;
    o.workers = 2;
    o.alternate_workers = 1;
    pool_ = std::make_unique<Pool>(o);
  }
  static void TearDownTestSuite() { pool_.reset(); }
  static Pool& pool() { return *pool_; }
  static inline std::unique_ptr<Pool> pool_;
};

// --- values: the repr the sandbox records must be exactly CPython's ----------------------------

struct ValueCase {
  const char* name;
  const char* program;
  const char* input;
};

const ValueCase kValues[] = {
    {"none", "def f(): return None", ""},
    {"bools", "def f(): return (True, False)", ""},
    {"small_int", "def f(x): return x * 3", "-14"},
    {"big_int", "def f(): return 2**200 - 3**90", ""},
    {"negative_big_int", "def f(): return -(7**99)", ""},
    {"int64_edges", "def f(): return [2**63 - 1, -2**63, 2**63, -2**63 - 1, 2**64]", ""},
    {"floats", "def f(): return [0.1, 1/3, 1e16, 1e15, 1.5e-5, 0.0001, -0.0, 1e300*10, -1e300*10, 2.5]", ""},
    {"nan", "def f(): return float('nan')", ""},
    {"complex", "def f(): return [1+2j, 2j, -2j, complex(-0.0, 1), complex(1.5, 0), 0j]", ""},
    {"str_escapes", "def f(): return 'a\\tb\\nc\\\\d\\'e\"\\x00\\x7f\\x80'", ""},
    {"str_quotes", "def f(): return [\"it's\", 'say \"hi\"', 'both \\' and \"']", ""},
    {"str_unicode", "def f(): return 'h\\u00e9llo \\u4e16\\u754c \\U0001F600 \\u200b \\u2028 \\ud800'", ""},
    {"bytes", "def f(): return [b'abc', b'\\x00\\xff\\n', bytearray(b'xy'), b\"'\"]", ""},
    {"containers", "def f(): return ((), (1,), [], {}, set(), frozenset(), [[1, [2, (3,)]], {'k': {4: None}}])", ""},
    {"sets", "def f(): return ({3, 1, 2}, frozenset({'b', 'a'}), {1, 2.5, True})", ""},
    {"dict_order", "def f(): return {'z': 1, 'a': 2, 3: [4]}", ""},
    {"ellipsis", "def f(): return ...", ""},
    {"args_kwargs", "def f(a, b=2, *, c=3): return (a, b, c)", "1, c=[5, {6}]"},
    {"input_literals", "def f(*a): return a", "-1, 2.5e3, 'x', b'y', (1,), {1: 2}, {3}, set(), None, True, 1+2j"},
    {"string_ops", "def f(s): return sorted(set(s.split())), s.upper()[::-1]", "'the quick brown the fox'"},
};

void PrintTo(const ValueCase& c, std::ostream* os) { *os << c.name; }

class ValueTest : public SandboxTest, public ::testing::WithParamInterface<ValueCase> {};

TEST_P(ValueTest, ReprMatchesCPython) {
  const ValueCase& c = GetParam();
  CallResult r = evaluate(pool(), c.program, c.input, fast_limits());
  ASSERT_EQ(r.status, Status::Ok) << r.error_type << ": " << r.message;
  EXPECT_EQ(r.repr, azr::testing::reference_repr(c.program, c.input));
}

INSTANTIATE_TEST_SUITE_P(Values, ValueTest, ::testing::ValuesIn(kValues),
                         [](const auto& info) { return std::string(info.param.name); });

// --- exceptions ---------------------------------------------------------------------------

struct ErrorCase {
  const char* name;
  const char* program;
  const char* input;
  Status status;
  const char* error_type;
  const char* message;  // substring; "" = don't care
};

const ErrorCase kErrors[] = {
    {"zero_division", "def f(x): return 1 / x", "0", Status::Error, "ZeroDivisionError", "division by zero"},
    {"key_error", "def f(): return {}['k']", "", Status::Error, "KeyError", "'k'"},
    {"custom_no_error_in_name", "class Oops(Exception): pass\ndef f(): raise Oops('bad thing')", "", Status::Error,
     "Oops", "bad thing"},
    {"sys_exit_zero", "import sys\ndef f(): sys.exit(0)", "", Status::Error, "SystemExit", ""},
    {"raise_system_exit", "def f(): raise SystemExit(3)", "", Status::Error, "SystemExit", "3"},
    {"keyboard_interrupt", "def f(): raise KeyboardInterrupt", "", Status::Error, "KeyboardInterrupt", ""},
    {"stop_iteration", "def f(): return next(iter([]))", "", Status::Error, "StopIteration", ""},
    {"generator_exit", "def f(): raise GeneratorExit('g')", "", Status::Error, "GeneratorExit", "g"},
    {"recursion", "def f(n): return f(n + 1)", "0", Status::Error, "RecursionError", "maximum recursion depth"},
    {"syntax_error", "def f(:\n  pass", "", Status::Error, "SyntaxError", ""},
    {"null_byte_source", "def f(): return 1\0", "", Status::Error, "ValueError", "null bytes"},
    {"no_entry", "def g(): return 1", "", Status::Error, "NameError", "no function 'f'"},
    {"entry_not_callable", "f = 3", "", Status::Error, "NameError", "no function 'f'"},
    {"module_level_raise", "raise ValueError('at import')\ndef f(): return 1", "", Status::Error, "ValueError",
     "at import"},
    {"unicode_message", "def f(): raise ValueError('\\u00fcber \\u4e16')", "", Status::Error, "ValueError",
     "\xc3\xbc" "ber"},
    {"str_raises", "class E(Exception):\n  def __str__(self): raise RuntimeError\ndef f(): raise E()", "",
     Status::Error, "E", ""},
    {"memory", "def f(): return bytearray(10**10)", "", Status::Memory, "MemoryError", ""},
    {"unrepresentable_object", "def f(): return object()", "", Status::Error, "sandbox.UnrepresentableResult", "object"},
    {"unrepresentable_generator", "def f(): return (i for i in range(3))", "", Status::Error, "sandbox.UnrepresentableResult",
     "generator"},
    {"subclass_refused", "class L(list):\n  def __repr__(self): return '[1]'\ndef f(): return L([2])", "",
     Status::Error, "sandbox.UnrepresentableResult", "L"},
    {"int_too_long_for_repr", "def f(): return 10**5000", "", Status::Error, "ValueError", "4300"},
    {"input_not_literal", "def f(x): return x", "[i for i in range(3)]", Status::Error, "sandbox.InputError", ""},
    {"input_injection", "def f(x): return x", "0) or (True", Status::Error, "sandbox.InputError", ""},
    {"input_call_escape", "def f(x): return x", "1)(2", Status::Error, "sandbox.InputError", ""},
    {"input_syntax", "def f(x): return x", "'unterminated", Status::Error, "sandbox.InputError", "SyntaxError"},
    {"input_starred", "def f(*x): return x", "*[1, 2]", Status::Error, "sandbox.InputError", "starred"},
};

void PrintTo(const ErrorCase& c, std::ostream* os) { *os << c.name; }

class ErrorTest : public SandboxTest, public ::testing::WithParamInterface<ErrorCase> {};

TEST_P(ErrorTest, TypedOutcome) {
  const ErrorCase& c = GetParam();
  std::string program(c.program, std::string_view(c.program).size() + (std::string_view(c.name) == "null_byte_source"));
  CallResult r = evaluate(pool(), program, c.input, fast_limits());
  EXPECT_EQ(status_name(r.status), status_name(c.status)) << r.error_type << ": " << r.message;
  EXPECT_EQ(r.error_type, c.error_type) << r.message;
  EXPECT_NE(r.message.find(c.message), std::string::npos) << r.message;
  EXPECT_FALSE(r.value.has_value());
}

INSTANTIATE_TEST_SUITE_P(Errors, ErrorTest, ::testing::ValuesIn(kErrors),
                         [](const auto& info) { return std::string(info.param.name); });

// --- input modes -------------------------------------------------------------------------

TEST_F(SandboxTest, ExpressionInputsAreEvaluatedInTheSandbox) {
  auto calls = run_on_inputs(pool(), "def f(xs, key=None): return sorted(xs, key=key)",
                             {"[3, 1, 2], key=lambda x: -x", "range(3)", "*([2, 1],)", "undefined_name"},
                             fast_limits(), InputMode::Expression);
  EXPECT_EQ(calls[0].repr, "[3, 2, 1]");
  EXPECT_EQ(calls[1].repr, "[0, 1, 2]");
  EXPECT_EQ(calls[2].repr, "[1, 2]");
  EXPECT_EQ(calls[3].error_type, "NameError");  // raised while evaluating the input
}

TEST_F(SandboxTest, ExpressionInputsStillCannotEscapeTheCall) {
  // Splicing "0) or (True" into `f(...)` would make the check itself true; the structure check
  // refuses it in both modes.
  for (InputMode mode : {InputMode::Literal, InputMode::Expression}) {
    CallResult r = evaluate(pool(), "def f(x): return x", "0) or (True", fast_limits(), mode);
    EXPECT_EQ(r.error_type, "sandbox.InputError");
    r = evaluate(pool(), "def f(x): return x", "0), f(1", fast_limits(), mode);
    EXPECT_EQ(r.error_type, "sandbox.InputError");
  }
}

TEST_F(SandboxTest, LiteralModeStopsAnAbductionAnswerFromRewritingF) {
  // An abduction solver sees the output; an expression "input" could swap f's code for one that
  // returns it. Literal mode (the default) refuses anything that is not data.
  std::string program = "def f(x): return x * 2";
  std::string hack = "(setattr(f, '__code__', (lambda x: 999).__code__), 1)[1]";
  EXPECT_EQ(evaluate(pool(), program, hack, fast_limits()).error_type, "sandbox.InputError");
  EXPECT_EQ(evaluate(pool(), program, hack, fast_limits(), InputMode::Expression).repr, "999");
}

TEST_F(SandboxTest, ProgramCannotRedirectInputEvaluation) {
  std::string program = "import builtins\nbuiltins.eval = lambda *a, **k: 'hijacked'\ndef f(x): return x";
  EXPECT_EQ(evaluate(pool(), program, "[1, 2]", fast_limits(), InputMode::Expression).repr, "[1, 2]");
}

TEST_F(SandboxTest, ProgramsCannotImpersonateSandboxVerdicts) {
  // A program may raise its own `class InputError`; it is reported under that name, never as
  // the sandbox's own (dotted) code, which no exception name can produce.
  CallResult r = evaluate(pool(), "class InputError(Exception): pass\ndef f(x): raise InputError('no')", "1",
                          fast_limits());
  EXPECT_EQ(r.error_type, "InputError");
  EXPECT_NE(r.error_type, kInputError);
  r = evaluate(pool(), "E = type('sandbox.InputError', (Exception,), {})\ndef f(x): raise E('no')", "1",
               fast_limits());
  EXPECT_NE(r.error_type, kInputError);
}

TEST_F(SandboxTest, ForgedRecordsAreRejectedEvenWhenTheHarnessNeverWrites) {
  // A well-formed-looking record (right layout, wrong nonce) written by the program, which then
  // exits before the harness could write the real one, or burns CPU until it is killed.
  std::string forge =
      "import os, struct\n"
      "def f():\n"
      "    value = b'i' + struct.pack('<q', 42)\n"
      "    rec = b'R' + struct.pack('<QQIB', 1, 2, 0, 0) + struct.pack('<I', len(value)) + value\n"
      "    os.write(3, rec)\n";
  Limits l = fast_limits();
  l.cpu_seconds = 0.2;
  for (const char* ending : {"    os._exit(0)\n", "    while True: pass\n"}) {
    CallResult r = evaluate(pool(), forge + ending, "", l);
    EXPECT_EQ(r.status, Status::Violation) << ending;
    EXPECT_EQ(r.error_type, "ForgedResult");
    EXPECT_FALSE(r.value.has_value());
  }
}

// --- limits ---------------------------------------------------------------------------------

TEST_F(SandboxTest, CpuLimitIsExact) {
  Limits l = fast_limits();
  l.cpu_seconds = 0.2;
  std::vector<Job> jobs(1);
  jobs[0].program = "def f():\n    while True: pass";
  jobs[0].inputs = {""};
  jobs[0].limits = l;
  JobResult r = pool().run(std::move(jobs)).at(0);
  EXPECT_EQ(r.calls[0].status, Status::Timeout);
  EXPECT_EQ(r.calls[0].error_type, "CpuTimeout");
  EXPECT_GE(r.cpu_seconds, 0.19);
  EXPECT_LT(r.cpu_seconds, 0.6);  // killed by the 0.2 s timer, not the 2 s RLIMIT_CPU backstop
}

TEST_F(SandboxTest, OutputCapKillsAFlood) {
  CallResult r = evaluate(pool(), "def f():\n    while True: print('x' * 1000)", "", fast_limits());
  EXPECT_EQ(r.status, Status::OutputLimit);
  EXPECT_EQ(r.error_type, "OutputLimit");
}

TEST_F(SandboxTest, ResultCapRefusesHugeResults) {
  Limits l = fast_limits();
  l.max_result_bytes = 1000;
  CallResult r = evaluate(pool(), "def f(): return 'y' * 5000", "", l);
  EXPECT_EQ(r.status, Status::OutputLimit);
  EXPECT_EQ(r.error_type, "ResultLimit");
}

// Results of megabytes (the EvalPlus outputs are up to 147 MB a problem) take the large path
// end to end: the encoder's one-step growth, the record written in two parts, the zygote's
// reserved buffer and 1 MiB pipe, the response sent in pieces, the supervisor's buffer sized by
// the frame. Each repr is built here independently.
TEST_F(SandboxTest, ResultsOfMegabytesArriveIntact) {
  Limits l = fast_limits();
  l.max_result_bytes = 64ull << 20;
  l.memory_bytes = 1ull << 30;
  l.cpu_seconds = 20;
  CallResult s = evaluate(pool(), "def f(n): return 'ab' * n + 'c'", "1500000", l);
  ASSERT_EQ(s.status, Status::Ok) << s.error_type << ": " << s.message;
  std::string want = "'";
  for (int i = 0; i < 1500000; ++i) want += "ab";
  want += "c'";
  EXPECT_EQ(s.repr.size(), want.size());
  EXPECT_TRUE(s.repr == want);

  std::vector<Job> jobs(1);
  jobs[0].program = "def f(n, k): return [list(range(k * n, k * n + n)), str(k) * n]";
  jobs[0].inputs = {"200000, 0", "3, 1", "200000, 2"};  // large, small, large: records stay in order
  jobs[0].limits = l;
  JobResult r = pool().run(std::move(jobs)).at(0);
  ASSERT_EQ(r.calls.size(), 3u);
  for (int k = 0; k < 3; ++k) {
    const long n = k == 1 ? 3 : 200000;
    ASSERT_EQ(r.calls[k].status, Status::Ok) << k << " " << r.calls[k].message;
    std::string want_list = "[[";
    for (long i = 0; i < n; ++i) want_list += (i ? ", " : "") + std::to_string(k * n + i);
    want_list += "], '" + std::string(static_cast<size_t>(n), static_cast<char>('0' + k)) + "']";
    EXPECT_TRUE(r.calls[k].repr == want_list) << k << ": " << r.calls[k].repr.substr(0, 80);
  }
}

TEST_F(SandboxTest, StdoutIsCapturedNotReturned) {
  std::vector<Job> jobs(1);
  jobs[0].program = "def f():\n    print('hi')\n    return 1";
  jobs[0].inputs = {""};
  JobResult r = pool().run(std::move(jobs)).at(0);
  EXPECT_EQ(r.calls[0].repr, "1");
  EXPECT_EQ(r.output, "hi\n");
}

// A program runs as a script, `__name__ == "__main__"` (as the reference runs the tasks), unless
// the job names its module otherwise (code benchmarks: what exec(code, {}) reads).
TEST_F(SandboxTest, TheProgramsNameIsTheJobsModuleName) {
  const std::string program =
      "ran = []\nif __name__ == '__main__':\n    ran.append(1)\ndef f():\n    return (__name__, ran)";
  std::vector<Job> jobs(2);
  for (Job& j : jobs) j.program = program, j.inputs = {""};
  jobs[1].module_name = "builtins";
  const std::vector<JobResult> r = pool().run(std::move(jobs));
  EXPECT_EQ(r.at(0).calls.at(0).repr, "('__main__', [1])");
  EXPECT_EQ(r.at(1).calls.at(0).repr, "('builtins', [])");
}

// --- the job kinds ----------------------------------------------------------------------------

TEST_F(SandboxTest, RunOnInputsKeepsOrderAndPerInputOutcomes) {
  auto calls = run_on_inputs(pool(), "def f(x): return 10 // x", {"1", "0", "5", "'s'", "oops("}, fast_limits());
  ASSERT_EQ(calls.size(), 5u);
  EXPECT_EQ(calls[0].repr, "10");
  EXPECT_EQ(calls[1].error_type, "ZeroDivisionError");
  EXPECT_EQ(calls[2].repr, "2");
  EXPECT_EQ(calls[3].error_type, "TypeError");
  EXPECT_EQ(calls[4].error_type, "sandbox.InputError");
}

// Each call's record carries its CPU time: a call that spends 0.3 s on the process clock reports
// at least that, one that returns at once far less, and the calls together no more than the job.
TEST_F(SandboxTest, EachCallReportsItsCpuTime) {
  Job j;
  j.program =
      "import time\n"
      "def f(s):\n"
      "    start = time.process_time()\n"
      "    while time.process_time() - start < s:\n"
      "        pass\n"
      "    return s\n";
  j.inputs = {"0.0", "0.3", "0.0"};
  j.limits = fast_limits();
  const JobResult r = pool().run({j}).at(0);
  ASSERT_EQ(r.calls.size(), 3u);
  for (const CallResult& c : r.calls) ASSERT_EQ(c.status, Status::Ok) << c.error_type << ": " << c.message;
  EXPECT_GE(r.calls[1].cpu_seconds, 0.3);
  EXPECT_LT(r.calls[0].cpu_seconds, 0.1);
  EXPECT_LT(r.calls[2].cpu_seconds, 0.1);
  EXPECT_LE(r.calls[0].cpu_seconds + r.calls[1].cpu_seconds + r.calls[2].cpu_seconds, r.cpu_seconds + 1e-3);
}

TEST_F(SandboxTest, TimeoutMidBatchKeepsEarlierResults) {
  Limits l = fast_limits();
  l.cpu_seconds = 0.3;
  auto calls = run_on_inputs(pool(), "def f(x):\n    while x: pass\n    return 'done'", {"0", "1", "0"}, l);
  ASSERT_EQ(calls.size(), 3u);
  EXPECT_EQ(calls[0].repr, "'done'");
  EXPECT_EQ(calls[1].status, Status::Timeout);
  EXPECT_EQ(calls[2].status, Status::Timeout);  // never reached
}

TEST_F(SandboxTest, CheckEqualsUsesPythonEquality) {
  std::vector<EvalRequest> reqs = {
      {"def f(): return 1", ""},                   // 1 == 1.0 == True
      {"def f(): return 1", ""},
      {"def f(): return {3, 1, 2}", ""},           // sets compare unordered
      {"def f(): return {'b': 1, 'a': 2}", ""},    // so do dicts
      {"def f(): return float('nan')", ""},        // nan != nan
      {"def f(): return [1, 2]", ""},              // list != tuple
      {"def f(): return 'x'", ""},                 // wrong answer
      {"def f(): return 'x'", ""},                 // the expected text is not a literal
      {"def f(): return 2**70", ""},
  };
  std::vector<std::string> expected = {"1.0", "True", "{1, 2, 3}", "{'a': 2, 'b': 1}", "float('nan')",
                                       "(1, 2)", "'y'", "__import__('os')", "1180591620717411303424"};
  auto r = check_equals(pool(), reqs, expected, fast_limits());
  std::vector<bool> want = {true, true, true, true, false, false, false, false, true};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(r[i].equal, want[i]) << "case " << i;
  EXPECT_EQ(r[4].expected.error_type, "sandbox.InputError");  // float('nan') is a call, not a literal
  EXPECT_EQ(r[7].expected.error_type, "sandbox.InputError");
  EXPECT_EQ(r[7].actual.status, Status::Ok);
}

TEST_F(SandboxTest, ParseLiteralsNeverRunsCode) {
  auto r = parse_literals(pool(), {"[1, (2, 3), {'k': b'v'}]", "-1.5e-3", "{1, 2}", "print(1)", "1 +"}, fast_limits());
  EXPECT_EQ(r[0].repr, "[1, (2, 3), {'k': b'v'}]");
  EXPECT_EQ(r[1].repr, "-0.0015");
  EXPECT_EQ(r[2].repr, "{1, 2}");
  EXPECT_EQ(r[3].error_type, "sandbox.InputError");
  EXPECT_EQ(r[4].error_type, "sandbox.InputError");
}

// literal_eval's message names the node that is not a literal with its address, which differs
// from child to child: the message keeps the node's type and drops the address.
TEST_F(SandboxTest, NotALiteralIsReportedTheSameEveryTime) {
  const std::vector<std::pair<std::string, std::string>> cases = {{"foo()", "<ast.Call object>"},
                                                                  {"{1: [2, x]}", "<ast.Name object>"}};
  for (const auto& [input, node] : cases) {
    std::vector<EvalRequest> reqs(4, {"def f(x): return x", input});
    std::vector<CallResult> r = evaluate(pool(), reqs, fast_limits());
    for (const CallResult& c : r) {
      EXPECT_EQ(c.error_type, "sandbox.InputError");
      EXPECT_EQ(c.message, "ValueError: malformed node or string on line 1: " + node);
    }
    std::vector<CallResult> p = parse_literals(pool(), {input, input}, fast_limits());
    for (const CallResult& c : p) EXPECT_EQ(c.message, "ValueError: malformed node or string on line 1: " + node);
  }
}

TEST_F(SandboxTest, DeterminismCheckRunsOnTwoHashSeeds) {
  std::vector<EvalRequest> reqs = {
      {"def f(x): return sorted(x)", "[3, 1, 2]"},
      {"import random\ndef f(): return random.random()", ""},
      // Order of a set of str depends on the hash seed: the same-process double run the
      // reference uses cannot see this; two workers with different seeds do.
      {"def f(): return list({'alpha', 'beta', 'gamma', 'delta', 'epsilon', 'zeta', 'eta', 'theta'})", ""},
      {"def f(): return id(object()) % 1000003", ""},
      {"def f(): return float('nan')", ""},  // same value both times, even though nan != nan
      {"def f(): return 1 // 0", ""},        // fails the same way both times
  };
  auto r = determinism(pool(), reqs, fast_limits());
  EXPECT_TRUE(r[0].deterministic);
  EXPECT_FALSE(r[1].deterministic);
  EXPECT_FALSE(r[2].deterministic) << r[2].first.repr << " vs " << r[2].second.repr;
  EXPECT_FALSE(r[3].deterministic);
  EXPECT_TRUE(r[4].deterministic);
  EXPECT_TRUE(r[5].deterministic);
}

TEST_F(SandboxTest, PrimaryWorkersAgreeWithEachOther) {
  // Every primary worker has the same seed: the recorded repr cannot depend on scheduling. A set
  // of str prints in its hash seed's order, so each result is CPython's own under seed 0, from
  // both primary workers (40 jobs at once: the pool gives each worker its share).
  const std::string program = "def f(): return {'alpha', 'beta', 'gamma', 'delta', 'eps'}";
  const std::string expected = azr::testing::reference_repr(program, "");
  std::vector<Job> jobs(40);
  for (Job& j : jobs) {
    j.program = program;
    j.inputs = {""};
    j.limits = fast_limits();
  }
  std::set<int> workers;
  for (const JobResult& r : pool().run(std::move(jobs))) {
    ASSERT_EQ(r.calls.size(), 1u);
    EXPECT_EQ(r.calls[0].status, Status::Ok) << r.calls[0].error_type;
    EXPECT_EQ(r.calls[0].repr, expected) << "worker " << r.worker;
    workers.insert(r.worker);
  }
  EXPECT_EQ(workers.size(), 2u) << "both primary workers ran jobs";
}

// --- the pool ----------------------------------------------------------------------------------

TEST_F(SandboxTest, WaitAnyReturnsEveryJobOnce) {
  std::set<uint64_t> ids;
  for (int i = 0; i < 100; ++i) {
    Job j;
    j.program = "def f(x): return x * x";
    j.inputs = {std::to_string(i)};
    ids.insert(pool().submit(std::move(j)));
  }
  std::set<uint64_t> seen;
  for (int i = 0; i < 100; ++i) {
    JobResult r = pool().wait_any();
    EXPECT_TRUE(ids.count(r.id));
    EXPECT_TRUE(seen.insert(r.id).second);
    EXPECT_EQ(r.calls[0].status, Status::Ok);
  }
  EXPECT_THROW(pool().wait_any(), std::logic_error);
}

TEST_F(SandboxTest, WorkersAreIsolatedAsDesigned) {
  for (const WorkerInfo& w : pool().workers()) {
    EXPECT_GT(w.bpf_instructions, 20u);
    EXPECT_GT(w.preimports, 10u);
    EXPECT_EQ(w.python_version.substr(0, 4), "3.11");
    if (w.namespaces != "none") {
      EXPECT_TRUE(w.pid_namespace_leader) << "worker " << w.index;
      EXPECT_TRUE(w.filesystem_hidden) << "worker " << w.index;
    } else {  // said, not silent: a host without user namespaces runs the "none" fallback
      std::cout << "[  NOTE    ] worker " << w.index << ": no namespaces on this host; pid and filesystem "
                << "isolation not checked\n";
    }
  }
}

// A dedicated pool: this test kills workers on purpose.
TEST(SandboxPoolTest, LostWorkerIsReplacedAndItsJobReported) {
  PoolOptions o;
  o.workers = 1;
  o.alternate_workers = 0;
  o.queue_depth = 2;
  Pool pool(o);
  Limits l = fast_limits();
  l.cpu_seconds = 2.0;
  Job slow;
  slow.program = "def f():\n    while True: pass";
  slow.inputs = {""};
  slow.limits = l;
  Job quick;
  quick.program = "def f(): return 'after'";
  quick.inputs = {""};
  uint64_t a = pool.submit(slow);
  uint64_t b = pool.submit(quick);  // queued behind `slow` on the same worker
  int pid = pool.workers().at(0).pid;
  usleep(200 * 1000);
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  JobResult ra = pool.wait(a);
  EXPECT_EQ(ra.calls[0].status, Status::Internal);
  EXPECT_EQ(ra.calls[0].error_type, "WorkerLost");
  JobResult rb = pool.wait(b);  // re-queued onto the replacement, not lost
  EXPECT_EQ(rb.calls[0].repr, "'after'");
  EXPECT_EQ(pool.stats().worker_restarts, 1u);
  EXPECT_NE(pool.workers().at(0).pid, pid);
  EXPECT_EQ(evaluate(pool, "def f(): return 7", "").repr, "7");
}

// A dying worker's socket hang-up and its pidfd can reach the pool in one epoll batch, and the
// second must not be read as the replacement's, which would replace a healthy worker too (seen in
// CI: worker_restarts 2 for one kill). Since replacements start on the spawner thread, the second
// event meets a worker that is down; the generation in each event's tag still guards events that
// arrive after the replacement is in. Here: two workers killed 5 ms apart, each replaced once.
TEST(SandboxPoolTest, EachLostWorkerIsReplacedOnce) {
  PoolOptions o;
  o.workers = 2;
  o.alternate_workers = 0;
  Pool pool(o);
  const int a = pool.workers().at(0).pid, b = pool.workers().at(1).pid;
  ASSERT_EQ(kill(a, SIGKILL), 0);
  usleep(5 * 1000);  // the pool wakes and starts a's replacement
  ASSERT_EQ(kill(b, SIGKILL), 0);
  // Both replacements in (they start on the spawner thread, and workers() shows one once it runs).
  for (int i = 0; i < 3000 && (pool.workers().at(0).pid == a || pool.workers().at(1).pid == b); i++)
    usleep(10 * 1000);
  EXPECT_NE(pool.workers().at(0).pid, a);
  EXPECT_NE(pool.workers().at(1).pid, b);
  // A job's result comes after the pool has handled the whole batch its worker was lost in.
  for (int i = 0; i < 4; i++) EXPECT_EQ(evaluate(pool, "def f(): return 7", "").repr, "7");
  EXPECT_EQ(pool.stats().worker_restarts, 2u);
}

// The test seam: a chosen job completes as a job on a lost worker does, and is never run; the
// others run as usual, on the same workers.
TEST(SandboxPoolTest, InjectedFaultCompletesLikeALostJobWithoutRunning) {
  PoolOptions o;
  o.workers = 1;
  o.alternate_workers = 0;
  o.inject_fault = [](const Job& j) { return j.program.find("lost") != std::string::npos; };
  Pool pool(o);
  Job lost;
  lost.program = "def f(x):\n    print('ran')\n    return 'lost'";
  lost.inputs = {"1", "2", "3"};
  Job kept;
  kept.program = "def f(x): return x + 1";
  kept.inputs = {"1"};
  std::vector<JobResult> r = pool.run({lost, kept, lost});
  ASSERT_EQ(r.size(), 3u);
  for (size_t k : {0u, 2u}) {
    ASSERT_EQ(r[k].calls.size(), 3u) << k;  // one per input, as for a lost worker's job
    for (const CallResult& c : r[k].calls) {
      EXPECT_EQ(c.status, Status::Internal);
      EXPECT_EQ(c.error_type, "InjectedFault");
    }
    EXPECT_EQ(r[k].output, "");  // never ran
  }
  EXPECT_EQ(r[1].calls.at(0).repr, "2");
  EXPECT_EQ(pool.stats().submitted, 3u);
  EXPECT_EQ(pool.stats().completed, 3u);
  EXPECT_EQ(pool.stats().worker_restarts, 0u);
}

// A child that cannot lock itself down never runs the program, and its job is the sandbox's
// failure (internal_error, which training masks). Arranged through RLIMIT_CPU: the workers inherit
// this process's hard limit, and a job whose CPU budget needs a higher one fails the child's
// setrlimit (raising a hard limit takes privilege). The process keeps the lowered limit until it
// ends; ctest runs each test in a process of its own.
TEST(SandboxPoolTest, ALockdownFailureIsInternalAndRunsNothing) {
  rlimit cpu{};
  ASSERT_EQ(getrlimit(RLIMIT_CPU, &cpu), 0);
  if (cpu.rlim_max == RLIM_INFINITY || cpu.rlim_max > 600) {
    cpu.rlim_cur = cpu.rlim_max = 600;
    ASSERT_EQ(setrlimit(RLIMIT_CPU, &cpu), 0);
  }
  PoolOptions o;
  o.workers = 1;
  o.alternate_workers = 0;
  Pool pool(o);
  Job j;
  j.program = "def f():\n    print('ran')\n    return 1";
  j.inputs = {""};
  j.limits = fast_limits();
  j.limits.cpu_seconds = double(cpu.rlim_max) + 10;
  const JobResult r = pool.run({j}).at(0);
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].status, Status::Internal);
  EXPECT_EQ(r.calls[0].error_type, "LockdownFailed");
  EXPECT_EQ(r.output, "");
  j.limits.cpu_seconds = 1;  // within the limit: the same worker runs it
  EXPECT_EQ(pool.run({j}).at(0).calls.at(0).repr, "1");
}

// A stand-in for azr-zygote: the real one, unless `refuse` exists beside it (it exits at once) or
// `hang` does (it touches marks/hanging and says no hello while `hang` is there, 10 s at most).
struct StandInZygote {
  std::filesystem::path dir, script, refuse, hang, hanging;
  explicit StandInZygote(const std::string& name) : dir(kScratch.dir() / name) {
    namespace fs = std::filesystem;
    fs::create_directories(dir / "marks");
    fs::permissions(dir, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                             fs::perms::others_read | fs::perms::others_exec);
    fs::permissions(dir / "marks", fs::perms::all | fs::perms::sticky_bit);  // the zygote's user writes here
    refuse = dir / "refuse", hang = dir / "hang", hanging = dir / "marks" / "hanging", script = dir / "azr-zygote";
    {
      std::ofstream out(script);
      out << "#!/bin/sh\n[ -e '" << refuse.string() << "' ] && exit 1\n[ -e '" << hang.string() << "' ] && { : > '"
          << hanging.string() << "'; i=0; while [ -e '" << hang.string() << "' ] && [ $i -lt 100 ]; do sleep 0.1; "
          << "i=$((i+1)); done; exit 1; }\nexec '" << default_zygote_path() << "' \"$@\"\n";
    }
    std::filesystem::permissions(script, std::filesystem::perms::owner_all | std::filesystem::perms::group_exec |
                                             std::filesystem::perms::others_read | std::filesystem::perms::others_exec);
  }
};

// A worker whose replacement cannot start (the stand-in refusing) leaves no worker of its kind.
// Jobs of that kind then complete as internal_error (NoWorkers) instead of waiting for ever, and
// the worker is tried again until it starts.
TEST(SandboxPoolTest, AWorkerThatCannotStartIsRetriedAndItsJobsDoNotWait) {
  const StandInZygote zygote("refusing-zygote");
  const std::filesystem::path& refuse = zygote.refuse;
  const std::filesystem::path& script = zygote.script;
  PoolOptions o;
  o.workers = 1;
  o.alternate_workers = 0;
  o.zygote_path = script.string();
  Pool pool(o);
  ASSERT_EQ(evaluate(pool, "def f(): return 7", "").repr, "7");
  std::ofstream(refuse).put('x');
  const int pid = pool.workers().at(0).pid;
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  for (int i = 0; i < 3000 && pool.stats().failed_starts == 0; i++) usleep(10 * 1000);
  ASSERT_GE(pool.stats().failed_starts, 1u);
  EXPECT_EQ(pool.workers().at(0).pid, -1);  // down: it named the killed zygote's pid
  // Collected on a thread of its own: the old pool queued the job for ever, and a test that
  // hangs says nothing.
  auto result = std::make_shared<std::promise<CallResult>>();
  std::future<CallResult> later = result->get_future();
  std::thread([&pool, result] { result->set_value(evaluate(pool, "def f(): return 7", "")); }).detach();
  if (later.wait_for(std::chrono::seconds(60)) != std::future_status::ready) {
    ADD_FAILURE() << "a job submitted while no worker runs was still waiting after 60 s";
    std::fflush(nullptr);
    std::_Exit(1);  // the pool cannot be destroyed under a waiting thread
  }
  const CallResult r = later.get();
  EXPECT_EQ(r.status, Status::Internal);
  EXPECT_EQ(r.error_type, "NoWorkers");
  std::filesystem::remove(refuse);
  std::string repr;
  for (int i = 0; i < 600 && repr != "7"; i++) {  // the next try comes within a minute
    repr = evaluate(pool, "def f(): return 7", "").repr;
    if (repr != "7") usleep(100 * 1000);
  }
  EXPECT_EQ(repr, "7");
  EXPECT_NE(pool.workers().at(0).pid, pid);
}

// A replacement that hangs at start-up (a zygote that never says hello) is waited for on a thread
// of its own, and the other workers' jobs go on meanwhile: the pool's I/O thread used to wait out
// the start (to the hello timeout, here the stand-in's 10 s) before it served anyone, so a job
// came back only once the start had failed.
TEST(SandboxPoolTest, AReplacementThatHangsAtStartHoldsUpNoOtherWorker) {
  const StandInZygote zygote("hanging-zygote");
  PoolOptions o;
  o.workers = 2;
  o.alternate_workers = 0;
  o.zygote_path = zygote.script.string();
  Pool pool(o);
  std::ofstream(zygote.hang).put('x');
  ASSERT_EQ(kill(pool.workers().at(0).pid, SIGKILL), 0);
  for (int i = 0; i < 3000 && !std::filesystem::exists(zygote.hanging); i++) usleep(10 * 1000);
  ASSERT_TRUE(std::filesystem::exists(zygote.hanging));
  EXPECT_EQ(evaluate(pool, "def f(): return 7", "").repr, "7");  // worker 1's
  EXPECT_EQ(pool.stats().failed_starts, 0u) << "the job came back only after the hanging start failed";
  std::filesystem::remove(zygote.hang);
}

// A zygote that sends the first bytes of its hello and then hangs fails its start at the hello
// timeout, and is killed and reaped: the rest of the hello used to be read with a blocking read,
// which held the caller (the pool's spawner) for as long as the zygote lived.
TEST(SandboxSpawnTest, AHelloCutShortFailsAtTheTimeout) {
  namespace fs = std::filesystem;
  const fs::path dir = kScratch.dir() / "half-hello";
  fs::create_directories(dir);
  fs::permissions(dir, fs::perms::owner_all | fs::perms::group_exec | fs::perms::others_exec);
  const fs::path script = dir / "azr-zygote";
  // A length of 64 bytes ('@'), then 2 of them, then 60 s of silence with the socket open.
  std::ofstream(script) << "#!/bin/sh\nprintf '\\100\\000\\000\\000ab' >&3\nexec sleep 60\n";
  fs::permissions(script, fs::perms::owner_all | fs::perms::others_read | fs::perms::others_exec);
  ZygoteSpec spec;
  spec.path = script.string();
  auto outcome = std::async(std::launch::async, [&spec]() -> std::string {
    try {
      SpawnedZygote z = spawn_zygote(spec, 1.0);
      kill(z.pid, SIGKILL);
      return "started";
    } catch (const std::runtime_error& e) {
      return e.what();
    }
  });
  if (outcome.wait_for(std::chrono::seconds(30)) != std::future_status::ready) {
    ADD_FAILURE() << "spawn_zygote was still reading a cut-short hello after 30 s, past its 1 s timeout";
    std::fflush(nullptr);
    std::_Exit(1);  // the waiting thread cannot be joined
  }
  const std::string why = outcome.get();
  EXPECT_NE(why.find("did not start within"), std::string::npos) << why;
  // Killed and reaped: no child of ours is left, running or a zombie.
  errno = 0;
  EXPECT_EQ(waitpid(-1, nullptr, WNOHANG), -1);
  EXPECT_EQ(errno, ECHILD);
}

TEST(SandboxPoolTest, MissingWorkerExecutableIsAClearError) {
  PoolOptions o;
  o.workers = 1;
  o.zygote_path = "/nonexistent/azr-zygote";
  try {
    Pool pool(o);
    FAIL() << "expected an error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/azr-zygote"), std::string::npos) << e.what();
  }
}


TEST(SandboxPoolTest, AWorkerFromAnotherBuildIsRefusedAtStart) {
  // tests/sandbox/other_build_zygote.cpp says hello in the next protocol version.
  PoolOptions o;
  o.workers = 1;
  o.zygote_path = AZR_OTHER_BUILD_ZYGOTE;
  try {
    Pool pool(o);
    FAIL() << "expected an error";
  } catch (const std::runtime_error& e) {
    const std::string why = e.what();
    EXPECT_NE(why.find(AZR_OTHER_BUILD_ZYGOTE), std::string::npos) << why;
    EXPECT_NE(why.find("another build"), std::string::npos) << why;
    EXPECT_NE(why.find("protocol " + std::to_string(protocol::kProtocolVersion + 1)), std::string::npos) << why;
  }
}

}  // namespace
}  // namespace azr::sandbox
