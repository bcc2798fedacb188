#pragma once
// How the environment spells whether the CUDA backend launches the decode step's kernels with
// programmatic dependent launch (AZR_CUDA_PDL; kernels/cuda/cuda_ops.h says what that does),
// whether its GEMM plans time cuBLASLt's candidates (AZR_CUBLASLT_AUTOTUNE), and whether a decode
// step's layers at one row run as one persistent kernel (AZR_CUDA_DECODE_LAYERS), and that
// kernel's tuning's ranges, and how the training step sums gradients over rows
// (AZR_CUDA_GRADIENT_SUMS). Plain
// C++, outside kernels/cuda, so that the parsing is built and tested where there is no CUDA.
#include <cstdint>
#include <stdexcept>
#include <string>

namespace azr::kernels {

// "" (unset), "1" or "on": programmatic launches where the device has them (the default since its
// GPU tests passed on an H100, 2026-11-26, where recorded 0.5B decode steps at batch 1 took 1.01 ms
// with it against 1.13 without; 1.5B's 2.00 against 2.01, batches 64 and 256 within noise); "0"
// or "off": ordinary launches; anything else is an std::invalid_argument that names the variable,
// the value and the values it takes.
inline bool parse_cuda_pdl(const std::string& value) {
  if (value.empty() || value == "1" || value == "on") return true;
  if (value == "0" || value == "off") return false;
  throw std::invalid_argument("AZR_CUDA_PDL=" + value + ": expected 1 or on, 0 or off");
}

// AZR_CUBLASLT_AUTOTUNE: "" (unset), "0" or "off": every cuBLASLt plan runs the heuristic's
// first algorithm (the default: a run's bits then depend on nothing but its inputs); "1" or "on":
// a plan for a product of at least kAutotuneFlops, made outside a stream capture, times the
// heuristic's first eight algorithms on its operands and keeps the fastest, as PyTorch's TunableOp
// does, opt-in for the same reason: which algorithm wins, and so the sums' order, can change
// from run to run with timing noise. Anything else is an std::invalid_argument that names the
// variable, the value and the values it takes.
inline bool parse_cublaslt_autotune(const std::string& value) {
  if (value == "1" || value == "on") return true;
  if (value.empty() || value == "0" || value == "off") return false;
  throw std::invalid_argument("AZR_CUBLASLT_AUTOTUNE=" + value + ": expected 1 or on, 0 or off");
}

// AZR_CUDA_GRADIENT_SUMS: "" (unset) or "ordered": the training step's sums over rows (the bias
// and RMSNorm weight gradients, RoPE's bias sums, the embedding's gradient, the gradient norm) run
// in an order the shapes fix (kernels/cuda/ordered_sums.cuh), so a step gives the same bits every
// run; "atomic": float atomics, in whatever order blocks finish (the bits vary run to run).
// Returns whether the sums are ordered. Anything else is an std::invalid_argument that names the
// variable, the value and the values it takes.
inline bool parse_cuda_gradient_sums(const std::string& value) {
  if (value.empty() || value == "ordered") return true;
  if (value == "atomic") return false;
  throw std::invalid_argument("AZR_CUDA_GRADIENT_SUMS=" + value + ": expected ordered or atomic");
}

// AZR_CUDA_DECODE_LAYERS: "" (unset) or "launches": a decode step's layers at one row are five
// launches each (the default, measured); "persistent": one kernel for all of them
// (kernels/cuda/decode_layers.cuh), opt-in until a GPU run has measured it. Anything else is an
// std::invalid_argument that names the variable, the value and the values it takes.
inline bool parse_cuda_decode_layers(const std::string& value) {
  if (value == "persistent") return true;
  if (value.empty() || value == "launches") return false;
  throw std::invalid_argument("AZR_CUDA_DECODE_LAYERS=" + value + ": expected launches or persistent");
}

// The persistent decode kernel's tuning (kernels/cuda/cuda_ops.h, cuda_set_decode_layers_tuning):
// what a block asks L2 for before each grid barrier, 0 to kMaxDecodeLayersPrefetchBytes; its
// blocks a multiprocessor, 0 (as many as fit) or more; and the slices of gate and up it asks for
// while the attention runs, and of down while gate and up run, 0 to kMaxDecodeLayersSlices each;
// and, for the five launches a layer, what the o projection asks L2 for ahead of gate and of up,
// 0 to kMaxDecodeLayersAheadBytes, whole 16-byte units.
// Out of range: an std::invalid_argument that names the field, the value and its range.
constexpr int64_t kMaxDecodeLayersPrefetchBytes = int64_t(1) << 20;
constexpr int kMaxDecodeLayersSlices = 16;
constexpr int64_t kMaxDecodeLayersAheadBytes = int64_t(64) << 20;
inline void check_decode_layers_tuning(int64_t prefetch_bytes_per_block, int blocks_per_multiprocessor,
                                       int gate_up_slices_at_attention, int down_slices_at_gate_up,
                                       int64_t gate_up_ahead_bytes = 0) {
  if (gate_up_ahead_bytes < 0 || gate_up_ahead_bytes > kMaxDecodeLayersAheadBytes || gate_up_ahead_bytes % 16 != 0)
    throw std::invalid_argument("decode layers tuning: gate_up_ahead_bytes " + std::to_string(gate_up_ahead_bytes) +
                                " is outside 0.." + std::to_string(kMaxDecodeLayersAheadBytes) +
                                " or not a multiple of 16");
  if (prefetch_bytes_per_block < 0 || prefetch_bytes_per_block > kMaxDecodeLayersPrefetchBytes)
    throw std::invalid_argument("decode layers tuning: prefetch_bytes_per_block " +
                                std::to_string(prefetch_bytes_per_block) + " is outside 0.." +
                                std::to_string(kMaxDecodeLayersPrefetchBytes));
  if (blocks_per_multiprocessor < 0)
    throw std::invalid_argument("decode layers tuning: blocks_per_multiprocessor " +
                                std::to_string(blocks_per_multiprocessor) + " is negative (0: as many as fit)");
  const auto check_slices = [](const char* field, int slices) {
    if (slices < 0 || slices > kMaxDecodeLayersSlices)
      throw std::invalid_argument(std::string("decode layers tuning: ") + field + " " + std::to_string(slices) +
                                  " is outside 0.." + std::to_string(kMaxDecodeLayersSlices));
  };
  check_slices("gate_up_slices_at_attention", gate_up_slices_at_attention);
  check_slices("down_slices_at_gate_up", down_slices_at_gate_up);
}

}  // namespace azr::kernels
