// SqlitePolicyStore (policy_store.h). Past the usual ~600 lines on purpose: the schema and
// its migrations, the prepared statements and the row codecs all work on one private
// connection and its lock, and split apart they would need that connection in a header.
#include "coordinator/policy_store.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "proto/validate.h"

namespace ballast::coordinator {

// Every JobPolicy field has a column below. A field added to JobPolicy would silently not
// survive a restart; this trips first, so whoever adds one also adds its column (and a
// schema version).
static_assert(sizeof(JobPolicy) == 96,
              "JobPolicy changed: add the new field to the policies table (and bump "
              "kSchemaVersion), then update this size");

namespace {

absl::Status CheckWholeMilliseconds(absl::string_view field, absl::Duration d) {
  if (d == absl::InfiniteDuration() || d == -absl::InfiniteDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " ", absl::FormatDuration(d), " must be finite"));
  }
  absl::Duration rem;
  absl::IDivDuration(d, absl::Milliseconds(1), &rem);
  if (rem != absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(field, " ", absl::FormatDuration(d),
                                                   " is not a whole number of milliseconds"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateJobName(absl::string_view job) { return ValidateName("job", job); }

absl::Status ValidatePauseScope(absl::string_view scope) {
  if (scope.empty()) return absl::OkStatus();  // the cluster
  return ValidateName("scope", scope);
}

absl::Status ValidatePolicyRecord(absl::string_view job, const JobPolicy& policy) {
  BALLAST_RETURN_IF_ERROR(ValidateJobName(job));
  BALLAST_RETURN_IF_ERROR(ValidatePolicy(policy));
  BALLAST_RETURN_IF_ERROR(CheckWholeMilliseconds("reshard_after", policy.reshard_after));
  BALLAST_RETURN_IF_ERROR(CheckWholeMilliseconds("report_period", policy.report_period));
  return absl::OkStatus();
}

absl::Status ValidateCordon(absl::string_view device, bool cordoned, absl::string_view reason,
                            absl::Time at) {
  BALLAST_RETURN_IF_ERROR(ValidateName("device", device));
  if (!cordoned) return absl::OkStatus();
  BALLAST_RETURN_IF_ERROR(ValidateReason("reason", reason));
  if (at == absl::InfinitePast() || at == absl::InfiniteFuture()) {
    return absl::InvalidArgumentError("at infinite");
  }
  return absl::OkStatus();
}

absl::Status ValidateHoldRecord(absl::string_view job, absl::string_view group,
                                const std::optional<GroupHold>& hold) {
  BALLAST_RETURN_IF_ERROR(ValidateName("job", job));
  BALLAST_RETURN_IF_ERROR(ValidateName("group", group));
  if (hold.has_value()) BALLAST_RETURN_IF_ERROR(ValidateHold(*hold, std::nullopt));
  return absl::OkStatus();
}

namespace {

// Version 1. Readable columns, not a blob: an operator can inspect or repair the file with
// the sqlite3 shell. STRICT makes SQLite refuse a value of the wrong type, even from such
// a hand edit.
constexpr char kSchemaV1[] = R"sql(
CREATE TABLE IF NOT EXISTS policies (
  job TEXT PRIMARY KEY NOT NULL,
  mode TEXT NOT NULL,
  max_pruned_fraction_rank REAL NOT NULL,
  max_pruned_fraction_group REAL NOT NULL,
  imputation TEXT NOT NULL,
  priority TEXT NOT NULL,
  accuracy_weight_seconds REAL NOT NULL,
  straggler_threshold REAL NOT NULL,
  hysteresis REAL NOT NULL,
  reshard_after_ms INTEGER NOT NULL,
  report_period_ms INTEGER NOT NULL
) STRICT;
CREATE TABLE IF NOT EXISTS paused (
  scope TEXT PRIMARY KEY NOT NULL  -- a job name, or '' for the whole cluster
) STRICT;
CREATE TABLE IF NOT EXISTS cordons (
  device TEXT PRIMARY KEY NOT NULL,
  reason TEXT NOT NULL,
  at_unix_us INTEGER NOT NULL
) STRICT;
PRAGMA user_version = 1;
)sql";
// Version 2: groups held at a fixed plan (`ballastctl hold`).
constexpr char kSchemaV2[] = R"sql(
CREATE TABLE IF NOT EXISTS holds (
  job TEXT NOT NULL,
  grp TEXT NOT NULL,
  rank INTEGER NOT NULL,
  offload_fraction REAL NOT NULL,
  reshard_fraction REAL NOT NULL,
  PRIMARY KEY (job, grp)
) STRICT;
PRAGMA user_version = 2;
)sql";
// Version 3: the experts' capacity factor (0, no cap, for the policies stored before it).
constexpr char kSchemaV3[] = R"sql(
ALTER TABLE policies ADD COLUMN expert_capacity_factor REAL NOT NULL DEFAULT 0;
PRAGMA user_version = 3;
)sql";
static_assert(SqlitePolicyStore::kSchemaVersion == 3, "add the migration to the new version");

constexpr char kPolicyColumns[] =
    "mode, max_pruned_fraction_rank, max_pruned_fraction_group, imputation, priority, "
    "accuracy_weight_seconds, straggler_threshold, hysteresis, reshard_after_ms, "
    "report_period_ms, expert_capacity_factor";

absl::StatusCode CodeForSqlite(int rc) {
  switch (rc & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return absl::StatusCode::kUnavailable;  // another process holds the file: retry
    case SQLITE_FULL:
    case SQLITE_NOMEM:
      return absl::StatusCode::kResourceExhausted;
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
      return absl::StatusCode::kDataLoss;
    case SQLITE_READONLY:
    case SQLITE_PERM:
    case SQLITE_AUTH:
      return absl::StatusCode::kPermissionDenied;
    case SQLITE_CANTOPEN:
      return absl::StatusCode::kFailedPrecondition;
    default:
      return absl::StatusCode::kInternal;
  }
}

// A text binding that stays valid until the statement is reset: the callers' strings
// outlive the call. An empty view may carry a null pointer, which SQLite would store as
// NULL, not as '' (the cluster scope).
int BindText(sqlite3_stmt* stmt, int index, absl::string_view text) {
  const char* data = text.data() != nullptr ? text.data() : "";
  return sqlite3_bind_text(stmt, index, data, static_cast<int>(text.size()), SQLITE_STATIC);
}

absl::string_view ColumnText(sqlite3_stmt* stmt, int column) {
  const unsigned char* text = sqlite3_column_text(stmt, column);
  if (text == nullptr) return "";
  return absl::string_view(reinterpret_cast<const char*>(text),
                           static_cast<size_t>(sqlite3_column_bytes(stmt, column)));
}

// Resets a prepared statement when a call is done with it, on every path, so the next
// call finds it ready and no read transaction is left open.
class StatementUse {
 public:
  explicit StatementUse(sqlite3_stmt* stmt) : stmt_(stmt) {}
  ~StatementUse() {
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
  }
  StatementUse(const StatementUse&) = delete;
  StatementUse& operator=(const StatementUse&) = delete;

