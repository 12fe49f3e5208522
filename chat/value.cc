#include "chat/value.h"

#include <charconv>
#include <cmath>
#include <cstdio>

namespace ps::chat {
namespace {

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

// Python's repr() of a str: single quotes unless it holds ' and no ".
std::string PyStringRepr(const std::string& s) {
  const char quote = s.find('\'') != std::string::npos && s.find('"') == std::string::npos ? '"' : '\'';
  std::string out(1, quote);
  for (unsigned char c : s) {
    if (c == quote || c == '\\') out += '\\', out += static_cast<char>(c);
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + quote;
}

void AppendJson(const Value& v, int indent, int depth, std::string& out) {
  const auto newline = [&](int d) {
    if (indent < 0) return;
    out += '\n';
    out.append(static_cast<size_t>(indent * d), ' ');
  };
  const char* item_sep = indent < 0 ? ", " : ",";
  switch (v.kind()) {
    case Value::Kind::kList: {
      if (v.list().empty()) { out += "[]"; return; }
      out += '[';
      for (size_t i = 0; i < v.list().size(); ++i) {
        if (i > 0) out += item_sep;
        newline(depth + 1);
        AppendJson(v.list()[i], indent, depth + 1, out);
      }
      newline(depth);
      out += ']';
      return;
    }
    case Value::Kind::kDict:
    case Value::Kind::kNamespace: {
      if (v.dict().empty()) { out += "{}"; return; }
      out += '{';
      for (size_t i = 0; i < v.dict().size(); ++i) {
        if (i > 0) out += item_sep;
        newline(depth + 1);
        out += JsonString(v.dict()[i].first) + ": ";
        AppendJson(v.dict()[i].second, indent, depth + 1, out);
      }
      newline(depth);
      out += '}';
      return;
    }
    case Value::Kind::kString: out += JsonString(v.str()); return;
    case Value::Kind::kNone: out += "null"; return;
    case Value::Kind::kBool: out += v.bool_value() ? "true" : "false"; return;
    case Value::Kind::kInt: out += std::to_string(v.int_value()); return;
    case Value::Kind::kFloat: {
      const double f = v.float_value();
      out += std::isnan(f) ? "NaN" : std::isinf(f) ? (f > 0 ? "Infinity" : "-Infinity") : FloatRepr(f);
      return;
    }
    case Value::Kind::kUndefined:
    case Value::Kind::kFunction:
      throw TemplateError(std::string("tojson: a value of type ") + v.TypeName() + " is not JSON serializable");
  }
}

}  // namespace

Value Value::None() { Value v; v.kind_ = Kind::kNone; return v; }
Value Value::Bool(bool b) { Value v; v.kind_ = Kind::kBool; v.b_ = b; v.i_ = b; return v; }
Value Value::Int(int64_t i) { Value v; v.kind_ = Kind::kInt; v.i_ = i; return v; }
Value Value::Float(double f) { Value v; v.kind_ = Kind::kFloat; v.f_ = f; return v; }
Value Value::String(std::string s) {
  Value v;
  v.kind_ = Kind::kString;
  v.s_ = std::make_shared<const std::string>(std::move(s));
  return v;
}
Value Value::MakeList(List items) {
  Value v;
  v.kind_ = Kind::kList;
  v.list_ = std::make_shared<const List>(std::move(items));
  return v;
}
Value Value::MakeDict(Dict items) {
  Value v;
  v.kind_ = Kind::kDict;
  v.dict_ = std::make_shared<Dict>(std::move(items));
  return v;
}
Value Value::Namespace(Dict items) {
  Value v = MakeDict(std::move(items));
  v.kind_ = Kind::kNamespace;
  return v;
}
Value Value::Function(std::string name) {
  Value v = String(std::move(name));
  v.kind_ = Kind::kFunction;
  return v;
}

Value Value::FromJson(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return None();
    case nlohmann::ordered_json::value_t::boolean: return Bool(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
    case nlohmann::ordered_json::value_t::number_unsigned: return Int(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_float: return Float(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return String(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      List items;
      for (const auto& e : j) items.push_back(FromJson(e));
      return MakeList(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      Dict items;
      for (const auto& [k, e] : j.items()) items.emplace_back(k, FromJson(e));
      return MakeDict(std::move(items));
    }
    default: throw TemplateError("unsupported JSON value (binary or discarded)");
  }
}

int64_t Value::int_value() const {
  if (kind_ != Kind::kInt && kind_ != Kind::kBool) throw TemplateError(std::string("expected an int, got ") + TypeName());
  return i_;
}
double Value::float_value() const {
  if (kind_ == Kind::kFloat) return f_;
  return static_cast<double>(int_value());
}
const std::string& Value::str() const {
  if (kind_ != Kind::kString && kind_ != Kind::kFunction) throw TemplateError(std::string("expected a str, got ") + TypeName());
  return *s_;
}
const List& Value::list() const {
  if (kind_ != Kind::kList) throw TemplateError(std::string("expected a list, got ") + TypeName());
  return *list_;
}
const Dict& Value::dict() const {
  if (!is_mapping()) throw TemplateError(std::string("expected a dict, got ") + TypeName());
  return *dict_;
}

Value Value::Get(const std::string& key) const {
  for (const auto& [k, v] : dict()) {
    if (k == key) return v;
  }
  return Value();
}

void Value::SetAttr(const std::string& key, Value v) const {
  if (kind_ != Kind::kNamespace) throw TemplateError(std::string("cannot assign an attribute of a ") + TypeName() + " (only of a namespace)");
  for (auto& [k, old] : *dict_) {
    if (k == key) { old = std::move(v); return; }
  }
  dict_->emplace_back(key, std::move(v));
}

bool Value::Truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone: return false;
    case Kind::kBool:
    case Kind::kInt: return i_ != 0;
    case Kind::kFloat: return f_ != 0;
    case Kind::kString: return !s_->empty();
    case Kind::kList: return !list_->empty();
    case Kind::kDict: return !dict_->empty();
    case Kind::kNamespace:
    case Kind::kFunction: return true;
  }
  return false;
}

std::string Value::ToString() const {
  switch (kind_) {
    case Kind::kUndefined: return "";
    case Kind::kString: return *s_;
    default: return Repr();
  }
}

std::string Value::Repr() const {
  switch (kind_) {
    case Kind::kUndefined: return "";
    case Kind::kNone: return "None";
    case Kind::kBool: return b_ ? "True" : "False";
    case Kind::kInt: return std::to_string(i_);
    case Kind::kFloat: return std::isnan(f_) ? "nan" : std::isinf(f_) ? (f_ > 0 ? "inf" : "-inf") : FloatRepr(f_);
    case Kind::kString: return PyStringRepr(*s_);
    case Kind::kList: {
      std::string out = "[";
      for (size_t i = 0; i < list_->size(); ++i) out += (i ? ", " : "") + (*list_)[i].Repr();
      return out + "]";
    }
    case Kind::kDict:
    case Kind::kNamespace: {
      std::string out = kind_ == Kind::kNamespace ? "<Namespace {" : "{";
      for (size_t i = 0; i < dict_->size(); ++i) {
        out += (i ? ", " : "") + PyStringRepr((*dict_)[i].first) + ": " + (*dict_)[i].second.Repr();
      }
      return out + (kind_ == Kind::kNamespace ? "}>" : "}");
    }
    case Kind::kFunction: return "<function " + *s_ + ">";
  }
  return "";
}

std::string Value::ToJson(int indent) const {
  std::string out;
  AppendJson(*this, indent, 0, out);
  return out;
}

const char* Value::TypeName() const {
  switch (kind_) {
    case Kind::kUndefined: return "undefined";
    case Kind::kNone: return "NoneType";
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kString: return "str";
    case Kind::kList: return "list";
    case Kind::kDict: return "dict";
    case Kind::kNamespace: return "namespace";
    case Kind::kFunction: return "function";
  }
  return "?";
}

bool Equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.kind() == Value::Kind::kFloat || b.kind() == Value::Kind::kFloat) return a.float_value() == b.float_value();
    return a.int_value() == b.int_value();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kString:
    case Value::Kind::kFunction: return a.str() == b.str();
    case Value::Kind::kList: {
      if (a.list().size() != b.list().size()) return false;
      for (size_t i = 0; i < a.list().size(); ++i) {
        if (!Equal(a.list()[i], b.list()[i])) return false;
      }
      return true;
    }
    case Value::Kind::kDict:
    case Value::Kind::kNamespace: {
      if (a.dict().size() != b.dict().size()) return false;
      for (const auto& [k, v] : a.dict()) {
        const Value other = b.Get(k);
        if (other.is_undefined() || !Equal(v, other)) return false;
      }
      return true;
    }
    default: return true;  // undefined == undefined, none == none
  }
}

