// ps_prep: text and JSONL files -> token files that ps_train reads (docs/data.md).
//
//   ps_prep --tokenizer tok.json --input a.txt b.jsonl --output-prefix out/corpus
//     -> out/corpus_train.{bin,idx} and out/corpus_valid.{bin,idx}  (data.format: megatron)
//   ps_prep ... --format llmc  -> out/corpus_train.bin, out/corpus_valid.bin (data.format: llmc)
//   echo "some text" | ps_prep --tokenizer tok.json --print-ids
//
// Documents: each line of a .jsonl/.ndjson input (its --jsonl-field string); a text input
// is one document, or one per paragraph (--text-split blank-line) or line (line). Each
// document is encoded as HF's tokenizer(text) does (with the BOS/EOS of the tokenizer's
// post-processor or tokenizer_config.json: Llama's BOS), its ids followed by the
// tokenizer's end-of-text id unless they end with it. --print-ids adds no special tokens
// (HF's add_special_tokens=False). A seeded, exact-size
// random subset of the documents (in input order) forms the validation split.
//
// Threads: the main thread reads documents and writes results in input order; a pool of
// --threads workers parses JSON, checks UTF-8 and encodes batches of documents.
//
// Exit status: 0 done; 1 bad input (a missing file, a bad line, text the tokenizer
// rejects) or a failure (threads that cannot start); 2 bad options (a value out of range,
// an input that is also an output, a tokenizer that cannot be loaded); 128 + N when signal N (SIGTERM, SIGINT, SIGHUP) stopped the run:
// the partial .tmp outputs are removed first.
//
// This file parses the options and prints; the work is in tools/prep/ (prepare.h).
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

// File names may hold commas: no splitting of --input values (cxxopts splits on ',').
#define CXXOPTS_VECTOR_DELIMITER '\0'
#include <cxxopts.hpp>

#include "tokenizer/tokenizer.h"
#include "tools/option_values.h"
#include "tools/prep/chat_setup.h"
#include "tools/prep/document_reader.h"
#include "tools/prep/options.h"
#include "tools/prep/outputs.h"
#include "tools/prep/prepare.h"
#include "tools/prep/progress.h"

