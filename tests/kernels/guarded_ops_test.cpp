// The cpu-guarded backend and choosing a backend by name. cpu-guarded is this machine's stand-in
// for a GPU (none is here): its memory traps every host access outside the op table, and its
// results are the CPU backend's bit for bit. So a code path that runs on it and gives the CPU's
// answer reaches the model only through upload, download and the ops, as it must on a GPU.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/buffer.h"
#include "kernels/guarded/guarded_ops.h"
#include "model/adamw.h"
#include "model/byte_tokenizer.h"
#include "model/generate.h"
#include "model/presets.h"
#include "model/transformer.h"
#include "trainer/dist.h"
#include "trainer/policy.h"
#ifdef AZR_HAVE_CUDA_KERNELS
#include "kernels/cuda/cuda_ops.h"
#endif

namespace azr {
namespace {

using kernels::cpu_ops;
using kernels::guarded_cpu_ops;

std::vector<float> host_copy(const kernels::Ops& ops, std::span<const float> dev) {
  std::vector<float> h(dev.size());
  ops.download(h.data(), dev.data(), dev.size_bytes());
  return h;
}

size_t differing(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return std::max(a.size(), b.size());
  size_t n = 0;
  for (size_t i = 0; i < a.size(); i++) n += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
  return n;
}

TEST(GuardedOpsDeathTest, HostAccessOutsideTheOpTableStopsWithAMessage) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  kernels::Buffer<float> b(guarded_cpu_ops(), 1000);
  const float one = 1.f;
  b.upload(&one, 1);
  float back = 0;
  b.download(&back, 1);
  EXPECT_EQ(back, 1.f);  // through the table: fine
  volatile float* raw = b.data();
  EXPECT_EXIT({ (void)raw[999]; }, ::testing::ExitedWithCode(134),
              "host code touched cpu-guarded backend memory at 0x[0-9a-f]+ \\(in the allocation at 0x[0-9a-f]+\\)");
  EXPECT_EXIT({ raw[0] = 2.f; }, ::testing::ExitedWithCode(134), "outside the op table");
}

// A started download delivers at its wait, as a GPU's does: until then the host bytes are not the
// source's (0xA5 filler), then they are what the source held at the start, whatever was uploaded
// since. A ticket is waited for once.
TEST(GuardedOps, StartedDownloadsDeliverAtTheirWait) {
  const kernels::Ops& ops = guarded_cpu_ops();
  kernels::Buffer<int32_t> b(ops, 4);
  const std::vector<int32_t> first = {1, 2, 3, 4}, second = {5, 6, 7, 8};
  b.upload(first.data(), 4);
  std::vector<int32_t> host(4, 0);
  const int64_t ticket = ops.download_start(host.data(), b.data(), sizeof(int32_t) * 4);
  b.upload(second.data(), 4);
  EXPECT_EQ(host, std::vector<int32_t>(4, int32_t(0xA5A5A5A5)));
  ops.download_wait(ticket);
  EXPECT_EQ(host, first);
  EXPECT_THROW(ops.download_wait(ticket), std::invalid_argument);
  EXPECT_THROW(ops.download_wait(ticket + 1), std::invalid_argument);
}

// Generation launches each step before it reads the last one's tokens (model/generate.cpp): with
// sequences that stop early, it must read each step's only after its wait, and sample what the CPU
// samples, bit for bit.
TEST(GuardedOps, GenerationLaunchedAheadReadsEachStepAfterItsWait) {
  const model::ModelConfig c = model::preset_config("azr-tiny");
  const std::vector<std::vector<int32_t>> prompts = {{5, 9, 2}, {3}, {8, 1, 4, 4}, {5, 9, 2}};
  model::SamplingParams sp;
  sp.temperature = 0.7f, sp.max_new_tokens = 12, sp.seed = 4;
  model::Transformer free = model::Transformer::random(c, 5, 0.05f);
  const auto free_run = model::generate(free, prompts, sp);
  sp.stop_token_ids = {free_run[1].tokens[2], free_run[2].tokens[5]};
  std::vector<model::Completion> out[2];
  for (const kernels::Ops* ops : {&cpu_ops(), &guarded_cpu_ops()}) {
    model::Transformer m = model::Transformer::random(c, 5, 0.05f, *ops);
    out[ops == &guarded_cpu_ops()] = model::generate(m, prompts, sp);
  }
  int stopped_early = 0;
  for (size_t b = 0; b < prompts.size(); b++) {
    EXPECT_EQ(out[1][b].tokens, out[0][b].tokens) << b;
    EXPECT_EQ(differing(out[1][b].logprobs, out[0][b].logprobs), 0u) << b;
    stopped_early += out[0][b].finish == model::FinishReason::StopToken && out[0][b].tokens.size() < 12;
  }
  EXPECT_GE(stopped_early, 2);
}

// Score, backward, a clipped AdamW step, sampling and a checkpoint round trip on both backends.
TEST(GuardedOps, TheModelRunsThroughTheOpTableAloneAndMatchesTheCpuBitForBit) {
  const model::ModelConfig c = model::preset_config("azr-tiny");
  const model::SequenceBatch batch =
      model::SequenceBatch::from({{5, 9, 2, 7, 7, 1}, {3, 3}, {8, 1, 4, 4, 2, 6, 9, 10, 11}});
  std::vector<float> dlogp(size_t(batch.B * batch.T), -0.5f), dent(dlogp.size(), 0.01f);
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / ("azr-guarded-" + std::to_string(getpid()));
  struct Out {
    std::vector<float> logp, params, m;
    std::vector<int32_t> tokens;
    std::vector<float> sampled_logp;
  };
  auto run = [&](const kernels::Ops& ops, bool recompute, const std::string& save_as) {
    model::Transformer m = model::Transformer::random(c, 5, 0.05f, ops);
    m.set_recompute(recompute);
    model::AdamW opt(ops, m.parameters().size(), {1e-3, 0.9, 0.999, 1e-8, 0.01});
    Out o;
    o.logp = m.score(batch, 0.9f, true).logp;
    m.backward(dlogp, dent);
    model::clip_grad_norm(ops, m.gradients(), 0.5);
    opt.step(m.parameters(), m.gradients());
    o.params = host_copy(ops, m.parameters());
    o.m = host_copy(ops, opt.m());
    model::SamplingParams sp;
    sp.temperature = 0.8f, sp.top_p = 0.9f, sp.max_new_tokens = 6, sp.seed = 11;
    // A prompt twice: its second copy's keys, values and logits are copied through the op table.
    for (const model::Completion& comp : model::generate(m, {{5, 9, 2}, {3}, {5, 9, 2}}, sp)) {
      o.tokens.insert(o.tokens.end(), comp.tokens.begin(), comp.tokens.end());
      o.sampled_logp.insert(o.sampled_logp.end(), comp.logprobs.begin(), comp.logprobs.end());
    }
    m.save_pretrained(dir / save_as);
    opt.save(dir / save_as / "optimizer.safetensors");
    return o;
  };
  const Out cpu = run(cpu_ops(), false, "cpu"), guarded = run(guarded_cpu_ops(), true, "guarded");
  EXPECT_EQ(differing(guarded.logp, cpu.logp), 0u);
  EXPECT_EQ(differing(guarded.params, cpu.params), 0u);
  EXPECT_EQ(differing(guarded.m, cpu.m), 0u);
  EXPECT_EQ(guarded.tokens, cpu.tokens);
  EXPECT_EQ(cpu.tokens.size(), 18u);  // 3 sequences of 6 new tokens
  EXPECT_EQ(differing(guarded.sampled_logp, cpu.sampled_logp), 0u);
  // The guarded checkpoint loads on either backend and holds the updated weights.
  for (const kernels::Ops* ops : {&cpu_ops(), &guarded_cpu_ops()}) {
    model::Transformer back = model::Transformer::from_pretrained(dir / "guarded", *ops);
    EXPECT_EQ(differing(host_copy(*ops, back.parameters()), cpu.params), 0u) << ops->name;
    model::AdamW opt(*ops, back.parameters().size());
    opt.load(dir / "guarded" / "optimizer.safetensors");
    EXPECT_EQ(differing(host_copy(*ops, opt.m()), cpu.m), 0u) << ops->name;
  }
  std::filesystem::remove_all(dir);
}

// A stand-in for a second rank that holds the same gradients: the sum doubles every value.
class TwoIdenticalRanks final : public trainer::dist::Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 2; }
  std::string backend() const override { return "test"; }
  void allreduce_sum(std::span<float> d) override {
    float_sums++;
    for (float& x : d) x += x;
  }
  void allreduce_sum(std::span<double> d) override {
    for (double& x : d) x += x;
  }
  void broadcast(std::string&, int) override {}
  std::vector<std::string> allgather(const std::string& b) override { return {b, b}; }
  void barrier() override {}
  int float_sums = 0;  // the gradients are the only floats the update sums
};

