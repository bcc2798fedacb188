// Value model, BigInt, the value wire format (decode/encode), Python equality and hashing.
// python_repr lives in value_repr.cpp.
#include "sandbox/value.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <unordered_map>

namespace azr::sandbox {
namespace {

const char* kind_name(ValueKind k) {
  switch (k) {
    case ValueKind::None: return "None";
    case ValueKind::Bool: return "bool";
    case ValueKind::Int: return "int";
    case ValueKind::Float: return "float";
    case ValueKind::Complex: return "complex";
    case ValueKind::Str: return "str";
    case ValueKind::Bytes: return "bytes";
    case ValueKind::ByteArray: return "bytearray";
    case ValueKind::Tuple: return "tuple";
    case ValueKind::List: return "list";
    case ValueKind::Dict: return "dict";
    case ValueKind::Set: return "set";
    case ValueKind::FrozenSet: return "frozenset";
    case ValueKind::Ellipsis: return "ellipsis";
  }
  return "?";
}

[[noreturn]] void wrong_kind(const char* accessor, ValueKind k) {
  throw std::logic_error(std::string("Value::") + accessor + " called on a " + kind_name(k));
}

// Number of limbs without leading zeros; BigInt is a public struct, so tolerate unnormalized
// values wherever that costs nothing.
size_t significant_limbs(const BigInt& n) {
  size_t size = n.limbs.size();
  while (size > 0 && n.limbs[size - 1] == 0) --size;
  return size;
}

BigInt normalized(BigInt n) {
  n.limbs.resize(significant_limbs(n));
  if (n.limbs.empty()) n.negative = false;
  return n;
}

// Where a str payload stops being valid "surrogatepass" UTF-8: the code points U+0000..U+10FFFF
// (surrogates included) in their shortest encoding. Returns the offset of the first bad byte and
// why, or nullopt when the whole payload is valid.
struct Utf8Problem {
  size_t offset;
  const char* reason;
};

std::optional<Utf8Problem> find_utf8_problem(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    const unsigned char lead = p[i];
    if (lead < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (lead >= 0xC2 && lead <= 0xDF) {
      len = 2;
    } else if (lead >= 0xE0 && lead <= 0xEF) {
      len = 3;
      if (lead == 0xE0) lo = 0xA0;  // below is an overlong 2-byte form; ED (surrogates) is allowed
    } else if (lead >= 0xF0 && lead <= 0xF4) {
      len = 4;
      if (lead == 0xF0) lo = 0x90;  // overlong
      if (lead == 0xF4) hi = 0x8F;  // above U+10FFFF
    } else if (lead >= 0x80 && lead <= 0xBF) {
      return Utf8Problem{i, "unexpected continuation byte"};
    } else if (lead == 0xC0 || lead == 0xC1) {
      return Utf8Problem{i, "overlong encoding"};
    } else {
      return Utf8Problem{i, "byte that never appears in UTF-8"};
    }
    if (i + len > n) return Utf8Problem{i, "sequence cut off by the end of the str"};
    if (p[i + 1] < lo || p[i + 1] > hi) {
      const bool range_error = p[i + 1] >= 0x80 && p[i + 1] <= 0xBF;
      return Utf8Problem{
          i + 1, range_error ? (lead == 0xF4 ? "code point above U+10FFFF" : "overlong encoding")
                             : "missing continuation byte"};
    }
    for (size_t k = 2; k < len; ++k) {
      if ((p[i + k] & 0xC0) != 0x80) return Utf8Problem{i + k, "missing continuation byte"};
    }
    i += len;
  }
  return std::nullopt;
}

// ---------------------------------------------------------------------------------------------
// Decoding

std::string plural(size_t n, const char* noun) {
  return std::to_string(n) + " " + noun + (n == 1 ? "" : "s");
}

class Decoder {
 public:
  Decoder(std::string_view wire, int max_depth) : wire_(wire), max_depth_(max_depth) {}

  size_t position() const { return pos_; }

