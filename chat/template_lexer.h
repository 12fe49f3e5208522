// The lexer of chat templates: Jinja2 source -> tokens, with Jinja2's whitespace rules as
// transformers configures them (trim_blocks and lstrip_blocks on, keep_trailing_newline
// off): `{%-`/`-%}` (and `{{-`, `-}}`, `{#-`, `-#}`) strip all whitespace on that side;
// trim_blocks drops the first newline after a `%}` or `#}`; lstrip_blocks drops the spaces
// and tabs between the start of a line and a `{%` or `{#`; `{%+`/`+%}` turn both off for
// that tag. `{# ... #}` comments vanish. "\r\n" and "\r" in the source become "\n" and
// one trailing newline is dropped, as Jinja2 does. Pure functions.
#pragma once

#include <string>
#include <vector>

namespace ps::chat {

enum class TokenKind {
  kText,        // template text, whitespace rules applied
  kVarBegin,    // {{
  kVarEnd,      // }}
  kBlockBegin,  // {%
  kBlockEnd,    // %}
  kName,        // identifier (keywords too: if, for, in, and, ...)
  kString,      // a string literal, escapes resolved
  kInt,
  kFloat,
  kOp,   // an operator or punctuation: + - * / // % ** ~ == != < <= > >= = . , : | ( ) [ ] { }
  kEnd,  // end of the template
};

struct Token {
  TokenKind kind;
  std::string text;
  int line;  // 1-based line of the template source where the token starts
};

struct LexOptions {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
};

// Tokens of `source`, ending with kEnd. TemplateError (naming the line) for an unclosed
// tag, comment or string, or a character that starts no token.
std::vector<Token> LexTemplate(const std::string& source, const LexOptions& options = {});

}  // namespace ps::chat
