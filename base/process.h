// base/process.h: whether another process on this host is still there.
//
// Used wherever a pid left in shared state stands for "someone is working on this": a peer
// rank's slot (comm), a staging directory of `ringzero prepare` (data).
#pragma once

namespace rz {

// Whether process pid has exited. A zombie (killed, not yet reaped by its parent or by
// init) counts as exited: kill(pid, 0) still succeeds on it. False when it cannot be told.
bool process_gone(int pid);

}  // namespace rz
