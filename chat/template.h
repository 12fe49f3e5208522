// ChatTemplate: a Jinja2 chat template (tokenizer_config.json's `chat_template`, or
// chat_template.jinja) rendered as transformers' apply_chat_template renders it: Jinja2
// with trim_blocks and lstrip_blocks, loop controls, `{% generation %}` blocks, and the
// globals raise_exception, namespace, strftime_now, range and dict.
//
// Why our own engine: Debian 12 packages no C++ Jinja engine (`apt-cache search jinja`
// and `inja` find Python, Rust and R ones only), and inja, the best-known C++ one, has
// no namespace(), no Python string methods (.strip(), .split()) and no loop.last-style
// loop object, all of which the Llama 3, Qwen2.5/3, Mistral and SmolLM2 templates use.
// This one covers what those templates use (docs/data.md, "Chat templates"), and fails
// with the construct and its template line on anything else.
//
// A parsed template is immutable: Render may be called from many threads at once.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "chat/template_ast.h"
#include "chat/value.h"

namespace ps::chat {

// A raise_exception(message) of the template: the message is the template's own.
class TemplateRaised : public TemplateError {
 public:
  using TemplateError::TemplateError;
};

struct RenderOptions {
  // >= 0: the output of the generation block with this index (0-based, in the order they
  // render) is replaced by `replacement` (how ps_prep finds a block's tokens).
  int replace_generation_block = -1;
  std::string replacement;
};

struct RenderResult {
  std::string text;
  // [begin, end) byte offsets in `text` of each {% generation %} block's output, in
  // render order (transformers' generation indices, in bytes instead of characters).
  std::vector<std::pair<int64_t, int64_t>> generation_spans_bytes;
};

class ChatTemplate {
 public:
  // Parses `source`; TemplateError naming the line on a syntax error or an unsupported
  // construct.
  explicit ChatTemplate(const std::string& source);

  // Renders with the variables of `context` (a dict: messages, bos_token,
  // add_generation_prompt, ...). TemplateError (TemplateRaised for raise_exception)
  // naming the template line.
  RenderResult Render(const Value& context, const RenderOptions& options = {}) const;

  bool has_generation_blocks() const { return has_generation_; }

 private:
  Body body_;
  bool has_generation_ = false;
};

}  // namespace ps::chat