  // `depth` is how many containers enclose the value being decoded.
  Value value(int depth) {
    const size_t at = pos_;
    const char tag = take(1, "value tag")[0];
    switch (tag) {
      case 'N': return Value::none();
      case 'T': return Value::boolean(true);
      case 'F': return Value::boolean(false);
      case '.': return Value::ellipsis();
      case 'i': return Value::integer(static_cast<int64_t>(fixed<uint64_t>("int64 payload")));
      case 'I': return big_int();
      case 'f': return Value::floating(std::bit_cast<double>(fixed<uint64_t>("float payload")));
      case 'c': {
        const double real = std::bit_cast<double>(fixed<uint64_t>("complex real part"));
        const double imag = std::bit_cast<double>(fixed<uint64_t>("complex imaginary part"));
        return Value::complex(real, imag);
      }
      case 's': {
        const uint32_t n = fixed<uint32_t>("str length");
        const size_t start = pos_;
        const std::string_view text = take(n, "str payload");
        if (auto problem = find_utf8_problem(text)) {
          fail(start + problem->offset, std::string("invalid UTF-8 in str: ") + problem->reason);
        }
        return Value::str(std::string(text));
      }
      case 'b':
        return Value::bytes(std::string(take(fixed<uint32_t>("bytes length"), "bytes payload")));
      case 'a':
        return Value::bytearray(
            std::string(take(fixed<uint32_t>("bytearray length"), "bytearray payload")));
      case 't': return Value::tuple(items(at, depth, "tuple"));
      case 'l': return Value::list(items(at, depth, "list"));
      case 'S': return Value::set(items(at, depth, "set"));
      case 'z': return Value::frozenset(items(at, depth, "frozenset"));
      case 'd': {
        enter(at, depth);
        const uint32_t n = fixed<uint32_t>("dict length");
        Value::Pairs pairs;
        // A hostile length must not reserve gigabytes: every entry takes at least two bytes.
        pairs.reserve(std::min<size_t>(n, remaining() / 2));
        for (uint32_t k = 0; k < n; ++k) {
          Value key = value(depth + 1);
          Value val = value(depth + 1);
          pairs.emplace_back(std::move(key), std::move(val));
        }
        return Value::dict(std::move(pairs));
      }
      default: {
        static const char kHex[] = "0123456789abcdef";
        const auto byte = static_cast<unsigned char>(tag);
        std::string shown = "0x";
        shown += kHex[byte >> 4];
        shown += kHex[byte & 15];
        if (byte >= 0x20 && byte < 0x7f) shown += std::string(" '") + tag + "'";
        fail(at, "unknown tag " + shown);
      }
    }
  }

 private:
  [[noreturn]] void fail(size_t at, const std::string& what) const {
    throw DecodeError("value wire, byte " + std::to_string(at) + ": " + what);
  }

  size_t remaining() const { return wire_.size() - pos_; }

  std::string_view take(size_t n, const char* what) {
    if (n > remaining()) {
      fail(pos_, std::string("truncated input: ") + what + " needs " + plural(n, "byte") +
                     ", only " + std::to_string(remaining()) + " left");
    }
    const std::string_view out = wire_.substr(pos_, n);
    pos_ += n;
    return out;
  }

  template <class T>
  T fixed(const char* what) {
    const std::string_view raw = take(sizeof(T), what);
    T v = 0;
    for (size_t k = sizeof(T); k-- > 0;) {
      v = static_cast<T>((v << 8) | static_cast<unsigned char>(raw[k]));  // little-endian
    }
    return v;
  }

  void enter(size_t at, int depth) const {
    if (depth + 1 > max_depth_) {
      fail(at, "container nesting deeper than max_depth " + std::to_string(max_depth_));
    }
  }

  Value::Items items(size_t at, int depth, const char* kind) {
    enter(at, depth);
    const uint32_t n = fixed<uint32_t>((std::string(kind) + " length").c_str());
    Value::Items out;
    out.reserve(std::min<size_t>(n, remaining()));  // every element takes at least one byte
    for (uint32_t k = 0; k < n; ++k) out.push_back(value(depth + 1));
    return out;
  }

  Value big_int() {
    const size_t sign_at = pos_;
    const auto sign = static_cast<unsigned char>(take(1, "int sign")[0]);
    if (sign > 1) fail(sign_at, "int sign byte must be 0 or 1, got " + std::to_string(sign));
    const uint32_t n = fixed<uint32_t>("int magnitude length");
    const std::string_view mag = take(n, "int magnitude");
    BigInt v;
    v.negative = sign == 1;
    v.limbs.assign((mag.size() + 3) / 4, 0);
    for (size_t k = 0; k < mag.size(); ++k) {
      v.limbs[k / 4] |= static_cast<uint32_t>(static_cast<unsigned char>(mag[k])) << (8 * (k % 4));
    }
    return Value::integer(std::move(v));  // normalizes leading zeros and "-0"
  }

