// What only the SQLite policy store's file can get wrong: readable columns, schema
// versions and their migrations, damaged or hand-edited files, file modes, persistence
// across processes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "coordinator/policy_store.h"
#include "tests/coordinator/policy_store_test_base.h"

namespace ballast::coordinator {
namespace {

using ::testing::HasSubstr;

// Runs SQL on the file through a separate raw connection, as an operator's sqlite3 shell
// would; returns the first column of the first row, or "" for none.
std::string RawQuery(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  std::string out;
  if (sqlite3_open(path.c_str(), &db) != SQLITE_OK) {
    ADD_FAILURE() << "open " << path << ": " << sqlite3_errmsg(db);
    sqlite3_close(db);
    return out;
  }
  sqlite3_stmt* stmt = nullptr;
  if (sqlite3_prepare_v2(db, sql.c_str(), -1, &stmt, nullptr) != SQLITE_OK) {
    ADD_FAILURE() << sql << ": " << sqlite3_errmsg(db);
  } else {
    int rc = sqlite3_step(stmt);
    if (rc == SQLITE_ROW && sqlite3_column_text(stmt, 0) != nullptr) {
      out = reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0));
    } else if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
      ADD_FAILURE() << sql << ": " << sqlite3_errmsg(db);
    }
  }
  sqlite3_finalize(stmt);
  sqlite3_close(db);
  return out;
}

void WriteFile(const std::string& path, const std::string& content) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << content;
}

class SqlitePolicyStoreTest : public ::testing::Test {
 protected:
  void TearDown() override { RemoveDatabase(path_); }
  std::string path_ = UniquePath("sqlite");
};

TEST_F(SqlitePolicyStoreTest, FileHoldsReadableColumnsAndSchemaVersion) {
  {
    auto store = SqlitePolicyStore::Open(path_);
    ASSERT_TRUE(store.ok()) << store.status();
    ASSERT_TRUE((*store)->PutPolicy("vit", NonDefaultPolicy()).ok());
    ASSERT_TRUE((*store)->SetCordon("n1/g0", true, "slow", absl::FromUnixSeconds(7)).ok());
    ASSERT_TRUE((*store)->SetPaused("", true).ok());
    // While the store is open, another connection sees committed data already.
    EXPECT_EQ(RawQuery(path_, "SELECT mode FROM policies WHERE job = 'vit'"), "migrate");
  }
  EXPECT_EQ(RawQuery(path_, "PRAGMA user_version"), "3");
  EXPECT_EQ(RawQuery(path_, "PRAGMA journal_mode"), "wal");
  EXPECT_EQ(RawQuery(path_,
                     "SELECT imputation || ',' || priority || ',' || reshard_after_ms || "
                     "',' || report_period_ms || ',' || max_pruned_fraction_rank "
                     "FROM policies WHERE job = 'vit'"),
            "zero,round-robin,90000,2500,0.3");
  EXPECT_EQ(RawQuery(path_, "SELECT reason || ',' || at_unix_us FROM cordons"), "slow,7000000");
  EXPECT_EQ(RawQuery(path_, "SELECT count(*) FROM paused WHERE scope = ''"), "1");
}

// A file from before holds (schema version 1) is migrated in place: everything it held
// stays, and holds work.
TEST_F(SqlitePolicyStoreTest, AVersionOneFileIsMigrated) {
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path_.c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db,
                           "CREATE TABLE policies (job TEXT PRIMARY KEY NOT NULL, mode TEXT NOT "
                           "NULL, max_pruned_fraction_rank REAL NOT NULL, "
                           "max_pruned_fraction_group REAL NOT NULL, imputation TEXT NOT NULL, "
                           "priority TEXT NOT NULL, accuracy_weight_seconds REAL NOT NULL, "
                           "straggler_threshold REAL NOT NULL, hysteresis REAL NOT NULL, "
                           "reshard_after_ms INTEGER NOT NULL, report_period_ms INTEGER NOT NULL) "
                           "STRICT;"
                           "CREATE TABLE paused (scope TEXT PRIMARY KEY NOT NULL) STRICT;"
                           "CREATE TABLE cordons (device TEXT PRIMARY KEY NOT NULL, reason TEXT "
                           "NOT NULL, at_unix_us INTEGER NOT NULL) STRICT;"
                           "INSERT INTO cordons VALUES ('n1/g0', 'slow', 7000000);"
                           "INSERT INTO paused VALUES ('vit');"
                           "PRAGMA user_version = 1;",
                           nullptr, nullptr, nullptr),
              SQLITE_OK)
        << sqlite3_errmsg(db);
    sqlite3_close(db);
  }
  auto store = SqlitePolicyStore::Open(path_);
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ(RawQuery(path_, "PRAGMA user_version"), "3");
  EXPECT_EQ((*store)->ListCordons()->size(), 1u);
  EXPECT_TRUE(*(*store)->IsPaused("vit"));
  ASSERT_TRUE((*store)->SetHold("vit", "tp0", GroupHold{.rank = 1, .offload_fraction = 0.5}).ok());
  EXPECT_EQ(RawQuery(path_, "SELECT rank || ',' || offload_fraction FROM holds"), "1,0.5");
}

