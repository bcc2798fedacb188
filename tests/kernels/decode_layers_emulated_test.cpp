// The persistent decode kernel (kernels/cuda/decode_layers.cuh) on the CPU, through
// tests/kernels/cuda_emulation.h, a stand-in for the device, so that its logic runs in CI, where
// there is no GPU: every layer's five phases in order, the turns of each phase's grid taken by
// the block (here one block takes them all: the emulation runs blocks one after another, so two
// could not meet at a grid barrier), the layers' tensors at their strides, the attention's splits
// merged by their last block, the products' warps splitting a row. Checked against two truths:
//   - the five launches a layer it replaces (gemv.cuh's and attention_decode_tiles.cuh's kernels,
//     emulated, with the same geometry): every output and cache entry bit for bit, which is the
//     kernel's promise (ops.h, decode_layers_w16);
//   - the CPU Bf16 table's ops (kernels/cpu) composed as decode_layers_w16 defines the op
//     (kernels/decode_layers.h): the residual stream within the bf16 roundings' reach.
// And what it asks L2 for before its barriers: weights only, whole 16-byte units. What the
// emulation cannot show (blocks meeting at the barrier, the cooperative launch, speed) is for the
// GPU tests (CudaModel.PersistentDecodeLayers...) and model_speed_bench.
//
// Small shapes: here every CUDA thread runs in turn on one core (tests/kernels/emulation_fibers.h).
#include "tests/kernels/cuda_emulation.h"  // first: it stands in for the CUDA headers
//
#include "kernels/cuda/decode_layers.cuh"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "kernels/decode_layers.h"
#include "kernels/ops.h"
#include "tests/kernels/gemv_cases.h"
#include "tests/kernels/random_inputs.h"

namespace azr::kernels::cuda_detail::decode_layers {
namespace {

using testing::bf16_bits;
using testing::randn;

constexpr uint64_t kWarpsPerBlock = uint64_t(kThreads) / 32;

struct Case {
  int64_t H, heads, kv_heads, d, I, layers, capacity;
  int32_t pos;
  int splits;         // the attention's splits of whole tiles (attention.cu's decode_split picks them on a GPU)
  bool mlp_biases;    // o, gate, up and down biases too (Qwen2.5 has q, k and v's only)
  bool round_gate_up;
};

// One layer's tensors, at these offsets (elements) from the layer's start, in both flat buffers:
// the fp32 parameters (norms, biases) and their bf16 copy (the weight matrices), as the model
// keeps them (model/transformer.cpp, build_layout). Every offset a multiple of 8 elements, so the
// bf16 matrices start 16-byte aligned.
struct Layout {
  int64_t ln1, ln2, bq, bk, bv, bo, bg, bu, bd, wq, wk, wv, wo, wg, wu, wd, stride;
  explicit Layout(const Case& c) {
    const int64_t qd = c.heads * c.d, kd = c.kv_heads * c.d;
    int64_t at = 0;
    auto take = [&](int64_t n) {
      const int64_t here = at;
      at += (n + 7) / 8 * 8;
      return here;
    };
    ln1 = take(c.H), ln2 = take(c.H), bq = take(qd), bk = take(kd), bv = take(kd), bo = take(c.H);
    bg = take(c.I), bu = take(c.I), bd = take(c.H);
    wq = take(qd * c.H), wk = take(kd * c.H), wv = take(kd * c.H), wo = take(c.H * qd);
    wg = take(c.I * c.H), wu = take(c.I * c.H), wd = take(c.H * c.I);
    stride = at + 8;  // and a gap: the layers' stride need not be their size
  }
};

// A decode step's inputs (host memory), and the buffers one run writes.
struct Step {
  Case c;
  Layout o;
  std::vector<float> params, cos, sin;
  std::vector<uint16_t> params16;
  std::vector<int32_t> slot{0}, pos;
  // What a run writes: x (in and out), the caches (the step's position), and the scratch outputs.
  std::vector<float> x, q, att, h;
  std::vector<uint16_t> att16, mlp16, kcache, vcache;

