#pragma once
// How the environment spells whether the CUDA backend launches the decode step's kernels with
// programmatic dependent launch (AZR_CUDA_PDL; kernels/cuda/cuda_ops.h says what that does). Plain
// C++, outside kernels/cuda, so that the parsing is built and tested where there is no CUDA.
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

}  // namespace azr::kernels
