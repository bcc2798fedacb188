#include "model/tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <utf8proc.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <queue>
#include <unordered_map>

#include "model/json_text.h"

namespace azr::model {

using json = nlohmann::json;

// ---------------------------------------------------------------------------------------------
// UTF-8 helpers

namespace {

enum class Utf8 { kComplete, kIncomplete, kInvalid };

// Classifies the sequence starting at s[0] (Unicode Table 3-7). `len` is the character length
// (kComplete), the valid bytes so far (kIncomplete), or the maximal ill-formed subpart, at
// least 1 (kInvalid).
Utf8 next_utf8(const unsigned char* s, size_t n, size_t& len) {
  const unsigned char b0 = s[0];
  len = 1;
  if (b0 < 0x80) return Utf8::kComplete;
  size_t need;
  unsigned char lo = 0x80, hi = 0xBF;  // range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 1;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 2;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;  // no surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 3;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;  // nothing past U+10FFFF
  } else {
    return Utf8::kInvalid;
  }
  for (size_t i = 1; i <= need; ++i) {
    if (i >= n) return Utf8::kIncomplete;
    const unsigned char b = s[i];
    const bool ok = i == 1 ? (b >= lo && b <= hi) : (b >= 0x80 && b <= 0xBF);
    if (!ok) return Utf8::kInvalid;
    len = i + 1;
  }
  return Utf8::kComplete;
}

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";

// Appends the complete characters of `s` to `out` (ill-formed parts as U+FFFD) and returns how
// many bytes were consumed; an incomplete character at the end is left unless `final`.
size_t append_lossy(std::string_view s, std::string& out, bool final) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  size_t i = 0;
  while (i < s.size()) {
    size_t len;
    switch (next_utf8(p + i, s.size() - i, len)) {
      case Utf8::kComplete:
        out.append(s.data() + i, len);
        break;
      case Utf8::kIncomplete:
        if (!final) return i;
        out += kReplacement;
        break;
      case Utf8::kInvalid:
        out += kReplacement;
        break;
    }
    i += len;
  }
  return i;
}

// Decodes one code point of valid UTF-8 at s[i], advancing i.
char32_t decode_cp(std::string_view s, size_t& i) {
  utf8proc_int32_t cp = 0;
  const auto n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(s.data() + i),
                                  static_cast<utf8proc_ssize_t>(s.size() - i), &cp);
  i += n > 0 ? static_cast<size_t>(n) : 1;
  return static_cast<char32_t>(cp);
}

void append_cp(std::string& out, char32_t cp) {
  utf8proc_uint8_t buf[4];
  const auto n = utf8proc_encode_char(static_cast<utf8proc_int32_t>(cp), buf);
  out.append(reinterpret_cast<const char*>(buf), static_cast<size_t>(n));
}

// Unicode White_Space, which is what Oniguruma (the Rust tokenizers' regex engine) means by \s
// and what Rust's char::is_whitespace tests. PCRE2's UCP \s is Z + ASCII space controls, which
// leaves out U+0085; so the pattern is rewritten to use this explicit class. U+FEFF and U+200B
// are deliberately absent (qwen2.md §1.4, the `zero_width_bom` reference line).
constexpr std::string_view kWhiteSpaceClass =
    "\\t\\n\\x{0B}\\x{0C}\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}"
    "\\x{202F}\\x{205F}\\x{3000}";

// Letters and numbers assigned in Unicode 15.0-16.0, the version of the Oniguruma inside the
// Rust tokenizers (0.23). PCRE2 10.42 knows Unicode 14 only, so without these \p{L} and \p{N}
// would miss e.g. Egyptian Hieroglyphs Extended-A and CJK Extension H. Each range was checked
// against the Rust engine code point by code point; Unicode 17 additions are deliberately left
// out because Rust does not know them either. On a newer PCRE2 the extra ranges are harmless.
constexpr std::string_view kExtraLetters =
    "\\x{1C89}-\\x{1C8A}\\x{A7CB}-\\x{A7CD}\\x{A7DA}-\\x{A7DC}\\x{105C0}-\\x{105F3}"
    "\\x{10D4A}-\\x{10D65}\\x{10D6F}-\\x{10D85}\\x{10EC2}-\\x{10EC4}\\x{1123F}-\\x{11240}"
    "\\x{11380}-\\x{11389}\\x{1138B}\\x{1138E}\\x{11390}-\\x{113B5}\\x{113B7}\\x{113D1}"
    "\\x{113D3}\\x{11BC0}-\\x{11BE0}\\x{11F02}\\x{11F04}-\\x{11F10}\\x{11F12}-\\x{11F33}"
    "\\x{1342F}\\x{13441}-\\x{13446}\\x{13460}-\\x{143FA}\\x{16100}-\\x{1611D}"
    "\\x{16D40}-\\x{16D6C}\\x{18CFF}\\x{1B132}\\x{1B155}\\x{1DF25}-\\x{1DF2A}"
    "\\x{1E030}-\\x{1E06D}\\x{1E4D0}-\\x{1E4EB}\\x{1E5D0}-\\x{1E5ED}\\x{1E5F0}\\x{2B739}"
    "\\x{2EBF0}-\\x{2EE5D}\\x{31350}-\\x{323AF}";
