#include "chat/builtins.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <ctime>
#include <set>

#include "chat/template_parser.h"

namespace ps::chat {

const Value& Arg(const List& args, const Kwargs& kwargs, size_t i, const char* name, const Value& fallback) {
  if (i < args.size()) return args[i];
  for (const auto& [k, v] : kwargs) {
    if (k == name) return v;
  }
  return fallback;
}

namespace {

std::string StrOf(const Value& v, const char* what) {
  if (!v.is_string()) throw TemplateError(std::string(what) + " expects a str, got " + v.TypeName());
  return v.str();
}

}  // namespace

Value PySplit(const std::string& s, const Value& sep, int64_t maxsplit) {
  List parts;
  if (sep.is_none() || sep.is_undefined()) {  // runs of whitespace, no empty parts
    const std::vector<std::string> cps = CodePoints(s);
    size_t i = 0;
    while (true) {
      while (i < cps.size() && IsPySpace(cps[i])) ++i;
      if (i == cps.size()) break;
      const bool last = maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit;
      std::string word;
      for (; i < cps.size() && (last || !IsPySpace(cps[i])); ++i) word += cps[i];
      parts.push_back(Value::String(word));
    }
    return Value::MakeList(std::move(parts));
  }
  const std::string& d = StrOf(sep, "split");
  if (d.empty()) throw TemplateError("split: empty separator");
  size_t start = 0, found;
  while ((maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) &&
         (found = s.find(d, start)) != std::string::npos) {
    parts.push_back(Value::String(s.substr(start, found - start)));
    start = found + d.size();
  }
  parts.push_back(Value::String(s.substr(start)));
  return Value::MakeList(std::move(parts));
}

namespace {

std::string PyReplace(const std::string& s, const std::string& from, const std::string& to, int64_t count) {
  std::string out;
  size_t start = 0, found;
  int64_t done = 0;
  if (from.empty()) return s;  // Python inserts `to` between characters; no template does
  while ((count < 0 || done < count) && (found = s.find(from, start)) != std::string::npos) {
    out += s.substr(start, found - start) + to;
    start = found + from.size();
    ++done;
  }
  return out + s.substr(start);
}

std::string CaseMap(const std::string& s, int mode) {  // 0 lower, 1 upper, 2 capitalize, 3 title
  std::string out = s;
  bool word_start = true;
  for (size_t i = 0; i < out.size(); ++i) {
    const unsigned char c = out[i];
    const bool alpha = std::isalpha(c);
    bool upper = mode == 1 || (mode == 2 && i == 0) || (mode == 3 && word_start);
    out[i] = static_cast<char>(upper ? std::toupper(c) : std::tolower(c));
    word_start = !alpha;
  }
  return out;
}

Value Indent(const std::string& s, const Value& width, bool first, bool blank) {
  const std::string pad = width.is_string() ? width.str() : std::string(static_cast<size_t>(width.int_value()), ' ');
  std::string out;
  size_t start = 0;
  bool is_first = true;
  while (start <= s.size()) {
    const size_t nl = s.find('\n', start);
    const std::string line = s.substr(start, nl == std::string::npos ? std::string::npos : nl - start);
    if ((!is_first || first) && (blank || !line.empty())) out += pad;
    out += line;
    if (nl == std::string::npos) break;
    out += '\n';
    start = nl + 1;
    is_first = false;
  }
  return Value::String(out);
}

Value AttrOf(const Value& item, const std::string& path) {
  Value v = item;
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    const std::string key = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    v = v.is_mapping() ? v.Get(key) : Value();
    if (dot == std::string::npos) return v;
    start = dot + 1;
  }
}

// select/reject (by_attr false: args = [test, test args...]) and selectattr/rejectattr
// (args = [attribute, test, test args...]); no test: the value's truthiness.
Value Select(const Value& seq, const List& args, bool reject, bool by_attr) {
  if (by_attr && args.empty()) throw TemplateError("selectattr/rejectattr: the attribute name is missing");
  const size_t test_at = by_attr ? 1 : 0;
  const List test_args(args.begin() + std::min(test_at + 1, args.size()), args.end());
  List out;
  for (const Value& item : Iterate(seq)) {
    const Value v = by_attr ? AttrOf(item, StrOf(args[0], "selectattr")) : item;
    const bool pass = args.size() <= test_at ? v.Truthy() : ApplyTest(StrOf(args[test_at], "select"), v, test_args);
    if (pass != reject) out.push_back(item);
  }
  return Value::MakeList(std::move(out));
}

// sort (reverse=, attribute=), unique, min, max, sum (attribute=, start=).
Value Reduce(const std::string& name, const Value& seq, const List& args, const Kwargs& kwargs) {
  const Value attribute = Arg({}, kwargs, 0, "attribute", Value());
  const auto key = [&](const Value& item) {
    return attribute.is_undefined() ? item : AttrOf(item, attribute.ToString());
  };
  List items = Iterate(seq);
  if (name == "sum") {
    Value total = Arg(args, kwargs, 2, "start", Value::Int(0));
    for (const Value& item : items) total = PyArith("+", total, key(item));
    return total;
  }
  if (name == "unique") {
    List out;
    for (const Value& item : items) {
      bool seen = false;
      for (const Value& o : out) seen = seen || Equal(key(o), key(item));
      if (!seen) out.push_back(item);
    }
    return Value::MakeList(std::move(out));
  }
  std::stable_sort(items.begin(), items.end(),
                   [&](const Value& x, const Value& y) { return Compare(key(x), key(y)) < 0; });
  if (name == "min") return items.empty() ? Value() : items.front();
  if (name == "max") return items.empty() ? Value() : items.back();
  if (Arg(args, kwargs, 0, "reverse", Value::Bool(false)).Truthy()) std::reverse(items.begin(), items.end());
  return Value::MakeList(std::move(items));
}

Value MapFilter(const Value& seq, const List& args, const Kwargs& kwargs) {
  List out;
  const Value attribute = Arg({}, kwargs, 0, "attribute", Value());
  for (const Value& item : Iterate(seq)) {
    if (!attribute.is_undefined()) {
      const Value v = AttrOf(item, StrOf(attribute, "map"));
      out.push_back(v.is_undefined() ? Arg({}, kwargs, 0, "default", Value()) : v);
    } else {
      if (args.empty()) throw TemplateError("map: give a filter name or attribute=");
      out.push_back(ApplyFilter(StrOf(args[0], "map"), item, List(args.begin() + 1, args.end()), {}));
    }
  }
  return Value::MakeList(std::move(out));
}

Value ToInt(const Value& v, const Value& fallback) {
  if (v.kind() == Value::Kind::kFloat) return Value::Int(static_cast<int64_t>(v.float_value()));
  if (v.is_number()) return Value::Int(v.int_value());
  if (v.is_string()) {
    try {
      size_t used = 0;
      const std::string s = PyStrip(v.str(), Value::None(), true, true);
      const int64_t i = std::stoll(s, &used);
      if (used == s.size()) return Value::Int(i);
      const double f = std::stod(s, &used);
      if (used == s.size()) return Value::Int(static_cast<int64_t>(f));
    } catch (const std::exception&) {
    }
  }
  return fallback;
}

Value FilterOnSequence(const std::string& name, const Value& v, const List& args, const Kwargs& kwargs) {
  if (name == "first" || name == "last") {
    const List items = Iterate(v);
    if (items.empty()) return Value();
    return name == "first" ? items.front() : items.back();
  }
  if (name == "join") {
    const Value attribute = Arg({}, kwargs, 0, "attribute", Value());
    const std::string sep = Arg(args, kwargs, 0, "d", Value::String("")).ToString();
    std::string out;
    bool first = true;
    for (const Value& item : Iterate(v)) {
      out += (first ? "" : sep) + (attribute.is_undefined() ? item : AttrOf(item, attribute.str())).ToString();
      first = false;
    }
    return Value::String(out);
  }
  if (name == "items") {
    List out;
    if (v.is_undefined()) return Value::MakeList({});
    for (const auto& [k, x] : v.dict()) out.push_back(Value::MakeList({Value::String(k), x}));
    return Value::MakeList(std::move(out));
  }
  if (name == "list") return Value::MakeList(Iterate(v));
  if (name == "reverse") {
    if (v.is_string()) return PySlice(v, Value::None(), Value::None(), Value::Int(-1));
    List items = Iterate(v);
    return Value::MakeList(List(items.rbegin(), items.rend()));
  }
  if (name == "selectattr" || name == "rejectattr") return Select(v, args, name == "rejectattr", true);
  if (name == "select" || name == "reject") return Select(v, args, name == "reject", false);
  if (name == "sort" || name == "unique" || name == "min" || name == "max" || name == "sum") {
    return Reduce(name, v, args, kwargs);
  }
  if (name == "map") return MapFilter(v, args, kwargs);
  throw TemplateError("unsupported filter '" + name + "'");
}

}  // namespace

