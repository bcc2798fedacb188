#pragma once
// A CPU stand-in for the CUDA device features that some kernels use, so that their logic (tiling,
// masking, shared-memory staging, warp synchronisation, the split of rows over warps and blocks)
// runs in CI, where there is no GPU: the tensor-core attention (kernels/cuda/
// attention_tensor_core.cuh, and on mma.sync, attention_mma.cuh and attention_mma_backward.cuh),
// the few-row decode products (gemv.cuh), the samplers, the two decode attentions (attention_decode.cuh,
// attention_decode_tiles.cuh), the token statistics, and the memory-bound training kernels
// (swiglu.cuh, rope.cuh, rmsnorm_backward.cuh, streaming.cuh). A test double, used only by the
// tests/kernels/*_emulated_test.cpp suites. It checks what CUDA documents of the hardware: WMMA's
// tile alignment, 16-byte alignment of the kernels' vector loads (with -fsanitize=alignment), and
// the launch limits of sm_80; what it cannot show (WMMA's real fragment layouts, blocks running at
// once, speed) the GPU tests and benchmarks check.
//
// The model: every CUDA thread is a fiber (emulation_fibers.h, which says why not a std::thread),
// and the test's thread runs them in turn; __syncthreads is a barrier of the block, __syncwarp and
// every warp-collective call (shuffles, WMMA) a barrier of the warp, and a thread runs on until it
// reaches one. A WMMA fragment is opaque to the kernels, so here lane 0 of the warp holds the whole
// 16 x 16 tile and does the warp's work (loads, products in fp32 with k ascending, stores) after
// the warp's barrier; the other lanes hold nothing. The mma.sync instructions' fragments are
// documented, so their stand-ins (kernels/cuda/mma_sync.cuh's functions) keep each lane's own
// registers, exchanged through the warp's shuffle slots. Shared memory starts filled with 0xFF
// bytes (NaN as float, NaN as bf16), so a read of anything the kernel never wrote shows up in the
// results. Blocks run one after another (in an order a test may shuffle: ShuffledBlocks);
// launch_concurrent runs them all at once, for the grid barrier (kernels/cuda/grid_barrier.cuh),
// which blocks taking turns could not pass.
#define AZR_CUDA_EMULATION 1

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <type_traits>
#include <utility>
#include <vector>

#include "kernels/cpu/bf16_matmul.h"
#include "tests/kernels/emulation_fibers.h"

#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __grid_constant__

struct EmuDim3 {
  unsigned x = 0, y = 0, z = 0;
};

struct __nv_bfloat16 {
  uint16_t bits;
};

// 16-byte aligned, as CUDA's are: a kernel's 16-byte load through a pointer that is not is a
// misaligned-address fault on a GPU, and here (the emulated tests build with
// -fsanitize=alignment, tests/CMakeLists.txt) a runtime error that stops the test.
struct alignas(16) uint4 {
  unsigned x, y, z, w;
};
struct alignas(16) float4 {
  float x, y, z, w;
};
struct alignas(8) uint2 {
  unsigned x, y;
};

#define __align__(n) __attribute__((aligned(n)))

