// A transformer whose greedy continuation is a text chosen by the test, so an evaluation has
// answers whose verdicts are known by hand (a random model's are all wrong, and a grader that
// failed every answer would pass a test of it).
//
// Every attention and MLP weight is zero, so each layer adds nothing and the last hidden state is
// the current token's embedding: the model is a bigram table. Token `chain[k]`'s embedding is the
// unit vector e_k, and the head row of `chain[k + 1]` is 10 e_k, so after the final RMSNorm
// (e_k * sqrt(hidden)) that token's logit is about 57 and every other is 0. Tokens off the chain
// embed to 0 and predict id 0 (all logits tie). A chain cannot repeat a token, and needs no more
// distinct tokens than the hidden size.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

#include "model/tokenizer.h"
#include "model/transformer.h"

namespace azr::testing {

inline model::Transformer bigram_model(const std::vector<int32_t>& chain, int64_t vocab_size, int64_t eos_id) {
  model::ModelConfig c;
  c.model_type = "qwen2";
  c.vocab_size = vocab_size, c.hidden_size = 32, c.intermediate_size = 48, c.num_hidden_layers = 1;
  c.num_attention_heads = 4, c.num_key_value_heads = 2, c.head_dim = 8;
  c.rms_norm_eps = 1e-6, c.rope_theta = 10000, c.max_position_embeddings = 4096;
  c.tie_word_embeddings = false, c.qkv_bias = true;
  c.eos_token_ids = {eos_id};
  if (int64_t(chain.size()) > c.hidden_size) throw std::invalid_argument("bigram_model: chain longer than hidden");
  model::Transformer m = model::Transformer::random(c, 1, 0.f);  // std 0: every matrix zero, norms 1
  std::span<float> embed = m.param("model.embed_tokens.weight"), head = m.param("lm_head.weight");
  for (size_t k = 0; k < chain.size(); k++) {
    for (size_t j = 0; j < k; j++)
      if (chain[j] == chain[k]) throw std::invalid_argument("bigram_model: the chain repeats a token");
    embed[size_t(chain[k]) * size_t(c.hidden_size) + k] = 1.f;
    if (k + 1 < chain.size()) head[size_t(chain[k + 1]) * size_t(c.hidden_size) + k] = 10.f;
  }
  return m;
}

// The chain that answers `answer` after `prompt`: the prompt's last token (every prompt of one
// template ends alike), the answer's tokens, then `eos_id`.
inline std::vector<int32_t> answer_chain(const model::Tokenizer& tok, const std::string& prompt,
                                         const std::string& answer, int32_t eos_id) {
  std::vector<int32_t> chain = {tok.encode(prompt).back()};
  for (int32_t id : tok.encode(answer)) chain.push_back(id);
  chain.push_back(eos_id);
  return chain;
}

}  // namespace azr::testing
