// libFuzzer target for the safetensors header parser: the input is a whole file. Any input may
// be rejected with SafetensorsError; anything else (a crash, a sanitizer report, another
// exception type) is a bug.
#include <cstddef>
#include <cstdint>
#include <span>

#include "model/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::span<const std::byte> file(reinterpret_cast<const std::byte*>(data), size);
  try {
    auto h = azr::model::parse_header(file, size, "fuzz");
    // Touch every accepted tensor's bytes: the parser promised they lie inside the input.
    // And count its elements, as every loader does (a product that overflowed was UB).
    unsigned sum = 0;
    for (std::size_t i = 0; i < h.tensors.size(); ++i) {
      sum += static_cast<unsigned>(h.tensors[i].numel());
      for (std::size_t j = 0; j < h.tensors[i].nbytes; ++j) sum += static_cast<unsigned>(file[h.offsets[i] + j]);
    }
    static volatile unsigned sink;  // keeps the reads from being optimised away
    sink = sink + sum;
  } catch (const azr::model::SafetensorsError&) {
  }
  return 0;
}
