#!/usr/bin/env python3
"""Independent reader for TensorBoard event files, the truth the C++ writer is tested against.

Parses the TFRecord framing, checks both masked CRC-32Cs with its own CRC implementation, and
decodes each record with the google.protobuf library through a descriptor built at runtime
(no generated code, no tensorflow). Prints a JSON list:
  [{"wall_time": w, "step": s, "file_version": v} | {"wall_time": w, "step": s, "values": {tag: x}}
   | {"wall_time": w, "step": s, "session_log": status}]  (event.proto: session_log = 7, START = 1)
Non-finite floats are printed as the strings "nan", "inf", "-inf" (JSON has no NaN).
Exit 1 with a message on stderr for any framing, CRC or decoding error; 3 when google.protobuf
is missing (the caller skips then).
"""
import json
import math
import struct
import sys

try:
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
except ImportError as e:  # pragma: no cover - depends on the machine
    print(f"google.protobuf unavailable: {e}", file=sys.stderr)
    sys.exit(3)


def _crc32c_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _crc32c_table()


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc = _TABLE[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked(crc):
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


assert crc32c(b"123456789") == 0xE3069283, "reader's own CRC-32C is wrong"


def event_class():
    F = descriptor_pb2.FieldDescriptorProto
    fdp = descriptor_pb2.FileDescriptorProto(name="azr_test_event.proto", package="azrtest", syntax="proto3")

    value = fdp.message_type.add(name="Value")
    value.field.add(name="tag", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    value.field.add(name="simple_value", number=2, type=F.TYPE_FLOAT, label=F.LABEL_OPTIONAL)

    summary = fdp.message_type.add(name="Summary")
    summary.field.add(name="value", number=1, type=F.TYPE_MESSAGE, type_name=".azrtest.Value", label=F.LABEL_REPEATED)

    session_log = fdp.message_type.add(name="SessionLog")
    session_log.field.add(name="status", number=1, type=F.TYPE_INT32, label=F.LABEL_OPTIONAL)  # an enum on the wire

    event = fdp.message_type.add(name="Event")
    event.oneof_decl.add(name="what")
    event.field.add(name="wall_time", number=1, type=F.TYPE_DOUBLE, label=F.LABEL_OPTIONAL)
    event.field.add(name="step", number=2, type=F.TYPE_INT64, label=F.LABEL_OPTIONAL)
    event.field.add(name="file_version", number=3, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL, oneof_index=0)
    event.field.add(name="summary", number=5, type=F.TYPE_MESSAGE, type_name=".azrtest.Summary",
                    label=F.LABEL_OPTIONAL, oneof_index=0)
    event.field.add(name="session_log", number=7, type=F.TYPE_MESSAGE, type_name=".azrtest.SessionLog",
                    label=F.LABEL_OPTIONAL, oneof_index=0)

    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    desc = pool.FindMessageTypeByName("azrtest.Event")
    if hasattr(message_factory, "GetMessageClass"):  # protobuf >= 4.22
        return message_factory.GetMessageClass(desc)
    return message_factory.MessageFactory(pool).GetPrototype(desc)


def unknown_field_count(msg):
    """Fields the descriptor does not know: a wrong field number or wire type in the writer."""
    try:
        from google.protobuf import unknown_fields  # protobuf >= 4.22
        n = len(unknown_fields.UnknownFieldSet(msg))
    except ImportError:
        n = len(msg.UnknownFields())
    for field, val in msg.ListFields():
        if field.type == field.TYPE_MESSAGE:
            for sub in (val if field.label == field.LABEL_REPEATED else [val]):
                n += unknown_field_count(sub)
    return n


def jsonable(x):
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return x


def read(path):
    Event = event_class()
    data = open(path, "rb").read()
    pos, out = 0, []
    while pos < len(data):
        if len(data) - pos < 12:
            raise ValueError(f"truncated record header at byte {pos}")
        header = data[pos:pos + 8]
        (length,) = struct.unpack("<Q", header)
        (length_crc,) = struct.unpack("<I", data[pos + 8:pos + 12])
        if length_crc != masked(crc32c(header)):
            raise ValueError(f"bad length CRC at byte {pos}")
        body_start = pos + 12
        if len(data) - body_start < length + 4:
            raise ValueError(f"truncated record body at byte {pos}")
        body = data[body_start:body_start + length]
        (data_crc,) = struct.unpack("<I", data[body_start + length:body_start + length + 4])
        if data_crc != masked(crc32c(body)):
            raise ValueError(f"bad data CRC at byte {pos}")
        pos = body_start + length + 4

        ev = Event()
        ev.ParseFromString(body)
        if unknown_field_count(ev):
            raise ValueError(f"record at byte {pos}: unknown protobuf fields")
        rec = {"wall_time": ev.wall_time, "step": ev.step}
        which = ev.WhichOneof("what")
        if which == "file_version":
            rec["file_version"] = ev.file_version
        elif which == "session_log":
            rec["session_log"] = ev.session_log.status
        elif which == "summary":
            rec["values"] = {v.tag: jsonable(v.simple_value) for v in ev.summary.value}
            rec["tags"] = [v.tag for v in ev.summary.value]
        out.append(rec)
    return out


def main():
    if len(sys.argv) != 2:
        print("usage: read_tfevents.py EVENT_FILE", file=sys.stderr)
        return 2
    try:
        records = read(sys.argv[1])
    except Exception as e:  # every failure is a finding for the caller
        print(f"read_tfevents: {e}", file=sys.stderr)
        return 1
    print(json.dumps(records))
    return 0


if __name__ == "__main__":
    sys.exit(main())
