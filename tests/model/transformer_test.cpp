// The CPU transformer against an independent truth: tests/model/torch_qwen2.py, a PyTorch
// reference of the same architecture that computes every expected value in float64 (autograd
// for the gradients, torch.optim.AdamW for the optimizer), on synthetic tiny Qwen2 checkpoints
// in real HF naming. Error measure: per tensor, max |ours - ref| / max |ref| (a relative error
// that does not blow up on entries near zero); the bar is 1e-4.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "model/adamw.h"
#include "model/losses.h"
#include "model/safetensors.h"
#include "model/transformer.h"
#include "tests/test_support.h"

namespace azr::model {
namespace {

namespace fs = std::filesystem;
constexpr double kTol = 1e-4;

fs::path temp_dir(const std::string& name) {
  fs::path p = fs::temp_directory_path() / ("azr_transformer_test_" + name + "_" + std::to_string(getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

// Runs the PyTorch reference; returns the case directory.
fs::path make_case(const std::string& name, const std::vector<std::string>& args) {
  const fs::path dir = temp_dir(name);
  std::vector<std::string> argv = {"/usr/bin/python3", azr::testing::env_or_fail("AZR_TESTS_DIR") + "/model/torch_qwen2.py",
                                   "make-case", dir.string()};
  argv.insert(argv.end(), args.begin(), args.end());
  const azr::testing::ProcessResult r = azr::testing::run_process(argv);
  if (r.exit_code != 0)
    throw std::runtime_error("torch reference failed (is python3-torch installed? scripts/setup.sh installs it):\n" +
                             r.err);
  return dir;
}

double rel_err(std::span<const float> ours, std::span<const float> ref) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < ref.size(); i++) {
    diff = std::max(diff, std::fabs(double(ours[i]) - ref[i]));
    scale = std::max(scale, std::fabs(double(ref[i])));
  }
  return scale > 0 ? diff / scale : diff;
}

struct Case {
  fs::path dir;
  Checkpoint expected;
  SequenceBatch batch;
  std::vector<float> get(const std::string& name) const { return to_f32(expected.at(name)); }
  std::string meta(const std::string& key) const { return expected.files()[0]->metadata().at(key); }
};

Case load_case(const fs::path& dir) {
  Case c{dir, Checkpoint::open_file(dir / "expected.safetensors"), {}};
  const TensorView& ids = c.expected.at("input_ids");
  c.batch.B = ids.shape[0], c.batch.T = ids.shape[1];
  for (float v : to_f32(ids)) c.batch.ids.push_back(int32_t(v));
  for (float v : c.get("lengths")) c.batch.lengths.push_back(int32_t(v));
  return c;
}

// Rows t < lengths[b] of a [B, T, X] tensor, concatenated.
std::vector<float> real_rows(const std::vector<float>& x, const SequenceBatch& b, int64_t X, int64_t t0 = 0) {
  std::vector<float> out;
  for (int64_t i = 0; i < b.B; i++)
    for (int64_t t = t0; t < b.lengths[i]; t++)
      out.insert(out.end(), x.begin() + (i * b.T + t) * X, x.begin() + (i * b.T + t + 1) * X);
  return out;
}

// Returns the largest error over all parameters (printed, for the record).
double expect_grads(Transformer& m, const Case& c, const std::string& prefix) {
  double worst = 0;
  for (const ParamTensor& t : m.tensors()) {
    const std::vector<float> ref = c.get(prefix + t.name);
    EXPECT_EQ(ref.size(), t.numel) << t.name;
    if (ref.size() != t.numel) continue;
    const double err = rel_err(m.grad(t.name), ref);
    EXPECT_LE(err, kTol) << prefix << t.name;
    worst = std::max(worst, err);
  }
  return worst;
}

class ReferenceTest : public ::testing::TestWithParam<std::vector<std::string>> {};

TEST_P(ReferenceTest, ForwardBackwardPolicyLossAndAdamWMatchPyTorch) {
  const fs::path dir = make_case("ref", GetParam());
  const Case c = load_case(dir);
  Transformer m = Transformer::from_pretrained(dir / "model");
  const int64_t V = m.config().vocab_size, N = c.batch.B * c.batch.T;

  // Logits at every real position.
  const std::vector<float> logits = m.logits(c.batch);
  const double logit_err = rel_err(real_rows(logits, c.batch, V), real_rows(c.get("logits"), c.batch, V));
  EXPECT_LE(logit_err, kTol) << "logits";

  // Log-probs and entropies; then the cross-entropy loss and every parameter's gradient.
  TokenScores s = m.score(c.batch, 1.f, true);
  EXPECT_LE(rel_err(real_rows(s.logp, c.batch, 1, 1), real_rows(c.get("logprobs"), c.batch, 1, 1)), kTol);
  EXPECT_LE(rel_err(real_rows(s.entropy, c.batch, 1, 1), real_rows(c.get("entropy"), c.batch, 1, 1)), kTol);
  std::vector<float> all(size_t(N), 0.f);
  for (int64_t b = 0; b < c.batch.B; b++)
    for (int64_t t = 1; t < c.batch.lengths[b]; t++) all[b * c.batch.T + t] = 1.f;
  LossResult ce = cross_entropy_loss(s, all);
  EXPECT_NEAR(ce.loss, c.get("ce_loss")[0], kTol * std::fabs(c.get("ce_loss")[0]));
  m.zero_grad();
  m.backward(ce.dlogp, ce.dentropy);
  const double ce_grad_err = expect_grads(m, c, "grad.ce.");

  // PPO-clip surrogate with an entropy bonus.
  PpoSettings ppo{std::stod(c.meta("clip_eps")), std::stod(c.meta("entropy_coeff"))};
  s = m.score(c.batch, 1.f, true);
  LossResult pg = ppo_clip_loss(s, c.get("old_logprobs"), c.get("advantages"), c.get("response_mask"), ppo);
  EXPECT_GT(pg.clip_fraction, 0.0) << "the case must exercise the clipped branch";
  EXPECT_NEAR(pg.loss, c.get("policy_loss")[0], kTol * std::fabs(c.get("policy_loss")[0]));
  EXPECT_NEAR(pg.pg_loss, c.get("pg_loss")[0], kTol * std::fabs(c.get("pg_loss")[0]));
  EXPECT_NEAR(pg.entropy, c.get("policy_entropy")[0], kTol * std::fabs(c.get("policy_entropy")[0]));
  m.zero_grad();
  m.backward(pg.dlogp, pg.dentropy);
  const double pg_grad_err = expect_grads(m, c, "grad.pg.");

  // AdamW with global grad-norm clipping, driven by the reference's gradients of each step (our
  // own gradients were checked above; Adam's division by sqrt(v) would turn their fp32 rounding
  // on near-zero entries into full-size steps, which says nothing about the optimizer).
  AdamWSettings opt;
  opt.lr = std::stod(c.meta("lr"));
  opt.weight_decay = std::stod(c.meta("weight_decay"));
  const double max_norm = std::stod(c.meta("max_grad_norm"));
  AdamW adam(m.ops(), m.parameters().size(), opt);
  Transformer fresh = Transformer::from_pretrained(dir / "model");
  // The trainer's way: the clip measured, and its coefficient applied inside the update
  // (measure_grad_clip, AdamW::step's grad_scale): the same parameters, bit for bit.
  AdamW adam_folded(m.ops(), m.parameters().size(), opt);
  Transformer folded = Transformer::from_pretrained(dir / "model");
  const std::vector<float> norms = c.get("adam.grad_norm");
  int clipped = 0;
  for (size_t step = 1; step <= norms.size(); step++) {
    for (Transformer* t_model : {&fresh, &folded})
      for (const ParamTensor& t : t_model->tensors()) {
        const std::vector<float> g = c.get("adam.step" + std::to_string(step) + ".grad." + t.name);
        std::copy(g.begin(), g.end(), t_model->grad(t.name).begin());
      }
    const double norm = clip_grad_norm(fresh.ops(), fresh.gradients(), max_norm);
    EXPECT_NEAR(norm, norms[step - 1], 1e-6 * norms[step - 1]) << "grad norm, step " << step;
    adam.step(fresh.parameters(), fresh.gradients());
    const GradClip clip = measure_grad_clip(folded.ops(), folded.gradients(), max_norm);
    EXPECT_EQ(clip.norm, norm) << "step " << step;
    clipped += clip.scale < 1.f;
    adam_folded.step(folded, folded.gradients(), clip.scale);
  }
  EXPECT_GT(clipped, 0) << "the case must clip at least one step";
  EXPECT_EQ(std::vector<float>(folded.parameters().begin(), folded.parameters().end()),
            std::vector<float>(fresh.parameters().begin(), fresh.parameters().end()));
  double adam_err = 0;
  for (const ParamTensor& t : fresh.tensors()) {
    const double err = rel_err(fresh.param(t.name), c.get("adam." + t.name));
    EXPECT_LE(err, kTol) << "after AdamW: " << t.name;
    adam_err = std::max(adam_err, err);
  }
  std::printf("max relative error vs PyTorch: logits %.1e, CE gradients %.1e, PPO gradients %.1e, AdamW %.1e\n",
              logit_err, ce_grad_err, pg_grad_err, adam_err);
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(
    Qwen2, ReferenceTest,
    ::testing::Values(
        // tied embedding, GQA ratio 2
        std::vector<std::string>{"--seed", "1"},
        // untied LM head, GQA ratio 1 (plain multi-head), one sequence of length 1 (no targets)
        // (and an entropy bonus large enough that its gradient is a big part of the policy gradient)
        std::vector<std::string>{"--seed", "2", "--tied", "0", "--kv-heads", "4", "--lengths", "11,1,6",
                                 "--entropy-coeff", "1.0"},
        // explicit head_dim != hidden / heads, GQA ratio 4, RoPE base of Qwen2.5
        std::vector<std::string>{"--seed", "3", "--heads", "4", "--kv-heads", "1", "--head-dim", "16", "--hidden",
                                 "48", "--rope-theta", "1000000", "--layers", "3"},
        // longer sequences, batch of 5
        std::vector<std::string>{"--seed", "4", "--batch", "5", "--seq", "40", "--lengths", "40,33,17,2,39",
                                 "--tied", "0", "--entropy-coeff", "0.5"},
        // long enough for the CPU backend's blocked causal attention (kAttnBlock = 64 query rows in
        // kernels/cpu/cpu_ops.cpp): several blocks, a ragged last block, a length on a block
        // boundary and one inside the first block
        std::vector<std::string>{"--seed", "5", "--batch", "3", "--seq", "300", "--lengths", "300,128,37"}));

// ---------------------------------------------------------------------------------------------
// Invariants that need no reference.

ModelConfig tiny_config(bool tied = true, int64_t kv = 2) {
  ModelConfig c;
  c.model_type = "qwen2";
  c.vocab_size = 61, c.hidden_size = 32, c.intermediate_size = 40, c.num_hidden_layers = 2;
  c.num_attention_heads = 4, c.num_key_value_heads = kv, c.head_dim = 8;
  c.rms_norm_eps = 1e-6, c.rope_theta = 10000, c.max_position_embeddings = 256;
  c.tie_word_embeddings = tied, c.qkv_bias = true;
  return c;
}

// Transformer::random's weights, one value at a time as its comment defines them: splitmix64 from
// the seed, Box-Muller pairs (the cosine's value, then the sine's), over the tensors in order but
// the norms (1) and biases (0), times init_std. Odd sizes (hidden 35, intermediate 41, vocab
// 4,099) carry a pair's second value from one tensor into the next; the embedding's 71,732 pairs
// take the parallel path.
TEST(TransformerTest, RandomWeightsAreTheSeedsNormalStreamInOrder) {
  ModelConfig c = tiny_config(false);
  c.vocab_size = 4099, c.hidden_size = 35, c.intermediate_size = 41;
  const uint64_t seed = 11;
  const float init_std = 0.02f;
  const Transformer m = Transformer::random(c, seed, init_std);
  uint64_t state = seed;
  const auto uniform = [&] {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return double(((z ^ (z >> 31)) >> 11) + 1) * 0x1.0p-53;
  };
  std::vector<double> pair;  // the values drawn and not yet used, in order
  const std::span<const float> params = m.parameters();
  size_t odd = 0;
  for (const ParamTensor& t : m.tensors()) {
    const bool bias = t.name.ends_with(".bias"), norm = t.name.ends_with("norm.weight");
    odd += !bias && !norm && t.numel % 2 == 1;
    for (size_t i = 0; i < t.numel; i++) {
      float want = norm ? 1.f : 0.f;
      if (!bias && !norm) {
        if (pair.empty()) {
          const double r = std::sqrt(-2.0 * std::log(uniform())), a = 2.0 * M_PI * uniform();
          pair = {r * std::sin(a), r * std::cos(a)};  // used from the back
        }
        want = float(pair.back() * init_std);
        pair.pop_back();
      }
      ASSERT_EQ(params[t.offset + i], want) << t.name << " [" << i << "]";
    }
  }
  EXPECT_GE(odd, 2u) << "the case must carry a pair across tensors";
}

// Random biases and norm weights too, so every code path carries non-trivial values.
Transformer random_model(bool tied = true, int64_t kv = 2, uint64_t seed = 7) {
  Transformer m = Transformer::random(tiny_config(tied, kv), seed, 0.3f);
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::normal_distribution<float> n(0.f, 0.1f);
  for (const ParamTensor& t : m.tensors()) {
    const bool bias = t.name.ends_with(".bias"), norm = t.name.ends_with("norm.weight");
    if (!bias && !norm) continue;
    for (float& v : m.param(t.name)) v += n(rng);
  }
  return m;
}

std::vector<std::vector<int32_t>> random_seqs(std::vector<int> lengths, int V, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::vector<int32_t>> out;
  for (int len : lengths) {
    std::vector<int32_t> s;
    for (int i = 0; i < len; i++) s.push_back(int32_t(rng() % uint32_t(V)));
    out.push_back(s);
  }
  return out;
}

// Also with the prompts prefilled in groups (Transformer::set_prefill_group_tokens): one group,
// groups of two prompts and one, and one prompt per group.
// The clipped share of tokens, by hand: ratios e^0.5 (clipped above 1.2 with A > 0), e^-0.5
// (clipped below 0.8 with A < 0), e^0.1 (inside the clip range) and a masked token. Alone, 2 of 3;
// as one of two micro-batches of an update of 6 tokens (normaliser 6), 2 of 6, so that the
// trainer's sum over micro-batches and ranks is the update's fraction.
TEST(TransformerTest, ClipFractionIsAShareOfTheUpdatesTokens) {
  TokenScores s;
  s.B = 1, s.T = 4;
  s.logp = {0.5f, -0.5f, 0.1f, 3.f};
  s.entropy = {1.f, 1.f, 1.f, 1.f};
  const std::vector<float> old_logp(4, 0.f), adv = {1.f, -1.f, 1.f, 1.f}, mask = {1.f, 1.f, 1.f, 0.f};
  const PpoSettings ppo{0.2, 0.0};
  EXPECT_DOUBLE_EQ(ppo_clip_loss(s, old_logp, adv, mask, ppo).clip_fraction, 2.0 / 3.0);
  const LossResult half = ppo_clip_loss(s, old_logp, adv, mask, ppo, 6.0);
  EXPECT_DOUBLE_EQ(half.clip_fraction, 2.0 / 6.0);
  EXPECT_DOUBLE_EQ(half.clip_fraction + half.clip_fraction, 2.0 / 3.0);  // two such micro-batches
}

TEST(TransformerTest, KvCacheDecodeEqualsFullForward) {
  for (int64_t kv : {1, 2, 4})
  for (int64_t group_tokens : {int64_t(16384), int64_t(18), int64_t(1)}) {
    Transformer m = random_model(true, kv);
    m.set_prefill_group_tokens(group_tokens);
    const int64_t V = m.config().vocab_size;
    // Three prompts of different lengths, then 6 tokens fed one step at a time.
    auto seqs = random_seqs({5, 9, 2}, int(V), 11);
    auto full = random_seqs({11, 15, 8}, int(V), 12);
    for (size_t b = 0; b < seqs.size(); b++) std::copy(seqs[b].begin(), seqs[b].end(), full[b].begin());
    const SequenceBatch all = SequenceBatch::from(full);
    const std::vector<float> ref = m.logits(all);

    KVCache cache(m.config(), 3, 16);
    std::vector<float> step_logits = m.prefill(cache, SequenceBatch::from(seqs));
    auto expect_row = [&](int64_t b, int64_t pos, const float* got, const std::string& what) {
      const std::span<const float> want(ref.data() + (b * all.T + pos) * V, size_t(V));
      EXPECT_LE(rel_err(std::span<const float>(got, size_t(V)), want), 1e-5)
          << what << " kv=" << kv << " group_tokens=" << group_tokens << " b=" << b << " pos=" << pos;
    };
    for (int64_t b = 0; b < 3; b++) expect_row(b, int64_t(seqs[b].size()) - 1, &step_logits[b * V], "prefill");
    for (int step = 0; step < 6; step++) {
      // Drop sequence 1 after two steps: finished rows leave the batch.
      std::vector<int32_t> tokens, slots, pos;
      for (int32_t b = 0; b < 3; b++) {
        if (b == 1 && step >= 2) continue;
        const int32_t p = int32_t(seqs[b].size()) + step;
        tokens.push_back(full[b][p]);
        slots.push_back(b);
        pos.push_back(p);
      }
      m.decode(cache, tokens, slots, pos, step_logits);
      for (size_t r = 0; r < slots.size(); r++) expect_row(slots[r], pos[r], &step_logits[r * V], "decode");
    }
  }
}

// Bad prefill batches are one std::invalid_argument each, thrown before anything is written: the
// cache stays as it was (zeros).
TEST(TransformerTest, PrefillRejectsBadBatchesAndLeavesTheCacheUntouched) {
  Transformer m = random_model(true, 2);
  m.set_prefill_group_tokens(4);  // several groups: a bad prompt late in the batch must not let earlier groups in
  KVCache cache(m.config(), 2, 6);
  auto expect_error = [&](const SequenceBatch& b, const std::string& what) {
    try {
      m.prefill(cache, b);
      ADD_FAILURE() << "no error; wanted: " << what;
    } catch (const std::invalid_argument& e) {
      EXPECT_EQ(std::string(e.what()), what);
    }
    const size_t n = size_t(cache.layers * cache.slots * cache.slot_stride());
    EXPECT_EQ(std::count(cache.k.data(), cache.k.data() + n, 0.f), std::ptrdiff_t(n)) << what;
    EXPECT_EQ(std::count(cache.v.data(), cache.v.data() + n, 0.f), std::ptrdiff_t(n)) << what;
  };
  expect_error(SequenceBatch::from({{1, 2}, {3}, {4}}), "more prompts than KV-cache slots");
  expect_error(SequenceBatch::from({{1, 2}, {1, 2, 3, 4, 5, 6, 7}}), "a prompt is longer than the KV-cache capacity");
  SequenceBatch bad = SequenceBatch::from({{1, 2, 3}, {4, 5}});
  bad.ids.pop_back();
  expect_error(bad, "batch ids/lengths do not match B x T");
  bad = SequenceBatch::from({{1, 2, 3}, {4, 5}});
  bad.lengths[1] = 0;
  expect_error(bad, "a sequence length is outside 1..T");
  bad.lengths[1] = 4;  // within the cache's capacity, past the batch's T = 3
  expect_error(bad, "a sequence length is outside 1..T");
}

// The op behind prefill and decode, by hand: each row lands at slot * stride + pos * row, a row
// with pos -1 (padding) writes nothing.
TEST(TransformerTest, KvStoreWritesRowsToTheirSlotsAndSkipsPadding) {
  const int64_t row = 2, capacity = 3, stride = capacity * row;
  std::vector<float> kc(2 * stride, -1.f), vc(2 * stride, -2.f);
  const std::vector<float> k = {1, 2, 3, 4, 5, 6}, v = {10, 20, 30, 40, 50, 60};
  const std::vector<int32_t> slot = {1, 0, 1}, pos = {2, 0, -1};
  kernels::cpu_ops().kv_store(kc.data(), vc.data(), k.data(), v.data(), slot.data(), pos.data(), 3, row, stride);
  EXPECT_EQ(kc, (std::vector<float>{3, 4, -1, -1, -1, -1, -1, -1, -1, -1, 1, 2}));
  EXPECT_EQ(vc, (std::vector<float>{30, 40, -2, -2, -2, -2, -2, -2, -2, -2, 10, 20}));
}

// The CPU decode attention against the softmax written out in double: each row's query heads over
// its slot's cached keys 0..pos[r], with GQA groups of 1, 3 and 7 heads, head dims that are and are
// not a multiple of the vector width, rows of one slot at several positions (a prompt's tokens
// decoded together), and position 0 (one key).
TEST(TransformerTest, DecodeAttentionIsTheSoftmaxOverTheCachedPositions) {
  struct Shape {
    int64_t heads, kv_heads, d, capacity;
  };
  for (const Shape& sh : {Shape{4, 4, 8, 9}, Shape{6, 2, 12, 40}, Shape{14, 2, 64, 300}}) {
    SCOPED_TRACE("heads " + std::to_string(sh.heads) + "/" + std::to_string(sh.kv_heads) + " d " + std::to_string(sh.d));
    const int64_t slots = 3, kv_row = sh.kv_heads * sh.d, stride = sh.capacity * kv_row, cap = sh.capacity;
    const std::vector<int32_t> slot = {2, 0, 0, 0, 1}, pos = {int32_t(cap - 1), 0, 1, int32_t(cap / 2), 3};
    const int64_t R = int64_t(slot.size());
    std::mt19937 rng(5);
    std::normal_distribution<float> normal(0.f, 1.f);
    std::vector<float> q(size_t(R * sh.heads * sh.d)), kc(size_t(slots * stride)), vc(kc.size());
    for (float& x : q) x = 2 * normal(rng);
    for (float& x : kc) x = normal(rng);
    for (float& x : vc) x = normal(rng);
    const kernels::AttentionShape shape{0, 0, sh.heads, sh.kv_heads, sh.d, stride, nullptr};
    std::vector<float> out(q.size(), -7.f);
    kernels::cpu_ops().attention_decode(out.data(), q.data(), kc.data(), vc.data(), slot.data(), pos.data(), R, shape);
    const int64_t group = sh.heads / sh.kv_heads;
    for (int64_t r = 0; r < R; r++)
      for (int64_t h = 0; h < sh.heads; h++) {
        const float* qh = &q[size_t((r * sh.heads + h) * sh.d)];
        const float* k = &kc[size_t(slot[r] * stride + (h / group) * sh.d)];
        const float* v = &vc[size_t(slot[r] * stride + (h / group) * sh.d)];
        std::vector<double> w(size_t(pos[r] + 1));
        double mx = -1e300, sum = 0;
        for (int64_t j = 0; j <= pos[r]; j++) {
          double dot = 0;
          for (int64_t i = 0; i < sh.d; i++) dot += double(qh[i]) * k[j * kv_row + i];
          w[size_t(j)] = dot / std::sqrt(double(sh.d));
          mx = std::max(mx, w[size_t(j)]);
        }
        for (double& x : w) sum += (x = std::exp(x - mx));
        for (int64_t i = 0; i < sh.d; i++) {
          double o = 0;
          for (int64_t j = 0; j <= pos[r]; j++) o += w[size_t(j)] / sum * v[j * kv_row + i];
          ASSERT_NEAR(out[size_t((r * sh.heads + h) * sh.d + i)], o, 2e-5) << "row " << r << " head " << h << " dim " << i;
        }
      }
  }
}

// copy_positions moves positions 0..n-1 of every layer's keys and values from one slot to another,
// in the cache's own type, and nothing else: checked against the layout by hand
// ([layer][slot][position][row]) on an fp32 cache and on the Bf16 table's bf16 one.
TEST(TransformerTest, KvCacheCopiesAPrefixOfOneSlotIntoAnother) {
  ModelConfig c;
  c.num_hidden_layers = 2, c.num_key_value_heads = 1, c.head_dim = 2;
  for (const kernels::Ops* ops : {&kernels::cpu_ops(), &kernels::cpu_bf16_matmul_ops()}) {
    SCOPED_TRACE(ops->name);
    KVCache cache(c, /*slots=*/3, /*capacity=*/4, *ops);
    const size_t n = size_t(cache.layers * cache.slots * cache.slot_stride());
    std::vector<float> kf(n), vf(n);
    std::vector<uint16_t> kh(n), vh(n);
    for (size_t i = 0; i < n; i++) kf[i] = float(i), vf[i] = -float(i), kh[i] = uint16_t(i), vh[i] = uint16_t(1000 + i);
    if (cache.bf16) cache.k16.upload(kh.data(), n), cache.v16.upload(vh.data(), n);
    else cache.k.upload(kf.data(), n), cache.v.upload(vf.data(), n);
    cache.copy_positions(/*from=*/2, /*to=*/0, /*n=*/3);
    // Every element of slot 0's first 3 positions (3 x row 2 = 6 values) is slot 2's, per layer.
    for (int64_t l = 0; l < cache.layers; l++)
      for (int64_t i = 0; i < 6; i++) {
        const size_t dst = size_t(l * 3 * 8 + i), src = size_t(l * 3 * 8 + 2 * 8 + i);
        kf[dst] = kf[src], vf[dst] = vf[src], kh[dst] = kh[src], vh[dst] = vh[src];
      }
    if (cache.bf16) {
      std::vector<uint16_t> k(n), v(n);
      cache.k16.download(k.data(), n), cache.v16.download(v.data(), n);
      EXPECT_EQ(k, kh);
      EXPECT_EQ(v, vh);
    } else {
      std::vector<float> k(n), v(n);
      cache.k.download(k.data(), n), cache.v.download(v.data(), n);
      EXPECT_EQ(k, kf);
      EXPECT_EQ(v, vf);
    }
    EXPECT_THROW(cache.copy_positions(0, 3, 1), std::invalid_argument);   // no slot 3
    EXPECT_THROW(cache.copy_positions(-1, 0, 1), std::invalid_argument);
    EXPECT_THROW(cache.copy_positions(0, 1, 5), std::invalid_argument);   // past the capacity
  }
}

TEST(TransformerTest, PaddingNeverChangesRealRows) {
  Transformer m = random_model(false);
  auto seqs = random_seqs({7}, 61, 3);
  const std::vector<float> alone = m.logits(SequenceBatch::from(seqs));
  // Same sequence right-padded with different pad ids next to a longer one.
  auto both = random_seqs({7, 19}, 61, 4);
  both[0] = seqs[0];
  for (int32_t pad : {0, 5, 60}) {
    const std::vector<float> batched = m.logits(SequenceBatch::from(both, pad));
    for (size_t i = 0; i < alone.size(); i++) ASSERT_NEAR(batched[i], alone[i], 1e-5f * (1 + std::fabs(alone[i])));
  }
}

TEST(TransformerTest, GradientAccumulationOverMicroBatchesEqualsOneBatch) {
  Transformer m = random_model();
  auto seqs = random_seqs({9, 4, 12, 7}, 61, 5);
  auto mask_for = [](const SequenceBatch& b) {
    std::vector<float> mask(size_t(b.B * b.T), 0.f);
    for (int64_t i = 0; i < b.B; i++)
      for (int64_t t = 1; t < b.lengths[i]; t++) mask[i * b.T + t] = 1.f;
    return mask;
  };
  double tokens = 0;
  for (auto& s : seqs) tokens += double(s.size() - 1);

  const SequenceBatch whole = SequenceBatch::from(seqs);
  m.zero_grad();
  TokenScores s = m.score(whole, 1.f, true);
  LossResult l = cross_entropy_loss(s, mask_for(whole), tokens);
  m.backward(l.dlogp, l.dentropy);
  const std::vector<float> one(m.gradients().begin(), m.gradients().end());

  m.zero_grad();
  double total = 0;
  for (int half = 0; half < 2; half++) {
    const SequenceBatch mb = SequenceBatch::from({seqs[2 * half], seqs[2 * half + 1]});
    TokenScores ms = m.score(mb, 1.f, true);
    LossResult ml = cross_entropy_loss(ms, mask_for(mb), tokens);
    total += ml.loss;
    m.backward(ml.dlogp, ml.dentropy);
  }
  EXPECT_NEAR(total, l.loss, 1e-6 * l.loss);
  EXPECT_LE(rel_err(m.gradients(), one), 1e-5);
}

// Normal(0, 1) per-token gradients dlogp and dentropy for a batch.
std::pair<std::vector<float>, std::vector<float>> random_token_grads(const SequenceBatch& batch, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> n(0.f, 1.f);
  std::vector<float> dlogp(size_t(batch.B * batch.T)), dent(dlogp.size());
  for (size_t i = 0; i < dlogp.size(); i++) dlogp[i] = n(rng), dent[i] = n(rng);
  return {dlogp, dent};
}

// score(batch, 0.7, for_backward) then backward(dlogp, dent) on m: its gradients, then the
// log-probs and entropies, in one vector.
std::vector<float> scores_and_gradients(Transformer& m, const SequenceBatch& batch, std::span<const float> dlogp,
                                        std::span<const float> dent) {
  const TokenScores s = m.score(batch, 0.7f, true);
  m.backward(dlogp, dent);
  std::vector<float> out(m.gradients().begin(), m.gradients().end());
  out.insert(out.end(), s.logp.begin(), s.logp.end());
  out.insert(out.end(), s.entropy.begin(), s.entropy.end());
  return out;
}

// Recomputation runs the same ops on the same inputs, so on the CPU backend its scores and
// gradients are those of the kept-activations path bit for bit, while the arena shrinks.
TEST(TransformerTest, ActivationRecomputationGivesTheSameGradientsBitForBit) {
  for (bool tied : {true, false}) {
    for (int64_t kv : {1, 4}) {
      const SequenceBatch batch = SequenceBatch::from(random_seqs({9, 1, 14, 6}, 61, 21));
      const auto [dlogp, dent] = random_token_grads(batch, 3);
      auto run = [&](bool recompute, size_t* arena) {
        Transformer m = random_model(tied, kv);
        m.set_recompute(recompute);
        std::vector<float> out = scores_and_gradients(m, batch, dlogp, dent);
        *arena = m.activation_bytes();
        return out;
      };
      size_t kept_bytes = 0, recomputed_bytes = 0;
      const std::vector<float> kept = run(false, &kept_bytes), recomputed = run(true, &recomputed_bytes);
      ASSERT_EQ(kept.size(), recomputed.size());
      size_t differ = 0;
      for (size_t i = 0; i < kept.size(); i++) differ += std::memcmp(&kept[i], &recomputed[i], sizeof(float)) != 0;
      EXPECT_EQ(differ, 0u) << "tied " << tied << " kv " << kv;
      EXPECT_LT(recomputed_bytes, kept_bytes);
    }
  }
  // Generation keeps every layer's keys and values whatever the setting.
  Transformer m = random_model();
  m.set_recompute(true);
  auto seqs = random_seqs({5, 8}, 61, 9);
  const std::vector<float> full = m.logits(SequenceBatch::from(seqs));
  KVCache cache(m.config(), 2, 8);
  const std::vector<float> last = m.prefill(cache, SequenceBatch::from(seqs));
  for (int64_t b = 0; b < 2; b++) {
    const int64_t row = b * 8 + int64_t(seqs[b].size()) - 1;
    EXPECT_LE(rel_err(std::span<const float>(last.data() + b * 61, 61), std::span<const float>(full.data() + row * 61, 61)),
              1e-5);
  }
}

// The LM head's tiling (memory_plan.h) changes no score and no gradient beyond rounding: the
// planned tiles (here the kept logits), the whole rows made again in backward, row blocks, column
// blocks (61 = 3 x 16 + 13: a shorter last one) made again or kept block by block, and row and
// column blocks both, on the fp32 and bf16 tables (the bf16
// one with bf16 output gradients: the head's dlogits go to the GEMMs in bf16, a tile at a time). A
// second backward() after one score() accumulates the same gradients again: twice the first (up
// to the order of the GEMMs' sums), whether the kept logits hold dlogits by then (fp32: it makes
// them again) or are still the logits (bf16 gradients write dlogits elsewhere).
TEST(TransformerTest, LmHeadTilesGiveTheSameScoresAndGradients) {
  const SequenceBatch batch = SequenceBatch::from(random_seqs({9, 1, 14, 6}, 61, 23));
  const auto [dlogp, dent] = random_token_grads(batch, 4);
  for (const kernels::Ops* ops : {&kernels::cpu_ops(), &kernels::cpu_bf16_matmul_ops()}) {
    SCOPED_TRACE(ops->name);
    auto run = [&](int64_t rows, int64_t cols, bool keep) {
      Transformer m = random_model(false).copy_to(*ops);
      m.set_head_tiles(rows, cols, keep);
      return scores_and_gradients(m, batch, dlogp, dent);
    };
    const std::vector<float> planned = run(0, 0, false);
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1000, 61}, {5, 61}, {1000, 16}, {4, 16}, {3, 7}})
      for (const bool keep : {false, true}) {  // kept: in column blocks of every row (rows 1000)
        const std::vector<float> tiled = run(rows, cols, keep);
        EXPECT_LE(rel_err(tiled, planned), 1e-6) << rows << " x " << cols << (keep ? ", kept" : "");
      }
    Transformer m = random_model(false).copy_to(*ops);
    m.score(batch, 0.7f, true);
    m.backward(dlogp, dent);
    const std::vector<float> once(m.gradients().begin(), m.gradients().end());
    m.backward(dlogp, dent);
    std::vector<float> twice(once.size());
    for (size_t i = 0; i < once.size(); i++) twice[i] = 2 * once[i];
    EXPECT_LE(rel_err(m.gradients(), twice), 1e-6);
  }
}

TEST(TransformerTest, SaveLoadGivesIdenticalOutputs) {
  for (bool tied : {true, false}) {
    Transformer m = random_model(tied);
    const fs::path dir = temp_dir(tied ? "save_tied" : "save_untied");
    m.save_pretrained(dir);
    EXPECT_EQ(fs::exists(dir / "lm_head.weight"), false);
    Transformer back = Transformer::from_pretrained(dir);
    ASSERT_EQ(back.parameters().size(), m.parameters().size());
    EXPECT_TRUE(std::equal(back.parameters().begin(), back.parameters().end(), m.parameters().begin()));
    const SequenceBatch b = SequenceBatch::from(random_seqs({6, 3}, 61, 9));
    EXPECT_EQ(back.logits(b), m.logits(b));  // bit-identical
    EXPECT_EQ(back.config().tie_word_embeddings, tied);
    EXPECT_EQ(Checkpoint::open_file(dir / "model.safetensors").contains("lm_head.weight"), !tied);
    fs::remove_all(dir);
  }
}

TEST(TransformerTest, GenerationConfigStopIdsLoadAndSaveWithTheModel) {
  Transformer m = random_model();
  const fs::path dir = temp_dir("generation_config");
  m.save_pretrained(dir);
  EXPECT_FALSE(fs::exists(dir / "generation_config.json"));  // none to say
  std::ofstream(dir / "generation_config.json") << R"({"eos_token_id": [3, 5], "temperature": 0.7})";
  Transformer loaded = Transformer::from_pretrained(dir);
  EXPECT_EQ(loaded.config().generation_eos_token_ids, (std::vector<int64_t>{3, 5}));
  const fs::path again = temp_dir("generation_config_again");
  loaded.save_pretrained(again);
  EXPECT_EQ(Transformer::from_pretrained(again).config().generation_eos_token_ids, (std::vector<int64_t>{3, 5}));

  std::ofstream(dir / "generation_config.json", std::ios::trunc) << R"({"eos_token_id": 100000})";
  try {
    Transformer::from_pretrained(dir);
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("generation_config.json: field 'eos_token_id' (100000)"), std::string::npos)
        << e.what();
  }
  fs::remove_all(dir);
  fs::remove_all(again);
}

