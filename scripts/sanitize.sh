#!/usr/bin/env bash
# scripts/sanitize.sh: the test suite under AddressSanitizer + UndefinedBehaviorSanitizer,
# and the comm tests under ThreadSanitizer. Lean builds for CI's 2 cores: -O1, CUDA off,
# MPI off, tests only (build-asan/, build-tsan/). The TSan build has only the in-process comm tests
# (ranks as threads, or forked before any thread starts), so it skips the ringzero binary.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs="$(nproc)"
source scripts/ccache.sh
launcher=("${rz_ccache_launcher[@]}")
# MPI off: OpenMPI's own plugins leak at exit (LeakSanitizer reports them from unloaded
# modules, so no suppression can name them); the MPI backend is tested in the normal build.
# GPU tests off: with CUDA off they could only skip (the normal build registers them). The
# GPU test programs built against the CUDA-on-CPU emulator (tests/cuemu, CTest label cuemu:
# the real kernels, the backend and the cuda transport, compiled by g++) are part of this
# build and run under ASan+UBSan, which sees their kernels' out-of-bounds accesses (all but
# the whole training jobs, label cuemu_jobs, which the Release stage runs: about 3 minutes
# more here for host code the CPU-side tests already cover); not under TSan: the
# emulator's CUDA threads are fibers, not threads.
common=(-G Ninja -DCMAKE_BUILD_TYPE=Debug -DRINGZERO_CUDA=OFF -DRINGZERO_MPI=OFF -DRINGZERO_GPU_TESTS=OFF
        -DRINGZERO_WERROR=ON -DRINGZERO_NATIVE=ON "${launcher[@]}")
what="${1:-all}"
# GCC 12's AVX-512 intrinsics (`__m512 __Y = __Y;`) trip -Wuninitialized at -O1 once
# -march=native enables AVX-512 (a Zen 4 here): a false positive inside the compiler's own
# header, reported at our call sites, like the -Wmaybe-uninitialized one CMakeLists.txt
# turns off for Release builds. Without this the sanitizer builds stop on such CPUs.
quiet_gcc="-Wno-uninitialized"

if [ "$what" = all ] || [ "$what" = asan ]; then
  san="-O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined $quiet_gcc"
  cmake -S . -B build-asan "${common[@]}" -DCMAKE_CXX_FLAGS="$san" \
    -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" >/dev/null
  cmake --build build-asan --parallel "$jobs"
  # Leaks are findings too; a forked rank that exits through _exit is not checked.
  # Label multiprocess (test_train_agree, test_train_preempt): whole jobs of launched ranks
  # whose code paths the other train tests already run under ASan; here they would only
  # stretch the stage by minutes (tests/CMakeLists.txt).
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:allocator_may_return_null=0 \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir build-asan -j "$jobs" --output-on-failure --timeout 1200 -E test_cuda -LE 'cuemu_jobs|multiprocess'
fi

if [ "$what" = all ] || [ "$what" = tsan ]; then
  tsan_tests=(test_comm_ring test_comm_async test_comm_store test_comm_shm test_comm_tcp test_comm_failure
              test_comm_cuda_ring test_comm_registered test_comm_auth
              test_comm_flight)
  cmake -S . -B build-tsan "${common[@]}" -DRINGZERO_TESTS_NEED_BINARY=OFF \
    -DCMAKE_CXX_FLAGS="-O1 -g -fno-omit-frame-pointer -fsanitize=thread $quiet_gcc" \
    -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=thread" >/dev/null
  cmake --build build-tsan --parallel "$jobs" --target "${tsan_tests[@]}"
  regex="^($(IFS='|'; echo "${tsan_tests[*]}"))\$"
  TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
    ctest --test-dir build-tsan -j "$jobs" --output-on-failure --timeout 1200 -R "$regex"
fi
