// The gradient all-reduce of a multi-rank run (trainer/dist.h, MpiCommunicator::allreduce_sum):
// per chunk, MPI_Gather to rank 0, a sum there in rank order, MPI_Bcast back, so every rank gets
// the same bits whatever the launch. Its baseline, in the same process on the same buffers:
// MPI_Allreduce(MPI_SUM), which Open MPI may sum in any order (faster algorithms, results that
// can differ in the last bits between runs and ranks). The figure is what the determinism costs.
// With --tcp-port, the same ranks also connect as the TCP backend (TcpCommunicator, what a
// torchrun launch uses: a star through rank 0 over sockets) and time its all-reduce on the same
// buffers; its sums must be the rank-order MPI sums bit for bit (both add in rank order).
//
//   mpirun -np N allreduce_bench [--mib 16,64] [--reps 5] [--tcp-port P]
//
// Rank 0 prints a table and one JSON line. Never asserts on time.
#include <CLI/CLI.hpp>
// The C API only (as trainer/dist_mpi.cpp): the C++ bindings live in a library not linked here.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "bench/bench_util.h"
#include "trainer/dist.h"

namespace d = azr::trainer::dist;

namespace {

// Seconds of `op`, from a barrier before it to a barrier after it (the slowest rank's time), the
// median over `reps` runs; `reset` restores the input, untimed, before each.
double time_collective(d::Communicator& comm, int reps, const std::function<void()>& reset,
                       const std::function<void()>& op) {
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    reset();
    comm.barrier();
    const auto t0 = azr::bench::Clock::now();
    op();
    comm.barrier();
    t.push_back(azr::bench::secs_since(t0));
  }
  return azr::bench::median(t);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> mib = {16, 64};
  int reps = 5;
  CLI::App app{"The rank-order gradient all-reduce against MPI_Allreduce, under mpirun"};
  app.add_option("--mib", mib, "fp32 gradient sizes, MiB")->check(CLI::Range(1, 65536))->delimiter(',');
  app.add_option("--reps", reps, "timed runs of each (the median is printed)")->check(CLI::Range(1, 1000));
  int tcp_port = 0;
  app.add_option("--tcp-port", tcp_port, "also time the TCP backend, rank 0 listening on this port (MASTER_ADDR "
                 "or 127.0.0.1)")->check(CLI::Range(1, 65535));
  CLI11_PARSE(app, argc, argv);

  const d::LaunchInfo launch = d::detect_launch();
  // Alone there is nothing to sum: said on stderr and, as a benchmark without its device says it
  // (bench_device.h), as its JSON line with exit 0, so a script running every benchmark goes on.
  if (launch.world_size < 2) {
    std::fprintf(stderr, "allreduce_bench: run it under mpirun with 2 or more ranks (mpirun -np 2 %s)\n", argv[0]);
    std::printf("%s\n", nlohmann::json({{"bench", "allreduce"},
                                         {"ranks", launch.world_size},
                                         {"skipped", "one rank: run it under mpirun with 2 or more"}})
                             .dump()
                             .c_str());
    return 0;
  }
  d::MpiCommunicator comm(launch);
  std::unique_ptr<d::TcpCommunicator> tcp;
  if (tcp_port) {
    d::LaunchInfo at = launch;
    if (at.master_addr.empty()) at.master_addr = "127.0.0.1";
    at.master_port = tcp_port;
    tcp = std::make_unique<d::TcpCommunicator>(at);
  }
  const bool root = comm.rank() == 0;
  const char* tcp_columns = tcp ? "        TCP s  TCP cost  TCP same bits" : "";
  if (root)
    std::printf("allreduce_bench: %d ranks, median of %d\n%8s %14s %14s %9s %12s%s\n", comm.size(), reps, "MiB",
                "rank order s", "MPI_Allreduce s", "cost", "max |diff|", tcp_columns);
  nlohmann::json rows = nlohmann::json::array();
  for (const int m : mib) {
    const size_t n = size_t(m) << 18;  // floats
    std::vector<float> input(n), data(n), baseline(n);
    for (size_t i = 0; i < n; ++i)  // gradients of mixed size and sign: rounding depends on order
      input[i] = std::sin(float(i) * 0.001f + float(comm.rank())) * std::ldexp(1.f, int(i % 17) - 8);
    auto reset = [&] { std::memcpy(data.data(), input.data(), n * sizeof(float)); };
    const double ordered = time_collective(comm, reps, reset, [&] { comm.allreduce_sum(std::span<float>(data)); });
    const std::vector<float> ordered_sum = data;
    const double mpi = time_collective(comm, reps, reset, [&] {
      MPI_Allreduce(data.data(), baseline.data(), int(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    });
    double diff = 0;
    for (size_t i = 0; i < n; ++i) diff = std::max(diff, double(std::fabs(ordered_sum[i] - baseline[i])));
    double tcp_s = 0;
    bool tcp_same = false;
    if (tcp) {
      tcp_s = time_collective(comm, reps, reset, [&] { tcp->allreduce_sum(std::span<float>(data)); });
      tcp_same = std::memcmp(data.data(), ordered_sum.data(), n * sizeof(float)) == 0;
    }
    if (root) {
      std::printf("%8d %14.4f %14.4f %8.2fx %12.3g", m, ordered, mpi, ordered / mpi, diff);
      if (tcp) std::printf(" %12.4f %8.2fx %14s", tcp_s, tcp_s / mpi, tcp_same ? "yes" : "NO");
      std::printf("\n");
      nlohmann::json row = {{"mib", m},
                            {"rank_order_s", ordered},
                            {"mpi_allreduce_s", mpi},
                            {"rank_order_gb_per_s", double(n) * 4 / ordered / 1e9},
                            {"mpi_allreduce_gb_per_s", double(n) * 4 / mpi / 1e9},
                            {"cost_vs_mpi_allreduce", ordered / mpi},
                            {"max_abs_diff", diff}};
      if (tcp) {
        row["tcp_s"] = tcp_s;
        row["tcp_gb_per_s"] = double(n) * 4 / tcp_s / 1e9;
        row["tcp_cost_vs_mpi_allreduce"] = tcp_s / mpi;
        row["tcp_same_bits_as_rank_order"] = tcp_same;
      }
      rows.push_back(row);
    }
  }
  if (root)
    std::printf("%s\n", nlohmann::json({{"bench", "allreduce"}, {"ranks", comm.size()}, {"reps", reps}, {"rows", rows}})
                            .dump()
                            .c_str());
  return 0;
}
