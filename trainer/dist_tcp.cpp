// TcpCommunicator: a star through rank 0 over plain TCP sockets, for torchrun-style launches
// where MPI is not available.
//
// Every collective is funnelled through rank 0, which does the arithmetic in rank order and
// sends the same bytes to everyone: rank 0 moves 2(P-1)n bytes per allreduce of n bytes and
// holds one chunk of scratch. That is fine for CPU runs on a few ranks; it is not a GPU path.
//
// Sockets are non-blocking and every wait goes through poll() with a timeout, so a dead peer
// surfaces as an exception (EOF/ECONNRESET at once, silence after io_timeout) instead of a
// hang. After any error the communicator closes all its sockets: the other ranks then see
// EOF immediately rather than waiting out their own timeouts, and a stream that may be
// half-way through a message is never reused.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <thread>
#include <vector>

#include "trainer/dist.h"

namespace azr::trainer::dist {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr std::uint32_t kMagic = 0x617a7244;  // "azrD"; host order, so it also checks endianness
constexpr std::uint32_t kVersion = 1;

enum Op : std::uint32_t { kAllreduce = 1, kBroadcast = 2, kAllgather = 3, kBarrier = 4 };
enum Dtype : std::uint32_t { kFloat = 1, kDouble = 2 };

struct Hello {
  std::uint32_t magic, version;
  std::int32_t rank, world;
};
struct HelloReply {
  std::uint32_t magic, status;  // status 0 = accepted
};
struct Header {
  std::uint32_t op, arg;  // arg: dtype for allreduce, root for broadcast
  std::uint64_t count;    // allreduce: elements; broadcast/allgather: bytes
};

std::string describe(const Header& h) {
  switch (h.op) {
    case kAllreduce:
      return std::string("allreduce_sum(") + (h.arg == kFloat ? "float" : "double") + ", " +
             std::to_string(h.count) + " elements)";
    case kBroadcast: return "broadcast(root " + std::to_string(h.arg) + ")";
    case kAllgather: return "allgather";
    case kBarrier: return "barrier";
    default: return "unknown op " + std::to_string(h.op);
  }
}

std::string errno_text(int err) { return std::strerror(err); }

int remaining_ms(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<long long>(left, 0, 1'000'000'000));
}

// poll() one fd until `events` or the deadline; false on timeout. EINTR restarts with the
// time that is left.
bool wait_for(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int rc = ::poll(&p, 1, remaining_ms(deadline));
    if (rc > 0) return true;
    if (rc == 0) return false;
    if (errno != EINTR) throw std::runtime_error("tcp: poll failed: " + errno_text(errno));
  }
}

void set_socket_options(int fd) {
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  const int flags = ::fcntl(fd, F_GETFL, 0);
  ::fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

}  // namespace

struct TcpCommunicator::Impl {
  int rank = 0, size = 1;
  TcpOptions options;
  std::vector<int> fds;  // rank 0: fds[r] for every peer r; peers: fds[0]
  bool broken = false;
  std::vector<double> scratch;  // double storage keeps it aligned for float and double

  ~Impl() { close_all(); }

  void close_all() {
    for (int& fd : fds)
      if (fd >= 0) {
        ::close(fd);
        fd = -1;
      }
  }

  std::string who() const { return "tcp rank " + std::to_string(rank); }

