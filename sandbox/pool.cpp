#include "sandbox/pool.h"

#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <optional>
#include <random>
#include <stdexcept>
#include <thread>
#include <unordered_map>

#include "sandbox/framing.h"
#include "sandbox/spawn.h"

namespace azr::sandbox {
namespace {

using Clock = std::chrono::steady_clock;

// Extra time a zygote gets beyond a job's own wall-clock limit before the supervisor decides
// the zygote itself is stuck and replaces it.
constexpr double kBackstopGraceSeconds = 5.0;
// A job whose worker died under it twice is reported, not retried again.
constexpr int kMaxRequeues = 1;
// A worker that could not be started again is retried after 0.5 s, then twice as long after each
// failure, up to a minute: a fork refused under memory pressure passes, a missing executable
// does not, and neither should cost a start-up's work every loop.
constexpr double kFirstRetrySeconds = 0.5;
constexpr double kLongestRetrySeconds = 60.0;

struct Entry {
  Job job;
  uint64_t nonce[2];
  int requeues = 0;
};

struct Worker {
  int index = 0;
  SeedClass seed = SeedClass::Primary;
  SpawnedZygote z;
  std::deque<uint64_t> inflight;  // front is running, the rest wait in the zygote's socket
  Clock::time_point front_since;
  std::string outbox;  // bytes not yet written to the socket
  MessageBuffer inbox;
  int restarts = 0;
  bool alive = false;
  bool starting = false;         // a replacement is being started on the spawner thread
  int failed_starts = 0;         // in a row; while > 0 the worker is down and retried at retry_at
  Clock::time_point retry_at;
};

// What the spawner thread hands the I/O thread: the zygote it started, or why it could not.
struct Started {
  int index = 0;
  std::optional<SpawnedZygote> zygote;
  std::string error;
};

// epoll user data: the worker's generation (its restarts) in the high 32 bits, then its index * 2
// (+1 for its pidfd); the wake-up eventfd is ~0. The generation matters because one epoll_wait
// can return both the socket's hang-up and the pidfd of a dying worker: the first replaces it,
// and the second, read as the replacement's, would replace a healthy worker too.
constexpr uint64_t kWakeTag = ~0ull;

uint64_t epoll_tag(const Worker& w, bool pidfd) {
  return (uint64_t(uint32_t(w.restarts)) << 32) | (uint64_t(uint32_t(w.index)) << 1) | (pidfd ? 1u : 0u);
}
int tag_index(uint64_t tag) { return int(uint32_t(tag) >> 1); }
bool tag_is_pidfd(uint64_t tag) { return (tag & 1u) != 0; }
bool tag_is_current(uint64_t tag, const Worker& w) { return uint32_t(tag >> 32) == uint32_t(w.restarts); }

}  // namespace

struct Pool::Impl {
  PoolOptions opts;
  std::vector<Worker> workers;
  int epfd = -1;
  int wakefd = -1;
  std::thread io;

  mutable std::mutex mu;
  std::condition_variable cv;
  bool stopping = false;
  uint64_t next_id = 1;
  std::unordered_map<uint64_t, Entry> entries;     // submitted, not yet completed
  std::deque<uint64_t> pending[2];                 // per seed class, not yet handed out
  std::unordered_map<uint64_t, JobResult> done;    // completed, not yet collected
  std::deque<uint64_t> done_order;
  PoolStats stats;
  std::vector<WorkerInfo> info;  // snapshot for workers(), refreshed whenever one (re)starts
  // The spawner thread: replacements are started there, in turn. One thread that lives as long
  // as the pool, because a zygote's PR_SET_PDEATHSIG fires when the thread that started it ends.
  std::thread spawner;
  std::mutex started_mu;
  std::condition_variable spawn_cv;
  bool spawner_stopping = false;
  std::deque<std::pair<int, ZygoteSpec>> to_spawn;  // (worker index, its spec)
  std::vector<Started> started;  // replacements started, not yet taken in by the I/O thread
  std::mt19937_64 rng{std::random_device{}()};

  // ---- worker lifecycle (I/O thread, or the constructor before it starts) --------------

  ZygoteSpec spec_for(SeedClass seed) const {
    ZygoteSpec s;
    s.path = opts.zygote_path.empty() ? default_zygote_path() : opts.zygote_path;
    s.hash_seed = opts.hash_seed + (seed == SeedClass::Alternate ? 1 : 0);
    s.preimports = opts.preimports;
    s.use_namespaces = opts.use_namespaces;
    return s;
  }

