// The policy store's contract, run against both implementations (SQLite and the in-memory
// fake other tests rely on), then what only the SQLite file can get wrong: persistence
// across processes, schema versions, damaged files.
#include "coordinator/policy_store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "testing/fake_policy_store.h"

namespace ballast::coordinator {
namespace {

using ::ballast::testing::InMemoryPolicyStore;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;

// A fresh file name per call under the test temp dir, so tests (and concurrent runs of
// the suite) never share a database.
std::string UniquePath(absl::string_view tag) {
  static std::atomic<int> counter{0};
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string name = absl::StrCat(info != nullptr ? info->name() : "test", "_", tag);
  for (char& c : name) {
    if (c == '/') c = '_';
  }
  return absl::StrCat(::testing::TempDir(), "ballast_policy_", getpid(), "_", counter++, "_", name,
                      ".db");
}

void RemoveDatabase(const std::string& path) {
  for (const char* suffix : {"", "-wal", "-shm"}) std::remove((path + suffix).c_str());
}

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

// Every field away from its default, so a field the store forgot cannot pass by luck.
JobPolicy NonDefaultPolicy() {
  JobPolicy p;
  p.mode = BalanceMode::kMigrate;
  p.max_pruned_fraction_rank = 0.3;
  p.max_pruned_fraction_group = 0.125;
  p.imputation = Imputation::kZero;
  p.priority = Priority::kRoundRobin;
  p.accuracy_weight_seconds = 2.75;
  p.straggler_threshold = 0.15;
  p.hysteresis = 0.07;
  p.reshard_after = absl::Seconds(90);
  p.report_period = absl::Milliseconds(2500);
  p.expert_capacity_factor = 0.5;
  return p;
}

class SqliteBackend {
 public:
  SqliteBackend() : path_(UniquePath("typed")) {}
  ~SqliteBackend() { RemoveDatabase(path_); }
  absl::StatusOr<std::unique_ptr<PolicyStore>> Open() { return SqlitePolicyStore::Open(path_); }

 private:
  std::string path_;
};

class InMemoryBackend {
 public:
  // A new store over the same state is what a restart looks like to the fake.
  absl::StatusOr<std::unique_ptr<PolicyStore>> Open() {
    return std::unique_ptr<PolicyStore>(std::make_unique<InMemoryPolicyStore>(state_));
  }

 private:
  std::shared_ptr<InMemoryPolicyStore::State> state_ =
      std::make_shared<InMemoryPolicyStore::State>();
};

template <typename Backend>
class PolicyStoreTest : public ::testing::Test {
 protected:
  void SetUp() override { Reopen(); }

  // Closes the store (if open) and opens it again: a coordinator restart.
  void Reopen() {
    store_.reset();
    absl::StatusOr<std::unique_ptr<PolicyStore>> store = backend_.Open();
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
  }

  std::optional<JobPolicy> Get(absl::string_view job) {
    absl::StatusOr<std::optional<JobPolicy>> p = store_->GetPolicy(job);
    EXPECT_TRUE(p.ok()) << p.status();
    return p.ok() ? *p : std::nullopt;
  }