 private:
  sqlite3_stmt* stmt_;
};

class SqliteStore final : public PolicyStore {
 public:
  SqliteStore(std::string path, sqlite3* db) : path_(std::move(path)), db_(db) {}

  ~SqliteStore() override {
    for (sqlite3_stmt* s : {get_policy_, list_policies_, put_policy_, delete_policy_, set_paused_,
                            unset_paused_, is_paused_, list_paused_, set_cordon_, unset_cordon_,
                            list_cordons_, set_hold_, unset_hold_, list_holds_}) {
      sqlite3_finalize(s);  // a no-op on null
    }
    // close_v2 defers the close if anything is still open instead of failing.
    sqlite3_close_v2(db_);
  }

  // Everything Open does after the file is open: configure, migrate, prepare.
  absl::Status Init() {
    sqlite3_busy_timeout(db_, 5000);
    // A policy file is data, not code: refuse the SQL features a crafted file could use
    // against us (writes to the schema through the back door, untrusted functions).
    sqlite3_db_config(db_, SQLITE_DBCONFIG_DEFENSIVE, 1, nullptr);
    sqlite3_db_config(db_, SQLITE_DBCONFIG_TRUSTED_SCHEMA, 0, nullptr);

    // The version first: a newer file is left exactly as it is.
    BALLAST_ASSIGN_OR_RETURN(int64_t version, QueryInt("PRAGMA user_version", "read version"));
    if (version > SqlitePolicyStore::kSchemaVersion) return NewerVersion(version);
    if (version < 0) {
      return absl::DataLossError(
          absl::StrCat("policy store ", path_, ": schema version ", version, " invalid"));
    }
    BALLAST_ASSIGN_OR_RETURN(std::string check, QueryText("PRAGMA quick_check", "check integrity"));
    if (check != "ok") {
      return absl::DataLossError(
          absl::StrCat("policy store ", path_, ": integrity check failed: ", check));
    }
    BALLAST_ASSIGN_OR_RETURN(std::string mode,
                             QueryText("PRAGMA journal_mode = WAL", "set journal_mode"));
    if (mode != "wal") {
      return absl::FailedPreconditionError(
          absl::StrCat("policy store ", path_, ": journal_mode is '", mode, "', WAL is required"));
    }
    // FULL: each commit syncs the WAL, so an OK write survives power loss.
    BALLAST_RETURN_IF_ERROR(Exec("PRAGMA synchronous = FULL", "set synchronous"));

    bool created = false;
    if (version < SqlitePolicyStore::kSchemaVersion) {
      // IMMEDIATE takes the write lock now, so two coordinators starting on one file
      // cannot both migrate; the version is read again under the lock.
      BALLAST_RETURN_IF_ERROR(Exec("BEGIN IMMEDIATE", "begin migration"));
      absl::Status migrated = [&]() -> absl::Status {
        BALLAST_ASSIGN_OR_RETURN(int64_t locked_version,
                                 QueryInt("PRAGMA user_version", "read version"));
        if (locked_version > SqlitePolicyStore::kSchemaVersion) {
          return NewerVersion(locked_version);
        }
        if (locked_version == 0) {
          BALLAST_RETURN_IF_ERROR(Exec(kSchemaV1, "create schema v1"));
          created = true;
        }
        if (locked_version <= 1) BALLAST_RETURN_IF_ERROR(Exec(kSchemaV2, "migrate to schema v2"));
        if (locked_version <= 2) BALLAST_RETURN_IF_ERROR(Exec(kSchemaV3, "migrate to schema v3"));
        return Exec("COMMIT", "commit migration");
      }();
      if (!migrated.ok()) {
        sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
        return migrated;
      }
    }

    const std::string cols = kPolicyColumns;
    BALLAST_RETURN_IF_ERROR(
        Prepare(absl::StrCat("SELECT ", cols, " FROM policies WHERE job = ?1"), &get_policy_));
    BALLAST_RETURN_IF_ERROR(Prepare(
        absl::StrCat("SELECT job, ", cols, " FROM policies ORDER BY job"), &list_policies_));
    BALLAST_RETURN_IF_ERROR(
        Prepare(absl::StrCat("INSERT OR REPLACE INTO policies (job, ", cols,
                             ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)"),
                &put_policy_));
    BALLAST_RETURN_IF_ERROR(Prepare("DELETE FROM policies WHERE job = ?1", &delete_policy_));
    BALLAST_RETURN_IF_ERROR(
        Prepare("INSERT OR IGNORE INTO paused (scope) VALUES (?1)", &set_paused_));
    BALLAST_RETURN_IF_ERROR(Prepare("DELETE FROM paused WHERE scope = ?1", &unset_paused_));
    BALLAST_RETURN_IF_ERROR(Prepare("SELECT 1 FROM paused WHERE scope = ?1", &is_paused_));
    BALLAST_RETURN_IF_ERROR(Prepare("SELECT scope FROM paused ORDER BY scope", &list_paused_));
    BALLAST_RETURN_IF_ERROR(
        Prepare("INSERT OR REPLACE INTO cordons (device, reason, at_unix_us) VALUES (?1, ?2, ?3)",
                &set_cordon_));
    BALLAST_RETURN_IF_ERROR(Prepare("DELETE FROM cordons WHERE device = ?1", &unset_cordon_));
    BALLAST_RETURN_IF_ERROR(
        Prepare("SELECT device, reason, at_unix_us FROM cordons ORDER BY device", &list_cordons_));
    BALLAST_RETURN_IF_ERROR(
        Prepare("INSERT OR REPLACE INTO holds (job, grp, rank, offload_fraction, "
                "reshard_fraction) VALUES (?1, ?2, ?3, ?4, ?5)",
                &set_hold_));
    BALLAST_RETURN_IF_ERROR(Prepare("DELETE FROM holds WHERE job = ?1 AND grp = ?2", &unset_hold_));
    BALLAST_RETURN_IF_ERROR(Prepare(
        "SELECT job, grp, rank, offload_fraction, reshard_fraction FROM holds ORDER BY job, grp",
        &list_holds_));

    BALLAST_LOG(INFO) << "policy store " << path_ << ": "
                      << (created ? "created schema" : "opened schema") << " v"
                      << SqlitePolicyStore::kSchemaVersion;
    return absl::OkStatus();
  }