TEST(TransformerTest, AdamWStateSavedAndRestoredContinuesExactly) {
  Transformer a = random_model(), b = random_model();
  const SequenceBatch batch = SequenceBatch::from(random_seqs({8, 5}, 61, 13));
  std::vector<float> mask(size_t(batch.B * batch.T), 1.f);
  auto step = [&](Transformer& m, AdamW& opt) {
    m.zero_grad();
    TokenScores s = m.score(batch, 1.f, true);
    LossResult l = cross_entropy_loss(s, mask);
    m.backward(l.dlogp, l.dentropy);
    clip_grad_norm(m.ops(), m.gradients(), 1.0);
    opt.step(m.parameters(), m.gradients());
  };
  AdamWSettings set;
  set.lr = 1e-3;
  AdamW oa(a.ops(), a.parameters().size(), set), ob(b.ops(), b.parameters().size(), set);
  for (int i = 0; i < 3; i++) step(a, oa);
  for (int i = 0; i < 2; i++) step(b, ob);
  const fs::path dir = temp_dir("adam");
  b.save_pretrained(dir);
  ob.save(dir / "optimizer.safetensors");
  Transformer resumed = Transformer::from_pretrained(dir);
  AdamW oc(resumed.ops(), resumed.parameters().size(), set);
  oc.load(dir / "optimizer.safetensors");
  EXPECT_EQ(oc.step_count(), 2);
  step(resumed, oc);
  EXPECT_TRUE(std::equal(resumed.parameters().begin(), resumed.parameters().end(), a.parameters().begin()));

  // A state file for a different model size is refused, naming the file.
  AdamW wrong(a.ops(), 10, set);
  try {
    wrong.load(dir / "optimizer.safetensors");
    FAIL() << "expected an error";
  } catch (const SafetensorsError& e) {
    EXPECT_NE(std::string(e.what()).find("optimizer.safetensors"), std::string::npos) << e.what();
  }

  // A step count that is not one a run reaches is refused: INT64_MAX resumed, and the next
  // step's count overflowed to INT64_MIN, its bias correction made every weight NaN.
  {
    SafetensorsFile f = SafetensorsFile::open(dir / "optimizer.safetensors");
    std::vector<float> mv[2];
    std::vector<TensorView> views;
    for (int t = 0; t < 2; t++) {
      const TensorView& src = f.at(t == 0 ? "exp_avg" : "exp_avg_sq");
      mv[t].resize(size_t(src.numel()));
      std::memcpy(mv[t].data(), src.data, src.nbytes);
      views.push_back({src.name, DType::F32, src.shape, reinterpret_cast<const std::byte*>(mv[t].data()), src.nbytes});
    }
    for (const char* step : {"9223372036854775807", "9007199254740993", "-1", "2x"}) {
      Metadata meta = f.metadata();
      meta["step"] = step;
      write_safetensors(dir / "bad_step.safetensors", views, meta);
      AdamW od(resumed.ops(), resumed.parameters().size(), set);
      try {
        od.load(dir / "bad_step.safetensors");
        ADD_FAILURE() << "step " << step << " was taken";
      } catch (const SafetensorsError& e) {
        EXPECT_NE(std::string(e.what()).find("metadata 'step'"), std::string::npos) << e.what();
      }
    }
  }
  fs::remove_all(dir);
}

