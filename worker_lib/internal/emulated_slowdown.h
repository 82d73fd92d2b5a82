// EmulatedSlowdown: makes this rank's block compute `factor` times slower, as an older or
// slower device would, and nothing else: its collectives, and the trainer's work outside
// the blocks, run at full speed. For straggler experiments (the harness's `--contention
// device`): a CPU quota or a co-tenant process slows everything the rank does, its
// collectives included, which no plan can move; a slow device slows its compute only.
//
// The factor is read from a file, one number >= 1 ("1", "2", "2.5"), optionally with the
// step it takes effect from ("2@150": until step 150 the factor in force stays); a missing
// file means 1 (full speed). Refresh re-reads it; TpGroup calls it once a step, at
// BeginStep, so a launcher switches a rank's slowdown on and off mid-run by rewriting the
// file (atomically: write a temporary file, rename it over). The step is for a launcher
// that follows the ranks: it learns of a step once the ranks have begun it, so a plain
// factor for step S, written then, took effect at S + 1 (the harness's device windows
// all started and ended a step late); written a step ahead as "2@S", it takes effect at
// S. Content that is not such a setting is an error, logged once (until a good read), and
// the rank runs at full speed meanwhile.
//
// How: a block's compute timer is wrapped (WrapTimer). When a timed section stops, the
// wrapper burns (factor - 1) x the section's time, as the wrapped timer measured it, in
// redundant arithmetic on the same thread, still inside the timer's span, then stops it.
// The block's compute seconds (what the coordinator judges speed by) and its wall time both
// read `factor` x; its outputs are untouched. Busy, not asleep: a slow device is busy.
//
// CPU backend only. Burning host time does not slow a GPU, whose timers measure the
// device's time: TpGroup::Create refuses a slowdown file on any other backend.
//
//   EmulatedSlowdown slowdown("/run/ballast/rank1.slowdown", "group=job/tp0 rank=1");
//   compute_timer = slowdown.WrapTimer(compute.NewTimer());
//   slowdown.Refresh(step);  // at every step boundary
#ifndef BALLAST_WORKER_LIB_INTERNAL_EMULATED_SLOWDOWN_H_
#define BALLAST_WORKER_LIB_INTERNAL_EMULATED_SLOWDOWN_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ballast/compute.h"

namespace ballast::internal {

// The environment variable that names a rank's slowdown file (TpGroupOptions).
inline constexpr char kEmulatedSlowdownFileEnv[] = "BALLAST_EMULATED_SLOWDOWN_FILE";

class EmulatedSlowdown {
 public:
  // The largest factor accepted: the harness's --straggler range.
  static constexpr double kMaxFactor = 16.0;

  // `path`: the factor file. `who` prefixes log lines (group and rank). Reads nothing yet:
  // the factor is 1 until the first Refresh.
  EmulatedSlowdown(std::string path, std::string who);

  // Re-reads the file. Logs when the factor changes, and a bad file once.
  void Refresh(int64_t step);
  double factor() const { return factor_; }
  const std::string& path() const { return path_; }

  // `timer`, wrapped: every section it times takes `factor()` x as long. The wrapper reads
  // this object's factor at each Stop, so it must outlive the wrapper.
  std::unique_ptr<IntervalTimer> WrapTimer(std::unique_ptr<IntervalTimer> timer);

  // A factor: one finite number in [1, kMaxFactor], blanks around it allowed.
  static absl::StatusOr<double> ParseFactor(absl::string_view text);
  // A factor file's content: a factor, or a factor, "@" and the step (>= 0) it takes
  // effect from ("2@150"; a plain factor takes effect at once: from step 0).
  struct Setting {
    double factor = 1.0;
    int64_t from_step = 0;
  };
  static absl::StatusOr<Setting> ParseSetting(absl::string_view text);

 private:
  // The setting the file holds now: factor 1 when it is missing, an error when unreadable
  // or bad.
  absl::StatusOr<Setting> ReadSetting() const;

  std::string path_;
  std::string who_;
  double factor_ = 1.0;
  bool error_logged_ = false;
};

}  // namespace ballast::internal

#endif  // BALLAST_WORKER_LIB_INTERNAL_EMULATED_SLOWDOWN_H_