  void start_worker(Worker& w) { install(w, spawn_zygote(spec_for(w.seed))); }

  void install(Worker& w, SpawnedZygote z) {
    w.z = std::move(z);
    w.alive = true;
    w.inflight.clear();
    w.outbox.clear();
    w.inbox = MessageBuffer();
    for (const auto& msg : w.z.warnings) spdlog::warn("sandbox worker {}: {}", w.index, msg);
    publish_info(w);
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.u64 = epoll_tag(w, false);
    epoll_ctl(epfd, EPOLL_CTL_ADD, w.z.socket, &ev);
    if (w.z.pidfd >= 0) {
      ev.events = EPOLLIN;
      ev.data.u64 = epoll_tag(w, true);
      epoll_ctl(epfd, EPOLL_CTL_ADD, w.z.pidfd, &ev);
    }
  }

  void publish_info(const Worker& w) {
    WorkerInfo i;
    i.index = w.index;
    i.seed = w.seed;
    i.pid = w.z.pid;
    i.namespaces = w.z.namespaces;
    i.warnings = w.z.warnings;
    i.python_version = w.z.hello.python_version;
    i.preimports = w.z.hello.preimports;
    i.bpf_instructions = w.z.hello.bpf_instructions;
    i.filesystem_hidden = w.z.hello.filesystem_hidden;
    i.pid_namespace_leader = w.z.hello.pid_in_namespace == 1;
    i.restarts = w.restarts;
    std::lock_guard lk(mu);
    if (info.size() <= static_cast<size_t>(w.index)) info.resize(static_cast<size_t>(w.index) + 1);
    info[static_cast<size_t>(w.index)] = std::move(i);
  }

  void stop_worker(Worker& w) {
    if (!w.alive) return;
    w.alive = false;
    epoll_ctl(epfd, EPOLL_CTL_DEL, w.z.socket, nullptr);
    if (w.z.pidfd >= 0) epoll_ctl(epfd, EPOLL_CTL_DEL, w.z.pidfd, nullptr);
    close(w.z.socket);  // the zygote exits on EOF; SIGKILL makes sure
    kill(w.z.pid, SIGKILL);
    int status = 0;
    waitpid(w.z.pid, &status, 0);
    if (w.z.pidfd >= 0) close(w.z.pidfd);
    std::lock_guard lk(mu);  // workers() says it is gone: the pid may be another process's soon
    if (static_cast<size_t>(w.index) < info.size()) info[static_cast<size_t>(w.index)].pid = -1;
  }

  // The zygote died or hung: report the job it was running, re-queue the ones behind it,
  // start a replacement.
  void replace_worker(Worker& w, const std::string& why) {
    spdlog::warn("sandbox worker {} (pid {}) lost: {}; replacing it", w.index, w.z.pid, why);
    std::deque<uint64_t> lost = std::move(w.inflight);
    stop_worker(w);
    {
      std::lock_guard lk(mu);
      for (size_t i = 0; i < lost.size(); ++i) {
        auto it = entries.find(lost[i]);
        if (it == entries.end()) continue;
        if (i > 0 && it->second.requeues < kMaxRequeues) {
          ++it->second.requeues;
          ++stats.requeued;
          pending[static_cast<int>(w.seed)].push_front(lost[i]);
          continue;
        }
        complete_locked(internal_result(lost[i], w.index, it->second.job, "WorkerLost",
                                        "the sandbox worker running this job was lost: " + why));
      }
      ++stats.worker_restarts;
    }
    ++w.restarts;
    begin_start(w);
  }

  // Starts a replacement on the spawner thread: a zygote takes a while to start (Python, the
  // preimports), and one that hangs takes the hello timeout (30 s), during which the I/O thread
  // must go on serving the other workers. take_started() takes the result in.
  void begin_start(Worker& w) {
    w.starting = true;
    ZygoteSpec spec = spec_for(w.seed);
    {
      std::lock_guard lk(started_mu);
      to_spawn.emplace_back(w.index, std::move(spec));
    }
    spawn_cv.notify_one();
  }

  // Ends the spawner thread (after the start it is in, if any), or nothing if it never started.
  void stop_spawner() {
    {
      std::lock_guard lk(started_mu);
      spawner_stopping = true;
    }
    spawn_cv.notify_one();
    if (spawner.joinable()) spawner.join();
  }

