#pragma once
// What the kernel headers that also run on the CPU stand-in for the device
// (tests/kernels/cuda_emulation.h, which defines AZR_CUDA_EMULATION and these names) take from
// CUDA: the bf16 type and its conversions, and the block's dynamic shared memory.
#ifndef AZR_CUDA_EMULATION
#include <cuda_bf16.h>
#define AZR_DYNAMIC_SHARED(name) extern __shared__ __align__(128) unsigned char name[]
#endif
