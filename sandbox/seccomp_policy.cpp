#include "sandbox/seccomp_policy.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/seccomp.h>
#include <seccomp.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>

namespace azr::sandbox {
namespace {

// The policy. Default: kill the process (SIGSYS -> status "violation"). Calls that ordinary
// Python code may make by accident fail with an errno instead, so they surface as ordinary
// Python exceptions (a program that tries `import numpy` or `os.getcwd()` is wrong, not hostile).
//
// ALLOW              the interpreter's steady-state needs: memory, signals, clocks, futexes,
//                    exit, and I/O on exactly the child's own four fds.
// ALLOW with args    mmap/mprotect without PROT_EXEC (no shellcode pages); newfstatat only as
//                    glibc's fstat (fd-relative, AT_EMPTY_PATH), never on a path.
// ERRNO(EPERM)       the filesystem, process creation, signals to others, sleeping, rlimits,
//                    prctl, fd juggling: Python raises PermissionError / ModuleNotFoundError /
//                    "can't start new thread".
// ERRNO(ENOSYS)      clone3 and statx, so glibc falls back to calls we can inspect.
// ERRNO(ENOTTY)      ioctl: isatty() works; TIOCSTI-style terminal injection cannot.
// KILL (default)     everything else: sockets, exec, ptrace, process_vm_*, bpf, io_uring,
//                    mount, namespaces, keyrings, kernel modules, timers/alarms, ...
//                    Non-x86-64 ABIs (int 0x80, x32) are killed by libseccomp's arch check.

const int kAllowed[] = {
    SCMP_SYS(close),        SCMP_SYS(brk),          SCMP_SYS(munmap),
    SCMP_SYS(mremap),       SCMP_SYS(madvise),      SCMP_SYS(exit),
    SCMP_SYS(exit_group),   SCMP_SYS(rt_sigaction), SCMP_SYS(rt_sigprocmask),
    SCMP_SYS(rt_sigreturn), SCMP_SYS(sigaltstack),  SCMP_SYS(clock_gettime),
    SCMP_SYS(clock_getres), SCMP_SYS(gettimeofday), SCMP_SYS(time),
    SCMP_SYS(getrandom),    SCMP_SYS(futex),        SCMP_SYS(fstat),
    SCMP_SYS(lseek),        SCMP_SYS(getpid),       SCMP_SYS(gettid),
    SCMP_SYS(sched_yield),  SCMP_SYS(getrusage),    SCMP_SYS(times),
    SCMP_SYS(uname),        SCMP_SYS(getuid),       SCMP_SYS(geteuid),
    SCMP_SYS(getgid),       SCMP_SYS(getegid),
};

const int kPermissionDenied[] = {
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
    SCMP_SYS(fsync), SCMP_SYS(fdatasync), SCMP_SYS(flock), SCMP_SYS(fcntl),
    SCMP_SYS(dup), SCMP_SYS(dup2), SCMP_SYS(dup3), SCMP_SYS(pipe), SCMP_SYS(pipe2),
    SCMP_SYS(memfd_create), SCMP_SYS(pread64), SCMP_SYS(pwrite64), SCMP_SYS(readv),
    SCMP_SYS(writev),
    // processes and threads
    SCMP_SYS(clone), SCMP_SYS(fork), SCMP_SYS(vfork), SCMP_SYS(kill), SCMP_SYS(tkill),
    SCMP_SYS(tgkill), SCMP_SYS(rt_sigqueueinfo), SCMP_SYS(rt_tgsigqueueinfo),
    SCMP_SYS(getppid), SCMP_SYS(setsid), SCMP_SYS(setpgid), SCMP_SYS(getpgrp),
    SCMP_SYS(getpgid), SCMP_SYS(getsid), SCMP_SYS(set_robust_list), SCMP_SYS(rseq),
    SCMP_SYS(sched_getaffinity), SCMP_SYS(sched_setaffinity), SCMP_SYS(getpriority),
    SCMP_SYS(setpriority), SCMP_SYS(wait4), SCMP_SYS(waitid),
    // identity, limits, process attributes
    SCMP_SYS(setuid), SCMP_SYS(setgid), SCMP_SYS(setreuid), SCMP_SYS(setregid),
    SCMP_SYS(setresuid), SCMP_SYS(setresgid), SCMP_SYS(setgroups), SCMP_SYS(getgroups),
    SCMP_SYS(getresuid), SCMP_SYS(getresgid), SCMP_SYS(capget), SCMP_SYS(capset),
    SCMP_SYS(prlimit64), SCMP_SYS(setrlimit), SCMP_SYS(getrlimit), SCMP_SYS(prctl),
    SCMP_SYS(arch_prctl), SCMP_SYS(seccomp), SCMP_SYS(sysinfo), SCMP_SYS(umask),
    // waiting: sleeping would only burn the wall-clock budget
    SCMP_SYS(nanosleep), SCMP_SYS(clock_nanosleep), SCMP_SYS(select), SCMP_SYS(pselect6),
    SCMP_SYS(poll), SCMP_SYS(ppoll), SCMP_SYS(pause), SCMP_SYS(rt_sigsuspend),
    SCMP_SYS(rt_sigtimedwait), SCMP_SYS(epoll_create1), SCMP_SYS(eventfd2),
};

const int kNotImplemented[] = {SCMP_SYS(clone3), SCMP_SYS(statx)};

struct CtxDeleter {
  void operator()(scmp_filter_ctx c) const { seccomp_release(c); }
};

void check(int rc, const char* what) {
  if (rc < 0) throw std::runtime_error(std::string("seccomp: ") + what + ": " + strerror(-rc));
}

}  // namespace

SeccompProgram SeccompProgram::build(const ChildFds& fds) {
  std::unique_ptr<void, CtxDeleter> holder(seccomp_init(SCMP_ACT_KILL_PROCESS));
  scmp_filter_ctx ctx = holder.get();
  if (!ctx) throw std::runtime_error("seccomp: seccomp_init failed");
  check(seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS), "badarch");
  // no_new_privs is set by the child itself, explicitly, before install().
  check(seccomp_attr_set(ctx, SCMP_FLTATR_CTL_NNP, 0), "nnp");

