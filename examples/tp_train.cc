// A small tensor-parallel training run on the worker library's public API.
//
// Each rank is a process. The model is one transformer layer, z = y + MLP(y) with
// y = x + Attention(x), trained by AdamW to imitate a fixed random teacher (MSE). Midway
// the "coordinator" (here: this program, on every rank, at a rank-dependent step) hands
// in a plan that makes rank 1 prune one MLP unit and offload two MLP units and one head
// to rank 0; the group agrees on it, and training carries on with it.
//
//   tp_train --spawn=2                # launches 2 ranks as child processes and waits
//   tp_train --rank=0 --world=2 --rendezvous=/tmp/r   # one rank, started by hand
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "ballast/ballast.h"

ABSL_FLAG(int, spawn, 0, "Launch this many ranks as child processes (0: run one rank)");
ABSL_FLAG(int, rank, 0, "This process's rank (with --spawn=0)");
ABSL_FLAG(int, world, 1, "Number of ranks (with --spawn=0)");
ABSL_FLAG(std::string, rendezvous, "", "Directory shared by all ranks for rendezvous");
ABSL_FLAG(int, steps, 30, "Training steps");
ABSL_FLAG(int, plan_step, 10, "Step around which the example plan is delivered");
ABSL_FLAG(int, hidden, 64, "Hidden size");
ABSL_FLAG(int, heads, 4, "Attention heads (head_dim = hidden / heads)");
ABSL_FLAG(int, batch, 4, "Sequences per step");
ABSL_FLAG(int, seq, 16, "Tokens per sequence");