  explicit Step(const Case& cs) : c(cs), o(cs) {
    const size_t n = size_t(c.layers * o.stride);
    // fp32: the norms and biases, which lie before each layer's matrices (to the last layer's first).
    params = randn(size_t((c.layers - 1) * o.stride + o.wq), 41, 0.05f);
    for (int64_t l = 0; l < c.layers; l++)  // norm weights near one, as trained ones are
      for (int64_t i = 0; i < c.H; i++) {
        params[size_t(l * o.stride + o.ln1 + i)] += 1.f;
        params[size_t(l * o.stride + o.ln2 + i)] += 1.f;
      }
    params16 = bf16_bits(randn(n, 42, 0.08f));
    testing::rope_tables(c.capacity, c.d, cos, sin);
    pos = {c.pos};
    x = randn(size_t(c.H), 43);
    const size_t cache = size_t(c.layers * c.capacity * c.kv_heads * c.d);
    kcache = bf16_bits(randn(cache, 44)), vcache = bf16_bits(randn(cache, 45));
    q.assign(size_t(c.heads * c.d), NAN), att = q, h.assign(size_t(c.H), NAN);
    att16.assign(size_t(c.heads * c.d), 0xFFFF), mlp16.assign(size_t(c.I), 0xFFFF);
  }

  // The op's arguments over this step's buffers.
  DecodeLayers args() {
    DecodeLayers a;
    const float* p = params.data();
    const uint16_t* p16 = params16.data();
    a.x = x.data(), a.ln1 = p + o.ln1, a.ln2 = p + o.ln2;
    a.wq = p16 + o.wq, a.wk = p16 + o.wk, a.wv = p16 + o.wv, a.wo = p16 + o.wo;
    a.wg = p16 + o.wg, a.wu = p16 + o.wu, a.wd = p16 + o.wd;
    a.bq = p + o.bq, a.bk = p + o.bk, a.bv = p + o.bv;
    if (c.mlp_biases) a.bo = p + o.bo, a.bg = p + o.bg, a.bu = p + o.bu, a.bd = p + o.bd;
    a.cos = cos.data(), a.sin = sin.data(), a.slot = slot.data(), a.pos = pos.data();
    a.kcache = kcache.data(), a.vcache = vcache.data();
    a.q = q.data(), a.att = att.data(), a.att16 = att16.data(), a.h = h.data(), a.mlp16 = mlp16.data();
    a.H = c.H, a.heads = c.heads, a.kv_heads = c.kv_heads, a.d = c.d, a.I = c.I;
    a.slot_stride = c.capacity * c.kv_heads * c.d;
    a.layers = c.layers, a.param_stride = o.stride, a.cache_stride = a.slot_stride;  // one slot a layer
    a.eps = 1e-6f, a.round_gate_up = c.round_gate_up;
    return a;
  }
};

Plan plan_of(const Step& s, const DecodeLayers& a) {
  const int head_chunks = int((s.c.heads / s.c.kv_heads + decode::kDecodeHeads - 1) / decode::kDecodeHeads);
  const int64_t chunk = s.c.capacity / s.c.splits;
  return plan_for(a, head_chunks, s.c.splits, chunk);
}

template <class T>
__nv_bfloat16* bf16_ptr(T* p) {
  return reinterpret_cast<__nv_bfloat16*>(const_cast<std::remove_const_t<T>*>(p));
}

// The five launches a layer that the persistent kernel replaces, emulated, with plan p's grids.
template <int D>
void run_launches(Step& s, const Plan& p) {
  const DecodeLayers a = s.args();
  std::vector<float> part(size_t(a.heads * p.splits * (D + 2)), NAN);
  std::vector<unsigned> counts(size_t(a.kv_heads * p.head_chunks), 0u);
  const decode::DecodeDims dims{a.heads, D, a.heads / a.kv_heads, a.slot_stride, a.kv_heads * D, p.scale};
  const size_t normed = size_t(a.H) * sizeof(uint16_t);
  for (int64_t l = 0; l < a.layers; l++) {
    const DecodeQkv qkv = decode_layer_qkv(a, l);
    emu::launch({unsigned(p.qkv_blocks), 1, 1}, kThreads, gemv::kSmemBytes<2, 1> + normed,
                gemv::gemv_qkv_kernel<1, 8>, gemv::qkv_args(qkv), 1, p.qkv_split, 1);
    emu::launch({1, unsigned(a.kv_heads * p.head_chunks), unsigned(p.splits)}, kThreads,
                decode_tiles::smem_bytes<D>(), decode_tiles::decode_tiles_kernel<D>, a.att, bf16_ptr(a.att16),
                part.data(), counts.data(), static_cast<const float*>(a.q), bf16_ptr(qkv.kcache),
                bf16_ptr(qkv.vcache), a.slot, a.pos, dims, p.head_chunks, p.chunk);
    const int64_t ps = a.param_stride;
    emu::launch({unsigned(p.o_blocks), 1, 1}, kThreads, gemv::kSmemBytes<1, 1>, gemv::gemv_linear_kernel<1, 8>, a.h,
                DecodeInput{a.att16, nullptr, nullptr, 0.f}, decode_layer_at(a.wo, l, ps),
                decode_layer_at(a.bo, l, ps), static_cast<const float*>(a.x), 1, a.heads * D, a.H, p.o_split,
                DecodeAhead{}, 1);
    emu::launch({unsigned(p.gate_up_blocks), 1, 1}, kThreads, gemv::kSmemBytes<2, 1> + normed,
                gemv::gemv_gate_up_kernel<1, 8>, bf16_ptr(a.mlp16),
                DecodeInput{nullptr, a.h, decode_layer_at(a.ln2, l, ps), a.eps}, decode_layer_at(a.wg, l, ps),
                decode_layer_at(a.bg, l, ps), decode_layer_at(a.wu, l, ps), decode_layer_at(a.bu, l, ps), 1, a.H, a.I,
                p.gate_up_split, a.round_gate_up, 1);
    emu::launch({unsigned(p.down_blocks), 1, 1}, kThreads, gemv::kSmemBytes<1, 1>, gemv::gemv_linear_kernel<1, 8>,
                a.x, DecodeInput{a.mlp16, nullptr, nullptr, 0.f}, decode_layer_at(a.wd, l, ps),
                decode_layer_at(a.bd, l, ps), static_cast<const float*>(a.h), 1, a.I, a.H, p.down_split,
                DecodeAhead{}, 1);
  }
  for (unsigned n : counts) EXPECT_EQ(n, 0u) << "a merge count was left set";
}

// The persistent kernel with one block, which takes every turn; returns what it prefetched.
template <int D>
std::vector<emu::Prefetch> run_persistent(Step& s, const Plan& p) {
  const DecodeLayers a = s.args();
  std::vector<float> part(size_t(a.heads * p.splits * (D + 2)), NAN);
  std::vector<unsigned> counts(size_t(a.kv_heads * p.head_chunks), 0u);
  unsigned barrier = 0x80000000u;  // the count zero, the top bit flipped by earlier launches
  emu::take_prefetches();
  emu::launch({1, 1, 1}, kThreads, smem_bytes<D>(a), decode_layers_kernel<D>, a, p, part.data(), counts.data(),
              &barrier);
  EXPECT_EQ(barrier & 0x7fffffffu, 0u) << "the barrier word's count moved";
  const unsigned barriers = unsigned(5 * a.layers - 1);  // the flips: one a barrier
  EXPECT_EQ(barrier >> 31, 1 - barriers % 2) << barriers << " barriers";
  for (unsigned n : counts) EXPECT_EQ(n, 0u) << "a merge count was left set";
  return emu::take_prefetches();
}

// Two runs' buffers, bit for bit.
template <class V>
void expect_same(const V& got, const V& want, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(got[0])), 0) << what << " differs";
}

