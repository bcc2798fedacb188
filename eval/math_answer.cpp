#include "eval/math_answer.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numbers>
#include <optional>
#include <random>
#include <regex>
#include <vector>

#include "buffer/seeded_random.h"

namespace azr::eval {
namespace {

// ---------------------------------------------------------------------------------------------
// Small string helpers.

bool starts_with_at(std::string_view s, size_t i, std::string_view p) { return s.substr(i, p.size()) == p; }

bool is_letter(char c) { return std::isalpha(static_cast<unsigned char>(c)) != 0; }

// Greek letters that name a variable (`\omega t`, `2\pi/\omega`), as sympy's LaTeX parser reads
// them for Qwen2.5-Math's grader; `\pi` is the constant, `\Pi` a product.
constexpr std::array<std::string_view, 35> kGreek = {
    "alpha", "beta",  "gamma", "delta", "epsilon", "varepsilon", "zeta",  "eta",     "theta",
    "vartheta", "iota", "kappa", "lambda", "mu",   "nu",         "xi",    "rho",     "sigma",
    "tau",   "upsilon", "phi", "varphi", "chi",    "psi",        "omega", "Gamma",   "Delta",
    "Theta", "Lambda", "Xi",   "Sigma",  "Upsilon", "Phi",       "Psi",   "Omega"};

// The Greek letter the command at s[k] names (its index in kGreek, the command's length in *len),
// or -1. The name is every letter after the backslash: `\omegat` is no Greek letter.
int greek_at(std::string_view s, size_t k, size_t* len) {
  if (k >= s.size() || s[k] != '\\') return -1;
  size_t e = k + 1;
  while (e < s.size() && is_letter(s[e])) ++e;
  const std::string_view name = s.substr(k + 1, e - k - 1);
  for (size_t g = 0; g < kGreek.size(); ++g)
    if (kGreek[g] == name) {
      *len = e - k;
      return static_cast<int>(g);
    }
  return -1;
}

// Functions the evaluator applies, as sympy's LaTeX parser reads them: `\ln` is the natural
// logarithm, `\log` the decimal one unless a base follows (`\log_{2} n`); `\sin^{-1}` is arcsin
// and `\sinh^{-1}` arsinh. `e` stays a variable, as sympy reads it, so `e^{t}` is not `\exp(t)`.
enum class Fn {
  Sin, Cos, Tan, Sec, Csc, Cot, Sinh, Cosh, Tanh,  // first: `^{-1}` makes these their inverses
  Arcsin, Arccos, Arctan, Coth, Sech, Csch, Ln, Log, Exp
};
struct FnName {
  std::string_view name;
  Fn fn;
};
constexpr std::array<FnName, 18> kFunctions = {{
    {"sin", Fn::Sin},       {"cos", Fn::Cos},       {"tan", Fn::Tan},       {"sec", Fn::Sec},   {"csc", Fn::Csc},
    {"cot", Fn::Cot},       {"arcsin", Fn::Arcsin}, {"arccos", Fn::Arccos}, {"arctan", Fn::Arctan},
    {"sinh", Fn::Sinh},     {"cosh", Fn::Cosh},     {"tanh", Fn::Tanh},     {"coth", Fn::Coth}, {"sech", Fn::Sech},
    {"csch", Fn::Csch},     {"ln", Fn::Ln},         {"log", Fn::Log},       {"exp", Fn::Exp},
}};

// The function the command at s[k] names, its length (backslash and name) in *len. Spacing is gone
// by the time anything is evaluated, so `\sin x` arrives as `\sinx`: a function's name and one more
// letter is the function applied to that letter (`\sinh` is sinh itself, `\sinhx` sinh of x).
std::optional<Fn> function_at(std::string_view s, size_t k, size_t* len) {
  if (k >= s.size() || s[k] != '\\') return std::nullopt;
  size_t e = k + 1;
  while (e < s.size() && is_letter(s[e])) ++e;
  const std::string_view letters = s.substr(k + 1, e - k - 1);
  for (size_t extra : {0, 1})
    for (const FnName& f : kFunctions)
      if (letters.size() == f.name.size() + extra && letters.substr(0, f.name.size()) == f.name) {
        *len = 1 + f.name.size();
        return f.fn;
      }
  return std::nullopt;
}

std::string trim(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return std::string(s.substr(b, e - b));
}

void replace_all(std::string& s, std::string_view from, std::string_view to) {
  if (from.empty()) return;
  size_t pos = 0;
  while ((pos = s.find(from, pos)) != std::string::npos) {
    s.replace(pos, from.size(), to);
    pos += to.size();
  }
}

// Index just past the '}' matching the '{' at `open`, or npos when unbalanced.
size_t match_brace(std::string_view s, size_t open) {
  int depth = 0;
  for (size_t i = open; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 1 < s.size() && (s[i + 1] == '{' || s[i + 1] == '}')) {
      ++i;  // escaped brace: \{ \} are set delimiters, not groups
      continue;
    }
    if (s[i] == '{') ++depth;
    if (s[i] == '}' && --depth == 0) return i + 1;
  }
  return std::string::npos;
}

// Content of a `\cmd{...}` starting at `pos` (pos at the backslash). Sets `end` past the '}'.
std::optional<std::string> braced_arg(std::string_view s, size_t after_cmd, size_t& end) {
  size_t i = after_cmd;
  while (i < s.size() && s[i] == ' ') ++i;
  if (i >= s.size() || s[i] != '{') return std::nullopt;
  size_t close = match_brace(s, i);
  if (close == std::string::npos) return std::nullopt;
  end = close;
  return std::string(s.substr(i + 1, close - i - 2));
}

// ---------------------------------------------------------------------------------------------
// Extraction.

// Content of the last \boxed{...} / \fbox{...} with balanced braces (also `\boxed 5`).
// Braces are matched once for the whole text (a stack pass), so a response full of unclosed
// `\boxed{` stays linear instead of rescanning to the end for each one.
std::optional<std::string> last_boxed(std::string_view s) {
  std::vector<size_t> close_of(s.size(), std::string_view::npos);
  std::vector<size_t> stack;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 1 < s.size() && (s[i + 1] == '{' || s[i + 1] == '}')) {
      ++i;  // escaped brace: \{ \} are set delimiters, not groups
    } else if (s[i] == '{') {
      stack.push_back(i);
    } else if (s[i] == '}' && !stack.empty()) {
      close_of[stack.back()] = i;
      stack.pop_back();
    }
  }
  std::vector<size_t> starts;  // (position, command length) of every \boxed / \fbox
  std::vector<size_t> lens;
  for (std::string_view cmd : {std::string_view("\\boxed"), std::string_view("\\fbox")})
    for (size_t pos = s.find(cmd); pos != std::string_view::npos; pos = s.find(cmd, pos + 1)) {
      starts.push_back(pos);
      lens.push_back(cmd.size());
    }
  std::vector<size_t> order(starts.size());
  for (size_t k = 0; k < order.size(); ++k) order[k] = k;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return starts[a] > starts[b]; });
  for (size_t k : order) {
    size_t after = starts[k] + lens[k];
    size_t i = after;
    while (i < s.size() && s[i] == ' ') ++i;
    if (i < s.size() && s[i] == '{') {
      if (close_of[i] != std::string_view::npos) return trim(s.substr(i + 1, close_of[i] - i - 1));
      continue;  // unclosed: an earlier \boxed may still be complete
    }
    if (after < s.size() && s[after] == ' ') {
      // `\boxed 5`: up to the next '$' or whitespace.
      size_t b = i, e = b;
      while (e < s.size() && s[e] != '$' && !std::isspace(static_cast<unsigned char>(s[e]))) ++e;
      if (e > b) return std::string(s.substr(b, e - b));
    }
  }
  return std::nullopt;
}

