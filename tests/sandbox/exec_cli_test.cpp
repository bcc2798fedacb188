// `azr exec` and the command's conventions (exit codes 0/1/2, --help, --version), run as a
// user runs them: the real binary in a subprocess.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "tests/test_support.h"

namespace {

using azr::testing::run_process;
using azr::testing::json_lines;
using nlohmann::json;

std::string azr() { return azr::testing::env_or_fail("AZR_BIN"); }

std::string temp_file(const std::string& text, const char* suffix) {
  std::string path = ::testing::TempDir() + "azr_exec_" + std::to_string(getpid()) + suffix;
  std::ofstream(path) << text;
  return path;
}

TEST(ExecCli, FileWithInputPrintsWhatTrainingRecords) {
  std::string f = temp_file("def f(a, b):\n    print('side')\n    return sorted(set(a))[:b]\n", ".py");
  auto r = run_process({azr(), "exec", f, "--input", "[3, 1, 2, 3], 2", "--workers", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto out = json_lines(r.out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0]["status"], "ok");
  EXPECT_EQ(out[0]["output"], "[1, 2]");
  EXPECT_EQ(out[0]["stdout"], "side\n");
  EXPECT_TRUE(out[0]["wall_ms"].is_number());
  std::remove(f.c_str());
}

TEST(ExecCli, JsonlFromStdinKeepsInputOrderAndIds) {
  std::string input;
  for (int i = 0; i < 30; ++i)
    input += json{{"id", i}, {"program", "def f(x):\n    return x * x"}, {"input", std::to_string(i)}}.dump() + "\n";
  input += json{{"id", "boom"}, {"program", "def f():\n    return 1/0"}, {"input", ""}}.dump() + "\n";
  input += json{{"id", "loop"}, {"program", "def f():\n    while True: pass"}, {"input", ""}}.dump() + "\n";
  auto r = run_process({azr(), "exec", "--jsonl", "-", "--timeout", "0.2", "--workers", "2"}, input);
  ASSERT_EQ(r.exit_code, 0) << r.err;  // every job ran, whatever the statuses
  auto out = json_lines(r.out);
  ASSERT_EQ(out.size(), 32u);
  for (int i = 0; i < 30; ++i) {
    EXPECT_EQ(out[i]["id"], i);
    EXPECT_EQ(out[i]["output"], std::to_string(i * i));
  }
  EXPECT_EQ(out[30]["status"], "error");
  EXPECT_EQ(out[30]["error_type"], "ZeroDivisionError");
  EXPECT_EQ(out[31]["status"], "timeout");
}

TEST(ExecCli, DeterminismFlagReportsBothRuns) {
  std::string input = json{{"program", "import random\ndef f():\n    return random.random()"}, {"input", ""}}.dump() +
                      "\n" + json{{"program", "def f():\n    return 42"}, {"input", ""}}.dump() + "\n";
  auto r = run_process({azr(), "exec", "--jsonl", "-", "--determinism", "--workers", "1"}, input);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto out = json_lines(r.out);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0]["deterministic"], false);
  EXPECT_TRUE(out[0].contains("second_run"));
  EXPECT_EQ(out[1]["deterministic"], true);
}

TEST(ExecCli, BadJsonlLineIsNamedAndNothingRuns) {
  std::string input = json{{"program", "def f(): return 1"}, {"input", ""}}.dump() + "\n{not json\n";
  auto r = run_process({azr(), "exec", "--jsonl", "-"}, input);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("<stdin>:2"), std::string::npos) << r.err;
  EXPECT_EQ(r.out, "");  // validated before anything ran
}

TEST(ExecCli, MissingOrMistypedFieldsAreNamed) {
  auto missing = run_process({azr(), "exec", "--jsonl", "-"}, "{\"program\": \"def f(): return 1\"}\n");
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(missing.err.find("<stdin>:1: field 'input'"), std::string::npos) << missing.err;
  auto typed = run_process({azr(), "exec", "--jsonl", "-"}, "{\"program\": 3, \"input\": \"\"}\n");
  EXPECT_EQ(typed.exit_code, 2);
  EXPECT_NE(typed.err.find("field 'program' must be a string"), std::string::npos) << typed.err;
  auto not_object = run_process({azr(), "exec", "--jsonl", "-"}, "[1, 2]\n");
  EXPECT_EQ(not_object.exit_code, 2);
}

