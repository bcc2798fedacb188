#!/usr/bin/env python3
"""An independent safetensors writer and reader (json + struct only), the truth for the C++ tests.

  make_safetensors.py gen DIR   writes, into DIR:
      values.safetensors   F16 and BF16 tensors holding all 65,536 bit patterns, F32 specials,
                           a 0-element tensor and metadata; data deliberately NOT aligned
                           (header padded to 8k+3 bytes) and laid out in a non-sorted order;
      sharded/             a two-shard checkpoint with model.safetensors.index.json;
      expected.json        {name: {"dtype", "shape", "values": [float.hex() of each element]}},
                           the decoded values computed here by independent rules: struct '<e'
                           for f16, sign/exponent/mantissa arithmetic (math.ldexp) for bf16.
  make_safetensors.py dump PATH prints what a file (or a sharded directory) holds as JSON, after
                           checking the layout rules a careful reader applies. Exit 1 on a
                           violation, with the reason on stderr.
"""
import json
import math
import os
import struct
import sys

DSIZE = {"F32": 4, "F16": 2, "BF16": 2}


def bf16_value(b):
    """The value of bf16 bit pattern b, by the IEEE rules (8-bit exponent, 7-bit mantissa)."""
    sign = -1.0 if b & 0x8000 else 1.0
    e = (b >> 7) & 0xFF
    m = b & 0x7F
    if e == 0xFF:
        return sign * math.inf if m == 0 else math.nan
    if e == 0:
        return sign * math.ldexp(m, -133)  # subnormal: m/128 * 2^-126
    return sign * math.ldexp(128 + m, e - 127 - 7)


def hexval(x):
    return "nan" if math.isnan(x) else float.hex(x)  # 'inf' / '-inf' already


def write_file(path, tensors, metadata=None, pad_to=8, extra_pad=0):
    """tensors: list of (name, dtype, shape, bytes), laid out in list order."""
    header = {}
    if metadata is not None:
        header["__metadata__"] = metadata
    pos = 0
    for name, dtype, shape, data in tensors:
        n = math.prod(shape) * DSIZE[dtype]
        assert n == len(data), name
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [pos, pos + n]}
        pos += n
    text = json.dumps(header).encode()
    text += b" " * ((-len(text)) % pad_to + extra_pad)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for _, _, _, data in tensors:
            f.write(data)