// The last number token in the text: -12, 3.5, 1,000 (commas removed), 2/3.
std::optional<std::string> last_number(std::string_view s) {
  static const std::regex number(R"(-?\d+(?:,\d{3})*(?:\.\d+)?(?:/\d+)?|-?\.\d+)");
  std::optional<std::string> last;
  std::string str(s);
  for (auto it = std::sregex_iterator(str.begin(), str.end(), number); it != std::sregex_iterator(); ++it) {
    std::string tok = it->str();
    tok.erase(std::remove(tok.begin(), tok.end(), ','), tok.end());
    last = tok;
  }
  return last;
}

// ---------------------------------------------------------------------------------------------
// Normalisation steps. Each takes and returns the whole answer string.

// `$x$`, `\[x\]`, `\(x\)`, `\boxed{x}`: presentation wrappers around the answer.
std::string strip_wrappers(std::string s) {
  s = trim(s);
  if (auto b = last_boxed(s); b && s.rfind("\\boxed", 0) == 0) s = *b;
  replace_all(s, "\\[", "");
  replace_all(s, "\\]", "");
  replace_all(s, "\\(", "");
  replace_all(s, "\\)", "");
  replace_all(s, "\\$", "");  // dollars
  replace_all(s, "$", "");    // math mode
  s = trim(s);
  while (!s.empty() && (s.back() == '.' || s.back() == ';')) s.pop_back();  // sentence end
  return trim(s);
}

// Spacing and sizing commands change the look, never the value.
std::string strip_spacing(std::string s) {
  replace_all(s, "\\\\", "\x01");  // keep `\\` (matrix rows) apart from `\ ` (a space)
  for (std::string_view cmd : {"\\left", "\\right", "\\bigl", "\\bigr", "\\Bigl", "\\Bigr", "\\big", "\\Big"}) {
    // only when followed by a delimiter, so \rightarrow survives
    size_t pos = 0;
    while ((pos = s.find(cmd, pos)) != std::string::npos) {
      size_t after = pos + cmd.size();
      if (after < s.size() && !std::isalpha(static_cast<unsigned char>(s[after])))
        s.erase(pos, cmd.size());
      else
        pos = after;
    }
  }
  // Negative space: `10,\\!080` is the number 10080. A comma and `\\!` separate thousands, also
  // with a space after them (MATH-500's `11,\\! 111,\\! 111,\\! 100`), which `1, 000` alone is not.
  static const std::regex comma_negative_space(R"(,\s*\\!\s*)");
  s = std::regex_replace(s, comma_negative_space, ",");
  replace_all(s, "\\!", "");
  for (std::string_view sp : {"\\displaystyle", "\\,", "\\;", "\\:", "\\quad", "\\qquad", "\\ "})
    replace_all(s, sp, " ");
  replace_all(s, "~", " ");
  // Products written with a command: `2 \cdot k` and `2 \times k` would run into the letter once
  // the spaces go (`\cdotk`), so they become `*` (`\cdots` stays); `\pi r` becomes `\pi*r`.
  for (std::string_view cmd : {"\\cdot", "\\times", "\\pi"}) {
    for (size_t pos = s.find(cmd); pos != std::string::npos; pos = s.find(cmd, pos + 1)) {
      size_t after = pos + cmd.size();
      if (after < s.size() && std::isalpha(static_cast<unsigned char>(s[after]))) continue;
      if (cmd != "\\pi") {
        s.replace(pos, cmd.size(), "*");
        continue;
      }
      size_t next = after;
      while (next < s.size() && s[next] == ' ') ++next;
      if (next > after && next < s.size() && std::isalpha(static_cast<unsigned char>(s[next]))) s.insert(after, "*");
    }
  }
  // The same for a Greek letter: `\omega t` is `\omega*t`, not the command `\omegat`.
  for (size_t pos = s.find('\\'); pos != std::string::npos; pos = s.find('\\', pos + 1)) {
    size_t len = 0;
    if (greek_at(s, pos, &len) < 0) continue;
    size_t next = pos + len;
    while (next < s.size() && s[next] == ' ') ++next;
    if (next > pos + len && next < s.size() && is_letter(s[next])) s.insert(pos + len, "*");
  }
  // And a function's name: `\sin x` would be `\sinx`, and `\sin h` the command `\sinh`; the letter
  // goes in braces, which the argument reads as it reads the letter (`\sin{x}^2` is sin(x^2)).
  for (size_t pos = s.find('\\'); pos != std::string::npos; pos = s.find('\\', pos + 1)) {
    size_t len = 0;
    if (!function_at(s, pos, &len) || (pos + len < s.size() && is_letter(s[pos + len]))) continue;
    size_t next = pos + len;
    while (next < s.size() && s[next] == ' ') ++next;
    if (next > pos + len && next < s.size() && is_letter(s[next])) {
      s.insert(next + 1, "}");
      s.insert(next, "{");
    }
  }
  replace_all(s, "\\dfrac", "\\frac");
  replace_all(s, "\\tfrac", "\\frac");
  replace_all(s, "\\le ", "\\leq ");
  replace_all(s, "\\ge ", "\\geq ");
  replace_all(s, "\x01", "\\\\");
  return s;
}

// Degrees and percentages: `30^\circ` is 30, `50\%` is 50 (see header for 0.5 vs 50%).
std::string strip_degrees_percent(std::string s) {
  for (std::string_view d : {"^{\\circ}", "^\\circ", "\\circ", "°", "\\degree"}) replace_all(s, d, "");
  replace_all(s, "\\%", "");
  replace_all(s, "%", "");
  return s;
}

bool is_unit_text(std::string_view t) {
  std::string u = trim(t);
  if (u.empty()) return false;
  for (char c : u)
    if (!(std::isalpha(static_cast<unsigned char>(c)) || c == ' ' || c == '^' || c == '/' || std::isdigit(static_cast<unsigned char>(c)) ||
          c == '{' || c == '}' || c == '-'))
      return false;
  return std::isalpha(static_cast<unsigned char>(u[0]));
}

// `\text{...}` and friends: after a value the content is a unit and goes (`5 \text{ cm}`),
// otherwise it is the answer itself and is unwrapped (`\text{(B)}`, `\text{even}`).
std::string unwrap_text(std::string s) {
  for (std::string_view cmd : {"\\text", "\\textbf", "\\textrm", "\\mbox", "\\mathrm", "\\mathbf", "\\textit", "\\operatorname"}) {
    size_t pos = 0;
    while ((pos = s.find(cmd, pos)) != std::string::npos) {
      size_t after = pos + cmd.size();
      if (after < s.size() && std::isalpha(static_cast<unsigned char>(s[after]))) {  // \textbf vs \text
        pos = after;
        continue;
      }
      size_t end = 0;
      auto content = braced_arg(s, after, end);
      if (!content) {
        pos = after;
        continue;
      }
      std::string before = trim(std::string_view(s).substr(0, pos));
      bool after_value = !before.empty() && (std::isdigit(static_cast<unsigned char>(before.back())) || before.back() == '}' ||
                                             before.back() == ')' || before.back() == 'i');
      // A unit may carry its own power after the group: `5 \text{ cm}^2`.
      static const std::regex unit_power(R"(^\s*\^\s*(\{\s*\d\s*\}|\d)\s*$)");
      std::string rest(std::string_view(s).substr(end));
      bool at_end = trim(rest).empty() || std::regex_match(rest, unit_power);
      if (after_value && at_end && is_unit_text(*content)) {
        s.erase(pos);
      } else {
        s.replace(pos, end - pos, *content);
      }
    }
  }
  return s;
}

