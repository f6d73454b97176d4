#include "halide_compat.h"

#include <exception>
#include <iostream>
#include <map>
#include <sstream>

namespace attngen::halide_compat {

int generate_filter_main(int argc, char **argv, std::string &errors) {
#if ATTNGEN_HALIDE_MAJOR >= 21
    // Halide 21 reports to std::cerr and throws on errors in the generator.
    std::ostringstream stream;
    std::streambuf *const saved = std::cerr.rdbuf(stream.rdbuf());
    int status = 1;
    try {
        status = Halide::Internal::generate_filter_main(argc, argv);
    } catch (const std::exception &e) {
        stream << e.what() << "\n";
        status = 1;
    }
    std::cerr.rdbuf(saved);
    errors = stream.str();
    return status;
#else
    std::ostringstream stream;
    const int status = Halide::Internal::generate_filter_main(argc, argv, stream);
    errors = stream.str();
    return status;
#endif
}

void apply_autoscheduler(Halide::Pipeline &pipeline, const std::string &name,
                         const Halide::Target &target, int threads, int64_t cache_bytes) {
#if ATTNGEN_HALIDE_MAJOR >= 21
    // Each plugin takes its own parameters; those it does not know are errors.
    std::map<std::string, std::string> extra{{"parallelism", std::to_string(threads)}};
    if (name == "Mullapudi2016") {
        extra["last_level_cache_size"] = std::to_string(cache_bytes);
        extra["balance"] = "40";
    }
    pipeline.apply_autoscheduler(target, Halide::AutoschedulerParams(name, extra));
#else
    pipeline.auto_schedule(name, target, Halide::MachineParams(threads, cache_bytes, 40));
#endif
}

} // namespace attngen::halide_compat
