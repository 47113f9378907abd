// Fuzz target: a rank's settings as another rank reads them from the rendezvous store
// (comm/rendezvous/agreement.h): "ringzero-settings 1\nworld W\n" and "NAME\tVALUE\n" lines
// with escapes. Checked: what decodes encodes back to the same text and decodes alike; a
// rank agrees with itself; and the line naming a difference (it goes to a terminal) holds no
// control character, however the values were crafted.
#include <cstdlib>
#include <string>

#include "comm/rendezvous/agreement.h"
#include "fuzz/fuzz_util.h"

namespace {

bool printable(const std::string& s) {
  for (char c : s)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return false;
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const std::optional<rz::RankSettings> s = rz::decode_rank_settings(text);
  if (!s) return 0;
  const std::string again = rz::encode_rank_settings(*s);
  const std::optional<rz::RankSettings> t = rz::decode_rank_settings(again);
  if (!t || t->world != s->world || t->settings != s->settings || rz::encode_rank_settings(*t) != again) std::abort();
  if (!rz::settings_difference(1, *s, *s).empty()) std::abort();
  // Against a fixed rank 0: the line (if any) is one printable line.
  rz::RankSettings zero{2, {{"--lr", "0.0006"}, {"--data", "a.bin (10 bytes, head 00); b.bin (20 bytes, head 01)"}}};
  const std::string diff = rz::settings_difference(1, *s, zero);
  if (!printable(diff)) std::abort();
  const std::string back = rz::settings_difference(1, zero, *s);
  if (!printable(back)) std::abort();
  return 0;
}
