// BERT against HF transformers (tools/gen_bert_fixture.py): BertForMaskedLM's logits and
// masked-LM loss, and BertForSequenceClassification's logits and loss, on a padded batch
// with two segments; the HF folder mapping (old gamma/beta names, a classifier started
// from an MLM folder, export and re-import); hooks see every block once per forward;
// gradients flow to every parameter.
#include <ATen/ATen.h>

#include <cmath>
#include <filesystem>
#include <set>

#include "models/bert.h"
#include "models/hf_bert.h"
#include "models/safetensors.h"
#include "tests/temp_dir.h"
// Last: c10 headers define a glog-style CHECK that Catch must override.
#include "tests/catch.h"

namespace ps::models {
namespace {

namespace fs = std::filesystem;
const std::string kMlm = "tests/models/testdata/bert_tiny_hf";
const std::string kCls = "tests/models/testdata/bert_tiny_cls_hf";

Bert Load(const std::string& folder, BertConfig* config_out = nullptr) {
  const BertConfig config = ReadHfBertConfig(folder);
  Bert model(config);
  const HfBertWeights w = MapHfBertWeights(folder, config);
  at::NoGradGuard no_grad;
  for (const auto& p : model->BlockParameters()) p.tensor.copy_(w.params.at(p.name));
  model->eval();
  if (config_out) *config_out = config;
  return model;
}

BertInputs Inputs(const TensorMap& ref) {
  return {ref.at("input_ids"), ref.at("token_type_ids"), ref.at("attention_mask")};
}

TEST_CASE("BERT MLM logits and loss equal HF BertForMaskedLM's") {
  BertConfig c;
  Bert model = Load(kMlm, &c);
  CHECK(c.mlm_head);
  CHECK_FALSE(c.has_pooler());
  CHECK(c.n_layer == 2);
  CHECK(c.intermediate_size == 128);
  const TensorMap ref = LoadSafetensors(kMlm + "/reference.safetensors");
  at::NoGradGuard no_grad;
  const at::Tensor logits = model->MlmLogits(model->Encode(Inputs(ref)));
  // Padded positions differ from HF only where nothing reads them; compare the real tokens.
  const at::Tensor real = ref.at("attention_mask").to(at::kBool);
  CHECK((logits - ref.at("logits")).abs().masked_select(real.unsqueeze(-1)).max().item<double>() < 1e-4);
  CHECK(model->MlmLoss(Inputs(ref), ref.at("labels")).item<double>() ==
        Approx(ref.at("loss").item<double>()).epsilon(1e-5));
}

TEST_CASE("BERT classification logits and loss equal HF BertForSequenceClassification's") {
  BertConfig c;
  Bert model = Load(kCls, &c);
  CHECK(c.num_labels == 3);
  CHECK_FALSE(c.mlm_head);
  const TensorMap ref = LoadSafetensors(kCls + "/reference.safetensors");
  at::NoGradGuard no_grad;
  const at::Tensor logits = model->ClassifierLogits(model->Encode(Inputs(ref)));
  CHECK(at::allclose(logits, ref.at("logits"), 1e-4, 1e-5));
  CHECK(model->ClassificationLoss(Inputs(ref), ref.at("labels")).item<double>() ==
        Approx(ref.at("loss").item<double>()).epsilon(1e-5));
}

TEST_CASE("an MLM folder starts a classifier; old gamma/beta names load; export reads back") {
  BertConfig c = ReadHfBertConfig(kMlm);
  c.mlm_head = false;
  c.num_labels = 4;
  const HfBertWeights w = MapHfBertWeights(kMlm, c);
  CHECK(std::set<std::string>(w.missing.begin(), w.missing.end()) ==
        std::set<std::string>{"classifier.bias", "classifier.weight", "pooler.dense.bias", "pooler.dense.weight"});
  CHECK(w.params.count("encoder.layer.1.output.dense.weight") == 1);

  // A TF-era checkpoint: LayerNorm.gamma / .beta.
  const std::string old = testing::TempDir() + "/bert_gamma";
  fs::create_directories(old);
  fs::copy_file(kMlm + "/config.json", old + "/config.json", fs::copy_options::overwrite_existing);
  TensorMap renamed;
  for (auto& [name, t] : LoadSafetensors(kMlm + "/model.safetensors")) {
    std::string n = name;
    if (n.size() > 16 && n.compare(n.size() - 16, 16, "LayerNorm.weight") == 0) n = n.substr(0, n.size() - 6) + "gamma";
    if (n.size() > 14 && n.compare(n.size() - 14, 14, "LayerNorm.bias") == 0) n = n.substr(0, n.size() - 4) + "beta";
    renamed.emplace(n, t);
  }
  renamed.emplace("bert.embeddings.position_ids", at::arange(128).unsqueeze(0));
  SaveSafetensors(old + "/model.safetensors", renamed);
  const BertConfig mlm = ReadHfBertConfig(kMlm);
  const HfBertWeights from_old = MapHfBertWeights(old, mlm);
  const HfBertWeights from_new = MapHfBertWeights(kMlm, mlm);
  REQUIRE(from_old.params.size() == from_new.params.size());
  for (const auto& [name, t] : from_new.params) CHECK(at::equal(from_old.params.at(name), t));

  const std::string out = testing::TempDir() + "/bert_export";
  fs::create_directories(out);
  const auto files = WriteHfBertWeights(out, from_new.params, mlm, HfExportOptions{});
  CHECK(files == std::vector<std::string>{"config.json", "model.safetensors"});
  const TensorMap raw = LoadSafetensors(out + "/model.safetensors");
  CHECK(raw.count("bert.embeddings.word_embeddings.weight") == 1);
  CHECK(raw.count("cls.predictions.bias") == 1);
  CHECK(raw.count("cls.predictions.decoder.weight") == 0);  // tied: HF restores it
  const BertConfig back = ReadHfBertConfig(out);
  CHECK(back.mlm_head);
  CHECK(back.n_embd == mlm.n_embd);
  for (const auto& [name, t] : MapHfBertWeights(out, back).params) CHECK(at::equal(t, from_new.params.at(name)));
}

TEST_CASE("bad BERT folders are errors naming the file and key") {
  CHECK_THROWS_WITH(ReadHfBertConfig("tests/models/testdata/gpt2_tiny_hf"), Catch::Contains("model_type 'gpt2' is not bert"));
  BertConfig c = ReadHfBertConfig(kMlm);
  c.n_embd = 32;
  c.n_head = 4;
  CHECK_THROWS_WITH(MapHfBertWeights(kMlm, c), Catch::Contains("has shape [64], the model expects [32]"));
  c = ReadHfBertConfig(kMlm);
  c.n_layer = 3;
  CHECK_THROWS_WITH(MapHfBertWeights(kMlm, c), Catch::Contains("lack 'bert.encoder.layer.2."));
}

class CountingHooks : public LayerHooks {
 public:
  void PreForward(int block) override { pre.push_back(block); }
  at::Tensor PostForward(int block, at::Tensor out) override {
    post.push_back(block);
    return out;
  }
  std::vector<int> pre, post;
};

TEST_CASE("BERT calls every block's hooks once, and every parameter gets a gradient") {
  BertConfig c;
  c.n_layer = 2;
  c.n_embd = 32;
  c.n_head = 4;
  c.vocab_size = 50;
  c.num_labels = 2;
  c.nsp_head = true;
  c.dropout = c.attention_dropout = 0.0;
  torch::manual_seed(1);
  Bert model(c);
  CountingHooks hooks;
  const at::Tensor ids = at::randint(5, 50, {2, 8});
  at::Tensor labels = at::full({2, 8}, -100, at::kLong);
  labels[0][3] = 7;
  labels[1][5] = 9;
  model->MlmLoss({ids, {}, at::ones({2, 8}, at::kLong)}, labels, &hooks).backward();
  CHECK(hooks.pre == std::vector<int>{0, 1, 2, 3});
  CHECK(hooks.post == std::vector<int>{0, 1, 2, 3});
  for (const auto& p : model->BlockParameters()) {
    INFO(p.name);
    const bool unused = p.name.rfind("pooler", 0) == 0 || p.name.rfind("classifier", 0) == 0 ||
                        p.name.rfind("cls.seq_relationship", 0) == 0;
    CHECK(p.tensor.grad().defined() != unused);
  }
  CHECK(model->BlockParameters().front().used_by_blocks == std::vector<int>{0, 3});
}

}  // namespace
}  // namespace ps::models

