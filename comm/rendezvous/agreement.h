// comm/rendezvous/agreement.h: the ranks of one job agree on their world size and settings
// before they connect, or every rank stops at once naming the difference.
//
// Why: ranks started separately (two nodes, torchrun, srun, a shell with a stale RANK) can be
// given different world sizes or settings. A job whose ranks disagree either waits out the
// comm timeout (a world size: the ranks wait for peers that never come; a strategy whose
// collectives differ) or runs to the end with replicas that differ (a learning rate, a seed).
//
// Terms: a rank's *settings* are its world size and the (name, value) pairs its caller gave
// (CommOptions::agreement, in the caller's order). Rank 0's settings are the job's.
//
// Over the rendezvous store, right after a rank claimed its number (comm/factory.cpp):
//   every rank r    sets agree/r to its settings;
//   rank r > 0      reads agree/0 and compares it with its own. A difference: it claims
//                   agree/complaint ("r<TAB>line") and fails with the line. Otherwise it
//                   waits for agree/verdict, acknowledges it (agree/ack/r), and fails with
//                   the line a "X" verdict carries;
//   rank 0          reads agree/1 .. agree/(W-1) as they arrive, and agree/complaint, and
//                   compares each; sets agree/verdict to "OK", or to "X" + the first
//                   difference, which it then waits (a few seconds at most) for the ranks
//                   that agreed with it to acknowledge before it fails, taking the store with it.
// A rank beyond rank 0's world (rank 2 of 3 beside a job of 2) never appears in rank 0's
// list, but it reads agree/0, sees the other world size and complains: the difference is named
// on every rank within a few store round trips, from whichever side sees it first.
//
// The lines: "rank 1 was started with WORLD_SIZE 3, rank 0 with 2" and "rank 1's --lr 0.5
// differs from rank 0's 0.0006" (for a value that is a "; "-separated list, the first item
// that differs on each side), control characters escaped and long values cut.
//
// --comm mpi has no store: the ranks compare the same settings through the communicator
// once it is up (agree_by_collective), with the same lines.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "comm/communicator.h"
#include "comm/options.h"
#include "comm/rendezvous/store.h"

namespace rz {

struct RankSettings {
  int world = 1;
  SettingsToAgree settings;
};

// The store value: "ringzero-settings 1\nworld W\n" then "NAME\tVALUE\n" per pair, VALUE with
// '\\', '\n' and '\t' escaped. decode_rank_settings reads it back, or (a malformed value
// from a peer, a setting named twice) nullopt; it never trusts a length.
std::string encode_rank_settings(const RankSettings& s);
std::optional<RankSettings> decode_rank_settings(std::string_view text);

// The first difference between rank `rank`'s settings and rank 0's, as one line, or "" when
// they agree: the world size first, then the pairs in rank 0's order.
std::string settings_difference(int rank, const RankSettings& theirs, const RankSettings& rank0);

// The store protocol above. Throws rz::Error with the line on a difference (and, on rank 0,
// when ranks of its world have not published within timeout_s).
void agree_at_rendezvous(StoreClient& store, int rank, const RankSettings& mine, double timeout_s);

// The same comparison through a connected communicator (collective: every rank calls it).
// A 64-bit hash of each rank's settings is gathered first; only when they differ are the
// settings themselves gathered to name the difference.
void agree_by_collective(Communicator& comm, const SettingsToAgree& mine);

}  // namespace rz