// A plain trailing unit word after a number: `5 cm`, `10 inches`, `12 dollars`. A single letter
// may be a variable (`2 n`) as well as a unit (`5 m`): it goes only where the caller says so.
std::string strip_trailing_words(std::string s, bool single_letters) {
  // Words are whitespace-separated so the match is unambiguous (no catastrophic backtracking).
  static const std::regex unit(R"(^\s*([-+]?[0-9][0-9.,/]*)\s+[A-Za-z]+(?:\^\{?\d\}?)?\.?(?:\s+[A-Za-z]+(?:\^\{?\d\}?)?\.?)*\s*$)");
  static const std::regex letter(R"(^\s*[-+]?[0-9][0-9.,/]*\s+[A-Za-z](?:\^\{?\d\}?)?\.?\s*$)");
  std::smatch m;
  if (!std::regex_match(s, m, unit)) return s;
  if (!single_letters && std::regex_match(s, letter)) return s;
  return m[1].str();
}

// `x = 5`: a single variable on the left names the answer; compare the right side.
std::string strip_variable_assignment(std::string s) {
  static const std::regex assign(R"(^\s*(?:[A-Za-z]|\\(?:alpha|beta|gamma|delta|theta|lambda|mu|phi|varphi|omega|rho|sigma|tau))(?:_\{?[A-Za-z0-9]+\}?)?\s*=([^=<>]+)$)");
  // `x \in (1, 2]` likewise names the interval.
  static const std::regex member(R"(^\s*[A-Za-z]\s*\\in\s*(.+)$)");
  std::smatch m;
  if (std::regex_match(s, m, assign)) return trim(m[1].str());
  if (std::regex_match(s, m, member)) return trim(m[1].str());
  return s;
}

// `1,000` / `10,080` / `1,234,567.5`: one number with thousands separators (no space after the
// comma, groups of exactly three). `1, 000` or `(1,0)` are not numbers and keep their commas.
std::string strip_thousands_separators(std::string s) {
  static const std::regex thousands(R"(^-?\d{1,3}(,\d{3})+(\.\d+)?$)");
  std::string t = trim(s);
  if (std::regex_match(t, thousands)) t.erase(std::remove(t.begin(), t.end(), ','), t.end());
  else return s;
  return t;
}

// Whitespace never matters once the steps above have used it.
std::string strip_whitespace(std::string s) {
  s.erase(std::remove_if(s.begin(), s.end(), [](unsigned char c) { return std::isspace(c); }), s.end());
  return s;
}

// `2^{k}` is `2^k`, `52_{8}` is `52_8`: braces around a single character are optional.
std::string strip_single_char_braces(std::string s) {
  static const std::regex single(R"(([\^_])\{([A-Za-z0-9])\})");
  return std::regex_replace(s, single, "$1$2");
}

// `(B)` / `B.`: a multiple-choice letter in parentheses is the letter.
std::string unwrap_choice_letter(std::string s) {
  if (s.size() == 3 && s[0] == '(' && s[2] == ')' && std::isalpha(static_cast<unsigned char>(s[1]))) return s.substr(1, 1);
  return s;
}

// ---------------------------------------------------------------------------------------------
// Numeric evaluation: a recursive-descent parser over the normalised (space-free) LaTeX.

// Values of the variables, for symbolic comparison: single letters ('a'-'z', 'A'-'Z') by their
// code, Greek letters at 128 + their index in kGreek. A subscripted variable (`x_0`, `\omega_{n}`,
// `E_{12}`) is a variable of its own, named by its whole text, whose value is drawn from the
// name's hash: the same name has the same value on both sides, whatever the subscript.
struct Assignment {
  std::array<double, 128 + kGreek.size()> slots{};
  uint64_t salt = 0;
  double low = 1.1, width = 2.0;  // the range every value is drawn from

  double subscripted(std::string_view name) const {
    // splitmix64 of the name's FNV-1a hash and the point's salt, into the range of the rest.
    uint64_t h = 1469598103934665603ull ^ salt;
    for (char c : name) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
    h += 0x9e3779b97f4a7c15ull;
    h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ull;
    h = (h ^ (h >> 27)) * 0x94d049bb133111ebull;
    h ^= h >> 31;
    return low + width * double(h >> 11) * 0x1.0p-53;
  }
};

// A value with a bound on its rounding error: |v - exact| <= e, where exact is what real arithmetic
// makes of the same text (running error analysis, first order). sympy computes `\sin\pi` as exactly
// 0; doubles give 1.2e-16, bounded by 4e-16, so it equals 0 within its own rounding, where a
// relative tolerance alone would never call it 0. At a pole (`\tan\frac{\pi}{2}`, 1.6e16) the bound
// exceeds the value: no value, as sympy's zoo is none.
struct Num {
  double v = 0;
  double e = 0;
};

constexpr double kUnit = 0x1.0p-53;     // one correctly rounded operation's relative error
constexpr double kLibmUnits = 8;        // glibc's functions are within a few units in the last place
constexpr double kUsable = 1e-9;        // a value known worse than this (relative, or absolute below 1)
                                        // is too ill-conditioned to compare: a pole, sin of 1e10

Num exact(double v) { return {v, 0}; }
Num pi_constant() { return {std::numbers::pi, std::numbers::pi * kUnit}; }

// A decimal literal (digits, an optional point and fraction; no exponent): exact where its double
// is its value (`3`, `1.5`, `0.125`: digits/10^k == v, checked with an exact product), else
// rounded once (`0.1`, `4.5e33`).
Num literal(std::string_view text) {
  const double v = std::strtod(std::string(text).c_str(), nullptr);
  const Num rounded{v, std::fabs(v) * kUnit};
  double digits = 0;
  int fraction = -1;  // digits after the point, once there is one
  for (char c : text) {
    if (c == '.') {
      fraction = 0;
      continue;
    }
    if (!std::isdigit(static_cast<unsigned char>(c)) || digits >= 0x1.0p53 / 10) return rounded;
    digits = digits * 10 + (c - '0');
    if (fraction >= 0) ++fraction;
  }
  if (fraction > 22) return rounded;  // 10^k a double holds exactly
  const double scale = fraction > 0 ? std::pow(10.0, fraction) : 1;
  const double product = v * scale;
  return product == digits && std::fma(v, scale, -product) == 0 ? Num{v, 0} : rounded;
}

bool known(Num x) { return x.e < std::numeric_limits<double>::infinity(); }  // false for NaN too

// Each operation adds its own rounding error, computed exactly (TwoSum; fma for the product and the
// quotient's remainder), so exact arithmetic stays exact: `(-2)^{1+2}` has an exact exponent, and
// `1.5\times10^{12}-1.5\times10^{12}` is exactly 0.
Num operator+(Num a, Num b) {
  const double v = a.v + b.v, bb = v - a.v;
  const double rounding = (a.v - (v - bb)) + (b.v - bb);
  return {v, a.e + b.e + std::fabs(rounding)};
}
Num operator-(Num a) { return {-a.v, a.e}; }
Num operator-(Num a, Num b) { return a + -b; }
Num operator*(Num a, Num b) {
  const double v = a.v * b.v;
  return {v, std::fabs(a.v) * b.e + std::fabs(b.v) * a.e + a.e * b.e + std::fabs(std::fma(a.v, b.v, -v))};
}