// A stand-in for NCCL, which needs GPUs: the same doubling, on the backend's memory through the
// op table's copies; it keeps what it was given.
class DoublingDeviceReducer final : public trainer::dist::DeviceReducer {
 public:
  explicit DoublingDeviceReducer(const kernels::Ops& ops) : ops_(ops) {}
  void allreduce_sum(std::span<float> d) override {
    calls++;
    given = d;
    std::vector<float> host(d.size());
    ops_.download(host.data(), d.data(), d.size_bytes());
    for (float& x : host) x += x;
    ops_.upload(d.data(), host.data(), d.size_bytes());
  }
  int calls = 0;
  std::span<float> given;

 private:
  const kernels::Ops& ops_;
};

// The host communicators read host memory, so a backend without it stages the gradients through
// a host copy; the update must be the CPU backend's, which all-reduces in place.
TEST(GuardedOps, PolicyUpdateAcrossRanksStagesGradientsThroughTheHost) {
  std::vector<trainer::TrainSequence> seqs = {{{5, 9, 2}, {7, 1, 4}, {-1.2f, -0.7f, -2.0f}, 0.8f},
                                              {{3, 3}, {8, 8, 8, 8}, {-0.1f, -0.3f, -0.2f, -0.9f}, -0.5f}};
  auto run = [&](const kernels::Ops& ops) {
    trainer::Policy p(model::Transformer::random(model::preset_config("azr-tiny"), 9, 0.05f, ops),
                      std::make_unique<model::ByteTokenizer>(), {1e-3, 0.9, 0.999, 1e-8, 0.0});
    TwoIdenticalRanks comm;
    trainer::UpdateSettings s;
    s.micro_batch_size = 1;
    const trainer::UpdateStats st = p.update(seqs, 7.0, comm, s);
    std::vector<float> out = host_copy(ops, p.model().parameters());
    out.push_back(float(st.grad_norm));
    return out;
  };
  const std::vector<float> cpu = run(cpu_ops()), guarded = run(guarded_cpu_ops());
  EXPECT_EQ(differing(guarded, cpu), 0u);
}

