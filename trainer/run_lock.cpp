#include "trainer/run_lock.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>

#include <fmt/format.h>

#include "trainer/model_setup.h"

namespace azr::trainer {

namespace fs = std::filesystem;

namespace {

struct flock whole_file(short type) {
  struct flock l {};
  l.l_type = type;
  l.l_whence = SEEK_SET;  // l_start = l_len = 0: the whole file, however long it grows
  return l;
}

std::string who_we_are() {
  char host[256] = "?";
  gethostname(host, sizeof host - 1);
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char when[32];
  std::strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", &utc);
  return fmt::format("azr train, pid {} on host {} since {}", getpid(), host, when);
}

}  // namespace

RunDirLock::RunDirLock(const fs::path& run_dir) {
  const fs::path file = run_dir / kRunLockFile;
  // A holder that ends between the failed lock and the read of its name: try again, a few times.
  for (int attempt = 0; attempt < 3; ++attempt) {
    const int fd = ::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) throw UserError(fmt::format("{}: cannot open the run's lock file ({})", file.string(),
                                            std::strerror(errno)));
    struct flock l = whole_file(F_WRLCK);
    if (::fcntl(fd, F_SETLK, &l) == 0) {
      fd_ = fd;
      const std::string me = who_we_are() + "\n";
      // Only the message of a second trainer reads it: a failed write loses nothing else.
      if (::ftruncate(fd_, 0) == 0) (void)!::pwrite(fd_, me.data(), me.size(), 0);
      return;
    }
    const int err = errno;
    ::close(fd);
    // A filesystem without record locks (NFS without its lock daemon): run unlocked, as before.
    if (err == ENOLCK || err == EOPNOTSUPP) return;
    if (err != EACCES && err != EAGAIN)
      throw UserError(fmt::format("{}: cannot lock it ({})", file.string(), std::strerror(err)));
    if (const std::optional<std::string> holder = run_lock_holder(run_dir))
      throw UserError(fmt::format("{}: in use by another {} (it holds {}); wait for it to end, or stop it (Ctrl-C "
                                  "saves a checkpoint)",
                                  run_dir.string(), *holder, file.string()));
  }
  throw UserError(fmt::format("{}: its lock ({}) was taken and let go three times while this run tried to take "
                              "it; another azr train is starting and stopping there",
                              run_dir.string(), file.string()));
}

RunDirLock::~RunDirLock() {
  if (fd_ >= 0) ::close(fd_);  // drops the lock; the file stays, for the next run to lock
}

std::optional<std::string> run_lock_holder(const fs::path& run_dir) {
  const fs::path file = run_dir / kRunLockFile;
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  struct flock l = whole_file(F_WRLCK);
  const bool held = ::fcntl(fd, F_GETLK, &l) == 0 && l.l_type != F_UNLCK;
  std::string text;
  if (held) {
    char buf[512];
    const ssize_t n = ::pread(fd, buf, sizeof buf, 0);
    if (n > 0) text.assign(buf, size_t(n));
    while (!text.empty() && (text.back() == '\n' || text.back() == '\0')) text.pop_back();
    // Written by the holder right after it took the lock: empty only in that instant.
    if (text.empty()) text = l.l_pid > 0 ? fmt::format("process, pid {}", l.l_pid) : "process";
  }
  ::close(fd);
  if (!held) return std::nullopt;
  return text;
}

}  // namespace azr::trainer
