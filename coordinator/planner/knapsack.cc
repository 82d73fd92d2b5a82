#include "coordinator/planner/knapsack.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include "coordinator/planner/problem.h"

namespace ballast::coordinator::planner_internal {

// Fewest total extra prunes (<= budget) whose gains sum to >= target over the items; each
// item takes at most one option. Adds the chosen prunes to z when non-null.
//
// No integer solution costs less than the LP (PrepareLp), so one that costs ceil(LP) is
// optimal. Two roundings of the LP's solution look for one (RoundLp, RepairLp): on the
// planner benchmark's random case one of them finds it in every solve that ceil(LP) does
// not already put over the budget.
//
// Otherwise a DP over "coverage gained so far" (which can run to hundreds of units when
// many ranks prune many units), pruned: a state is expanded only if its cost plus an LP
// bound for the items still to come (their options' concave hulls, filled steepest first)
// fits under a limit. Limits are tried from the LP bound up to a greedy solution's cost;
// the LP-to-integer gap is a few prunes, so only states near the LP's path survive, and
// the first limit that admits a solution yields the exact optimum.
int64_t PruneKnapsack::Solve(int64_t target, int64_t budget, std::vector<int32_t>* z) {
  const double root = PrepareLp(target);
  if (!std::isfinite(root)) {  // even the LP cannot reach the target
    ++stats_.infeasible;
    return kNoPlan;
  }
  int64_t limit = std::max<int64_t>(0, static_cast<int64_t>(std::ceil(root - 1e-7)));
  if (limit > budget) {  // every solution costs at least the LP's bound
    ++stats_.infeasible;
    return kNoPlan;
  }
  int64_t rounded = RoundLp(target);
  if (rounded <= limit) {
    ++stats_.by_rounding;
  } else {
    rounded = RepairLp(target);
    if (rounded <= limit) ++stats_.by_repair;
  }
  if (rounded <= limit) {
    if (z != nullptr) {
      for (size_t i = 0; i < num_items_; ++i) {
        if (rounded_choice_[i] >= 0)
          (*z)[items_[i].rank] += items_[i].options[rounded_choice_[i]].cost;
      }
    }
    return rounded;
  }
  ++stats_.by_dp;
  const int64_t cap = std::min(budget, PrepareBounds(target));
  FillDense(target);
  // Tight limits first: few states survive them, and the first limit that succeeds gives
  // the exact optimum, since no state on an optimal path is ever cut.
  for (int64_t step = 1;; step *= 2) {
    if (limit >= cap) return RunDp(target, cap, z);
    const int64_t got = RunDp(target, limit, z);
    if (got != kNoPlan) return got;
    limit += step;
  }
}

// Another rounding of the LP, for when RoundLp's costs more than ceil(LP): each item at
// the hull vertex the LP fills it to, short of the partly taken segment, and the rest of
// the target from the one item whose cheapest option covering it adds least (any of its
// options, not only the hull's). Then DropSurplus. Leaves its choice in rounded_choice_,
// as RoundLp does; returns the cost (kNoPlan if no item can cover the rest).
int64_t PruneKnapsack::RepairLp(int64_t target) {
  const int64_t gained = TakeLpPrefix(target, /*whole_last=*/false);
  if (!ChooseVertices()) return kNoPlan;
  const int64_t deficit = target - gained;
  int64_t best_extra = kNoPlan;
  size_t best_item = 0;
  int32_t best_option = -1;
  for (size_t i = 0; i < num_items_; ++i) {
    const std::vector<Option>& options = items_[i].options;
    const int32_t now = rounded_choice_[i];
    const int64_t has = now < 0 ? 0 : options[now].gain;
    const int64_t paid = now < 0 ? 0 : options[now].cost;
    for (size_t j = now < 0 ? 0 : static_cast<size_t>(now); j < options.size(); ++j) {
      if (options[j].gain - has < deficit) continue;
      if (options[j].cost - paid < best_extra) {
        best_extra = options[j].cost - paid;
        best_item = i;
        best_option = static_cast<int32_t>(j);
      }
      break;  // costs grow with gains: the first that covers is the cheapest
    }
  }
  if (best_option < 0) return kNoPlan;
  rounded_choice_[best_item] = best_option;
  return DropSurplus(target);
}

// A feasible solution read off the LP (after PrepareLp): the LP fills the items'
// hull segments steepest first, so each item gets a prefix of its hull, ending at one of
// its options, except the last segment, taken in part; take that one whole. Then
// DropSurplus. Leaves the chosen option per item in rounded_choice_ (-1: none); returns
// the cost (kNoPlan if even the whole LP falls short).
int64_t PruneKnapsack::RoundLp(int64_t target) {
  if (TakeLpPrefix(target, /*whole_last=*/true) < target) return kNoPlan;
  if (!ChooseVertices()) return kNoPlan;
  return DropSurplus(target);
}

// Each item's gain in the LP's solution for `target` (after PrepareLp: segments_ holds all
// items' hull segments, steepest first) into rounded_gain_: whole segments only, the one
// the LP takes in part included when `whole_last`, else left out. Returns the total.
int64_t PruneKnapsack::TakeLpPrefix(int64_t target, bool whole_last) {
  rounded_gain_.assign(num_items_, 0);
  int64_t gained = 0;
  for (const Segment& seg : LpSegments()) {
    if (gained >= target) break;
    const int64_t g = static_cast<int64_t>(seg.gain);  // a whole number, exactly
    if (!whole_last && gained + g >= target) break;
    rounded_gain_[seg.item] += g;
    gained += g;
  }
  return gained;
}

// Each item at the option whose gain is its rounded_gain_ (a hull vertex, so an option;
// -1 for none) into rounded_choice_. False if some item has no such option, which
// cannot happen.
bool PruneKnapsack::ChooseVertices() {
  rounded_choice_.assign(num_items_, -1);
  for (size_t i = 0; i < num_items_; ++i) {
    if (rounded_gain_[i] == 0) continue;
    const std::vector<Option>& options = items_[i].options;
    const auto vertex =
        std::partition_point(options.begin(), options.end(),
                             [&](const Option& o) { return o.gain < rounded_gain_[i]; });
    if (vertex == options.end()) return false;
    rounded_choice_[i] = static_cast<int32_t>(vertex - options.begin());
  }
  return true;
}

// Item by item, each chosen option drops to the cheapest one that still keeps the total
// gain >= target (none if the others suffice). Returns the cost of what remains chosen.
int64_t PruneKnapsack::DropSurplus(int64_t target) {
  int64_t gained = 0;
  for (size_t i = 0; i < num_items_; ++i) {
    if (rounded_choice_[i] >= 0) gained += items_[i].options[rounded_choice_[i]].gain;
  }
  int64_t cost = 0;
  for (size_t i = 0; i < num_items_; ++i) {
    if (rounded_choice_[i] < 0) continue;
    const std::vector<Option>& options = items_[i].options;
    const int64_t gives = options[rounded_choice_[i]].gain;
    const int64_t want = gives - (gained - target);  // what it must still give
    int32_t pick = -1;
    if (want > 0) {  // the first option that gives it: the one chosen or an earlier one
      pick = rounded_choice_[i];
      while (pick > 0 && options[pick - 1].gain >= want) --pick;
    }
    gained += (pick < 0 ? 0 : options[pick].gain) - gives;
    rounded_choice_[i] = pick;
    if (pick >= 0) cost += options[pick].cost;
  }
  return cost;
}

// The DP itself, keeping only states whose cost plus LP completion fits under `upper`.
int64_t PruneKnapsack::RunDp(int64_t target, int64_t upper, std::vector<int32_t>* z) {
  constexpr int32_t kBig = std::numeric_limits<int32_t>::max() / 2;
  const size_t width = static_cast<size_t>(target) + 1;
  const size_t k = num_items_;
  // Bounds compare a fractional LP cost with integer costs; the slack absorbs rounding.
  const double limit = static_cast<double>(upper) + 1e-7;
  const bool track = z != nullptr;
  if (track && picked_option_.size() < k * width) {
    picked_option_.resize(k * width);
    previous_gain_.resize(k * width);
    written_in_epoch_.resize(k * width, 0);
  }
  ++epoch_;
  // In place, over the live states only, largest first: an option only raises the
  // state, so nothing written for this item is expanded again by it.
  least_cost_.assign(width, kBig);
  least_cost_[0] = 0;
  live_gains_.assign(1, 0);
  listed_.assign(width, 0);  // in live_gains_ or new_gains_: each state is expanded once per item
  listed_[0] = 1;
  for (size_t i = 0; i < k; ++i) {
    std::sort(live_gains_.begin(), live_gains_.end(), std::greater<>());
    new_gains_.clear();
    const std::vector<Option>& options = items_[order_[i]].options;
    for (const int32_t g : live_gains_) {
      const int32_t here = least_cost_[g];
      if (here + RestBound(i, target - g) > limit) {
        least_cost_[g] = kBig;  // cannot finish within `upper`
        continue;
      }
      for (size_t j = 0; j < options.size(); ++j) {
        const int64_t cost = int64_t{here} + options[j].cost;
        if (cost > upper) break;  // options grow in cost
        const int32_t ng = static_cast<int32_t>(std::min<int64_t>(target, g + options[j].gain));
        if (cost >= least_cost_[ng]) continue;
        if (static_cast<double>(cost) + RestBound(i + 1, target - ng) > limit) continue;
        if (!listed_[ng]) {
          listed_[ng] = 1;
          new_gains_.push_back(ng);
        }
        least_cost_[ng] = static_cast<int32_t>(cost);
        if (track) {
          const size_t at = i * width + static_cast<size_t>(ng);
          written_in_epoch_[at] = epoch_;
          picked_option_[at] = static_cast<int32_t>(j);
          previous_gain_[at] = g;
        }
      }
    }
    live_gains_.erase(std::remove_if(live_gains_.begin(), live_gains_.end(),
                                     [&](int32_t g) {
                                       if (least_cost_[g] < kBig) return false;
                                       listed_[g] = 0;
                                       return true;
                                     }),
                      live_gains_.end());
    live_gains_.insert(live_gains_.end(), new_gains_.begin(), new_gains_.end());
  }
  if (least_cost_[width - 1] >= kBig) return kNoPlan;
  if (track) {
    size_t g = width - 1;
    for (size_t i = k; i-- > 0;) {
      const size_t at = i * width + g;
      if (written_in_epoch_[at] != epoch_) continue;  // this item added nothing on the path
      const Item& item = items_[order_[i]];
      (*z)[item.rank] += item.options[picked_option_[at]].cost;
      g = static_cast<size_t>(previous_gain_[at]);
    }
  }
  return least_cost_[width - 1];
}

// Least fractional cost to gain h from items i.. on (kInf if they cannot).
double PruneKnapsack::RestBound(size_t i, int64_t h) const {
  if (h <= 0) return 0;
  if (!dense_bound_.empty()) return dense_bound_[i * dense_width_ + static_cast<size_t>(h)];
  const size_t from = suffix_begin_[i], to = suffix_end_[i];
  const double want = static_cast<double>(h);
  // First cumulative point that reaches h.
  size_t lo = from, hi = to;
  while (lo < hi) {
    const size_t mid = (lo + hi) / 2;
    if (suffix_points_[mid].gain >= want) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  if (lo == to) return kInf;
  const double gain0 = lo == from ? 0.0 : suffix_points_[lo - 1].gain;
  const double cost0 = lo == from ? 0.0 : suffix_points_[lo - 1].cost;
  return cost0 +
         (want - gain0) * (suffix_points_[lo].cost - cost0) / (suffix_points_[lo].gain - gain0);
}

// RestBound as a table, for the DP: small tables are cheaper to fill (one walk per
// suffix) than to search pair by pair. Call after PrepareBounds.
void PruneKnapsack::FillDense(int64_t target) {
  const size_t k = num_items_;
  const size_t width = static_cast<size_t>(target) + 1;
  if ((k + 1) * width <= 1024) {
    dense_bound_.assign((k + 1) * width, kInf);
    for (size_t i = 0; i <= k; ++i) {
      double* row = &dense_bound_[i * width];
      row[0] = 0;
      size_t at = suffix_begin_[i];
      for (size_t h = 1; h < width; ++h) {
        const double want = static_cast<double>(h);
        while (at < suffix_end_[i] && suffix_points_[at].gain < want) ++at;
        if (at == suffix_end_[i]) break;  // the rest stay kInf
        const double gain0 = at == suffix_begin_[i] ? 0.0 : suffix_points_[at - 1].gain;
        const double cost0 = at == suffix_begin_[i] ? 0.0 : suffix_points_[at - 1].cost;
        row[h] = cost0 + (want - gain0) * (suffix_points_[at].cost - cost0) /
                             (suffix_points_[at].gain - gain0);
      }
    }
    dense_width_ = width;
  }
}

// For the knapsack: the items' hulls, their order by efficiency (order_) and the LP over
// all of them (segments_: every hull segment, steepest first). Returns the LP's least
// fractional cost to gain `target` (kInf if the items cannot). RoundLp needs only this;
// the DP's per-suffix bounds (PrepareBounds) are built only when the rounding fails.
double PruneKnapsack::PrepareLp(int64_t target) {
  const size_t k = num_items_;
  order_.resize(k);
  for (size_t i = 0; i < k; ++i) order_[i] = i;
  // Upper concave hull of each item's (cost, gain) points from the origin: few segments,
  // since the gains are floors of a line. A monotone chain over the integer points (the
  // cross products are exact in int64), then cut into segments: item i's are
  // hull_segments_[hull_begin_[i] .. hull_begin_[i + 1]). Buffers only grow, and are
  // written by index: no allocation, no construction, once they are large enough.
  size_t most = 0;  // an item has at most one segment per option
  for (size_t i = 0; i < k; ++i) most += items_[i].options.size();
  if (hull_segments_.size() < most) {
    hull_segments_.resize(most);
    segments_.resize(most);
    merged_.resize(most);
  }
  hull_begin_.resize(k + 1);
  size_t used = 0;
  for (size_t i = 0; i < k; ++i) {
    hull_begin_[i] = used;
    const Option* options = items_[i].options.data();
    const size_t m = items_[i].options.size();
    if (hull_chain_.size() <= m) hull_chain_.resize(m + 1);
    Option* chain = hull_chain_.data();
    size_t top = 0;
    chain[top++] = {0, 0};
    auto push = [&](const Option& o) {
      // Drop the last vertex while o is at least as steep from the one before it.
      while (top >= 2) {
        const Option& v0 = chain[top - 2];
        const Option& v1 = chain[top - 1];
        if ((o.gain - v1.gain) * int64_t{v1.cost - v0.cost} <
            (v1.gain - v0.gain) * int64_t{o.cost - v1.cost}) {
          break;
        }
        --top;
      }
      chain[top++] = o;
    };
    // An option on or below the chord of its two neighbours is no vertex, and the chain
    // would drop it again: skip it at the price of one cross product. Floors of a line
    // have at most half their points above that chord (where the gain's rise falls).
    if (m > 0 && options[0].cost == 1 && options[m - 1].cost == static_cast<int64_t>(m)) {
      // Costs 1, 2, .., m (strictly rising integers from 1 to m): one option per prune,
      // as a sender's are. The chord test compares rises alone.
      int64_t rise_in = options[0].gain;
      for (size_t j = 0; j + 1 < m; ++j) {
        const int64_t rise_out = options[j + 1].gain - options[j].gain;
        if (rise_in > rise_out) push(options[j]);
        rise_in = rise_out;
      }
    } else if (m > 0) {
      // The step from the option (or origin) before to the option in hand.
      int64_t run_in = options[0].cost, rise_in = options[0].gain;
      for (size_t j = 0; j + 1 < m; ++j) {
        const int64_t run_out = options[j + 1].cost - options[j].cost;
        const int64_t rise_out = options[j + 1].gain - options[j].gain;
        if (rise_in * run_out > rise_out * run_in) push(options[j]);
        run_in = run_out;
        rise_in = rise_out;
      }
    }
    if (m > 0) push(options[m - 1]);
    for (size_t j = 1; j < top; ++j) {
      hull_segments_[used++] = {static_cast<double>(chain[j].cost - chain[j - 1].cost),
                                static_cast<double>(chain[j].gain - chain[j - 1].gain), i};
    }
  }
  hull_begin_[k] = used;
  // Most efficient item first, so that the bound bites early.
  auto first_slope = [&](size_t i) {
    if (hull_begin_[i] == hull_begin_[i + 1]) return 0.0;  // no options, no hull
    const Segment& first = hull_segments_[hull_begin_[i]];
    return first.gain / first.cost;
  };
  // A stable insertion sort: a handful of items, and std::stable_sort would allocate.
  for (size_t i = 1; i < k; ++i) {
    const size_t item = order_[i];
    const double slope = first_slope(item);
    size_t j = i;
    for (; j > 0 && first_slope(order_[j - 1]) < slope; --j) order_[j] = order_[j - 1];
    order_[j] = item;
  }
  // All segments by slope, each item's hull merged in from the last item backwards (on
  // ties the later item's first; PrepareBounds reads the suffixes' LPs off this order).
  num_segments_ = 0;
  for (size_t i = k; i-- > 0;) {
    const Segment* hull = hull_segments_.data() + hull_begin_[order_[i]];
    const size_t size = hull_begin_[order_[i] + 1] - hull_begin_[order_[i]];
    std::merge(segments_.data(), segments_.data() + num_segments_, hull, hull + size,
               merged_.data(), Steeper);
    std::swap(segments_, merged_);
    num_segments_ += size;
  }
  dense_bound_.clear();  // FillDense builds it, once the DP is needed
  double cost = 0, gain = 0;
  const double want = static_cast<double>(target);
  if (target <= 0) return 0;
  for (const Segment& seg : LpSegments()) {
    if (gain + seg.gain >= want) return cost + (want - gain) * seg.cost / seg.gain;
    cost += seg.cost;
    gain += seg.gain;
  }
  return kInf;
}

// For the DP, after PrepareLp: the suffix LP bounds (suffix_points_: the cumulative hull
// points of items order_[i..] merged by slope) and a greedy solution's cost (kNoPlan if
// the greedy finds none).
int64_t PruneKnapsack::PrepareBounds(int64_t target) {
  const size_t k = num_items_;
  // Suffix i's LP fills the segments of items order_[i..] steepest first, in the order
  // segments_ lists them (merging is stable, so the merge of a suffix is the subsequence
  // of the merge of all): its cumulative points are those of that subsequence.
  position_.resize(k);
  for (size_t i = 0; i < k; ++i) position_[order_[i]] = i;
  suffix_points_.clear();
  suffix_begin_.assign(k + 1, 0);
  suffix_end_.assign(k + 1, 0);
  for (size_t i = k; i-- > 0;) {
    suffix_begin_[i] = suffix_points_.size();
    double cost = 0, gain = 0;
    for (const Segment& seg : LpSegments()) {
      if (position_[seg.item] < i) continue;
      cost += seg.cost;
      gain += seg.gain;
      suffix_points_.push_back({cost, gain, 0});
    }
    suffix_end_[i] = suffix_points_.size();
  }

  // Greedy: most efficient items first, each the cheapest option that finishes, else
  // its largest.
  int64_t cost = 0, left = target;
  for (size_t i = 0; i < k; ++i) {
    const std::vector<Option>& options = items_[order_[i]].options;
    if (options.empty()) continue;
    const Option* finish = nullptr;
    for (const Option& o : options) {
      if (o.gain >= left) {
        finish = &o;
        break;
      }
    }
    const Option& take = finish != nullptr ? *finish : options.back();
    cost += take.cost;
    left -= take.gain;
    if (left <= 0) return cost;
  }
  return kNoPlan;
}

}  // namespace ballast::coordinator::planner_internal