namespace azr::emu {

// A cp.async copy, deferred (the mma namespace's cp_async16 below says why).
struct AsyncCopy {
  __nv_bfloat16* dst;
  const __nv_bfloat16* src;  // null: zero-fill
};
struct AsyncCopies {
  std::vector<std::vector<AsyncCopy>> committed;  // oldest first
  std::vector<AsyncCopy> open;
};

struct BlockState {
  BlockState(unsigned threads, size_t smem_bytes)
      : all(threads), shuffle(threads), fragments(threads), async(threads), smem(smem_bytes + 128, 0xFF) {
    for (unsigned w = 0; w < threads / 32; w++) warps.emplace_back(32);
  }
  fibers::Barrier all;
  std::vector<fibers::Barrier> warps;
  std::vector<uint64_t> shuffle;  // one slot per thread, for values of up to 8 bytes
  std::vector<std::array<uint32_t, 6>> fragments;  // one per thread: an mma's A and B registers
  std::vector<AsyncCopies> async;  // one per thread: its cp.async groups
  std::vector<unsigned char> smem;
  unsigned prior_grid_waits = 0;  // the block's calls of wait_for_prior_grids (PriorGridWrites)
  unsigned char* dynamic_shared() {
    const auto p = reinterpret_cast<uintptr_t>(smem.data());
    return smem.data() + ((128 - p % 128) % 128);  // __align__(128)
  }
};

// The running CUDA thread's registers: the fiber that runs sets them, and keeps them across a switch.
inline thread_local EmuDim3 t_thread, t_block, t_block_dim, t_grid_dim;
inline thread_local BlockState* t_state = nullptr;

// Lets the other CUDA threads run until *watch != seen (watch null: until the scan comes back).
inline void switch_away(const uint64_t* watch, uint64_t seen) {
  const EmuDim3 thread = t_thread, block = t_block, block_dim = t_block_dim, grid_dim = t_grid_dim;
  BlockState* const state = t_state;
  fibers::wait_for_change(watch, seen);
  t_thread = thread, t_block = block, t_block_dim = block_dim, t_grid_dim = grid_dim, t_state = state;
}

inline unsigned lane() { return t_thread.x % 32; }
inline void warp_barrier() { t_state->warps[t_thread.x / 32].arrive_and_wait(switch_away); }

// The launch limits of every GPU the build targets (sm_80 and up): 1,024 threads per block, and
// 163 KiB of dynamic shared memory per block with the kernel's opt-in (an A100's; an H100 allows
// 227 KiB). A launch past them fails on a GPU; here it stops the test.
constexpr unsigned kMaxThreadsPerBlock = 1024;
constexpr size_t kMaxDynamicSharedBytes = 166912;

inline void check_launch_limits(unsigned threads, size_t smem_bytes) {
  if (threads == 0 || threads > kMaxThreadsPerBlock || threads % 32 != 0 || smem_bytes > kMaxDynamicSharedBytes) {
    std::fprintf(stderr, "cuda_emulation: a launch of %u threads with %zu bytes of shared memory is past sm_80's limits\n",
                 threads, smem_bytes);
    std::abort();
  }
}

// Programmatic dependent launch's contract (kernels/cuda/device_or_emulation.cuh): a kernel reads
// what the kernel before it writes only after its wait for the grids before it. A test that sets
// one of these states those writes: `before` runs as each block of emu::launch starts (the writes
// not made yet: it poisons them) and `after` once every thread of the block has reached its first
// wait (the writes made), so that a read before the wait reads the poison. The wait is then a
// barrier of the block, so every thread of a block must call it, or none (a block that returns
// early). Unset (the default), the wait does nothing, as on a GPU launched the ordinary way.
struct PriorGridWrites {
  std::function<void()> before, after;
};
inline PriorGridWrites*& prior_grid_writes() {
  static PriorGridWrites* writes = nullptr;
  return writes;
}
// Sets the writes for its lifetime.
class PriorGridWritesScope {
 public:
  explicit PriorGridWritesScope(PriorGridWrites& w) { prior_grid_writes() = &w; }
  ~PriorGridWritesScope() { prior_grid_writes() = nullptr; }
  PriorGridWritesScope(const PriorGridWritesScope&) = delete;
  PriorGridWritesScope& operator=(const PriorGridWritesScope&) = delete;
};
inline void wait_for_prior_grid_writes() {
  PriorGridWrites* w = prior_grid_writes();
  if (w == nullptr) return;
  if (++t_state->prior_grid_waits == t_block_dim.x) w->after();  // the last thread of the first wait
  t_state->all.arrive_and_wait(switch_away);
}

// The order launch runs a grid's blocks in: x fastest, then y, then z (seed 0, the default), or
// shuffled by a seed, while a ShuffledBlocks lives: a test's stand-in for a GPU, where blocks run
// and finish in an order no one fixes. A kernel whose results must not depend on it (the ordered
// gradient sums, kernels/cuda/ordered_sums.cuh) gives the same bits under every seed.
inline uint64_t& block_order_seed() {
  static uint64_t seed = 0;
  return seed;
}
class ShuffledBlocks {
 public:
  explicit ShuffledBlocks(uint64_t seed) { block_order_seed() = seed; }
  ~ShuffledBlocks() { block_order_seed() = 0; }
  ShuffledBlocks(const ShuffledBlocks&) = delete;
  ShuffledBlocks& operator=(const ShuffledBlocks&) = delete;
};
inline std::vector<EmuDim3> block_order(EmuDim3 grid) {
  std::vector<EmuDim3> blocks;
  for (unsigned z = 0; z < grid.z; z++)
    for (unsigned y = 0; y < grid.y; y++)
      for (unsigned x = 0; x < grid.x; x++) blocks.push_back({x, y, z});
  if (block_order_seed() != 0) std::shuffle(blocks.begin(), blocks.end(), std::mt19937_64(block_order_seed()));
  return blocks;
}

// Runs kernel(args...) over grid x block threads, block after block (in block_order), each
// block's threads as fibers (shared memory poisoned again before each block).
template <class Kernel, class... Args>
void launch(EmuDim3 grid, unsigned threads, size_t smem_bytes, Kernel kernel, Args... args) {
  check_launch_limits(threads, smem_bytes);
  for (const EmuDim3 block : block_order(grid)) {
    if (PriorGridWrites* w = prior_grid_writes()) w->before();
    BlockState state(threads, smem_bytes);
    fibers::run(threads, [&](unsigned t) {
      t_thread = {t, 0, 0};
      t_block = block;
      t_block_dim = {threads, 1, 1};
      t_grid_dim = grid;
      t_state = &state;
      kernel(args...);
    });
  }
}

// Runs kernel(args...) with every block of the grid at once (grid.x blocks, 1-D), as a
// cooperative launch guarantees on a GPU: every CUDA thread of every block a fiber, each block
// with its own barriers and dynamic shared memory. Only for kernels whose blocks must meet
// (grid_barrier.cuh) and that declare no __shared__ variable: those are static here, one for the
// process, which blocks running at once would share.
template <class Kernel, class... Args>
void launch_concurrent(unsigned blocks, unsigned threads, size_t smem_bytes, Kernel kernel, Args... args) {
  check_launch_limits(threads, smem_bytes);
  std::vector<std::unique_ptr<BlockState>> states;
  for (unsigned b = 0; b < blocks; b++) states.push_back(std::make_unique<BlockState>(threads, smem_bytes));
  fibers::run(blocks * threads, [&](unsigned i) {
    const unsigned b = i / threads, t = i % threads;
    t_thread = {t, 0, 0};
    t_block = {b, 0, 0};
    t_block_dim = {threads, 1, 1};
    t_grid_dim = {blocks, 1, 1};
    t_state = states[b].get();
    kernel(args...);
  });
}

// grid_barrier.cuh's polling: a switch to the other CUDA threads (the blocks still on their way),
// then an atomic read; the time, and the trap as a stop with a message.
inline unsigned spin_read(const unsigned* p) {
  switch_away(nullptr, 0);
  return std::atomic_ref<unsigned>(*const_cast<unsigned*>(p)).load(std::memory_order_acquire);
}
inline uint64_t now_ns() {
  return uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                      std::chrono::steady_clock::now().time_since_epoch())
                      .count());
}
[[noreturn]] inline void trap(const char* why) {
  std::fprintf(stderr, "cuda_emulation: trap: %s\n", why);
  std::abort();
}

}  // namespace azr::emu

