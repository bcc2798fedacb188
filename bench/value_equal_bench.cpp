// Set and dict equality in the supervisor (sandbox::python_equal), which the determinism check
// runs on every proposal's two outputs and grading on every answer, on shapes a program builds in
// linear time:
//   ints        distinct small ints: the ordinary case, this bench's baseline
//   nans        n NaNs (distinct objects in Python, each hashed by its address)
//   tuples      (k * (2**61 - 1), nan): Python's hash of k * (2**61 - 1) is 0 for every k
//   nan dict    n NaN keys, values 0..n-1
//   nested      frozensets 64 wide nested n / 64 deep, each level 63 strings and the level below
// each compared with its reversal under NanRule::Identical, against the previous design in the
// same run. For the first four: entries filed in an unordered_multimap under Python's hash
// (value_hash), each lookup walking its hash's equal_range. For nested: match_hash computed
// afresh at each level, which hashes every node once per level above it (size x depth). Both are
// quadratic on their shapes, so they run only at sizes up to --old-max.
//
//   value_equal_bench [--sizes 1000,10000,100000] [--old-max 16000] [--reps 5]
//
// Prints a table (ns per element, median of the reps) and one JSON line; never asserts on time.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <unordered_map>
#include <vector>

#include "bench/bench_util.h"
#include "sandbox/value.h"
#include "tests/sandbox/colliding_values.h"