namespace ps::models {
namespace {

TEST_CASE("BertParameterShapes lists BlockParameters' names, sizes and blocks without building") {
  for (const int64_t labels : {0, 3}) {
    BertConfig c;
    c.n_layer = 3;
    c.intermediate_size = 96;
    c.num_labels = labels;
    c.mlm_head = labels == 0;
    Bert model(c);
    const auto params = model->BlockParameters();
    const auto shapes = BertParameterShapes(c);
    REQUIRE(shapes.size() == params.size());
    for (size_t i = 0; i < shapes.size(); ++i) {
      INFO(params[i].name);
      CHECK(shapes[i].name == params[i].name);
      CHECK(shapes[i].numel == params[i].tensor.numel());
      CHECK(shapes[i].used_by_blocks == params[i].used_by_blocks);
    }
  }
}

TEST_CASE("the activation estimate counts one slice of the masked positions' logits") {
  BertConfig c;  // 2 x 128, vocabulary 30522
  const int64_t e = 128, V = 30522, encoder = (2 * (13 * e + 2 * 4 * e) + 3 * e) * 2;
  // 8192 tokens, 1229 masked: one slice of the default 2176 (2^26 / V = 2198) holds them all.
  CHECK(EstimateBertActivationBytes(c, 8192, 2) == 8192 * encoder + 1229 * V * 8);
  c.loss_slice_tokens = 256;
  CHECK(EstimateBertActivationBytes(c, 8192, 2) == 8192 * encoder + 256 * V * 8);
}

TEST_CASE("the MLM loss reports its accuracy over masked positions; no masked position is loss 0") {
  BertConfig c;
  c.dropout = c.attention_dropout = 0.0;
  Bert model(c);
  const at::Tensor ids = at::randint(5, c.vocab_size, {2, 8}, at::kLong);
  at::Tensor labels = at::full({2, 8}, -100, at::kLong);
  labels.index_put_({0, 3}, 7);
  labels.index_put_({1, 5}, 9);
  at::Tensor correct, counted;
  const at::Tensor loss = model->MlmLoss({ids, {}, {}}, labels, nullptr, &correct, &counted);
  CHECK(counted.item<int64_t>() == 2);
  const at::Tensor hidden = model->Encode({ids, {}, {}});
  const at::Tensor logits = model->MlmLogits(hidden);
  const int64_t want = (logits[0][3].argmax().item<int64_t>() == 7) + (logits[1][5].argmax().item<int64_t>() == 9);
  CHECK(correct.item<int64_t>() == want);
  const at::Tensor none = model->MlmLoss({ids, {}, {}}, at::full({2, 8}, -100, at::kLong), nullptr, &correct, &counted);
  CHECK(none.item<double>() == 0.0);
  CHECK(counted.item<int64_t>() == 0);
  none.backward();  // still connected: backward runs (zero gradients)
  CHECK(std::isfinite(loss.item<double>()));
}

}  // namespace
}  // namespace ps::models
