#include "trainer/config_loader.h"

#include <c10/util/Exception.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "data/data_error.h"
#include "data/format_inference.h"
#include "models/bert_config.h"
#include "models/hf_bert.h"
#include "models/hf_gpt2.h"
#include "trainer/config_schema.h"
#include "trainer/llama_keys.h"
#include "trainer/model_shape.h"

namespace ps::trainer {
namespace {

std::string Where(const std::string& source, const YAML::Mark& mark) {
  // yaml-cpp marks are 0-based; people and editors count from 1.
  return source + ":" + std::to_string(mark.line + 1) + ":" + std::to_string(mark.column + 1);
}

size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1])});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

// Where each document of a YAML stream starts (its "---", or its first token);
// ignores everything else.
class DocumentStarts : public YAML::EventHandler {
 public:
  std::vector<YAML::Mark> marks;
  void OnDocumentStart(const YAML::Mark& mark) override { marks.push_back(mark); }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t, const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}
};

// Applies a YAML document and overrides to a Config, tracking where each key was set.
class Loader {
 public:
  Loader(const EnvLookup& env) : env_(env), fields_(BuildConfigSchema()), aliases_(BuildConfigAliases()) {
    for (const auto& f : fields_) {
      for (size_t dot = f.key.find('.'); dot != std::string::npos; dot = f.key.find('.', dot + 1)) {
        sections_.insert(f.key.substr(0, dot));
      }
    }
    for (const auto& a : aliases_) {
      for (size_t dot = a.key.find('.'); dot != std::string::npos; dot = a.key.find('.', dot + 1)) {
        sections_.insert(a.key.substr(0, dot));
      }
    }
  }

  // Returns false when the text holds no keys (empty, only comments, or null).
  bool ApplyDocument(const std::string& text, const std::string& source) {
    source_ = source;
    std::vector<YAML::Node> documents;
    try {
      documents = YAML::LoadAll(text);
    } catch (const YAML::ParserException& e) {
      throw ConfigError(Where(source, e.mark) + ": YAML syntax error: " + e.msg);
    }
    // YAML::Load would read the first document and drop the rest without a word.
    if (documents.size() > 1) {
      std::istringstream in(text);
      YAML::Parser parser(in);
      DocumentStarts starts;
      while (parser.HandleNextDocument(starts)) {
      }
      const YAML::Mark second = starts.marks.size() > 1 ? starts.marks[1] : documents[1].Mark();
      throw ConfigError(Where(source, second) +
                        ": a second YAML document starts here; a config is one document (remove the '---')");
    }
    if (documents.empty() || documents[0].IsNull()) return false;
    const YAML::Node& root = documents[0];
    if (!root.IsMap()) {
      throw ConfigError(Where(source, root.Mark()) + ": the top level must be a mapping of sections");
    }
    Walk(root, "", source);
    return true;
  }

  void ApplyOverride(const std::string& arg) {
    const std::string where = "--set " + arg;
    const size_t eq = arg.find('=');
    if (eq == std::string::npos || eq == 0) {
      throw ConfigError(where + ": expected key=value, e.g. --set optimizer.lr=3e-4");
    }
    const std::string key = arg.substr(0, eq);
    const YAML::Node value = OverrideValue(arg.substr(eq + 1), where);
    if (sections_.count(key)) throw ConfigError(where + ": '" + key + "' is a section, not a key");
    if (!ApplyKey(key, value, where, /*is_override=*/true)) {
      throw ConfigError(where + ": unknown key '" + key + "'" + Suggest(key));
    }
  }

  Config Finish() {
    if (config_.model_type == models::ModelType::kLlama) {
      ResolveLlama();
    } else {
      ResolvePreset();
      ApplyBertDefaults();
      ResolveInitFrom();
    }
    ResolveDataFormat();
    Validate();
    ValidateOutputDirs();
    return config_;
  }

