// NcclCommunicator: all-reduce of GPU buffers between ranks, one GPU per rank.
//
// Built only where CUDA and NCCL exist (AZR_HAVE_NCCL); the host Communicator (MPI or TCP)
// is used once, to hand rank 0's ncclUniqueId to everyone.
//
// Determinism: NCCL's ring and tree all-reduce reduce each element exactly once and then copy
// the result to every rank, so all ranks end with bitwise-identical buffers, which is what the
// trainer checks. The summation order is NCCL's (ring position, chunking), not rank order, so
// results match the host backends only up to rounding; runs are reproducible for the same
// NCCL version, topology and rank count. Pin NCCL_ALGO=Ring NCCL_PROTO=Simple to keep NCCL's
// size-based algorithm choice out of the picture.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstddef>

#include "trainer/dist.h"

namespace azr::trainer::dist {

class NcclCommunicator {
 public:
  // Collective over `host`: every rank must call it. Selects `device` on this thread.
  NcclCommunicator(Communicator& host, int device);
  ~NcclCommunicator();
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  int device() const { return device_; }

  // In place, enqueued on `stream`; the caller synchronises the stream before reading.
  void allreduce_sum(float* device_ptr, std::size_t n, cudaStream_t stream);
  // `device_ptr` points to n __nv_bfloat16 values (NCCL >= 2.10).
  void allreduce_sum_bf16(void* device_ptr, std::size_t n, cudaStream_t stream);
  // Raw bytes from `root` into everyone's buffer, e.g. the initial weights.
  void broadcast(void* device_ptr, std::size_t bytes, int root, cudaStream_t stream);

 private:
  void check_async() const;

  ncclComm_t comm_ = nullptr;
  int rank_ = 0, size_ = 1, device_ = 0;
};

}  // namespace azr::trainer::dist
