// Text forms of Values (chat/value.h): Python's repr() and str(), json.dumps as
// transformers' tojson filter calls it, float repr, and UTF-8 code points.
#include <charconv>
#include <cmath>
#include <cstdio>

#include "chat/value.h"

namespace ps::chat {
namespace {

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
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
    if (c == quote || c == '\\')
      out += '\\', out += static_cast<char>(c);
    else if (c == '\n')
      out += "\\n";
    else if (c == '\r')
      out += "\\r";
    else if (c == '\t')
      out += "\\t";
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

void AppendJson(const Value& v, int indent, int depth, std::string& out);

// A list's or dict's items ("[...]", "{...}"), on lines of their own when indent >= 0.
void AppendJsonItems(const Value& v, int indent, int depth, std::string& out) {
  const bool is_list = v.is_list();
  const size_t n = is_list ? v.list().size() : v.dict().size();
  out += is_list ? '[' : '{';
  for (size_t i = 0; i < n && n > 0; ++i) {
    if (i > 0) out += indent < 0 ? ", " : ",";
    if (indent >= 0) out += '\n' + std::string(static_cast<size_t>(indent * (depth + 1)), ' ');
    if (!is_list) out += JsonString(v.dict()[i].first) + ": ";
    AppendJson(is_list ? v.list()[i] : v.dict()[i].second, indent, depth + 1, out);
  }
  if (indent >= 0 && n > 0) out += '\n' + std::string(static_cast<size_t>(indent * depth), ' ');
  out += is_list ? ']' : '}';
}

void AppendJson(const Value& v, int indent, int depth, std::string& out) {
  switch (v.kind()) {
    case Value::Kind::kList:
    case Value::Kind::kDict:
    case Value::Kind::kNamespace:
      AppendJsonItems(v, indent, depth, out);
      return;
    case Value::Kind::kString:
      out += JsonString(v.str());
      return;
    case Value::Kind::kNone:
      out += "null";
      return;
    case Value::Kind::kBool:
      out += v.bool_value() ? "true" : "false";
      return;
    case Value::Kind::kInt:
      out += std::to_string(v.int_value());
      return;
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

std::string Value::Repr() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "";
    case Kind::kNone:
      return "None";
    case Kind::kBool:
      return b_ ? "True" : "False";
    case Kind::kInt:
      return std::to_string(i_);
    case Kind::kFloat:
      return std::isnan(f_) ? "nan" : std::isinf(f_) ? (f_ > 0 ? "inf" : "-inf") : FloatRepr(f_);
    case Kind::kString:
      return PyStringRepr(*s_);
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
    case Kind::kFunction:
      return "<function " + *s_ + ">";
  }
  return "";
}

std::string Value::ToJson(int indent) const {
  std::string out;
  AppendJson(*this, indent, 0, out);
  return out;
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
  static const char* const kSpaces[] = {" ",      "\t",     "\n",     "\v",     "\f",     "\r",     "\x1c",   "\x1d",
                                        "\x1e",   "\x1f",   "\u0085", "\u00a0", "\u1680", "\u2000", "\u2001", "\u2002",
                                        "\u2003", "\u2004", "\u2005", "\u2006", "\u2007", "\u2008", "\u2009", "\u200a",
                                        "\u2028", "\u2029", "\u202f", "\u205f", "\u3000"};
  for (const char* s : kSpaces) {
    if (cp == s) return true;
  }
  return false;
}

}  // namespace ps::chat