// With a DeviceReducer (NCCL on a GPU), the gradients are summed where they are, once per update,
// over exactly the model's gradient buffer, and never pass through the host communicator; the
// update is the CPU backend's.
TEST(GuardedOps, PolicyUpdateAcrossRanksSumsDeviceGradientsWithTheDeviceReducer) {
  std::vector<trainer::TrainSequence> seqs = {{{5, 9, 2}, {7, 1, 4}, {-1.2f, -0.7f, -2.0f}, 0.8f},
                                              {{3, 3}, {8, 8, 8, 8}, {-0.1f, -0.3f, -0.2f, -0.9f}, -0.5f}};
  trainer::UpdateSettings s;
  s.micro_batch_size = 1;
  auto policy = [](const kernels::Ops& ops) {
    return trainer::Policy(model::Transformer::random(model::preset_config("azr-tiny"), 9, 0.05f, ops),
                           std::make_unique<model::ByteTokenizer>(), {1e-3, 0.9, 0.999, 1e-8, 0.0});
  };
  trainer::Policy cpu = policy(cpu_ops());
  TwoIdenticalRanks cpu_comm;
  const double cpu_norm = cpu.update(seqs, 7.0, cpu_comm, s).grad_norm;

  trainer::Policy guarded = policy(guarded_cpu_ops());
  auto reducer = std::make_unique<DoublingDeviceReducer>(guarded_cpu_ops());
  DoublingDeviceReducer* seen = reducer.get();
  guarded.set_device_reducer(std::move(reducer));
  TwoIdenticalRanks comm;
  const double norm = guarded.update(seqs, 7.0, comm, s).grad_norm;
  EXPECT_EQ(seen->calls, 1);
  EXPECT_EQ(seen->given.data(), guarded.model().gradients().data());
  EXPECT_EQ(seen->given.size(), guarded.model().gradients().size());
  EXPECT_EQ(comm.float_sums, 0);
  EXPECT_EQ(cpu_comm.float_sums, 1);
  EXPECT_EQ(norm, cpu_norm);
  EXPECT_EQ(differing(host_copy(guarded_cpu_ops(), guarded.model().parameters()),
                      host_copy(cpu_ops(), cpu.model().parameters())),
            0u);
}