  // Whole-buffer send; the io_timeout counts from the last byte of progress, so a slow but
  // live transfer of gigabytes never times out.
  void send_all(int peer, const void* data, std::size_t n, const std::string& what) {
    const int fd = fds[static_cast<std::size_t>(peer)];
    auto p = static_cast<const char*>(data);
    auto deadline = Clock::now() + options.io_timeout;
    while (n > 0) {
      const ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL);
      if (k > 0) {
        p += k;
        n -= static_cast<std::size_t>(k);
        deadline = Clock::now() + options.io_timeout;
        continue;
      }
      if (k < 0 && errno == EINTR) continue;
      if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        if (!wait_for(fd, POLLOUT, deadline))
          throw std::runtime_error(who() + ": rank " + std::to_string(peer) + " accepted no data for " +
                                   std::to_string(options.io_timeout.count()) + " ms during " + what +
                                   " (is it hung, or in a different collective?)");
        continue;
      }
      throw std::runtime_error(who() + ": lost the connection to rank " + std::to_string(peer) +
                               " during " + what + ": " + errno_text(errno) + " (did it die or fail?)");
    }
  }

  void recv_all(int peer, void* data, std::size_t n, const std::string& what) {
    const int fd = fds[static_cast<std::size_t>(peer)];
    auto p = static_cast<char*>(data);
    auto deadline = Clock::now() + options.io_timeout;
    while (n > 0) {
      const ssize_t k = ::recv(fd, p, n, 0);
      if (k > 0) {
        p += k;
        n -= static_cast<std::size_t>(k);
        deadline = Clock::now() + options.io_timeout;
        continue;
      }
      if (k == 0)
        throw std::runtime_error(who() + ": lost the connection to rank " + std::to_string(peer) +
                                 " during " + what + ": closed by the peer (did it die or fail?)");
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        if (!wait_for(fd, POLLIN, deadline))
          throw std::runtime_error(who() + ": no data from rank " + std::to_string(peer) + " for " +
                                   std::to_string(options.io_timeout.count()) + " ms during " + what +
                                   " (is it hung, or in a different collective?)");
        continue;
      }
      throw std::runtime_error(who() + ": lost the connection to rank " + std::to_string(peer) +
                               " during " + what + ": " + errno_text(errno) + " (did it die or fail?)");
    }
  }

  // Rank 0: every peer's header must name the same collective, or all ranks stop here.
  std::vector<Header> gather_headers(const Header& mine) {
    std::vector<Header> all(static_cast<std::size_t>(size));
    all[0] = mine;
    for (int r = 1; r < size; ++r) {
      Header h{};
      recv_all(r, &h, sizeof h, describe(mine));
      const bool same = h.op == mine.op && h.arg == mine.arg &&
                        (mine.op != kAllreduce || h.count == mine.count);
      if (!same)
        throw std::runtime_error(who() + ": collective mismatch: rank 0 called " + describe(mine) +
                                 " but rank " + std::to_string(r) + " called " + describe(h));
      all[static_cast<std::size_t>(r)] = h;
    }
    return all;
  }

  // Runs one collective; on any failure the sockets close so the other ranks fail fast too.
  template <typename F>
  void guarded(F&& body) {
    if (broken)
      throw std::runtime_error(who() + ": communicator unusable after an earlier error");
    try {
      body();
    } catch (...) {
      broken = true;
      close_all();
      throw;
    }
  }

  void listen_and_accept(int port);
  void connect_to_root(const std::string& addr, int port);
};

