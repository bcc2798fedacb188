#pragma once
// How the environment spells whether the CUDA backend launches the decode step's kernels with
// programmatic dependent launch (AZR_CUDA_PDL; kernels/cuda/cuda_ops.h says what that does). Plain
// C++, outside kernels/cuda, so that the parsing is built and tested where there is no CUDA.
#include <stdexcept>
#include <string>

namespace azr::kernels {

// "" (unset), "0" or "off": ordinary launches (the default until it is measured on a GPU); "1" or
// "on": programmatic launches where the device has them; anything else is an
// std::invalid_argument that names the variable, the value and the values it takes.
inline bool parse_cuda_pdl(const std::string& value) {
  if (value.empty() || value == "0" || value == "off") return false;
  if (value == "1" || value == "on") return true;
  throw std::invalid_argument("AZR_CUDA_PDL=" + value + ": expected 1 or on, 0 or off");
}

}  // namespace azr::kernels