// An update leaves none of the buffers its step grew (the memory plan has a step's training and
// generation never hold theirs at once: memory_plan.h), and what comes after runs on memory of
// its own: a generation, then a second update, the CPU's bit for bit on the guarded backend (a
// pointer kept into a released buffer would stop it with the address).
TEST(GuardedOps, AnUpdateLeavesNoTrainingBuffersForTheGenerationAfterIt) {
  std::vector<trainer::TrainSequence> seqs = {{{5, 9, 2}, {7, 1, 4}, {-1.2f, -0.7f, -2.0f}, 0.8f},
                                              {{3, 3}, {8, 8, 8, 8}, {-0.1f, -0.3f, -0.2f, -0.9f}, -0.5f}};
  trainer::UpdateSettings s;
  s.micro_batch_size = 1;
  auto run = [&](const kernels::Ops& ops) {
    trainer::Policy p(model::Transformer::random(model::preset_config("azr-tiny"), 9, 0.05f, ops),
                      std::make_unique<model::ByteTokenizer>(), {1e-3, 0.9, 0.999, 1e-8, 0.0});
    trainer::dist::SingleCommunicator comm;
    p.update(seqs, 7.0, comm, s);
    EXPECT_EQ(p.model().activation_bytes(), 0u) << ops.name;
    EXPECT_EQ(p.model().backward_scratch_bytes(), 0u) << ops.name;
    EXPECT_EQ(p.model().head_bytes(), 0u) << ops.name;
    EXPECT_EQ(p.model().gemm_input_bytes(), 0u) << ops.name;
    model::SamplingParams g;
    g.temperature = 0, g.max_new_tokens = 4;
    std::vector<float> out;
    for (const model::Completion& c : model::generate(p.model(), {{5, 9, 2}, {3, 3, 1, 7}}, g))
      out.insert(out.end(), c.tokens.begin(), c.tokens.end());
    out.push_back(float(p.update(seqs, 7.0, comm, s).grad_norm));
    const std::vector<float> params = host_copy(ops, p.model().parameters());
    out.insert(out.end(), params.begin(), params.end());
    return out;
  };
  EXPECT_EQ(differing(run(guarded_cpu_ops()), run(cpu_ops())), 0u);
  // With bf16 GEMMs, whose rounded inputs (gemm_input_bytes) are released too.
  EXPECT_EQ(differing(run(guarded_cpu_ops(kernels::MatmulPrecision::Bf16)), run(kernels::cpu_bf16_matmul_ops())), 0u);
}

