#include "chat/template.h"

#include <unordered_map>

#include "chat/builtins.h"
#include "chat/template_lexer.h"
#include "chat/template_parser.h"

namespace ps::chat {
namespace {

enum class Flow { kNormal, kBreak, kContinue };

bool HasGeneration(const Body& body) {
  for (const Node& n : body) {
    if (n.kind == Node::Kind::kGeneration || HasGeneration(n.body) || HasGeneration(n.else_body)) return true;
    for (const auto& [cond, b] : n.branches) {
      if (HasGeneration(b)) return true;
    }
  }
  return false;
}

// "name", "a.b", "x[...]": how an expression reads in an error message.
std::string Describe(const Expr& e) {
  switch (e.kind) {
    case Expr::Kind::kName:
      return e.name;
    case Expr::Kind::kAttr:
      return Describe(*e.args[0]) + "." + e.name;
    case Expr::Kind::kItem:
      return Describe(*e.args[0]) + "[...]";
    default:
      return "the expression";
  }
}

class Renderer {
 public:
  Renderer(const Value& context, const RenderOptions& options) : context_(context), options_(options) {
    if (!context.is_mapping()) throw TemplateError("the render context must be a dict");
  }

  RenderResult Run(const Body& body) {
    scopes_.emplace_back();
    Exec(body);
    return {std::move(out_), std::move(spans_)};
  }

 private:
  [[noreturn]] static void Fail(const std::string& what, int line) {
    throw TemplateError("chat template line " + std::to_string(line) + ": " + what);
  }

  Value Lookup(const std::string& name) const {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
      const auto found = it->find(name);
      if (found != it->end()) return found->second;
    }
    Value v = context_.Get(name);
    if (v.is_undefined() && IsGlobalFunction(name)) return Value::Function(name);
    return v;
  }

  Flow Exec(const Body& body);
  Flow ExecNode(const Node& n);
  Flow ExecFor(const Node& n);
  void ExecSet(const Node& n);
  void ExecGeneration(const Node& n);
  Value Eval(const Expr& e);
  Value EvalChecked(const Expr& e);
  Value EvalCall(const Expr& e);
  Value EvalBinary(const Expr& e);
  Value EvalAccess(const Expr& e);
  Value EvalFilterOrTest(const Expr& e);

