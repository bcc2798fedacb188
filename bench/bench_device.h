#pragma once
// A benchmark asked for a device this machine lacks (kernels::device_usable: "cuda" without a
// usable GPU) has nothing to measure: it says why on stdout with the JSON line
// {"bench": ..., "device": ..., "skipped": why} and exits 0, so that a script running every
// benchmark goes on. Names the build does not know are the option parser's errors, not skips;
// a bad AZR_CUDA_* setting on a usable device is one line on stderr and exit 2.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <nlohmann/json.hpp>
#include <string>

#include "kernels/backend.h"

namespace azr::bench {

// True (and reported) when `device` cannot run here: the caller returns 0.
inline bool skipped_for_device(const char* bench, const std::string& device) {
  std::string why;
  if (kernels::device_usable(device, &why)) return false;
  std::printf("%s_bench: %s; nothing measured\n%s\n", bench, why.c_str(),
              nlohmann::json{{"bench", bench}, {"device", device}, {"skipped", why}}.dump().c_str());
  return true;
}

// backend_ops for a usable device; what it can still throw is a bad AZR_CUDA_* setting
// (kernels/backend.cpp), which ends the benchmark with one line and exit 2.
inline const kernels::Ops& ops_for(const char* bench, const std::string& device,
                                   kernels::MatmulPrecision precision = kernels::MatmulPrecision::Fp32) {
  try {
    return kernels::backend_ops(device, 0, precision);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s_bench: %s\n", bench, e.what());
    std::exit(2);
  }
}

}  // namespace azr::bench
