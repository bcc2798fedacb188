// Token sampling of the CUDA backend (kernels/ops.h: sample_rows): a block per row, so a decode
// step downloads R tokens and R log-probs instead of R x V logits. The CPU backend
// (kernels/cpu/sampling.cpp) is the reference; tests/kernels/cuda_ops_test.cpp checks this one
// against it token for token.
//
// Probabilities are the CPU's to the last bit but for exp's rounding: p_j = exp(z_j / t - max) in
// double, the product and the difference rounded separately (the CPU build does not fuse them
// either). Sums are in double too; where they run in another order than the CPU's (noted below),
// they differ from its sums by a few units in the 16th digit, so a token can only differ when u
// (or top_p) lies that close to a boundary of the cumulative distribution, and log-probs agree
// to float rounding.
//
// One kernel per mode, the mode being the same for every row of a call:
// - greedy: block argmax (ties: lowest id, as std::max_element), then the winner's log-softmax at
//   temperature 1 (sampling_greedy.cuh): a block per row, or, with too few rows to fill the GPU,
//   each row split over up to 128 blocks.
// - unfiltered: inverse CDF in id order, like the CPU (sampling_unfiltered.cuh): a block per row,
//   or, with too few rows to fill the GPU, each row split over up to 128 blocks.
// - filtered (top-k, top-p): the CPU's walk by descending probability, in sorted chunks of that
//   order (sampling_filtered.cuh): a block per row reading the row, or, with rows split over
//   blocks as above, a block per row walking the short list of tokens the filters can keep, which
//   the split gathered.
#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/internal.h"
#include "kernels/cuda/sampling_filtered.cuh"
#include "kernels/cuda/sampling_greedy.cuh"
#include "kernels/cuda/sampling_unfiltered.cuh"

