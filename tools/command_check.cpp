// `attngen check FILE`: the front end's diagnostics, nothing generated.
#include "cli.h"

#include "dsl/attn_parser.h"

#include <fmt/format.h>

namespace attngen::cli {

int command_check(int argc, char **argv) {
    Arguments args = parse(argc, argv, 2, {}, {"help"});
    if (args.has("help")) {
        fmt::print("usage: attngen check FILE\n\n"
                   "Parses and checks FILE (.attn) and prints every error with its location.\n"
                   "Exit status: 0 when FILE is valid, 1 when it has errors.\n");
        return exit_ok;
    }
    if (!args.error.empty() || args.positional.size() != 1) {
        fmt::print(stderr, "attngen check: {}\nusage: attngen check FILE\n",
                   args.error.empty() ? "expected one FILE" : args.error);
        return exit_user_error;
    }
    ParsedSpec parsed = parse_attn_file(args.positional[0]);
    for (const Diagnostic &diagnostic : parsed.errors)
        fmt::print(stderr, "{}", render(diagnostic));
    if (!parsed.errors.empty()) {
        fmt::print(stderr, "{} error{}\n", parsed.errors.size(),
                   parsed.errors.size() == 1 ? "" : "s");
        return exit_user_error;
    }
    fmt::print("{}: {} layer{}\n", args.positional[0], parsed.layers.size(),
               parsed.layers.size() == 1 ? "" : "s");
    for (const AttentionSpec &layer : parsed.layers)
        fmt::print("  {}: heads={} kv_heads={} head_dim={}{} model_dim={} dtype={}{} "
                   "projections={} mask={}{}{}{}{}{}{}\n",
                   layer.name, layer.heads, layer.resolved_kv_heads(), layer.resolved_head_dim(),
                   layer.value_dim > 0 ? fmt::format(" value_dim={}", layer.value_dim) : "",
                   layer.resolved_model_dim(), to_string(layer.dtype),
                   layer.kv_dtype ? std::string(" kv_dtype=") + to_string(*layer.kv_dtype) : "",
                   to_string(layer.projections), to_string(layer.mask),
                   layer.rope.any() ? " rope=" + rope_text(layer.rope) : "",
                   layer.cache.any() ? " cache=" + cache_text(layer.cache) +
                                           " cache_dtype=" + to_string(layer.resolved_cache_dtype())
                                     : "",
                   layer.sinks ? " sinks=true" : "", layer.lse_output ? " outputs=out,lse" : "",
                   layer.packed ? " layout=packed" : "", layer.score_mod ? " score_mod" : "");
    return exit_ok;
}

} // namespace attngen::cli
