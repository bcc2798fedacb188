#pragma once
// Range checks for numeric flags. CLI11's own (CLI::Range, CLI::PositiveNumber) let NaN through,
// since every comparison with NaN is false: `azr exec --memory nan` ran a job with no memory
// limit. They also print their bounds with std::to_string ("not in range 0.000000 to 1797...",
// 309 digits, for PositiveNumber). These take the flag's text, refuse what is not a finite number,
// and name the bounds as a user would write them.
#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace azr::cli {

namespace number_checks_detail {

inline std::string shown(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.15g", v);
  return text;
}

// The flag's value if its whole text is a finite number.
inline bool finite_number(const std::string& text, double& value) {
  char* end = nullptr;
  value = std::strtod(text.c_str(), &end);
  return !text.empty() && end == text.c_str() + text.size() && std::isfinite(value);
}

// lo < value (or lo <= value when `lo_included`) and value <= hi.
inline CLI::Validator number_check(double lo, bool lo_included, double hi, std::string description) {
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        double v = 0;
        if (!finite_number(text, v)) return "expected a finite number, got '" + text + "'";
        if (lo_included ? v < lo : v <= lo) return text + " is too small: it must be " + description;
        if (v > hi) return text + " is too large: it must be " + description;
        return "";
      },
      description);
}

}  // namespace number_checks_detail

// lo <= value <= hi.
inline CLI::Validator between(double lo, double hi) {
  using number_checks_detail::shown;
  return number_checks_detail::number_check(lo, true, hi, "between " + shown(lo) + " and " + shown(hi));
}

// value > 0.
inline CLI::Validator positive() {
  return number_checks_detail::number_check(0, false, HUGE_VAL, "greater than 0");
}

// value >= 0.
inline CLI::Validator non_negative() {
  return number_checks_detail::number_check(0, true, HUGE_VAL, "0 or more");
}

// 0 < value <= 1 (a probability mass such as top-p).
inline CLI::Validator unit_mass() {
  return number_checks_detail::number_check(0, false, 1, "in (0, 1]");
}

}  // namespace azr::cli
