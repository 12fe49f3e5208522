#include "tools/prep/sft_example.h"

namespace ps::prep {
namespace {

using Json = nlohmann::ordered_json;

[[noreturn]] void Bad(const std::string& what) { throw std::invalid_argument(what); }

const Json& Need(const Json& obj, const SftOptions& opt, const std::string& key, const char* where) {
  const std::string& name = opt.Field(key);
  const auto it = obj.find(name);
  if (it == obj.end() || it->is_null()) {
    Bad(std::string("no \"") + name + "\" field" + where + " (--sft-field " + key + "=NAME names it)");
  }
  return *it;
}

std::string NeedString(const Json& obj, const SftOptions& opt, const std::string& key, const char* where) {
  const Json& v = Need(obj, opt, key, where);
  if (!v.is_string()) Bad("\"" + opt.Field(key) + "\"" + where + " is a " + v.type_name() + ", not a string");
  return v.get<std::string>();
}

std::string ShareGptRole(const std::string& from) {
  if (from == "human" || from == "user") return "user";
  if (from == "gpt" || from == "assistant" || from == "model" || from == "bot" || from == "chatgpt") return "assistant";
  return from;  // system, tool, function_call, ...: the template decides
}

// One message: role/content under their configured names -> "role"/"content", other keys kept.
Json Message(const Json& m, const SftOptions& opt, const std::string& role_key, const std::string& content_key,
             size_t index) {
  const std::string where = " in message " + std::to_string(index + 1);
  if (!m.is_object()) Bad("message " + std::to_string(index + 1) + " is a " + m.type_name() + ", not an object");
  Json out = Json::object();
  std::string role = NeedString(m, opt, role_key, where.c_str());
  if (role_key == "from") role = ShareGptRole(role);
  out["role"] = role;
  const Json& content = Need(m, opt, content_key, where.c_str());
  out["content"] = content;
  for (const auto& [k, v] : m.items()) {
    if (k != opt.Field(role_key) && k != opt.Field(content_key) && k != "role" && k != "content") out[k] = v;
  }
  return out;
}

Json MessageList(const Json& list, const SftOptions& opt, const std::string& field_key, bool sharegpt) {
  if (!list.is_array()) Bad("\"" + opt.Field(field_key) + "\" is a " + list.type_name() + ", not a list of messages");
  Json out = Json::array();
  for (size_t i = 0; i < list.size(); ++i) {
    out.push_back(Message(list[i], opt, sharegpt ? "from" : "role", sharegpt ? "value" : "content", i));
  }
  return out;
}

Json Alpaca(const Json& line, const SftOptions& opt) {
  Json out = Json::array();
  const auto system = line.find(opt.Field("system"));
  if (system != line.end() && system->is_string() && !system->get<std::string>().empty()) {
    out.push_back({{"role", "system"}, {"content", *system}});
  }
  std::string prompt = NeedString(line, opt, "instruction", "");
  const auto input = line.find(opt.Field("input"));
  if (input != line.end() && !input->is_null()) {
    if (!input->is_string()) Bad("\"" + opt.Field("input") + "\" is a " + input->type_name() + ", not a string");
    if (!input->get<std::string>().empty()) prompt += "\n" + input->get<std::string>();
  }
  out.push_back({{"role", "user"}, {"content", prompt}});
  out.push_back({{"role", "assistant"}, {"content", NeedString(line, opt, "output", "")}});
  return out;
}

Json PromptCompletion(const Json& line, const SftOptions& opt) {
  const Json& prompt = Need(line, opt, "prompt", "");
  const Json& completion = Need(line, opt, "completion", "");
  Json out = Json::array();
  const auto add = [&](const Json& part, const char* key, const char* role) {
    if (part.is_array()) {
      for (const Json& m : MessageList(part, opt, key, false)) out.push_back(m);
    } else if (part.is_string()) {
      out.push_back({{"role", role}, {"content", part}});
    } else {
      Bad("\"" + opt.Field(key) + "\" is a " + part.type_name() + ", not a string or a list of messages");
    }
  };
  add(prompt, "prompt", "user");
  add(completion, "completion", "assistant");
  return out;
}

SftInput Detect(const Json& line, const SftOptions& opt) {
  if (opt.input != SftInput::kAuto) return opt.input;
  if (line.contains(opt.Field("messages"))) return SftInput::kMessages;
  if (line.contains(opt.Field("conversations"))) return SftInput::kShareGpt;
  if (line.contains(opt.Field("instruction"))) return SftInput::kAlpaca;
  if (line.contains(opt.Field("prompt"))) return SftInput::kPromptCompletion;
  Bad("no \"" + opt.Field("messages") + "\", \"" + opt.Field("conversations") + "\", \"" + opt.Field("instruction") +
      "\" or \"" + opt.Field("prompt") + "\" field (--sft-input and --sft-field choose the layout)");
}

// transformers' _normalize_chat_messages and _alias_reasoning_fields.
Json Normalize(const Json& messages) {
  Json out = Json::array();
  for (const Json& m : messages) {
    Json kept = Json::object();
    for (const auto& [k, v] : m.items()) {
      if (!v.is_null()) kept[k] = v;
    }
    for (const char* key : {"reasoning_content", "thinking", "reasoning"}) {
      if (!kept.contains(key)) continue;
      const Json reasoning = kept[key];
      Json aliased = Json::object();
      aliased["thinking"] = reasoning;
      for (const auto& [k, v] : kept.items()) aliased[k] = v;
      aliased["reasoning_content"] = reasoning;
      kept = aliased;
      break;
    }
    out.push_back(kept);
  }
  return out;
}

// The "tools" field: a list, or a string holding one; none when absent.
chat::Value Tools(const Json& line, const SftOptions& opt) {
  const auto it = line.find(opt.Field("tools"));
  if (it == line.end() || it->is_null()) return chat::Value::None();
  Json tools = *it;
  if (tools.is_string()) {
    try {
      tools = Json::parse(it->get<std::string>());
    } catch (const Json::exception&) {
      Bad("\"" + opt.Field("tools") + "\" is a string that is not JSON");
    }
  }
  if (!tools.is_array()) Bad("\"" + opt.Field("tools") + "\" is a " + tools.type_name() + ", not a list of tools");
  return chat::Value::FromJson(tools);
}

}  // namespace

Conversation ParseExample(const Json& line, const SftOptions& opt) {
  if (!line.is_object()) Bad(std::string("the line is a JSON ") + line.type_name() + ", not an object");
  Json messages;
  switch (Detect(line, opt)) {
    case SftInput::kMessages:
      messages = MessageList(Need(line, opt, "messages", ""), opt, "messages", false);
      break;
    case SftInput::kShareGpt:
      messages = MessageList(Need(line, opt, "conversations", ""), opt, "conversations", true);
      break;
    case SftInput::kAlpaca:
      messages = Alpaca(line, opt);
      break;
    case SftInput::kPromptCompletion:
      messages = PromptCompletion(line, opt);
      break;
    case SftInput::kAuto:
      break;
  }
  if (messages.empty()) Bad("no messages");
  return {chat::Value::FromJson(Normalize(messages)), Tools(line, opt)};
}

}  // namespace ps::prep