namespace {

namespace sb = azr::sandbox;
using azr::bench::Clock;

// The value of `shape` with n entries, and its reversal.
std::pair<sb::Value, sb::Value> make_pair_of(const std::string& shape, size_t n) {
  const double nan = std::nan("");
  if (shape == "nan dict") {
    sb::Value::Pairs pairs;
    for (size_t k = 0; k < n; ++k) pairs.emplace_back(sb::Value::floating(nan), sb::Value::integer(int64_t(k)));
    return {sb::Value::dict(pairs), sb::Value::dict(sb::Value::Pairs(pairs.rbegin(), pairs.rend()))};
  }
  if (shape == "nested") {
    sb::Value a = sb::Value::frozenset({}), b = sb::Value::frozenset({});
    for (size_t level = 0; level < std::max<size_t>(n / 64, 1); ++level) {
      sb::Value::Items items;
      for (int k = 0; k < 63; ++k) items.push_back(sb::Value::str(std::string(1, char('!' + k))));
      sb::Value::Items reversed(items.rbegin(), items.rend());
      items.push_back(a);
      reversed.insert(reversed.begin(), b);
      a = sb::Value::frozenset(items), b = sb::Value::frozenset(reversed);
    }
    return {a, b};
  }
  sb::Value::Items items;
  for (size_t k = 0; k < n; ++k) {
    if (shape == "ints") items.push_back(sb::Value::integer(int64_t(k) * 7919));
    if (shape == "nans") items.push_back(sb::Value::floating(nan));
    if (shape == "tuples")
      items.push_back(sb::Value::tuple({sb::testing::multiple_of_hash_modulus(uint32_t(k + 1)), sb::Value::floating(nan)}));
  }
  return {sb::Value::set(items), sb::Value::set(sb::Value::Items(items.rbegin(), items.rend()))};
}

// The previous design, for the baseline: Python's hash into an unordered_multimap.
bool old_unordered_equal(const sb::Value& a, const sb::Value& b) {
  const bool dict = a.kind() == sb::ValueKind::Dict;
  const size_t n = dict ? b.pairs().size() : b.items().size();
  std::unordered_multimap<uint64_t, size_t> unused;
  unused.reserve(n);
  for (size_t k = 0; k < n; ++k) unused.emplace(sb::value_hash(dict ? b.pairs()[k].first : b.items()[k]), k);
  for (size_t j = 0; j < n; ++j) {
    auto [it, end] = unused.equal_range(sb::value_hash(dict ? a.pairs()[j].first : a.items()[j]));
    const auto matches = [&](size_t k) {
      if (!dict) return sb::python_equal(a.items()[j], b.items()[k], sb::NanRule::Identical);
      return sb::python_equal(a.pairs()[j].first, b.pairs()[k].first, sb::NanRule::Identical) &&
             sb::python_equal(a.pairs()[j].second, b.pairs()[k].second, sb::NanRule::Identical);
    };
    while (it != end && !matches(it->second)) ++it;
    if (it == end) return false;
    unused.erase(it);
  }
  return true;
}

// The previous design on nested sets: each set's items filed under a match_hash computed from
// scratch (the whole subtree), then each pair compared the same way one level down.
bool old_nested_equal(const sb::Value& a, const sb::Value& b) {
  const bool sets = a.kind() == sb::ValueKind::FrozenSet && b.kind() == sb::ValueKind::FrozenSet;
  if (!sets) return sb::python_equal(a, b, sb::NanRule::Identical);
  if (a.items().size() != b.items().size()) return false;
  std::unordered_multimap<uint64_t, size_t> unpaired;
  for (size_t k = 0; k < b.items().size(); ++k) unpaired.emplace(sb::match_hash(b.items()[k]), k);
  for (const sb::Value& x : a.items()) {
    const uint64_t h = sb::match_hash(x);
    auto it = unpaired.find(h);
    while (it != unpaired.end() && it->first == h && !old_nested_equal(x, b.items()[it->second])) ++it;
    if (it == unpaired.end() || it->first != h) return false;
    unpaired.erase(it);
  }
  return true;
}

// Median ns per element of `reps` comparisons; -1 if one said unequal (a bug: they are equal).
template <class Compare>
double ns_per_element(Compare compare, const sb::Value& a, const sb::Value& b, size_t n, int reps) {
  std::vector<double> ns;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = Clock::now();
    const bool equal = compare(a, b);
    ns.push_back(azr::bench::secs_since(t0) * 1e9 / double(n));
    if (!equal) return -1;
  }
  return azr::bench::median(ns);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"python_equal on large sets and dicts, against the previous multimap design"};
  std::vector<size_t> sizes{1000, 10000, 100000};
  size_t old_max = 16000;
  int reps = 5;
  app.add_option("--sizes", sizes, "entries per set or dict")->delimiter(',')->check(CLI::PositiveNumber);
  app.add_option("--old-max", old_max, "largest size the quadratic previous design runs at");
  app.add_option("--reps", reps, "comparisons per figure (the median is printed)")->check(CLI::Range(1, 1000));
  CLI11_PARSE(app, argc, argv);

  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  std::printf("%-9s %9s %12s %12s %9s\n", "shape", "n", "ns/elem", "old ns/elem", "old/new");
  for (const std::string shape : {"ints", "nans", "tuples", "nan dict", "nested"}) {
    for (const size_t n : sizes) {
      const auto [a, b] = make_pair_of(shape, n);
      const double now = ns_per_element(
          [](const sb::Value& x, const sb::Value& y) { return sb::python_equal(x, y, sb::NanRule::Identical); }, a, b,
          n, reps);
      const double old =
          n > old_max ? 0 : ns_per_element(shape == "nested" ? old_nested_equal : old_unordered_equal, a, b, n, reps);
      std::printf("%-9s %9zu %12.1f %12s %9s\n", shape.c_str(), n, now,
                  old > 0 ? std::to_string(old).substr(0, 10).c_str() : "-",
                  old > 0 ? std::to_string(old / now).substr(0, 7).c_str() : "-");
      // null where the old design was not run (n > --old-max) or said unequal (-1): no figure.
      rows.push_back({{"shape", shape},
                      {"n", n},
                      {"ns_per_element", now},
                      {"old_ns_per_element", old > 0 ? nlohmann::ordered_json(old) : nlohmann::ordered_json(nullptr)}});
    }
  }
  std::printf("%s\n", nlohmann::ordered_json{{"bench", "value_equal"}, {"rows", rows}}.dump().c_str());
  return 0;
}
