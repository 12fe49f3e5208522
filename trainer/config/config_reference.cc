// ConfigReferenceMarkdown (config_loader.h): the README's config reference, rendered
// from the schema (config_schema.h).
#include <string>

#include "trainer/config/config_loader.h"
#include "trainer/config/config_schema.h"

namespace ps::trainer {

namespace {
// A Markdown table cell: a literal '|' (the enums' "one of a|b") must not end the cell.
std::string Cell(const std::string& text) {
  std::string out;
  for (const char ch : text) out += ch == '|' ? std::string("\\|") : std::string(1, ch);
  return out;
}
}  // namespace

std::string ConfigReferenceMarkdown() {
  const Config defaults;
  std::string out = "| key | type | default | meaning |\n|---|---|---|---|\n";
  for (const auto& f : BuildConfigSchema()) {
    out += "| `" + f.key + "` | " + Cell(f.type_name) + " | `" + f.get(defaults) + "` | " + Cell(f.help) + " |\n";
  }
  out += "\nAccepted for PatrickStar/DeepSpeed configs (setting both an alias and its key is an error):\n\n";
  out += "| alias | sets | note |\n|---|---|---|\n";
  for (const auto& a : BuildConfigAliases()) {
    out += "| `" + a.key + "` | " + (a.target.empty() ? std::string("(nothing)") : "`" + a.target + "`") + " | " + Cell(a.note) +
           " |\n";
  }
  return out;
}

}  // namespace ps::trainer
