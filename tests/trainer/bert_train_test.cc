// BERT through ps_train (model.type: bert, issue #12): masked-LM pre-training on byte
// text learns (loss falls, mlm_accuracy rises); the chunk runtime gives the same losses
// and accuracies as plain training (resident, evicting, activation checkpointing,
// gradient accumulation); a run resumed from a checkpoint masks and trains exactly as an
// uninterrupted one; an HF BERT folder starts a run and the run's export holds its
// parameters in HF's names; BERT-only and GPT-only keys are refused where they do not apply.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include <ATen/ATen.h>

#include "models/safetensors.h"
#include "tests/temp_dir.h"
#include "tests/trainer/killed_run.h"
#include "trainer/config/config_loader.h"
#include "trainer/io/checkpoint.h"
#include "trainer/train_loop.h"
// Last: c10 headers define a glog-style CHECK that Catch must override.
#include "tests/catch.h"

namespace ps::trainer {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

std::string WriteCorpus() { return testing::WriteRepeatedText("bert_corpus.txt", 400); }

// 3 encoder blocks of n_embd 64 (~50k parameters each); chunks of 20k elements.
Config Tiny(const std::string& name, std::vector<std::string> extra = {}) {
  std::vector<std::string> overrides = {"data.train_path=" + WriteCorpus(), "data.valid_path=" + WriteCorpus(),
                                        "run.output_dir=" + TempDir() + "/" + name, "run.threads=1",
                                        "run.overwrite=true", "checkpoint.resume=never", "checkpoint.at_end=false"};
  overrides.insert(overrides.end(), extra.begin(), extra.end());
  return LoadConfigText(
      "model: {type: bert, n_layer: 3, n_head: 2, n_embd: 64, n_positions: 32, vocab_size: 260, dropout: 0.0}\n"
      "data: {format: text, seq_len: 32}\n"
      "train: {micro_batch_size: 8, global_batch_size: 8, max_steps: 20, eval_steps: 2, grad_clip: 1.0}\n"
      "optimizer: {lr: 3.0e-3, weight_decay: 0.01}\n"
      "lr_schedule: {type: cosine, warmup_steps: 4, min_lr: 3.0e-4}\n"
      "logging: {level: warn, log_every: 1}\n",
      "bert_test.yaml", overrides, ProcessEnv());
}

Config Chunked(const std::string& name, std::vector<std::string> extra = {}) {
  extra.insert(extra.begin(), {"chunk.enabled=true", "chunk.size_elements=20000"});
  return Tiny(name, extra);
}

void CheckSame(const TrainResult& a, const TrainResult& b) {
  REQUIRE(a.losses.size() == b.losses.size());
  REQUIRE(a.accuracies.size() == a.losses.size());
  REQUIRE(b.accuracies.size() == b.losses.size());
  for (size_t i = 0; i < a.losses.size(); ++i) {
    INFO("step " << i + 1 << ": " << a.losses[i] << " vs " << b.losses[i]);
    CHECK(std::abs(a.losses[i] - b.losses[i]) <= 1e-6 * std::abs(a.losses[i]));
    CHECK(a.accuracies[i] == b.accuracies[i]);
  }
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST_CASE("BERT masked LM on byte text: loss falls, mlm_accuracy rises and is logged", "[bert][learns]") {
  const TrainResult r = Train(Tiny("learns", {"train.max_steps=150", "optimizer.lr=5.0e-3"}));
  REQUIRE(r.losses.size() == 150);
  REQUIRE(r.accuracies.size() == 150);
  CHECK(r.losses.front() > 5.0);  // ~ln(260) at the start
  CHECK(r.accuracies.front() < 0.1);
  double last_loss = 0, last_accuracy = 0;  // means of the last 10 steps (a batch has ~40 masked positions)
  for (size_t i = 140; i < 150; ++i) {
    last_loss += r.losses[i] / 10;
    last_accuracy += r.accuracies[i] / 10;
  }
  INFO("last 10 steps: loss " << last_loss << ", mlm_accuracy " << last_accuracy << "; eval " << r.final_eval_loss
                              << ", " << r.final_eval_accuracy);
  // (Modest bars: small post-LN BERTs sit near the unigram loss for hundreds of steps
  // before they use the context, HF's too.)
  CHECK(last_loss < 0.5 * r.losses.front());
  CHECK(last_accuracy > 0.2);
  CHECK(r.final_eval_loss < 0.55 * r.losses.front());
  CHECK(r.final_eval_accuracy > 0.2);
  const std::string metrics = ReadText(TempDir() + "/learns/metrics.jsonl");
  CHECK(metrics.find("\"mlm_accuracy\":") != std::string::npos);
  CHECK(metrics.find("\"eval_mlm_accuracy\":") != std::string::npos);
}

TEST_CASE("BERT through chunks: same losses and accuracies as plain training", "[bert][chunk][parity]") {
  const TrainResult plain = Train(Tiny("plain"));
  SECTION("every chunk resident") {
    const TrainResult chunked = Train(Chunked("resident"));
    CheckSame(plain, chunked);
    CHECK(chunked.evictions == 0);
  }
  SECTION("device budget of a few chunks: evicted every step") {
    const TrainResult evicted = Train(Chunked("evicted", {"chunk.device_budget_bytes=400000"}));
    CheckSame(plain, evicted);
    CHECK(evicted.evictions >= 20 * 3);
    CHECK(evicted.peak_device_chunk_bytes <= 400000);
  }
  SECTION("activation checkpointing, evicting") {
    const TrainResult ckpt = Train(Chunked("ckpt", {"model.activation_checkpointing=true", "chunk.device_budget_bytes=400000"}));
    CheckSame(plain, ckpt);
  }
  SECTION("chunk.cpu_embedding: position and token-type embeddings on the host in fp32") {
    // The embedding sum is associated differently ((p + t) first): equal to rounding.
    const TrainResult host = Train(Chunked("cpu_emb", {"chunk.cpu_embedding=true", "chunk.device_budget_bytes=400000"}));
    REQUIRE(host.losses.size() == plain.losses.size());
    for (size_t i = 0; i < host.losses.size(); ++i) {
      INFO("step " << i + 1);
      CHECK(std::abs(host.losses[i] - plain.losses[i]) <= 1e-5 * plain.losses[i]);
    }
  }
  SECTION("bf16 chunks track fp32 training") {
    const TrainResult bf16 = Train(Chunked("bf16", {"precision.dtype=bf16", "chunk.device_budget_bytes=400000"}));
    REQUIRE(bf16.losses.size() == plain.losses.size());
    for (size_t i = 0; i < bf16.losses.size(); ++i) {
      INFO("step " << i + 1);
      CHECK(std::abs(bf16.losses[i] - plain.losses[i]) <= 0.05 * plain.losses[i]);
    }
  }
  SECTION("fp16 chunks with the dynamic loss scaler train") {
    const TrainResult fp16 = Train(Chunked("fp16", {"precision.dtype=fp16", "chunk.device_budget_bytes=400000"}));
    REQUIRE(fp16.losses.size() == plain.losses.size());
    CHECK(fp16.losses.back() < 0.7 * fp16.losses.front());
  }
}

TEST_CASE("BERT gradient accumulation through chunks matches plain accumulation", "[bert][chunk][parity]") {
  const std::vector<std::string> accum = {"train.micro_batch_size=4", "train.global_batch_size=8", "train.max_steps=8"};
  const TrainResult plain = Train(Tiny("accum_plain", accum));
  std::vector<std::string> chunked_accum = accum;
  chunked_accum.push_back("chunk.device_budget_bytes=400000");
  CheckSame(plain, Train(Chunked("accum_chunk", chunked_accum)));
}

TEST_CASE("a resumed BERT run masks and trains exactly as an uninterrupted one", "[bert][resume]") {
  for (const bool chunks : {false, true}) {
    INFO("chunks " << chunks);
    const std::string tag = chunks ? "chunk" : "plain";
    auto config = [&](const std::string& dir) {
      std::vector<std::string> extra = {"run.output_dir=" + TempDir() + "/resume_" + tag + dir,
                                        "checkpoint.every_steps=5", "checkpoint.async=false", "model.dropout=0.1"};
      if (chunks) extra.insert(extra.end(), {"chunk.enabled=true", "chunk.size_elements=20000"});
      return Tiny("unused", extra);
    };
    const TrainResult whole = Train(config("_whole"));
    Config first = config("_split");
    testing::TrainKilledAfter(first, 7);  // the checkpoint of step 5 remains
    Config second = config("_split");
    second.run.overwrite = false;
    second.checkpoint.resume = "auto";
    const TrainResult resumed = Train(second);
    REQUIRE(resumed.start_step == 5);
    REQUIRE(resumed.losses.size() == 15);
    for (size_t i = 0; i < resumed.losses.size(); ++i) {
      INFO("step " << i + 6);
      CHECK(resumed.losses[i] == whole.losses[i + 5]);
      CHECK(resumed.accuracies[i] == whole.accuracies[i + 5]);
    }
  }
}

TEST_CASE("an HF BERT folder starts a run; the export holds the run's parameters in HF names", "[bert][hf]") {
  const std::string fixture = "tests/models/testdata/bert_tiny_hf";
  const std::string out = TempDir() + "/bert_hf";
  Config c = LoadConfigText(
      "model: {type: bert, init_from: " + fixture + "}\n"
      "data: {format: synthetic, seq_len: 32, synthetic_tokens: 20000}\n"
      "train: {micro_batch_size: 4, global_batch_size: 4, max_steps: 3, eval_steps: 1}\n"
      "checkpoint: {at_end: true, export_hf: true, async: false}\n"
      "logging: {level: warn}\n",
      "bert_hf.yaml", {"run.output_dir=" + out, "run.overwrite=true", "run.threads=1"}, ProcessEnv());
  // The folder's config.json gave the shape; its tokenizer the special ids.
  CHECK(c.model.n_layer == 2);
  CHECK(c.model.n_embd == 64);
  CHECK(c.model.vocab_size == 379);
  CHECK(c.bert.intermediate_size == 128);
  CHECK(c.model.layer_norm_eps == 1e-12);
  const TrainResult r = Train(c);
  REQUIRE(r.losses.size() == 3);
  // Step 1's loss is the loaded model's: a random init of this shape would start near ln(379).
  const models::TensorMap start = models::LoadSafetensors(fixture + "/model.safetensors");
  const models::TensorMap exported = models::LoadSafetensors(out + "/hf/model.safetensors");
  const CheckpointContents ckpt = ReadCheckpoint(out + "/checkpoints/step_3", CheckpointParts::kParamsOnly);
  CHECK(exported.size() == ckpt.engine.params.size());  // nothing else (no tied decoder, no buffers)
  for (const auto& [name, value] : ckpt.engine.params) {
    const std::string hf = name.rfind("cls.", 0) == 0 ? name : "bert." + name;
    INFO(name);
    REQUIRE(exported.count(hf) == 1);
    CHECK(at::equal(exported.at(hf), value));
    REQUIRE(start.count(hf) == 1);
    CHECK(!at::equal(start.at(hf), value));  // trained: every tensor moved
  }
  CHECK(fs::exists(out + "/hf/tokenizer.json"));
  CHECK(ReadText(out + "/hf/config.json").find("BertForMaskedLM") != std::string::npos);
}

// A generated 3-way task: the label is the topic the words come from (animals, weather,
// food), in sentences of 4-8 words, some as a pair whose second text is a neutral filler.
void WriteTopics(const std::string& path, int n, uint64_t seed, bool tsv) {
  const std::vector<std::vector<std::string>> topics = {
      {"cat", "dog", "horse", "bird", "fish", "mouse"},
      {"rain", "snow", "wind", "sun", "cloud", "storm"},
      {"bread", "soup", "apple", "rice", "cheese", "cake"}};
  const std::vector<std::string> filler = {"the", "a", "big", "small", "old", "new", "and", "very"};
  std::mt19937_64 rng(seed);
  std::ofstream out(path);
  if (tsv) out << "sentence\tlabel\n";  // a header line
  for (int i = 0; i < n; ++i) {
    const int label = static_cast<int>(rng() % 3);
    std::string text;
    const int words = 4 + static_cast<int>(rng() % 5);
    for (int w = 0; w < words; ++w) {
      const bool topical = rng() % 2 == 0;
      text += (w ? " " : "") + (topical ? topics[label][rng() % 6] : filler[rng() % filler.size()]);
    }
    if (tsv) {
      out << text << "\t" << label << "\n";
    } else if (i % 2 == 0) {
      out << "{\"text\": \"" << text << "\", \"label\": " << label << "}\n";
    } else {
      out << "{\"text\": \"" << text << "\", \"text_pair\": \"the end\", \"label\": " << label << "}\n";
    }
  }
}

TEST_CASE("a BERT classifier fine-tuned on a generated 3-way task learns it", "[bert][classification]") {
  for (const bool tsv : {false, true}) {
    INFO((tsv ? "tsv" : "jsonl"));
    const std::string ext = tsv ? ".tsv" : ".jsonl";
    const std::string train = TempDir() + "/topics_train" + ext, valid = TempDir() + "/topics_valid" + ext;
    WriteTopics(train, 600, 1, tsv);
    WriteTopics(valid, 90, 2, tsv);
    const Config c = LoadConfigText(
        "model: {type: bert, num_labels: 3, n_layer: 2, n_head: 2, n_embd: 64, n_positions: 64, vocab_size: 260,"
        " dropout: 0.0}\n"
        "data: {format: classification, seq_len: 64, train_path: " + train + ", valid_path: " + valid + "}\n"
        "train: {micro_batch_size: 16, global_batch_size: 16, max_steps: 400, eval_steps: 6, grad_clip: 1.0}\n"
        "optimizer: {lr: 3.0e-3, weight_decay: 0.01}\n"
        "lr_schedule: {type: cosine, warmup_steps: 10, min_lr: 3.0e-4}\n"
        "checkpoint: {at_end: false}\n"
        "logging: {level: warn}\n",
        "cls.yaml", {"run.output_dir=" + TempDir() + "/cls" + ext, "run.overwrite=true", "run.threads=1"}, ProcessEnv());
    const TrainResult r = Train(c);
    REQUIRE(r.accuracies.size() == 400);
    CHECK(r.losses.back() < 0.5 * r.losses.front());
    CHECK(r.final_eval_accuracy > 0.8);  // chance is 1/3 (measured: 0.87-0.96 over seeds and inits)
    // Evaluation covers the 90 validation examples once (5 x 16 + 10): k/90 right.
    CHECK(std::abs(r.final_eval_accuracy * 90 - std::round(r.final_eval_accuracy * 90)) < 1e-9);
    const std::string metrics = ReadText(TempDir() + "/cls" + ext + "/metrics.jsonl");
    CHECK(metrics.find("\"eval_accuracy\":") != std::string::npos);
    CHECK(metrics.find("\"final_eval_accuracy\":") != std::string::npos);
    CHECK(metrics.find("\"eval_perplexity\":") == std::string::npos);  // a classifier has none
  }
}

TEST_CASE("a BERT classifier through chunks (word embedding on the host too) matches plain training",
          "[bert][classification][chunk][parity]") {
  const std::string train = TempDir() + "/topics_parity.jsonl";
  WriteTopics(train, 200, 3, false);
  auto config = [&](const std::string& name, std::vector<std::string> extra) {
    extra.insert(extra.end(), {"run.output_dir=" + TempDir() + "/" + name, "run.overwrite=true", "run.threads=1"});
    return LoadConfigText(
        "model: {type: bert, num_labels: 3, n_layer: 2, n_head: 2, n_embd: 64, n_positions: 64, vocab_size: 260,"
        " dropout: 0.0}\n"
        "data: {format: classification, seq_len: 64, train_path: " + train + "}\n"
        "train: {micro_batch_size: 8, global_batch_size: 8, max_steps: 15}\n"
        "checkpoint: {at_end: false}\nlogging: {level: warn}\n",
        "cls_parity.yaml", extra, ProcessEnv());
  };
  const TrainResult plain = Train(config("cls_plain", {}));
  const TrainResult chunked = Train(config("cls_chunk", {"chunk.enabled=true", "chunk.size_elements=20000",
                                                         "chunk.device_budget_bytes=400000", "chunk.cpu_embedding=true"}));
  REQUIRE(chunked.losses.size() == plain.losses.size());
  for (size_t i = 0; i < plain.losses.size(); ++i) {
    INFO("step " << i + 1);
    CHECK(std::abs(chunked.losses[i] - plain.losses[i]) <= 1e-5 * plain.losses[i]);
    CHECK(chunked.accuracies[i] == plain.accuracies[i]);
  }
}

TEST_CASE("bad classification files are errors naming the file and line", "[bert][classification]") {
  auto run = [](const std::string& name, const std::string& text) {
    const std::string path = TempDir() + "/" + name;
    std::ofstream(path) << text;
    const Config c = LoadConfigText(
        "model: {type: bert, num_labels: 2, n_layer: 1, n_head: 2, n_embd: 32, n_positions: 32, vocab_size: 260}\n"
        "data: {format: classification, seq_len: 32, train_path: " + path + "}\n"
        "train: {max_steps: 1, micro_batch_size: 1, global_batch_size: 1}\n",
        "bad.yaml", {"run.output_dir=" + TempDir() + "/bad_cls", "run.overwrite=true"}, ProcessEnv());
    Train(c);
  };
  CHECK_THROWS_WITH(run("a.jsonl", "{\"text\": \"ok\", \"label\": 1}\n{\"text\": \"x\", \"label\": 2}\n"),
                    Catch::Contains("a.jsonl:2: label 2 is outside [0, model.num_labels = 2)"));
  CHECK_THROWS_WITH(run("b.jsonl", "{\"text\": \"ok\", \"label\": 1}\nnot json\n"),
                    Catch::Contains("b.jsonl:2: not a JSON object"));
  CHECK_THROWS_WITH(run("c.jsonl", "{\"label\": 1}\n"), Catch::Contains("c.jsonl:1: \"text\" (a string) is missing"));
  CHECK_THROWS_WITH(run("d.tsv", "text\tlabel\nfine\t1\nbad\tone\n"),
                    Catch::Contains("d.tsv:3: label 'one' is not an integer"));
  CHECK_THROWS_WITH(run("e.txt", "x\t1\n"), Catch::Contains("e.txt: data.format classification reads a .jsonl or a .tsv"));
  CHECK_THROWS_WITH(run("f.tsv", "text\tlabel\n"), Catch::Contains("f.tsv: holds no example"));
}

TEST_CASE("BERT-only and GPT-only keys are refused where they do not apply", "[bert][config]") {
  // The data is synthetic unless a case names its own (a config must name its data).
  auto load = [](const std::string& yaml) {
    const std::vector<std::string> overrides =
        yaml.find("data:") == std::string::npos ? std::vector<std::string>{"data.format=synthetic"}
                                                : std::vector<std::string>{};
    return LoadConfigText(yaml, "bad.yaml", overrides, [](const std::string&) { return std::optional<std::string>(); });
  };
  CHECK_THROWS_WITH(load("model: {num_labels: 2}\ndata: {format: classification, train_path: x.jsonl}\n"),
                    Catch::Contains("data.format classification trains a sequence classifier"));
  CHECK_THROWS_WITH(load("model: {intermediate_size: 64}\n"), Catch::Contains("model.intermediate_size is a BERT key"));
  CHECK_THROWS_WITH(load("model: {type: bert, num_labels: 2}\n"), Catch::Contains("set data.format: classification"));
  CHECK_THROWS_WITH(load("model: {type: bert, tie_word_embeddings: false}\n"),
                    Catch::Contains("model.tie_word_embeddings is a GPT key"));
  CHECK_THROWS_WITH(load("model: {type: bert, vocab_size: 256}\ndata: {format: text, train_path: x}\n"),
                    Catch::Contains("below 260"));
  CHECK_THROWS_WITH(load("model: {type: bert, preset: gpt2-124m}\n"),
                    Catch::Contains("unknown preset 'gpt2-124m' for model.type bert; known: bert-base"));
  const Config base = load("model: {type: bert, preset: bert-base}\n");
  CHECK(base.model.n_layer == 12);
  CHECK(base.model.vocab_size == 30522);
  CHECK(base.model.layer_norm_eps == 1e-12);
}

}  // namespace
}  // namespace ps::trainer
