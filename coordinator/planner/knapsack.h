// The exact knapsack under the planner's MinPrunes (transfer_solver.h): which extra
// prunes, over a few ranks, cover a coverage deficit with the fewest prunes. Each rank is
// an item whose options (extra prunes -> extra coverage) grow in both, and each item takes
// at most one option.
//
// How it stays fast. The options' upper concave hulls, merged by slope, give a linear
// relaxation (LP) bound for any suffix of the items. The LP's own solution rounded to
// whole options, one of two ways, is usually already optimal (it costs ceil(LP));
// otherwise a DP over "coverage gained so far" expands only states whose cost plus the LP
// bound of the items still to come fits under a limit, raising the limit from the LP
// bound until a solution appears. Internal to the planner.
#ifndef BALLAST_COORDINATOR_PLANNER_KNAPSACK_H_
#define BALLAST_COORDINATOR_PLANNER_KNAPSACK_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace ballast::coordinator::planner_internal {

class PruneKnapsack {
 public:
  struct Option {
    int32_t cost;  // extra prunes
    int64_t gain;  // extra coverage
  };
  struct Item {
    int32_t rank;
    std::vector<Option> options;  // costs >= 1; cost and gain both strictly increasing
  };

  // Items are reused across calls (the search calls this a lot): Clear keeps their
  // capacity, Add hands out the next one with no options.
  void Clear() { num_items_ = 0; }
  Item& Add(int32_t rank) {
    if (num_items_ == items_.size()) items_.emplace_back();
    Item& item = items_[num_items_++];
    item.rank = rank;
    item.options.clear();
    return item;
  }
  void DropLast() { --num_items_; }
  void Reserve(size_t items) { items_.reserve(items); }
  size_t size() const { return num_items_; }
  Item& item(size_t i) { return items_[i]; }

  // Fewest total extra prunes (<= budget) whose gains sum to >= target, or kNoPlan. Adds
  // each item's chosen prunes to (*z)[item.rank] when z is non-null.
  int64_t Solve(int64_t target, int64_t budget, std::vector<int32_t>* z);

  // How the solves so far ended (tests check that each way is exercised): proved optimal
  // by a rounding of the LP, handed to the DP, or refused because even the LP exceeds the
  // budget.
  struct Stats {
    int64_t by_rounding = 0;  // RoundLp's solution cost ceil(LP)
    int64_t by_repair = 0;    // RepairLp's did
    int64_t by_dp = 0;        // solved by the DP, or found infeasible by it
    int64_t infeasible = 0;   // ceil(LP) over the budget, or no LP solution at all
  };
  const Stats& stats() const { return stats_; }

 private:
  struct Segment {
    double cost;
    double gain;
    size_t item = 0;  // hull segments only: the index into items_ it belongs to
  };

  // a is steeper than b (more gain per cost); exact, as costs and gains are integers.
  static bool Steeper(const Segment& a, const Segment& b) {
    return a.gain * b.cost > b.gain * a.cost;
  }

  std::span<const Segment> LpSegments() const { return {segments_.data(), num_segments_}; }
  double PrepareLp(int64_t target);
  int64_t RoundLp(int64_t target);
  int64_t RepairLp(int64_t target);
  int64_t TakeLpPrefix(int64_t target, bool whole_last);
  bool ChooseVertices();
  int64_t DropSurplus(int64_t target);
  int64_t RunDp(int64_t target, int64_t upper, std::vector<int32_t>* z);
  double RestBound(size_t i, int64_t h) const;
  void FillDense(int64_t target);
  int64_t PrepareBounds(int64_t target);

  Stats stats_;
  std::vector<Item> items_;  // the first num_items_ are in use
  size_t num_items_ = 0;
  // Scratch, reused across calls so that the search allocates almost nothing.
  // The DP: least cost to have gained g, the gains alive and new this item, which gains
  // are listed, and per (item, gain) the option picked and the gain it came from, valid
  // where written_in_epoch_ is this run's epoch_.
  std::vector<int32_t> least_cost_, live_gains_, new_gains_, picked_option_, previous_gain_;
  std::vector<char> listed_;
  std::vector<uint64_t> written_in_epoch_;
  uint64_t epoch_ = 0;
  // The bounds. hull_segments_: item i's hull at [hull_begin_[i], hull_begin_[i + 1]).
  // segments_: all items' hull segments, steepest first (the LP; the first
  // num_segments_); merged_: PrepareLp's merge buffer. These three only grow.
  // suffix_points_: the merged suffix hulls as cumulative points
  // (suffix_points_[suffix_begin_[i] .. suffix_end_[i]) for items order_[i..]).
  std::vector<Segment> hull_segments_, segments_, merged_, suffix_points_;
  std::vector<size_t> hull_begin_;
  size_t num_segments_ = 0;
  std::vector<size_t> position_;  // PrepareBounds': each item's index in order_
  std::vector<size_t> suffix_begin_, suffix_end_;
  std::vector<double> dense_bound_;  // RestBound(i, h) at [i * dense_width_ + h], when small
  size_t dense_width_ = 0;
  std::vector<size_t> order_;            // items by efficiency, most efficient first
  std::vector<Option> hull_chain_;       // PrepareLp's hull scratch
  std::vector<int32_t> rounded_choice_;  // RoundLp's or RepairLp's option per item (-1: none)
  std::vector<int64_t> rounded_gain_;    // their gain per item from the LP
};

}  // namespace ballast::coordinator::planner_internal

#endif  // BALLAST_COORDINATOR_PLANNER_KNAPSACK_H_