constexpr std::string_view kExtraNumbers =
    "\\x{10D40}-\\x{10D49}\\x{116D0}-\\x{116E3}\\x{11BF0}-\\x{11BF9}\\x{11F50}-\\x{11F59}"
    "\\x{16130}-\\x{16139}\\x{16D70}-\\x{16D79}\\x{1CCF0}-\\x{1CCF9}\\x{1D2C0}-\\x{1D2D3}"
    "\\x{1E4F0}-\\x{1E4F9}\\x{1E5F1}-\\x{1E5FA}";

bool is_white_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

// Rust's char::is_alphanumeric (+ '_'), the "word character" of HF's single_word check.
bool is_word_char(char32_t c) {
  if (c == U'_') return true;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_NO:
      return true;
    default:
      return false;
  }
}

// Code points the Rust tokenizers' NFC (crate unicode-normalization-alignments, Unicode 9 era
// tables) does not know, while utf8proc does: combining marks assigned in Unicode 10-15, which
// Rust treats as starters (combining class 0) and so never reorders, plus U+11930, which
// utf8proc would compose with U+11935 into U+11938. Found by comparing both normalizers on every
// code point with a combining class or a decomposition. They are normalized as isolated
// pieces, which is exactly what being an unknown starter means.
constexpr std::array<char32_t, 109> kNfcUnknownToRust = {
    0x7FD, 0x898, 0x899, 0x89A, 0x89B, 0x89C, 0x89D, 0x89E, 0x89F, 0x8CA, 0x8CB, 0x8CC, 0x8CD,
    0x8CE, 0x8CF, 0x8D0, 0x8D1, 0x8D2, 0x8D3, 0x9FE, 0xC3C, 0xD3B, 0xD3C, 0xEBA, 0x1715, 0x1ABF,
    0x1AC0, 0x1AC1, 0x1AC2, 0x1AC3, 0x1AC4, 0x1AC5, 0x1AC6, 0x1AC7, 0x1AC8, 0x1AC9, 0x1ACA,
    0x1ACB, 0x1ACC, 0x1ACD, 0x1ACE, 0x1DF6, 0x1DF7, 0x1DF8, 0x1DF9, 0x1DFA, 0xA82C, 0x10D24,
    0x10D25, 0x10D26, 0x10D27, 0x10EAB, 0x10EAC, 0x10EFD, 0x10EFE, 0x10EFF, 0x10F46, 0x10F47,
    0x10F48, 0x10F49, 0x10F4A, 0x10F4B, 0x10F4C, 0x10F4D, 0x10F4E, 0x10F4F, 0x10F50, 0x10F82,
    0x10F83, 0x10F84, 0x10F85, 0x11070, 0x1133B, 0x1145E, 0x11839, 0x1183A, 0x11930, 0x1193D,
    0x1193E, 0x11943, 0x119E0, 0x11A34, 0x11A47, 0x11A99, 0x11D42, 0x11D44, 0x11D45, 0x11D97,
    0x11F41, 0x11F42, 0x16FF0, 0x16FF1, 0x1E08F, 0x1E130, 0x1E131, 0x1E132, 0x1E133, 0x1E134,
    0x1E135, 0x1E136, 0x1E2AE, 0x1E2EC, 0x1E2ED, 0x1E2EE, 0x1E2EF, 0x1E4EC, 0x1E4ED, 0x1E4EE,
    0x1E4EF
};

bool nfc_unknown_to_rust(char32_t c) {
  return c >= kNfcUnknownToRust.front() &&
         std::binary_search(kNfcUnknownToRust.begin(), kNfcUnknownToRust.end(), c);
}

