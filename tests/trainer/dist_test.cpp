// Launch detection, backend choice, and the TCP communicator with real forked processes on
// localhost. The MPI backend is checked by trainer_dist_mpi_check under mpirun. NCCL's gradient
// reducer runs where the build has NCCL and the machine two GPUs (skipped with a message
// otherwise); a build without NCCL checks that asking for it says so.
#include "tests/test_support.h"
#include "trainer/dist.h"
#include "tests/trainer/dist_values.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#ifdef AZR_HAVE_NCCL
#include <cuda_runtime_api.h>
#endif

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace d = azr::trainer::dist;
using Env = std::map<std::string, std::string>;
using namespace std::chrono_literals;

namespace {

template <typename T>
T value(int r, std::size_t i) {
  return azr::testing::order_sensitive_value<T>(r, i);
}

// Runs fn and requires an E whose message contains every one of `parts`.
template <typename E>
void expect_throw_with(const std::function<void()>& fn, std::vector<std::string> parts) {
  try {
    fn();
    ADD_FAILURE() << "expected an exception mentioning '" << parts.front() << "'";
  } catch (const E& e) {
    for (const auto& p : parts)
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos)
          << "message '" << e.what() << "' does not mention '" << p << "'";
  }
}

template <typename T>
std::vector<T> rank_values(int r, std::size_t n) {
  std::vector<T> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = value<T>(r, i);
  return v;
}

// The contract: ((x0 + x1) + x2) + ..., in T, rank order.
template <typename T>
std::vector<T> expected_sum(int world, std::size_t n) {
  std::vector<T> out = rank_values<T>(0, n);
  for (int r = 1; r < world; ++r) {
    const auto v = rank_values<T>(r, n);
    for (std::size_t i = 0; i < n; ++i) out[i] = out[i] + v[i];
  }
  return out;
}

std::string pattern(std::size_t n, unsigned seed) {
  std::string s(n, '\0');
  unsigned x = seed * 2654435761u + 1;
  for (std::size_t i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    s[i] = static_cast<char>(x >> 24);
  }
  return s;
}

std::string gather_item(int r) { return r == 1 ? std::string() : pattern(1000 * static_cast<std::size_t>(r) + 7, 50 + static_cast<unsigned>(r)); }