namespace ps::prep {
namespace {

constexpr int kExitBadInput = 1;
constexpr int kExitUsage = 2;

// The signal that asked the run to stop (0: none). A process-wide flag because a signal
// handler can reach nothing else; lock-free, so async-signal-safe. Prepare polls it
// through Options::stop_signal and unwinds, and its writers remove their .tmp files.
std::atomic<int> g_stop_signal{0};
static_assert(std::atomic<int>::is_always_lock_free);

void OnStopSignal(int signal) { g_stop_signal.store(signal); }

void InstallStopHandlers() {
  struct sigaction action {};
  action.sa_handler = OnStopSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  for (int signal : {SIGTERM, SIGINT, SIGHUP}) sigaction(signal, &action, nullptr);
}

// "" when no input (or the tokenizer) is one of the files the run writes (same file by
// device and inode: hard links and symlinks included), else the error naming both.
std::string InputAlsoOutput(const Options& opt) {
  std::vector<std::string> inputs = opt.inputs;
  inputs.push_back(opt.tokenizer_path);
  for (const std::string& output : OutputPaths(opt)) {
    struct stat out {};
    if (::stat(output.c_str(), &out) != 0) continue;  // not there yet: no input can be it
    for (const std::string& input : inputs) {
      struct stat in {};
      if (::stat(input.c_str(), &in) == 0 && in.st_dev == out.st_dev && in.st_ino == out.st_ino) {
        return "input " + input + " is also the output file " + output +
               " (writing it would destroy the input); choose another --output-prefix";
      }
    }
  }
  return "";
}
// --format sft: the template, the trained share and what was cut or left out.
void PrintSftSummary(const Options& opt, const PrepReport& r) {
  const SftReport& s = r.sft;
  std::printf("ps_prep: chat template %s; %lld of %lld tokens trained on (--train-on %s)\n", s.template_origin.c_str(),
              static_cast<long long>(s.trained_tokens), static_cast<long long>(r.tokens),
              opt.sft.train_on == TrainOn::kAll ? "all" : "assistant");
  if (opt.sft.max_tokens > 0) {
    std::printf("ps_prep: over --max-tokens %lld: %lld truncated, %lld dropped\n",
                static_cast<long long>(opt.sft.max_tokens), static_cast<long long>(s.truncated),
                static_cast<long long>(s.dropped_overlong));
  }
  if (s.dropped_untrained > 0) {
    std::printf("ps_prep: %lld examples dropped with no token to train on (left)\n",
                static_cast<long long>(s.dropped_untrained));
  }
  if (s.turns_without_eot > 0) {
    std::printf("ps_prep: %lld assistant turns have no end-of-turn token after them (--eot-token names one)\n",
                static_cast<long long>(s.turns_without_eot));
  }
}

void PrintSummary(const Options& opt, const PrepReport& r) {
  if (opt.format == OutputFormat::kSft) PrintSftSummary(opt, r);
  const double secs = r.elapsed_s;
  std::printf("ps_prep: tokenizer %s (%s, vocab %lld, end-of-text %s)\n", opt.tokenizer_path.c_str(),
              tokenizer::ToString(r.tokenizer_kind), static_cast<long long>(r.vocab_size),
              r.eot ? std::to_string(*r.eot).c_str() : "not appended");
  std::printf("ps_prep: %lld documents (train %lld, valid %lld), %lld tokens in %.1f s: %s tokens/s, %s/s of input\n",
              static_cast<long long>(r.train.num_documents + r.valid.num_documents),
              static_cast<long long>(r.train.num_documents), static_cast<long long>(r.valid.num_documents),
              static_cast<long long>(r.tokens), secs, HumanCount(r.tokens / secs).c_str(),
              HumanBytes(r.input_bytes / secs).c_str());
  if (r.bad_inputs > 0 || r.empty_documents > 0) {
    std::printf("ps_prep: skipped %lld bad inputs (--on-bad-input skip) and %lld empty documents\n",
                static_cast<long long>(r.bad_inputs), static_cast<long long>(r.empty_documents));
  }
  for (const SplitReport* s : {&r.train, &r.valid}) {
    if (s->num_documents == 0) {
      std::printf("  (no validation split: %s)\n", !r.want_valid         ? "none requested"
                                                    : r.counted_docs < 2 ? "fewer than 2 documents"
                                                                         : "its documents were skipped");
      continue;
    }
    for (const std::string& f : s->files) {
      std::printf("  %s  %s  (%lld documents, %lld %s tokens)\n", f.c_str(),
                  HumanBytes(static_cast<double>(std::filesystem::file_size(f))).c_str(),
                  static_cast<long long>(s->num_documents), static_cast<long long>(s->num_tokens),
                  s->dtype.c_str());
    }
  }
}

// The tokenizer of --tokenizer, or null after printing why it cannot be loaded (a missing
// file, an unsupported model or pipeline component: named with its file and field).
std::unique_ptr<tokenizer::Tokenizer> LoadTokenizerOrExplain(const std::string& path) {
  try {
    return tokenizer::LoadTokenizer(path);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ps_prep: --tokenizer: %s\n", ErrorText(e).c_str());
    return nullptr;
  }
}

// --format and --text-split into `opt`: "" or what is wrong.
std::string ParseChoices(const cxxopts::ParseResult& args, Options& opt) {
  const std::string format = args["format"].as<std::string>();
  if (format == "megatron") opt.format = OutputFormat::kMegatron;
  else if (format == "llmc") opt.format = OutputFormat::kLlmc;
  else if (format == "sft") opt.format = OutputFormat::kSft;
  else return "--format " + format + ": expected megatron, llmc or sft";
  const std::string split = args["text-split"].as<std::string>();
  if (split == "file") opt.text_split = TextSplit::kFile;
  else if (split == "blank-line") opt.text_split = TextSplit::kBlankLine;
  else if (split == "line") opt.text_split = TextSplit::kLine;
  else return "--text-split " + split + ": expected file, blank-line or line";
  return "";
}

// "NAME=VALUE" -> {NAME, VALUE}; OptionError naming `option` without an '=' or a NAME.
std::pair<std::string, std::string> NameValue(const std::string& option, const std::string& text) {
  const size_t eq = text.find('=');
  if (eq == std::string::npos || eq == 0) throw tools::OptionError("--" + option + " " + text + ": expected NAME=VALUE");
  return {text.substr(0, eq), text.substr(eq + 1)};
}

// The --format sft options into opt.sft; OptionError for a bad value.
void ParseSftOptions(const cxxopts::ParseResult& args, Options& opt) {
  SftOptions& sft = opt.sft;
  const std::string input = args["sft-input"].as<std::string>();
  const std::vector<std::pair<const char*, SftInput>> inputs = {{"auto", SftInput::kAuto}, {"messages", SftInput::kMessages},
      {"sharegpt", SftInput::kShareGpt}, {"alpaca", SftInput::kAlpaca}, {"prompt-completion", SftInput::kPromptCompletion}};
  const auto found = std::find_if(inputs.begin(), inputs.end(), [&](const auto& p) { return input == p.first; });
  if (found == inputs.end()) throw tools::OptionError("--sft-input " + input + ": expected auto, messages, sharegpt, alpaca or prompt-completion");
  sft.input = found->second;
  const auto list = [&](const char* name) {
    return args.count(name) ? args[name].as<std::vector<std::string>>() : std::vector<std::string>{};
  };
  for (const std::string& f : list("sft-field")) {
    const auto [key, name] = NameValue("sft-field", f);
    const auto it = std::find_if(sft.fields.begin(), sft.fields.end(), [&](const auto& p) { return p.first == key; });
    if (it == sft.fields.end()) throw tools::OptionError("--sft-field " + f + ": unknown key " + key);
    it->second = name;
  }
  for (const std::string& v : list("template-var")) sft.template_vars.push_back(NameValue("template-var", v));
  sft.eot_tokens = list("eot-token");
  if (args.count("chat-template")) sft.chat_template_path = args["chat-template"].as<std::string>();
  const std::string train_on = args["train-on"].as<std::string>();
  if (train_on != "assistant" && train_on != "all") throw tools::OptionError("--train-on " + train_on + ": expected assistant or all");
  sft.train_on = train_on == "all" ? TrainOn::kAll : TrainOn::kAssistant;
  sft.max_tokens = tools::IntOption("max-tokens", args["max-tokens"].as<std::string>(), 0, INT64_MAX);
  const std::string overlong = args["overlong"].as<std::string>();
  if (overlong != "truncate" && overlong != "drop") throw tools::OptionError("--overlong " + overlong + ": expected truncate or drop");
  sft.overlong = overlong == "drop" ? Overlong::kDrop : Overlong::kTruncate;
}

// The chat template and token sets of --format sft, or null after printing why not.
std::unique_ptr<ChatSetup> LoadChatSetupOrExplain(const Options& opt, const tokenizer::Tokenizer& tok) {
  try {
    return std::make_unique<ChatSetup>(LoadChatSetup(opt, tok));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ps_prep: %s\n", ErrorText(e).c_str());
    return nullptr;
  }
}

// --print-ids: one line of space-separated ids per line of stdin (its newline not encoded).
int PrintIds(const tokenizer::Tokenizer* tok) {
  std::string line, out;
  int64_t line_no = 0;
  while (std::getline(std::cin, line)) {
    ++line_no;
    const int64_t bad = FirstInvalidUtf8(line);
    if (bad >= 0) throw BadInput("stdin:" + std::to_string(line_no) + ": invalid UTF-8 at column " + std::to_string(bad + 1));
    out.clear();
    for (int32_t id : tok->Encode(line)) {
      if (!out.empty()) out += ' ';
      out += std::to_string(id);
    }
    out += '\n';
    std::fwrite(out.data(), 1, out.size(), stdout);
  }
  return 0;
}

void AddOptions(cxxopts::Options& spec) {
  // clang-format off
  spec.add_options()
    ("tokenizer", "tokenizer.json, vocab.json/merges.txt/vocab.txt, or a folder holding them", cxxopts::value<std::string>())
    ("input", "input files: .jsonl/.ndjson (one JSON object per line) or text", cxxopts::value<std::vector<std::string>>())
    ("output-prefix", "writes <prefix>_train.* and <prefix>_valid.*", cxxopts::value<std::string>())
    ("format", "megatron (.bin + .idx), llmc (one shard per split), or sft (chat/instruction JSONL: .bin + .idx + .mask)",
     cxxopts::value<std::string>()->default_value("megatron"))
    ("jsonl-field", "the JSON string field holding a document's text", cxxopts::value<std::string>()->default_value("text"))
    ("text-split", "documents of a text input: file (the whole file), blank-line (paragraphs) or line",
     cxxopts::value<std::string>()->default_value("file"))
    // Numbers are read as text and converted by tools/option_values.h (errors name the option).
    ("valid-fraction", "fraction of documents for validation, in [0, 1) (rounded; at least 1 when > 0)",
     cxxopts::value<std::string>()->default_value("0.01"))
    ("valid-docs", "exactly N validation documents, N >= 0 (instead of --valid-fraction)",
     cxxopts::value<std::string>())
    ("seed", "seed of the train/valid split, 0 to 2^64 - 1", cxxopts::value<std::string>()->default_value("1234"))
    ("threads", "encoding threads, 1 to 1024 (default: the number of cores)", cxxopts::value<std::string>())
    ("on-bad-input", "stop (exit 1 naming file:line) or skip (count and go on)",
     cxxopts::value<std::string>()->default_value("stop"))
    ("no-eot", "do not append the end-of-text token after each document")
    ("print-ids", "encode each line of stdin; print its ids space-separated, one line per line")
    ("h,help", "this help");
  spec.add_options("sft (--format sft; docs/data.md, \"Chat and instruction data\")")
    ("sft-input", "layout of a line: auto, messages, sharegpt, alpaca or prompt-completion",
     cxxopts::value<std::string>()->default_value("auto"))
    ("sft-field", "KEY=NAME: the field NAME holds KEY (messages, role, content, conversations, from, value, "
     "instruction, input, output, system, prompt, completion, tools); repeatable", cxxopts::value<std::vector<std::string>>())
    ("chat-template", "a Jinja file to render with (default: the tokenizer folder's chat template)",
     cxxopts::value<std::string>())
    ("template-var", "NAME=VALUE: a template variable (VALUE as JSON, else a string), e.g. enable_thinking=false; "
     "repeatable", cxxopts::value<std::vector<std::string>>())
    ("eot-token", "a token that ends an assistant turn, besides the eos tokens; repeatable",
     cxxopts::value<std::vector<std::string>>())
    ("train-on", "assistant (its turns and their end-of-turn token) or all", cxxopts::value<std::string>()->default_value("assistant"))
    ("max-tokens", "longest example in tokens, 0 = no limit", cxxopts::value<std::string>()->default_value("0"))
    ("overlong", "an example over --max-tokens: truncate or drop", cxxopts::value<std::string>()->default_value("truncate"));
  // clang-format on
}

int Main(int argc, char** argv) {
  cxxopts::Options spec("ps_prep", "Text / JSONL -> token files for ps_train (docs/data.md)");
  AddOptions(spec);
  // cxxopts leaves positional options out of the option list: the usage line names --input.
  spec.parse_positional({"input"});
  spec.custom_help("--tokenizer T --input FILE [FILE...] --output-prefix P [OPTION...]\n"
                   "  ps_prep --tokenizer T --print-ids < text\n\n"
                   "  --input FILE...: .jsonl/.ndjson (a document per line, --jsonl-field) or text\n"
                   "  (documents per --text-split); the files after --input are inputs too");
  spec.positional_help("");
  Options opt;
  cxxopts::ParseResult args;
  try {
    args = spec.parse(argc, argv);
  } catch (const cxxopts::exceptions::exception& e) {
    std::fprintf(stderr, "ps_prep: %s (see --help)\n", e.what());
    return kExitUsage;
  }
  if (args.count("help")) {
    std::printf("%s\n", spec.help().c_str());
    return 0;
  }
  const auto usage = [](const std::string& msg) {
    std::fprintf(stderr, "ps_prep: %s (see --help)\n", msg.c_str());
    return kExitUsage;
  };
  if (!args.count("tokenizer")) return usage("--tokenizer is required");
  opt.tokenizer_path = args["tokenizer"].as<std::string>();
  // An unusable tokenizer is a bad option: exit 2 before anything is read or written.
  const std::unique_ptr<tokenizer::Tokenizer> tok = LoadTokenizerOrExplain(opt.tokenizer_path);
  if (tok == nullptr) return kExitUsage;
  if (args.count("print-ids")) return PrintIds(tok.get());

  if (!args.count("input")) return usage("--input is required");
  if (!args.count("output-prefix")) return usage("--output-prefix is required");
  opt.inputs = args["input"].as<std::vector<std::string>>();
  opt.output_prefix = args["output-prefix"].as<std::string>();
  opt.jsonl_field = args["jsonl-field"].as<std::string>();
  const std::string choice_error = ParseChoices(args, opt);
  if (!choice_error.empty()) return usage(choice_error);
  try {
    opt.valid_fraction = tools::FloatOption("valid-fraction", args["valid-fraction"].as<std::string>(), "[0, 1)",
                                            [](double v) { return v >= 0 && v < 1; });
    if (args.count("valid-docs")) {
      if (args.count("valid-fraction")) return usage("give --valid-fraction or --valid-docs, not both");
      opt.valid_docs = tools::IntOption("valid-docs", args["valid-docs"].as<std::string>(), 0, INT64_MAX);
    }
    opt.seed = tools::Uint64Option("seed", args["seed"].as<std::string>());
    if (opt.format == OutputFormat::kSft) ParseSftOptions(args, opt);
    opt.threads = args.count("threads")
                      ? static_cast<int>(tools::IntOption("threads", args["threads"].as<std::string>(), 1, kMaxThreads))
                      : std::clamp(static_cast<int>(std::thread::hardware_concurrency()), 1, kMaxThreads);
  } catch (const tools::OptionError& e) {
    return usage(e.what());
  }
  const std::string bad = args["on-bad-input"].as<std::string>();
  if (bad != "stop" && bad != "skip") return usage("--on-bad-input " + bad + ": expected stop or skip");
  opt.skip_bad_input = bad == "skip";
  opt.append_eot = !args.count("no-eot");
  const std::string clash = InputAlsoOutput(opt);
  if (!clash.empty()) return usage(clash);
  std::unique_ptr<ChatSetup> chat;
  if (opt.format == OutputFormat::kSft && (chat = LoadChatSetupOrExplain(opt, *tok)) == nullptr) return kExitUsage;
  InstallStopHandlers();
  opt.stop_signal = &g_stop_signal;
  PrintSummary(opt, Prepare(opt, *tok, chat.get()));
  return 0;
}

}  // namespace
}  // namespace ps::prep

int main(int argc, char** argv) {
  try {
    return ps::prep::Main(argc, argv);
  } catch (const ps::prep::Stopped& e) {
    std::fprintf(stderr, "ps_prep: %s\n", e.what());
    return 128 + e.signal();  // as a shell reports a process killed by that signal
  } catch (const ps::prep::BadInput& e) {
    std::fprintf(stderr, "ps_prep: %s\n", e.what());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ps_prep: %s\n", ps::prep::ErrorText(e).c_str());
  }
  return ps::prep::kExitBadInput;
}
