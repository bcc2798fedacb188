// Tests for sandbox/value.h. The expected reprs, equality verdicts and numeric hashes come from
// CPython itself: tests/sandbox/value_reference.py builds the values, encodes them with its own
// implementation of the wire format and prints what Python says about them.
#include "sandbox/value.h"
#include "tests/sandbox/colliding_values.h"

#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

extern char** environ;

namespace azr::sandbox {
namespace {

// ---------------------------------------------------------------------------------------------
// Running the Python reference

// Runs `$AZR_PYTHON -I -S $AZR_TESTS_DIR/sandbox/value_reference.py mode` and returns its
// stdout. Reports a fatal failure (use with ASSERT_NO_FATAL_FAILURE) when it cannot.
void run_reference(const std::string& mode, std::string& out) {
  const char* python = std::getenv("AZR_PYTHON");
  const char* tests_dir = std::getenv("AZR_TESTS_DIR");
  ASSERT_TRUE(python != nullptr && *python != '\0')
      << "AZR_PYTHON is not set: it must name the CPython 3.11 the sandbox embeds "
         "(ctest sets it; e.g. AZR_PYTHON=/usr/bin/python3.11)";
  ASSERT_TRUE(tests_dir != nullptr && *tests_dir != '\0')
      << "AZR_TESTS_DIR is not set: it must name the repository's tests/ directory (ctest sets it)";
  const std::string script = std::string(tests_dir) + "/sandbox/value_reference.py";

  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0) << std::strerror(errno);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&actions, pipe_fds[0]);
  posix_spawn_file_actions_addclose(&actions, pipe_fds[1]);
  std::vector<std::string> args = {python, "-I", "-S", script, mode};
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  pid_t pid;
  const int spawn_error = posix_spawn(&pid, python, &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(pipe_fds[1]);
  if (spawn_error != 0) close(pipe_fds[0]);
  ASSERT_EQ(spawn_error, 0) << "cannot run " << python << ": " << std::strerror(spawn_error);

  out.clear();
  char buf[1 << 16];
  for (ssize_t n; (n = read(pipe_fds[0], buf, sizeof buf)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    ASSERT_GT(n, 0) << std::strerror(errno);
    out.append(buf, static_cast<size_t>(n));
  }
  close(pipe_fds[0]);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << python << " " << script << " " << mode << " failed (status " << status << ")";
  ASSERT_FALSE(out.empty());
}

std::vector<std::string> split(std::string_view text, char sep) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t end = std::min(text.find(sep, start), text.size());
    parts.emplace_back(text.substr(start, end - start));
    start = end + 1;
  }
  return parts;
}

std::string unhex(std::string_view hex) {
  EXPECT_EQ(hex.size() % 2, 0u) << hex;
  std::string out;
  out.reserve(hex.size() / 2);
  const auto nibble = [](char c) { return c <= '9' ? c - '0' : c - 'a' + 10; };
  for (size_t k = 0; k + 1 < hex.size(); k += 2) {
    out.push_back(static_cast<char>(nibble(hex[k]) << 4 | nibble(hex[k + 1])));
  }
  return out;
}

std::string hex(std::string_view bytes) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  for (const char c : bytes) {
    out.push_back(kDigits[static_cast<unsigned char>(c) >> 4]);
    out.push_back(kDigits[static_cast<unsigned char>(c) & 15]);
  }
  return out;
}

// A reference line split into fields, with the trailing empty line dropped.
std::vector<std::vector<std::string>> reference_lines(const std::string& text) {
  std::vector<std::vector<std::string>> lines;
  for (const std::string& line : split(text, '\n')) {
    if (!line.empty()) lines.push_back(split(line, ' '));
  }
  return lines;
}

// Python's repr of a value, for failure messages only (never as an expected value).
std::string describe(const Value& v) {
  try {
    return python_repr(v, 300);
  } catch (const ReprError&) {
    return "<" + std::to_string(encode_value(v).size()) + "-byte encoding>";
  }
}

