// The CUDA backend's decode attentions on the CPU, through tests/kernels/cuda_emulation.h, a
// stand-in for the device, so that they run in CI, where there is no GPU:
//   - the lane groups (kernels/cuda/attention_decode.cuh): positions scored by groups of d / 8
//     lanes (d = 32, 64, 128), the groups' and warps' softmax merges, query heads in chunks of 8
//     (group 10), positions split across blocks and merged by the last of them (its merge count
//     set back to zero), positions 0 and
//     capacity - 1, fp32 and bf16 caches;
//   - the shared-memory tiles (kernels/cuda/attention_decode_tiles.cuh), bf16 caches: several
//     tiles a row and a partial last one, tiles split across blocks (whole tiles a split, as
//     attention.cu launches them, and splits with no positions), two chunks of query heads;
//   - the split rows' merge, as a block, against its definition bit for bit; and the launch plan
//     (plan_decode_split) by hand and by its invariants.
// Against the CPU backend's attention_decode and the Bf16 table's attention_decode_w16
// (kernels/cpu), as the GPU test (CudaDecode) checks them on the hardware.
//
// Small shapes: here every CUDA thread runs in turn on one core (tests/kernels/emulation_fibers.h).
#include "tests/kernels/cuda_emulation.h"  // first: it stands in for the CUDA headers
//
#include "kernels/cuda/attention_decode.cuh"
#include "kernels/cuda/attention_decode_tiles.cuh"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/ops.h"
#include "tests/kernels/gemv_cases.h"
#include "tests/kernels/random_inputs.h"

