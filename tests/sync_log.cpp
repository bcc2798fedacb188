// An LD_PRELOAD library for the durability tests: each fsync and fdatasync (with the path its
// descriptor names), rename and link the process makes is appended as one line to the file
// $AZR_SYNC_LOG, in call order, before the real call runs. Whether a write survives a power cut
// cannot be tested without cutting the power; that the calls which make it survive come in the
// right order (the file synced before it is renamed into place, the directory after) can.
// With $AZR_SYNC_FAIL set, an fsync of a path that contains it fails with EIO, as on a disk that
// failed its write-back: what a run does then can be tested.
#include <dlfcn.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace {

template <class Fn>
Fn real(const char* name) {
  return reinterpret_cast<Fn>(dlsym(RTLD_NEXT, name));
}

void log_line(const std::string& line) {
  const char* path = std::getenv("AZR_SYNC_LOG");
  if (!path) return;
  const int fd = ::open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return;
  const std::string l = line + "\n";
  (void)!::write(fd, l.data(), l.size());  // one write per line: lines of two threads never mix
  ::close(fd);
}

std::string fd_path(int fd) {
  char buf[4096];
  const std::string link = "/proc/self/fd/" + std::to_string(fd);
  const ssize_t n = ::readlink(link.c_str(), buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, size_t(n)) : "?";
}

}  // namespace

extern "C" {

int fsync(int fd) {
  const std::string path = fd_path(fd);
  log_line("fsync " + path);
  if (const char* fail = std::getenv("AZR_SYNC_FAIL"); fail && *fail && path.find(fail) != std::string::npos) {
    errno = EIO;
    return -1;
  }
  return real<int (*)(int)>("fsync")(fd);
}

int fdatasync(int fd) {
  log_line("fdatasync " + fd_path(fd));
  return real<int (*)(int)>("fdatasync")(fd);
}

int rename(const char* from, const char* to) {
  log_line(std::string("rename ") + from + " " + to);
  return real<int (*)(const char*, const char*)>("rename")(from, to);
}

int link(const char* from, const char* to) {
  log_line(std::string("link ") + from + " " + to);
  return real<int (*)(const char*, const char*)>("link")(from, to);
}

}  // extern "C"
