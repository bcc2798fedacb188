// python_repr: Python 3.11's repr() of a decoded Value, byte for byte. Each function below
// names the CPython routine whose output it reproduces.
#include <algorithm>
#include <bit>
#include <charconv>
#include <cmath>

#include "sandbox/value.h"

namespace azr::sandbox {
namespace {

struct CodeRange {
  uint32_t first, last;
};

// Code points for which CPython's Py_UNICODE_ISPRINTABLE is false, generated at build time from
// the embedded interpreter by gen_unicode_printable.py (sorted, disjoint, inclusive).
constexpr CodeRange kNonPrintable[] = {
#include "azr/unicode_printable.inc"
};

bool is_printable(uint32_t cp) {
  // The first range starting after cp; cp is non-printable iff the range before it covers cp.
  const auto* after = std::upper_bound(std::begin(kNonPrintable), std::end(kNonPrintable), cp,
                                       [](uint32_t c, const CodeRange& r) { return c < r.first; });
  return after == std::begin(kNonPrintable) || std::prev(after)->last < cp;
}

constexpr char kHexDigits[] = "0123456789abcdef";  // CPython's Py_hexdigits: lower case

// Appends with a hard size cap, so a huge value fails as soon as its repr passes max_len instead
// of building the whole text first.
class Out {
 public:
  explicit Out(size_t max_len) : max_len_(max_len) {}

  void put(char c) {
    if (text_.size() >= max_len_) overflow();
    text_.push_back(c);
  }
  void put(std::string_view s) {
    if (s.size() > max_len_ - text_.size()) overflow();
    text_.append(s);
  }
  void put_hex(uint32_t v, int digits) {
    char buf[8];
    for (int k = digits - 1; k >= 0; --k, v >>= 4) buf[k] = kHexDigits[v & 15];
    put(std::string_view(buf, static_cast<size_t>(digits)));
  }
  std::string take() { return std::move(text_); }

 private:
  [[noreturn]] void overflow() const {
    throw ReprError("repr would exceed max_len of " + std::to_string(max_len_) + " bytes");
  }

