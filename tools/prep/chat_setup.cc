#include "tools/prep/chat_setup.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

namespace ps::prep {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

[[noreturn]] void Bad(const std::string& what) { throw std::invalid_argument(what); }

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) Bad(path.string() + ": cannot read");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// The JSON object in `path`, or an empty object when the file is not there.
Json ReadJson(const fs::path& path) {
  if (!fs::exists(path)) return Json::object();
  try {
    Json j = Json::parse(ReadFile(path));
    if (!j.is_object()) Bad(path.string() + ": not a JSON object");
    return j;
  } catch (const Json::exception& e) {
    Bad(path.string() + ": not JSON: " + e.what());
  }
}

// The template's text and where it came from.
std::pair<std::string, std::string> TemplateSource(const Options& opt, const fs::path& dir, const Json& config) {
  if (!opt.sft.chat_template_path.empty()) {
    return {ReadFile(opt.sft.chat_template_path), opt.sft.chat_template_path + " (--chat-template)"};
  }
  if (fs::exists(dir / "chat_template.jinja")) {
    return {ReadFile(dir / "chat_template.jinja"), (dir / "chat_template.jinja").string()};
  }
  const std::string config_path = (dir / "tokenizer_config.json").string();
  const auto it = config.find("chat_template");
  if (it != config.end() && it->is_string()) return {it->get<std::string>(), config_path + " (chat_template)"};
  if (it != config.end() && it->is_array()) {
    for (const Json& t : *it) {
      if (t.is_object() && t.value("name", "") == "default" && t.contains("template") && t["template"].is_string()) {
        return {t["template"].get<std::string>(), config_path + " (chat_template, \"default\")"};
      }
    }
    Bad(config_path + ": chat_template is a list without a {\"name\": \"default\"} entry; pass --chat-template FILE");
  }
  Bad("no chat template for --format sft: " + dir.string() + " has no chat_template.jinja and " + config_path +
      " no \"chat_template\"; pass --chat-template FILE");
}

std::string TokenText(const Json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  return "";
}

void AddEndOfTurnIds(const Options& opt, const tokenizer::Tokenizer& tok, const fs::path& dir, const Json& config,
                     ChatSetup& setup) {
  if (config.contains("eos_token")) {
    const auto id = tok.TokenToId(TokenText(config["eos_token"]));
    if (id) setup.end_of_turn_ids.insert(*id);
  }
  const Json generation = ReadJson(dir / "generation_config.json");
  const auto eos = generation.find("eos_token_id");
  if (eos != generation.end()) {
    for (const Json& id : eos->is_array() ? *eos : Json::array({*eos})) {
      if (id.is_number_integer()) setup.end_of_turn_ids.insert(id.get<int32_t>());
    }
  }
  for (const std::string& token : opt.sft.eot_tokens) {
    const auto id = tok.TokenToId(token);
    if (!id) Bad("--eot-token " + token + ": not a token of " + opt.tokenizer_path);
    setup.end_of_turn_ids.insert(*id);
  }
  if (setup.end_of_turn_ids.empty() && tok.end_of_text_id()) setup.end_of_turn_ids.insert(*tok.end_of_text_id());
}

void AddSpecialIds(const fs::path& dir, ChatSetup& setup) {
  const Json tokenizer = ReadJson(dir / "tokenizer.json");
  const auto added = tokenizer.find("added_tokens");
  if (added == tokenizer.end() || !added->is_array()) return;
  for (const Json& t : *added) {
    if (t.value("special", false) && t.contains("id")) setup.special_ids.insert(t["id"].get<int32_t>());
  }
}

}  // namespace

ChatSetup LoadChatSetup(const Options& opt, const tokenizer::Tokenizer& tok) {
  const fs::path dir =
      fs::is_directory(opt.tokenizer_path) ? fs::path(opt.tokenizer_path) : fs::path(opt.tokenizer_path).parent_path();
  const Json config = ReadJson(dir / "tokenizer_config.json");
  ChatSetup setup;
  const auto [source, origin] = TemplateSource(opt, dir, config);
  setup.template_origin = origin;
  try {
    setup.tmpl = std::make_unique<chat::ChatTemplate>(source);
  } catch (const chat::TemplateError& e) {
    Bad(origin + ": " + e.what());
  }
  for (const char* key : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"}) {
    const auto it = config.find(key);
    if (it != config.end() && !TokenText(*it).empty())
      setup.variables.emplace_back(key, chat::Value::String(TokenText(*it)));
  }
  setup.variables.emplace_back("tools", chat::Value::None());
  setup.variables.emplace_back("documents", chat::Value::None());
  setup.variables.emplace_back("add_generation_prompt", chat::Value::Bool(false));
  for (const auto& [name, text] : opt.sft.template_vars) {
    Json value;
    try {
      value = Json::parse(text);
    } catch (const Json::exception&) {
      value = text;  // not JSON: a string
    }
    chat::Dict kept;
    for (auto& entry : setup.variables)
      if (entry.first != name) kept.push_back(entry);
    kept.emplace_back(name, chat::Value::FromJson(value));
    setup.variables = std::move(kept);
  }
  AddSpecialIds(dir, setup);
  AddEndOfTurnIds(opt, tok, dir, config, setup);
  return setup;
}

}  // namespace ps::prep