// No value where the divisor may be 0 (`\frac{1}{\sin\pi}`).
std::optional<Num> divide(Num a, Num b) {
  if (!(std::fabs(b.v) > b.e)) return std::nullopt;
  const double v = a.v / b.v;
  const double rounding = std::fabs(std::fma(-v, b.v, a.v) / b.v) * (1 + 2 * kUnit);
  return Num{v, (a.e + std::fabs(v) * b.e) / (std::fabs(b.v) - b.e) + rounding};
}

// f applied to x: the bound is how far f moves across x's interval, read at its two ends (first
// order: f is monotone on an interval this small, unless a pole or a domain's edge is in it, and
// then an end has no value and neither has the result).
// An argument whose bound is unknown (infinite or NaN) gives a result whose bound is unknown: a
// function equal at both ends of an unbounded interval says nothing about its middle.
template <class F>
Num through(F f, Num x) {
  const double v = f(x.v);
  constexpr double kInf = std::numeric_limits<double>::infinity();
  if (!known(x)) return {v, kInf};
  double spread = 0;
  if (x.e > 0)  // the ends at least one double away, so a bound below half a unit still moves f
    for (double end : {std::min(x.v - x.e, std::nextafter(x.v, -kInf)),
                       std::max(x.v + x.e, std::nextafter(x.v, kInf))}) {
      const double moved = std::fabs(f(end) - v);
      spread = std::isnan(moved) ? kInf : std::max(spread, moved);
    }
  return {v, spread + std::fabs(v) * kLibmUnits * kUnit};
}

Num power_of(Num base, Num exponent) {
  // Whole numbers to a whole power, with a result a double holds: exact (glibc's pow is within
  // 0.52 units in the last place, so it returns a representable result as it is).
  const double v = std::pow(base.v, exponent.v);
  if (base.e == 0 && exponent.e == 0 && base.v == std::round(base.v) && exponent.v == std::round(exponent.v) &&
      exponent.v >= 0 && std::fabs(v) < 0x1.0p53)
    return {v, 0};
  const Num over_base = through([&](double b) { return std::pow(b, exponent.v); }, base);
  const Num over_exponent = through([&](double x) { return std::pow(base.v, x); }, exponent);
  return {over_base.v, over_base.e + over_exponent.e};
}

// A square root's argument may round below 0 (`\sqrt{\sin\pi}`): its value is then that of 0.
std::optional<Num> square_root(Num x) {
  if (!known(x)) return Num{std::sqrt(x.v), std::numeric_limits<double>::infinity()};
  if (x.v + x.e < 0) return std::nullopt;
  const double v = std::sqrt(std::max(x.v, 0.0));
  const double low = std::sqrt(std::max(x.v - x.e, 0.0)), high = std::sqrt(x.v + x.e);
  return Num{v, std::max(high - v, v - low) + v * kUnit};
}

class Evaluator {
 public:
  // vars: the values of single-letter variables; without it, a letter does not evaluate.
  explicit Evaluator(std::string_view s, const Assignment* vars = nullptr) : s_(s), vars_(vars) {}
  static constexpr int kMaxDepth = 200;  // bounds recursion on hostile input like "((((..."

  std::optional<Num> run() {
    auto v = expr();
    if (!v || i_ != s_.size() || !std::isfinite(v->v)) return std::nullopt;
    if (!(v->e <= kUsable * std::max(1.0, std::fabs(v->v)))) return std::nullopt;
    return v;
  }

 private:
  std::string_view s_;
  const Assignment* vars_;
  size_t i_ = 0;
  int depth_ = 0;

  // A single letter not followed by another: `2n`, `x^2`; a word such as `odd` is text, and so is
  // a function's value such as `I(0)` or `f(2)` (a letter, then parentheses without one).
  bool at_variable() const {
    auto letter = [&](size_t k) { return k < s_.size() && std::isalpha(static_cast<unsigned char>(s_[k])); };
    if (!vars_ || !letter(i_) || letter(i_ + 1) || (i_ > 0 && s_[i_ - 1] == '\\')) return false;
    if (i_ + 1 < s_.size() && s_[i_ + 1] == '(') {
      for (size_t k = i_ + 2; k < s_.size() && s_[k] != ')'; ++k)
        if (letter(k)) return true;  // `n(n-1)`: a product
      return false;
    }
    return true;
  }

  // A Greek letter's command (`\omega`): a variable under the rule for letters above. Returns its
  // slot in the assignment and its length, or -1.
  int at_greek(size_t* len) const {
    if (!vars_) return -1;
    const int g = greek_at(s_, i_, len);
    if (g < 0) return -1;
    const size_t after = i_ + *len;
    if (after < s_.size() && s_[after] == '(') {
      for (size_t k = after + 1; k < s_.size() && s_[k] != ')'; ++k)
        if (is_letter(s_[k])) return 128 + g;
      return -1;
    }
    return 128 + g;
  }
  bool at_greek() const {
    size_t len = 0;
    return at_greek(&len) >= 0;
  }

  bool eat(std::string_view p) {
    if (starts_with_at(s_, i_, p)) {
      i_ += p.size();
      return true;
    }
    return false;
  }
  bool peek_cmd(std::string_view p) const {
    if (!starts_with_at(s_, i_, p)) return false;
    size_t a = i_ + p.size();
    return a >= s_.size() || !std::isalpha(static_cast<unsigned char>(s_[a]));
  }

  std::optional<Num> expr() {
    if (++depth_ > kMaxDepth) return std::nullopt;
    struct Leave {
      int& d;
      ~Leave() { --d; }
    } leave{depth_};
    auto v = term();
    while (v && i_ < s_.size()) {
      if (eat("+")) {
        auto r = term();
        if (!r) return std::nullopt;
        *v = *v + *r;
      } else if (s_[i_] == '-') {
        ++i_;
        auto r = term();
        if (!r) return std::nullopt;
        *v = *v - *r;
      } else {
        break;
      }
    }
    return v;
  }

  bool starts_primary() const {
    if (i_ >= s_.size()) return false;
    char c = s_[i_];
    return std::isdigit(static_cast<unsigned char>(c)) || c == '(' || c == '{' || c == '.' || peek_cmd("\\frac") ||
           peek_cmd("\\sqrt") || peek_cmd("\\pi") || at_variable() || at_greek() || peek_function();
  }

  std::optional<Num> term() {
    auto v = power();
    while (v && i_ < s_.size()) {
      if (eat("*") || peek_cmd("\\cdot") || peek_cmd("\\times")) {
        if (eat("\\cdot") || eat("\\times")) {
        }
        auto r = power();
        if (!r) return std::nullopt;
        *v = *v * *r;
      } else if (eat("/") || peek_cmd("\\div")) {
        eat("\\div");
        auto r = power();
        if (!r) return std::nullopt;
        v = divide(*v, *r);
      } else if (starts_primary()) {  // implicit product: 2\sqrt{3}, 3\pi, 2(1+x)
        auto r = power();
        if (!r) return std::nullopt;
        *v = *v * *r;
      } else {
        break;
      }
    }
    return v;
  }

  std::optional<Num> power() {
    auto base = unary();
    if (!base) return std::nullopt;
    if (eat("^")) {
      auto e = exponent();
      if (!e) return std::nullopt;
      return power_of(*base, *e);
    }
    return base;
  }