// A file from before the experts' capacity factor (schema version 2) keeps its policies,
// read with no cap; a cap set afterwards is stored and read back.
TEST_F(SqlitePolicyStoreTest, AVersionTwoFileIsMigratedWithNoCapacityCap) {
  {
    auto store = SqlitePolicyStore::Open(path_);
    ASSERT_TRUE(store.ok()) << store.status();
    ASSERT_TRUE((*store)->PutPolicy("vit", NonDefaultPolicy()).ok());
  }
  // Back to what version 2 wrote: no capacity column.
  RawQuery(path_, "ALTER TABLE policies DROP COLUMN expert_capacity_factor");
  RawQuery(path_, "PRAGMA user_version = 2");
  auto store = SqlitePolicyStore::Open(path_);
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ(RawQuery(path_, "PRAGMA user_version"), "3");
  absl::StatusOr<std::optional<JobPolicy>> read = (*store)->GetPolicy("vit");
  ASSERT_TRUE(read.ok() && read->has_value()) << read.status();
  JobPolicy expected = NonDefaultPolicy();
  expected.expert_capacity_factor = 0;
  EXPECT_EQ(**read, expected);
  JobPolicy capped = NonDefaultPolicy();
  capped.expert_capacity_factor = 1.25;
  ASSERT_TRUE((*store)->PutPolicy("vit", capped).ok());
  EXPECT_EQ(RawQuery(path_, "SELECT expert_capacity_factor FROM policies"), "1.25");
  EXPECT_EQ(*(*store)->GetPolicy("vit"), capped);
}

TEST_F(SqlitePolicyStoreTest, AHandEditedBadHoldIsDataLoss) {
  {
    auto store = SqlitePolicyStore::Open(path_);
    ASSERT_TRUE(store.ok());
    ASSERT_TRUE((*store)->SetHold("vit", "tp0", GroupHold{.rank = 1}).ok());
  }
  RawQuery(path_, "UPDATE holds SET offload_fraction = 3");
  auto store = SqlitePolicyStore::Open(path_);
  ASSERT_TRUE(store.ok()) << store.status();
  absl::StatusOr<std::vector<StoredHold>> holds = (*store)->ListHolds();
  EXPECT_EQ(holds.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(holds.status().message(), HasSubstr("holds row (vit, tp0)"));
  EXPECT_THAT(holds.status().message(), HasSubstr("offload_fraction 3"));
  RawQuery(path_, "UPDATE holds SET offload_fraction = 0, rank = 5000000000");
  EXPECT_EQ((*store)->ListHolds().status().code(), absl::StatusCode::kDataLoss);
}

TEST_F(SqlitePolicyStoreTest, GarbageFileIsAnErrorNotACrash) {
  std::string garbage;
  for (int i = 0; i < 512; ++i) garbage += "this is not a database ";
  WriteFile(path_, garbage);
  absl::StatusOr<std::unique_ptr<PolicyStore>> store = SqlitePolicyStore::Open(path_);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kDataLoss) << store.status();
  EXPECT_THAT(store.status().message(), HasSubstr(path_));
  EXPECT_THAT(store.status().message(), HasSubstr("not a database"));
  // Nothing was written over the operator's file.
  std::ifstream f(path_, std::ios::binary);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(f), {}), garbage);
}

TEST_F(SqlitePolicyStoreTest, CorruptPagesAreAnErrorNotACrash) {
  {
    auto store = SqlitePolicyStore::Open(path_);
    ASSERT_TRUE(store.ok()) << store.status();
    for (int i = 0; i < 50; ++i) {
      ASSERT_TRUE((*store)->PutPolicy(absl::StrCat("job-", i), NonDefaultPolicy()).ok());
    }
  }
  // Overwrite everything after the first page (the header stays valid).
  std::string bytes;
  {
    std::ifstream f(path_, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(f), {});
  }
  ASSERT_GT(bytes.size(), 4096u);
  for (size_t i = 4096; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i * 131 % 251);
  WriteFile(path_, bytes);
  absl::StatusOr<std::unique_ptr<PolicyStore>> store = SqlitePolicyStore::Open(path_);
  if (store.ok()) {
    EXPECT_FALSE((*store)->ListPolicies().ok());
  } else {
    EXPECT_THAT(store.status().message(), HasSubstr(path_));
  }
}

TEST_F(SqlitePolicyStoreTest, NewerSchemaVersionIsRefused) {
  ASSERT_TRUE(SqlitePolicyStore::Open(path_).ok());
  const std::string newer = std::to_string(SqlitePolicyStore::kSchemaVersion + 1);
  RawQuery(path_, "PRAGMA user_version = " + newer);
  absl::StatusOr<std::unique_ptr<PolicyStore>> store = SqlitePolicyStore::Open(path_);
  EXPECT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition) << store.status();
  EXPECT_THAT(store.status().message(), HasSubstr("version " + newer));
  EXPECT_EQ(RawQuery(path_, "PRAGMA user_version"), newer);  // left alone
}

