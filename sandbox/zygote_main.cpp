// azr-zygote: one sandbox worker. Started by the supervisor (sandbox/spawn.cpp) with an empty
// environment, inside fresh namespaces where the kernel allows, with its job socket on fd 3.
//
//   start:  init CPython, pre-import, harness, gc.freeze -> hide the filesystem (empty
//           read-only root) -> drop capabilities -> build the seccomp BPF -> say hello
//   loop:   read a request -> fork -> child: lock down, run, _exit
//                                  -> zygote: relay the child's pipes (capped), enforce the
//                                     wall clock, reap, answer
//
// The zygote never runs untrusted code itself, so it is the children's trusted parent.
#include <fcntl.h>
#include <malloc.h>
#include <linux/capability.h>
#include <poll.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "sandbox/child_lockdown.h"
#include "sandbox/protocol.h"
#include "sandbox/seccomp_policy.h"
#include "sandbox/wire.h"
#include "sandbox/zygote_python.h"
#include "sandbox/framing.h"

namespace azr::sandbox {
namespace {

constexpr int kSocketFd = 3;

double now_seconds() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// Replaces the root with an empty read-only tmpfs. Everything the zygote needs from the
// filesystem (libpython, the pre-imported modules) is already mapped, so children see nothing.
std::string hide_filesystem() {
  if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0)
    return std::string("mount namespace unavailable (") + strerror(errno) + ")";
  // Any existing directory works as a mount point; /proc exists everywhere.
  if (mount("azr-empty", "/proc", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=4k,mode=0555") != 0)
    return std::string("tmpfs mount failed (") + strerror(errno) + ")";
  if (chdir("/proc") != 0 || syscall(SYS_pivot_root, ".", ".") != 0)
    return std::string("pivot_root failed (") + strerror(errno) + ")";
  if (umount2(".", MNT_DETACH) != 0 || chdir("/") != 0)
    return std::string("detaching the old root failed (") + strerror(errno) + ")";
  if (mount(nullptr, "/", nullptr, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
            nullptr) != 0)
    return std::string("read-only remount failed (") + strerror(errno) + ")";
  return "";
}

// Drops every capability (bounding, effective, permitted, inheritable, ambient). In a user
// namespace the zygote is root there; its children keep none of it.
std::string drop_capabilities() {
  for (int cap = 0; cap <= 63; ++cap) prctl(PR_CAPBSET_DROP, cap, 0, 0, 0);  // EINVAL past the last
  prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
  __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  if (syscall(SYS_capset, &hdr, data) != 0) return std::string("capset failed (") + strerror(errno) + ")";
  return "";
}

struct Child {
  protocol::Response resp;
  bool killed = false;
};

void kill_child(pid_t pid, int pidfd) {
  if (pidfd >= 0 && syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, nullptr, 0) == 0) return;
  kill(pid, SIGKILL);
}

class Zygote {
 public:
  Zygote(SeccompProgram child_delta, int devnull)
      : child_delta_(std::move(child_delta)), devnull_(devnull), self_(getpid()) {}

  protocol::Response run(const protocol::Request& req) {
    protocol::Response resp;
    resp.job_id = req.job_id;
    int res[2], out[2];
    if (pipe2(res, O_CLOEXEC) != 0) return spawn_failed(resp, errno);
    // A 1 MiB results pipe for a job allowed more than the default 1 MiB of results (EvalPlus's
    // canonical runs): a large result then wakes the zygote once per MiB, not once per 64 KiB.
    // Not for every job: the kernel's per-user quota of pipe pages (pipe-user-pages-soft, 64 MiB)
    // would be spent by 64 workers, and past it every new pipe gets a single page. Best effort.
    if (req.limits.max_result_bytes > (1u << 20)) fcntl(res[1], F_SETPIPE_SZ, 1 << 20);
    if (pipe2(out, O_CLOEXEC) != 0) {
      int e = errno;
      close(res[0]);
      close(res[1]);
      return spawn_failed(resp, e);
    }
    int lockdown[2];  // a byte here: the child failed to lock itself down (child_lockdown.h)
    if (pipe2(lockdown, O_CLOEXEC | O_NONBLOCK) != 0) {
      int e = errno;
      for (int fd : {res[0], res[1], out[0], out[1]}) close(fd);
      return spawn_failed(resp, e);
    }
    const double start = now_seconds();
    python_before_fork();
    pid_t pid = fork();
    if (pid == 0) {
      lock_down_child(ChildPipes{devnull_, out[1], res[1], lockdown[1]}, req.limits, self_);
      python_after_fork_child();
      install_child_filter(child_delta_);
      run_job_in_child(req, 3);
    }
    int fork_errno = errno;
    python_after_fork_parent();
    close(res[1]);
    close(out[1]);
    close(lockdown[1]);
    if (pid < 0) {
      for (int fd : {res[0], out[0], lockdown[0]}) close(fd);
      return spawn_failed(resp, fork_errno);
    }
    watch(pid, res[0], out[0], req.limits, start, resp);
    // The child is reaped: its byte, if it wrote one, is in the pipe. Only lockdown code can have
    // written it, so it decides whatever else ended the child (a deadline that came first).
    char byte = 0;
    if (read(lockdown[0], &byte, 1) == 1) resp.end = protocol::End::LockdownFailed;
    for (int fd : {res[0], out[0], lockdown[0]}) close(fd);
    return resp;
  }