TEST(ExecCli, MissingFileIsAUsageError) {
  auto r = run_process({azr(), "exec", "--jsonl", "/nonexistent/jobs.jsonl"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("/nonexistent/jobs.jsonl"), std::string::npos) << r.err;
}

// Neither a file nor --jsonl says what is missing (it said "(not both)"); both say not both.
TEST(ExecCli, NoProgramAndTwoProgramsAreToldApart) {
  auto none = run_process({azr(), "exec"});
  EXPECT_EQ(none.exit_code, 2);
  EXPECT_NE(none.err.find("azr: exec: give a FILE.py or --jsonl FILE\n"), std::string::npos) << none.err;
  auto both = run_process({azr(), "exec", "/dev/null", "--jsonl", "-"});
  EXPECT_EQ(both.exit_code, 2);
  EXPECT_NE(both.err.find("not both"), std::string::npos) << both.err;
}

// The backends line says what this build can run on: the CPU always; CUDA, with the GPU
// architectures compiled in, exactly when CMake found nvcc (AZR_EXPECT_CUDA, from CMake).
TEST(ExecCli, VersionListsTheBackendsCompiledIn) {
  const auto r = run_process({azr(), "--version"});
  ASSERT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("backends: cpu (OpenBLAS"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("; matmul precisions: fp32, bf16\n"), std::string::npos) << r.out;
  const bool cuda = r.out.find("cuda (sm_") != std::string::npos;
  EXPECT_EQ(cuda, bool(AZR_EXPECT_CUDA)) << r.out;
  if (AZR_EXPECT_CUDA) {
    EXPECT_NE(r.out.find("sm_90"), std::string::npos) << r.out;  // the default architectures
  }
  const std::string host = AZR_EXPECT_MPI ? "host (mpi, tcp)" : "host (tcp)";
  EXPECT_NE(r.out.find("\ngradient all-reduce: " + host + (AZR_EXPECT_NCCL ? ", nccl\n" : "\n")), std::string::npos)
      << r.out;
}

// The CPU backend names OpenBLAS's kernel set. Debian 12's OpenBLAS falls back to its SSE3
// kernels ("Prescott") on CPUs newer than it knows; on a CPU with AVX2 azr runs on a set that uses
// it (kernels/cpu/blas_core.h), unless the user named one (OPENBLAS_CORETYPE), which it keeps.
TEST(ExecCli, VersionNamesTheBlasKernelsAndAvx2CpusGetKernelsThatUseIt) {
  auto core_of = [](const std::string& out) {
    const std::string open = "backends: cpu (OpenBLAS ";
    const size_t at = out.find(open);
    const size_t end = out.find(", OpenMP)", at);
    return at == std::string::npos || end == std::string::npos ? std::string("(none)")
                                                                : out.substr(at + open.size(), end - at - open.size());
  };
  auto run = [&](const std::vector<std::string>& with) {
    const azr::testing::ChildEnvironment env(with, {"OPENBLAS_CORETYPE=", "AZR_OPENBLAS_"});
    return run_process({azr(), "--version"}, "", env.envp());
  };
  auto r = run({});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string core = core_of(r.out);
  EXPECT_FALSE(core.empty() || core == "(none)") << r.out;
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    EXPECT_NE(core.rfind("Prescott", 0), 0u) << core;
  }
  r = run({"OPENBLAS_CORETYPE=Prescott"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(core_of(r.out), "Prescott") << r.out;
}

TEST(ExecCli, UsageConventions) {
  EXPECT_EQ(run_process({azr(), "--version"}).exit_code, 0);
  EXPECT_NE(run_process({azr(), "--version"}).out.find("azr "), std::string::npos);
  EXPECT_EQ(run_process({azr(), "--help"}).exit_code, 0);
  EXPECT_EQ(run_process({azr(), "exec", "--help"}).exit_code, 0);
  EXPECT_EQ(run_process({azr()}).exit_code, 2);                           // no subcommand
  EXPECT_EQ(run_process({azr(), "frobnicate"}).exit_code, 2);             // unknown subcommand
  EXPECT_EQ(run_process({azr(), "exec", "--no-such-flag"}).exit_code, 2);
  EXPECT_EQ(run_process({azr(), "exec"}).exit_code, 2);                   // neither FILE nor --jsonl
  EXPECT_EQ(run_process({azr(), "exec", "--jsonl", "-", "--timeout", "-1"}, "").exit_code, 2);
}

// A read that fails part-way was taken for the end of the input: /proc/self/mem fails its first
// read (EIO), and ran as an empty input, exit 0.
TEST(ExecCli, AReadThatFailsIsAnErrorNotTheEndOfTheInput) {
  const auto r = run_process({azr(), "exec", "--jsonl", "/proc/self/mem"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("/proc/self/mem: the read failed after line 0 (Input/output error)"), std::string::npos)
      << r.err;
}

// A path the system refuses (here a name past 255 bytes; for a user, a directory not theirs)
// leaked the library's "filesystem error: status: File name too long [...]" with exit 1, or was
// called a missing file. It is the path and the system's reason, exit 2.
TEST(ExecCli, APathTheSystemRefusesIsNamedWithItsReason) {
  const std::string long_name = "/tmp/" + std::string(300, 'a');
  const std::string shipped = azr::testing::env_or_fail("AZR_TESTS_DIR") + "/../models/quickstart";
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{azr(), "memory", long_name},
        std::vector<std::string>{azr(), "tokenize", "--tokenizer", long_name, "--text", "x"},
        std::vector<std::string>{azr(), "generate", "--model", shipped, "--tokenizer", long_name, "--prompt", "x"},
        std::vector<std::string>{azr(), "generate", "--model", long_name, "--prompt", "x"}}) {
    const auto r = run_process(args);
    EXPECT_EQ(r.exit_code, 2) << args[1] << ": " << r.err;
    EXPECT_NE(r.err.find(long_name), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("File name too long"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("filesystem error"), std::string::npos) << r.err;
  }
}

// Every command's --help as a user reads it: CLI11 showed a negatable flag as
// "--decode-graphs,--no-decode-graphs{false}" and two checks of one flag chained
// ("FLOAT:greater than 0:between 0 and 1048576=80").
TEST(ExecCli, EveryCommandsHelpReadsAsText) {
  const std::regex chained_checks("(INT|UINT|FLOAT|TEXT)(:[^ =:\n]+( [^ =:\n]+)*){2,}");
  for (const std::string command : {"exec", "tokenize", "generate", "logprobs", "eval", "train", "bootstrap", "memory",
                                    "buffer stats", "buffer list", "buffer show", "buffer export", "buffer import",
                                    "buffer migrate", "task validate", "task grade", "task prompt"}) {
    std::vector<std::string> args = {azr()};
    std::istringstream words(command);
    for (std::string w; words >> w;) args.push_back(w);
    args.push_back("--help");
    const auto r = run_process(args);
    ASSERT_EQ(r.exit_code, 0) << command << ": " << r.err;
    EXPECT_EQ(r.out.find("{false}"), std::string::npos) << command << ":\n" << r.out;
    EXPECT_EQ(r.out.find("{true}"), std::string::npos) << command << ":\n" << r.out;
    std::smatch m;
    EXPECT_FALSE(std::regex_search(r.out, m, chained_checks)) << command << ": " << m.str();
  }
}

// An unknown word where a command is expected is named, with the commands there are (CLI11 alone
// said "A subcommand is required"). The lists are the README's, written out by hand.
TEST(ExecCli, UnknownCommandsAreNamedWithTheCommandsThereAre) {
  const auto top = run_process({azr(), "frobnicate"});
  EXPECT_EQ(top.exit_code, 2);
  EXPECT_NE(top.err.find("unknown command 'frobnicate' for azr; the commands: exec, buffer, tokenize, generate, "
                         "logprobs, task, eval, train, bootstrap, memory"),
            std::string::npos)
      << top.err;
  const auto nested = run_process({azr(), "buffer", "bogus", "x.db"});
  EXPECT_EQ(nested.exit_code, 2);
  EXPECT_NE(nested.err.find("unknown command 'bogus' for azr buffer; the commands: stats, list, show, export, "
                            "import, migrate"),
            std::string::npos)
      << nested.err;
  // No command at all: CLI11 said "A subcommand is required", naming none.
  const auto bare = run_process({azr()});
  EXPECT_EQ(bare.exit_code, 2);
  EXPECT_NE(bare.err.find("azr: a command is missing after 'azr': exec, buffer, tokenize, generate, logprobs, task, "
                          "eval, train, bootstrap, memory"),
            std::string::npos)
      << bare.err;
  const auto task = run_process({azr(), "task"});
  EXPECT_EQ(task.exit_code, 2);
  EXPECT_NE(task.err.find("a command is missing after 'azr task': validate, grade, prompt"), std::string::npos)
      << task.err;
  // An unknown option where a command is expected is that, not a missing command; a known one
  // (--help, --version) still does what it says.
  const auto option = run_process({azr(), "--bogus"});
  EXPECT_EQ(option.exit_code, 2);
  EXPECT_NE(option.err.find("azr: unknown option '--bogus' for azr (azr --help lists its options)"), std::string::npos)
      << option.err;
  const auto nested_option = run_process({azr(), "buffer", "-q1"});
  EXPECT_EQ(nested_option.exit_code, 2);
  EXPECT_NE(nested_option.err.find("azr: unknown option '-q' for azr buffer (azr buffer --help lists its options)"),
            std::string::npos)
      << nested_option.err;
  // A command's own option, its value glued on, with an argument missing: the argument is named.
  const auto glued = run_process({azr(), "buffer", "export", "-otasks.jsonl"});
  EXPECT_EQ(glued.exit_code, 2);
  EXPECT_EQ(glued.err.find("unknown option"), std::string::npos) << glued.err;
  EXPECT_NE(glued.err.find("db"), std::string::npos) << glued.err;
  EXPECT_EQ(run_process({azr(), "--version"}).exit_code, 0);
  EXPECT_EQ(run_process({azr(), "buffer", "--help"}).exit_code, 0);
}

// An empty path ("$RUN" with RUN unset) is refused, naming the option: it read as the option left
// out (the default run directory, stdout), and `buffer import ''` put the tasks in SQLite's
// temporary database and said it had imported them.
TEST(ExecCli, AnEmptyPathIsRefusedNamingItsOption) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"buffer", "import", "", "tasks.jsonl"}, "db"},
      {{"buffer", "export", "b.db", "-o", ""}, "--output"},
      {{"train", "configs/quickstart.toml", "--run-dir", ""}, "--run-dir"},
      {{"train", "--resume", ""}, "--resume"},
      {{"bootstrap", "configs/bootstrap.toml", "--output", ""}, "--output"},
      {{"eval", "--model", "", "--bench", "gsm8k"}, "--model"},
      {{"tokenize", "--tokenizer", ""}, "--tokenizer"},
      {{"memory", ""}, "model"},
  };
  for (const auto& [args, option] : cases) {
    std::vector<std::string> argv = {azr()};
    argv.insert(argv.end(), args.begin(), args.end());
    const auto r = run_process(argv);
    EXPECT_EQ(r.exit_code, 2) << args[0] << " " << option << ": " << r.err;
    EXPECT_NE(r.err.find("azr: " + option + ": an empty path"), std::string::npos) << r.err;
  }
}