  absl::StatusOr<std::optional<JobPolicy>> GetPolicy(absl::string_view job) override {
    BALLAST_RETURN_IF_ERROR(ValidateJobName(job));
    const std::string op = absl::StrCat("GetPolicy(", job, ")");
    absl::MutexLock lock(&mu_);
    StatementUse use(get_policy_);
    BALLAST_RETURN_IF_ERROR(Check(BindText(get_policy_, 1, job), op));
    const int rc = sqlite3_step(get_policy_);
    if (rc == SQLITE_DONE) return std::nullopt;
    if (rc != SQLITE_ROW) return Error(rc, op);
    BALLAST_ASSIGN_OR_RETURN(JobPolicy policy, ReadPolicy(get_policy_, 0, job));
    return policy;
  }

  absl::Status PutPolicy(absl::string_view job, const JobPolicy& p) override {
    BALLAST_RETURN_IF_ERROR(ValidatePolicyRecord(job, p));
    const std::string op = absl::StrCat("PutPolicy(", job, ")");
    absl::MutexLock lock(&mu_);
    sqlite3_stmt* s = put_policy_;
    StatementUse use(s);
    BALLAST_RETURN_IF_ERROR(Check(BindText(s, 1, job), op));
    BALLAST_RETURN_IF_ERROR(Check(BindText(s, 2, BalanceModeName(p.mode)), op));
    BALLAST_RETURN_IF_ERROR(Check(sqlite3_bind_double(s, 3, p.max_pruned_fraction_rank), op));
    BALLAST_RETURN_IF_ERROR(Check(sqlite3_bind_double(s, 4, p.max_pruned_fraction_group), op));
    BALLAST_RETURN_IF_ERROR(Check(BindText(s, 5, ImputationName(p.imputation)), op));
    BALLAST_RETURN_IF_ERROR(Check(BindText(s, 6, PriorityName(p.priority)), op));
    BALLAST_RETURN_IF_ERROR(Check(sqlite3_bind_double(s, 7, p.accuracy_weight_seconds), op));
    BALLAST_RETURN_IF_ERROR(Check(sqlite3_bind_double(s, 8, p.straggler_threshold), op));
    BALLAST_RETURN_IF_ERROR(Check(sqlite3_bind_double(s, 9, p.hysteresis), op));
    BALLAST_RETURN_IF_ERROR(
        Check(sqlite3_bind_int64(s, 10, absl::ToInt64Milliseconds(p.reshard_after)), op));
    BALLAST_RETURN_IF_ERROR(
        Check(sqlite3_bind_int64(s, 11, absl::ToInt64Milliseconds(p.report_period)), op));
    BALLAST_RETURN_IF_ERROR(Check(sqlite3_bind_double(s, 12, p.expert_capacity_factor), op));
    return StepDone(s, op);
  }