#define threadIdx (::azr::emu::t_thread)
#define blockIdx (::azr::emu::t_block)
#define blockDim (::azr::emu::t_block_dim)
#define gridDim (::azr::emu::t_grid_dim)
// Blocks run one after another, so a static variable is the running block's shared memory
// (though not poisoned: the kernels that declare them write before they read).
#define __shared__ static
#define AZR_DYNAMIC_SHARED(name) unsigned char* name = ::azr::emu::t_state->dynamic_shared()

inline void __syncthreads() { ::azr::emu::t_state->all.arrive_and_wait(::azr::emu::switch_away); }
inline void __syncwarp() { ::azr::emu::warp_barrier(); }

namespace azr::emu {
// Every lane posts v, then reads lane source(lane)'s value.
template <class T, class Source>
T shuffle(T v, Source source) {
  static_assert(sizeof(T) <= sizeof(uint64_t) && std::is_trivially_copyable_v<T>);
  uint64_t* slots = t_state->shuffle.data() + (t_thread.x / 32) * 32;
  std::memcpy(&slots[lane()], &v, sizeof v);
  warp_barrier();
  T r;
  std::memcpy(&r, &slots[source(lane())], sizeof r);
  warp_barrier();
  return r;
}
}  // namespace azr::emu

template <class T>
T __shfl_xor_sync(unsigned /*mask*/, T v, int lane_mask) {
  return ::azr::emu::shuffle(v, [&](unsigned l) { return l ^ unsigned(lane_mask); });
}
template <class T>
T __shfl_up_sync(unsigned /*mask*/, T v, unsigned delta) {
  return ::azr::emu::shuffle(v, [&](unsigned l) { return l >= delta ? l - delta : l; });
}