namespace azr::kernels::cuda_detail {
namespace {

using sampling::kThreads;
using sampling::SampleArgs;

// The split samplers' scratch (greedy, unfiltered, and filtered's split): with few rows, each row
// split over blocks so that the whole GPU reads it.
DeviceScratch<float> g_part_value;
DeviceScratch<int64_t> g_part_at;
DeviceScratch<double> g_part_sum;
ZeroedCounts g_tickets;  // the split kernels' per-row tickets (last_block_done)
ZeroedCounts g_bin_count, g_list_count;  // the filtered split's (part_bins_kernel, gather_kernel)
ZeroedScratch<double> g_bin_mass;
DeviceScratch<double> g_row_total;
DeviceScratch<int32_t> g_last_bin;
DeviceScratch<uint64_t> g_list;

// sampling::parts_for's target; cuda_set_sampling_blocks_per_sm.
int g_sampling_blocks_per_sm = 2;
bool g_filtered_split = true;  // cuda_set_filtered_sampling_split
bool g_split_one_pass = true;  // cuda_set_split_sampling_one_pass

using sampling::kListCapacity;  // the filtered split's list and groups of rows (sampling_limits.h)
using sampling::kSplitGroupRows;

void unfiltered(const SampleArgs& a, int64_t R) {
  const int64_t parts = sampling::parts_for(R, a.n, multiprocessors(), g_sampling_blocks_per_sm);
  if (parts == 1) {
    sampling::unfiltered_kernel<<<unsigned(R), kThreads, 0, op_stream()>>>(a);
    return;
  }
  unsigned* tickets = g_tickets.get(size_t(R));
  const dim3 grid{unsigned(parts), unsigned(R), 1u};
  if (g_split_one_pass) {
    sampling::part_stats_kernel<<<grid, kThreads, 0, op_stream()>>>(a, g_part_sum.get(size_t(2 * R * parts)), tickets);
    return;
  }
  float* part_max = g_part_value.get(size_t(R * parts));
  double* part_mass = g_part_sum.get(size_t(R * parts));
  sampling::part_max_kernel<<<grid, kThreads, 0, op_stream()>>>(a, part_max);
  AZR_CUDA_LAUNCHED();
  sampling::part_mass_kernel<<<grid, kThreads, 0, op_stream()>>>(a, part_max, part_mass, tickets);
}

void greedy(const SampleArgs& a, int64_t R) {
  const int64_t parts = sampling::parts_for(R, a.n, multiprocessors(), g_sampling_blocks_per_sm);
  if (parts == 1) {
    sampling::greedy_kernel<<<unsigned(R), kThreads, 0, op_stream()>>>(a);
    return;
  }
  float* part_v = g_part_value.get(size_t(R * parts));
  int64_t* part_at = g_part_at.get(size_t(R * parts));
  unsigned* tickets = g_tickets.get(size_t(R));
  const dim3 grid{unsigned(parts), unsigned(R), 1u};
  if (g_split_one_pass) {
    sampling::part_greedy_kernel<<<grid, kThreads, 0, op_stream()>>>(a, part_v, part_at,
                                                                      g_part_sum.get(size_t(2 * R * parts)), tickets);
    return;
  }
  double* part_sum = g_part_sum.get(size_t(R * parts));
  sampling::part_argmax_kernel<<<grid, kThreads, 0, op_stream()>>>(a, part_v, part_at);
  AZR_CUDA_LAUNCHED();
  sampling::part_expsum_kernel<<<grid, kThreads, 0, op_stream()>>>(a, part_v, part_at, part_sum, tickets);
}

// Filtered sampling: a block per row, or the split (sampling_filtered.cuh) over groups of rows.
void filtered(const SampleArgs& a, int64_t R) {
  const int64_t group = R < kSplitGroupRows ? R : kSplitGroupRows;
  const int64_t parts = sampling::parts_for(group, a.n, multiprocessors(), g_sampling_blocks_per_sm);
  if (!g_filtered_split || parts == 1) {
    sampling::filtered_kernel<<<unsigned(R), kThreads, 0, op_stream()>>>(a);
    return;
  }
  float* part_max = g_part_value.get(size_t(group * parts));
  double* part_mass = g_part_sum.get(size_t(group * parts));
  unsigned* tickets = g_tickets.get(size_t(group));
  unsigned* bin_count = g_bin_count.get(size_t(group * sampling::kMassBins));
  double* bin_mass = g_bin_mass.get(size_t(group * sampling::kMassBins));
  double* totals = g_row_total.get(size_t(group));
  int32_t* last_bin = g_last_bin.get(size_t(group));
  uint64_t* list = g_list.get(size_t(group * kListCapacity));
  unsigned* listed = g_list_count.get(size_t(group));
  for (int64_t r0 = 0; r0 < R; r0 += group) {
    const int64_t rows = R - r0 < group ? R - r0 : group;
    SampleArgs g = a;
    g.tokens += r0, g.logprobs += r0, g.logits += r0 * a.V, g.u += r0;
    const dim3 grid{unsigned(parts), unsigned(rows), 1u};
    sampling::part_max_kernel<<<grid, kThreads, 0, op_stream()>>>(g, part_max);
    AZR_CUDA_LAUNCHED();
    sampling::part_bins_kernel<<<grid, kThreads, 0, op_stream()>>>(g, part_max, part_mass, bin_count, bin_mass,
                                                                   tickets, totals, last_bin);
    AZR_CUDA_LAUNCHED();
    sampling::gather_kernel<<<grid, kThreads, 0, op_stream()>>>(g, part_max, last_bin, list, listed, kListCapacity);
    AZR_CUDA_LAUNCHED();
    sampling::filtered_list_kernel<<<unsigned(rows), kThreads, 0, op_stream()>>>(g, part_max, parts, totals, list,
                                                                                 listed, kListCapacity);
    AZR_CUDA_LAUNCHED();
  }
}

}  // namespace

void sample_rows(int32_t* tokens, float* logprobs, const float* logits, const double* u, int64_t R, int64_t V,
                 int64_t V_limit, float temperature, int32_t top_k, float top_p) {
  if (R == 0) return;
  const SampleArgs a{tokens, logprobs, logits, u, V, V_limit, temperature == 0.f ? 0.0 : 1.0 / temperature,
                     top_k, top_p};
  if (temperature == 0.f)
    greedy(a, R);
  else if ((top_k > 0 && top_k < V_limit) || top_p < 1.f)
    filtered(a, R);
  else
    unfiltered(a, R);
  AZR_CUDA_LAUNCHED();
}

void cuda_set_sampling_blocks_per_sm(int n) { g_sampling_blocks_per_sm = n < 1 ? 1 : n; }
void cuda_set_filtered_sampling_split(bool on) { g_filtered_split = on; }
void cuda_set_split_sampling_one_pass(bool on) { g_split_one_pass = on; }
bool cuda_split_sampling_one_pass() { return g_split_one_pass; }
bool cuda_filtered_sampling_split() { return g_filtered_split; }
size_t cuda_sampler_scratch_bytes() {
  return g_part_value.bytes() + g_part_at.bytes() + g_part_sum.bytes() + g_tickets.bytes() + g_bin_count.bytes() +
         g_list_count.bytes() + g_bin_mass.bytes() + g_row_total.bytes() + g_last_bin.bytes() + g_list.bytes();
}

}  // namespace azr::kernels::cuda_detail
