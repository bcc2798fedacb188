// Distributed runtime of the trainer: which rank am I, the host-side collectives, and the
// device-side gradient sum (DeviceReducer, NCCL) a GPU run may use instead of a host copy.
//
// The trainer is data parallel: every rank holds the whole model, gradients are summed with
// allreduce_sum, and rank 0 broadcasts each step's tasks. The trainer asserts that all ranks
// hold bitwise-identical weights after each step, so every collective here is deterministic:
// floating-point sums are always formed as ((x0 + x1) + x2) + ... in rank order at one place
// and the result is copied to everyone, never reduced along an algorithm-dependent tree.
//
// Threading: every Communicator is used from one thread (MPI is initialised FUNNELED).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace azr::trainer::dist {

struct LaunchInfo {
  int rank = 0, world_size = 1, local_rank = 0, local_world_size = 1;
  // "single" | "mpirun" | "srun" | "torchrun"
  std::string launcher = "single";
  // Set by torchrun; read for every launcher so the tcp backend can be forced under srun too.
  std::string master_addr;
  int master_port = 0;
};

// Which launcher started us, decided from the environment. Precedence, first match wins:
//   1. OMPI_COMM_WORLD_RANK            -> "mpirun" (Open MPI sets it per process)
//   2. RANK and WORLD_SIZE both set    -> "torchrun"
//   3. SLURM_PROCID                    -> "srun"
//   4. PMI_RANK / PMIX_RANK            -> "mpirun" (MPICH hydra, PRRTE)
//   5. otherwise                       -> "single"
// Open MPI's variables are per process and cannot be stale, so they beat a RANK left over in a
// user's shell. torchrun beats srun because `srun torchrun ...` is the usual multi-node
// pattern: SLURM_PROCID then numbers the torchrun agents, RANK the actual workers. srun beats
// PMI*/PMIX_* because srun --mpi=pmix sets those as well. A lone RANK without WORLD_SIZE is
// ignored (it is not a torchrun launch). Bad values (non-numeric, negative, rank >= world,
// torchrun with world > 1 and no MASTER_ADDR/MASTER_PORT) throw std::invalid_argument naming
// the variable.
LaunchInfo detect_launch(const std::map<std::string, std::string>& env);
LaunchInfo detect_launch();  // the process environment

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string backend() const = 0;  // "single" | "mpi" | "tcp"
  // In place; every rank ends with bitwise-identical results, the rank-order left fold.
  virtual void allreduce_sum(std::span<float> data) = 0;
  virtual void allreduce_sum(std::span<double> data) = 0;
  // `bytes` on `root` is sent to everyone; non-roots are resized to fit.
  virtual void broadcast(std::string& bytes, int root) = 0;
  // result[r] = rank r's bytes, on every rank.
  virtual std::vector<std::string> allgather(const std::string& bytes) = 0;
  virtual void barrier() = 0;
};

// Elements per allreduce chunk. The root keeps one chunk per rank (MPI) or one chunk in total
// (TCP) as scratch, so memory is bounded whatever the gradient size.
inline constexpr std::size_t kDefaultChunkElems = std::size_t{4} << 20;

class SingleCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string backend() const override { return "single"; }
  void allreduce_sum(std::span<float>) override {}
  void allreduce_sum(std::span<double>) override {}
  void broadcast(std::string& bytes, int root) override;
  std::vector<std::string> allgather(const std::string& bytes) override { return {bytes}; }
  void barrier() override {}
};

struct MpiOptions {
  std::size_t chunk_elems = kDefaultChunkElems;
  // Largest single MPI message for broadcast payloads; MPI counts are int.
  std::size_t bcast_chunk_bytes = std::size_t{1} << 30;
};

// MPI_COMM_WORLD (duplicated, errors returned rather than fatal). MPI_Init_thread at
// construction unless MPI is already initialised, MPI_Finalize at destruction if we initialised
// it. MPI cannot be initialised twice in a process, so at most one per process lifetime.
// Destroyed while an exception unwinds, it calls MPI_Abort: a rank that leaves mid-job would
// otherwise leave the others blocked in their next collective, and itself in MPI_Finalize.
// Collectives first agree on their arguments (element count, root) with one small
// MPI_Allreduce, so a mismatch throws on every rank instead of hanging or truncating.
// allreduce: per chunk MPI_Gather to rank 0, summed there in rank order, MPI_Bcast back.
class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(const LaunchInfo& launch, MpiOptions options = {});
  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "mpi"; }
  void allreduce_sum(std::span<float> data) override;
  void allreduce_sum(std::span<double> data) override;
  void broadcast(std::string& bytes, int root) override;
  std::vector<std::string> allgather(const std::string& bytes) override;
  void barrier() override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int rank_ = 0, size_ = 1;
};

