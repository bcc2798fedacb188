#pragma once
// Helpers shared by the sandbox suites: environment lookups and a reference CPython run.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

extern char** environ;

namespace azr::testing {

inline std::string env_or_fail(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) {
    ADD_FAILURE() << "environment variable " << name << " is not set (run the suite through ctest)";
    return "";
  }
  return v;
}

// A loopback TCP port free a moment ago (the kernel's choice for a bind to port 0), for a test's
// ranks to meet on; -1 when none could be had.
inline int free_loopback_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    if (fd >= 0) ::close(fd);
    return -1;
  }
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

struct ProcessResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

// An environment for a child process: this one's, without the variables whose names start with
// one of `drop` ("OMP_", "OPENBLAS_CORETYPE="), then `add` ("NAME=value" each). envp() is for
// run_process, valid while this object lives.
class ChildEnvironment {
 public:
  explicit ChildEnvironment(const std::vector<std::string>& add = {},
                            const std::vector<std::string>& drop = {}) {
    for (char** e = environ; *e; ++e) {
      const std::string v = *e;
      bool dropped = false;
      for (const std::string& prefix : drop) dropped = dropped || v.rfind(prefix, 0) == 0;
      if (!dropped) vars_.push_back(v);
    }
    vars_.insert(vars_.end(), add.begin(), add.end());
    for (std::string& v : vars_) pointers_.push_back(v.data());
    pointers_.push_back(nullptr);
  }
  ChildEnvironment(const ChildEnvironment&) = delete;
  ChildEnvironment& operator=(const ChildEnvironment&) = delete;
  char* const* envp() const { return pointers_.data(); }

 private:
  std::vector<std::string> vars_;
  std::vector<char*> pointers_;
};

// Runs argv with `input` on stdin; captures stdout and stderr. envp: nullptr = inherit.
inline ProcessResult run_process(const std::vector<std::string>& args, const std::string& input = "",
                                 char* const* envp = nullptr) {
  int in[2], out[2], err[2];
  if (pipe(in) || pipe(out) || pipe(err)) return {};
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, in[0], 0);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  posix_spawn_file_actions_adddup2(&fa, err[1], 2);
  for (int fd : {in[1], out[0], err[0], in[0], out[1], err[1]}) posix_spawn_file_actions_addclose(&fa, fd);
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid;
  int rc = posix_spawn(&pid, args[0].c_str(), &fa, nullptr, argv.data(), envp ? envp : environ);
  posix_spawn_file_actions_destroy(&fa);
  close(in[0]);
  close(out[1]);
  close(err[1]);
  ProcessResult r;
  if (rc != 0) {
    close(in[1]);
    close(out[0]);
    close(err[0]);
    return r;
  }
  // Inputs here are small (well under a pipe buffer), so write-then-read cannot deadlock.
  [[maybe_unused]] ssize_t w = write(in[1], input.data(), input.size());
  close(in[1]);
  auto drain = [](int fd, std::string& into) {
    char buf[8192];
    ssize_t n;
    while ((n = read(fd, buf, sizeof buf)) > 0) into.append(buf, static_cast<size_t>(n));
    close(fd);
  };
  drain(out[0], r.out);
  drain(err[0], r.err);
  int st = 0;
  waitpid(pid, &st, 0);
  r.exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return r;
}

// What CPython itself prints for repr(f(<input>)), with the sandbox's primary hash seed (0).
// The independent truth for the sandbox's value model.
inline std::string reference_repr(const std::string& program, const std::string& input) {
  std::string python = env_or_fail("AZR_PYTHON");
  std::string harness =
      "import sys\nsrc=sys.stdin.read()\nprog,_,inp=src.partition('\\0')\ng={}\nexec(prog,g)\n"
      "sys.stdout.write(repr(eval('f('+inp+')',g)))\n";
  static char seed[] = "PYTHONHASHSEED=0";
  char* envp[] = {seed, nullptr};
  // Not -I/-E: those make CPython ignore PYTHONHASHSEED. The environment holds nothing else.
  ProcessResult r = run_process({python, "-S", "-s", "-c", harness}, program + '\0' + input, envp);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return r.out;
}

// One JSON value per non-empty line (the output of --json and --jsonl commands).
// Makes a checkpoint directory as azr wrote them before the checksum manifests: no
// checksums.xxh128, and no "checksums" key in trainer_state.json naming it. The suites use it to
// reach the loaders' own checks, which the manifest would otherwise stop first.
inline void as_written_before_manifests(const std::filesystem::path& checkpoint) {
  std::filesystem::remove(checkpoint / "checksums.xxh128");
  const std::filesystem::path state = checkpoint / "trainer_state.json";
  std::ifstream in(state);
  nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  in.close();
  if (!j.is_object()) return;  // a test that broke the state on purpose keeps it broken
  j.erase("checksums");
  std::ofstream(state, std::ios::trunc) << j.dump(2) << "\n";
}

inline std::vector<nlohmann::json> json_lines(const std::string& out) {
  std::vector<nlohmann::json> v;
  std::istringstream in(out);
  std::string l;
  while (std::getline(in, l))
    if (!l.empty()) v.push_back(nlohmann::json::parse(l));
  return v;
}

// <temp>/<prefix>-<pid>: the scratch space of one test process (ctest runs every test in a
// process of its own), removed when all of the process's tests passed and kept for a look when
// one failed. A training run leaves 36-45 MB, so the suites that train filled /tmp by gigabytes.
// Call once per suite file, at namespace scope, so the removal is registered before any test runs.
class ProcessScratch : public ::testing::Environment {
 public:
  explicit ProcessScratch(const std::string& prefix)
      : dir_(std::filesystem::temp_directory_path() / (prefix + "-" + std::to_string(getpid()))) {}
  const std::filesystem::path& dir() const { return dir_; }
  void TearDown() override {
    if (!::testing::UnitTest::GetInstance()->Passed()) return;
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

 private:
  std::filesystem::path dir_;
};

inline ProcessScratch& register_process_scratch(const std::string& prefix) {
  auto* s = new ProcessScratch(prefix);  // gtest owns its environments
  ::testing::AddGlobalTestEnvironment(s);
  return *s;
}

}  // namespace azr::testing
