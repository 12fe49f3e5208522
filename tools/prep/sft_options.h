// The options of `ps_prep --format sft` (chat and instruction data for supervised
// fine-tuning, docs/data.md "Chat and instruction data"): where each example's fields are,
// which chat template renders it, and which of its tokens are trained on. Plain data;
// part of Options (options.h).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace ps::prep {

// The layout of an input line. kAuto: the first of these whose field the line has.
enum class SftInput {
  kAuto,
  kMessages,          // {"messages": [{"role", "content"}, ...]} (OpenAI)
  kShareGpt,          // {"conversations": [{"from", "value"}, ...]} (human/gpt/system)
  kAlpaca,            // {"instruction", "input", "output"[, "system"]}
  kPromptCompletion,  // {"prompt", "completion"}: strings, or lists of messages (TRL)
};

enum class TrainOn {
  kAssistant,  // the assistant turns' tokens and their end-of-turn token (mask 1), the rest 0
  kAll,        // every token
};

// An example longer than max_tokens: cut to its first max_tokens tokens, or left out.
enum class Overlong { kTruncate, kDrop };

struct SftOptions {
  SftInput input = SftInput::kAuto;
  // Field names (--sft-field KEY=NAME): keys messages, role, content, conversations, from,
  // value, instruction, input, output, system, prompt, completion, tools.
  std::vector<std::pair<std::string, std::string>> fields = {{"messages", "messages"},
                                                             {"role", "role"},
                                                             {"content", "content"},
                                                             {"conversations", "conversations"},
                                                             {"from", "from"},
                                                             {"value", "value"},
                                                             {"instruction", "instruction"},
                                                             {"input", "input"},
                                                             {"output", "output"},
                                                             {"system", "system"},
                                                             {"prompt", "prompt"},
                                                             {"completion", "completion"}};
  std::string chat_template_path;  // a .jinja file; "": the tokenizer folder's template
  // --template-var NAME=VALUE: extra template variables (VALUE as JSON, else a string),
  // as apply_chat_template(**kwargs): enable_thinking=false, date_string="26 Jul 2024".
  std::vector<std::pair<std::string, std::string>> template_vars;
  // --eot-token: end-of-turn tokens besides the eos tokens of tokenizer_config.json and
  // generation_config.json.
  std::vector<std::string> eot_tokens;
  TrainOn train_on = TrainOn::kAssistant;
  int64_t max_tokens = 0;  // 0: no limit
  Overlong overlong = Overlong::kTruncate;

  // The field name for `key` (one of the keys above).
  const std::string& Field(const std::string& key) const {
    for (const auto& [k, name] : fields) {
      if (k == key) return name;
    }
    return key;
  }
};

}  // namespace ps::prep
