#pragma once
// A tensor's place in a model's flat buffers against its place in a file of those values
// (Transformer::file_order, AdamW's state): the buffers' layout may change between versions of azr
// (build_layout), a file's order does not.
#include <cstddef>

namespace azr::model {

// numel values at `offset` in a flat buffer of the model's layout are at `file_offset` in a file of
// the flat values in expected_tensors()' order.
struct FlatRange {
  size_t file_offset = 0, offset = 0, numel = 0;
};

}  // namespace azr::model
