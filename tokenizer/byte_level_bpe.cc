#include "tokenizer/byte_level_bpe.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <array>
#include <climits>
#include <queue>

#include "tokenizer/byte_level.h"
#include "tokenizer/flat_maps.h"
#include "tokenizer/utf8.h"
#include "tokenizer/vocabulary.h"
#include "tokenizer/word_cache.h"

namespace ps::tokenizer {
namespace {

// Words with this many initial symbols or more merge through a heap (O(n log n)); shorter
// ones by rescanning an array of pair ranks, which is faster for the usual few symbols.
constexpr size_t kHeapMergeMinSymbols = 128;

// Words remembered by the cache (HF's BPE keeps 10,000).
constexpr size_t kCacheWords = 65536;

class ByteLevelBpe final : public VocabularyTokenizer {
 public:
  explicit ByteLevelBpe(ByteLevelBpeConfig config);

  TokenizerKind kind() const override { return TokenizerKind::kByteLevelBpe; }
  std::vector<int32_t> Encode(std::string_view text) const override;
  std::string Decode(const std::vector<int32_t>& ids) const override;
  std::optional<int32_t> end_of_text_id() const override { return TokenToId("<|endoftext|>"); }

 private:
  // Pre-tokenises and encodes text that holds no added token.
  void EncodeText(std::string_view text, std::vector<std::string_view>* pieces,
                  std::vector<std::string_view>* words, std::vector<int32_t>* ids) const;
  // `symbols`: scratch space, reused from word to word.
  void EncodeWord(std::string_view word, std::vector<int32_t>* symbols, std::vector<int32_t>* ids) const;
  void MergeByScan(std::vector<int32_t>* symbols) const;
  void MergeByHeap(std::vector<int32_t>* symbols) const;

