#include "cli/output_file.h"

#include <signal.h>
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

ReplacedFile::ReplacedFile(std::string path) : path_(std::move(path)), target_(path_) {
  std::error_code ec;
  const fs::file_status st = fs::status(path_, ec);
  if (fs::exists(st) && !fs::is_regular_file(st)) {
    out_.open(path_, std::ios::binary | std::ios::trunc);
  } else {
    if (fs::is_symlink(fs::symlink_status(path_, ec)) && fs::exists(st)) target_ = fs::canonical(path_, ec).string();
    tmp_ = temp_beside(target_);
    cleanup_.emplace(tmp_);
    out_.open(tmp_, std::ios::binary);
  }
  if (!out_) throw UsageError(path_ + ": cannot write (" + std::strerror(errno) + ")");
}

void ReplacedFile::commit() {
  errno = 0;
  out_.flush();
  if (out_) out_.close();
  if (!out_)  // a stream's failure keeps the errno of the write that failed (ENOSPC, EIO)
    throw std::runtime_error(path_ + ": write failed (" + (errno ? std::strerror(errno) : "an I/O error") + ")");
  if (tmp_.empty()) return;
  trainer::sync_path(tmp_);
  if (std::rename(tmp_.c_str(), target_.c_str()) != 0)
    throw std::runtime_error(path_ + ": cannot rename into place (" + std::strerror(errno) + ")");
  trainer::sync_path(parent_dir(target_));
}

}  // namespace azr::cli