// utf8proc NFC of one run (NUL-safe: the length is passed, not NUL-terminated), in utf8proc_map's
// three steps but for the middle one. utf8proc puts the combining marks in canonical order with a
// bubble sort, quadratic in a run of marks (100 KB of alternating U+0301 U+0323 took 11 s, HF's
// normalizer 0.5 s); the order it makes is a stable sort of each run of non-starters by combining
// class, which std::stable_sort makes in n log n. Decomposing and composing stay utf8proc's.
void append_utf8proc_nfc(std::string_view text, std::string& out) {
  if (text.empty()) return;
  const auto options = static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE);
  const auto fail = [](utf8proc_ssize_t n) {
    return TokenizerError("NFC failed: " + std::string(utf8proc_errmsg(n)));
  };
  std::vector<utf8proc_int32_t> cps;
  cps.reserve(text.size());
  const auto* bytes = reinterpret_cast<const utf8proc_uint8_t*>(text.data());
  utf8proc_int32_t one[32];  // a canonical decomposition is at most 4 code points (Hangul: 3)
  int boundclass = UTF8PROC_BOUNDCLASS_START;
  for (size_t i = 0; i < text.size();) {
    utf8proc_int32_t c = 0;
    const utf8proc_ssize_t len = utf8proc_iterate(bytes + i, static_cast<utf8proc_ssize_t>(text.size() - i), &c);
    if (len < 0) throw fail(len);
    i += static_cast<size_t>(len);
    const utf8proc_ssize_t m = utf8proc_decompose_char(c, one, 32, options, &boundclass);
    if (m < 0) throw fail(m);
    if (m > 32) throw TokenizerError("NFC failed: a decomposition longer than 32 code points");
    cps.insert(cps.end(), one, one + m);
  }
  const auto ccc = [](utf8proc_int32_t c) { return utf8proc_get_property(c)->combining_class; };
  for (size_t a = 0; a < cps.size();) {
    if (ccc(cps[a]) == 0) {
      ++a;
      continue;
    }
    size_t b = a + 1;
    while (b < cps.size() && ccc(cps[b]) != 0) ++b;
    std::stable_sort(cps.begin() + static_cast<std::ptrdiff_t>(a), cps.begin() + static_cast<std::ptrdiff_t>(b),
                     [&](utf8proc_int32_t x, utf8proc_int32_t y) { return ccc(x) < ccc(y); });
    a = b;
  }
  const utf8proc_ssize_t n = utf8proc_normalize_utf32(cps.data(), static_cast<utf8proc_ssize_t>(cps.size()), options);
  if (n < 0) throw fail(n);
  utf8proc_uint8_t enc[4];
  for (utf8proc_ssize_t k = 0; k < n; ++k) {
    const utf8proc_ssize_t len = utf8proc_encode_char(cps[static_cast<size_t>(k)], enc);
    out.append(reinterpret_cast<const char*>(enc), static_cast<size_t>(len));
  }
}

// NFC of a run, as the Rust tokenizers computes it (see kNfcUnknownToRust).
void append_nfc_run(std::string_view text, std::string& out) {
  size_t run = 0;  // start of the part not yet normalized
  for (size_t i = 0; i < text.size();) {
    const size_t start = i;
    if (nfc_unknown_to_rust(decode_cp(text, i))) {
      append_utf8proc_nfc(text.substr(run, start - run), out);
      out.append(text.substr(start, i - start));
      run = i;
    }
  }
  append_utf8proc_nfc(text.substr(run), out);
}

// NFC of `text`. ASCII characters are starters that never compose with what precedes them, so
// the text can be normalized in pieces that each start at one: only the non-ASCII stretches and
// the ASCII character before each (it may compose with following marks, e.g. e + U+0301) go
// through utf8proc. Mostly-ASCII code thus costs almost nothing here.
std::string nfc_like_rust(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    size_t j = i;
    while (j < text.size() && !(text[j] & 0x80)) ++j;  // next non-ASCII byte
    if (j == text.size()) {
      out.append(text.substr(i));
      break;
    }
    const size_t start = j > i ? j - 1 : j;
    out.append(text.substr(i, start - i));
    size_t k = j;
    while (k < text.size() && (text[k] & 0x80)) ++k;  // end of the non-ASCII stretch
    append_nfc_run(text.substr(start, k - start), out);
    i = k;
  }
  return out;
}

// Rewrites \s, \S, \p{L} and \p{N} to the classes above, so PCRE2 agrees with Oniguruma.
// \S inside a character class cannot be expressed by substitution and is rejected.
std::string rewrite_pattern(const std::string& pattern, const std::string& where) {
  const std::string ws(kWhiteSpaceClass);
  const std::string letters = "\\p{L}" + std::string(kExtraLetters);
  const std::string numbers = "\\p{N}" + std::string(kExtraNumbers);
  std::string out;
  bool in_class = false;
  // Inside [...] the class body is spliced in; outside it gets its own brackets.
  auto put = [&](const std::string& body, bool negate) {
    out += in_class ? body : (negate ? "[^" : "[") + body + "]";
  };
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const std::string_view rest = std::string_view(pattern).substr(i);
      if (rest.starts_with("\\p{L}")) {
        put(letters, false);
        i += 4;
      } else if (rest.starts_with("\\p{N}")) {
        put(numbers, false);
        i += 4;
      } else if (rest[1] == 's') {
        put(ws, false);
        ++i;
      } else if (rest[1] == 'S') {
        if (in_class) throw TokenizerError(where + ": \\S inside a character class is not supported");
        put(ws, true);
        ++i;
      } else {
        out += rest.substr(0, 2);
        ++i;
      }
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = true;
      out += c;
      // A ']' right after '[' or '[^' is a literal, not the end of the class.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out += pattern[++i];
      continue;
    }
    if (c == ']' && in_class) in_class = false;
    out += c;
  }
  return out;
}