// Blocks run one after another, so a fence orders nothing the emulation could reorder; the
// atomic is for form.
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline unsigned atomicAdd(unsigned* p, unsigned v) { return std::atomic_ref<unsigned>(*p).fetch_add(v); }
inline int atomicAdd(int* p, int v) { return std::atomic_ref<int>(*p).fetch_add(v); }
inline float atomicAdd(float* p, float v) { return std::atomic_ref<float>(*p).fetch_add(v); }
inline double atomicAdd(double* p, double v) { return std::atomic_ref<double>(*p).fetch_add(v); }
inline double __dmul_rn(double a, double b) { return a * b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
inline double __dsub_rn(double a, double b) { return a - b; }
inline double __dadd_rn(double a, double b) { return a + b; }

inline __nv_bfloat16 __float2bfloat16_rn(float x) {
  const float r = ::azr::kernels::round_to_bf16(x);
  uint32_t bits;
  std::memcpy(&bits, &r, sizeof bits);
  return {uint16_t(bits >> 16)};
}

// The device's rsqrtf is within 2 ulp of 1/sqrt; here, the correctly rounded quotient.
inline float rsqrtf(float x) { return 1.f / std::sqrt(x); }
inline unsigned __float_as_uint(float x) {
  unsigned bits;
  std::memcpy(&bits, &x, sizeof bits);
  return bits;
}
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline float __uint_as_float(unsigned bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

inline float emu_value(__nv_bfloat16 x) {
  const uint32_t bits = uint32_t(x.bits) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}
inline float emu_value(float x) { return x; }
inline float __bfloat162float(__nv_bfloat16 x) { return emu_value(x); }

inline int64_t min(int64_t a, int64_t b) { return b < a ? b : a; }

namespace azr::emu {
// Every lane posts v, then reads every lane's value: what a warp-level instruction that mixes
// lanes' registers sees.
template <class T>
std::array<T, 32> gather_warp(T v) {
  static_assert(sizeof(T) <= sizeof(uint64_t) && std::is_trivially_copyable_v<T>);
  uint64_t* slots = t_state->shuffle.data() + (t_thread.x / 32) * 32;
  std::memcpy(&slots[lane()], &v, sizeof v);
  warp_barrier();
  std::array<T, 32> all;
  for (unsigned l = 0; l < 32; l++) std::memcpy(&all[l], &slots[l], sizeof(T));
  warp_barrier();
  return all;
}
}  // namespace azr::emu

inline unsigned __ballot_sync(unsigned /*mask*/, int predicate) {
  const auto all = ::azr::emu::gather_warp(predicate != 0);
  unsigned lanes = 0;
  for (unsigned l = 0; l < 32; l++) lanes |= unsigned(all[l]) << l;
  return lanes;
}
// The lanes whose value equals this lane's.
template <class T>
unsigned __match_any_sync(unsigned /*mask*/, T v) {
  const auto all = ::azr::emu::gather_warp(v);
  unsigned lanes = 0;
  for (unsigned l = 0; l < 32; l++) lanes |= unsigned(all[l] == v) << l;
  return lanes;
}
template <class T>
T __shfl_sync(unsigned /*mask*/, T v, int source) {
  return ::azr::emu::shuffle(v, [&](unsigned) { return unsigned(source) % 32; });
}

inline int __any_sync(unsigned /*mask*/, int predicate) {
  const auto all = ::azr::emu::gather_warp(predicate != 0);
  return std::any_of(all.begin(), all.end(), [](bool p) { return p; }) ? 1 : 0;
}

namespace azr::emu {
// Every prefetch_to_l2 (kernels/cuda/device_or_emulation.cuh) of the kernels run here, kept so that
// a test can check cp.async.bulk.prefetch's contract (a 16-byte aligned address, a whole number of
// 16 bytes) and that a kernel prefetches only what no kernel before it writes (the weights), the
// one read allowed before its wait for the grids before it.
struct Prefetch {
  uintptr_t begin;
  uint32_t bytes;
};
inline std::mutex& prefetch_mutex() {
  static std::mutex m;
  return m;
}
inline std::vector<Prefetch>& prefetches() {
  static std::vector<Prefetch> all;
  return all;
}
inline void note_prefetch(const void* p, uint32_t bytes) {
  const std::lock_guard<std::mutex> lock(prefetch_mutex());
  prefetches().push_back({reinterpret_cast<uintptr_t>(p), bytes});
}
inline std::vector<Prefetch> take_prefetches() {
  const std::lock_guard<std::mutex> lock(prefetch_mutex());
  return std::exchange(prefetches(), {});
}
}  // namespace azr::emu

// kernels/cuda/mma_sync.cuh's instructions, lane by lane from the layouts PTX documents (that
// header's comment); a wrong reading of them in a kernel gives wrong products here.
namespace azr::kernels::cuda_detail::mma {

inline uint32_t emu_pair(const __nv_bfloat16& lo, const __nv_bfloat16& hi) {
  return uint32_t(lo.bits) | uint32_t(hi.bits) << 16;
}
inline float emu_half(uint32_t r, int which) { return emu_value(__nv_bfloat16{uint16_t(which ? r >> 16 : r & 0xffffu)}); }

// ldmatrix requires each row address 16-byte aligned.
inline std::array<const __nv_bfloat16*, 32> emu_matrix_rows(const __nv_bfloat16* row) {
  if (reinterpret_cast<uintptr_t>(row) % 16 != 0) {
    std::fprintf(stderr, "cuda_emulation: ldmatrix: row address %p is not 16-byte aligned\n", static_cast<const void*>(row));
    std::abort();
  }
  return ::azr::emu::gather_warp(row);
}

inline void ldmatrix_x4(uint32_t (&r)[4], const __nv_bfloat16* row) {
  const auto rows = emu_matrix_rows(row);
  const unsigned g = ::azr::emu::lane() / 4, t = ::azr::emu::lane() % 4;
  for (unsigned i = 0; i < 4; i++) r[i] = emu_pair(rows[8 * i + g][2 * t], rows[8 * i + g][2 * t + 1]);
}

inline void ldmatrix_x4_trans(uint32_t (&r)[4], const __nv_bfloat16* row) {
  const auto rows = emu_matrix_rows(row);
  const unsigned g = ::azr::emu::lane() / 4, t = ::azr::emu::lane() % 4;
  for (unsigned i = 0; i < 4; i++) r[i] = emu_pair(rows[8 * i + 2 * t][g], rows[8 * i + 2 * t + 1][g]);
}

// d += a b with the products added to d one at a time, k ascending, in fp32. The lanes' registers
// meet in the block's fragment slots (one exchange, two warp barriers: the emulated kernels run
// thousands of these).
inline void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  using ::azr::emu::t_state;
  using ::azr::emu::t_thread;
  std::array<uint32_t, 6>* slots = t_state->fragments.data() + (t_thread.x / 32) * 32;
  slots[::azr::emu::lane()] = {a[0], a[1], a[2], a[3], b0, b1};
  ::azr::emu::warp_barrier();
  float A[16][16], B[16][8];
  for (unsigned l = 0; l < 32; l++) {
    const unsigned g = l / 4, t = l % 4;
    const std::array<uint32_t, 6>& r = slots[l];
    for (int e = 0; e < 2; e++) {
      A[g][2 * t + e] = emu_half(r[0], e), A[g + 8][2 * t + e] = emu_half(r[1], e);
      A[g][2 * t + 8 + e] = emu_half(r[2], e), A[g + 8][2 * t + 8 + e] = emu_half(r[3], e);
      B[2 * t + e][g] = emu_half(r[4], e), B[2 * t + 8 + e][g] = emu_half(r[5], e);
    }
  }
  ::azr::emu::warp_barrier();
  const unsigned g = ::azr::emu::lane() / 4, t = ::azr::emu::lane() % 4;
  for (unsigned i = 0; i < 4; i++) {
    const unsigned row = i < 2 ? g : g + 8, col = 2 * t + i % 2;
    float acc = d[i];
    for (int k = 0; k < 16; k++) acc += A[row][k] * B[k][col];
    d[i] = acc;
  }
}

inline uint32_t pack_bf16x2(float lo, float hi) { return emu_pair(__float2bfloat16_rn(lo), __float2bfloat16_rn(hi)); }

// cp.async, deferred: a copy lands in shared memory only when a wait retires its group, so a
// kernel that reads a tile before waiting for it reads the poisoned bytes (or the tile before).
// The other hazard, a copy issued into a stage that another warp is still reading (a missing
// barrier), cannot show here, where copies land late; that one is the GPU test's.
inline ::azr::emu::AsyncCopies& emu_async() { return ::azr::emu::t_state->async[::azr::emu::t_thread.x]; }

inline void cp_async16(__nv_bfloat16* dst, const __nv_bfloat16* src, bool valid) {
  if (reinterpret_cast<uintptr_t>(dst) % 16 != 0 || (valid && reinterpret_cast<uintptr_t>(src) % 16 != 0)) {
    std::fprintf(stderr, "cuda_emulation: cp.async: %p <- %p is not 16-byte aligned\n", static_cast<void*>(dst),
                 static_cast<const void*>(src));
    std::abort();
  }
  emu_async().open.push_back({dst, valid ? src : nullptr});
}

inline void cp_async_commit() {
  ::azr::emu::AsyncCopies& a = emu_async();
  a.committed.push_back(std::move(a.open));
  a.open.clear();
}

template <int N>
void cp_async_wait() {
  ::azr::emu::AsyncCopies& a = emu_async();
  while (a.committed.size() > size_t(N)) {
    for (const ::azr::emu::AsyncCopy& c : a.committed.front()) {
      if (c.src) std::memcpy(c.dst, c.src, 16);
      else std::memset(c.dst, 0, 16);
    }
    a.committed.erase(a.committed.begin());
  }
}

}  // namespace azr::kernels::cuda_detail::mma

namespace nvcuda::wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

// The whole tile, held by lane 0 of the warp (see the file comment).
template <class Use, int M, int N, int K, class T, class Layout = void>
struct fragment {
  static_assert(M == 16 && N == 16 && K == 16, "the kernels use 16 x 16 x 16 tiles only");
  float x[16 * 16];
};

// WMMA's requirements of a tile in memory (CUDA C++ Programming Guide, "Warp Matrix Functions"):
// the pointer 256-bit aligned, the stride a multiple of 16 bytes. A GPU does not check them all
// (a misaligned tile may load wrong values rather than fault), so the stand-in stops here.
template <class T>
void check_tile(const T* p, unsigned ldm, const char* what) {
  if (reinterpret_cast<uintptr_t>(p) % 32 != 0 || (size_t(ldm) * sizeof(T)) % 16 != 0) {
    std::fprintf(stderr, "cuda_emulation: %s: tile at %p (stride %u elements of %zu bytes) breaks WMMA's alignment\n",
                 what, static_cast<const void*>(p), ldm, sizeof(T));
    std::abort();
  }
}

template <class Use, class T, class Layout>
void load_matrix_sync(fragment<Use, 16, 16, 16, T, Layout>& f, const T* p, unsigned ldm) {
  check_tile(p, ldm, "load_matrix_sync");
  ::azr::emu::warp_barrier();
  if (::azr::emu::lane() != 0) return;
  for (int i = 0; i < 16; i++)
    for (int j = 0; j < 16; j++)
      f.x[i * 16 + j] = emu_value(std::is_same_v<Layout, col_major> ? p[i + size_t(j) * ldm] : p[size_t(i) * ldm + j]);
}

inline void fill_fragment(fragment<accumulator, 16, 16, 16, float>& f, float v) {
  for (float& e : f.x) e = v;
}

template <class TA, class LA, class TB, class LB>
void mma_sync(fragment<accumulator, 16, 16, 16, float>& d, const fragment<matrix_a, 16, 16, 16, TA, LA>& a,
              const fragment<matrix_b, 16, 16, 16, TB, LB>& b, const fragment<accumulator, 16, 16, 16, float>& c) {
  ::azr::emu::warp_barrier();
  if (::azr::emu::lane() != 0) return;
  float out[16 * 16];
  for (int i = 0; i < 16; i++)
    for (int j = 0; j < 16; j++) {
      float acc = c.x[i * 16 + j];
      for (int k = 0; k < 16; k++) acc += a.x[i * 16 + k] * b.x[k * 16 + j];
      out[i * 16 + j] = acc;
    }
  std::memcpy(d.x, out, sizeof out);
}

inline void store_matrix_sync(float* p, const fragment<accumulator, 16, 16, 16, float>& f, unsigned ldm,
                              layout_t layout) {
  check_tile(p, ldm, "store_matrix_sync");
  ::azr::emu::warp_barrier();
  if (::azr::emu::lane() != 0) return;
  for (int i = 0; i < 16; i++)
    for (int j = 0; j < 16; j++)
      (layout == mem_col_major ? p[i + size_t(j) * ldm] : p[size_t(i) * ldm + j]) = f.x[i * 16 + j];
}

}  // namespace nvcuda::wmma
