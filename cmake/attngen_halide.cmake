# Which Halide attngen builds with. ATTNGEN_HALIDE names a major version; the configure step
# finds exactly that one or stops, and says which it found. Supported (docs/halide.md):
#   14  Debian 12's libhalide14-0-dev (the default)
#   21  the `halide` wheel from PyPI, in the venv that .ci/install-deps makes at .deps/halide21
#       (or any Halide 21 that Halide_DIR or CMAKE_PREFIX_PATH points at); needs CMake >= 3.28
set(attngen_supported_halide 14 21)
if (NOT ATTNGEN_HALIDE IN_LIST attngen_supported_halide)
    message(FATAL_ERROR "ATTNGEN_HALIDE must be one of ${attngen_supported_halide}, "
                        "got '${ATTNGEN_HALIDE}'")
endif ()

set(ATTNGEN_HALIDE_HINTS "")
if (ATTNGEN_HALIDE STREQUAL "21")
    if (CMAKE_VERSION VERSION_LESS 3.28)
        message(FATAL_ERROR "Halide 21 needs CMake >= 3.28, this is CMake ${CMAKE_VERSION}: run "
                            "the one .ci/install-deps installs (.deps/halide21/bin/cmake), or "
                            "configure with -DATTNGEN_HALIDE=14")
    endif ()
    # The wheel keeps its CMake packages in site-packages/halide/lib64/cmake/<package>.
    file(GLOB ATTNGEN_HALIDE_HINTS
         "${CMAKE_CURRENT_LIST_DIR}/../.deps/halide21/lib/python3*/site-packages/halide/lib64/cmake")
endif ()

# find_package(<package> <ATTNGEN_HALIDE> ...): Halide's package versions accept only their own
# major version, so another Halide on the system is skipped, never substituted.
macro(attngen_find_halide package)
    find_package(${package} ${ATTNGEN_HALIDE} ${ARGN})
    if (NOT ${package}_FOUND)
        message(FATAL_ERROR "Halide ${ATTNGEN_HALIDE} (${package}) was not found. "
                            "bash .ci/install-deps sets it up; -DATTNGEN_HALIDE=<14|21> picks "
                            "another; Halide_DIR or CMAKE_PREFIX_PATH points at your own.")
    endif ()
    if ("${package}" STREQUAL "Halide")
        message(STATUS "attngen: Halide ${Halide_VERSION} from ${Halide_DIR}")
    else ()
        message(STATUS "attngen: Halide ${ATTNGEN_HALIDE} helpers from ${${package}_DIR}")
    endif ()
endmacro ()
