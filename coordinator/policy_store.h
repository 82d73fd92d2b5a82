// The durable store of what operators told the coordinator: each job's JobPolicy, which
// jobs (or the whole cluster) have balancing paused, which devices are cordoned, and which
// groups are held at a fixed plan. It
// outlives coordinator restarts; the coordinator reads it at start and writes through it
// on every admin change.
//
//   BALLAST_ASSIGN_OR_RETURN(std::unique_ptr<PolicyStore> store,
//                            SqlitePolicyStore::Open("/var/lib/ballast/policy.db"));
//   BALLAST_RETURN_IF_ERROR(store->PutPolicy("vit", policy));  // durable once OK
//   BALLAST_ASSIGN_OR_RETURN(bool paused, store->IsPaused(""));  // cluster-wide pause
//
// Tests use testing::InMemoryPolicyStore (tests/testing/fake_policy_store.h), which follows the
// same contract, spelled out by the Validate* functions below so both enforce it alike.
#ifndef BALLAST_COORDINATOR_POLICY_STORE_H_
#define BALLAST_COORDINATOR_POLICY_STORE_H_

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "coordinator/policy.h"

namespace ballast::coordinator {

// A device taken out of balancing duty (never chosen as a helper or new owner).
struct Cordon {
  std::string device;
  std::string reason;
  absl::Time at;
  friend bool operator==(const Cordon&, const Cordon&) = default;
};

// A group held at a fixed plan (`ballastctl hold`).
struct StoredHold {
  std::string job;
  std::string group;
  GroupHold hold;
  friend bool operator==(const StoredHold&, const StoredHold&) = default;
};

class PolicyStore {
 public:
  virtual ~PolicyStore() = default;

  // The job's policy, or nullopt if none was stored (the caller applies the default).
  virtual absl::StatusOr<std::optional<JobPolicy>> GetPolicy(absl::string_view job) = 0;
  // Stores (or replaces) the job's policy. INVALID_ARGUMENT, naming the field, for what
  // ValidatePolicyRecord refuses; nothing is stored then.
  virtual absl::Status PutPolicy(absl::string_view job, const JobPolicy& policy) = 0;
  // Forgets the job's policy; OK whether or not one was stored (so a retry is harmless).
  virtual absl::Status DeletePolicy(absl::string_view job) = 0;
  // Every stored policy, by job name.
  virtual absl::StatusOr<std::map<std::string, JobPolicy>> ListPolicies() = 0;

  // Pauses or resumes balancing for `scope`: a job name, or "" for the whole cluster. The
  // flags are independent: IsPaused(job) reports the job's own flag only, so a caller
  // deciding whether to balance a job checks IsPaused("") || IsPaused(job).
  virtual absl::Status SetPaused(absl::string_view scope, bool paused) = 0;
  virtual absl::StatusOr<bool> IsPaused(absl::string_view scope) = 0;
  // Every paused scope, sorted ("" first when the cluster is paused).
  virtual absl::StatusOr<std::vector<std::string>> ListPaused() = 0;

  // Cordons `device` (recording why and when; a repeat replaces both) or, with
  // cordoned == false, lifts its cordon (OK if it had none; reason and at are ignored).
  virtual absl::Status SetCordon(absl::string_view device, bool cordoned, absl::string_view reason,
                                 absl::Time at) = 0;
  // Every cordon, sorted by device.
  virtual absl::StatusOr<std::vector<Cordon>> ListCordons() = 0;

  // Holds `group` of `job` at `hold` (a repeat replaces it) or, with nullopt, releases it
  // (OK if it was not held).
  virtual absl::Status SetHold(absl::string_view job, absl::string_view group,
                               const std::optional<GroupHold>& hold) = 0;
  // Every hold, sorted by job, then group.
  virtual absl::StatusOr<std::vector<StoredHold>> ListHolds() = 0;
};

// The store's contract on input, shared by every implementation. Each returns OK or
// INVALID_ARGUMENT naming the bad field.
//
// Job names and scopes: 1..256 bytes ("" is the cluster scope, for SetPaused only).
// Policies: ValidatePolicy, and durations in whole milliseconds, the store's unit, so
// that what is read back equals what was written.
absl::Status ValidatePolicyRecord(absl::string_view job, const JobPolicy& policy);
absl::Status ValidateJobName(absl::string_view job);
absl::Status ValidatePauseScope(absl::string_view scope);
// Devices: 1..256 bytes; reasons up to 1024 bytes; `at` finite (cordoning only).
absl::Status ValidateCordon(absl::string_view device, bool cordoned, absl::string_view reason,
                            absl::Time at);
// Holds: job and group names as above; the hold as ValidateHold without the group's size
// (the store does not know it).
absl::Status ValidateHoldRecord(absl::string_view job, absl::string_view group,
                                const std::optional<GroupHold>& hold);

// A PolicyStore in one SQLite file (WAL journal, synchronous=FULL: a write that returned
// OK survives a crash of the process or the machine). Tables `policies`, `paused`,
// `cordons` and (since schema version 2) `holds` hold readable columns (mode by name,
// durations in milliseconds, times in Unix microseconds), so an operator can inspect them
// with the sqlite3 shell. The schema version is PRAGMA user_version; a file from a newer
// Ballast is refused, an older one migrated in place.
//
// Thread-safe: one connection, used under a mutex (operator writes are rare).
class SqlitePolicyStore {
 public:
  static constexpr int kSchemaVersion = 3;

  // Opens `path`, creating the file and schema if missing. FAILED_PRECONDITION for a
  // schema newer than kSchemaVersion or a file that cannot use WAL; another error (naming
  // the step and SQLite's message) for a file that is not a database or is corrupt.
  static absl::StatusOr<std::unique_ptr<PolicyStore>> Open(const std::string& path);
};

}  // namespace ballast::coordinator

#endif  // BALLAST_COORDINATOR_POLICY_STORE_H_