  Backend backend_;
  std::unique_ptr<PolicyStore> store_;
};

class BackendNames {
 public:
  template <typename T>
  static std::string GetName(int) {
    return std::is_same_v<T, SqliteBackend> ? "Sqlite" : "InMemory";
  }
};

using Backends = ::testing::Types<SqliteBackend, InMemoryBackend>;
TYPED_TEST_SUITE(PolicyStoreTest, Backends, BackendNames);

TYPED_TEST(PolicyStoreTest, EmptyStore) {
  EXPECT_EQ(this->Get("vit"), std::nullopt);
  absl::StatusOr<std::map<std::string, JobPolicy>> all = this->store_->ListPolicies();
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_TRUE(all->empty());
  ASSERT_TRUE(this->store_->ListPaused().ok());
  EXPECT_TRUE(this->store_->ListPaused()->empty());
  EXPECT_TRUE(this->store_->ListCordons()->empty());
  EXPECT_FALSE(*this->store_->IsPaused(""));
}

TYPED_TEST(PolicyStoreTest, RoundTripsEveryField) {
  const JobPolicy p = NonDefaultPolicy();
  ASSERT_TRUE(this->store_->PutPolicy("vit", p).ok());
  EXPECT_EQ(this->Get("vit"), p);
  absl::StatusOr<std::map<std::string, JobPolicy>> all = this->store_->ListPolicies();
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_THAT(*all, ElementsAre(Pair("vit", p)));
  this->Reopen();
  EXPECT_EQ(this->Get("vit"), p);

  // The defaults too (they are not stored as "absent").
  ASSERT_TRUE(this->store_->PutPolicy("default", JobPolicy{}).ok());
  EXPECT_EQ(this->Get("default"), JobPolicy{});
}

TYPED_TEST(PolicyStoreTest, RoundTripsEveryEnumValueAndEdgeValue) {
  std::map<std::string, JobPolicy> want;
  for (BalanceMode m : {BalanceMode::kOff, BalanceMode::kObserve, BalanceMode::kResize,
                        BalanceMode::kMigrate, BalanceMode::kAuto}) {
    JobPolicy p;
    p.mode = m;
    want[absl::StrCat("mode-", BalanceModeName(m))] = p;
  }
  for (Imputation i : {Imputation::kZero, Imputation::kMean}) {
    JobPolicy p;
    p.imputation = i;
    want[absl::StrCat("imputation-", ImputationName(i))] = p;
  }
  for (Priority pr :
       {Priority::kChange, Priority::kMagnitude, Priority::kRandom, Priority::kRoundRobin}) {
    JobPolicy p;
    p.priority = pr;
    want[absl::StrCat("priority-", PriorityName(pr))] = p;
  }
  JobPolicy edges;
  edges.max_pruned_fraction_rank = 1;
  edges.max_pruned_fraction_group = 0;
  edges.accuracy_weight_seconds = 1e-300;  // doubles survive bit for bit
  edges.straggler_threshold = 10;
  edges.hysteresis = 1.0 / 3;
  edges.reshard_after = absl::ZeroDuration();
  edges.report_period = absl::Minutes(10);
  want["edges"] = edges;
  want["every.name_char-A9:/@+"] = NonDefaultPolicy();

  for (const auto& [job, p] : want) ASSERT_TRUE(this->store_->PutPolicy(job, p).ok()) << job;
  this->Reopen();
  absl::StatusOr<std::map<std::string, JobPolicy>> all = this->store_->ListPolicies();
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(*all, want);
  for (const auto& [job, p] : want) EXPECT_EQ(this->Get(job), p) << job;
}

TYPED_TEST(PolicyStoreTest, NamesOutsideTheCharacterSetAreRefused) {
  for (const std::string& job :
       {std::string("unicode-\xc3\xa9t\xc3\xa9"), std::string("q'; DROP TABLE policies;--"),
        std::string("nul\0byte", 8), std::string("a b")}) {
    absl::Status s = this->store_->PutPolicy(job, NonDefaultPolicy());
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << job;
    EXPECT_THAT(s.message(), HasSubstr("names take letters, digits")) << job;
  }
  absl::StatusOr<std::map<std::string, JobPolicy>> all = this->store_->ListPolicies();
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_TRUE(all->empty());
}

TYPED_TEST(PolicyStoreTest, OverwriteReplacesAndListIsSorted) {
  JobPolicy a;
  a.mode = BalanceMode::kObserve;
  ASSERT_TRUE(this->store_->PutPolicy("b-job", a).ok());
  ASSERT_TRUE(this->store_->PutPolicy("a-job", a).ok());
  ASSERT_TRUE(this->store_->PutPolicy("c-job", a).ok());
  const JobPolicy b = NonDefaultPolicy();
  ASSERT_TRUE(this->store_->PutPolicy("b-job", b).ok());
  EXPECT_EQ(this->Get("b-job"), b);
  absl::StatusOr<std::map<std::string, JobPolicy>> all = this->store_->ListPolicies();
  ASSERT_TRUE(all.ok());
  EXPECT_THAT(*all, ElementsAre(Pair("a-job", a), Pair("b-job", b), Pair("c-job", a)));
}

TYPED_TEST(PolicyStoreTest, DeleteIsIdempotent) {
  ASSERT_TRUE(this->store_->PutPolicy("vit", NonDefaultPolicy()).ok());
  ASSERT_TRUE(this->store_->PutPolicy("other", JobPolicy{}).ok());
  EXPECT_TRUE(this->store_->DeletePolicy("vit").ok());
  EXPECT_TRUE(this->store_->DeletePolicy("vit").ok());
  EXPECT_TRUE(this->store_->DeletePolicy("never-stored").ok());
  EXPECT_EQ(this->Get("vit"), std::nullopt);
  EXPECT_EQ(this->Get("other"), JobPolicy{});
  EXPECT_EQ(this->store_->DeletePolicy("").code(), absl::StatusCode::kInvalidArgument);
}

TYPED_TEST(PolicyStoreTest, InvalidPolicyNamesTheFieldAndStoresNothing) {
  const JobPolicy stored = NonDefaultPolicy();
  ASSERT_TRUE(this->store_->PutPolicy("vit", stored).ok());
  struct Case {
    std::function<void(JobPolicy&)> mutate;
    const char* field;
  };
  const Case cases[] = {
      {[](JobPolicy& p) { p.max_pruned_fraction_rank = 1.5; }, "max_pruned_fraction_rank"},
      {[](JobPolicy& p) { p.max_pruned_fraction_group = -0.1; }, "max_pruned_fraction_group"},
      {[](JobPolicy& p) { p.hysteresis = std::nan(""); }, "hysteresis"},
      {[](JobPolicy& p) { p.accuracy_weight_seconds = -1; }, "accuracy_weight_seconds"},
      {[](JobPolicy& p) { p.straggler_threshold = 11; }, "straggler_threshold"},
      {[](JobPolicy& p) { p.expert_capacity_factor = -1; }, "expert_capacity_factor"},
      {[](JobPolicy& p) { p.expert_capacity_factor = INFINITY; }, "expert_capacity_factor"},
      {[](JobPolicy& p) { p.mode = static_cast<BalanceMode>(99); }, "mode"},
      {[](JobPolicy& p) { p.imputation = static_cast<Imputation>(99); }, "imputation"},
      {[](JobPolicy& p) { p.priority = static_cast<Priority>(99); }, "priority"},
      {[](JobPolicy& p) { p.reshard_after = absl::Seconds(-1); }, "reshard_after"},
      {[](JobPolicy& p) { p.reshard_after = absl::Microseconds(1500); }, "reshard_after"},
      {[](JobPolicy& p) { p.reshard_after = absl::InfiniteDuration(); }, "reshard_after"},
      {[](JobPolicy& p) { p.reshard_after = absl::Milliseconds(INT64_MAX); }, "reshard_after"},
      {[](JobPolicy& p) { p.reshard_after = absl::Hours(24 * 7 + 1); }, "reshard_after"},
      {[](JobPolicy& p) { p.report_period = absl::Milliseconds(1); }, "report_period"},
      {[](JobPolicy& p) { p.report_period = absl::Nanoseconds(10'000'001); }, "report_period"},
  };
  for (const char* job : {"vit", "new-job"}) {
    for (const Case& c : cases) {
      JobPolicy bad = NonDefaultPolicy();
      bad.mode = BalanceMode::kResize;  // would show if anything were written
      c.mutate(bad);
      absl::Status s = this->store_->PutPolicy(job, bad);
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.field << " " << s;
      EXPECT_THAT(s.message(), HasSubstr(c.field));
    }
  }
  for (const std::string& job : {std::string(""), std::string(257, 'j')}) {
    absl::Status s = this->store_->PutPolicy(job, stored);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(s.message(), HasSubstr("job"));
  }
  EXPECT_EQ(this->Get("vit"), stored);
  EXPECT_EQ(this->Get("new-job"), std::nullopt);
  EXPECT_EQ(this->store_->ListPolicies()->size(), 1u);
  EXPECT_EQ(this->store_->GetPolicy("").status().code(), absl::StatusCode::kInvalidArgument);
}

TYPED_TEST(PolicyStoreTest, PauseScopesAreIndependent) {
  PolicyStore& s = *this->store_;
  ASSERT_TRUE(s.SetPaused("", true).ok());
  EXPECT_TRUE(*s.IsPaused(""));
  EXPECT_FALSE(*s.IsPaused("vit"));
  ASSERT_TRUE(s.SetPaused("vit", true).ok());
  ASSERT_TRUE(s.SetPaused("vit", true).ok());  // idempotent
  ASSERT_TRUE(s.SetPaused("bert", true).ok());
  EXPECT_THAT(*s.ListPaused(), ElementsAre("", "bert", "vit"));
  ASSERT_TRUE(s.SetPaused("", false).ok());
  EXPECT_FALSE(*s.IsPaused(""));
  EXPECT_TRUE(*s.IsPaused("vit"));
  ASSERT_TRUE(s.SetPaused("bert", false).ok());
  ASSERT_TRUE(s.SetPaused("never-paused", false).ok());
  EXPECT_THAT(*s.ListPaused(), ElementsAre("vit"));
  // A default-constructed view (null data) is the cluster scope too, not NULL.
  ASSERT_TRUE(s.SetPaused(absl::string_view(), true).ok());
  EXPECT_TRUE(*s.IsPaused(""));

  this->Reopen();
  EXPECT_THAT(*this->store_->ListPaused(), ElementsAre("", "vit"));
  absl::Status bad = this->store_->SetPaused(std::string(300, 's'), true);
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.message(), HasSubstr("scope"));
  EXPECT_THAT(*this->store_->ListPaused(), ElementsAre("", "vit"));
}

TYPED_TEST(PolicyStoreTest, CordonsSetUnsetList) {
  PolicyStore& s = *this->store_;
  const absl::Time t1 = absl::FromUnixMicros(1'700'000'000'123'456);
  const absl::Time t2 = absl::FromUnixSeconds(1'700'000'100);
  ASSERT_TRUE(s.SetCordon("node7/gpu3", true, "ECC errors", t1).ok());
  ASSERT_TRUE(s.SetCordon("node2/gpu0", true, "", t2).ok());
  EXPECT_THAT(*s.ListCordons(),
              ElementsAre(Cordon{"node2/gpu0", "", t2}, Cordon{"node7/gpu3", "ECC errors", t1}));
  // Cordoning again replaces the reason and time.
  ASSERT_TRUE(s.SetCordon("node7/gpu3", true, "thermal", t2).ok());
  EXPECT_THAT(*s.ListCordons(),
              ElementsAre(Cordon{"node2/gpu0", "", t2}, Cordon{"node7/gpu3", "thermal", t2}));
  ASSERT_TRUE(s.SetCordon("node2/gpu0", false, "", absl::InfinitePast()).ok());
  ASSERT_TRUE(s.SetCordon("never-cordoned", false, "", absl::Time()).ok());
  EXPECT_THAT(*s.ListCordons(), ElementsAre(Cordon{"node7/gpu3", "thermal", t2}));

  // Times are kept to the microsecond.
  ASSERT_TRUE(s.SetCordon("node9/gpu1", true, "x", t1 + absl::Nanoseconds(999)).ok());
  EXPECT_EQ(s.ListCordons()->back(), (Cordon{"node9/gpu1", "x", t1}));

  this->Reopen();
  EXPECT_THAT(*this->store_->ListCordons(),
              ElementsAre(Cordon{"node7/gpu3", "thermal", t2}, Cordon{"node9/gpu1", "x", t1}));

  absl::Status bad = this->store_->SetCordon("", true, "r", t1);
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.message(), HasSubstr("device"));
  bad = this->store_->SetCordon("d", true, "r", absl::InfiniteFuture());
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.message(), HasSubstr("at"));
  bad = this->store_->SetCordon("d", true, std::string(2000, 'r'), t1);
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.message(), HasSubstr("reason"));
  EXPECT_EQ(this->store_->ListCordons()->size(), 2u);
}

