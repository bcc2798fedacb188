#include "sandbox/child_lockdown.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cmath>

namespace azr::sandbox {
namespace {

// The lockdown pipe's write end, where it is now (it moves to fd 4 in step 1). The child is
// single-threaded from fork on.
int g_lockdown_fd = -1;
constexpr int kLockdownFd = 4;

[[noreturn]] void fail() {
  if (g_lockdown_fd >= 0) {
    const char byte = 'L';
    (void)!write(g_lockdown_fd, &byte, 1);  // an empty pipe takes one byte without blocking
  }
  _exit(kLockdownFailed);
}

void limit(int resource, rlim_t soft, rlim_t hard) {
  rlimit r{soft, hard};
  if (setrlimit(resource, &r) != 0) fail();
}

}  // namespace

void lock_down_child(const ChildPipes& pipes, const Limits& limits, int zygote_pid) {
  // 1. Exactly four fds for the program. dup2 clears FD_CLOEXEC on the targets; everything above
  // 3 goes, but the lockdown pipe, held at fd 4 until the filter is in (install_child_filter).
  // It is first moved above the fds 0-3 are filled from, so no dup2 below replaces it.
  g_lockdown_fd = pipes.lockdown_w;
  const int high = fcntl(pipes.lockdown_w, F_DUPFD, kLockdownFd + 1);
  if (high < 0) fail();
  g_lockdown_fd = high;
  if (dup2(pipes.devnull, 0) < 0 || dup2(pipes.output_w, 1) < 0 || dup2(pipes.output_w, 2) < 0 ||
      dup2(pipes.result_w, 3) < 0 || dup2(high, kLockdownFd) < 0)
    fail();
  g_lockdown_fd = kLockdownFd;
  if (syscall(SYS_close_range, 5u, ~0u, 0u) != 0) fail();

  // 2. rlimits. RLIMIT_CPU is only a backstop behind the timer below.
  const rlim_t cpu = static_cast<rlim_t>(std::ceil(limits.cpu_seconds)) + 1;
  limit(RLIMIT_AS, limits.memory_bytes, limits.memory_bytes);
  limit(RLIMIT_CPU, cpu, cpu + 1);
  limit(RLIMIT_FSIZE, 0, 0);
  limit(RLIMIT_NOFILE, 8, 8);
  limit(RLIMIT_CORE, 0, 0);
  limit(RLIMIT_NPROC, 0, 0);
  limit(RLIMIT_MEMLOCK, 0, 0);
  limit(RLIMIT_MSGQUEUE, 0, 0);

  // 3. Exact, uncatchable CPU budget.
  sigevent sev{};
  sev.sigev_notify = SIGEV_SIGNAL;
  sev.sigev_signo = SIGKILL;
  timer_t timer;
  if (timer_create(CLOCK_PROCESS_CPUTIME_ID, &sev, &timer) != 0) fail();
  itimerspec its{};
  double whole = std::floor(limits.cpu_seconds);
  its.it_value.tv_sec = static_cast<time_t>(whole);
  its.it_value.tv_nsec = static_cast<long>((limits.cpu_seconds - whole) * 1e9);
  if (its.it_value.tv_sec == 0 && its.it_value.tv_nsec == 0) its.it_value.tv_nsec = 1;
  if (timer_settime(timer, 0, &its, nullptr) != 0) fail();

  // 4. Die with the zygote; no core, no ptrace attach, no privilege gain through exec.
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) fail();
  if (getppid() != zygote_pid) fail();  // the zygote died before PDEATHSIG was armed
  if (prctl(PR_SET_DUMPABLE, 0) != 0) fail();
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) fail();
}

void install_child_filter(const SeccompProgram& filter) {
  if (filter.install() != 0) fail();
  // From here on nothing can report a lockdown failure, and the program must not be able to.
  if (close(kLockdownFd) != 0) fail();
  g_lockdown_fd = -1;
}

}  // namespace azr::sandbox