  const Value& context_;
  const RenderOptions& options_;
  std::vector<std::unordered_map<std::string, Value>> scopes_;
  std::string out_;
  std::vector<std::pair<int64_t, int64_t>> spans_;
  int generation_blocks_ = 0;
};

Flow Renderer::Exec(const Body& body) {
  for (const Node& n : body) {
    Flow flow = Flow::kNormal;
    try {
      flow = ExecNode(n);
    } catch (const TemplateRaised&) {
      throw;
    } catch (const TemplateError& err) {  // from a builtin: add the statement's line
      const std::string what = err.what();
      if (what.rfind("chat template line ", 0) == 0) throw;
      Fail(what, n.line);
    }
    if (flow != Flow::kNormal) return flow;
  }
  return Flow::kNormal;
}

Flow Renderer::ExecNode(const Node& n) {
  switch (n.kind) {
    case Node::Kind::kText:
      out_ += n.text;
      return Flow::kNormal;
    case Node::Kind::kOutput:
      out_ += EvalChecked(*n.expr).ToString();
      return Flow::kNormal;
    case Node::Kind::kIf:
      for (const auto& [cond, body] : n.branches) {
        if (EvalChecked(*cond).Truthy()) return Exec(body);
      }
      return Exec(n.else_body);
    case Node::Kind::kFor:
      return ExecFor(n);
    case Node::Kind::kSet:
    case Node::Kind::kSetBlock:
      ExecSet(n);
      return Flow::kNormal;
    case Node::Kind::kBreak:
      return Flow::kBreak;
    case Node::Kind::kContinue:
      return Flow::kContinue;
    case Node::Kind::kGeneration:
      ExecGeneration(n);
      return Flow::kNormal;
  }
  return Flow::kNormal;
}

Flow Renderer::ExecFor(const Node& n) {
  List items;
  {
    const List all = Iterate(EvalChecked(*n.expr));
    scopes_.emplace_back();
    for (const Value& item : all) {
      if (n.filter == nullptr) {
        items.push_back(item);
        continue;
      }
      if (n.targets.size() == 1) scopes_.back()[n.targets[0]] = item;
      if (EvalChecked(*n.filter).Truthy()) items.push_back(item);
    }
  }
  const int64_t length = static_cast<int64_t>(items.size());
  for (int64_t i = 0; i < length; ++i) {
    auto& scope = scopes_.back();
    scope.clear();  // as Jinja2: what one iteration sets, the next does not see
    if (n.targets.size() == 1) {
      scope[n.targets[0]] = items[i];
    } else {
      const List parts = Iterate(items[i]);
      if (parts.size() != n.targets.size())
        Fail("cannot unpack " + std::to_string(parts.size()) + " values into " + std::to_string(n.targets.size()) +
                 " loop variables",
             n.line);
      for (size_t t = 0; t < parts.size(); ++t) scope[n.targets[t]] = parts[t];
    }
    scope["loop"] = Value::MakeDict({{"index0", Value::Int(i)},
                                     {"index", Value::Int(i + 1)},
                                     {"revindex0", Value::Int(length - i - 1)},
                                     {"revindex", Value::Int(length - i)},
                                     {"first", Value::Bool(i == 0)},
                                     {"last", Value::Bool(i == length - 1)},
                                     {"length", Value::Int(length)},
                                     {"previtem", i > 0 ? items[i - 1] : Value()},
                                     {"nextitem", i + 1 < length ? items[i + 1] : Value()}});
    if (Exec(n.body) == Flow::kBreak) break;
  }
  scopes_.pop_back();
  if (length == 0) return Exec(n.else_body);
  return Flow::kNormal;
}

void Renderer::ExecSet(const Node& n) {
  Value v;
  if (n.kind == Node::Kind::kSetBlock) {
    const size_t start = out_.size();
    Exec(n.body);
    v = Value::String(out_.substr(start));
    out_.resize(start);
  } else {
    v = EvalChecked(*n.expr);
  }
  if (!n.attr.empty()) {
    const Value ns = Lookup(n.targets[0]);
    if (ns.kind() != Value::Kind::kNamespace)
      Fail("cannot set " + n.targets[0] + "." + n.attr + ": " + n.targets[0] + " is a " + ns.TypeName() +
               ", not a namespace()",
           n.line);
    ns.SetAttr(n.attr, std::move(v));
    return;
  }
  if (n.targets.size() == 1) {
    scopes_.back()[n.targets[0]] = std::move(v);
    return;
  }
  const List parts = Iterate(v);
  if (parts.size() != n.targets.size())
    Fail(
        "cannot unpack " + std::to_string(parts.size()) + " values into " + std::to_string(n.targets.size()) + " names",
        n.line);
  for (size_t t = 0; t < parts.size(); ++t) scopes_.back()[n.targets[t]] = parts[t];
}

void Renderer::ExecGeneration(const Node& n) {
  const int index = generation_blocks_++;
  const int64_t start = static_cast<int64_t>(out_.size());
  scopes_.emplace_back();  // a block of its own (Jinja2 renders it as a caller() macro)
  Exec(n.body);
  scopes_.pop_back();
  if (index == options_.replace_generation_block) {
    out_.resize(static_cast<size_t>(start));
    out_ += options_.replacement;
  }
  spans_.emplace_back(start, static_cast<int64_t>(out_.size()));
}

// Eval, with the line of `e` added to errors from builtins.
Value Renderer::EvalChecked(const Expr& e) {
  try {
    return Eval(e);
  } catch (const TemplateRaised&) {
    throw;
  } catch (const TemplateError& err) {
    const std::string what = err.what();
    if (what.rfind("chat template line ", 0) == 0) throw;
    Fail(what, e.line);
  }
}

Value Renderer::Eval(const Expr& e) {
  switch (e.kind) {
    case Expr::Kind::kLiteral:
      return e.literal;
    case Expr::Kind::kName:
      return Lookup(e.name);
    case Expr::Kind::kList: {
      List items;
      for (const ExprPtr& a : e.args) items.push_back(Eval(*a));
      return Value::MakeList(std::move(items));
    }
    case Expr::Kind::kDict: {
      Dict items;
      for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
        const Value key = Eval(*e.args[i]);
        if (!key.is_string()) Fail("dict keys must be strings", e.line);
        items.emplace_back(key.str(), Eval(*e.args[i + 1]));
      }
      return Value::MakeDict(std::move(items));
    }
    case Expr::Kind::kAttr:
    case Expr::Kind::kItem:
    case Expr::Kind::kSlice:
      return EvalAccess(e);
    case Expr::Kind::kCall:
      return EvalCall(e);
    case Expr::Kind::kFilter:
    case Expr::Kind::kTest:
      return EvalFilterOrTest(e);
    case Expr::Kind::kUnary: {
      const Value v = Eval(*e.args[0]);
      if (e.name == "not") return Value::Bool(!v.Truthy());
      if (!v.is_number()) Fail("bad operand type for unary " + e.name + ": '" + v.TypeName() + "'", e.line);
      if (e.name == "+") return v;
      return v.kind() == Value::Kind::kFloat ? Value::Float(-v.float_value()) : Value::Int(-v.int_value());
    }
    case Expr::Kind::kBinary:
      return EvalBinary(e);
    case Expr::Kind::kAnd: {
      const Value a = Eval(*e.args[0]);
      return a.Truthy() ? Eval(*e.args[1]) : a;
    }
    case Expr::Kind::kOr: {
      const Value a = Eval(*e.args[0]);
      return a.Truthy() ? a : Eval(*e.args[1]);
    }
    case Expr::Kind::kCond:
      if (Eval(*e.args[0]).Truthy()) return Eval(*e.args[1]);
      return e.args[2] ? Eval(*e.args[2]) : Value();
  }
  return Value();
}