namespace {

using ballast::Buffer;

#define CHECK_OK(expr)                                                              \
  do {                                                                              \
    absl::Status s_ = (expr);                                                       \
    if (!s_.ok()) {                                                                 \
      std::fprintf(stderr, "rank error at %s:%d: %s\n", __FILE__, __LINE__,         \
                   s_.ToString().c_str());                                          \
      return 1;                                                                     \
    }                                                                               \
  } while (0)

template <typename T>
T ValueOrDie(absl::StatusOr<T> v) {
  if (!v.ok()) {
    std::fprintf(stderr, "error: %s\n", v.status().ToString().c_str());
    std::exit(1);
  }
  return *std::move(v);
}

int RunRank(int rank, int world, const std::string& rendezvous) {
  const int hidden = absl::GetFlag(FLAGS_hidden), heads = absl::GetFlag(FLAGS_heads);
  const int batch = absl::GetFlag(FLAGS_batch), seq = absl::GetFlag(FLAGS_seq);
  const size_t n = static_cast<size_t>(batch) * seq * hidden;

  auto store = ValueOrDie(ballast::RendezvousStore::FileSystem(rendezvous));
  ballast::CpuBackendOptions backend_options;
  backend_options.rank = rank;
  backend_options.size = world;
  backend_options.store = store;
  backend_options.prefix = "tp-train";
  auto backend = ValueOrDie(ballast::CreateCpuBackend(backend_options));
  auto group = ValueOrDie(
      ballast::TpGroup::Create({.group = ballast::GroupId("example/tp0")}, backend.get()));

  ballast::AttentionConfig attn_config;
  attn_config.id = ballast::BlockId(0);
  attn_config.hidden = hidden;
  attn_config.num_heads = heads;
  attn_config.head_dim = hidden / heads;
  attn_config.units.seed = 1;
  ballast::MlpConfig mlp_config;
  mlp_config.id = ballast::BlockId(1);
  mlp_config.hidden = hidden;
  mlp_config.intermediate = 4 * hidden;
  mlp_config.unit_size = 16;
  mlp_config.units.seed = 1;
  auto attn = ValueOrDie(ballast::ParallelAttention::Create(group.get(), attn_config));
  auto mlp = ValueOrDie(ballast::ParallelMlp::Create(group.get(), mlp_config));

  // Data: every rank draws the same batches (TP ranks see the same input).
  std::mt19937 rng(42);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> teacher(static_cast<size_t>(hidden) * hidden);
  for (float& w : teacher) w = normal(rng) / std::sqrt(static_cast<float>(hidden));

  ballast::Compute& c = backend->compute();
  auto alloc = [&](size_t size) { return ValueOrDie(c.Allocate(size)); };
  Buffer x = alloc(n), y = alloc(n), z = alloc(n), dz = alloc(n), dy = alloc(n), dx = alloc(n);
  std::vector<float> hx(n), hz(n), target(n), grad(n);
  const ballast::AdamWOptions adamw{.lr = 3e-3f, .weight_decay = 0.0f};

  ballast::WorkloadPlan plan;
  plan.group = ballast::GroupId("example/tp0");
  plan.version = ballast::PlanVersion(1);
  if (world > 1) {
    ballast::BlockPlan& mlp_plan = plan.blocks.emplace_back();
    mlp_plan.block = ballast::BlockId(1);
    mlp_plan.pruned_units.assign(world, 0);
    mlp_plan.pruned_units[1] = 1;
    mlp_plan.offloads.push_back({ballast::RankId(1), ballast::RankId(0), 2});
    ballast::BlockPlan& attn_plan = plan.blocks.emplace_back();
    attn_plan.block = ballast::BlockId(0);
    attn_plan.offloads.push_back({ballast::RankId(1), ballast::RankId(0), 1});
  }

  for (int step = 0; step < absl::GetFlag(FLAGS_steps); ++step) {
    // Plans reach ranks at different times; the group applies it once all hold it.
    if (step == absl::GetFlag(FLAGS_plan_step) + rank) CHECK_OK(group->OfferPlan(plan));
    for (float& v : hx) v = normal(rng);
    for (int t = 0; t < batch * seq; ++t) {
      for (int j = 0; j < hidden; ++j) {
        float acc = 0;
        for (int i = 0; i < hidden; ++i) acc += hx[t * hidden + i] * teacher[i * hidden + j];
        target[t * hidden + j] = std::tanh(acc);
      }
    }
    c.CopyFromHost(hx.data(), x.data(), n);

    CHECK_OK(group->BeginStep());
    CHECK_OK(attn->Forward(x.data(), batch, seq, y.data()));
    c.Axpy(1.0f, x.data(), y.data(), n);  // residual
    CHECK_OK(mlp->Forward(y.data(), batch, seq, z.data()));
    c.Axpy(1.0f, y.data(), z.data(), n);  // residual
    c.CopyToHost(z.data(), hz.data(), n);
    double loss = 0;
    for (size_t i = 0; i < n; ++i) {
      const float d = hz[i] - target[i];
      loss += d * d;
      grad[i] = 2.0f * d / n;
    }
    loss /= n;
    c.CopyFromHost(grad.data(), dz.data(), n);
    CHECK_OK(mlp->Backward(dz.data(), dy.data()));
    c.Axpy(1.0f, dz.data(), dy.data(), n);
    CHECK_OK(attn->Backward(dy.data(), dx.data()));
    CHECK_OK(mlp->AdamWStep(adamw));
    CHECK_OK(attn->AdamWStep(adamw));
    CHECK_OK(group->EndStep());

    const ballast::StepTimings& t = group->last_step_timings();
    if (rank == 0 || step == absl::GetFlag(FLAGS_steps) - 1) {
      std::printf("rank %d step %3d loss %.5f  plan v%lld  compute %.2f ms  comm %.2f ms  "
                  "mlp units %d\n",
                  rank, step, loss, static_cast<long long>(t.plan_version.value()),
                  1e3 * t.compute_seconds(), 1e3 * t.comm_seconds(),
                  t.blocks[1].units_computed);
      std::fflush(stdout);
    }
  }
  return 0;
}

int Spawn(int world) {
  std::string dir = absl::GetFlag(FLAGS_rendezvous);
  if (dir.empty()) {
    char tmpl[] = "/tmp/ballast-example-XXXXXX";
    if (mkdtemp(tmpl) == nullptr) {
      std::perror("mkdtemp");
      return 1;
    }
    dir = tmpl;
  }
  std::vector<pid_t> children;
  for (int r = 0; r < world; ++r) {
    const pid_t pid = fork();
    if (pid < 0) {
      std::perror("fork");
      return 1;
    }
    if (pid == 0) std::_Exit(RunRank(r, world, dir));
    children.push_back(pid);
  }
  int failures = 0;
  for (pid_t pid : children) {
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failures;
  }
  // FileStore keys are never removed; this run's directory is ours to clean.
  if (absl::GetFlag(FLAGS_rendezvous).empty()) {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  std::printf("%d of %d ranks finished cleanly\n", world - failures, world);
  return failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const int spawn = absl::GetFlag(FLAGS_spawn);
  if (spawn < 0 || spawn > 64) {
    std::fprintf(stderr, "--spawn=%d out of range [0, 64]\n", spawn);
    return 2;
  }
  if (spawn > 0) return Spawn(spawn);
  if (absl::GetFlag(FLAGS_rendezvous).empty()) {
    std::fprintf(stderr, "--rendezvous is required with --spawn=0\n");
    return 2;
  }
  if (absl::GetFlag(FLAGS_hidden) % absl::GetFlag(FLAGS_heads) != 0) {
    std::fprintf(stderr, "--hidden must be a multiple of --heads\n");
    return 2;
  }
  return RunRank(absl::GetFlag(FLAGS_rank), absl::GetFlag(FLAGS_world),
                 absl::GetFlag(FLAGS_rendezvous));
}
