// Value: what a chat template computes with, with Python's semantics as Jinja2 (and so
// transformers' apply_chat_template) has them: undefined, none, bool, int, float, str,
// list, dict (insertion-ordered, string keys), namespace (a mutable dict shared by all
// copies: `{% set ns.x = ... %}` is seen through every copy) and builtin functions.
// Lists, dicts and strings are immutable and shared between copies, so a copy is cheap.
// Strings are UTF-8; lengths and slices count code points, as Python's str does.
//
// Errors (a type that does not support an operation) throw TemplateError; the evaluator
// adds the template line.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace ps::chat {

// A template that cannot be parsed or rendered; the message names the template line.
class TemplateError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Value;
using List = std::vector<Value>;
using Dict = std::vector<std::pair<std::string, Value>>;  // insertion order, unique keys

class Value {
 public:
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kNamespace, kFunction };

  Value() = default;  // undefined
  static Value None();
  static Value Bool(bool b);
  static Value Int(int64_t i);
  static Value Float(double f);
  static Value String(std::string s);
  static Value MakeList(List items);
  static Value MakeDict(Dict items);
  static Value Namespace(Dict items);       // mutable, shared
  static Value Function(std::string name);  // a builtin global (raise_exception, ...)
  // JSON -> Value: null -> none, numbers -> int or float, objects keep their key order.
  // Throws TemplateError for JSON nested deeper than kMaxJsonDepth (a recursion that
  // deep would overflow the stack of the thread converting it).
  static constexpr int kMaxJsonDepth = 256;
  static Value FromJson(const nlohmann::ordered_json& j, int depth = 0);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_number() const { return kind_ == Kind::kInt || kind_ == Kind::kFloat || kind_ == Kind::kBool; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_mapping() const { return kind_ == Kind::kDict || kind_ == Kind::kNamespace; }

  bool bool_value() const { return b_; }
  int64_t int_value() const;       // bool and int
  double float_value() const;      // bool, int and float
  const std::string& str() const;  // kString only
  const List& list() const;        // kList only
  const Dict& dict() const;        // kDict and kNamespace
  const std::string& function_name() const { return str(); }

  // The value of `key` (a dict or namespace), or undefined when absent.
  Value Get(const std::string& key) const;
  // A namespace's attribute `key` := v (TemplateError for other kinds).
  void SetAttr(const std::string& key, Value v) const;

  bool Truthy() const;
  // Python's str(): None -> "None", True -> "True", 1.0 -> "1.0", lists/dicts as repr;
  // undefined -> "".
  std::string ToString() const;
  std::string Repr() const;
  // json.dumps(v, ensure_ascii=False, indent=indent (<0: none), sort_keys=false), as
  // transformers' tojson filter.
  std::string ToJson(int indent) const;

  const char* TypeName() const;  // "str", "int", "dict", ... for error messages

 private:
  Kind kind_ = Kind::kUndefined;
  bool b_ = false;
  int64_t i_ = 0;
  double f_ = 0;
  std::shared_ptr<const std::string> s_;  // kString, kFunction
  std::shared_ptr<const List> list_;
  std::shared_ptr<Dict> dict_;  // kDict (never mutated once built), kNamespace
};

bool Equal(const Value& a, const Value& b);
// -1, 0, 1 as Python's <, ==, > for numbers and strings; TemplateError otherwise.
int Compare(const Value& a, const Value& b);

// Python's repr() of a float ("1.0", "0.1", "1e+16").
std::string FloatRepr(double f);

// UTF-8 helpers with Python's str semantics.
std::vector<std::string> CodePoints(const std::string& s);  // one string per code point
int64_t CodePointCount(const std::string& s);
bool IsPySpace(const std::string& code_point);  // str.isspace() of one code point

}  // namespace ps::chat
