// Proposal validation on the real sandbox (proposer/validate.h). Every expected outcome is
// derived by hand from METHOD.md's rules and the reference's (azr-reference.md §4.2-4.3).
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "proposer/validate.h"
#include "tests/test_support.h"

namespace azr::proposer {
namespace {

namespace sb = azr::sandbox;
using buffer::TaskType;

class Validate : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { pool_ = std::make_unique<sb::Pool>(sb::PoolOptions{}); }
  static void TearDownTestSuite() { pool_.reset(); }

  static ValidateSettings settings() {
    ValidateSettings s;
    s.limits.cpu_seconds = 1;  // keeps the timeout cases short
    return s;
  }
  static Proposal dd(std::string program, std::string input, TaskType t = TaskType::Deduction) {
    Proposal p;
    p.type = t;
    p.program = std::move(program);
    p.input = std::move(input);
    return p;
  }
  static ValidationResult one(const Proposal& p, const ValidateSettings& s = settings()) {
    return validate(*pool_, {p}, s).at(0);
  }
  static std::unique_ptr<sb::Pool> pool_;
};
std::unique_ptr<sb::Pool> Validate::pool_;

TEST_F(Validate, ValidProgramBecomesTask) {
  auto r = one(dd("def f(x):\n    return [x * 2, str(x)]", "3"));
  ASSERT_TRUE(r.check.ok) << r.check.reason << ": " << r.check.detail;
  EXPECT_EQ(r.check.reason, "ok");
  EXPECT_EQ(r.task.type, TaskType::Deduction);
  EXPECT_EQ(r.task.input, "3");
  EXPECT_EQ(r.task.output, "[6, '3']");
  auto a = one(dd("def f(a, b):\n    return {b: a}", "1, 'k'", TaskType::Abduction));
  ASSERT_TRUE(a.check.ok) << a.check.reason;
  EXPECT_EQ(a.task.type, TaskType::Abduction);
  EXPECT_EQ(a.task.output, "{'k': 1}");
}

TEST_F(Validate, SyntaxError) {
  auto r = one(dd("def f(x)\n    return x", "1"));
  EXPECT_FALSE(r.check.ok);
  EXPECT_EQ(r.check.reason, "syntax_error");
  EXPECT_NE(r.check.detail.find("SyntaxError"), std::string::npos) << r.check.detail;
  EXPECT_EQ(one(dd("def f(x):\n\treturn x\n        + 1", "1")).check.reason, "syntax_error");
  EXPECT_EQ(one(dd(std::string("def f(x):\n    return x\0 + 1", 27), "1")).check.reason, "syntax_error");
}

TEST_F(Validate, BannedImports) {
  struct Case {
    std::string program;
    bool banned;
  };
  // Per dotted component of import statements (reference checks.py): `os` and `os.path` are
  // not banned (the dotted list entries never match one component); `__import__` is a call,
  // not an import statement, so the AST check does not see it (the sandbox contains it).
  std::vector<Case> cases = {
      {"import time\ndef f(x):\n    return x", true},
      {"from datetime import date\ndef f(x):\n    return x", true},
      {"def f(x):\n    import random as r\n    return x", true},
      {"import collections, hashlib\ndef f(x):\n    return x", true},
      {"from os import path as time_module\ndef f(x):\n    return x", false},
      {"from collections import deque\ndef f(x):\n    return x", false},
      {"import os.path\ndef f(x):\n    return x", false},
      {"import a.logging.b\ndef f(x):\n    return x", true},
      {"from x.threading import y\ndef f(x):\n    return x", true},
      {"from x import calendar\ndef f(x):\n    return x", true},
      {"def f(x):\n    t = __import__('time')\n    return x", false},
      {"# import time\ndef f(x):\n    return 'import time'", false},
      {"def f(x):\n    class A:\n        def g(self):\n            from time import sleep\n    return x", true},
  };
  std::vector<Proposal> ps;
  for (const auto& c : cases) ps.push_back(dd(c.program, "1"));
  auto rs = validate(*pool_, ps, settings());
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(cases[i].program);
    EXPECT_EQ(rs[i].check.reason == "banned_import", cases[i].banned) << rs[i].check.reason << ": " << rs[i].check.detail;
  }
  EXPECT_NE(rs[0].check.detail.find("time"), std::string::npos) << rs[0].check.detail;
  // The comment/string case is fully valid.
  EXPECT_TRUE(rs[11].check.ok) << rs[11].check.reason;
  // An empty banned list allows everything (the induction default).
  auto s = settings();
  s.banned_words.clear();
  EXPECT_NE(one(dd(cases[0].program, "1"), s).check.reason, "banned_import");
}

