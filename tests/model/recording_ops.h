#pragma once
// A test double of CUDA graphs, for the CPU: the CPU's Bf16 table with an Ops::recorder that
// records each op call with its arguments (copied, as a kernel launch's are) and replays the calls
// in order, reading the buffers as they are at replay time. It enforces what a CUDA recording
// enforces: an upload, download, allocation, free, or an op that returns a value to the host while
// recording throws, and so does a recording begun inside another. The real recorder
// (kernels/cuda/graphs.cu) is tested on a GPU (tests/kernels/cuda_model_test.cpp); this one lets
// the model's side of it (model/decode_graphs.h: what is recorded, when, and when a recording is
// dropped) be tested everywhere.
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <stdexcept>
#include <type_traits>
#include <utility>
#include <vector>

#include "kernels/ops.h"

namespace azr::test {

struct RecordingState {
  bool recording = false;
  std::vector<std::function<void()>>* tape = nullptr;
  uint64_t generation = 0;        // bump to stand for an op's scratch being reallocated
  bool fail_while_recording = false;  // the next op called while recording throws, once
  int64_t live_tapes = 0;         // recordings made and not yet released
};

inline RecordingState& recording_state() {
  static RecordingState s;
  return s;
}

namespace recording_detail {

inline const kernels::Ops& inner() { return kernels::cpu_bf16_matmul_ops(); }

inline void refuse_while_recording(const char* what) {
  if (recording_state().recording) throw std::runtime_error(std::string(what) + " while recording");
}

// The op at member `Field` of the inner table: run, or recorded while recording.
template <auto Field, class Fn>
struct Recorded;
template <auto Field, class R, class... A>
struct Recorded<Field, R (*)(A...)> {
  static R call(A... a) {
    RecordingState& s = recording_state();
    const kernels::Ops* in = &inner();
    if (!s.recording) return (in->*Field)(a...);
    if (s.fail_while_recording) {
      s.fail_while_recording = false;
      throw std::runtime_error("an op failed while recording");
    }
    if constexpr (std::is_void_v<R>) {
      s.tape->push_back([in, a...] { (in->*Field)(a...); });
    } else {
      throw std::runtime_error("an op that returns a value to the host, while recording");
    }
  }
};

inline void* alloc_zeroed(size_t bytes) {
  refuse_while_recording("an allocation");
  return inner().alloc_zeroed(bytes);
}
inline void release(void* p) {
  if (p && recording_state().recording) {  // called from destructors: no exception can carry this
    std::fputs("recording_ops: a free while recording\n", stderr);
    std::abort();
  }
  inner().release(p);
}
inline void upload(void* dst, const void* host, size_t bytes) {
  refuse_while_recording("an upload");
  inner().upload(dst, host, bytes);
}
inline void download(void* host, const void* src, size_t bytes) {
  refuse_while_recording("a download");
  inner().download(host, src, bytes);
}
inline int64_t download_start(void* host, const void* src, size_t bytes) {
  refuse_while_recording("a download");
  return inner().download_start(host, src, bytes);
}
inline void download_wait(int64_t ticket) {
  refuse_while_recording("a download's wait");
  inner().download_wait(ticket);
}

inline void begin() {
  refuse_while_recording("a recording");
  RecordingState& s = recording_state();
  s.tape = new std::vector<std::function<void()>>;
  s.recording = true;
}
inline kernels::OpGraph* end() {
  RecordingState& s = recording_state();
  if (!s.recording) throw std::runtime_error("end() without begin()");
  s.recording = false;
  s.live_tapes++;
  return reinterpret_cast<kernels::OpGraph*>(std::exchange(s.tape, nullptr));
}
inline void abandon() {
  RecordingState& s = recording_state();
  delete s.tape;
  s.tape = nullptr;
  s.recording = false;
}
inline void replay(kernels::OpGraph* g) {
  refuse_while_recording("a replay");
  for (const auto& call : *reinterpret_cast<std::vector<std::function<void()>>*>(g)) call();
}
inline void release_graph(kernels::OpGraph* g) {
  if (!g) return;
  delete reinterpret_cast<std::vector<std::function<void()>>*>(g);
  recording_state().live_tapes--;
}
inline uint64_t generation() { return recording_state().generation; }

}  // namespace recording_detail

// The table: every op of cpu_bf16_matmul_ops() behind the recorder (its null ones stay null).
inline const kernels::Ops& recording_ops() {
  using kernels::Ops;
  using namespace recording_detail;
  static const Ops table = [] {
    Ops t = inner();
    t.name = "cpu+bf16 recording";
#define AZR_RECORDED(f) \
  if (t.f) t.f = &Recorded<&Ops::f, decltype(Ops::f)>::call;
    AZR_OPS_FUNCTIONS(AZR_RECORDED)
    // Memory and transfers are not recorded: they refuse while recording (as under CUDA capture).
    t.alloc_zeroed = recording_detail::alloc_zeroed;
    t.release = recording_detail::release;
    t.upload = recording_detail::upload;
    t.download = recording_detail::download;
    t.download_start = recording_detail::download_start;
    t.download_wait = recording_detail::download_wait;
#undef AZR_RECORDED
    t.recorder = {begin, end, abandon, replay, release_graph, generation};
    return t;
  }();
  return table;
}

}  // namespace azr::test