 private:
  // A --set value is exactly one YAML node: a scalar, a [flow list] or a {flow map};
  // nothing at all (`--set data.valid_path=`) is the empty string. A document marker
  // ('---', '...') starting a line, a second document, or a null node (`~`) would be
  // dropped or misread by a plain YAML::Load: errors naming the argument.
  static YAML::Node OverrideValue(const std::string& text, const std::string& where) {
    if (text.empty()) return YAML::Node(std::string());
    std::istringstream lines(text);
    for (std::string line; std::getline(lines, line);) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      const bool marker = (line.rfind("---", 0) == 0 || line.rfind("...", 0) == 0) &&
                          (line.size() == 3 || line[3] == ' ' || line[3] == '\t');
      if (marker) {
        throw ConfigError(where + ": the value holds a YAML document marker ('" + line.substr(0, 3) +
                          "'); a --set value is one scalar, [list] or {map} (quote it to mean the text)");
      }
    }
    std::vector<YAML::Node> documents;
    try {
      documents = YAML::LoadAll(text);
    } catch (const YAML::ParserException& e) {
      throw ConfigError(where + ": value is not valid YAML: " + e.msg);
    }
    if (documents.size() > 1) {
      throw ConfigError(where + ": the value is " + std::to_string(documents.size()) +
                        " YAML documents; a --set value is one scalar, [list] or {map}");
    }
    if (documents.empty() || !(documents[0].IsScalar() || documents[0].IsSequence() || documents[0].IsMap())) {
      throw ConfigError(where + ": the value is YAML null, which no key holds; write key= for an empty string");
    }
    return documents[0];
  }

  void Walk(const YAML::Node& map, const std::string& prefix, const std::string& source) {
    std::map<std::string, YAML::Mark> seen;
    for (auto it = map.begin(); it != map.end(); ++it) {
      // Copies: yaml-cpp iterators hand out a temporary proxy, so a reference would dangle.
      const YAML::Node key_node = it->first;
      const YAML::Node value = it->second;
      if (!key_node.IsScalar()) {
        throw ConfigError(Where(source, key_node.Mark()) + ": keys must be plain names");
      }
      const std::string path = prefix.empty() ? key_node.Scalar() : prefix + "." + key_node.Scalar();
      auto [prev, inserted] = seen.emplace(key_node.Scalar(), key_node.Mark());
      if (!inserted) {
        throw ConfigError(Where(source, key_node.Mark()) + ": duplicate key '" + path +
                          "' (first set at line " + std::to_string(prev->second.line + 1) + ")");
      }
      if (ApplyKey(path, value, Where(source, value.Mark()), /*is_override=*/false)) continue;
      if (sections_.count(path)) {
        if (value.IsNull()) continue;  // an empty section
        if (!value.IsMap()) {
          throw ConfigError(Where(source, value.Mark()) + ": '" + path + "' is a section and needs a mapping");
        }
        Walk(value, path, source);
        continue;
      }
      throw ConfigError(Where(source, key_node.Mark()) + ": unknown key '" + path + "'" + Suggest(path));
    }
  }

  // Returns false when `key` is neither a field nor an alias.
  bool ApplyKey(const std::string& key, const YAML::Node& raw, const std::string& where, bool is_override) {
    for (const auto& alias : aliases_) {
      if (alias.key != key) continue;
      YAML::Node value = Interpolate(raw, key, where);
      if (alias.transform) {
        try {
          value = alias.transform(value);
        } catch (const std::invalid_argument& e) {
          throw ConfigError(where + ": " + key + ": " + e.what());
        }
        if (!value.IsDefined() || value.IsNull()) return true;
      }
      SetField(alias.target, value, where, key, is_override);
      return true;
    }
    for (const auto& f : fields_) {
      if (f.key != key) continue;
      SetField(key, Interpolate(raw, key, where), where, key, is_override);
      return true;
    }
    return false;
  }

  void SetField(const std::string& target, const YAML::Node& value, const std::string& where,
                const std::string& written_as, bool is_override) {
    const FieldSpec& f = Field(target);
    const std::string label = written_as == target ? target : written_as + " (-> " + target + ")";
    if (!is_override) {
      auto it = set_at_.find(target);
      if (it != set_at_.end()) {
        throw ConfigError(where + ": " + label + ": '" + target + "' is already set at " + it->second);
      }
    }
    try {
      f.set(config_, value);
    } catch (const std::invalid_argument& e) {
      throw ConfigError(where + ": " + label + ": " + e.what() + " (" + f.type_name + ")");
    }
    set_at_[target] = where;
  }

  const FieldSpec& Field(const std::string& key) const {
    for (const auto& f : fields_) {
      if (f.key == key) return f;
    }
    throw std::logic_error("config alias targets unknown key " + key);
  }

  // Expands ${NAME} and ${NAME:-default} in `s`. A default may itself hold ${...}
  // references (expanded only when the default is used): ${A:-${B}/runs}. A '${' without
  // its '}' or a bad variable name is an error naming `where` (file:line:col or the --set).
  std::string InterpolateString(const std::string& s, const std::string& key, const std::string& where) {
    size_t pos = 0;
    Expand(s, pos, /*nested=*/false, /*evaluate=*/false, key, where);  // the syntax first, whatever is set
    pos = 0;
    return Expand(s, pos, /*nested=*/false, /*evaluate=*/true, key, where);
  }

  // Expands `s` from `pos` to its end, or (nested) to the '}' that closes the enclosing
  // reference, leaving `pos` on it. Without `evaluate` only the structure is checked.
  std::string Expand(const std::string& s, size_t& pos, bool nested, bool evaluate, const std::string& key,
                     const std::string& where) {
    std::string out;
    while (pos < s.size()) {
      if (nested && s[pos] == '}') return out;
      if (s.compare(pos, 2, "${") == 0) {
        out += Reference(s, pos, evaluate, key, where);
      } else {
        out += s[pos++];
      }
    }
    if (nested) throw ConfigError(where + ": " + key + ": unterminated '${' in '" + s + "'");
    return out;
  }

  // One reference starting at s[pos] == '$'; leaves `pos` after its '}'.
  std::string Reference(const std::string& s, size_t& pos, bool evaluate, const std::string& key,
                        const std::string& where) {
    pos += 2;
    size_t name_end = pos;
    while (name_end < s.size() && s[name_end] != '}' && s.compare(name_end, 2, ":-") != 0) ++name_end;
    if (name_end >= s.size()) throw ConfigError(where + ": " + key + ": unterminated '${' in '" + s + "'");
    const std::string name = s.substr(pos, name_end - pos);
    const bool valid_name = !name.empty() && !std::isdigit(static_cast<unsigned char>(name[0])) &&
                            std::all_of(name.begin(), name.end(), [](char ch) {
                              return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_';
                            });
    if (!valid_name) {
      throw ConfigError(where + ": " + key + ": '${" + name + "' in '" + s +
                        "' is not a variable name (letters, digits and _): write ${NAME} or ${NAME:-default}");
    }
    pos = name_end;
    std::optional<std::string> value = evaluate ? env_(name) : std::nullopt;
    const bool use_value = value && !value->empty();
    std::optional<std::string> fallback;
    if (s[pos] == ':') {
      pos += 2;
      fallback = Expand(s, pos, /*nested=*/true, evaluate && !use_value, key, where);
    }
    ++pos;  // the closing '}'
    if (!evaluate) return "";
    if (use_value) return *value;
    if (fallback) return *fallback;
    throw ConfigError(where + ": " + key + ": environment variable " + name + " is not set (write ${" + name +
                      ":-default} for a default)");
  }

  YAML::Node Interpolate(const YAML::Node& node, const std::string& key, const std::string& where) {
    if (node.IsScalar()) {
      if (node.Scalar().find("${") == std::string::npos) return node;
      return YAML::Node(InterpolateString(node.Scalar(), key, where));
    }
    if (node.IsSequence()) {
      YAML::Node out(YAML::NodeType::Sequence);
      for (const auto& item : node) out.push_back(Interpolate(item, key, where));
      return out;
    }
    return node;
  }

  std::string Suggest(const std::string& key) const {
    std::string best;
    size_t best_distance = std::max<size_t>(2, key.size() / 4) + 1;
    auto consider = [&](const std::string& candidate) {
      const size_t d = EditDistance(key, candidate);
      if (d < best_distance) {
        best_distance = d;
        best = candidate;
      }
    };
    for (const auto& f : fields_) consider(f.key);
    for (const auto& a : aliases_) consider(a.key);
    return best.empty() ? std::string(" (see ps_train --config-reference)") : "; did you mean '" + best + "'?";
  }

  std::string At(const std::string& key) const {
    auto it = set_at_.find(key);
    return it == set_at_.end() ? std::string("config") : it->second;
  }

  void ResolvePreset() {
    auto& m = config_.model;
    if (m.preset.empty()) return;
    const bool bert = config_.model_type == models::ModelType::kBert;
    // The preset's shape, from the zoo of this model.type.
    struct Shape {
      int64_t n_layer, n_head, n_embd, n_positions, vocab_size;
    };
    std::optional<Shape> preset;
    std::string names;
    if (bert) {
      if (auto p = models::FindBertPreset(m.preset)) preset = Shape{p->n_layer, p->n_head, p->n_embd, p->n_positions, p->vocab_size};
      for (const auto& p : models::BertPresets()) names += (names.empty() ? "" : ", ") + p.name;
    } else {
      if (auto p = models::FindGptPreset(m.preset)) preset = Shape{p->n_layer, p->n_head, p->n_embd, p->n_positions, p->vocab_size};
      for (const auto& p : models::GptPresets()) names += (names.empty() ? "" : ", ") + p.name;
    }
    if (!preset) {
      throw ConfigError(At("model.preset") + ": model.preset: unknown preset '" + m.preset + "'" +
                        (bert ? " for model.type bert" : "") + "; known: " + names);
    }
    // A shape key set as well must agree with the preset: otherwise the run would
    // train one shape while its config names another.
    auto fill = [&](const std::string& name, int64_t& field, int64_t value) {
      const std::string key = "model." + name;
      if (!set_at_.count(key)) {
        field = value;
      } else if (field != value) {
        throw ConfigError(At(key) + ": " + key + " " + std::to_string(field) + " disagrees with model.preset '" +
                          m.preset + "' (set at " + At("model.preset") + "), whose " + name + " is " +
                          std::to_string(value) + "; drop one of the two");
      }
    };
    fill("n_layer", m.n_layer, preset->n_layer);
    fill("n_head", m.n_head, preset->n_head);
    fill("n_embd", m.n_embd, preset->n_embd);
    fill("n_positions", m.n_positions, preset->n_positions);
    fill("vocab_size", m.vocab_size, preset->vocab_size);
  }

  // BERT's own defaults where they differ from GPT's (HF BertConfig's): LayerNorm eps
  // 1e-12 and dropout 0.1, unless set.
  void ApplyBertDefaults() {
    if (config_.model_type != models::ModelType::kBert) return;
    if (!set_at_.count("model.layer_norm_eps")) config_.model.layer_norm_eps = 1e-12;
    if (!set_at_.count("model.dropout")) config_.model.dropout = 0.1;
  }

  // model.init_from: the HF folder's config.json gives the shape. Keys set in the config
  // (or by model.preset) must agree with it; those left unset take its values.
  void ResolveInitFrom() {
    auto& m = config_.model;
    if (m.init_from.empty()) return;
    const bool bert = config_.model_type == models::ModelType::kBert;
    models::GptConfig hf;
    models::BertConfig hf_bert;
    try {
      if (bert) {
        hf_bert = models::ReadHfBertConfig(m.init_from);
        hf.n_layer = hf_bert.n_layer;
        hf.n_head = hf_bert.n_head;
        hf.n_embd = hf_bert.n_embd;
        hf.n_positions = hf_bert.n_positions;
        hf.vocab_size = hf_bert.vocab_size;
        hf.layer_norm_eps = hf_bert.layer_norm_eps;
        hf.tie_word_embeddings = m.tie_word_embeddings;  // not a BERT key
      } else {
        hf = models::ReadHfGpt2Config(m.init_from);
      }
    } catch (const c10::Error& e) {
      throw ConfigError(At("model.init_from") + ": model.init_from: " + e.what_without_backtrace());
    }
    // Set in the config, or (the five shape keys) filled by model.preset.
    const bool preset_shape = !m.preset.empty();
    auto given = [&](const std::string& key) {
      const bool shape_key = key != "model.layer_norm_eps" && key != "model.tie_word_embeddings";
      return set_at_.count(key) > 0 || (preset_shape && shape_key);
    };
    auto disagree = [&](const std::string& key, const std::string& ours, const std::string& theirs) {
      const std::string by = set_at_.count(key) ? At(key) : At("model.preset") + " (model.preset '" + m.preset + "')";
      throw ConfigError(by + ": " + key + " " + ours + " disagrees with model.init_from '" + m.init_from +
                        "', whose config.json says " + theirs + "; drop the key or use another folder");
    };
    auto fill = [&](const std::string& name, int64_t& field, int64_t value) {
      const std::string key = "model." + name;
      if (!given(key)) {
        field = value;
      } else if (field != value) {
        disagree(key, std::to_string(field), std::to_string(value));
      }
    };
    fill("n_layer", m.n_layer, hf.n_layer);
    fill("n_head", m.n_head, hf.n_head);
    fill("n_embd", m.n_embd, hf.n_embd);
    fill("n_positions", m.n_positions, hf.n_positions);
    fill("vocab_size", m.vocab_size, hf.vocab_size);
    if (bert) {  // no preset sets these: only the config can disagree
      auto fill_bert = [&](const std::string& key, int64_t& field, int64_t value) {
        if (!set_at_.count(key)) {
          field = value;
        } else if (field != value) {
          disagree(key, std::to_string(field), std::to_string(value));
        }
      };
      fill_bert("model.intermediate_size", config_.bert.intermediate_size, hf_bert.mlp_width());
      fill_bert("model.type_vocab_size", config_.bert.type_vocab_size, hf_bert.type_vocab_size);
    }
    if (!given("model.layer_norm_eps")) {
      m.layer_norm_eps = hf.layer_norm_eps;
    } else if (m.layer_norm_eps != hf.layer_norm_eps) {
      disagree("model.layer_norm_eps", std::to_string(m.layer_norm_eps), std::to_string(hf.layer_norm_eps));
    }
    if (!given("model.tie_word_embeddings")) {
      m.tie_word_embeddings = hf.tie_word_embeddings;
    } else if (m.tie_word_embeddings != hf.tie_word_embeddings) {
      disagree("model.tie_word_embeddings", m.tie_word_embeddings ? "true" : "false",
               hf.tie_word_embeddings ? "true" : "false");
    }
  }

  // model.type llama: the preset's, then model.init_from's keys (llama_keys.h).
  void ResolveLlama() {
    ResolveLlamaKeys(config_, [this](const std::string& key) { return set_at_.count(key) > 0; },
                     [this](const std::string& key) { return At(key); });
  }

  // data.format: synthetic reads no file, so a path beside it is a contradiction; auto (not given) is inferred
  // from data.train_path (data/format_inference.h) and must agree with data.valid_path's; no format and no path
  // is an error: random tokens must be asked for. Reads the heads of the data files.
  void ResolveDataFormat() {
    auto& d = config_.data;
    if (d.format == data::DataFormat::kSynthetic) {
      for (const auto& [key, path] : {std::pair<std::string, std::string>{"data.train_path", d.train_path},
                                      {"data.valid_path", d.valid_path}}) {
        if (path.empty()) continue;
        throw ConfigError(At(key) + ": " + key + " '" + path + "' is set but data.format is synthetic (random " +
                          "tokens; no file is read): remove the path, or set data.format to the file's format " +
                          "(or leave data.format out to infer it)");
      }
      return;
    }
    if (d.format != data::DataFormat::kAuto) return;
    if (d.train_path.empty()) {
      const std::string where = set_at_.count("data.valid_path") ? At("data.valid_path") : source_;
      throw ConfigError(where + ": no training data: data.train_path and data.format are not set; set data.train_path " +
                        "(data.format is inferred from the file), or data.format: synthetic to train on random tokens");
    }
    const auto infer = [&](const std::string& key, const std::string& path) {
      try {
        return data::InferDataFormat(path, key);
      } catch (const data::DataError& e) {
        throw ConfigError(At(key) + ": " + e.what());
      }
    };
    const data::DataFormat train = infer("data.train_path", d.train_path);
    if (!d.valid_path.empty()) {
      const data::DataFormat valid = infer("data.valid_path", d.valid_path);
      if (valid != train) {
        throw ConfigError(At("data.valid_path") + ": data.valid_path '" + d.valid_path + "' looks like data.format " +
                          data::ToString(valid) + " but data.train_path '" + d.train_path + "' like " +
                          data::ToString(train) + "; set data.format");
      }
    }
    const bool classifier = config_.model_type == models::ModelType::kBert && config_.bert.num_labels > 0;
    if (train == data::DataFormat::kClassification && !classifier) {
      throw ConfigError(At("data.train_path") + ": data.train_path '" + d.train_path + "' holds JSON lines or " +
                        "TSV, not tokens: tokenize it with ps_prep (docs/data.md), or set data.format: text to " +
                        "train on its bytes (labelled examples are data.format classification, for model.type bert " +
                        "with model.num_labels)");
    }
    d.format = train;
    set_at_["data.format"] = At("data.train_path") + " (data.format inferred from data.train_path)";
  }

  // run.output_dir and checkpoint.dir are folders the run creates: an empty output_dir
  // (e.g. from an unset ${VAR:-}) or a path that is, or lies under, an existing
  // non-directory is an error here rather than a file-system error later. Reads the
  // file system (symlinks followed); creates nothing.
  void ValidateOutputDirs() const {
    const auto& c = config_;
    if (c.run.output_dir.empty()) {
      throw ConfigError(At("run.output_dir") + ": run.output_dir is empty (an unset ${VAR:-}?); name the run's folder");
    }
    namespace fs = std::filesystem;
    for (const auto& [key, dir] : {std::pair<std::string, std::string>{"run.output_dir", c.run.output_dir},
                                   {"checkpoint.dir", c.checkpoint.dir}}) {
      if (dir.empty()) continue;
      for (fs::path p = fs::path(dir); !p.empty(); p = p.parent_path()) {
        std::error_code ec;
        const fs::file_status st = fs::status(p, ec);
        if (fs::exists(st) && !fs::is_directory(st)) {
          const bool self = p == fs::path(dir);
          throw ConfigError(At(key) + ": " + key + " '" + dir + "': " +
                            (self ? std::string("is a file, not a folder")
                                  : "'" + p.string() + "' is a file, not a folder, so nothing can be created under it"));
        }
        if (p == p.parent_path()) break;  // the root
      }
    }
  }

  // What model.type: bert needs and refuses.
  void ValidateModelType() const {
    const auto& c = config_;
    const bool classification = c.data.format == data::DataFormat::kClassification;
    if (classification && (c.model_type != models::ModelType::kBert || c.bert.num_labels == 0)) {
      throw ConfigError(At("data.format") + ": data.format classification trains a sequence classifier: it needs "
                        "model.type: bert and model.num_labels > 0");
    }
    if (c.bert.num_labels > 0 && !classification) {
      throw ConfigError(At("model.num_labels") + ": model.num_labels " + std::to_string(c.bert.num_labels) +
                        " fine-tunes a classifier, which reads labelled examples: set data.format: classification");
    }
    // A key at its default is no contradiction (config.resolved.yaml lists every key).
    const bool llama = c.model_type == models::ModelType::kLlama;
    for (const std::string& key : llama ? std::vector<std::string>{} : ChangedLlamaKeys(c)) {
      throw ConfigError(At(key) + ": " + key + " is a Llama key; set model.type: llama, or drop it");
    }
    if (c.model_type != models::ModelType::kBert) {
      const models::BertKeys defaults;
      const std::pair<const char*, bool> bert_keys[] = {
          {"model.intermediate_size", !llama && c.bert.intermediate_size != defaults.intermediate_size},
          {"model.type_vocab_size", c.bert.type_vocab_size != defaults.type_vocab_size},
          {"model.num_labels", c.bert.num_labels != defaults.num_labels}};
      for (const auto& [key, changed] : bert_keys) {
        if (changed) throw ConfigError(At(key) + ": " + std::string(key) + " is a BERT key; set model.type: bert, or drop it");
      }
      return;
    }
    if (!c.model.tie_word_embeddings) {
      throw ConfigError(At("model.tie_word_embeddings") +
                        ": model.tie_word_embeddings is a GPT key (BERT's MLM decoder is always tied to the word "
                        "embeddings); drop it");
    }
    const bool bytes = c.data.format == data::DataFormat::kText ||
                       (classification && c.data.tokenizer.empty() && c.model.init_from.empty());
    if (bytes && c.model.vocab_size < 260) {
      throw ConfigError(At("model.vocab_size") + ": model.vocab_size " + std::to_string(c.model.vocab_size) +
                        " is below 260: BERT on byte-level text (data.format " + data::ToString(c.data.format) +
                        " without a tokenizer) reads bytes 0-255 and needs the ids 256-259 for [PAD], [CLS], [SEP] "
                        "and [MASK]");
    }
    if (c.data.seq_len < 3) {
      throw ConfigError(At("data.seq_len") + ": data.seq_len " + std::to_string(c.data.seq_len) +
                        " leaves no room for tokens between [CLS] and [SEP] (BERT needs at least 3)");
    }
  }

  // What train.accumulation_schedule: vertical needs (the ranks are checked in Train()).
  void ValidateAccumulationSchedule() const {
    const auto& c = config_;
    if (c.train.accumulation_schedule != AccumulationSchedule::kVertical) return;
    if (c.model_type == models::ModelType::kBert) {
      throw ConfigError(At("train.accumulation_schedule") +
                        ": train.accumulation_schedule: vertical is built for GPT and Llama; use horizontal with BERT");
    }
    if (!c.model.activation_checkpointing) {
      throw ConfigError(At("train.accumulation_schedule") +
                        ": train.accumulation_schedule: vertical needs model.activation_checkpointing: true (it keeps "
                        "the block inputs of every micro-batch of the step; without checkpointing it would keep all "
                        "their activations, as one micro-batch k times the size would)");
    }
  }

  void Validate() const {
    ValidateModelType();
    ValidateAccumulationSchedule();
    const auto& c = config_;
    if (const auto bad = data::ChatKeyProblem(c.data, c.model_type == models::ModelType::kBert))
      throw ConfigError(At(bad->key) + ": " + bad->message);
    // Llama: its own shape checks (model.head_dim may set the head width).
    if (c.model_type != models::ModelType::kLlama && c.model.n_embd % c.model.n_head != 0) {
      throw ConfigError(At("model.n_head") + ": model.n_embd " + std::to_string(c.model.n_embd) +
                        " is not divisible by model.n_head " + std::to_string(c.model.n_head));
    }
    if (c.data.seq_len > c.model.n_positions) {
      throw ConfigError(At("data.seq_len") + ": data.seq_len " + std::to_string(c.data.seq_len) +
                        " exceeds model.n_positions " + std::to_string(c.model.n_positions));
    }
    if (c.data.format != data::DataFormat::kSynthetic && c.data.train_path.empty()) {
      throw ConfigError(At("data.format") + ": data.train_path is required for data.format " +
                        data::ToString(c.data.format));
    }
    if (c.data.format == data::DataFormat::kText && c.model.vocab_size < 256 &&
        c.model_type != models::ModelType::kBert) {
      throw ConfigError(At("model.vocab_size") + ": model.vocab_size " + std::to_string(c.model.vocab_size) +
                        " is below 256, the byte values of data.format text");
    }
    // Sizes derived from the shape must be countable in int64 (the memory plan and the
    // chunk runtime count elements and bytes in it); models/ checks the arithmetic
    // and names the shape.
    try {
      ValidateModelShape(c);
    } catch (const c10::Error& e) {
      throw ConfigError(At("model.n_embd") + ": " + e.what_without_backtrace());
    }
    try {
      // The vertical schedule keeps every micro-batch's block inputs (one rank: the most).
      const bool vertical = c.train.accumulation_schedule == AccumulationSchedule::kVertical &&
                            c.train.global_batch_size % c.train.micro_batch_size == 0;
      const int64_t kept = vertical ? c.train.global_batch_size / c.train.micro_batch_size : 1;
      ActivationBytesOf(c, c.train.micro_batch_size * c.data.seq_len, /*element_bytes=*/4, kept);
    } catch (const c10::Error& e) {
      throw ConfigError(At("train.micro_batch_size") + ": train.micro_batch_size " +
                        std::to_string(c.train.micro_batch_size) + " x data.seq_len " +
                        std::to_string(c.data.seq_len) + ": " + e.what_without_backtrace());
    }
    if (c.lr_schedule.min_lr > c.optimizer.lr) {
      throw ConfigError(At("lr_schedule.min_lr") + ": lr_schedule.min_lr is above optimizer.lr");
    }
    try {
      GradAccumSteps(c.train, 1);
    } catch (const ConfigError& e) {
      throw ConfigError(At("train.global_batch_size") + ": " + e.what());
    }
  }

  const EnvLookup& env_;
  std::string source_ = "config";  // the file (or source name) of the document, for messages
  std::vector<FieldSpec> fields_;
  std::vector<AliasSpec> aliases_;
  std::set<std::string> sections_;
  std::map<std::string, std::string> set_at_;  // native key -> where it was set
  Config config_;
};

