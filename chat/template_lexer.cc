#include "chat/template_lexer.h"

#include <cctype>
#include <cstring>

#include "chat/value.h"

namespace ps::chat {
namespace {

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

std::string NormalizeNewlines(const std::string& source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += source[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();  // keep_trailing_newline=False
  return out;
}

void AppendUtf8(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xc0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xe0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else {
    out += static_cast<char>(0xf0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  }
}

class Lexer {
 public:
  Lexer(const std::string& source, const LexOptions& options) : src_(NormalizeNewlines(source)), opt_(options) {}

  std::vector<Token> Run() {
    while (pos_ < src_.size()) {
      size_t k = pos_;
      while ((k = src_.find('{', k)) != std::string::npos && (k + 1 >= src_.size() || !std::strchr("{%#", src_[k + 1])))
        ++k;
      if (k == std::string::npos) {
        Emit(TokenKind::kText, src_.substr(pos_), line_);
        break;
      }
      Tag(k);
    }
    out_.push_back({TokenKind::kEnd, "", line_});
    return std::move(out_);
  }

 private:
  [[noreturn]] void Fail(const std::string& what, int line) {
    throw TemplateError("chat template line " + std::to_string(line) + ": " + what);
  }
  void Emit(TokenKind kind, std::string text, int line) {
    if (kind == TokenKind::kText && text.empty()) return;
    out_.push_back({kind, std::move(text), line});
  }
  void Advance(size_t to) {
    for (size_t i = pos_; i < to; ++i) line_ += src_[i] == '\n';
    pos_ = to;
  }

  // The text before the tag at `k`, with the tag's whitespace rules applied; then the tag.
  void Tag(size_t k) {
    const char type = src_[k + 1];
    const char sign = k + 2 < src_.size() && (src_[k + 2] == '-' || src_[k + 2] == '+') ? src_[k + 2] : 0;
    std::string text = src_.substr(pos_, k - pos_);
    if (sign == '-') {
      while (!text.empty() && IsSpace(text.back())) text.pop_back();
    } else if (sign != '+' && opt_.lstrip_blocks && type != '{') {
      const size_t l_pos = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
      bool blank = l_pos < text.size();
      for (size_t i = l_pos; i < text.size(); ++i) blank = blank && IsSpace(text[i]);
      if ((l_pos > 0 || line_starting_) && blank) text.resize(l_pos);
    }
    Emit(TokenKind::kText, std::move(text), line_);
    Advance(k);
    const int tag_line = line_;
    pos_ = k + 2 + (sign ? 1 : 0);
    if (type == '#') return Comment(tag_line);
    Emit(type == '{' ? TokenKind::kVarBegin : TokenKind::kBlockBegin, "", tag_line);
    Inside(type == '{' ? '}' : '%', tag_line);
  }

  // After a tag's end at pos_ (its '-' or '+' sign known): the whitespace it eats.
  void AfterTagEnd(char end_sign, bool is_block) {
    size_t p = pos_;
    if (end_sign == '-') {
      while (p < src_.size() && IsSpace(src_[p])) ++p;
    } else if (end_sign != '+' && is_block && opt_.trim_blocks && p < src_.size() && src_[p] == '\n') {
      ++p;
    }
    Advance(p);
    line_starting_ = pos_ > 0 && src_[pos_ - 1] == '\n';
  }

  void Comment(int tag_line) {
    const size_t end = src_.find("#}", pos_);
    if (end == std::string::npos) Fail("unclosed comment {# ... (no #})", tag_line);
    const char end_sign = end > pos_ && (src_[end - 1] == '-' || src_[end - 1] == '+') ? src_[end - 1] : 0;
    Advance(end + 2);
    AfterTagEnd(end_sign, /*is_block=*/true);
  }

  // Expression tokens up to the closing "}}" or "%}" (`close` is its first char).
  void Inside(char close, int tag_line) {
    int depth = 0;  // open ( [ {: a "}}" inside a dict literal does not end the tag
    while (true) {
      size_t p = pos_;
      while (p < src_.size() && IsSpace(src_[p])) ++p;
      Advance(p);
      if (pos_ >= src_.size()) Fail(std::string("unclosed tag (no ") + close + "})", tag_line);
      const char c = src_[pos_];
      const bool signed_end = (c == '-' || c == '+') && src_.compare(pos_ + 1, 2, std::string(1, close) + "}") == 0;
      if (depth == 0 && (signed_end || src_.compare(pos_, 2, std::string(1, close) + "}") == 0)) {
        Emit(close == '}' ? TokenKind::kVarEnd : TokenKind::kBlockEnd, "", line_);
        Advance(pos_ + (signed_end ? 3 : 2));
        AfterTagEnd(signed_end ? c : 0, close == '%');
        return;
      }
      ExpressionToken();
      const Token& last = out_.back();
      if (last.kind == TokenKind::kOp && last.text.size() == 1 && std::strchr("([{", last.text[0])) ++depth;
      if (last.kind == TokenKind::kOp && last.text.size() == 1 && std::strchr(")]}", last.text[0]) && depth > 0)
        --depth;
    }
  }

  void ExpressionToken();
  void StringToken();

  std::string src_;
  LexOptions opt_;
  size_t pos_ = 0;
  int line_ = 1;
  bool line_starting_ = true;
  std::vector<Token> out_;
};

void Lexer::ExpressionToken() {
  const char c = src_[pos_];
  size_t p = pos_;
  if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
    while (p < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[p])) || src_[p] == '_')) ++p;
    Emit(TokenKind::kName, src_.substr(pos_, p - pos_), line_);
    return Advance(p);
  }
  if (std::isdigit(static_cast<unsigned char>(c))) {
    bool is_float = false;
    while (p < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[p])) || src_[p] == '_')) ++p;
    if (p + 1 < src_.size() && src_[p] == '.' && std::isdigit(static_cast<unsigned char>(src_[p + 1]))) {
      is_float = true;
      for (++p; p < src_.size() && std::isdigit(static_cast<unsigned char>(src_[p])); ++p) {
      }
    }
    if (p < src_.size() && (src_[p] == 'e' || src_[p] == 'E')) {
      size_t q = p + 1;
      if (q < src_.size() && (src_[q] == '+' || src_[q] == '-')) ++q;
      if (q < src_.size() && std::isdigit(static_cast<unsigned char>(src_[q]))) {
        is_float = true;
        for (p = q; p < src_.size() && std::isdigit(static_cast<unsigned char>(src_[p])); ++p) {
        }
      }
    }
    std::string number;
    for (size_t i = pos_; i < p; ++i)
      if (src_[i] != '_') number += src_[i];
    Emit(is_float ? TokenKind::kFloat : TokenKind::kInt, number, line_);
    return Advance(p);
  }
  if (c == '\'' || c == '"') return StringToken();
  for (const char* op : {"//", "**", "==", "!=", "<=", ">="}) {
    if (src_.compare(pos_, 2, op) == 0) {
      Emit(TokenKind::kOp, op, line_);
      return Advance(pos_ + 2);
    }
  }
  if (std::strchr("+-*/%~<>=.,:|()[]{}", c) != nullptr) {
    Emit(TokenKind::kOp, std::string(1, c), line_);
    return Advance(pos_ + 1);
  }
  Fail(std::string("unexpected character '") + c + "' in an expression", line_);
}