TEST_F(Validate, InductionSkipsBannedCheckLikeTheReference) {
  Proposal p;
  p.type = TaskType::Induction;
  p.program = "import time\ndef f(x):\n    return x";
  p.inputs = {"1", "2"};
  EXPECT_NE(one(p).check.reason, "banned_import");
  auto s = settings();
  s.check_banned_for_induction = true;
  EXPECT_EQ(one(p, s).check.reason, "banned_import");
}

TEST_F(Validate, InputCallRejected) {
  EXPECT_EQ(one(dd("def f(x):\n    return input()", "1")).check.reason, "input_call");
}

TEST_F(Validate, AnyExceptionIsInvalid) {
  auto v = one(dd("def f(x):\n    raise ValueError('bad value')", "1"));
  EXPECT_EQ(v.check.reason, "exception");
  EXPECT_EQ(v.check.detail, "ValueError: bad value");
  // Valid in the reference (no "error" in the status), invalid in azr.
  auto o = one(dd("class Oops(Exception):\n    pass\ndef f(x):\n    raise Oops('nope')", "1"));
  EXPECT_EQ(o.check.reason, "exception");
  EXPECT_EQ(o.check.detail, "Oops: nope");
  auto s = one(dd("def f(x):\n    raise StopIteration", "1"));
  EXPECT_EQ(s.check.reason, "exception");
  EXPECT_EQ(s.check.detail.rfind("StopIteration", 0), 0u) << s.check.detail;
  EXPECT_EQ(one(dd("def f(x):\n    return 1 // x", "0")).check.reason, "exception");
  EXPECT_EQ(one(dd("def g(x):\n    return x", "0")).check.reason, "exception");  // no f
}

TEST_F(Validate, InfiniteLoopTimesOut) {
  auto r = one(dd("def f(x):\n    while True:\n        x += 1", "0"));
  EXPECT_EQ(r.check.reason, "timeout") << r.check.detail;
}

TEST_F(Validate, SetOrderDependenceIsNonDeterministic) {
  // With 16 strings the chance that two hash seeds give the same order is negligible, and the
  // pool's seeds are fixed, so the outcome is reproducible.
  auto r = one(dd(
      "def f(x):\n    return list({'apple', 'banana', 'cherry', 'date', 'elder', 'fig', 'grape', 'hazel',"
      " 'iris', 'jujube', 'kiwi', 'lemon', 'mango', 'nut', 'olive', 'pear'})",
      "0"));
  EXPECT_EQ(r.check.reason, "non_deterministic") << r.check.detail;
  // Sorted, it is fine; a set returned as a set compares unordered, so it is fine too.
  EXPECT_TRUE(one(dd("def f(x):\n    return sorted({'apple', 'banana', 'cherry'})", "0")).check.ok);
  EXPECT_TRUE(one(dd("def f(x):\n    return {'apple', 'banana', 'cherry', 'date', 'elder'}", "0")).check.ok);
  // hash() of a str depends on the seed.
  EXPECT_EQ(one(dd("def f(x):\n    return str(hash('abc'))", "0")).check.reason, "non_deterministic");
}