  // What follows `^`.
  std::optional<Num> exponent() {
    if (i_ < s_.size() && s_[i_] == '{') return group();
    if (i_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_])))
      return exact(s_[i_++] - '0');  // x^23 is x^2 3
    if (i_ < s_.size() && s_[i_] == '-') return unary();
    if (at_variable() || at_greek()) return primary();  // 2^n
    return std::nullopt;
  }

  std::optional<Num> unary() {
    if (depth_ > kMaxDepth) return std::nullopt;
    if (eat("-")) {
      ++depth_;  // `----...5` recurses through power() without expr()
      struct Leave {
        int& d;
        ~Leave() { --d; }
      } leave{depth_};
      auto v = power();
      return v ? std::optional<Num>(-*v) : std::nullopt;
    }
    if (eat("+")) return power();
    return primary();
  }

  // `{...}` as a sub-expression.
  std::optional<Num> group() {
    if (!eat("{")) return std::nullopt;
    auto v = expr();
    if (!v || !eat("}")) return std::nullopt;
    return v;
  }

  // Argument of \frac / \sqrt: a braced group, or a single digit / \pi (`\frac12`, `\sqrt2`).
  std::optional<Num> arg() {
    if (i_ < s_.size() && s_[i_] == '{') return group();
    if (i_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_]))) return exact(s_[i_++] - '0');
    if (eat("\\pi")) return pi_constant();
    return std::nullopt;
  }

  std::optional<Num> number() {
    size_t b = i_;
    while (i_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_]))) ++i_;
    if (i_ < s_.size() && s_[i_] == '.') {
      ++i_;
      while (i_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_]))) ++i_;
    }
    if (i_ == b || (i_ == b + 1 && s_[b] == '.')) return std::nullopt;
    // E-notation, as Minerva's gold answers write it (`1e-5`, `4.5e33`): only an `e` followed by
    // digits (after an optional sign), so `2e` stays whatever else it would be.
    if (i_ < s_.size() && (s_[i_] == 'e' || s_[i_] == 'E')) {
      size_t j = i_ + 1;
      if (j < s_.size() && (s_[j] == '+' || s_[j] == '-')) ++j;
      if (j < s_.size() && std::isdigit(static_cast<unsigned char>(s_[j]))) {
        while (j < s_.size() && std::isdigit(static_cast<unsigned char>(s_[j]))) ++j;
        i_ = j;
      }
    }
    return literal(s_.substr(b, i_ - b));
  }

  std::optional<Num> frac() {
    auto n = arg();
    if (!n) return std::nullopt;
    auto d = arg();
    if (!d) return std::nullopt;
    return divide(*n, *d);
  }

  // The text of a subscript at i_ (`_0`, `_{n}`, `_{12}`; braces balanced), consumed, or nullopt.
  std::optional<std::string_view> subscript() {
    if (!eat("_")) return std::nullopt;
    if (i_ < s_.size() && s_[i_] == '{') {
      int depth = 0;
      for (size_t k = i_; k < s_.size(); ++k) {
        depth += s_[k] == '{' ? 1 : s_[k] == '}' ? -1 : 0;
        if (depth == 0) {
          std::string_view text = s_.substr(i_ + 1, k - i_ - 1);
          i_ = k + 1;
          return text;
        }
      }
      return std::nullopt;
    }
    if (i_ < s_.size() && std::isalnum(static_cast<unsigned char>(s_[i_]))) return s_.substr(i_++, 1);
    return std::nullopt;
  }

  // The variable whose name starts at `name` (its letter or Greek command just read): itself
  // (`plain`), or with a subscript a variable of its own.
  std::optional<Num> variable(size_t name, double plain) {
    if (i_ >= s_.size() || s_[i_] != '_') return exact(plain);
    auto sub = subscript();
    if (!sub) return std::nullopt;
    // A number in a base above ten (`1A_{16}`): its last digit a letter right after digits, its
    // subscript the base. Text, as `52_8` is.
    int base = 0;  // the subscript's value, if all digits, held below 100 (no overflow)
    for (char c : *sub) base = c >= '0' && c <= '9' && base >= 0 ? std::min(base * 10 + (c - '0'), 100) : -1;
    const bool after_digits = name > 0 && std::isdigit(static_cast<unsigned char>(s_[name - 1]));
    if (base > 10 && after_digits && std::isupper(static_cast<unsigned char>(s_[name]))) return std::nullopt;
    return exact(vars_->subscripted(s_.substr(name, i_ - name)));
  }

  bool peek_function() const {
    size_t len = 0;
    return function_at(s_, i_, &len).has_value();
  }

  // `\sin(x)`, `\sin 2x` and `\sin{2}x` (the implicit product after the name, up to the next
  // operator or function: `\sin x\cos x` is two factors), `\sin^2 x` (a power of the value; `^{-1}` the
  // inverse), `\log_{2} 8` (a base).
  std::optional<Num> function() {
    if (++depth_ > kMaxDepth) return std::nullopt;  // `\sin\sin\sin...` recurses without expr()
    struct Leave {
      int& d;
      ~Leave() { --d; }
    } leave{depth_};
    size_t len = 0;
    Fn fn = *function_at(s_, i_, &len);
    i_ += len;
    std::optional<Num> base;
    Num power_of_value = exact(1);
    if ((fn == Fn::Log) && i_ < s_.size() && s_[i_] == '_') {
      ++i_;  // one character or a group, as LaTeX reads a subscript: `\log_28` is log base 2 of 8
      if (i_ < s_.size() && s_[i_] == '{') base = group();
      else if (i_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_]))) base = exact(s_[i_++] - '0');
      else if (vars_ && i_ < s_.size() && is_letter(s_[i_]))
        base = exact(vars_->slots[static_cast<unsigned char>(s_[i_++])]);
      if (!base || base->v <= 0 || base->v == 1) return std::nullopt;
    }
    if (eat("^")) {
      auto e = exponent();
      if (!e) return std::nullopt;
      power_of_value = *e;
    }
    const bool inverse = power_of_value.v == -1 && power_of_value.e == 0 && fn <= Fn::Tanh;
    if (inverse) power_of_value = exact(1);
    std::optional<Num> x;
    if (i_ < s_.size() && s_[i_] == '(') {
      ++i_;
      x = expr();
      if (!x || !eat(")")) return std::nullopt;
    } else {
      x = bare_argument();
    }
    if (!x) return std::nullopt;
    auto ln = [](double t) { return t > 0 ? std::log(t) : std::nan(""); };
    std::optional<Num> v = base ? divide(through(ln, *x), through(ln, *base))
                                : through([&](double t) { return apply(fn, t, inverse); }, *x);
    if (v && !(power_of_value.v == 1 && power_of_value.e == 0)) v = power_of(*v, power_of_value);
    if (!v || !std::isfinite(v->v) || !known(*v)) return std::nullopt;  // outside its domain: no value here
    return v;
  }

  // A function's argument without parentheses, as sympy's grammar reads it (mp_nofunc): factors
  // joined by products and quotients, written or implicit, up to a `+`, a `-`, another function or
  // a `\sqrt`: `\sin 2x` is sin(2x), `\sin x/2` sin(x/2), `\sin \omega \cdot t` sin(omega t), and
  // `\sin x\cos x` two factors. A braced letter (`\sin{x}y`) is a factor like any other.
  std::optional<Num> bare_argument() {
    auto x = power();
    while (x && i_ < s_.size()) {
      const size_t save = i_;
      const bool times = eat("*") || (peek_cmd("\\cdot") && eat("\\cdot")) || (peek_cmd("\\times") && eat("\\times"));
      const bool over = !times && (eat("/") || (peek_cmd("\\div") && eat("\\div")));
      if (peek_function() || peek_cmd("\\sqrt") || (!times && !over && !starts_primary())) {
        i_ = save;  // the operator, if any, joins what follows to the function's value instead
        break;
      }
      auto r = power();
      if (!r) return std::nullopt;
      x = over ? divide(*x, *r) : *x * *r;
    }
    return x;
  }

  static double apply(Fn fn, double x, bool inverse) {
    switch (fn) {
      case Fn::Sin: return inverse ? std::asin(x) : std::sin(x);
      case Fn::Cos: return inverse ? std::acos(x) : std::cos(x);
      case Fn::Tan: return inverse ? std::atan(x) : std::tan(x);
      case Fn::Sec: return inverse ? std::acos(1 / x) : 1 / std::cos(x);
      case Fn::Csc: return inverse ? std::asin(1 / x) : 1 / std::sin(x);
      case Fn::Cot: return inverse ? std::atan(1 / x) : 1 / std::tan(x);
      case Fn::Arcsin: return std::asin(x);
      case Fn::Arccos: return std::acos(x);
      case Fn::Arctan: return std::atan(x);
      case Fn::Sinh: return inverse ? std::asinh(x) : std::sinh(x);
      case Fn::Cosh: return inverse ? std::acosh(x) : std::cosh(x);
      case Fn::Tanh: return inverse ? std::atanh(x) : std::tanh(x);
      case Fn::Coth: return 1 / std::tanh(x);
      case Fn::Sech: return 1 / std::cosh(x);
      case Fn::Csch: return 1 / std::sinh(x);
      case Fn::Ln: return x > 0 ? std::log(x) : std::nan("");
      case Fn::Log: return x > 0 ? std::log10(x) : std::nan("");  // with a base: function()
      case Fn::Exp: return std::exp(x);
    }
    return std::nan("");
  }

  std::optional<Num> primary() {
    if (i_ >= s_.size()) return std::nullopt;
    char c = s_[i_];
    if (std::isdigit(static_cast<unsigned char>(c)) || c == '.') {
      bool integer_literal = true;
      size_t b = i_;
      auto v = number();
      if (!v) return std::nullopt;
      for (size_t k = b; k < i_; ++k) integer_literal &= s_[k] != '.';
      // Mixed number `1\frac{4}{5}` = 1 + 4/5 (only with integer literals on both sides).
      if (integer_literal && peek_cmd("\\frac")) {
        size_t save = i_;
        i_ += 5;
        static const std::regex int_frac(R"(^\{\d+\}\{\d+\}|^\d\d)");
        std::string rest(s_.substr(i_));
        if (std::regex_search(rest, int_frac, std::regex_constants::match_continuous)) {
          auto f = frac();
          if (f) return *v + *f;
        }
        i_ = save;
      }
      return v;
    }
    if (c == '(') {
      ++i_;
      auto v = expr();
      if (!v || !eat(")")) return std::nullopt;
      return v;
    }
    if (c == '{') return group();
    if (peek_cmd("\\frac")) {
      i_ += 5;
      return frac();
    }
    if (peek_cmd("\\sqrt")) {
      i_ += 5;
      Num root = exact(2);
      if (eat("[")) {
        auto n = expr();
        if (!n || !eat("]")) return std::nullopt;
        root = *n;
      }
      auto a = arg();
      if (!a || root.v == 0) return std::nullopt;
      if (root.v == 2 && root.e == 0) return square_root(*a);
      if (a->v < 0) return std::nullopt;
      auto reciprocal = divide(exact(1), root);
      if (!reciprocal) return std::nullopt;
      return power_of(*a, *reciprocal);
    }
    if (peek_cmd("\\pi")) {
      i_ += 3;
      return pi_constant();
    }
    if (at_variable()) {
      const size_t name = i_++;
      return variable(name, vars_->slots[static_cast<unsigned char>(s_[name])]);
    }
    size_t len = 0;
    if (const int slot = at_greek(&len); slot >= 0) {
      const size_t name = i_;
      i_ += len;
      return variable(name, vars_->slots[static_cast<size_t>(slot)]);
    }
    if (peek_function()) return function();
    return std::nullopt;
  }
};

