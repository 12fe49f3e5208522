// The builtin filters, tests, methods and global functions of chat templates, with the
// semantics of Jinja2 and Python's str/dict methods. Pure functions on Values; they throw
// TemplateError without a line (the evaluator adds it).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "chat/value.h"

namespace ps::chat {

using Kwargs = std::vector<std::pair<std::string, Value>>;

// `value | name(args, kwargs)`.
Value ApplyFilter(const std::string& name, const Value& value, const List& args, const Kwargs& kwargs);
// `value is name(args)` (name without the "not").
bool ApplyTest(const std::string& name, const Value& value, const List& args);
// `object.name(args)` for str and dict objects.
Value CallMethod(const Value& object, const std::string& name, const List& args, const Kwargs& kwargs);
// A global function: raise_exception, namespace, strftime_now, range, dict.
Value CallGlobal(const std::string& name, const List& args, const Kwargs& kwargs);
bool IsGlobalFunction(const std::string& name);

// Argument `i` of a call, or the keyword argument `name`, or `fallback`.
const Value& Arg(const List& args, const Kwargs& kwargs, size_t i, const char* name, const Value& fallback);

// Python semantics used by filters and the evaluator.
std::string PyStrip(const std::string& s, const Value& chars, bool left, bool right);
// `a op b` for + - * / // % **: ints stay ints (but /), Python's floor division and
// modulo signs, str + str, list + list, str * int.
Value PyArith(const std::string& op, const Value& a, const Value& b);
// str.split(sep, maxsplit): sep none splits on runs of whitespace.
Value PySplit(const std::string& s, const Value& sep, int64_t maxsplit);
Value PySlice(const Value& seq, const Value& start, const Value& stop, const Value& step);
Value PyIndex(const Value& seq, const Value& index);  // seq[index]; undefined when absent
bool PyContains(const Value& container, const Value& item);
// The items of a for loop or filter over `v`: a list's items, a dict's keys, a str's
// characters; undefined: none.
List Iterate(const Value& v);

}  // namespace ps::chat
