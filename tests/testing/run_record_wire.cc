#include "testing/run_record_wire.h"

#include <cstdint>
#include <cstring>
#include <map>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"

namespace ballast::testing {
namespace {

// Host-endian, fixed-width fields: writer and reader are the same binary on one host.
class Writer {
 public:
  template <typename T>
  void Put(T value) {
    static_assert(std::is_trivially_copyable_v<T>);
    out_.append(reinterpret_cast<const char*>(&value), sizeof(value));
  }
  template <typename T>
  void PutVector(const std::vector<T>& values) {
    static_assert(std::is_trivially_copyable_v<T>);
    Put<uint64_t>(values.size());
    out_.append(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
  }
  void PutSnapshot(const StateSnapshot& s) {
    PutVector(s.value);
    PutVector(s.adam_m);
    PutVector(s.adam_v);
  }
  std::string Take() { return std::move(out_); }

 private:
  std::string out_;
};

class Reader {
 public:
  explicit Reader(const std::string& in) : in_(in) {}
  template <typename T>
  bool Get(T* value) {
    if (in_.size() - at_ < sizeof(T)) return false;
    std::memcpy(value, in_.data() + at_, sizeof(T));
    at_ += sizeof(T);
    return true;
  }
  template <typename T>
  bool GetVector(std::vector<T>* values) {
    uint64_t n = 0;
    if (!Get(&n) || n > (in_.size() - at_) / sizeof(T)) return false;
    values->resize(n);
    std::memcpy(values->data(), in_.data() + at_, n * sizeof(T));
    at_ += n * sizeof(T);
    return true;
  }
  bool GetSnapshot(StateSnapshot* s) {
    return GetVector(&s->value) && GetVector(&s->adam_m) && GetVector(&s->adam_v);
  }
  bool done() const { return at_ == in_.size(); }

 private:
  const std::string& in_;
  size_t at_ = 0;
};

}  // namespace

std::string EncodeRankRecord(const RunRecord& record, int rank) {
  Writer w;
  w.PutSnapshot(record.initial[rank]);
  w.Put<uint64_t>(record.steps.size());
  for (const std::vector<RankStep>& step : record.steps) {
    const RankStep& s = step[rank];
    w.Put<int64_t>(s.applied_version.value());
    w.PutVector(s.owner_of_unit);
    w.PutVector(s.units);
    w.PutVector(s.fates);
    w.PutVector(s.y);
    w.PutVector(s.dx);
    w.PutVector(s.grad);
    w.PutSnapshot(s.after);
    w.Put<uint64_t>(s.unit_means.size());
    for (const auto& [unit, mean] : s.unit_means) {
      w.Put<int32_t>(unit);
      w.PutVector(mean);
    }
  }
  return w.Take();
}

absl::Status DecodeRankRecord(const std::string& bytes, int rank, RunRecord* record) {
  Reader r(bytes);
  auto cut = [&](const char* what) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank, "'s record: cut short or malformed at ", what));
  };
  if (!r.GetSnapshot(&record->initial[rank])) return cut("the initial state");
  uint64_t steps = 0;
  if (!r.Get(&steps)) return cut("the step count");
  if (steps != record->steps.size()) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank, "'s record has ", steps,
                                                   " steps, the script ", record->steps.size()));
  }
  for (size_t i = 0; i < steps; ++i) {
    RankStep& s = record->steps[i][rank];
    int64_t version = 0;
    uint64_t means = 0;
    if (!r.Get(&version) || !r.GetVector(&s.owner_of_unit) || !r.GetVector(&s.units) ||
        !r.GetVector(&s.fates) || !r.GetVector(&s.y) || !r.GetVector(&s.dx) ||
        !r.GetVector(&s.grad) || !r.GetSnapshot(&s.after) || !r.Get(&means)) {
      return cut(absl::StrCat("step ", i).c_str());
    }
    s.applied_version = PlanVersion(version);
    for (uint64_t m = 0; m < means; ++m) {
      int32_t unit = 0;
      std::vector<float> mean;
      if (!r.Get(&unit) || !r.GetVector(&mean)) return cut(absl::StrCat("step ", i).c_str());
      s.unit_means[unit] = std::move(mean);
    }
  }
  if (!r.done()) return cut("the end (bytes left over)");
  return absl::OkStatus();
}

}  // namespace ballast::testing