// Numeric flags refuse what is not a finite number: NaN passed CLI11's range checks (every
// comparison with NaN is false), and --memory nan ran a job with no memory limit at all. Bounds
// are named as written, not as CLI11's 309-digit "0.000000 to 17976931348623157...".
TEST(ExecCli, NumericFlagsRefuseNaNAndInfinityAndNameTheirBounds) {
  const std::string program = temp_file("def f(n):\n    return len(bytearray(n))\n", ".py");
  for (const char* value : {"nan", "NaN", "inf", "-inf", "1e999", "12abc", ""}) {
    const auto r = run_process({azr(), "exec", program, "--input", "3", "--memory", value});
    EXPECT_EQ(r.exit_code, 2) << value << ": " << r.out;
    EXPECT_NE(r.err.find("--memory: expected a finite number, got '" + std::string(value) + "'"), std::string::npos)
        << r.err;
    EXPECT_EQ(r.out, "") << "no job may run: " << value;
  }
  const auto small = run_process({azr(), "exec", program, "--input", "3", "--memory", "8"});
  EXPECT_EQ(small.exit_code, 2);
  EXPECT_NE(small.err.find("--memory: 8 is too small: it must be between 16 and 1048576"), std::string::npos)
      << small.err;
  const auto zero = run_process({azr(), "memory", "azr-tiny", "--seq-len", "0"});
  EXPECT_EQ(zero.exit_code, 2);
  EXPECT_NE(zero.err.find("--seq-len: 0 is too small: it must be between 1 and 4194304"), std::string::npos)
      << zero.err;
  const auto budget = run_process({azr(), "memory", "azr-tiny", "--budget-gib", "nan"});
  EXPECT_EQ(budget.exit_code, 2);
  EXPECT_NE(budget.err.find("--budget-gib: expected a finite number"), std::string::npos) << budget.err;
  // An output limit past 128 MiB: the output and the results travel in one message of at most
  // 256 MiB, past which the worker was lost and the program's flood reported as internal_error.
  const auto flood = run_process({azr(), "exec", program, "--input", "3", "--output-limit", "134217729"});
  EXPECT_EQ(flood.exit_code, 2);
  EXPECT_NE(flood.err.find("--output-limit: 134217729 is too large: it must be between 0 and 134217728"),
            std::string::npos)
      << flood.err;
  // An integer flag given a number it cannot hold, or no value: CLI11 said "Could not convert:
  // --workers = 2.5" and "--workers: 1 required INT:INT in [0 - 1024] missing".
  const auto fraction = run_process({azr(), "exec", program, "--input", "3", "--workers", "2.5"});
  EXPECT_EQ(fraction.exit_code, 2);
  EXPECT_EQ(fraction.err, "azr: --workers: expected a whole number, got '2.5'\n");
  const auto exponent = run_process({azr(), "memory", "azr-tiny", "--seq-len", "1e3"});
  EXPECT_EQ(exponent.exit_code, 2);
  EXPECT_EQ(exponent.err, "azr: --seq-len: expected a whole number, got '1e3'\n");
  const auto missing = run_process({azr(), "memory", "azr-tiny", "--seq-len"});
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_EQ(missing.err, "azr: --seq-len: its value is missing\n");
  // The bounds themselves are accepted.
  EXPECT_EQ(run_process({azr(), "exec", program, "--input", "3", "--memory", "16"}).exit_code, 0);
  EXPECT_EQ(run_process({azr(), "exec", program, "--input", "3", "--output-limit", "134217728"}).exit_code, 0);
  std::remove(program.c_str());
}

// A directory given as a JSONL input opened as a stream that reads as empty: 0 jobs, exit 0.
TEST(ExecCli, ADirectoryAsTheJsonlInputIsRefused) {
  const std::string dir = ::testing::TempDir();
  const auto r = run_process({azr(), "exec", "--jsonl", dir});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find(dir + ": is a directory, not a file"), std::string::npos) << r.err;
  EXPECT_EQ(r.out, "");
}

}  // namespace
