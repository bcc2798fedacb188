#pragma once
// Range checks for numeric flags. CLI11's own (CLI::Range, CLI::PositiveNumber) let NaN through,
// since every comparison with NaN is false: `azr exec --memory nan` ran a job with no memory
// limit. They also print their bounds with std::to_string ("not in range 0.000000 to 1797...",
// 309 digits, for PositiveNumber). These take the flag's text, refuse what is not a finite number,
// and name the bounds as a user would write them.
//
// A whole number's text is also held to 64 bits: CLI11 converts one past them to the type's
// limit, so `--limit 99999999999999999999` listed INT64_MAX rows and `--seed` of 10^23 ran
// with seed 2^64-1, both silently. Seeds, the one unsigned kind, take seed() instead.
#include <CLI/CLI.hpp>

#include <cfloat>
#include <charconv>
#include <cmath>
#include <cstdint>
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

// "" if `text` is not a whole number (digits, with an optional sign) or is one that fits T;
// else why not.
template <class T>
inline std::string whole_number_fits(const std::string& text) {
  const char* b = text.c_str();
  const char* e = b + text.size();
  const char* digits = b + (b < e && (*b == '-' || *b == '+') ? 1 : 0);
  if (digits == e) return "";
  for (const char* p = digits; p < e; ++p)
    if (*p < '0' || *p > '9') return "";
  T v = 0;
  const auto [end, ec] = std::from_chars(*b == '+' ? b + 1 : b, e, v);
  if (ec == std::errc() && end == e) return "";
  return text + (*b == '-' ? " is too small" : " is too large") + ": it must fit in 64 bits";
}

// lo < value (or lo <= value when `lo_included`) and value <= hi.
inline CLI::Validator number_check(double lo, bool lo_included, double hi, std::string description) {
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        double v = 0;
        if (!finite_number(text, v)) return "expected a finite number, got '" + text + "'";
        if (lo_included ? v < lo : v <= lo) return text + " is too small: it must be " + description;
        if (v > hi) return text + " is too large: it must be " + description;
        // Within the range but past 64 bits: only an unbounded integer flag gets here with it.
        return whole_number_fits<int64_t>(text);
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

// 0 < value <= hi.
inline CLI::Validator positive_at_most(double hi) {
  return number_checks_detail::number_check(0, false, hi, "greater than 0, at most " + number_checks_detail::shown(hi));
}

// value >= 0.
inline CLI::Validator non_negative() {
  return number_checks_detail::number_check(0, true, HUGE_VAL, "0 or more");
}

// 0 < value <= 1 (a probability mass such as top-p).
inline CLI::Validator unit_mass() {
  return number_checks_detail::number_check(0, false, 1, "in (0, 1]");
}

// A seed: a whole number from 0 to 2^64 - 1.
inline CLI::Validator seed() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        uint64_t v = 0;
        const auto [end, ec] = std::from_chars(text.c_str(), text.c_str() + text.size(), v);
        if (!text.empty() && ec == std::errc() && end == text.c_str() + text.size()) return "";
        return "expected a whole number from 0 to 18446744073709551615, got '" + text + "'";
      },
      "0 to 2^64-1");
}

// For a float option, with a range check beside it (`positive() & in_float_range()`): a value the
// float cannot hold is refused, where it became inf (`--temperature 1e39`, then "must be >= 0")
// or 0 (`--temperature 1e-50`, then greedy decoding).
inline CLI::Validator in_float_range() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        double v = 0;
        if (!number_checks_detail::finite_number(text, v)) return "expected a finite number, got '" + text + "'";
        const float f = static_cast<float>(v);
        if (std::isinf(f))
          return text + " is too large for a float (at most " + number_checks_detail::shown(FLT_MAX) + ")";
        if (f == 0.f && v != 0) return text + " is too small for a float: it would be 0";
        return "";
      },
      "");
}

// --temperature and --top-p, as every command that samples takes them: temperature 0 or more,
// top-p in (0, 1], both within a float's range. Returns the temperature's option (a command that
// shows its default adds capture_default_str). `Temperature` is float or std::optional<float>.
template <class Temperature>
CLI::Option* add_sampling_options(CLI::App* c, Temperature& temperature, const std::string& temperature_help,
                                  float& top_p) {
  CLI::Option* t = c->add_option("--temperature", temperature, temperature_help);
  t->check(non_negative())->check(in_float_range());
  c->add_option("--top-p", top_p, "nucleus sampling mass, in (0, 1]")
      ->capture_default_str()
      ->check(unit_mass())
      ->check(in_float_range());
  return t;
}

}  // namespace azr::cli
