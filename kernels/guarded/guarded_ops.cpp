// The cpu-guarded backend (see guarded_ops.h): kernels/cpu's ops between mprotect calls.
#include "kernels/guarded/guarded_ops.h"

#include <execinfo.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace azr::kernels {
namespace {

// Live allocations in a fixed table of atomics, so the SIGSEGV handler can read it without a
// lock (a handler may not take one). A free entry has base 0.
constexpr int kMaxRegions = 4096;
struct Region {
  std::atomic<uintptr_t> base{0};
  std::atomic<size_t> bytes{0};
};
Region g_regions[kMaxRegions];

// Serialises op calls (and allocation changes) so "open" and "closed" are whole-table states.
std::recursive_mutex g_mutex;
int g_open_depth = 0;

size_t page_round(size_t bytes) {
  const size_t page = size_t(sysconf(_SC_PAGESIZE));
  return (std::max<size_t>(bytes, 1) + page - 1) / page * page;
}

void protect_all(int prot) {
  for (Region& r : g_regions) {
    const uintptr_t base = r.base.load(std::memory_order_relaxed);
    if (base && mprotect(reinterpret_cast<void*>(base), r.bytes.load(std::memory_order_relaxed), prot) != 0)
      throw std::runtime_error(std::string("cpu-guarded: mprotect failed: ") + std::strerror(errno));
  }
}

// Backend memory is readable and writable while an Open lives (one op call), PROT_NONE otherwise.
struct Open {
  Open() {
    g_mutex.lock();
    if (g_open_depth++ == 0) protect_all(PROT_READ | PROT_WRITE);
  }
  ~Open() {
    if (--g_open_depth == 0) protect_all(PROT_NONE);
    g_mutex.unlock();
  }
  Open(const Open&) = delete;
  Open& operator=(const Open&) = delete;
};

void write_str(const char* s) {
  ssize_t ignored = write(STDERR_FILENO, s, std::strlen(s));
  (void)ignored;
}

void write_hex(uintptr_t x) {
  char buf[2 + 16 + 1] = "0x";
  for (int i = 0; i < 16; i++) buf[2 + i] = "0123456789abcdef"[(x >> (60 - 4 * i)) & 0xf];
  buf[18] = 0;
  write_str(buf);
}

struct sigaction g_previous;

// Async-signal-safe: only write(), backtrace_symbols_fd() (its buffers were warmed up at
// install time) and _exit().
void on_segv(int sig, siginfo_t* info, void* ctx) {
  const uintptr_t addr = reinterpret_cast<uintptr_t>(info->si_addr);
  for (const Region& r : g_regions) {
    const uintptr_t base = r.base.load(std::memory_order_relaxed);
    if (base && addr >= base && addr < base + r.bytes.load(std::memory_order_relaxed)) {
      write_str("azr: host code touched cpu-guarded backend memory at ");
      write_hex(addr);
      write_str(" (in the allocation at ");
      write_hex(base);
      write_str(") outside the op table; backend memory is reachable only through upload, download and the ops.\n");
      void* frames[64];
      backtrace_symbols_fd(frames, backtrace(frames, 64), STDERR_FILENO);
      _exit(134);
    }
  }
  // Not ours: let the previous disposition handle it.
  if (g_previous.sa_flags & SA_SIGINFO) {
    g_previous.sa_sigaction(sig, info, ctx);
  } else if (g_previous.sa_handler != SIG_IGN && g_previous.sa_handler != SIG_DFL) {
    g_previous.sa_handler(sig);
  } else {
    signal(sig, SIG_DFL);  // the faulting instruction runs again and the default action follows
  }
}

// Once per process: a second install would record our own handler as the previous one.
void install_handler() {
  static std::once_flag once;
  std::call_once(once, [] {
    void* warm[1];
    backtrace(warm, 1);  // loads libgcc's unwinder now, not inside the handler
    struct sigaction sa {};
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &g_previous);
  });
}

// mprotect's cost is one page-table entry per resident page, twice per op: with 4 KiB pages a
// training batch's 256 MB activation arena makes every op cost ~100k entries. Allocations of 2 MiB
// or more are therefore aligned to 2 MiB and asked to use transparent huge pages, 512 times fewer
// entries, where the kernel offers them (transparent_hugepage "madvise" or "always"); elsewhere
// they work the same, slower.
constexpr size_t kHugePage = size_t(2) << 20;

