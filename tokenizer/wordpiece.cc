#include "tokenizer/wordpiece.h"

#include <c10/util/Exception.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>
#include <unicode/ustring.h>

#include <algorithm>

#include "tokenizer/flat_maps.h"
#include "tokenizer/utf8.h"
#include "tokenizer/vocabulary.h"

namespace ps::tokenizer {
namespace {

// Rust's char::is_whitespace (White_Space), which BERT's code extends with \t \n \r.
bool IsBertWhitespace(char32_t c) {
  if (c < 0x80) return c == ' ' || (c >= 0x09 && c <= 0x0D);
  return u_isUWhiteSpace(c);
}

// HF's is_control: "other" characters (Cc, Cf, Co) except \t \n \r, which count as
// whitespace. Unassigned code points (Cn) are kept, as the golden cases show HF does.
bool IsControl(char32_t c) {
  if (c == '\t' || c == '\n' || c == '\r') return false;
  if (c < 0x80) return c < 0x20 || c == 0x7F;
  const int8_t type = u_charType(c);
  return type == U_CONTROL_CHAR || type == U_FORMAT_CHAR || type == U_PRIVATE_USE_CHAR;
}

bool IsChineseChar(char32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
         (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

// BERT's punctuation: ASCII punctuation (all of !"#$%&'()*+,-./:;<=>?@[\]^_`{|}~) or a
// Unicode P* category.
bool IsBertPunctuation(char32_t c) {
  if (c < 0x80) {
    return (c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) || (c >= 123 && c <= 126);
  }
  switch (u_charType(c)) {
    case U_DASH_PUNCTUATION:
    case U_START_PUNCTUATION:
    case U_END_PUNCTUATION:
    case U_CONNECTOR_PUNCTUATION:
    case U_OTHER_PUNCTUATION:
    case U_INITIAL_PUNCTUATION:
    case U_FINAL_PUNCTUATION:
      return true;
    default:
      return false;
  }
}

// Rust's char::to_lowercase (full, context-free mappings: 'İ' -> "i̇", 'Σ' -> 'σ').
void AppendLowercase(char32_t c, std::string* out) {
  if (c < 0x80) {
    out->push_back(static_cast<char>(c >= 'A' && c <= 'Z' ? c + 32 : c));
    return;
  }
  if (!u_hasBinaryProperty(c, UCHAR_CHANGES_WHEN_LOWERCASED)) {
    AppendUtf8(c, out);
    return;
  }
  UChar src[2];
  int32_t src_len = 0;
  U16_APPEND_UNSAFE(src, src_len, c);
  UChar dst[16];
  UErrorCode status = U_ZERO_ERROR;
  const int32_t dst_len = u_strToLower(dst, 16, src, src_len, "", &status);
  TORCH_INTERNAL_ASSERT(U_SUCCESS(status) && dst_len <= 16, "u_strToLower: ", u_errorName(status));
  for (int32_t i = 0; i < dst_len;) {
    UChar32 d;
    U16_NEXT(dst, i, dst_len, d);
    AppendUtf8(static_cast<char32_t>(d), out);
  }
}

void ReplaceAll(std::string* s, std::string_view from, std::string_view to) {
  size_t pos = 0;
  while ((pos = s->find(from, pos)) != std::string::npos) {
    s->replace(pos, from.size(), to);
    pos += to.size();
  }
}

class WordPiece final : public VocabularyTokenizer {
 public:
  explicit WordPiece(WordPieceConfig config);

  TokenizerKind kind() const override { return TokenizerKind::kWordPiece; }
  std::vector<int32_t> Encode(std::string_view text) const override;
  std::string Decode(const std::vector<int32_t>& ids) const override;
  std::optional<int32_t> end_of_text_id() const override { return TokenToId("[SEP]"); }

 private:
  // Pre-tokenises normalised text and runs WordPiece on each word.
  void EncodeNormalized(std::string_view text, std::vector<int32_t>* ids) const;
  void EncodeWord(std::string_view word, std::vector<int32_t>* ids) const;

  WordPieceConfig config_;     // vocab released after construction
  StringIdMap continuations_;  // tokens starting with the prefix, prefix removed
  size_t max_token_bytes_ = 0;
  size_t max_continuation_bytes_ = 0;
  int32_t unk_id_ = -1;
  AddedTokenSplitter raw_added_;
  AddedTokenSplitter normalized_added_;  // contents normalised
};

// As HF (0.23): an id gives a normalized token's normalised content (so "Hello World"
// decodes as "hello world" when lowercasing), while its written content gives the id.
Vocabulary MakeWordPieceVocabulary(const WordPieceConfig& config) {
  return Vocabulary(config.vocab, config.added_tokens, config.source_files, [&config](const AddedToken& t) {
    return t.normalized ? BertNormalize(config.normalizer, t.content) : t.content;
  });
}

WordPiece::WordPiece(WordPieceConfig config)
    : VocabularyTokenizer(MakeWordPieceVocabulary(config)), config_(std::move(config)) {
  const std::string& file = config_.source_files.at(0);
  const std::string& prefix = config_.continuing_subword_prefix;
  for (const auto& [token, id] : config_.vocab) {
    max_token_bytes_ = std::max(max_token_bytes_, token.size());
    if (token.compare(0, prefix.size(), prefix) == 0) {
      continuations_.Insert(std::string_view(token).substr(prefix.size()), id);
      max_continuation_bytes_ = std::max(max_continuation_bytes_, token.size() - prefix.size());
    }
  }
  unk_id_ = vocabulary().model_tokens().Find(config_.unk_token);
  TORCH_CHECK(unk_id_ >= 0, file, ": unk_token '", config_.unk_token, "' is not in the vocabulary");
  TORCH_CHECK(config_.max_input_chars_per_word > 0, file, ": max_input_chars_per_word must be > 0");

  std::vector<AddedToken> raw, normalized;
  for (AddedToken t : config_.added_tokens) {
    if (t.normalized) {
      t.content = BertNormalize(config_.normalizer, t.content);
      normalized.push_back(std::move(t));
    } else {
      raw.push_back(std::move(t));
    }
  }
  raw_added_ = AddedTokenSplitter(std::move(raw));
  normalized_added_ = AddedTokenSplitter(std::move(normalized));
  config_.vocab.clear();
  config_.vocab.shrink_to_fit();
}

std::vector<int32_t> WordPiece::Encode(std::string_view text) const {
  CheckUtf8(text, "tokenizer: text to encode");
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 4 + 1);
  std::vector<TextSegment> raw, normalized;
  raw_added_.Split(text, &raw);
  for (const TextSegment& r : raw) {
    if (r.id >= 0) {
      ids.push_back(r.id);
      continue;
    }
    const std::string norm = BertNormalize(config_.normalizer, r.text);
    normalized.clear();
    normalized_added_.Split(norm, &normalized);
    for (const TextSegment& n : normalized) {
      if (n.id >= 0) {
        ids.push_back(n.id);
      } else {
        EncodeNormalized(n.text, &ids);
      }
    }
  }
  return ids;
}

void WordPiece::EncodeNormalized(std::string_view text, std::vector<int32_t>* ids) const {
  size_t word_start = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t start = pos;
    const char32_t c = NextCodePoint(text, &pos);
    const bool space = IsBertWhitespace(c);
    if (space || IsBertPunctuation(c)) {
      if (start > word_start) EncodeWord(text.substr(word_start, start - word_start), ids);
      if (!space) EncodeWord(text.substr(start, pos - start), ids);
      word_start = pos;
    }
  }
  if (pos > word_start) EncodeWord(text.substr(word_start, pos - word_start), ids);
}

void WordPiece::EncodeWord(std::string_view word, std::vector<int32_t>* ids) const {
  int64_t chars = 0;
  for (char b : word) chars += (static_cast<uint8_t>(b) & 0xC0) != 0x80;
  if (chars > config_.max_input_chars_per_word) {
    ids->push_back(unk_id_);
    return;
  }
  const size_t first = ids->size();
  size_t start = 0;
  while (start < word.size()) {
    const StringIdMap& map = start == 0 ? vocabulary().model_tokens() : continuations_;
    size_t end = std::min(word.size(), start + (start == 0 ? max_token_bytes_ : max_continuation_bytes_));
    int32_t found = -1;
    while (end > start) {
      // Back to a character boundary, then the longest piece first.
      while (end < word.size() && (static_cast<uint8_t>(word[end]) & 0xC0) == 0x80) --end;
      if (end <= start) break;
      found = map.Find(word.substr(start, end - start));
      if (found >= 0) break;
      --end;
    }
    if (found < 0) {
      ids->resize(first);
      ids->push_back(unk_id_);
      return;
    }
    ids->push_back(found);
    start = end;
  }
}

std::string WordPiece::Decode(const std::vector<int32_t>& ids) const {
  std::string out;
  const std::string& prefix = config_.decoder_prefix;
  for (size_t k = 0; k < ids.size(); ++k) {
    vocabulary().CheckId(ids[k]);
    std::string token = vocabulary().token(ids[k]);
    if (!config_.wordpiece_decoder) {
      if (k > 0) out.push_back(' ');
      out += token;
      continue;
    }
    // HF's WordPiece decoder, token by token.
    if (k > 0) {
      if (token.compare(0, prefix.size(), prefix) == 0) {
        token.erase(0, prefix.size());
      } else {
        token.insert(0, " ");
      }
    }
    if (config_.decoder_cleanup) {
      ReplaceAll(&token, " .", ".");
      ReplaceAll(&token, " ?", "?");
      ReplaceAll(&token, " !", "!");
      ReplaceAll(&token, " ,", ",");
      ReplaceAll(&token, " ' ", "'");
      ReplaceAll(&token, " n't", "n't");
      ReplaceAll(&token, " 'm", "'m");
      ReplaceAll(&token, " do not", " don't");
      ReplaceAll(&token, " 's", "'s");
      ReplaceAll(&token, " 've", "'ve");
      ReplaceAll(&token, " 're", "'re");
    }
    out += token;
  }
  return out;
}

}  // namespace

std::string BertNormalize(const BertNormalizerConfig& config, std::string_view text) {
  if (!config.enabled) return std::string(text);
  std::string out;
  out.reserve(text.size() + 8);
  bool ascii = true;
  size_t pos = 0;
  while (pos < text.size()) {
    const auto b = static_cast<uint8_t>(text[pos]);
    if (b < 0x80) {  // ASCII fast path: no CJK, no accents
      ++pos;
      if (config.clean_text) {
        if (b == '\t' || b == '\n' || b == '\r') {
          out.push_back(' ');
          continue;
        }
        if (b < 0x20 || b == 0x7F) continue;  // control characters, NUL included
      }
      out.push_back(static_cast<char>(b));
      continue;
    }
    char32_t c = NextCodePoint(text, &pos);
    if (config.clean_text) {
      if (c == 0 || c == 0xFFFD || IsControl(c)) continue;
      if (IsBertWhitespace(c)) c = ' ';
    }
    if (config.handle_chinese_chars && IsChineseChar(c)) {
      out.push_back(' ');
      AppendUtf8(c, &out);
      out.push_back(' ');
    } else {
      AppendUtf8(c, &out);
    }
    ascii = ascii && c < 0x80;
  }
  if (config.strip_accents.value_or(config.lowercase) && !ascii) {
    // NFD, then drop the Mn marks. Only the runs of non-ASCII characters go through ICU:
    // ASCII characters neither decompose nor combine (canonical class 0), so NFD never
    // reorders across them and the text may be cut there.
    UErrorCode status = U_ZERO_ERROR;
    const icu::Normalizer2* nfd = icu::Normalizer2::getNFDInstance(status);
    TORCH_CHECK(U_SUCCESS(status), "tokenizer: ICU NFD: ", u_errorName(status));
    std::string stripped;
    stripped.reserve(out.size());
    size_t p = 0;
    while (p < out.size()) {
      size_t q = p;
      while (q < out.size() && static_cast<uint8_t>(out[q]) < 0x80) ++q;
      stripped.append(out, p, q - p);
      p = q;
      while (q < out.size() && static_cast<uint8_t>(out[q]) >= 0x80) ++q;
      if (q == p) continue;
      const icu::UnicodeString decomposed =
          nfd->normalize(icu::UnicodeString::fromUTF8(icu::StringPiece(out.data() + p, q - p)), status);
      TORCH_CHECK(U_SUCCESS(status), "tokenizer: ICU NFD: ", u_errorName(status));
      for (int32_t i = 0; i < decomposed.length();) {
        const UChar32 c = decomposed.char32At(i);
        i += U16_LENGTH(c);
        if (u_charType(c) != U_NON_SPACING_MARK) AppendUtf8(static_cast<char32_t>(c), &stripped);
      }
      p = q;
    }
    out.swap(stripped);
  }
  if (config.lowercase) {
    if (ascii) {
      for (char& b : out) b = (b >= 'A' && b <= 'Z') ? static_cast<char>(b + 32) : b;
    } else {
      std::string lower;
      lower.reserve(out.size());
      size_t p = 0;
      while (p < out.size()) AppendLowercase(NextCodePoint(out, &p), &lower);
      out.swap(lower);
    }
  }
  return out;
}

std::unique_ptr<Tokenizer> MakeWordPiece(WordPieceConfig config) {
  TORCH_CHECK(!config.source_files.empty(), "MakeWordPiece: no source file named");
  return std::make_unique<WordPiece>(std::move(config));
}

}  // namespace ps::tokenizer
