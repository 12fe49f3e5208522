#include "tokenizer/normalizer.h"

#include <c10/util/Exception.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>

#include <algorithm>

#include "tokenizer/byte_level.h"
#include "tokenizer/utf8.h"

namespace ps::tokenizer {

const char* ToString(NormalizerStep::Kind kind) {
  switch (kind) {
    case NormalizerStep::Kind::kNfc:
      return "NFC";
    case NormalizerStep::Kind::kNfd:
      return "NFD";
    case NormalizerStep::Kind::kNfkc:
      return "NFKC";
    case NormalizerStep::Kind::kNfkd:
      return "NFKD";
    case NormalizerStep::Kind::kPrepend:
      return "Prepend";
    case NormalizerStep::Kind::kReplace:
      return "Replace";
    case NormalizerStep::Kind::kStrip:
      return "Strip";
  }
  return "unknown";
}

namespace {

const icu::Normalizer2* IcuNormalizer(NormalizerStep::Kind kind) {
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* n = nullptr;
  switch (kind) {
    case NormalizerStep::Kind::kNfc:
      n = icu::Normalizer2::getNFCInstance(status);
      break;
    case NormalizerStep::Kind::kNfd:
      n = icu::Normalizer2::getNFDInstance(status);
      break;
    case NormalizerStep::Kind::kNfkc:
      n = icu::Normalizer2::getNFKCInstance(status);
      break;
    case NormalizerStep::Kind::kNfkd:
      n = icu::Normalizer2::getNFKDInstance(status);
      break;
    case NormalizerStep::Kind::kPrepend:
    case NormalizerStep::Kind::kReplace:
    case NormalizerStep::Kind::kStrip:
      break;
  }
  TORCH_CHECK(U_SUCCESS(status), "tokenizer: ICU normalizer: ", u_errorName(status));
  return n;
}

// Unicode normal form of `text`; ASCII text is its own normal form in all four.
std::string UnicodeNormalize(NormalizerStep::Kind kind, std::string_view text) {
  if (std::all_of(text.begin(), text.end(), [](char c) { return static_cast<uint8_t>(c) < 0x80; })) {
    return std::string(text);
  }
  UErrorCode status = U_ZERO_ERROR;
  const icu::UnicodeString in = icu::UnicodeString::fromUTF8(icu::StringPiece(text.data(), text.size()));
  const icu::UnicodeString out = IcuNormalizer(kind)->normalize(in, status);
  TORCH_CHECK(U_SUCCESS(status), "tokenizer: ICU normalize: ", u_errorName(status));
  std::string result;
  out.toUTF8String(result);
  return result;
}

std::string Strip(std::string_view text, bool left, bool right) {
  size_t begin = 0, end = text.size();
  while (left && begin < end) {
    size_t next = begin;
    if (!u_isUWhiteSpace(NextCodePoint(text, &next))) break;
    begin = next;
  }
  while (right && end > begin) {
    size_t start = end - 1;
    while ((static_cast<uint8_t>(text[start]) & 0xC0) == 0x80) --start;
    size_t next = start;
    if (!u_isUWhiteSpace(NextCodePoint(text, &next))) break;
    end = start;
  }
  return std::string(text.substr(begin, end - begin));
}

std::string ReplaceLiteral(std::string_view text, const std::string& pattern, const std::string& content) {
  if (pattern.empty()) return std::string(text);
  std::string out;
  size_t done = 0;
  for (size_t hit = text.find(pattern); hit != std::string_view::npos; hit = text.find(pattern, done)) {
    out.append(text.substr(done, hit - done));
    out.append(content);
    done = hit + pattern.size();
  }
  out.append(text.substr(done));
  return out;
}

std::string ReplaceRegex(std::string_view text, const RegexSplitter& regex, const std::string& content) {
  std::vector<std::pair<size_t, size_t>> matches;
  regex.FindAll(text, &matches);
  std::string out;
  size_t done = 0;
  for (const auto& [start, end] : matches) {
    out.append(text.substr(done, start - done));
    out.append(content);
    done = end;
  }
  out.append(text.substr(done));
  return out;
}

}  // namespace

Normalizer::Normalizer(std::vector<NormalizerStep> steps) : steps_(std::move(steps)) {
  for (const NormalizerStep& s : steps_) {
    regexes_.push_back(s.regex ? std::make_unique<RegexSplitter>(*s.regex) : nullptr);
  }
}
Normalizer::Normalizer(Normalizer&&) noexcept = default;
Normalizer& Normalizer::operator=(Normalizer&&) noexcept = default;
Normalizer::~Normalizer() = default;

std::string Normalizer::Normalize(std::string_view text) const {
  std::string current(text);
  for (size_t i = 0; i < steps_.size(); ++i) {
    const NormalizerStep& s = steps_[i];
    switch (s.kind) {
      case NormalizerStep::Kind::kNfc:
      case NormalizerStep::Kind::kNfd:
      case NormalizerStep::Kind::kNfkc:
      case NormalizerStep::Kind::kNfkd:
        current = UnicodeNormalize(s.kind, current);
        break;
      case NormalizerStep::Kind::kPrepend:
        if (!current.empty()) current.insert(0, s.text);
        break;
      case NormalizerStep::Kind::kReplace:
        current = regexes_[i] ? ReplaceRegex(current, *regexes_[i], s.content)
                              : ReplaceLiteral(current, s.text, s.content);
        break;
      case NormalizerStep::Kind::kStrip:
        current = Strip(current, s.strip_left, s.strip_right);
        break;
    }
  }
  return current;
}

}  // namespace ps::tokenizer
