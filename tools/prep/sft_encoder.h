// SftEncoder: one example's messages -> token ids and a loss mask (1: trained on), as
// apply_chat_template(messages, tokenize=True) gives the ids: the rendered text encoded
// without added special tokens (the template writes BOS itself: no doubled BOS).
//
// Which tokens are trained on (TrainOn::kAssistant) is found by rendering again:
//  - a template with {% generation %} blocks: each block's tokens, as transformers'
//    return_assistant_tokens_mask (every token overlapping the block's text);
//  - otherwise, per assistant message i:
//      content: the tokens that change when message i's content is replaced by a
//        private-use character (U+E000): the first to the last differing token, so
//        content the template transforms (trim, a split on </think>) is covered;
//      start: after the generation prompt (messages[:i] rendered with
//        add_generation_prompt=true) when it is a prefix of the text (Qwen3's
//        <think></think> wrapper is trained, the role header is not); when it is not
//        (Mistral folds the system message into the last user turn), after the last
//        occurrence of the prompt's last token before the content with no special token
//        between (Mistral's " " before the content); else the content's start;
//      end: the content's end, extended through the first special token after it when it
//        is an end-of-turn token (chat_setup.h); a turn without one is counted.
//    Limits: content the template also writes elsewhere widens the span to cover both
//    places; content starting or ending with U+E000 is undetectable; each assistant turn
//    costs two more renders and encodings of the whole conversation.
// TrainOn::kAll: every token. Const and thread-safe.
#pragma once

#include <cstdint>
#include <vector>

#include "chat/value.h"
#include "tokenizer/tokenizer.h"
#include "tools/prep/chat_setup.h"
#include "tools/prep/sft_example.h"
#include "tools/prep/sft_options.h"

namespace ps::prep {

struct SftExample {
  std::vector<int32_t> ids;
  std::vector<uint8_t> mask;  // [ids.size()]: 1 trained on, 0 not
  int64_t turns_without_eot = 0;
};

class SftEncoder {
 public:
  // Keeps references; all must outlive the encoder.
  SftEncoder(const ChatSetup& setup, const tokenizer::Tokenizer& tok, const SftOptions& opt)
      : setup_(setup), tok_(tok), opt_(opt) {}

  // std::invalid_argument for an example the template rejects (raise_exception, an
  // undefined value: the template's message and line), a non-string or empty assistant
  // content, content the template does not render, or no assistant message (kAssistant).
  SftExample Encode(const Conversation& c) const;

 private:
  chat::Value Context(const Conversation& c, bool add_generation_prompt) const;
  std::string Render(const Conversation& c, const chat::RenderOptions& options = {},
                     bool add_generation_prompt = false) const;
  void MarkGenerationBlocks(const Conversation& c, SftExample& ex) const;
  void MarkAssistantTurn(const Conversation& c, size_t index, const std::string& text, SftExample& ex) const;

  const ChatSetup& setup_;
  const tokenizer::Tokenizer& tok_;
  const SftOptions& opt_;
};

}  // namespace ps::prep
