#pragma once
// Named configurations of the models azr creates itself (byte-level vocabulary, Qwen2
// architecture), so "a new model" is one word in a config or on the command line.
//   azr-tiny  ~0.8M parameters: hidden 128, 4 layers, 4 heads (2 KV), MLP 352. The quickstart's
//             model: trains at thousands of tokens/s on a laptop CPU.
//   azr-25m   ~25M parameters: hidden 512, 8 layers, 8 heads (4 KV), MLP 1536. The largest that is
//             still comfortable on a CPU; the benchmark's second size.
#include <string>
#include <string_view>
#include <vector>

#include "model/hf_config.h"

namespace azr::model {

std::vector<std::string> preset_names();
// Throws ConfigError naming the known presets for an unknown name.
ModelConfig preset_config(std::string_view name);

}  // namespace azr::model