  void spawn_loop() {
    std::unique_lock lk(started_mu);
    for (;;) {
      spawn_cv.wait(lk, [&] { return spawner_stopping || !to_spawn.empty(); });
      if (spawner_stopping) return;
      auto [index, spec] = std::move(to_spawn.front());
      to_spawn.pop_front();
      lk.unlock();
      Started s;
      s.index = index;
      try {
        s.zygote = spawn_zygote(spec);
      } catch (const std::exception& e) {
        s.error = e.what();
      }
      lk.lock();
      started.push_back(std::move(s));
      wake();
    }
  }

  // The replacements started since the last call: each installed, or on failure its next try
  // scheduled and the jobs of its kind failed if no worker of that kind is left (they would wait
  // for ever).
  void take_started() {
    std::vector<Started> done;
    {
      std::lock_guard lk(started_mu);
      done.swap(started);
    }
    for (Started& s : done) {
      Worker& w = workers[static_cast<size_t>(s.index)];
      w.starting = false;
      if (s.zygote) {
        install(w, std::move(*s.zygote));
        if (w.failed_starts > 0)
          spdlog::info("sandbox worker {} started after {} failed start(s)", w.index, w.failed_starts);
        w.failed_starts = 0;
        continue;
      }
      const double wait = std::min(kLongestRetrySeconds, kFirstRetrySeconds * std::pow(2.0, w.failed_starts));
      ++w.failed_starts;
      w.retry_at = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(wait));
      spdlog::error("sandbox worker {} could not be started: {}; trying again in {} s", w.index, s.error, wait);
      {
        std::lock_guard lk(mu);
        ++stats.failed_starts;
      }
      fail_if_no_workers(static_cast<int>(w.seed));
    }
  }

  void retry_down_workers() {
    const auto now = Clock::now();
    for (auto& w : workers)
      if (!w.alive && !w.starting && w.failed_starts > 0 && now >= w.retry_at) begin_start(w);
  }

  // A worker being started counts: its kind's jobs wait for it, as they waited for a replacement
  // started in line.
  bool has_worker(int cls) const {
    for (const auto& w : workers)
      if ((w.alive || w.starting) && static_cast<int>(w.seed) == cls) return true;
    return false;
  }

  // Jobs of a kind no running worker has: internal_error now, not queued until one starts.
  void fail_if_no_workers(int cls) {
    if (has_worker(cls)) return;
    std::lock_guard lk(mu);
    auto& q = pending[cls];
    while (!q.empty()) {
      uint64_t id = q.front();
      q.pop_front();
      auto it = entries.find(id);
      if (it == entries.end()) continue;
      complete_locked(internal_result(id, -1, it->second.job, "NoWorkers", "no sandbox worker of this kind is running"));
    }
  }

  // A job the sandbox could not run: every call is internal_error, never the program's fault.
  static JobResult internal_result(uint64_t id, int worker, const Job& job, const char* type, std::string message) {
    JobResult r;
    r.id = id;
    r.worker = worker;
    CallResult c;
    c.status = Status::Internal;
    c.error_type = type;
    c.message = std::move(message);
    r.calls.assign(job.inputs.size(), c);
    return r;
  }

  void complete_locked(JobResult r) {
    entries.erase(r.id);
    uint64_t id = r.id;
    done.emplace(id, std::move(r));
    done_order.push_back(id);
    ++stats.completed;
    cv.notify_all();
  }

  // ---- I/O thread --------------------------------------------------------------------------

  void dispatch() {
    for (int cls = 0; cls < 2; ++cls) fail_if_no_workers(cls);
    std::lock_guard lk(mu);
    for (int cls = 0; cls < 2; ++cls) {
      auto& q = pending[cls];
      while (!q.empty()) {
        Worker* best = nullptr;
        for (auto& w : workers)
          if (w.alive && static_cast<int>(w.seed) == cls && static_cast<int>(w.inflight.size()) < opts.queue_depth &&
              (!best || w.inflight.size() < best->inflight.size()))
            best = &w;
        if (!best) break;
        uint64_t id = q.front();
        q.pop_front();
        auto it = entries.find(id);
        if (it == entries.end()) continue;
        protocol::Request req;
        req.job_id = id;
        req.op = it->second.job.op;
        req.input_mode = it->second.job.input_mode;
        req.program = it->second.job.program;
        req.entry = it->second.job.entry;
        req.module_name = it->second.job.module_name;
        req.inputs = it->second.job.inputs;
        req.limits = it->second.job.limits;
        req.nonce[0] = it->second.nonce[0];
        req.nonce[1] = it->second.nonce[1];
        std::string payload = protocol::encode(req);
        uint32_t n = static_cast<uint32_t>(payload.size());
        best->outbox.append(reinterpret_cast<const char*>(&n), 4);
        best->outbox += payload;
        if (best->inflight.empty()) best->front_since = Clock::now();
        best->inflight.push_back(id);
        flush(*best);
      }
    }
  }