  std::string_view wire_;
  int max_depth_;
  size_t pos_ = 0;
};

// ---------------------------------------------------------------------------------------------
// Encoding

void put_u32(std::string& out, size_t n, const char* what) {
  if (n > std::numeric_limits<uint32_t>::max()) {
    throw std::length_error(std::string("value wire: ") + what + " does not fit in u32");
  }
  for (int k = 0; k < 4; ++k) out.push_back(static_cast<char>((n >> (8 * k)) & 0xff));
}

void put_u64(std::string& out, uint64_t v) {
  for (int k = 0; k < 8; ++k) out.push_back(static_cast<char>((v >> (8 * k)) & 0xff));
}

void put_payload(std::string& out, char tag, const std::string& payload) {
  out.push_back(tag);
  put_u32(out, payload.size(), "payload length");
  out += payload;
}

void put_items(std::string& out, char tag, const Value::Items& items) {
  out.push_back(tag);
  put_u32(out, items.size(), "container length");
  for (const Value& item : items) encode_value(item, out);
}

// The exact integer value of a finite, integral double (|x| < 2**1024).
BigInt integral_double_to_bigint(double x) {
  BigInt out;
  if (x == 0) return out;
  int exp;
  const double m = std::frexp(std::fabs(x), &exp);  // |x| = m * 2**exp, 0.5 <= m < 1
  auto mantissa = static_cast<uint64_t>(std::ldexp(m, 53));
  int shift = exp - 53;
  if (shift < 0) {
    mantissa >>= -shift;  // only zero bits are dropped: x is integral
    shift = 0;
  }
  out.negative = x < 0;
  // Place the (<= 53-bit) mantissa at bit offset `shift`: it spans at most three limbs.
  const size_t base = static_cast<size_t>(shift / 32);
  const int bit = shift % 32;
  out.limbs.assign(base + 3, 0);
  out.limbs[base] = static_cast<uint32_t>(mantissa << bit);
  out.limbs[base + 1] = static_cast<uint32_t>(mantissa >> (32 - bit));
  out.limbs[base + 2] = bit == 0 ? 0 : static_cast<uint32_t>(mantissa >> (64 - bit));
  return normalized(std::move(out));
}

// ---------------------------------------------------------------------------------------------
// Hashing: CPython's algorithms (Python/pyhash.c, Objects/longobject.c, tupleobject.c,
// setobject.c) so numbers, and tuples/frozensets of numbers, hash exactly as in Python.

constexpr int kHashBits = 61;
constexpr uint64_t kHashModulus = (uint64_t{1} << kHashBits) - 1;  // sys.hash_info.modulus
constexpr uint64_t kHashInf = 314159;
constexpr uint64_t kHashImag = 1000003;

// -1 is CPython's error return, so a hash that comes out as -1 is replaced by -2.
uint64_t avoid_minus_one(uint64_t h) { return h == ~uint64_t{0} ? ~uint64_t{1} : h; }

// x * 2**k mod (2**61 - 1) for x < modulus: a rotation within 61 bits, since 2**61 == 1.
uint64_t rotate61(uint64_t x, int k) {
  return k == 0 ? x : ((x << k) & kHashModulus) | (x >> (kHashBits - k));
}

uint64_t hash_int(const BigInt& n) {
  uint64_t x = 0;
  for (size_t k = significant_limbs(n); k-- > 0;) {
    x = rotate61(x, 32) + n.limbs[k];
    if (x >= kHashModulus) x -= kHashModulus;
  }
  if (n.negative) x = 0 - x;
  return avoid_minus_one(x);
}

// hash_int for an int that fits in 64 bits, without a BigInt: |v| mod (2**61 - 1), signed.
uint64_t hash_small_int(int64_t v) {
  const uint64_t magnitude = v < 0 ? 0 - static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
  const uint64_t x = magnitude % kHashModulus;
  return avoid_minus_one(v < 0 ? 0 - x : x);
}

uint64_t hash_double(double v) {
  if (std::isnan(v)) return 0;  // sys.hash_info.nan: NaNs must hash alike to match each other
  if (std::isinf(v)) return v > 0 ? kHashInf : 0 - kHashInf;
  int e;
  double m = std::frexp(v, &e);
  const bool negative = m < 0;
  if (negative) m = -m;
  // Feed the mantissa in 28-bit chunks, then account for the binary exponent by rotation.
  uint64_t x = 0;
  while (m != 0) {
    x = rotate61(x, 28);
    m *= 268435456.0;  // 2**28
    e -= 28;
    const auto chunk = static_cast<uint64_t>(m);
    m -= static_cast<double>(chunk);
    x += chunk;
    if (x >= kHashModulus) x -= kHashModulus;
  }
  e = e >= 0 ? e % kHashBits : kHashBits - 1 - ((-1 - e) % kHashBits);
  x = rotate61(x, e);
  if (negative) x = 0 - x;
  return avoid_minus_one(x);
}

// Order-dependent combination (CPython's xxHash-based tuplehash).
template <class ItemHash>
uint64_t hash_sequence(const Value::Items& items, ItemHash& item_hash) {
  constexpr uint64_t kPrime1 = 11400714785074694791ULL;
  constexpr uint64_t kPrime2 = 14029467366897019727ULL;
  constexpr uint64_t kPrime5 = 2870177450012600261ULL;
  uint64_t acc = kPrime5;
  for (const Value& item : items) {
    acc += item_hash(item) * kPrime2;
    acc = std::rotl(acc, 31);
    acc *= kPrime1;
  }
  acc += items.size() ^ (kPrime5 ^ 3527539ULL);
  return acc == ~uint64_t{0} ? 1546275796 : acc;
}

// Order-independent combination of element hashes (CPython's frozenset_hash).
uint64_t shuffle_bits(uint64_t h) { return ((h ^ 89869747ULL) ^ (h << 16)) * 3644798167ULL; }

uint64_t finish_unordered(uint64_t acc, size_t size) {
  acc ^= (static_cast<uint64_t>(size) + 1) * 1927868237ULL;
  acc ^= (acc >> 11) ^ (acc >> 25);
  acc = acc * 69069U + 907133923ULL;
  return acc == ~uint64_t{0} ? 590923713ULL : acc;
}

// FNV-1a over the payload. str and bytes are never equal to each other, so they need not differ.
uint64_t hash_bytes(const std::string& s) {
  uint64_t h = 14695981039346656037ULL;
  for (const char c : s) {
    h ^= static_cast<unsigned char>(c);
    h *= 1099511628211ULL;
  }
  return h;
}

// Python's hash() of a bool, int, float or complex.
uint64_t python_number_hash(const Value& v) {
  switch (v.kind()) {
    case ValueKind::Bool: return v.as_bool() ? 1 : 0;
    case ValueKind::Int:
      if (const auto small = v.as_small_int()) return hash_small_int(*small);
      return hash_int(v.as_int());
    case ValueKind::Float: return hash_double(v.as_float());
    default: return avoid_minus_one(hash_double(v.real()) + kHashImag * hash_double(v.imag()));
  }
}

// The hash unordered comparison files entries under. Python's hash is easy to collide on: every
// multiple of 2**61 - 1 hashes to 0, and so does every NaN, where Python itself hashes a NaN by
// its address since 3.10. So a set of NaNs, or of tuples (k * (2**61 - 1), nan), is built in
// linear time by the program but was compared in quadratic time by the supervisor: 38 s for a
// determinism check of 22,000 such frozensets. This hash keeps what equality needs (equal numbers
// of any kind hash alike; every NaN alike, as NanRule::Identical makes them equal) and gives
// each distinct int64, and each other number, a 64-bit mix of its exact value.
uint64_t mix64(uint64_t x) {  // splitmix64's finalizer: a bijection of 64 bits
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

uint64_t match_hash_int(const BigInt& n) {
  if (const auto small = n.to_i64()) return mix64(static_cast<uint64_t>(*small));
  uint64_t h = n.negative ? 0x6e6567ULL : 0x706f73ULL;
  for (size_t k = 0; k < significant_limbs(n); ++k) h = mix64(h + n.limbs[k]);
  return h;
}

uint64_t match_hash_double(double x) {
  if (std::isnan(x)) return 0x6e616eULL;
  if (std::isinf(x)) return x > 0 ? 0x696e66ULL : 0x2d696e66ULL;
  if (std::trunc(x) == x) {  // equal to an int: hash as that int
    if (x >= -0x1p63 && x < 0x1p63) return mix64(static_cast<uint64_t>(static_cast<int64_t>(x)));
    return match_hash_int(integral_double_to_bigint(x));
  }
  return mix64(std::bit_cast<uint64_t>(x) ^ 0x666c6f6174ULL);  // equal to no int and no other double
}

uint64_t match_number_hash(const Value& v) {
  switch (v.kind()) {
    case ValueKind::Bool: return mix64(v.as_bool() ? 1 : 0);
    case ValueKind::Int:
      if (const auto small = v.as_small_int()) return mix64(static_cast<uint64_t>(*small));
      return match_hash_int(v.as_int());
    case ValueKind::Float: return match_hash_double(v.as_float());
    default:  // complex: equal to a real number only with a zero imaginary part
      if (v.imag() == 0) return match_hash_double(v.real());
      return mix64(match_hash_double(v.real()) * 31 + match_hash_double(v.imag()));
  }
}

// A hash of any hashable value with the given hash of numbers: Python's hash() (value_hash) or
// the collision-resistant one (match_hash). Containers combine their items' hashes as CPython's
// tuple and frozenset hashes do.
template <class NumberHash, class ItemHash>
uint64_t hash_node(const Value& v, NumberHash number_hash, ItemHash& item_hash) {
  switch (v.kind()) {
    case ValueKind::Bool:
    case ValueKind::Int:
    case ValueKind::Float:
    case ValueKind::Complex: return number_hash(v);
    // None's and Ellipsis's hashes are address-based in CPython 3.11; any constant will do.
    case ValueKind::None: return 0x6e6f6e65ULL;
    case ValueKind::Ellipsis: return 0x2e2e2eULL;
    case ValueKind::Str: return hash_bytes(v.as_bytes()) ^ 0x5354ULL;
    case ValueKind::Bytes:
    case ValueKind::ByteArray: return hash_bytes(v.as_bytes());  // bytes == bytearray
    // A list is never equal to a tuple, nor a dict to a set, so their hashes differ too (else a
    // dict of NaN keys whose values alternate [] and () would share one hash); a tuple keeps
    // CPython's hash, and no list or dict has one in Python.
    case ValueKind::Tuple: return hash_sequence(v.items(), item_hash);
    case ValueKind::List: return hash_sequence(v.items(), item_hash) ^ 0x6c697374ULL;
    case ValueKind::Set:
    case ValueKind::FrozenSet: {
      uint64_t acc = 0;
      for (const Value& item : v.items()) acc ^= shuffle_bits(item_hash(item));
      return finish_unordered(acc, v.items().size());
    }
    case ValueKind::Dict: {
      uint64_t acc = 0;
      for (const auto& [key, val] : v.pairs()) acc ^= shuffle_bits(item_hash(key) * 31 + item_hash(val));
      return finish_unordered(acc ^ 0x64696374ULL, v.pairs().size());
    }
  }
  return 0;
}

template <class NumberHash>
uint64_t hash_value_with(const Value& v, NumberHash number_hash) {
  const auto item_hash = [&](const Value& item) { return hash_value_with(item, number_hash); };
  return hash_node(v, number_hash, item_hash);
}

// match_hash of the containers met in one comparison, each computed once. python_equal hashes a
// set's items to pair them, then compares each pair, which hashes the items' items again: without
// the memo a set nested d deep costs size x depth, about a second of the supervisor's CPU for one
// result under the 1 MiB cap (200,000 nodes 870 deep). Keyed by address: the values outlive the
// comparison and do not move during it.
class MatchHashes {
 public:
  MatchHashes() = default;
  MatchHashes(const MatchHashes&) = delete;  // a copy would copy the memo: passed by reference only
  MatchHashes& operator=(const MatchHashes&) = delete;

  uint64_t operator()(const Value& v) {
    const ValueKind k = v.kind();
    const bool container = k == ValueKind::Tuple || k == ValueKind::List || k == ValueKind::Set ||
                           k == ValueKind::FrozenSet || k == ValueKind::Dict;
    if (!container) return hash_node(v, match_number_hash, *this);
    if (const auto it = memo_.find(&v); it != memo_.end()) return it->second;
    const uint64_t h = hash_node(v, match_number_hash, *this);  // may insert: no iterator held across
    memo_.emplace(&v, h);
    return h;
  }

 private:
  std::unordered_map<const Value*, uint64_t> memo_;
};

// ---------------------------------------------------------------------------------------------
// Equality

bool is_number(ValueKind k) {
  return k == ValueKind::Bool || k == ValueKind::Int || k == ValueKind::Float ||
         k == ValueKind::Complex;
}

bool same_double(double x, double y, NanRule nan) {
  return x == y || (nan == NanRule::Identical && std::isnan(x) && std::isnan(y));
}

BigInt int_of(const Value& v) {
  if (v.kind() == ValueKind::Bool) return BigInt::from_i64(v.as_bool() ? 1 : 0);
  return v.as_int();
}

// A bool or an int that fits in 64 bits, as int64; nullopt for a larger int.
std::optional<int64_t> small_int_of(const Value& v) {
  if (v.kind() == ValueKind::Bool) return v.as_bool() ? 1 : 0;
  return v.as_small_int();
}

// Python compares int with float exactly: equal only if the float is integral and the same number.
bool int_equals_double(const BigInt& n, double x) {
  if (!std::isfinite(x) || std::trunc(x) != x) return false;
  return normalized(n) == integral_double_to_bigint(x);
}

// A real number (bool, int or float) against a double, NaN handled by `nan`.
bool real_equals_double(const Value& v, double x, NanRule nan) {
  if (v.kind() == ValueKind::Float) return same_double(v.as_float(), x, nan);
  if (const auto small = small_int_of(v)) {
    // Every int64 and every integral double in [-2**63, 2**63) convert exactly to each other.
    if (!std::isfinite(x) || std::trunc(x) != x || x < -0x1p63 || x >= 0x1p63) return false;
    return static_cast<int64_t>(x) == *small;
  }
  return int_equals_double(int_of(v), x);
}

bool number_equal(const Value& a, const Value& b, NanRule nan) {
  if (a.kind() == ValueKind::Complex && b.kind() == ValueKind::Complex) {
    return same_double(a.real(), b.real(), nan) && same_double(a.imag(), b.imag(), nan);
  }
  if (a.kind() == ValueKind::Complex) return a.imag() == 0 && real_equals_double(b, a.real(), nan);
  if (b.kind() == ValueKind::Complex) return b.imag() == 0 && real_equals_double(a, b.real(), nan);
  if (a.kind() == ValueKind::Float) return real_equals_double(b, a.as_float(), nan);
  if (b.kind() == ValueKind::Float) return real_equals_double(a, b.as_float(), nan);
  const auto sa = small_int_of(a), sb = small_int_of(b);
  if (sa || sb) return sa == sb;  // an int held as a BigInt does not fit in 64 bits
  return int_of(a) == int_of(b);  // Values hold normalized BigInts
}

// Is there a one-to-one pairing of a's entries with equal entries of b? Candidates are found by
// hash, so this is O(n) expected. Entries within one set/dict are distinct under ==, and with
// NanRule::Identical equality is an equivalence relation, so taking the first unpaired match never
// blocks a pairing that exists. Entries of one hash (match_hash: equal values, else a 64-bit
// collision) are adjacent in the multimap; each lookup starts at the first still unpaired (find),
// not at equal_range, which walks to the run's end: n NaNs cost O(n), not O(n^2).
template <class Entry, class HashOf, class Matches>
bool unordered_equal(const std::vector<Entry>& a, const std::vector<Entry>& b, HashOf&& hash_of,
                     Matches matches) {
  if (a.size() != b.size()) return false;
  std::unordered_multimap<uint64_t, size_t> unpaired;
  unpaired.reserve(b.size());
  for (size_t k = 0; k < b.size(); ++k) unpaired.emplace(hash_of(b[k]), k);
  for (const Entry& entry : a) {
    const uint64_t h = hash_of(entry);
    auto it = unpaired.find(h);
    while (it != unpaired.end() && it->first == h && !matches(entry, b[it->second])) ++it;
    if (it == unpaired.end() || it->first != h) return false;
    unpaired.erase(it);
  }
  return true;
}

bool equal_with(const Value& a, const Value& b, NanRule nan, MatchHashes& hashes);

bool sequence_equal(const Value::Items& a, const Value::Items& b, NanRule nan, MatchHashes& hashes) {
  if (a.size() != b.size()) return false;
  for (size_t k = 0; k < a.size(); ++k) {
    if (!equal_with(a[k], b[k], nan, hashes)) return false;
  }
  return true;
}

bool is_bytes_like(ValueKind k) { return k == ValueKind::Bytes || k == ValueKind::ByteArray; }
bool is_set_like(ValueKind k) { return k == ValueKind::Set || k == ValueKind::FrozenSet; }

}  // namespace

// ---------------------------------------------------------------------------------------------
// BigInt

BigInt BigInt::from_i64(int64_t v) {
  BigInt out;
  out.negative = v < 0;
  // Negate in unsigned arithmetic so INT64_MIN does not overflow.
  uint64_t mag = out.negative ? 0 - static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
  while (mag != 0) {
    out.limbs.push_back(static_cast<uint32_t>(mag));
    mag >>= 32;
  }
  return out;
}

std::optional<int64_t> BigInt::to_i64() const {
  const size_t size = significant_limbs(*this);
  if (size > 2) return std::nullopt;
  uint64_t mag = 0;
  for (size_t k = size; k-- > 0;) mag = (mag << 32) | limbs[k];
  constexpr auto kMax = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  if (!negative) {
    if (mag > kMax) return std::nullopt;
    return static_cast<int64_t>(mag);
  }
  if (mag > kMax + 1) return std::nullopt;
  return static_cast<int64_t>(0 - mag);  // C++20: conversion is modular, so 2**63 -> INT64_MIN
}

std::string BigInt::to_decimal() const {
  std::vector<uint32_t> mag(limbs.begin(),
                            limbs.begin() + static_cast<ptrdiff_t>(significant_limbs(*this)));
  if (mag.empty()) return "0";
  // Peel off base-10**9 chunks by repeated short division. Quadratic, but with 9 digits per
  // pass a 4300-digit number (the most repr ever prints) takes about 478 passes over <= 447 limbs.
  constexpr uint32_t kChunk = 1000000000;
  std::vector<uint32_t> chunks;
  chunks.reserve(mag.size() * 32 / 29 + 1);
  while (!mag.empty()) {
    uint64_t rem = 0;
    for (size_t k = mag.size(); k-- > 0;) {
      const uint64_t cur = (rem << 32) | mag[k];
      mag[k] = static_cast<uint32_t>(cur / kChunk);
      rem = cur % kChunk;
    }
    chunks.push_back(static_cast<uint32_t>(rem));
    while (!mag.empty() && mag.back() == 0) mag.pop_back();
  }
  std::string out = negative ? "-" : "";
  out += std::to_string(chunks.back());
  out.reserve(out.size() + 9 * (chunks.size() - 1));
  for (size_t k = chunks.size() - 1; k-- > 0;) {
    char digits[9];
    uint32_t c = chunks[k];
    for (int d = 8; d >= 0; --d) {
      digits[d] = static_cast<char>('0' + c % 10);
      c /= 10;
    }
    out.append(digits, 9);
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Value

Value::Value() = default;
Value Value::none() { return Value(); }

Value Value::ellipsis() {
  Value v;
  v.kind_ = ValueKind::Ellipsis;
  return v;
}

Value Value::boolean(bool b) {
  Value v;
  v.kind_ = ValueKind::Bool;
  v.b_ = b;
  return v;
}

Value Value::integer(int64_t i) {
  Value v;
  v.kind_ = ValueKind::Int;
  v.i_ = i;
  return v;
}

Value Value::integer(BigInt i) {
  BigInt n = normalized(std::move(i));
  if (const auto small = n.to_i64()) return integer(*small);  // one representation per value
  Value v;
  v.kind_ = ValueKind::Int;
  v.ptr_ = std::make_shared<const BigInt>(std::move(n));
  return v;
}

Value Value::floating(double d) {
  Value v;
  v.kind_ = ValueKind::Float;
  v.f_[0] = d;
  return v;
}

Value Value::complex(double real, double imag) {
  Value v;
  v.kind_ = ValueKind::Complex;
  v.f_[0] = real;
  v.f_[1] = imag;
  return v;
}

Value Value::str(std::string utf8) {
  // Checked here so every str Value is valid and repr can decode it without error paths.
  if (auto problem = find_utf8_problem(utf8)) {
    throw std::invalid_argument("Value::str: invalid UTF-8 at byte " +
                                std::to_string(problem->offset) + ": " + problem->reason);
  }
  Value v;
  v.kind_ = ValueKind::Str;
  v.ptr_ = std::make_shared<const std::string>(std::move(utf8));
  return v;
}

Value Value::bytes(std::string raw) {
  Value v;
  v.kind_ = ValueKind::Bytes;
  v.ptr_ = std::make_shared<const std::string>(std::move(raw));
  return v;
}

Value Value::bytearray(std::string raw) {
  Value v = bytes(std::move(raw));
  v.kind_ = ValueKind::ByteArray;
  return v;
}

Value Value::tuple(Items items) {
  Value v;
  v.kind_ = ValueKind::Tuple;
  v.ptr_ = std::make_shared<const Items>(std::move(items));
  return v;
}

Value Value::list(Items items) {
  Value v = tuple(std::move(items));
  v.kind_ = ValueKind::List;
  return v;
}

Value Value::set(Items items) {
  Value v = tuple(std::move(items));
  v.kind_ = ValueKind::Set;
  return v;
}

Value Value::frozenset(Items items) {
  Value v = tuple(std::move(items));
  v.kind_ = ValueKind::FrozenSet;
  return v;
}

Value Value::dict(Pairs pairs) {
  Value v;
  v.kind_ = ValueKind::Dict;
  v.ptr_ = std::make_shared<const Pairs>(std::move(pairs));
  return v;
}

bool Value::as_bool() const {
  if (kind_ != ValueKind::Bool) wrong_kind("as_bool", kind_);
  return b_;
}

BigInt Value::as_int() const {
  if (kind_ != ValueKind::Int) wrong_kind("as_int", kind_);
  return ptr_ ? *static_cast<const BigInt*>(ptr_.get()) : BigInt::from_i64(i_);
}

std::optional<int64_t> Value::as_small_int() const {
  if (kind_ != ValueKind::Int) wrong_kind("as_small_int", kind_);
  if (!ptr_) return i_;
  return std::nullopt;
}

double Value::as_float() const {
  if (kind_ != ValueKind::Float) wrong_kind("as_float", kind_);
  return f_[0];
}

double Value::real() const {
  if (kind_ != ValueKind::Complex) wrong_kind("real", kind_);
  return f_[0];
}

double Value::imag() const {
  if (kind_ != ValueKind::Complex) wrong_kind("imag", kind_);
  return f_[1];
}

const std::string& Value::as_bytes() const {
  if (kind_ != ValueKind::Str && !is_bytes_like(kind_)) wrong_kind("as_bytes", kind_);
  return *static_cast<const std::string*>(ptr_.get());
}

const Value::Items& Value::items() const {
  if (kind_ != ValueKind::Tuple && kind_ != ValueKind::List && !is_set_like(kind_)) {
    wrong_kind("items", kind_);
  }
  return *static_cast<const Items*>(ptr_.get());
}

const Value::Pairs& Value::pairs() const {
  if (kind_ != ValueKind::Dict) wrong_kind("pairs", kind_);
  return *static_cast<const Pairs*>(ptr_.get());
}

// ---------------------------------------------------------------------------------------------
// Wire format

Value decode_value_prefix(std::string_view& wire, int max_depth) {
  Decoder decoder(wire, max_depth);
  Value v = decoder.value(0);
  wire.remove_prefix(decoder.position());
  return v;
}

Value decode_value(std::string_view wire, int max_depth) {
  std::string_view rest = wire;
  Value v = decode_value_prefix(rest, max_depth);
  if (!rest.empty()) {
    throw DecodeError("value wire, byte " + std::to_string(wire.size() - rest.size()) + ": " +
                      plural(rest.size(), "trailing byte") + " after the value");
  }
  return v;
}

std::string encode_value(const Value& v) {
  std::string out;
  encode_value(v, out);
  return out;
}

void encode_value(const Value& v, std::string& out) {
  switch (v.kind()) {
    case ValueKind::None: out.push_back('N'); return;
    case ValueKind::Ellipsis: out.push_back('.'); return;
    case ValueKind::Bool: out.push_back(v.as_bool() ? 'T' : 'F'); return;
    case ValueKind::Int: {
      // Canonical form, as the child writes it: 'i' whenever the value fits in 64 bits.
      if (const auto small = v.as_small_int()) {
        out.push_back('i');
        put_u64(out, static_cast<uint64_t>(*small));
        return;
      }
      const BigInt n = v.as_int();
      std::string mag;
      for (const uint32_t limb : n.limbs) {
        for (int k = 0; k < 4; ++k) mag.push_back(static_cast<char>((limb >> (8 * k)) & 0xff));
      }
      while (!mag.empty() && mag.back() == 0) mag.pop_back();  // minimal magnitude
      out.push_back('I');
      out.push_back(n.negative ? 1 : 0);
      put_u32(out, mag.size(), "int magnitude");
      out += mag;
      return;
    }
    case ValueKind::Float:
      out.push_back('f');
      put_u64(out, std::bit_cast<uint64_t>(v.as_float()));
      return;
    case ValueKind::Complex:
      out.push_back('c');
      put_u64(out, std::bit_cast<uint64_t>(v.real()));
      put_u64(out, std::bit_cast<uint64_t>(v.imag()));
      return;
    case ValueKind::Str: put_payload(out, 's', v.as_bytes()); return;
    case ValueKind::Bytes: put_payload(out, 'b', v.as_bytes()); return;
    case ValueKind::ByteArray: put_payload(out, 'a', v.as_bytes()); return;
    case ValueKind::Tuple: put_items(out, 't', v.items()); return;
    case ValueKind::List: put_items(out, 'l', v.items()); return;
    case ValueKind::Set: put_items(out, 'S', v.items()); return;
    case ValueKind::FrozenSet: put_items(out, 'z', v.items()); return;
    case ValueKind::Dict:
      out.push_back('d');
      put_u32(out, v.pairs().size(), "dict length");
      for (const auto& [key, val] : v.pairs()) {
        encode_value(key, out);
        encode_value(val, out);
      }
      return;
  }
}

// ---------------------------------------------------------------------------------------------
// Equality and hashing

namespace {

bool equal_with(const Value& a, const Value& b, NanRule nan, MatchHashes& hashes) {
  const ValueKind ka = a.kind(), kb = b.kind();
  if (is_number(ka) || is_number(kb)) {
    return is_number(ka) && is_number(kb) && number_equal(a, b, nan);
  }
  if (is_bytes_like(ka) || is_bytes_like(kb)) {
    return is_bytes_like(ka) && is_bytes_like(kb) && a.as_bytes() == b.as_bytes();
  }
  if (is_set_like(ka) || is_set_like(kb)) {
    if (!is_set_like(ka) || !is_set_like(kb)) return false;
    return unordered_equal(
        a.items(), b.items(), hashes,
        [nan, &hashes](const Value& x, const Value& y) { return equal_with(x, y, nan, hashes); });
  }
  if (ka != kb) return false;
  switch (ka) {
    case ValueKind::Str: return a.as_bytes() == b.as_bytes();
    case ValueKind::Tuple:
    case ValueKind::List: return sequence_equal(a.items(), b.items(), nan, hashes);
    case ValueKind::Dict:
      // Python looks each key of a up in b (by hash, then ==) and compares the values. The pair's
      // hash, not the key's: under NanRule::Identical a dict's NaN keys all hash alike.
      return unordered_equal(
          a.pairs(), b.pairs(),
          [&hashes](const auto& entry) { return hashes(entry.first) * 31 + hashes(entry.second); },
          [nan, &hashes](const auto& x, const auto& y) {
            return equal_with(x.first, y.first, nan, hashes) && equal_with(x.second, y.second, nan, hashes);
          });
    default: return true;  // None and Ellipsis are singletons
  }
}

}  // namespace

bool python_equal(const Value& a, const Value& b, NanRule nan) {
  MatchHashes hashes;
  return equal_with(a, b, nan, hashes);
}

uint64_t value_hash(const Value& v) { return hash_value_with(v, python_number_hash); }

uint64_t match_hash(const Value& v) { return hash_value_with(v, match_number_hash); }

}  // namespace azr::sandbox
