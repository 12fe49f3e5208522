// Python semantics of the builtins (chat/builtins.h): str and dict methods, global
// functions, arithmetic, indexing, slicing, `in` and iteration.
#include <algorithm>
#include <cmath>
#include <ctime>

#include "chat/builtins.h"

namespace ps::chat {
namespace {

bool PrefixOrSuffix(const std::string& s, const Value& options, bool suffix) {
  const List all = options.is_list() ? options.list() : List{options};
  for (const Value& o : all) {
    if (!o.is_string())
      throw TemplateError(std::string(suffix ? "endswith" : "startswith") + " expects a str or a tuple of str");
    const std::string& x = o.str();
    if (x.size() <= s.size() && s.compare(suffix ? s.size() - x.size() : 0, x.size(), x) == 0) return true;
  }
  return false;
}

// Python's index normalisation of a slice bound (None: the default for the step sign).
int64_t SliceBound(const Value& v, int64_t n, bool is_start, int64_t step) {
  if (v.is_none() || v.is_undefined()) return step > 0 ? (is_start ? 0 : n) : (is_start ? n - 1 : -1);
  int64_t i = v.int_value();
  if (i < 0) i += n;
  if (step > 0) return std::clamp<int64_t>(i, 0, n);
  return std::clamp<int64_t>(i, -1, n - 1);
}

Value StringMethod(const std::string& s, const std::string& name, const List& args, const Kwargs& kwargs) {
  const Value none = Value::None();
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    return Value::String(PyStrip(s, Arg(args, kwargs, 0, "chars", none), name != "rstrip", name != "lstrip"));
  }
  if (name == "startswith" || name == "endswith") {
    return Value::Bool(PrefixOrSuffix(s, Arg(args, kwargs, 0, "prefix", Value::String("")), name == "endswith"));
  }
  if (name == "split") {
    const Value maxsplit = Arg(args, kwargs, 1, "maxsplit", Value::Int(-1));
    return PySplit(s, Arg(args, kwargs, 0, "sep", none), maxsplit.int_value());
  }
  if (name == "replace") {
    const Value count = Arg(args, kwargs, 2, "count", Value::Int(-1));
    return ApplyFilter("replace", Value::String(s),
                       {Arg(args, kwargs, 0, "old", Value()), Arg(args, kwargs, 1, "new", Value()),
                        count.int_value() < 0 ? none : count},
                       {});
  }
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize") {
    return ApplyFilter(name, Value::String(s), {}, {});
  }
  if (name == "find") {
    const size_t at = s.find(Arg(args, kwargs, 0, "sub", Value::String("")).ToString());
    return Value::Int(at == std::string::npos ? -1 : CodePointCount(s.substr(0, at)));
  }
  if (name == "join") {
    std::string out;
    bool first = true;
    for (const Value& item : Iterate(Arg(args, kwargs, 0, "iterable", Value()))) {
      out += (first ? "" : s) + item.ToString();
      first = false;
    }
    return Value::String(out);
  }
  throw TemplateError("unsupported method '" + name + "' of a str");
}

Value DictMethod(const Value& d, const std::string& name, const List& args, const Kwargs& kwargs) {
  if (name == "get") {
    const Value key = Arg(args, kwargs, 0, "key", Value());
    const Value v = key.is_string() ? d.Get(key.str()) : Value();
    return v.is_undefined() ? Arg(args, kwargs, 1, "default", Value::None()) : v;
  }
  if (name == "items") return ApplyFilter("items", d, {}, {});
  List out;
  for (const auto& [k, v] : d.dict()) {
    if (name == "keys")
      out.push_back(Value::String(k));
    else if (name == "values")
      out.push_back(v);
    else
      throw TemplateError("unsupported method '" + name + "' of a dict");
  }
  return Value::MakeList(std::move(out));
}

}  // namespace

std::string PyStrip(const std::string& s, const Value& chars, bool left, bool right) {
  const std::vector<std::string> cps = CodePoints(s);
  const std::vector<std::string> set = chars.is_string() ? CodePoints(chars.str()) : std::vector<std::string>{};
  const auto strip = [&](const std::string& cp) {
    if (!chars.is_string()) return IsPySpace(cp);
    for (const std::string& c : set) {
      if (c == cp) return true;
    }
    return false;
  };
  size_t begin = 0, end = cps.size();
  while (left && begin < end && strip(cps[begin])) ++begin;
  while (right && end > begin && strip(cps[end - 1])) --end;
  std::string out;
  for (size_t i = begin; i < end; ++i) out += cps[i];
  return out;
}

Value PySlice(const Value& seq, const Value& start, const Value& stop, const Value& step_v) {
  const int64_t step = step_v.is_none() || step_v.is_undefined() ? 1 : step_v.int_value();
  if (step == 0) throw TemplateError("slice step cannot be zero");
  const bool is_str = seq.is_string();
  if (!is_str && !seq.is_list()) throw TemplateError(std::string("cannot slice a ") + seq.TypeName());
  const std::vector<std::string> cps = is_str ? CodePoints(seq.str()) : std::vector<std::string>{};
  const int64_t n = is_str ? static_cast<int64_t>(cps.size()) : static_cast<int64_t>(seq.list().size());
  const int64_t b = SliceBound(start, n, true, step), e = SliceBound(stop, n, false, step);
  std::string s;
  List items;
  for (int64_t i = b; step > 0 ? i < e : i > e; i += step) {
    if (is_str)
      s += cps[static_cast<size_t>(i)];
    else
      items.push_back(seq.list()[static_cast<size_t>(i)]);
  }
  return is_str ? Value::String(s) : Value::MakeList(std::move(items));
}