std::optional<Num> evaluate(std::string_view s) { return Evaluator(s).run(); }

// Equal within the tolerance beyond both sides' rounding, or both 0 within their rounding
// (`\sin\pi` and 0; `\sin 2x` and `2\sin x\cos x` at a point where both are near 0). A value
// that may be 0 meets one that may not only within the tolerance: a tiny value known to its digits
// (Minerva's 1e-20) is not a rounding residue (`\sin\pi`, 1.2e-16); a small one that cancelled
// (`1-\cos(10^{-6})`, 5.0004e-13 within 8.9e-16) meets its value (5e-13).
bool numbers_equal(Num a, Num b) {
  bool ints = std::fabs(a.v) < 9e15 && std::fabs(b.v) < 9e15 && a.v == std::round(a.v) && b.v == std::round(b.v);
  if (ints) return a.v == b.v;
  // Relative: Minerva's answers go down to 1e-27 (e-notation), where an absolute 1e-12 of slack
  // made 8.4e-12 equal to 7.4e-12. Their rounding bounds are some 1e-43.
  const double scale = std::max(std::fabs(a.v), std::fabs(b.v)), apart = std::fabs(a.v - b.v);
  const bool a_may_be_0 = std::fabs(a.v) <= a.e, b_may_be_0 = std::fabs(b.v) <= b.e;
  if (a_may_be_0 && b_may_be_0) return true;
  if (a_may_be_0 || b_may_be_0) return apart <= 1e-6 * scale;
  return apart <= 1e-6 * scale + a.e + b.e;
}

// ---------------------------------------------------------------------------------------------
// Structure: tuples, intervals, sets and bare lists.

// Top-level comma split (outside (), [], {}, \{ \}).
std::vector<std::string> split_top_commas(std::string_view s) {
  std::vector<std::string> parts;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (c == '\\' && i + 1 < s.size() && (s[i + 1] == '{' || s[i + 1] == '}')) {
      depth += s[i + 1] == '{' ? 1 : -1;
      ++i;
      continue;
    }
    if (c == '(' || c == '[' || c == '{') ++depth;
    if (c == ')' || c == ']' || c == '}') --depth;
    if (c == ',' && depth == 0) {
      parts.emplace_back(s.substr(start, i - start));
      start = i + 1;
    }
  }
  parts.emplace_back(s.substr(start));
  return parts;
}

// Whether the bracket at `open` closes exactly at the end of s (so s is one bracketed group).
bool wraps_whole(std::string_view s, size_t open_len, size_t close_len) {
  int depth = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 1 < s.size() && (s[i + 1] == '{' || s[i + 1] == '}')) {
      depth += s[i + 1] == '{' ? 1 : -1;
      ++i;
    } else if (s[i] == '(' || s[i] == '[' || s[i] == '{') {
      ++depth;
    } else if (s[i] == ')' || s[i] == ']' || s[i] == '}') {
      --depth;
    }
    if (depth == 0 && i + 1 < s.size()) return false;
  }
  (void)open_len;
  (void)close_len;
  return depth == 0;
}

// `a\pm b` -> `a+b,a-b` (only one \pm, at top level, outside brackets).
std::string expand_pm(const std::string& s) {
  size_t p = s.find("\\pm");
  if (p == std::string::npos || s.find("\\pm", p + 3) != std::string::npos) return s;
  if (s.find(',') != std::string::npos) return s;
  if (p + 3 < s.size() && std::isalpha(static_cast<unsigned char>(s[p + 3]))) return s;  // \pmod
  int depth = 0;  // outside brackets only: `\{1\pm\sqrt5\}` is a set, expanded element by element
  for (size_t k = 0; k < p; ++k)
    depth += (s[k] == '(' || s[k] == '[' || s[k] == '{') - (s[k] == ')' || s[k] == ']' || s[k] == '}');
  if (depth != 0) return s;
  std::string a = s.substr(0, p), b = s.substr(p + 3);
  if (a.empty()) return "+" + b + ",-" + b;  // \pm 3
  return a + "+" + b + "," + a + "-" + b;
}

