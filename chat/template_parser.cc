#include "chat/template_parser.h"

#include <set>

#include "chat/expression_parser.h"

namespace ps::chat {
namespace {

class Parser : public ExprParser {
 public:
  explicit Parser(const std::vector<Token>& tokens) : ExprParser(tokens) {}

  Body ParseAll() {
    std::string end;
    return ParseBody({}, &end);
  }

 private:
  Body ParseBody(const std::set<std::string>& ends, std::string* end_found);
  void ParseStatement(Body& body);
  Node ParseFor(int line);
  Node ParseIf(int line);
  Node ParseSet(int line);
};

// Nodes up to a `{% <end> %}` whose keyword is in `ends` (left unconsumed past the
// keyword; *end_found names it) or to the end of the template when `ends` is empty.
Body Parser::ParseBody(const std::set<std::string>& ends, std::string* end_found) {
  Body body;
  while (true) {
    const Token& tok = Cur();
    if (tok.kind == TokenKind::kEnd) {
      if (!ends.empty()) {
        std::string closing = *ends.begin();
        for (const std::string& e : ends)
          if (e.rfind("end", 0) == 0) closing = e;
        Fail("unexpected end of template: expected {% " + closing + " %}", tok.line);
      }
      return body;
    }
    if (tok.kind == TokenKind::kText) {
      Node n{Node::Kind::kText, tok.line};
      n.text = Next().text;
      body.push_back(std::move(n));
    } else if (tok.kind == TokenKind::kVarBegin) {
      ++i_;
      Node n{Node::Kind::kOutput, tok.line};
      n.expr = ParseExpression();
      if (Cur().kind != TokenKind::kVarEnd) Fail("expected '}}', got '" + Describe(Cur()) + "'", Cur().line);
      ++i_;
      body.push_back(std::move(n));
    } else if (tok.kind == TokenKind::kBlockBegin) {
      const Token& keyword = t_[i_ + 1];
      if (keyword.kind == TokenKind::kName && ends.count(keyword.text)) {
        i_ += 2;
        *end_found = keyword.text;
        return body;
      }
      ++i_;
      ParseStatement(body);
    } else {
      Fail("unexpected '" + Describe(tok) + "'", tok.line);
    }
  }
}

void Parser::ParseStatement(Body& body) {
  const int line = Cur().line;
  if (Cur().kind != TokenKind::kName) Fail("expected a statement keyword, got '" + Describe(Cur()) + "'", line);
  const std::string keyword = Next().text;
  if (keyword == "for") return body.push_back(ParseFor(line));
  if (keyword == "if") return body.push_back(ParseIf(line));
  if (keyword == "set") return body.push_back(ParseSet(line));
  if (keyword == "break" || keyword == "continue") {
    ExpectBlockEnd();
    return body.push_back(Node{keyword == "break" ? Node::Kind::kBreak : Node::Kind::kContinue, line});
  }
  if (keyword == "generation") {
    ExpectBlockEnd();
    Node n{Node::Kind::kGeneration, line};
    std::string end;
    n.body = ParseBody({"endgeneration"}, &end);
    ExpectBlockEnd();
    return body.push_back(std::move(n));
  }
  static const std::set<std::string> kKnown = {"macro", "call", "filter", "include",    "import", "from", "extends",
                                               "block", "raw",  "with",   "autoescape", "do",     "trans"};
  if (kKnown.count(keyword)) Fail("unsupported statement '{% " + keyword + " %}'", line);
  Fail("unknown statement '{% " + keyword + " %}' (or a tag closed without its opening)", line);
}

Node Parser::ParseFor(int line) {
  Node n{Node::Kind::kFor, line};
  n.targets.push_back(ExpectName());
  while (SkipOp(",")) n.targets.push_back(ExpectName());
  if (!SkipName("in")) Fail("expected 'in' in a for loop", Cur().line);
  n.expr = ParseOr();  // not ParseExpression: a trailing `if` is the loop filter
  if (SkipName("if")) n.filter = ParseExpression();
  if (IsName("recursive")) Fail("unsupported: recursive for loops", line);
  ExpectBlockEnd();
  std::string end;
  n.body = ParseBody({"endfor", "else"}, &end);
  ExpectBlockEnd();
  if (end == "else") {
    n.else_body = ParseBody({"endfor"}, &end);
    ExpectBlockEnd();
  }
  return n;
}

Node Parser::ParseIf(int line) {
  Node n{Node::Kind::kIf, line};
  ExprPtr cond = ParseExpression();
  while (true) {
    ExpectBlockEnd();
    std::string end;
    Body body = ParseBody({"elif", "else", "endif"}, &end);
    n.branches.emplace_back(std::move(cond), std::move(body));
    if (end == "endif") break;
    if (end == "else") {
      ExpectBlockEnd();
      n.else_body = ParseBody({"endif"}, &end);
      break;
    }
    cond = ParseExpression();
  }
  ExpectBlockEnd();
  return n;
}

Node Parser::ParseSet(int line) {
  Node n{Node::Kind::kSet, line};
  n.targets.push_back(ExpectName());
  if (SkipOp(".")) {
    n.attr = ExpectName();
  } else {
    while (SkipOp(",")) n.targets.push_back(ExpectName());
  }
  if (Cur().kind == TokenKind::kBlockEnd && n.attr.empty() && n.targets.size() == 1) {
    ++i_;
    n.kind = Node::Kind::kSetBlock;
    std::string end;
    n.body = ParseBody({"endset"}, &end);
    ExpectBlockEnd();
    return n;
  }
  ExpectOp("=");
  n.expr = ParseExpression();
  ExpectBlockEnd();
  return n;
}

}  // namespace

Body ParseTemplate(const std::vector<Token>& tokens) { return Parser(tokens).ParseAll(); }

}  // namespace ps::chat
