// train/val_loss.h: validation loss, and the same in bits per byte.
//
// Bits per byte (what nanochat reports beside the loss) does not depend on the tokenizer:
//   bpb = (sum of the token losses, in nats) / (ln 2 x the bytes those tokens decode to)
// over the validation positions whose target has bytes (data/tokenizer.h
// token_byte_lengths: the end-of-text token has none and is left out of both sums, as
// nanochat leaves out special tokens). The byte tokenizer's tokens are one byte each, so its
// bpb is its loss / ln 2 over the non-end-of-text positions; GPT-2 BPE tokens average about
// four bytes. Without a tokenizer there is no byte count: bpb is then unknown ("n/a").
#pragma once

#include <optional>
#include <vector>

#include "data/loader.h"
#include "model/gpt2.h"

namespace rz {

// One rank's sums over its validation batches.
struct ValSums {
  double loss_sum = 0;  // of the batches' mean losses (the val loss is loss_sum / batches)
  int batches = 0;
  double nats = 0;      // of the losses at positions whose target has bytes
  double bytes = 0;     // of those targets' byte lengths
};

// Forwards `batches` (B, T) batches of `val` from where it stands. token_bytes: per token id
// its byte length (token_byte_lengths), or null: nats and bytes stay 0. inputs and targets are
// scratch of B x T ints.
ValSums sum_val_batches(GPT2& model, DataLoader& val, int B, int T, int batches, const std::vector<int>* token_bytes,
                        std::vector<int>& inputs, std::vector<int>& targets);

// nats / (ln 2 x bytes); nothing when bytes is 0.
std::optional<double> bits_per_byte(double nats, double bytes);

}  // namespace rz