  absl::Status DeletePolicy(absl::string_view job) override {
    BALLAST_RETURN_IF_ERROR(ValidateJobName(job));
    const std::string op = absl::StrCat("DeletePolicy(", job, ")");
    absl::MutexLock lock(&mu_);
    StatementUse use(delete_policy_);
    BALLAST_RETURN_IF_ERROR(Check(BindText(delete_policy_, 1, job), op));
    return StepDone(delete_policy_, op);
  }

  absl::StatusOr<std::map<std::string, JobPolicy>> ListPolicies() override {
    const std::string op = "ListPolicies";
    absl::MutexLock lock(&mu_);
    StatementUse use(list_policies_);
    std::map<std::string, JobPolicy> out;
    while (true) {
      const int rc = sqlite3_step(list_policies_);
      if (rc == SQLITE_DONE) return out;
      if (rc != SQLITE_ROW) return Error(rc, op);
      std::string job(ColumnText(list_policies_, 0));
      BALLAST_ASSIGN_OR_RETURN(JobPolicy policy, ReadPolicy(list_policies_, 1, job));
      out.emplace(std::move(job), policy);
    }
  }

  absl::Status SetPaused(absl::string_view scope, bool paused) override {
    BALLAST_RETURN_IF_ERROR(ValidatePauseScope(scope));
    const std::string op =
        absl::StrCat("SetPaused('", scope, "', ", paused ? "true" : "false", ")");
    absl::MutexLock lock(&mu_);
    sqlite3_stmt* s = paused ? set_paused_ : unset_paused_;
    StatementUse use(s);
    BALLAST_RETURN_IF_ERROR(Check(BindText(s, 1, scope), op));
    return StepDone(s, op);
  }

