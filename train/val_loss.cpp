// train/val_loss.cpp: validation loss and bits per byte (see val_loss.h).
#include "train/val_loss.h"

#include <cmath>

#include "base/check.h"

namespace rz {

ValSums sum_val_batches(GPT2& model, DataLoader& val, int B, int T, int batches, const std::vector<int>* token_bytes,
                        std::vector<int>& inputs, std::vector<int>& targets) {
  ValSums s;
  const size_t N = static_cast<size_t>(B) * T;
  inputs.resize(N);
  targets.resize(N);
  for (int i = 0; i < batches; ++i) {
    val.next_batch(inputs.data(), targets.data());
    s.loss_sum += model.forward(inputs.data(), targets.data(), B, T);
    ++s.batches;
    if (token_bytes == nullptr) continue;
    const std::vector<float>& losses = model.position_losses();
    for (size_t p = 0; p < N; ++p) {
      const int t = targets[p];
      const int b = t >= 0 && static_cast<size_t>(t) < token_bytes->size() ? (*token_bytes)[static_cast<size_t>(t)] : 0;
      if (b == 0) continue;
      s.nats += losses[p];
      s.bytes += b;
    }
  }
  return s;
}

std::optional<double> bits_per_byte(double nats, double bytes) {
  if (!(bytes > 0)) return std::nullopt;
  return nats / (std::log(2.0) * bytes);
}

}  // namespace rz
