#pragma once
// A minimal reader of the JSON in EvalPlus files that writes Python literal source as it goes.
// EvalPlus files hold `Infinity` (not JSON) and integers beyond 64 bits, which nlohmann would
// reject or round: the cursor walks the raw text, so callers can keep a field's span and
// translate argument lists to Python source directly.
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <string_view>

namespace azr::eval::detail {

struct JsonCursor {
  std::string_view s;
  size_t i = 0;
  void ws() {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r')) ++i;
  }
  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error("json: " + what + " at offset " + std::to_string(i));
  }
  char peek() {
    ws();
    if (i >= s.size()) fail("unexpected end");
    return s[i];
  }
  void expect(char c) {
    if (peek() != c) fail(std::string("expected '") + c + "'");
    ++i;
  }
  static void put_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
      out += char(cp);
    } else if (cp < 0x800) {
      out += char(0xC0 | (cp >> 6));
      out += char(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += char(0xE0 | (cp >> 12));
      out += char(0x80 | ((cp >> 6) & 0x3F));
      out += char(0x80 | (cp & 0x3F));
    } else {
      out += char(0xF0 | (cp >> 18));
      out += char(0x80 | ((cp >> 12) & 0x3F));
      out += char(0x80 | ((cp >> 6) & 0x3F));
      out += char(0x80 | (cp & 0x3F));
    }
  }
  uint32_t hex4() {
    if (i + 4 > s.size()) fail("bad \\u escape");
    uint32_t v = 0;
    for (int k = 0; k < 4; ++k) {
      char c = s[i++];
      v <<= 4;
      if (c >= '0' && c <= '9') v |= c - '0';
      else if (c >= 'a' && c <= 'f') v |= c - 'a' + 10;
      else if (c >= 'A' && c <= 'F') v |= c - 'A' + 10;
      else fail("bad \\u escape");
    }
    return v;
  }
  // Appends a Python string literal for the JSON string at the cursor.
  void string_to_python(std::string& out) {
    expect('"');
    out += '"';
    auto esc = [&](uint32_t cp) {
      char buf[16];
      if (cp < 0x100) snprintf(buf, sizeof buf, "\\x%02x", cp);
      else snprintf(buf, sizeof buf, "\\u%04x", cp);
      out += buf;
    };
    while (true) {
      if (i >= s.size()) fail("unterminated string");
      unsigned char c = static_cast<unsigned char>(s[i++]);
      if (c == '"') break;
      if (c != '\\') {
        if (c < 0x20 || c == 0x7F) esc(c);
        else out += char(c);  // UTF-8 bytes pass through (Python source is UTF-8)
        continue;
      }
      if (i >= s.size()) fail("unterminated escape");
      char e = s[i++];
      switch (e) {
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        case '/': out += '/'; break;
        case 'b': out += "\\b"; break;
        case 'f': out += "\\f"; break;
        case 'n': out += "\\n"; break;
        case 'r': out += "\\r"; break;
        case 't': out += "\\t"; break;
        case 'u': {
          uint32_t cp = hex4();
          if (cp >= 0xD800 && cp < 0xDC00 && i + 6 <= s.size() && s[i] == '\\' && s[i + 1] == 'u') {
            size_t save = i;
            i += 2;
            uint32_t lo = hex4();
            if (lo >= 0xDC00 && lo < 0xE000) {
              cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            } else {
              i = save;
            }
          }
          if (cp >= 0xD800 && cp < 0xE000) esc(cp);  // lone surrogate: keep it as an escape
          else if (cp < 0x20 || cp == 0x7F) esc(cp);
          else if (cp == '"') out += "\\\"";
          else if (cp == '\\') out += "\\\\";
          else put_utf8(out, cp);
          break;
        }
        default: fail("bad escape");
      }
    }
    out += '"';
  }
  bool word(std::string_view w) {
    if (s.substr(i, w.size()) == w) {
      i += w.size();
      return true;
    }
    return false;
  }
  // Appends the value at the cursor as Python literal source.
  void value_to_python(std::string& out, bool* needs_expression) {
    char c = peek();
    if (c == '"') return string_to_python(out);
    if (c == '[' || c == '{') {
      char close = c == '[' ? ']' : '}';
      ++i;
      out += c;
      bool first = true;
      while (peek() != close) {
        if (!first) {
          expect(',');
          out += ", ";
        }
        first = false;
        if (c == '{') {
          string_to_python(out);
          expect(':');
          out += ": ";
        }
        value_to_python(out, needs_expression);
      }
      ++i;
      out += close;
      return;
    }
    if (word("true")) return void(out += "True");
    if (word("false")) return void(out += "False");
    if (word("null")) return void(out += "None");
    if (word("Infinity")) return void(out += "1e999");
    if (word("-Infinity")) return void(out += "-1e999");
    if (word("NaN")) {
      if (needs_expression) *needs_expression = true;
      return void(out += "float('nan')");
    }
    size_t start = i;
    if (i < s.size() && s[i] == '-') ++i;
    while (i < s.size() && (isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.' || s[i] == 'e' || s[i] == 'E' ||
                            s[i] == '+' || s[i] == '-'))
      ++i;
    if (i == start) fail("unexpected character");
    out.append(s.substr(start, i - start));
  }
  // Skips one value, returning its raw text.
  std::string_view raw_value() {
    peek();
    size_t start = i;
    std::string sink;
    value_to_python(sink, nullptr);
    return s.substr(start, i - start);
  }
};

}  // namespace azr::eval::detail
