// The op-by-op profile (kernels/op_profile.h): a profiled table computes exactly what its base
// does, counts each op as often as the model's architecture calls it, times only while an
// OpProfile collects, and shares its base's memory.
#include "kernels/op_profile.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/buffer.h"
#include "kernels/guarded/guarded_ops.h"
#include "model/adamw.h"
#include "model/presets.h"
#include "model/transformer.h"
#include "tests/model/recording_ops.h"
#include "tests/kernels/same_bits.h"

namespace azr {
namespace {

using kernels::OpProfile;
using kernels::OpTime;
using kernels::profiled_ops;

const model::SequenceBatch& batch() {
  static const model::SequenceBatch b =
      model::SequenceBatch::from({{5, 9, 2, 7, 7, 1}, {3, 3}, {8, 1, 4, 4, 2, 6, 9, 10, 11}});
  return b;
}

struct StepResult {
  std::vector<float> logp, grads, params;
};

// Score, backward, a clipped AdamW step; everything read back through the table.
StepResult train_step(const kernels::Ops& ops, bool recompute = false) {
  model::Transformer m = model::Transformer::random(model::preset_config("azr-tiny"), 11, 0.05f, ops);
  m.set_recompute(recompute);
  std::vector<float> dlogp(size_t(batch().B * batch().T), -0.5f), dent(dlogp.size(), 0.01f);
  StepResult r;
  r.logp = m.score(batch(), 0.9f, true).logp;
  m.backward(dlogp, dent);
  model::clip_grad_norm(ops, m.gradients(), 0.5);
  r.grads.resize(m.gradients().size());
  ops.download(r.grads.data(), m.gradients().data(), m.gradients().size_bytes());
  model::AdamW opt(ops, m.parameters().size(), {1e-3, 0.9, 0.999, 1e-8, 0.01});
  opt.step(m.parameters(), m.gradients());
  r.params.resize(m.parameters().size());
  ops.download(r.params.data(), m.parameters().data(), m.parameters().size_bytes());
  return r;
}

using azr::kernels::testing::same_bits;

std::map<std::string, int64_t> calls_by_op(const std::vector<OpTime>& t) {
  std::map<std::string, int64_t> m;
  for (const OpTime& o : t) m[o.op] = o.calls;
  return m;
}

TEST(ProfiledOps, AModelOnTheProfiledTableIsTheBaseModelBitForBit) {
  for (const kernels::Ops* base : {&kernels::cpu_ops(), &kernels::cpu_bf16_matmul_ops(), &kernels::guarded_cpu_ops()}) {
    SCOPED_TRACE(base->name);
    const StepResult want = train_step(*base);
    const StepResult plain = train_step(profiled_ops(*base));
    StepResult timed;
    {
      OpProfile profile;
      timed = train_step(profiled_ops(*base));
      EXPECT_FALSE(profile.take().empty());
    }
    for (const StepResult* got : {&plain, const_cast<const StepResult*>(&timed)}) {
      EXPECT_TRUE(same_bits(got->logp, want.logp));
      EXPECT_TRUE(same_bits(got->grads, want.grads));
      EXPECT_TRUE(same_bits(got->params, want.params));
    }
  }
}

// The counts follow from the architecture: each of the L decoder layers has seven linear maps
// (q, k, v, o, gate, up, down), two RMSNorms, RoPE on q and on k, and one attention; the model
// adds the embedding, a final norm and the LM head (one chunk of logits at this size). Backward
// runs each once more. With recomputation each layer's forward is rerun in backward up to gate
// and up (README: the down projection's output is the next layer's kept input), six of the
// seven linear maps and the attention.
TEST(OpProfile, CountsEachOpAsOftenAsTheArchitectureCallsIt) {
  const int64_t L = model::preset_config("azr-tiny").num_hidden_layers;
  ASSERT_EQ(L, 4);
  for (bool recompute : {false, true}) {
    SCOPED_TRACE(recompute ? "recompute" : "keep everything");
    const kernels::Ops& ops = profiled_ops(kernels::cpu_ops());
    model::Transformer m = model::Transformer::random(model::preset_config("azr-tiny"), 3, 0.05f, ops);
    m.set_recompute(recompute);
    std::vector<float> dlogp(size_t(batch().B * batch().T), -0.5f), dent(dlogp.size(), 0.01f);
    OpProfile profile;
    m.score(batch(), 1.f, true);
    const std::map<std::string, int64_t> fwd = calls_by_op(profile.take());
    EXPECT_EQ(fwd.at("embedding_forward"), 1);
    EXPECT_EQ(fwd.at("matmul_forward"), 7 * L + 1);
    EXPECT_EQ(fwd.at("rmsnorm_forward"), 2 * L + 1);
    EXPECT_EQ(fwd.at("rope_forward"), 2 * L);
    EXPECT_EQ(fwd.at("attention_forward"), L);
    EXPECT_EQ(fwd.at("token_stats"), 1);
    EXPECT_EQ(fwd.count("matmul_backward"), 0u);
    EXPECT_EQ(fwd.count("attention_backward"), 0u);

    m.backward(dlogp, dent);
    const std::map<std::string, int64_t> bwd = calls_by_op(profile.take());
    EXPECT_EQ(bwd.at("token_stats_backward"), 1);
    EXPECT_EQ(bwd.at("matmul_backward"), 7 * L + 1);
    EXPECT_EQ(bwd.at("rmsnorm_backward"), 2 * L + 1);
    EXPECT_EQ(bwd.at("rope_backward"), 2 * L);
    EXPECT_EQ(bwd.at("attention_backward"), L);
    EXPECT_EQ(bwd.at("embedding_backward"), 1);
    EXPECT_EQ(bwd.count("matmul_forward") ? bwd.at("matmul_forward") : 0, recompute ? 6 * L : 0);
    EXPECT_EQ(bwd.count("attention_forward") ? bwd.at("attention_forward") : 0, recompute ? L : 0);
    EXPECT_EQ(bwd.count("embedding_forward"), 0u);
  }
}

std::map<std::string, double> flops_by_op(const std::vector<OpTime>& t) {
  std::map<std::string, double> m;
  for (const OpTime& o : t) m[o.op] = o.flops;
  return m;
}

// The FLOPs of single calls, by hand: a 3 x 5 by 5 x 7 product is 105 multiply-adds; its backward
// does one such product per gradient asked for; causal attention over B = 2 sequences of T = 4
// with 2 heads of d = 8 takes q.k over 1 + 2 + 3 + 4 = 10 (query, key) pairs per head, 8
// multiply-adds each, and as many for p v: 2 x 2 x 2 x 10 x 8 x 2 = 1,280; backward five products.
TEST(OpProfile, CountsTheFlopsOfProductsFromTheirArguments) {
  const kernels::Ops& ops = profiled_ops(kernels::cpu_ops());
  kernels::Buffer<float> x(ops, 64), w(ops, 64), y(ops, 64), dx(ops, 64), dw(ops, 64), db(ops, 64);
  const auto one = [&](auto call) {
    OpProfile profile;
    call();
    const std::vector<OpTime> t = profile.take();
    EXPECT_EQ(t.size(), 1u);
    return t.empty() ? -1.0 : t[0].flops;
  };
  EXPECT_EQ(one([&] { ops.matmul_forward(y.data(), x.data(), w.data(), nullptr, 3, 5, 7); }), 210.0);
  EXPECT_EQ(one([&] { ops.matmul_backward(dx.data(), nullptr, nullptr, y.data(), x.data(), w.data(), 3, 5, 7); }),
            210.0);
  EXPECT_EQ(one([&] { ops.matmul_backward(dx.data(), dw.data(), db.data(), y.data(), x.data(), w.data(), 3, 5, 7); }),
            420.0);
  EXPECT_EQ(one([&] { ops.matmul_backward(nullptr, nullptr, db.data(), y.data(), x.data(), w.data(), 3, 5, 7); }), 0.0);
  EXPECT_EQ(one([&] { ops.fill_zero(x.data(), 64); }), 0.0);
  // The Bf16 table's product on a bf16 output gradient: the same count, from its own arguments.
  const kernels::Ops& ops16 = profiled_ops(kernels::cpu_bf16_matmul_ops());
  kernels::Buffer<uint16_t> y16(ops16, 64), x16(ops16, 64), w16(ops16, 64);
  EXPECT_EQ(one([&] {
              ops16.matmul_backward_g16(dx.data(), dw.data(), y16.data(), x16.data(), w16.data(), 3, 5, 7,
                                        kernels::kWriteDinp);
            }),
            420.0);
  EXPECT_EQ(one([&] {
              ops16.matmul_backward_g16(dx.data(), nullptr, y16.data(), nullptr, w16.data(), 3, 5, 7,
                                        kernels::kAddBoth);
            }),
            210.0);

  const int64_t B = 2, T = 4, heads = 2, d = 8;
  kernels::Buffer<float> q(ops, B * T * heads * d), k(ops, B * T * d), v(ops, B * T * d), out(ops, B * T * heads * d),
      lse(ops, B * heads * T), dq(ops, B * T * heads * d), dk(ops, B * T * d), dv(ops, B * T * d);
  const kernels::AttentionShape s{B, T, heads, 1, d, T * d, nullptr};
  EXPECT_EQ(one([&] { ops.attention_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), s); }), 1280.0);
  EXPECT_EQ(one([&] {
              ops.attention_backward(dq.data(), dk.data(), dv.data(), out.data(), out.data(), lse.data(), q.data(),
                                     k.data(), v.data(), s);
            }),
            3200.0);
}

