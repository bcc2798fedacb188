// libFuzzer target for the tokenizer.json loader: the input is a whole tokenizer.json. Any input
// may be refused with TokenizerError; anything else (a crash, a sanitizer report, another
// exception type escaping) is a bug. An input that loads is also used to encode and decode.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <string>

#include "model/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  // BpeTokenizer loads from a path: hand it the input through a file in memory-backed /dev/shm.
  static const std::string path = "/dev/shm/azr-tokenizer-fuzz-" + std::to_string(getpid()) + ".json";
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  try {
    azr::model::BpeTokenizer tok(path);
    auto ids = tok.encode("def f(x):\n    return x + 1  # \xc3\xa9\xe4\xb8\x96 <|im_start|>");
    (void)tok.decode(ids);
  } catch (const azr::model::TokenizerError&) {
  }
  return 0;
}
