# tests/cuemu/rewrite_launches.cmake: copies one CUDA source into the build tree as plain
# C++ for the CUDA-on-CPU emulator (tests/cuemu/README.md). The source itself is never
# changed for the emulator; its copy is rewritten:
#   k<<<grid, block, shmem, stream>>>(args)   ->  ::cuemu::launch(k, "k", __FILE__, __LINE__, grid, block, shmem, stream)(args)
#   __shared__ T name[N];                     ->  static thread_local T name[N]; ::cuemu::detail::shared_var(...);
#   extern __shared__ T name[];               ->  static ::cuemu::DynamicShared<T> name;
# and a #line directive names the original file, so compiler messages, __FILE__ and the
# debug info (ASan's reports) point at the source a reader has, at the same lines (no
# rewrite adds or removes a line). A `<<<`, `>>>(` or `__shared__` that survives (a form
# the expressions above do not know) stops the build, naming the file.
#
#   cmake -DIN=<source> -DOUT=<copy> -DREL=<path relative to the checkout> -P rewrite_launches.cmake
foreach(v IN ITEMS IN OUT REL)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "rewrite_launches.cmake: -D${v}=... is missing")
  endif()
endforeach()
file(READ "${IN}" src)

# Dynamic shared memory first: it also contains `__shared__`.
string(REGEX REPLACE
  "extern[ \t]+__shared__[ \t]+(alignas\\([^)\n]*\\)[ \t]+)?([^;\n]*[^ \t\n])[ \t]+([A-Za-z_][A-Za-z0-9_]*)[ \t]*\\[[ \t]*\\][ \t]*;"
  "static ::cuemu::DynamicShared<\\2> \\3;" src "${src}")
string(REGEX REPLACE
  "__shared__[ \t]+([^;\n]*[ \t*&])([A-Za-z_][A-Za-z0-9_]*)([ \t]*(\\[[^;\n]*\\])?)[ \t]*;"
  "static thread_local \\1\\2\\3; ::cuemu::detail::shared_var(&\\2, sizeof(\\2), __FILE__, __LINE__);" src "${src}")
# The launch: a kernel name (with template arguments that hold no `<`), <<<config>>>, `(`.
string(REGEX REPLACE
  "([A-Za-z_][A-Za-z0-9_:]*(<[^<>;]*>)?)[ \t]*<<<([^;]*)>>>[ \t]*\\("
  "::cuemu::launch(\\1, \"\\1\", __FILE__, __LINE__, \\3)(" src "${src}")

# Survivors are looked for in the code, not in its string literals and line comments
# (which may name the syntax); dropping them keeps the line count, so the error names the
# right line.
string(REGEX REPLACE "\"([^\"\\\\\n]|\\\\.)*\"" "\"\"" code "${src}")
string(REGEX REPLACE "//[^\n]*" "" code "${code}")
foreach(left IN ITEMS "<<<" ">>>" "__shared__")
  string(FIND "${code}" "${left}" at)
  if(NOT at EQUAL -1)
    string(SUBSTRING "${code}" 0 ${at} before)
    string(REGEX MATCHALL "\n" lines "${before}")
    list(LENGTH lines line)
    math(EXPR line "${line} + 1")
    message(FATAL_ERROR "${REL}:${line}: `${left}` in a form tests/cuemu/rewrite_launches.cmake does not rewrite; "
                        "extend the expressions there (the emulated build cannot compile it as it is)")
  endif()
endforeach()

file(WRITE "${OUT}" "#line 1 \"${REL}\"\n${src}")
