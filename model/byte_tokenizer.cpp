#include "model/byte_tokenizer.h"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>

namespace azr::model {

namespace {

// GPT-2's bytes_to_unicode as UTF-8: printable bytes map to themselves, the other 68 to U+0100 on.
std::vector<std::string> byte_level_tokens() {
  std::vector<std::string> out(256);
  unsigned next = 0x100;
  for (unsigned b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    const unsigned cp = printable ? b : next++;
    std::string& s = out[b];
    if (cp < 0x80) {
      s += static_cast<char>(cp);
    } else {  // all below U+0800: two bytes
      s += static_cast<char>(0xC0 | (cp >> 6));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }
  return out;
}

}  // namespace

std::vector<std::string> ByteTokenizer::default_special_tokens() {
  return {"<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>", "<answer>", "</answer>"};
}

ByteTokenizer::ByteTokenizer(std::vector<std::string> special_tokens)
    : byte_tokens_(byte_level_tokens()) {
  for (int b = 0; b < 256; ++b) token_ids_.emplace(byte_tokens_[b], b);
  for (size_t i = 0; i < special_tokens.size(); ++i) {
    std::string& content = special_tokens[i];
    if (content.empty())
      throw TokenizerError("ByteTokenizer: special token " + std::to_string(i) + " is empty");
    if (valid_utf8_prefix(content) != content.size())
      throw TokenizerError("ByteTokenizer: special token " + std::to_string(i) + " is not valid UTF-8");
    for (const auto& t : added_)
      if (t.content == content)
        throw TokenizerError("ByteTokenizer: duplicate special token '" + content + "'");
    AddedToken t;
    t.id = static_cast<int32_t>(256 + i);
    t.content = std::move(content);
    t.special = true;
    token_ids_.emplace(t.content, t.id);  // a byte-level token of the same text keeps its id, as in HF
    first_byte_[static_cast<unsigned char>(t.content[0])] = true;
    added_.push_back(std::move(t));
  }
  by_length_.resize(added_.size());
  for (size_t i = 0; i < added_.size(); ++i) by_length_[i] = i;
  std::stable_sort(by_length_.begin(), by_length_.end(), [&](size_t a, size_t b) {
    return added_[a].content.size() > added_[b].content.size();
  });
}

std::vector<int32_t> ByteTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const auto b = static_cast<unsigned char>(text[i]);
    if (first_byte_[b]) {
      const AddedToken* hit = nullptr;
      for (size_t k : by_length_) {
        if (text.substr(i, added_[k].content.size()) == added_[k].content) {
          hit = &added_[k];
          break;
        }
      }
      if (hit) {
        ids.push_back(hit->id);
        i += hit->content.size();
        continue;
      }
    }
    ids.push_back(b);
    ++i;
  }
  return ids;
}

void ByteTokenizer::append_token_bytes(int32_t id, std::string& out, bool skip_special) const {
  if (id >= 0 && id < 256) {
    out += static_cast<char>(id);
    return;
  }
  if (id < 0 || static_cast<size_t>(id) >= vocab_size())
    throw TokenizerError("decode: id " + std::to_string(id) + " is not in the vocabulary");
  const AddedToken& t = added_[static_cast<size_t>(id) - 256];
  if (!(skip_special && t.special)) out += t.content;
}

std::string ByteTokenizer::decode_bytes(std::span<const int32_t> ids, bool skip_special) const {
  std::string out;
  out.reserve(ids.size());
  for (int32_t id : ids) append_token_bytes(id, out, skip_special);
  return out;
}

std::optional<int32_t> ByteTokenizer::token_to_id(std::string_view token) const {
  const auto it = token_ids_.find(std::string(token));
  if (it == token_ids_.end()) return std::nullopt;
  return it->second;
}

std::optional<std::string_view> ByteTokenizer::id_to_token(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= vocab_size()) return std::nullopt;
  if (id < 256) return std::string_view(byte_tokens_[static_cast<size_t>(id)]);
  return std::string_view(added_[static_cast<size_t>(id) - 256].content);
}

std::string ByteTokenizer::tokenizer_json(bool use_regex) const {
  using json = nlohmann::ordered_json;
  json added = json::array();
  for (const auto& t : added_) {
    added.push_back({{"id", t.id},
                     {"content", t.content},
                     {"single_word", t.single_word},
                     {"lstrip", t.lstrip},
                     {"rstrip", t.rstrip},
                     {"normalized", t.normalized},
                     {"special", t.special}});
  }
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_tokens_[static_cast<size_t>(b)]] = b;
  const json byte_level = {{"type", "ByteLevel"},
                           {"add_prefix_space", false},
                           {"trim_offsets", false},
                           {"use_regex", use_regex}};
  const json j = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", added},
      {"normalizer", nullptr},
      {"pre_tokenizer", byte_level},
      {"post_processor", nullptr},
      {"decoder", byte_level},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", nullptr},
        {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr},
        {"fuse_unk", false},
        {"byte_fallback", false},
        {"ignore_merges", false},
        {"vocab", vocab},
        {"merges", json::array()}}},
  };
  return j.dump(2, ' ', false) + "\n";
}

void ByteTokenizer::save_tokenizer_json(const std::string& path, bool use_regex) const {
  const std::string text = tokenizer_json(use_regex);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw TokenizerError(path + ": cannot open for writing");
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  out.close();
  if (!out) throw TokenizerError(path + ": write failed");
}

}  // namespace azr::model
