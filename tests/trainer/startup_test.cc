// Start-up (issue #9 §4): plain and chunk engines start from the same weights for the
// same seed (written in place, or straight into the chunk slots), different seeds
// differ, model.init_from's tensors are never randomly initialised, and the start-up
// time is reported.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <fstream>
#include <map>
#include <set>

#include "tests/temp_dir.h"
#include "trainer/config/config_loader.h"
#include "trainer/engine/engine.h"
#include "trainer/engine/engine_factory.h"
#include "trainer/engine/model_factory.h"
#include "trainer/io/hf_io.h"
#include "trainer/train_loop.h"
// Last: c10 headers define a glog-style CHECK that Catch must override.
#include "tests/catch.h"

namespace ps::trainer {
namespace {

using testing::TempDir;

// A model whose InitParameter calls are recorded (the engines call it for every
// parameter they initialise, from several threads).
class RecordingModel final : public models::TrainableModel {
 public:
  explicit RecordingModel(std::unique_ptr<models::TrainableModel> inner) : inner_(std::move(inner)) {}
  models::LossOutput Loss(const models::Batch& batch, models::LayerHooks* hooks) override {
    return inner_->Loss(batch, hooks);
  }
  std::vector<models::BlockParameter> BlockParameters() const override { return inner_->BlockParameters(); }
  models::ParameterCounts CountParameters() const override { return inner_->CountParameters(); }
  int num_blocks() const override { return inner_->num_blocks(); }
  void set_save_weight_leaves(bool on) override { inner_->set_save_weight_leaves(on); }
  void set_host_embedding(bool on, at::Device device, at::ScalarType dtype) override {
    inner_->set_host_embedding(on, device, dtype);
  }
  torch::nn::Module& module() override { return inner_->module(); }
  void InitParameter(const std::string& name, at::Tensor values, uint64_t seed) const override {
    {
      std::lock_guard<std::mutex> lock(*mutex_);
      initialised_->insert(name);
    }
    inner_->InitParameter(name, std::move(values), seed);
  }
  std::string accuracy_name() const override { return inner_->accuracy_name(); }

  std::shared_ptr<std::set<std::string>> initialised_ = std::make_shared<std::set<std::string>>();