TEST_F(Validate, OutputTooLarge) {
  EXPECT_EQ(one(dd("def f(x):\n    return 'a' * 398", "0")).check.reason, "ok");  // repr = 400 chars
  auto r = one(dd("def f(x):\n    return 'a' * 399", "0"));                        // 401 chars
  EXPECT_EQ(r.check.reason, "output_too_large");
  EXPECT_EQ(one(dd("def f(x):\n    return list(range(10 ** 6))", "0")).check.reason, "output_too_large");
  EXPECT_EQ(one(dd("def f(x):\n    print('x' * 10 ** 6)\n    return 1", "0")).check.reason, "output_too_large");
  // Code points, not bytes: 300 two-byte characters fit.
  EXPECT_EQ(one(dd("def f(x):\n    return 'é' * 300", "0")).check.reason, "ok");
}

TEST_F(Validate, UnrepresentableResults) {
  for (const char* prog : {"def f(x):\n    return (i for i in range(3))", "def f(x):\n    return lambda y: y",
                           "def f(x):\n    return object()", "class A:\n    pass\ndef f(x):\n    return A()",
                           "def f(x):\n    return [1, {2: print}]"}) {
    SCOPED_TRACE(prog);
    auto r = one(dd(prog, "0"));
    EXPECT_EQ(r.check.reason, "unrepresentable") << r.check.detail;
  }
}

// Grading reads outputs back with ast.literal_eval, so an output whose repr it cannot read (or
// reads as another value) makes a task no answer solves. The truth is CPython's own
// literal_eval(repr(v)) == v, run outside the sandbox on the same function.
Proposal induction(std::string program, std::vector<std::string> inputs);  // below

bool cpython_reads_back(const std::string& program) {
  const std::string check =
      "import ast, sys\ng = {}\nexec(sys.stdin.read(), g)\nv = g['f'](0)\n"
      "try:\n    ok = ast.literal_eval(repr(v)) == v\nexcept ValueError:\n    ok = False\n"
      "sys.stdout.write('yes' if ok else 'no')\n";
  const auto r = azr::testing::run_process({azr::testing::env_or_fail("AZR_PYTHON"), "-S", "-c", check}, program);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return r.out == "yes";
}

TEST_F(Validate, OutputsMustReadBackAsLiterals) {
  const std::vector<std::string> results = {
      "float('inf')", "[1, float('-inf')]", "{'a': float('nan')}", "complex(1, float('inf'))", "frozenset([4])",
      "bytearray(b'ab')", "...", "{frozenset([1]): 2}", "(1, [2, {3: ...}])", "{(1, 2): frozenset()}",
      // and what reads back
      "1e308", "-0.0", "complex(-0.0, 1)", "set()", "{1, 2}", "b'x'", "(1+2j)", "{(1, 2): [None, True]}",
      "10 ** 100", "[[], {}, ()]"};
  for (const std::string& result : results) {
    const std::string program = "def f(x):\n    return " + result;
    SCOPED_TRACE(program);
    const bool literal = cpython_reads_back(program);
    auto r = one(dd(program, "0"));
    EXPECT_EQ(r.check.ok, literal) << r.check.reason << ": " << r.check.detail;
    if (!literal) {
      EXPECT_EQ(r.check.reason, "output_not_literal");
      EXPECT_NE(r.check.detail.find("not a Python literal"), std::string::npos) << r.check.detail;
    }
  }
  // Induction: every output is checked; the first that fails names its input.
  auto r = one(induction("def f(x):\n    return 1 / x if x else float('inf')", {"1", "0"}));
  EXPECT_EQ(r.check.reason, "output_not_literal");
  EXPECT_EQ(r.check.detail.rfind("input 1: ", 0), 0u) << r.check.detail;
}

