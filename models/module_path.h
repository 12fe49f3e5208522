// Module paths and parameter names as HF and PEFT spell them: "layers.0.self_attn.q_proj"
// is a module's path, "layers.0.self_attn.q_proj.weight" a parameter's name, "q_proj"
// the module's name (what lora.target_modules matches). Pure string functions.
#pragma once

#include <string>

namespace ps::models {

// The module a parameter belongs to: "layers.0.mlp.up_proj.weight" -> "layers.0.mlp.up_proj".
inline std::string ModuleOfParameter(const std::string& name) { return name.substr(0, name.rfind('.')); }

// The last part of a module path: "layers.0.self_attn.q_proj" -> "q_proj" (a path without
// dots is its own last part).
inline std::string ModuleName(const std::string& path) {
  const size_t dot = path.rfind('.');
  return dot == std::string::npos ? path : path.substr(dot + 1);
}

}  // namespace ps::models