 private:
  std::unique_ptr<models::TrainableModel> inner_;
  std::shared_ptr<std::mutex> mutex_ = std::make_shared<std::mutex>();
};

std::string WriteCorpus() {
  return testing::WriteRepeatedText("startup_corpus.txt", 200, "the cat sat on the mat. ");
}

Config Gpt(const std::string& name, std::vector<std::string> extra = {}) {
  std::vector<std::string> overrides = {"data.train_path=" + WriteCorpus(), "run.output_dir=" + TempDir() + "/" + name,
                                        "run.threads=2", "run.overwrite=true", "checkpoint.resume=never",
                                        "checkpoint.at_end=false"};
  overrides.insert(overrides.end(), extra.begin(), extra.end());
  return LoadConfigText(
      "model: {n_layer: 3, n_head: 2, n_embd: 64, n_positions: 32, vocab_size: 256, tie_word_embeddings: false}\n"
      "data: {format: text, seq_len: 32}\n"
      "train: {micro_batch_size: 2, global_batch_size: 2, max_steps: 2}\n"
      "logging: {level: warn, log_every: 1}\n",
      "startup.yaml", overrides, ProcessEnv());
}

// The engine's parameters (fp32 masters in chunk runs) before any step, by name.
std::map<std::string, at::Tensor> InitialParams(const Config& c, const models::InitPlan& plan,
                                                std::set<std::string>* initialised = nullptr) {
  auto model = std::make_unique<RecordingModel>(MakeModel(c));
  auto names = model->initialised_;
  // run.threads as the trainer applies it (SetUpRank): the engines' start-up work uses it.
  const int threads_before = at::get_num_threads();
  at::set_num_threads(static_cast<int>(std::max<int64_t>(1, c.run.threads)));
  const std::unique_ptr<TrainingEngine> engine = MakeEngine(std::move(model), c, at::kCPU, plan);
  at::set_num_threads(threads_before);
  if (initialised != nullptr) *initialised = *names;
  std::map<std::string, at::Tensor> out;
  for (const auto& [name, t] : engine->Save().params) out[name] = t.detach().to(at::kFloat).clone();
  return out;
}

void CheckSame(const std::map<std::string, at::Tensor>& a, const std::map<std::string, at::Tensor>& b) {
  REQUIRE(a.size() == b.size());
  for (const auto& [name, t] : a) {
    INFO(name);
    REQUIRE(b.count(name) == 1);
    CHECK(at::equal(t, b.at(name)));
  }
}

TEST_CASE("plain and chunk engines start from bitwise the same weights for a seed; another seed differs",
          "[startup]") {
  const models::InitPlan seed1{1, {}};
  const auto plain = InitialParams(Gpt("plain"), seed1);
  REQUIRE(plain.size() == 3 + 3 * 12 + 2);  // wte, wpe, lm_head; 12 per block; ln_f
  // Small chunks (several per block, the embeddings on their own), bf16 (fp32 masters
  // plus a rounded compute copy), and embeddings kept on the host outside the chunks.
  for (const auto& extra : std::vector<std::vector<std::string>>{
           {"chunk.enabled=true", "chunk.size_elements=20000"},
           {"chunk.enabled=true", "chunk.size_elements=20000", "precision.dtype=bf16"},
           {"chunk.enabled=true", "chunk.size_elements=20000", "chunk.cpu_embedding=true"}}) {
    INFO(extra.back());
    CheckSame(plain, InitialParams(Gpt("chunk", extra), seed1));
  }
  // One thread, two or four: the same values (plain above: two).
  CheckSame(plain, InitialParams(Gpt("chunk1", {"run.threads=1", "chunk.enabled=true"}), seed1));
  CheckSame(plain, InitialParams(Gpt("chunk4", {"run.threads=4", "chunk.enabled=true", "precision.dtype=bf16"}), seed1));
  CheckSame(plain, InitialParams(Gpt("plain4", {"run.threads=4"}), seed1));

  const auto other = InitialParams(Gpt("plain2"), {2, {}});
  int differ = 0;
  for (const auto& [name, t] : plain) {
    const bool constant = name.find("ln_") != std::string::npos || name.find(".bias") != std::string::npos;
    if (!constant) differ += !at::equal(t, other.at(name));
  }
  CHECK(differ == 3 + 3 * 4);  // every random matrix: wte, wpe, lm_head, 4 per block
  // The distribution holds in the chunk slots too.
  const auto chunked = InitialParams(Gpt("chunk_std", {"chunk.enabled=true"}), seed1);
  CHECK(chunked.at("h.0.mlp.c_fc.weight").std().item<double>() == Approx(0.02).epsilon(0.05));
  CHECK(chunked.at("h.0.mlp.c_proj.weight").std().item<double>() == Approx(0.02 / std::sqrt(6.0)).epsilon(0.05));
}

TEST_CASE("the engines initialise only what the plan leaves to them", "[startup]") {
  const std::set<std::string> provided = {"wte.weight", "h.1.attn.c_attn.weight", "ln_f.bias"};
  for (const bool chunks : {false, true}) {
    INFO("chunks " << chunks);
    std::set<std::string> initialised;
    const Config c = Gpt(chunks ? "skip_chunk" : "skip_plain", {chunks ? "chunk.enabled=true" : "chunk.enabled=false"});
    const auto params = InitialParams(c, {1, provided}, &initialised);
    CHECK(initialised.size() == params.size() - provided.size());
    for (const auto& name : provided) CHECK(initialised.count(name) == 0);
    if (chunks) CHECK(params.at("wte.weight").abs().sum().item<double>() == 0.0);  // a chunk slot left as allocated
    // A resumed run: the checkpoint gives every parameter, nothing is initialised.
    std::set<std::string> none;
    models::InitPlan resumed{1, {}};
    resumed.all_provided = true;
    InitialParams(c, resumed, &none);
    CHECK(none.empty());
  }
}

TEST_CASE("model.init_from: the folder's tensors are never randomly initialised, only missing heads", "[startup]") {
  // GPT-2: the folder holds every parameter.
  const Config gpt = LoadConfigText(
      "model: {init_from: tests/models/testdata/gpt2_tiny_hf}\n"
      "data: {format: text, seq_len: 16}\n"
      "train: {micro_batch_size: 2, global_batch_size: 2, max_steps: 1}\n",
      "gpt_hf.yaml", {"data.train_path=" + WriteCorpus(), "run.output_dir=" + TempDir() + "/gpt_hf"}, ProcessEnv());
  for (const bool chunks : {false, true}) {
    Config c = gpt;
    c.chunk.enabled = chunks;
    InitialWeights w = ReadInitialWeights(c);
    models::InitPlan plan{1, {}};
    for (const auto& [name, t] : w.params) plan.provided.insert(name);
    std::set<std::string> initialised;
    InitialParams(c, plan, &initialised);
    CHECK(initialised.empty());
  }
  // A BERT classifier from a masked-LM folder: only the pooler and the classifier are new.
  const std::string labelled = TempDir() + "/labelled.jsonl";
  std::ofstream(labelled) << "{\"text\": \"a b\", \"label\": 0}\n{\"text\": \"c d\", \"label\": 1}\n";
  const Config bert = LoadConfigText(
      "model: {type: bert, init_from: tests/models/testdata/bert_tiny_hf, num_labels: 2}\n"
      "data: {format: classification, seq_len: 16, train_path: " + labelled + "}\n"
      "train: {micro_batch_size: 2, global_batch_size: 2, max_steps: 1}\n",
      "bert_hf.yaml", {"run.output_dir=" + TempDir() + "/bert_hf"}, ProcessEnv());
  for (const bool chunks : {false, true}) {
    Config c = bert;
    c.chunk.enabled = chunks;
    InitialWeights w = ReadInitialWeights(c);
    models::InitPlan plan{1, {}};
    for (const auto& [name, t] : w.params) plan.provided.insert(name);
    std::set<std::string> initialised;
    InitialParams(c, plan, &initialised);
    CHECK(initialised == std::set<std::string>(w.missing.begin(), w.missing.end()));
    CHECK(initialised == std::set<std::string>{"pooler.dense.weight", "pooler.dense.bias", "classifier.weight",
                                               "classifier.bias"});
  }
}

TEST_CASE("start-up time: in TrainResult, the summary line of metrics.jsonl", "[startup]") {
  const Config c = Gpt("timed", {"chunk.enabled=true"});
  const TrainResult r = Train(c);
  CHECK(r.startup_s > 0.0);
  CHECK(r.startup_s < 60.0);
  std::ifstream in(c.run.output_dir + "/metrics.jsonl");
  std::string line, summary;
  while (std::getline(in, line)) {
    if (line.find("\"summary\": true") != std::string::npos) summary = line;
  }
  const auto at = summary.find("\"startup_s\": ");
  REQUIRE(at != std::string::npos);
  CHECK(std::stod(summary.substr(at + 13)) == r.startup_s);
}

}  // namespace
}  // namespace ps::trainer