// Checks one "V <wire> <repr> <hash>" line.
void check_value_line(const std::vector<std::string>& f) {
  if (f.size() != 4 || f[0] != "V") {
    ADD_FAILURE() << "malformed reference line starting " << f[0];
    return;
  }
  Value v;
  try {
    v = decode_value(unhex(f[1]));
  } catch (const DecodeError& e) {
    ADD_FAILURE() << "decode failed for " << f[1].substr(0, 200) << ": " << e.what();
    return;
  }
  // Round trip: the reference encoder is canonical, so re-encoding must give the same bytes.
  EXPECT_EQ(hex(encode_value(v)), f[1]);

  const std::string expected = unhex(f[2].substr(2));
  if (f[2].starts_with("r:")) {
    std::string got;
    try {
      got = python_repr(v);
    } catch (const ReprError& e) {
      ADD_FAILURE() << "repr threw " << e.what() << "; Python: " << expected.substr(0, 300);
      return;
    }
    EXPECT_EQ(got, expected) << "wire " << f[1].substr(0, 200);
    // max_len is inclusive: exactly the repr's length fits, one byte less does not.
    EXPECT_EQ(python_repr(v, got.size()), got);
    if (!got.empty()) {
      EXPECT_THROW(python_repr(v, got.size() - 1), ReprError);
    }
  } else {
    try {
      python_repr(v);
      ADD_FAILURE() << "repr succeeded where Python raised: " << expected;
    } catch (const ReprError& e) {
      EXPECT_EQ(std::string(e.what()), expected);
    }
  }
  if (f[3] != "-") {
    EXPECT_EQ(static_cast<int64_t>(value_hash(v)), std::stoll(f[3])) << describe(v);
  }
  // Whatever the value holds, it is the same value as itself when NaN is taken as identical.
  EXPECT_TRUE(python_equal(v, v, NanRule::Identical)) << describe(v);
}

// ---------------------------------------------------------------------------------------------
// Corpus tests

TEST(ValueReference, ReprRoundTripAndHashMatchPython) {
  std::string text;
  ASSERT_NO_FATAL_FAILURE(run_reference("values", text));
  const auto lines = reference_lines(text);
  ASSERT_GT(lines.size(), 4000u);
  for (const auto& f : lines) check_value_line(f);
}

TEST(ValueReference, EveryCodePointReprsAsInPython) {
  std::string text;
  ASSERT_NO_FATAL_FAILURE(run_reference("unicode", text));
  const auto lines = reference_lines(text);
  ASSERT_EQ(lines.size(), 0x110u);  // 0x110000 code points in strings of 0x1000
  for (const auto& f : lines) check_value_line(f);
}

TEST(ValueReference, EqualityMatchesPython) {
  std::string text;
  ASSERT_NO_FATAL_FAILURE(run_reference("pairs", text));
  const auto lines = reference_lines(text);
  ASSERT_GT(lines.size(), 5000u);
  size_t equal_pairs = 0;
  for (const auto& f : lines) {
    ASSERT_EQ(f.size(), 5u);
    const Value a = decode_value(unhex(f[1]));
    const Value b = decode_value(unhex(f[2]));
    const bool python_says = f[3] == "1";
    const bool identical_says = f[4] == "1";
    const std::string pair = describe(a) + " vs " + describe(b);
    EXPECT_EQ(python_equal(a, b), python_says) << pair;
    EXPECT_EQ(python_equal(b, a), python_says) << pair;
    EXPECT_EQ(python_equal(a, b, NanRule::Identical), identical_says) << pair;
    EXPECT_EQ(python_equal(b, a, NanRule::Identical), identical_says) << pair;
    if (python_says || identical_says) {
      ++equal_pairs;
      EXPECT_EQ(value_hash(a), value_hash(b)) << pair;
      EXPECT_EQ(match_hash(a), match_hash(b)) << pair;
    }
  }
  EXPECT_GT(equal_pairs, 1000u);
}