// The elements of a list or set with each `a\\pm b` made two (`\\{1\\pm\\sqrt{5},-2\\}` holds three).
std::vector<std::string> with_pm_expanded(const std::vector<std::string>& elems) {
  std::vector<std::string> out;
  for (const std::string& e : elems) {
    const std::string x = expand_pm(e);
    if (x == e) {
      out.push_back(e);
    } else {
      for (auto& part : split_top_commas(x)) out.push_back(std::move(part));
    }
  }
  return out;
}

struct Structure {
  enum Kind { kScalar, kOrdered, kUnordered } kind = kScalar;
  std::string open, close;  // bracket kinds of ordered groups
  std::vector<std::string> elems;
};

Structure structure_of(const std::string& s) {
  Structure st;
  // \{a, b\}: a set.
  if (s.size() >= 4 && s.rfind("\\{", 0) == 0 && s.compare(s.size() - 2, 2, "\\}") == 0 && wraps_whole(s, 2, 2)) {
    st.kind = Structure::kUnordered;
    st.open = "\\{";
    st.elems = with_pm_expanded(split_top_commas(std::string_view(s).substr(2, s.size() - 4)));
    return st;
  }
  // (a, b), [a, b], (a, b]: ordered, bracket kinds matter. Needs a top-level comma inside.
  if (s.size() >= 2 && (s[0] == '(' || s[0] == '[') && (s.back() == ')' || s.back() == ']') && wraps_whole(s, 1, 1)) {
    auto inner = split_top_commas(std::string_view(s).substr(1, s.size() - 2));
    if (inner.size() >= 2) {
      st.kind = Structure::kOrdered;
      st.open = s.substr(0, 1);
      st.close = s.substr(s.size() - 1);
      st.elems = inner;
      return st;
    }
  }
  auto parts = split_top_commas(s);
  if (parts.size() >= 2) {
    st.kind = Structure::kUnordered;
    st.elems = with_pm_expanded(parts);
  }
  return st;
}

// Whether a normalised answer holds a letter outside a command's name (`2n`, `x`; not `\frac12`)
// or a Greek letter (`\omega`).
bool has_variable(std::string_view x) {
  for (size_t k = 0; k < x.size(); ++k) {
    size_t len = 0;
    if (greek_at(x, k, &len) >= 0) return true;
    if (function_at(x, k, &len)) {  // `\sinx`: the letter after the name is the argument
      k += len - 1;
    } else if (x[k] == '\\') {  // another command's name is not a variable
      while (k + 1 < x.size() && std::isalpha(static_cast<unsigned char>(x[k + 1]))) ++k;
    } else if (std::isalpha(static_cast<unsigned char>(x[k]))) {
      return true;
    }
  }
  return false;
}

// Whether two expressions in variables are the same function (`p-q` and `-q+p`, `2(n-1)` and
// `2n-2`, `\frac{x}{2}` and `0.5x`, `2\sin x\cos x` and `\sin 2x`), as Qwen2.5-Math's math_equal
// asks sympy: both are evaluated at 8 points, each variable drawn from [1.1, 3.1] (positive, so
// `\sqrt{x}` has a value, and not whole, so no value is an integer by chance). Two different
// rational functions agree at 8 random points with probability zero. Points where either side has
// no value (a square root of a negative) are skipped; at least 4 must be left, all equal. Where
// fewer were (`\sqrt{1-\zeta^2}`, a damping ratio below 1), 8 more points are drawn from
// [-0.95, 0.95] (both signs: `\arccos x` is not `\arcsin\sqrt{1-x^2}`), and the points of both
// rounds count.
bool same_function(const std::string& c, const std::string& g) {
  if (!has_variable(c) && !has_variable(g)) return false;
  std::mt19937_64 rng(20261129);  // fixed: a verdict is the same in every run
  int compared = 0;
  for (const auto& [low, high] : {std::pair{1.1, 3.1}, std::pair{-0.95, 0.95}}) {
    for (int point = 0; point < 8; ++point) {
      Assignment vars;
      for (double& v : vars.slots) v = buffer::uniform_between(rng, low, high);
      vars.salt = rng();
      vars.low = low;
      vars.width = high - low;
      auto cv = Evaluator(c, &vars).run(), gv = Evaluator(g, &vars).run();
      if (!cv || !gv) continue;
      if (!numbers_equal(*cv, *gv)) return false;
      ++compared;
    }
    if (compared >= 4) return true;
  }
  return false;
}

// Letters, the same but for case: a multiple-choice letter (`b` for `B`), a word (`\\text{East}`
// for `east`; Qwen2.5-Math's grader compares lowercased first). Only letters (whitespace is gone
// by now): a command's case matters (`\\Delta` is not `\\delta`), and so does an expression's
// (`q-Q`, `2N`).
bool same_text_but_case(const std::string& c, const std::string& g) {
  const auto letters = [](const std::string& x) {
    return !x.empty() && std::all_of(x.begin(), x.end(), [](unsigned char ch) { return std::isalpha(ch); });
  };
  if (c.size() != g.size() || !letters(c) || !letters(g)) return false;
  for (size_t k = 0; k < c.size(); ++k)
    if (std::tolower(static_cast<unsigned char>(c[k])) != std::tolower(static_cast<unsigned char>(g[k]))) return false;
  return true;
}

// The two sides of an equation `lhs=rhs` (one `=`, no `<=`, `>=`, `==`, `!=`); nullopt otherwise.
std::optional<std::pair<std::string, std::string>> equation_sides(const std::string& s) {
  const size_t eq = s.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == s.size() || s.find('=', eq + 1) != std::string::npos) return {};
  if (std::string_view("<>!").find(s[eq - 1]) != std::string_view::npos) return {};
  return std::pair{s.substr(0, eq), s.substr(eq + 1)};
}

bool scalar_equivalent(const std::string& c, const std::string& g) {
  if (c == g || same_text_but_case(c, g)) return true;
  // Two equations are one when lhs - rhs is the same function on both sides, or its negation
  // (`5x+11z-7y+4=0` for `5x - 7y + 11z + 4 = 0`), as Qwen2.5-Math's grader asks sympy. Not a
  // multiple: `10x-14y+22z+8=0` stays another answer, as there.
  if (const auto ce = equation_sides(c), ge = equation_sides(g); ce && ge) {
    const std::string dc = "(" + ce->first + ")-(" + ce->second + ")";
    const std::string dg = "(" + ge->first + ")-(" + ge->second + ")";
    return same_function(dc, dg) || same_function(dc, "-(" + dg + ")");
  }
  auto cv = evaluate(c), gv = evaluate(g);
  if (cv && gv) return numbers_equal(*cv, *gv);
  return same_function(c, g);
}

bool equivalent_normalised(const std::string& c, const std::string& g, int depth, bool intervals_named = false);

bool unordered_match(const std::vector<std::string>& c, const std::vector<std::string>& g, int depth) {
  if (c.size() != g.size()) return false;
  std::vector<bool> used(g.size(), false);
  for (const auto& x : c) {
    bool hit = false;
    for (size_t j = 0; j < g.size() && !hit; ++j)
      if (!used[j] && equivalent_normalised(x, g[j], depth + 1)) used[j] = hit = true;
    if (!hit) return false;
  }
  return true;
}

