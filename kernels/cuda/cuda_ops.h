#pragma once
// The CUDA backend of the op table (kernels/ops.h), fp32 storage and fp32 accumulation: the
// same functions as kernels/cpu, on device memory, so every kernel is checked op for op
// against the CPU backend (tests/kernels/cuda_ops_test.cpp). Its MatmulPrecision::Bf16 table
// adds tensor-core GEMMs on bf16 operands, bf16 weights and a bf16 KV cache, checked against the
// CPU's bf16 table.
//
// Every pointer an op takes is a DEVICE pointer, the index arrays (ids, pos, slot, targets,
// AttentionShape::lengths) included. Ops run in order on one stream per device (common.cuh,
// op_stream()), which the table's synchronous upload and download wait for; an op that returns a
// value to the host (sum_squares) synchronises. The tables record and replay ops as CUDA graphs
// (Ops::recorder, kernels/cuda/graphs.cu).
//
// Only compiled where nvcc exists (AZR_HAVE_CUDA); this header needs no CUDA headers.
#include <cstddef>
#include <string>

#include "kernels/cuda_attention_choice.h"
#include "kernels/ops.h"

namespace azr::kernels {

const Ops& cuda_ops();
// The same with MatmulPrecision::Bf16 GEMMs (kernels/ops.h): operands rounded to bf16, tensor-core
// products, fp32 sums and outputs; checked against cpu_bf16_matmul_ops().
const Ops& cuda_bf16_matmul_ops();

// CUDA devices this process can use. 0 when there is no driver or no device; `why` (optional)
// then says which, in the CUDA runtime's words, for a test's skip message.
int cuda_device_count(std::string* why = nullptr);
// Makes device `index` current for this thread's later ops (cudaSetDevice); throws
// std::runtime_error naming the CUDA error. Call before the first allocation.
void cuda_select_device(int index);
// "NVIDIA H100 80GB HBM3 (sm_90, 79.1 GiB, 3352 GB/s)" for device `index`.
std::string cuda_device_description(int index = 0);
// Memory of device `index` in bytes (cudaDeviceProp::totalGlobalMem).
double cuda_total_memory(int index = 0);
// Peak memory bandwidth of the device in bytes/s (from its bus width and memory clock).
double cuda_peak_bandwidth(int index = 0);
// The architectures this binary carries code for, e.g. "sm_80 sm_90".
std::string cuda_compiled_architectures();

// Device memory: kernels::Buffer<T>(cuda_ops(), n) (kernels/buffer.h), through the table's own
// alloc/upload/download, as the model holds it.

// Which kernels the Bf16 table's training attention (attention_forward/backward) runs.
// - Simt (kernels/cuda/attention.cu): fp32 arithmetic on q, k and v rounded to bf16; the
//   probabilities and gradients stay fp32. Equal to the CPU's Bf16 table up to fp32 summation order.
// - TensorCore (kernels/cuda/attention_tensor_core.cuh): WMMA bf16 products with fp32 sums. The
//   forward's probabilities enter P V as two bf16 terms, so its output is the Simt one to
//   fp32-level noise; backward rounds P and dS to one bf16 term. For head dims 64 and 128; other
//   shapes run Simt.
// - Mma: TensorCore's arithmetic on mma.sync (kernels/cuda/attention_mma.cuh): scores, softmax and
//   gradients in registers, the forward in one pass.
// The default is Mma (its GPU tests passed on an H100, 2026-11-26, and a 1.5B training step ran
// 1.12x faster with it than with TensorCore, which had been 1.6x faster than Simt on an H200); the
// environment variable AZR_CUDA_ATTENTION=simt (or tensor, or mma) sets the starting choice, and
// an unknown value is an std::invalid_argument at the first attention call
// (kernels/cuda_attention_choice.h: the enum and the parsing). Decode is unaffected.
void cuda_set_attention_kernel(CudaAttentionKernel kernel);
CudaAttentionKernel cuda_attention_kernel();

// The Mma kernels skip the causal mask on the tiles it cannot touch (a warp's rows see every key
// of the tile, and every row is real): the same bits, fewer instructions a tile. True runs the
// masked path on every tile, as before: the baseline of cuda_ops_bench's attention rows and of
// CudaTensorCoreAttention.MmaSkippingTheMasksOfWholeTilesChangesNoBit. Off by default; not a user setting.
void cuda_set_attention_masks_every_tile(bool every_tile);

// RMSNorm's backward holds a thread's share of a row in registers where the width allows (up to
// 4,096 columns in quads; kernels/cuda/rmsnorm_backward.cuh says why). True runs the loop form at
// every width, as before: the baseline of cuda_ops_bench's rmsnorm rows and of
// CudaOps.RmsNormBackwardHeldFormIsTheLoopForm. Off by default; not a user setting.
void cuda_set_rmsnorm_backward_loop(bool loop);

// Whether the training step's sums over rows (the bias and RMSNorm weight gradients, RoPE's bias
// sums, the embedding's gradient, the gradient norm) run in a fixed order, the same bits every
// run (the default), or with float atomics (kernels/cuda/ordered_sums.cuh says what each costs),
// from AZR_CUDA_GRADIENT_SUMS at the first such op or the backend's resolution
// (kernels/cuda_launch_choice.h), or set here.
void cuda_set_gradient_sums_ordered(bool ordered);
bool cuda_gradient_sums_ordered();

// RMSNorm's forward (and the residual add with it) holds a thread's values of a row in registers
// where the width allows (up to 4,096 columns; kernels/cuda/rmsnorm_forward.cuh says why), the
// same bits as the loop form, which true runs at every width: the baseline of cuda_ops_bench's
// rmsnorm rows and of CudaOps.RmsNormForwardHeldFormIsTheLoopForm. Off by default; not a user
// setting.
void cuda_set_rmsnorm_forward_loop(bool loop);

// The query rows each warp of the Mma forward owns: 16 (the default) or 32 (FlashAttention-2's
// geometry: 128-query blocks over 32-key tiles, kernels/cuda/attention_mma.cuh says why), from
// AZR_CUDA_ATTENTION_WARP_ROWS at the first Mma forward (kernels/cuda_attention_choice.h), or set
// here; another value is an std::invalid_argument. Backward is unaffected.
void cuda_set_attention_warp_rows(int rows);
int cuda_attention_warp_rows();

// Whether the Mma backward runs dQ in its own kernel (Split, the default) or adds it, and dK and
// dV, from one kernel with atomics (Merged; kernels/cuda/attention_mma_backward.cuh says why, and
// what it costs), from AZR_CUDA_ATTENTION_BACKWARD at the first Mma backward
// (kernels/cuda_attention_choice.h), or set here. The forward is unaffected.
void cuda_set_attention_backward(CudaAttentionBackward backward);
CudaAttentionBackward cuda_attention_backward();

// GEMM autotuning (AZR_CUBLASLT_AUTOTUNE; kernels/cuda_launch_choice.h has the spellings): off,
// every cuBLASLt plan runs its heuristic's first algorithm; on, a new plan of at least 2^30 FLOPs,
// made outside a graph's recording, times the heuristic's first eight on its call's operands
// (into a scratch output) and keeps the fastest, at the cost of a run's bits depending on which
// won. Off by default until a GPU run shows what it buys (cuda_ops_bench --only gemm_algos, and
// model_speed_bench under AZR_CUBLASLT_AUTOTUNE=1 in scripts/gpu_check.sh pending). Setting it
// drops every plan, so the next call of each shape plans again.
void cuda_set_cublaslt_autotune(bool on);
bool cuda_cublaslt_autotune();

// Programmatic dependent launch (PDL) of the decode step's kernels at few rows (the GEMV and the
// fused decode ops, the decode attention, the norms): each may start while the
// kernel before it finishes, prefetch its weights into L2 and wait on the device, not behind a
// launch gap (kernels/cuda/device_or_emulation.cuh, common.cuh's launch_after_prior). At batch 1
// a 1.5B step is about 200 kernels of a few microseconds each, so the gaps are a large share of it.
// Applies on sm_90 and later, with code compiled for it, inside recorded decode steps too. On by
// default since its GPU tests passed on an H100 (2026-11-26), where it made recorded 0.5B steps at
// batch 1 11% faster (1.01 ms against 1.13); AZR_CUDA_PDL=0 (or off) sets the starting choice,
// and an unknown value is an std::invalid_argument at the first launch that asks
// (kernels/cuda_launch_choice.h). Changing it makes a model record its decode steps anew.
void cuda_set_programmatic_launch(bool on);
bool cuda_programmatic_launch();          // the choice
bool cuda_programmatic_launch_applies();  // the choice, on a device and with code that have it

// A decode step's layers at one row (the table's decode_layers_w16) as one persistent kernel
// (true; kernels/cuda/decode_layers.cuh says why) or five launches a layer (false, the default),
// from AZR_CUDA_DECODE_LAYERS at the first call that asks (kernels/cuda_launch_choice.h), or set
// here. The same bits either way. Changing it makes a model record its decode steps anew.
void cuda_set_decode_layers_persistent(bool on);
bool cuda_decode_layers_persistent();
// How many persistent kernels this process has launched (or recorded), for the tests and benches
// that must know the kernel ran rather than its five-launch stand-in.
uint64_t cuda_decode_layers_persistent_launches();
// The persistent kernel's knobs that change no value, for a GPU run to tune
// (model_speed_bench --persistent-sweep): what each block asks L2 for before a grid barrier
// (0 to 1 MiB; decode_layers.cuh's kPrefetchBytesPerBlock by default), the blocks it keeps on
// each multiprocessor (1 or more; 0, the default: as many as fit, 2 at 1.5B), how many such
// slices of gate's and up's weights each block asks for while the attention runs (0 to 16;
// kGateUpSlicesAtAttention, 2, by default), and of down's while gate and up run (0 to 16;
// kDownSlicesAtGateUp, 1, by default). And one of the five launches a layer (the persistent kernel
// not chosen, or not applying): what the o projection's launch asks L2 for before its wait, from
// the start of the layer's gate weights and as much of its up weights (0, the default, to 64 MiB
// each, a multiple of 16; model_speed_bench --ahead-sweep). Under programmatic launch the o
// projection's blocks are resident while the attention runs, a few blocks' latency-bound work that
// leaves the memory nearly idle, and gate and up (55 MB at 1.5B) come right after it. Out of
// range: an std::invalid_argument naming the field (kernels/cuda_launch_choice.h), and the tuning
// kept. And of the few-row products at every row count (kernels/cuda/gemv.cuh, HeldPacks): whether
// each thread loads its first packs of weights into registers before its wait (true, the default
// since 2026-11-29, written without a GPU), so that under programmatic launch they arrive while the
// kernel before finishes; false loads them after it, with the L2 prefetch from each row's start, as
// before (model_speed_bench --ahead-sweep's `no-hold` row). And whether a few-row product of more
// blocks than the device holds at once runs as one wave of blocks that each take their turns at
// several blocks' items (kernels/cuda/gemv.cuh, one_wave; false, the default, written without a
// GPU on 2026-11-29: the `one-wave` row of --ahead-sweep). Changing either makes a model record
// its decode steps anew.
struct DecodeLayersTuning {
  int64_t prefetch_bytes_per_block = 32768;
  int blocks_per_multiprocessor = 0;
  int gate_up_slices_at_attention = 2;
  int down_slices_at_gate_up = 1;
  int64_t gate_up_ahead_bytes = 0;
  bool hold_first_weights = true;
  bool one_wave = false;
};
void cuda_set_decode_layers_tuning(DecodeLayersTuning tuning);
DecodeLayersTuning cuda_decode_layers_tuning();

// The stream this thread's current device runs the ops on (a cudaStream_t, opaque here), for
// work outside the table that must be ordered with them: NCCL's all-reduce of the gradients.
void* cuda_op_stream();

// Waits for every op queued so far; throws std::runtime_error naming a failed kernel's error.
void cuda_synchronize();

// Opens (on) or closes (off) the profilers' capture range (cudaProfilerStart / Stop), after
// waiting for what was queued: `ncu --profile-from-start off` then measures only the kernels
// launched in between (model_speed_bench --profile-range, scripts/gpu_check.sh).
void cuda_profiler_range(bool on);

// The bytes of device memory azr's allocations hold now and at most since cuda_reset_memory_peak()
// (kernels/memory_meter.h): the op table's buffers, the ops' grow-only scratch and cuBLASLt's
// workspace, on every device of the process; not the CUDA context or NCCL's own buffers.
size_t cuda_memory_in_use();
size_t cuda_memory_peak();
void cuda_reset_memory_peak();

}  // namespace azr::kernels
