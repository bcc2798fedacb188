#include "sandbox/spawn.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "sandbox/framing.h"

namespace azr::sandbox {
namespace {

constexpr uid_t kNobody = 65534;

struct Fd {
  int fd = -1;
  Fd() = default;
  explicit Fd(int f) : fd(f) {}
  Fd(const Fd&) = delete;
  ~Fd() { reset(); }
  void reset() {
    if (fd >= 0) close(fd);
    fd = -1;
  }
  int release() {
    int f = fd;
    fd = -1;
    return f;
  }
};

bool write_file(const std::string& path, const std::string& text) {
  int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  bool ok = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  close(fd);
  return ok;
}

// True if an unprivileged uid can reach and execute `path` (every directory on the way
// searchable by "others"). When it cannot, the zygote keeps uid 0 outside its user namespace.
bool executable_by_others(const std::string& path) {
  std::filesystem::path p = std::filesystem::absolute(path);
  struct stat st;
  if (stat(p.c_str(), &st) != 0 || !(st.st_mode & S_IXOTH)) return false;
  for (auto dir = p.parent_path(); !dir.empty(); dir = dir.parent_path()) {
    if (stat(dir.c_str(), &st) != 0 || !(st.st_mode & S_IXOTH)) return false;
    if (dir == dir.root_path()) break;
  }
  return true;
}

// The clone()d child before exec: async-signal-safe calls only (the supervisor may be
// multi-threaded). Waits until the parent has written the id maps, then execs.
[[noreturn]] void exec_zygote(int sync_r, int sock, int devnull, const char* path, char* const argv[],
                              bool in_user_ns) {
  char c;
  if (read(sync_r, &c, 1) != 1) _exit(126);
  if (in_user_ns) {
    // Become the namespace's uid 0 (the mapped, unprivileged outer uid). Without this the
    // process keeps its old kuid, which is unmapped inside, and execve grants it no
    // capabilities there. Raw syscalls: glibc's wrappers would try to sync other threads.
    if (syscall(SYS_setresgid, 0, 0, 0) != 0 || syscall(SYS_setresuid, 0, 0, 0) != 0) _exit(125);
  }
  int high = fcntl(sock, F_DUPFD, 100);
  if (high < 0 || dup2(devnull, 0) < 0 || dup2(devnull, 1) < 0 || dup2(high, 3) < 0) _exit(126);
  // Nothing else crosses: the supervisor may hold fds opened without O_CLOEXEC (by a library,
  // say), and a worker has no business holding host files open.
  if (syscall(SYS_close_range, 4u, ~0u, 0u) != 0) _exit(126);
  static const char kHost[] = "azr-sandbox";
  sethostname(kHost, sizeof kHost - 1);  // fails harmlessly without a uts namespace
  // The only variable is for the dynamic linker: resolve every symbol at start-up, so no child
  // runs the lazy-binding resolver and dirties GOT pages (~15 fewer page faults per job). The
  // zygote clears its environment before anything else, so programs see an empty one.
  static char bind_now[] = "LD_BIND_NOW=1";
  char* const envp[] = {bind_now, nullptr};
  execve(path, argv, envp);
  _exit(127);
}

enum class HelloRead { Whole, Ended, TimedOut };

// The hello, read against one deadline for the whole message: a zygote that sends part of it and
// hangs must not hold the spawner past the timeout (a blocking read of the rest would).
HelloRead read_hello(int fd, double seconds, std::string& payload) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  fcntl(fd, F_SETFL, O_NONBLOCK);
  MessageBuffer in;
  char buf[4096];
  for (;;) {
    std::string_view whole;
    if (in.front(whole)) {  // throws on an oversize length, which spawn_zygote calls a bad hello
      payload.assign(whole);
      return HelloRead::Whole;
    }
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return HelloRead::TimedOut;
    pollfd p{fd, POLLIN, 0};
    const int rc = poll(&p, 1, static_cast<int>(std::min<long long>(left.count(), INT_MAX)));
    if (rc < 0 && errno != EINTR) return HelloRead::Ended;
    if (rc <= 0) continue;
    const ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) return HelloRead::Ended;
    in.append(buf, static_cast<size_t>(n));
  }
}

}  // namespace

