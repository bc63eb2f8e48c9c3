# Where the CUDA and CUPTI headers come from. Only headers are needed at build time (libcuda and
# libcupti are opened at run time), and a machine whose CUDA came from pip has no toolkit folder,
# so the CUDA wheels of the Python environment count as well. Candidate header sets, in order;
# the first complete one wins:
#   1. WARMPROF_CUDA_INCLUDE_DIRS, when given (-D as a CMake list, or the environment with `:`):
#      exactly these folders;
#   2. a toolkit: $CUDA_HOME, $CUDA_PATH, /usr/local/cuda (include/ and extras/CUPTI/include/);
#      -DWARMPROF_CUDA_TOOLKIT_ROOTS= (empty) skips them, to build against the wheels;
#   3. the CUDA wheels in the site-packages of the Python the package is built for:
#        cu13: nvidia/cu13/include (nvidia-cuda-cupti, nvidia-cuda-runtime, nvidia-cuda-crt),
#        cu12: nvidia/cuda_cupti/include + nvidia/cuda_runtime/include + nvidia/cuda_nvcc/include;
#   4. the system include folder (distribution packages).
# A set is complete when it holds cupti.h, cuda.h and crt/host_defines.h: cupti.h includes the
# last through builtin_types.h, and the runtime wheels lack it (nvidia-cuda-nvcc-cu12 or
# nvidia-cuda-crt carry it).
#
# warmprof_cuda_headers(<dirs_var> <summary_var>) sets <dirs_var> to the chosen folders (empty
# when none is complete) and <summary_var> to one line for the build log: which headers, or why none.

# Site-packages folders of `python`, read with -I: pip's isolated build environment hides the
# target environment's site-packages through PYTHONPATH, which -I ignores.
function(warmprof_site_dirs python out)
  set(dirs "")
  if(python)
    execute_process(
      COMMAND "${python}" -I -c
        "import site, sysconfig; d = site.getsitepackages() + [site.getusersitepackages(), sysconfig.get_paths()['purelib'], sysconfig.get_paths()['platlib']]; print(';'.join(dict.fromkeys(d)))"
      OUTPUT_VARIABLE found OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE rc ERROR_QUIET)
    if(rc EQUAL 0)
      list(APPEND dirs ${found})
    endif()
  endif()
  # A front end that builds in its own virtual environment (uv) still says which one is active.
  if(DEFINED ENV{VIRTUAL_ENV})
    file(GLOB venv_sites "$ENV{VIRTUAL_ENV}/lib*/python*/site-packages")
    list(APPEND dirs ${venv_sites})
  endif()
  list(REMOVE_DUPLICATES dirs)
  set(${out} "${dirs}" PARENT_SCOPE)
endfunction()

# The folder of `dirs` holding `file`, or "" when none does.
function(warmprof_holding file dirs out)
  set(${out} "" PARENT_SCOPE)
  foreach(d IN LISTS dirs)
    if(EXISTS "${d}/${file}")
      set(${out} "${d}" PARENT_SCOPE)
      return()
    endif()
  endforeach()
endfunction()

