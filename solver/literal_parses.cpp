#include "solver/literal_parses.h"

#include <algorithm>
#include <string_view>

#include "sandbox/checks.h"

namespace azr::solver {
namespace sb = azr::sandbox;

namespace {

sb::CallResult no_result() {
  sb::CallResult c;
  c.status = sb::Status::Internal;
  c.message = "parse job gave no result";
  return c;
}

}  // namespace

bool independent_of_its_job(const sb::CallResult& r) {
  if (r.status == sb::Status::Ok) return true;
  if (r.status != sb::Status::Error) return false;
  return std::string_view(r.message).substr(0, 11) != "MemoryError";
}

size_t LiteralParses::add(const std::string& text) {
  if (shared_) {
    if (auto it = slot_of_.find(text); it != slot_of_.end()) return it->second;
    const size_t slot = texts_.size();
    slot_of_.emplace(texts_.emplace_back(text), slot);
    return slot;
  }
  texts_.push_back(text);
  return texts_.size() - 1;
}

void LiteralParses::end_group() {
  if (!shared_ && group_starts_.back() != texts_.size()) group_starts_.push_back(texts_.size());
}

std::vector<sb::Job> LiteralParses::jobs() {
  bounds_.clear();
  if (!shared_) {
    end_group();
    for (size_t g = 0; g + 1 < group_starts_.size(); ++g) bounds_.push_back({group_starts_[g], group_starts_[g + 1]});
  } else {
    // All of a job's values must fit its result stream (limits.max_result_bytes for all its
    // records, past which every call of the job is lost): an encoded value is at most about 6
    // bytes a byte of its literal's text (`0j,` is a complex of 17), so a job's texts stay under
    // an eighth of it. A text longer than that is a job of its own.
    const size_t max_bytes = std::max<size_t>(1, static_cast<size_t>(limits_.max_result_bytes / 8));
    size_t begin = 0, bytes = 0;
    for (size_t i = 0; i < texts_.size(); ++i) {
      if (i > begin && (i - begin == kLiteralsPerJob || bytes + texts_[i].size() > max_bytes)) {
        bounds_.push_back({begin, i});
        begin = i;
        bytes = 0;
      }
      bytes += texts_[i].size();
    }
    if (begin < texts_.size()) bounds_.push_back({begin, texts_.size()});
  }
  std::vector<sb::Job> out;
  out.reserve(bounds_.size());
  for (auto [b, e] : bounds_)
    out.push_back(sb::parse_literals_job(std::vector<std::string>(texts_.begin() + static_cast<std::ptrdiff_t>(b),
                                                                  texts_.begin() + static_cast<std::ptrdiff_t>(e)),
                                         limits_));
  return out;
}

void LiteralParses::take(std::vector<sb::JobResult> results, const RunJobs& run_alone) {
  results_.assign(texts_.size(), no_result());
  std::vector<size_t> again;
  for (size_t j = 0; j < bounds_.size() && j < results.size(); ++j) {
    auto [b, e] = bounds_[j];
    std::vector<sb::CallResult>& calls = results[j].calls;
    const bool whole = calls.size() == e - b;
    for (size_t i = b; i < e; ++i) {
      if (whole) results_[i] = std::move(calls[i - b]);
      if (shared_ && e - b > 1 && !(whole && independent_of_its_job(results_[i]))) again.push_back(i);
    }
  }
  if (again.empty()) return;
  std::vector<sb::Job> alone;
  alone.reserve(again.size());
  for (size_t i : again) alone.push_back(sb::parse_literals_job({texts_[i]}, limits_));
  std::vector<sb::JobResult> r = run_alone(std::move(alone));
  for (size_t k = 0; k < again.size(); ++k)
    results_[again[k]] = k < r.size() && r[k].calls.size() == 1 ? std::move(r[k].calls[0]) : no_result();
}

}  // namespace azr::solver
