#include "chat/value.h"

namespace ps::chat {

Value Value::None() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}
Value Value::Bool(bool b) {
  Value v;
  v.kind_ = Kind::kBool;
  v.b_ = b;
  v.i_ = b;
  return v;
}
Value Value::Int(int64_t i) {
  Value v;
  v.kind_ = Kind::kInt;
  v.i_ = i;
  return v;
}
Value Value::Float(double f) {
  Value v;
  v.kind_ = Kind::kFloat;
  v.f_ = f;
  return v;
}
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

Value Value::FromJson(const nlohmann::ordered_json& j, int depth) {
  if (depth > kMaxJsonDepth) throw TemplateError("JSON nested deeper than " + std::to_string(kMaxJsonDepth) + " levels");
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null:
      return None();
    case nlohmann::ordered_json::value_t::boolean:
      return Bool(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
    case nlohmann::ordered_json::value_t::number_unsigned:
      return Int(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_float:
      return Float(j.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return String(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      List items;
      for (const auto& e : j) items.push_back(FromJson(e, depth + 1));
      return MakeList(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      Dict items;
      for (const auto& [k, e] : j.items()) items.emplace_back(k, FromJson(e, depth + 1));
      return MakeDict(std::move(items));
    }
    default:
      throw TemplateError("unsupported JSON value (binary or discarded)");
  }
}

int64_t Value::int_value() const {
  if (kind_ != Kind::kInt && kind_ != Kind::kBool)
    throw TemplateError(std::string("expected an int, got ") + TypeName());
  return i_;
}
double Value::float_value() const {
  if (kind_ == Kind::kFloat) return f_;
  return static_cast<double>(int_value());
}
const std::string& Value::str() const {
  if (kind_ != Kind::kString && kind_ != Kind::kFunction)
    throw TemplateError(std::string("expected a str, got ") + TypeName());
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
  if (kind_ != Kind::kNamespace)
    throw TemplateError(std::string("cannot assign an attribute of a ") + TypeName() + " (only of a namespace)");
  for (auto& [k, old] : *dict_) {
    if (k == key) {
      old = std::move(v);
      return;
    }
  }
  dict_->emplace_back(key, std::move(v));
}

bool Value::Truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
    case Kind::kInt:
      return i_ != 0;
    case Kind::kFloat:
      return f_ != 0;
    case Kind::kString:
      return !s_->empty();
    case Kind::kList:
      return !list_->empty();
    case Kind::kDict:
      return !dict_->empty();
    case Kind::kNamespace:
    case Kind::kFunction:
      return true;
  }
  return false;
}

std::string Value::ToString() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "";
    case Kind::kString:
      return *s_;
    default:
      return Repr();
  }
}

const char* Value::TypeName() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "undefined";
    case Kind::kNone:
      return "NoneType";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "str";
    case Kind::kList:
      return "list";
    case Kind::kDict:
      return "dict";
    case Kind::kNamespace:
      return "namespace";
    case Kind::kFunction:
      return "function";
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
    case Value::Kind::kFunction:
      return a.str() == b.str();
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
    default:
      return true;  // undefined == undefined, none == none
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

}  // namespace ps::chat
