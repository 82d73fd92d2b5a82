// An in-memory PolicyStore for tests of the code that uses one: the same contract as
// SqlitePolicyStore (same validation, same ordering, times kept to the microsecond), plus
// failure injection and a way to simulate a coordinator restart.
//
//   using ballast::testing::InMemoryPolicyStore;
//   auto state = std::make_shared<InMemoryPolicyStore::State>();
//   auto store = std::make_unique<InMemoryPolicyStore>(state);
//   store->FailNext(absl::UnavailableError("disk gone"));  // the next call fails
//   ...
//   // "Restart": a new store over the same state sees everything written before.
//   auto after_restart = std::make_unique<InMemoryPolicyStore>(state);
#ifndef BALLAST_TESTS_TESTING_FAKE_POLICY_STORE_H_
#define BALLAST_TESTS_TESTING_FAKE_POLICY_STORE_H_

#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "coordinator/policy_store.h"

namespace ballast::testing {

class InMemoryPolicyStore final : public coordinator::PolicyStore {
 public:
  using Cordon = coordinator::Cordon;
  using JobPolicy = coordinator::JobPolicy;

  // What survives a "restart"; share it between stores to simulate one.
  struct State {
    absl::Mutex mu;
    std::map<std::string, JobPolicy> policies ABSL_GUARDED_BY(mu);
    std::set<std::string> paused ABSL_GUARDED_BY(mu);
    std::map<std::string, Cordon> cordons ABSL_GUARDED_BY(mu);
    std::map<std::pair<std::string, std::string>, coordinator::GroupHold> holds ABSL_GUARDED_BY(mu);
  };

  InMemoryPolicyStore() : InMemoryPolicyStore(std::make_shared<State>()) {}
  explicit InMemoryPolicyStore(std::shared_ptr<State> state) : state_(std::move(state)) {}

  const std::shared_ptr<State>& state() const { return state_; }

  // The next call (of any method) returns `status` and changes nothing; calling this
  // several times queues several failures, one per call.
  void FailNext(absl::Status status = absl::UnavailableError("injected policy store failure")) {
    absl::MutexLock lock(&fail_mu_);
    failures_.push_back(std::move(status));
  }

  // Calls made so far, failed ones included.
  int calls() const {
    absl::MutexLock lock(&fail_mu_);
    return calls_;
  }

  absl::StatusOr<std::optional<JobPolicy>> GetPolicy(absl::string_view job) override {
    if (absl::Status s = Enter(); !s.ok()) return s;
    if (absl::Status s = coordinator::ValidateJobName(job); !s.ok()) return s;
    absl::MutexLock lock(&state_->mu);
    auto it = state_->policies.find(std::string(job));
    if (it == state_->policies.end()) return std::nullopt;
    return it->second;
  }

  absl::Status PutPolicy(absl::string_view job, const JobPolicy& policy) override {
    if (absl::Status s = Enter(); !s.ok()) return s;
    if (absl::Status s = coordinator::ValidatePolicyRecord(job, policy); !s.ok()) return s;
    absl::MutexLock lock(&state_->mu);
    state_->policies[std::string(job)] = policy;
    return absl::OkStatus();
  }

  absl::Status DeletePolicy(absl::string_view job) override {
    if (absl::Status s = Enter(); !s.ok()) return s;
    if (absl::Status s = coordinator::ValidateJobName(job); !s.ok()) return s;
    absl::MutexLock lock(&state_->mu);
    state_->policies.erase(std::string(job));
    return absl::OkStatus();
  }

  absl::StatusOr<std::map<std::string, JobPolicy>> ListPolicies() override {
    if (absl::Status s = Enter(); !s.ok()) return s;
    absl::MutexLock lock(&state_->mu);
    return state_->policies;
  }

  absl::Status SetPaused(absl::string_view scope, bool paused) override {
    if (absl::Status s = Enter(); !s.ok()) return s;
    if (absl::Status s = coordinator::ValidatePauseScope(scope); !s.ok()) return s;
    absl::MutexLock lock(&state_->mu);
    if (paused) {
      state_->paused.insert(std::string(scope));
    } else {
      state_->paused.erase(std::string(scope));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<bool> IsPaused(absl::string_view scope) override {
    if (absl::Status s = Enter(); !s.ok()) return s;
    if (absl::Status s = coordinator::ValidatePauseScope(scope); !s.ok()) return s;
    absl::MutexLock lock(&state_->mu);
    return state_->paused.count(std::string(scope)) > 0;
  }

  absl::StatusOr<std::vector<std::string>> ListPaused() override {
    if (absl::Status s = Enter(); !s.ok()) return s;
    absl::MutexLock lock(&state_->mu);
    return std::vector<std::string>(state_->paused.begin(), state_->paused.end());
  }

  absl::Status SetCordon(absl::string_view device, bool cordoned, absl::string_view reason,
                         absl::Time at) override {
    if (absl::Status s = Enter(); !s.ok()) return s;
    if (absl::Status s = coordinator::ValidateCordon(device, cordoned, reason, at); !s.ok())
      return s;
    absl::MutexLock lock(&state_->mu);
    if (!cordoned) {
      state_->cordons.erase(std::string(device));
      return absl::OkStatus();
    }
    // Kept to the microsecond, as the SQLite store keeps it.
    state_->cordons[std::string(device)] = Cordon{std::string(device), std::string(reason),
                                                  absl::FromUnixMicros(absl::ToUnixMicros(at))};
    return absl::OkStatus();
  }

  absl::StatusOr<std::vector<Cordon>> ListCordons() override {
    if (absl::Status s = Enter(); !s.ok()) return s;
    absl::MutexLock lock(&state_->mu);
    std::vector<Cordon> out;
    out.reserve(state_->cordons.size());
    for (const auto& [device, cordon] : state_->cordons) out.push_back(cordon);
    return out;
  }

  absl::Status SetHold(absl::string_view job, absl::string_view group,
                       const std::optional<coordinator::GroupHold>& hold) override {
    if (absl::Status s = Enter(); !s.ok()) return s;
    if (absl::Status s = coordinator::ValidateHoldRecord(job, group, hold); !s.ok()) return s;
    absl::MutexLock lock(&state_->mu);
    const std::pair<std::string, std::string> key{std::string(job), std::string(group)};
    if (hold.has_value()) {
      state_->holds[key] = *hold;
    } else {
      state_->holds.erase(key);
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::vector<coordinator::StoredHold>> ListHolds() override {
    if (absl::Status s = Enter(); !s.ok()) return s;
    absl::MutexLock lock(&state_->mu);
    std::vector<coordinator::StoredHold> out;
    for (const auto& [key, hold] : state_->holds) {
      out.push_back({.job = key.first, .group = key.second, .hold = hold});
    }
    return out;
  }

 private:
  // Counts the call and pops an injected failure, if one is queued.
  absl::Status Enter() {
    absl::MutexLock lock(&fail_mu_);
    ++calls_;
    if (failures_.empty()) return absl::OkStatus();
    absl::Status s = std::move(failures_.front());
    failures_.pop_front();
    return s;
  }

  std::shared_ptr<State> state_;
  mutable absl::Mutex fail_mu_;
  std::deque<absl::Status> failures_ ABSL_GUARDED_BY(fail_mu_);
  int calls_ ABSL_GUARDED_BY(fail_mu_) = 0;
};

}  // namespace ballast::testing

#endif  // BALLAST_TESTS_TESTING_FAKE_POLICY_STORE_H_
