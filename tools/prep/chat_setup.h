// What `ps_prep --format sft` renders and masks with, loaded once from the tokenizer's
// folder (the folder of --tokenizer, or --tokenizer itself when it is one):
//   template   --chat-template FILE, else the folder's chat_template.jinja, else
//              tokenizer_config.json's "chat_template" (a string, or a list of
//              {name, template}: the one named "default")
//   variables  the special tokens of tokenizer_config.json (bos_token, eos_token,
//              unk_token, sep_token, pad_token, cls_token, mask_token: strings or
//              {"content": ...}), tools and documents as none, add_generation_prompt
//              false, then --template-var NAME=VALUE: what apply_chat_template passes
//   special    the ids of tokenizer.json's added tokens marked "special"
//   end of turn  the ids of eos_token, generation_config.json's eos_token_id (an id or a
//              list) and --eot-token; the tokenizer's end-of-text id when none is found
// Immutable once loaded; shared by the encoding threads.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_set>

#include "chat/template.h"
#include "chat/value.h"
#include "tokenizer/tokenizer.h"
#include "tools/prep/options.h"

namespace ps::prep {

struct ChatSetup {
  std::unique_ptr<chat::ChatTemplate> tmpl;
  std::string template_origin;  // "tok/tokenizer_config.json (chat_template)", for messages
  chat::Dict variables;         // everything but `messages`
  std::unordered_set<int32_t> special_ids;
  std::unordered_set<int32_t> end_of_turn_ids;
};

// std::invalid_argument naming the file (and key) when there is no template, it does not
// parse (with its line), a file is not JSON, or an --eot-token is not a token.
ChatSetup LoadChatSetup(const Options& opt, const tokenizer::Tokenizer& tok);

}  // namespace ps::prep