#define CHILD_CHECK(cond)                                                             \
  do {                                                                                \
    if (!(cond)) {                                                                    \
      std::fprintf(stderr, "rank %d: check failed at line %d: %s\n", c.rank(), __LINE__, #cond); \
      ++failures;                                                                     \
    }                                                                                 \
  } while (0)

template <typename T>
int check_allreduce(d::Communicator& c, std::size_t n) {
  int failures = 0;
  auto data = rank_values<T>(c.rank(), n);
  c.allreduce_sum(std::span<T>(data));
  const auto want = expected_sum<T>(c.size(), n);
  CHILD_CHECK(data.size() == want.size());
  CHILD_CHECK(n == 0 || std::memcmp(data.data(), want.data(), n * sizeof(T)) == 0);
  return failures;
}

// Every collective, with results checked against values computed independently here.
int run_all_checks(d::Communicator& c, int world) {
  int failures = 0;
  CHILD_CHECK(c.size() == world);
  failures += check_allreduce<float>(c, 10007);
  failures += check_allreduce<double>(c, 10007);
  failures += check_allreduce<float>(c, 0);
  failures += check_allreduce<double>(c, 1);
  failures += check_allreduce<float>(c, (std::size_t{1} << 20) + 3);

  for (int root : {0, world - 1}) {
    const std::string want = pattern(10u << 20, 7 + static_cast<unsigned>(root));
    std::string got = c.rank() == root ? want : std::string("stale contents");
    c.broadcast(got, root);
    CHILD_CHECK(got == want);
  }
  std::string empty = c.rank() == 0 ? "" : "x";
  c.broadcast(empty, 0);
  CHILD_CHECK(empty.empty());

  const auto all = c.allgather(gather_item(c.rank()));
  CHILD_CHECK(all.size() == static_cast<std::size_t>(world));
  for (int r = 0; r < world && r < static_cast<int>(all.size()); ++r)
    CHILD_CHECK(all[static_cast<std::size_t>(r)] == gather_item(r));

  c.barrier();
  c.barrier();
  return failures;
}

int free_port() { return azr::testing::free_loopback_port(); }

d::LaunchInfo tcp_launch(int rank, int world, int port) {
  d::LaunchInfo li;
  li.rank = rank;
  li.world_size = world;
  li.local_rank = rank;
  li.local_world_size = world;
  li.launcher = "torchrun";
  li.master_addr = "127.0.0.1";
  li.master_port = port;
  return li;
}

// Forks one child per rank running body(rank); each child's exit status is its verdict.
// Returns the exit codes (-1 for killed/timed-out children).
std::vector<int> run_ranks(int world, const std::function<int(int)>& body,
                           std::chrono::seconds limit = 120s) {
  std::fflush(nullptr);
  std::vector<pid_t> pids;
  for (int r = 0; r < world; ++r) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      int code = 0;
      try {
        code = body(r);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: uncaught exception: %s\n", r, e.what());
        code = 100;
      }
      std::fflush(nullptr);
      ::_exit(code);
    }
    pids.push_back(pid);
  }
  std::vector<int> codes(static_cast<std::size_t>(world), -2);
  const auto deadline = std::chrono::steady_clock::now() + limit;
  int left = world;
  while (left > 0) {
    for (int r = 0; r < world; ++r) {
      auto& code = codes[static_cast<std::size_t>(r)];
      if (code != -2) continue;
      int status = 0;
      if (::waitpid(pids[static_cast<std::size_t>(r)], &status, WNOHANG) > 0) {
        code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
        --left;
      }
    }
    if (left > 0 && std::chrono::steady_clock::now() > deadline) {
      for (int r = 0; r < world; ++r)
        if (codes[static_cast<std::size_t>(r)] == -2) {
          ::kill(pids[static_cast<std::size_t>(r)], SIGKILL);
          ::waitpid(pids[static_cast<std::size_t>(r)], nullptr, 0);
          codes[static_cast<std::size_t>(r)] = -1;
        }
      ADD_FAILURE() << "ranks did not finish within " << limit.count() << " s";
      break;
    }
    std::this_thread::sleep_for(10ms);
  }
  return codes;
}

void expect_all_zero(const std::vector<int>& codes) {
  for (std::size_t r = 0; r < codes.size(); ++r) EXPECT_EQ(codes[r], 0) << "rank " << r;
}

