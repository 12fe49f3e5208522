#include "tokenizer/byte_level_bpe.h"

#include <c10/util/Exception.h>

#include <array>
#include <cstdio>
#include <list>

#include "tokenizer/bpe_merge.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/flat_maps.h"
#include "tokenizer/utf8.h"
#include "tokenizer/vocabulary.h"
#include "tokenizer/word_cache.h"

namespace ps::tokenizer {
namespace {

// Words remembered by the cache (HF's BPE keeps 10,000).
constexpr size_t kCacheWords = 65536;

// Scratch space of one Encode call, reused from piece to piece.
struct Scratch {
  std::vector<Piece> pieces;
  std::list<std::string> storage;  // text the normaliser and pre-tokenizer rewrote
  std::vector<std::string_view> words;
  std::vector<int32_t> symbols;
  std::string prefixed;
};

class ByteLevelBpe final : public VocabularyTokenizer {
 public:
  explicit ByteLevelBpe(ByteLevelBpeConfig config);

  TokenizerKind kind() const override {
    return config_.byte_level ? TokenizerKind::kByteLevelBpe : TokenizerKind::kBpe;
  }
  std::vector<int32_t> Encode(std::string_view text) const override;
  std::vector<int32_t> EncodeWithSpecialTokens(std::string_view text) const override;
  std::string Decode(const std::vector<int32_t>& ids) const override;
  std::optional<int32_t> end_of_text_id() const override;

 private:
  void BuildMerges(const std::string& file);
  // Encodes a piece that holds no added token: pre-tokenizer, then the model.
  void EncodePiece(Piece piece, Scratch* scratch, std::vector<int32_t>* ids) const;
  void EncodeWord(std::string_view word, Scratch* scratch, std::vector<int32_t>* ids) const;
  // The initial symbols of a word: its bytes (byte-level) or characters.
  void ByteSymbols(std::string_view word, std::vector<int32_t>* symbols) const;
  void CharSymbols(std::string_view word, std::vector<int32_t>* symbols) const;