// GPT-2's bytes_to_unicode: printable bytes map to themselves, the other 68 to U+0100 on.
std::array<char32_t, 256> bytes_to_unicode() {
  std::array<char32_t, 256> map{};
  char32_t next = 0x100;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    map[b] = printable ? static_cast<char32_t>(b) : next++;
  }
  return map;
}

// The GPT-2 pattern ByteLevel uses when `use_regex` is true.
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

// Added-token matcher: at each position, the longest token that matches (leftmost-longest,
// like HF's aho-corasick with MatchKind::LeftmostLongest).
class AddedMatcher {
 public:
  struct Piece {
    std::string_view text;
    int32_t id = -1;  // >= 0: an added token
  };

  void add(const AddedToken& t) {
    if (t.content.empty()) return;
    tokens_.push_back(t);
    first_[static_cast<unsigned char>(t.content[0])] = true;
    std::stable_sort(tokens_.begin(), tokens_.end(), [](const AddedToken& a, const AddedToken& b) {
      return a.content.size() > b.content.size();
    });
  }
  bool empty() const { return tokens_.empty(); }

  // Splits `text` into plain stretches and added tokens.
  void split(std::string_view text, std::vector<Piece>& out) const {
    size_t plain = 0;  // start of the current plain stretch
    size_t i = 0;
    while (i < text.size()) {
      const AddedToken* hit = first_[static_cast<unsigned char>(text[i])] ? match(text, i) : nullptr;
      if (!hit) {
        ++i;
        continue;
      }
      size_t start = i, end = i + hit->content.size();
      if (hit->lstrip) start = strip_left(text, plain, start);
      if (hit->rstrip) end = strip_right(text, end);
      if (start > plain) out.push_back({text.substr(plain, start - plain), -1});
      out.push_back({text.substr(start, end - start), hit->id});
      plain = i = end;
    }
    if (plain < text.size()) out.push_back({text.substr(plain), -1});
  }

 private:
  const AddedToken* match(std::string_view text, size_t i) const {
    for (const auto& t : tokens_) {
      if (text.substr(i, t.content.size()) != t.content) continue;
      // Only the longest match is considered, as HF filters single_word after matching.
      if (t.single_word && !single_word_ok(text, i, i + t.content.size())) return nullptr;
      return &t;
    }
    return nullptr;
  }
  static bool single_word_ok(std::string_view text, size_t start, size_t end) {
    if (start > 0) {
      size_t j = start - 1;
      while (j > 0 && (static_cast<unsigned char>(text[j]) & 0xC0) == 0x80) --j;
      if (is_word_char(decode_cp(text, j))) return false;
    }
    if (end < text.size() && is_word_char(decode_cp(text, end))) return false;
    return true;
  }
  static size_t strip_left(std::string_view text, size_t floor, size_t start) {
    while (start > floor) {
      size_t j = start - 1;
      while (j > floor && (static_cast<unsigned char>(text[j]) & 0xC0) == 0x80) --j;
      size_t k = j;
      if (!is_white_space(decode_cp(text, k))) break;
      start = j;
    }
    return start;
  }
  static size_t strip_right(std::string_view text, size_t end) {
    while (end < text.size()) {
      size_t k = end;
      if (!is_white_space(decode_cp(text, k))) break;
      end = k;
    }
    return end;
  }

  std::vector<AddedToken> tokens_;  // longest first
  std::array<bool, 256> first_{};   // first bytes of any token, to skip most positions fast
};

}  // namespace

size_t valid_utf8_prefix(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  size_t i = 0;
  while (i < s.size()) {
    size_t len;
    if (next_utf8(p + i, s.size() - i, len) != Utf8::kComplete) break;
    i += len;
  }
  return i;
}

std::string utf8_lossy(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  append_lossy(s, out, true);
  return out;
}

// ---------------------------------------------------------------------------------------------
// Tokenizer (shared parts)

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  std::string bytes;
  for (int32_t id : ids) append_token_bytes(id, bytes, skip_special);
  return utf8_lossy(bytes);
}

std::vector<int32_t> Tokenizer::special_token_ids() const {
  std::vector<int32_t> ids;
  for (const auto& t : added_tokens())
    if (t.special) ids.push_back(t.id);
  return ids;
}

bool Tokenizer::is_special(int32_t id) const {
  for (const auto& t : added_tokens())
    if (t.special && t.id == id) return true;
  return false;
}

std::string StreamDecoder::push(int32_t id) {
  tokenizer_.append_token_bytes(id, pending_, skip_special_);
  std::string out;
  pending_.erase(0, append_lossy(pending_, out, false));
  return out;
}

std::string StreamDecoder::flush() {
  std::string out;
  append_lossy(pending_, out, true);
  pending_.clear();
  return out;
}

// ---------------------------------------------------------------------------------------------
// BpeTokenizer

struct BpeTokenizer::Impl {
  std::string path;
  std::string reading;  // the field load() is in, for the message of a value of the wrong JSON type
  bool nfc = false;
  bool ignore_merges = false;