  std::string text_;
  size_t max_len_;
};

// Python refuses to print ints of more than sys.get_int_max_str_digits() (4300) digits; the
// sign does not count.
constexpr size_t kMaxStrDigits = 4300;
constexpr char kTooManyDigits[] =
    "Exceeds the limit (4300 digits) for integer string conversion; "
    "use sys.set_int_max_str_digits() to increase the limit";

void put_int(Out& out, const BigInt& n) {
  // More than 14300 bits means >= 2**14300 > 10**4304: refuse without converting, so a huge int
  // costs nothing. Below that, conversion is cheap and the digit count is checked exactly.
  const size_t size = n.limbs.size();  // normalized: Value::integer strips leading zeros
  const size_t bits =
      size == 0 ? 0 : 32 * (size - 1) + static_cast<size_t>(std::bit_width(n.limbs.back()));
  if (bits > 14300) throw ReprError(kTooManyDigits);
  const std::string digits = n.to_decimal();
  if (digits.size() - (n.negative ? 1 : 0) > kMaxStrDigits) throw ReprError(kTooManyDigits);
  out.put(digits);
}

// PyOS_double_to_string(x, 'r', 0, flags): the shortest digits that round-trip, positional when
// the scientific exponent is in [-4, 16), else d.ddde+XX (sign and at least two exponent digits).
// float.__repr__ adds ".0" to integral positional output (add_dot_0); complex parts do not, and
// the imaginary part gets a forced sign (always_sign).
void put_double(Out& out, double x, bool add_dot_0, bool always_sign) {
  if (std::isnan(x)) {  // the sign of a NaN is never shown
    out.put(always_sign ? "+nan" : "nan");
    return;
  }
  if (std::signbit(x)) {
    out.put('-');
  } else if (always_sign) {
    out.put('+');
  }
  if (std::isinf(x)) {
    out.put("inf");
    return;
  }
  // std::to_chars without a precision gives the shortest round-trip digits, picking the closest
  // candidate like David Gay's dtoa mode 0, which CPython uses. Scientific form exposes them.
  char buf[64];
  const auto result =
      std::to_chars(buf, buf + sizeof buf, std::fabs(x), std::chars_format::scientific);
  const std::string_view sci(buf, static_cast<size_t>(result.ptr - buf));  // "d.ddde+XX"
  const size_t e_pos = sci.find('e');
  std::string digits;
  for (const char c : sci.substr(0, e_pos)) {
    if (c != '.') digits.push_back(c);
  }
  int exp10 = 0;
  const std::string_view exp_text = sci.substr(e_pos + 1);
  std::from_chars(exp_text.data() + (exp_text[0] == '+' ? 1 : 0), exp_text.data() + exp_text.size(),
                  exp10);
  const int ndigits = static_cast<int>(digits.size());

  if (exp10 < -4 || exp10 >= 16) {
    out.put(digits[0]);
    if (ndigits > 1) {
      out.put('.');
      out.put(std::string_view(digits).substr(1));
    }
    out.put(exp10 < 0 ? "e-" : "e+");
    const std::string exp_digits = std::to_string(std::abs(exp10));
    if (exp_digits.size() < 2) out.put('0');
    out.put(exp_digits);
    return;
  }
  const int decpt = exp10 + 1;  // digits before the decimal point
  if (decpt <= 0) {
    out.put("0.");
    out.put(std::string(static_cast<size_t>(-decpt), '0'));
    out.put(digits);
  } else if (decpt >= ndigits) {
    out.put(digits);
    out.put(std::string(static_cast<size_t>(decpt - ndigits), '0'));
    if (add_dot_0) out.put(".0");
  } else {
    out.put(std::string_view(digits).substr(0, static_cast<size_t>(decpt)));
    out.put('.');
    out.put(std::string_view(digits).substr(static_cast<size_t>(decpt)));
  }
}

// complex_repr: the real part is left out only when it is +0.0 (not -0.0).
void put_complex(Out& out, double real, double imag) {
  if (real == 0 && !std::signbit(real)) {
    put_double(out, imag, false, false);
    out.put('j');
    return;
  }
  out.put('(');
  put_double(out, real, false, false);
  put_double(out, imag, false, true);
  out.put("j)");
}

// Decodes one code point from valid surrogatepass UTF-8 (Value::str guarantees validity).
uint32_t next_code_point(std::string_view s, size_t& i) {
  const auto byte = [&](size_t k) {
    return static_cast<uint32_t>(static_cast<unsigned char>(s[k]));
  };
  const uint32_t lead = byte(i);
  if (lead < 0x80) {
    i += 1;
    return lead;
  }
  if (lead < 0xE0) {
    const uint32_t cp = ((lead & 0x1F) << 6) | (byte(i + 1) & 0x3F);
    i += 2;
    return cp;
  }
  if (lead < 0xF0) {
    const uint32_t cp = ((lead & 0x0F) << 12) | ((byte(i + 1) & 0x3F) << 6) | (byte(i + 2) & 0x3F);
    i += 3;
    return cp;
  }
  const uint32_t cp = ((lead & 0x07) << 18) | ((byte(i + 1) & 0x3F) << 12) |
                      ((byte(i + 2) & 0x3F) << 6) | (byte(i + 3) & 0x3F);
  i += 4;
  return cp;
}

// Both str and bytes prefer single quotes, switching to double quotes only when the text holds
// a ' and no ". (bytearray's own scan reaches the same choice.)
char choose_quote(std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  return has_single && !has_double ? '"' : '\'';
}

// The escapes shared by str and bytes repr; false if c needs other treatment.
bool put_common_escape(Out& out, uint32_t c) {
  switch (c) {
    case '\\': out.put("\\\\"); return true;
    case '\t': out.put("\\t"); return true;
    case '\n': out.put("\\n"); return true;
    case '\r': out.put("\\r"); return true;
    default: return false;
  }
}

// unicode_repr.
void put_str(Out& out, std::string_view s) {
  const char quote = choose_quote(s);
  out.put(quote);
  size_t i = 0;
  while (i < s.size()) {
    const size_t start = i;
    const uint32_t c = next_code_point(s, i);
    if (c == static_cast<uint32_t>(quote)) {
      out.put('\\');
      out.put(quote);
    } else if (put_common_escape(out, c)) {
    } else if (c < 0x20 || c == 0x7F) {
      out.put("\\x");
      out.put_hex(c, 2);
    } else if (c < 0x7F || is_printable(c)) {
      out.put(s.substr(start, i - start));  // kept as is, in its UTF-8 form
    } else if (c < 0x100) {
      out.put("\\x");
      out.put_hex(c, 2);
    } else if (c < 0x10000) {
      out.put("\\u");
      out.put_hex(c, 4);
    } else {
      out.put("\\U");
      out.put_hex(c, 8);
    }
  }
  out.put(quote);
}

// The b'...' part of bytes_repr (PyBytes_Repr with smartquotes) and bytearray_repr. One quirk
// is CPython's: bytearray_repr escapes every ' even inside double quotes, so
// repr(bytearray(b"'")) is bytearray(b"\'") while repr(b"'") is b"'".
void put_bytes(Out& out, std::string_view s, bool escape_every_single_quote) {
  const char quote = choose_quote(s);
  out.put('b');
  out.put(quote);
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == quote || (escape_every_single_quote && c == '\'')) {
      out.put('\\');
      out.put(ch);
    } else if (put_common_escape(out, c)) {
    } else if (c < 0x20 || c >= 0x7F) {
      out.put("\\x");
      out.put_hex(c, 2);
    } else {
      out.put(ch);
    }
  }
  out.put(quote);
}

