#include "sandbox/protocol.h"

#include <algorithm>

#include "sandbox/wire.h"

namespace azr::sandbox::protocol {

namespace {
void put_list(wire::Writer& w, const std::vector<std::string>& v) {
  w.u32(static_cast<uint32_t>(v.size()));
  for (const auto& s : v) w.str(s);
}
std::vector<std::string> get_list(wire::Reader& rd) {
  uint32_t n = rd.u32();
  if (n > rd.remaining() / 4) throw wire::Error("list count exceeds message");
  std::vector<std::string> v;
  for (uint32_t i = 0; i < n; ++i) v.emplace_back(rd.str());
  return v;
}
}  // namespace

std::string encode(const Hello& h) {
  std::string out;
  wire::Writer w(out);
  w.u32(kHelloMagic);
  w.u32(h.version);
  w.str(h.fatal);
  w.str(h.python_version);
  w.u32(h.preimports);
  put_list(w, h.missing_preimports);
  put_list(w, h.warnings);
  w.u8(h.filesystem_hidden);
  w.u32(h.bpf_instructions);
  w.u32(static_cast<uint32_t>(h.pid_in_namespace));
  return out;
}

Hello decode_hello(std::string_view payload) {
  wire::Reader rd(payload);
  Hello h;
  // A zygote from before versions opens with its `fatal` string, whose length (0 when it
  // started) is no magic; a short payload cannot be a hello of any version.
  if (payload.size() < 8 || rd.u32() != kHelloMagic)
    throw ProtocolMismatch("it speaks no versioned protocol (an azr-zygote from an older build?), this azr speaks " +
                           std::to_string(kProtocolVersion));
  h.version = rd.u32();
  if (h.version != kProtocolVersion)
    throw ProtocolMismatch("it speaks protocol " + std::to_string(h.version) + ", this azr speaks " +
                           std::to_string(kProtocolVersion));
  h.fatal = rd.str();
  h.python_version = rd.str();
  h.preimports = rd.u32();
  h.missing_preimports = get_list(rd);
  h.warnings = get_list(rd);
  h.filesystem_hidden = rd.u8() != 0;
  h.bpf_instructions = rd.u32();
  h.pid_in_namespace = static_cast<int32_t>(rd.u32());
  if (rd.remaining() != 0) throw wire::Error("trailing bytes in hello");
  return h;
}

std::string encode(const Request& r) {
  std::string out;
  wire::Writer w(out);
  w.u64(r.job_id);
  w.u8(static_cast<uint8_t>(r.op));
  w.u8(static_cast<uint8_t>(r.input_mode));
  w.str(r.program);
  w.str(r.entry);
  w.str(r.module_name);
  w.u32(static_cast<uint32_t>(r.inputs.size()));
  for (const auto& in : r.inputs) w.str(in);
  w.f64(r.limits.cpu_seconds);
  w.f64(r.limits.wall_seconds);
  w.u64(r.limits.memory_bytes);
  w.u64(r.limits.max_output_bytes);
  w.u64(r.limits.max_result_bytes);
  w.u64(r.nonce[0]);
  w.u64(r.nonce[1]);
  return out;
}

Request decode_request(std::string_view payload) {
  wire::Reader rd(payload);
  Request r;
  r.job_id = rd.u64();
  uint8_t op = rd.u8();
  if (op != static_cast<uint8_t>(Op::RunProgram) && op != static_cast<uint8_t>(Op::ParseLiterals))
    throw wire::Error("unknown op");
  r.op = static_cast<Op>(op);
  uint8_t mode = rd.u8();
  if (mode > static_cast<uint8_t>(InputMode::Expression)) throw wire::Error("unknown input mode");
  r.input_mode = static_cast<InputMode>(mode);
  r.program = rd.str();
  r.entry = rd.str();
  r.module_name = rd.str();
  // It becomes the program's __name__ through PyUnicode_FromString: printable ASCII only.
  if (r.module_name.empty() || r.module_name.size() > 64 ||
      !std::all_of(r.module_name.begin(), r.module_name.end(), [](char c) { return c > ' ' && c < 0x7f; }))
    throw wire::Error("bad module name");
  uint32_t n = rd.u32();
  if (n > rd.remaining() / 4) throw wire::Error("input count exceeds message");
  r.inputs.reserve(n);
  for (uint32_t i = 0; i < n; ++i) r.inputs.emplace_back(rd.str());
  r.limits.cpu_seconds = rd.f64();
  r.limits.wall_seconds = rd.f64();
  r.limits.memory_bytes = rd.u64();
  r.limits.max_output_bytes = rd.u64();
  r.limits.max_result_bytes = rd.u64();
  r.nonce[0] = rd.u64();
  r.nonce[1] = rd.u64();
  if (rd.remaining() != 0) throw wire::Error("trailing bytes in request");
  return r;
}

ResponsePieces encode_pieces(const Response& r) {
  ResponsePieces p;
  wire::Writer head(p.head);
  head.u64(r.job_id);
  head.u8(static_cast<uint8_t>(r.end));
  head.u32(static_cast<uint32_t>(r.code));
  head.f64(r.wall_seconds);
  head.f64(r.cpu_seconds);
  head.u32(static_cast<uint32_t>(r.records.size()));  // then the records: wire::Writer::str's layout
  wire::Writer middle(p.middle);
  middle.u32(static_cast<uint32_t>(r.output.size()));  // then the output
  return p;
}

std::string encode(const Response& r) {
  ResponsePieces p = encode_pieces(r);
  return p.head + r.records + p.middle + r.output;
}

Response decode_response(std::string_view payload) {
  wire::Reader rd(payload);
  Response r;
  r.job_id = rd.u64();
  uint8_t end = rd.u8();
  if (end < static_cast<uint8_t>(End::Exited) || end > static_cast<uint8_t>(End::LockdownFailed))
    throw wire::Error("unknown end kind");
  r.end = static_cast<End>(end);
  r.code = static_cast<int32_t>(rd.u32());
  r.wall_seconds = rd.f64();
  r.cpu_seconds = rd.f64();
  r.records = rd.str();
  r.output = rd.str();
  if (rd.remaining() != 0) throw wire::Error("trailing bytes in response");
  return r;
}

}  // namespace azr::sandbox::protocol