// The flat layout stores each layer's q, k and v weights adjacent, then their biases, and gate and
// up adjacent ([Wq; Wk; Wv] and [Wg; Wu] are then one matrix each, for a decode step's one GEMM);
// every tensor in its own range. The optimizer's state file keeps the tensors in
// expected_tensors()' order regardless (files written before this layout read the same): checked
// against offsets summed here from expected_tensors(), both ways.
TEST(TransformerTest, FusedLayoutAndTheOptimizerFileInCheckpointOrder) {
  ModelConfig c = tiny_config(false);
  c.mlp_bias = true;
  Transformer m = Transformer::random(c, 3, 0.3f);
  auto at = [&](const std::string& name) { return m.param(name).data() - m.parameters().data(); };
  auto size = [&](const std::string& name) { return std::ptrdiff_t(m.param(name).size()); };
  for (int l = 0; l < c.num_hidden_layers; l++) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    EXPECT_EQ(at(p + "self_attn.k_proj.weight"), at(p + "self_attn.q_proj.weight") + size(p + "self_attn.q_proj.weight"));
    EXPECT_EQ(at(p + "self_attn.v_proj.weight"), at(p + "self_attn.k_proj.weight") + size(p + "self_attn.k_proj.weight"));
    EXPECT_EQ(at(p + "self_attn.k_proj.bias"), at(p + "self_attn.q_proj.bias") + size(p + "self_attn.q_proj.bias"));
    EXPECT_EQ(at(p + "self_attn.v_proj.bias"), at(p + "self_attn.k_proj.bias") + size(p + "self_attn.k_proj.bias"));
    EXPECT_EQ(at(p + "mlp.up_proj.weight"), at(p + "mlp.gate_proj.weight") + size(p + "mlp.gate_proj.weight"));
    EXPECT_EQ(at(p + "mlp.up_proj.bias"), at(p + "mlp.gate_proj.bias") + size(p + "mlp.gate_proj.bias"));
  }
  // Every value of the buffer in exactly one tensor.
  std::vector<int> owners(m.parameters().size(), 0);
  for (const ParamTensor& t : m.tensors())
    for (size_t i = 0; i < t.numel; i++) owners[t.offset + i]++;
  EXPECT_TRUE(std::all_of(owners.begin(), owners.end(), [](int n) { return n == 1; }));

  // Each parameter's place in checkpoint order, from expected_tensors() (the lm_head is untied).
  std::vector<std::pair<std::string, size_t>> file_at;
  size_t file = 0;
  for (const TensorSpec& t : expected_tensors(c)) {
    size_t n = 1;
    for (int64_t d : t.shape) n *= size_t(d);
    file_at.push_back({t.name, file});
    file += n;
  }
  ASSERT_EQ(file, m.parameters().size());
  bool moved = false;
  for (const auto& [name, f] : file_at) moved |= size_t(at(name)) != f;
  ASSERT_TRUE(moved) << "the layout is checkpoint order: nothing to check";

  AdamWSettings set;
  AdamW opt(m.ops(), m.parameters().size(), set);
  opt.set_file_order(m.file_order());
  // Gradients that name their place: gradient i is i + 1, so the first moment is (1 - beta1) (i + 1).
  std::span<float> g = m.gradients();
  for (size_t i = 0; i < g.size(); i++) g[i] = float(i + 1);
  opt.step(m.parameters(), m.gradients());
  const fs::path dir = temp_dir("adam_order");
  opt.save(dir / "optimizer.safetensors");
  {
    SafetensorsFile f = SafetensorsFile::open(dir / "optimizer.safetensors");
    std::vector<float> saved(m.parameters().size());
    to_f32(f.at("exp_avg"), saved);
    for (const auto& [name, f0] : file_at)
      for (size_t i = 0; i < m.param(name).size(); i++)
        ASSERT_EQ(saved[f0 + i], opt.m()[size_t(at(name)) + i]) << name << " " << i;
  }
  // A file in checkpoint order, written here: value k at place k; it loads to each tensor's range.
  std::vector<float> ramp(m.parameters().size());
  for (size_t k = 0; k < ramp.size(); k++) ramp[k] = float(k);
  const int64_t n = int64_t(ramp.size());
  const auto* bytes = reinterpret_cast<const std::byte*>(ramp.data());
  const std::vector<TensorView> views = {{"exp_avg", DType::F32, {n}, bytes, ramp.size() * sizeof(float)},
                                         {"exp_avg_sq", DType::F32, {n}, bytes, ramp.size() * sizeof(float)}};
  write_safetensors(dir / "ramp.safetensors", views, {{"step", "4"}});
  opt.load(dir / "ramp.safetensors");
  EXPECT_EQ(opt.step_count(), 4);
  for (const auto& [name, f0] : file_at)
    for (size_t i = 0; i < m.param(name).size(); i++) {
      ASSERT_EQ(opt.m()[size_t(at(name)) + i], float(f0 + i)) << name << " " << i;
      ASSERT_EQ(opt.v()[size_t(at(name)) + i], float(f0 + i)) << name << " " << i;
    }
  EXPECT_THROW(opt.set_file_order({{0, 0, 3}}), std::invalid_argument);  // not every parameter
  fs::remove_all(dir);
}

