#include "chat/expression_parser.h"

#include "chat/template_parser.h"

namespace ps::chat {

ExprPtr ExprParser::ParseExpression() {
  ExprPtr node = ParseOr();
  while (IsName("if")) {
    const int line = Next().line;
    ExprPtr cond = ParseOr();
    ExprPtr otherwise = SkipName("else") ? ParseExpression() : nullptr;
    std::vector<ExprPtr> args;
    args.push_back(std::move(cond));
    args.push_back(std::move(node));
    args.push_back(std::move(otherwise));
    node = Make(Expr::Kind::kCond, line, "", std::move(args));
  }
  return node;
}

ExprPtr ExprParser::ParseOr() {
  ExprPtr node = ParseAnd();
  while (IsName("or")) {
    const int line = Next().line;
    node = Make(Expr::Kind::kOr, line, "or", Args(std::move(node), ParseAnd()));
  }
  return node;
}

ExprPtr ExprParser::ParseAnd() {
  ExprPtr node = ParseNot();
  while (IsName("and")) {
    const int line = Next().line;
    node = Make(Expr::Kind::kAnd, line, "and", Args(std::move(node), ParseNot()));
  }
  return node;
}

ExprPtr ExprParser::ParseNot() {
  if (IsName("not")) {
    const int line = Next().line;
    return Make(Expr::Kind::kUnary, line, "not", Args(ParseNot()));
  }
  return ParseCompare();
}

ExprPtr ExprParser::ParseCompare() {
  ExprPtr node = ParseMath1();
  bool compared = false;
  while (true) {
    const int line = Cur().line;
    std::string op;
    if (Cur().kind == TokenKind::kOp &&
        (IsOp("==") || IsOp("!=") || IsOp("<") || IsOp("<=") || IsOp(">") || IsOp(">="))) {
      op = Next().text;
    } else if (SkipName("in")) {
      op = "in";
    } else if (IsName("not") && t_[i_ + 1].kind == TokenKind::kName && t_[i_ + 1].text == "in") {
      i_ += 2;
      op = "not in";
    } else {
      return node;
    }
    if (compared) Fail("unsupported: chained comparison (a < b < c); use 'and'", line);
    compared = true;
    node = Make(Expr::Kind::kBinary, line, op, Args(std::move(node), ParseMath1()));
  }
}

ExprPtr ExprParser::ParseMath1() {
  ExprPtr node = ParseConcat();
  while (IsOp("+") || IsOp("-")) {
    const Token& op = Next();
    node = Make(Expr::Kind::kBinary, op.line, op.text, Args(std::move(node), ParseConcat()));
  }
  return node;
}

ExprPtr ExprParser::ParseConcat() {
  ExprPtr node = ParseMath2();
  while (IsOp("~")) {
    const int line = Next().line;
    node = Make(Expr::Kind::kBinary, line, "~", Args(std::move(node), ParseMath2()));
  }
  return node;
}

ExprPtr ExprParser::ParseMath2() {
  ExprPtr node = ParsePow();
  while (IsOp("*") || IsOp("/") || IsOp("//") || IsOp("%")) {
    const Token& op = Next();
    node = Make(Expr::Kind::kBinary, op.line, op.text, Args(std::move(node), ParsePow()));
  }
  return node;
}

ExprPtr ExprParser::ParsePow() {
  ExprPtr node = ParseUnary(true);
  while (IsOp("**")) {
    const int line = Next().line;
    node = Make(Expr::Kind::kBinary, line, "**", Args(std::move(node), ParseUnary(true)));
  }
  return node;
}

ExprPtr ExprParser::ParseUnary(bool with_filter) {
  ExprPtr node;
  if (IsOp("-") || IsOp("+")) {
    const Token& op = Next();
    node = Make(Expr::Kind::kUnary, op.line, op.text, Args(ParseUnary(false)));
  } else {
    node = ParsePostfix(ParsePrimary());
  }
  return with_filter ? ParseFilterExpr(std::move(node)) : std::move(node);
}

ExprPtr ExprParser::ParsePrimary() {
  const Token& tok = Next();
  auto literal = [&](Value v) {
    auto e = Make(Expr::Kind::kLiteral, tok.line, "", {});
    e->literal = std::move(v);
    return ExprPtr(std::move(e));
  };
  switch (tok.kind) {
    case TokenKind::kName:
      if (tok.text == "true" || tok.text == "True") return literal(Value::Bool(true));
      if (tok.text == "false" || tok.text == "False") return literal(Value::Bool(false));
      if (tok.text == "none" || tok.text == "None") return literal(Value::None());
      return Make(Expr::Kind::kName, tok.line, tok.text, {});
    case TokenKind::kString: {
      std::string s = tok.text;
      while (Cur().kind == TokenKind::kString) s += Next().text;  // adjacent literals concatenate
      return literal(Value::String(std::move(s)));
    }
    case TokenKind::kInt:
      return literal(Value::Int(std::stoll(tok.text)));
    case TokenKind::kFloat:
      return literal(Value::Float(std::stod(tok.text)));
    case TokenKind::kOp:
      if (tok.text == "(") {
        if (SkipOp(")")) return Make(Expr::Kind::kList, tok.line, "", {});
        std::vector<ExprPtr> items;
        items.push_back(ParseExpression());
        if (SkipOp(")")) return std::move(items[0]);
        while (SkipOp(",") && !IsOp(")")) items.push_back(ParseExpression());
        ExpectOp(")");
        return Make(Expr::Kind::kList, tok.line, "", std::move(items));  // a tuple
      }
      if (tok.text == "[") return ParseSequence("]", Expr::Kind::kList, tok.line);
      if (tok.text == "{") return ParseSequence("}", Expr::Kind::kDict, tok.line);
      break;
    default:
      break;
  }
  Fail("unexpected '" + Describe(tok) + "' in an expression", tok.line);
}

// The elements of a list/tuple (`close` "]" or ")") or the key: value pairs of a dict.
ExprPtr ExprParser::ParseSequence(const char* close, Expr::Kind kind, int line) {
  std::vector<ExprPtr> items;
  while (!SkipOp(close)) {
    if (!items.empty()) {
      ExpectOp(",");
      if (SkipOp(close)) break;  // trailing comma
    }
    items.push_back(ParseExpression());
    if (kind == Expr::Kind::kDict) {
      ExpectOp(":");
      items.push_back(ParseExpression());
    }
  }
  return Make(kind, line, "", std::move(items));
}

ExprPtr ExprParser::ParsePostfix(ExprPtr node) {
  while (true) {
    const int line = Cur().line;
    if (SkipOp(".")) {
      if (Cur().kind == TokenKind::kInt) {  // foo.0 is foo[0]
        auto index = Make(Expr::Kind::kLiteral, line, "", {});
        index->literal = Value::Int(std::stoll(Next().text));
        node = Make(Expr::Kind::kItem, line, "", Args(std::move(node), std::move(index)));
      } else {
        node = Make(Expr::Kind::kAttr, line, ExpectName(), Args(std::move(node)));
      }
    } else if (SkipOp("[")) {
      node = ParseSubscript(std::move(node), line);
    } else if (IsOp("(")) {
      ++i_;
      auto call = std::make_unique<Expr>();
      call->kind = Expr::Kind::kCall;
      call->line = line;
      call->args.push_back(std::move(node));
      ParseCallArgs(*call);
      node = std::move(call);
    } else {
      return node;
    }
  }
}

ExprPtr ExprParser::ParseSubscript(ExprPtr node, int line) {
  std::vector<ExprPtr> parts;  // start, stop, step
  parts.push_back(std::move(node));
  parts.push_back(IsOp(":") ? nullptr : ParseExpression());
  if (SkipOp("]")) return Make(Expr::Kind::kItem, line, "", std::move(parts));
  ExpectOp(":");
  parts.push_back(IsOp(":") || IsOp("]") ? nullptr : ParseExpression());
  parts.push_back(SkipOp(":") && !IsOp("]") ? ParseExpression() : nullptr);
  ExpectOp("]");
  return Make(Expr::Kind::kSlice, line, "", std::move(parts));
}

// After "(": positional and keyword arguments up to ")".
void ExprParser::ParseCallArgs(Expr& call) {
  while (!SkipOp(")")) {
    if (call.args.size() > 1 || !call.kwargs.empty()) {
      ExpectOp(",");
      if (SkipOp(")")) return;
    }
    if (Cur().kind == TokenKind::kName && t_[i_ + 1].kind == TokenKind::kOp && t_[i_ + 1].text == "=") {
      std::string key = Next().text;
      ++i_;
      call.kwargs.emplace_back(std::move(key), ParseExpression());
    } else {
      if (!call.kwargs.empty()) Fail("a positional argument after a keyword argument", Cur().line);
      call.args.push_back(ParseExpression());
    }
  }
}

ExprPtr ExprParser::ParseFilterExpr(ExprPtr node) {
  while (true) {
    const int line = Cur().line;
    if (SkipOp("|")) {
      const std::string name = ExpectName();
      if (!IsSupportedFilter(name)) Fail("unsupported filter '" + name + "'", line);
      auto f = std::make_unique<Expr>();
      f->kind = Expr::Kind::kFilter;
      f->line = line;
      f->name = name;
      f->args.push_back(std::move(node));
      if (SkipOp("(")) ParseCallArgs(*f);
      node = std::move(f);
    } else if (SkipName("is")) {
      const bool negated = SkipName("not");
      const std::string name = ExpectName();
      if (!IsSupportedTest(name)) Fail("unsupported test 'is " + name + "'", line);
      auto t = std::make_unique<Expr>();
      t->kind = Expr::Kind::kTest;
      t->line = line;
      t->name = (negated ? "!" : "") + name;
      t->args.push_back(std::move(node));
      // As Jinja2: one argument without parentheses when a primary follows (not else/or/and).
      if (SkipOp("(")) {
        ParseCallArgs(*t);
      } else if (Cur().kind == TokenKind::kString || Cur().kind == TokenKind::kInt || Cur().kind == TokenKind::kFloat ||
                 IsOp("[") || IsOp("{") ||
                 (Cur().kind == TokenKind::kName && !IsName("else") && !IsName("or") && !IsName("and"))) {
        t->args.push_back(ParsePostfix(ParsePrimary()));
      }
      node = std::move(t);
    } else if (IsOp("(")) {
      node = ParsePostfix(std::move(node));
    } else {
      return node;
    }
  }
}

}  // namespace ps::chat
