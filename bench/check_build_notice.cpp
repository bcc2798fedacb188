// Linked into every benchmark of a build configured with AZR_BENCH_CHECK_BUILD (CI's, through
// scripts/build.sh under CI=true): their own files were compiled at -Og there, so the figures they
// print are not the product's. It says so on stderr before main runs, so that no such figure is
// recorded by mistake (bench/RESULTS.md takes figures from ordinary builds).
#include <cstdio>

namespace {
[[maybe_unused]] const bool kSaidSo = [] {
  std::fputs("note: this benchmark was built for CI's checks (AZR_BENCH_CHECK_BUILD: its own code at -Og); "
             "its figures are not the product's: time it from an ordinary build (scripts/build.sh)\n",
             stderr);
  return true;
}();
}  // namespace
