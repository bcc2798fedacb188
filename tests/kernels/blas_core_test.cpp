// kernels/cpu/blas_core.cpp: where Debian's OpenBLAS falls back to its SSE3 kernels on a CPU it
// does not know, a program that links the kernels runs itself again with a better set named. The
// second run must be the first one's twin: the same arguments, process name and CPUs (also when
// OpenMP binds threads, which pins the first run's main thread before our code runs), no fd of
// ours. Run through tests/kernels/blas_core_probe.cpp, which prints what it finds.
#include <gtest/gtest.h>
#include <sched.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "tests/test_support.h"

namespace {

// Runs the probe from this process's environment, without any kernel set or OpenMP setting
// named, plus `extra`.
azr::testing::ProcessResult probe(const std::vector<std::string>& args, const std::vector<std::string>& extra) {
  const azr::testing::ChildEnvironment env(extra, {"OPENBLAS_CORETYPE=", "AZR_OPENBLAS_", "OMP_", "GOMP_"});
  std::vector<std::string> argv = {AZR_BLAS_CORE_PROBE};
  argv.insert(argv.end(), args.begin(), args.end());
  return azr::testing::run_process(argv, "", env.envp());
}

std::string line_of(const std::string& out, const std::string& key) {
  const size_t at = out.find("\n" + key + " ");
  if (at == std::string::npos) return "(none)";
  const size_t from = at + key.size() + 2;
  return out.substr(from, out.find('\n', from) - from);
}

bool ran_again(const std::string& out) { return line_of(out, "blas").find("chosen by azr") != std::string::npos; }

int own_cpus() {
  cpu_set_t cpus;
  return sched_getaffinity(0, sizeof cpus, &cpus) == 0 ? CPU_COUNT(&cpus) : -1;
}

TEST(BlasCore, AnAvx2CpuNeverRunsTheSse3Kernels) {
  const auto r = probe({}, {});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) GTEST_SKIP() << "no AVX2 here";
  EXPECT_NE(line_of(r.out, "blas").rfind("Prescott", 0), 0u) << r.out;
}

TEST(BlasCore, TheRunAgainHasTheFirstRunsArgumentsNameCpusAndFds) {
  const std::vector<std::string> args = {"", "two words", "new\nline", "--flag=x", ""};
  for (const std::vector<std::string>& omp : {std::vector<std::string>{},
                                              std::vector<std::string>{"OMP_PROC_BIND=close", "OMP_PLACES=cores"}}) {
    const auto r = probe(args, omp);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const std::string where = omp.empty() ? "plain" : "OMP_PROC_BIND=close";
    std::string want = "arg[" + std::string(AZR_BLAS_CORE_PROBE) + "]\n";
    for (const std::string& a : args) want += "arg[" + a + "]\n";
    EXPECT_EQ(r.out.substr(0, want.size()), want) << where;
    EXPECT_EQ(line_of(r.out, "name"), "blas_core_probe") << where << "\n" << r.out;
    EXPECT_EQ(line_of(r.out, "cpus"), std::to_string(own_cpus())) << where << "\n" << r.out;
    // fds 0-2 are run_process's pipes; nothing of blas_core's (/proc/self/cmdline, say) is open.
    EXPECT_EQ(r.out.find("cmdline"), std::string::npos) << where << "\n" << r.out;
    if (!ran_again(r.out)) GTEST_SKIP() << "OpenBLAS chose its own kernels on this CPU: nothing ran twice";
  }
}

// A kernel set the user names is kept, whatever it is.
TEST(BlasCore, ASetTheUserNamesIsKept) {
  const auto r = probe({}, {"OPENBLAS_CORETYPE=Prescott"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(line_of(r.out, "blas"), "Prescott") << r.out;
}

}  // namespace