TEST(ValueReference, EveryProperPrefixIsTruncated) {
  std::string text;
  ASSERT_NO_FATAL_FAILURE(run_reference("values", text));
  size_t checked = 0;
  for (const auto& f : reference_lines(text)) {
    const std::string wire = unhex(f[1]);
    if (wire.size() > 400) continue;  // keeps the test quick; these are the nested values
    for (size_t len = 0; len < wire.size(); ++len) {
      EXPECT_THROW(decode_value(std::string_view(wire).substr(0, len)), DecodeError)
          << f[1] << " cut to " << len;
    }
    // And one byte too many is trailing garbage; the prefix decoder leaves it alone.
    const std::string longer = wire + "N";
    EXPECT_THROW(decode_value(longer), DecodeError);
    std::string_view rest = longer;
    decode_value_prefix(rest);
    EXPECT_EQ(rest, "N");
    ++checked;
  }
  EXPECT_GT(checked, 3000u);
}

// ---------------------------------------------------------------------------------------------
// BigInt

TEST(BigInt, I64RoundTripAtTheBoundaries) {
  for (const int64_t v : {int64_t{0}, int64_t{1}, int64_t{-1}, int64_t{4294967295},
                          int64_t{4294967296}, INT64_MAX, INT64_MIN, INT64_MIN + 1}) {
    const BigInt n = BigInt::from_i64(v);
    EXPECT_EQ(n.to_i64(), v);
    EXPECT_EQ(n.to_decimal(), std::to_string(v));
  }
  EXPECT_TRUE(BigInt::from_i64(0).limbs.empty());
  EXPECT_FALSE(BigInt::from_i64(0).negative);
  EXPECT_EQ(BigInt::from_i64(INT64_MIN).limbs, (std::vector<uint32_t>{0, 0x80000000u}));
}

TEST(BigInt, OutOfRangeForI64) {
  const BigInt two_63{false, {0, 0x80000000u}};  // 2**63
  EXPECT_EQ(two_63.to_i64(), std::nullopt);
  EXPECT_EQ(two_63.to_decimal(), "9223372036854775808");
  const BigInt minus_two_63{true, {0, 0x80000000u}};
  EXPECT_EQ(minus_two_63.to_i64(), INT64_MIN);
  const BigInt minus_two_63_minus_1{true, {1, 0x80000000u}};
  EXPECT_EQ(minus_two_63_minus_1.to_i64(), std::nullopt);
  EXPECT_EQ(minus_two_63_minus_1.to_decimal(), "-9223372036854775809");
  const BigInt two_64{false, {0, 0, 1}};
  EXPECT_EQ(two_64.to_i64(), std::nullopt);
  EXPECT_EQ(two_64.to_decimal(), "18446744073709551616");
  const BigInt padded{false, {7, 0, 0}};  // leading zero limbs are tolerated
  EXPECT_EQ(padded.to_i64(), 7);
}

TEST(BigInt, DecimalConversionOfA4300DigitNumber) {
  // 2**14272 - 1 (446 limbs of ones), close to the largest int repr prints. Its digits, from
  // Python: 4297 of them, starting 1995713137 and ending 4557085695.
  const BigInt n{false, std::vector<uint32_t>(446, 0xffffffffu)};
  const std::string digits = n.to_decimal();
  EXPECT_EQ(digits.size(), 4297u);
  EXPECT_TRUE(digits.starts_with("1995713137")) << digits.substr(0, 10);
  EXPECT_TRUE(digits.ends_with("4557085695")) << digits.substr(digits.size() - 10);
}

// ---------------------------------------------------------------------------------------------
// Decode errors

std::string decode_error(std::string_view wire, int max_depth = 1000) {
  try {
    decode_value(wire, max_depth);
  } catch (const DecodeError& e) {
    return e.what();
  }
  ADD_FAILURE() << "decoded without error: " << hex(wire);
  return "";
}

std::string str_wire(std::string_view payload) {
  std::string wire = "s";
  const auto n = static_cast<uint32_t>(payload.size());
  for (int k = 0; k < 4; ++k) wire.push_back(static_cast<char>((n >> (8 * k)) & 0xff));
  return wire + std::string(payload);
}