  pcre2_code* regex = nullptr;
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> vocab;  // token -> id
  std::vector<std::string> id_to_token;                                         // "" = unused id
  std::vector<int8_t> id_is_added;                                              // 1 added, 2 special
  std::vector<AddedToken> added;
  AddedMatcher raw_matcher, normalized_matcher;

  std::array<char32_t, 256> byte_to_char{};
  std::unordered_map<char32_t, uint8_t> char_to_byte;
  std::array<int32_t, 256> byte_to_id{};  // id of each single-byte token

  struct Merge {
    int32_t rank;
    int32_t id;
  };
  std::unordered_map<uint64_t, Merge> merges;  // (left id << 32 | right id) -> rank, merged id

  // Words seen before; the same identifiers and indentation recur constantly in code.
  mutable std::mutex cache_mutex;
  mutable std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> cache;
  static constexpr size_t kCacheCapacity = 100000;
  static constexpr size_t kCacheMaxWordBytes = 256;

  ~Impl() { pcre2_code_free(regex); }

  [[noreturn]] void fail(const std::string& what) const { throw TokenizerError(path + ": " + what); }

  void load(const json& j);
  void load_normalizer(const json& n);
  void load_pre_tokenizer(const json& p);
  void compile(const std::string& pattern);
  void bpe(std::string_view word, std::vector<int32_t>& out) const;
  void encode_plain(std::string_view text, std::vector<int32_t>& out, pcre2_match_data* md) const;
};

void BpeTokenizer::Impl::load_normalizer(const json& n) {
  if (n.is_null()) return;
  const std::string type = n.value("type", "");
  if (type == "NFC") {
    nfc = true;
  } else if (type == "Sequence" && n.contains("normalizers") && n["normalizers"].is_array()) {
    for (const auto& sub : n["normalizers"]) load_normalizer(sub);
  } else {
    fail("unsupported normalizer type '" + type + "' (field normalizer)");
  }
}

void BpeTokenizer::Impl::load_pre_tokenizer(const json& p) {
  // Accepted shapes: Sequence[Split(Regex, Isolated), ByteLevel(use_regex=false)] (Qwen2,
  // Llama 3) or a lone ByteLevel(use_regex=true) (GPT-2).
  if (!p.is_object()) fail("missing field pre_tokenizer");
  std::vector<json> steps;
  if (p.value("type", "") == "Sequence") {
    if (!p.contains("pretokenizers") || !p["pretokenizers"].is_array())
      fail("missing field pre_tokenizer.pretokenizers");
    for (const auto& s : p["pretokenizers"]) steps.push_back(s);
  } else {
    steps.push_back(p);
  }
  std::string pattern;
  bool byte_level = false;
  for (const auto& s : steps) {
    const std::string type = s.value("type", "");
    if (type == "Split") {
      if (!pattern.empty()) fail("more than one Split pre-tokenizer is not supported");
      if (!s.contains("pattern") || !s["pattern"].contains("Regex"))
        fail("pre_tokenizer Split needs pattern.Regex (field pre_tokenizer.pattern)");
      if (s.value("behavior", "") != "Isolated" || s.value("invert", false))
        fail("unsupported Split behavior (field pre_tokenizer.behavior; only Isolated, invert false)");
      pattern = s["pattern"]["Regex"].get<std::string>();
    } else if (type == "ByteLevel") {
      if (s.value("add_prefix_space", false))
        fail("ByteLevel add_prefix_space=true is not supported (field pre_tokenizer.add_prefix_space)");
      if (s.value("use_regex", true)) {
        if (!pattern.empty()) fail("Split followed by ByteLevel(use_regex=true) is not supported");
        pattern = kGpt2Pattern;
      }
      byte_level = true;
    } else {
      fail("unsupported pre_tokenizer type '" + type + "' (field pre_tokenizer)");
    }
  }
  if (!byte_level) fail("pre_tokenizer has no ByteLevel step (field pre_tokenizer)");
  // A lone ByteLevel(use_regex=false) does not split at all (azr's byte-level tokenizers are
  // saved this way): each stretch between added tokens is one piece, regex stays null.
  if (!pattern.empty()) compile(pattern);
}

void BpeTokenizer::Impl::compile(const std::string& pattern) {
  const std::string rewritten = rewrite_pattern(pattern, path + ": pre_tokenizer regex");
  int err = 0;
  PCRE2_SIZE offset = 0;
  regex = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(rewritten.data()), rewritten.size(),
                        PCRE2_UTF | PCRE2_UCP, &err, &offset, nullptr);
  if (!regex) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    fail("pre_tokenizer regex does not compile at offset " + std::to_string(offset) + ": " +
         reinterpret_cast<const char*>(msg));
  }
  pcre2_jit_compile(regex, PCRE2_JIT_COMPLETE);  // optional: the interpreter is the fallback
}

