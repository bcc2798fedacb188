// The CUDA op table against the CPU op table (kernels/cpu, itself checked against PyTorch in
// tests/model/transformer_test.cpp), op by op, on random inputs: the same call on the same
// numbers must give the same result up to fp32 summation order. Backward ops are called on
// non-zero gradient buffers, so the accumulate-vs-overwrite contract of kernels/ops.h is checked
// too. Odd sizes (not multiples of 32, 256 or a tile) everywhere on purpose.
//
// Needs a CUDA device; without one every test skips with the reason (scripts/gpu_check.sh runs
// them on a GPU machine).
#include <gtest/gtest.h>

#include <algorithm>
#include <tuple>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "kernels/backend.h"
#include "kernels/buffer.h"
#include "kernels/cpu/bf16_matmul.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/internal.h"
#include "kernels/cuda/ordered_sums_limits.h"
#include "kernels/ops.h"
#include "tests/kernels/attention_case.h"
#include "tests/kernels/scoped_cuda_setting.h"
#include "tests/kernels/gemv_cases.h"
#include "tests/kernels/random_inputs.h"
#include "tests/kernels/same_bits.h"
#include "tests/kernels/sampling_cases.h"
#include "tests/kernels/tensor_core_reference.h"
#include "tests/kernels/token_stats_cases.h"

namespace azr::kernels {
namespace {

using testing::AttentionChoice;
using testing::AttentionBackwardChoice;
using testing::AttentionWarpRows;
using testing::AttnCase;
using testing::attn_case_name;
using testing::emulate_tensor_core_attention;
using testing::expect_matches_tensor_core_reference;
using testing::filtered_at;
using testing::kSampleCases;
using testing::make_awkward;
using testing::randn;
using testing::same_bits;
using testing::SampleCase;
using testing::TensorCoreReference;
using testing::uniforms_off_boundaries;

template <class T>
Buffer<T> to_device(const std::vector<T>& h) {
  Buffer<T> d(cuda_ops(), std::max<size_t>(1, h.size()));
  d.upload(h.data(), h.size());
  return d;
}

template <class T>
std::vector<T> to_host(const Buffer<T>& d, size_t n) {
  std::vector<T> h(n);
  d.download(h.data(), n);
  return h;
}

// |got - want| <= atol + rtol |want| everywhere; on failure, the worst element and how many fail.
void expect_close(const std::vector<float>& got, const std::vector<float>& want, float atol, float rtol,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  size_t bad = 0, worst = 0;
  double worst_excess = -1;
  for (size_t i = 0; i < got.size(); i++) {
    const double err = std::fabs(double(got[i]) - want[i]), tol = atol + rtol * std::fabs(double(want[i]));
    if (!(err <= tol)) bad++;  // NaN counts as bad
    if (!(err - tol <= worst_excess)) worst_excess = err - tol, worst = i;
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << got.size() << " elements differ; worst at " << worst
                     << ": cuda " << got[worst] << " vs cpu " << want[worst];
}

class CudaOps : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (cuda_device_count(&why) == 0)
      GTEST_SKIP() << "no CUDA device here (" << why << "); the CUDA kernels are checked on a GPU machine "
                   << "(scripts/gpu_check.sh)";
  }
  const Ops& cpu = cpu_ops();
  const Ops& gpu = cuda_ops();
};

// Uploads and downloads of up to 64 KiB are staged in pinned memory and copied on the op stream
// (kernels/cuda/cuda_ops.cu): each upload lands where it was sent, in the stream's order with the
// ops around it, though the host buffer is overwritten as soon as upload returns and a burst has
// more uploads than the staging has slots (16); a download right after one sees it, and one after
// the kernels sees their sums; a larger upload keeps the synchronous copy; and a recording that
// uploads or downloads fails, as kernels/ops.h asks.
TEST_F(CudaOps, SmallUploadsLandInTheOpStreamsOrder) {
  const int64_t n = 1000;
  Buffer<float> sum(gpu, size_t(n)), piece(gpu, size_t(n));
  std::vector<float> host(static_cast<size_t>(n)), want(static_cast<size_t>(n), 0.f);
  for (int round = 0; round < 40; round++) {
    for (int64_t i = 0; i < n; i++) host[size_t(i)] = float(round * n + i);
    piece.upload(host.data(), size_t(n));
    std::fill(host.begin(), host.end(), -1e9f);
    gpu.add(sum.data(), sum.data(), piece.data(), n);  // this round's piece, not the next one's
    for (int64_t i = 0; i < n; i++) want[size_t(i)] += float(round * n + i);  // integers: exact sums
  }
  EXPECT_EQ(to_host<float>(sum, size_t(n)), want);
  for (int64_t i = 0; i < n; i++) host[size_t(i)] = float(7 * i);
  piece.upload(host.data(), size_t(n));
  EXPECT_EQ(to_host<float>(piece, size_t(n)), host) << "a download right after an upload";

  const std::vector<float> large = randn(20000, 4);  // 80 KB: the synchronous copy
  Buffer<float> d_large(gpu, large.size());
  d_large.upload(large.data(), large.size());
  EXPECT_EQ(to_host<float>(d_large, large.size()), large);

  std::vector<float> back(static_cast<size_t>(n));
  gpu.recorder.begin();
  EXPECT_THROW(piece.upload(host.data(), size_t(n)), std::runtime_error);
  gpu.recorder.abandon();
  gpu.recorder.begin();
  EXPECT_THROW(piece.download(back.data(), size_t(n)), std::runtime_error);
  gpu.recorder.abandon();
  piece.upload(host.data(), size_t(n));  // and uploads work again after it
  EXPECT_EQ(to_host<float>(piece, size_t(n)), host);
}

// Started downloads (download_start, generation's sampled tokens read while the next step runs):
// each brings the bytes its source held when it was queued, not what the ops queued after it write
// there, and brings them by its wait, whether the wait comes at once, after more downloads than the
// staging has slots (the slot's reuse delivers them), or in any order; a second wait does nothing;
// larger ones are copied at once (ticket 0); and a recording refuses them.
TEST_F(CudaOps, StartedDownloadsBringWhatTheSourceHeldWhenQueued) {
  const int64_t n = 500, rounds = 40;  // 40 downloads in flight: the 16 slots are each reused
  Buffer<float> source(gpu, size_t(n));
  std::vector<std::vector<float>> got(size_t(rounds), std::vector<float>(size_t(n), -1.f));
  std::vector<std::vector<float>> want(static_cast<size_t>(rounds));
  std::vector<int64_t> tickets;
  std::vector<float> host(static_cast<size_t>(n));
  for (int64_t round = 0; round < rounds; round++) {
    for (int64_t i = 0; i < n; i++) host[size_t(i)] = float(round * n + i);
    want[size_t(round)] = host;
    source.upload(host.data(), size_t(n));
    tickets.push_back(gpu.download_start(got[size_t(round)].data(), source.data(), sizeof(float) * size_t(n)));
    gpu.fill_zero(source.data(), n);  // queued after the download: not what it brings
  }
  for (int64_t round = rounds - 1; round >= 0; round--) gpu.download_wait(tickets[size_t(round)]);
  for (int64_t round = 0; round < rounds; round++) EXPECT_EQ(got[size_t(round)], want[size_t(round)]) << round;
  gpu.download_wait(tickets.back());  // again: nothing
  EXPECT_EQ(got.back(), want.back());

  const std::vector<float> large = randn(20000, 5);  // 80 KB: past a slot, copied at once
  Buffer<float> d_large(gpu, large.size());
  d_large.upload(large.data(), large.size());
  std::vector<float> large_back(large.size());
  EXPECT_EQ(gpu.download_start(large_back.data(), d_large.data(), sizeof(float) * large.size()), 0);
  EXPECT_EQ(large_back, large);

  gpu.recorder.begin();
  EXPECT_THROW(gpu.download_start(host.data(), source.data(), sizeof(float) * size_t(n)), std::runtime_error);
  gpu.recorder.abandon();
}

TEST_F(CudaOps, EmbeddingForwardAndBackwardWithRepeatedIds) {
  const int64_t N = 37, C = 70, V = 11;
  std::vector<int32_t> ids(N);
  for (int64_t n = 0; n < N; n++) ids[n] = int32_t((n * 7) % V);  // every id several times
  const auto wte = randn(V * C, 1), dout = randn(N * C, 2), dwte0 = randn(V * C, 3);
  std::vector<float> out(N * C), dwte = dwte0;
  cpu.embedding_forward(out.data(), ids.data(), wte.data(), N, C);
  cpu.embedding_backward(dwte.data(), dout.data(), ids.data(), N, C);

  auto d_ids = to_device(ids);
  auto d_wte = to_device(wte), d_dout = to_device(dout), d_dwte = to_device(dwte0);
  Buffer<float> d_out(cuda_ops(), out.size());
  gpu.embedding_forward(d_out.data(), d_ids.data(), d_wte.data(), N, C);
  gpu.embedding_backward(d_dwte.data(), d_dout.data(), d_ids.data(), N, C);
  expect_close(to_host<float>(d_out, out.size()), out, 0, 0, "embedding out");
  expect_close(to_host<float>(d_dwte, dwte.size()), dwte, 1e-5f, 1e-5f, "dwte");
}

// What a decode step launched ahead may embed before the host has checked the sampler's ids: -1
// where a filtered sampler's kept set was empty. A row of NaN, the other rows the table's, and the
// device fine after it (a read before the table could fault and end the process's CUDA context).
TEST_F(CudaOps, EmbeddingForwardGivesNaNRowsForNegativeIds) {
  const int64_t N = 4, C = 70, V = 5;
  const std::vector<int32_t> ids = {3, -1, 0, -1};
  const auto wte = randn(V * C, 9);
  auto d_ids = to_device(ids);
  auto d_wte = to_device(wte);
  Buffer<float> d_out(cuda_ops(), size_t(N * C));
  gpu.embedding_forward(d_out.data(), d_ids.data(), d_wte.data(), N, C);
  const std::vector<float> out = to_host<float>(d_out, size_t(N * C));
  for (int64_t n = 0; n < N; n++)
    for (int64_t c = 0; c < C; c++) {
      const float got = out[size_t(n * C + c)];
      if (ids[size_t(n)] < 0)
        ASSERT_TRUE(std::isnan(got)) << "row " << n << " column " << c << ": " << got;
      else
        ASSERT_EQ(got, wte[size_t(ids[size_t(n)] * C + c)]) << "row " << n << " column " << c;
    }
}

TEST_F(CudaOps, RmsNormForwardAndBackward) {
  const int64_t N = 33, C = 300;
  const auto x = randn(N * C, 4, 2.f), w = randn(C, 5), dout = randn(N * C, 6), dx0 = randn(N * C, 7),
             dw0 = randn(C, 8);
  std::vector<float> out(N * C), rstd(N), dx = dx0, dw = dw0;
  cpu.rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, 1e-6f);
  cpu.rmsnorm_backward(dx.data(), dw.data(), dout.data(), x.data(), w.data(), rstd.data(), N, C);

  auto d_x = to_device(x), d_w = to_device(w), d_dout = to_device(dout), d_dx = to_device(dx0), d_dw = to_device(dw0);
  Buffer<float> d_out(cuda_ops(), out.size()), d_rstd(cuda_ops(), N);
  gpu.rmsnorm_forward(d_out.data(), d_rstd.data(), d_x.data(), d_w.data(), N, C, 1e-6f);
  gpu.rmsnorm_backward(d_dx.data(), d_dw.data(), d_dout.data(), d_x.data(), d_w.data(),
                       d_rstd.data(), N, C);
  expect_close(to_host<float>(d_out, out.size()), out, 1e-5f, 1e-5f, "rmsnorm out");
  expect_close(to_host<float>(d_rstd, N), rstd, 1e-6f, 1e-5f, "rstd");
  expect_close(to_host<float>(d_dx, dx.size()), dx, 1e-4f, 1e-4f, "rmsnorm dx");
  expect_close(to_host<float>(d_dw, dw.size()), dw, 1e-4f, 1e-4f, "rmsnorm dw");

  // The Bf16 table's variant: the same output and rstd, bit for bit, and that output rounded as
  // to_bf16 rounds it.
  const Ops& dev = cuda_bf16_matmul_ops();
  Buffer<float> d_out_b(cuda_ops(), out.size()), d_rstd_b(cuda_ops(), N);
  Buffer<uint16_t> d_out16(cuda_ops(), out.size()), d_want16(cuda_ops(), out.size());
  dev.rmsnorm_forward_w16(d_out_b.data(), d_out16.data(), d_rstd_b.data(), d_x.data(), d_w.data(), N, C, 1e-6f);
  dev.to_bf16(d_want16.data(), d_out.data(), int64_t(out.size()));
  EXPECT_EQ(to_host<float>(d_out_b, out.size()), to_host<float>(d_out, out.size()));
  EXPECT_EQ(to_host<float>(d_rstd_b, size_t(N)), to_host<float>(d_rstd, size_t(N)));
  EXPECT_EQ(to_host<uint16_t>(d_out16, out.size()), to_host<uint16_t>(d_want16, out.size()));

  // The residual add fused in front (res_out aliasing x, as decode calls it): the GPU's add and
  // norm, bit for bit.
  auto d_res = to_device(dout);  // x of the fused call: res_out = dout + x
  Buffer<float> d_sum(cuda_ops(), out.size()), d_out_s(cuda_ops(), out.size()), d_out_f(cuda_ops(), out.size()),
      d_rstd_f(cuda_ops(), N);
  gpu.add(d_sum.data(), d_dout.data(), d_x.data(), N * C);
  gpu.rmsnorm_forward(d_out_s.data(), d_rstd.data(), d_sum.data(), d_w.data(), N, C, 1e-6f);
  dev.to_bf16(d_want16.data(), d_out_s.data(), int64_t(out.size()));
  dev.residual_rmsnorm_forward_w16(d_res.data(), d_out_f.data(), d_out16.data(), d_rstd_f.data(), d_res.data(),
                                   d_x.data(), d_w.data(), N, C, 1e-6f);
  EXPECT_EQ(to_host<float>(d_res, out.size()), to_host<float>(d_sum, out.size()));
  EXPECT_EQ(to_host<float>(d_out_f, out.size()), to_host<float>(d_out_s, out.size()));
  EXPECT_EQ(to_host<float>(d_rstd_f, size_t(N)), to_host<float>(d_rstd, size_t(N)));
  EXPECT_EQ(to_host<uint16_t>(d_out16, out.size()), to_host<uint16_t>(d_want16, out.size()));
  // Without the fp32 output (a bf16 model's kept norm outputs): the same rounding and rstd.
  auto d_res2 = to_device(dout);
  Buffer<uint16_t> d_only16(cuda_ops(), out.size());
  Buffer<float> d_rstd_o(cuda_ops(), N);
  dev.residual_rmsnorm_forward_w16(d_res2.data(), nullptr, d_only16.data(), d_rstd_o.data(), d_res2.data(),
                                   d_x.data(), d_w.data(), N, C, 1e-6f);
  EXPECT_EQ(to_host<uint16_t>(d_only16, out.size()), to_host<uint16_t>(d_want16, out.size()));
  EXPECT_EQ(to_host<float>(d_rstd_o, size_t(N)), to_host<float>(d_rstd, size_t(N)));
  EXPECT_EQ(to_host<float>(d_res2, out.size()), to_host<float>(d_sum, out.size()));
  dev.rmsnorm_forward_w16(nullptr, d_only16.data(), d_rstd_o.data(), d_x.data(), d_w.data(), N, C, 1e-6f);
  dev.to_bf16(d_want16.data(), d_out.data(), int64_t(out.size()));
  EXPECT_EQ(to_host<uint16_t>(d_only16, out.size()), to_host<uint16_t>(d_want16, out.size()));
}

// Offsets of one float into each buffer: the model's weights are slices of one flat buffer, so
// cuBLASLt must cope with 4-byte-aligned operands.
// (bias, pointer offset in floats, bf16): the bf16 tables round the same operands on both sides, so
// they agree as closely as the fp32 ones.
class CudaMatmul : public CudaOps, public ::testing::WithParamInterface<std::tuple<bool, int64_t, bool>> {};

