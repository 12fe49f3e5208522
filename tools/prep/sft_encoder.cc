#include "tools/prep/sft_encoder.h"

#include <algorithm>
#include <stdexcept>

#include "chat/builtins.h"

namespace ps::prep {
namespace {

const char kSentinel[] = "\xEE\x80\x80";  // U+E000, a private-use character

[[noreturn]] void Bad(const std::string& what) { throw std::invalid_argument(what); }

// [begin, end) of the tokens of `a` that differ from `b`: the common prefix and suffix cut.
std::pair<size_t, size_t> DiffSpan(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  size_t prefix = 0;
  while (prefix < a.size() && prefix < b.size() && a[prefix] == b[prefix]) ++prefix;
  size_t suffix = 0;
  while (suffix < a.size() - prefix && suffix < b.size() - prefix &&
         a[a.size() - 1 - suffix] == b[b.size() - 1 - suffix]) {
    ++suffix;
  }
  return {prefix, a.size() - suffix};
}

size_t CommonPrefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  return n;
}

// `c` with message `index`'s content replaced by `content`.
Conversation WithContent(const Conversation& c, size_t index, const std::string& content) {
  chat::List list = c.messages.list();
  chat::Dict message = list[index].dict();
  for (auto& [k, v] : message) {
    if (k == "content") v = chat::Value::String(content);
  }
  list[index] = chat::Value::MakeDict(std::move(message));
  return {chat::Value::MakeList(std::move(list)), c.tools};
}

}  // namespace

chat::Value SftEncoder::Context(const Conversation& c, bool add_generation_prompt) const {
  chat::Dict context = setup_.variables;
  for (auto& [k, v] : context) {
    if (k == "add_generation_prompt") v = chat::Value::Bool(add_generation_prompt);
    if (k == "tools" && c.tools.is_list()) v = c.tools;
  }
  context.emplace_back("messages", c.messages);
  return chat::Value::MakeDict(std::move(context));
}

std::string SftEncoder::Render(const Conversation& c, const chat::RenderOptions& options,
                               bool add_generation_prompt) const {
  try {
    return setup_.tmpl->Render(Context(c, add_generation_prompt), options).text;
  } catch (const chat::TemplateError& e) {
    Bad(setup_.template_origin + ": " + e.what());
  }
}

SftExample SftEncoder::Encode(const Conversation& c) const {
  const chat::Value& messages = c.messages;
  SftExample ex;
  const std::string text = Render(c);
  ex.ids = tok_.Encode(text);
  ex.mask.assign(ex.ids.size(), opt_.train_on == TrainOn::kAll ? 1 : 0);
  if (opt_.train_on == TrainOn::kAll) return ex;
  if (setup_.tmpl->has_generation_blocks()) {
    MarkGenerationBlocks(c, ex);
    return ex;
  }
  bool any = false;
  for (size_t i = 0; i < messages.list().size(); ++i) {
    const chat::Value& m = messages.list()[i];
    if (!m.Get("role").is_string() || m.Get("role").str() != "assistant") continue;
    const chat::Value content = m.Get("content");
    if (!content.is_string())
      Bad("message " + std::to_string(i + 1) + ": an assistant content must be a string, not a " + content.TypeName());
    if (chat::PyStrip(content.str(), chat::Value::None(), true, true).empty()) {
      Bad("message " + std::to_string(i + 1) + ": empty assistant turn");
    }
    MarkAssistantTurn(c, i, text, ex);
    any = true;
  }
  if (!any) Bad("no assistant message to train on (--train-on all trains on every token)");
  return ex;
}

void SftEncoder::MarkGenerationBlocks(const Conversation& c, SftExample& ex) const {
  const size_t blocks = setup_.tmpl->Render(Context(c, false)).generation_spans_bytes.size();
  if (blocks == 0) Bad("the chat template's {% generation %} blocks marked nothing in this example");
  for (size_t k = 0; k < blocks; ++k) {
    chat::RenderOptions replace;
    replace.replace_generation_block = static_cast<int>(k);
    replace.replacement = kSentinel;
    const auto [begin, end] = DiffSpan(ex.ids, tok_.Encode(Render(c, replace)));
    std::fill(ex.mask.begin() + begin, ex.mask.begin() + std::max(begin, end), 1);
  }
}

void SftEncoder::MarkAssistantTurn(const Conversation& c, size_t index, const std::string& text, SftExample& ex) const {
  auto [begin, end] = DiffSpan(ex.ids, tok_.Encode(Render(WithContent(c, index, kSentinel))));
  if (begin >= end && begin == ex.ids.size()) {
    Bad("message " + std::to_string(index + 1) +
        ": the chat template does not render this assistant turn's content, so its tokens cannot be found "
        "(a template with {% generation %} blocks marks them)");
  }
  // The start: after the generation prompt of messages[:index], when the text begins with it.
  std::string prompt;
  try {
    chat::List before(c.messages.list().begin(), c.messages.list().begin() + index);
    prompt = Render({chat::Value::MakeList(std::move(before)), c.tools}, {}, true);
  } catch (const std::invalid_argument&) {
    prompt.clear();  // the template refuses the prefix: keep the content's start
  }
  if (!prompt.empty()) {
    const std::vector<int32_t> prompt_ids = tok_.Encode(prompt);
    if (text.compare(0, prompt.size(), prompt) == 0) {
      begin = std::min(begin, CommonPrefix(ex.ids, prompt_ids));
    } else if (!prompt_ids.empty()) {
      // Not a prefix (the template renders earlier turns differently when the prompt ends
      // the conversation): after the prompt's last token, if it precedes the content with
      // no special token between.
      size_t j = begin;
      while (j > 0 && ex.ids[j - 1] != prompt_ids.back() && !setup_.special_ids.count(ex.ids[j - 1])) --j;
      if (j > 0 && ex.ids[j - 1] == prompt_ids.back()) begin = j;
    }
  }
  // The end: through the first special token after the content, if it ends a turn.
  size_t j = end;
  while (j < ex.ids.size() && !setup_.special_ids.count(ex.ids[j])) ++j;
  if (j < ex.ids.size() && setup_.end_of_turn_ids.count(ex.ids[j])) {
    end = j + 1;
  } else {
    ++ex.turns_without_eot;
  }
  std::fill(ex.mask.begin() + begin, ex.mask.begin() + std::max(begin, end), 1);
}

}  // namespace ps::prep
