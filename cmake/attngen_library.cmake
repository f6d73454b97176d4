# attngen_add_library: generate attention layers from a .attn spec at build time.
#
#   attngen_add_library(NAME
#       SPEC file.attn                 # the layers' description
#       [LAYERS a b ...]               # default: every layer of the file
#       [TARGETS x86-64-linux ...]     # default: the build's machine; see `attngen targets`
#       [SCHEDULE auto|x86|arm|cuda|reference]
#       [SCHEDULE_PARAMS NAME=VALUE,...]  # see `attngen params`
#       [SHAPE_CLASS prefill|decode]   # which tuned record to use (default prefill)
#       [TUNED dir])                   # tuned tables (default: the ones attngen ships)
#
# runs `attngen compile` (re-run whenever the spec changes) and defines the library target NAME:
# link it, and `#include "NAME.h"` for a typed entry point LAYER(args) per layer. The same
# function serves this repository's build and installed packages (find_package(attngen)).

function(attngen_add_library name)
    cmake_parse_arguments(ARG "" "SPEC;SCHEDULE;SCHEDULE_PARAMS;SHAPE_CLASS;TUNED" "LAYERS;TARGETS" ${ARGN})
    if (ARG_UNPARSED_ARGUMENTS)
        message(FATAL_ERROR "attngen_add_library(${name}): unknown arguments ${ARG_UNPARSED_ARGUMENTS}")
    endif ()
    if (NOT ARG_SPEC)
        message(FATAL_ERROR "attngen_add_library(${name}): SPEC file.attn is required")
    endif ()
    if (NOT ARG_TARGETS AND CMAKE_SYSTEM_PROCESSOR MATCHES "^(aarch64|arm64|ARM64)$")
        set(ARG_TARGETS arm-64-linux)
    elseif (NOT ARG_TARGETS)
        set(ARG_TARGETS x86-64-linux)
    endif ()
    if (NOT ARG_SCHEDULE)
        set(ARG_SCHEDULE auto)
    endif ()
    get_filename_component(spec "${ARG_SPEC}" ABSOLUTE)

    set(options --name ${name} --schedule ${ARG_SCHEDULE})
    if (ARG_SCHEDULE_PARAMS)
        list(APPEND options --schedule-params ${ARG_SCHEDULE_PARAMS})
    endif ()
    if (ARG_SHAPE_CLASS)
        list(APPEND options --shape-class ${ARG_SHAPE_CLASS})
    endif ()
    set(tuned_tables)
    if (ARG_TUNED)
        get_filename_component(tuned "${ARG_TUNED}" ABSOLUTE)
        list(APPEND options --tuned "${tuned}")
        file(GLOB tuned_tables CONFIGURE_DEPENDS "${tuned}/*.json")
    endif ()
    foreach (target IN LISTS ARG_TARGETS)
        list(APPEND options --target ${target})
    endforeach ()
    if (ARG_LAYERS)
        list(JOIN ARG_LAYERS "," layers)
        list(APPEND options --layers ${layers})
    endif ()

    set(dir "${CMAKE_CURRENT_BINARY_DIR}/${name}.attngen")
    set(library "${dir}/lib${name}.a")
    if (_ATTNGEN_LAYERS_FROM)
        # attngen's own sanitized build: the library as its host build generated it.
        _attngen_layers_from(from ${name} ${name}.attngen/lib${name}.a ${name}.attngen/${name}.h)
        add_library(${name} STATIC IMPORTED GLOBAL)
        set_target_properties(${name} PROPERTIES
                              IMPORTED_LOCATION "${from}/${name}.attngen/lib${name}.a"
                              INTERFACE_INCLUDE_DIRECTORIES "${from}/${name}.attngen"
                              INTERFACE_LINK_LIBRARIES attngen::runtime)
        return()
    endif ()
    file(MAKE_DIRECTORY "${dir}")
    add_custom_command(OUTPUT "${library}" "${dir}/${name}.h" "${dir}/${name}.manifest.json"
                       COMMAND attngen::attngen compile "${spec}" ${options} -o "${dir}"
                       DEPENDS "${spec}" attngen::attngen ${tuned_tables}
                       COMMENT "attngen: generating ${name} from ${ARG_SPEC}"
                       VERBATIM)
    add_custom_target(${name}.generate DEPENDS "${library}" "${dir}/${name}.h")

    add_library(${name} STATIC IMPORTED GLOBAL)
    set_target_properties(${name} PROPERTIES
                          IMPORTED_LOCATION "${library}"
                          INTERFACE_INCLUDE_DIRECTORIES "${dir}"
                          INTERFACE_LINK_LIBRARIES attngen::runtime)
    add_dependencies(${name} ${name}.generate)
endfunction()
