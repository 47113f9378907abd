// base/stop_signal.h: what a rank does on SIGINT and SIGTERM.
//
// A scheduler's preemption or a Ctrl-C reaches every rank as SIGTERM or SIGINT. Two modes:
//   not armed (start-up, rendezvous, every other command): the registered cleanups run
//     (e.g. unlinking this rank's shared-memory segments), then the signal's default
//     action ends the process as before;
//   armed (the training loop): the signal only sets a flag; the loop finishes its step,
//     agrees with the other ranks to stop, saves a checkpoint and exits non-zero.
// A second request while armed stops at once, as if unarmed. What counts as a second one:
//   - not a signal within kRepeatWindowS of the first: one request is often delivered twice
//     (SIGTERM to every process of a job reaches a rank directly and through its launcher;
//     timeout(1) signals its child and then its own process group; scancel, systemd and a
//     cgroup stop signal every process at once), and each copy must not cost the checkpoint;
//   - never ringzero's launcher passing the first request on (forward_stop, kStopForwarded):
//     a rank that got it directly too is still saving; only the launcher's kStopNow (the user
//     asked it twice) stops the rank at once.
// Cleanups run inside the signal handler, so they must be async-signal-safe.
#pragma once

#include <sys/types.h>

#include <string>

namespace rz {

// Seconds after the first stop signal during which another one is the same request.
inline constexpr double kRepeatWindowS = 1.0;
// sigqueue values by which ringzero's launcher passes a stop on to its ranks.
inline constexpr int kStopForwarded = 0x525a0001;  // the first request: finish the step, save, exit
inline constexpr int kStopNow = 0x525a0002;        // asked twice: stop at once, as if unarmed

void install_stop_handlers();           // SIGINT and SIGTERM; idempotent
void arm_graceful_stop(bool armed);     // see above
int stop_signal_received();             // the first signal seen (0: none)
// The launcher's side: sig to pid with the value above (now: kStopNow). False when pid is gone.
bool forward_stop(pid_t pid, int sig, bool now);
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