  ByteLevelBpeConfig config_;  // merges and vocab released after construction
  std::vector<std::string> decoded_;  // [vocab_size] the bytes each id decodes to
  PairMap merges_;
  std::array<int32_t, 256> byte_id_;         // id of the one-character token of each byte, or -1
  std::array<std::string, 256> byte_chars_;  // UTF-8 of the character standing for each byte
  int32_t unk_id_ = -1;
  AddedTokenSplitter raw_added_;         // normalized=false tokens
  AddedTokenSplitter normalized_added_;  // normalized=true tokens (no normaliser here)
  std::unique_ptr<RegexSplitter> split_regex_;
  WordCache cache_{kCacheWords};
};

ByteLevelBpe::ByteLevelBpe(ByteLevelBpeConfig config)
    : VocabularyTokenizer(Vocabulary(config.vocab, config.added_tokens, config.source_files)),
      config_(std::move(config)) {
  const std::string& file = config_.source_files.at(0);
  const StringIdMap& model_vocab = vocabulary().model_tokens();
  std::array<int, 512> char_to_byte;
  char_to_byte.fill(-1);
  for (int b = 0; b < 256; ++b) {
    const char32_t c = ByteToChar(static_cast<uint8_t>(b));
    char_to_byte[c] = b;
    AppendUtf8(c, &byte_chars_[b]);
    byte_id_[b] = model_vocab.Find(byte_chars_[b]);
  }
  if (config_.unk_token) {
    unk_id_ = model_vocab.Find(*config_.unk_token);
    TORCH_CHECK(unk_id_ >= 0, file, ": unk_token '", *config_.unk_token, "' is not in the vocabulary");
  }

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

  decoded_.resize(vocabulary().vocab_size());
  for (int32_t id = 0; id < vocabulary().vocab_size(); ++id) {
    const std::string& token = vocabulary().token(id);
    if (!config_.byte_level_decoder) {
      decoded_[id] = token;
      continue;
    }
    // HF's ByteLevel decoder: a token whose characters all stand for bytes gives those
    // bytes; any other token (an added one) gives its own UTF-8.
    std::string bytes;
    size_t pos = 0;
    bool all_bytes = true;
    while (pos < token.size()) {
      const char32_t c = NextCodePoint(token, &pos);
      const int b = c < char_to_byte.size() ? char_to_byte[c] : -1;
      if (b < 0) {
        all_bytes = false;
        break;
      }
      bytes.push_back(static_cast<char>(b));
    }
    decoded_[id] = all_bytes ? bytes : token;
  }

  std::vector<AddedToken> raw, normalized;
  for (const auto& t : config_.added_tokens) (t.normalized ? normalized : raw).push_back(t);
  raw_added_ = AddedTokenSplitter(std::move(raw));
  normalized_added_ = AddedTokenSplitter(std::move(normalized));
  if (config_.split_pattern) split_regex_ = std::make_unique<RegexSplitter>(*config_.split_pattern);

  config_.vocab.clear();
  config_.vocab.shrink_to_fit();
  config_.merges.clear();
  config_.merges.shrink_to_fit();
}

std::vector<int32_t> ByteLevelBpe::Encode(std::string_view text) const {
  CheckUtf8(text, "tokenizer: text to encode");
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 1);
  std::vector<std::string_view> pieces, words;
  if (raw_added_.empty() && normalized_added_.empty()) {
    if (!text.empty()) EncodeText(text, &pieces, &words, &ids);
    return ids;
  }
  std::vector<TextSegment> raw, normalized;
  raw_added_.Split(text, &raw);
  for (const TextSegment& r : raw) {
    if (r.id >= 0) {
      ids.push_back(r.id);
      continue;
    }
    normalized.clear();
    normalized_added_.Split(r.text, &normalized);
    for (const TextSegment& n : normalized) {
      if (n.id >= 0) {
        ids.push_back(n.id);
      } else {
        EncodeText(n.text, &pieces, &words, &ids);
      }
    }
  }
  return ids;
}

void ByteLevelBpe::EncodeText(std::string_view text, std::vector<std::string_view>* pieces,
                              std::vector<std::string_view>* words, std::vector<int32_t>* ids) const {
  pieces->clear();
  if (split_regex_) {
    split_regex_->Split(text, pieces);
  } else {
    pieces->push_back(text);
  }
  std::string prefixed;
  std::vector<int32_t> symbols;
  for (std::string_view piece : *pieces) {
    if (config_.add_prefix_space && piece[0] != ' ') {
      prefixed.assign(" ");
      prefixed.append(piece);
      piece = prefixed;
    }
    words->clear();
    if (config_.use_regex) {
      SplitGpt2(piece, words);
    } else {
      words->push_back(piece);
    }
    for (std::string_view word : *words) EncodeWord(word, &symbols, ids);
  }
}

void ByteLevelBpe::EncodeWord(std::string_view word, std::vector<int32_t>* symbols_buffer,
                              std::vector<int32_t>* ids) const {
  if (cache_.Lookup(word, ids)) return;
  if (config_.ignore_merges) {
    std::string chars;
    for (char b : word) chars += byte_chars_[static_cast<uint8_t>(b)];
    if (const int32_t id = vocabulary().model_tokens().Find(chars); id >= 0) {
      ids->push_back(id);
      cache_.Insert(word, &id, 1);
      return;
    }
  }
  std::vector<int32_t>& symbols = *symbols_buffer;
  symbols.clear();
  bool last_unk = false;
  for (char b : word) {
    const int32_t id = byte_id_[static_cast<uint8_t>(b)];
    if (id >= 0) {
      symbols.push_back(id);
      last_unk = false;
    } else if (unk_id_ >= 0) {
      if (!(config_.fuse_unk && last_unk)) symbols.push_back(unk_id_);
      last_unk = true;
    }
    // else: HF drops a character that has no token and no unk_token.
  }
  if (symbols.size() >= kHeapMergeMinSymbols) {
    MergeByHeap(&symbols);
  } else {
    MergeByScan(&symbols);
  }
  ids->insert(ids->end(), symbols.begin(), symbols.end());
  cache_.Insert(word, symbols.data(), symbols.size());
}

// Repeatedly merges the adjacent pair of lowest rank (the leftmost one among equals),
// which is the order of HF's heap.
void ByteLevelBpe::MergeByScan(std::vector<int32_t>* symbols) const {
  std::vector<int32_t>& s = *symbols;
  if (s.size() < 2) return;
  // ranks[i]: rank of the pair (s[i], s[i + 1]), INT_MAX when it does not merge.
  int32_t ranks_buf[kHeapMergeMinSymbols];
  int32_t merged_buf[kHeapMergeMinSymbols];
  size_t n = s.size();
  for (size_t i = 0; i + 1 < n; ++i) {
    const PairMap::Value* v = merges_.Find(s[i], s[i + 1]);
    ranks_buf[i] = v ? v->rank : INT_MAX;
    merged_buf[i] = v ? v->merged_id : -1;
  }
  while (n > 1) {
    size_t best = 0;
    for (size_t i = 1; i + 1 < n; ++i) {
      if (ranks_buf[i] < ranks_buf[best]) best = i;
    }
    if (ranks_buf[best] == INT_MAX) break;
    s[best] = merged_buf[best];
    for (size_t i = best + 1; i + 1 < n; ++i) {
      s[i] = s[i + 1];
      ranks_buf[i] = ranks_buf[i + 1];
      merged_buf[i] = merged_buf[i + 1];
    }
    --n;
    auto refresh = [&](size_t i) {
      const PairMap::Value* v = merges_.Find(s[i], s[i + 1]);
      ranks_buf[i] = v ? v->rank : INT_MAX;
      merged_buf[i] = v ? v->merged_id : -1;
    };
    if (best > 0) refresh(best - 1);
    if (best + 1 < n) refresh(best);
  }
  s.resize(n);
}

void ByteLevelBpe::MergeByHeap(std::vector<int32_t>* symbols) const {
  std::vector<int32_t>& s = *symbols;
  const int32_t n = static_cast<int32_t>(s.size());
  std::vector<int32_t> prev(n), next(n);
  std::vector<uint8_t> alive(n, 1);
  for (int32_t i = 0; i < n; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  struct Entry {
    int32_t rank, pos, merged_id;
    bool operator>(const Entry& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap;
  auto push = [&](int32_t i) {
    if (i < 0 || next[i] < 0) return;
    if (const PairMap::Value* v = merges_.Find(s[i], s[next[i]])) heap.push({v->rank, i, v->merged_id});
  };
  for (int32_t i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    const Entry top = heap.top();
    heap.pop();
    const int32_t i = top.pos;
    if (!alive[i] || next[i] < 0) continue;
    const PairMap::Value* v = merges_.Find(s[i], s[next[i]]);
    if (v == nullptr || v->merged_id != top.merged_id) continue;  // stale entry
    const int32_t j = next[i];
    s[i] = top.merged_id;
    alive[j] = 0;
    next[i] = next[j];
    if (next[j] >= 0) prev[next[j]] = i;
    push(prev[i]);
    push(i);
  }
  int32_t out = 0;
  for (int32_t i = 0; i < n; ++i) {
    if (alive[i]) s[out++] = s[i];
  }
  s.resize(out);
}

std::string ByteLevelBpe::Decode(const std::vector<int32_t>& ids) const {
  std::string joined;
  for (size_t k = 0; k < ids.size(); ++k) {
    vocabulary().CheckId(ids[k]);
    if (!config_.byte_level_decoder && k > 0) joined.push_back(' ');
    joined += decoded_[ids[k]];
  }
  return config_.byte_level_decoder ? Utf8Lossy(joined) : joined;
}

}  // namespace

std::unique_ptr<Tokenizer> MakeByteLevelBpe(ByteLevelBpeConfig config) {
  TORCH_CHECK(!config.source_files.empty(), "MakeByteLevelBpe: no source file named");
  return std::make_unique<ByteLevelBpe>(std::move(config));
}

}  // namespace ps::tokenizer
