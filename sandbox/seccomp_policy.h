#pragma once
// The system-call policy of a sandboxed child, compiled once per zygote into a BPF program
// and loaded with one prctl() in every child (loading a pre-built program is ~2x cheaper than
// regenerating it with libseccomp per child; see shared/research/sandbox.md §2.4).
#include <linux/filter.h>

#include <string>
#include <vector>

namespace azr::sandbox {

// The child's fds. The policy assumes this exact layout (0 = stdin, 1/2 = output, 3 = results).
struct ChildFds {
  int stdin_fd = 0;   // read() allowed (it is /dev/null)
  int stdout_fd = 1;  // write() allowed (captured, capped)
  int stderr_fd = 2;  // write() allowed (captured, capped)
  int result_fd = 3;  // write() allowed (result records)
};

class SeccompProgram {
 public:
  // Builds the policy with libseccomp; throws std::runtime_error if libseccomp fails.
  static SeccompProgram build(const ChildFds& fds);
  // Installs it on the calling thread (after PR_SET_NO_NEW_PRIVS). Returns 0 or -errno.
  int install() const;
  size_t instructions() const { return filter_.size(); }

 private:
  std::vector<sock_filter> filter_;
};

}  // namespace azr::sandbox