bool IsSupportedFilter(const std::string& name) {
  static const std::set<std::string> kFilters = {
      "trim",   "length", "count",      "tojson", "upper",  "lower",  "default",    "d",          "first",
      "last",   "join",   "replace",    "items",  "string", "list",   "selectattr", "rejectattr", "select",
      "reject", "sort",   "unique",     "min",    "max",    "sum",    "map",        "reverse",    "int",
      "float",  "abs",    "capitalize", "title",  "safe",   "indent", "round"};
  return kFilters.count(name) > 0;
}

bool IsSupportedTest(const std::string& name) {
  static const std::set<std::string> kTests = {
      "defined",     "undefined", "none",    "string",   "mapping", "iterable", "sequence", "number",
      "integer",     "float",     "boolean", "true",     "false",   "odd",      "even",     "divisibleby",
      "eq",          "equalto",   "ne",      "lt",       "le",      "gt",       "ge",       "lessthan",
      "greaterthan", "in",        "sameas",  "callable", "lower",   "upper"};
  return kTests.count(name) > 0;
}

Value ApplyFilter(const std::string& name, const Value& v, const List& args, const Kwargs& kwargs) {
  if (name == "trim")
    return Value::String(PyStrip(v.ToString(), Arg(args, kwargs, 0, "chars", Value::None()), true, true));
  if (name == "length" || name == "count") {
    if (v.is_string()) return Value::Int(CodePointCount(v.str()));
    return Value::Int(static_cast<int64_t>(Iterate(v).size()));
  }
  if (name == "tojson") {
    const Value indent = Arg(args, kwargs, 0, "indent", Value::None());
    return Value::String(v.ToJson(indent.is_none() ? -1 : static_cast<int>(indent.int_value())));
  }
  if (name == "upper" || name == "lower") return Value::String(CaseMap(v.ToString(), name == "upper" ? 1 : 0));
  if (name == "capitalize" || name == "title") return Value::String(CaseMap(v.ToString(), name == "title" ? 3 : 2));
  if (name == "default" || name == "d") {
    const bool boolean = Arg(args, kwargs, 1, "boolean", Value::Bool(false)).Truthy();
    return v.is_undefined() || (boolean && !v.Truthy()) ? Arg(args, kwargs, 0, "default_value", Value::String("")) : v;
  }
  if (name == "replace") {
    const Value count = Arg(args, kwargs, 2, "count", Value::None());
    return Value::String(PyReplace(v.ToString(), Arg(args, kwargs, 0, "old", Value()).ToString(),
                                   Arg(args, kwargs, 1, "new", Value()).ToString(),
                                   count.is_none() ? -1 : count.int_value()));
  }
  if (name == "string" || name == "safe") return Value::String(v.ToString());
  if (name == "int") return ToInt(v, Arg(args, kwargs, 0, "default", Value::Int(0)));
  if (name == "float") return v.is_number() ? Value::Float(v.float_value()) : Value::Float(0);
  if (name == "abs")
    return v.kind() == Value::Kind::kFloat ? Value::Float(std::fabs(v.float_value()))
                                           : Value::Int(std::llabs(v.int_value()));
  if (name == "round") {
    const double p = std::pow(10.0, static_cast<double>(Arg(args, kwargs, 0, "precision", Value::Int(0)).int_value()));
    return Value::Float(std::round(v.float_value() * p) / p);
  }
  if (name == "indent") {
    return Indent(v.ToString(), Arg(args, kwargs, 0, "width", Value::Int(4)),
                  Arg(args, kwargs, 1, "first", Value::Bool(false)).Truthy(),
                  Arg(args, kwargs, 2, "blank", Value::Bool(false)).Truthy());
  }
  return FilterOnSequence(name, v, args, kwargs);
}

