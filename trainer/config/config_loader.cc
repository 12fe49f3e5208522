#include "trainer/config/config_loader.h"

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

#include "trainer/config/config_schema.h"
#include "trainer/config/config_steps.h"

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
    places_.source = source;
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
    ResolveModel(config_, places_);
    ResolveDataFormat(config_, places_);
    ValidateConfig(config_, places_);
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
      auto it = places_.set_at.find(target);
      if (it != places_.set_at.end()) {
        throw ConfigError(where + ": " + label + ": '" + target + "' is already set at " + it->second);
      }
    }
    try {
      f.set(config_, value);
    } catch (const std::invalid_argument& e) {
      throw ConfigError(where + ": " + label + ": " + e.what() + " (" + f.type_name + ")");
    }
    places_.set_at[target] = where;
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

  std::string At(const std::string& key) const { return places_.At(key); }

  const EnvLookup& env_;
  std::vector<FieldSpec> fields_;
  std::vector<AliasSpec> aliases_;
  std::set<std::string> sections_;
  KeyPlaces places_;  // where each native key was set, and the document's name
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

}  // namespace ps::trainer
