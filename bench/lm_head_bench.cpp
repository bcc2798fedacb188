// The LM head's training cost as planned (model/memory_plan.h, plan_head_tiles: column-block tiles,
// every GEMM of the head over all the rows, the head's weight gradient written once per column
// block; and for backward the logits kept from score() where they fit kHeadKeepFloats) against two
// baselines on the same model, batch and device, alternating, in one process: the same column
// blocks made again in backward (what azr did before it kept them past 256 MiB), and the row-block
// tiles azr used before that (rows of the whole vocabulary, as many as a 16Mi-float tile holds: 110
// rows at 151,936 columns). A one-layer model with the hidden size and vocabulary of a real one, so
// that the head is most of the step: score(for_backward) and backward() are timed apart, and the
// head's buffers (Transformer::head_bytes) reported. Row blocks write the whole V x H fp32 weight
// gradient once per block; a GPU pays that in memory traffic (1.5B: 0.93 GB read and written per
// block), a CPU less. Never asserts on time.
//
//   lm_head_bench [--device cpu] [--matmul-precision fp32] [--hidden 896] [--vocab 151936]
//                 [--batch 2] [--seq 257] [--repeats 3] [--threads 0]
// On a GPU, the 1.5B training shape: --device cuda --matmul-precision bf16 --hidden 1536 --batch 4 --seq 1025
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_device.h"
#include "bench/bench_util.h"
#include "kernels/backend.h"
#include "kernels/ops.h"
#include "model/memory_plan.h"
#include "model/presets.h"
#include "model/transformer.h"