TEST(Decode, ErrorsSayWhatAndWhere) {
  EXPECT_EQ(decode_error(""),
            "value wire, byte 0: truncated input: value tag needs 1 byte, only 0 left");
  EXPECT_EQ(decode_error(std::string("i\x01\x02", 3)),
            "value wire, byte 1: truncated input: int64 payload needs 8 bytes, only 2 left");
  EXPECT_EQ(decode_error(std::string("s\x03\x00\x00\x00" "ab", 7)),
            "value wire, byte 5: truncated input: str payload needs 3 bytes, only 2 left");
  EXPECT_EQ(decode_error("NN"), "value wire, byte 1: 1 trailing byte after the value");
  EXPECT_EQ(decode_error("TNN"), "value wire, byte 1: 2 trailing bytes after the value");
  EXPECT_EQ(decode_error("A"), "value wire, byte 0: unknown tag 0x41 'A'");
  EXPECT_EQ(decode_error(std::string("l\x02\x00\x00\x00N\xff", 7)),
            "value wire, byte 6: unknown tag 0xff");
  EXPECT_EQ(decode_error(std::string("I\x02\x00\x00\x00\x00", 6)),
            "value wire, byte 1: int sign byte must be 0 or 1, got 2");
}

TEST(Decode, HugeClaimedLengthsFailCleanly) {
  // A length of 2**32 - 1 with nothing behind it must be reported, not allocated.
  for (const char tag : std::string("sbatlSzd")) {
    const std::string wire = std::string(1, tag) + "\xff\xff\xff\xff";
    EXPECT_THROW(decode_value(wire), DecodeError) << tag;
  }
  EXPECT_THROW(decode_value(std::string("I\x00\xff\xff\xff\xff", 6)), DecodeError);
}

TEST(Decode, InvalidUtf8IsRejectedWithItsOffset) {
  struct Case {
    std::string payload;
    size_t bad_offset;  // within the payload, which starts at byte 5
  };
  const Case cases[] = {
      {"\x80", 0},              // lone continuation byte
      {"ab\xc0\x80", 2},        // overlong NUL
      {"\xc1\xbf", 0},          // overlong
      {"\xe0\x80\x80", 1},      // overlong 3-byte
      {"\xf0\x80\x80\x80", 1},  // overlong 4-byte
      {"\xf4\x90\x80\x80", 1},  // above U+10FFFF
      {"\xf5\x80\x80\x80", 0},  // never valid
      {"\xff", 0},
      {"x\xe2\x82", 1},     // cut off by the end of the str
      {"\xe2\x28\xa1", 1},  // missing continuation
      {"\xf0\x9f\x98", 0},  // cut-off emoji
      {"\xf0\x9f\x98\x28", 3},
  };
  for (const Case& c : cases) {
    const std::string message = decode_error(str_wire(c.payload));
    EXPECT_NE(message.find("invalid UTF-8 in str"), std::string::npos) << message;
    EXPECT_TRUE(message.starts_with("value wire, byte " + std::to_string(5 + c.bad_offset) + ":"))
        << hex(c.payload) << ": " << message;
    EXPECT_THROW(Value::str(c.payload), std::invalid_argument);
  }
  // Surrogates are allowed ("surrogatepass"), as are the extremes of each sequence length.
  for (const std::string ok : {"\xed\xa0\x80", "\xed\xbf\xbf", "\xf4\x8f\xbf\xbf", "\xc2\x80",
                               "\xe0\xa0\x80", "\xf0\x90\x80\x80", "\x7f"}) {
    EXPECT_NO_THROW(decode_value(str_wire(ok))) << hex(ok);
  }
}

std::string nested_lists(int depth) {
  std::string wire;
  for (int k = 0; k < depth; ++k) wire += std::string("l\x01\x00\x00\x00", 5);
  return wire + "N";
}