// Prefetches, as (offset into the bf16 weights, bytes): inside them, whole 16-byte units from
// 16-byte boundaries. The products ask for the start of each item's rows whatever the tuning
// (gemv.cuh's item_dots, for the launches' programmatic launch); the rest are the barriers'
// (prefetch_slice), at most a warp's share of Plan::prefetch_bytes each.
using Asked = std::multiset<std::pair<uintptr_t, uint32_t>>;
Asked offsets(const Step& run, const std::vector<emu::Prefetch>& prefetches) {
  const auto lo = reinterpret_cast<uintptr_t>(run.params16.data());
  const uintptr_t size = run.params16.size() * sizeof(uint16_t);
  Asked out;
  for (const emu::Prefetch& f : prefetches) {
    EXPECT_EQ(f.begin % 16, 0u);
    EXPECT_EQ(f.bytes % 16, 0u);
    EXPECT_GT(f.bytes, 0u);
    EXPECT_TRUE(f.begin >= lo && f.begin - lo + f.bytes <= size) << "a prefetch outside the weights";
    out.insert({f.begin - lo, f.bytes});
  }
  return out;
}

// What `tuned` asked for beyond the products' own: some, each within a warp's share.
void expect_barriers_share(const Asked& tuned, const Asked& products_own, int64_t per_block) {
  SCOPED_TRACE("prefetch bytes a block " + std::to_string(per_block));
  EXPECT_TRUE(std::includes(tuned.begin(), tuned.end(), products_own.begin(), products_own.end()))
      << "a product's own prefetch went missing";
  Asked barriers;
  std::set_difference(tuned.begin(), tuned.end(), products_own.begin(), products_own.end(),
                      std::inserter(barriers, barriers.end()));
  EXPECT_FALSE(barriers.empty());
  for (const auto& [at, bytes] : barriers)
    EXPECT_LE(bytes, uint64_t(per_block) / kWarpsPerBlock) << "a warp asked for more than its share at " << at;
}

