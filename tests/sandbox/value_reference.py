"""Reference corpus for tests/sandbox/value_test.cpp, computed by CPython itself.

Usage: /usr/bin/python3.11 -I -S value_reference.py MODE, where MODE is

  values   one line per value:  V <wire hex> <repr> <hash>
             <repr> is r:<hex of repr(v) as UTF-8>, or e:<hex of the ValueError message> when
             repr raises; <hash> is hash(v) in decimal for values built only from numbers,
             tuples and frozensets (no NaN, whose hash is address-based), else "-".
  unicode  the same lines for strings that together hold every code point U+0000..U+10FFFF.
  pairs    one line per pair:   P <wire a hex> <wire b hex> <a == b> <identical>
             <a == b> is Python's verdict (0/1) on objects that share nothing, so no identity
             shortcut hides a NaN; <identical> is the same comparison with NaN equal to NaN.

The encoder here is written from the wire-format description in sandbox/value.h,
independently of the C++ code, and walks values with exact type checks like the sandbox child.
"""

import math
import random
import struct
import sys

SEED = 20240611


# ---------------------------------------------------------------------------------------------
# Encoder (the truth for the wire format)

def encode(v, out, shuffle=None, canonical=False):
    """Append the wire form of v to the bytearray out. With a random.Random as shuffle, set
    and dict entries are written in a random order (same value, different encoding); with
    canonical, set elements are sorted by their own canonical encoding instead of iterated."""
    t = type(v)
    if v is None:
        out += b"N"
    elif v is Ellipsis:
        out += b"."
    elif t is bool:
        out += b"T" if v else b"F"
    elif t is int:
        if -(2**63) <= v < 2**63:
            out += b"i" + struct.pack("<q", v)
        else:
            mag = abs(v)
            raw = mag.to_bytes((mag.bit_length() + 7) // 8, "little")
            out += b"I" + bytes([1 if v < 0 else 0]) + struct.pack("<I", len(raw)) + raw
    elif t is float:
        out += b"f" + struct.pack("<d", v)
    elif t is complex:
        out += b"c" + struct.pack("<dd", v.real, v.imag)
    elif t is str:
        raw = v.encode("utf-8", "surrogatepass")
        out += b"s" + struct.pack("<I", len(raw)) + raw
    elif t is bytes or t is bytearray:
        out += (b"b" if t is bytes else b"a") + struct.pack("<I", len(v)) + v
    elif t in (tuple, list, set, frozenset):
        items = list(v)
        if (shuffle is not None or canonical) and t in (set, frozenset):
            # Shuffling starts from the canonical order too: iteration order of strs varies
            # from run to run, and it must not change how much of the random stream is used.
            items.sort(key=canonical_key)
            if shuffle is not None:
                shuffle.shuffle(items)
        out += {tuple: b"t", list: b"l", set: b"S", frozenset: b"z"}[t]
        out += struct.pack("<I", len(items))
        for item in items:
            encode(item, out, shuffle, canonical)
    elif t is dict:
        entries = list(v.items())
        if shuffle is not None:
            shuffle.shuffle(entries)
        out += b"d" + struct.pack("<I", len(entries))
        for key, val in entries:
            encode(key, out, shuffle, canonical)
            encode(val, out, shuffle, canonical)
    else:
        raise TypeError(f"cannot encode {t.__name__}")
    return out


def wire_hex(v, shuffle=None):
    return bytes(encode(v, bytearray(), shuffle)).hex()


def canonical_key(v):
    return bytes(encode(v, bytearray(), canonical=True))


# ---------------------------------------------------------------------------------------------
# Helpers

def f64(bits):
    return struct.unpack("<d", struct.pack("<Q", bits))[0]


def fresh_float(x):
    """A new float object with the same bits (NaN payload and sign included)."""
    return struct.unpack("<d", struct.pack("<d", x))[0]


NAN = f64(0x7FF8000000000000)
NEG_NAN = f64(0xFFF8000000000000)
INF = math.inf


def has_nan(v):
    t = type(v)
    if t is float:
        return v != v
    if t is complex:
        return v.real != v.real or v.imag != v.imag
    if t in (tuple, list, set, frozenset):
        return any(has_nan(x) for x in v)
    if t is dict:
        return any(has_nan(k) or has_nan(x) for k, x in v.items())
    return False


def numeric_hashable(v):
    """Built only from numbers, tuples and frozensets: hash(v) is then fully deterministic."""
    t = type(v)
    if t in (bool, int, float, complex):
        return not has_nan(v)
    if t in (tuple, frozenset):
        return all(numeric_hashable(x) for x in v)
    return False


def value_line(v):
    try:
        rep = "r:" + repr(v).encode("utf-8").hex()
    except ValueError as e:  # int of more than 4300 digits
        rep = "e:" + str(e).encode("utf-8").hex()
    h = str(hash(v)) if numeric_hashable(v) else "-"
    return f"V {wire_hex(v)} {rep} {h}"


# ---------------------------------------------------------------------------------------------
# Hand-picked values

def edge_ints():
    out = [0, 1, -1, 2, -2, 9, 10, 255, 256, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**53, 2**53 + 1,
           2**63 - 1, -(2**63), 2**63, -(2**63) - 1, 2**64 - 1, 2**64, -(2**64), 2**96 + 7,
           10**9 - 1, 10**9, 10**18, 10**19, -(10**19), 10**38 + 1, 123456789012345678901234567890]
    # The 4300-digit limit, on both sides and with both signs; 2**14284 and 2**14286 straddle it.
    out += [10**4299, 10**4300 - 1, -(10**4300 - 1), 10**4300, -(10**4300), 10**4300 + 1,
            2**14284, 2**14286, 2**14300, -(2**14301), 2**20000, 7**5000, 3**9000]
    return out


def edge_floats():
    out = [0.0, -0.0, 1.0, -1.0, 0.1, 0.2, 0.3, 1 / 3, 2 / 3, 0.5, 100.0, 123456789.0, 1.5, -2.75,
           1e15, 1e16, 1e16 - 2, 1234567890123456.0, 12345678901234567.0, 9007199254740993.0,
           1e17, 1e22, 1e23, 1e-4, 1e-5, 1.5e-5, 0.00012345, 9.999999999999999e-05, 0.0001000001,
           1e-7, 1e100, -1e100, 1e308, 1.7976931348623157e308, 2.2250738585072014e-308,
           2.225073858507201e-308, 5e-324, -5e-324, 2.0**53, 2.0**63, 2.0**64, 2.0**1023,
           INF, -INF, NAN, NEG_NAN, f64(0x7FF0000000000001), f64(0xFFFFFFFFFFFFFFFF),
           9999999999999998.0, 999999999999999.9, 0.30000000000000004, 4.35, 2.675, 1e-10]
    # Around every power of ten where repr switches notation.
    for e in (-5, -4, -3, 15, 16, 17):
        x = 10.0**e
        out += [x, math.nextafter(x, 0), math.nextafter(x, INF), -x]
    return out


def edge_complex():
    return [1 + 2j, 2j, -2j, complex(-0.0, 1), complex(1, NAN), complex(NAN, INF), 0j,
            complex(-0.0, -0.0), complex(0.0, -0.0), complex(-0.0, 0.0), complex(1e16, 1e-5),
            complex(1.5, -0.0), complex(-INF, NEG_NAN), complex(0, NAN), complex(0, -INF),
            complex(1, 0), complex(2**53, 1), complex(1e-5, -1e16), complex(0.1, 0.2),
            complex(5e-324, 1.7976931348623157e308), complex(NAN, 0), complex(-1, -1)]


def edge_strs():
    out = ["", "a", "'", '"', "'\"", "it's", 'say "hi"', "both ' and \"", "\\", "\\'", "\t\n\r",
           "".join(chr(c) for c in range(0x20)), "\x7f\x80\x9f\xa0\xa1\xad\xff", "é", "naïve",
           "\u0301", "e\u0301", "\u2028", "\u2029", "\u200b", "\u200d", "\ufeff", "\u3000",
           "\u00a0", "\ud800", "\udfff", "\udbff\udc00", "\ud83d\ude00", "\U0001F600", "😀x",
           "\ue000", "\uf8ff", "\U000F0000", "\U0010FFFF", "\U0010FFFD", "\u0378", "\U0001FFFF",
           "\U000E0001", "\U000E0100", "\ufffd", "\uffff", "\ufdd0", "中文字符", "Ω≈ç√",
           "\x00", "a\x00b", "\x1b[0m", "\u0085", "\u061c", "\u1680", "\u2000\u200a",
           "\U00013430", "\U0001D173", "\U00020000", "\U0002A6DF", "\U0003134A", "\U0003134B",
           "mixed 'q' \"dq\" \\ \t é \u2028 \ud800 \U0001F600 \x7f"]
    return out


def edge_bytes():
    out = [b"", b"a", b"'", b'"', b"'\"", b"it's", b"\\", b"\t\n\r", bytes(range(256)),
           b"\x00\x7f\x80\xff", b"say \"hi\"", b"\\'\""]
    return out + [bytearray(b) for b in out]


def edge_containers():
    nested = 0
    for _ in range(60):
        nested = [nested]
    deep_tuple = ()
    for _ in range(40):
        deep_tuple = (deep_tuple,)
    return [
        (), (1,), (1, 2), ((),), ((1,),), [], [1], [1, 2], [[]], {}, {1: 2}, {"a": 1, "b": [2]},
        set(), frozenset(), {1, 2}, frozenset({1, 2}), {1, 2.5, True},
        dict([(1, "a"), (True, "b")]),  # a single key, 1, holding "b"
        {0, 0.0, False, -0.0, 0j}, {1, 1.0, True, 1 + 0j}, {NAN},
        {fresh_float(NAN), fresh_float(NAN)},  # two distinct NaN objects: two elements
        {frozenset(): set(), (): [], "": b""}, [(), [], {}, set(), frozenset()],
        {frozenset({1}): [set()]}, {(1, 2): {"a": b"b"}}, frozenset({frozenset({frozenset()})}),
        {frozenset({1, 2}), frozenset(), (3, "x")}, [None, True, False, Ellipsis, ...],
        (None,), [1.0, -0.0, 2j, "s", b"b", bytearray(b"ba")], {None: None, Ellipsis: ...},
        {"'": '"', '"': "'"}, [10**4300], (1, [2, (3, {4: {5}})]), nested, deep_tuple,
        [NAN, NEG_NAN, INF], {2**64: 2**64, -(2**64): 1e300},
    ]


# ---------------------------------------------------------------------------------------------
# Pseudo-random values

CHAR_POOLS = [
    (0x20, 0x7E), (0x00, 0x1F), (0x7F, 0xFF), (0x100, 0x2FFF), (0x2000, 0x206F),
    (0xD800, 0xDFFF), (0xE000, 0xF8FF), (0xF900, 0xFFFF), (0x10000, 0x1FFFF),
    (0x20000, 0x3FFFF), (0xE0000, 0xE01FF), (0xF0000, 0x10FFFF), (0x300, 0x36F),
]


def rand_int(rng):
    kind = rng.randrange(6)
    if kind == 0:
        return rng.randint(-10, 10)
    if kind == 1:
        power = rng.choice([2**31, 2**32, 2**53, 2**63, 2**64])
        return power * rng.choice([1, -1]) + rng.randint(-2, 2)
    if kind == 2:
        return rng.getrandbits(rng.randint(1, 64)) * rng.choice([1, -1])
    if kind == 3:
        return rng.getrandbits(rng.randint(65, 400)) * rng.choice([1, -1])
    if kind == 4:
        return rng.getrandbits(rng.randint(400, 5000)) * rng.choice([1, -1])
    return rng.randint(-(10**6), 10**6)


def rand_float(rng):
    kind = rng.randrange(6)
    if kind == 0:
        return f64(rng.getrandbits(64))  # anything, NaN payloads and subnormals included
    if kind == 1:
        return rng.choice(edge_floats())
    if kind == 2:  # short decimals at every magnitude: exercises the notation switch
        return float(f"{rng.randint(1, 99999)}e{rng.randint(-30, 30)}") * rng.choice([1, -1])
    if kind == 3:
        return float(rng.randint(-(2**60), 2**60))
    if kind == 4:
        return rng.uniform(-1000, 1000)
    return math.ldexp(rng.random(), rng.randint(-1074, 1023))


def rand_str(rng):
    chars = []
    for _ in range(rng.randint(0, 12)):
        if rng.random() < 0.15:
            chars.append(rng.choice("'\"\\\t\n\r"))
        else:
            lo, hi = rng.choice(CHAR_POOLS)
            chars.append(chr(rng.randint(lo, hi)))
    return "".join(chars)


def rand_bytes(rng):
    n = rng.randint(0, 12)
    return bytes(rng.choice(b"'\"\\\t\n\r\x00\x7f\x80\xffaZ ") if rng.random() < 0.4
                 else rng.randrange(256) for _ in range(n))


def rand_leaf(rng, hashable):
    kind = rng.randrange(11)
    if kind == 0:
        return rng.choice([None, True, False, Ellipsis])
    if kind in (1, 2):
        return rand_int(rng)
    if kind in (3, 4):
        return rand_float(rng)
    if kind == 5:
        return complex(rand_float(rng), rand_float(rng))
    if kind in (6, 7):
        return rand_str(rng)
    if kind == 8 or hashable:
        return rand_bytes(rng)
    return bytearray(rand_bytes(rng))


def rand_value(rng, depth=0, hashable=False):
    if depth >= 4 or rng.random() < 0.45:
        return rand_leaf(rng, hashable)
    n = rng.randint(0, 5)
    kinds = ["tuple", "frozenset"] if hashable else ["tuple", "list", "dict", "set", "frozenset"]
    kind = rng.choice(kinds)
    if kind == "tuple":
        return tuple(rand_value(rng, depth + 1, hashable) for _ in range(n))
    if kind == "list":
        return [rand_value(rng, depth + 1) for _ in range(n)]
    if kind == "dict":
        return {rand_value(rng, depth + 1, True): rand_value(rng, depth + 1) for _ in range(n)}
    items = [rand_value(rng, depth + 1, True) for _ in range(n)]
    return set(items) if kind == "set" else frozenset(items)


def rand_numeric(rng, depth=0):
    """Numbers, tuples and frozensets only: values whose hash() Python fixes."""
    if depth >= 3 or rng.random() < 0.5:
        kind = rng.randrange(4)
        if kind == 0:
            return rand_int(rng) if rng.random() < 0.7 else rng.random() < 0.5
        if kind == 1:
            return rand_float(rng)
        if kind == 2:
            return complex(rand_float(rng), rand_float(rng))
        return float(rng.randint(-(2**70), 2**70))
    items = [rand_numeric(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    return tuple(items) if rng.random() < 0.5 else frozenset(items)


# ---------------------------------------------------------------------------------------------
# Pairs: twins (equal values in another spelling) and mutants

def stable(items):
    """Set elements in an order that does not depend on str hash randomization (which -I leaves
    on), so the random stream, and with it the whole corpus, is the same on every run."""
    return sorted(items, key=canonical_key)


def twin(v, rng, hashable=False):
    """A value equal to v (unless v holds a NaN), rebuilt from new objects, with numbers moved
    to other numeric kinds where exact, bytes <-> bytearray and set <-> frozenset."""
    t = type(v)
    if t is bool:
        return rng.choice([v, int(v), float(v), complex(v, 0.0)])
    if t is int:
        options = [v]
        if abs(v) < 2**1000 and float(v) == v:
            options += [float(v), complex(float(v), rng.choice([0.0, -0.0]))]
        if v in (0, 1):
            options.append(bool(v))
        return rng.choice(options)
    if t is float:
        options = [fresh_float(v)]
        if v == v and v == 0:
            options.append(-v)
        if math.isfinite(v) and v.is_integer():
            options.append(int(v))
        options.append(complex(v, rng.choice([0.0, -0.0])))
        return rng.choice(options)
    if t is complex:
        if v.imag == 0:
            return rng.choice([complex(fresh_float(v.real), -v.imag), fresh_float(v.real)])
        return complex(fresh_float(v.real), fresh_float(v.imag))
    if t is str:
        return v
    if t in (bytes, bytearray):
        return bytes(v) if hashable or rng.random() < 0.5 else bytearray(v)
    if t is tuple:
        return tuple(twin(x, rng, hashable) for x in v)
    if t is list:
        return [twin(x, rng) for x in v]
    if t in (set, frozenset):
        items = [twin(x, rng, True) for x in stable(v)]
        return frozenset(items) if hashable or rng.random() < 0.5 else set(items)
    if t is dict:
        return {twin(k, rng, True): twin(x, rng) for k, x in v.items()}
    return v  # None, Ellipsis


def mutate(v, rng, hashable=False):
    """A twin with one random change somewhere (which may or may not break equality)."""
    t = type(v)
    if t in (tuple, list) and v and rng.random() < 0.7:
        items = [twin(x, rng, hashable) for x in v]
        i = rng.randrange(len(items))
        items[i] = mutate(v[i], rng, hashable)
        return tuple(items) if t is tuple else items
    if t is dict and v and rng.random() < 0.7:
        out = twin(v, rng)
        key = rng.choice(list(out))
        out[key] = mutate(out[key], rng)
        return out
    choice = rng.randrange(5)
    if choice == 0 and t is list:
        return tuple(twin(x, rng) for x in v)
    if choice == 0 and t is tuple and not hashable:
        return [twin(x, rng) for x in v]
    if choice == 1 and t is int:
        return v + rng.choice([1, -1])
    if choice == 1 and t is float:
        return math.nextafter(v, rng.choice([INF, -INF]))
    if choice == 2 and t is str:
        return v + "x"
    if choice == 2 and t in (set, frozenset):
        return t(stable(v)[1:])
    return rand_value(rng, 2, hashable)


def ident_eq(a, b):
    """Python's == with NaN equal to NaN everywhere, written out by the language rules."""
    numbers = (bool, int, float, complex)
    ta, tb = type(a), type(b)
    if ta in numbers or tb in numbers:
        if ta not in numbers or tb not in numbers:
            return False

        def parts(x):
            return (x.real, x.imag) if type(x) is complex else (x, 0)

        def same(x, y):  # bool/int/float; Python compares int with float exactly
            return x == y or (type(x) is float and type(y) is float and x != x and y != y)

        (ar, ai), (br, bi) = parts(a), parts(b)
        return same(ar, br) and same(ai, bi)
    bytes_like = (bytes, bytearray)
    if ta in bytes_like or tb in bytes_like:
        return ta in bytes_like and tb in bytes_like and a == b
    set_like = (set, frozenset)
    if ta in set_like or tb in set_like:
        return ta in set_like and tb in set_like and match_all(list(a), list(b), ident_eq)
    if ta is not tb:
        return False
    if ta in (tuple, list):
        return len(a) == len(b) and all(ident_eq(x, y) for x, y in zip(a, b))
    if ta is dict:
        return match_all(list(a.items()), list(b.items()),
                         lambda p, q: ident_eq(p[0], q[0]) and ident_eq(p[1], q[1]))
    return a == b


def match_all(xs, ys, eq):
    if len(xs) != len(ys):
        return False
    unused = list(ys)
    for x in xs:
        for i, y in enumerate(unused):
            if eq(x, y):
                del unused[i]
                break
        else:
            return False
    return True


def pair_line(a, b, shuffle=None):
    eq = a == b
    ident = ident_eq(a, b)
    if not has_nan(a) and not has_nan(b) and eq != ident:
        raise AssertionError(f"reference ident_eq disagrees with == on {a!r} vs {b!r}")
    return f"P {wire_hex(a)} {wire_hex(b, shuffle)} {int(eq)} {int(ident)}"


def numeric_pair_values():
    """Built anew on every call, so the two sides of a pair never share a NaN object."""
    big = int(1e308)
    return [0, 0.0, -0.0, False, True, 1, 1.0, 1 + 0j, complex(1, -0.0), complex(-0.0, 0), 0j,
            -1, -1.0, complex(-1, 0), 2, 2.0, 2j, 0.5, complex(0.5, 0), 2**53, 2**53 + 1,
            float(2**53), 2.0**53 + 2, 2**53 + 2, 2**63, -(2**63), float(2**63), 2**64,
            2**1023, float(2**1023), 2**1024, big, float(big), -big, -float(big), big + 1,
            10**400, -(10**400), INF, -INF, fresh_float(NAN), fresh_float(NEG_NAN),
            complex(fresh_float(NAN), 0), complex(0, fresh_float(NAN)),
            complex(fresh_float(NAN), fresh_float(NAN)), complex(INF, 0), complex(2**53, 0),
            complex(2.0**53 + 2, 0), 5e-324, 0.1, complex(0.1, 0)]


def other_pair_values():
    return ["a", "", b"a", b"", bytearray(b"a"), bytearray(), (1,), [1], (), [], {1}, set(),
            frozenset({1}), frozenset(), {1: None}, {}, None, Ellipsis, "None", (1, 2), (2, 1),
            [1, 2], [2, 1], {1, 2}, {2, 1.0}, frozenset({1.0, 2}), {1: 2, 3: 4}, {3: 4, 1: 2},
            {1.0: 2.0, 3: 4}, {1: 3, 3: 4}, {1: 2}, [fresh_float(NAN)], (fresh_float(NAN),),
            {fresh_float(NAN)}, frozenset({fresh_float(NAN)}), {fresh_float(NAN): 1},
            {1: fresh_float(NAN)}, [[1, 2], {3}], [[1.0, 2.0], frozenset({3})], 1, "1", b"1"]


# ---------------------------------------------------------------------------------------------

def mode_values():
    rng = random.Random(SEED)
    values = [None, True, False, Ellipsis]
    values += edge_ints() + edge_floats() + edge_complex() + edge_strs() + edge_bytes()
    values += edge_containers()
    values += [rand_value(rng) for _ in range(3000)]
    values += [rand_numeric(rng) for _ in range(1000)]
    return [value_line(v) for v in values]


def mode_unicode():
    step = 0x1000
    return [value_line("".join(map(chr, range(lo, lo + step)))) for lo in range(0, 0x110000, step)]


def mode_pairs():
    rng = random.Random(SEED + 1)
    lines = []
    for i in range(len(numeric_pair_values())):
        for j in range(len(numeric_pair_values())):
            lines.append(pair_line(numeric_pair_values()[i], numeric_pair_values()[j]))
    count = len(other_pair_values())
    for i in range(count):
        for j in range(count):
            lines.append(pair_line(other_pair_values()[i], other_pair_values()[j]))
    for _ in range(2500):
        a = rand_value(rng)
        b = twin(a, rng) if rng.random() < 0.6 else mutate(a, rng)
        lines.append(pair_line(a, b, rng if rng.random() < 0.5 else None))
    for _ in range(500):
        lines.append(pair_line(rand_value(rng), rand_value(rng)))
    return lines


def main():
    modes = {"values": mode_values, "unicode": mode_unicode, "pairs": mode_pairs}
    if len(sys.argv) != 2 or sys.argv[1] not in modes:
        sys.exit(f"usage: value_reference.py {{{'|'.join(modes)}}}")
    sys.stdout.write("\n".join(modes[sys.argv[1]]()) + "\n")


if __name__ == "__main__":
    main()
