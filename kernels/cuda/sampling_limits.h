#pragma once
// The CUDA sampler's split and scratch sizes (sampling.cu), in plain C++ so that the memory plan
// (model/memory_plan.cpp) sizes the sampler's scratch from the same numbers the kernels use.
#include <cstdint>

namespace azr::kernels::cuda_detail::sampling {

// Parts a row is split into when the rows are too few to fill the GPU (sampling_common.cuh,
// parts_for): at least kMinParts, at most kMaxParts; rows past kMaxSplitRows are not split (the
// split kernels' grid holds the rows in y).
constexpr int64_t kMaxParts = 128;
constexpr int64_t kMinParts = 4;
constexpr int64_t kMaxSplitRows = 65535;

// The filtered split (sampling_filtered.cuh): kMassBins bins a row; a list of kListCapacity keys a
// row (128 KiB: the kept set of a peaked row, not of a nearly flat one, which is walked from the
// row instead); rows kSplitGroupRows at a time, so that the bins and lists stay under 40 MiB
// however many rows a call has.
constexpr int kMassBins = 2048;
constexpr int64_t kListCapacity = 16384;
constexpr int64_t kSplitGroupRows = 256;

}  // namespace azr::kernels::cuda_detail::sampling
