#pragma once
// Files a command writes whole or not at all: under a temporary name beside the target, renamed
// into place once complete and synced. A command that fails, is interrupted or is killed part-way
// leaves the old file as it was (Ctrl-C in `azr eval --out` grading had emptied it, and left half
// the new one), and a full disk is an error, not a short file and exit 0.
#include <filesystem>
#include <memory>
#include <optional>
#include <ostream>
#include <string>

namespace azr::cli {

// A database's own file and the files SQLite keeps beside it; a plain file has only the first.
inline constexpr const char* kDatabaseFiles[] = {"", "-wal", "-shm", "-journal"};

// The directory a path's file is in ("." for a bare name).
std::filesystem::path parent_dir(const std::string& path);

// `path.tmp-PID`: the name a command writes under before publishing. A process killed with -9
// (or by a second Ctrl-C) leaves it, and SQLite's side files of it; the next command writing
// `path` removes those whose PID no longer runs, and leaves a live process's alone.
std::string temp_beside(const std::string& path);

// Removes a file this command made (and SQLite's side files beside it) however the command ends:
// a failed export or import leaves nothing behind. Once renamed or linked into place the
// temporary name is only a second name (or none), so removing it is always right.
class RemoveOnExit {
 public:
  explicit RemoveOnExit(std::string path) : path_(std::move(path)) {}
  ~RemoveOnExit();
  RemoveOnExit(const RemoveOnExit&) = delete;
  RemoveOnExit& operator=(const RemoveOnExit&) = delete;

 private:
  std::string path_;
};

class FdWriter;

// A text file that replaces `path` on commit() and leaves it untouched otherwise. A symlink is
// followed (its target is replaced, the link kept, dangling or not); the replacement keeps the old
// file's permissions (a hard link to the old file keeps the old contents). What is not a regular
// file (/dev/null, a FIFO) and a file that is this process's stdin, stdout or stderr
// (`--out /dev/stdout > file`, written through that descriptor) are written in place, as
// renaming over them would lose them.
class ReplacedFile {
 public:
  // Opens the temporary file; UsageError (with the OS's reason) when it cannot be made.
  explicit ReplacedFile(std::string path);
  ~ReplacedFile();
  ReplacedFile(const ReplacedFile&) = delete;
  ReplacedFile& operator=(const ReplacedFile&) = delete;
  std::ostream& stream() { return out_; }
  // Flushes, checks every write, syncs, renames into place and syncs the directory: a power cut
  // leaves the old file or the whole new one. std::runtime_error "PATH: write failed (reason)",
  // with the reason of the first write that failed (No space left on device).
  void commit();
  // The file the rename replaces (a symlink's target), or "" when `path` is written in place: a
  // command checks before its work that the directory there takes a new file.
  static std::string replaced_path(const std::string& path);

 private:
  std::string path_;    // as given, for messages
  std::string target_;  // what the rename replaces: the path, or the file its symlink names
  std::string tmp_;     // "" when written in place
  std::optional<RemoveOnExit> cleanup_;
  int fd_ = -1;
  std::unique_ptr<FdWriter> buf_;
  std::ostream out_;
};

}  // namespace azr::cli