std::string ReadFile(const std::string& path) {
  // An ifstream opens a directory and reads nothing from it, which would pass for an
  // empty config.
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw ConfigError(path + ": is a directory, not a config file");
  std::ifstream in(path);
  if (!in.good()) throw ConfigError(path + ": cannot open config file");
  std::stringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw ConfigError(path + ": cannot read config file");
  return ss.str();
}

}  // namespace

EnvLookup ProcessEnv() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (!v) return std::nullopt;
    return std::string(v);
  };
}

Config LoadConfigText(const std::string& yaml_text, const std::string& source_name,
                      const std::vector<std::string>& overrides, const EnvLookup& env) {
  Loader loader(env);
  loader.ApplyDocument(yaml_text, source_name);
  for (const auto& o : overrides) loader.ApplyOverride(o);
  return loader.Finish();
}

Config LoadConfigFile(const std::string& path, const std::vector<std::string>& overrides,
                      const EnvLookup& env) {
  Loader loader(env);
  // A file without keys is almost always a wrong path (/dev/null, a truncated or
  // placeholder file); training on all defaults would hide that.
  if (!loader.ApplyDocument(ReadFile(path), path)) {
    throw ConfigError(path + ": config file is empty (no keys, only whitespace or comments)");
  }
  for (const auto& o : overrides) loader.ApplyOverride(o);
  return loader.Finish();
}

