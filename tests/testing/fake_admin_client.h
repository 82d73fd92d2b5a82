// A hand-written fake of ctl::AdminClient: serves canned responses, records requests, and
// can fail the next call.
#ifndef BALLAST_TESTS_TESTING_FAKE_ADMIN_CLIENT_H_
#define BALLAST_TESTS_TESTING_FAKE_ADMIN_CLIENT_H_

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "ctl/admin_client.h"

namespace ballast::testing {

class FakeAdminClient final : public ctl::AdminClient {
 public:
  v1::ClusterStatus status;
  std::map<std::string, v1::Policy> policies;
  v1::Explanation explanation;
  std::vector<v1::SetPausedRequest> paused;
  std::vector<v1::SetCordonRequest> cordons;
  std::vector<v1::SetPolicyRequest> policy_sets;
  std::vector<v1::SetHoldRequest> holds;
  std::optional<absl::Status> fail_next;

  absl::StatusOr<v1::ClusterStatus> GetStatus(const v1::GetStatusRequest&) override {
    if (absl::Status s = Fail(); !s.ok()) return s;
    return status;
  }
  absl::StatusOr<v1::Policy> GetPolicy(const v1::GetPolicyRequest& r) override {
    if (absl::Status s = Fail(); !s.ok()) return s;
    auto it = policies.find(r.job());
    if (it == policies.end()) return absl::NotFoundError("job '" + r.job() + "' unknown");
    return it->second;
  }
  absl::StatusOr<v1::Policy> SetPolicy(const v1::SetPolicyRequest& r) override {
    if (absl::Status s = Fail(); !s.ok()) return s;
    policy_sets.push_back(r);
    policies[r.job()] = r.policy();
    return r.policy();
  }
  absl::Status SetPaused(const v1::SetPausedRequest& r) override {
    if (absl::Status s = Fail(); !s.ok()) return s;
    paused.push_back(r);
    return absl::OkStatus();
  }
  absl::Status SetCordon(const v1::SetCordonRequest& r) override {
    if (absl::Status s = Fail(); !s.ok()) return s;
    cordons.push_back(r);
    return absl::OkStatus();
  }
  absl::Status SetHold(const v1::SetHoldRequest& r) override {
    if (absl::Status s = Fail(); !s.ok()) return s;
    holds.push_back(r);
    return absl::OkStatus();
  }
  absl::StatusOr<v1::Explanation> Explain(const v1::ExplainRequest&) override {
    if (absl::Status s = Fail(); !s.ok()) return s;
    return explanation;
  }

 private:
  absl::Status Fail() {
    if (!fail_next.has_value()) return absl::OkStatus();
    absl::Status s = *fail_next;
    fail_next.reset();
    return s;
  }
};

}  // namespace ballast::testing

#endif  // BALLAST_TESTS_TESTING_FAKE_ADMIN_CLIENT_H_