  ByteLevelBpeConfig config_;  // merges and vocab released after construction
  Normalizer normalizer_;
  PreTokenizer pre_tokenizer_;
  Decoder decoder_;
  std::vector<std::string> decoded_;  // [vocab_size] ByteLevel-only decoder: each id's bytes
  PairMap merges_;
  std::array<int32_t, 256> byte_id_;         // id of the one-character token of each byte, or -1
  std::array<std::string, 256> byte_chars_;  // UTF-8 of the character standing for each byte
  std::array<int32_t, 256> fallback_id_;     // id of <0xNN>, or -1
  int32_t unk_id_ = -1;
  AddedTokenSplitter raw_added_;         // normalized=false tokens
  AddedTokenSplitter normalized_added_;  // normalized=true tokens, their content normalised
  WordCache cache_{kCacheWords};
};

ByteLevelBpe::ByteLevelBpe(ByteLevelBpeConfig config)
    : VocabularyTokenizer(Vocabulary(config.vocab, config.added_tokens, config.source_files)),
      config_(std::move(config)),
      normalizer_(config_.normalizer),
      pre_tokenizer_(config_.pre_tokenizer),
      decoder_(config_.decoder) {
  const std::string& file = config_.source_files.at(0);
  const StringIdMap& model_vocab = vocabulary().model_tokens();
  for (int b = 0; b < 256; ++b) {
    AppendUtf8(ByteToChar(static_cast<uint8_t>(b)), &byte_chars_[b]);
    byte_id_[b] = model_vocab.Find(byte_chars_[b]);
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    fallback_id_[b] = model_vocab.Find(name);
  }
  if (config_.unk_token) {
    unk_id_ = model_vocab.Find(*config_.unk_token);
    TORCH_CHECK(unk_id_ >= 0, file, ": unk_token '", *config_.unk_token, "' is not in the vocabulary");
  }
  BuildMerges(file);
  if (decoder_.byte_level_only()) {
    decoded_.resize(vocabulary().vocab_size());
    for (int32_t id = 0; id < vocabulary().vocab_size(); ++id) {
      decoded_[id] = ByteLevelTokenBytes(vocabulary().token(id));
    }
  }
  std::vector<AddedToken> raw, normalized;
  for (auto t : config_.added_tokens) {
    if (t.normalized) t.content = normalizer_.Normalize(t.content);
    (t.normalized ? normalized : raw).push_back(t);
  }
  raw_added_ = AddedTokenSplitter(std::move(raw));
  normalized_added_ = AddedTokenSplitter(std::move(normalized));
  config_.vocab.clear();
  config_.vocab.shrink_to_fit();
  config_.merges.clear();
  config_.merges.shrink_to_fit();
}

void ByteLevelBpe::BuildMerges(const std::string& file) {
  const StringIdMap& model_vocab = vocabulary().model_tokens();
  merges_ = PairMap(config_.merges.size());
  for (size_t rank = 0; rank < config_.merges.size(); ++rank) {
    const auto& [left, right] = config_.merges[rank];
    const int32_t l = model_vocab.Find(left);
    const int32_t r = model_vocab.Find(right);
    const int32_t merged = model_vocab.Find(left + right);
    TORCH_CHECK(l >= 0 && r >= 0 && merged >= 0, file, ": merge ", rank, " '", left, " ", right,
                "' names a token missing from the vocabulary ('",
                l < 0   ? left
                : r < 0 ? right
                        : left + right,
                "')");
    merges_.Insert(l, r, {static_cast<int32_t>(rank), merged});
  }
}

std::optional<int32_t> ByteLevelBpe::end_of_text_id() const {
  if (config_.eos_token) {
    if (auto id = TokenToId(*config_.eos_token)) return id;
  }
  for (const char* name : {"<|endoftext|>", "<|end_of_text|>", "</s>"}) {
    if (auto id = TokenToId(name)) return id;
  }
  return std::nullopt;
}

std::vector<int32_t> ByteLevelBpe::EncodeWithSpecialTokens(std::string_view text) const {
  std::vector<int32_t> ids = config_.prefix_ids;
  const std::vector<int32_t> body = Encode(text);
  ids.insert(ids.end(), body.begin(), body.end());
  ids.insert(ids.end(), config_.suffix_ids.begin(), config_.suffix_ids.end());
  return ids;
}

std::vector<int32_t> ByteLevelBpe::Encode(std::string_view text) const {
  CheckUtf8(text, "tokenizer: text to encode");
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 1);
  Scratch scratch;
  if (raw_added_.empty() && normalized_added_.empty() && normalizer_.empty()) {
    if (!text.empty()) EncodePiece({text, true}, &scratch, &ids);
    return ids;
  }
  std::vector<TextSegment> raw, normalized;
  raw_added_.Split(text, &raw);
  for (const TextSegment& r : raw) {
    if (r.id >= 0) {
      ids.push_back(r.id);
      continue;
    }
    const bool at_start = r.text.data() == text.data();
    std::string_view segment = r.text;
    if (!normalizer_.empty()) {
      scratch.storage.push_back(normalizer_.Normalize(r.text));
      segment = scratch.storage.back();
    }
    normalized.clear();
    normalized_added_.Split(segment, &normalized);
    for (const TextSegment& n : normalized) {
      if (n.id >= 0) {
        ids.push_back(n.id);
      } else {
        EncodePiece({n.text, at_start && n.text.data() == segment.data()}, &scratch, &ids);
      }
    }
  }
  return ids;
}

void ByteLevelBpe::EncodePiece(Piece piece, Scratch* scratch, std::vector<int32_t>* ids) const {
  std::vector<Piece>& pieces = scratch->pieces;
  pieces.assign(1, piece);
  pre_tokenizer_.Run(&pieces, &scratch->storage);
  for (const Piece& p : pieces) {
    std::string_view text = p.text;
    if (!config_.byte_level) {
      EncodeWord(text, scratch, ids);
      continue;
    }
    if (config_.add_prefix_space && text[0] != ' ') {
      scratch->prefixed.assign(" ");
      scratch->prefixed.append(text);
      text = scratch->prefixed;
    }
    scratch->words.clear();
    if (config_.use_regex) {
      SplitGpt2(text, &scratch->words);
    } else {
      scratch->words.push_back(text);
    }
    for (std::string_view word : scratch->words) EncodeWord(word, scratch, ids);
  }
}

void ByteLevelBpe::EncodeWord(std::string_view word, Scratch* scratch, std::vector<int32_t>* ids) const {
  if (cache_.Lookup(word, ids)) return;
  if (config_.ignore_merges) {
    std::string chars;
    if (config_.byte_level) {
      for (char b : word) chars += byte_chars_[static_cast<uint8_t>(b)];
    } else {
      chars.assign(word);
    }
    if (const int32_t id = vocabulary().model_tokens().Find(chars); id >= 0) {
      ids->push_back(id);
      cache_.Insert(word, &id, 1);
      return;
    }
  }
  std::vector<int32_t>& symbols = scratch->symbols;
  symbols.clear();
  if (config_.byte_level) {
    ByteSymbols(word, &symbols);
  } else {
    CharSymbols(word, &symbols);
  }
  MergeSymbols(merges_, &symbols);
  ids->insert(ids->end(), symbols.begin(), symbols.end());
  cache_.Insert(word, symbols.data(), symbols.size());
}

void ByteLevelBpe::ByteSymbols(std::string_view word, std::vector<int32_t>* symbols) const {
  bool last_unk = false;
  for (char b : word) {
    const int32_t id = byte_id_[static_cast<uint8_t>(b)];
    if (id >= 0) {
      symbols->push_back(id);
      last_unk = false;
    } else if (unk_id_ >= 0) {
      if (!(config_.fuse_unk && last_unk)) symbols->push_back(unk_id_);
      last_unk = true;
    }
    // else: HF drops a character that has no token and no unk_token.
  }
}

// HF's BPE::merge_word: a known character is its token; an unknown one its <0xNN> tokens
// (byte_fallback, when all exist), else unk_token, which is held back until the next
// known character (so that fuse_unk can widen it; byte-fallback tokens do not flush it).
void ByteLevelBpe::CharSymbols(std::string_view word, std::vector<int32_t>* symbols) const {
  const StringIdMap& model_vocab = vocabulary().model_tokens();
  bool pending_unk = false;
  size_t pos = 0;
  while (pos < word.size()) {
    const size_t start = pos;
    NextCodePoint(word, &pos);
    const std::string_view c = word.substr(start, pos - start);
    if (const int32_t id = model_vocab.Find(c); id >= 0) {
      if (pending_unk) symbols->push_back(unk_id_);
      pending_unk = false;
      symbols->push_back(id);
      continue;
    }
    if (config_.byte_fallback) {
      bool all = true;
      for (char b : c) all = all && fallback_id_[static_cast<uint8_t>(b)] >= 0;
      if (all) {
        for (char b : c) symbols->push_back(fallback_id_[static_cast<uint8_t>(b)]);
        continue;
      }
    }
    if (unk_id_ < 0) continue;  // HF drops it
    if (pending_unk && !config_.fuse_unk) symbols->push_back(unk_id_);
    pending_unk = true;
  }
  if (pending_unk) symbols->push_back(unk_id_);
}

std::string ByteLevelBpe::Decode(const std::vector<int32_t>& ids) const {
  for (int32_t id : ids) vocabulary().CheckId(id);
  if (decoder_.byte_level_only()) {
    std::string joined;
    for (int32_t id : ids) joined += decoded_[id];
    return Utf8Lossy(joined);
  }
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) tokens.push_back(vocabulary().token(id));
  return decoder_.Decode(std::move(tokens));
}

}  // namespace

std::unique_ptr<Tokenizer> MakeByteLevelBpe(ByteLevelBpeConfig config) {
  TORCH_CHECK(!config.source_files.empty(), "MakeByteLevelBpe: no source file named");
  return std::make_unique<ByteLevelBpe>(std::move(config));
}

}  // namespace ps::tokenizer