TYPED_TEST(PolicyStoreTest, EverythingSurvivesReopen) {
  ASSERT_TRUE(this->store_->PutPolicy("vit", NonDefaultPolicy()).ok());
  ASSERT_TRUE(this->store_->SetPaused("", true).ok());
  ASSERT_TRUE(this->store_->SetPaused("vit", true).ok());
  ASSERT_TRUE(this->store_->SetCordon("n1/g0", true, "slow", absl::FromUnixSeconds(5)).ok());
  this->Reopen();
  this->Reopen();  // twice: opening an existing file must not reset it
  EXPECT_EQ(this->Get("vit"), NonDefaultPolicy());
  EXPECT_TRUE(*this->store_->IsPaused(""));
  EXPECT_TRUE(*this->store_->IsPaused("vit"));
  EXPECT_THAT(*this->store_->ListCordons(),
              ElementsAre(Cordon{"n1/g0", "slow", absl::FromUnixSeconds(5)}));
}

TYPED_TEST(PolicyStoreTest, ConcurrentCallers) {
  constexpr int kThreads = 4;
  constexpr int kPerThread = 25;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        const std::string job = absl::StrCat("job-", t, "-", i);
        JobPolicy p;
        p.hysteresis = 0.01 * i;
        if (absl::Status s = this->store_->PutPolicy(job, p); !s.ok()) ADD_FAILURE() << s;
        if (!this->store_->GetPolicy(job).ok()) ADD_FAILURE() << job;
        if (!this->store_->SetPaused(job, i % 2 == 0).ok()) ADD_FAILURE() << job;
        if (!this->store_->ListPolicies().ok()) ADD_FAILURE() << job;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(this->store_->ListPolicies()->size(), size_t{kThreads * kPerThread});
  EXPECT_EQ(this->store_->ListPaused()->size(), size_t{kThreads * ((kPerThread + 1) / 2)});
  EXPECT_DOUBLE_EQ(this->Get("job-3-7")->hysteresis, 0.01 * 7);
}

