#pragma once
// A benchmark asked for a device this machine lacks (kernels::device_usable: "cuda" without a
// usable GPU) has nothing to measure: it says why on stdout with the JSON line
// {"bench": ..., "device": ..., "skipped": why} and exits 0, so that a script running every
// benchmark goes on. Names the build does not know are the option parser's errors, not skips.
#include <cstdio>
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

}  // namespace azr::bench