void TcpCommunicator::Impl::listen_and_accept(int port) {
  // All interfaces rather than MASTER_ADDR: the name other nodes use may not be an address this
  // host can bind (NAT, aliases), and torchrun's own store does the same. IPv6 dual-stack
  // first, plain IPv4 where the kernel has no IPv6.
  int lfd = ::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int one = 1, zero = 0;
  if (lfd >= 0) {
    ::setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    ::setsockopt(lfd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
    sockaddr_in6 a{};
    a.sin6_family = AF_INET6;
    a.sin6_addr = in6addr_any;
    a.sin6_port = htons(static_cast<std::uint16_t>(port));
    if (::bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      const int err = errno;
      ::close(lfd);
      lfd = -1;
      if (err == EADDRINUSE)
        throw std::runtime_error(who() + ": cannot listen on port " + std::to_string(port) +
                                 ": address already in use (another job on this MASTER_PORT?)");
    }
  }
  if (lfd < 0) {
    lfd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (lfd < 0) throw std::runtime_error(who() + ": socket() failed: " + errno_text(errno));
    ::setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    if (::bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      const int err = errno;
      ::close(lfd);
      throw std::runtime_error(who() + ": cannot listen on port " + std::to_string(port) + ": " +
                               errno_text(err));
    }
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{lfd};
  if (::listen(lfd, std::max(size, 16)) != 0)
    throw std::runtime_error(who() + ": listen() failed: " + errno_text(errno));
  set_socket_options(lfd);

  const auto deadline = Clock::now() + options.connect_timeout;
  int connected = 0;
  while (connected < size - 1) {
    if (!wait_for(lfd, POLLIN, deadline)) {
      std::string missing;
      for (int r = 1; r < size; ++r)
        if (fds[static_cast<std::size_t>(r)] < 0) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      throw std::runtime_error(who() + ": timed out after " +
                               std::to_string(options.connect_timeout.count()) +
                               " ms waiting on port " + std::to_string(port) + " for rank(s) " +
                               missing + " of " + std::to_string(size) + " to connect");
    }
    const int fd = ::accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK || errno == ECONNABORTED) continue;
      throw std::runtime_error(who() + ": accept() failed: " + errno_text(errno));
    }
    set_socket_options(fd);
    // Read the hello through a temporary slot so recv_all's timeout and error handling apply;
    // a stranger on the port (or a bad hello) is dropped, not fatal.
    Hello hello{};
    bool ok = true;
    fds[0] = fd;
    // A hello is 16 bytes sent at connect: a few seconds for it, not the whole rendezvous, so a
    // stranger that connects and says nothing (a port scan, a health check) does not hold the
    // peers queued behind it until the deadline.
    const auto saved = options.io_timeout;
    options.io_timeout = std::clamp(std::chrono::duration_cast<milliseconds>(deadline - Clock::now()),
                                    milliseconds(1), milliseconds(5'000));
    try {
      recv_all(0, &hello, sizeof hello, "handshake");
    } catch (const std::runtime_error&) {
      ok = false;
    }
    options.io_timeout = saved;
    fds[0] = -1;
    const bool valid = ok && hello.magic == kMagic && hello.version == kVersion &&
                       hello.world == size && hello.rank >= 1 && hello.rank < size &&
                       fds[static_cast<std::size_t>(hello.rank)] < 0;
    HelloReply reply{kMagic, valid ? 0u : 1u};
    if (ok) (void)::send(fd, &reply, sizeof reply, MSG_NOSIGNAL);  // small: fits the socket buffer
    if (!valid) {
      ::close(fd);
      continue;
    }
    fds[static_cast<std::size_t>(hello.rank)] = fd;
    ++connected;
  }
}

void TcpCommunicator::Impl::connect_to_root(const std::string& addr, int port) {
  const auto deadline = Clock::now() + options.connect_timeout;
  const std::string target = addr + ":" + std::to_string(port);
  std::string last_error = "no attempt made";
  auto backoff = milliseconds(50);
  for (;;) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    const int gai = ::getaddrinfo(addr.c_str(), std::to_string(port).c_str(), &hints, &res);
    if (gai != 0) {
      last_error = std::string("cannot resolve: ") + ::gai_strerror(gai);
    } else {
      for (addrinfo* ai = res; ai && fds[0] < 0; ai = ai->ai_next) {
        const int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0) {
          last_error = "socket(): " + errno_text(errno);
          continue;
        }
        set_socket_options(fd);
        int err = 0;
        if (::connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
          err = errno;
          if (err == EINPROGRESS || err == EINTR) {
            // An unreachable host would otherwise eat the whole budget in one SYN retry cycle.
            const auto attempt = std::min(deadline, Clock::now() + std::chrono::seconds(5));
            if (!wait_for(fd, POLLOUT, attempt)) {
              err = ETIMEDOUT;
            } else {
              socklen_t len = sizeof err;
              ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
            }
          }
        }
        if (err != 0) {
          last_error = errno_text(err);
          ::close(fd);
          continue;
        }
        fds[0] = fd;
        Hello hello{kMagic, kVersion, rank, size};
        HelloReply reply{};
        try {
          send_all(0, &hello, sizeof hello, "handshake");
          recv_all(0, &reply, sizeof reply, "handshake");
        } catch (const std::runtime_error& e) {
          last_error = e.what();
          ::close(fd);
          fds[0] = -1;
          continue;
        }
        if (reply.magic != kMagic || reply.status != 0) {
          close_all();
          throw std::runtime_error(who() + ": rank 0 at " + target + " refused rank " +
                                   std::to_string(rank) + " of " + std::to_string(size) +
                                   " (duplicate rank, different world size, or not an azr job)");
        }
      }
      ::freeaddrinfo(res);
      if (fds[0] >= 0) return;
    }
    if (Clock::now() + backoff >= deadline)
      throw std::runtime_error(who() + ": could not connect to rank 0 at " + target +
                               " (MASTER_ADDR:MASTER_PORT) within " +
                               std::to_string(options.connect_timeout.count()) +
                               " ms; last error: " + last_error);
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, milliseconds(1000));
  }
}