int main(int argc, char** argv) {
  using namespace azr;
  std::string device = "cpu", precision = "fp32";
  int64_t hidden = 896, vocab = 151936, B = 2, T = 257;
  int repeats = 3, threads = 0;
  CLI::App app{"The LM head's planned tiles against made-again logits and row blocks"};
  app.add_option("--device", device)->capture_default_str()->check(CLI::IsMember(kernels::backend_names()));
  app.add_option("--matmul-precision", precision)
      ->capture_default_str()
      ->check(CLI::IsMember(kernels::matmul_precision_names()));
  app.add_option("--hidden", hidden, "hidden size")->capture_default_str()->check(CLI::Range(8, 1 << 16));
  app.add_option("--vocab", vocab, "vocabulary")->capture_default_str()->check(CLI::Range(2, 1 << 24));
  app.add_option("--batch", B, "sequences")->capture_default_str()->check(CLI::Range(1, 1 << 16));
  app.add_option("--seq", T, "tokens a sequence")->capture_default_str()->check(CLI::Range(2, 1 << 20));
  app.add_option("--repeats", repeats, "timed repeats (median)")->capture_default_str()->check(CLI::Range(1, 1000));
  app.add_option("--threads", threads, "CPU threads (0: all)")->capture_default_str()->check(CLI::Range(0, 4096));
  CLI11_PARSE(app, argc, argv);
  kernels::set_cpu_threads(threads);
  if (bench::skipped_for_device("lm_head", device)) return 0;
  const kernels::Ops& ops = bench::ops_for("lm_head", device, kernels::parse_matmul_precision(precision));

  model::ModelConfig c = model::preset_config("azr-tiny");
  c.vocab_size = vocab, c.hidden_size = hidden, c.intermediate_size = hidden, c.num_hidden_layers = 1;
  c.num_attention_heads = 2, c.num_key_value_heads = 1, c.head_dim = 64, c.tie_word_embeddings = true;
  model::Transformer m = model::Transformer::random(c, 1, 0.02f, ops);
  std::mt19937 rng(7);
  std::vector<std::vector<int32_t>> seqs(static_cast<size_t>(B), std::vector<int32_t>(static_cast<size_t>(T)));
  for (auto& s : seqs)
    for (int32_t& id : s) id = int32_t(rng() % uint32_t(vocab));
  const model::SequenceBatch batch = model::SequenceBatch::from(seqs);
  const std::vector<float> dlogp(size_t(B * T), -1.f / float(B * T)), dent(size_t(B * T), -1e-3f);
  const int64_t R = B * (T - 1);
  const model::HeadTiles planned = model::plan_head_tiles(R, vocab, true);  // run with set_head_tiles(0, 0)
  const model::HeadTiles remade{planned.rows, planned.cols, false};
  const model::HeadTiles row_blocks{std::max<int64_t>(1, model::kHeadTileFloats / vocab), vocab, false};

  struct Times {
    std::vector<double> fwd, bwd;
    size_t bytes = 0;
  };
  auto use = [&](model::Transformer& model, const model::HeadTiles& t) {
    if (t == planned)
      model.set_head_tiles(0, 0);
    else
      model.set_head_tiles(t.rows, t.cols, t.keep);
  };
  auto step = [&](const model::HeadTiles& t, Times* out) {
    use(m, t);
    auto t0 = bench::Clock::now();
    m.score(batch, 1.f, true);  // downloads the log-probs: the device has finished
    const double f = bench::secs_since(t0);
    t0 = bench::Clock::now();
    m.backward(dlogp, dent);
    float sync = 0;
    ops.download(&sync, m.gradients().data(), sizeof sync);
    const double b = bench::secs_since(t0);
    if (out) out->fwd.push_back(f), out->bwd.push_back(b);
  };
  // Each head's buffers only grow, so each design's own size comes from a model that ran only it.
  auto bytes_of = [&](const model::HeadTiles& t) {
    model::Transformer fresh = m.copy_to(ops);
    use(fresh, t);
    fresh.score(batch, 1.f, true);
    fresh.backward(dlogp, dent);
    return fresh.head_bytes();
  };
  const bool compare_remade = planned.keep;  // else the plan is the remade blocks themselves
  step(planned, nullptr);  // warm-up: sizes every buffer, plans cuBLASLt
  if (compare_remade) step(remade, nullptr);
  step(row_blocks, nullptr);
  Times cols, again, rows;
  for (int r = 0; r < repeats; r++) {
    m.zero_grad();
    step(planned, &cols);
    if (compare_remade) step(remade, &again);
    step(row_blocks, &rows);
  }
  cols.bytes = bytes_of(planned);
  if (compare_remade) again.bytes = bytes_of(remade);
  rows.bytes = bytes_of(row_blocks);
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const double cf = median(cols.fwd), cb = median(cols.bwd), rf = median(rows.fwd), rb = median(rows.bwd);
  const double af = compare_remade ? median(again.fwd) : cf, ab = compare_remade ? median(again.bwd) : cb;
  const double head_flop = 2.0 * double(R) * double(hidden) * double(vocab);  // one GEMM of the head
  std::printf("LM head on %s, H %lld, V %lld, %lld head rows (%lld x %lld tokens)\n", ops.name, (long long)hidden,
              (long long)vocab, (long long)R, (long long)B, (long long)T);
  std::printf("%-46s %10s %10s %10s %12s %10s\n", "tiles", "fwd ms", "bwd ms", "step ms", "head TFLOP/s", "head MiB");
  // TFLOP/s of the head's useful GEMMs: forward, and backward's two (a remade tile's third is overhead).
  auto line = [&](const char* name, const model::HeadTiles& t, double f, double b, size_t bytes) {
    const std::string label = std::string(name) + " " + std::to_string(t.rows) + " x " + std::to_string(t.cols);
    std::printf("%-46s %10.1f %10.1f %10.1f %12.2f %10.1f\n", label.c_str(), f * 1e3, b * 1e3, (f + b) * 1e3,
                3 * head_flop / (f + b) / 1e12, double(bytes) / double(1 << 20));
  };
  line(planned.keep ? "column blocks, kept" : "column blocks", planned, cf, cb, cols.bytes);
  if (compare_remade) line("column blocks, made again (baseline)", remade, af, ab, again.bytes);
  line("row blocks (baseline)", row_blocks, rf, rb, rows.bytes);
  if (compare_remade) std::printf("kept against made again: backward %.2fx\n", ab / cb);
  std::printf("step speed-up against row blocks %.2fx (backward %.2fx)\n", (rf + rb) / (cf + cb), rb / cb);
  nlohmann::json j = {{"bench", "lm_head"},
                      {"device", ops.name},
                      {"hidden", hidden},
                      {"vocab", vocab},
                      {"head_rows", R},
                      {"repeats", repeats},
                      {"column_blocks", {{"rows", planned.rows}, {"cols", planned.cols}, {"kept", planned.keep},
                                         {"fwd_ms", cf * 1e3}, {"bwd_ms", cb * 1e3}, {"head_bytes", cols.bytes}}},
                      {"made_again", compare_remade ? nlohmann::json{{"fwd_ms", af * 1e3}, {"bwd_ms", ab * 1e3},
                                                                     {"head_bytes", again.bytes}}
                                                    : nlohmann::json()},
                      {"row_blocks", {{"rows", row_blocks.rows}, {"cols", row_blocks.cols}, {"fwd_ms", rf * 1e3},
                                      {"bwd_ms", rb * 1e3}, {"head_bytes", rows.bytes}}},
                      {"kept_backward_speedup", compare_remade ? nlohmann::json(ab / cb) : nlohmann::json()},
                      {"step_speedup", (rf + rb) / (cf + cb)},
                      {"backward_speedup", rb / cb}};
  std::printf("%s\n", j.dump().c_str());
  return 0;
}