TYPED_TEST(PolicyStoreTest, HoldsSetReleaseList) {
  PolicyStore& s = *this->store_;
  EXPECT_TRUE(s.ListHolds()->empty());
  const GroupHold a{.rank = 1, .offload_fraction = 0.25, .reshard_fraction = 0.5};
  const GroupHold b{.rank = 0, .offload_fraction = 1};
  ASSERT_TRUE(s.SetHold("vit", "tp1", a).ok());
  ASSERT_TRUE(s.SetHold("vit", "tp0", b).ok());
  ASSERT_TRUE(s.SetHold("gpt", "tp0", a).ok());
  EXPECT_THAT(*s.ListHolds(), ElementsAre(StoredHold{"gpt", "tp0", a}, StoredHold{"vit", "tp0", b},
                                          StoredHold{"vit", "tp1", a}));
  // Holding again replaces; releasing one not held is OK (a retry is harmless).
  ASSERT_TRUE(s.SetHold("vit", "tp0", a).ok());
  ASSERT_TRUE(s.SetHold("gpt", "tp0", std::nullopt).ok());
  ASSERT_TRUE(s.SetHold("gpt", "tp0", std::nullopt).ok());
  this->Reopen();
  EXPECT_THAT(*this->store_->ListHolds(),
              ElementsAre(StoredHold{"vit", "tp0", a}, StoredHold{"vit", "tp1", a}));

  struct Bad {
    std::string job, group;
    GroupHold hold;
    const char* message;
  };
  for (const Bad& bad : std::vector<Bad>{
           {"", "tp0", a, "job"},
           {"vit", "", a, "group"},
           {"vit", "tp0", {.rank = -1}, "rank -1 must be >= 0"},
           {"vit", "tp0", {.offload_fraction = 2}, "offload_fraction 2 out of range [0, 1]"},
           {"vit", "tp0", {.reshard_fraction = NAN}, "reshard_fraction nan"},
       }) {
    absl::Status st = this->store_->SetHold(bad.job, bad.group, bad.hold);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << bad.message;
    EXPECT_THAT(st.message(), HasSubstr(bad.message));
  }
  EXPECT_EQ(this->store_->ListHolds()->size(), 2u);
}

// ---- SQLite only ----

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

// ---- The fake's extras ----

TEST(InMemoryPolicyStoreTest, FailNextFailsOneCallAndChangesNothing) {
  InMemoryPolicyStore store;
  store.FailNext(absl::UnavailableError("disk gone"));
  store.FailNext();
  absl::Status s = store.PutPolicy("vit", JobPolicy{});
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(s.message(), HasSubstr("disk gone"));
  EXPECT_EQ(store.IsPaused("").status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(*store.GetPolicy("vit"), std::nullopt);  // the failed put stored nothing
  EXPECT_TRUE(store.PutPolicy("vit", JobPolicy{}).ok());
  EXPECT_EQ(store.calls(), 4);
}

}  // namespace
}  // namespace ballast::coordinator
