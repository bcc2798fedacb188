#pragma once
// What a freshly forked child does to itself before any untrusted byte runs, in this order:
//   1. fds: /dev/null on 0, the capture pipe on 1 and 2, the result pipe on 3, nothing else open
//   2. rlimits: address space, CPU (backstop), file size 0, open files, core 0, processes 0
//   3. a POSIX CPU timer that delivers SIGKILL (RLIMIT_CPU has 1 s granularity and a
//      catchable SIGXCPU; the timer is exact and uncatchable)
//   4. parent-death signal, not dumpable, no_new_privs
//   5. the seccomp filter (pre-built in the zygote)
// Any failure here writes a byte to the lockdown pipe and exits the child with kLockdownFailed
// before user code runs: the job is reported as an internal error, never run unconfined. The
// byte, not the exit status, is what tells the zygote: a program can exit with 121 itself (and
// an internal error is masked in training, where a crash is punished), but the pipe's write end
// is closed before the program runs, so only a lockdown step can write it.
#include "sandbox/limits.h"
#include "sandbox/seccomp_policy.h"

namespace azr::sandbox {

constexpr int kLockdownFailed = 121;

struct ChildPipes {
  int devnull;
  int output_w;  // stdout and stderr
  int result_w;
  int lockdown_w;  // written only when a lockdown step fails; closed once the filter is in place
};

// Steps 1-4. Returns only on success. `zygote_pid` guards the parent-death race.
void lock_down_child(const ChildPipes& pipes, const Limits& limits, int zygote_pid);
// Step 5, then closes the lockdown pipe. Separate so the caller can run PyOS_AfterFork_Child()
// between them.
void install_child_filter(const SeccompProgram& filter);

}  // namespace azr::sandbox