TEST(Decode, NestingDepthIsLimited) {
  EXPECT_NO_THROW(decode_value(nested_lists(1000)));
  EXPECT_EQ(decode_error(nested_lists(1001)),
            "value wire, byte 5000: container nesting deeper than max_depth 1000");
  EXPECT_NO_THROW(decode_value(nested_lists(3), 3));
  EXPECT_THROW(decode_value(nested_lists(4), 3), DecodeError);
  EXPECT_NO_THROW(decode_value("N", 0));
  EXPECT_THROW(decode_value(std::string("t\x00\x00\x00\x00", 5), 0), DecodeError);
  // Dict keys and values count as one level deeper than the dict.
  const std::string dict_in_list = std::string(
      "l\x01\x00\x00\x00"
      "d\x01\x00\x00\x00"
      "NN",
      12);
  EXPECT_NO_THROW(decode_value(dict_in_list, 2));
  EXPECT_THROW(decode_value(dict_in_list, 1), DecodeError);
  // Deep nesting, once decoded, still compares, hashes, prints and encodes.
  const Value deep = decode_value(nested_lists(1000));
  EXPECT_TRUE(python_equal(deep, decode_value(nested_lists(1000))));
  EXPECT_FALSE(python_equal(deep, decode_value(nested_lists(999))));
  EXPECT_EQ(python_repr(deep), std::string(1000, '[') + "None" + std::string(1000, ']'));
  EXPECT_EQ(encode_value(deep), nested_lists(1000));
}

TEST(Decode, NonCanonicalIntsAreAccepted) {
  // 'I' is allowed for small values and with leading zero bytes; re-encoding is canonical.
  const Value five = decode_value(std::string("I\x00\x03\x00\x00\x00\x05\x00\x00", 9));
  EXPECT_EQ(five.as_int().to_i64(), 5);
  EXPECT_EQ(encode_value(five), std::string("i\x05\x00\x00\x00\x00\x00\x00\x00", 9));
  const Value minus_zero = decode_value(std::string("I\x01\x01\x00\x00\x00\x00", 7));
  EXPECT_FALSE(minus_zero.as_int().negative);
  EXPECT_TRUE(minus_zero.as_int().limbs.empty());
  EXPECT_EQ(python_repr(minus_zero), "0");
  const Value empty = decode_value(std::string("I\x00\x00\x00\x00\x00", 6));
  EXPECT_EQ(python_repr(empty), "0");
}

// ---------------------------------------------------------------------------------------------
// Repr limits and construction

TEST(Repr, HugeIntsFailWithPythonsMessageWithoutConverting) {
  const char* message =
      "Exceeds the limit (4300 digits) for integer string conversion; use "
      "sys.set_int_max_str_digits() to increase the limit";
  // About 20 million digits: a conversion, quadratic in the limbs, would run for hours (past
  // ctest's timeout, a failure); refusing takes nothing.
  BigInt huge{true, std::vector<uint32_t>(2'000'000, 0x12345678u)};
  try {
    python_repr(Value::integer(std::move(huge)));
    ADD_FAILURE() << "no ReprError";
  } catch (const ReprError& e) {
    EXPECT_STREQ(e.what(), message);
  }
}

TEST(Repr, MaxLenStopsEarly) {
  // 16 MiB of 0xff would print as 64 MiB of \xff escapes; the cap must end it near max_len.
  const Value big = Value::bytes(std::string(16u << 20, '\xff'));
  EXPECT_THROW(python_repr(big, 1000), ReprError);
  // Items are shared, so 60 doublings are 61 Values whose repr is 2^60 copies of 'abc' (exabytes):
  // a repr that did not stop at max_len would never end (ctest's timeout) nor fit in memory.
  Value doubled = Value::str("abc");
  for (int i = 0; i < 60; ++i) doubled = Value::list({doubled, doubled});
  EXPECT_THROW(python_repr(doubled, 1000), ReprError);
  EXPECT_THROW(python_repr(Value::list({Value::str("abc")}), 6), ReprError);  // ['abc'] is 7
  EXPECT_EQ(python_repr(Value::list({Value::str("abc")}), 7), "['abc']");
  EXPECT_THROW(python_repr(Value::none(), 3), ReprError);
  EXPECT_EQ(python_repr(Value::none(), 4), "None");
}

