#pragma once
// Cooperative fibers for the CUDA emulation (cuda_emulation.h): each CUDA thread of a launch is a
// fiber with its own stack, and the test's one OS thread runs them in turn, switching only where a
// CUDA thread waits (a barrier of its block or warp, a grid barrier's poll).
//
// Why not one std::thread per CUDA thread, the emulation's first form: on a 2-core CI machine
// every barrier of a 256-thread block was 256 futex wake-ups, and the emulated suites spent more
// time in the OS than in the kernels (sampling_emulated_test: 56 s user, 90 s system, 83 s wall).
// Here a switch is Boost.Context's (a few registers saved, no system call: ucontext's swapcontext
// calls sigprocmask every time, and was 88% of the time), and a fiber whose barrier has not opened
// is skipped without one.
//
// Why it also tests more: the order is fixed (run() below says it), and each warp runs its whole
// phase, from one __syncthreads to the next, before the next warp starts, first warp to last and
// then last to first. A kernel that reads what another warp writes in the same phase (a missing
// __syncthreads before the read) or overwrites what another still has to read (one missing after
// it) gets the wrong value in one of the two orders (the poisoned shared memory, the last phase's
// value, or the next one's) every time, not only when the OS happens to preempt at the wrong
// moment. And a barrier that not every thread reaches stops with a message where threads would
// wait for ever.
#include <sys/mman.h>
#include <unistd.h>

#include <boost/context/fiber.hpp>
#include <boost/context/stack_context.hpp>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <vector>

namespace azr::emu::fibers {

// 256 KiB of stack a CUDA thread, reserved, not committed (the pages a fiber touches are the ones
// it uses: a few KiB for most kernels, more where a WMMA fragment is 1 KiB of floats), with a
// guard page below it so that an overflow is a fault, not a write into the next fiber's stack.
constexpr size_t kStackBytes = size_t{256} << 10;

class Stack {
 public:
  Stack() {
    const size_t page = size_t(sysconf(_SC_PAGESIZE));
    void* p = mmap(nullptr, kStackBytes + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (p == MAP_FAILED || mprotect(p, page, PROT_NONE) != 0) {
      std::perror("cuda_emulation: a fiber's stack");
      std::abort();
    }
    base_ = static_cast<char*>(p);
    bytes_ = kStackBytes + page;
  }
  Stack(const Stack&) = delete;
  Stack& operator=(const Stack&) = delete;
  ~Stack() { munmap(base_, bytes_); }
  char* top() const { return base_ + bytes_; }  // stacks grow down

 private:
  char* base_ = nullptr;
  size_t bytes_ = 0;
};

// Boost.Context's StackAllocator, from the OS thread's stacks, which it keeps for the next
// launches (a launch per kernel call, thousands a suite) instead of an mmap per fiber.
class PooledStacks {
 public:
  boost::context::stack_context allocate() {
    Pool& p = pool();
    boost::context::stack_context c;
    c.size = kStackBytes;
    if (p.free.empty()) {
      p.all.push_back(std::make_unique<Stack>());
      c.sp = p.all.back()->top();
    } else {
      c.sp = p.free.back();
      p.free.pop_back();
    }
    return c;
  }
  void deallocate(boost::context::stack_context& c) noexcept { pool().free.push_back(c.sp); }

