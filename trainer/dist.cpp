// Launch detection, the single-process communicator, backend selection, and the NCCL gradient
// reducer's factory. The MPI and TCP communicators live in dist_mpi.cpp and dist_tcp.cpp, NCCL's
// wrapper in dist_nccl.cpp.
#include "trainer/dist.h"

#ifdef AZR_HAVE_NCCL
#include "trainer/dist_nccl.h"
#endif

#include <algorithm>
#include <charconv>
#include <optional>
#include <stdexcept>
#include <string_view>
#include <system_error>

extern char** environ;

namespace azr::trainer::dist {
namespace {

using Env = std::map<std::string, std::string>;

std::optional<std::string> get(const Env& env, const std::string& name) {
  auto it = env.find(name);
  if (it == env.end()) return std::nullopt;
  return it->second;
}

// Whole-string decimal integer; launchers never pad, so anything else is a misconfiguration
// worth stopping on rather than silently reading as 0.
int parse_int(const std::string& name, const std::string& value) {
  int out = 0;
  const char* first = value.data();
  const char* last = value.data() + value.size();
  auto [ptr, ec] = std::from_chars(first, last, out);
  if (value.empty() || ec != std::errc() || ptr != last)
    throw std::invalid_argument(name + "='" + value + "' is not an integer");
  return out;
}

int require_int(const Env& env, const std::string& name) {
  auto v = get(env, name);
  if (!v) throw std::invalid_argument(name + " is not set");
  return parse_int(name, *v);
}

std::optional<int> optional_int(const Env& env, const std::string& name) {
  auto v = get(env, name);
  if (!v) return std::nullopt;
  return parse_int(name, *v);
}

// SLURM_TASKS_PER_NODE looks like "4(x2),3": 4 tasks on each of the first two nodes, then 3.
std::optional<int> slurm_tasks_on_node(const std::string& spec, int node_id) {
  std::string_view rest = spec;
  int node = 0;
  while (!rest.empty()) {
    auto comma = rest.find(',');
    std::string_view item = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
    int tasks = 0, repeat = 1;
    auto paren = item.find("(x");
    std::string_view count = item.substr(0, paren);
    auto r1 = std::from_chars(count.data(), count.data() + count.size(), tasks);
    if (r1.ec != std::errc() || r1.ptr != count.data() + count.size()) return std::nullopt;
    if (paren != std::string_view::npos) {
      std::string_view rep = item.substr(paren + 2);
      if (rep.empty() || rep.back() != ')') return std::nullopt;
      rep.remove_suffix(1);
      auto r2 = std::from_chars(rep.data(), rep.data() + rep.size(), repeat);
      if (r2.ec != std::errc() || r2.ptr != rep.data() + rep.size()) return std::nullopt;
    }
    if (node_id < node + repeat) return tasks;
    node += repeat;
  }
  return std::nullopt;
}

void validate(const LaunchInfo& li, const std::string& rank_var, const std::string& size_var,
              const std::string& local_rank_var, const std::string& local_size_var) {
  if (li.world_size < 1)
    throw std::invalid_argument(size_var + "=" + std::to_string(li.world_size) + " must be >= 1");
  if (li.rank < 0 || li.rank >= li.world_size)
    throw std::invalid_argument(rank_var + "=" + std::to_string(li.rank) + " is outside [0, " +
                                size_var + "=" + std::to_string(li.world_size) + ")");
  if (li.local_world_size < 1)
    throw std::invalid_argument(local_size_var + "=" + std::to_string(li.local_world_size) +
                                " must be >= 1");
  if (li.local_rank < 0 || li.local_rank >= li.local_world_size)
    throw std::invalid_argument(local_rank_var + "=" + std::to_string(li.local_rank) +
                                " is outside [0, " + local_size_var + "=" +
                                std::to_string(li.local_world_size) + ")");
}

void read_master(const Env& env, LaunchInfo& li, bool required) {
  if (auto addr = get(env, "MASTER_ADDR")) li.master_addr = *addr;
  if (auto port = optional_int(env, "MASTER_PORT")) {
    if (*port < 1 || *port > 65535)
      throw std::invalid_argument("MASTER_PORT=" + std::to_string(*port) +
                                  " is outside [1, 65535]");
    li.master_port = *port;
  }
  if (!required) return;
  if (li.master_addr.empty())
    throw std::invalid_argument("MASTER_ADDR is not set (torchrun with WORLD_SIZE > 1)");
  if (li.master_port == 0)
    throw std::invalid_argument("MASTER_PORT is not set (torchrun with WORLD_SIZE > 1)");
}

}  // namespace

LaunchInfo detect_launch(const Env& env) {
  LaunchInfo li;
  if (get(env, "OMPI_COMM_WORLD_RANK")) {
    li.launcher = "mpirun";
    li.rank = require_int(env, "OMPI_COMM_WORLD_RANK");
    li.world_size = require_int(env, "OMPI_COMM_WORLD_SIZE");
    li.local_rank = optional_int(env, "OMPI_COMM_WORLD_LOCAL_RANK").value_or(0);
    li.local_world_size = optional_int(env, "OMPI_COMM_WORLD_LOCAL_SIZE").value_or(li.local_rank + 1);
    validate(li, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
             "OMPI_COMM_WORLD_LOCAL_SIZE");
    read_master(env, li, false);
    return li;
  }
  if (get(env, "RANK") && get(env, "WORLD_SIZE")) {
    li.launcher = "torchrun";
    li.rank = require_int(env, "RANK");
    li.world_size = require_int(env, "WORLD_SIZE");
    li.local_rank = optional_int(env, "LOCAL_RANK").value_or(0);
    li.local_world_size = optional_int(env, "LOCAL_WORLD_SIZE").value_or(li.local_rank + 1);
    validate(li, "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE");
    read_master(env, li, li.world_size > 1);
    return li;
  }
  if (get(env, "SLURM_PROCID")) {
    li.launcher = "srun";
    li.rank = require_int(env, "SLURM_PROCID");
    li.world_size = require_int(env, "SLURM_NTASKS");
    li.local_rank = optional_int(env, "SLURM_LOCALID").value_or(0);
    std::optional<int> local;
    auto node = optional_int(env, "SLURM_NODEID");
    if (auto spec = get(env, "SLURM_TASKS_PER_NODE"); spec && node)
      local = slurm_tasks_on_node(*spec, *node);
    if (!local) {
      // Without the per-node layout, a single node holds everyone; otherwise LOCALID+1 is
      // the best lower bound available.
      auto nnodes = optional_int(env, "SLURM_NNODES");
      local = (nnodes && *nnodes == 1) ? li.world_size : li.local_rank + 1;
    }
    li.local_world_size = *local;
    validate(li, "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_TASKS_PER_NODE");
    read_master(env, li, false);
    return li;
  }
  if (get(env, "PMI_RANK") || get(env, "PMIX_RANK")) {
    li.launcher = "mpirun";
    const std::string rank_var = get(env, "PMI_RANK") ? "PMI_RANK" : "PMIX_RANK";
    li.rank = require_int(env, rank_var);
    if (!get(env, "PMI_SIZE"))
      throw std::invalid_argument(rank_var + " is set but PMI_SIZE is not: cannot tell the world size");
    li.world_size = require_int(env, "PMI_SIZE");
    li.local_rank = optional_int(env, "MPI_LOCALRANKID").value_or(0);
    li.local_world_size = optional_int(env, "MPI_LOCALNRANKS").value_or(li.local_rank + 1);
    validate(li, rank_var, "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS");
    read_master(env, li, false);
    return li;
  }
  read_master(env, li, false);
  return li;
}

LaunchInfo detect_launch() {
  Env env;
  for (char** e = environ; e && *e; ++e) {
    std::string_view kv = *e;
    auto eq = kv.find('=');
    if (eq == std::string_view::npos) continue;
    env.emplace(std::string(kv.substr(0, eq)), std::string(kv.substr(eq + 1)));
  }
  return detect_launch(env);
}

void SingleCommunicator::broadcast(std::string&, int root) {
  if (root != 0)
    throw std::invalid_argument("broadcast root " + std::to_string(root) +
                                " is not a rank of a single-process world");
}

std::string resolve_backend(const LaunchInfo& launch, const std::string& backend) {
  if (backend == "auto") {
    if (launch.world_size == 1) return "single";
    if (launch.launcher == "mpirun" || launch.launcher == "srun") return "mpi";
    if (launch.launcher == "torchrun") return "tcp";
    throw std::invalid_argument("no backend for launcher '" + launch.launcher + "' with world size " +
                                std::to_string(launch.world_size));
  }
  if (backend == "single" || backend == "mpi" || backend == "tcp") return backend;
  throw std::invalid_argument("unknown distributed backend '" + backend +
                              "' (expected auto, single, mpi or tcp)");
}

std::unique_ptr<Communicator> make_communicator(const LaunchInfo& launch, const std::string& backend,
                                                std::chrono::milliseconds io_timeout) {
  const std::string chosen = resolve_backend(launch, backend);
  if (chosen == "single") {
    if (launch.world_size != 1)
      throw std::runtime_error("backend 'single' cannot serve a world of " +
                               std::to_string(launch.world_size) + " ranks (launcher " +
                               launch.launcher + ")");
    return std::make_unique<SingleCommunicator>();
  }
  if (chosen == "mpi") {
#ifdef AZR_HAVE_MPI
    return std::make_unique<MpiCommunicator>(launch);
#else
    throw std::runtime_error("this build of azr has no MPI backend (built with AZR_MPI=OFF); launched by " +
                             launch.launcher + ", its ranks can use --dist tcp with MASTER_ADDR and MASTER_PORT set");
#endif
  }
  TcpOptions options;
  options.io_timeout = io_timeout;
  // The rendezvous waits as long as a collective would: rank 0 verifies a checkpoint's checksums
  // (every byte, tens of GB at 3B) before it makes its communicator, and the peers gave up at the
  // fixed 60 s while --dist-timeout said 30 minutes (from an audit).
  options.connect_timeout = std::max(options.connect_timeout, io_timeout);
  return std::make_unique<TcpCommunicator>(launch, options);
}

#ifdef AZR_HAVE_MPI
bool mpi_compiled() { return true; }
#else
bool mpi_compiled() { return false; }
#endif

void check_ranks_agree(Communicator& comm, const std::string& value, const std::string& what) {
  if (comm.size() == 1) return;
  const std::vector<std::string> all = comm.allgather(value);
  for (size_t r = 1; r < all.size(); r++)
    if (all[r] != all[0])
      throw std::runtime_error(what + ": rank " + std::to_string(r) + " has '" + all[r] + "', rank 0 '" + all[0] + "'");
}

#ifdef AZR_HAVE_NCCL
namespace {

class NcclReducer final : public DeviceReducer {
 public:
  NcclReducer(Communicator& host, int device, cudaStream_t stream) : nccl_(host, device), stream_(stream) {}
  void allreduce_sum(std::span<float> device_data) override {
    if (!device_data.empty()) nccl_.allreduce_sum(device_data.data(), device_data.size(), stream_);
  }

 private:
  NcclCommunicator nccl_;
  cudaStream_t stream_;
};

}  // namespace

bool nccl_compiled() { return true; }

std::unique_ptr<DeviceReducer> make_nccl_reducer(Communicator& host, void* cuda_stream) {
  int device = 0;
  if (const cudaError_t rc = cudaGetDevice(&device); rc != cudaSuccess)
    throw std::runtime_error(std::string("nccl: no current CUDA device: ") + cudaGetErrorString(rc));
  return std::make_unique<NcclReducer>(host, device, static_cast<cudaStream_t>(cuda_stream));
}
#else
bool nccl_compiled() { return false; }

std::unique_ptr<DeviceReducer> make_nccl_reducer(Communicator&, void*) {
  throw std::runtime_error("this build of azr has no NCCL (it needs CUDA and NCCL at build time; set NCCL_HOME)");
}
#endif

}  // namespace azr::trainer::dist