// against_cpu: also the CPU's ops' residual stream, within one layer's bf16 rounding flips (see
// the real shapes' test for why not past one layer there).
template <int D>
void expect_persistent_is_the_launches(const Case& c, bool against_cpu = true) {
  SCOPED_TRACE("H " + std::to_string(c.H) + " heads " + std::to_string(c.heads) + "/" + std::to_string(c.kv_heads) +
               " d " + std::to_string(D) + " I " + std::to_string(c.I) + " layers " + std::to_string(c.layers) +
               " pos " + std::to_string(c.pos) + " splits " + std::to_string(c.splits));
  const Step fresh(c);  // drawn once (at the real shapes, drawing is most of the test's time)
  Step launches = fresh, persistent = fresh, cpu = fresh;
  const DecodeLayers a = persistent.args();
  const Plan p = plan_of(persistent, a);
  run_launches<D>(launches, p);
  const std::vector<emu::Prefetch> asked = run_persistent<D>(persistent, p);

  // The launches' values, bit for bit.
  const auto same = [](const auto& got, const auto& want, const char* what) { expect_same(got, want, what); };
  same(persistent.x, launches.x, "x");
  same(persistent.h, launches.h, "h");
  same(persistent.q, launches.q, "q");
  same(persistent.att, launches.att, "att");
  same(persistent.att16, launches.att16, "att16");
  same(persistent.mlp16, launches.mlp16, "mlp16");
  same(persistent.kcache, launches.kcache, "the k cache");
  same(persistent.vcache, launches.vcache, "the v cache");

  // The default run's prefetches: inside the weights, aligned, and some.
  EXPECT_FALSE(offsets(persistent, asked).empty());
  if (!against_cpu) return;

  // The CPU's ops, composed as the op is defined: the residual stream to within what the bf16
  // roundings between the products (the normalized rows, att16, mlp16) can move it when two
  // orders of fp32 sums round a value to neighbouring bf16 values (2^-8 of one term of a sum, well
  // under a part in a thousand of the stream; measured: under 1e-7, no value rounded apart); a
  // wrong layer, weight or stride moves it by its whole size.
  decode_layers_as_ops(cpu_bf16_matmul_ops(), cpu.args());
  double diff = 0, size = 0, moved = 0;
  const std::vector<float>& x0 = fresh.x;
  for (size_t i = 0; i < cpu.x.size(); i++) {
    diff += std::pow(double(persistent.x[i]) - double(cpu.x[i]), 2);
    size += std::pow(double(cpu.x[i]), 2);
    moved += std::pow(double(cpu.x[i]) - double(x0[i]), 2);
  }
  EXPECT_LT(std::sqrt(diff), 1e-3 * std::sqrt(size)) << "the residual stream against the CPU's ops";
  EXPECT_GT(std::sqrt(moved), 0.1 * std::sqrt(size)) << "the layers hardly changed the stream: a weak check";
  for (size_t i = 0; i < cpu.kcache.size(); i++)
    if (persistent.kcache[i] != cpu.kcache[i]) {
      const float g = testing::bf16_value(persistent.kcache[i]), w = testing::bf16_value(cpu.kcache[i]);
      ASSERT_NEAR(g, w, 0.05 * std::fabs(w) + 1e-2) << "k cache entry " << i;
    }
}

