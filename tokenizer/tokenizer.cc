// LoadTokenizer: finds the files of a tokenizer, parses them (nlohmann JSON), checks
// what ps_train supports and builds a ByteLevelBpe or WordPiece tokenizer.
#include "tokenizer/tokenizer.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tokenizer/byte_level.h"
#include "tokenizer/byte_level_bpe.h"
#include "tokenizer/pipeline_json.h"
#include "tokenizer/vocabulary.h"
#include "tokenizer/wordpiece.h"

namespace ps::tokenizer {

const char* ToString(TokenizerKind kind) {
  switch (kind) {
    case TokenizerKind::kByteLevelBpe:
      return "byte_level_bpe";
    case TokenizerKind::kBpe:
      return "bpe";
    case TokenizerKind::kWordPiece:
      return "wordpiece";
  }
  return "unknown";
}

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string ReadFile(const std::string& path) {
  // A FIFO would block the open (and the read) for good; a device is no tokenizer.
  std::error_code ec;
  TORCH_CHECK(!fs::exists(path, ec) || fs::is_regular_file(path, ec), path,
              ": not a regular file (a FIFO, device or folder): cannot be a tokenizer file");
  std::ifstream in(path, std::ios::binary);
  TORCH_CHECK(in.good(), path, ": cannot open the tokenizer file");
  std::ostringstream data;
  data << in.rdbuf();
  TORCH_CHECK(!in.bad(), path, ": read error");
  return data.str();
}

json ParseJson(const std::string& path) {
  const std::string text = ReadFile(path);
  try {
    return json::parse(text);
  } catch (const json::parse_error& e) {
    TORCH_CHECK(false, path, ": malformed JSON: ", e.what());
  }
}

// j[key] as T, `fallback` when absent or null; a wrong type names the file and key.
template <typename T>
T Get(const json& j, const char* key, const T& fallback, const std::string& file) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  try {
    return it->get<T>();
  } catch (const json::exception& e) {
    TORCH_CHECK(false, file, ": key '", key, "' has the wrong type (", it->type_name(), ")");
  }
}

std::string TypeOf(const json& j) {
  if (!j.is_object()) return "";
  const auto it = j.find("type");
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

// A token id read from `file`: an integer in [0, kMaxTokenId] (model.vocab_size's
// bound: an id beyond it could never be embedded, and the vocabulary's tables are sized
// by the largest id), else an error naming the token.
int32_t TokenId(const json& id, const std::string& token, const std::string& file) {
  constexpr int64_t kMaxTokenId = 10000000 - 1;
  TORCH_CHECK(id.is_number_integer(), file, ": token '", token, "' has no integer id (", id.dump(), ")");
  const bool in_range = id.is_number_unsigned() ? id.get<uint64_t>() <= static_cast<uint64_t>(kMaxTokenId)
                                                : id.get<int64_t>() >= 0 && id.get<int64_t>() <= kMaxTokenId;
  TORCH_CHECK(in_range, file, ": token '", token, "' has id ", id.dump(), ", outside [0, ", kMaxTokenId, "]");
  return static_cast<int32_t>(id.get<int64_t>());
}

std::vector<std::pair<std::string, int32_t>> ParseVocab(const json& vocab, const std::string& file) {
  TORCH_CHECK(vocab.is_object(), file, ": 'vocab' must be an object of token -> id");
  std::vector<std::pair<std::string, int32_t>> out;
  out.reserve(vocab.size());
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    out.emplace_back(it.key(), TokenId(it.value(), it.key(), file));
  }
  return out;
}

std::vector<AddedToken> ParseAddedTokens(const json& j, const std::string& file) {
  std::vector<AddedToken> out;
  const auto it = j.find("added_tokens");
  if (it == j.end() || it->is_null()) return out;
  TORCH_CHECK(it->is_array(), file, ": 'added_tokens' must be an array");
  for (const json& t : *it) {
    AddedToken a;
    a.content = Get<std::string>(t, "content", "", file);
    const auto id = t.is_object() ? t.find("id") : t.end();
    TORCH_CHECK(!a.content.empty() && id != t.end() && !id->is_null(), file, ": an added token needs 'content' and 'id'");
    a.id = TokenId(*id, a.content, file);
    a.single_word = Get<bool>(t, "single_word", false, file);
    a.lstrip = Get<bool>(t, "lstrip", false, file);
    a.rstrip = Get<bool>(t, "rstrip", false, file);
    a.special = Get<bool>(t, "special", false, file);
    a.normalized = Get<bool>(t, "normalized", !a.special, file);
    out.push_back(std::move(a));
  }
  return out;
}

// The files an exported HF folder copies along with the vocabulary.
void AddSideFiles(const fs::path& dir, std::vector<std::string>* files) {
  for (const char* name : {"tokenizer_config.json", "special_tokens_map.json"}) {
    if (fs::is_regular_file(dir / name)) files->push_back((dir / name).string());
  }
}

