# scripts/ccache.sh, sourced by build.sh, sanitize.sh and fuzz.sh from the checkout's root:
# ccache where it is installed and no launcher is set already. A machine without ccache
# builds exactly the same, from scratch.
#
# CCACHE_BASEDIR is the checkout: paths under it are hashed relative to it, so a clean
# clone somewhere else (each CI run's) compiles only what its commit changed. With -g (the
# sanitizer and fuzz builds) ccache would also hash the build folder's absolute path;
# CCACHE_NOHASHDIR drops that, at the price that a reused object's debug info names the
# build folder of the checkout that compiled it (file names and lines are unchanged).
# Either can be overridden from the environment.
rz_ccache_launcher=()
if command -v ccache >/dev/null 2>&1 && [ -z "${CMAKE_CXX_COMPILER_LAUNCHER:-}" ]; then
  rz_ccache_launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$(pwd -P)}"
  export CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-1}"
fi
