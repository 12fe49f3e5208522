// The parser of chat templates: tokens (template_lexer.h) -> syntax tree
// (template_ast.h), with Jinja2's grammar and operator precedence (or < and < not <
// comparisons < + - < ~ < * / // % < ** < unary - < filters, tests, calls, subscripts).
//
// Supported statements: for (loop.* variables, `if` filter, else), if/elif/else, set
// (name, tuple of names, namespace attribute, block set), break, continue,
// generation/endgeneration. Others (macro, call, include, extends, block, raw, with, ...)
// and unknown filters or tests are a TemplateError naming the construct and its line.
#pragma once

#include <string>
#include <vector>

#include "chat/template_ast.h"
#include "chat/template_lexer.h"

namespace ps::chat {

Body ParseTemplate(const std::vector<Token>& tokens);

// The filters and tests the evaluator implements (the parser rejects any other).
bool IsSupportedFilter(const std::string& name);
bool IsSupportedTest(const std::string& name);

}  // namespace ps::chat