struct TcpOptions {
  // How long rank 0 waits for all peers, and peers retry connecting to rank 0.
  std::chrono::milliseconds connect_timeout{60'000};
  // Longest wait without any progress inside a collective before a peer is declared dead. Rank 0
  // alone evaluates and writes checkpoints while the others wait in a collective (a 3B run's
  // weights and Adam state are about 36 GB): 30 minutes, as torch.distributed's default, not 10.
  std::chrono::milliseconds io_timeout{1'800'000};
  std::size_t chunk_elems = kDefaultChunkElems;
};

// Star through rank 0 over TCP, for torchrun-style launches without MPI. Rank 0 listens on
// MASTER_PORT (all interfaces), the others connect to MASTER_ADDR:MASTER_PORT. Each
// collective starts with a header from every peer that rank 0 checks, so ranks calling
// different collectives fail loudly instead of misreading each other's bytes.
class TcpCommunicator final : public Communicator {
 public:
  explicit TcpCommunicator(const LaunchInfo& launch, TcpOptions options = {});
  ~TcpCommunicator() override;
  TcpCommunicator(const TcpCommunicator&) = delete;
  TcpCommunicator& operator=(const TcpCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "tcp"; }
  void allreduce_sum(std::span<float> data) override;
  void allreduce_sum(std::span<double> data) override;
  void broadcast(std::string& bytes, int root) override;
  std::vector<std::string> allgather(const std::string& bytes) override;
  void barrier() override;

 private:
  template <typename T>
  void allreduce_impl(std::span<T> data, std::uint32_t dtype);
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int rank_ = 0, size_ = 1;
};

// The backend "auto" resolves to for this launch: "single" when world_size == 1, "mpi" for
// mpirun/srun, "tcp" for torchrun. Named backends are returned as is after validation;
// unknown names throw std::invalid_argument.
std::string resolve_backend(const LaunchInfo& launch, const std::string& backend);

// Throws std::runtime_error with a clear message when the backend cannot start. io_timeout: the
// TCP backend's TcpOptions::io_timeout (MPI waits without one).
std::unique_ptr<Communicator> make_communicator(const LaunchInfo& launch, const std::string& backend = "auto",
                                                std::chrono::milliseconds io_timeout = TcpOptions{}.io_timeout);

// Throws std::runtime_error, on every rank alike, where the ranks' values differ: "<what>: rank r
// has 'x', rank 0 'y'". An allgather, so no rank is left waiting in a collective the others skip.
void check_ranks_agree(Communicator& comm, const std::string& value, const std::string& what);

// Sums float buffers that live on a GPU across ranks, without a copy through the host (NCCL).
// The host communicators above sum host memory; a GPU run without a DeviceReducer sends its
// gradients through one download and one upload per step (trainer/policy.cpp).
//
// Unlike the host communicators, the summation order is NCCL's (ring position, chunking), not
// rank order: every rank still ends with bitwise-identical sums (each element is reduced once and
// copied), which is what the trainer's replica check needs, but the sums equal the host
// backends' only up to float rounding beyond 2 ranks.
class DeviceReducer {
 public:
  virtual ~DeviceReducer() = default;
  // In place over `device_data`, a device pointer of the reducer's GPU; enqueued on the stream it
  // was made with, so it runs after the work already queued there and before what follows.
  // Errors of earlier asynchronous work surface here as std::runtime_error.
  virtual void allreduce_sum(std::span<float> device_data) = 0;
};

// Whether this build has NCCL (trainer/dist.cmake: CUDA and NCCL found).
bool nccl_compiled();
// Whether this build has the MPI backend (AZR_MPI, on by default). Without it, make_communicator
// refuses "mpi", and "auto" under mpirun or srun, naming --dist tcp.
bool mpi_compiled();
// NCCL over this thread's current CUDA device, ordered on `cuda_stream` (a cudaStream_t, passed
// opaquely so this header needs no CUDA headers). Collective over `host`, which hands rank 0's
// NCCL id to the others: every rank must call it. Throws std::runtime_error naming the failure,
// or saying the build has no NCCL.
std::unique_ptr<DeviceReducer> make_nccl_reducer(Communicator& host, void* cuda_stream);

}  // namespace azr::trainer::dist