 private:
  static protocol::Response& spawn_failed(protocol::Response& r, int err) {
    r.end = protocol::End::SpawnFailed;
    r.code = err;
    return r;
  }

  // Relays both pipes into capped buffers until the child is gone; kills it at the wall-clock
  // deadline or when a cap is exceeded. The pidfd tells us the child exited even if it closed
  // its pipes early or is blocked in a futex (which burns no CPU, so only the wall clock ends it).
  void watch(pid_t pid, int res_fd, int out_fd, const Limits& limits, double start, protocol::Response& resp) {
    int pidfd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
    fcntl(res_fd, F_SETFL, O_NONBLOCK);
    fcntl(out_fd, F_SETFL, O_NONBLOCK);
    const double deadline = start + limits.effective_wall_seconds();
    // User code can write to fd 3 directly; allow the harness's own framing some slack.
    const size_t result_cap = limits.max_result_bytes + 4096 + 64;
    const size_t output_cap = limits.max_output_bytes;
    protocol::End kill_reason = protocol::End::Exited;
    bool res_open = true, out_open = true, exited = false;
    char buf[65536];

    auto drain = [&](int fd, std::string& into, size_t cap, protocol::End reason, bool& open) {
      for (;;) {
        ssize_t n = read(fd, buf, sizeof buf);
        if (n > 0) {
          size_t take = into.size() < cap ? std::min(cap - into.size(), static_cast<size_t>(n)) : 0;
          // Past 1 MiB, address space for the whole cap at once: its pages are faulted in only as
          // bytes arrive, and a result of many megabytes is not copied through every doubling.
          if (into.size() + take > (1u << 20) && into.capacity() < cap)
            into.reserve(std::min<size_t>(cap, kMaxMessageBytes));
          into.append(buf, take);
          if (take < static_cast<size_t>(n) && kill_reason == protocol::End::Exited) {
            kill_reason = reason;
            kill_child(pid, pidfd);
          }
          continue;
        }
        if (n == 0) open = false;
        if (n < 0 && errno == EINTR) continue;
        return;  // EAGAIN or EOF
      }
    };

    while (!exited) {
      pollfd fds[3];
      int nfds = 0;
      int res_i = -1, out_i = -1, pid_i = -1;
      if (res_open) fds[res_i = nfds++] = {res_fd, POLLIN, 0};
      if (out_open) fds[out_i = nfds++] = {out_fd, POLLIN, 0};
      if (pidfd >= 0) fds[pid_i = nfds++] = {pidfd, POLLIN, 0};
      double left = deadline - now_seconds();
      int timeout_ms = kill_reason != protocol::End::Exited ? 1000 : std::max(0, static_cast<int>(left * 1000) + 1);
      int rc = poll(fds, static_cast<nfds_t>(nfds), pidfd >= 0 ? timeout_ms : std::min(timeout_ms, 5));
      if (rc < 0 && errno != EINTR) {  // the zygote cannot watch (ENOMEM): the sandbox's failure
        const int err = errno;
        kill_child(pid, pidfd);
        wait4(pid, nullptr, 0, nullptr);
        if (pidfd >= 0) close(pidfd);
        resp.end = protocol::End::SpawnFailed;
        resp.code = err;
        return;
      }
      if (res_i >= 0 && fds[res_i].revents) drain(res_fd, resp.records, result_cap, protocol::End::KilledResult, res_open);
      if (out_i >= 0 && fds[out_i].revents) drain(out_fd, resp.output, output_cap, protocol::End::KilledOutput, out_open);
      bool gone = pidfd >= 0 ? (pid_i >= 0 && fds[pid_i].revents) : false;
      if (pidfd < 0) {  // kernels without pidfd: poll the zombie
        int st;
        gone = waitpid(pid, &st, WNOHANG | __WNOTHREAD) == pid;
        if (gone) {  // what it wrote after the last poll is still in the pipes
          if (res_open) drain(res_fd, resp.records, result_cap, protocol::End::KilledResult, res_open);
          if (out_open) drain(out_fd, resp.output, output_cap, protocol::End::KilledOutput, out_open);
          finish(resp, st, start);
          exited = true;
          break;
        }
      }
      if (gone) {
        // The child is dead: whatever it wrote is already in the pipes.
        if (res_open) drain(res_fd, resp.records, result_cap, protocol::End::KilledResult, res_open);
        if (out_open) drain(out_fd, resp.output, output_cap, protocol::End::KilledOutput, out_open);
        int st = 0;
        rusage ru{};
        wait4(pid, &st, 0, &ru);
        finish(resp, st, start, &ru);
        exited = true;
      } else if (kill_reason == protocol::End::Exited && now_seconds() >= deadline) {
        kill_reason = protocol::End::KilledWall;
        kill_child(pid, pidfd);
      }
    }
    if (pidfd >= 0) close(pidfd);
    if (kill_reason != protocol::End::Exited) {
      resp.end = kill_reason;
      resp.code = SIGKILL;
    }
  }

