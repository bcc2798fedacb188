#include "proposer/entry_function.h"

#include <pcre2.h>

#include "proposer/regex.h"

namespace azr::proposer {

std::vector<std::string> def_names(std::string_view program) {
  static const Regex def(R"(^\s*def\s+(\w+)\s*\()", PCRE2_MULTILINE);
  std::vector<std::string> out;
  for (const auto& m : def.find_all(program)) out.emplace_back(m.group(program, 1));
  return out;
}

std::string rename_to_f(std::string_view program, std::string_view name) {
  if (name == "f" || name.empty()) return std::string(program);
  const std::string n = regex_escape(name);
  // `def name(` first, then every `name (` call, space or not (the reference's two steps, its
  // \bname\s*\(). The call pattern's (?<!\w) is the word boundary that keeps `xname(`
  // (Unicode-aware: UCP). One deliberate change: a method call `.name(` is not the function and
  // keeps its name. The reference renames it too, so `def count(s): return s.count('a')` fails
  // there as `s.f('a')` (AttributeError) and a sound proposal is scored -1.
  std::string out = Regex(R"(\bdef\s+)" + n + R"(\s*\()").replace_all(program, "def f(");
  out = Regex(R"((?<![\w.]))" + n + R"(\s*\()").replace_all(out, "f(");
  return out;
}

}  // namespace azr::proposer