std::string default_zygote_path() {
  if (const char* env = std::getenv("AZR_ZYGOTE"); env && *env) return env;
  char buf[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "azr-zygote";
  buf[n] = 0;
  return (std::filesystem::path(buf).parent_path() / "azr-zygote").string();
}

SpawnedZygote spawn_zygote(const ZygoteSpec& spec, double hello_timeout_seconds) {
  if (access(spec.path.c_str(), X_OK) != 0)
    throw std::runtime_error("sandbox worker executable not found or not executable: " + spec.path +
                             " (set AZR_ZYGOTE or build the azr-zygote target)");

  std::vector<std::string> args = {spec.path, "--hash-seed=" + std::to_string(spec.hash_seed)};
  if (!spec.preimports.empty()) {
    std::string list;
    for (const auto& m : spec.preimports) list += (list.empty() ? "" : ",") + m;
    args.push_back("--preimport=" + list);
  }
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  int sv[2], sync[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
    throw std::runtime_error(std::string("socketpair: ") + strerror(errno));
  Fd mine(sv[0]), theirs(sv[1]);
  if (pipe2(sync, O_CLOEXEC) != 0) throw std::runtime_error(std::string("pipe2: ") + strerror(errno));
  Fd sync_r(sync[0]), sync_w(sync[1]);
  Fd devnull(open("/dev/null", O_RDWR | O_CLOEXEC));

  struct Attempt {
    unsigned long flags;
    const char* names;
  };
  const unsigned long kAllButUser = CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS;
  std::vector<Attempt> attempts;
  if (spec.use_namespaces) {
    attempts.push_back({CLONE_NEWUSER | kAllButUser, "user,pid,mnt,net,ipc,uts"});
    if (geteuid() == 0) attempts.push_back({kAllButUser, "pid,mnt,net,ipc,uts"});
  }
  attempts.push_back({0, "none"});

  SpawnedZygote z;
  pid_t pid = -1;
  unsigned long flags = 0;
  for (const auto& a : attempts) {
    pid = static_cast<pid_t>(syscall(SYS_clone, a.flags | SIGCHLD, nullptr, nullptr, nullptr, nullptr));
    if (pid == 0)
      exec_zygote(sync_r.fd, theirs.fd, devnull.fd, spec.path.c_str(), argv.data(), a.flags & CLONE_NEWUSER);
    if (pid > 0) {
      flags = a.flags;
      z.namespaces = a.names;
      break;
    }
    if (spec.use_namespaces)
      z.warnings.push_back(std::string("cannot create namespaces ") + a.names + ": " + strerror(errno));
  }
  if (pid < 0) throw std::runtime_error(std::string("clone: ") + strerror(errno));
  z.pid = pid;
  // From here a child exists: whatever throws (a failed start, an allocation, a filesystem call)
  // kills and reaps it, so no zygote is left running or a zombie.
  struct KillUnlessStarted {
    SpawnedZygote& z;
    bool started = false;
    ~KillUnlessStarted() {
      if (started) return;
      kill(z.pid, SIGKILL);
      waitpid(z.pid, nullptr, 0);
      if (z.pidfd >= 0) close(z.pidfd);
    }
  } guard{z};
  theirs.reset();
  sync_r.reset();

  if (flags & CLONE_NEWUSER) {
    // Root inside, an unprivileged uid outside: if the filter ever failed, the process would
    // still own nothing on the host. Unprivileged supervisors can only map themselves.
    uid_t outer_uid = geteuid();
    gid_t outer_gid = getegid();
    if (outer_uid == 0) {
      if (executable_by_others(spec.path)) {
        outer_uid = kNobody;
        outer_gid = kNobody;
      } else {
        z.warnings.push_back("zygote runs as uid 0 outside its user namespace: " + spec.path +
                             " is not reachable by an unprivileged user");
      }
    }
    std::string proc = "/proc/" + std::to_string(pid);
    write_file(proc + "/setgroups", "deny");
    if (!write_file(proc + "/uid_map", "0 " + std::to_string(outer_uid) + " 1\n") ||
        !write_file(proc + "/gid_map", "0 " + std::to_string(outer_gid) + " 1\n"))
      z.warnings.push_back(std::string("could not write the user namespace id maps: ") + strerror(errno));
  }
  if (write(sync_w.fd, "g", 1) != 1) z.warnings.push_back("could not release the zygote");
  sync_w.reset();
  z.pidfd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));

  std::string payload;
  HelloRead got;
  try {
    got = read_hello(mine.fd, hello_timeout_seconds, payload);
  } catch (const std::exception& e) {
    throw std::runtime_error(std::string("sandbox worker sent a bad hello: ") + e.what());
  }
  if (got == HelloRead::TimedOut)
    throw std::runtime_error("sandbox worker did not start within " + std::to_string(hello_timeout_seconds) + " s");
  if (got == HelloRead::Ended)
    throw std::runtime_error("sandbox worker exited during start-up (" + spec.path + "); see its message above");
  try {
    z.hello = protocol::decode_hello(payload);
  } catch (const protocol::ProtocolMismatch& e) {
    throw std::runtime_error("sandbox worker " + spec.path + " is from another build of azr: " + e.what() +
               "; rebuild it with azr (the azr-zygote target) or point AZR_ZYGOTE at the one built with this azr");
  } catch (const std::exception& e) {
    throw std::runtime_error(std::string("sandbox worker sent a bad hello: ") + e.what());
  }
  if (!z.hello.fatal.empty()) throw std::runtime_error("sandbox worker failed to start: " + z.hello.fatal);
  for (const auto& w : z.hello.warnings) z.warnings.push_back(w);
  z.socket = mine.release();
  guard.started = true;
  return z;
}

}  // namespace azr::sandbox