Value Renderer::EvalFilterOrTest(const Expr& e) {
  const Value v = Eval(*e.args[0]);
  List args;
  for (size_t i = 1; i < e.args.size(); ++i) args.push_back(Eval(*e.args[i]));
  if (e.kind == Expr::Kind::kTest) {
    const bool negated = e.name[0] == '!';
    return Value::Bool(ApplyTest(negated ? e.name.substr(1) : e.name, v, args) != negated);
  }
  Kwargs kwargs;
  for (const auto& [k, a] : e.kwargs) kwargs.emplace_back(k, Eval(*a));
  return ApplyFilter(e.name, v, args, kwargs);
}

Value Renderer::EvalAccess(const Expr& e) {
  const Value object = Eval(*e.args[0]);
  if (object.is_undefined()) Fail("'" + Describe(*e.args[0]) + "' is undefined", e.line);
  if (e.kind == Expr::Kind::kAttr) {
    if (e.name.empty() || e.name[0] == '_') return Value();  // the sandbox hides private attributes
    if (object.is_mapping()) return object.Get(e.name);
    return Value();  // other objects: methods are resolved by EvalCall
  }
  if (e.kind == Expr::Kind::kItem) return PyIndex(object, Eval(*e.args[1]));
  const auto part = [&](size_t i) { return e.args[i] ? Eval(*e.args[i]) : Value::None(); };
  return PySlice(object, part(1), part(2), part(3));
}

Value Renderer::EvalCall(const Expr& e) {
  const Expr& callee = *e.args[0];
  List args;
  for (size_t i = 1; i < e.args.size(); ++i) args.push_back(Eval(*e.args[i]));
  Kwargs kwargs;
  for (const auto& [k, a] : e.kwargs) kwargs.emplace_back(k, Eval(*a));
  if (callee.kind == Expr::Kind::kAttr) {
    const Value object = Eval(*callee.args[0]);
    if (object.is_undefined()) Fail("'" + Describe(*callee.args[0]) + "' is undefined", e.line);
    if (object.kind() == Value::Kind::kDict && !object.Get(callee.name).is_undefined() &&
        object.Get(callee.name).kind() != Value::Kind::kFunction) {
      Fail("'" + Describe(callee) + "' is not callable", e.line);
    }
    return CallMethod(object, callee.name, args, kwargs);
  }
  const Value f = Eval(callee);
  if (f.kind() == Value::Kind::kFunction) {
    if (f.function_name() == "raise_exception") {
      throw TemplateRaised("chat template line " + std::to_string(e.line) +
                           ": raise_exception: " + (args.empty() ? std::string() : args[0].ToString()));
    }
    return CallGlobal(f.function_name(), args, kwargs);
  }
  if (f.is_undefined()) Fail("'" + Describe(callee) + "' is undefined (not a supported function)", e.line);
  Fail("'" + Describe(callee) + "' (a " + f.TypeName() + ") is not callable", e.line);
}

Value Renderer::EvalBinary(const Expr& e) {
  const Value a = Eval(*e.args[0]);
  const Value b = Eval(*e.args[1]);
  const std::string& op = e.name;
  if (op == "==") return Value::Bool(Equal(a, b));
  if (op == "!=") return Value::Bool(!Equal(a, b));
  if (op == "in") return Value::Bool(PyContains(b, a));
  if (op == "not in") return Value::Bool(!PyContains(b, a));
  if (op == "~") return Value::String(a.ToString() + b.ToString());
  if (op == "<" || op == "<=" || op == ">" || op == ">=") {
    const int c = Compare(a, b);
    return Value::Bool(op == "<" ? c < 0 : op == "<=" ? c <= 0 : op == ">" ? c > 0 : c >= 0);
  }
  if (a.is_undefined() || b.is_undefined()) {
    Fail("'" + Describe(*e.args[a.is_undefined() ? 0 : 1]) + "' is undefined (in " + op + ")", e.line);
  }
  return PyArith(op, a, b);
}

}  // namespace

ChatTemplate::ChatTemplate(const std::string& source)
    : body_(ParseTemplate(LexTemplate(source))), has_generation_(HasGeneration(body_)) {}

RenderResult ChatTemplate::Render(const Value& context, const RenderOptions& options) const {
  return Renderer(context, options).Run(body_);
}

}  // namespace ps::chat