// A training forward's GEMM FLOPs are the architecture's: 2 per multiply-add of the seven linear
// maps of each layer over all B x T rows, and of the LM head over the rows that have a next token.
TEST(OpProfile, AForwardsGemmFlopsAreTheArchitecturesMultiplyAdds) {
  const model::ModelConfig c = model::preset_config("azr-tiny");
  const kernels::Ops& ops = profiled_ops(kernels::cpu_ops());
  model::Transformer m = model::Transformer::random(c, 3, 0.05f, ops);
  OpProfile profile;
  m.score(batch(), 1.f, true);
  const double H = double(c.hidden_size), I = double(c.intermediate_size);
  const double qd = double(c.num_attention_heads * c.head_dim), kd = double(c.num_key_value_heads * c.head_dim);
  const double per_row = H * qd + 2 * H * kd + qd * H + 3 * H * I;  // q, k, v, o, gate, up, down
  const double rows = double(batch().B * batch().T);  // padding rows run through the layers too
  double head_rows = 0;
  for (int32_t len : batch().lengths) head_rows += len - 1;
  const double want = 2 * rows * per_row * double(c.num_hidden_layers) + 2 * head_rows * H * double(c.vocab_size);
  EXPECT_EQ(flops_by_op(profile.take()).at("matmul_forward"), want);
}