std::string ConfigToYaml(const Config& config) {
  std::string out;
  std::string section;
  for (const auto& f : BuildConfigSchema()) {
    const size_t dot = f.key.find('.');
    if (dot == std::string::npos) {
      out += f.key + ": " + f.get(config) + "\n";
      continue;
    }
    const std::string s = f.key.substr(0, dot);
    if (s != section) {
      out += s + ":\n";
      section = s;
    }
    out += "  " + f.key.substr(dot + 1) + ": " + f.get(config) + "\n";
  }
  return out;
}

int CpuThreads(const RunConfig& run) {
  return run.threads > 0 ? static_cast<int>(run.threads) : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

int64_t GradAccumSteps(const TrainConfig& train, int64_t world_size) {
  const int64_t per_step = train.micro_batch_size * world_size;
  if (train.global_batch_size % per_step != 0) {
    throw ConfigError("train.global_batch_size " + std::to_string(train.global_batch_size) +
                      " is not divisible by train.micro_batch_size " + std::to_string(train.micro_batch_size) +
                      " x ranks " + std::to_string(world_size) + " = " + std::to_string(per_step));
  }
  return train.global_batch_size / per_step;
}

bool VerticalAccumulation(const TrainConfig& train, int64_t world_size) {
  return train.accumulation_schedule == AccumulationSchedule::kVertical && GradAccumSteps(train, world_size) > 1;
}

}  // namespace ps::trainer
