// The model's recorded decode steps (model/decode_graphs.h) on the CPU, through the test double of
// CUDA graphs in recording_ops.h. The truth each test compares against is the model without
// recordings (Transformer::set_decode_graphs(false)) on the plain CPU Bf16 table: a replay runs the
// recorded ops on the buffers as they are then, so it must equal the eager step bit for bit; the
// counts of recordings and replays follow from DecodeGraphs' rule, derived by hand.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "model/adamw.h"
#include "model/generate.h"
#include "model/presets.h"
#include "model/transformer.h"
#include "tests/model/recording_ops.h"
#include "tests/kernels/same_bits.h"

namespace azr::model {
namespace {

using test::recording_ops;
using test::recording_state;

ModelConfig tiny_config() {
  ModelConfig c = preset_config("azr-tiny");
  c.num_hidden_layers = 2;
  return c;
}

// The same weights on the recording table (recordings on) and on the plain table (off).
struct TwoModels {
  Transformer recorded, eager;
  explicit TwoModels(const ModelConfig& c)
      : recorded(Transformer::random(c, 5, 0.05f, recording_ops())),
        eager(recorded.copy_to(kernels::cpu_bf16_matmul_ops())) {
    recorded.set_decode_graphs(true);
  }
};

using azr::kernels::testing::same_bits;

TEST(DecodeGraphs, ARecordedGenerationIsTheEagerGenerationBitForBit) {
  TwoModels m(tiny_config());
  SamplingParams p;
  p.temperature = 1.f, p.seed = 3, p.max_new_tokens = 20;
  const std::vector<std::vector<int32_t>> prompt = {{4, 8, 15, 16, 23}};
  const auto want = generate(m.eager, prompt, p);
  const auto got = generate(m.recorded, prompt, p);
  ASSERT_EQ(got[0].tokens.size(), 20u);
  EXPECT_EQ(got[0].tokens, want[0].tokens);
  EXPECT_TRUE(same_bits(got[0].logprobs, want[0].logprobs));
  // 19 decode steps at one row (the first token is the prefill's): two eager, the third recorded
  // and replayed, the other 16 replayed.
  EXPECT_EQ(m.recorded.decode_graph_cache().recordings_made(), 1);
  EXPECT_EQ(m.recorded.decode_graph_cache().replays(), 17);
  EXPECT_EQ(m.eager.decode_graph_cache().recordings_made(), 0);
}

TEST(DecodeGraphs, RowCountsThatChangeAsSequencesStopGetTheirOwnRecordings) {
  TwoModels m(tiny_config());
  SamplingParams p;
  p.temperature = 0.8f, p.seed = 11, p.max_new_tokens = 24;
  const std::vector<std::vector<int32_t>> prompts = {{1, 2, 3}, {9}, {7, 7, 7, 7, 7, 7}, {30, 31}};
  // Stop tokens taken from a free run, so that sequences stop at different steps.
  const auto free_run = generate(m.eager, prompts, p);
  p.stop_token_ids = {free_run[1].tokens[4], free_run[3].tokens[9]};
  const auto want = generate(m.eager, prompts, p);
  const auto got = generate(m.recorded, prompts, p);
  size_t shortest = p.max_new_tokens, longest = 0;
  for (size_t b = 0; b < prompts.size(); b++) {
    EXPECT_EQ(got[b].tokens, want[b].tokens) << "b=" << b;
    EXPECT_TRUE(same_bits(got[b].logprobs, want[b].logprobs)) << "b=" << b;
    EXPECT_EQ(got[b].finish, want[b].finish) << "b=" << b;
    shortest = std::min(shortest, want[b].tokens.size());
    longest = std::max(longest, want[b].tokens.size());
  }
  ASSERT_LT(shortest, longest) << "the stop tokens must end some sequences early for this test to mean anything";
  EXPECT_GE(m.recorded.decode_graph_cache().recordings_made(), 1);
  EXPECT_GE(m.recorded.decode_graph_cache().replays(), 1);
}

// Step by step on one KV cache, the recorded model beside the eager one.
struct Stepper {
  TwoModels& m;
  KVCache rc, ec;
  std::vector<int32_t> slot = {0, 1, 2}, pos = {3, 1, 5};
  int32_t token = 7;
  Stepper(TwoModels& models, const ModelConfig& c)
      : m(models), rc(c, 3, 32, recording_ops()), ec(c, 3, 32, kernels::cpu_bf16_matmul_ops()) {
    const SequenceBatch prompts = SequenceBatch::from({{5, 9, 2}, {3}, {1, 2, 3, 4, 5}});
    EXPECT_TRUE(same_bits(m.recorded.prefill(rc, prompts), m.eager.prefill(ec, prompts)));
  }
  // One decode step on both; true when their logits are the same bits.
  bool step() {
    const std::vector<int32_t> tokens = {token, int32_t(token + 1), int32_t(token + 2)};
    token = (token + 5) % 200;
    std::vector<float> a, b;
    m.recorded.decode(rc, tokens, slot, pos, a);
    m.eager.decode(ec, tokens, slot, pos, b);
    for (int32_t& p : pos) p++;
    return same_bits(a, b);
  }
  // Four steps of one row count: eager, eager, recorded, replayed (DecodeGraphs' rule).
  void record_and_replay() {
    for (int i = 0; i < 4; i++) EXPECT_TRUE(step()) << "step " << i;
    EXPECT_EQ(m.recorded.decode_graph_cache().recordings_made(), 1);
    EXPECT_EQ(m.recorded.decode_graph_cache().replays(), 2);
  }
};

// The tests that begin where one row count has been recorded and replayed once.
struct DecodeGraphsRecorded : ::testing::Test {
  const ModelConfig c = tiny_config();
  TwoModels m{c};
  Stepper s{m, c};
  const DecodeGraphs& g = m.recorded.decode_graph_cache();
  void SetUp() override {
    s.record_and_replay();
    ASSERT_FALSE(HasFailure());
  }
};

TEST_F(DecodeGraphsRecorded, ReplaysReadTheWeightsAndInputsOfTheirTime) {
  // New weights, written through the host span as an optimizer step would: the next replay must
  // use them (the model re-rounds its bf16 copy outside the recording).
  for (Transformer* t : {&m.recorded, &m.eager})
    for (float& w : t->param("model.layers.1.mlp.down_proj.weight")) w *= -1.5f;
  EXPECT_TRUE(s.step());
  EXPECT_EQ(g.recordings_made(), 1);
  EXPECT_EQ(g.replays(), 3);
}

TEST(DecodeGraphs, ANewKeyDropsEveryRecording) {
  const ModelConfig c = tiny_config();
  TwoModels m(c);
  Stepper s(m, c);
  const DecodeGraphs& g = m.recorded.decode_graph_cache();
  const int64_t tapes_before = recording_state().live_tapes;
  for (int i = 0; i < 3; i++) EXPECT_TRUE(s.step());
  ASSERT_EQ(g.recordings_made(), 1);
  EXPECT_EQ(recording_state().live_tapes, tapes_before + 1);
  // An op's scratch reallocated: the recording would point at freed memory. It is released, and the
  // row count must run eagerly twice again before it is recorded anew.
  recording_state().generation++;
  for (int i = 0; i < 2; i++) EXPECT_TRUE(s.step());
  EXPECT_EQ(recording_state().live_tapes, tapes_before);
  EXPECT_EQ(g.recordings_made(), 1);
  EXPECT_EQ(g.replays(), 1);
  EXPECT_TRUE(s.step());
  EXPECT_EQ(g.recordings_made(), 2);
  // Another cache of another size: the recording is dropped again.
  KVCache other(c, 4, 32, recording_ops());
  m.recorded.prefill(other, SequenceBatch::from({{1}}));
  std::vector<float> logits;
  m.recorded.decode(other, std::vector<int32_t>{3}, std::vector<int32_t>{0}, std::vector<int32_t>{1}, logits);
  EXPECT_EQ(recording_state().live_tapes, tapes_before);
  // Turning recordings off releases them too.
  for (int i = 0; i < 3; i++) EXPECT_TRUE(s.step());
  EXPECT_EQ(recording_state().live_tapes, tapes_before + 1);
  m.recorded.set_decode_graphs(false);
  EXPECT_EQ(recording_state().live_tapes, tapes_before);
  EXPECT_TRUE(s.step());
}

// An update between decode steps ends with Transformer::release_training_buffers (trainer/policy.cpp
// calls it before the next generation), so the next step allocates its activations and GEMM inputs
// anew, at the old addresses or others, while the KV cache (the same one here, which a generation's
// new cache may be too: cudaMalloc hands back a freed block of the same size) stays. The recording
// must then be made anew, never replayed over the freed buffers. A recorded step, a training step
// and the release on both models, then steps with the old activations' memory held elsewhere (the
// allocator would hand the same block back, and a stale replay would pass unseen): the same bits,
// recorded again. Dropping the activations and the GEMM inputs from the key fails it.
TEST_F(DecodeGraphsRecorded, StepsAfterAnUpdateAreRecordedAnew) {
  const size_t step_floats = m.recorded.activation_bytes() / sizeof(float);
  const size_t gemm_inputs = m.recorded.gemm_input_bytes() / sizeof(uint16_t);
  const SequenceBatch batch = SequenceBatch::from({{4, 8, 15, 16, 23, 42}, {7, 7, 1}});
  std::vector<float> dlogp(size_t(batch.B * batch.T));
  for (size_t i = 0; i < dlogp.size(); i++) dlogp[i] = float(int(i % 7) - 3) * 0.25f;
  for (Transformer* t : {&m.recorded, &m.eager}) {
    AdamW opt(t->ops(), t->parameters().size(), {1e-2, 0.9, 0.999, 1e-8, 0.0});
    t->zero_grad();
    t->score(batch, 1.f, true);
    t->backward(dlogp, {});
    opt.step(t->parameters(), t->gradients());
    t->release_training_buffers();
    EXPECT_EQ(t->activation_bytes(), 0u);
  }
  kernels::Buffer<float> held(recording_ops(), step_floats);
  kernels::Buffer<uint16_t> held16(recording_ops(), gemm_inputs);
  for (int i = 0; i < 4; i++) EXPECT_TRUE(s.step()) << "step " << i << " after the update";
  EXPECT_EQ(g.recordings_made(), 2);
}

TEST(DecodeGraphs, AFailedRecordingIsReportedAndAbandoned) {
  const ModelConfig c = tiny_config();
  TwoModels m(c);
  Stepper s(m, c);
  for (int i = 0; i < 2; i++) EXPECT_TRUE(s.step());
  recording_state().fail_while_recording = true;
  std::vector<float> logits;
  try {
    m.recorded.decode(s.rc, std::vector<int32_t>{1, 2, 3}, s.slot, s.pos, logits);
    FAIL() << "the recording's failure was swallowed";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("model.decode_graphs = false"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(recording_state().recording);
  EXPECT_FALSE(recording_state().fail_while_recording);
  // Nothing ran in the failed step (a recording runs nothing): the same step now records and runs.
  EXPECT_TRUE(s.step());
  EXPECT_EQ(m.recorded.decode_graph_cache().recordings_made(), 1);
}

// Past kMaxRecordings row counts every recording is released, so their device memory stays bounded.
TEST(DecodeGraphs, AtMostKMaxRecordingsAreKept) {
  const ModelConfig c = tiny_config();
  Transformer m = Transformer::random(c, 5, 0.05f, recording_ops());
  m.set_decode_graphs(true);
  const int64_t rows_max = int64_t(DecodeGraphs::kMaxRecordings) + 1;
  KVCache cache(c, rows_max, 8, recording_ops());
  const int64_t tapes_before = recording_state().live_tapes;
  std::vector<float> logits;
  const auto step = [&](int64_t R) {
    std::vector<int32_t> tokens(size_t(R), 3), pos(size_t(R), 0), slot(size_t(R), 0);
    for (int64_t r = 0; r < R; r++) slot[size_t(r)] = int32_t(r);
    m.decode(cache, tokens, slot, pos, logits);
  };
  step(rows_max);  // sizes the step's buffers for every R below, so that the key stays put
  for (int64_t R = 1; R <= rows_max; R++) {
    const DecodeGraphs& g = m.decode_graph_cache();
    for (int i = 0; i < 2 * DecodeGraphs::kEagerStepsBeforeRecording + 2 && g.recordings_made() < R; i++) step(R);
    EXPECT_EQ(g.recordings_made(), R);
    // R recordings made; the one that would have been the 65th released the 64 before it.
    const int64_t live = R <= int64_t(DecodeGraphs::kMaxRecordings) ? R : 1;
    EXPECT_EQ(recording_state().live_tapes - tapes_before, live) << "R=" << R;
  }
}

// The double enforces what a CUDA recording does, or the tests above would prove less.
TEST(DecodeGraphs, TheRecordingDoubleRefusesTransfersAndReadbacks) {
  const kernels::Ops& o = recording_ops();
  float* dev = static_cast<float*>(o.alloc_zeroed(sizeof(float) * 4));
  const float host[4] = {1, 2, 3, 4};
  o.recorder.begin();
  EXPECT_THROW(o.upload(dev, host, sizeof host), std::runtime_error);
  EXPECT_THROW(o.alloc_zeroed(16), std::runtime_error);
  EXPECT_THROW(o.sum_squares(dev, 4), std::runtime_error);
  o.scale(dev, 2.f, 4);  // recorded, not run
  kernels::OpGraph* g = o.recorder.end();
  float back[4];
  o.download(back, dev, sizeof back);
  EXPECT_EQ(back[0], 0.f);
  o.upload(dev, host, sizeof host);
  o.recorder.replay(g);
  o.recorder.replay(g);
  o.download(back, dev, sizeof back);
  EXPECT_EQ(back[3], 16.f);  // 4 * 2 * 2
  o.recorder.release(g);
  o.release(dev);
}

}  // namespace
}  // namespace azr::model
