#pragma once
// "cpu-guarded": the CPU kernels behind memory the host cannot touch. A stand-in for a GPU when
// there is none, for one question only: does a code path reach backend memory solely through
// the op table (upload, download and the ops)? On a GPU, host code that dereferences a device
// pointer reads garbage or crashes somewhere else; here it stops at once with a message.
//
// How: every allocation is its own anonymous mapping, kept PROT_NONE. Each op call makes every
// allocation readable and writable, runs the CPU backend's op, and protects them again. A host
// access outside an op raises SIGSEGV, whose handler prints the faulting address, the allocation
// it falls in and a backtrace, then exits with status 134 (as an abort would).
//
// Its download_start also delivers as a GPU's does, at download_wait and not before (0xA5 bytes
// until then), so host code that reads a started download early fails here too.
//
// The results are the CPU backend's, bit for bit (the same kernels on the same values), so a
// test can run a whole command on both and demand identical output. It is slow in proportion to
// the number of live allocations (two mprotect calls each per op): meant for tiny models.
#include "kernels/ops.h"

namespace azr::kernels {

// With MatmulPrecision::Bf16, the kernels are cpu_bf16_matmul_ops()' (its results, bit for bit).
const Ops& guarded_cpu_ops(MatmulPrecision precision = MatmulPrecision::Fp32);

}  // namespace azr::kernels
