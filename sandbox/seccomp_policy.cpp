#include "sandbox/seccomp_policy.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/sched.h>
#include <linux/seccomp.h>
#include <seccomp.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>

namespace azr::sandbox {
namespace {

// ---------------------------------------------------------------------------------------------
// Zygote policy (default: KILL -> SIGSYS -> status "violation").
//
// ALLOW              the interpreter's steady-state needs (memory, signals, clocks, futexes,
//                    exit) and the zygote's job loop (read/write, pipes, poll, fork, wait, kill,
//                    and the child's own lock-down: dup2, close_range, rlimits, CPU timer, prctl).
// ALLOW with args    mmap/mprotect without PROT_EXEC (no shellcode pages); clone only as fork
//                    (no threads, no shared memory, no namespaces); newfstatat only as glibc's
//                    fstat on fds 0..3 (AT_EMPTY_PATH), never on a path.
// ERRNO(EPERM)       the filesystem, identities, sleeping: things ordinary Python code may try
//                    by accident, so they surface as ordinary exceptions (PermissionError,
//                    ModuleNotFoundError) rather than kills.
// ERRNO(ENOSYS)      clone3 and statx, so glibc falls back to calls whose arguments we inspect.
// ERRNO(ENOTTY)      ioctl: isatty() works; TIOCSTI-style terminal injection cannot.
// KILL (default)     everything else: sockets, exec, ptrace, process_vm_*, bpf, io_uring,
//                    mount, namespaces, keyrings, kernel modules, alarms/itimers, ...
//                    Non-x86-64 ABIs (int 0x80, x32) are killed by libseccomp's arch check.

const int kZygoteAllowed[] = {
    // memory, signals, clocks, futexes, exit: CPython at rest
    SCMP_SYS(brk), SCMP_SYS(munmap), SCMP_SYS(mremap), SCMP_SYS(madvise), SCMP_SYS(exit),
    SCMP_SYS(exit_group), SCMP_SYS(rt_sigaction), SCMP_SYS(rt_sigprocmask), SCMP_SYS(rt_sigreturn),
    SCMP_SYS(sigaltstack), SCMP_SYS(clock_gettime), SCMP_SYS(clock_getres), SCMP_SYS(gettimeofday),
    SCMP_SYS(time), SCMP_SYS(getrandom), SCMP_SYS(futex), SCMP_SYS(fstat), SCMP_SYS(lseek),
    SCMP_SYS(getpid), SCMP_SYS(gettid), SCMP_SYS(sched_yield), SCMP_SYS(getrusage), SCMP_SYS(times),
    SCMP_SYS(uname), SCMP_SYS(getuid), SCMP_SYS(geteuid), SCMP_SYS(getgid), SCMP_SYS(getegid),
    SCMP_SYS(close),
    // the job loop (denied again to children by the delta)
    SCMP_SYS(read), SCMP_SYS(write), SCMP_SYS(pipe2), SCMP_SYS(fcntl), SCMP_SYS(poll), SCMP_SYS(ppoll),
    SCMP_SYS(wait4), SCMP_SYS(waitid), SCMP_SYS(pidfd_open), SCMP_SYS(pidfd_send_signal), SCMP_SYS(kill),
    // the child's lock-down, before its delta is installed (denied again by the delta)
    SCMP_SYS(dup2), SCMP_SYS(dup3), SCMP_SYS(close_range), SCMP_SYS(prlimit64), SCMP_SYS(setrlimit),
    SCMP_SYS(timer_create), SCMP_SYS(timer_settime), SCMP_SYS(timer_delete), SCMP_SYS(prctl),
    SCMP_SYS(getppid), SCMP_SYS(seccomp),
};

const int kZygotePermissionDenied[] = {
    // filesystem
    SCMP_SYS(open), SCMP_SYS(openat), SCMP_SYS(openat2), SCMP_SYS(creat), SCMP_SYS(stat),
    SCMP_SYS(lstat), SCMP_SYS(access), SCMP_SYS(faccessat), SCMP_SYS(faccessat2),
    SCMP_SYS(readlink), SCMP_SYS(readlinkat), SCMP_SYS(getcwd), SCMP_SYS(getdents),
    SCMP_SYS(getdents64), SCMP_SYS(chdir), SCMP_SYS(fchdir), SCMP_SYS(mkdir), SCMP_SYS(mkdirat),
    SCMP_SYS(rmdir), SCMP_SYS(unlink), SCMP_SYS(unlinkat), SCMP_SYS(rename), SCMP_SYS(renameat),
    SCMP_SYS(renameat2), SCMP_SYS(link), SCMP_SYS(linkat), SCMP_SYS(symlink),
    SCMP_SYS(symlinkat), SCMP_SYS(chmod), SCMP_SYS(fchmod), SCMP_SYS(fchmodat), SCMP_SYS(chown),
    SCMP_SYS(fchown), SCMP_SYS(lchown), SCMP_SYS(fchownat), SCMP_SYS(truncate),
    SCMP_SYS(ftruncate), SCMP_SYS(utimensat), SCMP_SYS(statfs), SCMP_SYS(fstatfs),
    SCMP_SYS(fsync), SCMP_SYS(fdatasync), SCMP_SYS(flock), SCMP_SYS(dup), SCMP_SYS(pipe),
    SCMP_SYS(memfd_create), SCMP_SYS(pread64), SCMP_SYS(pwrite64), SCMP_SYS(readv),
    SCMP_SYS(writev),
    // processes, threads, signals to others
    SCMP_SYS(fork), SCMP_SYS(vfork), SCMP_SYS(tkill), SCMP_SYS(tgkill), SCMP_SYS(rt_sigqueueinfo),
    SCMP_SYS(rt_tgsigqueueinfo), SCMP_SYS(setsid), SCMP_SYS(setpgid), SCMP_SYS(getpgrp),
    SCMP_SYS(getpgid), SCMP_SYS(getsid), SCMP_SYS(set_robust_list), SCMP_SYS(rseq),
    SCMP_SYS(sched_getaffinity), SCMP_SYS(sched_setaffinity), SCMP_SYS(getpriority),
    SCMP_SYS(setpriority),
    // identity, limits, process attributes
    SCMP_SYS(setuid), SCMP_SYS(setgid), SCMP_SYS(setreuid), SCMP_SYS(setregid),
    SCMP_SYS(setresuid), SCMP_SYS(setresgid), SCMP_SYS(setgroups), SCMP_SYS(getgroups),
    SCMP_SYS(getresuid), SCMP_SYS(getresgid), SCMP_SYS(capget), SCMP_SYS(capset),
    SCMP_SYS(getrlimit), SCMP_SYS(arch_prctl), SCMP_SYS(sysinfo), SCMP_SYS(umask),
    // waiting: sleeping would only burn the wall-clock budget
    SCMP_SYS(nanosleep), SCMP_SYS(clock_nanosleep), SCMP_SYS(select), SCMP_SYS(pselect6),
    SCMP_SYS(pause), SCMP_SYS(rt_sigsuspend), SCMP_SYS(rt_sigtimedwait), SCMP_SYS(epoll_create1),
    SCMP_SYS(eventfd2),
};

const int kNotImplemented[] = {SCMP_SYS(clone3), SCMP_SYS(statx)};

// ---------------------------------------------------------------------------------------------
// Child delta (default: ALLOW, i.e. whatever the zygote policy says). Everything the zygote
// policy allows only for the zygote's sake is EPERM here, so `os.fork()` raises PermissionError,
// threads raise "can't start new thread", `os.kill(...)` raises PermissionError. A handler for a
// fault signal (SIGSEGV, SIGBUS, SIGILL, SIGFPE) cannot be installed.

const int kChildPermissionDenied[] = {
    SCMP_SYS(clone), SCMP_SYS(pipe2), SCMP_SYS(fcntl), SCMP_SYS(poll), SCMP_SYS(ppoll),
    SCMP_SYS(wait4), SCMP_SYS(waitid), SCMP_SYS(pidfd_open), SCMP_SYS(pidfd_send_signal),
    SCMP_SYS(kill), SCMP_SYS(dup2), SCMP_SYS(dup3), SCMP_SYS(close_range), SCMP_SYS(prlimit64),
    SCMP_SYS(setrlimit), SCMP_SYS(timer_create), SCMP_SYS(timer_settime), SCMP_SYS(timer_delete),
    SCMP_SYS(prctl), SCMP_SYS(getppid), SCMP_SYS(seccomp),
};

// Faults stay fatal. A handler for a fault signal returns to the faulting instruction, which
// faults again: with Python's handler (it only sets a flag) a crash becomes a spin until the CPU
// timer, reported as a timeout rather than crashed. Reading a handler (act == NULL) is allowed.
const int kFaultSignals[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE};

struct CtxDeleter {
  void operator()(void* c) const { seccomp_release(c); }
};
using Ctx = std::unique_ptr<void, CtxDeleter>;

void check(int rc, const char* what) {
  if (rc < 0) throw std::runtime_error(std::string("seccomp: ") + what + ": " + strerror(-rc));
}

Ctx make_ctx(uint32_t default_action) {
  Ctx ctx(seccomp_init(default_action));
  if (!ctx) throw std::runtime_error("seccomp: seccomp_init failed");
  check(seccomp_attr_set(ctx.get(), SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS), "badarch");
  // no_new_privs is set explicitly by the caller before install().
  check(seccomp_attr_set(ctx.get(), SCMP_FLTATR_CTL_NNP, 0), "nnp");
  return ctx;
}

void add(scmp_filter_ctx ctx, uint32_t action, int nr, const char* what) {
  check(seccomp_rule_add(ctx, action, nr, 0), what);
}

}  // namespace

// Exports the compiled BPF once; installs then cost a single prctl().
static std::vector<sock_filter> export_bpf(scmp_filter_ctx ctx) {
  int fd = memfd_create("azr-seccomp", MFD_CLOEXEC);
  if (fd < 0) throw std::runtime_error("seccomp: memfd_create failed");
  int rc = seccomp_export_bpf(ctx, fd);
  if (rc < 0) {
    close(fd);
    check(rc, "export");
  }
  off_t size = lseek(fd, 0, SEEK_END);
  std::vector<sock_filter> filter(static_cast<size_t>(size) / sizeof(sock_filter));
  ssize_t got = pread(fd, filter.data(), static_cast<size_t>(size), 0);
  close(fd);
  if (got != size || size == 0 || size % sizeof(sock_filter) != 0)
    throw std::runtime_error("seccomp: could not read back the exported filter");
  return filter;
}

SeccompProgram SeccompProgram::zygote_policy() {
  Ctx holder = make_ctx(SCMP_ACT_KILL_PROCESS);
  scmp_filter_ctx ctx = holder.get();
  for (int nr : kZygoteAllowed) add(ctx, SCMP_ACT_ALLOW, nr, "allow");
  for (int nr : kZygotePermissionDenied) add(ctx, SCMP_ACT_ERRNO(EPERM), nr, "eperm");
  for (int nr : kNotImplemented) add(ctx, SCMP_ACT_ERRNO(ENOSYS), nr, "enosys");
  add(ctx, SCMP_ACT_ERRNO(ENOTTY), SCMP_SYS(ioctl), "ioctl");

  // Memory: never executable.
  check(seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(mmap), 1, SCMP_A2_32(SCMP_CMP_MASKED_EQ, PROT_EXEC, 0)), "mmap");
  check(seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(mmap), 1,
                         SCMP_A2_32(SCMP_CMP_MASKED_EQ, PROT_EXEC, PROT_EXEC)),
        "mmap");
  check(seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(mprotect), 1, SCMP_A2_32(SCMP_CMP_MASKED_EQ, PROT_EXEC, 0)),
        "mprotect");
  check(seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(mprotect), 1,
                         SCMP_A2_32(SCMP_CMP_MASKED_EQ, PROT_EXEC, PROT_EXEC)),
        "mprotect");
  add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(pkey_mprotect), "pkey_mprotect");

  // clone only as fork(): no threads, no shared address space, no new namespaces.
  constexpr uint64_t kNotFork = CLONE_VM | CLONE_THREAD | CLONE_SIGHAND | CLONE_FS | CLONE_FILES | CLONE_NEWNS |
                                CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS |
                                CLONE_NEWCGROUP | CLONE_PARENT | CLONE_PTRACE | CLONE_VFORK;
  check(seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(clone), 1, SCMP_A0_64(SCMP_CMP_MASKED_EQ, kNotFork, 0)),
        "clone");
  // Any other clone (a thread, say) fails with EPERM: one rule per forbidden flag, since a
  // rule cannot say "masked value != 0".
  for (uint64_t bit = 1; bit != 0; bit <<= 1)
    if (kNotFork & bit)
      check(seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 1, SCMP_A0_64(SCMP_CMP_MASKED_EQ, bit, bit)),
            "clone");

  // fstat as glibc >= 2.33 issues it: newfstatat(fd, "", buf, AT_EMPTY_PATH) on fds 0..3.
  // The path is a pointer a filter cannot read, so native code passing an absolute path with
  // these arguments does stat that path: forms without AT_EMPTY_PATH are refused, but this one
  // is a way to learn whether a file exists. Python never makes that call (os.stat uses no
  // AT_EMPTY_PATH), and inside the namespaces the root is an empty tmpfs, so there is nothing
  // to find; without them (spawn.cpp's last attempt, "none") the host's paths answer.
  for (int fd = 0; fd <= 3; ++fd)
    check(seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(newfstatat), 2, SCMP_A0_32(SCMP_CMP_EQ, fd),
                           SCMP_A3_32(SCMP_CMP_EQ, AT_EMPTY_PATH)),
          "newfstatat");
  check(seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(newfstatat), 1,
                         SCMP_A3_32(SCMP_CMP_NE, AT_EMPTY_PATH)),
        "newfstatat");
  check(seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(newfstatat), 1, SCMP_A0_32(SCMP_CMP_GT, 3)),
        "newfstatat");

  SeccompProgram p;
  p.filter_ = export_bpf(ctx);
  return p;
}