bool ApplyTest(const std::string& name, const Value& v, const List& args) {
  using K = Value::Kind;
  const auto arg = [&]() -> const Value& {
    if (args.empty()) throw TemplateError("test '" + name + "' needs an argument");
    return args[0];
  };
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "string") return v.is_string();
  if (name == "mapping") return v.kind() == K::kDict;
  if (name == "iterable") return v.is_string() || v.is_list() || v.kind() == K::kDict || v.is_undefined();
  if (name == "sequence") return v.is_string() || v.is_list() || v.kind() == K::kDict || v.is_undefined();
  if (name == "number") return v.is_number();
  if (name == "integer") return v.kind() == K::kInt;
  if (name == "float") return v.kind() == K::kFloat;
  if (name == "boolean") return v.kind() == K::kBool;
  if (name == "true" || name == "false") return v.kind() == K::kBool && v.bool_value() == (name == "true");
  if (name == "odd" || name == "even") return (v.int_value() % 2 != 0) == (name == "odd");
  if (name == "divisibleby") return arg().int_value() != 0 && v.int_value() % arg().int_value() == 0;
  if (name == "eq" || name == "equalto" || name == "sameas") return Equal(v, arg());
  if (name == "ne") return !Equal(v, arg());
  if (name == "lt" || name == "lessthan") return Compare(v, arg()) < 0;
  if (name == "le") return Compare(v, arg()) <= 0;
  if (name == "gt" || name == "greaterthan") return Compare(v, arg()) > 0;
  if (name == "ge") return Compare(v, arg()) >= 0;
  if (name == "in") return PyContains(arg(), v);
  if (name == "callable") return v.kind() == K::kFunction;
  if (name == "lower" || name == "upper") return v.is_string() && CaseMap(v.str(), name == "upper") == v.str();
  throw TemplateError("unsupported test '" + name + "'");
}

}  // namespace ps::chat
