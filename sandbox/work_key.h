#pragma once
// A key for the maps that run identical sandbox work once: grading's runs (solver/grade.cpp, a
// program on an input in an input mode) and code candidates (eval/code_bench.cpp, a program for a
// problem). Two texts and a small tag, viewed rather than copied: the texts must outlive the map,
// as the callers' tasks, answers and problems do. Equal texts are one key wherever they are kept.
#include <cstddef>
#include <functional>
#include <string_view>

namespace azr::sandbox {

struct WorkKey {
  std::string_view first, second;
  int tag = 0;
  bool operator==(const WorkKey&) const = default;
};

struct WorkKeyHash {
  size_t operator()(const WorkKey& k) const {
    const size_t a = std::hash<std::string_view>{}(k.first), b = std::hash<std::string_view>{}(k.second);
    return a ^ (b + 0x9e3779b97f4a7c15ULL + (a << 6) + (a >> 2)) ^ static_cast<size_t>(k.tag);
  }
};

}  // namespace azr::sandbox