TcpCommunicator::TcpCommunicator(const LaunchInfo& launch, TcpOptions options)
    : impl_(std::make_unique<Impl>()) {
  if (launch.world_size < 1 || launch.rank < 0 || launch.rank >= launch.world_size)
    throw std::runtime_error("tcp: invalid launch: rank " + std::to_string(launch.rank) + " of " +
                             std::to_string(launch.world_size));
  impl_->rank = rank_ = launch.rank;
  impl_->size = size_ = launch.world_size;
  impl_->options = options;
  impl_->options.chunk_elems = std::max<std::size_t>(1, options.chunk_elems);
  impl_->fds.assign(static_cast<std::size_t>(size_), -1);
  if (size_ == 1) return;
  if (launch.master_port < 1 || launch.master_port > 65535)
    throw std::runtime_error("tcp: MASTER_PORT is not set or invalid (" +
                             std::to_string(launch.master_port) + ")");
  if (rank_ == 0) {
    impl_->listen_and_accept(launch.master_port);
  } else {
    if (launch.master_addr.empty()) throw std::runtime_error("tcp: MASTER_ADDR is not set");
    impl_->connect_to_root(launch.master_addr, launch.master_port);
  }
}

TcpCommunicator::~TcpCommunicator() = default;

template <typename T>
void TcpCommunicator::allreduce_impl(std::span<T> data, std::uint32_t dtype) {
  if (size_ == 1) return;
  Impl& d = *impl_;
  d.guarded([&] {
    const Header mine{kAllreduce, dtype, data.size()};
    const std::string what = describe(mine);
    const std::size_t chunk = d.options.chunk_elems;
    if (rank_ == 0) {
      d.gather_headers(mine);
      const std::size_t scratch_elems = std::min(chunk, data.size());
      d.scratch.resize((scratch_elems * sizeof(T) + sizeof(double) - 1) / sizeof(double));
      T* tmp = reinterpret_cast<T*>(d.scratch.data());
      for (std::size_t off = 0; off < data.size(); off += chunk) {
        const std::size_t n = std::min(chunk, data.size() - off);
        T* acc = data.data() + off;
        // acc starts as rank 0's values; adding rank 1, 2, ... in turn gives every element the
        // left fold ((x0 + x1) + x2) + ...
        for (int r = 1; r < size_; ++r) {
          d.recv_all(r, tmp, n * sizeof(T), what);
          for (std::size_t i = 0; i < n; ++i) acc[i] = acc[i] + tmp[i];
        }
        for (int r = 1; r < size_; ++r) d.send_all(r, acc, n * sizeof(T), what);
      }
    } else {
      d.send_all(0, &mine, sizeof mine, what);
      for (std::size_t off = 0; off < data.size(); off += chunk) {
        const std::size_t n = std::min(chunk, data.size() - off);
        d.send_all(0, data.data() + off, n * sizeof(T), what);
        d.recv_all(0, data.data() + off, n * sizeof(T), what);
      }
    }
  });
}

void TcpCommunicator::allreduce_sum(std::span<float> data) { allreduce_impl(data, kFloat); }
void TcpCommunicator::allreduce_sum(std::span<double> data) { allreduce_impl(data, kDouble); }

// A buffer sized to what a peer announced: an allocation that fails says which rank announced how
// many bytes in which collective, where a bare std::bad_alloc was taken for the command's own flags.
template <class Bytes>
static void resize_for_peer(const std::string& who, Bytes& b, std::uint64_t count, int peer, const std::string& what) {
  try {
    b.resize(count);
  } catch (const std::exception&) {  // std::bad_alloc, or std::length_error past max_size()
    throw std::runtime_error(who + ": rank " + std::to_string(peer) + " announced " + std::to_string(count) +
                             " bytes in " + what + ", more than this process can hold");
  }
}

