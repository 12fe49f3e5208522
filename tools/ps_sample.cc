// ps_sample: what a model writes. Loads a ps_train checkpoint or an HF GPT-2 folder and
// its tokenizer, and continues a prompt (greedy, or sampled with temperature, top-k,
// top-p and a seed) on the CPU or a GPU. No KV cache: each new token reruns the window
// (models/sampling.h).
//
//   ps_sample --checkpoint runs/x/checkpoints --prompt "Once upon a time" --max-new-tokens 50
//   ps_sample --hf runs/x/hf --prompt "..." --temperature 0.8 --top-k 40 --top-p 0.95 --seed 1
//
// --dump-logits FILE writes the prompt's ids and logits [1, T, vocab] as safetensors
// instead of generating (tools/check_hf_export.py compares them with transformers').
// Exit status: 0 done, 2 bad arguments, 1 a bad model folder, checkpoint or tokenizer.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <torch/cuda.h>

#include <cxxopts.hpp>
#include <exception>
#include <filesystem>
#include <iostream>

#include "models/gpt.h"
#include "models/hf_gpt2.h"
#include "models/sampling.h"
#include "models/safetensors.h"
#include "tokenizer/tokenizer.h"
#include "trainer/checkpoint.h"
#include "tools/option_values.h"
#include "trainer/hf_io.h"

namespace {

namespace fs = std::filesystem;

struct LoadedModel {
  ps::models::GptConfig config;
  ps::models::TensorMap params;  // ps names
  std::string tokenizer;         // where its tokenizer is ("" = none known)
};

LoadedModel FromHf(const std::string& folder) {
  LoadedModel m;
  m.config = ps::models::ReadHfGpt2Config(folder);
  m.params = ps::models::MapHfGpt2Weights(folder, m.config);
  m.tokenizer = folder;
  return m;
}

LoadedModel FromCheckpoint(const std::string& path) {
  const std::string folder = ps::trainer::ResolveCheckpointFolder(path);
  auto contents = ps::trainer::ReadCheckpoint(folder, ps::trainer::CheckpointParts::kParamsOnly);
  const ps::trainer::Config config = ps::trainer::ConfigOfCheckpoint(contents.config_yaml, folder);
  TORCH_CHECK(config.model_type == ps::models::ModelType::kGpt, folder,
              ": not a GPT checkpoint (model.type is not gpt); ps_sample samples GPT models only");
  LoadedModel m;
  m.config = config.model;
  m.config.dropout = 0.0;
  m.params = std::move(contents.engine.params);
  m.tokenizer = ps::trainer::TokenizerSource(config);
  spdlog::info("checkpoint {} (step {})", folder, contents.step);
  return m;
}

ps::models::Gpt BuildModel(const LoadedModel& loaded, at::Device device) {
  ps::models::Gpt model(loaded.config);
  at::NoGradGuard no_grad;
  for (const auto& p : model->BlockParameters()) {
    auto it = loaded.params.find(p.name);
    TORCH_CHECK(it != loaded.params.end(), "the model lacks parameter '", p.name, "'");
    p.tensor.copy_(it->second);
  }
  model->to(device);
  model->eval();
  return model;
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

int Run(int argc, char** argv) {
  cxxopts::Options options("ps_sample", "Continues a prompt with a ps_train checkpoint or an HF GPT-2 folder.");
  options.add_options()
      ("checkpoint", "a step_N checkpoint folder, or a folder of them (the newest)", cxxopts::value<std::string>())
      ("hf", "an HF GPT-2 folder (config.json, model.safetensors, tokenizer)", cxxopts::value<std::string>())
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
      ("ignore-eos", "keep going after the end-of-text token")
      ("dump-logits", "write the prompt's ids and logits to this safetensors file, do not generate",
       cxxopts::value<std::string>())
      ("h,help", "this help");
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
  const std::string device_name = args["device"].as<std::string>();
  if (device_name != "cpu" && device_name != "cuda" && device_name != "auto") {
    std::cerr << "ps_sample: --device must be cpu, cuda or auto, not '" << device_name << "'\n";
    return 2;
  }
  const bool cuda = device_name == "cuda" || (device_name == "auto" && torch::cuda::is_available());
  TORCH_CHECK(!cuda || torch::cuda::is_available(), "--device cuda: this build or machine has no CUDA device");
  const at::Device device = cuda ? at::Device(at::kCUDA, 0) : at::Device(at::kCPU);

  const LoadedModel loaded = args.count("hf") ? FromHf(args["hf"].as<std::string>())
                                              : FromCheckpoint(args["checkpoint"].as<std::string>());
  const std::string tokenizer_path = args.count("tokenizer") ? args["tokenizer"].as<std::string>() : loaded.tokenizer;
  TORCH_CHECK(!tokenizer_path.empty(), "no tokenizer: the model names none (pass --tokenizer)");
  const auto tokenizer = ps::tokenizer::LoadTokenizer(tokenizer_path);
  TORCH_CHECK(tokenizer->vocab_size() <= loaded.config.vocab_size, tokenizer_path, ": the tokenizer has ",
              tokenizer->vocab_size(), " ids, more than the model's vocab_size ", loaded.config.vocab_size);
  ps::models::Gpt model = BuildModel(loaded, device);

  std::vector<int64_t> prompt;  // as HF's tokenizer(prompt): Llama's BOS, none for GPT-2
  for (int32_t id : tokenizer->EncodeWithSpecialTokens(args["prompt"].as<std::string>())) prompt.push_back(id);
  const auto eot = tokenizer->end_of_text_id();
  if (prompt.empty()) {
    TORCH_CHECK(eot.has_value(), "an empty prompt needs an end-of-text token to start from; give --prompt");
    prompt.push_back(*eot);  // as GPT-2 samples unconditionally
  }
  if (args.count("dump-logits")) {
    at::NoGradGuard no_grad;
    TORCH_CHECK(static_cast<int64_t>(prompt.size()) <= loaded.config.n_positions, "the prompt has ", prompt.size(),
                " tokens, more than n_positions ", loaded.config.n_positions);
    const at::Tensor ids = at::tensor(prompt, at::kLong).unsqueeze(0);
    const at::Tensor logits = model->forward(ids.to(device)).to(at::kCPU, at::kFloat);
    ps::models::SaveSafetensors(args["dump-logits"].as<std::string>(), {{"ids", ids}, {"logits", logits}});
    return 0;
  }
  if (!args.count("ignore-eos") && eot) sampling.stop_token = *eot;
  at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(seed);
  std::vector<int32_t> all(prompt.begin(), prompt.end());
  std::string printed = tokenizer->Decode(all);
  std::cout << printed << std::flush;
  // Streams the text as it grows: print what decoding all ids adds to what is shown (a
  // multi-byte character split over tokens shows once complete).
  ps::models::Generate(model, prompt, sampling, generator, [&](int64_t id) {
    all.push_back(static_cast<int32_t>(id));
    const std::string text = tokenizer->Decode(all);
    if (text.size() > printed.size() && text.compare(0, printed.size(), printed) == 0 &&
        text.find("\xEF\xBF\xBD", printed.size()) == std::string::npos) {
      std::cout << text.substr(printed.size()) << std::flush;
      printed = text;
    }
  });
  const std::string text = tokenizer->Decode(all);
  if (text.size() > printed.size() && text.compare(0, printed.size(), printed) == 0) {
    std::cout << text.substr(printed.size());
  }
  std::cout << "\n";
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
