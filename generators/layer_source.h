// Where a layer's description comes from: key=value parameters (the generator's and the CLI's
// common form), or one layer of a .attn file named by spec=FILE [layer=NAME].
#pragma once

#include "dsl/attention_spec.h"

#include <map>
#include <optional>
#include <string>

namespace attngen {

/** A checked description, or the rendered diagnostics that explain why there is none. */
struct LayerSource {
    std::optional<AttentionSpec> spec;
    std::string errors;
};

/**
 * The description `params` name. With `spec`, the layer `layer` of that .attn file (or its only
 * layer), and no description keys beside them; without, the description keys themselves.
 * Keys the generator takes besides (schedule, schedule_params, target, tuned, tuned_digest,
 * shape_class) are ignored.
 */
LayerSource load_layer(const std::map<std::string, std::string> &params);

} // namespace attngen
