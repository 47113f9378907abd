// train/save_dir_lock.h: one job per save-dir.
//
// Two jobs writing one save-dir destroy each other's work: the second's --overwrite deletes
// the first's live checkpoints, --keep prunes the other's saves, a resume picks up a torn
// mix. So a job holds an exclusive flock(2) on save_dir/ringzero.lock for its whole life,
// taken before anything in the directory is touched (--overwrite's deletion included). A
// second job is refused with one line naming the holder, which the holder wrote into the
// lock file: its pid, host, start time and command line.
//
// Who holds it: the process that is or starts global rank 0. ringzero's launcher on node 0
// takes it before it starts any rank and passes the open descriptor to its ranks
// (RINGZERO_SAVE_DIR_LOCK=<fd>), so the lock lasts while the launcher or any of its ranks
// lives, and dies with the last of them (flock belongs to the open file, which the kernel
// closes on exit or crash: no stale lock survives a kill -9). A rank that no ringzero
// launcher started (torchrun, srun, mpirun, a single process) takes it itself when it is
// rank 0. Other nodes never lock: they share the directory with node 0 on purpose (a
// network file system: Linux NFS clients map flock to the server's byte-range locks, so
// two jobs on two hosts are kept apart too). A file system without locks gets a warning,
// not a refusal: nothing to enforce with.
#pragma once

#include <string>

namespace rz {

class SaveDirLock {
 public:
  SaveDirLock() = default;  // holds nothing
  ~SaveDirLock();
  SaveDirLock(SaveDirLock&& o) noexcept;
  SaveDirLock& operator=(SaveDirLock&& o) noexcept;
  SaveDirLock(const SaveDirLock&) = delete;
  SaveDirLock& operator=(const SaveDirLock&) = delete;

  // Creates save_dir if needed and takes its lock, or throws rz::Error naming the directory
  // and the job that holds it. An empty save_dir holds nothing.
  static SaveDirLock acquire(const std::string& save_dir);

  // The launcher, before it starts its ranks: on node 0 takes the lock (acquire) and
  // leaves the descriptor open across exec with RINGZERO_SAVE_DIR_LOCK naming it; on other
  // nodes holds nothing.
  static SaveDirLock for_launcher(const std::string& save_dir, int node_rank);

  // A rank, before it touches save_dir: the lock its launcher passed down (checked to be
  // save_dir's lock file), else, as global rank 0, its own (acquire); other ranks hold
  // nothing.
  static SaveDirLock for_rank(const std::string& save_dir, int rank);

  bool held() const { return fd_ >= 0; }
  static const char* file_name() { return "ringzero.lock"; }

 private:
  int fd_ = -1;
};

}  // namespace rz
