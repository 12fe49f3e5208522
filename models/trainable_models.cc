#include "models/trainable_models.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <type_traits>

#include "models/lora.h"

namespace ps::models {
namespace {

// What GPT and BERT answer alike: their module holder's own methods.
template <typename Holder>
class ModelOf : public TrainableModel {
 public:
  explicit ModelOf(Holder model) : model_(std::move(model)) {}
  std::vector<BlockParameter> BlockParameters() const override { return model_->BlockParameters(); }
  ParameterCounts CountParameters() const override { return model_->CountParameters(); }
  int num_blocks() const override { return model_->num_blocks(); }
  void set_save_weight_leaves(bool on) override { model_->set_save_weight_leaves(on); }
  void set_host_embedding(bool on, at::Device device, at::ScalarType dtype) override {
    model_->set_host_embedding(on, device, dtype);
  }
  torch::nn::Module& module() override { return *model_; }
  void InitParameter(const std::string& name, at::Tensor values, uint64_t seed) const override {
    if (IsLoraParameter(name)) {
      InitLoraParameter(name, std::move(values), seed);
    } else if constexpr (std::is_same_v<Holder, Gpt>) {
      InitGptParameter(model_->config(), name, std::move(values), seed);
    } else if constexpr (std::is_same_v<Holder, Llama>) {
      InitLlamaParameter(model_->config(), name, std::move(values), seed);
    } else {
      InitBertParameter(model_->config(), name, std::move(values), seed);
    }
  }

 protected:
  Holder model_;
};

// Next-token prediction: GPT and Llama.
template <typename Holder>
class TrainableDecoder final : public ModelOf<Holder> {
 public:
  using ModelOf<Holder>::ModelOf;
  std::vector<std::string> AttachLora(const LoraConfig& config) override {
    // The blocks' Linear modules (the LM head is computed by sliced_head.h, never adapted).
    const bool gpt = std::is_same_v<Holder, Gpt>;
    const std::string blocks = gpt ? "h." : "layers.";
    std::vector<NamedLinear> linears;
    for (const auto& item : this->model_->named_modules("", /*include_self=*/false)) {
      if (item.key().rfind(blocks, 0) != 0) continue;
      if (auto linear = std::dynamic_pointer_cast<torch::nn::LinearImpl>(item.value())) {
        linears.push_back({item.key(), torch::nn::Linear(linear)});
      }
    }
    std::vector<std::string> adapted = models::AttachLora(linears, config, DefaultLoraTargets(gpt ? "gpt2" : "llama"));
    for (const auto& p : this->BlockParameters()) {
      if (!IsLoraParameter(p.name)) at::Tensor(p.tensor).requires_grad_(false);
    }
    return adapted;
  }
  LossOutput Loss(const Batch& batch, LayerHooks* hooks) override {
    return {this->model_->Loss(batch.input_ids, batch.labels, hooks, PackingOf(batch)), {}, {}};
  }
  std::vector<LossOutput> LossMany(const std::vector<Batch>& batches, LayerHooks* hooks) override {
    std::vector<at::Tensor> idx, targets;
    std::vector<Packing> packing;
    bool packed = false;
    for (const Batch& b : batches) {
      idx.push_back(b.input_ids);
      targets.push_back(b.labels);
      packing.push_back(PackingOf(b));
      packed |= !packing.back().empty();
    }
    if (!packed) packing.clear();
    std::vector<LossOutput> out;
    for (at::Tensor& loss : this->model_->LossMany(idx, targets, hooks, packing)) {
      out.push_back({std::move(loss), {}, {}});
    }
    return out;
  }

 private:
  static Packing PackingOf(const Batch& b) { return {b.position_ids, b.segment_ids}; }
};

class TrainableBert final : public ModelOf<Bert> {
 public:
  TrainableBert(Bert model, bool classifier) : ModelOf(std::move(model)), classifier_(classifier) {
    TORCH_CHECK(!classifier_ || model_->config().num_labels > 0, "a BERT classifier needs model.num_labels > 0");
    TORCH_CHECK(classifier_ || model_->config().mlm_head, "a BERT masked LM needs the MLM head");
  }
  std::vector<std::string> AttachLora(const LoraConfig& config) override {
    // Under HF's module paths, which are the parameter names: the encoder's Linear layers,
    // the pooler's and the MLM transform's (PEFT's "dense" matches those too).
    auto& m = *model_;
    std::vector<NamedLinear> linears;
    for (size_t i = 0; i < m.layers->size(); ++i) {
      auto* l = m.layers[i]->as<BertLayerImpl>();
      const std::string p = "encoder.layer." + std::to_string(i) + ".";
      linears.push_back({p + "attention.self.query", l->query});
      linears.push_back({p + "attention.self.key", l->key});
      linears.push_back({p + "attention.self.value", l->value});
      linears.push_back({p + "attention.output.dense", l->attn_out});
      linears.push_back({p + "intermediate.dense", l->intermediate});
      linears.push_back({p + "output.dense", l->output});
    }
    if (!m.pooler.is_empty()) linears.push_back({"pooler.dense", m.pooler});
    if (!m.mlm_transform.is_empty()) linears.push_back({"cls.predictions.transform.dense", m.mlm_transform});
    std::vector<std::string> adapted = models::AttachLora(linears, config, DefaultLoraTargets("bert"));
    // The rest is frozen, but for a classifier's head, which trains whole (PEFT's
    // modules_to_save of its SEQ_CLS task).
    for (const auto& p : BlockParameters()) {
      const bool head = classifier_ && p.name.rfind("classifier.", 0) == 0;
      if (!IsLoraParameter(p.name) && !head) at::Tensor(p.tensor).requires_grad_(false);
    }
    return adapted;
  }
  LossOutput Loss(const Batch& batch, LayerHooks* hooks) override {
    TORCH_CHECK(!batch.position_ids.defined() && !batch.segment_ids.defined(),
                "BERT takes no packed rows (position_ids / segment_ids): data.packing is for GPT and Llama");
    const BertInputs in{batch.input_ids, batch.token_type_ids, batch.attention_mask};
    LossOutput out;
    if (classifier_) {
      out.loss = model_->ClassificationLoss(in, batch.labels, hooks, &out.correct);
      out.counted = at::scalar_tensor(batch.labels.numel(), at::TensorOptions().dtype(at::kLong).device(out.loss.device()));
    } else {
      out.loss = model_->MlmLoss(in, batch.labels, hooks, &out.correct, &out.counted);
    }
    return out;
  }
  std::string accuracy_name() const override { return classifier_ ? "accuracy" : "mlm_accuracy"; }

 private:
  bool classifier_;
};

}  // namespace

std::unique_ptr<TrainableModel> MakeTrainableGpt(Gpt model) {
  return std::make_unique<TrainableDecoder<Gpt>>(std::move(model));
}
std::unique_ptr<TrainableModel> MakeTrainableLlama(Llama model) {
  return std::make_unique<TrainableDecoder<Llama>>(std::move(model));
}
std::unique_ptr<TrainableModel> MakeTrainableBertMlm(Bert model) {
  return std::make_unique<TrainableBert>(std::move(model), /*classifier=*/false);
}
std::unique_ptr<TrainableModel> MakeTrainableBertClassifier(Bert model) {
  return std::make_unique<TrainableBert>(std::move(model), /*classifier=*/true);
}

}  // namespace ps::models
