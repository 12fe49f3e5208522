// ps_sample: what a model writes. Loads a ps_train checkpoint (model.type gpt or llama)
// or an HF folder (GPT2LMHeadModel; LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM,
// MistralForCausalLM) and its tokenizer, and continues a prompt (greedy, or sampled with
// temperature, top-k, top-p and a seed) on the CPU or a GPU, in fp32. With a KV cache
// (models/sampling.h): the prompt is computed once, then one token per step; past the
// model's n_positions each token reruns the window of the last n_positions tokens.
// --no-cache reruns the window for every token (the reference, for comparison).
// Generation stops at the tokenizer's end-of-text token and at the eos ids of the
// folder's generation_config.json (else config.json; for a checkpoint, those of its
// model.init_from folder when it is still there), unless --ignore-eos. A LoRA run's
// checkpoint is sampled with its adapters merged into the base (trainer/io/lora_io.h,
// MergedParams: model.init_from must still be there); --adapter merges a PEFT adapter
// folder into an HF model. The summary on stderr gives prefill and decode tokens/s.
// --chat holds a conversation instead: each line of stdin is a user turn, rendered with
// the tokenizer folder's chat template and a generation prompt, as ps_prep --format sft
// renders training data (tools/chat_session.h); each reply ends at an end-of-turn token.
//
//   ps_sample --checkpoint runs/x/checkpoints --prompt "Once upon a time" --max-new-tokens 50
//   ps_sample --hf runs/x/hf --prompt "..." --temperature 0.8 --top-k 40 --top-p 0.95 --seed 1
//   ps_sample --hf Qwen2.5-0.5B --prompt "..." --temperature 0 --threads 2
//   ps_sample --hf models/llama-3.1-8b-instruct --adapter my-adapter --chat --system "Be brief."
//
// --dump-logits FILE writes the prompt's ids and logits [1, T, vocab] as safetensors
// instead of generating (tools/check_hf_export.py compares them with transformers').
// Exit status: 0 done, 2 bad arguments, 1 a bad model folder, checkpoint or tokenizer.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <torch/cuda.h>

#include <cxxopts.hpp>
#include <exception>
#include <filesystem>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <unistd.h>
#include <vector>

#include "models/causal_lm.h"
#include "models/gpt.h"
#include "models/hf_folder.h"
#include "models/hf_gpt2.h"
#include "models/hf_llama.h"
#include "models/llama.h"
#include "models/lora_config.h"
#include "models/peft_adapter.h"
#include "models/safetensors.h"
#include "models/sampling.h"
#include "tokenizer/tokenizer.h"
#include "tools/chat_session.h"
#include "tools/option_values.h"
#include "tools/prep/chat_setup.h"
#include "tools/prep/options.h"
#include "tools/text_stream.h"
#include "trainer/config/llama_keys.h"
#include "trainer/io/checkpoint.h"
#include "trainer/io/hf_io.h"
#include "trainer/io/lora_io.h"