TEST(ValueModel, AccessorsCheckTheKind) {
  EXPECT_THROW(Value::none().as_bool(), std::logic_error);
  EXPECT_THROW(Value::boolean(true).as_int(), std::logic_error);
  EXPECT_THROW(Value::integer(1).as_float(), std::logic_error);
  EXPECT_THROW(Value::floating(1).real(), std::logic_error);
  EXPECT_THROW(Value::list({}).pairs(), std::logic_error);
  EXPECT_THROW(Value::dict({}).items(), std::logic_error);
  EXPECT_THROW(Value::tuple({}).as_bytes(), std::logic_error);
  EXPECT_EQ(Value::bytearray("x").as_bytes(), "x");
  EXPECT_EQ(Value::frozenset({Value::none()}).items().size(), 1u);
  EXPECT_EQ(Value::complex(1, 2).imag(), 2);
  EXPECT_EQ(Value().kind(), ValueKind::None);
  // Value::integer normalizes, so equal ints compare equal as BigInts.
  EXPECT_EQ(Value::integer(BigInt{true, {0, 0}}).as_int(), BigInt::from_i64(0));
}

TEST(ValueModel, BuiltValuesBehaveLikeDecodedOnes) {
  // A set holding 1 equals a frozenset holding True and 1.0 equals a complex; hashes agree.
  const Value a = Value::set({Value::integer(1), Value::floating(2.5)});
  const Value b = Value::frozenset({Value::complex(2.5, -0.0), Value::boolean(true)});
  EXPECT_TRUE(python_equal(a, b));
  EXPECT_EQ(value_hash(a), value_hash(b));
  const Value nan_list = Value::list({Value::floating(std::nan(""))});
  EXPECT_FALSE(python_equal(nan_list, nan_list));
  EXPECT_TRUE(python_equal(nan_list, nan_list, NanRule::Identical));
  EXPECT_EQ(decode_value(encode_value(a)).items().size(), 2u);
}

// Values a program builds in linear time that Python's hash files under one hash: distinct
// multiples of 2**61 - 1, 2.0**61 beside 1, and tuples and frozensets of such a multiple and a
// NaN (Python hashes a NaN by its address, so there they spread). They are pairwise unequal, so
// match_hash must tell them apart, or comparing a set of them takes quadratic time.
TEST(ValueModel, MatchHashSeparatesWhatPythonsHashCollides) {
  const double nan = std::nan("");
  for (int form = 0; form < 3; ++form) {
    std::vector<uint64_t> python, match;
    for (uint32_t k = 1; k <= 1000; ++k) {
      const Value m = testing::multiple_of_hash_modulus(k);
      const Value v = form == 0   ? m
                      : form == 1 ? Value::tuple({m, Value::floating(nan)})
                                  : Value::frozenset({m, Value::floating(nan)});
      python.push_back(value_hash(v));
      match.push_back(match_hash(v));
    }
    std::sort(python.begin(), python.end());
    std::sort(match.begin(), match.end());
    EXPECT_EQ(std::unique(python.begin(), python.end()) - python.begin(), 1) << "form " << form;
    EXPECT_EQ(std::unique(match.begin(), match.end()) - match.begin(), 1000) << "form " << form;
  }
  EXPECT_EQ(value_hash(Value::floating(0x1p61)), value_hash(Value::integer(1)));
  EXPECT_NE(match_hash(Value::floating(0x1p61)), match_hash(Value::integer(1)));
  // Equal numbers of every kind still hash alike, past 64 bits too.
  EXPECT_EQ(match_hash(Value::floating(0x1p61)), match_hash(Value::integer(int64_t{1} << 61)));
  BigInt two_to_the_100;
  two_to_the_100.limbs = {0, 0, 0, 16};
  EXPECT_EQ(match_hash(Value::complex(0x1p100, -0.0)), match_hash(Value::integer(two_to_the_100)));
  EXPECT_EQ(match_hash(Value::boolean(true)), match_hash(Value::floating(1.0)));
  EXPECT_EQ(match_hash(Value::floating(-0.0)), match_hash(Value::integer(0)));
  // Kinds that are never equal hash apart, else a dict of NaN keys whose values alternate [] and ()
  // is one group again.
  EXPECT_NE(match_hash(Value::list({})), match_hash(Value::tuple({})));
  EXPECT_NE(match_hash(Value::dict({})), match_hash(Value::set({})));
  EXPECT_EQ(match_hash(Value::set({})), match_hash(Value::frozenset({})));
}