void TcpCommunicator::broadcast(std::string& bytes, int root) {
  if (root < 0 || root >= size_)
    throw std::invalid_argument("tcp: broadcast root " + std::to_string(root) + " is outside [0, " +
                                std::to_string(size_) + ")");
  if (size_ == 1) return;
  Impl& d = *impl_;
  d.guarded([&] {
    const Header mine{kBroadcast, static_cast<std::uint32_t>(root),
                      rank_ == root ? bytes.size() : 0};
    const std::string what = describe(mine);
    if (rank_ == 0) {
      const auto headers = d.gather_headers(mine);
      if (root != 0) {
        resize_for_peer(d.who(), bytes, headers[static_cast<std::size_t>(root)].count, root, what);
        d.recv_all(root, bytes.data(), bytes.size(), what);
      }
      const Header out{kBroadcast, static_cast<std::uint32_t>(root), bytes.size()};
      for (int r = 1; r < size_; ++r) {
        if (r == root) continue;
        d.send_all(r, &out, sizeof out, what);
        d.send_all(r, bytes.data(), bytes.size(), what);
      }
    } else {
      d.send_all(0, &mine, sizeof mine, what);
      if (rank_ == root) {
        d.send_all(0, bytes.data(), bytes.size(), what);
        return;
      }
      Header in{};
      d.recv_all(0, &in, sizeof in, what);
      if (in.op != kBroadcast || in.arg != mine.arg)
        throw std::runtime_error(d.who() + ": protocol error in " + what + ": got " + describe(in));
      resize_for_peer(d.who(), bytes, in.count, 0, what);
      d.recv_all(0, bytes.data(), bytes.size(), what);
    }
  });
}

std::vector<std::string> TcpCommunicator::allgather(const std::string& bytes) {
  if (size_ == 1) return {bytes};
  Impl& d = *impl_;
  std::vector<std::string> out(static_cast<std::size_t>(size_));
  d.guarded([&] {
    const Header mine{kAllgather, 0, bytes.size()};
    const std::string what = describe(mine);
    std::vector<std::uint64_t> lens(static_cast<std::size_t>(size_));
    if (rank_ == 0) {
      out[0] = bytes;
      lens[0] = bytes.size();
      const auto headers = d.gather_headers(mine);
      for (int r = 1; r < size_; ++r) {
        auto& s = out[static_cast<std::size_t>(r)];
        resize_for_peer(d.who(), s, headers[static_cast<std::size_t>(r)].count, r, what);
        lens[static_cast<std::size_t>(r)] = s.size();
        d.recv_all(r, s.data(), s.size(), what);
      }
      for (int r = 1; r < size_; ++r) {
        d.send_all(r, lens.data(), lens.size() * sizeof(std::uint64_t), what);
        for (const auto& s : out) d.send_all(r, s.data(), s.size(), what);
      }
    } else {
      d.send_all(0, &mine, sizeof mine, what);
      d.send_all(0, bytes.data(), bytes.size(), what);
      d.recv_all(0, lens.data(), lens.size() * sizeof(std::uint64_t), what);
      for (int r = 0; r < size_; ++r) {
        auto& s = out[static_cast<std::size_t>(r)];
        resize_for_peer(d.who(), s, lens[static_cast<std::size_t>(r)], 0, what);
        d.recv_all(0, s.data(), s.size(), what);
      }
    }
  });
  return out;
}

void TcpCommunicator::barrier() {
  if (size_ == 1) return;
  Impl& d = *impl_;
  d.guarded([&] {
    const Header mine{kBarrier, 0, 0};
    const std::string what = describe(mine);
    if (rank_ == 0) {
      d.gather_headers(mine);
      for (int r = 1; r < size_; ++r) d.send_all(r, &mine, sizeof mine, what);
    } else {
      d.send_all(0, &mine, sizeof mine, what);
      Header ack{};
      d.recv_all(0, &ack, sizeof ack, what);
      if (ack.op != kBarrier)
        throw std::runtime_error(d.who() + ": protocol error in barrier: got " + describe(ack));
    }
  });
}

}  // namespace azr::trainer::dist