std::string normalise_element(const std::string& e) {
  // No thousands step here: the whole answer had it already, and an element never holds a
  // top-level comma (re-running it would turn the list `1, 000` into 1000).
  return unwrap_choice_letter(strip_whitespace(strip_variable_assignment(e)));
}

// intervals_named: an answer said `x \in ...` (normalisation has taken it away): its `(a, b)` is
// an interval, never a tuple to match a bare list.
bool equivalent_normalised(const std::string& c0, const std::string& g0, int depth, bool intervals_named) {
  if (depth > 8) return c0 == g0;
  std::string c = normalise_element(c0), g = normalise_element(g0);
  if (c == g) return true;
  const std::string c_written = c, g_written = g;
  c = expand_pm(c);
  g = expand_pm(g);
  Structure cs = structure_of(c), gs = structure_of(g);
  // A tuple and the same elements bare, in order, are one answer (`(1,-2)` for `1,-2`; polar
  // coordinates written without their parentheses), as Qwen2.5-Math's grader strips the brackets.
  // `(a, b)` may be an open interval too, which this cannot tell; not where it says so: an
  // infinite end, `x \in (1, 2)`, or a bare list that is a `\pm` expanded (`\pm 2`, two roots).
  const bool no_interval_marks =
      !intervals_named && c.find("\\infty") == std::string::npos && g.find("\\infty") == std::string::npos;
  const auto tuple_and_bare = [&](const Structure& a, const Structure& b, bool b_expanded) {
    return no_interval_marks && !b_expanded && a.kind == Structure::kOrdered && a.open == "(" && a.close == ")" &&
           b.kind == Structure::kUnordered && b.open.empty() && a.elems.size() == b.elems.size();
  };
  if (tuple_and_bare(cs, gs, g != g_written) || tuple_and_bare(gs, cs, c != c_written)) {
    for (size_t k = 0; k < gs.elems.size(); ++k)
      if (!equivalent_normalised(cs.elems[k], gs.elems[k], depth + 1)) return false;
    return true;
  }
  if (cs.kind != gs.kind) return false;
  switch (gs.kind) {
    case Structure::kScalar:
      return scalar_equivalent(c, g);
    case Structure::kOrdered:
      if (cs.open != gs.open || cs.close != gs.close || cs.elems.size() != gs.elems.size()) return false;
      for (size_t k = 0; k < gs.elems.size(); ++k)
        if (!equivalent_normalised(cs.elems[k], gs.elems[k], depth + 1)) return false;
      return true;
    case Structure::kUnordered:
      return unordered_match(cs.elems, gs.elems, depth);
  }
  return false;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Public API.

std::optional<std::string> extract_math_answer(std::string_view response) {
  if (auto b = last_boxed(response)) return b;
  size_t open = response.rfind("<answer>");
  if (open != std::string_view::npos) {
    size_t b = open + 8;
    size_t close = response.find("</answer>", b);
    std::string_view inner = response.substr(b, close == std::string_view::npos ? std::string_view::npos : close - b);
    if (auto boxed = last_boxed(inner)) return boxed;
    std::string t = trim(inner);
    // Prose in the tags (`The answer is 5.`): what follows the last "he answer is", its closing
    // period dropped, as Qwen2.5-Math's extractor takes it after \boxed. Only inside the tags:
    // elsewhere the last number serves, where the words after it ("18 dollars a day") would not.
    if (const size_t at = t.rfind("he answer is"); at != std::string::npos) {
      std::string after = trim(std::string_view(t).substr(at + std::string_view("he answer is").size()));
      if (!after.empty() && after.front() == ':') after = trim(std::string_view(after).substr(1));
      while (!after.empty() && after.back() == '.') after.pop_back();
      after = trim(after);
      if (!after.empty()) return after;
    }
    if (!t.empty()) return t;
  }
  return last_number(response);
}

namespace {

// single_letter_units: whether `5 m` is 5 (a unit) rather than kept whole (`2 n`, a product).
std::string normalize(std::string_view answer, bool single_letter_units) {
  std::string s(answer);
  s = strip_wrappers(s);
  s = strip_spacing(s);
  s = strip_degrees_percent(s);
  s = unwrap_text(s);
  s = trim(s);
  s = strip_trailing_words(s, single_letter_units);
  s = strip_variable_assignment(s);
  s = strip_thousands_separators(s);
  s = strip_whitespace(s);
  s = strip_single_char_braces(s);
  s = unwrap_choice_letter(s);
  return s;
}

}  // namespace

std::string normalize_math_answer(std::string_view answer) { return normalize(answer, false); }

bool math_equivalent(std::string_view candidate, std::string_view gold) {
  // Final answers are short; a huge one (a runaway generation) only counts if it is the gold
  // verbatim, which keeps the regex steps and the parser away from pathological input.
  constexpr size_t kMaxAnswer = 4096;
  if (candidate.size() > kMaxAnswer || gold.size() > kMaxAnswer) return trim(candidate) == trim(gold);
  // A gold keeps a lone trailing letter (`2 n` is 2n; Minerva's `7.6 Z`); a candidate's goes only
  // when the gold has no variable, as a unit after the number the gold is (`5 m` for 5, `\frac12`).
  std::string g = normalize(gold, false);
  std::string c = normalize(candidate, !has_variable(g));
  if (c.empty() || g.empty()) return false;
  const auto says_in = [](std::string_view x) {
    for (size_t at = x.find("\\in"); at != std::string_view::npos; at = x.find("\\in", at + 1))
      if (at + 3 == x.size() || !std::isalpha(static_cast<unsigned char>(x[at + 3]))) return true;  // not \infty
    return false;
  };
  return equivalent_normalised(c, g, 0, says_in(candidate) || says_in(gold));
}

std::optional<std::string> gold_math_answer(std::string_view benchmark, const nlohmann::json& item) {
  auto as_string = [](const nlohmann::json& v) -> std::optional<std::string> {
    if (v.is_string()) return v.get<std::string>();
    if (v.is_number_integer()) return std::to_string(v.get<long long>());
    if (v.is_number()) {
      double d = v.get<double>();
      if (d == std::round(d) && std::fabs(d) < 9e15) return std::to_string(static_cast<long long>(d));
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.15g", d);
      return std::string(buf);
    }
    return std::nullopt;
  };
  if (benchmark == "gsm8k") {
    if (!item.contains("answer") || !item["answer"].is_string()) return std::nullopt;
    std::string a = item["answer"].get<std::string>();
    size_t p = a.rfind("#### ");
    if (p == std::string::npos) return std::nullopt;
    std::string g = trim(std::string_view(a).substr(p + 5));
    g.erase(std::remove(g.begin(), g.end(), ','), g.end());
    return g;
  }
  if (benchmark == "minerva_math") {
    if (!item.contains("solution") || !item["solution"].is_string()) return std::nullopt;
    return last_boxed(item["solution"].get<std::string>());
  }
  if (item.contains("final_answer") && item["final_answer"].is_array()) {  // olympiadbench
    std::string joined;
    for (const auto& v : item["final_answer"]) {
      auto s = as_string(v);
      if (!s) continue;
      std::string t = *s;
      t.erase(std::remove(t.begin(), t.end(), '$'), t.end());
      if (!joined.empty()) joined += ",";
      joined += trim(t);
    }
    if (joined.empty()) return std::nullopt;
    return joined;
  }
  if (item.contains("answer")) return as_string(item["answer"]);
  return std::nullopt;
}

}  // namespace azr::eval