int Compare(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    const double x = a.float_value(), y = b.float_value();
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) return a.str() < b.str() ? -1 : a.str() > b.str() ? 1 : 0;
  throw TemplateError(std::string("'<' not supported between instances of '") + a.TypeName() + "' and '" +
                      b.TypeName() + "'");
}

std::string FloatRepr(double f) {
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof(buf), f, std::chars_format::scientific);
  const std::string sci(buf, res.ptr);  // "-1.2345e+02": shortest round-trip digits
  const size_t e = sci.find('e');
  const bool negative = sci[0] == '-';
  std::string digits;
  for (size_t i = negative; i < e; ++i) {
    if (sci[i] != '.') digits += sci[i];
  }
  const int exp = std::stoi(sci.substr(e + 1));
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  std::string out = negative ? "-" : "";
  if (exp >= -4 && exp < 16) {
    if (exp >= 0) {
      if (digits.size() < static_cast<size_t>(exp + 1)) digits.append(exp + 1 - digits.size(), '0');
      const std::string frac = digits.substr(exp + 1);
      return out + digits.substr(0, exp + 1) + "." + (frac.empty() ? "0" : frac);
    }
    return out + "0." + std::string(-exp - 1, '0') + digits;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  char exp_buf[16];
  std::snprintf(exp_buf, sizeof(exp_buf), "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
  return out + exp_buf;
}

std::vector<std::string> CodePoints(const std::string& s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = s[i];
    const size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 1;
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}

int64_t CodePointCount(const std::string& s) {
  int64_t n = 0;
  for (unsigned char c : s) n += (c & 0xc0) != 0x80;
  return n;
}

bool IsPySpace(const std::string& cp) {
  static const char* const kSpaces[] = {" ", "\t", "\n", "\v", "\f", "\r", "\x1c", "\x1d", "\x1e", "\x1f",
                                        "\u0085", "\u00a0", "\u1680", "\u2000", "\u2001", "\u2002", "\u2003",
                                        "\u2004", "\u2005", "\u2006", "\u2007", "\u2008", "\u2009", "\u200a",
                                        "\u2028", "\u2029", "\u202f", "\u205f", "\u3000"};
  for (const char* s : kSpaces) {
    if (cp == s) return true;
  }
  return false;
}

}  // namespace ps::chat
