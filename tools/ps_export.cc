// ps_export: a ps_train checkpoint -> an HF folder of its architecture (GPT2LMHeadModel,
// BertForMaskedLM, LlamaForCausalLM, Qwen2/Qwen3/MistralForCausalLM): config.json,
// model.safetensors or shards + index, the run's tokenizer files and the source's
// generation_config.json, which transformers' from_pretrained loads. A LoRA run's
// checkpoint (lora.enabled) gives a PEFT adapter folder (PeftModel.from_pretrained over
// the base), or with --merge the base with the adapters merged in (trainer/io/lora_io.h).
//
//   ps_export --checkpoint runs/x/checkpoints[/step_N] --out runs/x/hf [--overwrite] [--dtype bf16]
//   ps_export --checkpoint runs/lora/checkpoints --out runs/lora/adapter [--base-model meta-llama/Llama-3.1-8B]
//   ps_export --checkpoint runs/lora/checkpoints --out runs/lora/merged --merge
//
// Exit status: 0 done, 2 bad arguments, 1 a bad checkpoint or a failed write (the
// message names the file). The folder appears complete or not at all.
#include <spdlog/spdlog.h>

#include <cxxopts.hpp>
#include <exception>
#include <iostream>

#include "trainer/config/config_loader.h"
#include "trainer/io/checkpoint.h"
#include "trainer/io/hf_io.h"
#include "trainer/io/lora_io.h"

namespace {

int Run(int argc, char** argv) {
  cxxopts::Options options("ps_export", "Writes an HF model folder from a ps_train checkpoint.");
  options.add_options()
      ("checkpoint", "a step_N checkpoint folder, or a folder of them (the newest is taken)",
       cxxopts::value<std::string>())
      ("out", "the HF folder to write", cxxopts::value<std::string>())
      ("overwrite", "replace --out when it exists")
      ("max-shard-bytes", "split the weights into shards of at most this many bytes",
       cxxopts::value<int64_t>()->default_value("5000000000"))
      ("dtype", "the weights' dtype: auto (bf16 for Llama-family models, else fp32), bf16 or fp32; default: the "
       "checkpoint's checkpoint.export_dtype", cxxopts::value<std::string>())
      ("merge", "a LoRA checkpoint: write the base model with the adapters merged in, not the adapter folder")
      ("base-model", "a LoRA checkpoint: the adapter's base_model_name_or_path (e.g. the hub name of the base); "
       "default: the run's model.init_from", cxxopts::value<std::string>())
      ("h,help", "this help");
  const auto args = options.parse(argc, argv);
  if (args.count("help")) {
    std::cout << options.help() << "\n";
    return 0;
  }
  if (!args.count("checkpoint") || !args.count("out")) {
    std::cerr << "ps_export: --checkpoint and --out are required\n" << options.help() << "\n";
    return 2;
  }
  const std::string dtype = args.count("dtype") ? args["dtype"].as<std::string>() : "";
  if (!dtype.empty() && dtype != "auto" && dtype != "bf16" && dtype != "fp32") {
    std::cerr << "ps_export: --dtype " << dtype << ": expected auto, bf16 or fp32\n";
    return 2;
  }
  const int64_t max_shard_bytes = args["max-shard-bytes"].as<int64_t>();
  if (max_shard_bytes < (int64_t{1} << 20)) {  // a shard per tensor below that: never meant
    std::cerr << "ps_export: --max-shard-bytes " << max_shard_bytes << ": must be at least 1 MiB (1048576)\n";
    return 2;
  }
  const std::string checkpoint = args["checkpoint"].as<std::string>(), out = args["out"].as<std::string>();
  const std::string folder = ps::trainer::ResolveCheckpointFolder(checkpoint);
  const auto manifest = ps::trainer::ReadCheckpoint(folder, ps::trainer::CheckpointParts::kManifestOnly);
  const bool lora = ps::trainer::ConfigOfCheckpoint(manifest.config_yaml, folder).lora.enabled;
  if (!lora && (args.count("merge") || args.count("base-model"))) {
    std::cerr << "ps_export: --merge and --base-model are for a LoRA run's checkpoint; " << folder
              << " holds a whole model (lora.enabled is false in its config)\n";
    return 2;
  }
  ps::trainer::HfExportReport report;
  if (lora) {
    ps::trainer::LoraExportOptions o;
    o.merge = args.count("merge") > 0;
    o.base_model = args.count("base-model") ? args["base-model"].as<std::string>() : "";
    o.replace = args.count("overwrite") > 0;
    o.max_shard_bytes = max_shard_bytes;
    o.export_dtype = dtype;
    report = ps::trainer::ExportLoraCheckpoint(folder, out, o);
  } else {
    report = ps::trainer::ExportCheckpoint(folder, out, args.count("overwrite") > 0, max_shard_bytes, dtype);
  }
  std::string files;
  for (const auto& f : report.files) files += (files.empty() ? "" : ", ") + f;
  spdlog::info("wrote {} ({:.1f} MB in {:.2f} s): {}", report.folder, report.bytes / 1e6, report.seconds, files);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  spdlog::set_pattern("[%H:%M:%S] %v");
  try {
    return Run(argc, argv);
  } catch (const cxxopts::exceptions::exception& e) {
    std::cerr << "ps_export: " << e.what() << "\n";
    return 2;
  } catch (const ps::trainer::ConfigError& e) {  // a bad --out, a checkpoint that fails verification
    std::cerr << "ps_export: " << e.what() << "\n";
    return 2;
  } catch (const c10::Error& e) {
    std::cerr << "ps_export: " << e.what_without_backtrace() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "ps_export: " << e.what() << "\n";
    return 1;
  }
}
