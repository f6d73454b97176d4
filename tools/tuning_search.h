// The search over one target family's schedule parameters: an evolutionary search seeded with
// the hand-written defaults. It proposes points and learns from measured costs; it never
// measures anything itself, so tests can drive it with a cost they know.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace attngen::cli {

/** One parameter: its name, the values worth trying (ascending) and the hand-written default. */
struct ParamAxis {
    std::string name;
    std::vector<int> values;
    int default_value = 0;
};

/** Parameter values by name: one candidate schedule. */
using ParamPoint = std::map<std::string, int>;

/** "key=value,..." in name order (the form schedules and GenGen take, with '=' or ':'). */
std::string to_string(const ParamPoint &point);

/** The space of one target family; every axis holds its default among its values. */
struct ParamSpace {
    std::vector<ParamAxis> axes;

    ParamPoint defaults() const;
    /** The number of points (saturating at 2^31). */
    long size() const;
    /** True if every axis of the space has a value in `point` that the axis allows. */
    bool contains(const ParamPoint &point) const;
};

/**
 * Restricts `space` by "name=v1/v2/...;name=..." (values the axis must already allow, or any
 * in 1..64 for a narrower test space). Returns an empty string or what is wrong.
 */
std::string restrict_space(ParamSpace &space, const std::string &text);

/**
 * The search. Costs are lower-is-better; an invalid candidate has cost +infinity and is never
 * proposed again or used as a parent. With a shard i/n, only points whose stable hash is i mod n
 * are proposed (the defaults are proposed by every shard: each shard's log holds the baseline).
 */
class ParamSearch {
  public:
    ParamSearch(ParamSpace space, uint32_t seed, int shard_index = 0, int shard_count = 1);

    /** Records a measured (or resumed) point. Points outside the space are ignored. */
    void observe(const ParamPoint &point, double cost);

    /** The next point to measure, or nothing when the shard's part of the space is exhausted. */
    std::optional<ParamPoint> next();

    bool tried(const ParamPoint &point) const { return costs_.count(point) != 0; }
    const ParamSpace &space() const { return space_; }

  private:
    bool in_shard(const ParamPoint &point) const;
    bool proposable(const ParamPoint &point) const;
    std::optional<ParamPoint> mutate_best();
    std::optional<ParamPoint> random_point();
    std::optional<ParamPoint> any_untried();

    ParamSpace space_;
    std::mt19937 rng_;
    int shard_index_, shard_count_;
    std::map<ParamPoint, double> costs_;
};

/** A stable 64-bit hash of a point (FNV-1a of its string form); the same on every machine. */
uint64_t point_hash(const ParamPoint &point);

} // namespace attngen::cli
