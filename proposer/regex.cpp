#include "proposer/regex.h"

#include <pcre2.h>

#include <atomic>
#include <stdexcept>

namespace azr::proposer {
namespace {
std::atomic<bool> g_interpret_only{false};
}  // namespace

void Regex::interpret_only(bool on) { g_interpret_only = on; }

std::string_view Regex::Match::group(std::string_view subject, size_t i) const {
  const auto& [b, e] = groups.at(i - 1);
  if (b == std::string_view::npos) return {};
  return subject.substr(b, e - b);
}

Regex::Regex(std::string_view pattern, uint32_t flags) {
  int err = 0;
  PCRE2_SIZE offset = 0;
  code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                        flags | PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &offset, nullptr);
  if (!code_) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    throw std::invalid_argument("regex '" + std::string(pattern) + "': " + reinterpret_cast<char*>(msg));
  }
  // Compiled to machine code where PCRE2 has a JIT for this CPU (else matching interprets, the
  // same results). The interpreter made a lazy `<output>(.*?)</output>` over 4,000 unclosed tags
  // cost 3.2 s, and find_all over 20,000 `name(` 4.6 s; the JIT matches both in under a ms.
  pcre2_jit_compile(static_cast<pcre2_code*>(code_), PCRE2_JIT_COMPLETE);
}

Regex::~Regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

std::optional<Regex::Match> Regex::search(std::string_view subject, size_t start, bool anchored) const {
  auto* code = static_cast<pcre2_code*>(code_);
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(code, nullptr);
  const uint32_t options = (anchored ? PCRE2_ANCHORED : 0) | (g_interpret_only ? PCRE2_NO_JIT : 0);
  int rc = pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(subject.data()), subject.size(), start, options, md,
                       nullptr);
  if (rc == PCRE2_ERROR_JIT_STACKLIMIT)  // past the JIT's 32 KiB stack: the interpreter, on the heap
    rc = pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(subject.data()), subject.size(), start,
                     options | PCRE2_NO_JIT, md, nullptr);
  std::optional<Match> out;
  if (rc > 0) {
    PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    uint32_t pairs = pcre2_get_ovector_count(md);
    Match m;
    m.begin = ov[0];
    m.end = ov[1];
    for (uint32_t i = 1; i < pairs; ++i) {
      if (ov[2 * i] == PCRE2_UNSET)
        m.groups.emplace_back(std::string_view::npos, std::string_view::npos);
      else
        m.groups.emplace_back(ov[2 * i], ov[2 * i + 1]);
    }
    out = std::move(m);
  } else if (rc != PCRE2_ERROR_NOMATCH) {
    pcre2_match_data_free(md);
    throw std::runtime_error("regex match failed: " + std::to_string(rc));
  }
  pcre2_match_data_free(md);
  return out;
}

std::vector<Regex::Match> Regex::find_all(std::string_view subject) const {
  std::vector<Match> out;
  size_t pos = 0;
  while (pos <= subject.size()) {
    auto m = search(subject, pos);
    if (!m) break;
    // An empty match must still advance, by one whole UTF-8 character.
    size_t next = m->end;
    if (m->end == m->begin) {
      next = m->end + 1;
      while (next < subject.size() && (static_cast<unsigned char>(subject[next]) & 0xC0) == 0x80) ++next;
    }
    out.push_back(std::move(*m));
    pos = next;
  }
  return out;
}

std::string Regex::replace_all(std::string_view subject, std::string_view replacement) const {
  std::string out;
  size_t last = 0;
  for (const Match& m : find_all(subject)) {
    out.append(subject.substr(last, m.begin - last));
    out.append(replacement);
    last = m.end;
  }
  out.append(subject.substr(last));
  return out;
}

std::string regex_escape(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (std::string_view("\\^$.|?*+()[]{}").find(c) != std::string_view::npos) out += '\\';
    out += c;
  }
  return out;
}

}  // namespace azr::proposer