function(warmprof_cuda_headers dirs_var summary_var)
  # Each candidate: a label, then its folders, as "label|dir1;dir2" (folders that do not exist are
  # fine: a set lacking a header is simply incomplete).
  set(candidates "")
  if(NOT WARMPROF_CUDA_INCLUDE_DIRS AND DEFINED ENV{WARMPROF_CUDA_INCLUDE_DIRS})
    set(WARMPROF_CUDA_INCLUDE_DIRS "$ENV{WARMPROF_CUDA_INCLUDE_DIRS}")
    string(REPLACE ":" ";" WARMPROF_CUDA_INCLUDE_DIRS "${WARMPROF_CUDA_INCLUDE_DIRS}")
  endif()
  if(WARMPROF_CUDA_INCLUDE_DIRS)
    string(REPLACE ";" "," given "${WARMPROF_CUDA_INCLUDE_DIRS}")
    list(APPEND candidates "WARMPROF_CUDA_INCLUDE_DIRS|${given}")
  else()
    if(NOT DEFINED WARMPROF_CUDA_TOOLKIT_ROOTS)
      set(WARMPROF_CUDA_TOOLKIT_ROOTS "$ENV{CUDA_HOME}" "$ENV{CUDA_PATH}" "/usr/local/cuda")
    endif()
    foreach(root IN LISTS WARMPROF_CUDA_TOOLKIT_ROOTS)
      if(root AND IS_DIRECTORY "${root}")
        list(APPEND candidates "toolkit ${root}|${root}/include,${root}/extras/CUPTI/include")
      endif()
    endforeach()
    if(NOT DEFINED WARMPROF_SITE_DIRS)  # given only by tests
      warmprof_site_dirs("${Python_EXECUTABLE}" WARMPROF_SITE_DIRS)
    endif()
    foreach(site IN LISTS WARMPROF_SITE_DIRS)
      set(n "${site}/nvidia")
      if(IS_DIRECTORY "${n}/cu13")
        list(APPEND candidates "cu13 wheels in ${site}|${n}/cu13/include")
      endif()
      if(IS_DIRECTORY "${n}/cuda_cupti")
        list(APPEND candidates
             "cu12 wheels in ${site}|${n}/cuda_cupti/include,${n}/cuda_runtime/include,${n}/cuda_nvcc/include")
      endif()
    endforeach()
    list(APPEND candidates "system|/usr/include")
  endif()

  set(why "")
  foreach(c IN LISTS candidates)
    string(FIND "${c}" "|" bar)
    string(SUBSTRING "${c}" 0 ${bar} label)
    math(EXPR start "${bar} + 1")
    string(SUBSTRING "${c}" ${start} -1 folders)
    string(REPLACE "," ";" folders "${folders}")
    warmprof_holding(cupti.h "${folders}" cupti_dir)
    warmprof_holding(cuda.h "${folders}" cuda_dir)
    warmprof_holding(crt/host_defines.h "${folders}" crt_dir)
    if(cupti_dir AND cuda_dir AND crt_dir)
      file(STRINGS "${cupti_dir}/cupti_version.h" api REGEX "^#define CUPTI_API_VERSION [0-9]+")
      string(REGEX REPLACE ".* ([0-9]+)$" "\\1" api "${api}")
      file(STRINGS "${cuda_dir}/cuda.h" cuda REGEX "^#define CUDA_VERSION [0-9]+")
      string(REGEX REPLACE ".* ([0-9]+)$" "\\1" cuda "${cuda}")
      set(chosen "${cupti_dir}" "${cuda_dir}" "${crt_dir}")
      list(REMOVE_DUPLICATES chosen)
      set(${dirs_var} "${chosen}" PARENT_SCOPE)
      set(${summary_var}
          "${label}: cupti.h in ${cupti_dir} (CUPTI_API_VERSION ${api}), cuda.h in ${cuda_dir} (CUDA_VERSION ${cuda}), crt/host_defines.h in ${crt_dir}"
          PARENT_SCOPE)
      return()
    endif()
    if(cupti_dir OR cuda_dir)
      set(missing "")
      foreach(h cupti.h cuda.h crt/host_defines.h)
        warmprof_holding(${h} "${folders}" d)
        if(NOT d)
          list(APPEND missing ${h})
        endif()
      endforeach()
      if(missing STREQUAL "crt/host_defines.h")
        set(missing "crt/host_defines.h (nvidia-cuda-nvcc-cu12 or nvidia-cuda-crt carries it)")
      endif()
      string(REPLACE ";" ", " missing "${missing}")
      list(APPEND why "${label} lacks ${missing}")
    endif()
  endforeach()
  if(NOT why)
    set(why "no cupti.h and cuda.h in a CUDA toolkit (CUDA_HOME, CUDA_PATH, /usr/local/cuda) or in the CUDA wheels")
  endif()
  string(REPLACE ";" "; " why "${why}")
  set(${dirs_var} "" PARENT_SCOPE)
  set(${summary_var} "${why}" PARENT_SCOPE)
endfunction()