void put_value(Out& out, const Value& v);

void put_items(Out& out, const Value::Items& items) {
  for (size_t k = 0; k < items.size(); ++k) {
    if (k > 0) out.put(", ");
    put_value(out, items[k]);
  }
}

void put_value(Out& out, const Value& v) {
  switch (v.kind()) {
    case ValueKind::None: out.put("None"); return;
    case ValueKind::Ellipsis: out.put("Ellipsis"); return;
    case ValueKind::Bool: out.put(v.as_bool() ? "True" : "False"); return;
    case ValueKind::Int:
      if (const auto small = v.as_small_int()) {
        char digits[24];  // at most 20 characters: no digit limit to check
        const auto end = std::to_chars(digits, digits + sizeof digits, *small).ptr;
        out.put(std::string_view(digits, static_cast<size_t>(end - digits)));
      } else {
        put_int(out, v.as_int());
      }
      return;
    case ValueKind::Float: put_double(out, v.as_float(), true, false); return;
    case ValueKind::Complex: put_complex(out, v.real(), v.imag()); return;
    case ValueKind::Str: put_str(out, v.as_bytes()); return;
    case ValueKind::Bytes: put_bytes(out, v.as_bytes(), false); return;
    case ValueKind::ByteArray:
      out.put("bytearray(");
      put_bytes(out, v.as_bytes(), true);
      out.put(')');
      return;
    case ValueKind::Tuple:
      out.put('(');
      put_items(out, v.items());
      out.put(v.items().size() == 1 ? ",)" : ")");  // (1,) is a tuple, (1) is not
      return;
    case ValueKind::List:
      out.put('[');
      put_items(out, v.items());
      out.put(']');
      return;
    case ValueKind::Set:
      if (v.items().empty()) {
        out.put("set()");  // {} would be a dict
        return;
      }
      out.put('{');
      put_items(out, v.items());
      out.put('}');
      return;
    case ValueKind::FrozenSet:
      if (v.items().empty()) {
        out.put("frozenset()");
        return;
      }
      out.put("frozenset({");
      put_items(out, v.items());
      out.put("})");
      return;
    case ValueKind::Dict: {
      out.put('{');
      bool first = true;
      for (const auto& [key, val] : v.pairs()) {
        if (!first) out.put(", ");
        first = false;
        put_value(out, key);
        out.put(": ");
        put_value(out, val);
      }
      out.put('}');
      return;
    }
  }
}

}  // namespace

std::string python_repr(const Value& v, size_t max_len) {
  Out out(max_len);
  put_value(out, v);
  return out.take();
}

}  // namespace azr::sandbox