TEST_P(CudaMatmul, ForwardAndBackwardMatchCpu) {
  const auto [with_bias, offset, bf16] = GetParam();
  const Ops& ref = bf16 ? cpu_bf16_matmul_ops() : cpu_ops();
  const Ops& dev = bf16 ? cuda_bf16_matmul_ops() : cuda_ops();
  const int64_t N = 45, IC = 67, OC = 93;
  const auto inp = randn(N * IC, 9), w = randn(OC * IC, 10, 0.1f), bias = randn(OC, 11), dout = randn(N * OC, 12),
             dinp0 = randn(N * IC, 13), dw0 = randn(OC * IC, 14), dbias0 = randn(OC, 15);
  std::vector<float> out(N * OC), dinp = dinp0, dw = dw0, dbias = dbias0;
  ref.matmul_forward(out.data(), inp.data(), w.data(), with_bias ? bias.data() : nullptr, N, IC, OC);
  ref.matmul_backward(dinp.data(), dw.data(), with_bias ? dbias.data() : nullptr, dout.data(), inp.data(), w.data(),
                      N, IC, OC);

  auto padded = [&](const std::vector<float>& v) {
    std::vector<float> p(size_t(offset), 0.f);
    p.insert(p.end(), v.begin(), v.end());
    return to_device(p);
  };
  auto d_inp = padded(inp), d_w = padded(w), d_bias = padded(bias), d_dout = padded(dout), d_dinp = padded(dinp0),
       d_dw = padded(dw0), d_dbias = padded(dbias0), d_out = padded(std::vector<float>(N * OC));
  auto at = [&](Buffer<float>& b) { return b.data() + offset; };
  dev.matmul_forward(at(d_out), at(d_inp), at(d_w), with_bias ? at(d_bias) : nullptr, N, IC, OC);
  dev.matmul_backward(at(d_dinp), at(d_dw), with_bias ? at(d_dbias) : nullptr, at(d_dout), at(d_inp), at(d_w), N, IC,
                      OC);
  auto back = [&](const Buffer<float>& b, size_t n) {
    auto h = to_host<float>(b, n + size_t(offset));
    return std::vector<float>(h.begin() + offset, h.end());
  };
  expect_close(back(d_out, out.size()), out, 1e-4f, 1e-4f, "matmul out");
  expect_close(back(d_dinp, dinp.size()), dinp, 1e-4f, 1e-4f, "dinp");
  expect_close(back(d_dw, dw.size()), dw, 1e-4f, 1e-4f, "dw");
  if (with_bias) expect_close(back(d_dbias, dbias.size()), dbias, 1e-4f, 1e-4f, "dbias");
  if (bf16) {  // the GPU did round: its product is far from the exact fp32 one
    std::vector<float> exact(N * OC);
    cpu.matmul_forward(exact.data(), inp.data(), w.data(), with_bias ? bias.data() : nullptr, N, IC, OC);
    const auto got = back(d_out, out.size());
    double worst = 0;
    for (size_t i = 0; i < got.size(); i++) worst = std::max(worst, std::fabs(double(got[i]) - exact[i]));
    EXPECT_GT(worst, 1e-3) << "bf16 GEMM equals the fp32 one: the operands were not rounded";

    // to_bf16 rounds as the CPU does, bit for bit, and the GEMMs on those bf16 weights are the
    // GEMMs on the fp32 weights (the same kernels after the rounding), bit for bit.
    std::vector<uint16_t> w16(w.size());
    ref.to_bf16(w16.data(), w.data(), int64_t(w.size()));
    Buffer<uint16_t> d_w16(cuda_ops(), w.size());
    dev.to_bf16(d_w16.data(), at(d_w), int64_t(w.size()));
    std::vector<uint16_t> got16(w.size());
    d_w16.download(got16.data(), got16.size());
    EXPECT_EQ(got16, w16);
    auto d_out16 = padded(std::vector<float>(N * OC));
    dev.matmul_forward_w16(at(d_out16), at(d_inp), d_w16.data(), with_bias ? at(d_bias) : nullptr, N, IC, OC);
    EXPECT_EQ(back(d_out16, out.size()), got);
    auto d_dinp16 = padded(dinp0), d_dw16 = padded(dw0), d_dinp2 = padded(dinp0), d_dw2 = padded(dw0);
    dev.matmul_backward_w16(at(d_dinp16), at(d_dw16), nullptr, at(d_dout), at(d_inp), d_w16.data(), N, IC, OC);
    dev.matmul_backward(at(d_dinp2), at(d_dw2), nullptr, at(d_dout), at(d_inp), at(d_w), N, IC, OC);
    EXPECT_EQ(back(d_dinp16, dinp.size()), back(d_dinp2, dinp.size()));
    EXPECT_EQ(back(d_dw16, dw.size()), back(d_dw2, dw.size()));

    // The activations rounded by the caller (a norm's bf16 output) instead: the same GEMMs on the
    // same bf16 values, bit for bit.
    Buffer<uint16_t> d_inp16(cuda_ops(), inp.size());
    dev.to_bf16(d_inp16.data(), at(d_inp), int64_t(inp.size()));
    auto d_out_a = padded(std::vector<float>(N * OC));
    dev.matmul_forward_a16w16(at(d_out_a), d_inp16.data(), d_w16.data(), with_bias ? at(d_bias) : nullptr, N, IC, OC);
    EXPECT_EQ(back(d_out_a, out.size()), got);
    auto d_dinp_a = padded(dinp0), d_dw_a = padded(dw0);
    dev.matmul_backward_a16w16(at(d_dinp_a), at(d_dw_a), nullptr, at(d_dout), d_inp16.data(), d_w16.data(), N, IC,
                               OC);
    EXPECT_EQ(back(d_dinp_a, dinp.size()), back(d_dinp2, dinp.size()));
    EXPECT_EQ(back(d_dw_a, dw.size()), back(d_dw2, dw.size()));
  }
}

INSTANTIATE_TEST_SUITE_P(BiasAlignmentPrecision, CudaMatmul,
                         ::testing::Combine(::testing::Bool(), ::testing::Values<int64_t>(0, 1), ::testing::Bool()));

TEST_F(CudaOps, MatmulBackwardSkipsNullGradients) {
  const int64_t N = 8, IC = 16, OC = 24;
  const auto inp = randn(N * IC, 16), w = randn(OC * IC, 17), dout = randn(N * OC, 18), dw0 = randn(OC * IC, 19);
  std::vector<float> dw = dw0;
  cpu.matmul_backward(nullptr, dw.data(), nullptr, dout.data(), inp.data(), w.data(), N, IC, OC);
  auto d_inp = to_device(inp), d_w = to_device(w), d_dout = to_device(dout), d_dw = to_device(dw0);
  gpu.matmul_backward(nullptr, d_dw.data(), nullptr, d_dout.data(), d_inp.data(), d_w.data(), N,
                      IC, OC);
  expect_close(to_host<float>(d_dw, dw.size()), dw, 1e-4f, 1e-4f, "dw only");
}

// matmul_forward_o16 (cuBLASLt's epilogue stores bf16) against the CPU table's (the fp32 product,
// rounded): the two sum in different orders, so each value within one bf16 step and the sums'
// error bound (expect_bf16_within), nearly all identical. Shapes: a slice of 1.5B's gate/up GEMM
// (K = 1,536) and a small one of odd sizes.
TEST_F(CudaOps, GemmWithBf16OutputIsTheCpuProductRounded) {
  const Ops& dev = cuda_bf16_matmul_ops();
  for (const auto& [N, IC, OC] : {std::tuple<int64_t, int64_t, int64_t>{128, 1536, 2048}, {37, 96, 40}}) {
    SCOPED_TRACE("N " + std::to_string(N) + " IC " + std::to_string(IC) + " OC " + std::to_string(OC));
    const auto x16 = testing::bf16_bits(randn(size_t(N * IC), 61));
    const auto w16 = testing::bf16_bits(randn(size_t(OC * IC), 62, 0.05f));
    std::vector<uint16_t> want(size_t(N * OC));
    cpu_bf16_matmul_ops().matmul_forward_o16(want.data(), x16.data(), w16.data(), N, IC, OC);
    std::vector<double> slack(want.size());
    for (int64_t n = 0; n < N; n++)
      for (int64_t o = 0; o < OC; o++)
        slack[size_t(n * OC + o)] = 2 * testing::dot_bound(x16.data() + n * IC, w16.data() + o * IC, IC, nullptr).error;
    auto d_x = to_device(x16), d_w = to_device(w16), d_out = to_device(std::vector<uint16_t>(want.size(), 0xFFFF));
    dev.matmul_forward_o16(d_out.data(), d_x.data(), d_w.data(), N, IC, OC);
    testing::expect_bf16_within(to_host<uint16_t>(d_out, want.size()), want, nullptr, slack, 0.95, "out16");

    // The backward's dinp16 = bf16(dout16 w) with out16 as dout16, [N, IC], likewise against the
    // CPU's; its dW is matmul_backward_g16's, bit for bit (the same plan).
    const std::vector<uint16_t> dout16 = want;
    std::vector<uint16_t> dinp_want(size_t(N * IC));
    std::vector<float> dw_cpu(size_t(OC * IC));
    cpu_bf16_matmul_ops().matmul_backward_g16_dinp16(dinp_want.data(), dw_cpu.data(), dout16.data(), x16.data(),
                                                     w16.data(), N, IC, OC, kWriteDw);
    std::vector<double> dslack(dinp_want.size());
    for (int64_t n = 0; n < N; n++)
      for (int64_t i = 0; i < IC; i++) {
        double sum_abs = 0;
        for (int64_t o = 0; o < OC; o++)
          sum_abs += std::fabs(double(testing::bf16_value(dout16[size_t(n * OC + o)])) *
                               testing::bf16_value(w16[size_t(o * IC + i)]));
        dslack[size_t(n * IC + i)] = 2 * testing::fp32_sum_error(OC, sum_abs);
      }
    auto d_dout = to_device(dout16), d_dinp = to_device(std::vector<uint16_t>(dinp_want.size(), 0xFFFF));
    auto d_dw = to_device(std::vector<float>(dw_cpu.size(), NAN));
    auto d_dw_g16 = to_device(std::vector<float>(dw_cpu.size(), NAN));
    dev.matmul_backward_g16_dinp16(d_dinp.data(), d_dw.data(), d_dout.data(), d_x.data(), d_w.data(), N, IC, OC,
                                   kWriteDw);
    dev.matmul_backward_g16(nullptr, d_dw_g16.data(), d_dout.data(), d_x.data(), d_w.data(), N, IC, OC, kWriteDw);
    testing::expect_bf16_within(to_host<uint16_t>(d_dinp, dinp_want.size()), dinp_want, nullptr, dslack, 0.95,
                                "dinp16");
    EXPECT_EQ(to_host<float>(d_dw, dw_cpu.size()), to_host<float>(d_dw_g16, dw_cpu.size())) << "dw";
    expect_close(to_host<float>(d_dw, dw_cpu.size()), dw_cpu, 1e-4f, 1e-4f, "dw against the CPU's");
  }
}

// cuda_ops_bench's gemm_algos rows time cuda_detail::gemm_algorithm_ms's products: each must be
// the product the ops run, on the same plan. Under the heuristic's first algorithm (count 1), each
// gives the op's bits: the forward's out, dinp overwritten, and dW after its two warm-ups and one
// timed run, each added to it (three accumulations, as three matmul_backward_g16 calls make).
TEST_F(CudaOps, GemmAlgorithmTimingRunsTheOpsProducts) {
  const int64_t N = 96, IC = 64, OC = 80;
  auto x16 = to_device(testing::bf16_bits(randn(N * IC, 90))), w16 = to_device(testing::bf16_bits(randn(OC * IC, 91)));
  auto dout16 = to_device(testing::bf16_bits(randn(N * OC, 92)));
  using cuda_detail::GemmProduct;
  auto timed = [&](GemmProduct which, size_t n) {
    auto out = to_device(std::vector<float>(n, 0.f));
    const auto ms = cuda_detail::gemm_algorithm_ms(which, out.data(), x16.data(), w16.data(), dout16.data(), N, IC, OC, 1, 1);
    EXPECT_EQ(ms.size(), 1u);
    EXPECT_GT(ms.at(0), 0.0);
    return to_host<float>(out, n);
  };
  auto fwd = to_device(std::vector<float>(size_t(N * OC), 0.f));
  cuda_detail::matmul_forward_a16w16_cublaslt(fwd.data(), x16.data(), w16.data(), nullptr, N, IC, OC);
  EXPECT_TRUE(same_bits(timed(GemmProduct::Forward, size_t(N * OC)), to_host<float>(fwd, size_t(N * OC))));
  auto dinp = to_device(std::vector<float>(size_t(N * IC), 0.f));
  cuda_detail::matmul_backward_g16(dinp.data(), nullptr, dout16.data(), nullptr, w16.data(), N, IC, OC, kWriteDinp);
  EXPECT_TRUE(same_bits(timed(GemmProduct::BackwardDinp, size_t(N * IC)), to_host<float>(dinp, size_t(N * IC))));
  auto dw = to_device(std::vector<float>(size_t(OC * IC), 0.f));
  for (int i = 0; i < 3; i++)
    cuda_detail::matmul_backward_g16(nullptr, dw.data(), dout16.data(), x16.data(), w16.data(), N, IC, OC, kAddBoth);
  EXPECT_TRUE(same_bits(timed(GemmProduct::BackwardDw, size_t(OC * IC)), to_host<float>(dw, size_t(OC * IC))));
}

// AZR_CUBLASLT_AUTOTUNE (cuda_set_cublaslt_autotune): the plans that time their candidates still
// compute the same products, to the order of their fp32 sums; the tuning's runs go to a scratch
// output, so dW, added to, holds one product, not the candidates' warm-ups too; and a tuned plan
// is kept, so a second call gives the first's bits.
TEST_F(CudaOps, AutotunedGemmsComputeTheSameProducts) {
  const int64_t N = 1024, IC = 1024, OC = 768;  // 1.6 GFLOP a product: past the tuning's floor
  auto x16 = to_device(testing::bf16_bits(randn(N * IC, 93))), w16 = to_device(testing::bf16_bits(randn(OC * IC, 94)));
  auto dout16 = to_device(testing::bf16_bits(randn(N * OC, 95)));
  struct Products {
    std::vector<float> out, dinp, dw;
  };
  auto run = [&](bool tune) {
    cuda_set_cublaslt_autotune(tune);
    auto out = to_device(std::vector<float>(size_t(N * OC), 0.f)), dinp = to_device(std::vector<float>(size_t(N * IC), 0.f)),
         dw = to_device(std::vector<float>(size_t(OC * IC), 0.f));
    cuda_detail::matmul_forward_a16w16_cublaslt(out.data(), x16.data(), w16.data(), nullptr, N, IC, OC);
    cuda_detail::matmul_backward_g16(dinp.data(), dw.data(), dout16.data(), x16.data(), w16.data(), N, IC, OC,
                                     kWriteDinp);
    return Products{to_host<float>(out, size_t(N * OC)), to_host<float>(dinp, size_t(N * IC)),
                    to_host<float>(dw, size_t(OC * IC))};
  };
  const bool saved = cuda_cublaslt_autotune();
  const Products heuristic = run(false);
  const Products tuned = run(true);
  // The same plans again (run() sets the choice, which drops the plans: so call the ops directly).
  auto again = to_device(std::vector<float>(size_t(N * OC), 0.f));
  cuda_detail::matmul_forward_a16w16_cublaslt(again.data(), x16.data(), w16.data(), nullptr, N, IC, OC);
  const auto again_out = to_host<float>(again, size_t(N * OC));
  cuda_set_cublaslt_autotune(saved);
  expect_close(tuned.out, heuristic.out, 1e-4f, 1e-4f, "autotuned forward");
  expect_close(tuned.dinp, heuristic.dinp, 1e-4f, 1e-4f, "autotuned dinp");
  expect_close(tuned.dw, heuristic.dw, 1e-4f, 1e-4f, "autotuned dW (one product added)");
  EXPECT_TRUE(same_bits(again_out, tuned.out));
}

TEST_F(CudaOps, RopeForwardAndBackward) {
  const int64_t N = 19, heads = 3, d = 64, max_pos = 50;
  std::vector<int32_t> pos(N);
  for (int64_t n = 0; n < N; n++) pos[n] = int32_t((n * 13) % max_pos);
  std::vector<float> cos(max_pos * d / 2), sin(cos.size());
  for (int64_t p = 0; p < max_pos; p++)
    for (int64_t i = 0; i < d / 2; i++) {
      const double angle = double(p) * std::pow(10000.0, -2.0 * double(i) / double(d));
      cos[p * d / 2 + i] = float(std::cos(angle)), sin[p * d / 2 + i] = float(std::sin(angle));
    }
  const auto x0 = randn(N * heads * d, 20);
  std::vector<float> x = x0, g = x0;
  cpu.rope_forward(x.data(), pos.data(), cos.data(), sin.data(), N, heads, d);
  cpu.rope_backward(g.data(), pos.data(), cos.data(), sin.data(), N, heads, d);
  auto d_pos = to_device(pos);
  auto d_cos = to_device(cos), d_sin = to_device(sin), d_x = to_device(x0),
       d_g = to_device(x0);
  gpu.rope_forward(d_x.data(), d_pos.data(), d_cos.data(), d_sin.data(), N, heads, d);
  gpu.rope_backward(d_g.data(), d_pos.data(), d_cos.data(), d_sin.data(), N, heads, d);
  expect_close(to_host<float>(d_x, x.size()), x, 1e-6f, 1e-6f, "rope forward");
  expect_close(to_host<float>(d_g, g.size()), g, 1e-6f, 1e-6f, "rope backward");
}

class CudaAttention : public CudaOps, public ::testing::WithParamInterface<AttnCase> {};

