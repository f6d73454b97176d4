# attngen_sanitize(target): AddressSanitizer + UndefinedBehaviorSanitizer on one of our own
# targets when ATTNGEN_SANITIZE is on. Generated Halide code is not instrumented.
function(attngen_sanitize target)
    if (NOT ATTNGEN_SANITIZE)
        return()
    endif ()
    set(flags -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer)
    # GCC 12's -Wmaybe-uninitialized misfires on libstdc++'s <regex> (pulled in by Catch2) once
    # ASan instruments it; the warning stays on in the normal build.
    # ASan's customary -O1, with line tables only (-g1): reports keep file:line, and instrumented
    # test files compile about twice as fast as at -O2 -g.
    target_compile_options(${target} PRIVATE ${flags} -O1 -g1 -Wno-maybe-uninitialized)
    # A static library's users must link the sanitizer runtimes too.
    get_target_property(type ${target} TYPE)
    if (type STREQUAL "STATIC_LIBRARY")
        target_link_options(${target} INTERFACE ${flags})
    else ()
        target_link_options(${target} PRIVATE ${flags})
    endif ()
endfunction()
