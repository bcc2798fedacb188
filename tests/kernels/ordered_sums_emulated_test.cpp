// The ordered gradient sums (kernels/cuda/ordered_sums.cuh), run on the CPU through
// tests/kernels/cuda_emulation.h: the column sums with their parts added in order, the embedding's
// gradient over ids sorted by id, and the sum of squares merged by its last block. Each against
// the CPU table's op (within fp32 rounding of sums taken in another order; bit for bit on
// integer-valued inputs, whose sums are exact in any order, so a row added twice, at the wrong id
// or not at all shows), and each the same bits under every order of its blocks (emu::ShuffledBlocks,
// the stand-in for a GPU's blocks finishing as they please), where the atomic forms are not.
// The sort itself is CUB's on a GPU (ordered_sums.cu); here std::stable_sort stands in for it.
// What the emulation cannot show (speed; the atomics of blocks running at once) is for
// CudaOps.GradientSumsAreTheSameBitsEveryRun and cuda_ops_bench's gradient_sums rows.
#include "tests/kernels/cuda_emulation.h"  // first: it stands in for the CUDA headers
//
#include "kernels/cuda/ordered_sums.cuh"
#include "tests/kernels/column_parts_emulated.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "kernels/ops.h"
#include "tests/kernels/gemv_cases.h"  // fp32_sum_error
#include "tests/kernels/random_inputs.h"
#include "tests/kernels/same_bits.h"