// Forward (out, lse) and backward (dq, dk, dv), padding rows included (zeros by contract).
TEST_P(CudaAttention, ForwardAndBackwardMatchCpu) {
  const AttnCase c = GetParam();
  const int64_t q_n = c.B * c.T * c.H * c.d, kv_n = c.B * c.T * c.KV * c.d;
  const auto q = randn(q_n, 21), k = randn(kv_n, 22), v = randn(kv_n, 23), dout = randn(q_n, 24);
  AttentionShape s{c.B, c.T, c.H, c.KV, c.d, c.T * c.KV * c.d, c.lengths.empty() ? nullptr : c.lengths.data()};
  std::vector<float> out(q_n), lse(c.B * c.H * c.T), dq(q_n, 7.f), dk(kv_n, 7.f), dv(kv_n, 7.f);
  cpu.attention_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), s);
  cpu.attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), out.data(), lse.data(), q.data(), k.data(),
                         v.data(), s);

  auto d_q = to_device(q), d_k = to_device(k), d_v = to_device(v), d_dout = to_device(dout);
  auto d_len = to_device(c.lengths);
  // Overwrite contract: start from garbage, not zeros.
  auto d_out = to_device(std::vector<float>(q_n, 7.f)), d_lse = to_device(std::vector<float>(lse.size(), 7.f));
  auto d_dq = to_device(std::vector<float>(q_n, 7.f)), d_dk = to_device(std::vector<float>(kv_n, 7.f)),
       d_dv = to_device(std::vector<float>(kv_n, 7.f));
  AttentionShape ds = s;
  ds.lengths = c.lengths.empty() ? nullptr : d_len.data();
  gpu.attention_forward(d_out.data(), d_lse.data(), d_q.data(), d_k.data(), d_v.data(), ds);
  gpu.attention_backward(d_dq.data(), d_dk.data(), d_dv.data(), d_dout.data(), d_out.data(),
                         d_lse.data(), d_q.data(), d_k.data(), d_v.data(), ds);
  expect_close(to_host<float>(d_out, out.size()), out, 1e-5f, 1e-4f, "attention out");
  expect_close(to_host<float>(d_lse, lse.size()), lse, 1e-5f, 1e-5f, "lse");
  expect_close(to_host<float>(d_dq, dq.size()), dq, 1e-4f, 1e-4f, "dq");
  expect_close(to_host<float>(d_dk, dk.size()), dk, 1e-4f, 1e-4f, "dk");
  expect_close(to_host<float>(d_dv, dv.size()), dv, 1e-4f, 1e-4f, "dv");
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CudaAttention,
    ::testing::Values(AttnCase{2, 77, 4, 2, 64, {77, 50}},         // GQA, ragged, several tiles and a partial one
                      AttnCase{1, 40, 2, 2, 128, {}},              // Qwen2.5's head dim, no lengths
                      AttnCase{3, 9, 6, 2, 40, {1, 9, 0}},         // d not a multiple of 32; a 1-token and an empty row
                      AttnCase{1, 130, 14, 2, 64, {129}},          // 0.5B's 7:1 grouping, T past four tiles
                      AttnCase{2, 33, 1, 1, 32, {33, 32}}),        // one head, tile boundary
    attn_case_name);

// Decode against the CPU over fp32 and bf16 caches, at shapes that take each path of the CUDA
// kernel: positions split across blocks (few rows) or not (many rows), lanes holding 1 to 4
// elements with and without vector loads (d = 16, 32, 40, 64, 96, 128), and more query heads per
// kv head than one block takes (group 10).
struct DecodeCase {
  int64_t R, H, KV, d, capacity;
  bool bf16;
};

std::string decode_case_name(const ::testing::TestParamInfo<DecodeCase>& info) {
  const DecodeCase& c = info.param;
  return "R" + std::to_string(c.R) + "_H" + std::to_string(c.H) + "_KV" + std::to_string(c.KV) + "_d" +
         std::to_string(c.d) + "_cap" + std::to_string(c.capacity) + (c.bf16 ? "_bf16" : "_fp32");
}

void PrintTo(const DecodeCase& c, std::ostream* os) { *os << decode_case_name({c, 0}); }

class CudaDecode : public CudaOps, public ::testing::WithParamInterface<DecodeCase> {};

// Head dims 32, 64 and 128 run every kernel: the tiles (the default; a bf16 cache), the lane groups
// and one position per warp.
TEST_P(CudaDecode, MatchesCpu) {
  const DecodeCase c = GetParam();
  using cuda_detail::CudaDecodeKernel;
  for (const CudaDecodeKernel kernel :
       {CudaDecodeKernel::Tiles, CudaDecodeKernel::LaneGroups, CudaDecodeKernel::WarpPerPosition}) {
    SCOPED_TRACE(kernel == CudaDecodeKernel::Tiles        ? "shared-memory tiles"
                 : kernel == CudaDecodeKernel::LaneGroups ? "lane-group kernel"
                                                          : "one position per warp");
    cuda_detail::cuda_set_decode_kernel(kernel);
    const int64_t slots = c.R + 2, stride = c.capacity * c.KV * c.d;
    std::vector<int32_t> slot(size_t(c.R)), pos(size_t(c.R));
    for (int64_t r = 0; r < c.R; r++) {
      slot[size_t(r)] = int32_t(c.R - r);                                          // distinct, reversed
      pos[size_t(r)] = int32_t(r == 0 ? c.capacity - 1 : (r * 37) % c.capacity);  // the full cache, and position 0
    }
    const auto kc = randn(slots * stride, 25), vc = randn(slots * stride, 26), q = randn(c.R * c.H * c.d, 27);
    const AttentionShape s{0, 0, c.H, c.KV, c.d, stride, nullptr};
    std::vector<float> out(size_t(c.R * c.H * c.d));
    auto d_q = to_device(q), d_out = to_device(std::vector<float>(out.size(), 7.f));  // every element written
    auto d_slot = to_device(slot), d_pos = to_device(pos);
    if (c.bf16) {
      std::vector<uint16_t> k16(kc.size()), v16(vc.size());
      cpu_bf16_matmul_ops().to_bf16(k16.data(), kc.data(), int64_t(kc.size()));
      cpu_bf16_matmul_ops().to_bf16(v16.data(), vc.data(), int64_t(vc.size()));
      cpu_bf16_matmul_ops().attention_decode_w16(out.data(), nullptr, q.data(), k16.data(), v16.data(), slot.data(),
                                                 pos.data(), c.R, s);
      auto d_k = to_device(k16), d_v = to_device(v16);
      Buffer<uint16_t> d_out16(cuda_ops(), out.size()), d_want16(cuda_ops(), out.size());
      cuda_bf16_matmul_ops().attention_decode_w16(d_out.data(), d_out16.data(), d_q.data(), d_k.data(), d_v.data(),
                                                  d_slot.data(), d_pos.data(), c.R, s);
      // out16 is out rounded, whichever path (split or not) wrote it
      cuda_bf16_matmul_ops().to_bf16(d_want16.data(), d_out.data(), int64_t(out.size()));
      EXPECT_EQ(to_host<uint16_t>(d_out16, out.size()), to_host<uint16_t>(d_want16, out.size()));
    } else {
      cpu.attention_decode(out.data(), q.data(), kc.data(), vc.data(), slot.data(), pos.data(), c.R, s);
      auto d_k = to_device(kc), d_v = to_device(vc);
      gpu.attention_decode(d_out.data(), d_q.data(), d_k.data(), d_v.data(), d_slot.data(), d_pos.data(), c.R, s);
    }
    expect_close(to_host<float>(d_out, out.size()), out, 1e-5f, 1e-4f, "decode out");
  }
  cuda_detail::cuda_set_decode_kernel(CudaDecodeKernel::Tiles);
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaDecode,
                         ::testing::Values(DecodeCase{5, 4, 2, 64, 200, false},    // few rows: split positions
                                           DecodeCase{5, 4, 2, 64, 200, true},
                                           DecodeCase{1, 14, 2, 64, 1000, false},  // batch 1, 15 splits
                                           DecodeCase{300, 14, 2, 128, 200, false},  // 0.5B's heads, many rows
                                           DecodeCase{300, 14, 2, 128, 200, true},
                                           DecodeCase{3, 20, 2, 40, 50, false},    // group 10, d = 40: scalar loads
                                           DecodeCase{3, 20, 2, 40, 50, true},
                                           DecodeCase{4, 6, 6, 16, 33, false},     // no GQA; half the lanes idle
                                           DecodeCase{2, 12, 2, 96, 300, true},    // three elements per lane
                                           DecodeCase{256, 12, 2, 128, 200, true},  // 1.5B's heads at batch 256
                                           DecodeCase{1, 12, 2, 128, 1000, true},   // batch 1: 16 splits of a tile
                                           // Long caches: the merge's loads past a lane's first 32
                                           // splits; a row at its last position and one at 37 (one
                                           // split with positions); one kv head at 256 splits, the cap
                                           DecodeCase{2, 12, 2, 128, 8192, true},
                                           DecodeCase{1, 8, 1, 128, 16384, true},
                                           DecodeCase{3, 20, 2, 32, 150, true},     // group 10: two head chunks
                                           DecodeCase{7, 2, 1, 32, 1, false}),     // one position, one per lane
                         decode_case_name);

// The few-row products of the Bf16 table (kernels/cuda/gemv.cuh): matmul_forward_a16w16 at 1 to 8
// rows runs the GEMV kernel, checked against the CPU table and against cuBLASLt on the device, at
// Qwen2.5's shapes (16-byte loads, every split) and odd ones (scalar loads: k not a multiple of 8,
// or a weight pointer one bf16 off 16-byte alignment). The same kernels run in CI on the CPU
// emulation of the device (gemv_emulated_test.cpp); here the hardware runs them.
struct GemvCase {
  int64_t R, IC, OC, w_offset;
};

class CudaGemv : public CudaOps, public ::testing::WithParamInterface<GemvCase> {};

TEST_P(CudaGemv, LinearMatchesCpuAndCublasLt) {
  const GemvCase c = GetParam();
  const Ops& dev = cuda_bf16_matmul_ops();
  const auto x16 = testing::bf16_bits(randn(size_t(c.R * c.IC), 40)),
             w16 = testing::bf16_bits(randn(size_t(c.OC * c.IC), 41, 0.1f));
  const auto bias = randn(size_t(c.OC), 42);
  std::vector<float> want(size_t(c.R * c.OC));
  cpu_bf16_matmul_ops().matmul_forward_a16w16(want.data(), x16.data(), w16.data(), bias.data(), c.R, c.IC, c.OC);
  std::vector<uint16_t> w_off(size_t(c.w_offset), 0);
  w_off.insert(w_off.end(), w16.begin(), w16.end());
  auto d_x = to_device(x16), d_w = to_device(w_off);
  auto d_bias = to_device(bias);
  auto d_out = to_device(std::vector<float>(want.size(), NAN)), d_lt = to_device(std::vector<float>(want.size(), NAN));
  dev.matmul_forward_a16w16(d_out.data(), d_x.data(), d_w.data() + c.w_offset, d_bias.data(), c.R, c.IC, c.OC);
  cuda_detail::matmul_forward_a16w16_cublaslt(d_lt.data(), d_x.data(), d_w.data() + c.w_offset, d_bias.data(), c.R,
                                              c.IC, c.OC);
  const auto got = to_host<float>(d_out, want.size());
  expect_close(got, want, 1e-4f, 1e-4f, "gemv against the CPU");
  expect_close(got, to_host<float>(d_lt, want.size()), 1e-4f, 1e-4f, "gemv against cuBLASLt");
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaGemv,
                         ::testing::Values(GemvCase{1, 896, 896, 0},      // 0.5B q, o
                                           GemvCase{3, 4864, 896, 0},     // 0.5B down: 8 warps per output
                                           GemvCase{8, 1536, 8960, 0},    // 1.5B gate, up
                                           GemvCase{1, 896, 151936, 0},   // 0.5B's LM head
                                           GemvCase{2, 67, 93, 0},        // k not a multiple of 8
                                           GemvCase{5, 896, 128, 1},      // weights 2 bytes off alignment
                                           GemvCase{7, 8, 3, 0}),         // one pack per row
                         [](const ::testing::TestParamInfo<GemvCase>& info) {
                           const GemvCase& c = info.param;
                           return "R" + std::to_string(c.R) + "_IC" + std::to_string(c.IC) + "_OC" +
                                  std::to_string(c.OC) + (c.w_offset ? "_unaligned" : "");
                         });

// The fused decode ops against the CPU table's unfused ops (gemv_cases.h says how close), at 0.5B's
// and 1.5B's attention and MLP shapes and an odd one.
TEST_F(CudaOps, FusedDecodeOpsMatchTheUnfusedCpuOps) {
  const Ops& dev = cuda_bf16_matmul_ops();
  for (const testing::QkvCase& c : {testing::QkvCase{1, 896, 14, 2, 64, true}, testing::QkvCase{3, 1536, 12, 2, 128, true},
                                    testing::QkvCase{8, 36, 4, 2, 8, false}}) {
    SCOPED_TRACE("qkv R " + std::to_string(c.R) + " H " + std::to_string(c.H));
    const testing::QkvInputs in(c);
    auto d_x = to_device(in.x16), d_wq = to_device(in.wq), d_wk = to_device(in.wk), d_wv = to_device(in.wv);
    auto d_bq = to_device(in.bq), d_bk = to_device(in.bk), d_bv = to_device(in.bv);
    auto d_cos = to_device(in.cos), d_sin = to_device(in.sin);
    auto d_slot = to_device(in.slot), d_pos = to_device(in.pos);
    auto d_q = to_device(std::vector<float>(size_t(c.R * in.qd), NAN));
    auto d_k = to_device(in.cache0), d_v = to_device(in.cache0);
    DecodeQkv a = in.args(d_q.data(), d_k.data(), d_v.data());
    a.in.x16 = d_x.data(), a.wq = d_wq.data(), a.wk = d_wk.data(), a.wv = d_wv.data();
    if (c.bias) a.bq = d_bq.data(), a.bk = d_bk.data(), a.bv = d_bv.data();
    a.cos = d_cos.data(), a.sin = d_sin.data(), a.slot = d_slot.data(), a.pos = d_pos.data();
    dev.decode_qkv_w16(a);
    in.expect_matches(to_host<float>(d_q, size_t(c.R * in.qd)), to_host<uint16_t>(d_k, in.cache0.size()),
                      to_host<uint16_t>(d_v, in.cache0.size()));
  }
  for (const testing::GateUpCase& c :
       {testing::GateUpCase{1, 896, 4864, false}, testing::GateUpCase{5, 1536, 8960, true},
        testing::GateUpCase{2, 20, 11, true}, testing::GateUpCase{1, 1536, 8960, false, true},
        testing::GateUpCase{3, 20, 11, true, true}}) {
    SCOPED_TRACE("gate/up R " + std::to_string(c.R) + " IC " + std::to_string(c.IC) + " round " +
                 std::to_string(c.round));
    const testing::GateUpInputs in(c);
    auto d_x = to_device(in.x16), d_wg = to_device(in.wg), d_wu = to_device(in.wu);
    auto d_bg = to_device(in.bg), d_bu = to_device(in.bu);
    auto d_out = to_device(std::vector<uint16_t>(in.ref.size(), 0xFFFF));
    dev.gate_up_swiglu_w16(d_out.data(), {.x16 = d_x.data()}, d_wg.data(), c.bias ? d_bg.data() : nullptr,
                           d_wu.data(), c.bias ? d_bu.data() : nullptr, c.R, c.IC, c.I, c.round);
    testing::expect_bf16_within(to_host<uint16_t>(d_out, in.ref.size()), in.ref, nullptr, in.slack, 0.95, "output");
  }
  EXPECT_THROW(dev.gate_up_swiglu_w16(nullptr, DecodeInput{}, nullptr, nullptr, nullptr, nullptr,
                                      kDecodeFusedMaxRows + 1, 8, 8, false),
               std::invalid_argument);
}

