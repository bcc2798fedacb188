// MpiCommunicator: MPI C API on a duplicate of MPI_COMM_WORLD.
//
// allreduce_sum does not call MPI_Allreduce: Open MPI picks its reduction tree by message
// size and process count, so the summation order (and with it the float result) could differ
// between calls and, for some algorithms, between ranks. Instead, per chunk of at most
// chunk_elems elements: MPI_Gather to rank 0, a left fold there in rank order, MPI_Bcast back.
// Cost per chunk of n elements over P ranks: rank 0 receives (P-1)n and the broadcast tree
// moves (P-1)n, against ~2n per rank for a ring allreduce; rank 0 holds P*n scratch elements
// (capped at 256 MiB). For CPU gradients (tens of millions of floats, a handful of ranks) that
// is a few hundred MB per step on shared memory, well below the step's compute; large GPU
// gradients go through NCCL instead.
// The C API only: Open MPI's mpi.h otherwise drags in the deprecated C++ bindings, which live in
// libmpi_cxx and are not part of MPI::MPI_C.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <exception>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "trainer/dist.h"

namespace azr::trainer::dist {
namespace {

constexpr std::size_t kMaxRootScratchBytes = std::size_t{256} << 20;

std::string mpi_error(int rc) {
  char buf[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  if (MPI_Error_string(rc, buf, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(rc);
  return std::string(buf, static_cast<std::size_t>(len));
}

}  // namespace

struct MpiCommunicator::Impl {
  MPI_Comm comm = MPI_COMM_NULL;
  bool we_initialized = false;
  int rank = 0, size = 1;
  MpiOptions options;
  std::vector<double> scratch;  // double storage keeps it aligned for float and double

  void check(int rc, const char* what) const {
    if (rc != MPI_SUCCESS)
      throw std::runtime_error(std::string("mpi: ") + what + " failed on rank " +
                               std::to_string(rank) + ": " + mpi_error(rc));
  }

  // Every rank learns whether all ranks passed the same value, and all throw together instead
  // of some hanging in a mismatched collective.
  void check_same(long long value, const char* what) const {
    long long in[2] = {value, -value}, out[2] = {0, 0};
    check(MPI_Allreduce(in, out, 2, MPI_LONG_LONG, MPI_MAX, comm), "MPI_Allreduce (argument check)");
    if (out[0] != -out[1])
      throw std::runtime_error(std::string("mpi: ranks disagree on ") + what + " (between " +
                               std::to_string(-out[1]) + " and " + std::to_string(out[0]) +
                               "; this rank " + std::to_string(rank) + " has " +
                               std::to_string(value) + ")");
  }

  void bcast_bytes(char* data, std::size_t n, int root) const {
    const std::size_t step = std::max<std::size_t>(
        1, std::min<std::size_t>(options.bcast_chunk_bytes, static_cast<std::size_t>(INT_MAX)));
    for (std::size_t off = 0; off < n; off += step) {
      const int count = static_cast<int>(std::min(step, n - off));
      check(MPI_Bcast(data + off, count, MPI_BYTE, root, comm), "MPI_Bcast (bytes)");
    }
  }

  template <typename T>
  void allreduce(std::span<T> data, MPI_Datatype type) {
    check_same(static_cast<long long>(data.size()), "allreduce_sum element count");
    if (size == 1 || data.empty()) return;
    const std::size_t by_memory =
        std::max<std::size_t>(1, kMaxRootScratchBytes / sizeof(T) / static_cast<std::size_t>(size));
    const std::size_t chunk = std::max<std::size_t>(
        1, std::min({options.chunk_elems, by_memory,
                     static_cast<std::size_t>(INT_MAX) / static_cast<std::size_t>(size)}));
    T* gathered = nullptr;
    if (rank == 0) {
      const std::size_t need = chunk * static_cast<std::size_t>(size) * sizeof(T);
      scratch.resize((need + sizeof(double) - 1) / sizeof(double));
      gathered = reinterpret_cast<T*>(scratch.data());
    }
    for (std::size_t off = 0; off < data.size(); off += chunk) {
      const std::size_t n = std::min(chunk, data.size() - off);
      T* mine = data.data() + off;
      check(MPI_Gather(mine, static_cast<int>(n), type, gathered, static_cast<int>(n), type, 0, comm),
            "MPI_Gather (allreduce)");
      if (rank == 0) {
        // Rank-outer, element-inner: each element is still ((x0 + x1) + x2) + ..., and the
        // inner loop vectorises without reassociating anything.
        std::memcpy(mine, gathered, n * sizeof(T));
        for (int r = 1; r < size; ++r) {
          const T* theirs = gathered + static_cast<std::size_t>(r) * n;
          for (std::size_t i = 0; i < n; ++i) mine[i] = mine[i] + theirs[i];
        }
      }
      check(MPI_Bcast(mine, static_cast<int>(n), type, 0, comm), "MPI_Bcast (allreduce)");
    }
  }
};

MpiCommunicator::MpiCommunicator(const LaunchInfo& launch, MpiOptions options)
    : impl_(std::make_unique<Impl>()) {
  impl_->options = options;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized)
    throw std::runtime_error("mpi: MPI was already finalized in this process; it cannot be "
                             "initialised again (one MpiCommunicator per process)");
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = 0;
    // Errors inside MPI_Init are fatal in Open MPI whatever the handler, so a failure here
    // usually aborts with Open MPI's own message; the check covers implementations that return.
    const int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
    if (rc != MPI_SUCCESS)
      throw std::runtime_error("mpi: MPI_Init_thread failed: " + mpi_error(rc));
    impl_->we_initialized = true;
    if (provided < MPI_THREAD_FUNNELED) {
      MPI_Finalize();
      throw std::runtime_error("mpi: the MPI library does not provide MPI_THREAD_FUNNELED");
    }
  }
  int rc = MPI_Comm_dup(MPI_COMM_WORLD, &impl_->comm);
  if (rc == MPI_SUCCESS) rc = MPI_Comm_set_errhandler(impl_->comm, MPI_ERRORS_RETURN);
  if (rc == MPI_SUCCESS) rc = MPI_Comm_rank(impl_->comm, &impl_->rank);
  if (rc == MPI_SUCCESS) rc = MPI_Comm_size(impl_->comm, &impl_->size);
  std::string error;
  if (rc != MPI_SUCCESS) {
    error = "mpi: setting up the communicator failed: " + mpi_error(rc);
  } else if (launch.launcher != "single" &&
             (impl_->size != launch.world_size || impl_->rank != launch.rank)) {
    error = "mpi: MPI says rank " + std::to_string(impl_->rank) + " of " +
            std::to_string(impl_->size) + " but the " + launch.launcher + " environment says rank " +
            std::to_string(launch.rank) + " of " + std::to_string(launch.world_size) +
            " (was the program started by a different launcher than MPI's?)";
  }
  if (!error.empty()) {
    if (impl_->comm != MPI_COMM_NULL) MPI_Comm_free(&impl_->comm);
    if (impl_->we_initialized) MPI_Finalize();
    throw std::runtime_error(error);
  }
  rank_ = impl_->rank;
  size_ = impl_->size;
}

MpiCommunicator::~MpiCommunicator() {
  if (!impl_) return;
  // Destroyed by an exception on its way out of this rank: the other ranks are, or soon will
  // be, blocked in a collective this rank never joins, and MPI_Finalize would wait for them
  // forever. Take the whole job down instead, so mpirun exits with an error.
  if (std::uncaught_exceptions() > 0) {
    std::fprintf(stderr, "mpi: rank %d is unwinding with an exception; aborting the MPI job\n",
                 impl_->rank);
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  if (impl_->comm != MPI_COMM_NULL) MPI_Comm_free(&impl_->comm);
  if (impl_->we_initialized) MPI_Finalize();
}

void MpiCommunicator::allreduce_sum(std::span<float> data) { impl_->allreduce(data, MPI_FLOAT); }
void MpiCommunicator::allreduce_sum(std::span<double> data) { impl_->allreduce(data, MPI_DOUBLE); }

void MpiCommunicator::broadcast(std::string& bytes, int root) {
  impl_->check_same(root, "broadcast root");
  if (root < 0 || root >= size_)
    throw std::invalid_argument("mpi: broadcast root " + std::to_string(root) +
                                " is outside [0, " + std::to_string(size_) + ")");
  std::uint64_t len = rank_ == root ? bytes.size() : 0;
  impl_->check(MPI_Bcast(&len, 1, MPI_UINT64_T, root, impl_->comm), "MPI_Bcast (length)");
  if (rank_ != root) bytes.resize(len);
  impl_->bcast_bytes(bytes.data(), len, root);
}

// One broadcast per rank rather than MPI_Allgatherv, whose int displacements cap the total at
// 2 GiB; allgather carries small metadata, so P broadcast latencies are fine.
std::vector<std::string> MpiCommunicator::allgather(const std::string& bytes) {
  std::vector<std::uint64_t> lens(static_cast<std::size_t>(size_));
  std::uint64_t mine = bytes.size();
  impl_->check(MPI_Allgather(&mine, 1, MPI_UINT64_T, lens.data(), 1, MPI_UINT64_T, impl_->comm),
               "MPI_Allgather (lengths)");
  std::vector<std::string> out(static_cast<std::size_t>(size_));
  for (int r = 0; r < size_; ++r) {
    auto& s = out[static_cast<std::size_t>(r)];
    if (r == rank_) s = bytes;
    else s.resize(lens[static_cast<std::size_t>(r)]);
    impl_->bcast_bytes(s.data(), s.size(), r);
  }
  return out;
}

void MpiCommunicator::barrier() { impl_->check(MPI_Barrier(impl_->comm), "MPI_Barrier"); }

}  // namespace azr::trainer::dist