// Adds `token` as a special added token (kept whole in the text, matched in the raw text),
// as transformers' slow tokenizers treat their special tokens, if `vocab` has it (its
// first entry when a vocab.txt repeats it).
void AddSpecialToken(const std::vector<std::pair<std::string, int32_t>>& vocab, std::string_view token,
                     std::vector<AddedToken>* added_tokens) {
  for (const auto& [content, id] : vocab) {
    if (content == token) {
      AddedToken t;
      t.content = content;
      t.id = id;
      t.special = true;
      t.normalized = false;
      added_tokens->push_back(t);
      return;
    }
  }
}

// A token of tokenizer_config.json: a string or an object with "content".
std::optional<std::string> ConfigToken(const json& config, const char* key) {
  const auto it = config.find(key);
  if (it == config.end()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
    return (*it)["content"].get<std::string>();
  }
  return std::nullopt;
}

// Whether transformers 4 lets tokenizer_config.json's add_bos_token / add_eos_token
// rewrite a folder's post-processor: only its Llama tokenizer classes do (their
// update_post_processor); PreTrainedTokenizerFast (Llama 3), Qwen2Tokenizer,
// GPT2Tokenizer (SmolLM2) keep tokenizer.json's. transformers 5 ignores the flags
// whenever tokenizer.json exists; the Llama classes follow 4, where the flags act.
bool ClassHonoursSideFlags(const json& config) {
  const auto it = config.find("tokenizer_class");
  if (it == config.end() || !it->is_string()) return false;
  const std::string name = it->get<std::string>();
  return name == "LlamaTokenizer" || name == "LlamaTokenizerFast";
}

// tokenizer_config.json next to tokenizer.json: eos_token, and add_bos_token /
// add_eos_token, which (where ClassHonoursSideFlags) replace the post-processor's
// special tokens before / after the text when present.
void ReadTokenizerConfig(const fs::path& dir, ByteLevelBpeConfig* config) {
  const fs::path side = dir / "tokenizer_config.json";
  if (!fs::is_regular_file(side)) return;
  const std::string file = side.string();
  const json c = ParseJson(file);
  TORCH_CHECK(c.is_object(), file, ": not a JSON object");
  config->eos_token = ConfigToken(c, "eos_token");
  if (!ClassHonoursSideFlags(c)) return;
  Vocabulary vocab(config->vocab, config->added_tokens, {file});
  auto side_ids = [&](const char* flag, const char* token_key, std::vector<int32_t>* ids) {
    if (!c.contains(flag) || c[flag].is_null()) return;
    ids->clear();
    if (!Get<bool>(c, flag, false, file)) return;
    const std::optional<std::string> token = ConfigToken(c, token_key);
    TORCH_CHECK(token, file, ": ", flag, " is true but ", token_key, " is not set");
    const std::optional<int32_t> id = vocab.TokenToId(*token);
    TORCH_CHECK(id, file, ": ", token_key, " '", *token, "' is not in the vocabulary");
    ids->push_back(*id);
  };
  side_ids("add_bos_token", "bos_token", &config->prefix_ids);
  side_ids("add_eos_token", "eos_token", &config->suffix_ids);
}

std::unique_ptr<Tokenizer> LoadBpeJson(const json& j, const std::string& file, const fs::path& dir) {
  const json& model = j["model"];
  ByteLevelBpeConfig config;
  config.source_files = {file};
  AddSideFiles(dir, &config.source_files);
  config.normalizer = ParseNormalizerJson(j.value("normalizer", json()), file);
  PreTokenizerJson pre = ParsePreTokenizerJson(j.value("pre_tokenizer", json()), file);
  config.pre_tokenizer = std::move(pre.steps);
  config.byte_level = pre.byte_level;
  config.add_prefix_space = pre.add_prefix_space;
  config.use_regex = pre.use_regex;
  config.decoder = ParseDecoderJson(j.value("decoder", json()), file);
  const PostProcessorJson post = ParsePostProcessorJson(j.value("post_processor", json()), file);
  config.prefix_ids = post.prefix_ids;
  config.suffix_ids = post.suffix_ids;
  TORCH_CHECK(Get<double>(model, "dropout", 0.0, file) == 0.0, file, ": BPE dropout is not supported");
  TORCH_CHECK(Get<std::string>(model, "continuing_subword_prefix", "", file).empty() &&
                  Get<std::string>(model, "end_of_word_suffix", "", file).empty(),
              file, ": BPE continuing_subword_prefix / end_of_word_suffix are not supported");
  config.byte_fallback = Get<bool>(model, "byte_fallback", false, file);
  config.ignore_merges = Get<bool>(model, "ignore_merges", false, file);
  config.fuse_unk = Get<bool>(model, "fuse_unk", false, file);
  if (model.contains("unk_token") && !model["unk_token"].is_null()) {
    config.unk_token = Get<std::string>(model, "unk_token", "", file);
  }
  TORCH_CHECK(model.contains("vocab"), file, ": model has no 'vocab'");
  config.vocab = ParseVocab(model["vocab"], file);
  const json no_merges = json::array();
  const auto merges_it = model.find("merges");
  const json& merges = merges_it == model.end() ? no_merges : *merges_it;
  TORCH_CHECK(merges.is_array(), file, ": 'merges' must be an array");
  config.merges.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const json& m = merges[i];
    if (m.is_string()) {  // "a b"
      const std::string s = m.get<std::string>();
      const size_t space = s.find(' ');
      TORCH_CHECK(space != std::string::npos && s.find(' ', space + 1) == std::string::npos, file, ": merge ",
                  i, " '", s, "' is not two tokens separated by one space");
      config.merges.emplace_back(s.substr(0, space), s.substr(space + 1));
    } else {  // ["a", "b"]
      TORCH_CHECK(m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string(), file, ": merge ", i,
                  " is neither \"a b\" nor [\"a\", \"b\"]");
      config.merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    }
  }
  config.added_tokens = ParseAddedTokens(j, file);
  ReadTokenizerConfig(dir, &config);
  return MakeByteLevelBpe(std::move(config));
}