void BpeTokenizer::Impl::load(const json& j) {
  if (!j.is_object()) fail("not a JSON object");
  if (!j.contains("model") || !j["model"].is_object()) fail("missing field model");
  reading = "model";
  const json& m = j["model"];
  const std::string type = m.value("type", "");
  if (type != "BPE") fail("unsupported model type '" + type + "' (field model.type; only BPE)");
  if (m.value("byte_fallback", false)) fail("unsupported model.byte_fallback=true");
  if (!m.value("continuing_subword_prefix", json()).is_null() &&
      !m["continuing_subword_prefix"].get<std::string>().empty())
    fail("unsupported model.continuing_subword_prefix");
  if (!m.value("end_of_word_suffix", json()).is_null() && !m["end_of_word_suffix"].get<std::string>().empty())
    fail("unsupported model.end_of_word_suffix");
  if (m.contains("dropout") && !m["dropout"].is_null() && m["dropout"].get<double>() != 0.0)
    fail("unsupported model.dropout (BPE dropout is not deterministic)");
  ignore_merges = m.value("ignore_merges", false);

  reading = "normalizer";
  load_normalizer(j.value("normalizer", json()));
  reading = "pre_tokenizer";
  load_pre_tokenizer(j.value("pre_tokenizer", json()));
  reading = "decoder";
  const json decoder = j.value("decoder", json());
  if (!decoder.is_null() && decoder.value("type", "") != "ByteLevel")
    fail("unsupported decoder type '" + decoder.value("type", "") + "' (field decoder; only ByteLevel)");

  byte_to_char = bytes_to_unicode();
  for (int b = 0; b < 256; ++b) char_to_byte[byte_to_char[b]] = static_cast<uint8_t>(b);

  if (!m.contains("vocab") || !m["vocab"].is_object()) fail("missing field model.vocab");
  vocab.reserve(m["vocab"].size() * 2);
  // Ids are read as written and held below 2n + 256 for n entries (a real tokenizer's are
  // dense): get<int32_t> wrapped 4294967393 to 97, and a 5 KB file with one id of 3*10^8 made a
  // 10 GB table.
  const json added_tokens = j.value("added_tokens", json::array());
  const int64_t id_bound = 2 * int64_t(m["vocab"].size() + added_tokens.size()) + 256;
  const auto read_id = [&](const json& v, const std::string& field) {
    const bool whole = v.is_number_integer();
    if (!whole || (v.is_number_unsigned() ? v.get<uint64_t>() >= uint64_t(id_bound)
                                          : v.get<int64_t>() < 0 || v.get<int64_t>() >= id_bound))
      fail("id " + v.dump() + " of " + field + " is not a whole number in [0, " + std::to_string(id_bound) +
           "), the bound for " + std::to_string(m["vocab"].size() + added_tokens.size()) + " tokens");
    return int32_t(v.get<int64_t>());
  };
  int32_t max_id = -1;
  std::vector<const std::string*> vocab_token_of_id(size_t(id_bound), nullptr);
  for (const auto& [tok, idj] : m["vocab"].items()) {
    const int32_t id = read_id(idj, "'" + tok + "' (field model.vocab)");
    if (const std::string* other = vocab_token_of_id[size_t(id)])
      fail("'" + *other + "' and '" + tok + "' have the same id " + std::to_string(id) + " (field model.vocab)");
    vocab_token_of_id[size_t(id)] = &vocab.emplace(tok, id).first->first;
    max_id = std::max(max_id, id);
  }
  added.clear();
  for (const auto& a : added_tokens) {
    reading = "added_tokens[" + std::to_string(added.size()) + "]";
    AddedToken t;
    t.id = read_id(a.at("id"), "field added_tokens");
    t.content = a.at("content").get<std::string>();
    t.special = a.value("special", false);
    t.lstrip = a.value("lstrip", false);
    t.rstrip = a.value("rstrip", false);
    t.normalized = a.value("normalized", false);
    t.single_word = a.value("single_word", false);
    max_id = std::max(max_id, t.id);
    added.push_back(t);
  }
  id_to_token.assign(static_cast<size_t>(max_id + 1), "");
  id_is_added.assign(static_cast<size_t>(max_id + 1), 0);
  for (const auto& [tok, id] : vocab) id_to_token[id] = tok;
  for (auto& t : added) {
    id_to_token[t.id] = t.content;
    id_is_added[t.id] = t.special ? 2 : 1;
    vocab.emplace(t.content, t.id);  // token_to_id finds added tokens too
    if (t.normalized) {
      // Normalized tokens are matched in normalized text, so their content is normalized too.
      if (nfc) t.content = nfc_like_rust(t.content);
      normalized_matcher.add(t);
    } else {
      raw_matcher.add(t);
    }
  }

  for (int b = 0; b < 256; ++b) {
    std::string s;
    append_cp(s, byte_to_char[b]);
    const auto it = vocab.find(s);
    if (it == vocab.end()) fail("model.vocab lacks the byte-level token for byte " + std::to_string(b));
    byte_to_id[b] = it->second;
  }

  if (!m.contains("merges") || !m["merges"].is_array()) fail("missing field model.merges");
  const json& mj = m["merges"];
  merges.reserve(mj.size() * 2);
  for (size_t r = 0; r < mj.size(); ++r) {
    reading = "model.merges[" + std::to_string(r) + "]";
    std::string left, right;
    if (mj[r].is_string()) {  // "a b" (Qwen2.5); byte-level tokens never contain a real space
      const auto& s = mj[r].get_ref<const std::string&>();
      const auto sp = s.find(' ');
      if (sp == std::string::npos) fail("merge " + std::to_string(r) + " has no space (field model.merges)");
      left = s.substr(0, sp);
      right = s.substr(sp + 1);
    } else if (mj[r].is_array() && mj[r].size() == 2) {  // ["a", "b"] (Qwen3)
      left = mj[r][0].get<std::string>();
      right = mj[r][1].get<std::string>();
    } else {
      fail("merge " + std::to_string(r) + " is neither \"a b\" nor [a, b] (field model.merges)");
    }
    const auto a = vocab.find(left), b = vocab.find(right), ab = vocab.find(left + right);
    if (a == vocab.end() || b == vocab.end() || ab == vocab.end())
      fail("merge " + std::to_string(r) + " uses a token missing from model.vocab");
    const uint64_t key = (static_cast<uint64_t>(a->second) << 32) | static_cast<uint32_t>(b->second);
    merges.emplace(key, Merge{static_cast<int32_t>(r), ab->second});  // first (lowest) rank wins
  }
}