// A child's verdict on an expected failure: it threw runtime_error mentioning `part`. How long it
// took is not judged: the messages tell an end of file ("lost the connection") from an I/O timeout
// ("no data from rank"), and a wall-clock bound failed only on a loaded machine.
int expect_child_throw(const std::function<void()>& fn, const std::string& part) {
  try {
    fn();
  } catch (const std::runtime_error& e) {
    if (std::string(e.what()).find(part) == std::string::npos) {
      std::fprintf(stderr, "message '%s' lacks '%s'\n", e.what(), part.c_str());
      return 2;
    }
    return 0;
  }
  std::fprintf(stderr, "no exception (expected one mentioning '%s')\n", part.c_str());
  return 1;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// detect_launch

TEST(DistLaunch, EmptyEnvironmentIsSingle) {
  const auto li = d::detect_launch(Env{});
  EXPECT_EQ(li.launcher, "single");
  EXPECT_EQ(li.rank, 0);
  EXPECT_EQ(li.world_size, 1);
  EXPECT_EQ(li.local_rank, 0);
  EXPECT_EQ(li.local_world_size, 1);
}

TEST(DistLaunch, OpenMpi) {
  const auto li = d::detect_launch(Env{{"OMPI_COMM_WORLD_RANK", "3"},
                                       {"OMPI_COMM_WORLD_SIZE", "4"},
                                       {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                                       {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}});
  EXPECT_EQ(li.launcher, "mpirun");
  EXPECT_EQ(li.rank, 3);
  EXPECT_EQ(li.world_size, 4);
  EXPECT_EQ(li.local_rank, 1);
  EXPECT_EQ(li.local_world_size, 2);
}

TEST(DistLaunch, OpenMpiWinsOverLeftoverTorchAndSlurmVariables) {
  const auto li = d::detect_launch(Env{{"OMPI_COMM_WORLD_RANK", "1"},
                                       {"OMPI_COMM_WORLD_SIZE", "2"},
                                       {"RANK", "7"},
                                       {"WORLD_SIZE", "8"},
                                       {"SLURM_PROCID", "0"},
                                       {"SLURM_NTASKS", "1"},
                                       {"PMIX_RANK", "1"}});
  EXPECT_EQ(li.launcher, "mpirun");
  EXPECT_EQ(li.rank, 1);
  EXPECT_EQ(li.world_size, 2);
}

TEST(DistLaunch, Torchrun) {
  const auto li = d::detect_launch(Env{{"RANK", "5"},
                                       {"WORLD_SIZE", "8"},
                                       {"LOCAL_RANK", "1"},
                                       {"LOCAL_WORLD_SIZE", "4"},
                                       {"MASTER_ADDR", "node0.cluster"},
                                       {"MASTER_PORT", "29500"}});
  EXPECT_EQ(li.launcher, "torchrun");
  EXPECT_EQ(li.rank, 5);
  EXPECT_EQ(li.world_size, 8);
  EXPECT_EQ(li.local_rank, 1);
  EXPECT_EQ(li.local_world_size, 4);
  EXPECT_EQ(li.master_addr, "node0.cluster");
  EXPECT_EQ(li.master_port, 29500);
}

TEST(DistLaunch, TorchrunUnderSrunIsTorchrun) {
  const auto li = d::detect_launch(Env{{"RANK", "6"},
                                       {"WORLD_SIZE", "8"},
                                       {"MASTER_ADDR", "n0"},
                                       {"MASTER_PORT", "1234"},
                                       {"SLURM_PROCID", "1"},
                                       {"SLURM_NTASKS", "2"}});
  EXPECT_EQ(li.launcher, "torchrun");
  EXPECT_EQ(li.rank, 6);
}

TEST(DistLaunch, TorchrunSingleProcessNeedsNoMaster) {
  const auto li = d::detect_launch(Env{{"RANK", "0"}, {"WORLD_SIZE", "1"}});
  EXPECT_EQ(li.launcher, "torchrun");
  EXPECT_EQ(li.world_size, 1);
  EXPECT_TRUE(li.master_addr.empty());
}

TEST(DistLaunch, LoneRankIsIgnored) {
  const auto li = d::detect_launch(Env{{"RANK", "3"}});
  EXPECT_EQ(li.launcher, "single");
  EXPECT_EQ(li.rank, 0);
}

TEST(DistLaunch, Srun) {
  const auto li = d::detect_launch(Env{{"SLURM_PROCID", "5"},
                                       {"SLURM_NTASKS", "8"},
                                       {"SLURM_LOCALID", "1"},
                                       {"SLURM_NODEID", "1"},
                                       {"SLURM_TASKS_PER_NODE", "4(x2)"},
                                       {"PMIX_RANK", "5"}});
  EXPECT_EQ(li.launcher, "srun");
  EXPECT_EQ(li.rank, 5);
  EXPECT_EQ(li.world_size, 8);
  EXPECT_EQ(li.local_rank, 1);
  EXPECT_EQ(li.local_world_size, 4);

  const auto uneven = d::detect_launch(Env{{"SLURM_PROCID", "4"},
                                           {"SLURM_NTASKS", "7"},
                                           {"SLURM_LOCALID", "1"},
                                           {"SLURM_NODEID", "1"},
                                           {"SLURM_TASKS_PER_NODE", "3,4"}});
  EXPECT_EQ(uneven.local_world_size, 4);

  const auto one_node = d::detect_launch(
      Env{{"SLURM_PROCID", "2"}, {"SLURM_NTASKS", "3"}, {"SLURM_LOCALID", "2"}, {"SLURM_NNODES", "1"}});
  EXPECT_EQ(one_node.local_world_size, 3);
}

TEST(DistLaunch, PmiAndPmix) {
  const auto li = d::detect_launch(
      Env{{"PMI_RANK", "2"}, {"PMI_SIZE", "3"}, {"MPI_LOCALRANKID", "0"}, {"MPI_LOCALNRANKS", "1"}});
  EXPECT_EQ(li.launcher, "mpirun");
  EXPECT_EQ(li.rank, 2);
  EXPECT_EQ(li.world_size, 3);
  expect_throw_with<std::invalid_argument>([] { d::detect_launch(Env{{"PMIX_RANK", "1"}}); },
                                           {"PMIX_RANK", "PMI_SIZE"});
}

TEST(DistLaunch, BadValuesNameTheVariable) {
  auto bad = [](Env env, std::vector<std::string> parts) {
    expect_throw_with<std::invalid_argument>([&] { d::detect_launch(env); }, std::move(parts));
  };
  const Env master{{"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}};
  auto with_master = [&](Env env) {
    env.insert(master.begin(), master.end());
    return env;
  };
  bad(with_master({{"RANK", "abc"}, {"WORLD_SIZE", "2"}}), {"RANK", "abc"});
  bad(with_master({{"RANK", "1x"}, {"WORLD_SIZE", "2"}}), {"RANK"});
  bad(with_master({{"RANK", " 1"}, {"WORLD_SIZE", "2"}}), {"RANK"});
  bad(with_master({{"RANK", ""}, {"WORLD_SIZE", "2"}}), {"RANK"});
  bad(with_master({{"RANK", "0"}, {"WORLD_SIZE", "two"}}), {"WORLD_SIZE"});
  bad(with_master({{"RANK", "2"}, {"WORLD_SIZE", "2"}}), {"RANK", "outside"});
  bad(with_master({{"RANK", "-1"}, {"WORLD_SIZE", "2"}}), {"RANK"});
  bad(with_master({{"RANK", "0"}, {"WORLD_SIZE", "0"}}), {"WORLD_SIZE"});
  bad(with_master({{"RANK", "0"}, {"WORLD_SIZE", "99999999999"}}), {"WORLD_SIZE"});
  bad(with_master({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "2"}, {"LOCAL_WORLD_SIZE", "2"}}),
      {"LOCAL_RANK"});
  bad({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "29500"}}, {"MASTER_ADDR"});
  bad({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}}, {"MASTER_PORT"});
  bad({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "70000"}},
      {"MASTER_PORT"});
  bad({{"OMPI_COMM_WORLD_RANK", "4"}, {"OMPI_COMM_WORLD_SIZE", "4"}}, {"OMPI_COMM_WORLD_RANK"});
  bad({{"OMPI_COMM_WORLD_RANK", "0"}}, {"OMPI_COMM_WORLD_SIZE"});
  bad({{"SLURM_PROCID", "x"}, {"SLURM_NTASKS", "4"}}, {"SLURM_PROCID"});
  bad({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"}, {"SLURM_LOCALID", "q"}}, {"SLURM_LOCALID"});
  bad({{"PMI_RANK", "3"}, {"PMI_SIZE", "3"}}, {"PMI_RANK"});
}

TEST(DistLaunch, ReadsTheProcessEnvironment) {
  ::setenv("RANK", "1", 1);
  ::setenv("WORLD_SIZE", "3", 1);
  ::setenv("MASTER_ADDR", "10.0.0.1", 1);
  ::setenv("MASTER_PORT", "29501", 1);
  d::LaunchInfo li;
  try {
    li = d::detect_launch();
  } catch (...) {
  }
  for (const char* v : {"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"}) ::unsetenv(v);
  if (!std::getenv("OMPI_COMM_WORLD_RANK")) {
    EXPECT_EQ(li.launcher, "torchrun");
    EXPECT_EQ(li.rank, 1);
    EXPECT_EQ(li.world_size, 3);
    EXPECT_EQ(li.master_addr, "10.0.0.1");
    EXPECT_EQ(li.master_port, 29501);
  }
}

// ---------------------------------------------------------------------------------------------
// Backend choice and the single-process communicator

TEST(DistBackend, AutoFollowsTheLauncher) {
  d::LaunchInfo li;
  EXPECT_EQ(d::resolve_backend(li, "auto"), "single");
  li.world_size = 4;
  li.launcher = "mpirun";
  EXPECT_EQ(d::resolve_backend(li, "auto"), "mpi");
  li.launcher = "srun";
  EXPECT_EQ(d::resolve_backend(li, "auto"), "mpi");
  li.launcher = "torchrun";
  EXPECT_EQ(d::resolve_backend(li, "auto"), "tcp");
  EXPECT_EQ(d::resolve_backend(li, "mpi"), "mpi");
  li.world_size = 1;
  li.launcher = "mpirun";
  EXPECT_EQ(d::resolve_backend(li, "auto"), "single");
  expect_throw_with<std::invalid_argument>([&] { d::resolve_backend(li, "gloo"); }, {"gloo"});
}

TEST(DistBackend, SingleCommunicator) {
  auto c = d::make_communicator(d::LaunchInfo{});
  EXPECT_EQ(c->backend(), "single");
  EXPECT_EQ(c->rank(), 0);
  EXPECT_EQ(c->size(), 1);
  std::vector<float> f{1.5f, -2.0f};
  c->allreduce_sum(std::span<float>(f));
  EXPECT_EQ(f, (std::vector<float>{1.5f, -2.0f}));
  std::string s = "abc";
  c->broadcast(s, 0);
  EXPECT_EQ(s, "abc");
  EXPECT_THROW(c->broadcast(s, 1), std::invalid_argument);
  EXPECT_EQ(c->allgather("x"), std::vector<std::string>{"x"});
  c->barrier();
}

// The MPI build's backend is checked under a real mpirun (trainer_dist_mpi_np2/np3).
#ifndef AZR_HAVE_MPI
// AZR_MPI=OFF (scripts/gpu_prebuild.sh's azr): "mpi", asked for or chosen by "auto" under
// mpirun, stops with the way out, before any rank waits on a peer.
TEST(DistBackend, ABuildWithoutMpiSaysSo) {
  EXPECT_FALSE(d::mpi_compiled());
  d::LaunchInfo li;
  li.world_size = 2;
  li.launcher = "mpirun";
  for (const char* backend : {"auto", "mpi"})
    expect_throw_with<std::runtime_error>([&] { d::make_communicator(li, backend); },
                                          {"no MPI backend", "AZR_MPI=OFF", "mpirun", "--dist tcp"});
}
#endif

TEST(DistBackend, SingleCannotServeManyRanks) {
  d::LaunchInfo li;
  li.world_size = 2;
  li.launcher = "torchrun";
  expect_throw_with<std::runtime_error>([&] { d::make_communicator(li, "single"); }, {"single", "2"});
}

// ---------------------------------------------------------------------------------------------
// TCP

TEST(DistTcp, TheTestValuesAreOrderSensitive) {
  // Otherwise the bitwise comparisons below could not tell rank order from any other order.
  const auto fwd = expected_sum<float>(3, 64);
  std::vector<float> rev = rank_values<float>(2, 64);
  for (int r : {1, 0}) {
    const auto v = rank_values<float>(r, 64);
    for (std::size_t i = 0; i < 64; ++i) rev[i] = rev[i] + v[i];
  }
  EXPECT_NE(std::memcmp(fwd.data(), rev.data(), 64 * sizeof(float)), 0);
  EXPECT_EQ(fwd[0], 0.0f);  // (1e8 + 1) - 1e8 in float
}

TEST(DistTcp, ThreeRanksAllCollectives) {
  const int port = free_port();
  ASSERT_GT(port, 0);
  const auto codes = run_ranks(3, [port](int r) {
    d::TcpOptions opts;
    opts.connect_timeout = 30s;
    opts.io_timeout = 60s;
    opts.chunk_elems = 1000;  // many chunks, including a ragged last one
    d::TcpCommunicator c(tcp_launch(r, 3, port), opts);
    if (c.rank() != r || c.backend() != "tcp") return 10;
    return run_all_checks(c, 3) == 0 ? 0 : 1;
  });
  expect_all_zero(codes);
}

TEST(DistTcp, AutoBackendWithDefaultChunks) {
  const int port = free_port();
  ASSERT_GT(port, 0);
  const auto codes = run_ranks(2, [port](int r) {
    auto c = d::make_communicator(tcp_launch(r, 2, port));
    if (c->backend() != "tcp" || c->size() != 2) return 10;
    int failures = 0;
    auto& comm = *c;
    // Larger than one default chunk, so the chunk boundary is crossed.
    failures += check_allreduce<float>(comm, d::kDefaultChunkElems + 5);
    failures += check_allreduce<double>(comm, 4097);
    comm.barrier();
    return failures == 0 ? 0 : 1;
  });
  expect_all_zero(codes);
}

TEST(DistTcp, RootTimesOutWhenPeersNeverConnect) {
  const int port = free_port();
  ASSERT_GT(port, 0);
  d::TcpOptions opts;
  opts.connect_timeout = 300ms;
  expect_throw_with<std::runtime_error>([&] { d::TcpCommunicator c(tcp_launch(0, 3, port), opts); },
                                        {"timed out", "1, 2", std::to_string(port)});
}

TEST(DistTcp, PeerTimesOutWhenRootNeverListens) {
  const int port = free_port();
  ASSERT_GT(port, 0);
  d::TcpOptions opts;
  opts.connect_timeout = 500ms;
  expect_throw_with<std::runtime_error>([&] { d::TcpCommunicator c(tcp_launch(1, 2, port), opts); },
                                        {"could not connect", "127.0.0.1:" + std::to_string(port)});
}

TEST(DistTcp, OnePeerMissingIsReportedByRank) {
  const int port = free_port();
  ASSERT_GT(port, 0);
  const auto codes = run_ranks(2, [port](int r) {
    d::TcpOptions opts;
    opts.connect_timeout = 1500ms;
    if (r == 1) {  // rank 1 of 3 connects; rank 2 never comes
      try {
        d::TcpCommunicator c(tcp_launch(1, 3, port), opts);
      } catch (const std::exception&) {
      }
      return 0;
    }
    return expect_child_throw([&] { d::TcpCommunicator c(tcp_launch(0, 3, port), opts); },
                              "rank(s) 2 of 3");
  });
  expect_all_zero(codes);
}

TEST(DistTcp, DeadPeerFailsTheCollectiveFast) {
  const int port = free_port();
  ASSERT_GT(port, 0);
  const auto codes = run_ranks(3, [port](int r) {
    d::TcpOptions opts;
    opts.connect_timeout = 30s;
    opts.io_timeout = 20s;  // failures must come from EOF, well before this
    d::TcpCommunicator c(tcp_launch(r, 3, port), opts);
    if (r == 2) ::_exit(0);  // dies without a word; the kernel closes its socket
    std::vector<float> data(1000, 1.0f);
    return expect_child_throw([&] { c.allreduce_sum(std::span<float>(data)); }, "lost the connection to rank");
  });
  expect_all_zero(codes);
}

TEST(DistTcp, SilentPeerHitsTheIoTimeout) {
  const int port = free_port();
  ASSERT_GT(port, 0);
  const auto codes = run_ranks(2, [port](int r) {
    d::TcpOptions opts;
    opts.connect_timeout = 30s;
    opts.io_timeout = 300ms;
    d::TcpCommunicator c(tcp_launch(r, 2, port), opts);
    if (r == 1) {
      std::this_thread::sleep_for(3s);
      return 0;
    }
    return expect_child_throw([&] { c.barrier(); }, "no data from rank 1");
  });
  expect_all_zero(codes);
}

TEST(DistTcp, MismatchedCollectivesFailOnEveryRank) {
  const int port = free_port();
  ASSERT_GT(port, 0);
  const auto codes = run_ranks(2, [port](int r) {
    d::TcpOptions opts;
    opts.connect_timeout = 30s;
    opts.io_timeout = 20s;
    d::TcpCommunicator c(tcp_launch(r, 2, port), opts);
    if (r == 0) {
      std::vector<double> data(10, 1.0);
      int code = expect_child_throw([&] { c.allreduce_sum(std::span<double>(data)); }, "mismatch");
      // Once failed, the communicator refuses further use instead of reading garbage.
      if (code == 0) code = expect_child_throw([&] { c.barrier(); }, "earlier error") ? 7 : 0;
      return code;
    }
    return expect_child_throw([&] { c.barrier(); }, "lost the connection to rank");
  });
  expect_all_zero(codes);
}

// What a resume checks before any rank loads its checkpoint: equal values pass; one rank's other
// value stops every rank with the same message, none left waiting.
TEST(DistTcp, RanksThatDisagreeStopAlikeNamingTheRank) {
  const int port = free_port();
  ASSERT_GT(port, 0);
  const auto codes = run_ranks(3, [port](int r) {
    const auto c = d::make_communicator(tcp_launch(r, 3, port), "tcp", 20s);
    d::check_ranks_agree(*c, "step-4", "resume");
    return expect_child_throw([&] { d::check_ranks_agree(*c, r == 2 ? "step-2" : "step-4", "resume"); },
                              "resume: rank 2 has 'step-2', rank 0 'step-4'");
  });
  expect_all_zero(codes);
}

// A stranger that connects to the rendezvous port and says nothing (a port scan, a health check)
// is dropped after a few seconds (5). Its hello was read with the whole rendezvous budget (10 s
// here), so the real peer queued behind it waited past its own 7 s for the reply and failed.
TEST(DistTcp, AStrangerThatSaysNothingHoldsNoPeerUp) {
  const int port = free_port();
  ASSERT_GT(port, 0);
  const auto codes = run_ranks(3, [port](int r) {
    d::TcpOptions opts;
    opts.connect_timeout = 10s;
    if (r == 1) {  // the stranger: connects first, then silence past the rendezvous deadline
      const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_port = htons(static_cast<uint16_t>(port));
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      const auto until = std::chrono::steady_clock::now() + 10s;
      while (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
        if (std::chrono::steady_clock::now() > until) return 6;
        std::this_thread::sleep_for(20ms);
      }
      std::this_thread::sleep_for(12s);
      ::close(fd);
      return 0;
    }
    if (r == 2) {  // the real rank 1, behind the stranger, waiting 7 s for rank 0's reply
      std::this_thread::sleep_for(1s);
      opts.io_timeout = 7s;
    }
    try {
      d::TcpCommunicator c(tcp_launch(r == 0 ? 0 : 1, 2, port), opts);
      std::vector<double> v{1.0};
      c.allreduce_sum(std::span<double>(v));
      return v[0] == 2.0 ? 0 : 7;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "rank %d: %s\n", r, e.what());
      return 8;
    }
  }, 40s);
  EXPECT_EQ(codes[0], 0);
  EXPECT_EQ(codes[2], 0);
}

TEST(DistTcp, DuplicateRankIsRefused) {
  const int port = free_port();
  ASSERT_GT(port, 0);
  const auto codes = run_ranks(3, [port](int r) {
    d::TcpOptions opts;
    opts.connect_timeout = 3s;
    if (r == 0) {
      try {  // times out waiting for rank 2: both peers claim rank 1
        d::TcpCommunicator c(tcp_launch(0, 3, port), opts);
      } catch (const std::exception&) {
      }
      return 0;
    }
    // Staggered, so one of the two is usually first; either may be (the connects retry with a
    // growing backoff, and a slow root lets the later one in first). 0: let in, 10: refused.
    if (r == 2) std::this_thread::sleep_for(500ms);
    try {
      d::TcpCommunicator c(tcp_launch(1, 3, port), opts);
      return 0;
    } catch (const std::runtime_error& e) {
      if (std::string(e.what()).find("refused") != std::string::npos) return 10;
      std::fprintf(stderr, "rank %d: %s\n", r, e.what());
      return 5;
    }
  });
  EXPECT_EQ(codes[0], 0);
  std::vector<int> claimants = {codes[1], codes[2]};
  std::sort(claimants.begin(), claimants.end());
  EXPECT_EQ(claimants, (std::vector<int>{0, 10})) << "exactly one of the two claiming rank 1 is let in";
}

#ifdef AZR_HAVE_NCCL
namespace {
// Counted in a child: CUDA initialised in this process would not survive into the forked ranks.
int gpus_seen_by_a_child() {
  const auto codes = run_ranks(1, [](int) {
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess ? std::min(n, 100) : 0;
  });
  return std::max(codes[0], 0);
}
}  // namespace

// Two ranks, one GPU each, sum device buffers with NCCL: both end with the host communicators'
// sum bit for bit (with two terms every summation order gives the same float), on the stream the
// reducer was made with; an empty buffer is a no-op.
TEST(DistNccl, TwoGpusSumDeviceBuffersLikeTheHostCommunicators) {
  const int gpus = gpus_seen_by_a_child();
  if (gpus < 2)
    GTEST_SKIP() << "NCCL needs one GPU per rank and this machine shows " << gpus
                 << "; this check runs on a machine with 2 or more";
  const int port = free_port();
  ASSERT_GT(port, 0);
  const auto codes = run_ranks(2, [port](int r) {
    d::TcpCommunicator host(tcp_launch(r, 2, port));
    if (cudaSetDevice(r) != cudaSuccess) return 20;
    cudaStream_t stream = nullptr;
    if (cudaStreamCreate(&stream) != cudaSuccess) return 21;
    const std::unique_ptr<d::DeviceReducer> reducer = d::make_nccl_reducer(host, stream);
    int failures = 0;
    for (const std::size_t n : {std::size_t{10007}, (std::size_t{1} << 20) + 3, std::size_t{0}}) {
      std::vector<float> data = rank_values<float>(r, n);
      void* raw = nullptr;
      if (cudaMalloc(&raw, (n + 1) * sizeof(float)) != cudaSuccess) return 22;
      float* device = static_cast<float*>(raw);
      cudaMemcpy(device, data.data(), n * sizeof(float), cudaMemcpyHostToDevice);
      reducer->allreduce_sum(std::span<float>(device, n));
      if (cudaStreamSynchronize(stream) != cudaSuccess) return 23;
      cudaMemcpy(data.data(), device, n * sizeof(float), cudaMemcpyDeviceToHost);
      cudaFree(device);
      const std::vector<float> want = expected_sum<float>(2, n);
      if (n > 0 && std::memcmp(data.data(), want.data(), n * sizeof(float)) != 0) {
        std::fprintf(stderr, "rank %d: NCCL's sum of %zu floats differs from the host sum\n", r, n);
        failures++;
      }
    }
    cudaStreamDestroy(stream);
    return failures;
  });
  expect_all_zero(codes);
}
#else
TEST(DistNccl, ABuildWithoutNcclSaysSo) {
  EXPECT_FALSE(d::nccl_compiled());
  d::SingleCommunicator host;
  expect_throw_with<std::runtime_error>([&] { (void)d::make_nccl_reducer(host, nullptr); },
                                        {"this build of azr has no NCCL", "NCCL_HOME"});
}
#endif
