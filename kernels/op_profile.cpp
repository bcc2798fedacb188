// profiled_ops and OpProfile (see op_profile.h).
#include "kernels/op_profile.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <mutex>
#include <stdexcept>
#include <tuple>
#include <type_traits>
#include <utility>

namespace azr::kernels {
namespace {

using Clock = std::chrono::steady_clock;

#define AZR_OP_INDEX(field) k_##field,
enum OpIndex : int { AZR_OPS_FUNCTIONS(AZR_OP_INDEX) kOpCount };
#undef AZR_OP_INDEX
static_assert(kOpCount == kOpsFunctionCount);

#define AZR_OP_NAME(field) #field,
constexpr const char* kOpNames[kOpCount] = {AZR_OPS_FUNCTIONS(AZR_OP_NAME)};
#undef AZR_OP_NAME

// A template instance per (slot, field) is what lets a plain function pointer reach a base table
// chosen at run time: the slot indexes these.
constexpr int kMaxTables = 8;
struct Slot {
  const Ops* base = nullptr;
  void* barrier_word = nullptr;  // 4 bytes of the base's memory, downloaded to wait for the backend
  std::string name;
  Ops table{};
};
std::array<Slot, kMaxTables> g_slots;
std::mutex g_slots_mutex;

std::atomic<bool> g_collecting{false};
std::mutex g_times_mutex;
std::array<int64_t, kOpCount> g_calls{};
std::array<double, kOpCount> g_seconds{}, g_flops{};

// The FLOPs of a call of op Op (op_profile.h says how they are counted), from its arguments.
template <int Op, class... A>
double flops_of(const A&... a) {
  const auto args = std::forward_as_tuple(a...);
  if constexpr (Op == k_matmul_forward || Op == k_matmul_forward_w16 || Op == k_matmul_forward_a16w16) {
    return gemm_flops(std::get<4>(args), std::get<5>(args), std::get<6>(args));
  } else if constexpr (Op == k_matmul_forward_o16) {  // (out16, inp16, w16, N, IC, OC)
    return gemm_flops(std::get<3>(args), std::get<4>(args), std::get<5>(args));
  } else if constexpr (Op == k_matmul_backward || Op == k_matmul_backward_w16 || Op == k_matmul_backward_a16w16) {
    const int products = (std::get<0>(args) != nullptr) + (std::get<1>(args) != nullptr);
    return products * gemm_flops(std::get<6>(args), std::get<7>(args), std::get<8>(args));
  } else if constexpr (Op == k_matmul_backward_g16 || Op == k_matmul_backward_g16_dinp16) {
    // (dinp, dw, dout16, inp16, w16, N, IC, OC, writes)
    const int products = (std::get<0>(args) != nullptr) + (std::get<1>(args) != nullptr);
    return products * gemm_flops(std::get<5>(args), std::get<6>(args), std::get<7>(args));
  } else if constexpr (Op == k_attention_forward) {
    return attention_forward_flops(std::get<5>(args));
  } else if constexpr (Op == k_attention_backward) {
    return attention_backward_flops(std::get<9>(args));
  } else {
    return 0.0;
  }
}

// Waits until the backend has run every op queued so far. A host-memory backend (the CPU) has
// finished an op when the call returns.
void wait_for_backend(const Slot& s) {
  if (s.base->host_memory) return;
  float sink;
  s.base->download(&sink, s.barrier_word, sizeof sink);
}

void add_time(const Slot& s, int op, Clock::time_point start, double flops) {
  wait_for_backend(s);
  const double sec = std::chrono::duration<double>(Clock::now() - start).count();
  std::lock_guard<std::mutex> lock(g_times_mutex);
  g_calls[size_t(op)] += 1;
  g_seconds[size_t(op)] += sec;
  g_flops[size_t(op)] += flops;
}

template <int S, int Op, auto Member, class F>
struct Timed;
template <int S, int Op, auto Member, class R, class... A>
struct Timed<S, Op, Member, R (*)(A...)> {
  static R call(A... args) {
    const Slot& s = g_slots[S];
    if (!g_collecting.load(std::memory_order_relaxed)) return (s.base->*Member)(args...);
    const double flops = flops_of<Op>(args...);
    const Clock::time_point start = Clock::now();
    if constexpr (std::is_void_v<R>) {
      (s.base->*Member)(args...);
      add_time(s, Op, start, flops);
    } else {
      R r = (s.base->*Member)(args...);
      add_time(s, Op, start, flops);
      return r;
    }
  }
};

// alloc_zeroed and release are timed like the rest (a cudaMalloc can cost more than a kernel),
// and stay the base's functions in effect, so memory moves freely between the two tables.
#define AZR_TIME_OP(field) \
  if (t.field) t.field = Timed<S, k_##field, &Ops::field, decltype(Ops::field)>::call;

template <int S>
void build_table(Slot& s) {
  Ops t = *s.base;
  s.name = std::string(s.base->name) + "+profiled";
  t.name = s.name.c_str();
  t.recorder = {};  // a recording cannot wait for the backend; a profiled model runs eagerly
  AZR_OPS_FUNCTIONS(AZR_TIME_OP)
  s.table = t;
}

#undef AZR_TIME_OP

template <int... S>
void build_table_at(int slot, std::integer_sequence<int, S...>) {
  ((slot == S ? build_table<S>(g_slots[size_t(S)]) : void()), ...);
}

}  // namespace

double gemm_flops(int64_t N, int64_t IC, int64_t OC) { return 2.0 * double(N) * double(IC) * double(OC); }

double attention_forward_flops(const AttentionShape& s) {
  const double T = double(s.T);
  return 2.0 * 2.0 * double(s.B) * double(s.heads) * double(s.d) * T * (T + 1) / 2;
}

double attention_backward_flops(const AttentionShape& s) { return 2.5 * attention_forward_flops(s); }

const Ops& profiled_ops(const Ops& base) {
  std::lock_guard<std::mutex> lock(g_slots_mutex);
  for (Slot& s : g_slots)
    if (s.base == &base) return s.table;
  for (int i = 0; i < kMaxTables; i++) {
    Slot& s = g_slots[size_t(i)];
    if (s.base) continue;
    s.barrier_word = base.host_memory ? nullptr : base.alloc_zeroed(sizeof(float));  // lives as long as the process
    s.base = &base;
    build_table_at(i, std::make_integer_sequence<int, kMaxTables>{});
    return s.table;
  }
  throw std::logic_error("profiled_ops: more than 8 distinct op tables profiled in one process");
}

OpProfile::OpProfile() {
  if (g_collecting.exchange(true)) throw std::logic_error("an OpProfile is already collecting in this process");
  {  // ops queued before the start are not the profile's: let them finish
    std::lock_guard<std::mutex> lock(g_slots_mutex);
    for (const Slot& s : g_slots)
      if (s.base) wait_for_backend(s);
  }
  take();
}

OpProfile::~OpProfile() { g_collecting.store(false); }

std::vector<OpTime> OpProfile::take() {
  std::lock_guard<std::mutex> lock(g_times_mutex);
  std::vector<OpTime> out;
  for (int i = 0; i < kOpCount; i++)
    if (g_calls[size_t(i)] > 0)
      out.push_back({kOpNames[i], g_calls[size_t(i)], g_seconds[size_t(i)], g_flops[size_t(i)]});
  std::sort(out.begin(), out.end(), [](const OpTime& a, const OpTime& b) {
    return a.seconds != b.seconds ? a.seconds > b.seconds : a.op < b.op;
  });
  g_calls.fill(0);
  g_seconds.fill(0);
  g_flops.fill(0);
  return out;
}

}  // namespace azr::kernels