namespace {

namespace fs = std::filesystem;

struct LoadedModel {
  std::unique_ptr<ps::models::CausalLm> lm;  // on the chosen device, eval mode
  std::string tokenizer;                     // where its tokenizer is ("" = none known)
  std::vector<int64_t> eos_ids;              // generation_config.json's (or config.json's)
};

// `model` (parameters allocated, uninitialised) holding `params` (ps names, any float
// dtype: converted while copied), on `device`.
template <typename Model>
Model Filled(Model model, const ps::models::TensorMap& params, at::Device device) {
  at::NoGradGuard no_grad;
  for (const auto& p : model->BlockParameters()) {
    auto it = params.find(p.name);
    TORCH_CHECK(it != params.end(), "the model lacks parameter '", p.name, "'");
    p.tensor.copy_(it->second);
  }
  model->to(device);
  return model;
}

// Merges the PEFT adapter folder `adapter` ("": none) into `weights` (ps names) of an HF
// model whose module paths start with `hf_prefix`.
void MergeAdapter(ps::models::TensorMap& weights, const std::string& adapter, const std::string& hf_prefix) {
  if (adapter.empty()) return;
  const ps::models::PeftAdapter a = ps::models::ReadPeftAdapter(adapter, hf_prefix);
  try {
    ps::models::MergeLoraInto(weights, a.weights, ps::models::LoraScale(a.lora), at::kFloat);
  } catch (const c10::Error& e) {
    TORCH_CHECK(false, adapter, ": ", e.what_without_backtrace());
  }
  // modules_to_save: tensors the adapter trained whole replace the base's, as PEFT's
  // merge_and_unload does.
  for (const auto& [name, tensor] : a.weights) {
    if (ps::models::IsLoraParameter(name)) continue;
    const auto it = weights.find(name);
    TORCH_CHECK(it != weights.end() && it->second.sizes() == tensor.sizes(), adapter, ": '", name,
                "' (modules_to_save) is not a tensor of this model of shape ", tensor.sizes());
    it->second = tensor;
  }
  spdlog::info("merged the adapter {} (r {}, lora_alpha {}, {} factors)", adapter, a.lora.r, a.lora.alpha,
               a.weights.size());
}

// The HF folder `folder`, with the PEFT adapter folder `adapter` merged in ("": none).
LoadedModel FromHf(const std::string& folder, const std::string& adapter, at::Device device) {
  LoadedModel m;
  if (ps::models::IsHfLlamaArchitecture(ps::models::ReadHfArchitecture(folder))) {
    const ps::models::LlamaConfig config = ps::models::ReadHfLlamaConfig(folder);
    ps::models::TensorMap weights = ps::models::MapHfLlamaWeights(folder, config);
    MergeAdapter(weights, adapter, "model.");
    m.lm = ps::models::MakeCausalLm(Filled(ps::models::Llama(config, ps::models::kUninitialised), weights, device));
  } else {
    const ps::models::GptConfig config = ps::models::ReadHfGpt2Config(folder);
    ps::models::TensorMap weights = ps::models::MapHfGpt2Weights(folder, config);
    MergeAdapter(weights, adapter, "transformer.");
    m.lm = ps::models::MakeCausalLm(Filled(ps::models::Gpt(config, ps::models::kUninitialised), weights, device));
  }
  m.tokenizer = folder;
  m.eos_ids = ps::models::ReadHfEosTokenIds(folder);
  return m;
}

// The base model of `ps_sample --adapter A` without --hf: A's base_model_name_or_path when
// it is a folder here.
std::string AdapterBase(const std::string& adapter) {
  const std::string config_path = (fs::path(adapter) / ps::models::kPeftConfigFile).string();
  const nlohmann::json j = ps::models::ReadHfJson(config_path);
  const std::string base = j.is_object() ? j.value("base_model_name_or_path", std::string()) : std::string();
  TORCH_CHECK(!base.empty() && fs::is_directory(base), config_path, ": base_model_name_or_path '", base,
              "' is not a folder here; give the base model's HF folder with --hf");
  return base;
}

LoadedModel FromCheckpoint(const std::string& path, at::Device device) {
  const std::string folder = ps::trainer::ResolveCheckpointFolder(path);
  auto contents = ps::trainer::ReadCheckpoint(folder, ps::trainer::CheckpointParts::kParamsOnly);
  const ps::trainer::Config config = ps::trainer::ConfigOfCheckpoint(contents.config_yaml, folder);
  // A LoRA run's checkpoint holds the adapters: sample the base with them merged in.
  const ps::models::TensorMap params =
      config.lora.enabled ? ps::trainer::MergedParams(contents.engine.params, config) : contents.engine.params;
  LoadedModel m;
  switch (config.model_type) {
    case ps::models::ModelType::kGpt: {
      ps::models::GptConfig shape = config.model;
      shape.dropout = 0.0;
      m.lm = ps::models::MakeCausalLm(Filled(ps::models::Gpt(shape, ps::models::kUninitialised), params, device));
      break;
    }
    case ps::models::ModelType::kLlama: {
      const ps::models::Llama model(ps::trainer::LlamaConfigOf(config), ps::models::kUninitialised);
      m.lm = ps::models::MakeCausalLm(Filled(model, params, device));
      break;
    }
    case ps::models::ModelType::kBert:
      TORCH_CHECK(false, folder, ": a BERT checkpoint (model.type bert); ps_sample samples GPT and Llama models");
  }
  m.tokenizer = ps::trainer::TokenizerSource(config);
  const std::string& init_from = config.model.init_from;
  if (!init_from.empty() && fs::is_directory(init_from)) m.eos_ids = ps::models::ReadHfEosTokenIds(init_from);
  spdlog::info("checkpoint {} (step {})", folder, contents.step);
  return m;
}

// Bounds of the numeric options, checked before anything is loaded.
constexpr int64_t kMaxNewTokens = 1000000;
constexpr int64_t kMaxTopK = 100000000;

// The sampling options; ps::tools::OptionError naming the first option out of its range.
ps::models::SamplingOptions SamplingOf(const cxxopts::ParseResult& args) {
  using ps::tools::FloatOption;
  using ps::tools::IntOption;
  ps::models::SamplingOptions s;
  s.max_new_tokens = IntOption("max-new-tokens", args["max-new-tokens"].as<std::string>(), 1, kMaxNewTokens);
  s.temperature = FloatOption("temperature", args["temperature"].as<std::string>(), "[0, 100]",
                              [](double v) { return v >= 0 && v <= 100; });
  s.top_k = IntOption("top-k", args["top-k"].as<std::string>(), 0, kMaxTopK);
  s.top_p = FloatOption("top-p", args["top-p"].as<std::string>(), "(0, 1]", [](double v) { return v > 0 && v <= 1; });
  return s;
}

cxxopts::Options OptionsOf() {
  cxxopts::Options options("ps_sample", "Continues a prompt with a ps_train checkpoint or an HF folder.");
  options.add_options()
      ("checkpoint", "a step_N checkpoint folder, or a folder of them (the newest)", cxxopts::value<std::string>())
      ("hf", "an HF folder (config.json, safetensors weights, tokenizer): GPT-2, Llama, Qwen2, Qwen3, Mistral",
       cxxopts::value<std::string>())
      ("adapter", "a PEFT LoRA adapter folder, merged into the --hf model (without --hf: into its "
       "base_model_name_or_path, when that is a folder)", cxxopts::value<std::string>())
      ("tokenizer", "tokenizer file or folder (default: the model's)", cxxopts::value<std::string>())
      ("prompt", "text to continue (with --chat: the first user turn)", cxxopts::value<std::string>()->default_value(""))
      ("chat", "a conversation: each line of stdin is a user turn, rendered with the tokenizer's chat template "
       "and a generation prompt; each reply ends at an end-of-turn token")
      ("system", "--chat: the system message", cxxopts::value<std::string>()->default_value(""))
      ("chat-template", "--chat: a .jinja file instead of the tokenizer folder's template",
       cxxopts::value<std::string>())
      ("template-var", "--chat: NAME=VALUE, a template variable (VALUE as JSON, else a string), e.g. "
       "enable_thinking=false; repeatable", cxxopts::value<std::vector<std::string>>())
      // Numbers are read as text and converted by tools/option_values.h (errors name the option).
      ("max-new-tokens", "tokens to generate, 1 to 1000000", cxxopts::value<std::string>()->default_value("64"))
      ("temperature", "in [0, 100]; 0 = greedy", cxxopts::value<std::string>()->default_value("1.0"))
      ("top-k", "keep the k most likely tokens, 0 to 100000000; 0 = all",
       cxxopts::value<std::string>()->default_value("0"))
      ("top-p", "nucleus, in (0, 1]: keep the most likely tokens up to this probability",
       cxxopts::value<std::string>()->default_value("1.0"))
      ("seed", "sampling seed, 0 to 2^64 - 1", cxxopts::value<std::string>()->default_value("1234"))
      ("device", "cpu | cuda | auto", cxxopts::value<std::string>()->default_value("auto"))
      ("threads", "CPU threads, 0 to 1024; 0 = LibTorch's default", cxxopts::value<std::string>()->default_value("0"))
      ("no-cache", "no KV cache: every token reruns the window (slow; the reference)")
      ("ignore-eos", "keep going after the end-of-text token and the model's eos ids")
      ("print-ids", "print the prompt's ids and the new ids (two lines; with --chat, per turn) instead of the text")
      ("dump-logits", "write the prompt's ids and logits to this safetensors file, do not generate",
       cxxopts::value<std::string>())
      ("h,help", "this help");
  return options;
}

void LogStats(const ps::models::GenerationStats& s, const ps::models::SamplingOptions& sampling, int64_t n_positions) {
  spdlog::info("{}: prefill {} tokens in {:.3f} s ({:.1f} tokens/s), decode {} tokens in {:.3f} s ({:.1f} tokens/s); {}",
               sampling.use_cache ? "KV cache" : "no cache", s.prompt_tokens, s.prefill_s, s.prefill_tokens_per_s(),
               s.decode_tokens, s.decode_s, s.decode_tokens_per_s(), s.stopped ? "stopped at an eos token" : "max-new-tokens reached");
  if (sampling.use_cache && s.window_steps > 0) {
    spdlog::info("{} steps past n_positions {} reran the window of the last {} tokens", s.window_steps, n_positions,
                 n_positions);
  }
}

// Continues `prompt`, streaming the text to stdout as it grows (tools/text_stream.h);
// or, with `print_ids`, the prompt's ids and the new ones at the end. The timings go to
// stderr.
void SampleText(ps::models::CausalLm& lm, const ps::tokenizer::Tokenizer& tokenizer, const std::vector<int64_t>& prompt,
                const ps::models::SamplingOptions& sampling, uint64_t seed, bool print_ids) {
  at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(seed);
  std::vector<int32_t> all(prompt.begin(), prompt.end());
  if (!print_ids) std::cout << tokenizer.Decode(all) << std::flush;
  ps::tools::TextStream stream(tokenizer, std::cout, all);
  const ps::models::Generation out = ps::models::Generate(lm, prompt, sampling, generator, [&](int64_t id) {
    if (print_ids) return;
    all.push_back(static_cast<int32_t>(id));
    stream.Show(all);
  });
  if (print_ids) {
    ps::tools::PrintIds(std::cout, prompt);
    ps::tools::PrintIds(std::cout, out.tokens);
  } else {
    stream.Finish(all);
    std::cout << "\n";
  }
  std::cout << std::flush;
  LogStats(out.stats, sampling, lm.n_positions());
}

// ps_sample --chat: the tokenizer folder's chat template (or --chat-template) with
// --template-var values, a conversation on stdin (tools/chat_session.h).
void Chat(ps::models::CausalLm& lm, const ps::tokenizer::Tokenizer& tokenizer, const std::string& tokenizer_path,
          const cxxopts::ParseResult& args, const ps::models::SamplingOptions& sampling, uint64_t seed) {
  ps::prep::Options opt;
  opt.tokenizer_path = tokenizer_path;
  if (args.count("chat-template")) opt.sft.chat_template_path = args["chat-template"].as<std::string>();
  const auto vars = args.count("template-var") ? args["template-var"].as<std::vector<std::string>>()
                                                : std::vector<std::string>();
  for (const std::string& v : vars) {
    const size_t eq = v.find('=');
    if (eq == std::string::npos || eq == 0) throw ps::tools::OptionError("--template-var " + v + ": not NAME=VALUE");
    opt.sft.template_vars.emplace_back(v.substr(0, eq), v.substr(eq + 1));
  }
  const ps::prep::ChatSetup setup = ps::prep::LoadChatSetup(opt, tokenizer);
  spdlog::info("chat template: {}; one user turn per line, end with Ctrl-D", setup.template_origin);
  ps::tools::ChatSession session(setup, tokenizer, args["system"].as<std::string>());
  at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(seed);
  const ps::tools::ChatIo io{std::cin, std::cout, std::cerr, isatty(STDIN_FILENO) != 0, args.count("print-ids") > 0};
  const int64_t replies =
      ps::tools::RunChat(lm, session, tokenizer, sampling, generator, args["prompt"].as<std::string>(), io);
  spdlog::info("{} replies", replies);
}

// The model the arguments name, on `device`.
LoadedModel LoadModel(const cxxopts::ParseResult& args, at::Device device) {
  const std::string adapter = args.count("adapter") ? args["adapter"].as<std::string>() : "";
  if (args.count("checkpoint")) return FromCheckpoint(args["checkpoint"].as<std::string>(), device);
  const std::string hf = args.count("hf") ? args["hf"].as<std::string>() : AdapterBase(adapter);
  return FromHf(hf, adapter, device);
}

// The prompt's ids, as HF's tokenizer(prompt) gives them: Llama's BOS, none for GPT-2; an
// empty prompt is the end-of-text token (as GPT-2 samples unconditionally).
std::vector<int64_t> PromptIds(const ps::tokenizer::Tokenizer& tokenizer, const std::string& text) {
  std::vector<int64_t> prompt;
  for (int32_t id : tokenizer.EncodeWithSpecialTokens(text)) prompt.push_back(id);
  const auto eot = tokenizer.end_of_text_id();
  if (prompt.empty()) {
    TORCH_CHECK(eot.has_value(), "an empty prompt needs an end-of-text token to start from; give --prompt");
    prompt.push_back(*eot);
  }
  return prompt;
}

void DumpLogits(ps::models::CausalLm& lm, const std::vector<int64_t>& prompt, at::Device device, const std::string& path) {
  at::NoGradGuard no_grad;
  TORCH_CHECK(static_cast<int64_t>(prompt.size()) <= lm.n_positions(), "the prompt has ", prompt.size(),
              " tokens, more than n_positions ", lm.n_positions());
  const at::Tensor ids = at::tensor(prompt, at::kLong).unsqueeze(0);
  const at::Tensor logits = lm.Forward(ids.to(device)).to(at::kCPU, at::kFloat);
  ps::models::SaveSafetensors(path, {{"ids", ids}, {"logits", logits}});
}

// Exit status 2 naming the problem when the options do not go together; 0 when they do.
int CheckCombination(const cxxopts::ParseResult& args) {
  const char* problem = nullptr;
  if (args.count("checkpoint") + args.count("hf") + (args.count("checkpoint") ? 0 : args.count("adapter")) == 0 ||
      args.count("checkpoint") + args.count("hf") > 1) {
    problem = "give exactly one of --checkpoint and --hf (or --adapter alone, for its base_model_name_or_path)";
  } else if (args.count("adapter") && args.count("checkpoint")) {
    problem = "--adapter merges a PEFT folder into an --hf model; a LoRA checkpoint's adapters are merged already";
  } else if (args.count("chat") && args.count("dump-logits")) {
    problem = "--chat and --dump-logits do not go together";
  } else if (!args.count("chat") && (args.count("system") || args.count("chat-template") || args.count("template-var"))) {
    problem = "--system, --chat-template and --template-var need --chat";
  }
  if (problem == nullptr) return 0;
  std::cerr << "ps_sample: " << problem << "\n";
  return 2;
}

int Run(int argc, char** argv) {
  cxxopts::Options options = OptionsOf();
  const auto args = options.parse(argc, argv);
  if (args.count("help")) {
    std::cout << options.help() << "\n";
    return 0;
  }
  if (const int status = CheckCombination(args)) return status;
  ps::models::SamplingOptions sampling = SamplingOf(args);
  const uint64_t seed = ps::tools::Uint64Option("seed", args["seed"].as<std::string>());
  const int64_t threads = ps::tools::IntOption("threads", args["threads"].as<std::string>(), 0, 1024);
  const std::string device_name = args["device"].as<std::string>();
  if (device_name != "cpu" && device_name != "cuda" && device_name != "auto") {
    std::cerr << "ps_sample: --device must be cpu, cuda or auto, not '" << device_name << "'\n";
    return 2;
  }
  if (threads > 0) at::set_num_threads(static_cast<int>(threads));
  const bool cuda = device_name == "cuda" || (device_name == "auto" && torch::cuda::is_available());
  TORCH_CHECK(!cuda || torch::cuda::is_available(), "--device cuda: this build or machine has no CUDA device");
  const at::Device device = cuda ? at::Device(at::kCUDA, 0) : at::Device(at::kCPU);

  const LoadedModel loaded = LoadModel(args, device);
  ps::models::CausalLm& lm = *loaded.lm;
  const std::string tokenizer_path = args.count("tokenizer") ? args["tokenizer"].as<std::string>() : loaded.tokenizer;
  TORCH_CHECK(!tokenizer_path.empty(), "no tokenizer: the model names none (pass --tokenizer)");
  const auto tokenizer = ps::tokenizer::LoadTokenizer(tokenizer_path);
  TORCH_CHECK(tokenizer->vocab_size() <= lm.vocab_size(), tokenizer_path, ": the tokenizer has ",
              tokenizer->vocab_size(), " ids, more than the model's vocab_size ", lm.vocab_size());
  sampling.use_cache = !args.count("no-cache");
  const auto eot = tokenizer->end_of_text_id();
  if (!args.count("ignore-eos")) {
    sampling.stop_tokens = loaded.eos_ids;
    if (eot) sampling.stop_tokens.push_back(*eot);
  }
  if (args.count("chat")) {
    Chat(lm, *tokenizer, tokenizer_path, args, sampling, seed);
    return 0;
  }
  const std::vector<int64_t> prompt = PromptIds(*tokenizer, args["prompt"].as<std::string>());
  if (args.count("dump-logits")) {
    DumpLogits(lm, prompt, device, args["dump-logits"].as<std::string>());
    return 0;
  }
  SampleText(lm, *tokenizer, prompt, sampling, seed, args.count("print-ids") > 0);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  spdlog::set_default_logger(spdlog::stderr_color_st("ps_sample"));  // stdout is the text
  spdlog::set_pattern("[%H:%M:%S] %v");
  try {
    return Run(argc, argv);
  } catch (const cxxopts::exceptions::exception& e) {
    std::cerr << "ps_sample: " << e.what() << "\n";
    return 2;
  } catch (const ps::tools::OptionError& e) {
    std::cerr << "ps_sample: " << e.what() << "\n";
    return 2;
  } catch (const c10::Error& e) {
    std::cerr << "ps_sample: " << e.what_without_backtrace() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "ps_sample: " << e.what() << "\n";
    return 1;
  }
}