std::unique_ptr<Tokenizer> LoadWordPieceJson(const json& j, const std::string& file, const fs::path& dir) {
  const json& model = j["model"];
  WordPieceConfig config;
  config.source_files = {file};
  AddSideFiles(dir, &config.source_files);
  const json normalizer = j.value("normalizer", json());
  const std::string norm_type = TypeOf(normalizer);
  if (norm_type.empty()) {
    config.normalizer.enabled = false;
  } else {
    TORCH_CHECK(norm_type == "BertNormalizer", file, ": unsupported normalizer '", norm_type,
                "' for a WordPiece model (supported: BertNormalizer or none)");
    config.normalizer.clean_text = Get<bool>(normalizer, "clean_text", true, file);
    config.normalizer.handle_chinese_chars = Get<bool>(normalizer, "handle_chinese_chars", true, file);
    config.normalizer.lowercase = Get<bool>(normalizer, "lowercase", true, file);
    if (normalizer.contains("strip_accents") && !normalizer["strip_accents"].is_null()) {
      config.normalizer.strip_accents = Get<bool>(normalizer, "strip_accents", false, file);
    }
  }
  const std::string pre = TypeOf(j.value("pre_tokenizer", json()));
  TORCH_CHECK(pre == "BertPreTokenizer", file, ": unsupported pre_tokenizer '", pre.empty() ? "null" : pre,
              "' for a WordPiece model (supported: BertPreTokenizer)");
  const json decoder = j.value("decoder", json());
  const std::string dec_type = TypeOf(decoder);
  TORCH_CHECK(dec_type.empty() || dec_type == "WordPiece", file, ": unsupported decoder '", dec_type,
              "' (supported: WordPiece)");
  config.wordpiece_decoder = dec_type == "WordPiece";
  if (config.wordpiece_decoder) {
    config.decoder_prefix = Get<std::string>(decoder, "prefix", "##", file);
    config.decoder_cleanup = Get<bool>(decoder, "cleanup", true, file);
  }
  config.unk_token = Get<std::string>(model, "unk_token", "[UNK]", file);
  config.continuing_subword_prefix = Get<std::string>(model, "continuing_subword_prefix", "##", file);
  config.max_input_chars_per_word = Get<int64_t>(model, "max_input_chars_per_word", 100, file);
  TORCH_CHECK(model.contains("vocab"), file, ": model has no 'vocab'");
  config.vocab = ParseVocab(model["vocab"], file);
  config.added_tokens = ParseAddedTokens(j, file);
  return MakeWordPiece(std::move(config));
}

std::unique_ptr<Tokenizer> LoadTokenizerJson(const std::string& file) {
  const json j = ParseJson(file);
  TORCH_CHECK(j.is_object() && j.contains("model") && j["model"].is_object(), file,
              ": not an HF tokenizer.json (no 'model' object)");
  const json& model = j["model"];
  std::string type = TypeOf(model);
  if (type.empty()) {  // older files leave the model untagged
    type = model.contains("merges") ? "BPE" : model.contains("max_input_chars_per_word") ? "WordPiece" : "";
  }
  const fs::path dir = fs::path(file).parent_path();
  if (type == "BPE") return LoadBpeJson(j, file, dir);
  if (type == "WordPiece") return LoadWordPieceJson(j, file, dir);
  TORCH_CHECK(false, file, ": unsupported model type '", type, "' (supported: BPE, WordPiece)");
}