namespace azr::kernels::cuda_detail {
namespace {

using namespace azr::kernels::testing;

std::vector<float> integers(size_t n, uint64_t seed) {  // small integers: exact sums in any order
  std::vector<float> v = randn(n, seed, 8.f);
  for (float& x : v) x = std::round(x);
  return v;
}

// ---- Column sums ----

// column_sums_kernel over `chunks` chunks of rows_per_chunk rows, then (ordered) its parts added by
// add_column_parts_kernel; dst starts as dst0.
std::vector<float> column_sums(const std::vector<float>& src, const std::vector<float>& dst0, int64_t N, int64_t C,
                               int64_t chunks, bool ordered) {
  std::vector<float> dst = dst0;
  std::vector<float> parts(size_t(chunks * C), NAN);  // NaN: a part never written poisons its column
  const unsigned x = unsigned((C + 255) / 256);
  const int64_t rows = (N + chunks - 1) / chunks;
  emu::launch({x, unsigned(chunks), 1}, 256, 0, column_sums_kernel, dst.data(), ordered ? parts.data() : nullptr,
              src.data(), N, C, rows);
  if (ordered) testing::emulated_add_column_parts(dst.data(), parts.data(), chunks, C);
  return dst;
}

std::vector<float> cpu_column_sums(const std::vector<float>& src, std::vector<float> dst, int64_t N, int64_t C) {
  cpu_ops().matmul_backward(nullptr, nullptr, dst.data(), src.data(), nullptr, nullptr, N, 0, C);
  return dst;
}

// Shapes: one chunk; chunks that leave the last one short; more parts than add_column_parts' 8 runs
// and fewer; columns that leave a block part-filled.
struct ColumnCase {
  int64_t N, C, chunks;
};
constexpr ColumnCase kColumnCases[] = {{5, 3, 1}, {40, 33, 5}, {97, 300, 13}, {64, 40, 64}, {9, 257, 3}};

TEST(OrderedSumsEmulated, ColumnSumsAreTheCpusAndTheSameBitsInEveryBlockOrder) {
  for (const ColumnCase& c : kColumnCases) {
    SCOPED_TRACE("N " + std::to_string(c.N) + " C " + std::to_string(c.C) + " chunks " + std::to_string(c.chunks));
    // Integer values: every order gives the CPU's sums exactly.
    const std::vector<float> isrc = integers(size_t(c.N * c.C), 1), idst = integers(size_t(c.C), 2);
    EXPECT_TRUE(same_bits(column_sums(isrc, idst, c.N, c.C, c.chunks, true), cpu_column_sums(isrc, idst, c.N, c.C)));
    // Real values: the CPU's sums to fp32 rounding, and one set of bits whatever order the blocks
    // run in.
    const std::vector<float> src = randn(size_t(c.N * c.C), 3), dst0 = randn(size_t(c.C), 4);
    const std::vector<float> got = column_sums(src, dst0, c.N, c.C, c.chunks, true);
    const std::vector<float> want = cpu_column_sums(src, dst0, c.N, c.C);
    for (int64_t j = 0; j < c.C; j++) {
      double sum_abs = std::fabs(dst0[size_t(j)]);
      for (int64_t n = 0; n < c.N; n++) sum_abs += std::fabs(src[size_t(n * c.C + j)]);
      ASSERT_NEAR(got[size_t(j)], want[size_t(j)], 2 * fp32_sum_error(c.N + 2, sum_abs)) << "column " << j;
    }
    for (const uint64_t seed : {1, 2, 3}) {
      const emu::ShuffledBlocks shuffled(seed);
      EXPECT_TRUE(same_bits(column_sums(src, dst0, c.N, c.C, c.chunks, true), got)) << "block order " << seed;
    }
  }
}

// The atomic form's bits follow the order its chunks finish in: the shuffle shows that (so the
// test above could see an order dependence), on a column of 64 chunks whose partial sums round
// differently in another order.
TEST(OrderedSumsEmulated, TheAtomicColumnSumsFollowTheBlockOrder) {
  const int64_t N = 64 * 8, C = 64, chunks = 64;
  const std::vector<float> src = randn(size_t(N * C), 5), dst0(size_t(C), 0.f);
  const std::vector<float> in_order = column_sums(src, dst0, N, C, chunks, false);
  bool differs = false;
  for (const uint64_t seed : {1, 2, 3}) {
    const emu::ShuffledBlocks shuffled(seed);
    differs = differs || !same_bits(column_sums(src, dst0, N, C, chunks, false), in_order);
  }
  EXPECT_TRUE(differs);
}

// add_column_parts' order by hand: 63 parts in 32 runs of 2 (the last run one part), each run
// summed in part order, the runs in run order, then added to dst; four columns at once and one.
// Values chosen so that another grouping rounds otherwise: 1 + 2^-24 + 2^-24 is 1 in fp32 taken
// left to right, 1 + 2^-23 in pairs.
TEST(OrderedSumsEmulated, TheColumnPartsAddInRunsOfConsecutiveParts) {
  const float tiny = std::ldexp(1.f, -24);
  std::vector<float> parts(63, 0.f);
  parts[0] = 1.f, parts[1] = parts[2] = parts[3] = tiny;
  for (const int64_t C : {4, 1}) {
    std::vector<float> wide(size_t(63 * C)), dst(size_t(C), 0.f);
    for (size_t i = 0; i < wide.size(); i++) wide[i] = parts[i / size_t(C)];
    EXPECT_EQ(add_column_parts_values(dst.data(), wide.data(), C), C == 4 ? 4 : 1);
    testing::emulated_add_column_parts(dst.data(), wide.data(), 63, C);
    // Runs of 2: (1 + tiny) = 1, (tiny + tiny) = 2^-23, then 1 + 2^-23.
    for (float d : dst) EXPECT_EQ(d, 1.f + 2 * tiny) << C << " columns";
  }
  float left_to_right = 0.f;
  for (float p : parts) left_to_right += p;
  EXPECT_EQ(left_to_right, 1.f) << "the values do not tell the orders apart";
}

// ---- The embedding's gradient ----

struct Sorted {
  std::vector<int32_t> keys, rows;
};

Sorted sort_stably(const std::vector<int32_t>& ids) {
  Sorted s{{}, std::vector<int32_t>(ids.size())};
  std::iota(s.rows.begin(), s.rows.end(), 0);
  std::stable_sort(s.rows.begin(), s.rows.end(), [&](int32_t a, int32_t b) { return ids[size_t(a)] < ids[size_t(b)]; });
  for (int32_t r : s.rows) s.keys.push_back(ids[size_t(r)]);
  return s;
}

// The two kernels of the sorted form, V values a thread, pieces of `piece` positions. With
// poison_ends, the crossing kernel runs with the heads and tails the pieces kernel wrote poisoned
// until each block's wait (emu::PriorGridWrites: programmatic launch's contract).
template <int V>
std::vector<float> embedding_sorted(const std::vector<float>& dwte0, const std::vector<float>& dout,
                                    const std::vector<int32_t>& ids, int64_t C, int64_t piece,
                                    bool poison_ends = false) {
  const int64_t N = int64_t(ids.size()), pieces = (N + piece - 1) / piece;
  const Sorted s = sort_stably(ids);
  std::vector<float> dwte = dwte0, ends(size_t(2 * pieces * C), NAN);
  const EmbeddingSortedArgs a{dwte.data(), ends.data(), ends.data() + pieces * C, dout.data(), s.keys.data(),
                              s.rows.data(), N, C, piece};
  const unsigned x = unsigned((C / V + kEmbeddingThreads - 1) / kEmbeddingThreads);
  emu::launch({x, unsigned(pieces), 1}, kEmbeddingThreads, 0, embedding_piece_sums_kernel<V>, a);
  if (pieces < 2) return dwte;
  const std::vector<float> written = ends;
  emu::PriorGridWrites writes{[&] { std::fill(ends.begin(), ends.end(), NAN); }, [&] { ends = written; }};
  std::optional<emu::PriorGridWritesScope> scope;
  if (poison_ends) scope.emplace(writes);
  emu::launch({x, unsigned(pieces - 1), 1}, kEmbeddingThreads, 0, embedding_crossing_sums_kernel<V>, a);
  return dwte;
}

// ids with runs of every kind: a few ids repeated throughout (a prompt template's tokens; id 0
// from padding), ids seen once, and a stretch of one id long enough to cross several pieces.
std::vector<int32_t> skewed_ids(int64_t N, int32_t vocab, uint64_t seed) {
  std::vector<int32_t> ids(static_cast<size_t>(N));
  uint64_t state = seed * 0x9E3779B97F4A7C15ull + 1;
  for (int64_t n = 0; n < N; n++) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    const uint32_t r = uint32_t(state >> 33);
    ids[size_t(n)] = r % 3 == 0 ? int32_t(r / 3 % 4) : int32_t(r / 3 % uint32_t(vocab));
  }
  for (int64_t n = N / 2; n < N / 2 + N / 4; n++) ids[size_t(n)] = vocab - 1;
  return ids;
}

struct EmbeddingCase {
  int64_t N, C, piece;
};
// One row; pieces of 4 and 5 (runs crossing one and many edges, the last piece short); the launch's
// 32; widths of one quad, of several, and one that is not a multiple of 4 (one value a thread);
// a run over 62 pieces (the crossing sums' heads in several groups of loads, the last partial).
constexpr EmbeddingCase kEmbeddingCases[] = {{1, 4, 4},    {7, 8, 4},    {50, 12, 5},   {100, 8, 4},
                                             {257, 20, 32}, {300, 6, 7}, {1000, 8, 4}};

template <int V>
void check_embedding(const EmbeddingCase& c) {
  const int32_t vocab = 17;
  const std::vector<int32_t> ids = skewed_ids(c.N, vocab, uint64_t(c.N));
  // Integer values: the CPU's gradient exactly.
  const std::vector<float> idout = integers(size_t(c.N * c.C), 6), idwte = integers(size_t(vocab * c.C), 7);
  std::vector<float> iwant = idwte;
  cpu_ops().embedding_backward(iwant.data(), idout.data(), ids.data(), c.N, c.C);
  EXPECT_TRUE(same_bits(embedding_sorted<V>(idwte, idout, ids, c.C, c.piece), iwant)) << "integer values";
  // Real values: the CPU's to fp32 rounding, the same bits in every block order.
  const std::vector<float> dout = randn(size_t(c.N * c.C), 8), dwte0 = randn(size_t(vocab * c.C), 9);
  std::vector<float> want = dwte0;
  cpu_ops().embedding_backward(want.data(), dout.data(), ids.data(), c.N, c.C);
  const std::vector<float> got = embedding_sorted<V>(dwte0, dout, ids, c.C, c.piece);
  for (int32_t id = 0; id < vocab; id++)
    for (int64_t j = 0; j < c.C; j++) {
      double sum_abs = std::fabs(dwte0[size_t(id * c.C + j)]);
      int64_t terms = 1;
      for (int64_t n = 0; n < c.N; n++)
        if (ids[size_t(n)] == id) sum_abs += std::fabs(dout[size_t(n * c.C + j)]), terms++;
      ASSERT_NEAR(got[size_t(id * c.C + j)], want[size_t(id * c.C + j)], 2 * fp32_sum_error(terms + 1, sum_abs))
          << "id " << id << " column " << j;
    }
  for (const uint64_t seed : {1, 2}) {
    const emu::ShuffledBlocks shuffled(seed);
    EXPECT_TRUE(same_bits(embedding_sorted<V>(dwte0, dout, ids, c.C, c.piece), got)) << "block order " << seed;
  }
}

TEST(OrderedSumsEmulated, EmbeddingGradientOverSortedIdsIsTheCpusAndTheSameBitsInEveryBlockOrder) {
  for (const EmbeddingCase& c : kEmbeddingCases) {
    SCOPED_TRACE("N " + std::to_string(c.N) + " C " + std::to_string(c.C) + " piece " + std::to_string(c.piece));
    if (c.C % 4 == 0) check_embedding<4>(c);
    check_embedding<1>(c);
  }
}

// One id throughout: every edge is crossed, by one run that its first edge's thread sums alone
// (the first piece's tail, then every head); ids all distinct: every run inside its piece, and
// the crossing kernel adds nothing.
TEST(OrderedSumsEmulated, EmbeddingRunsAcrossEveryPieceOrNone) {
  const int64_t C = 4, piece = 4;
  for (const int64_t N : {int64_t(23), int64_t(70)}) {  // 5 and 17 heads: one group of loads, and three
    const std::vector<float> dout = integers(size_t(N * C), 10);
    for (const bool one_id : {true, false}) {
      std::vector<int32_t> ids(static_cast<size_t>(N));
      for (int64_t n = 0; n < N; n++) ids[size_t(n)] = one_id ? 2 : int32_t(N - 1 - n);
      const int32_t vocab = int32_t(N);
      const std::vector<float> dwte0(size_t(vocab * C), 0.5f);
      std::vector<float> want = dwte0;
      cpu_ops().embedding_backward(want.data(), dout.data(), ids.data(), N, C);
      EXPECT_TRUE(same_bits(embedding_sorted<4>(dwte0, dout, ids, C, piece), want)) << "N " << N << " one id " << one_id;
    }
  }
}

// Programmatic launch's contract (emu::PriorGridWrites): the parts' sum and the crossing sums run
// launched early, so they may read what the kernel before them writes (the parts; the heads and
// tails) only after their wait. Poisoned until each block's wait, the same results.
TEST(OrderedSumsEmulated, TheSecondKernelsReadTheFirstsWritesOnlyAfterTheirWait) {
  const int64_t P = 37, C = 300;
  const std::vector<float> parts = randn(size_t(P * C), 12), dst0 = randn(size_t(C), 13);
  std::vector<float> want = dst0, got = dst0, seen = parts;
  testing::emulated_add_column_parts(want.data(), parts.data(), P, C);
  emu::PriorGridWrites writes{[&] { std::fill(seen.begin(), seen.end(), NAN); }, [&] { seen = parts; }};
  {
    const emu::PriorGridWritesScope scope(writes);
    testing::emulated_add_column_parts(got.data(), seen.data(), P, C);
  }
  EXPECT_TRUE(same_bits(got, want)) << "the parts' sum";

  const int64_t N = 50, piece = 5;
  const int32_t vocab = 17;
  const std::vector<int32_t> ids = skewed_ids(N, vocab, 3);
  const std::vector<float> dout = randn(size_t(N * C), 14), dwte0 = randn(size_t(vocab * C), 15);
  const std::vector<float> plain = embedding_sorted<4>(dwte0, dout, ids, C, piece);
  EXPECT_TRUE(same_bits(embedding_sorted<4>(dwte0, dout, ids, C, piece, true), plain)) << "the crossing sums";
}

// ---- The sum of squares ----

double squares_ordered(const std::vector<float>& x, unsigned blocks) {
  double total = NAN;
  std::vector<double> parts(blocks, NAN);
  unsigned count = 0;
  emu::launch({blocks, 1, 1}, kSquaresThreads, 0, sum_squares_ordered_kernel, &total, parts.data(), &count, x.data(),
              int64_t(x.size()));
  EXPECT_EQ(count, 0u) << "the last block leaves the count at zero for the next call";
  return total;
}

TEST(OrderedSumsEmulated, SumOfSquaresIsTheSameBitsInEveryBlockOrder) {
  for (const auto& [n, blocks] : {std::pair<size_t, unsigned>{1, 1}, {1000, 3}, {5000, 7}, {300, 4}}) {
    SCOPED_TRACE("n " + std::to_string(n) + " blocks " + std::to_string(blocks));
    const std::vector<float> x = randn(n, 11);
    double want = 0;
    for (float v : x) want += double(v) * v;
    const double got = squares_ordered(x, blocks);
    EXPECT_NEAR(got, want, 1e-12 * want);
    for (const uint64_t seed : {1, 2, 3}) {
      const emu::ShuffledBlocks shuffled(seed);
      const double again = squares_ordered(x, blocks);
      EXPECT_EQ(std::memcmp(&again, &got, sizeof got), 0) << "block order " << seed;
    }
  }
}

}  // namespace
}  // namespace azr::kernels::cuda_detail