SeccompProgram SeccompProgram::child_delta(const ChildFds& fds) {
  Ctx holder = make_ctx(SCMP_ACT_ALLOW);
  scmp_filter_ctx ctx = holder.get();
  for (int nr : kChildPermissionDenied) add(ctx, SCMP_ACT_ERRNO(EPERM), nr, "eperm");
  for (int sig : kFaultSignals)
    check(seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(rt_sigaction), 2, SCMP_A0_32(SCMP_CMP_EQ, sig),
                           SCMP_A1_64(SCMP_CMP_NE, 0)),
          "rt_sigaction");
  // I/O on the child's own fds only: read from stdin, write to stdout, stderr and results.
  check(seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(read), 1, SCMP_A0_32(SCMP_CMP_NE, fds.stdin_fd)),
        "read");
  check(seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(write), 1, SCMP_A0_32(SCMP_CMP_EQ, fds.stdin_fd)),
        "write");
  check(seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(write), 1,
                         SCMP_A0_32(SCMP_CMP_GT, static_cast<uint32_t>(fds.result_fd))),
        "write");
  SeccompProgram p;
  p.filter_ = export_bpf(ctx);
  return p;
}

int SeccompProgram::install() const {
  sock_fprog prog{static_cast<unsigned short>(filter_.size()), const_cast<sock_filter*>(filter_.data())};
  if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) return -errno;
  return 0;
}

}  // namespace azr::sandbox
