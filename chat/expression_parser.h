// The expression half of the chat-template parser (template_parser.h): a cursor over the
// tokens with its helpers, and Jinja2's expression grammar. Internal to chat/; the
// statement parser (template_parser.cc) derives from it.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "chat/template_ast.h"
#include "chat/template_lexer.h"

namespace ps::chat {

class ExprParser {
 public:
  explicit ExprParser(const std::vector<Token>& tokens) : t_(tokens) {}

  // An expression (with `a if b else c`), from the current token.
  ExprPtr ParseExpression();
  // An `or` expression: a for loop's iterable, before its `if` filter.
  ExprPtr ParseOr();

 protected:
  [[noreturn]] void Fail(const std::string& what, int line) const {
    throw TemplateError("chat template line " + std::to_string(line) + ": " + what);
  }
  const Token& Cur() const { return t_[i_]; }
  const Token& Next() { return t_[i_++]; }
  bool IsOp(const char* op) const { return Cur().kind == TokenKind::kOp && Cur().text == op; }
  bool IsName(const char* name) const { return Cur().kind == TokenKind::kName && Cur().text == name; }
  bool SkipOp(const char* op) { return IsOp(op) ? (++i_, true) : false; }
  bool SkipName(const char* name) { return IsName(name) ? (++i_, true) : false; }
  void ExpectOp(const char* op) {
    if (!SkipOp(op)) Fail(std::string("expected '") + op + "', got '" + Describe(Cur()) + "'", Cur().line);
  }
  std::string ExpectName() {
    if (Cur().kind != TokenKind::kName) Fail("expected a name, got '" + Describe(Cur()) + "'", Cur().line);
    return Next().text;
  }
  void ExpectBlockEnd() {
    if (Cur().kind != TokenKind::kBlockEnd)
      Fail("expected the end of the statement (%}), got '" + Describe(Cur()) + "'", Cur().line);
    ++i_;
  }
  static std::string Describe(const Token& t) {
    switch (t.kind) {
      case TokenKind::kVarEnd:
        return "}}";
      case TokenKind::kBlockEnd:
        return "%}";
      case TokenKind::kEnd:
        return "end of template";
      default:
        return t.text;
    }
  }
  static std::unique_ptr<Expr> Make(Expr::Kind kind, int line, std::string name, std::vector<ExprPtr> args) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line;
    e->name = std::move(name);
    e->args = std::move(args);
    return e;
  }
  static std::vector<ExprPtr> Args(ExprPtr a, ExprPtr b = nullptr) {
    std::vector<ExprPtr> v;
    v.push_back(std::move(a));
    if (b) v.push_back(std::move(b));
    return v;
  }

 private:
  ExprPtr ParseAnd();
  ExprPtr ParseNot();
  ExprPtr ParseCompare();
  ExprPtr ParseMath1();
  ExprPtr ParseConcat();
  ExprPtr ParseMath2();
  ExprPtr ParsePow();
  ExprPtr ParseUnary(bool with_filter);
  ExprPtr ParsePrimary();
  ExprPtr ParsePostfix(ExprPtr node);
  ExprPtr ParseSubscript(ExprPtr node, int line);
  ExprPtr ParseFilterExpr(ExprPtr node);
  void ParseCallArgs(Expr& call);
  ExprPtr ParseSequence(const char* close, Expr::Kind kind, int line);

 protected:
  const std::vector<Token>& t_;
  size_t i_ = 0;
};

}  // namespace ps::chat
