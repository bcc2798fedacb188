// The supervisor <-> zygote framing and the response pieces: a message sent in parts is the
// same bytes as one sent whole, a response sent as pieces is encode()'s bytes, and the
// supervisor's buffer returns every message intact however the stream is split.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "sandbox/framing.h"
#include "sandbox/protocol.h"
#include "sandbox/wire.h"

namespace azr::sandbox {
namespace {

std::string bytes_of(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

// Everything written to one end of a socket pair by `send` (run on a thread, since a large
// message does not fit the socket's buffer), read back from the other end until EOF.
template <typename Send>
std::string wire_bytes(Send send) {
  int sv[2];
  EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  std::thread writer([&] {
    EXPECT_TRUE(send(sv[0]));
    close(sv[0]);
  });
  std::string got;
  char buf[8192];
  ssize_t n;
  while ((n = read(sv[1], buf, sizeof buf)) > 0) got.append(buf, static_cast<size_t>(n));
  writer.join();
  close(sv[1]);
  return got;
}

TEST(Framing, PartsAreTheBytesOfTheWholePayload) {
  // Below and above the size where parts stop being coalesced into one write.
  for (size_t big : {size_t{10}, size_t{70} << 10, size_t{3} << 20}) {
    const std::string a = bytes_of(29, 1), b = bytes_of(big, 2), c = bytes_of(4, 3), d = bytes_of(big / 3, 4);
    const std::string whole = a + b + c + d;
    std::string sent_parts = wire_bytes([&](int fd) { return send_message(fd, {a, b, c, d}); });
    std::string sent_whole = wire_bytes([&](int fd) { return send_message(fd, whole); });
    ASSERT_EQ(sent_parts.size(), 4 + whole.size()) << big;
    EXPECT_TRUE(sent_parts == sent_whole) << big;
    uint32_t n;
    std::memcpy(&n, sent_parts.data(), 4);
    EXPECT_EQ(n, whole.size());
    EXPECT_TRUE(sent_parts.compare(4, std::string::npos, whole) == 0) << big;
  }
}

TEST(Framing, ResponsePiecesAreItsEncoding) {
  protocol::Response r;
  r.job_id = 0x0123456789abcdefull;
  r.end = protocol::End::KilledWall;
  r.code = 9;
  r.wall_seconds = 1.25;
  r.cpu_seconds = 0.5;
  r.records = bytes_of(200000, 5);  // binary, NULs included
  r.output = "stdout\nand stderr\n";
  protocol::ResponsePieces p = protocol::encode_pieces(r);
  const std::string encoded = protocol::encode(r);
  // The layout as protocol.h documents it, written field by field.
  std::string want;
  wire::Writer w(want);
  w.u64(r.job_id);
  w.u8(static_cast<uint8_t>(r.end));
  w.u32(static_cast<uint32_t>(r.code));
  w.f64(r.wall_seconds);
  w.f64(r.cpu_seconds);
  w.str(r.records);
  w.str(r.output);
  EXPECT_TRUE(encoded == want);
  EXPECT_TRUE(p.head + r.records + p.middle + r.output == want);
  protocol::Response back = protocol::decode_response(encoded);
  EXPECT_EQ(back.job_id, r.job_id);
  EXPECT_EQ(back.end, r.end);
  EXPECT_EQ(back.code, r.code);
  EXPECT_EQ(back.wall_seconds, r.wall_seconds);
  EXPECT_EQ(back.cpu_seconds, r.cpu_seconds);
  EXPECT_TRUE(back.records == r.records);
  EXPECT_EQ(back.output, r.output);
}

// The stream of four messages (one of 2 MiB, one empty) fed in pieces from 3 bytes to more than
// the whole stream: front() sees each message whole and only once it is complete.
TEST(Framing, MessageBufferReturnsEveryMessageHoweverTheStreamIsSplit) {
  const std::vector<std::string> msgs = {bytes_of(17, 6), bytes_of(2 << 20, 7), std::string(), bytes_of(300, 8)};
  std::string stream;
  for (const auto& m : msgs) {
    uint32_t n = static_cast<uint32_t>(m.size());
    stream.append(reinterpret_cast<const char*>(&n), 4);
    stream += m;
  }
  for (size_t chunk : {size_t{3}, size_t{4096}, size_t{65536}, size_t{3} << 20}) {
    MessageBuffer buf;
    std::vector<std::string> got;
    for (size_t at = 0; at < stream.size(); at += chunk) {
      buf.append(stream.data() + at, std::min(chunk, stream.size() - at));
      std::string_view m;
      while (buf.front(m)) {
        got.emplace_back(m);
        buf.consume();
      }
    }
    ASSERT_EQ(got.size(), msgs.size()) << chunk;
    for (size_t i = 0; i < msgs.size(); ++i) EXPECT_TRUE(got[i] == msgs[i]) << "chunk " << chunk << " message " << i;
    std::string_view none;
    EXPECT_FALSE(buf.front(none));
  }
}

TEST(Framing, OversizeFrameIsAnError) {
  MessageBuffer buf;
  uint32_t n = kMaxMessageBytes + 1;
  buf.append(reinterpret_cast<const char*>(&n), 4);
  std::string_view m;
  EXPECT_THROW(buf.front(m), std::runtime_error);
}


// --- the hello: a zygote from another build is refused before anything is misread -------------

// A request's fields survive the wire, the module name among them; a module name that is not
// printable ASCII (it becomes the program's __name__ through PyUnicode_FromString) is refused.
TEST(Request, ItsFieldsSurviveTheWireAndABadModuleNameIsRefused) {
  protocol::Request r;
  r.job_id = 42;
  r.program = "def f(x):\n    return x";
  r.entry = "f";
  r.module_name = "builtins";
  r.inputs = {"1", "'a'"};
  r.limits.cpu_seconds = 1.5;
  r.nonce[0] = 7;
  r.nonce[1] = 9;
  const protocol::Request got = protocol::decode_request(protocol::encode(r));
  EXPECT_EQ(got.job_id, 42u);
  EXPECT_EQ(got.program, r.program);
  EXPECT_EQ(got.entry, "f");
  EXPECT_EQ(got.module_name, "builtins");
  EXPECT_EQ(got.inputs, r.inputs);
  EXPECT_EQ(got.limits.cpu_seconds, 1.5);
  EXPECT_EQ(got.nonce[1], 9u);
  const std::vector<std::string> bad_names = {"", "a b", std::string("x\0y", 3), "\xc3\xa9", std::string(65, 'm')};
  for (const std::string& bad : bad_names) {
    r.module_name = bad;
    EXPECT_THROW(protocol::decode_request(protocol::encode(r)), wire::Error) << bad;
  }
}

TEST(Hello, ItsFieldsSurviveTheWire) {
  protocol::Hello h;
  h.python_version = "3.11.2";
  h.preimports = 7;
  h.missing_preimports = {"numpy"};
  h.warnings = {"filesystem not hidden: x", "y"};
  h.filesystem_hidden = true;
  h.bpf_instructions = 321;
  h.pid_in_namespace = 1;
  const protocol::Hello got = protocol::decode_hello(protocol::encode(h));
  EXPECT_EQ(got.version, protocol::kProtocolVersion);
  EXPECT_EQ(got.python_version, "3.11.2");
  EXPECT_EQ(got.preimports, 7u);
  EXPECT_EQ(got.missing_preimports, h.missing_preimports);
  EXPECT_EQ(got.warnings, h.warnings);
  EXPECT_TRUE(got.filesystem_hidden);
  EXPECT_EQ(got.bpf_instructions, 321u);
  EXPECT_EQ(got.pid_in_namespace, 1);
}

std::string mismatch_of(const std::string& payload) {
  try {
    protocol::decode_hello(payload);
  } catch (const protocol::ProtocolMismatch& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST(Hello, AnotherVersionIsRefusedWithBothVersionsNamed) {
  protocol::Hello h;
  h.version = protocol::kProtocolVersion + 1;
  const std::string why = mismatch_of(protocol::encode(h));
  EXPECT_NE(why.find("protocol " + std::to_string(protocol::kProtocolVersion + 1)), std::string::npos) << why;
  EXPECT_NE(why.find("speaks " + std::to_string(protocol::kProtocolVersion)), std::string::npos) << why;
}

TEST(Hello, OneFromBeforeVersionsIsRefused) {
  // The hello's layout before it carried a version, written field by field: a zygote that
  // started (fatal empty) with Python 3.11.2, 5 pre-imports, nothing missing, no warnings.
  std::string old;
  wire::Writer w(old);
  w.str("");
  w.str("3.11.2");
  w.u32(5);
  w.u32(0);
  w.u32(0);
  w.u8(1);
  w.u32(120);
  w.u32(1);
  EXPECT_NE(mismatch_of(old).find("no versioned protocol"), std::string::npos) << mismatch_of(old);
  EXPECT_NE(mismatch_of("AZ").find("no versioned protocol"), std::string::npos);
}

}  // namespace
}  // namespace azr::sandbox
