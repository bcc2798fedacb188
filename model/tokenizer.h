#pragma once
// Tokenizers behind one interface. BpeTokenizer reads a Hugging Face `tokenizer.json` holding a
// byte-level BPE model (Qwen2.5, Llama 3 style) and reproduces the Rust `tokenizers` ids exactly:
//   added tokens matched in the raw text -> NFC -> pre-tokenizer regex (PCRE2, UTF + UCP)
//   -> GPT-2 byte-level mapping -> BPE by merge rank.
// Facts and pitfalls: ../shared/research/qwen2.md §1.4. encode() never adds BOS/EOS: the
// post-processor is not applied (Qwen2's adds nothing).
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace azr::model {

// Every problem loading a tokenizer or using it. Load errors start with the file path and name
// the JSON field at fault.
class TokenizerError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// One entry of `added_tokens` in tokenizer.json.
struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool special = false;      // dropped by decode(skip_special = true)
  bool lstrip = false;       // the match also swallows whitespace on its left
  bool rstrip = false;       // ... and on its right
  bool normalized = false;   // matched after normalisation instead of in the raw text
  bool single_word = false;  // only matched when not touching a word character
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Throws TokenizerError on input that is not valid UTF-8.
  virtual std::vector<int32_t> encode(std::string_view utf8) const = 0;
  // Bytes of the ids joined; invalid UTF-8 is replaced by U+FFFD (HF's errors="replace").
  // Throws TokenizerError on an id outside [0, vocab_size()).
  virtual std::string decode(std::span<const int32_t> ids, bool skip_special = false) const;
  // The raw bytes one id stands for; may be part of a UTF-8 character.
  virtual void append_token_bytes(int32_t id, std::string& out, bool skip_special = false) const = 0;

  virtual std::optional<int32_t> token_to_id(std::string_view token) const = 0;
  virtual std::optional<std::string_view> id_to_token(int32_t id) const = 0;
  // Number of ids, added tokens included (151,665 for Qwen2.5).
  virtual size_t vocab_size() const = 0;
  virtual const std::vector<AddedToken>& added_tokens() const = 0;
  // Ids of the added tokens marked special (e.g. <|endoftext|>, <|im_start|>, <|im_end|>).
  std::vector<int32_t> special_token_ids() const;
  bool is_special(int32_t id) const;
};

class BpeTokenizer final : public Tokenizer {
 public:
  // Loads `path` (a tokenizer.json). Throws TokenizerError for a missing file, bad JSON, or a
  // model / normalizer / pre-tokenizer / decoder this class cannot reproduce exactly.
  explicit BpeTokenizer(const std::string& path);
  ~BpeTokenizer() override;
  BpeTokenizer(const BpeTokenizer&) = delete;
  BpeTokenizer& operator=(const BpeTokenizer&) = delete;

  std::vector<int32_t> encode(std::string_view utf8) const override;
  void append_token_bytes(int32_t id, std::string& out, bool skip_special = false) const override;
  std::optional<int32_t> token_to_id(std::string_view token) const override;
  std::optional<std::string_view> id_to_token(int32_t id) const override;
  size_t vocab_size() const override;
  const std::vector<AddedToken>& added_tokens() const override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Incremental decoding for streaming generation: push ids one at a time and get back only
// complete UTF-8 characters. Bytes of a character split across tokens are held until it is
// complete; bytes that can never form a character come out as U+FFFD, so the output is always
// valid UTF-8. The concatenation of all push() results and flush() equals decode(ids).
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer, bool skip_special = false)
      : tokenizer_(tokenizer), skip_special_(skip_special) {}
  std::string push(int32_t id);
  // Emits whatever is held (an unfinished character becomes U+FFFD) and resets.
  std::string flush();

 private:
  const Tokenizer& tokenizer_;
  bool skip_special_;
  std::string pending_;  // undecoded bytes: at most an incomplete UTF-8 character
};

// Helpers shared with tests and other tokenizers.
// Length of the longest prefix of `s` that is valid UTF-8.
size_t valid_utf8_prefix(std::string_view s);
// `s` with every ill-formed subsequence replaced by U+FFFD (the Unicode "maximal subpart"
// rule, as Rust's String::from_utf8_lossy and Python's errors="replace").
std::string utf8_lossy(std::string_view s);

}  // namespace azr::model
