// The TrainableModel of each architecture and task: GPT, Llama, BERT MLM, BERT
// classifier. Only what builds a model includes this (the engines see trainable.h).
#pragma once

#include <memory>

#include "models/bert.h"
#include "models/gpt.h"
#include "models/llama.h"
#include "models/trainable.h"

namespace ps::models {

// The models may be built initialised or not (kUninitialised; the engines fill them).
std::unique_ptr<TrainableModel> MakeTrainableGpt(Gpt model);
// A Llama-family decoder (next-token prediction, as GPT; LossMany included).
std::unique_ptr<TrainableModel> MakeTrainableLlama(Llama model);
// BERT with its MLM head (labels: -100 where nothing is predicted).
std::unique_ptr<TrainableModel> MakeTrainableBertMlm(Bert model);
// BERT with its sequence-classification head (config.num_labels > 0; labels [B]).
std::unique_ptr<TrainableModel> MakeTrainableBertClassifier(Bert model);

}  // namespace ps::models
