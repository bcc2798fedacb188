#include "proposer/fenced_blocks.h"

#include <pcre2.h>

#include <algorithm>
#include <stdexcept>

#include "proposer/r1_answer.h"
#include "proposer/regex.h"

namespace azr::proposer {
namespace {

std::string lower(std::string s) {
  for (char& c : s)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return s;
}

// One pattern per field, compiled once; `source` makes its text from the field's name.
template <class Source>
const Regex& field_pattern(std::string_view field, Source source, uint32_t flags) {
  static const Regex input(source("input"), flags), output(source("output"), flags), message(source("message"), flags);
  if (field == "input") return input;
  if (field == "output") return output;
  if (field == "message") return message;
  throw std::invalid_argument("no fallback pattern for the field '" + std::string(field) + "'");
}

std::vector<std::string> nonempty_groups(const Regex& re, std::string_view text) {
  std::vector<std::string> out;
  for (const auto& m : re.find_all(text))
    if (std::string s = strip(m.group(text, 1)); !s.empty()) out.push_back(std::move(s));
  return out;
}

}  // namespace

std::vector<std::string> comment_values(std::string_view text, std::string_view field) {
  auto source = [](const std::string& f) { return "^[ \\t]*#[ \\t]*" + f + "[ \\t]*:(?=\\s*(\\S.*)$)"; };
  return nonempty_groups(field_pattern(field, source, PCRE2_MULTILINE | PCRE2_CASELESS), text);
}

std::vector<std::string> tag_values(std::string_view text, std::string_view field) {
  auto source = [](const std::string& f) { return "<" + f + ">(.*?)</" + f + ">"; };
  return nonempty_groups(field_pattern(field, source, PCRE2_DOTALL | PCRE2_CASELESS), text);
}

std::vector<FencedBlock> fenced_blocks(std::string_view text) {
  // The opening fence's info string runs to the end of its line; the content is lazy up to the
  // next fence, with the newline before the closing fence dropped (the reference's `\n?```).
  // Failing that, a block on one line: its first word is the info, the rest the content.
  static const Regex block(R"(```([^\n`]*)\n(.*?)\n?```|```(\w*)[ \t]*([^\n`]*?)[ \t]*```)", PCRE2_DOTALL);
  std::vector<FencedBlock> out;
  for (const auto& m : block.find_all(text)) {
    const bool one_line = m.groups[0].first == std::string_view::npos;
    std::string info = lower(strip(m.group(text, one_line ? 3 : 1)));
    std::string content(m.group(text, one_line ? 4 : 2));
    // A one-line block needs both its word and its content: ```output``` in prose, or ``` f(3) ```,
    // is an inline span, which must not become the last (or first) block of its kind.
    if (one_line && (info.empty() || content.empty())) continue;
    out.push_back({std::move(info), std::move(content)});
  }
  return out;
}

std::vector<std::string> blocks_tagged(std::string_view text, std::string_view tag) {
  std::vector<std::string> out;
  for (auto& b : fenced_blocks(text))
    if (b.info == tag) out.push_back(std::move(b.content));
  return out;
}

bool is_code_info(std::string_view info) {
  return info.empty() || info == "python" || info == "py" || info == "python3";
}

std::string program_text(std::string_view code) {
  size_t b = 0;  // the start of the first line that is not blank
  for (size_t i = 0; i < code.size(); ++i) {
    if (code[i] == '\n') b = i + 1;
    else if (code[i] != ' ' && code[i] != '\t' && code[i] != '\r') break;
  }
  size_t e = code.find_last_not_of(" \t\r\n");
  if (e == std::string_view::npos || e < b) return {};
  code = code.substr(b, e - b + 1);
  // The indentation every non-blank line starts with (spaces and tabs as written, as dedent).
  std::optional<std::string_view> shared;
  for (size_t at = 0; at <= code.size();) {
    size_t end = std::min(code.find('\n', at), code.size());
    std::string_view line = code.substr(at, end - at);
    size_t text = line.find_first_not_of(" \t\r");
    if (text != std::string_view::npos) {
      std::string_view indent = line.substr(0, text);
      if (!shared) shared = indent;
      size_t n = 0;
      while (n < shared->size() && n < indent.size() && (*shared)[n] == indent[n]) ++n;
      shared = shared->substr(0, n);
    }
    at = end + 1;
  }
  if (!shared || shared->empty()) return std::string(code);
  std::string out;
  for (size_t at = 0; at <= code.size();) {
    size_t end = std::min(code.find('\n', at), code.size());
    std::string_view line = code.substr(at, end - at);
    if (line.starts_with(*shared)) line.remove_prefix(shared->size());
    out.append(line);
    if (end < code.size()) out += '\n';
    at = end + 1;
  }
  return out;
}

std::optional<std::string> reference_first_code_block(std::string_view text) {
  static const Regex code(R"(```(?:python\s*)?\n?(.*?)\n?```)", PCRE2_DOTALL);
  auto m = code.search(text);
  if (!m) return std::nullopt;
  return std::string(m->group(text, 1));
}

}  // namespace azr::proposer