namespace azr::kernels::cuda_detail::decode {
namespace {

using testing::bf16_bits;
using testing::randn;

struct Case {
  int64_t R, H, KV, d, capacity;
  bool bf16;
  int splits;
};

// The splits' merge counts after a launch: each back at zero, set back by the block that merged its
// row (decode::merge_splits_if_last), so the next launch, or the next replay of a recorded step,
// starts from zero. Unsplit launches never touch them.
void expect_counts_back_at_zero(const std::vector<unsigned>& counts) {
  for (size_t i = 0; i < counts.size(); i++) EXPECT_EQ(counts[i], 0u) << "merge count " << i;
}

// The kernels as attention.cu launches them, with `splits` blocks over each row's positions; with
// splits, the last of them merges the row in the same launch.
template <class KV>
void run(float* out, __nv_bfloat16* out16, const float* q, const KV* kc, const KV* vc, const int32_t* slot,
         const int32_t* pos, const Case& c) {
  const int64_t group = c.H / c.KV, head_chunks = (group + kDecodeHeads - 1) / kDecodeHeads;
  const int64_t chunk = split_positions(int(head_chunks), int(c.splits), c.capacity, 1).chunk;
  const DecodeDims s{c.H, c.d, group, c.capacity * c.KV * c.d, c.KV * c.d, 1.f / std::sqrt(float(c.d))};
  std::vector<float> part(size_t(c.R * c.H * c.splits * (c.d + 2)), NAN);
  std::vector<unsigned> counts(size_t(c.R * c.KV * head_chunks), 0u);
  const EmuDim3 grid{unsigned(c.R), unsigned(c.KV * head_chunks), unsigned(c.splits)};
  const size_t smem = decode_smem_bytes(c.d);
  auto launch = [&](auto kernel) {
    emu::launch(grid, kDecodeWarps * kWarp, smem, kernel, out, out16, part.data(), counts.data(), q, kc, vc, slot, pos,
                s, int(head_chunks), chunk);
  };
  if (c.d == 32) launch(decode_lane_groups_kernel<4, KV>);
  if (c.d == 64) launch(decode_lane_groups_kernel<8, KV>);
  if (c.d == 128) launch(decode_lane_groups_kernel<16, KV>);
  expect_counts_back_at_zero(counts);
}

// The tiles kernel as attention.cu launches it over a bf16 cache: `splits` asks for that many
// blocks over each row's positions, rounded to whole tiles a split.
void run_tiles(float* out, __nv_bfloat16* out16, const float* q, const __nv_bfloat16* kc, const __nv_bfloat16* vc,
               const int32_t* slot, const int32_t* pos, const Case& c) {
  const int64_t group = c.H / c.KV, head_chunks = (group + decode_tiles::kHeads - 1) / decode_tiles::kHeads;
  const DecodeSplit plan = split_positions(int(head_chunks), int(c.splits), c.capacity, decode_tiles::kTile);
  const int64_t chunk = plan.chunk, splits = plan.splits;
  const DecodeDims s{c.H, c.d, group, c.capacity * c.KV * c.d, c.KV * c.d, 1.f / std::sqrt(float(c.d))};
  std::vector<float> part(size_t(c.R * c.H * splits * (c.d + 2)), NAN);
  std::vector<unsigned> counts(size_t(c.R * c.KV * head_chunks), 0u);
  const EmuDim3 grid{unsigned(c.R), unsigned(c.KV * head_chunks), unsigned(splits)};
  auto launch = [&](auto kernel, size_t smem) {
    emu::launch(grid, decode_tiles::kThreads, smem, kernel, out, out16, part.data(), counts.data(), q, kc, vc, slot,
                pos, s, int(head_chunks), chunk);
  };
  if (c.d == 32) launch(decode_tiles::decode_tiles_kernel<32>, decode_tiles::smem_bytes<32>());
  if (c.d == 64) launch(decode_tiles::decode_tiles_kernel<64>, decode_tiles::smem_bytes<64>());
  if (c.d == 128) launch(decode_tiles::decode_tiles_kernel<128>, decode_tiles::smem_bytes<128>());
  expect_counts_back_at_zero(counts);
}
// An fp32 cache: attention.cu never gives it to the tiles kernel.
void run_tiles(float*, __nv_bfloat16*, const float*, const float*, const float*, const int32_t*, const int32_t*,
               const Case&) {
  ADD_FAILURE() << "the tiles kernel reads bf16 caches only";
}

// Runs `kernels` (run or run_tiles) on each case and compares with the CPU's decode.
template <class Runner>
void expect_cpu_decode(const std::vector<Case>& cases, Runner kernels) {
  for (const Case& c : cases) {
    SCOPED_TRACE("R " + std::to_string(c.R) + " H " + std::to_string(c.H) + "/" + std::to_string(c.KV) + " d " +
                 std::to_string(c.d) + " capacity " + std::to_string(c.capacity) + (c.bf16 ? " bf16" : " fp32") +
                 " splits " + std::to_string(c.splits));
    const int64_t slots = c.R + 1, stride = c.capacity * c.KV * c.d;
    std::vector<int32_t> slot(size_t(c.R)), pos(size_t(c.R));
    for (int64_t r = 0; r < c.R; r++) {
      slot[size_t(r)] = int32_t(c.R - r);  // distinct, reversed
      pos[size_t(r)] = int32_t(r == 0 ? c.capacity - 1 : (r * 7) % c.capacity);  // the full cache; 0 at r = 3 of 21
    }
    const auto kc = randn(size_t(slots * stride), 25), vc = randn(size_t(slots * stride), 26),
               q = randn(size_t(c.R * c.H * c.d), 27);
    const AttentionShape shape{0, 0, c.H, c.KV, c.d, stride, nullptr};
    const size_t n = size_t(c.R * c.H * c.d);
    std::vector<float> want(n), got(n, NAN);
    std::vector<uint16_t> got16(n, 0xFFFF);
    if (c.bf16) {
      const std::vector<uint16_t> k16 = bf16_bits(kc), v16 = bf16_bits(vc);
      cpu_bf16_matmul_ops().attention_decode_w16(want.data(), nullptr, q.data(), k16.data(), v16.data(), slot.data(),
                                                 pos.data(), c.R, shape);
      kernels(got.data(), reinterpret_cast<__nv_bfloat16*>(got16.data()), q.data(),
              reinterpret_cast<const __nv_bfloat16*>(k16.data()), reinterpret_cast<const __nv_bfloat16*>(v16.data()),
              slot.data(), pos.data(), c);
      EXPECT_EQ(got16, bf16_bits(got)) << "out16 is not out rounded";
    } else {
      cpu_ops().attention_decode(want.data(), q.data(), kc.data(), vc.data(), slot.data(), pos.data(), c.R, shape);
      kernels(got.data(), static_cast<__nv_bfloat16*>(nullptr), q.data(), kc.data(), vc.data(), slot.data(),
              pos.data(), c);
    }
    for (size_t i = 0; i < n; i++)
      ASSERT_NEAR(got[i], want[i], 1e-5 + 1e-4 * std::fabs(want[i])) << "element " << i;
  }
}

TEST(DecodeEmulated, LaneGroupsMatchTheCpuDecode) {
  expect_cpu_decode(
      {
          {3, 14, 2, 64, 40, true, 1},    // 0.5B's heads: 4 positions per warp step
          {3, 14, 2, 64, 40, true, 3},    // the same, positions split over 3 blocks
          {2, 12, 2, 128, 21, false, 1},  // 1.5B's heads, an fp32 cache: 2 positions per step
          {2, 12, 2, 128, 21, true, 2},
          {2, 20, 2, 32, 9, true, 1},     // group 10: two chunks of query heads; 8 positions per step
          {4, 4, 4, 32, 3, false, 1},     // no GQA, fewer positions than a step covers
          {3, 14, 2, 64, 600, true, 12},  // 12 splits of 50: row 0 merges all 12 (more than a batch of
                                          // kMergeBatch), rows 1 and 2 only their first
      },
      [](auto... args) { run(args...); });
}

TEST(DecodeEmulated, TilesMatchTheCpuDecode) {
  expect_cpu_decode(
      {
          {3, 12, 2, 128, 150, true, 1},  // 1.5B's heads: rows of 1, 144 (3 tiles, a partial one) and 150 positions
          {3, 14, 2, 64, 200, true, 2},   // 0.5B's heads, two splits of two tiles: row 1's second split is empty
          {2, 14, 2, 64, 40, true, 1},    // fewer positions than a tile
          {2, 20, 2, 32, 70, true, 1},    // group 10: two chunks of query heads, the second of 2 heads
          {2, 4, 4, 32, 129, true, 3},    // no GQA; three splits of one tile, the last holding one position
          {3, 12, 2, 128, 1300, true, 20},  // 11 splits of two tiles: row 0 in all 11, rows 1 and 2 in one
      },
      [](auto... args) { run_tiles(args...); });
}

// Programmatic launch's contract (kernels/cuda/device_or_emulation.cuh): the decode attentions read
// what the kernel before them (q/k/v) writes this step, the queries and each row's key and value at
// its position, only after their wait, though the tiles kernel loads the first tile of a split
// before the wait where that tile ends before the row's position. Those writes are poisoned (NaN)
// until every thread of the block has reached its wait (emu::PriorGridWrites), and the outputs must
// be the plain run's bit for bit: at 1.5B's heads, 64-position splits of one tile (the early load
// in every split but the row's last) and of two, with rows whose position is the first of a tile,
// the last, and 0; the tiles and the lane groups.
TEST(DecodeEmulated, AttentionsReadThisStepsQueriesKeysAndValuesOnlyAfterTheirWait) {
  for (const bool tiles : {true, false})
  for (const Case& c : {Case{3, 12, 2, 128, 320, true, 5}, Case{3, 12, 2, 128, 320, true, 3}}) {
    SCOPED_TRACE(std::string(tiles ? "tiles" : "lane groups") + ", splits " + std::to_string(c.splits));
    const int64_t slots = c.R + 1, stride = c.capacity * c.KV * c.d;
    const std::vector<int32_t> slot = {2, 0, 3}, pos = {192, 255, 0};
    std::vector<uint16_t> k16 = bf16_bits(randn(size_t(slots * stride), 31)),
                          v16 = bf16_bits(randn(size_t(slots * stride), 32));
    std::vector<float> q = randn(size_t(c.R * c.H * c.d), 33);
    const size_t n = size_t(c.R * c.H * c.d);
    std::vector<float> want(n, NAN), got(n, NAN);
    std::vector<uint16_t> want16(n, 0xFFFF), got16(n, 0xFFFF);
    const auto run = [&](std::vector<float>& out, std::vector<uint16_t>& out16) {
      const auto* kc = reinterpret_cast<const __nv_bfloat16*>(k16.data());
      const auto* vc = reinterpret_cast<const __nv_bfloat16*>(v16.data());
      auto* o16 = reinterpret_cast<__nv_bfloat16*>(out16.data());
      if (tiles)
        run_tiles(out.data(), o16, q.data(), kc, vc, slot.data(), pos.data(), c);
      else
        decode::run(out.data(), o16, q.data(), kc, vc, slot.data(), pos.data(), c);
    };
    run(want, want16);
    // This step's writes: the queries, and each row's key and value at its position.
    const std::vector<float> q_made = q;
    const std::vector<uint16_t> k_made = k16, v_made = v16;
    const auto step_rows = [&](const auto& each) {
      for (int64_t r = 0; r < c.R; r++) each(size_t(slot[size_t(r)] * stride + pos[size_t(r)] * c.KV * c.d));
    };
    emu::PriorGridWrites writes{[&] {
                                  std::fill(q.begin(), q.end(), NAN);
                                  step_rows([&](size_t at) {
                                    std::fill_n(k16.begin() + std::ptrdiff_t(at), c.KV * c.d, uint16_t(0x7FC0));
                                    std::fill_n(v16.begin() + std::ptrdiff_t(at), c.KV * c.d, uint16_t(0x7FC0));
                                  });
                                },
                                [&] {
                                  q = q_made;
                                  step_rows([&](size_t at) {
                                    std::copy_n(k_made.begin() + std::ptrdiff_t(at), c.KV * c.d,
                                                k16.begin() + std::ptrdiff_t(at));
                                    std::copy_n(v_made.begin() + std::ptrdiff_t(at), c.KV * c.d,
                                                v16.begin() + std::ptrdiff_t(at));
                                  });
                                }};
    {
      const emu::PriorGridWritesScope scope(writes);
      run(got, got16);
    }
    EXPECT_EQ(std::memcmp(got.data(), want.data(), n * sizeof(float)), 0) << "out";
    EXPECT_EQ(got16, want16) << "out16";
  }
}

// The launch plan (attention.cu's decode_split on the device's multiprocessors), by hand: 1.5B's
// heads (12 over 2 kv heads: one chunk) at batch 1 on an H100's 132 multiprocessors want 132
// splits, and get the cache's 64-position splits where it holds fewer; one kv head wants 264,
// capped at kMaxMergeSplits (the merge's shared memory); group 10 takes two head chunks.
TEST(DecodeEmulated, SplitPlanByHand) {
  auto expect = [](DecodeSplit got, int head_chunks, int splits, int64_t chunk) {
    EXPECT_EQ(got.head_chunks, head_chunks);
    EXPECT_EQ(got.splits, splits);
    EXPECT_EQ(got.chunk, chunk);
  };
  const int64_t tile = decode_tiles::kTile;
  expect(plan_decode_split(1, 12, 2, 8192, tile, 132), 1, 128, 64);
  expect(plan_decode_split(1, 12, 2, 4160, tile, 132), 1, 65, 64);
  expect(plan_decode_split(1, 12, 2, 256, tile, 132), 1, 4, 64);
  expect(plan_decode_split(1, 12, 2, 20000, 1, 132), 1, 132, 152);  // 20,000 / 132, rounded up
  expect(plan_decode_split(1, 8, 1, 32768, 1, 132), 1, 256, 128);   // 264 wanted
  expect(plan_decode_split(64, 20, 2, 2048, tile, 132), 2, 2, 1024);
  expect(plan_decode_split(256, 14, 2, 256, tile, 132), 1, 1, 256);
}

// The plan's invariants over shapes, batches, caches and GPUs: every position in a split, at most
// kMaxMergeSplits of them, at least kMinSplitKeys positions a split, whole tiles a split, and two
// blocks a multiprocessor wherever the cache and the cap allow.
TEST(DecodeEmulated, SplitPlanCoversTheCacheWithinTheMergesCap) {
  struct Heads {
    int64_t H, KV;
  };
  for (const Heads hs : {Heads{12, 2}, Heads{14, 2}, Heads{8, 1}, Heads{20, 2}, Heads{4, 4}})
    for (const int sms : {1, 108, 132, 148, 400})
      for (const int64_t R : {1, 2, 3, 8, 64, 256})
        for (const int64_t cap : {1, 63, 64, 65, 256, 4160, 8192, 32768, 100000})
          for (const int64_t tile : {int64_t(1), int64_t(decode_tiles::kTile)}) {
            SCOPED_TRACE(std::to_string(hs.H) + "/" + std::to_string(hs.KV) + " heads, " + std::to_string(sms) +
                         " SMs, R " + std::to_string(R) + ", capacity " + std::to_string(cap) + ", tile " +
                         std::to_string(tile));
            const DecodeSplit p = plan_decode_split(R, hs.H, hs.KV, cap, tile, sms);
            const int64_t group = hs.H / hs.KV;
            ASSERT_GE(int64_t(p.head_chunks) * kDecodeHeads, group);
            ASSERT_LT(int64_t(p.head_chunks - 1) * kDecodeHeads, group);
            ASSERT_GE(p.splits, 1);
            ASSERT_LE(p.splits, kMaxMergeSplits);
            ASSERT_GE(int64_t(p.splits) * p.chunk, cap) << "positions past the last split";
            ASSERT_GE(p.chunk, std::min<int64_t>(cap, kMinSplitKeys));
            if (tile > 1) {
              ASSERT_EQ(p.chunk % tile, 0);
              ASSERT_LT(int64_t(p.splits - 1) * p.chunk, cap) << "a split past a full cache";
            } else if (p.splits < kMaxMergeSplits && p.splits < cap / kMinSplitKeys) {
              ASSERT_GE(R * hs.KV * p.head_chunks * p.splits, 2 * int64_t(sms)) << "multiprocessors left idle";
            }
          }
}

// merge_splits_if_last run by the last block of a row: its count at used - 1 before it.
__global__ void merge_as_last_block(unsigned* count, int nh, int64_t d, int splits, int used, const float* part,
                                    float* out, __nv_bfloat16* out16, bool each_element) {
  AZR_DYNAMIC_SHARED(smem_raw);
  merge_splits_if_last(count, 0, 0, nh, d, nh, splits, used, part, out, out16, reinterpret_cast<float*>(smem_raw),
                       each_element);
}

// The merge against its definition, one record at a time over every split (as it ran before splits
// without positions stopped writing records): the max of the records' maxima, then the sums
// rescaled to it in split order, skipping splits that scored nothing. Over `used` records of
// `splits` it must give the same bits, though it works out each row's weights once, in shared
// memory, and loads the accumulators kMergeBatch at a time; the records past `used` are NaN here,
// as no block writes them, and must not be read. Rows of 1, 6 (1.5B's) and 8 heads; head dims of
// 32 (a warp's elements in two rows), 64 and 128; up to kMaxMergeSplits. And the same of the
// baseline that merges each element on its own (merge_split_element, cuda_set_decode_merge).
TEST(DecodeEmulated, MergeOfTheSplitsWithPositionsIsTheMergeOfEverySplitBitForBit) {
  struct MergeCase {
    int nh;
    int64_t d;
    int used, splits;
  };
  for (const MergeCase& mc : {MergeCase{1, 64, 1, 19}, MergeCase{6, 128, 7, 19}, MergeCase{8, 64, 16, 19},
                              MergeCase{8, 32, 17, 19}, MergeCase{6, 128, 19, 19}, MergeCase{2, 64, 33, 40},
                              MergeCase{6, 128, 128, 132}, MergeCase{8, 32, kMaxMergeSplits, kMaxMergeSplits}}) {
    const int nh = mc.nh, used = mc.used, splits = mc.splits;
    const int64_t d = mc.d;
    SCOPED_TRACE(std::to_string(nh) + " rows of " + std::to_string(d) + ", used " + std::to_string(used) + " of " +
                 std::to_string(splits));
    const unsigned seed = unsigned(used * 7 + nh);
    std::vector<float> m = randn(size_t(nh * splits), 40u + seed, 3.f);
    std::vector<float> l = randn(size_t(nh * splits), 50u + seed, 1.f);
    std::vector<float> o = randn(size_t(nh * splits * d), 60u + seed, 1.f);
    std::vector<float> everything(size_t(nh * splits * (d + 2))), written(everything.size(), NAN);
    for (int64_t row = 0; row < nh; row++)
      for (int z = 0; z < splits; z++) {
        const size_t at = size_t((row * splits + z) * (d + 2)), rz = size_t(row * splits + z);
        // Split 2: positions, no finite score, its sum and accumulators NaN: skipped, not weighted by 0.
        const bool empty = z >= used, none = z == 2 && used > 2;
        everything[at] = empty || none ? -INFINITY : m[rz];
        everything[at + 1] = empty ? 0.f : none ? NAN : std::fabs(l[rz]) + 0.5f;
        for (int64_t i = 0; i < d; i++)
          everything[at + 2 + size_t(i)] = empty ? 0.f : none ? NAN : o[rz * size_t(d) + size_t(i)];
        if (!empty) std::copy_n(everything.begin() + long(at), d + 2, written.begin() + long(at));
      }
    std::vector<float> want(size_t(nh * d));
    for (int64_t row = 0; row < nh; row++)
      for (int64_t i = 0; i < d; i++) {
        const float* rec = everything.data() + row * splits * (d + 2);
        float M = -INFINITY, L = 0.f, O = 0.f;
        for (int z = 0; z < splits; z++) M = std::fmax(M, rec[z * (d + 2)]);
        for (int z = 0; z < splits; z++) {
          const float mz = rec[z * (d + 2)];
          if (mz == -INFINITY) continue;
          const float c = std::exp(mz - M);
          L += rec[z * (d + 2) + 1] * c;
          O += rec[z * (d + 2) + 2 + i] * c;
        }
        want[size_t(row * d + i)] = O / L;
      }
    const std::vector<uint16_t> want16 = bf16_bits(want);
    for (const bool each_element : {false, true}) {
      SCOPED_TRACE(each_element ? "each element on its own (the baseline)" : "the weights once a row");
      std::vector<float> got(want.size(), NAN);
      std::vector<__nv_bfloat16> got16(got.size());
      std::vector<unsigned> count{unsigned(used - 1)};
      emu::launch(EmuDim3{1, 1, 1}, kDecodeWarps * kWarp, decode_smem_bytes(d), merge_as_last_block, count.data(),
                  nh, d, splits, used, written.data(), got.data(), got16.data(), each_element);
      EXPECT_EQ(count[0], 0u) << "the merge count is set back for the next launch";
      for (size_t k = 0; k < got.size(); k++) {
        ASSERT_EQ(std::memcmp(&got[k], &want[k], sizeof(float)), 0)
            << "element " << k << ": " << got[k] << " vs " << want[k];
        uint16_t g16 = 0;
        std::memcpy(&g16, &got16[k], sizeof g16);
        ASSERT_EQ(g16, want16[k]) << "element " << k;
      }
    }
  }
}

}  // namespace
}  // namespace azr::kernels::cuda_detail::decode