TEST_F(Validate, InputMustBeLiteral) {
  EXPECT_EQ(one(dd("def f(x):\n    return x", "len([1])")).check.reason, "input_not_literal");
  EXPECT_EQ(one(dd("def f(x):\n    return x", "0) or (True")).check.reason, "input_not_literal");
  auto s = settings();
  s.input_mode = sb::InputMode::Expression;
  EXPECT_EQ(one(dd("def f(x):\n    return x", "len([1])"), s).task.output, "1");
}

TEST_F(Validate, UnicodeStrings) {
  auto r = one(dd("def f(s):\n    return s + 'é😀' + \"\\n'\"", "'ñ中'"));
  ASSERT_TRUE(r.check.ok) << r.check.reason << ": " << r.check.detail;
  EXPECT_EQ(r.task.output, "\"ñ中é😀\\n'\"");  // Python picks double quotes here
  auto c = one(dd("def f(s):\n    return len(s)  # ünïcödé comment ' \\ \"\"\"", "'héllo'"));
  EXPECT_EQ(c.task.output, "5");
}

TEST_F(Validate, StrLiteralRoundTrip) {
  std::string tricky = std::string("a'b\"c\\d\ne\rf\tg") + std::string(1, '\0') + "\x01\x7f é 中 😀 '''\"\"\"\\x41";
  auto r = sb::evaluate(*pool_, "def f(s):\n    return s", python_str_literal(tricky));
  ASSERT_EQ(r.status, sb::Status::Ok) << r.error_type << ": " << r.message;
  EXPECT_EQ(r.value->as_bytes(), tricky);
  // Invalid UTF-8 becomes U+FFFD instead of breaking the literal.
  auto bad = sb::evaluate(*pool_, "def f(s):\n    return s", python_str_literal("a\xff\xc0\xed\xa0\x80z"));
  ASSERT_EQ(bad.status, sb::Status::Ok) << bad.message;
  EXPECT_EQ(bad.repr, "'a\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbdz'");
}

TEST_F(Validate, AstIsImportableInTheSandbox) {
  auto r = sb::evaluate(*pool_, "import ast\ndef f(s):\n    return type(ast.parse(s).body[0]).__name__", "'x = 1'");
  ASSERT_EQ(r.status, sb::Status::Ok) << r.error_type << ": " << r.message;
  EXPECT_EQ(r.repr, "'Assign'");
}

Proposal induction(std::string program, std::vector<std::string> inputs) {
  Proposal p;
  p.type = TaskType::Induction;
  p.program = std::move(program);
  p.inputs = std::move(inputs);
  p.message = "squares plus one";
  return p;
}

TEST_F(Validate, InductionAllInputsMustRun) {
  std::vector<std::string> ins;
  for (int i = 1; i <= 10; ++i) ins.push_back(std::to_string(i));
  auto ok = one(induction("def f(x):\n    return 100 // x", ins));
  ASSERT_TRUE(ok.check.ok) << ok.check.reason << ": " << ok.check.detail;
  EXPECT_EQ(ok.task.type, TaskType::Induction);
  EXPECT_EQ(ok.task.inputs, ins);
  EXPECT_EQ(ok.task.outputs,
            (std::vector<std::string>{"100", "50", "33", "25", "20", "16", "14", "12", "11", "10"}));
  EXPECT_EQ(ok.task.message, "squares plus one");

  auto bad_ins = ins;
  bad_ins[6] = "0";
  bad_ins[8] = "'x'";
  auto bad = one(induction("def f(x):\n    return 100 // x", bad_ins));
  EXPECT_EQ(bad.check.reason, "exception");
  EXPECT_EQ(bad.check.detail.rfind("input 6: ZeroDivisionError", 0), 0u) << bad.check.detail;

  // Only the last `induction_inputs` are kept.
  auto s = settings();
  s.induction_inputs = 3;
  auto last = one(induction("def f(x):\n    return x", ins), s);
  EXPECT_EQ(last.task.inputs, (std::vector<std::string>{"8", "9", "10"}));
  EXPECT_EQ(one(induction("def f(x):\n    return x", {})).check.reason, "no_inputs");
}

