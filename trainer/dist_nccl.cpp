// NcclCommunicator. Compiled only with CUDA + NCCL (see trainer/dist.cmake).
#include "trainer/dist_nccl.h"

#include <cstring>
#include <exception>
#include <stdexcept>
#include <string>

namespace azr::trainer::dist {
namespace {

void nccl_check(ncclResult_t rc, const char* what, int rank) {
  if (rc != ncclSuccess)
    throw std::runtime_error(std::string("nccl: ") + what + " failed on rank " +
                             std::to_string(rank) + ": " + ncclGetErrorString(rc));
}

void cuda_check(cudaError_t rc, const char* what, int rank) {
  if (rc != cudaSuccess)
    throw std::runtime_error(std::string("nccl: ") + what + " failed on rank " +
                             std::to_string(rank) + ": " + cudaGetErrorString(rc));
}

}  // namespace

NcclCommunicator::NcclCommunicator(Communicator& host, int device)
    : rank_(host.rank()), size_(host.size()), device_(device) {
  std::string id_bytes;
  ncclUniqueId id;
  std::memset(&id, 0, sizeof id);
  // ncclGetUniqueId opens rank 0's bootstrap socket; only rank 0 may create the id.
  if (rank_ == 0) {
    nccl_check(ncclGetUniqueId(&id), "ncclGetUniqueId", rank_);
    id_bytes.assign(reinterpret_cast<const char*>(&id), sizeof id);
  }
  host.broadcast(id_bytes, 0);
  if (id_bytes.size() != sizeof id)
    throw std::runtime_error("nccl: received a unique id of " + std::to_string(id_bytes.size()) +
                             " bytes, expected " + std::to_string(sizeof id));
  std::memcpy(&id, id_bytes.data(), sizeof id);
  cuda_check(cudaSetDevice(device_), "cudaSetDevice", rank_);
  nccl_check(ncclCommInitRank(&comm_, size_, id, rank_), "ncclCommInitRank", rank_);
}

NcclCommunicator::~NcclCommunicator() {
  if (!comm_) return;
  // On the way out of an exception the other ranks may be inside a collective that this rank will
  // never join, and destroying the communicator waits for it to be quiet: the process would hang
  // here and never reach the host communicator's abort (MPI_Abort), which ends the other ranks,
  // nor exit, which ends them under torchrun. The process is ending: the communicator is left to it.
  if (std::uncaught_exceptions() > 0) return;
  // Destroy waits for outstanding work; after an asynchronous error that work never ends, so
  // abort instead of hanging the process on its way out.
  ncclResult_t async = ncclSuccess;
  if (ncclCommGetAsyncError(comm_, &async) == ncclSuccess && async == ncclSuccess)
    ncclCommDestroy(comm_);
  else
    ncclCommAbort(comm_);
}

void NcclCommunicator::check_async() const {
  ncclResult_t async = ncclSuccess;
  nccl_check(ncclCommGetAsyncError(comm_, &async), "ncclCommGetAsyncError", rank_);
  nccl_check(async, "an earlier asynchronous NCCL operation", rank_);
}

void NcclCommunicator::allreduce_sum(float* device_ptr, std::size_t n, cudaStream_t stream) {
  check_async();
  nccl_check(ncclAllReduce(device_ptr, device_ptr, n, ncclFloat32, ncclSum, comm_, stream),
             "ncclAllReduce(float)", rank_);
}

void NcclCommunicator::allreduce_sum_bf16(void* device_ptr, std::size_t n, cudaStream_t stream) {
#if defined(NCCL_VERSION_CODE) && NCCL_VERSION_CODE >= 21000
  check_async();
  nccl_check(ncclAllReduce(device_ptr, device_ptr, n, ncclBfloat16, ncclSum, comm_, stream),
             "ncclAllReduce(bf16)", rank_);
#else
  (void)device_ptr;
  (void)n;
  (void)stream;
  throw std::runtime_error("nccl: bf16 all-reduce needs NCCL >= 2.10");
#endif
}

void NcclCommunicator::broadcast(void* device_ptr, std::size_t bytes, int root, cudaStream_t stream) {
  if (root < 0 || root >= size_)
    throw std::invalid_argument("nccl: broadcast root " + std::to_string(root) + " is outside [0, " +
                                std::to_string(size_) + ")");
  check_async();
  nccl_check(ncclBroadcast(device_ptr, device_ptr, bytes, ncclUint8, root, comm_, stream),
             "ncclBroadcast", rank_);
}

}  // namespace azr::trainer::dist