Value PyIndex(const Value& seq, const Value& index) {
  if (seq.is_mapping()) return index.is_string() ? seq.Get(index.str()) : Value();
  if ((seq.is_list() || seq.is_string()) && index.kind() == Value::Kind::kInt) {
    const std::vector<std::string> cps = seq.is_string() ? CodePoints(seq.str()) : std::vector<std::string>{};
    const int64_t n = seq.is_string() ? static_cast<int64_t>(cps.size()) : static_cast<int64_t>(seq.list().size());
    int64_t i = index.int_value();
    if (i < 0) i += n;
    if (i < 0 || i >= n) return Value();
    return seq.is_string() ? Value::String(cps[static_cast<size_t>(i)]) : seq.list()[static_cast<size_t>(i)];
  }
  return Value();
}

bool PyContains(const Value& container, const Value& item) {
  if (container.is_string()) {
    if (!item.is_string())
      throw TemplateError(std::string("'in <string>' requires a str as left operand, not ") + item.TypeName());
    return container.str().find(item.str()) != std::string::npos;
  }
  if (container.is_mapping()) return item.is_string() && !container.Get(item.str()).is_undefined();
  for (const Value& v : Iterate(container)) {
    if (Equal(v, item)) return true;
  }
  return false;
}

List Iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return {};
    case Value::Kind::kList:
      return v.list();
    case Value::Kind::kDict: {
      List keys;
      for (const auto& [k, x] : v.dict()) keys.push_back(Value::String(k));
      return keys;
    }
    case Value::Kind::kString: {
      List chars;
      for (std::string& cp : CodePoints(v.str())) chars.push_back(Value::String(std::move(cp)));
      return chars;
    }
    default:
      throw TemplateError(std::string("'") + v.TypeName() + "' object is not iterable");
  }
}

Value CallMethod(const Value& object, const std::string& name, const List& args, const Kwargs& kwargs) {
  if (object.is_string()) return StringMethod(object.str(), name, args, kwargs);
  if (object.kind() == Value::Kind::kDict) return DictMethod(object, name, args, kwargs);
  throw TemplateError("unsupported method '" + name + "' of a " + object.TypeName());
}

Value PyArith(const std::string& op, const Value& a, const Value& b) {
  if (op == "+" && a.is_string() && b.is_string()) return Value::String(a.str() + b.str());
  if (op == "+" && a.is_list() && b.is_list()) {
    List items = a.list();
    items.insert(items.end(), b.list().begin(), b.list().end());
    return Value::MakeList(std::move(items));
  }
  if (op == "*" && a.is_string() && b.kind() == Value::Kind::kInt) {
    std::string out;
    for (int64_t i = 0; i < b.int_value(); ++i) out += a.str();
    return Value::String(out);
  }
  if (!a.is_number() || !b.is_number()) {
    throw TemplateError("unsupported operand types for " + op + ": '" + a.TypeName() + "' and '" + b.TypeName() + "'" +
                        (op == "%" && a.is_string() ? " (% string formatting is not supported)" : ""));
  }
  const bool ints = a.kind() != Value::Kind::kFloat && b.kind() != Value::Kind::kFloat;
  if ((op == "/" || op == "//" || op == "%") && b.float_value() == 0) throw TemplateError("division by zero");
  if (ints && op != "/" && !(op == "**" && b.int_value() < 0)) {
    const int64_t x = a.int_value(), y = b.int_value();
    if (op == "+") return Value::Int(x + y);
    if (op == "-") return Value::Int(x - y);
    if (op == "*") return Value::Int(x * y);
    if (op == "//") return Value::Int(x / y - ((x % y != 0) && ((x < 0) != (y < 0))));
    if (op == "%") return Value::Int(((x % y) + y) % y);
    return Value::Int(static_cast<int64_t>(std::llround(std::pow(x, y))));
  }
  const double x = a.float_value(), y = b.float_value();
  if (op == "+") return Value::Float(x + y);
  if (op == "-") return Value::Float(x - y);
  if (op == "*") return Value::Float(x * y);
  if (op == "/") return Value::Float(x / y);
  if (op == "//") return Value::Float(std::floor(x / y));
  if (op == "%") return Value::Float(x - y * std::floor(x / y));
  return Value::Float(std::pow(x, y));
}

bool IsGlobalFunction(const std::string& name) {
  return name == "raise_exception" || name == "namespace" || name == "strftime_now" || name == "range" ||
         name == "dict";
}

Value CallGlobal(const std::string& name, const List& args, const Kwargs& kwargs) {
  if (name == "namespace" || name == "dict") {
    Dict items;
    if (!args.empty()) items = args[0].dict();
    for (const auto& [k, v] : kwargs) items.emplace_back(k, v);
    return name == "namespace" ? Value::Namespace(std::move(items)) : Value::MakeDict(std::move(items));
  }
  if (name == "strftime_now") {  // datetime.now().strftime(format): local time
    const std::time_t now = std::time(nullptr);
    std::tm local{};
    localtime_r(&now, &local);
    char buf[256];
    const size_t n =
        std::strftime(buf, sizeof(buf), Arg(args, kwargs, 0, "format", Value::String("")).ToString().c_str(), &local);
    return Value::String(std::string(buf, n));
  }
  if (name == "range") {
    int64_t start = 0, stop = 0, step = 1;
    if (args.size() == 1) stop = args[0].int_value();
    if (args.size() >= 2) start = args[0].int_value(), stop = args[1].int_value();
    if (args.size() >= 3) step = args[2].int_value();
    if (step == 0) throw TemplateError("range() step must not be zero");
    List out;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) out.push_back(Value::Int(i));
    return Value::MakeList(std::move(out));
  }
  throw TemplateError("unsupported function '" + name + "'");
}

}  // namespace ps::chat
