// Run under mpirun (see tests/trainer/dist.cmake): every collective of MpiCommunicator on
// MPI_COMM_WORLD, checked against values computed here independently. Exits non-zero on any
// failure; each rank prints what failed.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "trainer/dist.h"
#include "tests/trainer/dist_values.h"

namespace d = azr::trainer::dist;

namespace {

template <typename T>
T value(int r, std::size_t i) {
  return azr::testing::order_sensitive_value<T>(r, i);
}

int failures = 0;
int my_rank = -1;

#define CHECK(cond)                                                                        \
  do {                                                                                     \
    if (!(cond)) {                                                                         \
      std::fprintf(stderr, "rank %d: check failed at line %d: %s\n", my_rank, __LINE__, #cond); \
      ++failures;                                                                          \
    }                                                                                      \
  } while (0)

template <typename T>
void check_allreduce(d::Communicator& c, std::size_t n) {
  std::vector<T> data(n), want(n);
  for (std::size_t i = 0; i < n; ++i) {
    data[i] = value<T>(c.rank(), i);
    want[i] = value<T>(0, i);
    for (int r = 1; r < c.size(); ++r) want[i] = want[i] + value<T>(r, i);  // rank order
  }
  c.allreduce_sum(std::span<T>(data));
  CHECK(n == 0 || std::memcmp(data.data(), want.data(), n * sizeof(T)) == 0);
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

std::string gather_item(int r) {
  return r == 1 ? std::string() : pattern(1000 * static_cast<std::size_t>(r) + 7, 50 + static_cast<unsigned>(r));
}

}  // namespace

int main() {
  try {
    const d::LaunchInfo launch = d::detect_launch();
    my_rank = launch.rank;
    CHECK(launch.launcher == "mpirun");
    CHECK(d::resolve_backend(launch, "auto") == (launch.world_size == 1 ? "single" : "mpi"));
    d::MpiOptions opts;
    opts.chunk_elems = 1000;         // many gather/bcast rounds, ragged last chunk
    opts.bcast_chunk_bytes = 65536;  // exercises the path that splits payloads over INT_MAX
    d::MpiCommunicator c(launch, opts);
    CHECK(c.backend() == "mpi");
    CHECK(c.rank() == launch.rank);
    CHECK(c.size() == launch.world_size);

    check_allreduce<float>(c, 10007);
    check_allreduce<double>(c, 10007);
    check_allreduce<float>(c, 0);
    check_allreduce<double>(c, 1);
    check_allreduce<float>(c, (std::size_t{1} << 20) + 3);

    for (int root : {0, c.size() - 1}) {
      const std::string want = pattern(10u << 20, 7 + static_cast<unsigned>(root));
      std::string got = c.rank() == root ? want : std::string("stale contents");
      c.broadcast(got, root);
      CHECK(got == want);
    }
    std::string empty = c.rank() == 0 ? "" : "x";
    c.broadcast(empty, 0);
    CHECK(empty.empty());

    const auto all = c.allgather(gather_item(c.rank()));
    CHECK(all.size() == static_cast<std::size_t>(c.size()));
    for (int r = 0; r < c.size() && r < static_cast<int>(all.size()); ++r)
      CHECK(all[static_cast<std::size_t>(r)] == gather_item(r));

    // Ranks passing different element counts get an error on every rank, not a hang.
    std::vector<float> uneven(static_cast<std::size_t>(10 + c.rank()), 1.0f);
    bool threw = false;
    try {
      c.allreduce_sum(std::span<float>(uneven));
    } catch (const std::runtime_error& e) {
      threw = std::string(e.what()).find("disagree") != std::string::npos;
    }
    CHECK(c.size() == 1 || threw);

    // Everyone's view of the failures, so every rank exits with the same verdict.
    std::vector<double> total{static_cast<double>(failures)};
    c.allreduce_sum(std::span<double>(total));
    c.barrier();
    if (c.rank() == 0)
      std::printf("trainer_dist_mpi_check: %d ranks, %g failure(s)\n", c.size(), total[0]);
    return total[0] == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: %s\n", my_rank, e.what());
    return 2;
  }
}
