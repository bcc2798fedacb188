// The CPU sampler's filtered path (kernels/cpu/sampling.cpp: top-k, top-p), which orders only the
// prefix of candidates the filters can keep, against sorting every candidate
// (tests/kernels/sampling_full_sort.h, what the sampler did until 2026-11-27), on rows of Qwen's
// 151,936-token vocabulary: peaked N(0, 9) logits, which top-p 0.9 cuts to 5,000-7,500 tokens,
// and nearly flat N(0, 0.0025) ones, which it barely cuts. One row at a time on one thread (the
// op runs rows in parallel); both the same rows and uniforms, alternating, in one process; the
// tokens both pick are counted as a check. Never asserts on time.
//
//   sampling_bench [--rows 8] [--repeats 5]
#include <CLI/CLI.hpp>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>
#include <vector>

#include "bench/bench_util.h"
#include "kernels/cpu/sampling.h"
#include "tests/kernels/sampling_full_sort.h"

int main(int argc, char** argv) {
  using namespace azr;
  CLI::App app{"The CPU sampler's top-k and top-p against sorting every candidate"};
  int64_t rows = 8;
  int repeats = 5;
  app.add_option("--rows", rows, "rows of 151,936 logits")->capture_default_str()->check(CLI::Range(1, 1024));
  app.add_option("--repeats", repeats, "timed repeats (median)")->capture_default_str()->check(CLI::Range(1, 1000));
  CLI11_PARSE(app, argc, argv);
  const int64_t V = 151936;
  struct Mode {
    const char* name;
    float scale, temperature;
    int32_t top_k;
    float top_p;
  };
  const Mode modes[] = {{"top_p 0.9", 3.f, 1.f, 0, 0.9f},       {"top_p 0.95, t 0.7", 3.f, 0.7f, 0, 0.95f},
                        {"top_k 50", 3.f, 1.f, 50, 1.f},        {"top_k 40, top_p 0.8", 3.f, 1.f, 40, 0.8f},
                        {"top_p 0.9, flat", 0.05f, 1.f, 0, 0.9f}};
  std::mt19937_64 rng(7);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  std::vector<float> base(size_t(rows * V));
  for (float& x : base) x = normal(rng);
  std::vector<double> u(static_cast<size_t>(rows));
  for (double& x : u) x = uniform(rng);
  std::printf("sampling_bench: %lld rows x %lld logits, one thread, median of %d\n", (long long)rows, (long long)V,
              repeats);
  std::printf("  %-22s %16s %16s %9s %10s\n", "mode", "sort all, ms", "prefix, ms", "speed-up", "same token");
  nlohmann::json results = nlohmann::json::array();
  for (const Mode& m : modes) {
    std::vector<float> logits(base);
    for (float& x : logits) x *= m.scale;
    std::vector<double> t_base, t_now;
    int64_t same = 0;
    for (int r = 0; r < repeats + 1; r++) {  // the first of each is a warm-up
      std::vector<int32_t> want(static_cast<size_t>(rows)), got(static_cast<size_t>(rows));
      float lp = 0;
      auto t0 = bench::Clock::now();
      for (int64_t i = 0; i < rows; i++)
        want[size_t(i)] = kernels::testing::full_sort_sample_row(&logits[size_t(i * V)], V, m.temperature, m.top_k,
                                                                 m.top_p, u[size_t(i)], &lp);
      if (r > 0) t_base.push_back(bench::secs_since(t0) / double(rows));
      t0 = bench::Clock::now();
      for (int64_t i = 0; i < rows; i++)
        got[size_t(i)] =
            kernels::sample_row(&logits[size_t(i * V)], V, m.temperature, m.top_k, m.top_p, u[size_t(i)], &lp);
      if (r > 0) t_now.push_back(bench::secs_since(t0) / double(rows));
      if (r == 0)
        for (int64_t i = 0; i < rows; i++) same += got[size_t(i)] == want[size_t(i)];
    }
    const double b = bench::median(t_base) * 1e3, n = bench::median(t_now) * 1e3;
    std::printf("  %-22s %16.2f %16.2f %8.1fx %6lld/%lld\n", m.name, b, n, b / n, (long long)same, (long long)rows);
    results.push_back({{"mode", m.name}, {"sort_all_ms", b}, {"prefix_ms", n}, {"speedup", b / n},
                       {"same_tokens", same}, {"rows", rows}});
  }
  const nlohmann::json out = {{"bench", "cpu_sampling"}, {"vocab", V}, {"results", results}};
  std::printf("%s\n", out.dump().c_str());
  return 0;
}
