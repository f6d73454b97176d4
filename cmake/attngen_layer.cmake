# Generating attention layers at build time.
#
#   attngen_add_layer(NAME PARAMS key=value... [SCHEDULE auto|reference|x86] [TARGETS ...])
#
# runs attngen_generator for every target (default: the x86 multi-target set, dispatched at run
# time), writes NAME.h (the typed entry point NAME(args) and NAME_layer()) with the attngen CLI
# from the same parameters, and defines the library target NAME to link. All layers share the
# one Halide runtime inside attngen_runtime.

set(ATTNGEN_X86_TARGETS
    x86-64-linux-avx512_skylake
    x86-64-linux-avx2-fma-f16c
    x86-64-linux-sse41
    CACHE STRING "Halide targets of x86 layers, best first; the last is the baseline")

# The Halide runtime object every generated layer links against, once per build.
function(attngen_add_halide_runtime output)
    cmake_parse_arguments(ARG "" "TARGET" "" ${ARGN})
    add_custom_command(OUTPUT "${CMAKE_CURRENT_BINARY_DIR}/${output}"
                       COMMAND attngen_generator -r attngen_halide_runtime -e object
                               -o "${CMAKE_CURRENT_BINARY_DIR}" "target=${ARG_TARGET}"
                       COMMAND ${CMAKE_COMMAND} -E rename
                               "${CMAKE_CURRENT_BINARY_DIR}/attngen_halide_runtime.o"
                               "${CMAKE_CURRENT_BINARY_DIR}/${output}"
                       DEPENDS attngen_generator
                       VERBATIM)
endfunction()

function(attngen_add_layer name)
    cmake_parse_arguments(ARG "" "SCHEDULE" "PARAMS;TARGETS" ${ARGN})
    if (NOT ARG_SCHEDULE)
        set(ARG_SCHEDULE auto)
    endif ()
    if (NOT ARG_TARGETS)
        set(ARG_TARGETS ${ATTNGEN_X86_TARGETS})
    endif ()

    add_halide_library(${name}_halide FROM attngen_generator
                       GENERATOR attention
                       FUNCTION_NAME ${name}_halide
                       TARGETS ${ARG_TARGETS}
                       FEATURES user_context
                       USE_RUNTIME attngen_runtime
                       PARAMS ${ARG_PARAMS} schedule=${ARG_SCHEDULE})

    # The header binds each target's function, named as add_halide_library names it.
    set(variant_targets ${ARG_TARGETS})
    list(TRANSFORM variant_targets APPEND "-user_context-no_runtime")
    list(JOIN variant_targets "," variant_targets)
    set(header "${CMAKE_CURRENT_BINARY_DIR}/${name}.h")
    add_custom_command(OUTPUT "${header}"
                       COMMAND attngen header --name ${name} --targets ${variant_targets}
                               -o "${header}" ${ARG_PARAMS}
                       DEPENDS attngen
                       VERBATIM)
    add_custom_target(${name}.header ALL DEPENDS "${header}")

    add_library(${name} INTERFACE)
    add_dependencies(${name} ${name}.header)
    target_include_directories(${name} INTERFACE "${CMAKE_CURRENT_BINARY_DIR}")
    target_link_libraries(${name} INTERFACE ${name}_halide attngen_runtime)
endfunction()
