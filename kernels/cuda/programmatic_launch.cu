// Whether the decode step's kernels launch with programmatic dependent launch
// (common.cuh: launch_after_prior; device_or_emulation.cuh: what the kernels do about it).
#include <cstdlib>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda_launch_choice.h"

namespace azr::kernels {
namespace cuda_detail {
namespace {

// Compiled like every kernel here, so its PTX version is theirs: the virtual architecture their
// __CUDA_ARCH__ had. A binary with only sm_80 code, run on an H100 through the driver's JIT,
// has no griddepcontrol.wait in its kernels, and must not launch them early.
__global__ void programmatic_launch_probe_kernel() {}

bool& programmatic_launch_choice() {
  static bool choice = [] {
    const char* e = std::getenv("AZR_CUDA_PDL");
    return parse_cuda_pdl(e ? e : "");
  }();
  return choice;
}

// Per device: compute capability 9.0 or later and code compiled for compute_90 or later.
bool device_supports_programmatic_launch() {
  static int cached[64] = {};  // 0 unknown, 1 no, 2 yes
  int device = 0;
  AZR_CUDA_CHECK(cudaGetDevice(&device));
  if (device < 64 && cached[device] != 0) return cached[device] == 2;
  cudaFuncAttributes attributes{};
  AZR_CUDA_CHECK(cudaFuncGetAttributes(&attributes, programmatic_launch_probe_kernel));
  const bool yes = device_attribute(cudaDevAttrComputeCapabilityMajor, device) >= 9 && attributes.ptxVersion >= 90;
  if (device < 64) cached[device] = yes ? 2 : 1;
  return yes;
}

}  // namespace

bool programmatic_launch_applies() {
  return programmatic_launch_choice() && device_supports_programmatic_launch();
}

}  // namespace cuda_detail

void cuda_set_programmatic_launch(bool on) {
  if (cuda_detail::programmatic_launch_choice() == on) return;
  cuda_detail::programmatic_launch_choice() = on;
  // A recorded decode step keeps the launches it was recorded with: a new generation of the ops'
  // scratch makes the model drop its recordings and record the step again with the new launches.
  cuda_detail::scratch_generation()++;
}

bool cuda_programmatic_launch() { return cuda_detail::programmatic_launch_choice(); }

bool cuda_programmatic_launch_applies() { return cuda_detail::programmatic_launch_applies(); }

}  // namespace azr::kernels
