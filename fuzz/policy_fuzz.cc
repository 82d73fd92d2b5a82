// A job's policy as it arrives from outside: ballastctl's `policy set JOB KEY=VALUE...`
// arguments (ctl/commands.cc, against a fake admin client), or a ballast.v1.Policy off
// the wire; then what the coordinator does with it: PolicyFromProto (which validates),
// and the policy store, which must keep what it was given.
//
// Input: the first byte picks the form. Even: the rest is text, split at whitespace into
// JOB and KEY=VALUE arguments. Odd: the rest is a serialized ballast.v1.Policy.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "coordinator/policy.h"
#include "coordinator/policy_proto.h"
#include "coordinator/policy_store.h"
#include "ctl/commands.h"
#include "fuzz/fuzz_common.h"
#include "testing/fake_admin_client.h"

namespace ballast::fuzz {
namespace {

// One SQLite store for the whole run, in a scratch directory removed at exit. Prefers
// /dev/shm: the store syncs every write, which on a disk would bound the run to the
// disk's sync rate rather than the code's speed.
coordinator::PolicyStore& Store() {
  static coordinator::PolicyStore* store = [] {
    const std::filesystem::path base = std::filesystem::is_directory("/dev/shm")
                                           ? "/dev/shm"
                                           : std::filesystem::temp_directory_path();
    std::string dir = (base / "ballast-policy-fuzz-XXXXXX").string();
    FUZZ_CHECK(::mkdtemp(dir.data()) != nullptr, "mkdtemp " + dir);
    static std::string cleanup = dir;
    std::atexit([] { std::filesystem::remove_all(cleanup); });
    auto opened = coordinator::SqlitePolicyStore::Open(dir + "/policy.db");
    FUZZ_CHECK(opened.ok(), opened.status().ToString());
    return opened->release();
  }();
  return *store;
}

// The policy `policy set` would send, or none when ballastctl refuses the arguments.
std::optional<v1::SetPolicyRequest> FromCommandLine(absl::string_view text) {
  std::vector<std::string> args = {"policy", "set"};
  for (absl::string_view a :
       absl::StrSplit(text, absl::ByAnyChar(" \t\n\r\v\f"), absl::SkipEmpty())) {
    args.emplace_back(a);
  }
  testing::FakeAdminClient client;
  client.policies["vit"] = coordinator::PolicyToProto(coordinator::JobPolicy{});
  std::ostringstream out, err;
  const int code = ctl::RunCommand(args, {.preconfigure = true}, client, out, err);
  FUZZ_CHECK(code == 0 || code == 2, "policy set: exit code " + std::to_string(code));
  FUZZ_CHECK((code == 0) == (client.policy_sets.size() == 1), "sent a request on a usage error");
  if (code != 0) return std::nullopt;
  return client.policy_sets[0];
}

}  // namespace
}  // namespace ballast::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ballast;
  using namespace ballast::fuzz;
  QuietLogs();
  if (size == 0) return 0;
  v1::SetPolicyRequest request;
  const absl::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] % 2 == 0) {
    std::optional<v1::SetPolicyRequest> sent = FromCommandLine(rest);
    if (!sent.has_value()) return 0;
    request = *std::move(sent);
  } else {
    if (!request.mutable_policy()->ParseFromArray(rest.data(), static_cast<int>(rest.size()))) {
      return 0;
    }
    request.set_job("vit");
  }
  absl::StatusOr<coordinator::JobPolicy> policy = coordinator::PolicyFromProto(request.policy());
  if (!policy.ok()) {
    FUZZ_CHECK(policy.status().code() == absl::StatusCode::kInvalidArgument,
               policy.status().ToString());
    return 0;
  }
  FUZZ_CHECK(coordinator::ValidatePolicy(*policy).ok(), "PolicyFromProto let a bad policy by");
  absl::StatusOr<coordinator::JobPolicy> again =
      coordinator::PolicyFromProto(coordinator::PolicyToProto(*policy));
  FUZZ_CHECK(again.ok() && *again == *policy, "policy does not survive PolicyToProto");
  if (!coordinator::ValidateJobName(request.job()).ok()) return 0;
  // What the admin API accepts, the store must take and give back unchanged (a policy
  // that changes across a coordinator restart is a silent misconfiguration).
  coordinator::PolicyStore& store = Store();
  absl::Status put = store.PutPolicy(request.job(), *policy);
  FUZZ_CHECK(put.ok(), put.ToString());
  absl::StatusOr<std::optional<coordinator::JobPolicy>> stored = store.GetPolicy(request.job());
  FUZZ_CHECK(stored.ok() && stored->has_value() && **stored == *policy,
             "the store changed the policy of " + request.job());
  FUZZ_CHECK(store.DeletePolicy(request.job()).ok(), "DeletePolicy");
  return 0;
}