TEST(OpProfile, CountsOnlyWhileCollectingAndTakeStartsAfresh) {
  const kernels::Ops& ops = profiled_ops(kernels::cpu_ops());
  kernels::Buffer<float> x(ops, 1000);
  ops.fill_zero(x.data(), 1000);  // before any profile: not counted
  {
    OpProfile profile;
    ops.fill_zero(x.data(), 1000);
    ops.scale(x.data(), 2.f, 1000);
    ops.scale(x.data(), 2.f, 1000);
    kernels::cpu_ops().scale(x.data(), 2.f, 1000);  // the base table: not counted
    const std::vector<OpTime> t = profile.take();
    const std::map<std::string, int64_t> calls = calls_by_op(t);
    EXPECT_EQ(calls, (std::map<std::string, int64_t>{{"fill_zero", 1}, {"scale", 2}}));
    EXPECT_TRUE(profile.take().empty());
    EXPECT_THROW(OpProfile second, std::logic_error);
  }
  ops.scale(x.data(), 2.f, 1000);  // after the profile: not counted
  OpProfile again;
  EXPECT_TRUE(again.take().empty());
}

// The ops of a step are timed inside the step, one after another, so their times add up to no
// more than the step's; the list is ordered by time.
TEST(OpProfile, OpTimesAreOrderedAndAddUpToNoMoreThanTheStep) {
  const kernels::Ops& ops = profiled_ops(kernels::cpu_ops());
  OpProfile profile;
  const auto t0 = std::chrono::steady_clock::now();
  train_step(ops);
  const double step = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::vector<OpTime> t = profile.take();
  ASSERT_GT(t.size(), 10u);
  double sum = 0;
  for (size_t i = 0; i < t.size(); i++) {
    EXPECT_GT(t[i].calls, 0);
    EXPECT_GE(t[i].seconds, 0.0);
    if (i > 0) {
      EXPECT_GE(t[i - 1].seconds, t[i].seconds);
    }
    sum += t[i].seconds;
  }
  EXPECT_GT(sum, 0.0);
  EXPECT_LE(sum, step);
}

