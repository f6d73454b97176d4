# attngen_sanitize(target): AddressSanitizer + UndefinedBehaviorSanitizer on one of our own
# targets when ATTNGEN_SANITIZE is on. Generated Halide code is not instrumented.
function(attngen_sanitize target)
    if (NOT ATTNGEN_SANITIZE)
        return()
    endif ()
    set(flags -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer)
    target_compile_options(${target} PRIVATE ${flags})
    target_link_options(${target} PRIVATE ${flags})
endfunction()
