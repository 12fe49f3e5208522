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
// checkpoint is sampled with its adapters merged into the base (trainer/lora_io.h,
// MergedParams: model.init_from must still be there). The summary on
// stderr gives prefill and decode tokens/s.
//
//   ps_sample --checkpoint runs/x/checkpoints --prompt "Once upon a time" --max-new-tokens 50
//   ps_sample --hf runs/x/hf --prompt "..." --temperature 0.8 --top-k 40 --top-p 0.95 --seed 1
//   ps_sample --hf Qwen2.5-0.5B --prompt "..." --temperature 0 --threads 2
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

#include "models/causal_lm.h"
#include "models/gpt.h"
#include "models/hf_folder.h"
#include "models/hf_gpt2.h"
#include "models/hf_llama.h"
#include "models/llama.h"
#include "models/sampling.h"
#include "models/safetensors.h"
#include "tokenizer/tokenizer.h"
#include "tools/option_values.h"
#include "trainer/checkpoint.h"
#include "trainer/hf_io.h"
#include "trainer/llama_keys.h"
#include "trainer/lora_io.h"

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

LoadedModel FromHf(const std::string& folder, at::Device device) {
  LoadedModel m;
  if (ps::models::IsHfLlamaArchitecture(ps::models::ReadHfArchitecture(folder))) {
    const ps::models::LlamaConfig config = ps::models::ReadHfLlamaConfig(folder);
    const ps::models::Llama model(config, ps::models::kUninitialised);
    m.lm = ps::models::MakeCausalLm(Filled(model, ps::models::MapHfLlamaWeights(folder, config), device));
  } else {
    const ps::models::GptConfig config = ps::models::ReadHfGpt2Config(folder);
    const ps::models::Gpt model(config, ps::models::kUninitialised);
    m.lm = ps::models::MakeCausalLm(Filled(model, ps::models::MapHfGpt2Weights(folder, config), device));
  }
  m.tokenizer = folder;
  m.eos_ids = ps::models::ReadHfEosTokenIds(folder);
  return m;
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
      ("tokenizer", "tokenizer file or folder (default: the model's)", cxxopts::value<std::string>())
      ("prompt", "text to continue", cxxopts::value<std::string>()->default_value(""))
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
      ("print-ids", "print the prompt's ids and the new ids (two lines) instead of the text")
      ("dump-logits", "write the prompt's ids and logits to this safetensors file, do not generate",
       cxxopts::value<std::string>())
      ("h,help", "this help");
  return options;
}

void PrintIds(const std::vector<int64_t>& ids) {
  for (size_t i = 0; i < ids.size(); ++i) std::cout << (i ? " " : "") << ids[i];
  std::cout << "\n";
}

// Continues `prompt`, streaming the text to stdout as it grows: what decoding all ids
// adds to what is shown (a multi-byte character split over tokens shows once complete);
// or, with `print_ids`, the prompt's ids and the new ones at the end. The timings go to
// stderr.
void SampleText(ps::models::CausalLm& lm, const ps::tokenizer::Tokenizer& tokenizer, const std::vector<int64_t>& prompt,
                const ps::models::SamplingOptions& sampling, uint64_t seed, bool print_ids) {
  at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(seed);
  std::vector<int32_t> all(prompt.begin(), prompt.end());
  std::string printed = print_ids ? "" : tokenizer.Decode(all);
  std::cout << printed << std::flush;
  const ps::models::Generation out = ps::models::Generate(lm, prompt, sampling, generator, [&](int64_t id) {
    if (print_ids) return;
    all.push_back(static_cast<int32_t>(id));
    const std::string text = tokenizer.Decode(all);
    if (text.size() > printed.size() && text.compare(0, printed.size(), printed) == 0 &&
        text.find("\xEF\xBF\xBD", printed.size()) == std::string::npos) {
      std::cout << text.substr(printed.size()) << std::flush;
      printed = text;
    }
  });
  if (print_ids) {
    PrintIds(prompt);
    PrintIds(out.tokens);
  } else {
    const std::string text = tokenizer.Decode(all);
    if (text.size() > printed.size() && text.compare(0, printed.size(), printed) == 0) {
      std::cout << text.substr(printed.size());
    }
    std::cout << "\n";
  }
  std::cout << std::flush;
  const ps::models::GenerationStats& s = out.stats;
  spdlog::info("{}: prefill {} tokens in {:.3f} s ({:.1f} tokens/s), decode {} tokens in {:.3f} s ({:.1f} tokens/s); {}",
               sampling.use_cache ? "KV cache" : "no cache", s.prompt_tokens, s.prefill_s, s.prefill_tokens_per_s(),
               s.decode_tokens, s.decode_s, s.decode_tokens_per_s(), s.stopped ? "stopped at an eos token" : "max-new-tokens reached");
  if (sampling.use_cache && s.window_steps > 0) {
    spdlog::info("{} steps past n_positions {} reran the window of the last {} tokens", s.window_steps,
                 lm.n_positions(), lm.n_positions());
  }
}

int Run(int argc, char** argv) {
  cxxopts::Options options = OptionsOf();
  const auto args = options.parse(argc, argv);
  if (args.count("help")) {
    std::cout << options.help() << "\n";
    return 0;
  }
  if (args.count("checkpoint") + args.count("hf") != 1) {
    std::cerr << "ps_sample: give exactly one of --checkpoint and --hf\n";
    return 2;
  }
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

  const LoadedModel loaded = args.count("hf") ? FromHf(args["hf"].as<std::string>(), device)
                                              : FromCheckpoint(args["checkpoint"].as<std::string>(), device);
  ps::models::CausalLm& lm = *loaded.lm;
  const std::string tokenizer_path = args.count("tokenizer") ? args["tokenizer"].as<std::string>() : loaded.tokenizer;
  TORCH_CHECK(!tokenizer_path.empty(), "no tokenizer: the model names none (pass --tokenizer)");
  const auto tokenizer = ps::tokenizer::LoadTokenizer(tokenizer_path);
  TORCH_CHECK(tokenizer->vocab_size() <= lm.vocab_size(), tokenizer_path, ": the tokenizer has ",
              tokenizer->vocab_size(), " ids, more than the model's vocab_size ", lm.vocab_size());

  std::vector<int64_t> prompt;  // as HF's tokenizer(prompt): Llama's BOS, none for GPT-2
  for (int32_t id : tokenizer->EncodeWithSpecialTokens(args["prompt"].as<std::string>())) prompt.push_back(id);
  const auto eot = tokenizer->end_of_text_id();
  if (prompt.empty()) {
    TORCH_CHECK(eot.has_value(), "an empty prompt needs an end-of-text token to start from; give --prompt");
    prompt.push_back(*eot);  // as GPT-2 samples unconditionally
  }
  if (args.count("dump-logits")) {
    at::NoGradGuard no_grad;
    TORCH_CHECK(static_cast<int64_t>(prompt.size()) <= lm.n_positions(), "the prompt has ", prompt.size(),
                " tokens, more than n_positions ", lm.n_positions());
    const at::Tensor ids = at::tensor(prompt, at::kLong).unsqueeze(0);
    const at::Tensor logits = lm.Forward(ids.to(device)).to(at::kCPU, at::kFloat);
    ps::models::SaveSafetensors(args["dump-logits"].as<std::string>(), {{"ids", ids}, {"logits", logits}});
    return 0;
  }
  sampling.use_cache = !args.count("no-cache");
  if (!args.count("ignore-eos")) {
    sampling.stop_tokens = loaded.eos_ids;
    if (eot) sampling.stop_tokens.push_back(*eot);
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