TEST(ProfiledOps, SharesItsBasesMemoryKeepsNullOpsNullAndCannotRecord) {
  const kernels::Ops& base = test::recording_ops();  // a table with a recorder
  const kernels::Ops& p = profiled_ops(base);
  EXPECT_EQ(&p, &profiled_ops(base));  // one profiled table per base
  EXPECT_EQ(std::string(p.name), std::string(base.name) + "+profiled");
  EXPECT_EQ(p.host_memory, base.host_memory);
  ASSERT_NE(base.recorder.begin, nullptr);
  EXPECT_EQ(p.recorder.begin, nullptr);
  EXPECT_EQ(p.recorder.replay, nullptr);

  const kernels::Ops& fp32 = profiled_ops(kernels::guarded_cpu_ops());
  EXPECT_EQ(fp32.to_bf16, nullptr);  // the Fp32 table has no bf16 ops, and neither has its profile
  EXPECT_EQ(fp32.decode_qkv_w16, nullptr);
  EXPECT_NE(fp32.matmul_forward, nullptr);

  // Memory from the base, written through the profile, read back through the base.
  const kernels::Ops& g = kernels::guarded_cpu_ops();
  float* dev = static_cast<float*>(g.alloc_zeroed(4 * sizeof(float)));
  const float host[4] = {1, 2, 3, 4};
  fp32.upload(dev, host, sizeof host);
  fp32.scale(dev, 0.5f, 4);
  float back[4] = {};
  g.download(back, dev, sizeof back);
  EXPECT_EQ(std::vector<float>(back, back + 4), (std::vector<float>{0.5f, 1, 1.5f, 2}));
  fp32.release(dev);
}

// At most 8 distinct tables; the ones already profiled keep working past the limit.
TEST(ProfiledOps, RefusesANinthTable) {
  const kernels::Ops& ops = profiled_ops(kernels::cpu_ops());
  static std::vector<std::unique_ptr<kernels::Ops>> copies;
  int made = 0;
  bool refused = false;
  for (int i = 0; i < 9 && !refused; i++) {
    copies.push_back(std::make_unique<kernels::Ops>(kernels::cpu_ops()));
    try {
      profiled_ops(*copies.back());
      made++;
    } catch (const std::logic_error& e) {
      refused = true;
      EXPECT_NE(std::string(e.what()).find("more than 8"), std::string::npos);
    }
  }
  EXPECT_TRUE(refused);
  EXPECT_LE(made, 7);
  EXPECT_EQ(&ops, &profiled_ops(kernels::cpu_ops()));
  kernels::Buffer<float> x(ops, 4);
  ops.fill_zero(x.data(), 4);
}

}  // namespace
}  // namespace azr
