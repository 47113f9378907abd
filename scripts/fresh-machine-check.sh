#!/usr/bin/env bash
# scripts/fresh-machine-check.sh [--device-shaped] [--ccache DIR] [--keep]: the README's two commands on a
# machine that has never seen ringzero, made fresh each time, so that a package this
# machine happens to have cannot hide one that install-deps.sh forgets.
#
# Default: a minimal Debian 12 root (debootstrap --variant=minbase bookworm), a clean copy
# of HEAD (git archive: committed files only, no build folders), and, as root inside it
# (chroot; a minimal root has no sudo), what a new user runs:
#   install-deps  bash scripts/install-deps.sh
#   tools         every runtime tool the two commands use: gnuplot, the fortunes files,
#                 mpirun, clang's libFuzzer and sanitizer runtimes, gcc's ASan/TSan,
#                 OpenSSL's libcrypto
#   build         bash scripts/build.sh, only the targets the next two stages need
#   main job      bash scripts/run.sh --steps 40 (its pictures must exist afterwards)
#   quick tests   a quick subset of the suite through CTest
# --device-shaped: the GPU machine's situation instead. A minimal root with only the
# compiler, CMake and ninja (no library -dev package of ringzero's), the CUDA toolkit
# bind-mounted read-only from /usr/local/cuda, and .deps from scripts/carry-deps.sh; there
# `bash scripts/device-check.sh build` configures and builds exactly as the device phases
# do and checks that every binary they run is linked and loads; each GPU test must then
# skip (77: no GPU here) rather than fail to start.
#
# --ccache DIR: the root installs ccache just before its build and compiles through it, with
# the host's DIR (made if missing) bind-mounted as its cache; CI passes one, so that a rerun
# compiles only what changed instead of all of ringzero twice (about 5 minutes each on 2
# cores). ccache replays a compile only for the same compiler and the same preprocessed
# input, so a header the root lacks still fails the build; configure and linking run
# for real either way. Without --ccache the roots compile everything from nothing.
#
# One line per stage with its time; the first stage that fails is named and the script
# exits 1 (2 for bad usage or a host without what it needs). Whatever it mounted is
# unmounted and the root removed on every exit, failure and SIGINT/SIGTERM included
# (--keep keeps the root and its logs for a look; the mounts are undone either way). It
# installs nothing on the host; the host needs root, debootstrap, git and network access
# to the Debian archive (MIRROR, default http://deb.debian.org/debian).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
REPO=$(pwd)
MODE=fresh
KEEP=0
CCACHE_HOST=""
usage="usage: [--device-shaped] [--ccache DIR] [--keep]"
while [ $# -gt 0 ]; do
  case "$1" in
    --device-shaped) MODE=device ;;
    --keep) KEEP=1 ;;
    --ccache)
      [ $# -ge 2 ] && [ -n "$2" ] || { echo "fresh-machine-check: --ccache needs a directory ($usage)" >&2; exit 2; }
      CCACHE_HOST=$2; shift ;;
    *) echo "fresh-machine-check: unknown argument '$1' ($usage)" >&2; exit 2 ;;
  esac
  shift
