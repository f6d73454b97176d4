// Evolutionary search: mutate one of the best few points found so far by a step or two along
// one or two axes; now and then a random point, so a local optimum does not trap the search.
#include "tuning_search.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <sstream>

namespace attngen::cli {

std::string to_string(const ParamPoint &point) {
    std::string text;
    for (const auto &entry : point)
        text += (text.empty() ? "" : ",") + entry.first + "=" + std::to_string(entry.second);
    return text;
}

uint64_t point_hash(const ParamPoint &point) {
    uint64_t hash = 1469598103934665603ull;
    for (unsigned char c : to_string(point)) {
        hash ^= c;
        hash *= 1099511628211ull;
    }
    return hash;
}

ParamPoint ParamSpace::defaults() const {
    ParamPoint point;
    for (const ParamAxis &axis : axes)
        point[axis.name] = axis.default_value;
    return point;
}

long ParamSpace::size() const {
    long size = 1;
    for (const ParamAxis &axis : axes)
        size = std::min<long>(size * static_cast<long>(axis.values.size()), 1L << 31);
    return size;
}

bool ParamSpace::contains(const ParamPoint &point) const {
    if (point.size() != axes.size())
        return false;
    for (const ParamAxis &axis : axes) {
        auto found = point.find(axis.name);
        if (found == point.end() ||
            std::find(axis.values.begin(), axis.values.end(), found->second) == axis.values.end())
            return false;
    }
    return true;
}

std::string restrict_space(ParamSpace &space, const std::string &text) {
    std::stringstream stream(text);
    std::string item;
    while (std::getline(stream, item, ';')) {
        if (item.empty())
            continue;
        const size_t equals = item.find('=');
        const std::string name = item.substr(0, equals);
        auto axis = std::find_if(space.axes.begin(), space.axes.end(),
                                 [&](const ParamAxis &a) { return a.name == name; });
        if (equals == std::string::npos || axis == space.axes.end()) {
            std::string names;
            for (const ParamAxis &a : space.axes)
                names += (names.empty() ? "" : ", ") + a.name;
            return "--space: unknown parameter in '" + item + "'; this target's are " + names;
        }
        std::vector<int> values;
        std::stringstream list(item.substr(equals + 1));
        std::string word;
        while (std::getline(list, word, '/')) {
            char *end = nullptr;
            const long value = std::strtol(word.c_str(), &end, 10);
            const bool allowed =
                std::find(axis->values.begin(), axis->values.end(), value) != axis->values.end();
            if (word.empty() || *end != '\0' || !(allowed || (value >= 1 && value <= 64)))
                return "--space: " + name + " takes its own values or any in 1..64, separated " +
                       "by '/', got '" + item.substr(equals + 1) + "'";
            values.push_back(static_cast<int>(value));
        }
        std::sort(values.begin(), values.end());
        values.erase(std::unique(values.begin(), values.end()), values.end());
        if (values.empty())
            return "--space: " + name + " needs at least one value";
        axis->values = values;
        if (std::find(values.begin(), values.end(), axis->default_value) == values.end())
            axis->default_value = values.front();
    }
    return "";
}

ParamSearch::ParamSearch(ParamSpace space, uint32_t seed, int shard_index, int shard_count)
    : space_(std::move(space)), rng_(seed), shard_index_(shard_index),
      shard_count_(std::max(shard_count, 1)) {}

void ParamSearch::observe(const ParamPoint &point, double cost) {
    if (!space_.contains(point))
        return;
    auto found = costs_.find(point);
    // A point measured twice (a resumed log, a re-measurement) keeps its better figure.
    if (found == costs_.end() || cost < found->second)
        costs_[point] = cost;
}

bool ParamSearch::in_shard(const ParamPoint &point) const {
    return point == space_.defaults() ||
           static_cast<int>(point_hash(point) % static_cast<uint64_t>(shard_count_)) ==
               shard_index_;
}

bool ParamSearch::proposable(const ParamPoint &point) const {
    return !tried(point) && in_shard(point);
}

std::optional<ParamPoint> ParamSearch::next() {
    const ParamPoint defaults = space_.defaults();
    if (!tried(defaults))
        return defaults;
    std::uniform_real_distribution<double> coin(0, 1);
    if (coin(rng_) < 0.15)
        if (std::optional<ParamPoint> point = random_point())
            return point;
    if (std::optional<ParamPoint> point = mutate_best())
        return point;
    if (std::optional<ParamPoint> point = random_point())
        return point;
    return any_untried();
}

std::optional<ParamPoint> ParamSearch::mutate_best() {
    std::vector<std::pair<double, ParamPoint>> valid;
    for (const auto &entry : costs_)
        if (std::isfinite(entry.second))
            valid.emplace_back(entry.second, entry.first);
    if (valid.empty())
        return std::nullopt;
    std::sort(valid.begin(), valid.end());
    const int pool = std::min<int>(5, static_cast<int>(valid.size()));
    std::uniform_int_distribution<int> pick(0, pool - 1);
    std::uniform_int_distribution<int> pick_axis(0, static_cast<int>(space_.axes.size()) - 1);
    std::uniform_real_distribution<double> coin(0, 1);
    for (int attempt = 0; attempt < 64; attempt++) {
        // The better of two draws from the best few: mostly the best, sometimes a runner-up.
        ParamPoint point = valid[std::min(pick(rng_), pick(rng_))].second;
        const int changes = coin(rng_) < 0.7 ? 1 : 2;
        for (int change = 0; change < changes; change++) {
            const ParamAxis &axis = space_.axes[pick_axis(rng_)];
            const int count = static_cast<int>(axis.values.size());
            const int at = static_cast<int>(
                std::find(axis.values.begin(), axis.values.end(), point[axis.name]) -
                axis.values.begin());
            // Mostly a step to a neighbouring value, sometimes a jump anywhere on the axis.
            const int to = coin(rng_) < 0.8
                               ? at + (coin(rng_) < 0.5 ? -1 : 1)
                               : std::uniform_int_distribution<int>(0, count - 1)(rng_);
            point[axis.name] = axis.values[std::clamp(to, 0, count - 1)];
        }
        if (proposable(point))
            return point;
    }
    return std::nullopt;
}

std::optional<ParamPoint> ParamSearch::random_point() {
    for (int attempt = 0; attempt < 64; attempt++) {
        ParamPoint point;
        for (const ParamAxis &axis : space_.axes)
            point[axis.name] =
                axis.values[std::uniform_int_distribution<size_t>(0, axis.values.size() - 1)(rng_)];
        if (proposable(point))
            return point;
    }
    return std::nullopt;
}

std::optional<ParamPoint> ParamSearch::any_untried() {
    if (space_.size() > 1000000)
        return std::nullopt;
    std::vector<size_t> index(space_.axes.size(), 0);
    while (true) {
        ParamPoint point;
        for (size_t i = 0; i < space_.axes.size(); i++)
            point[space_.axes[i].name] = space_.axes[i].values[index[i]];
        if (proposable(point))
            return point;
        size_t i = 0;
        while (i < index.size() && ++index[i] == space_.axes[i].values.size())
            index[i++] = 0;
        if (i == index.size())
            return std::nullopt;
    }
}

} // namespace attngen::cli
