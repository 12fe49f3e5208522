#include "tokenizer/decoder.h"

#include <c10/util/Exception.h>

#include "tokenizer/byte_level.h"
#include "tokenizer/utf8.h"

namespace ps::tokenizer {
namespace {

// `<0xNN>` -> NN (hex digits of either case, as HF's ByteFallback), or -1.
int ByteFallbackByte(const std::string& token) {
  if (token.size() != 6 || token.compare(0, 3, "<0x") != 0 || token[5] != '>') return -1;
  int value = 0;
  for (int i = 3; i < 5; ++i) {
    const char c = token[i];
    const int digit = c >= '0' && c <= '9'   ? c - '0'
                      : c >= 'A' && c <= 'F' ? c - 'A' + 10
                      : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                             : -1;  // Rust's from_str_radix(16)
    if (digit < 0) return -1;
    value = value * 16 + digit;
  }
  return value;
}

std::vector<std::string> ByteFallback(std::vector<std::string> tokens) {
  std::vector<std::string> out;
  std::string bytes;
  int pending = 0;
  auto flush = [&] {
    if (pending == 0) return;
    if (FindInvalidUtf8(bytes) == std::string_view::npos) {
      out.push_back(bytes);
    } else {
      for (int i = 0; i < pending; ++i) out.push_back("\uFFFD");  // HF: one per byte token
    }
    bytes.clear();
    pending = 0;
  };
  for (std::string& t : tokens) {
    const int b = ByteFallbackByte(t);
    if (b >= 0) {
      bytes.push_back(static_cast<char>(b));
      ++pending;
      continue;
    }
    flush();
    out.push_back(std::move(t));
  }
  flush();
  return out;
}


std::string StripToken(const std::string& token, const DecoderStep& s) {
  std::vector<std::pair<size_t, size_t>> chars;  // byte ranges of the characters
  for (size_t pos = 0; pos < token.size();) {
    const size_t start = pos;
    NextCodePoint(token, &pos);
    chars.emplace_back(start, pos);
  }
  auto is_content = [&](size_t i) {
    return token.compare(chars[i].first, chars[i].second - chars[i].first, s.content) == 0;
  };
  size_t start_cut = 0;
  for (size_t i = 0; i < chars.size() && static_cast<int64_t>(i) < s.start_chars && is_content(i); ++i) {
    start_cut = i + 1;
  }
  size_t stop_cut = chars.size();
  for (int64_t i = 0; i < s.stop_chars && static_cast<size_t>(i) < chars.size(); ++i) {
    const size_t index = chars.size() - i - 1;
    if (!is_content(index)) break;
    stop_cut = index;
  }
  if (stop_cut <= start_cut) return "";
  const size_t begin = chars[start_cut].first;
  return token.substr(begin, chars[stop_cut - 1].second - begin);
}

std::string ReplaceAll(const std::string& token, const std::string& pattern, const std::string& content) {
  if (pattern.empty()) return token;
  std::string out;
  size_t done = 0;
  for (size_t hit = token.find(pattern); hit != std::string::npos; hit = token.find(pattern, done)) {
    out.append(token, done, hit - done);
    out.append(content);
    done = hit + pattern.size();
  }
  out.append(token, done);
  return out;
}

}  // namespace

std::string ByteLevelTokenBytes(const std::string& token) {
  std::string bytes;
  size_t pos = 0;
  while (pos < token.size()) {
    const int b = CharToByte(NextCodePoint(token, &pos));
    if (b < 0) return token;
    bytes.push_back(static_cast<char>(b));
  }
  return bytes;
}

Decoder::Decoder(std::vector<DecoderStep> steps) : steps_(std::move(steps)) {
  for (const DecoderStep& s : steps_) {
    regexes_.push_back(s.regex ? std::make_unique<RegexSplitter>(*s.regex) : nullptr);
  }
}
Decoder::Decoder(Decoder&&) noexcept = default;
Decoder& Decoder::operator=(Decoder&&) noexcept = default;
Decoder::~Decoder() = default;

std::string Decoder::Decode(std::vector<std::string> tokens) const {
  std::string joined;
  if (steps_.empty()) {
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i > 0) joined.push_back(' ');
      joined += tokens[i];
    }
    return joined;
  }
  for (size_t step = 0; step < steps_.size(); ++step) RunStep(step, &tokens);
  for (const std::string& t : tokens) joined += t;
  return Utf8Lossy(joined);
}

void Decoder::RunStep(size_t step, std::vector<std::string>* tokens) const {
  const DecoderStep& s = steps_[step];
  switch (s.kind) {
    case DecoderStep::Kind::kByteLevel: {
      std::string bytes;
      for (const std::string& t : *tokens) bytes += ByteLevelTokenBytes(t);
      *tokens = {Utf8Lossy(bytes)};
      return;
    }
    case DecoderStep::Kind::kMetaspace:
      for (size_t i = 0; i < tokens->size(); ++i) {
        (*tokens)[i] = ReplaceAll((*tokens)[i], s.replacement, i == 0 && s.prepended ? "" : " ");
      }
      return;
    case DecoderStep::Kind::kByteFallback:
      *tokens = ByteFallback(std::move(*tokens));
      return;
    case DecoderStep::Kind::kFuse: {
      std::string fused;
      for (const std::string& t : *tokens) fused += t;
      *tokens = {fused};
      return;
    }
    case DecoderStep::Kind::kStrip:
      for (std::string& t : *tokens) t = StripToken(t, s);
      return;
    case DecoderStep::Kind::kReplace:
      for (std::string& t : *tokens) {
        if (!regexes_[step]) {
          t = ReplaceAll(t, s.pattern, s.content);
          continue;
        }
        std::vector<std::pair<size_t, size_t>> matches;
        regexes_[step]->FindAll(t, &matches);
        std::string out;
        size_t done = 0;
        for (const auto& [a, b] : matches) {
          out.append(t, done, a - done);
          out.append(s.content);
          done = b;
        }
        out.append(t, done);
        t = out;
      }
      return;
  }
}

}  // namespace ps::tokenizer
