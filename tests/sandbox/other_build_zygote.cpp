// Stands in for an azr-zygote from another build of azr (sandbox_test's
// AWorkerFromAnotherBuildIsRefusedAtStart): it says hello as a zygote would, in the next
// protocol version, then waits until the supervisor closes its socket.
#include <unistd.h>

#include "sandbox/framing.h"
#include "sandbox/protocol.h"

int main() {
  constexpr int kSocketFd = 3;  // where spawn_zygote puts the job socket
  azr::sandbox::protocol::Hello hello;
  hello.version = azr::sandbox::protocol::kProtocolVersion + 1;
  hello.python_version = "3.11";
  if (!azr::sandbox::send_message(kSocketFd, azr::sandbox::protocol::encode(hello))) return 1;
  char c;
  while (read(kSocketFd, &c, 1) > 0) {
  }
  return 0;
}