def gen(outdir):
    os.makedirs(os.path.join(outdir, "sharded"), exist_ok=True)
    expected = {}

    # F16: every bit pattern; decoded by CPython's own half-float unpacking.
    f16_bits = list(range(65536))
    f16_bytes = struct.pack("<65536H", *f16_bits)
    f16_vals = [struct.unpack("<e", struct.pack("<H", b))[0] for b in f16_bits]
    expected["all.f16"] = {"dtype": "F16", "shape": [256, 256], "values": [hexval(v) for v in f16_vals]}

    # BF16: every bit pattern; decoded arithmetically.
    bf16_bytes = struct.pack("<65536H", *range(65536))
    expected["all.bf16"] = {"dtype": "BF16", "shape": [65536], "values": [hexval(bf16_value(b)) for b in range(65536)]}

    # BF16 made the way exporters make it: the top 16 bits of the f32 (truncation).
    src = [1.0, -2.0, math.pi, -math.e, 1e-40, 3.0e38, math.inf, -math.inf, 0.0, -0.0, 1e-45, 65504.0]
    trunc = [struct.unpack("<I", struct.pack("<f", x))[0] >> 16 for x in src]
    expected["trunc.bf16"] = {"dtype": "BF16", "shape": [3, 4], "values": [hexval(bf16_value(b)) for b in trunc]}
    trunc_bytes = struct.pack("<12H", *trunc)

    # F32 specials, including the smallest subnormal and a NaN.
    f32 = [0.0, -0.0, 1.0, -2.5, 3.4028234663852886e38, 1.401298464324817e-45, 1e-40, math.inf, -math.inf,
           math.nan, 0.1, 123456.789]
    f32_bytes = struct.pack("<12f", *f32)
    f32_decoded = list(struct.unpack("<12f", f32_bytes))  # the f32 roundings of the doubles above
    expected["specials.f32"] = {"dtype": "F32", "shape": [2, 2, 3], "values": [hexval(v) for v in f32_decoded]}

    expected["empty.f32"] = {"dtype": "F32", "shape": [0, 5], "values": []}

    # Layout order is F16, BF16, F32 (not sorted by name) and the header is 8k+3 bytes, so the
    # F32 tensor starts at an odd file offset: readers must not assume alignment.
    write_file(os.path.join(outdir, "values.safetensors"),
               [("all.f16", "F16", [256, 256], f16_bytes),
                ("trunc.bf16", "BF16", [3, 4], trunc_bytes),
                ("all.bf16", "BF16", [65536], bf16_bytes),
                ("empty.f32", "F32", [0, 5], b""),
                ("specials.f32", "F32", [2, 2, 3], f32_bytes)],
               metadata={"format": "pt", "note": "made by make_safetensors.py"}, extra_pad=3)

    # Two shards plus an index, as transformers writes them.
    a = struct.pack("<4f", 1.0, 2.0, 3.0, 4.0)
    b = struct.pack("<3e", 0.5, -0.25, 2.0)
    c = struct.pack("<2H", 0x3F80, 0xC000)  # bf16 1.0, -2.0
    shard1 = "model-00001-of-00002.safetensors"
    shard2 = "model-00002-of-00002.safetensors"
    write_file(os.path.join(outdir, "sharded", shard1), [("model.a", "F32", [2, 2], a)], metadata={"format": "pt"})
    write_file(os.path.join(outdir, "sharded", shard2), [("model.b", "F16", [3], b), ("model.c", "BF16", [2], c)],
               metadata={"format": "pt"})
    index = {"metadata": {"total_size": len(a) + len(b) + len(c)},
             "weight_map": {"model.a": shard1, "model.b": shard2, "model.c": shard2}}
    with open(os.path.join(outdir, "sharded", "model.safetensors.index.json"), "w") as f:
        json.dump(index, f, indent=2)
    expected["model.a"] = {"dtype": "F32", "shape": [2, 2], "values": [hexval(v) for v in (1.0, 2.0, 3.0, 4.0)]}
    expected["model.b"] = {"dtype": "F16", "shape": [3], "values": [hexval(v) for v in (0.5, -0.25, 2.0)]}
    expected["model.c"] = {"dtype": "BF16", "shape": [2], "values": [hexval(v) for v in (1.0, -2.0)]}

    with open(os.path.join(outdir, "expected.json"), "w") as f:
        json.dump(expected, f)


def die(msg):
    print(msg, file=sys.stderr)
    sys.exit(1)


def dump_file(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    text = raw[8:8 + n]
    if n % 8:
        die(f"{path}: header length {n} is not a multiple of 8")
    if text.rstrip(b" ") != text.rstrip():
        die(f"{path}: header padded with something other than spaces")
    header = json.loads(text.decode("utf-8"))
    buf = raw[8 + n:]
    meta = header.pop("__metadata__", None)
    spans = sorted((v["data_offsets"][0], v["data_offsets"][1], k) for k, v in header.items())
    pos = 0
    for b, e, k in spans:
        if b != pos:
            die(f"{path}: tensor {k} starts at {b}, expected {pos}")
        pos = e
    if pos != len(buf):
        die(f"{path}: tensors cover {pos} of {len(buf)} buffer bytes")
    out = {"metadata": meta, "tensors": {}}
    for k, v in header.items():
        b, e = v["data_offsets"]
        if e - b != math.prod(v["shape"]) * DSIZE[v["dtype"]]:
            die(f"{path}: tensor {k} size mismatch")
        if (8 + n + b) % DSIZE[v["dtype"]]:
            die(f"{path}: tensor {k} is not aligned to its element size")
        out["tensors"][k] = {"dtype": v["dtype"], "shape": v["shape"], "hex": buf[b:e].hex()}
    return out


def dump(path):
    if not os.path.isdir(path):
        return dump_file(path)
    with open(os.path.join(path, "model.safetensors.index.json")) as f:
        index = json.load(f)
    shards = {s: dump_file(os.path.join(path, s)) for s in sorted(set(index["weight_map"].values()))}
    total = 0
    for name, s in index["weight_map"].items():
        if name not in shards[s]["tensors"]:
            die(f"index maps {name} to {s}, which lacks it")
        total += len(shards[s]["tensors"][name]["hex"]) // 2
    if total != index["metadata"]["total_size"]:
        die(f"total_size {index['metadata']['total_size']} != sum of tensor bytes {total}")
    return {"index": index, "shards": shards}


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("gen", "dump"):
        die(__doc__)
    if sys.argv[1] == "gen":
        gen(sys.argv[2])
    else:
        print(json.dumps(dump(sys.argv[2]), sort_keys=True))
