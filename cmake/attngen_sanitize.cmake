# attngen_sanitize(target): AddressSanitizer + UndefinedBehaviorSanitizer on one of our own
# targets when ATTNGEN_SANITIZE is on. Generated Halide code is not instrumented.
function(attngen_sanitize target)
    if (NOT ATTNGEN_SANITIZE)
        return()
    endif ()
    set(flags -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer)
    # GCC 12's -Wmaybe-uninitialized misfires on libstdc++'s <regex> (pulled in by Catch2) once
    # ASan instruments it; the warning stays on in the normal build.
    target_compile_options(${target} PRIVATE ${flags} -Wno-maybe-uninitialized)
    target_link_options(${target} PRIVATE ${flags})
endfunction()