// The decode ops that normalize their own input rows (DecodeInput with a norm) against the norm
// kernel and then the same op on its rows, bit for bit (rmsnorm_row.cuh: the same arithmetic);
// decode_linear_w16's residual add against the product and then add, bit for bit. Shapes: 1.5B's
// at 1 and 3 rows, and a 7B-wide one at 8 rows (57 KiB of normalized rows: past 48 KiB of shared
// memory, the kernels' opt-in); too many elements to normalize is refused.
TEST_F(CudaOps, FoldedNormsAndResidualAddsAreTheUnfusedOpsBitForBit) {
  const Ops& dev = cuda_bf16_matmul_ops();
  struct Case {
    int64_t R, H, I, heads, kv, d;
  };
  for (const Case c : {Case{1, 1536, 8960, 12, 2, 128}, Case{3, 1536, 512, 12, 2, 128}, Case{8, 3584, 256, 28, 4, 128}}) {
    SCOPED_TRACE("R " + std::to_string(c.R) + " H " + std::to_string(c.H));
    const int64_t qd = c.heads * c.d, kd = c.kv * c.d, cap = 16, slots = 9;
    const float eps = 1e-6f;
    auto x = to_device(randn(size_t(c.R * c.H), 80, 3.f)), norm = to_device(randn(size_t(c.H), 81));
    auto residual = to_device(randn(size_t(c.R * c.I), 82));
    auto wg = to_device(testing::bf16_bits(randn(size_t(c.I * c.H), 83, 0.05f)));
    auto wu = to_device(testing::bf16_bits(randn(size_t(c.I * c.H), 84, 0.05f)));
    auto bias = to_device(randn(size_t(c.I), 85));
    // The norm kernel's rows, for the ops given them as x16.
    auto x16 = to_device(std::vector<uint16_t>(size_t(c.R * c.H), 0));
    auto rstd = to_device(std::vector<float>(size_t(c.R), 0.f));
    dev.rmsnorm_forward_w16(nullptr, x16.data(), rstd.data(), x.data(), norm.data(), c.R, c.H, eps);
    const DecodeInput normed{.x = x.data(), .norm = norm.data(), .eps = eps}, given{.x16 = x16.data()};

    auto out = to_device(std::vector<float>(size_t(c.R * c.I), NAN));
    auto want = to_device(std::vector<float>(size_t(c.R * c.I), NAN));
    dev.decode_linear_w16(out.data(), normed, wg.data(), bias.data(), residual.data(), c.R, c.H, c.I);
    dev.matmul_forward_a16w16(want.data(), x16.data(), wg.data(), bias.data(), c.R, c.H, c.I);
    dev.add(want.data(), residual.data(), want.data(), c.R * c.I);
    EXPECT_EQ(to_host<float>(out, size_t(c.R * c.I)), to_host<float>(want, size_t(c.R * c.I))) << "linear";

    auto mlp = to_device(std::vector<uint16_t>(size_t(c.R * c.I), 0xFFFF));
    auto mlp_want = to_device(std::vector<uint16_t>(size_t(c.R * c.I), 0xFFFF));
    for (bool round : {false, true}) {
      dev.gate_up_swiglu_w16(mlp.data(), normed, wg.data(), bias.data(), wu.data(), nullptr, c.R, c.H, c.I, round);
      dev.gate_up_swiglu_w16(mlp_want.data(), given, wg.data(), bias.data(), wu.data(), nullptr, c.R, c.H, c.I,
                             round);
      EXPECT_EQ(to_host<uint16_t>(mlp, size_t(c.R * c.I)), to_host<uint16_t>(mlp_want, size_t(c.R * c.I)))
          << "gate/up, round " << round;
    }

    auto wq = to_device(testing::bf16_bits(randn(size_t(qd * c.H), 86, 0.05f)));
    auto wk = to_device(testing::bf16_bits(randn(size_t(kd * c.H), 87, 0.05f)));
    auto wv = to_device(testing::bf16_bits(randn(size_t(kd * c.H), 88, 0.05f)));
    std::vector<float> cos_h, sin_h;
    testing::rope_tables(cap, c.d, cos_h, sin_h);
    auto cosv = to_device(cos_h), sinv = to_device(sin_h);
    std::vector<int32_t> slot_h(size_t(c.R)), pos_h(size_t(c.R));
    for (int64_t r = 0; r < c.R; r++) slot_h[size_t(r)] = int32_t(r), pos_h[size_t(r)] = int32_t(3 + r);
    auto slot = to_device(slot_h), pos = to_device(pos_h);
    std::vector<float> q[2];
    std::vector<uint16_t> kcache[2], vcache[2];
    for (int i = 0; i < 2; i++) {
      auto d_q = to_device(std::vector<float>(size_t(c.R * qd), NAN));
      auto kc = to_device(std::vector<uint16_t>(size_t(slots * cap * kd), 0));
      auto vc = to_device(std::vector<uint16_t>(size_t(slots * cap * kd), 0));
      dev.decode_qkv_w16({.in = i == 0 ? normed : given, .wq = wq.data(), .wk = wk.data(), .wv = wv.data(),
                          .cos = cosv.data(), .sin = sinv.data(), .slot = slot.data(), .pos = pos.data(),
                          .q = d_q.data(), .kcache = kc.data(), .vcache = vc.data(), .R = c.R, .H = c.H,
                          .heads = c.heads, .kv_heads = c.kv, .d = c.d, .slot_stride = cap * kd});
      q[i] = to_host<float>(d_q, size_t(c.R * qd));
      kcache[i] = to_host<uint16_t>(kc, size_t(slots * cap * kd));
      vcache[i] = to_host<uint16_t>(vc, size_t(slots * cap * kd));
    }
    EXPECT_EQ(q[0], q[1]) << "q";
    EXPECT_EQ(kcache[0], kcache[1]) << "k cache";
    EXPECT_EQ(vcache[0], vcache[1]) << "v cache";
  }
  const DecodeInput too_wide{.x = reinterpret_cast<const float*>(16), .norm = reinterpret_cast<const float*>(16)};
  EXPECT_THROW(dev.decode_linear_w16(nullptr, too_wide, nullptr, nullptr, nullptr, 2, kDecodeNormedMaxElements / 2 + 8,
                                     8),
               std::invalid_argument);
}

// What follows a many-row decode step's two fused GEMMs (decode_epilogues.cuh), against the same
// device's unfused ops on the same values, bit for bit (the expressions are shared): RoPE on q and
// k and the cache store from the q/k/v GEMM's rows, at 1.5B's heads for 256 rows and 0.5B's for
// 64 (the GEMM output not written); SwiGLU on rows of [gate | up] at 1.5B's I for 256 rows.
TEST_F(CudaOps, DecodeEpiloguesAreTheUnfusedOpsBitForBit) {
  const Ops& dev = cuda_bf16_matmul_ops();
  struct Case {
    int64_t R, heads, kv, d;
  };
  for (const Case c : {Case{256, 12, 2, 128}, Case{64, 14, 2, 64}}) {
    SCOPED_TRACE("R " + std::to_string(c.R));
    const int64_t qd = c.heads * c.d, kd = c.kv * c.d, width = qd + 2 * kd, cap = 300, stride = cap * kd;
    std::vector<float> cos_h, sin_h;
    testing::rope_tables(cap, c.d, cos_h, sin_h);
    auto cosv = to_device(cos_h), sinv = to_device(sin_h);
    std::vector<int32_t> slot_h(size_t(c.R)), pos_h(size_t(c.R));
    for (int64_t r = 0; r < c.R; r++) slot_h[size_t(r)] = int32_t(r), pos_h[size_t(r)] = int32_t((37 * r + 5) % cap);
    auto slot = to_device(slot_h), pos = to_device(pos_h);
    const std::vector<float> qkv_h = randn(size_t(c.R * width), 90);
    std::vector<float> q_h(size_t(c.R * qd)), k_h(size_t(c.R * kd)), v_h(size_t(c.R * kd));
    for (int64_t r = 0; r < c.R; r++) {
      std::copy_n(qkv_h.begin() + r * width, qd, q_h.begin() + r * qd);
      std::copy_n(qkv_h.begin() + r * width + qd, kd, k_h.begin() + r * kd);
      std::copy_n(qkv_h.begin() + r * width + qd + kd, kd, v_h.begin() + r * kd);
    }
    const std::vector<uint16_t> cache0 = testing::bf16_bits(randn(size_t(c.R * stride), 93));
    auto qkv = to_device(qkv_h), q = to_device(std::vector<float>(q_h.size(), NAN));
    auto kc = to_device(cache0), vc = to_device(cache0);
    dev.rope_kv_store_w16(q.data(), qkv.data(), pos.data(), cosv.data(), sinv.data(), slot.data(), kc.data(),
                          vc.data(), c.R, c.heads, c.kv, c.d, stride);
    auto q2 = to_device(q_h), k2 = to_device(k_h), v2 = to_device(v_h);
    auto kc2 = to_device(cache0), vc2 = to_device(cache0);
    dev.rope_forward(q2.data(), pos.data(), cosv.data(), sinv.data(), c.R, c.heads, c.d);
    dev.rope_forward(k2.data(), pos.data(), cosv.data(), sinv.data(), c.R, c.kv, c.d);
    dev.kv_store_w16(kc2.data(), vc2.data(), k2.data(), v2.data(), slot.data(), pos.data(), c.R, kd, stride);
    EXPECT_EQ(to_host<float>(q, q_h.size()), to_host<float>(q2, q_h.size())) << "q";
    EXPECT_EQ(to_host<uint16_t>(kc, cache0.size()), to_host<uint16_t>(kc2, cache0.size())) << "k cache";
    EXPECT_EQ(to_host<uint16_t>(vc, cache0.size()), to_host<uint16_t>(vc2, cache0.size())) << "v cache";
    EXPECT_EQ(to_host<float>(qkv, qkv_h.size()), qkv_h) << "the GEMM output is read, not written";
  }
  // SwiGLU on bf16 rows [gate | up] (matmul_forward_o16's) against swiglu_forward_w16 on the two
  // halves' values, apart.
  const int64_t R = 256, I = 8960;
  auto bf16_rows = [](size_t n, uint64_t seed, std::vector<uint16_t>& bits, std::vector<float>& values) {
    bits = testing::bf16_bits(randn(n, seed, 3.f));
    values.resize(n);
    for (size_t i = 0; i < n; i++) values[i] = testing::bf16_value(bits[i]);
  };
  std::vector<uint16_t> gu16_h;
  std::vector<float> gu_h;
  bf16_rows(size_t(R * 2 * I), 94, gu16_h, gu_h);
  std::vector<float> gate_h(size_t(R * I)), up_h(size_t(R * I));
  for (int64_t r = 0; r < R; r++) {
    std::copy_n(gu_h.begin() + r * 2 * I, I, gate_h.begin() + r * I);
    std::copy_n(gu_h.begin() + r * 2 * I + I, I, up_h.begin() + r * I);
  }
  auto gu = to_device(gu16_h);
  auto gate = to_device(gate_h), up = to_device(up_h);
  auto out = to_device(std::vector<uint16_t>(size_t(R * I), 0xFFFF));
  auto want = to_device(std::vector<uint16_t>(size_t(R * I), 0xFFFF));
  dev.swiglu_rows_w16(out.data(), gu.data(), R, I);
  dev.swiglu_forward_w16(nullptr, want.data(), gate.data(), up.data(), R * I);
  EXPECT_EQ(to_host<uint16_t>(out, size_t(R * I)), to_host<uint16_t>(want, size_t(R * I))) << "SwiGLU rows";
  // The training step's backward on the same rows (mlp_rows16): [dgate | dup] rows against
  // swiglu_backward_w16 on the halves, joined on the host; and both kernels at a row length that
  // takes one value a thread (I % 4 != 0).
  for (const int64_t width : {I, int64_t(37)}) {
    SCOPED_TRACE("I " + std::to_string(width));
    const int64_t rows = width == I ? R : 9;
    std::vector<uint16_t> g2_16, dy16;
    std::vector<float> g2, dy;
    bf16_rows(size_t(rows * 2 * width), 95, g2_16, g2);
    bf16_rows(size_t(rows * width), 96, dy16, dy);  // dout as the down projection's dinp16 gives it
    std::vector<float> g_h(size_t(rows * width)), u_h(g_h.size());
    for (int64_t r = 0; r < rows; r++) {
      std::copy_n(g2.begin() + r * 2 * width, width, g_h.begin() + r * width);
      std::copy_n(g2.begin() + r * 2 * width + width, width, u_h.begin() + r * width);
    }
    auto d_g2 = to_device(g2_16), d_dy16 = to_device(dy16);
    auto d_dy = to_device(dy), d_g = to_device(g_h), d_u = to_device(u_h);
    Buffer<uint16_t> rows16(cuda_ops(), size_t(rows * 2 * width)), dg16(cuda_ops(), g_h.size()),
        du16(cuda_ops(), g_h.size()), fwd16(cuda_ops(), g_h.size()), fwd_want(cuda_ops(), g_h.size());
    dev.swiglu_rows_backward_w16(rows16.data(), d_dy16.data(), d_g2.data(), rows, width);
    dev.swiglu_backward_w16(dg16.data(), du16.data(), d_dy.data(), d_g.data(), d_u.data(), rows * width);
    const auto dg = to_host<uint16_t>(dg16, g_h.size()), du = to_host<uint16_t>(du16, g_h.size());
    std::vector<uint16_t> joined(size_t(rows * 2 * width));
    for (int64_t r = 0; r < rows; r++) {
      std::copy_n(dg.begin() + r * width, width, joined.begin() + r * 2 * width);
      std::copy_n(du.begin() + r * width, width, joined.begin() + r * 2 * width + width);
    }
    EXPECT_EQ(to_host<uint16_t>(rows16, joined.size()), joined) << "SwiGLU rows backward";
    dev.swiglu_rows_w16(fwd16.data(), d_g2.data(), rows, width);
    dev.swiglu_forward_w16(nullptr, fwd_want.data(), d_g.data(), d_u.data(), rows * width);
    EXPECT_EQ(to_host<uint16_t>(fwd16, g_h.size()), to_host<uint16_t>(fwd_want, g_h.size())) << "SwiGLU rows";
  }
}

// Caches that start non-zero, so rows skipped for padding (pos -1) must keep their old values.
TEST_F(CudaOps, KvStoreMatchesCpu) {
  const int64_t row = 2 * 64, slots = 5, capacity = 40, stride = capacity * row;
  const std::vector<int32_t> slot = {4, 0, 2, 2, 1, 3}, pos = {39, 0, 7, -1, 20, 8};
  const int64_t R = int64_t(slot.size());
  const auto k = randn(R * row, 40), v = randn(R * row, 41);
  auto kc = randn(slots * stride, 42), vc = randn(slots * stride, 43);
  auto d_kc = to_device(kc), d_vc = to_device(vc), d_k = to_device(k), d_v = to_device(v);
  auto d_slot = to_device(slot), d_pos = to_device(pos);
  cpu.kv_store(kc.data(), vc.data(), k.data(), v.data(), slot.data(), pos.data(), R, row, stride);
  gpu.kv_store(d_kc.data(), d_vc.data(), d_k.data(), d_v.data(), d_slot.data(), d_pos.data(), R, row, stride);
  expect_close(to_host<float>(d_kc, kc.size()), kc, 0, 0, "k cache");
  expect_close(to_host<float>(d_vc, vc.size()), vc, 0, 0, "v cache");
}

// The Bf16 tables' attention (queries, keys and values rounded to bf16) and bf16 KV cache against the CPU's:
// the same rounded values on both sides, so the fp32 tolerances hold; the cache bit for bit.
TEST_F(CudaOps, Bf16AttentionAndBf16CacheMatchCpu) {
  const AttentionChoice simt(CudaAttentionKernel::Simt);  // the tensor-core kernels have their own test
  const Ops& ref = cpu_bf16_matmul_ops();
  const Ops& dev = cuda_bf16_matmul_ops();
  const int64_t B = 2, T = 77, H = 4, KV = 2, d = 64, q_n = B * T * H * d, kv_n = B * T * KV * d;
  const std::vector<int32_t> lengths = {77, 50};
  const auto q = randn(q_n, 51), k = randn(kv_n, 52), v = randn(kv_n, 53), dout = randn(q_n, 54);
  AttentionShape s{B, T, H, KV, d, T * KV * d, lengths.data()};
  std::vector<float> out(q_n), lse(B * H * T), dq(q_n), dk(kv_n), dv(kv_n);
  ref.attention_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), s);
  ref.attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), out.data(), lse.data(), q.data(), k.data(),
                         v.data(), s);
  auto d_q = to_device(q), d_k = to_device(k), d_v = to_device(v), d_dout = to_device(dout);
  auto d_len = to_device(lengths);
  Buffer<float> d_out(cuda_ops(), q_n), d_lse(cuda_ops(), lse.size()), d_dq(cuda_ops(), q_n), d_dk(cuda_ops(), kv_n),
      d_dv(cuda_ops(), kv_n), d_out32(cuda_ops(), q_n), d_lse32(cuda_ops(), lse.size());
  AttentionShape ds = s;
  ds.lengths = d_len.data();
  dev.attention_forward(d_out.data(), d_lse.data(), d_q.data(), d_k.data(), d_v.data(), ds);
  dev.attention_backward(d_dq.data(), d_dk.data(), d_dv.data(), d_dout.data(), d_out.data(), d_lse.data(), d_q.data(),
                         d_k.data(), d_v.data(), ds);
  expect_close(to_host<float>(d_out, out.size()), out, 1e-5f, 1e-4f, "bf16 attention out");
  expect_close(to_host<float>(d_lse, lse.size()), lse, 1e-5f, 1e-5f, "bf16 lse");
  expect_close(to_host<float>(d_dq, dq.size()), dq, 1e-4f, 1e-4f, "bf16 dq");
  expect_close(to_host<float>(d_dk, dk.size()), dk, 1e-4f, 1e-4f, "bf16 dk");
  expect_close(to_host<float>(d_dv, dv.size()), dv, 1e-4f, 1e-4f, "bf16 dv");
  gpu.attention_forward(d_out32.data(), d_lse32.data(), d_q.data(), d_k.data(), d_v.data(), ds);
  const auto o16 = to_host<float>(d_out, out.size()), o32 = to_host<float>(d_out32, out.size());
  double worst = 0;
  for (size_t i = 0; i < o16.size(); i++) worst = std::max(worst, std::fabs(double(o16[i]) - o32[i]));
  EXPECT_GT(worst, 1e-4) << "the GPU's bf16 attention did not round q, k and v";

  // The cache: stored bit for bit as the CPU stores it, padding skipped; decode over it.
  const int64_t row = KV * d, slots = 5, capacity = 40, stride = capacity * row;
  const std::vector<int32_t> slot = {4, 0, 2, 2, 1, 3}, pos = {39, 0, 7, -1, 20, 8};
  const int64_t R = int64_t(slot.size());
  const auto kr = randn(R * row, 55), vr = randn(R * row, 56), qr = randn(R * H * d, 57);
  std::vector<uint16_t> kc(slots * stride, 0x3f80), vc(slots * stride, 0xbf80);  // start at 1.0 / -1.0
  auto d_kc = to_device(kc), d_vc = to_device(vc);
  auto d_kr = to_device(kr), d_vr = to_device(vr), d_qr = to_device(qr);
  auto d_slot = to_device(slot), d_pos = to_device(pos);
  ref.kv_store_w16(kc.data(), vc.data(), kr.data(), vr.data(), slot.data(), pos.data(), R, row, stride);
  dev.kv_store_w16(d_kc.data(), d_vc.data(), d_kr.data(), d_vr.data(), d_slot.data(), d_pos.data(), R, row, stride);
  EXPECT_EQ(to_host<uint16_t>(d_kc, kc.size()), kc);
  EXPECT_EQ(to_host<uint16_t>(d_vc, vc.size()), vc);
  const std::vector<int32_t> dpos = {39, 0, 7, 0, 20, 8};  // decode every row, the padded one at position 0
  auto d_dpos = to_device(dpos);
  const AttentionShape cs{0, 0, H, KV, d, stride, nullptr};
  std::vector<float> o(R * H * d);
  ref.attention_decode_w16(o.data(), nullptr, qr.data(), kc.data(), vc.data(), slot.data(), dpos.data(), R, cs);
  Buffer<float> d_o(cuda_ops(), o.size());
  dev.attention_decode_w16(d_o.data(), nullptr, d_qr.data(), d_kc.data(), d_vc.data(), d_slot.data(), d_dpos.data(),
                           R, cs);
  expect_close(to_host<float>(d_o, o.size()), o, 1e-5f, 1e-4f, "bf16-cache decode out");
}

