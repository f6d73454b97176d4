// See layer_source.h.
#include "layer_source.h"

#include "dsl/attn_parser.h"

namespace attngen {

LayerSource load_layer(const std::map<std::string, std::string> &params) {
    LayerSource source;
    std::map<std::string, std::string> description = params;
    for (const char *ignored :
         {"schedule", "schedule_params", "target", "tuned", "tuned_digest", "shape_class"})
        description.erase(ignored);
    auto file = description.find("spec");
    if (file == description.end()) {
        std::vector<SpecError> errors;
        AttentionSpec spec = spec_from_params(description, errors);
        if (errors.empty())
            errors = check_spec(spec);
        if (!errors.empty()) {
            source.errors = "invalid attention layer:\n" + describe_errors(errors);
            return source;
        }
        source.spec = spec;
        return source;
    }

    const std::string path = file->second;
    std::string wanted;
    if (auto layer = description.find("layer"); layer != description.end())
        wanted = layer->second;
    for (const auto &entry : description)
        if (entry.first != "spec" && entry.first != "layer" && entry.first != "name") {
            source.errors = "'" + entry.first + "' cannot be given with spec=" + path +
                            ": the file describes the layer";
            return source;
        }
    ParsedSpec parsed = parse_attn_file(path);
    for (const Diagnostic &diagnostic : parsed.errors)
        source.errors += render(diagnostic);
    if (!parsed.errors.empty())
        return source;
    std::string names;
    for (const AttentionSpec &layer : parsed.layers) {
        if (layer.name == wanted || (wanted.empty() && parsed.layers.size() == 1)) {
            source.spec = layer;
            if (auto name = description.find("name"); name != description.end())
                source.spec->name = name->second;
            return source;
        }
        names += (names.empty() ? "" : ", ") + layer.name;
    }
    source.errors = wanted.empty() ? path + " describes " + std::to_string(parsed.layers.size()) +
                                         " layers (" + names + "); name one with layer=NAME"
                                   : path + " has no layer '" + wanted + "'; it has " +
                                         (names.empty() ? "none" : names);
    return source;
}

} // namespace attngen
