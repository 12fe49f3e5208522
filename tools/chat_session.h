// ChatSession: the conversation of `ps_sample --chat`, rendered for each new turn as
// transformers' apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
// renders and encodes it: the template and variables of the tokenizer folder
// (tools/prep/chat_setup.h, the same as ps_prep --format sft trains with), the text
// encoded without added special tokens (the template writes BOS itself). The model's
// reply ends at an end-of-turn id (end_of_turn_ids()) and joins the conversation as the
// assistant's message. Not thread-safe.
#pragma once

#include <ATen/core/Generator.h>

#include <cstdint>
#include <istream>
#include <ostream>
#include <string>
#include <unordered_set>
#include <vector>

#include "chat/value.h"
#include "models/causal_lm.h"
#include "models/sampling.h"
#include "tokenizer/tokenizer.h"
#include "tools/prep/chat_setup.h"

namespace ps::tools {

class ChatSession {
 public:
  // `system`: the system message ("": none). Keeps references to `setup` and `tok`.
  ChatSession(const prep::ChatSetup& setup, const tokenizer::Tokenizer& tok, const std::string& system);

  // Adds the user's turn `text`; returns the ids of the whole conversation followed by the
  // generation prompt. std::invalid_argument with the template's message (and origin)
  // when the template refuses the conversation; the turn is then not kept.
  std::vector<int32_t> PromptAfterUserTurn(const std::string& text);

  // Adds the assistant's reply: `ids` as generated, an end-of-turn id at the end dropped.
  // Returns the reply's text.
  std::string AddReply(std::vector<int32_t> ids);

  const std::unordered_set<int32_t>& end_of_turn_ids() const { return setup_.end_of_turn_ids; }
  int64_t turns() const { return static_cast<int64_t>(messages_.size()); }

 private:
  const prep::ChatSetup& setup_;
  const tokenizer::Tokenizer& tok_;
  chat::List messages_;
};

// `ids` on one line, separated by spaces (ps_sample --print-ids).
void PrintIds(std::ostream& out, const std::vector<int64_t>& ids);

struct ChatIo {
  std::istream& in;        // one user turn per line; empty lines are skipped
  std::ostream& out;       // each reply, streamed, then a newline
  std::ostream& err;       // the "> " prompt (when `prompt_marks`) and refused turns
  bool prompt_marks = false;
  bool print_ids = false;  // per turn, the prompt's ids and the reply's ids (two lines), not text
};

// The conversation loop of `ps_sample --chat`: `first_turn` (when not empty), then each
// line of io.in, answered by `lm` with `sampling` (end_of_turn_ids() added to its stop
// tokens). A turn the template refuses is reported on io.err and left out. Returns the
// number of replies.
int64_t RunChat(models::CausalLm& lm, ChatSession& session, const tokenizer::Tokenizer& tok,
                models::SamplingOptions sampling, at::Generator& generator, const std::string& first_turn,
                const ChatIo& io);

}  // namespace ps::tools
