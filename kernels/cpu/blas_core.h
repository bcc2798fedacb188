#pragma once
// Which of OpenBLAS's kernel sets the CPU GEMMs run on, and the one correction azr makes to its
// choice (blas_core.cpp): Debian 12's OpenBLAS 0.3.21 picks its kernels from the CPU's model
// number, and a model newer than it knows (Emerald Rapids, family 6 model 207, on the machines
// this was found on) falls back to "Prescott", SSE3 kernels: 3x slower GEMMs, and other rounding.
#include <string>

namespace azr::kernels {

// OpenBLAS's kernel set ("SkylakeX", "Haswell", "Prescott", ...), and why where azr chose it:
// "SkylakeX (chosen by azr: OpenBLAS fell back to Prescott on this CPU)".
std::string blas_core_description();

}  // namespace azr::kernels
