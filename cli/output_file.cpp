#include "cli/output_file.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include "cli/commands.h"
#include "trainer/checkpoint.h"

namespace azr::cli {

namespace fs = std::filesystem;

fs::path parent_dir(const std::string& path) {
  const fs::path p = fs::path(path).parent_path();
  return p.empty() ? fs::path(".") : p;
}

std::string temp_beside(const std::string& path) {
  const fs::path p(path);
  const std::string prefix = p.filename().string() + ".tmp-";
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(parent_dir(path), ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(prefix, 0) != 0) continue;
    const char* first = name.data() + prefix.size();
    pid_t pid = 0;
    const auto [end, err] = std::from_chars(first, name.data() + name.size(), pid);
    const std::string side(end, name.data() + name.size());  // "", "-wal", "-shm" or "-journal"
    if (err != std::errc() || end == first || pid <= 0 ||
        std::find_if(std::begin(kDatabaseFiles), std::end(kDatabaseFiles),
                     [&](const char* s) { return side == s; }) == std::end(kDatabaseFiles))
      continue;
    if (pid != getpid() && ::kill(pid, 0) != 0 && errno == ESRCH) fs::remove(e.path(), ec);
  }
  return path + ".tmp-" + std::to_string(getpid());
}

RemoveOnExit::~RemoveOnExit() {
  std::error_code ec;
  for (const char* side : kDatabaseFiles) fs::remove(path_ + side, ec);
}

// An output buffer over a file descriptor that keeps the reason of the first write that failed,
// which an ofstream loses: after a failure it makes no more system calls, so the errno seen at
// close was another call's ("an I/O error" for a full disk).
class FdWriter : public std::streambuf {
 public:
  explicit FdWriter(int fd) : fd_(fd) { setp(buf_, buf_ + sizeof buf_); }
  int error() const { return error_; }

 protected:
  int_type overflow(int_type c) override {
    if (!drain()) return traits_type::eof();
    if (!traits_type::eq_int_type(c, traits_type::eof())) {
      *pptr() = traits_type::to_char_type(c);
      pbump(1);
    }
    return traits_type::not_eof(c);
  }
  int sync() override { return drain() ? 0 : -1; }

 private:
  bool drain() {
    for (const char* p = pbase(); error_ == 0 && p < pptr();) {
      const ssize_t n = ::write(fd_, p, size_t(pptr() - p));
      if (n >= 0) p += n;
      else if (errno != EINTR) error_ = errno;
    }
    setp(buf_, buf_ + sizeof buf_);
    return error_ == 0;
  }
  int fd_;
  int error_ = 0;
  char buf_[1 << 16];
};

namespace {

// Where a write of `path` lands: a symlink's target, followed hop by hop (dangling or not).
fs::path link_target(const fs::path& path) {
  fs::path p = path;
  std::error_code ec;
  for (int hops = 0; hops < 40 && fs::is_symlink(fs::symlink_status(p, ec)); ++hops) {
    const fs::path to = fs::read_symlink(p, ec);
    if (ec) break;
    p = to.is_absolute() ? to : parent_dir(p.string()) / to;
  }
  return p;
}

// Which of this process's stdin, stdout and stderr is the file of `st` (-1: none).
int standard_stream_of(const struct stat& st) {
  for (int fd : {1, 2, 0}) {
    struct stat s {};
    if (::fstat(fd, &s) == 0 && s.st_dev == st.st_dev && s.st_ino == st.st_ino) return fd;
  }
  return -1;
}

}  // namespace

std::string ReplacedFile::replaced_path(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && (!S_ISREG(st.st_mode) || standard_stream_of(st) >= 0)) return "";
  return link_target(path).string();
}

ReplacedFile::ReplacedFile(std::string path) : path_(std::move(path)), out_(nullptr) {
  target_ = replaced_path(path_);
  struct stat st {};
  const int stream = ::stat(path_.c_str(), &st) == 0 ? standard_stream_of(st) : -1;
  if (stream == 1 || stream == 2) {
    // `--out /dev/stdout > file`: through the process's own descriptor, whose offset the table
    // printed after it shares (a descriptor of its own wrote from 0, under the table).
    fd_ = ::fcntl(stream, F_DUPFD_CLOEXEC, 3);
  } else if (target_.empty()) {
    fd_ = ::open(path_.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
  } else {
    tmp_ = temp_beside(target_);
    cleanup_.emplace(tmp_);
    fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  }
  if (fd_ < 0) throw UsageError(path_ + ": cannot write (" + std::strerror(errno) + ")");
  buf_ = std::make_unique<FdWriter>(fd_);
  out_.rdbuf(buf_.get());
}

ReplacedFile::~ReplacedFile() {
  if (fd_ >= 0) ::close(fd_);
}

void ReplacedFile::commit() {
  out_.flush();
  if (buf_->error() != 0 || !out_)
    throw std::runtime_error(path_ + ": write failed (" +
                             (buf_->error() ? std::strerror(buf_->error()) : "the stream failed") + ")");
  if (tmp_.empty()) return;
  // The old file's permissions (and owner, where this process may set it): a results file made
  // private stays private.
  struct stat old {};
  if (::stat(target_.c_str(), &old) == 0) {
    (void)!::fchown(fd_, old.st_uid, old.st_gid);
    (void)!::fchmod(fd_, old.st_mode & 07777);
  }
  ::close(fd_);
  fd_ = -1;
  trainer::sync_path(tmp_);
  if (std::rename(tmp_.c_str(), target_.c_str()) != 0)
    throw std::runtime_error(path_ + ": cannot rename into place (" + std::strerror(errno) + ")");
  trainer::sync_path(parent_dir(target_));
}

}  // namespace azr::cli
