// base/stop_signal.h: what a rank does on SIGINT and SIGTERM.
//
// A scheduler's preemption or a Ctrl-C reaches every rank as SIGTERM or SIGINT. Two modes:
//   not armed (start-up, rendezvous, every other command): the registered cleanups run
//     (e.g. unlinking this rank's shared-memory segments), then the signal's default
//     action ends the process as before;
//   armed (the training loop): the signal only sets a flag; the loop finishes its step,
//     agrees with the other ranks to stop, saves a checkpoint and exits non-zero.
// A second signal while armed stops at once, as if unarmed.
// Cleanups run inside the signal handler, so they must be async-signal-safe.
#pragma once

#include <string>

namespace rz {

void install_stop_handlers();           // SIGINT and SIGTERM; idempotent
void arm_graceful_stop(bool armed);     // see above
int stop_signal_received();             // the first signal seen (0: none)
// A cleanup run (in the handler) before an unarmed stop; at most 8, never removed.
void register_stop_cleanup(void (*fn)());

// "SIGINT", "SIGTERM", ... ("signal 42" for one without a name).
std::string signal_name(int sig);

// The line (stderr) a rank prints when a signal reached it and it stops after its step:
// "ringzero: rank 0 received SIGINT (signal 2); ...". The launcher reads it back
// (parse_stop_notice) to say which rank got which signal, and which were only stopped
// with it.
std::string stop_notice(int rank, int sig);
bool parse_stop_notice(const std::string& line, int* rank, int* sig);

}  // namespace rz