  static void finish(protocol::Response& resp, int status, double start, const rusage* ru = nullptr) {
    resp.wall_seconds = now_seconds() - start;
    if (ru)
      resp.cpu_seconds = static_cast<double>(ru->ru_utime.tv_sec + ru->ru_stime.tv_sec) +
                         static_cast<double>(ru->ru_utime.tv_usec + ru->ru_stime.tv_usec) * 1e-6;
    if (WIFSIGNALED(status)) {
      resp.end = protocol::End::Signaled;
      resp.code = WTERMSIG(status);
    } else {
      resp.end = protocol::End::Exited;
      resp.code = WEXITSTATUS(status);
    }
  }

  SeccompProgram child_delta_;
  int devnull_;
  pid_t self_;
};

struct Args {
  long hash_seed = 0;
  std::vector<std::string> preimports = default_preimports();
};

Args parse_args(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string s = argv[i];
    if (s.rfind("--hash-seed=", 0) == 0) {
      a.hash_seed = std::strtol(s.c_str() + 12, nullptr, 10);
    } else if (s.rfind("--preimport=", 0) == 0) {
      a.preimports.clear();
      std::string list = s.substr(12);
      size_t pos = 0;
      while (pos <= list.size()) {
        size_t comma = list.find(',', pos);
        if (comma == std::string::npos) comma = list.size();
        if (comma > pos) a.preimports.push_back(list.substr(pos, comma - pos));
        pos = comma + 1;
      }
    } else {
      std::fprintf(stderr, "azr-zygote: unknown argument %s (this program is started by azr)\n", argv[i]);
      std::exit(2);
    }
  }
  return a;
}

int zygote_main(int argc, char** argv) {
  Args args = parse_args(argc, argv);
  // No fastbins: otherwise the first large malloc in every child consolidates the zygote's
  // leftover free chunks, walking (and copy-on-write faulting) much of the inherited heap.
  mallopt(M_MXFAST, 0);
  clearenv();  // the supervisor already passes none; belt and braces
  signal(SIGPIPE, SIG_IGN);
  // A terminal's Ctrl-C reaches the whole foreground process group, workers included; the
  // supervisor decides when workers stop (it finishes the step and checkpoints first), and
  // PDEATHSIG still ends them with it.
  signal(SIGINT, SIG_IGN);
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (fcntl(kSocketFd, F_GETFD) < 0) {
    std::fprintf(stderr, "azr-zygote: no job socket on fd 3 (this program is started by azr)\n");
    return 2;
  }
  int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);

  protocol::Hello hello;
  PythonInfo py;
  try {
    py = init_python(PythonInit{args.hash_seed, args.preimports});
  } catch (const std::exception& e) {
    hello.fatal = std::string("python: ") + e.what();
  }
  hello.python_version = py.version;
  hello.missing_preimports = py.missing_preimports;
  hello.preimports = static_cast<uint32_t>(args.preimports.size() - py.missing_preimports.size());

  if (hello.fatal.empty()) {
    std::string w = hide_filesystem();
    hello.filesystem_hidden = w.empty();
    if (!w.empty()) hello.warnings.push_back("filesystem not hidden: " + w);
    w = drop_capabilities();
    if (!w.empty()) hello.warnings.push_back("capabilities not dropped: " + w);
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) hello.warnings.push_back("no_new_privs failed");
  }

  // Both layers are built now; the zygote's own is installed last, right before serving.
  SeccompProgram zygote_filter, child_delta;
  if (hello.fatal.empty()) {
    try {
      zygote_filter = SeccompProgram::zygote_policy();
      child_delta = SeccompProgram::child_delta(ChildFds{});
      hello.bpf_instructions = static_cast<uint32_t>(zygote_filter.instructions() + child_delta.instructions());
    } catch (const std::exception& e) {
      hello.fatal = e.what();
    }
  }
  malloc_trim(0);  // hand freed start-up memory back: fewer pages to copy at every fork
  hello.pid_in_namespace = getpid();
  if (hello.fatal.empty() && zygote_filter.install() != 0)
    hello.fatal = std::string("cannot install the zygote's seccomp policy: ") + strerror(errno);
  if (!send_message(kSocketFd, encode(hello))) return 1;
  if (!hello.fatal.empty()) return 1;

  Zygote z(std::move(child_delta), devnull);
  std::string payload;
  while (read_message(kSocketFd, payload)) {
    protocol::Request req;
    try {
      req = protocol::decode_request(payload);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "azr-zygote: bad request: %s\n", e.what());
      return 1;
    }
    protocol::Response resp = z.run(req);
    protocol::ResponsePieces pieces = protocol::encode_pieces(resp);
    if (!send_message(kSocketFd, {pieces.head, resp.records, pieces.middle, resp.output})) return 1;
  }
  return 0;  // the supervisor closed the socket
}

}  // namespace
}  // namespace azr::sandbox

int main(int argc, char** argv) { return azr::sandbox::zygote_main(argc, argv); }
