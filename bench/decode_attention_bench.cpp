// The CPU decode attention (kernels/cpu/attention_decode.h: per row and kv head, the GQA group's
// scores and outputs as two sgemm calls) against the kernel it replaced, kept here as the
// baseline: per row and query head, a dot product per cached position in 8 scalar lanes, then the
// weighted sum of the values, with every head of a group reading the group's keys and values
// again. Same inputs, same threads, alternating, in one process; the largest difference between
// the two outputs is printed as a check. Shapes: azr-tiny, azr-25m, Qwen2.5-0.5B and 1.5B heads.
// Never asserts on time.
//
//   decode_attention_bench [--rows 24] [--context 512] [--repeats 5] [--threads 0]
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "kernels/cpu/fast_exp.h"
#include "kernels/ops.h"

namespace {

using azr::kernels::AttentionShape;

// The previous kernel (azr until 2026-11-25), verbatim in its arithmetic.
float dot8(const float* a, const float* b, int64_t n) {
  float acc[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int u = 0; u < 8; u++) acc[u] += a[i + u] * b[i + u];
  float r = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
  for (; i < n; i++) r += a[i] * b[i];
  return r;
}

void per_head_decode(float* out, const float* q, const float* kcache, const float* vcache, const int32_t* slot,
                     const int32_t* pos, int64_t R, const AttentionShape& s) {
  const int64_t H = s.heads, d = s.d, group = s.heads / s.kv_heads, kv_row = s.kv_heads * d;
  const float scale = 1.f / std::sqrt(float(d));
  const int64_t longest = int64_t(*std::max_element(pos, pos + R)) + 1;
  // cpu_ops.cpp passed 16 x its 64k-element threshold, as it does to the new kernel.
#pragma omp parallel if (R * H * d * longest >= 16 * (1 << 16))
  {
    static thread_local std::vector<float> buf;
#pragma omp for schedule(dynamic, 1) collapse(2)
    for (int64_t r = 0; r < R; r++) {
      for (int64_t h = 0; h < H; h++) {
        const int64_t n = int64_t(pos[r]) + 1;
        const float* qh = q + (r * H + h) * d;
        const float* kb = kcache + int64_t(slot[r]) * s.kv_seq_stride + (h / group) * d;
        const float* vb = vcache + int64_t(slot[r]) * s.kv_seq_stride + (h / group) * d;
        if (buf.size() < size_t(n)) buf.resize(size_t(n));
        float* sc = buf.data();
        float mx = -INFINITY;
        for (int64_t j = 0; j < n; j++) {
          sc[j] = dot8(qh, kb + j * kv_row, d) * scale;
          mx = std::max(mx, sc[j]);
        }
        const float sum = azr::kernels::cpu_detail::exp_shifted_sum(sc, n, mx);
        float* o = out + (r * H + h) * d;
        std::memset(o, 0, sizeof(float) * size_t(d));
        const float inv = 1.f / sum;
        for (int64_t j = 0; j < n; j++) {
          const float p = sc[j] * inv;
          const float* vj = vb + j * kv_row;
          for (int64_t i = 0; i < d; i++) o[i] += p * vj[i];
        }
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  using namespace azr;
  int64_t rows = 24, context = 512;
  int repeats = 5, threads = 0;
  CLI::App app{"The CPU decode attention against the per-head kernel it replaced"};
  app.add_option("--rows", rows, "rows, each in its own cache slot")->capture_default_str()->check(CLI::Range(1, 1 << 24));
  app.add_option("--context", context, "cached positions each row attends to")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 24));
  app.add_option("--repeats", repeats, "timed repeats (median)")->capture_default_str()->check(CLI::Range(1, 1 << 24));
  app.add_option("--threads", threads, "threads; 0 = all cores")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  kernels::set_cpu_threads(threads);
  struct Shape {
    const char* name;
    int64_t heads, kv_heads, d;
  };
  const Shape shapes[] = {{"azr-tiny", 4, 2, 32}, {"azr-25m", 8, 4, 64}, {"qwen2.5-0.5b", 14, 2, 64},
                          {"qwen2.5-1.5b", 12, 2, 128}};
  std::printf("decode_attention_bench: %lld rows, each at position %lld (its own cache slot), %d threads, median of %d\n",
              (long long)rows, (long long)context - 1, kernels::cpu_threads(), repeats);
  std::printf("  %-14s %10s %14s %14s %9s %12s\n", "heads", "q/kv x d", "per head, us", "per group, us", "speed-up",
              "max |diff|");
  nlohmann::json results = nlohmann::json::array();
  for (const Shape& sh : shapes) {
    const int64_t kv_row = sh.kv_heads * sh.d, stride = context * kv_row;
    std::mt19937 rng(3);
    std::normal_distribution<float> normal(0.f, 1.f);
    std::vector<float> q(size_t(rows * sh.heads * sh.d)), kc(size_t(rows * stride)), vc(kc.size());
    for (float& x : q) x = normal(rng);
    for (float& x : kc) x = normal(rng);
    for (float& x : vc) x = normal(rng);
    std::vector<int32_t> slot(static_cast<size_t>(rows)), pos(static_cast<size_t>(rows), int32_t(context - 1));
    for (int64_t r = 0; r < rows; r++) slot[size_t(r)] = int32_t(r);
    const AttentionShape s{0, 0, sh.heads, sh.kv_heads, sh.d, stride, nullptr};
    std::vector<float> base(q.size()), now(q.size());
    const int calls = int(std::max<int64_t>(1, 2000000 / (rows * sh.heads * sh.d * context / 64)));
    std::vector<double> t_base, t_now;
    for (int r = 0; r < repeats + 1; r++) {  // the first of each is a warm-up
      auto t0 = bench::Clock::now();
      for (int c = 0; c < calls; c++) per_head_decode(base.data(), q.data(), kc.data(), vc.data(), slot.data(), pos.data(), rows, s);
      if (r > 0) t_base.push_back(bench::secs_since(t0) / calls);
      t0 = bench::Clock::now();
      for (int c = 0; c < calls; c++)
        kernels::cpu_ops().attention_decode(now.data(), q.data(), kc.data(), vc.data(), slot.data(), pos.data(), rows, s);
      if (r > 0) t_now.push_back(bench::secs_since(t0) / calls);
    }
    double diff = 0;
    for (size_t i = 0; i < now.size(); i++) diff = std::max(diff, double(std::fabs(now[i] - base[i])));
    const double b = bench::median(t_base) * 1e6, n = bench::median(t_now) * 1e6;
    std::printf("  %-14s %4lld/%lld x %-4lld %14.1f %14.1f %8.2fx %12.2e\n", sh.name, (long long)sh.heads,
                (long long)sh.kv_heads, (long long)sh.d, b, n, b / n, diff);
    results.push_back({{"shape", sh.name}, {"heads", sh.heads}, {"kv_heads", sh.kv_heads}, {"d", sh.d},
                       {"per_head_us", b}, {"per_group_us", n}, {"speedup", b / n}, {"max_abs_diff", diff}});
  }
  const nlohmann::json out = {{"bench", "decode_attention"}, {"rows", rows}, {"context", context},
                              {"threads", kernels::cpu_threads()}, {"results", results}};
  std::printf("%s\n", out.dump().c_str());
  return 0;
}