 private:
  struct Pool {
    std::vector<std::unique_ptr<Stack>> all;
    std::vector<void*> free;  // the tops of the stacks no fiber holds
  };
  static Pool& pool() {
    thread_local Pool p;
    return p;
  }
};

struct Fiber {
  boost::context::fiber context;    // the fiber, while it is suspended
  const uint64_t* watch = nullptr;  // runnable again once *watch != seen (null: at once)
  uint64_t seen = 0;
  bool done = false;
};

struct Scheduler {
  boost::context::fiber main;  // the scheduler, while a fiber runs
  std::vector<Fiber> fibers;
  Fiber* current = nullptr;
  bool opened = false;      // the running fiber opened a barrier
  bool opened_all = false;  // ... one of every fiber of the run (a block's __syncthreads in a launch)
};

inline thread_local Scheduler* t_scheduler = nullptr;

// Suspends the running fiber until *watch differs from seen (watch null: until the scheduler's
// scan comes back to it), running the others meanwhile.
inline void wait_for_change(const uint64_t* watch, uint64_t seen) {
  Scheduler& s = *t_scheduler;
  s.current->watch = watch;
  s.current->seen = seen;
  s.main = std::move(s.main).resume();
}

// Runs body(0) ... body(n - 1), each on its own fiber, until every one has returned.
//
// The order: the scheduler always resumes the first fiber that can run, in its scan's direction,
// and starts the scan again whenever a barrier opens. So a warp runs on, barrier after warp
// barrier, until all its lanes wait at the block's barrier, before the next warp starts: each warp
// runs its whole phase (from one __syncthreads to the next) before the next, a read across warps
// that lacks a barrier before it sees the write missing (the poison, or the last phase's value),
// and a write that lacks one after the other warps' reads lands before they read. When every
// fiber's barrier opens (a block's phase ends), or a scan finds none that can run but polls (a
// grid barrier's), the direction flips, so each hazard shows in one of the two orders.
inline void run(unsigned n, const std::function<void(unsigned)>& body) {
  if (t_scheduler != nullptr) {
    std::fprintf(stderr, "cuda_emulation: a launch from inside an emulated kernel\n");
    std::abort();
  }
  Scheduler s;
  s.fibers.resize(n);
  for (unsigned i = 0; i < n; i++)
    s.fibers[i].context =
        boost::context::fiber(std::allocator_arg, PooledStacks{}, [&s, &body, i](boost::context::fiber&& main) {
          s.main = std::move(main);
          body(i);
          s.fibers[i].done = true;
          return std::move(s.main);
        });
  t_scheduler = &s;
  unsigned left = n, k = 0;
  bool forward = true, resumed = false;  // resumed: a fiber since the scan began
  while (left > 0) {
    if (k == n) {  // the scan's end: every fiber waits, or polls
      if (!resumed) {
        std::fprintf(stderr,
                     "cuda_emulation: deadlock: %u CUDA threads wait at barriers that the others will not reach\n",
                     left);
        std::abort();
      }
      forward = !forward, k = 0, resumed = false;
    }
    Fiber& f = s.fibers[forward ? k : n - 1 - k];
    if (f.done || (f.watch != nullptr && *f.watch == f.seen)) {
      k++;
      continue;
    }
    s.current = &f;
    s.opened = s.opened_all = false;
    f.context = std::move(f.context).resume();
    left -= f.done;
    resumed = true;
    if (!s.opened) {
      k++;
      continue;
    }
    if (s.opened_all) forward = !forward;
    k = 0, resumed = false;
  }
  t_scheduler = nullptr;
}

// A barrier of `count` fibers (a block's __syncthreads, a warp's __syncwarp): the last to arrive
// opens it and runs on; the others are skipped by the scheduler until it has opened.
class Barrier {
 public:
  explicit Barrier(unsigned count) : count_(count) {}
  // `switch_away` suspends the caller (cuda_emulation.h's, which keeps the CUDA thread's registers).
  template <class SwitchAway>
  void arrive_and_wait(SwitchAway switch_away) {
    const uint64_t generation = generation_;
    if (++arrived_ == count_) {
      arrived_ = 0;
      generation_++;
      t_scheduler->opened = true;
      t_scheduler->opened_all |= count_ == t_scheduler->fibers.size();
      return;
    }
    switch_away(&generation_, generation);
  }

 private:
  unsigned count_, arrived_ = 0;
  uint64_t generation_ = 0;
};

}  // namespace azr::emu::fibers
