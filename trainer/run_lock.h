#pragma once
// One `azr train` at a time in a run directory. Two (a second --resume typed while the first still
// runs, a new run pointed at a live one's directory) would both write its checkpoints, metrics and
// buffer.db, and the run on disk would be neither. Rank 0 holds a POSIX record lock on
// RUN_DIR/.azr-train.lock while the run lives; the kernel drops it when the process ends, however
// it ends (a kill -9 leaves no stale lock to clear by hand). The file holds who took it (pid, host,
// time), for the message of whoever finds it held: the lock's own pid is 0 across NFS.
//
// Why fcntl and not flock: a record lock is not inherited by fork(), so the sandbox's processes
// never keep a dead trainer's directory locked, and it is what NFS implements. Its one trap (closing
// any descriptor of the file in the holding process drops the lock) is why the file is opened only
// here, and run_lock_holder() is never called by the process that holds the lock.
#include <filesystem>
#include <optional>
#include <string>

namespace azr::trainer {

inline constexpr const char* kRunLockFile = ".azr-train.lock";

class RunDirLock {
 public:
  // Takes run_dir's lock (run_dir must exist), or throws UserError naming the holder and what to do.
  explicit RunDirLock(const std::filesystem::path& run_dir);
  ~RunDirLock();
  RunDirLock(const RunDirLock&) = delete;
  RunDirLock& operator=(const RunDirLock&) = delete;

 private:
  int fd_ = -1;
};

// Who holds run_dir's lock ("azr train, pid 123 on host h since 2026-11-30 20:05:09 UTC"), or
// nullopt when no process does (no lock file, or one whose holder has ended).
std::optional<std::string> run_lock_holder(const std::filesystem::path& run_dir);

}  // namespace azr::trainer