// BPE over one pre-token (raw bytes): start from single-byte tokens and repeatedly merge the
// adjacent pair of lowest rank, leftmost first on ties, as HF's Word::merge_all does.
void BpeTokenizer::Impl::bpe(std::string_view word, std::vector<int32_t>& out) const {
  if (word.size() == 1) {
    out.push_back(byte_to_id[static_cast<unsigned char>(word[0])]);
    return;
  }
  {
    std::lock_guard lock(cache_mutex);
    if (const auto it = cache.find(word); it != cache.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> result;
  if (ignore_merges) {  // a word already in the vocabulary is taken whole
    std::string mapped;
    for (char c : word) append_cp(mapped, byte_to_char[static_cast<unsigned char>(c)]);
    if (const auto it = vocab.find(mapped); it != vocab.end()) result.push_back(it->second);
  }
  if (result.empty()) {
    struct Sym {
      int32_t id, prev, next;
    };
    std::vector<Sym> syms(word.size());
    for (size_t i = 0; i < word.size(); ++i)
      syms[i] = {byte_to_id[static_cast<unsigned char>(word[i])], static_cast<int32_t>(i) - 1,
                 i + 1 < word.size() ? static_cast<int32_t>(i + 1) : -1};
    struct Cand {
      int32_t rank, pos, left, right, merged;
      bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
    };
    std::priority_queue<Cand, std::vector<Cand>, std::greater<>> heap;
    auto push = [&](int32_t pos) {
      if (pos < 0 || syms[pos].next < 0) return;
      const int32_t l = syms[pos].id, r = syms[syms[pos].next].id;
      const auto it = merges.find((static_cast<uint64_t>(l) << 32) | static_cast<uint32_t>(r));
      if (it != merges.end()) heap.push({it->second.rank, pos, l, r, it->second.id});
    };
    for (size_t i = 0; i + 1 < word.size(); ++i) push(static_cast<int32_t>(i));
    while (!heap.empty()) {
      const Cand c = heap.top();
      heap.pop();
      Sym& s = syms[c.pos];
      // Stale entry: one side was merged away or changed since it was queued.
      if (s.id != c.left || s.next < 0 || syms[s.next].id != c.right) continue;
      const int32_t gone = s.next;
      s.id = c.merged;
      s.next = syms[gone].next;
      if (s.next >= 0) syms[s.next].prev = c.pos;
      syms[gone].id = -1;
      push(s.prev);
      push(c.pos);
    }
    for (int32_t i = 0; i >= 0; i = syms[i].next) result.push_back(syms[i].id);
  }
  out.insert(out.end(), result.begin(), result.end());
  std::lock_guard lock(cache_mutex);
  // Words of 256 bytes and more stay out, as in HF tokenizers: a long run of indentation or '='
  // is rare, and kept it would hold its whole text for the rest of the run.
  if (word.size() < kCacheMaxWordBytes && cache.size() < kCacheCapacity)
    cache.emplace(std::string(word), std::move(result));
}

// Pre-tokenizes one stretch of normalized text with the regex and BPEs each piece. With the
// Isolated behaviour, text between matches is a piece of its own.
void BpeTokenizer::Impl::encode_plain(std::string_view text, std::vector<int32_t>& out,
                                      pcre2_match_data* md) const {
  if (!regex) {  // no pre-tokenizer split
    if (!text.empty()) bpe(text, out);
    return;
  }
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0;     // start of the text not yet emitted
  size_t search = 0;  // where the next match attempt starts
  while (search < text.size()) {
    const int rc = pcre2_match(regex, subject, text.size(), search, PCRE2_NO_UTF_CHECK, md, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(rc, msg, sizeof msg);
      throw TokenizerError(path + ": pre_tokenizer regex failed: " + reinterpret_cast<const char*>(msg));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    const size_t start = ov[0], end = ov[1];
    if (end == start) {  // empty match (not possible with the HF patterns): retry one char on
      search = start;
      decode_cp(text, search);
      continue;
    }
    if (start > pos) bpe(text.substr(pos, start - pos), out);
    bpe(text.substr(start, end - start), out);
    pos = search = end;
  }
  if (pos < text.size()) bpe(text.substr(pos), out);
}

BpeTokenizer::BpeTokenizer(const std::string& path) : impl_(std::make_unique<Impl>()) {
  impl_->path = path;
  constexpr size_t kMaxTokenizerBytes = size_t(256) << 20;  // Qwen2.5's is 7 MB
  std::string text;
  if (const std::string why = read_file_at_most(path, kMaxTokenizerBytes, text); !why.empty())
    throw TokenizerError(path + ": " + (why.starts_with("cannot open") ? "cannot open tokenizer file" + why.substr(11)
                                                                       : why));
  json j;
  try {
    j = parse_json_bounded(text);
  } catch (const json::exception& e) {
    throw TokenizerError(path + ": not valid JSON: " + json_error_text(e));
  } catch (const JsonTooDeep& e) {
    throw TokenizerError(path + ": " + e.what());
  }
  try {
    impl_->load(j);
  } catch (const json::exception& e) {  // a field of the wrong JSON type
    throw TokenizerError(path + ": malformed field " + impl_->reading + ": " + json_error_text(e));
  }
}

BpeTokenizer::~BpeTokenizer() = default;

std::vector<int32_t> BpeTokenizer::encode(std::string_view utf8) const {
  const Impl& m = *impl_;
  if (valid_utf8_prefix(utf8) != utf8.size()) throw TokenizerError("encode: input is not valid UTF-8");
  std::vector<int32_t> out;
  out.reserve(utf8.size() / 3 + 4);
  pcre2_match_data* md = m.regex ? pcre2_match_data_create_from_pattern(m.regex, nullptr) : nullptr;
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> md_guard(md, &pcre2_match_data_free);

  std::vector<AddedMatcher::Piece> raw, norm;
  m.raw_matcher.split(utf8, raw);
  for (const auto& piece : raw) {
    if (piece.id >= 0) {
      out.push_back(piece.id);
      continue;
    }
    // NFC per stretch between raw added tokens, as HF normalizes each split separately.
    // ASCII is always NFC, so most code skips utf8proc entirely.
    std::string normalized;
    std::string_view text = piece.text;
    if (m.nfc && std::any_of(text.begin(), text.end(), [](char c) { return c & 0x80; })) {
      normalized = nfc_like_rust(text);
      text = normalized;
    }
    norm.clear();
    if (m.normalized_matcher.empty()) {
      norm.push_back({text, -1});
    } else {
      m.normalized_matcher.split(text, norm);
    }
    for (const auto& p : norm) {
      if (p.id >= 0) {
        out.push_back(p.id);
      } else {
        m.encode_plain(p.text, out, md);
      }
    }
  }
  return out;
}

void BpeTokenizer::append_token_bytes(int32_t id, std::string& out, bool skip_special) const {
  const Impl& m = *impl_;
  if (id < 0 || static_cast<size_t>(id) >= m.id_to_token.size() ||
      (m.id_to_token[id].empty() && m.id_is_added[id] == 0))
    throw TokenizerError("decode: id " + std::to_string(id) + " is not in the vocabulary");
  const std::string& tok = m.id_to_token[id];
  if (m.id_is_added[id]) {  // added tokens decode to their content, byte for byte
    if (!(skip_special && m.id_is_added[id] == 2)) out += tok;
    return;
  }
  // Byte-level: every char of a model token maps back to one byte.
  for (size_t i = 0; i < tok.size();) {
    const char32_t c = decode_cp(tok, i);
    const auto it = m.char_to_byte.find(c);
    if (it != m.char_to_byte.end()) {
      out += static_cast<char>(it->second);
    } else {
      append_cp(out, c);  // not a byte-level char (never in a byte-level vocab): keep as text
    }
  }
}

std::optional<int32_t> BpeTokenizer::token_to_id(std::string_view token) const {
  const auto it = impl_->vocab.find(token);
  if (it == impl_->vocab.end()) return std::nullopt;
  return it->second;
}

std::optional<std::string_view> BpeTokenizer::id_to_token(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= impl_->id_to_token.size()) return std::nullopt;
  if (impl_->id_to_token[id].empty()) return std::nullopt;
  return impl_->id_to_token[id];
}

size_t BpeTokenizer::vocab_size() const { return impl_->id_to_token.size(); }

const std::vector<AddedToken>& BpeTokenizer::added_tokens() const { return impl_->added; }

}  // namespace azr::model
