// The policy store's contract, run against both implementations (SQLite and the in-memory
// fake other tests rely on), then the fake's extras. What only the SQLite file can get
// wrong: sqlite_policy_store_test.cc.
#include "coordinator/policy_store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "testing/fake_policy_store.h"
#include "tests/coordinator/policy_store_test_base.h"

namespace ballast::coordinator {
namespace {

using ::ballast::testing::InMemoryPolicyStore;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;

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