void* map_region(size_t size) {
  const int prot = g_open_depth > 0 ? PROT_READ | PROT_WRITE : PROT_NONE;
  if (size < kHugePage) return mmap(nullptr, size, prot, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  char* raw = static_cast<char*>(mmap(nullptr, size + kHugePage, prot, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  if (raw == MAP_FAILED) return MAP_FAILED;
  char* start = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(raw) + kHugePage - 1) / kHugePage * kHugePage);
  if (start > raw) munmap(raw, size_t(start - raw));
  if (raw + size + kHugePage > start + size) munmap(start + size, size_t(raw + size + kHugePage - (start + size)));
  madvise(start, size, MADV_HUGEPAGE);  // advice: failure only costs speed
  return start;
}

void* alloc_zeroed(size_t bytes) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  size_t size = page_round(bytes);
  if (size >= kHugePage) size = (size + kHugePage - 1) / kHugePage * kHugePage;
  void* p = map_region(size);  // fresh anonymous pages are zero
  if (p == MAP_FAILED) throw std::bad_alloc();
  for (Region& r : g_regions)
    if (r.base.load(std::memory_order_relaxed) == 0) {
      r.bytes.store(size, std::memory_order_relaxed);
      r.base.store(reinterpret_cast<uintptr_t>(p), std::memory_order_release);
      return p;
    }
  munmap(p, size);
  throw std::runtime_error("cpu-guarded: more than 4096 live allocations");
}

void release(void* p) {
  if (!p) return;
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  for (Region& r : g_regions)
    if (r.base.load(std::memory_order_relaxed) == reinterpret_cast<uintptr_t>(p)) {
      munmap(p, r.bytes.load(std::memory_order_relaxed));
      r.base.store(0, std::memory_order_release);
      return;
    }
}

// download_start as a GPU's: the bytes are copied out of backend memory now (the copy follows the
// ops called before it) but reach `host` only at download_wait, and until then `host` holds 0xA5
// bytes. So host code that reads a started download before waiting for it (a pipeline's missing
// wait) reads garbage in every run on this backend, not only on a GPU.
struct StartedDownload {
  void* host;
  std::vector<char> bytes;
};
std::mutex g_downloads_mutex;
std::map<int64_t, StartedDownload> g_downloads;
int64_t g_downloads_started = 0;

int64_t download_start(void* host, const void* src, size_t bytes) {
  std::vector<char> staged(bytes);
  {
    Open open;
    if (bytes) std::memcpy(staged.data(), src, bytes);
  }
  if (bytes) std::memset(host, 0xA5, bytes);
  const std::lock_guard<std::mutex> lock(g_downloads_mutex);
  g_downloads.emplace(++g_downloads_started, StartedDownload{host, std::move(staged)});
  return g_downloads_started;
}

void download_wait(int64_t ticket) {
  if (ticket == 0) return;
  const std::lock_guard<std::mutex> lock(g_downloads_mutex);
  const auto it = g_downloads.find(ticket);
  if (it == g_downloads.end())
    throw std::invalid_argument("cpu-guarded: download_wait(" + std::to_string(ticket) +
                                "): no download started with that ticket is waiting");
  if (!it->second.bytes.empty()) std::memcpy(it->second.host, it->second.bytes.data(), it->second.bytes.size());
  g_downloads.erase(it);
}

// An op of the CPU table Base(), run with backend memory open. Member is the Ops field, F its type.
template <const Ops& (*Base)(), auto Member, class F>
struct Guarded;
template <const Ops& (*Base)(), auto Member, class R, class... A>
struct Guarded<Base, Member, R (*)(A...)> {
  static R call(A... args) {
    Open open;
    return (Base().*Member)(args...);
  }
};

// Null fields (the Fp32 table's bf16 ops) stay null.
#define AZR_GUARD(field) \
  if (t.field) t.field = Guarded<Base, &Ops::field, decltype(Ops::field)>::call;

template <const Ops& (*Base)()>
Ops make_table(const char* name) {
  // Start from the CPU table so the layout is right; every function is then replaced
  // (AZR_OPS_FUNCTIONS lists them all). An op left unwrapped would run on PROT_NONE memory and
  // stop with the handler's message.
  Ops t = Base();
  t.name = name;
  t.host_memory = false;
  AZR_OPS_FUNCTIONS(AZR_GUARD)
  t.alloc_zeroed = alloc_zeroed;
  t.release = release;
  t.download_start = download_start;
  t.download_wait = download_wait;
  install_handler();
  return t;
}

#undef AZR_GUARD

}  // namespace

const Ops& guarded_cpu_ops(MatmulPrecision precision) {
  static const Ops fp32 = make_table<cpu_ops>("cpu-guarded");
  static const Ops bf16 = make_table<cpu_bf16_matmul_ops>("cpu-guarded+bf16");
  return precision == MatmulPrecision::Bf16 ? bf16 : fp32;
}

}  // namespace azr::kernels