// Ranks of one machine on one device split its memory for their plans (each planned for the whole
// of it before): by hand, 5 ranks over 2 GPUs put ranks 0, 2, 4 on GPU 0 and 1, 3 on GPU 1; 3
// ranks over 4 GPUs leave each alone; on the CPU every rank shares.
TEST(Backends, RanksSharingADeviceSplitItsMemory) {
  EXPECT_EQ(kernels::ranks_sharing(0, 5, 2), 3);
  EXPECT_EQ(kernels::ranks_sharing(4, 5, 2), 3);
  EXPECT_EQ(kernels::ranks_sharing(1, 5, 2), 2);
  EXPECT_EQ(kernels::ranks_sharing(3, 5, 2), 2);
  EXPECT_EQ(kernels::ranks_sharing(2, 3, 4), 1);
  EXPECT_EQ(kernels::ranks_sharing(0, 1, 8), 1);
  EXPECT_EQ(kernels::ranks_sharing(2, 4, 1), 4);
  EXPECT_THROW(kernels::ranks_sharing(5, 5, 2), std::invalid_argument);
  EXPECT_THROW(kernels::ranks_sharing(0, 5, 0), std::invalid_argument);
  const double whole = kernels::device_memory_bytes("cpu");
  EXPECT_EQ(kernels::device_memory_bytes("cpu", 0, 4), whole / 4);
  EXPECT_EQ(kernels::device_memory_bytes("cpu", 3, 4), whole / 4);
}

// model.matmul_precision and --matmul-precision default to "auto": bf16 GEMMs on a GPU, fp32 on the
// CPU devices; the named precisions whatever the device; anything else names the three.
TEST(Backends, AutoMatmulPrecisionIsBf16OnAGpuAndFp32Elsewhere) {
  using kernels::MatmulPrecision;
  using kernels::resolve_matmul_precision;
  EXPECT_EQ(resolve_matmul_precision("auto", "cuda"), MatmulPrecision::Bf16);
  EXPECT_EQ(resolve_matmul_precision("auto", "cpu"), MatmulPrecision::Fp32);
  EXPECT_EQ(resolve_matmul_precision("auto", "cpu-guarded"), MatmulPrecision::Fp32);
  EXPECT_EQ(resolve_matmul_precision("fp32", "cuda"), MatmulPrecision::Fp32);
  EXPECT_EQ(resolve_matmul_precision("bf16", "cpu"), MatmulPrecision::Bf16);
  try {
    resolve_matmul_precision("fp16", "cuda");
    ADD_FAILURE() << "fp16 resolved";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "unknown matmul precision 'fp16' (known: auto, fp32, bf16)");
  }
}

TEST(Backends, NamesResolveAndUnusableDevicesSayWhy) {
  EXPECT_EQ(&kernels::backend_ops("cpu"), &cpu_ops());
  EXPECT_EQ(&kernels::backend_ops("cpu-guarded"), &guarded_cpu_ops());
  EXPECT_TRUE(cpu_ops().host_memory);
  EXPECT_FALSE(guarded_cpu_ops().host_memory);
  // Host devices have no stream to order work with.
  EXPECT_EQ(kernels::device_stream("cpu"), nullptr);
  EXPECT_EQ(kernels::device_stream("cpu-guarded"), nullptr);
  // Both entry points refuse a device name the same way.
  auto expect_refused = [](const std::string& device, const std::string& message) {
    for (const auto& call : std::vector<std::function<void()>>{[&] { kernels::backend_ops(device); },
                                                                [&] { kernels::device_stream(device); }}) {
      try {
        call();
        ADD_FAILURE() << "device '" << device << "' was accepted";
      } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
      }
    }
  };
  expect_refused("tpu", "unknown device 'tpu' (known: cpu, ");
#ifdef AZR_HAVE_CUDA_KERNELS
  std::string why;
  if (kernels::cuda_device_count(&why) > 0) {
    EXPECT_EQ(&kernels::backend_ops("cuda"), &kernels::cuda_ops());
    EXPECT_FALSE(kernels::cuda_ops().host_memory);
    EXPECT_NE(kernels::device_stream("cuda"), nullptr);
    EXPECT_EQ(kernels::device_stream("cuda"), kernels::cuda_op_stream());
    return;
  }
  const std::string expected = "device 'cuda': no usable GPU (" + why + ")";
#else
  const std::string expected = "built without the CUDA backend";
#endif
  expect_refused("cuda", expected);
}

}  // namespace
}  // namespace azr
