#pragma once
// The supervisor's model of a Python value returned by sandboxed code.
//
// A sandboxed child never sends text for the supervisor to evaluate: it walks its result with
// exact type checks (no subclasses, no user __repr__/__eq__ can run) and encodes it in the
// "value wire format" below. The supervisor decodes it into a Value, and every judgement
// (equality, determinism, the repr that training records) is made here, on plain data, with
// Python 3.11's semantics re-implemented in C++.
//
// Value wire format (all integers little-endian; u32 = 4 bytes):
//   'N'                      None
//   'T' / 'F'                True / False
//   '.'                      Ellipsis
//   'i' i64                  int that fits in 64 bits
//   'I' u8 sign u32 n bytes  int of any size: sign 0 = non-negative, 1 = negative; magnitude
//                            as n bytes little-endian (no leading zero bytes required)
//   'f' f64                  float (IEEE-754 binary64 bits)
//   'c' f64 f64              complex (real, imag)
//   's' u32 n bytes          str: code points as UTF-8, surrogates (U+D800..DFFF) allowed and
//                            encoded as ordinary 3-byte sequences ("surrogatepass")
//   'b' u32 n bytes          bytes
//   'a' u32 n bytes          bytearray
//   't' u32 n value*n        tuple
//   'l' u32 n value*n        list
//   'd' u32 n (key value)*n  dict, in insertion order
//   'S' u32 n value*n        set, in the child's iteration order (which is what repr shows)
//   'z' u32 n value*n        frozenset, likewise
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace azr::sandbox {

enum class ValueKind : uint8_t {
  None, Bool, Int, Float, Complex, Str, Bytes, ByteArray, Tuple, List, Dict, Set, FrozenSet, Ellipsis
};

// Arbitrary-precision integer: sign + magnitude in base 2^32, least significant limb first,
// no leading zero limbs (zero has an empty magnitude and negative == false).
struct BigInt {
  bool negative = false;
  std::vector<uint32_t> limbs;

  static BigInt from_i64(int64_t v);
  std::optional<int64_t> to_i64() const;  // nullopt if it does not fit
  std::string to_decimal() const;         // "-123", "0"
  bool operator==(const BigInt&) const = default;
};

class Value {
 public:
  using Items = std::vector<Value>;
  using Pairs = std::vector<std::pair<Value, Value>>;

  Value();  // None
  static Value none();
  static Value ellipsis();
  static Value boolean(bool b);
  static Value integer(int64_t v);
  static Value integer(BigInt v);
  static Value floating(double v);
  static Value complex(double real, double imag);
  static Value str(std::string utf8);  // surrogatepass UTF-8 as in the wire format
  static Value bytes(std::string raw);
  static Value bytearray(std::string raw);
  static Value tuple(Items items);
  static Value list(Items items);
  static Value dict(Pairs pairs);
  static Value set(Items items);
  static Value frozenset(Items items);

  ValueKind kind() const { return kind_; }
  bool as_bool() const;
  BigInt as_int() const;  // by value: an int that fits in 64 bits is not held as a BigInt
  std::optional<int64_t> as_small_int() const;  // an Int that fits in 64 bits, else nullopt
  double as_float() const;
  double real() const;
  double imag() const;
  const std::string& as_bytes() const;  // str (UTF-8), bytes and bytearray payloads
  const Items& items() const;           // tuple, list, set, frozenset
  const Pairs& pairs() const;           // dict

 private:
  ValueKind kind_ = ValueKind::None;
  bool b_ = false;
  // An int that fits in 64 bits is held inline, without an allocation (an Int with no ptr_): a
  // result list of ten million ints is ten million Values (48 bytes each), not also ten million
  // BigInts.
  int64_t i_ = 0;
  double f_[2] = {0, 0};
  // By kind_: BigInt (an Int past 64 bits), std::string (Str, Bytes, ByteArray), Items (Tuple,
  // List, Set, FrozenSet), Pairs (Dict). One pointer, not one per kind: Values are the elements
  // of every decoded container, so their size is the decoder's memory traffic.
  std::shared_ptr<const void> ptr_;
};

struct DecodeError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Decodes exactly one value occupying all of `wire`. Throws DecodeError on truncation,
// trailing bytes, an unknown tag, invalid UTF-8, or nesting deeper than max_depth.
Value decode_value(std::string_view wire, int max_depth = 1000);
// Decodes one value from the front of `wire` and advances it past the value.
Value decode_value_prefix(std::string_view& wire, int max_depth = 1000);
std::string encode_value(const Value& v);
void encode_value(const Value& v, std::string& out);

// How equality treats NaN.
enum class NanRule {
  Python,     // Python's ==: nan != nan (as for freshly parsed literals, which never share identity)
  Identical,  // nan equals nan: "did two runs produce the same value" (determinism check)
};

// Python 3.11 `a == b` on plain data: 1 == 1.0 == True == (1+0j); int/float compared exactly
// (2**53 + 1 != 2.0**53); str != bytes; bytes == bytearray; tuple != list; set == frozenset;
// dict/set comparison ignores order; list/tuple comparison is element-wise.
bool python_equal(const Value& a, const Value& b, NanRule nan = NanRule::Python);

// Python's hash() for numbers (mod 2**61 - 1, so hash(1) == hash(1.0) == hash(True)), and for
// tuples and frozensets of them; for the other kinds any hash consistent with python_equal.
uint64_t value_hash(const Value& v);

// The hash python_equal files set elements and dict entries under: consistent with python_equal
// under both NaN rules, like value_hash, but without Python's easy collisions (every multiple of
// 2**61 - 1 hashes to 0 there), so that comparing sets a program built in linear time takes
// linear time too. Every NaN still hashes alike.
uint64_t match_hash(const Value& v);

struct ReprError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Exactly what Python 3.11's repr() prints for this value (shortest round-trip floats,
// str quoting/escaping with Python's Unicode printability table, sets/dicts in the order held).
// Throws ReprError if Python's repr would raise (an int of more than 4300 digits: the message
// is Python's) or if the text would exceed max_len bytes.
std::string python_repr(const Value& v, size_t max_len = SIZE_MAX);

}  // namespace azr::sandbox
