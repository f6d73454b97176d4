# Generating attention layers at build time.
#
#   attngen_add_layer(NAME PARAMS key=value... [SCHEDULE auto|reference|x86|arm|cuda] [TARGETS ...]
#                     [SHAPE_CLASS prefill|decode])
#
# runs attngen_generator for every target (default: ATTNGEN_LAYER_TARGETS, the variants of the
# machine the build is for, dispatched at run time), writes NAME.h (the typed entry point NAME(args) and NAME_layer()) with the attngen CLI
# from the same parameters, and defines the library target NAME to link. All layers share the
# one Halide runtime inside attngen_runtime.

# The targets of the machine the build is for, best first (the last is the baseline), as
# `attngen targets` lists the x86-64-linux and arm-64-linux families.
if (CMAKE_SYSTEM_PROCESSOR MATCHES "^(aarch64|arm64|ARM64)$")
    set(ATTNGEN_RUNTIME_TARGET arm-64-linux)
    set(_attngen_targets arm-64-linux-arm_fp16 arm-64-linux)
else ()
    # CUDA and OpenCL layers need the runtime's device modules; they cost nothing unused.
    set(ATTNGEN_RUNTIME_TARGET x86-64-linux-cuda-opencl)
    set(_attngen_targets x86-64-linux-avx512_skylake x86-64-linux-avx2-fma-f16c x86-64-linux-sse41)
endif ()
set(ATTNGEN_LAYER_TARGETS ${_attngen_targets}
    CACHE STRING "Halide targets of the layers, best first; the last is the baseline")

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

# Tuned schedule parameters (attngen tune export) that generation looks up per layer and target.
get_filename_component(_attngen_tuned "${CMAKE_CURRENT_LIST_DIR}/../schedules/tuned" ABSOLUTE)
set(ATTNGEN_TUNED_DIR "${_attngen_tuned}"
    CACHE PATH "Tuned schedule tables; empty for the hand-written defaults only")
# The generator reads the tables itself, which CMake cannot see: a digest of them on its
# command line makes the layers regenerate when a table changes (the glob re-runs CMake).
file(GLOB _attngen_tuned_tables CONFIGURE_DEPENDS "${ATTNGEN_TUNED_DIR}/*.json")
set(_attngen_tuned_digest "")
foreach (table IN LISTS _attngen_tuned_tables)
    file(SHA1 "${table}" table_digest)
    string(APPEND _attngen_tuned_digest "${table_digest}")
endforeach ()
string(SHA1 _attngen_tuned_digest "${_attngen_tuned_digest}")
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${_attngen_tuned_tables})

# _attngen_layers_from(VAR name file...): where another build (_ATTNGEN_LAYERS_FROM, set by the
# top-level CMakeLists.txt) generated the files of a layer declared in the current directory, or
# an error naming the first file it lacks.
function(_attngen_layers_from var name)
    file(RELATIVE_PATH dir "${CMAKE_BINARY_DIR}" "${CMAKE_CURRENT_BINARY_DIR}")
    set(from "${_ATTNGEN_LAYERS_FROM}/${dir}")
    foreach (file IN LISTS ARGN)
        if (NOT EXISTS "${from}/${file}")
            message(FATAL_ERROR "${name}: the host build ${_ATTNGEN_LAYERS_FROM} has no ${file} in "
                                "${from}: build it first (cmake --build ${_ATTNGEN_LAYERS_FROM})")
        endif ()
    endforeach ()
    set(${var} "${from}" PARENT_SCOPE)
endfunction()

if (_ATTNGEN_LAYERS_FROM)
    # The layers are that build's: they must be for the same targets, with the same tables.
    foreach (setting IN ITEMS ATTNGEN_LAYER_TARGETS ATTNGEN_TUNED_DIR)
        if (NOT "${HOST_${setting}}" STREQUAL "${${setting}}")
            message(FATAL_ERROR "The host build ${_ATTNGEN_LAYERS_FROM} has ${setting}="
                                "'${HOST_${setting}}'; this build has '${${setting}}'")
        endif ()
    endforeach ()
endif ()

function(attngen_add_layer name)
    cmake_parse_arguments(ARG "" "SCHEDULE;SHAPE_CLASS" "PARAMS;TARGETS" ${ARGN})
    if (_ATTNGEN_LAYERS_FROM)
        _attngen_layers_from(from ${name} lib${name}_halide.a ${name}_halide.h ${name}.h)
        add_library(${name}_halide STATIC IMPORTED)
        set_target_properties(${name}_halide PROPERTIES IMPORTED_LOCATION
                              "${from}/lib${name}_halide.a")
        add_library(${name} INTERFACE)
        target_include_directories(${name} INTERFACE "${from}")
        target_link_libraries(${name} INTERFACE ${name}_halide attngen_runtime)
        return()
    endif ()
    if (NOT ARG_SHAPE_CLASS)
        set(ARG_SHAPE_CLASS prefill)
    endif ()
    set(tuned_param)
    if (ATTNGEN_TUNED_DIR) # GenGen refuses an empty value
        set(tuned_param "tuned=${ATTNGEN_TUNED_DIR}" "tuned_digest=${_attngen_tuned_digest}")
    endif ()
    # The generator takes the field sinks as with_sinks (Halide 21 refuses a generator parameter
    # named like one of the generator's inputs).
    set(generator_params ${ARG_PARAMS})
    list(TRANSFORM generator_params REPLACE "^sinks=" "with_sinks=")
    if (NOT ARG_SCHEDULE)
        set(ARG_SCHEDULE auto)
    endif ()
    if (NOT ARG_TARGETS)
        set(ARG_TARGETS ${ATTNGEN_LAYER_TARGETS})
    endif ()

    add_halide_library(${name}_halide FROM attngen_generator
                       GENERATOR attention
                       FUNCTION_NAME ${name}_halide
                       TARGETS ${ARG_TARGETS}
                       FEATURES user_context
                       USE_RUNTIME attngen_runtime
                       PARAMS ${generator_params} schedule=${ARG_SCHEDULE}
                              ${tuned_param} shape_class=${ARG_SHAPE_CLASS})

    # The header binds each target's function, named as add_halide_library names it.
    set(variant_targets ${ARG_TARGETS})
    list(TRANSFORM variant_targets APPEND "-user_context-no_runtime")
    list(JOIN variant_targets "," variant_targets)
    set(header "${CMAKE_CURRENT_BINARY_DIR}/${name}.h")
    add_custom_command(OUTPUT "${header}"
                       COMMAND attngen::attngen header --name ${name} --targets ${variant_targets}
                               -o "${header}" ${ARG_PARAMS}
                       DEPENDS attngen::attngen
                       VERBATIM)
    add_custom_target(${name}.header ALL DEPENDS "${header}")

    add_library(${name} INTERFACE)
    add_dependencies(${name} ${name}.header)
    target_include_directories(${name} INTERFACE "${CMAKE_CURRENT_BINARY_DIR}")
    target_link_libraries(${name} INTERFACE ${name}_halide attngen_runtime)
endfunction()