  for (int nr : kAllowed) check(seccomp_rule_add(ctx, SCMP_ACT_ALLOW, nr, 0), "allow");
  for (int nr : kPermissionDenied) check(seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), nr, 0), "eperm");
  for (int nr : kNotImplemented) check(seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), nr, 0), "enosys");
  check(seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOTTY), SCMP_SYS(ioctl), 0), "ioctl");

  // I/O on the child's own fds only. int arguments are compared as 32-bit values: the upper
  // halves of the registers are not guaranteed to be zero.
  check(seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(read), 1, SCMP_A0_32(SCMP_CMP_EQ, fds.stdin_fd)), "read");
  check(seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(read), 1, SCMP_A0_32(SCMP_CMP_NE, fds.stdin_fd)), "read");
  for (int fd : {fds.stdout_fd, fds.stderr_fd, fds.result_fd})
    check(seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(write), 1, SCMP_A0_32(SCMP_CMP_EQ, fd)), "write");
  // The child's fds are 0..3 by construction (ChildFds), so "not ours" is fd 0 or fd > 3.
  check(seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(write), 1, SCMP_A0_32(SCMP_CMP_EQ, fds.stdin_fd)), "write");
  check(seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(write), 1,
                         SCMP_A0_32(SCMP_CMP_GT, static_cast<uint32_t>(fds.result_fd))),
        "write");

  // Memory: never executable.
  for (int nr : {SCMP_SYS(mmap), SCMP_SYS(mprotect)}) {
    // prot is argument 2 of both mmap(addr, len, prot, ...) and mprotect(addr, len, prot).
    scmp_arg_cmp no_exec = SCMP_A2_32(SCMP_CMP_MASKED_EQ, PROT_EXEC, 0);
    scmp_arg_cmp exec = SCMP_A2_32(SCMP_CMP_MASKED_EQ, PROT_EXEC, PROT_EXEC);
    check(seccomp_rule_add(ctx, SCMP_ACT_ALLOW, nr, 1, no_exec), "mmap");
    check(seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), nr, 1, exec), "mmap");
  }
  check(seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(pkey_mprotect), 0), "pkey_mprotect");

  // fstat as glibc >= 2.33 issues it: newfstatat(fd, "", buf, AT_EMPTY_PATH) on our own fds.
  // Any path-based form is refused, so a program cannot probe which files exist.
  for (int fd : {fds.stdin_fd, fds.stdout_fd, fds.stderr_fd, fds.result_fd})
    check(seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(newfstatat), 2, SCMP_A0_32(SCMP_CMP_EQ, fd),
                           SCMP_A3_32(SCMP_CMP_EQ, AT_EMPTY_PATH)),
          "newfstatat");
  // libseccomp requires rules on one syscall to be distinguishable; the catch-all EPERM form
  // below covers every newfstatat the ALLOW rules above do not match.
  check(seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(newfstatat), 1,
                         SCMP_A3_32(SCMP_CMP_NE, AT_EMPTY_PATH)),
        "newfstatat");
  check(seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(newfstatat), 1,
                         SCMP_A0_32(SCMP_CMP_GT, static_cast<uint32_t>(fds.result_fd))),
        "newfstatat");

  // Export the compiled BPF once; children load it with a single prctl().
  int fd = memfd_create("azr-seccomp", MFD_CLOEXEC);
  if (fd < 0) throw std::runtime_error("seccomp: memfd_create failed");
  int rc = seccomp_export_bpf(ctx, fd);
  if (rc < 0) {
    close(fd);
    check(rc, "export");
  }
  off_t size = lseek(fd, 0, SEEK_END);
  SeccompProgram p;
  p.filter_.resize(static_cast<size_t>(size) / sizeof(sock_filter));
  ssize_t got = pread(fd, p.filter_.data(), static_cast<size_t>(size), 0);
  close(fd);
  if (got != size || size == 0 || size % sizeof(sock_filter) != 0)
    throw std::runtime_error("seccomp: could not read back the exported filter");
  return p;
}

int SeccompProgram::install() const {
  sock_fprog prog{static_cast<unsigned short>(filter_.size()), const_cast<sock_filter*>(filter_.data())};
  if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) return -errno;
  return 0;
}

}  // namespace azr::sandbox