TEST_F(SqlitePolicyStoreTest, HandEditedBadRowIsDataLoss) {
  {
    auto store = SqlitePolicyStore::Open(path_);
    ASSERT_TRUE(store.ok());
    ASSERT_TRUE((*store)->PutPolicy("vit", NonDefaultPolicy()).ok());
    ASSERT_TRUE((*store)->PutPolicy("ok", JobPolicy{}).ok());
  }
  RawQuery(path_, "UPDATE policies SET mode = 'warp' WHERE job = 'vit'");
  auto store = SqlitePolicyStore::Open(path_);
  ASSERT_TRUE(store.ok()) << store.status();
  absl::StatusOr<std::optional<JobPolicy>> p = (*store)->GetPolicy("vit");
  EXPECT_EQ(p.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(p.status().message(), HasSubstr("vit"));
  EXPECT_THAT(p.status().message(), HasSubstr("mode"));
  EXPECT_EQ((*store)->ListPolicies().status().code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE((*store)->GetPolicy("ok").ok());

  RawQuery(path_, "UPDATE policies SET mode = 'auto', hysteresis = 7 WHERE job = 'vit'");
  p = (*store)->GetPolicy("vit");
  EXPECT_EQ(p.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(p.status().message(), HasSubstr("hysteresis"));
  // Overwriting through the store repairs it.
  ASSERT_TRUE((*store)->PutPolicy("vit", JobPolicy{}).ok());
  EXPECT_TRUE((*store)->ListPolicies().ok());
}

mode_t ModeOf(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 ? (st.st_mode & 0777) : 0;
}

TEST_F(SqlitePolicyStoreTest, FilesAreOwnerOnlyWhateverTheUmask) {
  struct LoosestUmask {  // nothing masked, for the test's duration
    mode_t old = umask(0);
    ~LoosestUmask() { umask(old); }
  } loosest;
  {
    auto store = SqlitePolicyStore::Open(path_);
    ASSERT_TRUE(store.ok()) << store.status();
    ASSERT_TRUE((*store)->PutPolicy("vit", NonDefaultPolicy()).ok());
    for (const std::string& file : {path_, path_ + "-wal", path_ + "-shm"}) {
      EXPECT_EQ(ModeOf(file), 0600u) << file;  // the WAL files exist while it is open
    }
  }
  // A file others may read or write (an older version, a hand copy) is tightened; group
  // read, if the operator granted it, is kept, and nothing more (0640 at most).
  ASSERT_EQ(chmod(path_.c_str(), 0606), 0);
  ASSERT_TRUE(SqlitePolicyStore::Open(path_).ok());
  EXPECT_EQ(ModeOf(path_), 0600u);
  ASSERT_EQ(chmod(path_.c_str(), 0666), 0);
  ASSERT_TRUE(SqlitePolicyStore::Open(path_).ok());
  EXPECT_EQ(ModeOf(path_), 0640u);
}

TEST_F(SqlitePolicyStoreTest, UnopenablePathNamesThePath) {
  const std::string path = ::testing::TempDir() + "no-such-dir-ballast/x/policy.db";
  absl::StatusOr<std::unique_ptr<PolicyStore>> store = SqlitePolicyStore::Open(path);
  ASSERT_FALSE(store.ok());
  EXPECT_THAT(store.status().message(), HasSubstr(path));
  EXPECT_EQ(SqlitePolicyStore::Open("").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(SqlitePolicyStoreTest, EmptyFileIsANewStore) {
  WriteFile(path_, "");
  auto store = SqlitePolicyStore::Open(path_);
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_TRUE((*store)->ListPolicies()->empty());
}

TEST_F(SqlitePolicyStoreTest, AWriteThatReturnedOkSurvivesAProcessCrash) {
  // The child writes and dies without closing anything (no destructor, no checkpoint):
  // the data lives only in the WAL, which the next open must recover.
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    auto store = SqlitePolicyStore::Open(path_);
    bool ok = store.ok() && (*store)->PutPolicy("vit", NonDefaultPolicy()).ok() &&
              (*store)->SetCordon("n1/g0", true, "crash test", absl::FromUnixSeconds(9)).ok();
    if (ok) (void)store->release();  // leak it: no close
    _exit(ok ? 0 : 1);
  }
  int wstatus = 0;
  ASSERT_EQ(waitpid(pid, &wstatus, 0), pid);
  ASSERT_TRUE(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0);
  auto store = SqlitePolicyStore::Open(path_);
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ(*(*store)->GetPolicy("vit"), NonDefaultPolicy());
  EXPECT_EQ((*store)->ListCordons()->size(), 1u);
}

TEST_F(SqlitePolicyStoreTest, TwoStoresOnOneFileSeeEachOthersWrites) {
  auto a = SqlitePolicyStore::Open(path_);
  auto b = SqlitePolicyStore::Open(path_);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE((*a)->PutPolicy("vit", NonDefaultPolicy()).ok());
  EXPECT_EQ(*(*b)->GetPolicy("vit"), NonDefaultPolicy());
}

}  // namespace
}  // namespace ballast::coordinator