std::unique_ptr<Tokenizer> LoadVocabMerges(const std::string& vocab_file, const std::string& merges_file) {
  TORCH_CHECK(fs::is_regular_file(vocab_file), vocab_file,
              ": missing (BPE needs vocab.json next to merges.txt)");
  TORCH_CHECK(fs::is_regular_file(merges_file), merges_file,
              ": missing (BPE needs merges.txt next to vocab.json)");
  ByteLevelBpeConfig config;
  config.source_files = {vocab_file, merges_file};
  config.decoder = {DecoderStep{}};  // ByteLevel, as transformers' GPT2Tokenizer
  AddSideFiles(fs::path(vocab_file).parent_path(), &config.source_files);
  config.vocab = ParseVocab(ParseJson(vocab_file), vocab_file);
  std::istringstream lines(ReadFile(merges_file));
  std::string line;
  for (int64_t number = 1; std::getline(lines, line); ++number) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || (number == 1 && line.rfind("#version", 0) == 0)) continue;
    const size_t space = line.find(' ');
    TORCH_CHECK(space != std::string::npos && line.find(' ', space + 1) == std::string::npos, merges_file,
                ":", number, ": '", line, "' is not two tokens separated by one space");
    config.merges.emplace_back(line.substr(0, space), line.substr(space + 1));
  }
  // As transformers' GPT2Tokenizer: <|endoftext|> is a special token kept whole.
  AddSpecialToken(config.vocab, "<|endoftext|>", &config.added_tokens);
  return MakeByteLevelBpe(std::move(config));
}

std::unique_ptr<Tokenizer> LoadVocabTxt(const std::string& file) {
  WordPieceConfig config;
  config.source_files = {file};
  const fs::path dir = fs::path(file).parent_path();
  AddSideFiles(dir, &config.source_files);
  std::istringstream lines(ReadFile(file));
  std::string line;
  for (int32_t id = 0; std::getline(lines, line); ++id) {
    while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back()))) line.pop_back();
    // One token per line, and WordPiece tokens hold no whitespace: a line that does makes
    // this prose, not a vocabulary (a plain text file given as the tokenizer).
    TORCH_CHECK(std::none_of(line.begin(), line.end(), [](char ch) { return std::isspace(static_cast<unsigned char>(ch)); }),
                file, ":", id + 1, ": '", line.substr(0, 60), "' holds whitespace: not a WordPiece vocab.txt (one token "
                "per line)");
    config.vocab.emplace_back(line, id);
  }
  TORCH_CHECK(!config.vocab.empty(), file, ": empty vocabulary");
  // transformers' BertTokenizer options, when its tokenizer_config.json is there.
  const fs::path side = dir / "tokenizer_config.json";
  if (fs::is_regular_file(side)) {
    const json c = ParseJson(side.string());
    const std::string s = side.string();
    config.normalizer.lowercase = Get<bool>(c, "do_lower_case", true, s);
    config.normalizer.handle_chinese_chars = Get<bool>(c, "tokenize_chinese_chars", true, s);
    if (c.contains("strip_accents") && !c["strip_accents"].is_null()) {
      config.normalizer.strip_accents = Get<bool>(c, "strip_accents", false, s);
    }
    if (c.contains("unk_token") && c["unk_token"].is_string()) config.unk_token = c["unk_token"];
  }
  for (const char* special : {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"}) {
    AddSpecialToken(config.vocab, special, &config.added_tokens);
  }
  return MakeWordPiece(std::move(config));
}

}  // namespace

std::unique_ptr<Tokenizer> LoadTokenizer(const std::string& path) {
  const fs::path p(path);
  TORCH_CHECK(fs::exists(p), path, ": no such tokenizer file or folder");
  if (fs::is_directory(p)) {
    if (fs::is_regular_file(p / "tokenizer.json")) return LoadTokenizerJson((p / "tokenizer.json").string());
    if (fs::is_regular_file(p / "vocab.json") && fs::is_regular_file(p / "merges.txt")) {
      return LoadVocabMerges((p / "vocab.json").string(), (p / "merges.txt").string());
    }
    if (fs::is_regular_file(p / "vocab.txt")) return LoadVocabTxt((p / "vocab.txt").string());
    TORCH_CHECK(false, path, ": no tokenizer.json, vocab.json + merges.txt or vocab.txt in this folder");
  }
  const std::string name = p.filename().string();
  const fs::path dir = p.parent_path();
  if (name == "vocab.json") return LoadVocabMerges(path, (dir / "merges.txt").string());
  if (name == "merges.txt") return LoadVocabMerges((dir / "vocab.json").string(), path);
  if (p.extension() == ".txt") return LoadVocabTxt(path);
  return LoadTokenizerJson(path);
}

}  // namespace ps::tokenizer