done
MIRROR=${MIRROR:-http://deb.debian.org/debian}
NAME="fresh-machine-check${MODE/fresh/}"
[ "$MODE" = device ] && NAME="fresh-machine-check --device-shaped"

die() { echo "$NAME: $*" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || die "needs root (debootstrap, mount and chroot)"
command -v debootstrap >/dev/null 2>&1 || die "needs debootstrap on the host (apt-get install -y debootstrap; nothing else is installed here)"
git -C "$REPO" rev-parse --verify -q HEAD >/dev/null || die "needs a git checkout: it copies HEAD, not the working tree"
if [ "$MODE" = device ]; then
  [ -x /usr/local/cuda/bin/nvcc ] || die "--device-shaped needs the CUDA toolkit at /usr/local/cuda"
fi
if [ -n "$CCACHE_HOST" ]; then
  mkdir -p "$CCACHE_HOST" && [ -d "$CCACHE_HOST" ] && [ -w "$CCACHE_HOST" ] ||
    die "--ccache $CCACHE_HOST: not a writable directory"
  CCACHE_HOST=$(cd "$CCACHE_HOST" && pwd -P)
fi

WORK=$(mktemp -d /var/tmp/ringzero-fresh.XXXXXX) || die "cannot make a work folder under /var/tmp"
ROOT=$WORK/root
LOGS=$WORK/logs
mkdir -p "$ROOT" "$LOGS"
MOUNTS=()      # mount points, undone in reverse order
STAGE_PID=""   # the stage running now (its own process group)
T_START=$(date +%s.%N)

# Processes whose root is the fresh root: a stage's leftovers (a launched rank, mpirun's
# daemon). Found by their /proc/PID/root link, so nothing outside the root is touched.
kill_root_processes() {
  local p pid
  for p in /proc/[0-9]*; do
    [ "$(readlink "$p/root" 2>/dev/null)" = "$ROOT" ] || continue
    pid=${p#/proc/}
    kill -KILL "$pid" 2>/dev/null
  done
}
cleanup() {
  trap '' INT TERM
  [ -n "$STAGE_PID" ] && kill -KILL -- "-$STAGE_PID" 2>/dev/null
  kill_root_processes
  local i
  for ((i = ${#MOUNTS[@]} - 1; i >= 0; i--)); do
    umount "${MOUNTS[i]}" 2>/dev/null || umount -l "${MOUNTS[i]}" 2>/dev/null ||
      echo "$NAME: could not unmount ${MOUNTS[i]}" >&2
  done
  if grep -q " $ROOT/" /proc/mounts; then
    echo "$NAME: something is still mounted under $ROOT; leaving $WORK in place" >&2
  elif [ "$KEEP" = 1 ]; then
    echo "$NAME: kept $WORK (root and logs)"
  else
    rm -rf "$WORK"
  fi
}
trap cleanup EXIT
trap 'echo "$NAME: interrupted" >&2; exit 130' INT
trap 'echo "$NAME: terminated" >&2; exit 143' TERM

mount_in_root() {  # mount_in_root TARGET MOUNT-ARGS...
  local target=$ROOT$1
  shift
  mkdir -p "$target"
  mount "$@" "$target" || return 1
  MOUNTS+=("$target")
}

# stage NAME CMD...: runs CMD, its output in LOGS/NAME.log, and prints one line with its
# time; on failure, the log's tail and exit 1 naming the stage. A program runs in its own
# process group (setsid), so an interrupt stops all of it at once; a function of this
# script (a mount, the copy: seconds) runs in this shell, where its mounts are recorded.
stage() {
  local name=$1
  shift
  local log=$LOGS/${name//[^A-Za-z0-9.-]/_}.log t0 rc c0
  t0=$(date +%s.%N)
  children_cpu
  c0=$CPU_NOW
  if declare -F "$1" >/dev/null; then
    "$@" >"$log" 2>&1 </dev/null
    rc=$?
  else
    setsid -w "$@" >"$log" 2>&1 </dev/null &
    STAGE_PID=$!
    wait "$STAGE_PID"
    rc=$?
    STAGE_PID=""
  fi
  local secs cpu
  secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.0f", b - a }')
  children_cpu
  cpu=$(awk -v a="$c0" -v b="$CPU_NOW" 'BEGIN { printf "%.0f", b - a }')
  if [ $rc -ne 0 ]; then
    printf '%-62s FAILED (rc %d) after %ss (cpu %ss)\n' "$NAME: $name" "$rc" "$secs" "$cpu"
    tail -n 30 "$log" | sed 's/^/    /'
    echo "$NAME: stage '$name' failed (log: $log$([ "$KEEP" = 1 ] || echo ', removed on exit; --keep keeps it'))" >&2
    exit 1
  fi
  printf '%-62s ok %5ss  (cpu %ss)\n' "$NAME: $name" "$secs" "$cpu"
}
# CPU_NOW: CPU seconds (user + system) of every child process waited for so far. With the
# wall time it tells a slow stage on a busy machine from a slow stage. `times` must run in
# this shell (a subshell has children of its own), so it goes through a file.
children_cpu() {
  times >"$WORK/times.txt"
  CPU_NOW=$(awk 'NR == 2 { n = 0; for (i = 1; i <= 2; i++) { split($i, t, /[ms]/); n += t[1] * 60 + t[2] } print n }' \
    "$WORK/times.txt")
}

# IN_ROOT... "CMD": bash -c CMD as root in the fresh root, in the copy of the repository,
# with a clean environment (nothing of this host's PATH, ccache or compiler settings).
IN_ROOT=(chroot "$ROOT" /usr/bin/env -i HOME=/root LANG=C.UTF-8 TERM=dumb
         PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin bash -c)

mount_basics() {
  cp /etc/resolv.conf "$ROOT/etc/resolv.conf" &&
    mount_in_root /proc -t proc proc && mount_in_root /sys -t sysfs sysfs &&
    mount_in_root /dev --bind /dev && mount_in_root /dev/pts -t devpts devpts &&
    mount_in_root /dev/shm -t tmpfs -o mode=1777 tmpfs  # the shm transport's segments
}
mount_cuda_read_only() {
  mount_in_root /usr/local/cuda --bind /usr/local/cuda &&
    mount -o remount,bind,ro "$ROOT/usr/local/cuda" &&
    if touch "$ROOT/usr/local/cuda/.rw-probe" 2>/dev/null; then echo "the toolkit is writable"; return 1; fi
}
# --ccache: the host's cache where ccache in the root looks by default (no CCACHE_DIR needed).
mount_ccache() {
  mount_in_root /root/.cache/ccache --bind "$CCACHE_HOST"
}
CCACHE_INSTALL="DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends ccache"
copy_repository() {
  mkdir -p "$ROOT/root/ringzero" && git -C "$REPO" archive --format=tar HEAD | tar -x -C "$ROOT/root/ringzero"
}

# The runtime tools of both README commands, each tried, not only looked for.
TOOLS_CHECK='set -e
  f=/usr/share/games/fortunes
  for n in literature science computers wisdom; do test -s "$f/$n" || { echo "missing fortunes file $f/$n"; exit 1; }; done
  gnuplot -e "set terminal png; set output \"/tmp/t.png\"; plot x" && test -s /tmp/t.png
  mpirun --allow-run-as-root --oversubscribe -np 2 true
  cd /tmp
  printf "#include <cstdint>\n#include <cstddef>\nextern \"C\" int LLVMFuzzerTestOneInput(const uint8_t*, size_t) { return 0; }\n" >f.cpp
  clang++ -fsanitize=fuzzer,address,undefined f.cpp -o f && ./f -runs=10 2>/dev/null
  printf "int main() { return 0; }\n" >s.cpp
  g++ -fsanitize=address,undefined s.cpp -o s && ./s
  g++ -fsanitize=thread s.cpp -o t && ./t
  printf "#include <openssl/hmac.h>\nint main() { unsigned n = 0; unsigned char m[64];\n  return HMAC(EVP_sha256(), \"k\", 1, (const unsigned char*)\"d\", 1, m, &n) && n == 32 ? 0 : 1; }\n" >h.cpp
  g++ h.cpp -o h -lcrypto && ./h
  echo "gnuplot, fortunes, mpirun, libFuzzer, ASan/UBSan/TSan and libcrypto all work"'

# The quick subset: small, and together they touch every module and runtime tool the
# suite needs (mpirun through test_comm_mpi, gnuplot through test_train_plot).
QUICK_TESTS=(test_base test_launch test_comm_ring test_comm_shm test_comm_mpi test_kernels_matmul test_cpu_paths
             test_data_prepare test_zero_strategies test_train_config test_train_plot)
QUICK_CTEST='^(test_base|test_layering|test_launch|test_comm_ring|test_comm_shm|test_comm_mpi|test_kernels_matmul|test_cpu_path_.*|test_data_prepare|test_zero_strategies|test_train_config|test_train_plot)$'

stage "debootstrap minbase bookworm" debootstrap --variant=minbase bookworm "$ROOT" "$MIRROR"
stage "mounts (proc, sys, dev, shm)" mount_basics
stage "clean copy of HEAD (git archive)" copy_repository
if [ "$MODE" = fresh ]; then
  stage "install-deps" "${IN_ROOT[@]}" "cd /root/ringzero && bash scripts/install-deps.sh"
  stage "tools" "${IN_ROOT[@]}" "$TOOLS_CHECK"
  if [ -n "$CCACHE_HOST" ]; then
    stage "ccache (--ccache: compiles served from $CCACHE_HOST)" mount_ccache
    stage "ccache installed (for the build only)" "${IN_ROOT[@]}" "$CCACHE_INSTALL"
  fi
  stage "build (ringzero + quick tests)" "${IN_ROOT[@]}" \
    "cd /root/ringzero && bash scripts/build.sh$(printf ' --target %s' ringzero "${QUICK_TESTS[@]}")"
  stage "main job (run.sh --steps 40)" "${IN_ROOT[@]}" "cd /root/ringzero && bash scripts/run.sh --steps 40 &&
    test -s build/runs/tiny/loss.png && test -s build/runs/tiny/memory.png"
  stage "quick tests" "${IN_ROOT[@]}" \
    "cd /root/ringzero && ctest --test-dir build -R '$QUICK_CTEST' --output-on-failure --no-tests=error --timeout 300"
else
  # .deps from this host's Debian packages, as a user makes it before a device run.
  stage "carry-deps (on the host)" bash "$ROOT/root/ringzero/scripts/carry-deps.sh"
  stage "compiler, cmake, ninja only" "${IN_ROOT[@]}" "apt-get update -qq &&
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends build-essential cmake ninja-build"
  stage "CUDA toolkit bind-mounted read-only" mount_cuda_read_only
  launchers=""
  if [ -n "$CCACHE_HOST" ]; then
    stage "ccache (--ccache: compiles served from $CCACHE_HOST)" mount_ccache
    stage "ccache installed (for the build only)" "${IN_ROOT[@]}" "$CCACHE_INSTALL"
    # device-check.sh's own configure line stays as the device runs it: CMake takes its
    # launchers from these variables of the environment.
    launchers="CMAKE_CXX_COMPILER_LAUNCHER=ccache CMAKE_CUDA_COMPILER_LAUNCHER=ccache "
  fi
  stage "device-check.sh build" "${IN_ROOT[@]}" "cd /root/ringzero && ${launchers}bash scripts/device-check.sh build"
  # Linked is not enough: each binary must start here, and each GPU test skip (77: no GPU).
  stage "binaries start; GPU tests skip" "${IN_ROOT[@]}" "cd /root/ringzero && build-gpu/ringzero --help >/dev/null &&
    for t in $(printf 'build-gpu/tests/%s ' test_backend_ops test_model_cuda test_comm_gpu test_comm_cuda_ring_gpu test_zero_gpu \
               test_train_cuda test_cublaslt_conformance); do
      \"\$t\" >/dev/null 2>&1; rc=\$?; [ \$rc = 77 ] || { echo \"\$t exited \$rc, not 77 (skip)\"; exit 1; }
      echo \"\$t: skipped (77)\"; done"
fi
children_cpu
printf '%-62s ok %5ss  (cpu %ss)\n' "$NAME: all stages" \
  "$(awk -v a="$T_START" -v b="$(date +%s.%N)" 'BEGIN { printf "%.0f", b - a }')" "${CPU_NOW%.*}"