// An input the sandbox lost (internal_error, which the trainer masks) decides nothing while
// another input fails: that one is the proposal's fault. The pool loses every run of input 3.
TEST_F(Validate, AnInputTheSandboxLostDecidesOnlyWhenNoOtherFails) {
  sb::PoolOptions o;
  o.workers = 2;
  // Every run of input 3; only the primary-seed run of input 4.
  o.inject_fault = [](const sb::Job& j) {
    return j.inputs.size() == 1 && (j.inputs[0] == "3" || (j.inputs[0] == "4" && j.seed == sb::SeedClass::Primary));
  };
  sb::Pool pool(o);
  std::vector<std::string> ins;
  for (int i = 1; i <= 10; ++i) ins.push_back(std::to_string(i));
  auto lost = validate(pool, {induction("def f(x):\n    return 100 // x", ins)}, settings()).at(0);
  EXPECT_EQ(lost.check.reason, "internal_error");
  EXPECT_EQ(lost.check.detail.rfind("input 2: ", 0), 0u) << lost.check.detail;
  ins[6] = "0";  // after the lost input 2
  auto bad = validate(pool, {induction("def f(x):\n    return 100 // x", ins)}, settings()).at(0);
  EXPECT_EQ(bad.check.reason, "exception");
  EXPECT_EQ(bad.check.detail.rfind("input 6: ZeroDivisionError", 0), 0u) << bad.check.detail;
  // Deduction: the lost run is the only one.
  EXPECT_EQ(validate(pool, {dd("def f(x):\n    return x", "3")}, settings()).at(0).check.reason, "internal_error");
  // The primary run lost, the other hash seed's run raised: that decides.
  auto other = validate(pool, {dd("def f(x):\n    return 1 // (x - 4)", "4")}, settings()).at(0);
  EXPECT_EQ(other.check.reason, "exception");
  EXPECT_EQ(other.check.detail.rfind("(run with another hash seed) ZeroDivisionError", 0), 0u) << other.check.detail;
}

// The static checker hitting its limit on a program too large to parse in time is the program's
// doing: a timeout, which is punished, not internal_error, which the trainer would mask.
TEST_F(Validate, StaticCheckerLimitsAreTheProgramsFault) {
  std::string program = "def f(x):\n    return x\n";
  for (int i = 0; i < 200000; ++i) program += "y" + std::to_string(i) + " = [" + std::to_string(i) + "]\n";
  auto s = settings();
  s.limits.cpu_seconds = 0.2;
  auto r = one(dd(program, "1"), s);
  EXPECT_FALSE(r.check.ok);
  EXPECT_TRUE(r.check.reason == "timeout" || r.check.reason == "memory") << r.check.reason << ": " << r.check.detail;
  EXPECT_EQ(r.check.detail.rfind("static checker: ", 0), 0u) << r.check.detail;
}

TEST_F(Validate, MixedBatchKeepsOrder) {
  std::vector<Proposal> ps = {dd("def f(x):\n    return x + 1", "1"), dd("def f(x)", "1"),
                              dd("import time\ndef f(x):\n    return x", "1"),
                              dd("def f(x):\n    return x - 1", "1", TaskType::Abduction),
                              induction("def f(x):\n    return -x", {"1", "2"})};
  auto rs = validate(*pool_, ps, settings());
  ASSERT_EQ(rs.size(), 5u);
  EXPECT_EQ(rs[0].task.output, "2");
  EXPECT_EQ(rs[1].check.reason, "syntax_error");
  EXPECT_EQ(rs[2].check.reason, "banned_import");
  EXPECT_EQ(rs[3].task.output, "0");
  EXPECT_EQ(rs[4].task.outputs, (std::vector<std::string>{"-1", "-2"}));
}

}  // namespace
}  // namespace azr::proposer
