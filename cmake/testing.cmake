# Test labels (ctest -L LABEL). Every test carries its kind (unit, integration, python,
# fuzz, mpi, build) and may declare more in a line among the first 40 of its source:
#   // labels: exact sanitize        (C++)
#   # labels: exact                  (Python)
# The stages of .ci/run pick tests by these labels, never by name:
#   exact     guards compiler-independent bits (kernels, goldens, invariance, engine
#             exactness): `make test-clang` runs them built with clang++.
#   sanitize  exercises memory lifetimes (unit tests, engine, caches, the disk tier,
#             request parsing): `make test-sanitize` builds and runs them under
#             ASan + UBSan. Every unit test and fuzz replay has it.
# `make test` runs every test, whatever its labels.
set(GANNET_TEST_LABELS exact sanitize)

# The labels a source file declares, checked against GANNET_TEST_LABELS.
function(gannet_declared_labels src out)
  file(STRINGS ${src} lines LIMIT_COUNT 40 REGEX "^(//|#) labels:")
  set(labels)
  foreach(line ${lines})
    string(REGEX REPLACE "^(//|#) labels:" "" line "${line}")
    separate_arguments(words UNIX_COMMAND "${line}")
    foreach(w ${words})
      if(NOT w IN_LIST GANNET_TEST_LABELS)
        message(FATAL_ERROR "${src}: unknown test label '${w}' (known: ${GANNET_TEST_LABELS})")
      endif()
      list(APPEND labels ${w})
    endforeach()
  endforeach()
  set(${out} ${labels} PARENT_SCOPE)
endfunction()

# Under the sanitizers a test's own code builds at -O0 (tests/CMakeLists.txt); a test
# whose own code does the heavy work (parsing large JSON goldens with the header-only
# JSON library, walking a whole vocabulary) declares, among its first 40 lines,
#   // sanitized build: -O1
# and keeps -O1 there, so it does not run several times slower than it compiles faster.
function(gannet_declared_sanitized_opt src out)
  file(STRINGS ${src} lines LIMIT_COUNT 40 REGEX "^// sanitized build:")
  set(opt -O0)
  foreach(line ${lines})
    string(REGEX REPLACE "^// sanitized build: *" "" line "${line}")
    if(NOT line MATCHES "^-O[0-3]$")
      message(FATAL_ERROR "${src}: '// sanitized build:' takes one of -O0..-O3, not '${line}'")
    endif()
    set(opt ${line})
  endforeach()
  set(${out} ${opt} PARENT_SCOPE)
endfunction()

# Gives test `name` its labels; `target` (may be empty) is the executable it runs, which the
# per-label build targets (tests-LABEL) then build: `make test-sanitize` builds only those.
function(gannet_label_test name target)
  set(labels ${ARGN})
  list(REMOVE_DUPLICATES labels)
  set_property(TEST ${name} APPEND PROPERTY LABELS ${labels})
  if(target)
    foreach(l ${labels})
      set_property(GLOBAL APPEND PROPERTY GANNET_LABEL_TARGETS_${l} ${target})
    endforeach()
  endif()
endfunction()

# tests-LABEL: every executable that a test with that label runs (call after all tests).
function(gannet_label_build_targets)
  foreach(l ${GANNET_TEST_LABELS})
    get_property(targets GLOBAL PROPERTY GANNET_LABEL_TARGETS_${l})
    list(REMOVE_DUPLICATES targets)
    add_custom_target(tests-${l})
    if(targets)
      add_dependencies(tests-${l} ${targets})
    endif()
  endforeach()
endfunction()
