#pragma once
// The backends a command can run the model on, by the name users type (`--device`,
// `model.device`): "cpu" (kernels/cpu), "cuda" (kernels/cuda, where the build has it and a GPU
// is usable) and "cpu-guarded" (kernels/guarded: the CPU kernels behind memory the host cannot
// touch, for checking a code path without a GPU).
#include <string>
#include <string_view>
#include <vector>

#include "kernels/ops.h"

namespace azr::kernels {

// The names this build knows, in the order above ("cuda" only where it was compiled).
std::vector<std::string> backend_names();

// The op table for `device`, with GEMMs of the given precision (kernels/ops.h). With "cuda", GPU
// `device_index` modulo the visible GPUs becomes this thread's current device (a data-parallel
// rank passes its local rank). Throws std::invalid_argument with one line a user can act on: an
// unknown name (listing the known ones), a build without CUDA, or no usable GPU (the CUDA
// runtime's reason).
const Ops& backend_ops(std::string_view device, int device_index = 0,
                       MatmulPrecision precision = MatmulPrecision::Fp32);

// Whether backend_ops(device) can give a table on this machine: false, with the reason in *why,
// for a name this build does not know or "cuda" with no usable GPU. For a benchmark, which has
// nothing to measure then and says so, where a command would stop with backend_ops' error.
bool device_usable(std::string_view device, std::string* why);

// The memory a model on `device` can use, in bytes: the GPU's (device_index modulo the visible
// GPUs) for "cuda", this machine's physical memory for the CPU devices; split evenly among the
// `local_ranks` ranks of this machine that share it (ranks_sharing). Throws as backend_ops.
double device_memory_bytes(std::string_view device, int device_index = 0, int local_ranks = 1);

// Of `local_ranks` ranks on one machine over `devices` devices, rank r on device r % devices, how
// many share local rank `local_rank`'s device (itself included): all of them on one device (the
// CPU). Each planned for the whole device before 2026-11-29.
int ranks_sharing(int local_rank, int local_ranks, int devices);

// The stream `device`'s ops run on, for work that must be ordered with them (the NCCL
// all-reduce of a GPU run's gradients, trainer/dist.h): the cudaStream_t of this thread's
// current GPU for "cuda" (call after backend_ops), nullptr for the host devices. Throws as
// backend_ops.
void* device_stream(std::string_view device);

// What a training run on `device` can expect of its bits, for the run's log: on "cuda", whether a
// step gives the same bits every run on one GPU model and CUDA version, and if not, the settings
// that make them vary (AZR_CUDA_GRADIENT_SUMS=atomic, AZR_CUDA_ATTENTION_BACKWARD=merged,
// AZR_CUBLASLT_AUTOTUNE=1); "" for the CPU devices, whose steps always do. Reads the settings as
// backend_ops does (it throws as backend_ops on a bad value), without a GPU.
std::string reproducibility_note(std::string_view device);

// "fp32" | "bf16", the names of `--matmul-precision` and `model.matmul_precision`. parse throws
// std::invalid_argument naming the known ones.
MatmulPrecision parse_matmul_precision(std::string_view name);
const char* matmul_precision_name(MatmulPrecision p);
std::vector<std::string> matmul_precision_names();
// The precision a setting names for a device: "auto" (the settings' default) is bf16 on a GPU
// ("cuda": the tensor cores; fp32 GEMMs there run on CUDA cores, and decode streams twice the
// weight bytes) and fp32 elsewhere (the CPU's bf16 table is a reference, slower than its fp32
// one); else parse_matmul_precision's, whose error then names "auto" too.
MatmulPrecision resolve_matmul_precision(std::string_view name, std::string_view device);

}  // namespace azr::kernels