class CudaTensorCoreAttention : public CudaOps, public ::testing::WithParamInterface<AttnCase> {};

// Both tensor-core kernel sets (WMMA, and mma.sync: CudaAttentionKernel::Mma, attention_mma.cuh,
// its forward at 16 and at 32 query rows a warp, and its merged backward on the device's atomics,
// CudaAttentionBackward::Merged), forward and backward, against the same emulated arithmetic. And
// the merged backward against the split one to fp32 rounding, the same sums in another order (the
// emulated TensorCoreEmulated.MergingTheBackwardChangesOnlyTheSumsOrder; here the adds land in any
// order). Outputs start as garbage: the merged launch zeroes dq, dk and dv itself.
TEST_P(CudaTensorCoreAttention, MatchesTheEmulatedArithmetic) {
  const AttnCase c = GetParam();
  const int64_t q_n = c.B * c.T * c.H * c.d, kv_n = c.B * c.T * c.KV * c.d;
  const auto q = randn(q_n, 61, c.qk_scale), k = randn(kv_n, 62, c.qk_scale), v = randn(kv_n, 63),
             dout = randn(q_n, 64);
  const TensorCoreReference want = emulate_tensor_core_attention(q, k, v, dout, c.B, c.T, c.H, c.KV, c.d, c.lengths);

  auto d_q = to_device(q), d_k = to_device(k), d_v = to_device(v), d_dout = to_device(dout);
  auto d_len = to_device(c.lengths);
  auto garbage = [](size_t n) { return to_device(std::vector<float>(n, 7.f)); };  // every element written
  AttentionShape s{c.B, c.T, c.H, c.KV, c.d, c.T * c.KV * c.d, c.lengths.empty() ? nullptr : d_len.data()};
  const Ops& dev = cuda_bf16_matmul_ops();
  auto d_simt = garbage(size_t(q_n)), d_simt_lse = garbage(want.lse.size());
  {
    const AttentionChoice simt(CudaAttentionKernel::Simt);
    dev.attention_forward(d_simt.data(), d_simt_lse.data(), d_q.data(), d_k.data(), d_v.data(), s);
  }
  const auto simt_out = to_host<float>(d_simt, size_t(q_n));
  struct Kernels {
    CudaAttentionKernel kernel;
    int warp_rows;
    CudaAttentionBackward backward;
  };
  const Kernels kernels[] = {{CudaAttentionKernel::TensorCore, 16, CudaAttentionBackward::Split},
                             {CudaAttentionKernel::Mma, 16, CudaAttentionBackward::Split},
                             {CudaAttentionKernel::Mma, 32, CudaAttentionBackward::Split},
                             {CudaAttentionKernel::Mma, 16, CudaAttentionBackward::Merged}};
  std::vector<float> split_dq, split_dk, split_dv;  // the mma.sync split backward's, at 16 rows
  for (const auto& [kernel, warp_rows, backward] : kernels) {
    const bool merged = backward == CudaAttentionBackward::Merged;
    SCOPED_TRACE(kernel == CudaAttentionKernel::Mma ? "mma.sync kernels, " + std::to_string(warp_rows) +
                                                          " rows a warp" + (merged ? ", merged backward" : "")
                                                    : std::string("WMMA kernels"));
    auto d_out = garbage(size_t(q_n)), d_lse = garbage(want.lse.size()), d_dq = garbage(size_t(q_n)),
         d_dk = garbage(size_t(kv_n)), d_dv = garbage(size_t(kv_n));
    {
      const AttentionChoice choice(kernel);
      const AttentionWarpRows rows(warp_rows);
      const AttentionBackwardChoice how(backward);
      dev.attention_forward(d_out.data(), d_lse.data(), d_q.data(), d_k.data(), d_v.data(), s);
      dev.attention_backward(d_dq.data(), d_dk.data(), d_dv.data(), d_dout.data(), d_out.data(), d_lse.data(),
                             d_q.data(), d_k.data(), d_v.data(), s);
    }
    const auto out = to_host<float>(d_out, size_t(q_n));
    const auto dq = to_host<float>(d_dq, size_t(q_n)), dk = to_host<float>(d_dk, size_t(kv_n)),
               dv = to_host<float>(d_dv, size_t(kv_n));
    expect_matches_tensor_core_reference(want, out, to_host<float>(d_lse, want.lse.size()), dq, dk, dv);
    if (kernel == CudaAttentionKernel::Mma && warp_rows == 16 && !merged) split_dq = dq, split_dk = dk, split_dv = dv;
    if (merged) {
      testing::expect_same_to_fp32_sums(dq, split_dq, "dq");
      testing::expect_same_to_fp32_sums(dk, split_dk, "dk");
      testing::expect_same_to_fp32_sums(dv, split_dv, "dv");
    }
    // The Simt kernels keep P in fp32: had the choice not reached the tensor-core kernels, both
    // outputs would be the Simt kernel's, bit for bit. (A floor of 1e-5 failed on an H200 at head
    // dim 128, where the two differ by 6e-6 to 1e-5 and the outputs match the emulated arithmetic.)
    double worst = 0;
    for (size_t i = 0; i < out.size(); i++) worst = std::max(worst, std::fabs(double(out[i]) - simt_out[i]));
    EXPECT_GT(worst, 0.0) << "the tensor-core kernels did not run";
  }
}

// The mma.sync kernels skip the mask on tiles it cannot touch (attention_mma.cuh,
// rows_see_whole_tile): every output bit for bit as with the mask on every tile (the emulated
// TensorCoreEmulated.SkippingTheMasksOfWholeTilesChangesNoBit, here on the device's own exp2f,
// expf and mma.sync).
TEST_P(CudaTensorCoreAttention, MmaSkippingTheMasksOfWholeTilesChangesNoBit) {
  const AttnCase c = GetParam();
  const int64_t q_n = c.B * c.T * c.H * c.d, kv_n = c.B * c.T * c.KV * c.d;
  auto d_q = to_device(randn(q_n, 61, c.qk_scale)), d_k = to_device(randn(kv_n, 62, c.qk_scale)),
       d_v = to_device(randn(kv_n, 63)), d_dout = to_device(randn(q_n, 64));
  auto d_len = to_device(c.lengths);
  const AttentionShape s{c.B, c.T, c.H, c.KV, c.d, c.T * c.KV * c.d, c.lengths.empty() ? nullptr : d_len.data()};
  const AttentionChoice mma(CudaAttentionKernel::Mma);
  const AttentionBackwardChoice split(CudaAttentionBackward::Split);  // bit for bit: no atomics' order
  auto run = [&](bool every_tile) {
    cuda_set_attention_masks_every_tile(every_tile);
    Buffer<float> out(cuda_ops(), size_t(q_n)), lse(cuda_ops(), size_t(c.B * c.H * c.T)),
        dq(cuda_ops(), size_t(q_n)), dk(cuda_ops(), size_t(kv_n)), dv(cuda_ops(), size_t(kv_n));
    const Ops& dev = cuda_bf16_matmul_ops();
    dev.attention_forward(out.data(), lse.data(), d_q.data(), d_k.data(), d_v.data(), s);
    dev.attention_backward(dq.data(), dk.data(), dv.data(), d_dout.data(), out.data(), lse.data(), d_q.data(),
                           d_k.data(), d_v.data(), s);
    cuda_set_attention_masks_every_tile(false);
    return std::vector<std::vector<float>>{to_host<float>(out, size_t(q_n)), to_host<float>(lse, size_t(c.B * c.H * c.T)),
                                           to_host<float>(dq, size_t(q_n)), to_host<float>(dk, size_t(kv_n)),
                                           to_host<float>(dv, size_t(kv_n))};
  };
  const auto skipping = run(false), every = run(true);
  const char* names[] = {"out", "lse", "dq", "dk", "dv"};
  for (size_t i = 0; i < skipping.size(); i++)
    EXPECT_TRUE(same_bits(skipping[i], every[i])) << names[i];
}

// k and v at a stride wider than their T rows (ops.h: the kv layout of the shape): each backward
// (the WMMA one, the mma.sync split and merged ones) writes dk and dv in that layout, the compact
// run's values at each sequence's offset (bit for bit; the merged one's to the rounding of its
// atomics, whose order changes run to run), and leaves the gap between sequences as it was.
TEST_P(CudaTensorCoreAttention, StridedKeysAndValuesGetTheirGradientsInTheirLayout) {
  const AttnCase c = GetParam();
  const int64_t q_n = c.B * c.T * c.H * c.d, kv_row = c.KV * c.d, per_seq = c.T * kv_row;
  const int64_t stride = per_seq + 8 * kv_row, kv_n = c.B * per_seq, wide_n = c.B * stride;
  const auto q = randn(q_n, 61, c.qk_scale), k = randn(kv_n, 62, c.qk_scale), v = randn(kv_n, 63),
             dout = randn(q_n, 64);
  constexpr float kGap = 3.f, kUnwritten = 7.f;
  auto widen = [&](const std::vector<float>& x) {  // each sequence's rows at b * stride
    std::vector<float> w(size_t(wide_n), kGap);
    for (int64_t b = 0; b < c.B; b++) std::copy_n(x.begin() + b * per_seq, per_seq, w.begin() + b * stride);
    return w;
  };
  auto d_q = to_device(q), d_k = to_device(k), d_v = to_device(v), d_dout = to_device(dout);
  auto d_kw = to_device(widen(k)), d_vw = to_device(widen(v));
  auto d_len = to_device(c.lengths);
  const int32_t* lengths = c.lengths.empty() ? nullptr : d_len.data();
  const AttentionShape compact{c.B, c.T, c.H, c.KV, c.d, per_seq, lengths}, wide{c.B, c.T, c.H, c.KV, c.d, stride,
                                                                                 lengths};
  const Ops& dev = cuda_bf16_matmul_ops();
  auto run = [&](const AttentionShape& s, const float* kk, const float* vv, int64_t n) {
    Buffer<float> out(cuda_ops(), size_t(q_n)), lse(cuda_ops(), size_t(c.B * c.H * c.T)), dq(cuda_ops(), size_t(q_n));
    const std::vector<float> unwritten(static_cast<size_t>(n), kUnwritten);
    auto dk = to_device(unwritten), dv = to_device(unwritten);
    dev.attention_forward(out.data(), lse.data(), d_q.data(), kk, vv, s);
    dev.attention_backward(dq.data(), dk.data(), dv.data(), d_dout.data(), out.data(), lse.data(), d_q.data(), kk, vv,
                           s);
    return std::pair{to_host<float>(dk, size_t(n)), to_host<float>(dv, size_t(n))};
  };
  const std::tuple<CudaAttentionKernel, CudaAttentionBackward, const char*> kernels[] = {
      {CudaAttentionKernel::TensorCore, CudaAttentionBackward::Split, "WMMA"},
      {CudaAttentionKernel::Mma, CudaAttentionBackward::Split, "mma.sync, split"},
      {CudaAttentionKernel::Mma, CudaAttentionBackward::Merged, "mma.sync, merged"}};
  for (const auto& [kernel, backward, name] : kernels) {
    SCOPED_TRACE(name);
    const AttentionChoice choice(kernel);
    const AttentionBackwardChoice how(backward);
    const auto [dk, dv] = run(compact, d_k.data(), d_v.data(), kv_n);
    const auto [dk_w, dv_w] = run(wide, d_kw.data(), d_vw.data(), wide_n);
    for (const auto& [got, want, what] : {std::tuple{&dk_w, &dk, "dk"}, std::tuple{&dv_w, &dv, "dv"}}) {
      std::vector<float> at_offsets(static_cast<size_t>(kv_n));
      for (int64_t b = 0; b < c.B; b++) {
        std::copy_n(got->begin() + b * stride, per_seq, at_offsets.begin() + b * per_seq);
        for (int64_t i = per_seq; i < stride; i++)
          ASSERT_EQ((*got)[size_t(b * stride + i)], kUnwritten) << what << ": the gap after sequence " << b;
      }
      if (backward == CudaAttentionBackward::Merged)
        testing::expect_same_to_fp32_sums(at_offsets, *want, what);
      else
        EXPECT_TRUE(same_bits(at_offsets, *want)) << what;
    }
  }
}

