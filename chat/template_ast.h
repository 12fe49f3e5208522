// The syntax tree of a parsed chat template (template_parser.h builds it, template.cc
// evaluates it). Immutable once built; every node keeps its template line for errors.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "chat/value.h"

namespace ps::chat {

struct Expr;
using ExprPtr = std::unique_ptr<const Expr>;

struct Expr {
  enum class Kind {
    kLiteral,  // literal
    kName,     // name
    kList,     // [args...] (and tuples)
    kDict,     // {kwargs...}: keys are expressions in args[2i], values in args[2i+1]
    kAttr,     // args[0].name
    kItem,     // args[0][args[1]]
    kSlice,    // args[0][args[1]:args[2]:args[3]] (null parts: omitted)
    kCall,     // args[0](args[1..], kwargs)
    kFilter,   // args[0] | name(args[1..], kwargs)
    kTest,     // args[0] is [not] name(args[1..])  (negated: name starts with "!")
    kUnary,    // name in {"-", "+", "not"} applied to args[0]
    kBinary,   // args[0] name args[1]: + - * / // % ** ~ == != < <= > >= in "not in"
    kAnd,      // args[0] and args[1]
    kOr,       // args[0] or args[1]
    kCond,     // args[1] if args[0] else args[2] (args[2] may be null: undefined)
  };
  Kind kind;
  int line = 0;
  Value literal;
  std::string name;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
};

struct Node;
using Body = std::vector<Node>;

struct Node {
  enum class Kind {
    kText,      // text
    kOutput,    // {{ expr }}
    kIf,        // branches: (condition, body)...; else_body
    kFor,       // for targets in expr [if filter]: body [else else_body]
    kSet,       // set targets = expr  |  set target.attr = expr (attr set)
    kSetBlock,  // set target %}body{% endset
    kBreak,
    kContinue,
    kGeneration,  // {% generation %}body{% endgeneration %} (transformers' assistant tracker)
  };
  Node(Kind kind_in, int line_in) : kind(kind_in), line(line_in) {}
  Kind kind;
  int line = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr filter;
  std::vector<std::string> targets;
  std::string attr;
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body;
  Body else_body;
};

}  // namespace ps::chat
