#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <sys/mman.h>

#include "sandbox/zygote_arena.h"

#include <cstdint>

namespace azr::sandbox {
namespace {

constexpr size_t kHugePage = 2u << 20;
// Reserved address space. It counts against each child's RLIMIT_AS, so it is kept small:
// arenas beyond it come from plain mmap as usual.
constexpr size_t kRegion = 16u << 20;
constexpr size_t kMaxArenas = 64;  // kRegion / smallest arena size we expect (256 KiB)

char* g_base = nullptr;
size_t g_used = 0;
void* g_free[kMaxArenas];
size_t g_free_size[kMaxArenas];
size_t g_nfree = 0;

bool in_region(void* p) {
  auto a = reinterpret_cast<uintptr_t>(p), b = reinterpret_cast<uintptr_t>(g_base);
  return g_base && a >= b && a < b + kRegion;
}

void* arena_alloc(void*, size_t size) {
  for (size_t i = 0; i < g_nfree; ++i) {
    if (g_free_size[i] == size) {
      void* p = g_free[i];
      g_free[i] = g_free[--g_nfree];
      g_free_size[i] = g_free_size[g_nfree];
      return p;
    }
  }
  if (g_base && g_used + size <= kRegion) {
    void* p = g_base + g_used;
    g_used += size;
    return p;
  }
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

void arena_free(void*, void* ptr, size_t size) {
  if (in_region(ptr) && g_nfree < kMaxArenas) {
    madvise(ptr, size, MADV_DONTNEED);  // give the memory back, keep the address range
    g_free[g_nfree] = ptr;
    g_free_size[g_nfree++] = size;
    return;
  }
  if (!in_region(ptr)) munmap(ptr, size);
}

}  // namespace

void install_huge_page_arenas() {
  // Over-reserve by one huge page so the region can start on a 2 MiB boundary.
  void* raw = mmap(nullptr, kRegion + kHugePage, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (raw == MAP_FAILED) return;  // plain arenas: slower forks, same behaviour
  auto start = reinterpret_cast<uintptr_t>(raw);
  auto aligned = (start + kHugePage - 1) & ~(uintptr_t{kHugePage} - 1);
  if (aligned > start) munmap(raw, aligned - start);
  munmap(reinterpret_cast<void*>(aligned + kRegion), kHugePage - (aligned - start));
  g_base = reinterpret_cast<char*>(aligned);
  madvise(g_base, kRegion, MADV_HUGEPAGE);
  PyObjectArenaAllocator a = {nullptr, arena_alloc, arena_free};
  PyObject_SetArenaAllocator(&a);
}

size_t seal_huge_page_arenas() {
  if (!g_base) return 0;
  size_t touched = (g_used + kHugePage - 1) & ~(kHugePage - 1);
  if (touched < kRegion) madvise(g_base + touched, kRegion - touched, MADV_NOHUGEPAGE);
  return g_used;
}

}  // namespace azr::sandbox