// The training attention's operands made once in bf16 (Ops::rope_round_qkv_w16 and the rest) are
// the ops they replace on the same device, bit for bit, with each training attention (the mma.sync
// forward at 16 and at 32 query rows a warp): RoPE and to_bf16 of each part of [q | k | v] rows;
// the attention on those values with out16 its output rounded (the mma.sync forward writes it
// itself); the backward from the bf16 operands; RoPE's backward in place and the three gradients
// rounded into rows again.
TEST_P(CudaTensorCoreAttention, AttentionOperandOpsAreTheOpsTheyReplaceBitForBit) {
  const AttnCase c = GetParam();
  const int64_t N = c.B * c.T, qd = c.H * c.d, kd = c.KV * c.d, width = qd + 2 * kd;
  const auto rows = randn(N * width, 65, c.qk_scale), dout = randn(N * qd, 66);
  std::vector<int32_t> pos(static_cast<size_t>(N));
  for (int64_t n = 0; n < N; n++) pos[size_t(n)] = int32_t(n % c.T);
  std::vector<float> cos, sin;
  testing::rope_tables(c.T, c.d, cos, sin);
  std::vector<float> q(size_t(N * qd)), k(size_t(N * kd)), v(k.size());
  for (int64_t n = 0; n < N; n++) {
    std::copy_n(rows.begin() + n * width, qd, q.begin() + n * qd);
    std::copy_n(rows.begin() + n * width + qd, kd, k.begin() + n * kd);
    std::copy_n(rows.begin() + n * width + qd + kd, kd, v.begin() + n * kd);
  }
  auto d_rows = to_device(rows), d_q = to_device(q), d_k = to_device(k), d_v = to_device(v), d_dout = to_device(dout);
  auto d_cos = to_device(cos), d_sin = to_device(sin);
  auto d_pos = to_device(pos);
  auto d_len = to_device(c.lengths);
  const AttentionShape s{c.B, c.T, c.H, c.KV, c.d, c.T * kd, c.lengths.empty() ? nullptr : d_len.data()};
  const Ops& dev = cuda_bf16_matmul_ops();
  dev.rope_forward(d_q.data(), d_pos.data(), d_cos.data(), d_sin.data(), N, c.H, c.d);
  dev.rope_forward(d_k.data(), d_pos.data(), d_cos.data(), d_sin.data(), N, c.KV, c.d);
  auto rounded = [&](const Buffer<float>& x, int64_t n) {
    Buffer<uint16_t> r(cuda_ops(), size_t(n));
    dev.to_bf16(r.data(), x.data(), n);
    return to_host<uint16_t>(r, size_t(n));
  };
  Buffer<uint16_t> q16(cuda_ops(), size_t(N * qd)), k16(cuda_ops(), size_t(N * kd)), v16(cuda_ops(), size_t(N * kd));
  dev.rope_round_qkv_w16(q16.data(), k16.data(), v16.data(), d_rows.data(), d_pos.data(), d_cos.data(), d_sin.data(),
                         N, c.H, c.KV, c.d);
  EXPECT_EQ(to_host<uint16_t>(q16, size_t(N * qd)), rounded(d_q, N * qd));
  EXPECT_EQ(to_host<uint16_t>(k16, size_t(N * kd)), rounded(d_k, N * kd));
  EXPECT_EQ(to_host<uint16_t>(v16, size_t(N * kd)), rounded(d_v, N * kd));

  auto garbage = [](size_t n) { return to_device(std::vector<float>(n, 7.f)); };
  const std::pair<CudaAttentionKernel, int> kernels[] = {{CudaAttentionKernel::Mma, 16},
                                                         {CudaAttentionKernel::Mma, 32},
                                                         {CudaAttentionKernel::TensorCore, 16},
                                                         {CudaAttentionKernel::Simt, 16}};
  for (const auto& [kernel, warp_rows] : kernels) {
    SCOPED_TRACE(kernel == CudaAttentionKernel::Mma    ? "mma.sync, " + std::to_string(warp_rows) + " rows a warp"
                 : kernel == CudaAttentionKernel::Simt ? std::string("Simt")
                                                       : std::string("WMMA"));
    const AttentionChoice choice(kernel);
    const AttentionWarpRows rows(warp_rows);
    const AttentionBackwardChoice split(CudaAttentionBackward::Split);  // bit for bit: no atomics' order
    const size_t lse_n = size_t(c.B * c.H * c.T);
    auto out = garbage(size_t(N * qd)), lse = garbage(lse_n), dq = garbage(size_t(N * qd)),
         dk = garbage(size_t(N * kd)), dv = garbage(size_t(N * kd));
    dev.attention_forward(out.data(), lse.data(), d_q.data(), d_k.data(), d_v.data(), s);
    dev.attention_backward(dq.data(), dk.data(), dv.data(), d_dout.data(), out.data(), lse.data(), d_q.data(),
                           d_k.data(), d_v.data(), s);
    auto out_w = garbage(size_t(N * qd)), lse_w = garbage(lse_n), dq_w = garbage(size_t(N * qd)),
         dk_w = garbage(size_t(N * kd)), dv_w = garbage(size_t(N * kd));
    Buffer<uint16_t> out16(cuda_ops(), size_t(N * qd));
    dev.attention_forward_w16(out_w.data(), out16.data(), lse_w.data(), q16.data(), k16.data(), v16.data(), s);
    dev.attention_backward_w16(dq_w.data(), dk_w.data(), dv_w.data(), d_dout.data(), out_w.data(), lse_w.data(),
                               q16.data(), k16.data(), v16.data(), s);
    EXPECT_TRUE(same_bits(to_host<float>(out_w, size_t(N * qd)), to_host<float>(out, size_t(N * qd)))) << "out";
    EXPECT_TRUE(same_bits(to_host<float>(lse_w, lse_n), to_host<float>(lse, lse_n))) << "lse";
    EXPECT_EQ(to_host<uint16_t>(out16, size_t(N * qd)), rounded(out, N * qd)) << "out16";
    EXPECT_TRUE(same_bits(to_host<float>(dq_w, size_t(N * qd)), to_host<float>(dq, size_t(N * qd)))) << "dq";
    EXPECT_TRUE(same_bits(to_host<float>(dk_w, size_t(N * kd)), to_host<float>(dk, size_t(N * kd)))) << "dk";
    EXPECT_TRUE(same_bits(to_host<float>(dv_w, size_t(N * kd)), to_host<float>(dv, size_t(N * kd)))) << "dv";

    // RoPE's backward with the roundings, against rope_backward and to_bf16 joined on the host.
    dev.rope_backward(dq.data(), d_pos.data(), d_cos.data(), d_sin.data(), N, c.H, c.d);
    dev.rope_backward(dk.data(), d_pos.data(), d_cos.data(), d_sin.data(), N, c.KV, c.d);
    const auto dq16 = rounded(dq, N * qd), dk16 = rounded(dk, N * kd), dv16 = rounded(dv, N * kd);
    std::vector<uint16_t> want(size_t(N * width));
    for (int64_t n = 0; n < N; n++) {
      std::copy_n(dq16.begin() + n * qd, qd, want.begin() + n * width);
      std::copy_n(dk16.begin() + n * kd, kd, want.begin() + n * width + qd);
      std::copy_n(dv16.begin() + n * kd, kd, want.begin() + n * width + qd + kd);
    }
    Buffer<uint16_t> dqkv16(cuda_ops(), size_t(N * width));
    // With the bias sums, added to values already there: the three column sums of the rotated dq,
    // dk and of dv (matmul_backward_a16w16's dbias) within fp32 rounding, other orders.
    const std::vector<float> dbias0 = randn(size_t(width), 45);
    auto dbias = to_device(dbias0), dbias_want = to_device(dbias0);
    dev.rope_backward_round_w16(dqkv16.data(), dq_w.data(), dk_w.data(), dv_w.data(), dbias.data(), d_pos.data(),
                                d_cos.data(), d_sin.data(), N, c.H, c.KV, c.d);
    EXPECT_TRUE(same_bits(to_host<float>(dq_w, size_t(N * qd)), to_host<float>(dq, size_t(N * qd)))) << "dq rotated";
    EXPECT_TRUE(same_bits(to_host<float>(dk_w, size_t(N * kd)), to_host<float>(dk, size_t(N * kd)))) << "dk rotated";
    EXPECT_EQ(to_host<uint16_t>(dqkv16, size_t(N * width)), want) << "dqkv16";
    dev.matmul_backward_a16w16(nullptr, nullptr, dbias_want.data(), dq.data(), nullptr, nullptr, N, 0, qd);
    dev.matmul_backward_a16w16(nullptr, nullptr, dbias_want.data() + qd, dk.data(), nullptr, nullptr, N, 0, kd);
    dev.matmul_backward_a16w16(nullptr, nullptr, dbias_want.data() + qd + kd, dv.data(), nullptr, nullptr, N, 0, kd);
    expect_close(to_host<float>(dbias, size_t(width)), to_host<float>(dbias_want, size_t(width)), 1e-4f, 1e-5f,
                 "q, k, v bias sums");
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CudaTensorCoreAttention,
    ::testing::Values(AttnCase{2, 77, 4, 2, 64, {77, 50}},        // GQA, ragged, a partial tile
                      AttnCase{1, 200, 12, 2, 128, {}},           // 1.5B's 6:1 grouping and head dim, 4 tiles
                      AttnCase{3, 130, 14, 2, 64, {130, 1, 0}},   // 0.5B's 7:1; a 1-token and an empty row
                      AttnCase{1, 64, 2, 1, 128, {64}},           // one exact tile
                      AttnCase{2, 150, 4, 1, 64, {150, 99}, 4.f}),  // peaked softmax: the online max matters
    attn_case_name);

TEST_F(CudaOps, ElementwiseOpsMatchCpu) {
  const int64_t n = 100003;
  const auto gate = randn(n, 28, 3.f), up = randn(n, 29), dout = randn(n, 30);
  std::vector<float> out(n), dgate(n), dup(n), sum(n), scaled = up;
  cpu.swiglu_forward(out.data(), gate.data(), up.data(), n);
  cpu.swiglu_backward(dgate.data(), dup.data(), dout.data(), gate.data(), up.data(), n);
  cpu.add(sum.data(), gate.data(), up.data(), n);
  cpu.scale(scaled.data(), 0.37f, n);
  auto d_gate = to_device(gate), d_up = to_device(up), d_dout = to_device(dout), d_scaled = to_device(up);
  Buffer<float> d_out(cuda_ops(), n), d_dgate(cuda_ops(), n), d_dup(cuda_ops(), n);
  gpu.swiglu_forward(d_out.data(), d_gate.data(), d_up.data(), n);
  gpu.swiglu_backward(d_dgate.data(), d_dup.data(), d_dout.data(), d_gate.data(), d_up.data(),
                      n);
  gpu.scale(d_scaled.data(), 0.37f, n);
  expect_close(to_host<float>(d_out, n), out, 1e-6f, 1e-5f, "swiglu out");
  expect_close(to_host<float>(d_dgate, n), dgate, 1e-6f, 1e-5f, "dgate");
  expect_close(to_host<float>(d_dup, n), dup, 1e-6f, 1e-5f, "dup");
  expect_close(to_host<float>(d_scaled, n), scaled, 0, 0, "scale");
  gpu.add(d_gate.data(), d_gate.data(), d_up.data(), n);  // out aliases a
  expect_close(to_host<float>(d_gate, n), sum, 0, 0, "add in place");

  // SwiGLU with its output rounded for the down projection (out aliasing gate, as decode calls
  // it): the GPU's SwiGLU bit for bit, and its rounding.
  const Ops& dev = cuda_bf16_matmul_ops();
  auto d_g2 = to_device(gate);
  Buffer<uint16_t> d_out16(cuda_ops(), size_t(n)), d_want16(cuda_ops(), size_t(n));
  dev.swiglu_forward_w16(d_g2.data(), d_out16.data(), d_g2.data(), d_up.data(), n);
  dev.to_bf16(d_want16.data(), d_out.data(), n);
  EXPECT_EQ(to_host<float>(d_g2, size_t(n)), to_host<float>(d_out, size_t(n)));
  EXPECT_EQ(to_host<uint16_t>(d_out16, size_t(n)), to_host<uint16_t>(d_want16, size_t(n)));
  // Without the fp32 output (a bf16 model's forward): the same rounding.
  auto d_g3 = to_device(gate);  // d_gate holds gate + up by now
  Buffer<uint16_t> d_only16(cuda_ops(), size_t(n));
  dev.swiglu_forward_w16(nullptr, d_only16.data(), d_g3.data(), d_up.data(), n);
  EXPECT_EQ(to_host<uint16_t>(d_only16, size_t(n)), to_host<uint16_t>(d_want16, size_t(n)));
}

// SwiGLU takes four values a thread where its pointers are 16-byte aligned (kernels/cuda/swiglu.cuh)
// and one a thread where they are not: the same values one float further along give the same
// bits either way, forward (fp32 and bf16) and backward (fp32 and bf16), with a ragged tail.
TEST_F(CudaOps, SwigluFourValuesAThreadAreOneValueAThreadBitForBit) {
  const int64_t n = 100003;
  std::vector<float> gate = randn(n + 1, 31, 3.f), up = randn(n + 1, 32), dout = randn(n + 1, 33);
  auto d_gate = to_device(gate), d_up = to_device(up), d_dout = to_device(dout);
  const Ops& dev = cuda_bf16_matmul_ops();
  Buffer<float> out(cuda_ops(), size_t(n + 1)), dg(cuda_ops(), size_t(n + 1)), du(cuda_ops(), size_t(n + 1));
  Buffer<float> out1(cuda_ops(), size_t(n + 1)), dg1(cuda_ops(), size_t(n + 1)), du1(cuda_ops(), size_t(n + 1));
  Buffer<uint16_t> h(cuda_ops(), size_t(n + 8)), h1(cuda_ops(), size_t(n + 8)), g16(cuda_ops(), size_t(n + 8)),
      u16(cuda_ops(), size_t(n + 8)), g16_1(cuda_ops(), size_t(n + 8)), u16_1(cuda_ops(), size_t(n + 8));
  auto tail = [](const std::vector<float>& v) { return std::vector<float>(v.begin() + 1, v.end()); };
  auto head = [](const std::vector<float>& v) { return std::vector<float>(v.begin(), v.end() - 1); };
  // Values [1, n + 1) uploaded on their own (aligned: cudaMalloc's 256 bytes), and the same values
  // read one float into the full upload (misaligned); the outputs likewise.
  auto a_gate = to_device(tail(gate)), a_up = to_device(tail(up)), a_dout = to_device(tail(dout));
  dev.swiglu_forward_w16(out.data(), h.data(), a_gate.data(), a_up.data(), n);
  dev.swiglu_forward_w16(out1.data() + 1, h1.data() + 4, d_gate.data() + 1, d_up.data() + 1, n);
  EXPECT_EQ(head(to_host<float>(out, size_t(n + 1))), tail(to_host<float>(out1, size_t(n + 1)))) << "forward, fp32";
  const std::vector<uint16_t> hh = to_host<uint16_t>(h, size_t(n + 8)), hh1 = to_host<uint16_t>(h1, size_t(n + 8));
  EXPECT_TRUE(std::equal(hh.begin(), hh.begin() + n, hh1.begin() + 4)) << "forward, bf16";
  dev.swiglu_backward(dg.data(), du.data(), a_dout.data(), a_gate.data(), a_up.data(), n);
  dev.swiglu_backward(dg1.data() + 1, du1.data() + 1, d_dout.data() + 1, d_gate.data() + 1, d_up.data() + 1, n);
  EXPECT_EQ(head(to_host<float>(dg, size_t(n + 1))), tail(to_host<float>(dg1, size_t(n + 1)))) << "dgate, fp32";
  EXPECT_EQ(head(to_host<float>(du, size_t(n + 1))), tail(to_host<float>(du1, size_t(n + 1)))) << "dup, fp32";
  dev.swiglu_backward_w16(g16.data(), u16.data(), a_dout.data(), a_gate.data(), a_up.data(), n);
  dev.swiglu_backward_w16(g16_1.data() + 4, u16_1.data() + 4, d_dout.data() + 1, d_gate.data() + 1, d_up.data() + 1,
                          n);
  for (auto [a, b, what] : {std::tuple{&g16, &g16_1, "dgate, bf16"}, std::tuple{&u16, &u16_1, "dup, bf16"}}) {
    const std::vector<uint16_t> x = to_host<uint16_t>(*a, size_t(n + 8)), y = to_host<uint16_t>(*b, size_t(n + 8));
    EXPECT_TRUE(std::equal(x.begin(), x.begin() + n, y.begin() + 4)) << what;
  }
}

// The ops of backward with bf16 gradients are, on the GPU, the GPU ops they replace bit for bit:
// swiglu_backward_w16 is swiglu_backward rounded by to_bf16; matmul_backward_g16 is
// matmul_backward_a16w16 on the same dout (dinp added to, or written over a buffer of garbage as
// beta = 0 writes it; dw added to); adamw_w16 is adamw and then to_bf16 of the weights. Each is
// also the CPU table's within the tolerances of the ops it replaces.
TEST_F(CudaOps, OpsWithBf16GradientsMatchTheOpsTheyReplace) {
  const Ops& dev = cuda_bf16_matmul_ops();
  const Ops& host = cpu_bf16_matmul_ops();
  const int64_t n = 100003;
  const auto gate = randn(n, 28, 3.f), up = randn(n, 29), dout = randn(n, 30);
  auto d_gate = to_device(gate), d_up = to_device(up), d_dout = to_device(dout);
  Buffer<float> d_dgate(cuda_ops(), n), d_dup(cuda_ops(), n);
  Buffer<uint16_t> d_dg16(cuda_ops(), n), d_du16(cuda_ops(), n), d_want_g(cuda_ops(), n), d_want_u(cuda_ops(), n);
  dev.swiglu_backward(d_dgate.data(), d_dup.data(), d_dout.data(), d_gate.data(), d_up.data(), n);
  dev.to_bf16(d_want_g.data(), d_dgate.data(), n);
  dev.to_bf16(d_want_u.data(), d_dup.data(), n);
  dev.swiglu_backward_w16(d_dg16.data(), d_du16.data(), d_dout.data(), d_gate.data(), d_up.data(), n);
  EXPECT_EQ(to_host<uint16_t>(d_dg16, n), to_host<uint16_t>(d_want_g, n));
  EXPECT_EQ(to_host<uint16_t>(d_du16, n), to_host<uint16_t>(d_want_u, n));
  std::vector<uint16_t> cg(n), cu(n);
  host.swiglu_backward_w16(cg.data(), cu.data(), dout.data(), gate.data(), up.data(), n);
  auto widen = [](const std::vector<uint16_t>& x) {
    std::vector<float> r(x.size());
    for (size_t i = 0; i < x.size(); i++) {
      const uint32_t bits = uint32_t(x[i]) << 16;
      std::memcpy(&r[i], &bits, sizeof bits);
    }
    return r;
  };
  // fp32 within 1e-5 of the CPU's, then each rounded: at most one bf16 step (2^-7 relative) apart.
  expect_close(widen(to_host<uint16_t>(d_dg16, n)), widen(cg), 1e-6f, 1.f / 64, "dgate16");
  expect_close(widen(to_host<uint16_t>(d_du16, n)), widen(cu), 1e-6f, 1.f / 64, "dup16");

  const int64_t N = 96, IC = 64, OC = 80;
  const auto dy = randn(size_t(N * OC), 61), x = randn(size_t(N * IC), 62), w = randn(size_t(OC * IC), 63);
  const auto dinp0 = randn(size_t(N * IC), 64), dw0 = randn(size_t(OC * IC), 65);
  std::vector<uint16_t> dy16(dy.size()), x16(x.size()), w16(w.size());
  host.to_bf16(dy16.data(), dy.data(), int64_t(dy.size()));
  host.to_bf16(x16.data(), x.data(), int64_t(x.size()));
  host.to_bf16(w16.data(), w.data(), int64_t(w.size()));
  auto d_dy = to_device(dy), d_dinp_a = to_device(dinp0), d_dw_a = to_device(dw0);
  auto d_dy16 = to_device(dy16), d_x16 = to_device(x16), d_w16 = to_device(w16);
  dev.matmul_backward_a16w16(d_dinp_a.data(), d_dw_a.data(), nullptr, d_dy.data(), d_x16.data(), d_w16.data(), N, IC,
                             OC);
  auto d_dinp_g = to_device(dinp0), d_dw_g = to_device(dw0);
  dev.matmul_backward_g16(d_dinp_g.data(), d_dw_g.data(), d_dy16.data(), d_x16.data(), d_w16.data(), N, IC, OC,
                          kAddBoth);
  EXPECT_EQ(to_host<float>(d_dinp_g, size_t(N * IC)), to_host<float>(d_dinp_a, size_t(N * IC)));
  EXPECT_EQ(to_host<float>(d_dw_g, size_t(OC * IC)), to_host<float>(d_dw_a, size_t(OC * IC)));
  Buffer<float> d_dinp_z(cuda_ops(), size_t(N * IC));  // zeroed
  auto d_dw_z = to_device(dw0), d_dinp_w = to_device(dinp0), d_dw_w = to_device(dw0);
  dev.matmul_backward_a16w16(d_dinp_z.data(), d_dw_z.data(), nullptr, d_dy.data(), d_x16.data(), d_w16.data(), N, IC,
                             OC);
  dev.matmul_backward_g16(d_dinp_w.data(), d_dw_w.data(), d_dy16.data(), d_x16.data(), d_w16.data(), N, IC, OC,
                          kWriteDinp);
  const std::vector<float> written = to_host<float>(d_dinp_w, size_t(N * IC));
  EXPECT_EQ(written, to_host<float>(d_dinp_z, size_t(N * IC)));
  EXPECT_EQ(to_host<float>(d_dw_w, size_t(OC * IC)), to_host<float>(d_dw_z, size_t(OC * IC)));
  // dW written (beta = 0) over stale values: the product added to zeros, bit for bit (the same plan).
  Buffer<float> d_dw_zero(cuda_ops(), size_t(OC * IC));  // zeroed
  auto d_dinp_az = to_device(dinp0), d_dinp_d = to_device(dinp0), d_dw_d = to_device(dw0);
  dev.matmul_backward_a16w16(d_dinp_az.data(), d_dw_zero.data(), nullptr, d_dy.data(), d_x16.data(), d_w16.data(), N,
                             IC, OC);
  dev.matmul_backward_g16(d_dinp_d.data(), d_dw_d.data(), d_dy16.data(), d_x16.data(), d_w16.data(), N, IC, OC,
                          kWriteDw);
  EXPECT_EQ(to_host<float>(d_dinp_d, size_t(N * IC)), to_host<float>(d_dinp_az, size_t(N * IC)));
  EXPECT_EQ(to_host<float>(d_dw_d, size_t(OC * IC)), to_host<float>(d_dw_zero, size_t(OC * IC)));
  dev.matmul_backward_g16(nullptr, d_dw_d.data(), nullptr, nullptr, nullptr, 0, IC, OC, kWriteDw);  // an empty sum
  EXPECT_EQ(to_host<float>(d_dw_d, size_t(OC * IC)), std::vector<float>(size_t(OC * IC), 0.f));
  std::vector<float> cpu_dinp(size_t(N * IC), 0.f), cpu_dw = dw0;
  host.matmul_backward_g16(cpu_dinp.data(), cpu_dw.data(), dy16.data(), x16.data(), w16.data(), N, IC, OC, kWriteDinp);
  expect_close(written, cpu_dinp, 1e-4f, 1e-4f, "g16 dinp");
  expect_close(to_host<float>(d_dw_w, size_t(OC * IC)), cpu_dw, 1e-4f, 1e-4f, "g16 dw");
  dev.matmul_backward_g16(d_dinp_w.data(), nullptr, nullptr, nullptr, nullptr, N, IC, 0, kWriteDinp);  // an empty sum
  EXPECT_EQ(to_host<float>(d_dinp_w, size_t(N * IC)), std::vector<float>(size_t(N * IC), 0.f));

  const int64_t np = 5000;
  const auto p = randn(np, 31), g = randn(np, 41);
  auto d_p_a = to_device(p), d_p_b = to_device(p), d_g = to_device(g);
  Buffer<float> d_m_a(cuda_ops(), np), d_v_a(cuda_ops(), np), d_m_b(cuda_ops(), np), d_v_b(cuda_ops(), np);
  Buffer<uint16_t> d_p16(cuda_ops(), np), d_want16(cuda_ops(), np);
  dev.adamw(d_p_a.data(), d_g.data(), d_m_a.data(), d_v_a.data(), np, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 0.1f, 0.001f,
            1.f);
  dev.to_bf16(d_want16.data(), d_p_a.data(), np);
  dev.adamw_w16(d_p_b.data(), d_p16.data(), d_g.data(), d_m_b.data(), d_v_b.data(), np, 1e-3f, 0.9f, 0.999f, 1e-8f,
                0.01f, 0.1f, 0.001f, 1.f);
  EXPECT_EQ(to_host<float>(d_p_b, np), to_host<float>(d_p_a, np));
  EXPECT_EQ(to_host<float>(d_m_b, np), to_host<float>(d_m_a, np));
  EXPECT_EQ(to_host<float>(d_v_b, np), to_host<float>(d_v_a, np));
  EXPECT_EQ(to_host<uint16_t>(d_p16, np), to_host<uint16_t>(d_want16, np));
  // A clip's coefficient read into the update (grad_scale) is scale() on the gradients first.
  auto d_p_c = to_device(p), d_p_d = to_device(p), d_scaled = to_device(g);
  Buffer<float> d_m_c(cuda_ops(), np), d_v_c(cuda_ops(), np), d_m_d(cuda_ops(), np), d_v_d(cuda_ops(), np);
  dev.scale(d_scaled.data(), 0.3712f, np);
  dev.adamw(d_p_c.data(), d_scaled.data(), d_m_c.data(), d_v_c.data(), np, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 0.1f,
            0.001f, 1.f);
  dev.adamw_w16(d_p_d.data(), d_p16.data(), d_g.data(), d_m_d.data(), d_v_d.data(), np, 1e-3f, 0.9f, 0.999f, 1e-8f,
                0.01f, 0.1f, 0.001f, 0.3712f);
  EXPECT_EQ(to_host<float>(d_p_d, np), to_host<float>(d_p_c, np));
  EXPECT_EQ(to_host<float>(d_m_d, np), to_host<float>(d_m_c, np));
  EXPECT_EQ(to_host<float>(d_v_d, np), to_host<float>(d_v_c, np));
}

// RMSNorm's backward with dx's bf16 rounding (rmsnorm_backward_w16): the plain backward's dx bit
// for bit and that dx rounded as to_bf16 rounds it; dw (atomics, in no fixed order) to fp32
// rounding; and both the CPU's gradients. 1,000 rows of 1,536 (Qwen2.5-1.5B's width) take the
// four-value kernel with several rows a block; 301 columns the one-value kernel.
TEST_F(CudaOps, RmsNormBackwardWithBf16DxIsTheBackwardAndItsRounding) {
  const Ops& dev = cuda_bf16_matmul_ops();
  for (const auto& [N, C] : {std::pair<int64_t, int64_t>{1000, 1536}, {33, 301}}) {
    SCOPED_TRACE(std::to_string(N) + " x " + std::to_string(C));
    const auto x = randn(size_t(N * C), 90, 2.f), w = randn(size_t(C), 91), dout = randn(size_t(N * C), 92);
    const auto dx0 = randn(size_t(N * C), 93), dw0 = randn(size_t(C), 94);
    std::vector<float> out(static_cast<size_t>(N * C)), rstd(static_cast<size_t>(N)), dx = dx0, dw = dw0;
    cpu.rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, 1e-6f);
    cpu.rmsnorm_backward(dx.data(), dw.data(), dout.data(), x.data(), w.data(), rstd.data(), N, C);
    auto d_x = to_device(x), d_w = to_device(w), d_dout = to_device(dout), d_rstd = to_device(rstd);
    auto d_dx_a = to_device(dx0), d_dw_a = to_device(dw0), d_dx_b = to_device(dx0), d_dw_b = to_device(dw0);
    Buffer<uint16_t> d_dx16(cuda_ops(), size_t(N * C)), d_want16(cuda_ops(), size_t(N * C));
    dev.rmsnorm_backward(d_dx_a.data(), d_dw_a.data(), d_dout.data(), d_x.data(), d_w.data(), d_rstd.data(), N, C);
    dev.to_bf16(d_want16.data(), d_dx_a.data(), N * C);
    dev.rmsnorm_backward_w16(d_dx_b.data(), d_dx16.data(), d_dw_b.data(), d_dout.data(), d_x.data(), d_w.data(),
                             d_rstd.data(), N, C);
    const std::vector<float> got_dx = to_host<float>(d_dx_b, size_t(N * C));
    EXPECT_EQ(got_dx, to_host<float>(d_dx_a, size_t(N * C)));
    EXPECT_EQ(to_host<uint16_t>(d_dx16, size_t(N * C)), to_host<uint16_t>(d_want16, size_t(N * C)));
    expect_close(to_host<float>(d_dw_b, size_t(C)), to_host<float>(d_dw_a, size_t(C)), 1e-4f, 1e-5f, "dw, twice");
    expect_close(got_dx, dx, 1e-4f, 1e-4f, "dx against the CPU");
    expect_close(to_host<float>(d_dw_b, size_t(C)), dw, 1e-3f, 1e-4f, "dw against the CPU");
  }
}