// Sets and dicts of many NaNs, and of tuples whose Python hashes collide, compare as Python
// compares them (NaN equal to NaN only under NanRule::Identical), at sizes where a comparison
// that walks the entries it has already paired would take minutes.
TEST(ValueModel, LargeSetsOfNaNsAndCollidingValuesCompareAsPython) {
  const double nan = std::nan("");
  constexpr size_t kN = 100000;
  Value::Items nans(kN, Value::floating(nan));
  const Value nan_set = Value::set(nans);
  EXPECT_TRUE(python_equal(nan_set, Value::frozenset(nans), NanRule::Identical));
  EXPECT_FALSE(python_equal(nan_set, nan_set, NanRule::Python));
  nans.back() = Value::floating(1.0);
  EXPECT_FALSE(python_equal(nan_set, Value::set(nans), NanRule::Identical));

  Value::Items tuples;
  for (uint32_t k = 1; k <= kN; ++k) tuples.push_back(Value::tuple({testing::multiple_of_hash_modulus(k), Value::floating(nan)}));
  Value::Items reversed(tuples.rbegin(), tuples.rend());
  EXPECT_TRUE(python_equal(Value::set(tuples), Value::set(reversed), NanRule::Identical));
  EXPECT_FALSE(python_equal(Value::set(tuples), Value::set(reversed), NanRule::Python));
  reversed[kN / 2] = Value::tuple({testing::multiple_of_hash_modulus(uint32_t{kN + 1}), Value::floating(nan)});
  EXPECT_FALSE(python_equal(Value::set(tuples), Value::set(reversed), NanRule::Identical));

  // A dict of NaN keys: under NanRule::Identical its keys are all one key, so the values decide.
  Value::Pairs pairs;
  for (size_t k = 0; k < kN; ++k) pairs.emplace_back(Value::floating(nan), Value::integer(int64_t(k)));
  Value::Pairs shuffled(pairs.rbegin(), pairs.rend());
  EXPECT_TRUE(python_equal(Value::dict(pairs), Value::dict(shuffled), NanRule::Identical));
  EXPECT_FALSE(python_equal(Value::dict(pairs), Value::dict(shuffled), NanRule::Python));
  shuffled[7].second = Value::integer(int64_t(kN));
  EXPECT_FALSE(python_equal(Value::dict(pairs), Value::dict(shuffled), NanRule::Identical));
}

// Sets and dicts nested deep: python_equal hashes each node's subtree once (a memo), where it
// hashed it again at every level above (size x depth); the answers must stay Python's. A
// difference at the bottom, under a NaN, or between a set and a frozenset level by level.
TEST(ValueModel, DeeplyNestedSetsAndDictsCompareAsPython) {
  const double nan = std::nan("");
  constexpr int kDepth = 900;  // about CPython's recursion limit
  auto nest = [&](int depth, const Value& bottom, bool reversed, bool frozen) {
    Value v = bottom;
    for (int level = 0; level < depth; ++level) {
      Value::Items items{Value::str("a"), Value::integer(level), Value::floating(nan), v};
      if (reversed) std::reverse(items.begin(), items.end());
      v = frozen ? Value::frozenset(items) : Value::set(items);
      v = Value::dict({{Value::integer(level), v}, {Value::str("k"), Value::tuple({Value::str("t")})}});
    }
    return v;
  };
  const Value a = nest(kDepth, Value::integer(1), false, true);
  EXPECT_TRUE(python_equal(a, nest(kDepth, Value::integer(1), true, false), NanRule::Identical));
  EXPECT_TRUE(python_equal(a, nest(kDepth, Value::floating(1.0), true, true), NanRule::Identical));
  EXPECT_FALSE(python_equal(a, nest(kDepth, Value::integer(2), true, true), NanRule::Identical));
  EXPECT_FALSE(python_equal(a, nest(kDepth - 1, Value::integer(1), false, true), NanRule::Identical));
  EXPECT_FALSE(python_equal(a, a, NanRule::Python));  // every level holds a NaN
  // The same subtree met twice in one comparison (a value and its reversal, each twice).
  const Value twice = Value::tuple({a, a});
  EXPECT_TRUE(python_equal(twice, Value::tuple({nest(kDepth, Value::integer(1), true, false), a}), NanRule::Identical));
}

}  // namespace
}  // namespace azr::sandbox
