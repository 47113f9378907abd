# cmake/nccl.cmake: finds a working NCCL for `--comm nccl` (comm/CMakeLists.txt).
#
# Looked for, in order: NCCL_ROOT (variable or environment), the CUDA toolkit (CUDA 13 may
# ship nccl.h and libnccl), the system (Debian libnccl-dev), and last the nvidia-nccl Python
# package that PyTorch's wheels bring (nvidia/nccl/{include,lib}: only libnccl.so.2, no
# unversioned link), found by asking python3 where it is. Found means a one-line program
# compiles and links against it. Sets RZ_NCCL_INCLUDE_DIR, RZ_NCCL_LIBRARY and
# RZ_NCCL_VERSION, and _rz_nccl_why: empty when found, else why not (one phrase).
# Needs RINGZERO_CUDA and, when on, the CUDA::cudart target.
set(_rz_nccl_why "")
if(NOT RINGZERO_CUDA)
  set(_rz_nccl_why "needs the CUDA backend")
else()
  set(_rz_nccl_names nccl libnccl.so.2)
  find_path(RZ_NCCL_INCLUDE_DIR nccl.h HINTS ${NCCL_ROOT} ENV NCCL_ROOT ${CUDAToolkit_INCLUDE_DIRS}
            PATH_SUFFIXES include)
  find_library(RZ_NCCL_LIBRARY NAMES ${_rz_nccl_names} HINTS ${NCCL_ROOT} ENV NCCL_ROOT ${CUDAToolkit_LIBRARY_DIR}
               PATH_SUFFIXES lib lib64)
  set(_rz_nccl_py_note "no python3 to ask for nvidia.nccl")
  if(NOT RZ_NCCL_INCLUDE_DIR OR NOT RZ_NCCL_LIBRARY)
    find_package(Python3 COMPONENTS Interpreter QUIET)
    if(Python3_Interpreter_FOUND)
      execute_process(COMMAND ${Python3_EXECUTABLE} -c "import nvidia.nccl as m; print(list(m.__path__)[0])"
                      OUTPUT_VARIABLE _rz_nccl_py OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET
                      RESULT_VARIABLE _rz_nccl_py_rc TIMEOUT 60)
      set(_rz_nccl_py_note "${Python3_EXECUTABLE} has no nvidia.nccl package")
      if(_rz_nccl_py_rc EQUAL 0 AND IS_DIRECTORY "${_rz_nccl_py}")
        set(_rz_nccl_py_note "${_rz_nccl_py} lacks include/nccl.h or lib/libnccl.so.2")
        # find_* search again while their cached result is NOTFOUND.
        find_path(RZ_NCCL_INCLUDE_DIR nccl.h HINTS ${_rz_nccl_py} PATH_SUFFIXES include NO_DEFAULT_PATH)
        find_library(RZ_NCCL_LIBRARY NAMES ${_rz_nccl_names} HINTS ${_rz_nccl_py} PATH_SUFFIXES lib NO_DEFAULT_PATH)
      endif()
    endif()
  endif()
  if(NOT RZ_NCCL_INCLUDE_DIR OR NOT RZ_NCCL_LIBRARY)
    set(_rz_nccl_why "no nccl.h and libnccl in NCCL_ROOT, the CUDA toolkit or the system; ${_rz_nccl_py_note}")
  else()
    file(STRINGS ${RZ_NCCL_INCLUDE_DIR}/nccl.h _rz_nccl_v REGEX "#define NCCL_(MAJOR|MINOR|PATCH) ")
    string(REGEX REPLACE ".*MAJOR ([0-9]+).*MINOR ([0-9]+).*PATCH ([0-9]+).*" "\\1.\\2.\\3" RZ_NCCL_VERSION "${_rz_nccl_v}")
    # Present is not enough: a one-line program must compile and link against it.
    if(NOT DEFINED RZ_NCCL_WORKS OR NOT RZ_NCCL_WORKS_FOR STREQUAL "${RZ_NCCL_LIBRARY}")
      file(WRITE ${CMAKE_CURRENT_BINARY_DIR}/nccl_probe.cpp
           "#include <nccl.h>\nint main() { int v = 0; return ncclGetVersion(&v) == ncclSuccess ? 0 : 1; }\n")
      try_compile(_rz_nccl_ok ${CMAKE_CURRENT_BINARY_DIR}/nccl_probe
                  SOURCES ${CMAKE_CURRENT_BINARY_DIR}/nccl_probe.cpp
                  CMAKE_FLAGS "-DINCLUDE_DIRECTORIES=${RZ_NCCL_INCLUDE_DIR}"  # cudart brings the CUDA headers
                  LINK_LIBRARIES ${RZ_NCCL_LIBRARY} CUDA::cudart
                  OUTPUT_VARIABLE _rz_nccl_log)
      set(RZ_NCCL_WORKS ${_rz_nccl_ok} CACHE INTERNAL "NCCL compiles and links")
      set(RZ_NCCL_WORKS_FOR "${RZ_NCCL_LIBRARY}" CACHE INTERNAL "the library RZ_NCCL_WORKS was probed with")
    endif()
    if(NOT RZ_NCCL_WORKS)
      set(_rz_nccl_why "${RZ_NCCL_LIBRARY} ${RZ_NCCL_VERSION} is present but a test program does not compile and link against it")
    endif()
  endif()
endif()