// RMSNorm's backward in the register-held form (rmsnorm_backward.cuh; 1,536 columns hold 3 quads
// a thread, 2,560 six, 4,096 eight, 300 one) against the loop form on the same device
// (cuda_set_rmsnorm_backward_loop): dx to the last bits (the same sums in the same order; the
// emulated test has them bit for bit), dx16 its own dx rounded, dw to fp32 rounding (atomics).
// RMSNorm's forward held in registers (kernels/cuda/rmsnorm_forward.cuh) against its loop form, on
// the device: the same bits in the output, its bf16 rounding, rstd and the residual sum (written
// over x, as the model calls it), at 1.5B's width, 7B's, and widths with idle threads; past 4,096
// columns both calls take the loop form.
TEST_F(CudaOps, RmsNormForwardHeldFormIsTheLoopForm) {
  const Ops& dev = cuda_bf16_matmul_ops();
  for (const auto& [N, C] : {std::pair<int64_t, int64_t>{1000, 1536}, {37, 3584}, {33, 300}, {5, 5000}}) {
    SCOPED_TRACE(std::to_string(N) + " x " + std::to_string(C));
    const auto x = randn(size_t(N * C), 91, 2.f), w = randn(size_t(C), 92), delta = randn(size_t(N * C), 93);
    std::vector<float> out[2], rstd[2], res[2];
    std::vector<uint16_t> out16[2];
    for (const bool loop : {false, true}) {
      cuda_set_rmsnorm_forward_loop(loop);
      auto d_x = to_device(x), d_w = to_device(w), d_delta = to_device(delta);
      Buffer<float> d_out(cuda_ops(), size_t(N * C)), d_rstd(cuda_ops(), size_t(N));
      Buffer<uint16_t> d_out16(cuda_ops(), size_t(N * C));
      dev.residual_rmsnorm_forward_w16(d_x.data(), d_out.data(), d_out16.data(), d_rstd.data(), d_x.data(),
                                       d_delta.data(), d_w.data(), N, C, 1e-6f);
      cuda_set_rmsnorm_forward_loop(false);
      out[loop] = to_host<float>(d_out, size_t(N * C));
      out16[loop] = to_host<uint16_t>(d_out16, size_t(N * C));
      rstd[loop] = to_host<float>(d_rstd, size_t(N));
      res[loop] = to_host<float>(d_x, size_t(N * C));
    }
    EXPECT_TRUE(same_bits(out[0], out[1])) << "out";
    EXPECT_EQ(out16[0], out16[1]) << "out16";
    EXPECT_TRUE(same_bits(rstd[0], rstd[1])) << "rstd";
    EXPECT_TRUE(same_bits(res[0], res[1])) << "res";
  }
}

TEST_F(CudaOps, RmsNormBackwardHeldFormIsTheLoopForm) {
  const Ops& dev = cuda_bf16_matmul_ops();
  for (const auto& [N, C] : {std::pair<int64_t, int64_t>{1000, 1536}, {37, 2560}, {21, 4096}, {33, 300}}) {
    SCOPED_TRACE(std::to_string(N) + " x " + std::to_string(C));
    const auto x = randn(size_t(N * C), 95, 2.f), w = randn(size_t(C), 96), dout = randn(size_t(N * C), 97);
    const auto dx0 = randn(size_t(N * C), 98), dw0 = randn(size_t(C), 99);
    std::vector<float> out(static_cast<size_t>(N * C)), rstd(static_cast<size_t>(N));
    cpu.rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, 1e-6f);
    auto d_x = to_device(x), d_w = to_device(w), d_dout = to_device(dout), d_rstd = to_device(rstd);
    std::vector<float> dx[2], dw[2];
    std::vector<uint16_t> dx16[2];
    for (const bool loop : {false, true}) {
      cuda_set_rmsnorm_backward_loop(loop);
      auto d_dx = to_device(dx0), d_dw = to_device(dw0);
      Buffer<uint16_t> d_dx16(cuda_ops(), size_t(N * C));
      dev.rmsnorm_backward_w16(d_dx.data(), d_dx16.data(), d_dw.data(), d_dout.data(), d_x.data(), d_w.data(),
                               d_rstd.data(), N, C);
      cuda_set_rmsnorm_backward_loop(false);
      dx[loop] = to_host<float>(d_dx, size_t(N * C));
      dw[loop] = to_host<float>(d_dw, size_t(C));
      dx16[loop] = to_host<uint16_t>(d_dx16, size_t(N * C));
      Buffer<uint16_t> d_want16(cuda_ops(), size_t(N * C));
      dev.to_bf16(d_want16.data(), d_dx.data(), N * C);
      EXPECT_EQ(dx16[loop], to_host<uint16_t>(d_want16, size_t(N * C))) << "dx16, loop form " << loop;
    }
    std::printf("%lld x %lld: held dx %s the loop form's bits\n", static_cast<long long>(N),
                static_cast<long long>(C), dx[0] == dx[1] ? "has" : "differs from");
    expect_close(dx[0], dx[1], 1e-6f, 1e-6f, "dx, held against loop");
    expect_close(dw[0], dw[1], 1e-4f, 1e-5f, "dw, held against loop");
  }
}

// The meter of azr's device allocations (cuda_memory_in_use, cuda_memory_peak): a buffer of the
// op table adds exactly its bytes while it lives, and the peak keeps them after it is gone.
TEST_F(CudaOps, MemoryMeterCountsTheTablesAllocations) {
  cuda_synchronize();
  const size_t before = cuda_memory_in_use();
  cuda_reset_memory_peak();
  EXPECT_EQ(cuda_memory_peak(), before);
  {
    Buffer<float> a(cuda_ops(), 1000), b(cuda_ops(), 24);
    EXPECT_EQ(cuda_memory_in_use(), before + 4096);
  }
  EXPECT_EQ(cuda_memory_in_use(), before);
  EXPECT_EQ(cuda_memory_peak(), before + 4096);
}

TEST_F(CudaOps, AdamWStepsMatchCpu) {
  const int64_t n = 5000;
  std::vector<float> p = randn(n, 31), m(n, 0.f), v(n, 0.f);
  auto d_p = to_device(p), d_m = to_device(m), d_v = to_device(v);
  for (int step = 1; step <= 3; step++) {
    const auto g = randn(n, 40 + step);
    const float bc1 = 1.f - std::pow(0.9f, float(step)), bc2 = 1.f - std::pow(0.999f, float(step));
    cpu.adamw(p.data(), g.data(), m.data(), v.data(), n, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, bc1, bc2, 1.f);
    auto d_g = to_device(g);
    gpu.adamw(d_p.data(), d_g.data(), d_m.data(), d_v.data(), n, 1e-3f, 0.9f, 0.999f, 1e-8f,
              0.01f, bc1, bc2, 1.f);
  }
  expect_close(to_host<float>(d_p, n), p, 1e-6f, 1e-5f, "adamw p");
  expect_close(to_host<float>(d_m, n), m, 1e-7f, 1e-5f, "adamw m");
  expect_close(to_host<float>(d_v, n), v, 1e-9f, 1e-5f, "adamw v");
}

TEST_F(CudaOps, SumSquaresMatchesCpu) {
  for (int64_t n : {int64_t(1), int64_t(1000), int64_t(1) << 20 | 3}) {
    const auto x = randn(size_t(n), 50 + uint64_t(n));
    auto d_x = to_device(x);
    const double want = cpu.sum_squares(x.data(), n), got = gpu.sum_squares(d_x.data(), n);
    EXPECT_NEAR(got, want, 1e-10 * want) << "n = " << n;
  }
}

