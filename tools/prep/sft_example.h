// One line of `ps_prep --format sft` input -> the `messages` a chat template renders
// (a list of {role, content, ...} dicts, as apply_chat_template receives them):
//   messages           the list as it is (its role/content fields renamed to role/content)
//   ShareGPT           from/value -> role/content; human -> user, gpt -> assistant (also
//                      model, bot, chatgpt), system -> system; other roles kept as written,
//                      for the template to accept or raise_exception on
//   alpaca             [system], user: instruction + "\n" + input (input when not empty),
//                      assistant: output
//   prompt/completion  user: prompt, assistant: completion; lists of messages are
//                      concatenated (TRL's conversational prompt-completion)
// Then, as transformers does before rendering: keys whose value is null are dropped, and
// reasoning_content is filled from `thinking`/`reasoning` when present. A "tools" field
// (a list of function schemas, or a string holding one as LLaMA-Factory writes it) is the
// template's `tools` for this example.
// Pure; any thread.
#pragma once

#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

#include "chat/value.h"
#include "tools/prep/sft_options.h"

namespace ps::prep {

struct Conversation {
  chat::Value messages;  // a list of {role, content, ...} dicts
  chat::Value tools;     // a list, or none
};

// The conversation of `line`; std::invalid_argument naming the missing or mistyped field.
Conversation ParseExample(const nlohmann::ordered_json& line, const SftOptions& opt);

}  // namespace ps::prep
