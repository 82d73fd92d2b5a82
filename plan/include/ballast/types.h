// Strong identifier types shared by the worker library and the control plane.
//
// A bare int can be a rank, a unit index, a block id or a plan version; mixing them up is
// a silent bug. These wrappers make each a distinct type with explicit construction:
//
//   ballast::RankId r(2);
//   ballast::PlanVersion v(17);
//   if (v > applied) ...
#ifndef BALLAST_TYPES_H_
#define BALLAST_TYPES_H_

#include <compare>
#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <utility>

namespace ballast {

template <typename Tag, typename Rep>
class StrongId {
 public:
  using ValueType = Rep;
  constexpr StrongId() = default;
  constexpr explicit StrongId(Rep value) : value_(std::move(value)) {}
  constexpr const Rep& value() const { return value_; }
  constexpr auto operator<=>(const StrongId&) const = default;
  template <typename H>
  friend H AbslHashValue(H h, const StrongId& id) {
    return H::combine(std::move(h), id.value_);
  }
  friend std::ostream& operator<<(std::ostream& os, const StrongId& id) { return os << id.value_; }

 private:
  Rep value_{};
};

struct RankIdTag {};
struct BlockIdTag {};
struct PlanVersionTag {};
struct GroupIdTag {};

// Rank within a tensor-parallel group, 0 .. size-1.
using RankId = StrongId<RankIdTag, int32_t>;
// A TP block (one ParallelMlp or ParallelAttention) within a group; unique per group.
using BlockId = StrongId<BlockIdTag, int32_t>;
// Monotonically increasing version of a group's workload plan; 0 means "no plan yet"
// (every unit local, initial ownership).
using PlanVersion = StrongId<PlanVersionTag, int64_t>;
// A TP group's cluster-wide name, e.g. "vit-train/tp0".
using GroupId = StrongId<GroupIdTag, std::string>;

}  // namespace ballast

#endif  // BALLAST_TYPES_H_