  void flush(Worker& w) {
    while (!w.outbox.empty()) {
      ssize_t n = write(w.z.socket, w.outbox.data(), w.outbox.size());
      if (n > 0) {
        w.outbox.erase(0, static_cast<size_t>(n));
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      break;
    }
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP | (w.outbox.empty() ? 0u : static_cast<uint32_t>(EPOLLOUT));
    ev.data.u64 = epoll_tag(w, false);
    epoll_ctl(epfd, EPOLL_CTL_MOD, w.z.socket, &ev);
  }

  // Returns false if the socket reached EOF or failed.
  bool read_socket(Worker& w) {
    char buf[65536];
    for (;;) {
      ssize_t n = read(w.z.socket, buf, sizeof buf);
      if (n > 0) {
        w.inbox.append(buf, static_cast<size_t>(n));
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
      return false;
    }
  }

  // Returns false if the worker broke the protocol.
  bool handle_messages(Worker& w) {
    std::string_view payload;
    try {
      while (w.inbox.front(payload)) {
        protocol::Response resp = protocol::decode_response(payload);
        w.inbox.consume();
        if (w.inflight.empty() || w.inflight.front() != resp.job_id) return false;
        w.inflight.pop_front();
        w.front_since = Clock::now();
        std::lock_guard lk(mu);
        auto it = entries.find(resp.job_id);
        if (it == entries.end()) continue;
        JobResult r = interpret(it->second.job, resp, it->second.nonce);
        r.worker = w.index;
        complete_locked(std::move(r));
      }
    } catch (const std::exception& e) {
      spdlog::error("sandbox worker {}: bad message: {}", w.index, e.what());
      return false;
    }
    return true;
  }

  void check_backstops() {
    auto now = Clock::now();
    for (auto& w : workers) {
      if (!w.alive || w.inflight.empty()) continue;
      double limit;
      {
        std::lock_guard lk(mu);
        auto it = entries.find(w.inflight.front());
        limit = it == entries.end() ? 0 : it->second.job.limits.effective_wall_seconds();
      }
      if (std::chrono::duration<double>(now - w.front_since).count() > limit + kBackstopGraceSeconds)
        replace_worker(w, "no answer within the job's wall-clock limit plus " +
                              std::to_string(static_cast<int>(kBackstopGraceSeconds)) + " s");
    }
  }

  void loop() {
    epoll_event events[64];
    for (;;) {
      {
        std::lock_guard lk(mu);
        if (stopping) return;
      }
      int n = epoll_wait(epfd, events, 64, 250);
      for (int i = 0; i < n; ++i) {
        uint64_t tag = events[i].data.u64;
        if (tag == kWakeTag) {
          uint64_t v;
          [[maybe_unused]] ssize_t r = read(wakefd, &v, sizeof v);
          continue;
        }
        Worker& w = workers[static_cast<size_t>(tag_index(tag))];
        if (!w.alive || !tag_is_current(tag, w)) continue;  // from the worker this one replaced
        if (tag_is_pidfd(tag)) {  // the zygote exited. Take what it sent before it died.
          read_socket(w);
          handle_messages(w);
          replace_worker(w, "the worker process exited");
          continue;
        }
        if (events[i].events & EPOLLOUT) flush(w);
        if (events[i].events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
          bool open = read_socket(w);
          bool ok = handle_messages(w);
          if (!ok) replace_worker(w, "protocol error");
          else if (!open) replace_worker(w, "the worker closed its socket");
        }
      }
      take_started();
      check_backstops();
      retry_down_workers();
      dispatch();
    }
  }

  void wake() {
    uint64_t one = 1;
    [[maybe_unused]] ssize_t r = write(wakefd, &one, sizeof one);
  }
};

Pool::Pool(PoolOptions options) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.opts = std::move(options);
  if (m.opts.workers <= 0) m.opts.workers = std::max(1u, std::thread::hardware_concurrency());
  if (m.opts.alternate_workers < 0) m.opts.alternate_workers = std::max(1, m.opts.workers / 2);
  if (m.opts.queue_depth < 1) m.opts.queue_depth = 1;
  m.epfd = epoll_create1(EPOLL_CLOEXEC);
  m.wakefd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (m.epfd < 0 || m.wakefd < 0) throw std::runtime_error(std::string("epoll/eventfd: ") + strerror(errno));
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kWakeTag;
  epoll_ctl(m.epfd, EPOLL_CTL_ADD, m.wakefd, &ev);

  int total = m.opts.workers + m.opts.alternate_workers;
  m.workers.resize(static_cast<size_t>(total));
  for (int i = 0; i < total; ++i) {
    m.workers[i].index = i;
    m.workers[i].seed = i < m.opts.workers ? SeedClass::Primary : SeedClass::Alternate;
  }
  try {
    for (auto& w : m.workers) m.start_worker(w);
  } catch (...) {
    for (auto& w : m.workers) m.stop_worker(w);
    close(m.epfd);
    close(m.wakefd);
    throw;
  }
  try {
    m.spawner = std::thread([&m] { m.spawn_loop(); });
    m.io = std::thread([&m] { m.loop(); });
  } catch (...) {  // no thread to be had (RLIMIT_NPROC): nothing left running or open
    m.stop_spawner();
    for (auto& w : m.workers) m.stop_worker(w);
    close(m.epfd);
    close(m.wakefd);
    throw;
  }
}

Pool::~Pool() {
  Impl& m = *impl_;
  {
    std::lock_guard lk(m.mu);
    m.stopping = true;
  }
  m.wake();
  if (m.io.joinable()) m.io.join();
  // A replacement still starting finishes first (a hanging one within its hello timeout); those
  // that started are stopped with the rest.
  m.stop_spawner();
  for (Started& s : m.started)
    if (s.zygote) {
      Worker& w = m.workers[static_cast<size_t>(s.index)];
      w.z = std::move(*s.zygote);
      w.alive = true;
    }
  for (auto& w : m.workers) m.stop_worker(w);
  close(m.epfd);
  close(m.wakefd);
}

uint64_t Pool::submit(Job job) {
  Impl& m = *impl_;
  uint64_t id;
  {
    std::lock_guard lk(m.mu);
    if (job.seed == SeedClass::Alternate && m.opts.alternate_workers == 0)
      throw std::logic_error("this pool has no alternate workers for determinism runs");
    id = m.next_id++;
    ++m.stats.submitted;
    if (m.opts.inject_fault && m.opts.inject_fault(job)) {
      m.complete_locked(Impl::internal_result(id, -1, job, "InjectedFault", "fault injected by a test"));
      return id;
    }
    Entry e;
    e.job = std::move(job);
    e.nonce[0] = m.rng();
    e.nonce[1] = m.rng();
    int cls = static_cast<int>(e.job.seed);
    m.entries.emplace(id, std::move(e));
    m.pending[cls].push_back(id);
  }
  m.wake();
  return id;
}

JobResult Pool::wait_any() {
  Impl& m = *impl_;
  std::unique_lock lk(m.mu);
  for (;;) {
    while (!m.done_order.empty()) {
      uint64_t id = m.done_order.front();
      m.done_order.pop_front();
      auto it = m.done.find(id);
      if (it == m.done.end()) continue;  // already taken by wait(id)
      JobResult r = std::move(it->second);
      m.done.erase(it);
      return r;
    }
    if (m.entries.empty()) throw std::logic_error("Pool::wait_any: no job outstanding");
    m.cv.wait(lk);
  }
}

JobResult Pool::wait(uint64_t id) {
  Impl& m = *impl_;
  std::unique_lock lk(m.mu);
  for (;;) {
    auto it = m.done.find(id);
    if (it != m.done.end()) {
      JobResult r = std::move(it->second);
      m.done.erase(it);
      return r;
    }
    if (!m.entries.count(id)) throw std::logic_error("Pool::wait: unknown job id");
    m.cv.wait(lk);
  }
}

std::vector<JobResult> Pool::run(std::vector<Job> jobs) {
  std::vector<uint64_t> ids;
  ids.reserve(jobs.size());
  for (auto& j : jobs) ids.push_back(submit(std::move(j)));
  std::vector<JobResult> out;
  out.reserve(ids.size());
  for (uint64_t id : ids) out.push_back(wait(id));
  return out;
}

std::vector<WorkerInfo> Pool::workers() const {
  std::lock_guard lk(impl_->mu);
  return impl_->info;
}

PoolStats Pool::stats() const {
  std::lock_guard lk(impl_->mu);
  return impl_->stats;
}

int Pool::primary_workers() const { return impl_->opts.workers; }
int Pool::alternate_workers() const { return impl_->opts.alternate_workers; }

}  // namespace azr::sandbox