// The sums over rows that the training step once added with float atomics (ordered_sums.cuh):
// with AZR_CUDA_GRADIENT_SUMS's default, three runs of each op on the same inputs give the same
// bits, at 1.5B's widths and rows enough for hundreds of blocks to finish in any order; in both
// forms the CPU's sums to fp32 rounding. The embedding's ids repeat as a batch of rollouts' do: a
// few ids in a third of the rows, a stretch of one id, the rest spread. Prints whether the atomic
// form's runs differed (they may not, by chance: no test rests on it).
TEST_F(CudaOps, GradientSumsAreTheSameBitsEveryRun) {
  const Ops& dev = cuda_bf16_matmul_ops();
  // 4,096 rows, and 32,768 (a large micro-batch: the embedding's pieces in two waves, 64 rows a block
  // of the RMSNorm backward) whose last quarter is one id, as right padding gives.
  for (const int64_t N : {int64_t(4096), int64_t(32768)}) {
    SCOPED_TRACE("N " + std::to_string(N));
    const int64_t C = 1536, V = 5000, heads = 12, kv_heads = 2, d = 128;
    const int64_t width = (heads + 2 * kv_heads) * d;
    std::vector<int32_t> ids(static_cast<size_t>(N));
    for (int64_t n = 0; n < N; n++) ids[size_t(n)] = n % 3 == 0 ? int32_t(n % 4) : int32_t((n * 7919) % V);
    for (int64_t n = N / 2; n < N / 2 + 700; n++) ids[size_t(n)] = int32_t(V - 1);
    if (N > 4096)
      for (int64_t n = N - N / 4; n < N; n++) ids[size_t(n)] = 0;
    const auto dout = randn(size_t(N * C), 70), dwte0 = randn(size_t(V * C), 71), x = randn(size_t(N * C), 72, 2.f);
    const auto w = randn(size_t(C), 73), dx0 = randn(size_t(N * C), 74), dw0 = randn(size_t(C), 75);
    const auto qkv = randn(size_t(N * width), 76), dbias0 = randn(size_t(width), 77);
    std::vector<float> rstd(static_cast<size_t>(N)), normed(size_t(N * C)), cos, sin;
    cpu.rmsnorm_forward(normed.data(), rstd.data(), x.data(), w.data(), N, C, 1e-6f);
    std::vector<int32_t> pos(static_cast<size_t>(N));
    for (int64_t n = 0; n < N; n++) pos[size_t(n)] = int32_t(n % 1024);
    for (int64_t p = 0; p < 1024; p++)
      for (int64_t i = 0; i < d / 2; i++) {
        const double angle = double(p) * std::pow(1e6, -2.0 * double(i) / double(d));
        cos.push_back(float(std::cos(angle))), sin.push_back(float(std::sin(angle)));
      }
    auto d_ids = to_device(ids), d_pos = to_device(pos);
    auto d_dout = to_device(dout), d_x = to_device(x), d_w = to_device(w), d_rstd = to_device(rstd);
    auto d_cos = to_device(cos), d_sin = to_device(sin), d_qkv = to_device(qkv);
    const int64_t qd = heads * d, kd = kv_heads * d;

    // One run of each op from the same starting values: dwte, dbias of column sums, dw, RoPE's dbias,
    // the sum of squares' bits.
    auto run_all = [&] {
      std::vector<std::vector<float>> r;
      auto d_dwte = to_device(dwte0);
      dev.embedding_backward(d_dwte.data(), d_dout.data(), d_ids.data(), N, C);
      r.push_back(to_host<float>(d_dwte, size_t(V * C)));
      auto d_bias = to_device(dbias0);
      dev.matmul_backward(nullptr, nullptr, d_bias.data(), d_dout.data(), nullptr, nullptr, N, 0, C);
      r.push_back(to_host<float>(d_bias, size_t(C)));
      auto d_dx = to_device(dx0), d_dw = to_device(dw0);
      dev.rmsnorm_backward(d_dx.data(), d_dw.data(), d_dout.data(), d_x.data(), d_w.data(), d_rstd.data(), N, C);
      r.push_back(to_host<float>(d_dw, size_t(C)));
      std::vector<float> q(size_t(N * qd)), k(size_t(N * kd)), v(size_t(N * kd));
      for (int64_t n = 0; n < N; n++) {
        std::copy_n(qkv.begin() + n * width, qd, q.begin() + n * qd);
        std::copy_n(qkv.begin() + n * width + qd, kd, k.begin() + n * kd);
        std::copy_n(qkv.begin() + n * width + qd + kd, kd, v.begin() + n * kd);
      }
      auto d_q = to_device(q), d_k = to_device(k), d_v = to_device(v), d_rope_bias = to_device(dbias0);
      Buffer<uint16_t> dqkv16(cuda_ops(), size_t(N * width));
      dev.rope_backward_round_w16(dqkv16.data(), d_q.data(), d_k.data(), d_v.data(), d_rope_bias.data(), d_pos.data(),
                                  d_cos.data(), d_sin.data(), N, heads, kv_heads, d);
      r.push_back(to_host<float>(d_rope_bias, size_t(width)));
      const double squares = dev.sum_squares(d_dout.data(), N * C);
      float halves[2];
      std::memcpy(halves, &squares, sizeof squares);
      r.push_back({halves[0], halves[1]});
      return r;
    };
    const char* names[] = {"embedding", "column sums", "rmsnorm dw", "rope dbias", "sum of squares"};
    std::vector<std::vector<float>> forms[2];  // [atomic, ordered]
    for (const bool ordered : {false, true}) {
      const testing::GradientSumsOrdered setting(ordered);
      forms[ordered] = run_all();
      for (int again = 0; again < 2; again++) {
        const auto r = run_all();
        for (size_t i = 0; i < r.size(); i++) {
          if (ordered) {
            EXPECT_TRUE(same_bits(r[i], forms[1][i])) << names[i] << ", run " << again + 2;
          } else if (!same_bits(r[i], forms[0][i])) {
            std::printf("atomic %s: run %d differs\n", names[i], again + 2);
          }
        }
      }
    }
    // Both forms against the CPU's sums (the atomic form's are the ordered one's to rounding).
    std::vector<float> want_dwte = dwte0, want_bias = dbias0, want_dx = dx0, want_dw = dw0;
    cpu.embedding_backward(want_dwte.data(), dout.data(), ids.data(), N, C);
    cpu.matmul_backward(nullptr, nullptr, want_bias.data(), dout.data(), nullptr, nullptr, N, 0, C);
    cpu.rmsnorm_backward(want_dx.data(), want_dw.data(), dout.data(), x.data(), w.data(), rstd.data(), N, C);
    // Sums of up to 4,096 terms of about 1 (magnitudes near 64) in other orders: fp32's rounding is
    // about 1e-4 there, 1e-2 is far under any missed or doubled row. Rounding grows with the terms'
    // count at worst: 8 times the bounds at 32,768, still under a row's term of about 1.
    const float grow = float(N) / 4096.f;
    for (const int form : {0, 1}) {
      const std::string which = form ? "ordered " : "atomic ";
      expect_close(forms[form][0], want_dwte, grow * 1e-3f, 1e-5f, which + "dwte");
      expect_close(forms[form][1], want_bias, grow * 1e-2f, 1e-5f, which + "column sums");
      expect_close(forms[form][2], want_dw, grow * 1e-2f, 1e-4f, which + "rmsnorm dw");
      expect_close(forms[form][3], forms[0][3], grow * 1e-2f, 1e-5f, which + "rope dbias against the atomic form");
      double got = 0, want = cpu.sum_squares(dout.data(), N * C);
      std::memcpy(&got, forms[form][4].data(), sizeof got);
      EXPECT_NEAR(got, want, 1e-10 * want) << which << "sum of squares";
    }
    // The scratch against the memory plan's bound at these shapes (ordered_sums_limits.h; CUB's
    // temporary storage is its guess): printed, not held, since the scratch keeps the largest size
    // of any earlier test's call too.
    std::printf("gradient sums' scratch: %zu bytes; the plan's bound at %lld x 1536, biases 2048 wide: %.0f\n",
                cuda_detail::cuda_gradient_sums_scratch_bytes(), static_cast<long long>(N),
                cuda_detail::ordered_sums::scratch_bytes(double(N), double(C), double(width)));
  }
}

// The vocabulary sizes of azr-tiny (263) and Qwen2.5 (151,936); temperature != 1; a masked row;
// the whole row in one block, and column blocks as the LM head makes them (4,096 columns at
// 151,936: 38 blocks, the last one shorter), against the CPU's whole rows.
class CudaTokenStats : public CudaOps, public ::testing::WithParamInterface<int64_t> {};

TEST_P(CudaTokenStats, StatsAndBackwardMatchCpu) {
  const int64_t V = GetParam(), n = 7;
  const float inv_temp = 1.f / 0.7f;
  const auto logits = randn(n * V, 60, 4.f), dlogp = randn(n, 61), dent = randn(n, 62);
  const std::vector<int32_t> targets = testing::spread_targets(n, V);
  std::vector<float> lse(n), logp(n), ent(n), dlogits(n * V);
  cpu.token_stats(lse.data(), logp.data(), ent.data(), nullptr, logits.data(), targets.data(), n, 0, V, V, inv_temp);
  cpu.token_stats_backward(dlogits.data(), logits.data(), targets.data(), lse.data(), ent.data(), dlogp.data(),
                           dent.data(), n, 0, V, inv_temp);
  auto d_dlogp = to_device(dlogp), d_dent = to_device(dent);
  auto d_t = to_device(targets);
  for (const int64_t block : {V, V > 4096 ? int64_t(4096) : int64_t(100)}) {
    SCOPED_TRACE("blocks of " + std::to_string(block));
    Buffer<float> d_lse(cuda_ops(), n), d_logp(cuda_ops(), n), d_ent(cuda_ops(), n);
    Buffer<double> d_state(cuda_ops(), 4 * n);
    std::vector<Buffer<float>> d_blocks;
    for (int64_t col0 = 0; col0 < V; col0 += block) {
      const int64_t cols = std::min(block, V - col0);
      d_blocks.push_back(to_device(testing::column_block(logits, n, V, col0, cols)));
      gpu.token_stats(d_lse.data(), d_logp.data(), d_ent.data(), block < V ? d_state.data() : nullptr,
                      d_blocks.back().data(), d_t.data(), n, col0, cols, V, inv_temp);
    }
    expect_close(to_host<float>(d_lse, n), lse, 1e-4f, 1e-5f, "lse");
    expect_close(to_host<float>(d_logp, n), logp, 1e-4f, 1e-5f, "logp");
    expect_close(to_host<float>(d_ent, n), ent, 1e-4f, 1e-4f, "entropy");
    // The backward in place (dlogits aliasing logits, as the model runs it), block by block.
    std::vector<float> got(size_t(n * V));
    int64_t b = 0;
    for (int64_t col0 = 0; col0 < V; col0 += block, b++) {
      const int64_t cols = std::min(block, V - col0);
      float* d = d_blocks[size_t(b)].data();
      gpu.token_stats_backward(d, d, d_t.data(), d_lse.data(), d_ent.data(), d_dlogp.data(), d_dent.data(), n, col0,
                               cols, inv_temp);
      const std::vector<float> h = to_host<float>(d_blocks[size_t(b)], size_t(n * cols));
      for (int64_t r = 0; r < n; r++) std::copy_n(h.data() + r * cols, cols, got.data() + r * V + col0);
    }
    expect_close(got, dlogits, 1e-6f, 1e-4f, "dlogits");
  }
  // The bf16 variant (token_stats_backward_w16) over the same logits in column blocks: that
  // gradient rounded as to_bf16 rounds it, bit for bit, and the logits only read.
  const Ops& dev = cuda_bf16_matmul_ops();
  Buffer<float> d_lse = to_device(lse), d_ent = to_device(ent);
  const int64_t block = V > 4096 ? 4096 : 100;
  for (int64_t col0 = 0; col0 < V; col0 += block) {
    const int64_t cols = std::min(block, V - col0);
    const std::vector<float> logits_block = testing::column_block(logits, n, V, col0, cols);
    auto d_logits = to_device(logits_block);
    Buffer<float> d_fp32(cuda_ops(), size_t(n * cols));
    Buffer<uint16_t> d_got16(cuda_ops(), size_t(n * cols)), d_want16(cuda_ops(), size_t(n * cols));
    dev.token_stats_backward(d_fp32.data(), d_logits.data(), d_t.data(), d_lse.data(), d_ent.data(), d_dlogp.data(),
                             d_dent.data(), n, col0, cols, inv_temp);
    dev.to_bf16(d_want16.data(), d_fp32.data(), n * cols);
    dev.token_stats_backward_w16(d_got16.data(), d_logits.data(), d_t.data(), d_lse.data(), d_ent.data(),
                                 d_dlogp.data(), d_dent.data(), n, col0, cols, inv_temp);
    ASSERT_EQ(to_host<uint16_t>(d_got16, size_t(n * cols)), to_host<uint16_t>(d_want16, size_t(n * cols)))
        << "bf16 dlogits, block at " << col0;
    ASSERT_EQ(to_host<float>(d_logits, size_t(n * cols)), logits_block) << "logits written, block at " << col0;
  }
}

INSTANTIATE_TEST_SUITE_P(Vocab, CudaTokenStats, ::testing::Values<int64_t>(263, 151936));

class CudaSampling : public CudaOps, public ::testing::WithParamInterface<int64_t> {};

// Tokens equal the CPU's; log-probs within float rounding (the probabilities are the same
// doubles but for exp's last bit, the sums the same but for their order). Rows long enough are
// split over blocks (at V = 151,936: 4 parts a row at 300 rows, more at 5 and 1), short rows take
// a block each. Filtered sampling runs both ways where it splits: split (sampling_filtered.cuh: 300
// rows go as two groups, 256 and 44), and with the split off, a block per row reading its row.
using FilteredSplit = testing::ScopedCudaSetting<bool, cuda_detail::cuda_filtered_sampling_split,
                                                 cuda_detail::cuda_set_filtered_sampling_split>;
using SplitOnePass = testing::ScopedCudaSetting<bool, cuda_detail::cuda_split_sampling_one_pass,
                                                     cuda_detail::cuda_set_split_sampling_one_pass>;
TEST_P(CudaSampling, TokensAndLogProbsMatchCpu) {
  for (const int64_t R : {int64_t(300), int64_t(5), int64_t(1)}) {
    SCOPED_TRACE("rows " + std::to_string(R));
    const int64_t V = GetParam();
    const std::vector<float> base = randn(size_t(R * V), 70);
    Buffer<float> d_logits(cuda_ops(), base.size());
    Buffer<double> d_u(cuda_ops(), R);
    Buffer<int32_t> d_tokens(cuda_ops(), R);
    Buffer<float> d_logprobs(cuda_ops(), R);
    std::vector<float> logits(base.size());
    for (const SampleCase& c : kSampleCases) {
      for (size_t i = 0; i < base.size(); i++) logits[i] = base[i] * c.scale;
      make_awkward(logits, R, V);
      const int64_t limit = V - c.limit_short;
      const std::vector<double> u = uniforms_off_boundaries(logits, R, V, limit, c, 71);
      std::vector<int32_t> want(R);
      std::vector<float> want_lp(R);
      cpu.sample_rows(want.data(), want_lp.data(), logits.data(), u.data(), R, V, limit, c.temperature, c.top_k,
                      c.top_p);

      d_logits.upload(logits.data(), logits.size());
      d_u.upload(u.data(), size_t(R));
      // Filtered: split and a block a row. Temperature alone and greedy: their parts read once,
      // and twice (the baseline of cuda_ops_bench; parts only where rows split, at 1 and 5 rows).
      const bool unfiltered = !filtered_at(c, limit);
      const std::vector<bool> others = filtered_at(c, limit) || unfiltered ? std::vector<bool>{false, true}
                                                                           : std::vector<bool>{false};
      for (const bool other : others) {
        const FilteredSplit scope(!other);
        const SplitOnePass passes(!(other && unfiltered));
        const std::string label =
            std::string(c.name) + (!other ? "" : unfiltered ? " (two passes)" : " (filtered split off)");
        gpu.sample_rows(d_tokens.data(), d_logprobs.data(), d_logits.data(), d_u.data(), R, V, limit, c.temperature,
                        c.top_k, c.top_p);
        const std::vector<int32_t> got = to_host<int32_t>(d_tokens, size_t(R));
        size_t mismatches = 0;
        for (int64_t r = 0; r < R; r++) {
          if (got[r] != want[r] && mismatches++ < 5)
            ADD_FAILURE() << label << " V=" << V << " row " << r << ": cuda token " << got[r] << ", cpu " << want[r]
                          << " (u = " << u[r] << ")";
        }
        EXPECT_EQ(mismatches, 0u) << label;
        expect_close(to_host<float>(d_logprobs, size_t(R)), want_lp, 1e-6f, 1e-6f, label + " logprobs");
      }
    }
    // logits are only read (compared as bits: -0 and -inf included)
    const std::vector<float> after = to_host<float>(d_logits, logits.size());
    EXPECT_TRUE(same_bits(after, logits));
  }
}

INSTANTIATE_TEST_SUITE_P(Vocab, CudaSampling, ::testing::Values<int64_t>(263, 151936));

// The run log's line on a GPU run's bits (kernels/backend.h, reproducibility_note), which reads
// the settings and needs no GPU: the defaults give the same bits every run; each setting that
// makes them vary is named; the CPU devices have no line.
TEST(CudaDevice, TheReproducibilityNoteNamesWhatMakesTheBitsVary) {
  EXPECT_EQ(reproducibility_note("cpu"), "");
  EXPECT_EQ(reproducibility_note("cpu-guarded"), "");
  const testing::GradientSumsOrdered ordered(true);
  const AttentionBackwardChoice split(CudaAttentionBackward::Split);
  if (cuda_cublaslt_autotune()) GTEST_SKIP() << "AZR_CUBLASLT_AUTOTUNE is on in this environment";
  EXPECT_NE(reproducibility_note("cuda").find("the same every run"), std::string::npos) << reproducibility_note("cuda");
  {
    const testing::GradientSumsOrdered atomic(false);
    const std::string note = reproducibility_note("cuda");
    EXPECT_NE(note.find("vary from run to run (AZR_CUDA_GRADIENT_SUMS=atomic)"), std::string::npos) << note;
    const AttentionBackwardChoice merged(CudaAttentionBackward::Merged);
    EXPECT_NE(reproducibility_note("cuda").find("(AZR_CUDA_GRADIENT_SUMS=atomic, AZR_CUDA_ATTENTION_BACKWARD=merged)"),
              std::string::npos)
        << reproducibility_note("cuda");
  }
  const AttentionBackwardChoice merged(CudaAttentionBackward::Merged);
  EXPECT_NE(reproducibility_note("cuda").find("(AZR_CUDA_ATTENTION_BACKWARD=merged)"), std::string::npos);
}

// Without a device the skip must say why; with one, the description names it.
TEST(CudaDevice, CountAndDescriptionAgree) {
  std::string why;
  const int n = cuda_device_count(&why);
  if (n == 0) {
    EXPECT_FALSE(why.empty());
    GTEST_SKIP() << "no CUDA device here (" << why << ")";
  }
  const std::string desc = cuda_device_description(0);
  EXPECT_NE(desc.find("sm_"), std::string::npos) << desc;
  EXPECT_GT(cuda_peak_bandwidth(0), 1e11) << desc;  // any datacenter GPU: > 100 GB/s
}

}  // namespace
}  // namespace azr::kernels