TEST(TransformerTest, BadCheckpointsGiveClearErrors) {
  Transformer m = random_model(false);
  const fs::path dir = temp_dir("bad");
  m.save_pretrained(dir);
  auto rewrite = [&](const std::string& drop, const std::string& reshape, const std::string& poison = "",
                     float poison_value = 0) {
    std::vector<TensorView> views;
    std::vector<std::vector<float>> keep;
    for (const ParamTensor& t : m.tensors()) {
      if (t.name == drop) continue;
      std::vector<int64_t> shape = t.shape;
      size_t n = t.numel;
      if (t.name == reshape) shape[0] -= 1, n -= t.numel / size_t(t.shape[0]);
      keep.emplace_back(m.param(t.name).begin(), m.param(t.name).begin() + n);
      if (t.name == poison) keep.back()[3] = poison_value;
      views.push_back({t.name, DType::F32, shape, reinterpret_cast<const std::byte*>(keep.back().data()),
                       n * sizeof(float)});
    }
    write_safetensors(dir / "model.safetensors", views);
  };
  auto expect_error = [&](const std::string& needle) {
    try {
      Transformer::from_pretrained(dir);
      FAIL() << "expected an error mentioning " << needle;
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  rewrite("model.layers.1.mlp.up_proj.weight", "");
  expect_error("model.layers.1.mlp.up_proj.weight");
  rewrite("", "model.layers.0.self_attn.k_proj.weight");
  expect_error("model.layers.0.self_attn.k_proj.weight");
  rewrite("lm_head.weight", "");
  expect_error("lm_head.weight");
  // A weight that is not a number: generation gave token 0 on every step, with null log-probs,
  // and an evaluation scored the model 0, exit 0 (a diverged run's weights, a bad conversion).
  rewrite("", "", "model.norm.weight", std::nanf(""));
  expect_error(dir.string() + ": tensor model.norm.weight holds NaN (element 3)");
  rewrite("", "", "model.layers.1.self_attn.q_proj.bias", -INFINITY);
  expect_error(dir.string() + ": tensor model.layers.1.self_attn.q_proj.bias holds -inf (element 3)");
  fs::remove(dir / "model.safetensors");
  expect_error("model.safetensors");
  fs::remove_all(dir);
}

// Weights that are not all finite are not saved, and nothing is written: a diverged run published
// them as a checkpoint, exit 0, that from_pretrained (above) refuses.
TEST(TransformerTest, WeightsThatAreNotFiniteAreNotSaved) {
  const fs::path dir = fs::path(::testing::TempDir()) / "azr-not-finite-save";
  fs::remove_all(dir);
  Transformer m = random_model();
  const ParamTensor* norm = m.find_tensor("model.norm.weight");
  ASSERT_NE(norm, nullptr);
  m.parameters()[size_t(norm->offset) + 5] = INFINITY;
  try {
    m.save_pretrained(dir);
    FAIL() << "weights holding inf were saved";
  } catch (const NotFiniteWeights& e) {
    EXPECT_NE(std::string(e.what()).find("tensor model.norm.weight holds inf (element 5)"), std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(fs::exists(dir));
  m.parameters()[size_t(norm->offset) + 5] = 1.f;  // finite again: saved, and loads
  m.save_pretrained(dir);
  EXPECT_NO_THROW(Transformer::from_pretrained(dir));
  fs::remove_all(dir);
}

TEST(TransformerTest, BadBatchesAreRefused) {
  Transformer m = random_model();
  EXPECT_THROW(m.logits(SequenceBatch::from({{1, 2, 61}})), std::invalid_argument);  // id >= vocab
  EXPECT_THROW(SequenceBatch::from({{1}, {}}), std::invalid_argument);
  EXPECT_THROW(m.backward({}, {}), std::logic_error);  // no kept forward
}

}  // namespace
}  // namespace azr::model