// A quoted string with Python's escapes (\n \t \r \\ \' \" \xNN \uNNNN \UNNNNNNNN, others
// kept as written), as Jinja2 reads string literals.
void Lexer::StringToken() {
  const char quote = src_[pos_];
  const int start_line = line_;
  std::string value;
  size_t p = pos_ + 1;
  for (; p < src_.size() && src_[p] != quote; ++p) {
    if (src_[p] != '\\' || p + 1 >= src_.size()) {
      value += src_[p];
      continue;
    }
    const char e = src_[++p];
    const char* simple = std::strchr("nrtabfv0\\'\"", e);
    if (simple != nullptr && e != 0) {
      static const char kOut[] = "\n\r\t\a\b\f\v\0\\'\"";
      value += kOut[simple - "nrtabfv0\\'\""];
    } else if (e == 'x' || e == 'u' || e == 'U') {
      const size_t digits = e == 'x' ? 2 : e == 'u' ? 4 : 8;
      if (p + digits >= src_.size()) Fail("truncated \\" + std::string(1, e) + " escape", line_);
      AppendUtf8(static_cast<uint32_t>(std::stoul(src_.substr(p + 1, digits), nullptr, 16)), value);
      p += digits;
    } else if (e == '\n') {
      // a backslash-newline continues the string
    } else {
      value += '\\';
      value += e;
    }
  }
  if (p >= src_.size()) Fail("unclosed string literal", start_line);
  Emit(TokenKind::kString, value, start_line);
  Advance(p + 1);
}

}  // namespace

std::vector<Token> LexTemplate(const std::string& source, const LexOptions& options) {
  return Lexer(source, options).Run();
}

}  // namespace ps::chat
