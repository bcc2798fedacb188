#pragma once
// Starting one zygote: clone() into fresh user, pid, mount, net, ipc and uts namespaces where
// the kernel allows (falling back, with a logged warning, to fewer), map its root to an
// unprivileged outside uid, and exec azr-zygote with an empty environment and its job socket
// on fd 3. Done once per worker, never per job (a new net namespace alone costs ~1 ms).
#include <sys/types.h>

#include <string>
#include <vector>

#include "sandbox/protocol.h"

namespace azr::sandbox {

struct ZygoteSpec {
  std::string path;                     // the azr-zygote executable
  long hash_seed = 0;
  std::vector<std::string> preimports;  // empty: the zygote's default allowlist
  bool use_namespaces = true;           // false only for diagnosis
};

struct SpawnedZygote {
  pid_t pid = -1;
  int pidfd = -1;   // readable when the zygote exits
  int socket = -1;  // the supervisor's end of the job socket
  std::string namespaces;  // e.g. "user,pid,mnt,net,ipc,uts"
  std::vector<std::string> warnings;
  protocol::Hello hello;
};

// Throws std::runtime_error with a clear message if the zygote cannot be started.
SpawnedZygote spawn_zygote(const ZygoteSpec& spec, double hello_timeout_seconds = 30);

// azr-zygote next to the running executable, or $AZR_ZYGOTE if set.
std::string default_zygote_path();

}  // namespace azr::sandbox