// The tuning (cuda_set_decode_layers_tuning) changes no value, only what the barriers prefetch.
template <int D>
void expect_tuning_changes_no_value(const Case& c) {
  const auto same = [](const auto& got, const auto& want, const char* what) { expect_same(got, want, what); };
  // First no prefetch at the barriers (what remains are the products' own, and the values the
  // others must give), then an odd small size with none, the default and the most slices of gate
  // and up during the attention and of down during gate and up, then the most it takes, whose
  // slices pass the matrices' ends.
  Step reference(c);
  Plan q = plan_of(reference, reference.args());
  q.prefetch_bytes = 0;
  const Asked products_own = offsets(reference, run_persistent<D>(reference, q));
  struct Tuning {
    int64_t per_block;
    int gate_up, down;
  };
  std::map<std::pair<int, int>, size_t> asked_at_4000;  // (gate/up, down slices) -> prefetches
  constexpr int kGu = kGateUpSlicesAtAttention, kDown = kDownSlicesAtGateUp, kMost = kMaxDecodeLayersSlices;
  const Tuning tunings[] = {{4000, kGu, kDown}, {4000, 0, kDown}, {4000, kMost, kDown},
                            {4000, kGu, 0},     {4000, kGu, kMost}, {kMaxPrefetchBytesPerBlock, kGu, kDown}};
  for (const auto& [per_block, gate_up, down] : tunings) {
    Step tuned(c);
    q.prefetch_bytes = per_block, q.gate_up_slices_at_attention = gate_up, q.down_slices_at_gate_up = down;
    const Asked tuned_asked = offsets(tuned, run_persistent<D>(tuned, q));
    SCOPED_TRACE("prefetch bytes a block " + std::to_string(per_block) + ", slices of gate/up at the attention " +
                 std::to_string(gate_up) + ", of down at gate/up " + std::to_string(down));
    same(tuned.x, reference.x, "x");
    same(tuned.mlp16, reference.mlp16, "mlp16");
    same(tuned.kcache, reference.kcache, "the k cache");
    same(tuned.vcache, reference.vcache, "the v cache");
    expect_barriers_share(tuned_asked, products_own, per_block);
    if (per_block == 4000) asked_at_4000[{gate_up, down}] = tuned_asked.size();
  }
  // More slices ask for more, as far as the matrices go (2,000 bytes a slice of gate and of up,
  // 4,000 of down: 16 KB each in the case below, so 8 and 4 slices).
  auto at = [&](int gate_up, int down) { return asked_at_4000[std::make_pair(gate_up, down)]; };
  EXPECT_LT(at(0, kDown), at(kGu, kDown));
  EXPECT_LT(at(kGu, kDown), at(kMost, kDown));
  EXPECT_LT(at(kGu, 0), at(kGu, kDown));
  EXPECT_LT(at(kGu, kDown), at(kGu, kMost));
}

TEST(DecodeLayersEmulated, PersistentKernelIsTheFiveLaunchesALayer) {
  // Head dim 32, 2 splits of the positions (the second partly past pos), the down projection's
  // rows split over 2 warps (I = 512), every bias.
  expect_persistent_is_the_launches<32>({64, 4, 2, 32, 512, 3, 128, 100, 2, true, false});
  // 0.5B's head dim, GQA 2:1 with one kv head, gate and up rounded to bf16 first, one split.
  expect_persistent_is_the_launches<64>({128, 2, 1, 64, 64, 2, 64, 37, 1, false, true});
  // 1.5B's head dim, three splits, the last holding the step's position.
  expect_persistent_is_the_launches<128>({128, 2, 2, 128, 128, 2, 192, 150, 3, false, true});
}

// At the real models' layer shapes (tests/model/configs/), where the products' rows, the heads
// and the MLP's width are not the small cases' powers of two: Qwen2.5-0.5B (H 896, 14 heads over
// 2 kv heads, I 4,864) and Qwen2.5-1.5B (H 1,536, 12 over 2, I 8,960), at a position past the first
// tiles. Against the CPU's ops at one layer: there one bf16 value of the MLP's 4,864 rounds to the
// neighbouring value where the CPU's sum lands on the other side of the rounding boundary
// (measured: the stream 0.037 away in 674, 5.5e-5, one step of 2^-6 at 0.08 a weight over 896
// outputs), and the next layer turns that into about 60 such roundings (1.7e-3): past one layer the
// two orders of fp32 sums part ways by chance, not by a bug. Two layers, for the layers' strides at
// these shapes, against the launches, bit for bit.
TEST(DecodeLayersEmulated, PersistentKernelIsTheFiveLaunchesAtTheRealModelsShapes) {
  expect_persistent_is_the_launches<64>({896, 14, 2, 64, 4864, 1, 320, 300, 2, false, false});
  expect_persistent_is_the_launches<64>({896, 14, 2, 64, 4864, 2, 320, 300, 2, false, true}, false);
  expect_persistent_is_the_launches<128>({1536, 12, 2, 128, 8960, 1, 320, 257, 3, false, false});
}

// The prefetch's tuning: the same bits under six tunings as with none, each barrier's prefetch
// within a warp's share, more slices asking for more. A small case, run seven times, whose slice
// counts the test works out below: head dim 32, two layers, every bias.
TEST(DecodeLayersEmulated, TheTuningChangesNoValueAndPrefetchesWithinItsShare) {
  expect_tuning_changes_no_value<32>({64, 4, 2, 32, 128, 2, 64, 37, 1, true, false});
}

}  // namespace
}  // namespace azr::kernels::cuda_detail::decode_layers