  absl::StatusOr<bool> IsPaused(absl::string_view scope) override {
    BALLAST_RETURN_IF_ERROR(ValidatePauseScope(scope));
    const std::string op = absl::StrCat("IsPaused('", scope, "')");
    absl::MutexLock lock(&mu_);
    StatementUse use(is_paused_);
    BALLAST_RETURN_IF_ERROR(Check(BindText(is_paused_, 1, scope), op));
    const int rc = sqlite3_step(is_paused_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    return Error(rc, op);
  }

  absl::StatusOr<std::vector<std::string>> ListPaused() override {
    absl::MutexLock lock(&mu_);
    StatementUse use(list_paused_);
    std::vector<std::string> out;
    while (true) {
      const int rc = sqlite3_step(list_paused_);
      if (rc == SQLITE_DONE) return out;
      if (rc != SQLITE_ROW) return Error(rc, "ListPaused");
      out.emplace_back(ColumnText(list_paused_, 0));
    }
  }

  absl::Status SetCordon(absl::string_view device, bool cordoned, absl::string_view reason,
                         absl::Time at) override {
    BALLAST_RETURN_IF_ERROR(ValidateCordon(device, cordoned, reason, at));
    const std::string op =
        absl::StrCat("SetCordon(", device, ", ", cordoned ? "true" : "false", ")");
    absl::MutexLock lock(&mu_);
    if (!cordoned) {
      StatementUse use(unset_cordon_);
      BALLAST_RETURN_IF_ERROR(Check(BindText(unset_cordon_, 1, device), op));
      return StepDone(unset_cordon_, op);
    }
    StatementUse use(set_cordon_);
    BALLAST_RETURN_IF_ERROR(Check(BindText(set_cordon_, 1, device), op));
    BALLAST_RETURN_IF_ERROR(Check(BindText(set_cordon_, 2, reason), op));
    BALLAST_RETURN_IF_ERROR(Check(sqlite3_bind_int64(set_cordon_, 3, absl::ToUnixMicros(at)), op));
    return StepDone(set_cordon_, op);
  }

  absl::StatusOr<std::vector<Cordon>> ListCordons() override {
    absl::MutexLock lock(&mu_);
    StatementUse use(list_cordons_);
    std::vector<Cordon> out;
    while (true) {
      const int rc = sqlite3_step(list_cordons_);
      if (rc == SQLITE_DONE) return out;
      if (rc != SQLITE_ROW) return Error(rc, "ListCordons");
      out.push_back(Cordon{std::string(ColumnText(list_cordons_, 0)),
                           std::string(ColumnText(list_cordons_, 1)),
                           absl::FromUnixMicros(sqlite3_column_int64(list_cordons_, 2))});
    }
  }

  absl::Status SetHold(absl::string_view job, absl::string_view group,
                       const std::optional<GroupHold>& hold) override {
    BALLAST_RETURN_IF_ERROR(ValidateHoldRecord(job, group, hold));
    const std::string op = absl::StrCat("SetHold(", job, ", ", group, ")");
    absl::MutexLock lock(&mu_);
    if (!hold.has_value()) {
      StatementUse use(unset_hold_);
      BALLAST_RETURN_IF_ERROR(Check(BindText(unset_hold_, 1, job), op));
      BALLAST_RETURN_IF_ERROR(Check(BindText(unset_hold_, 2, group), op));
      return StepDone(unset_hold_, op);
    }
    StatementUse use(set_hold_);
    BALLAST_RETURN_IF_ERROR(Check(BindText(set_hold_, 1, job), op));
    BALLAST_RETURN_IF_ERROR(Check(BindText(set_hold_, 2, group), op));
    BALLAST_RETURN_IF_ERROR(Check(sqlite3_bind_int64(set_hold_, 3, hold->rank), op));
    BALLAST_RETURN_IF_ERROR(Check(sqlite3_bind_double(set_hold_, 4, hold->offload_fraction), op));
    BALLAST_RETURN_IF_ERROR(Check(sqlite3_bind_double(set_hold_, 5, hold->reshard_fraction), op));
    return StepDone(set_hold_, op);
  }

  absl::StatusOr<std::vector<StoredHold>> ListHolds() override {
    absl::MutexLock lock(&mu_);
    StatementUse use(list_holds_);
    std::vector<StoredHold> out;
    while (true) {
      const int rc = sqlite3_step(list_holds_);
      if (rc == SQLITE_DONE) return out;
      if (rc != SQLITE_ROW) return Error(rc, "ListHolds");
      const int64_t rank = sqlite3_column_int64(list_holds_, 2);
      StoredHold h{.job = std::string(ColumnText(list_holds_, 0)),
                   .group = std::string(ColumnText(list_holds_, 1)),
                   .hold = {.rank = static_cast<int32_t>(rank),
                            .offload_fraction = sqlite3_column_double(list_holds_, 3),
                            .reshard_fraction = sqlite3_column_double(list_holds_, 4)}};
      // A hand edit could put anything here; a bad row is refused, never half-applied.
      absl::Status valid = ValidateHoldRecord(h.job, h.group, h.hold);
      if (valid.ok() && rank != h.hold.rank) {
        valid = absl::InvalidArgumentError(absl::StrCat("hold: rank ", rank, " out of range"));
      }
      if (!valid.ok()) {
        return absl::DataLossError(absl::StrCat("policy store ", path_, ": holds row (", h.job,
                                                ", ", h.group, "): ", valid.message()));
      }
      out.push_back(std::move(h));
    }
  }

 private:
  absl::Status Error(int rc, absl::string_view op) const {
    return absl::Status(CodeForSqlite(rc),
                        absl::StrCat("policy store ", path_, ": ", op, ": ", sqlite3_errmsg(db_),
                                     " (sqlite code ", rc, ")"));
  }

  absl::Status Check(int rc, absl::string_view op) const {
    return rc == SQLITE_OK ? absl::OkStatus() : Error(rc, op);
  }

  absl::Status NewerVersion(int64_t version) const {
    return absl::FailedPreconditionError(
        absl::StrCat("policy store ", path_, ": schema version ", version,
                     " is newer than this "
                     "coordinator's ",
                     SqlitePolicyStore::kSchemaVersion, "; run a newer coordinator"));
  }

  absl::Status StepDone(sqlite3_stmt* stmt, absl::string_view op) {
    const int rc = sqlite3_step(stmt);
    return rc == SQLITE_DONE ? absl::OkStatus() : Error(rc, op);
  }

  absl::Status Exec(const char* sql, absl::string_view op) {
    return Check(sqlite3_exec(db_, sql, nullptr, nullptr, nullptr), op);
  }

  absl::Status Prepare(const std::string& sql, sqlite3_stmt** stmt) {
    return Check(sqlite3_prepare_v3(db_, sql.c_str(), static_cast<int>(sql.size()) + 1,
                                    SQLITE_PREPARE_PERSISTENT, stmt, nullptr),
                 absl::StrCat("prepare ", sql));
  }

  // The first column of the first row of a one-off statement (the pragmas at open).
  template <typename T, typename Read>
  absl::StatusOr<T> QueryOne(const char* sql, absl::string_view op, Read read) {
    sqlite3_stmt* stmt = nullptr;
    int rc = sqlite3_prepare_v2(db_, sql, -1, &stmt, nullptr);
    if (rc != SQLITE_OK) {
      sqlite3_finalize(stmt);
      return Error(rc, op);
    }
    rc = sqlite3_step(stmt);
    absl::StatusOr<T> out;
    if (rc == SQLITE_ROW) {
      out = read(stmt);
    } else if (rc == SQLITE_DONE) {
      out = absl::InternalError(absl::StrCat("policy store ", path_, ": ", op, ": no result"));
    } else {
      out = Error(rc, op);  // before finalize, which would clear the message
    }
    sqlite3_finalize(stmt);
    return out;
  }
  absl::StatusOr<int64_t> QueryInt(const char* sql, absl::string_view op) {
    return QueryOne<int64_t>(sql, op, [](sqlite3_stmt* s) { return sqlite3_column_int64(s, 0); });
  }
  absl::StatusOr<std::string> QueryText(const char* sql, absl::string_view op) {
    return QueryOne<std::string>(sql, op,
                                 [](sqlite3_stmt* s) { return std::string(ColumnText(s, 0)); });
  }

  // The policy in columns first..first+9 (kPolicyColumns order). What a hand edit or a
  // damaged file holds is checked like any input: a bad row is an error, never a policy.
  absl::StatusOr<JobPolicy> ReadPolicy(sqlite3_stmt* s, int first, absl::string_view job) const {
    auto bad = [&](const absl::Status& why) {
      return absl::DataLossError(absl::StrCat("policy store ", path_, ": policy of job '", job,
                                              "' unreadable: ", why.message()));
    };
    JobPolicy p;
    absl::StatusOr<BalanceMode> mode = ParseBalanceMode(ColumnText(s, first));
    if (!mode.ok()) return bad(mode.status());
    p.mode = *mode;
    p.max_pruned_fraction_rank = sqlite3_column_double(s, first + 1);
    p.max_pruned_fraction_group = sqlite3_column_double(s, first + 2);
    absl::StatusOr<Imputation> imputation = ParseImputation(ColumnText(s, first + 3));
    if (!imputation.ok()) return bad(imputation.status());
    p.imputation = *imputation;
    absl::StatusOr<Priority> priority = ParsePriority(ColumnText(s, first + 4));
    if (!priority.ok()) return bad(priority.status());
    p.priority = *priority;
    p.accuracy_weight_seconds = sqlite3_column_double(s, first + 5);
    p.straggler_threshold = sqlite3_column_double(s, first + 6);
    p.hysteresis = sqlite3_column_double(s, first + 7);
    p.reshard_after = absl::Milliseconds(sqlite3_column_int64(s, first + 8));
    p.report_period = absl::Milliseconds(sqlite3_column_int64(s, first + 9));
    p.expert_capacity_factor = sqlite3_column_double(s, first + 10);
    if (absl::Status valid = ValidatePolicy(p); !valid.ok()) return bad(valid);
    return p;
  }

  const std::string path_;
  mutable absl::Mutex mu_;
  sqlite3* const db_;  // statements are used under mu_; the handle itself is immutable
  sqlite3_stmt* get_policy_ = nullptr;
  sqlite3_stmt* list_policies_ = nullptr;
  sqlite3_stmt* put_policy_ = nullptr;
  sqlite3_stmt* delete_policy_ = nullptr;
  sqlite3_stmt* set_paused_ = nullptr;
  sqlite3_stmt* unset_paused_ = nullptr;
  sqlite3_stmt* is_paused_ = nullptr;
  sqlite3_stmt* list_paused_ = nullptr;
  sqlite3_stmt* set_cordon_ = nullptr;
  sqlite3_stmt* unset_cordon_ = nullptr;
  sqlite3_stmt* list_cordons_ = nullptr;
  sqlite3_stmt* set_hold_ = nullptr;
  sqlite3_stmt* unset_hold_ = nullptr;
  sqlite3_stmt* list_holds_ = nullptr;
};

}  // namespace

namespace {

// The store holds every policy, pause and cordon: other local users have no business
// reading it, whatever the umask. Creates `path` 0600 if it is missing; tightens an
// existing file (or a -wal / -shm left by a crash) to 0600, keeping group read if the
// operator granted it (0640 at most). SQLite creates its -wal and -shm files with the
// database file's mode, so they follow.
absl::Status RestrictPermissions(const std::string& path, bool create) {
  const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC | (create ? O_CREAT : 0), 0600);
  if (fd < 0) {
    const int error = errno;
    if (!create && error == ENOENT) return absl::OkStatus();
    const std::string message =
        absl::StrCat("policy store ", path, ": open: ", std::strerror(error));
    if (error == EACCES || error == EPERM || error == EROFS) {
      return absl::PermissionDeniedError(message);
    }
    if (error == ENOENT || error == ENOTDIR) return absl::NotFoundError(message);
    return absl::UnavailableError(message);
  }
  struct stat st;
  absl::Status status;
  if (fstat(fd, &st) != 0) {
    status =
        absl::InternalError(absl::StrCat("policy store ", path, ": stat: ", std::strerror(errno)));
  } else {
    const mode_t want = (st.st_mode & S_IRGRP) | S_IRUSR | S_IWUSR;
    if ((st.st_mode & 0777) != want && fchmod(fd, want) != 0) {
      status = absl::PermissionDeniedError(
          absl::StrCat("policy store ", path, ": chmod to ", want, ": ", std::strerror(errno)));
    }
  }
  close(fd);
  return status;
}

}  // namespace

absl::StatusOr<std::unique_ptr<PolicyStore>> SqlitePolicyStore::Open(const std::string& path) {
  if (path.empty()) return absl::InvalidArgumentError("path empty");
  BALLAST_RETURN_IF_ERROR(RestrictPermissions(path, /*create=*/true));
  for (const char* suffix : {"-wal", "-shm"}) {
    BALLAST_RETURN_IF_ERROR(RestrictPermissions(path + suffix, /*create=*/false));
  }
  sqlite3* db = nullptr;
  // NOMUTEX: the store serialises every use of the connection under its own mutex.
  const int rc = sqlite3_open_v2(
      path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    absl::Status status(CodeForSqlite(rc),
                        absl::StrCat("policy store ", path, ": open: ",
                                     db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc),
                                     " (sqlite code ", rc, ")"));
    sqlite3_close_v2(db);
    return status;
  }
  auto store = std::make_unique<SqliteStore>(path, db);  // owns db from here on
  BALLAST_RETURN_IF_ERROR(store->Init());
  return std::unique_ptr<PolicyStore>(std::move(store));
}

}  // namespace ballast::coordinator
