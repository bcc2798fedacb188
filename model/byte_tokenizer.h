#pragma once
// Byte-level tokenizer for the tiny models azr creates itself: ids 0..255 are the raw bytes,
// ids 256.. the special tokens given at construction, in that order. Special tokens are matched
// in the text before bytes (leftmost, then longest), like HF's added tokens. There are no merges.
//
// save_tokenizer_json() writes the same tokenizer as a Hugging Face tokenizer.json: a BPE model
// whose vocab is the 256 byte-level tokens (GPT-2 bytes_to_unicode), no merges, a ByteLevel
// pre-tokenizer and decoder, and the special tokens as added_tokens. With no merges every byte
// is its own token whatever the pre-tokenizer splits, so HF gives the same ids as encode().
#include <array>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "model/tokenizer.h"

namespace azr::model {

class ByteTokenizer final : public Tokenizer {
 public:
  // The special tokens of azr's tiny models, in id order from 256.
  static std::vector<std::string> default_special_tokens();

  // Throws TokenizerError on an empty or duplicate special token. All are marked special
  // (decode(skip_special = true) drops them).
  explicit ByteTokenizer(std::vector<std::string> special_tokens = default_special_tokens());

  // Accepts any bytes, valid UTF-8 or not (unlike BpeTokenizer, which requires UTF-8).
  std::vector<int32_t> encode(std::string_view text) const override;
  // decode() (inherited) replaces invalid UTF-8 by U+FFFD, as HF does; decode_bytes() returns
  // the exact bytes, so decode_bytes(encode(s)) == s for every s.
  std::string decode_bytes(std::span<const int32_t> ids, bool skip_special = false) const;
  void append_token_bytes(int32_t id, std::string& out, bool skip_special = false) const override;

  // Token strings are the byte-level ones of tokenizer.json (byte 0x20 is "Ġ"), and the special
  // tokens' contents.
  std::optional<int32_t> token_to_id(std::string_view token) const override;
  std::optional<std::string_view> id_to_token(int32_t id) const override;
  size_t vocab_size() const override { return 256 + added_.size(); }
  const std::vector<AddedToken>& added_tokens() const override { return added_; }

  // The HF tokenizer.json described above. use_regex=false is what HF needs; azr's BpeTokenizer
  // currently rejects a pre-tokenizer without a regex ("pre_tokenizer has no regex"), and
  // use_regex=true (GPT-2 split, same ids since there are no merges) is accepted by both.
  std::string tokenizer_json(bool use_regex = false) const;
  // Writes tokenizer_json() to `path`; throws TokenizerError if it cannot be written.
  void save_tokenizer_json(const std::string& path, bool use_regex = false) const;

 private:
  std::vector<AddedToken> added_;         // id order
  std::vector<size_t> by_length_;         // indexes into added_, longest content first
  std::array<bool, 256> first_byte_{};    // first bytes of the special tokens
  std::vector<std::string> byte_tokens_;  // byte-level token string of each byte
  std::unordered_map<std::string, int32_t> token_ids_;
};

}  // namespace azr::model
