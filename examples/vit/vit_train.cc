// vit_train: one rank of a tensor-parallel ViT trained on Fashion-MNIST, on worker_lib's
// public API. Start one process per rank (examples/vit/launch.py does that, with the
// coordinator, the agent and the co-tenants of the demo):
//
//   vit_train --rank=0 --world=2 --rendezvous=/tmp/run --agent_socket=/tmp/agent.sock &
//   vit_train --rank=1 --world=2 --rendezvous=/tmp/run --agent_socket=/tmp/agent.sock
//
// Every rank reads the same data in the same order (TP ranks see the same batch). With an
// agent socket, each step's timings go to the node's Ballast agent and the plans coming
// back are agreed on and applied at step boundaries; without one, the run is plain TP.
// Deterministic given --seed and the sequence of plans applied (no plans: bitwise).
//
// Rank 0 shows progress (step time, loss, the plan in force); with --metrics_out every rank
// appends one JSON object per step, which the benchmark reads. SIGINT/SIGTERM stop all
// ranks at the same step (agreed by a collective), after writing the checkpoint if one
// is configured.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "ballast/agent_client.h"
#include "ballast/ballast.h"
#include "common/status_macros.h"
#include "examples/vit/fashion_mnist.h"
#include "examples/vit/vit_model.h"

ABSL_FLAG(int, rank, 0, "This process's rank in [0, world)");
ABSL_FLAG(int, world, 1, "Number of ranks in the TP group");
ABSL_FLAG(std::string, rendezvous, "", "Fresh directory shared by all ranks (required)");
ABSL_FLAG(std::string, backend, "cpu",
          "cpu (OpenBLAS + Gloo) or cuda (cuBLAS + NCCL: one process per GPU, on the device "
          "of LOCAL_RANK, or of --rank when LOCAL_RANK is unset)");
ABSL_FLAG(std::string, gloo_host, "127.0.0.1",
          "Address this rank's Gloo transport listens on; peers on other hosts reach it there");
ABSL_FLAG(std::string, data_dir, ballast::vit::kDefaultFashionMnistDir,
          "Directory with Fashion-MNIST's IDX files");
ABSL_FLAG(int, steps, 600, "Training steps");
ABSL_FLAG(int, batch, 64, "Images per step");
ABSL_FLAG(double, lr, 2e-3, "Peak AdamW learning rate");
ABSL_FLAG(int, warmup, 50, "Steps of linear learning-rate warm-up (then cosine decay)");
ABSL_FLAG(double, weight_decay, 0.05, "AdamW weight decay (matrices only)");
ABSL_FLAG(int, patch, 7, "Patch size in pixels (must divide 28)");
ABSL_FLAG(int, hidden, 192, "Transformer width");
ABSL_FLAG(int, heads, 6, "Attention heads (one head = one unit)");
ABSL_FLAG(int, layers, 3, "Transformer layers");
ABSL_FLAG(int, mlp_unit_size, 32, "MLP neurons per unit");
ABSL_FLAG(uint64_t, seed, 1, "Seed of initialisation and data order");
ABSL_FLAG(std::string, priority, "change", "Which units go first when pruning: "
          "change|magnitude|random|round-robin (until a plan carries the job's policy)");
ABSL_FLAG(int, eval_every, 0, "Evaluate on the test set every N steps (0: only at the end)");
ABSL_FLAG(int, eval_images, 10000, "Test images per evaluation (at most 10000)");
ABSL_FLAG(std::string, checkpoint, "", "Checkpoint file ('' = none)");
ABSL_FLAG(int, checkpoint_every, 0, "Save the checkpoint every N steps (0: at the end only)");
ABSL_FLAG(bool, resume, false, "Resume from --checkpoint if it exists");
ABSL_FLAG(std::string, agent_socket, "", "Ballast agent's Unix socket ('' = plain TP)");
ABSL_FLAG(std::string, job, "vit", "Job name reported to Ballast");
ABSL_FLAG(std::string, node, "", "Node name reported to Ballast (default: hostname)");
ABSL_FLAG(std::string, metrics_out, "", "Append one JSON object per step to this file");
ABSL_FLAG(std::string, progress, "auto", "Rank 0's progress display: auto|bar|lines|none");
ABSL_FLAG(int, log_every, 25, "With --progress=lines: a line every N steps");

namespace ballast::vit {
namespace {

std::atomic<bool> g_stop_requested{false};
void OnSignal(int) { g_stop_requested.store(true); }

// Global view of a plan: what fraction of the group's units is pruned or offloaded, and
// how many units each rank owns (resharding shows up there).
struct PlanView {
  int32_t total_units = 0;
  int32_t pruned = 0;
  int32_t offloaded = 0;
  std::vector<int32_t> owned;  // per rank
  double pruned_fraction() const { return total_units ? double(pruned) / total_units : 0; }
  double offloaded_fraction() const { return total_units ? double(offloaded) / total_units : 0; }
  std::string Describe() const {
    std::string owned_text = absl::StrJoin(owned, ":");
    if (pruned == 0 && offloaded == 0) return absl::StrCat("all local, units ", owned_text);
    return absl::StrFormat("pruned %.0f%% offloaded %.0f%%, units %s", 100 * pruned_fraction(),
                           100 * offloaded_fraction(), owned_text);
  }
};

PlanView ViewOf(const TpGroup& group, const std::vector<ParallelBlock*>& blocks) {
  PlanView view;
  view.owned.assign(group.size(), 0);
  for (ParallelBlock* b : blocks) {
    view.total_units += b->num_units();
    for (RankId owner : b->owner_of_unit()) ++view.owned[owner.value()];
  }
  for (const BlockPlan& bp : group.applied_plan().blocks) {
    for (int32_t p : bp.pruned_units) view.pruned += p;
    for (const Offload& o : bp.offloads) view.offloaded += o.units;
  }
  return view;
}

// Linear warm-up, then cosine decay to a tenth of the peak.
float LearningRate(int64_t step, int64_t total, int64_t warmup, double peak) {
  if (step < warmup) return static_cast<float>(peak * (step + 1) / warmup);
  const double t = static_cast<double>(step - warmup) / std::max<int64_t>(1, total - warmup);
  return static_cast<float>(peak * (0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI * std::min(1.0, t)))));
}

// The data order: a fresh seeded permutation per epoch, so step s always sees the same
// images whatever happened before it (resume needs only the step counter).
class DataOrder {
 public:
  DataOrder(int32_t count, uint64_t seed) : count_(count), seed_(seed) {}
  void Batch(int64_t step, int32_t batch, const ImageSet& set, std::vector<uint8_t>& pixels,
             std::vector<uint8_t>& labels) {
    const size_t image = static_cast<size_t>(set.rows) * set.cols;
    pixels.resize(batch * image);
    labels.resize(batch);
    for (int32_t i = 0; i < batch; ++i) {
      const int64_t position = step * batch + i;
      const int64_t epoch = position / count_;
      if (epoch != epoch_) Shuffle(epoch);
      const int32_t index = order_[position % count_];
      std::copy_n(set.pixels.data() + index * image, image, pixels.data() + i * image);
      labels[i] = set.labels[index];
    }
  }

 private:
  void Shuffle(int64_t epoch) {
    order_.resize(count_);
    std::iota(order_.begin(), order_.end(), 0);
    std::mt19937_64 rng(seed_ * 1000003 + epoch);
    std::shuffle(order_.begin(), order_.end(), rng);
    epoch_ = epoch;
  }
  int32_t count_;
  uint64_t seed_;
  int64_t epoch_ = -1;
  std::vector<int32_t> order_;
};

// Test accuracy under the plan in force, as one (unreported) step.
absl::StatusOr<std::pair<double, double>> Evaluate(TpGroup& group, Vit& vit, const ImageSet& test,
                                                   int32_t images) {
  BALLAST_RETURN_IF_ERROR(group.BeginStep());
  const int32_t batch = vit.config().max_batch;
  const size_t image = static_cast<size_t>(test.rows) * test.cols;
  int64_t correct = 0;
  double loss = 0;
  for (int32_t first = 0; first < images; first += batch) {
    const int32_t n = std::min(batch, images - first);
    BALLAST_ASSIGN_OR_RETURN(BatchResult r, vit.EvalBatch(test.pixels.data() + first * image,
                                                          test.labels.data() + first, n));
    correct += r.correct;
    loss += r.loss * n;
  }
  BALLAST_RETURN_IF_ERROR(group.EndStep());
  return std::pair{static_cast<double>(correct) / images, loss / images};
}

class Progress {
 public:
  enum class Mode { kNone, kBar, kLines };
  Progress(Mode mode, int64_t total, int log_every)
      : mode_(mode), total_(total), log_every_(log_every) {}

  // `number` is the plan's number in its group (WorkloadPlan::number), 0 before the first.
  void Step(int64_t step, double step_seconds, double loss, const PlanView& plan,
            int64_t number) {
    ema_ = ema_ == 0 ? step_seconds : 0.9 * ema_ + 0.1 * step_seconds;
    loss_ema_ = loss_ema_ == 0 ? loss : 0.95 * loss_ema_ + 0.05 * loss;
    if (mode_ == Mode::kBar) {
      constexpr int kWidth = 24;
      const int filled = static_cast<int>(kWidth * (step + 1) / total_);
      std::fprintf(stdout, "\r[%s%s] %5lld/%lld  %6.1f ms/step  loss %.3f  plan #%lld: %s\033[K",
                   std::string(filled, '#').c_str(), std::string(kWidth - filled, '.').c_str(),
                   static_cast<long long>(step + 1), static_cast<long long>(total_), 1e3 * ema_,
                   loss_ema_, static_cast<long long>(number), plan.Describe().c_str());
      std::fflush(stdout);
    } else if (mode_ == Mode::kLines && ((step + 1) % log_every_ == 0 || step + 1 == total_)) {
      std::fprintf(stdout, "step %5lld/%lld  %6.1f ms/step  loss %.3f  plan #%lld: %s\n",
                   static_cast<long long>(step + 1), static_cast<long long>(total_), 1e3 * ema_,
                   loss_ema_, static_cast<long long>(number), plan.Describe().c_str());
      std::fflush(stdout);
    }
  }
  // An event line (plan change, evaluation) that must not be overwritten by the bar.
  void Event(const std::string& text) {
    if (mode_ == Mode::kNone) return;
    std::fprintf(stdout, "%s%s\n", mode_ == Mode::kBar ? "\r\033[K" : "", text.c_str());
    std::fflush(stdout);
  }
  void Finish() {
    if (mode_ == Mode::kBar) std::fprintf(stdout, "\n");
  }

 private:
  Mode mode_;
  int64_t total_;
  int log_every_;
  double ema_ = 0;
  double loss_ema_ = 0;
};

struct Options {
  int rank = 0, world = 1;
  std::string backend, rendezvous, gloo_host, data_dir, checkpoint, agent_socket, job, node, metrics_out;
  int64_t steps = 0;
  int32_t batch = 0, warmup = 0, eval_every = 0, eval_images = 0, checkpoint_every = 0;
  double lr = 0, weight_decay = 0;
  bool resume = false;
  VitConfig model;
  Progress::Mode progress = Progress::Mode::kNone;
  int log_every = 25;
};

absl::Status Run(const Options& o) {
  BALLAST_ASSIGN_OR_RETURN(ImageSet train, LoadFashionMnist(o.data_dir, Split::kTrain));
  BALLAST_ASSIGN_OR_RETURN(ImageSet test, LoadFashionMnist(o.data_dir, Split::kTest));
  if (train.rows != o.model.image_size || train.cols != o.model.image_size) {
    return absl::InvalidArgumentError(absl::StrCat("images are ", train.rows, "x", train.cols,
                                                   ", the model expects ", o.model.image_size));
  }
  const int32_t eval_images = std::min(o.eval_images, test.count);

  BALLAST_ASSIGN_OR_RETURN(RendezvousStore store, RendezvousStore::FileSystem(o.rendezvous));
  absl::StatusOr<std::unique_ptr<Backend>> created;
  if (o.backend == "cuda") {
    CudaBackendOptions backend_options;
    backend_options.rank = o.rank;
    backend_options.size = o.world;
    backend_options.store = store;
    backend_options.prefix = "vit";
    created = CreateCudaBackend(backend_options);
  } else {
    CpuBackendOptions backend_options;
    backend_options.rank = o.rank;
    backend_options.size = o.world;
    backend_options.store = store;
    backend_options.prefix = "vit";
    backend_options.hostname = o.gloo_host;
    created = CreateCpuBackend(backend_options);
  }
  if (!created.ok()) {
    return absl::Status(created.status().code(), absl::StrCat("--backend=", o.backend, ": ",
                                                              created.status().message()));
  }
  std::unique_ptr<Backend> backend = *std::move(created);
  BALLAST_ASSIGN_OR_RETURN(
      std::unique_ptr<TpGroup> group,
      TpGroup::Create({.group = GroupId(absl::StrCat(o.job, "/tp0"))}, backend.get()));
  BALLAST_ASSIGN_OR_RETURN(std::unique_ptr<Vit> vit, Vit::Create(group.get(), o.model));

  int64_t start = 0;
  if (o.resume && !o.checkpoint.empty() && std::filesystem::exists(o.checkpoint)) {
    BALLAST_ASSIGN_OR_RETURN(start, vit->LoadCheckpoint(o.checkpoint));
  }
  const bool leader = o.rank == 0;
  Progress progress(leader ? o.progress : Progress::Mode::kNone, o.steps, o.log_every);
  if (leader) {
    progress.Event(absl::StrFormat(
        "ViT %d layers x %d wide, %d heads, %d-neuron MLP units; %d ranks; batch %d; %s%s",
        o.model.layers, o.model.hidden, o.model.heads, o.model.mlp_unit_size, o.world, o.batch,
        o.agent_socket.empty() ? "plain TP (no agent)" : "balanced by Ballast",
        start > 0 ? absl::StrCat("; resumed at step ", start).c_str() : ""));
  }

  std::unique_ptr<AgentClient> client;
  if (!o.agent_socket.empty()) {
    AgentClientOptions options;
    options.socket_path = o.agent_socket;
    options.job = o.job;
    options.node = o.node;
    options.device = absl::StrCat(o.node, "/cpu", o.rank);
    BALLAST_ASSIGN_OR_RETURN(client, AgentClient::Start(options, group.get()));
  }
  std::ofstream metrics;
  if (!o.metrics_out.empty()) {
    metrics.open(o.metrics_out, std::ios::app);
    if (!metrics) return absl::PermissionDeniedError(absl::StrCat(o.metrics_out, ": cannot open"));
  }

  DataOrder order(train.count, o.model.seed);
  std::vector<uint8_t> pixels, labels;
  const std::vector<ParallelBlock*> blocks = vit->blocks();
  // The plan's global view changes only when a new plan is applied (ownership included).
  int64_t shown_version = -1;
  PlanView view;
  std::vector<int64_t> stop(1);
  int64_t step = start;
  for (; step < o.steps; ++step) {
    // Ranks leave together: each says whether it was asked to stop, and a min-reduce
    // makes every rank see the same answer at the same step.
    stop[0] = g_stop_requested.load() ? 0 : 1;
    BALLAST_RETURN_IF_ERROR(backend->comm().AllReduceMin(stop.data(), 1));
    if (stop[0] == 0) break;

    const absl::Time begin = absl::Now();
    order.Batch(step, o.batch, train, pixels, labels);
    AdamWOptions adamw;
    adamw.lr = LearningRate(step, o.steps, o.warmup, o.lr);
    adamw.weight_decay = static_cast<float>(o.weight_decay);
    BALLAST_RETURN_IF_ERROR(group->BeginStep());
    BALLAST_ASSIGN_OR_RETURN(BatchResult result,
                             vit->TrainBatch(pixels.data(), labels.data(), o.batch, adamw));
    BALLAST_RETURN_IF_ERROR(group->EndStep());
    const double wall = absl::ToDoubleSeconds(absl::Now() - begin);
    const StepTimings& t = group->last_step_timings();
    if (client) client->Report(t);

    const int64_t version = group->applied_version().value();
    const int64_t number = group->applied_plan().number;
    if (version != shown_version) {
      view = ViewOf(*group, blocks);
      if (shown_version >= 0) {
        progress.Event(absl::StrFormat("step %d: plan #%d applied: %s", step, number,
                                       view.Describe()));
      }
      shown_version = version;
    }
    progress.Step(step, wall, result.loss, view, number);
    if (metrics.is_open()) {
      // Per block too: a block's time against its units shows what does not scale with them.
      int32_t units = 0;
      std::vector<std::string> block_compute, block_units;
      for (const BlockTiming& b : t.blocks) {
        units += b.units_computed;
        block_compute.push_back(absl::StrFormat("%.6f", b.compute_seconds));
        block_units.push_back(absl::StrCat(b.units_computed));
      }
      metrics << absl::StrFormat(
          "{\"rank\":%d,\"step\":%d,\"time\":%.6f,\"wall_s\":%.6f,\"compute_s\":%.6f,"
          "\"comm_s\":%.6f,\"units_computed\":%d,\"seconds_per_unit\":%.9f,\"loss\":%.6f,"
          "\"batch_accuracy\":%.4f,\"lr\":%.6g,\"plan_version\":%d,\"plan_number\":%d,"
          "\"pruned_fraction\":%.6f,"
          "\"offloaded_fraction\":%.6f,\"owned_units\":[%s],\"block_compute_s\":[%s],"
          "\"block_units\":[%s]}\n",
          o.rank, step, absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()), wall,
          t.compute_seconds(), t.comm_seconds(), units,
          units > 0 ? t.compute_seconds() / units : 0.0, result.loss,
          static_cast<double>(result.correct) / o.batch, adamw.lr, version, number,
          view.pruned_fraction(), view.offloaded_fraction(), absl::StrJoin(view.owned, ","),
          absl::StrJoin(block_compute, ","), absl::StrJoin(block_units, ","));
      metrics.flush();
    }
    if (o.eval_every > 0 && (step + 1) % o.eval_every == 0 && step + 1 < o.steps) {
      BALLAST_ASSIGN_OR_RETURN(auto acc, Evaluate(*group, *vit, test, eval_images));
      progress.Event(absl::StrFormat("step %d: test accuracy %.2f%% (loss %.3f)", step + 1,
                                     100 * acc.first, acc.second));
    }
    if (!o.checkpoint.empty() && o.checkpoint_every > 0 && (step + 1) % o.checkpoint_every == 0) {
      BALLAST_RETURN_IF_ERROR(vit->SaveCheckpoint(o.checkpoint, step + 1));
    }
  }
  progress.Finish();
  const bool interrupted = step < o.steps;
  if (!o.checkpoint.empty()) {
    BALLAST_RETURN_IF_ERROR(vit->SaveCheckpoint(o.checkpoint, step));
    progress.Event(absl::StrCat("checkpoint at step ", step, " written to ", o.checkpoint));
  }
  if (interrupted) {
    // Asked to stop: leave promptly (the checkpoint above keeps the work); no evaluation.
    progress.Event(absl::StrCat("stopped after ", step, " steps"));
    if (metrics.is_open()) {
      metrics << absl::StrFormat("{\"rank\":%d,\"final\":true,\"steps\":%d,\"interrupted\":true}\n",
                                 o.rank, step);
    }
  } else {
    BALLAST_ASSIGN_OR_RETURN(auto acc, Evaluate(*group, *vit, test, eval_images));
    progress.Event(absl::StrFormat("finished %d steps: test accuracy %.2f%% on %d images (loss %.3f)",
                                   step, 100 * acc.first, eval_images, acc.second));
    if (metrics.is_open()) {
      metrics << absl::StrFormat(
          "{\"rank\":%d,\"final\":true,\"steps\":%d,\"interrupted\":false,"
          "\"test_accuracy\":%.6f,\"test_loss\":%.6f,\"test_images\":%d}\n",
          o.rank, step, acc.first, acc.second, eval_images);
    }
  }
  if (client) {
    const AgentClientStats s = client->stats();
    progress.Event(absl::StrFormat("agent: %d reports sent, %d dropped, %d plans received",
                                   s.reports_sent, s.reports_dropped, s.plans_received));
  }
  return absl::OkStatus();
}

absl::StatusOr<Options> ParseOptions() {
  Options o;
  o.rank = absl::GetFlag(FLAGS_rank);
  o.world = absl::GetFlag(FLAGS_world);
  if (o.world < 1 || o.world > 64) {
    return absl::InvalidArgumentError(absl::StrCat("--world=", o.world, " out of range [1, 64]"));
  }
  if (o.rank < 0 || o.rank >= o.world) {
    return absl::InvalidArgumentError(
        absl::StrCat("--rank=", o.rank, " out of range [0, --world=", o.world, ")"));
  }
  o.rendezvous = absl::GetFlag(FLAGS_rendezvous);
  o.backend = absl::GetFlag(FLAGS_backend);
  if (o.backend != "cpu" && o.backend != "cuda") {
    return absl::InvalidArgumentError(
        absl::StrCat("--backend=", o.backend, ": must be cpu or cuda"));
  }
  o.gloo_host = absl::GetFlag(FLAGS_gloo_host);
  if (o.rendezvous.empty()) return absl::InvalidArgumentError("--rendezvous is required");
  o.data_dir = absl::GetFlag(FLAGS_data_dir);
  o.steps = absl::GetFlag(FLAGS_steps);
  o.batch = absl::GetFlag(FLAGS_batch);
  o.lr = absl::GetFlag(FLAGS_lr);
  o.warmup = absl::GetFlag(FLAGS_warmup);
  o.weight_decay = absl::GetFlag(FLAGS_weight_decay);
  if (o.steps < 1) return absl::InvalidArgumentError(absl::StrCat("--steps=", o.steps, " < 1"));
  if (o.batch < 1 || o.batch > 4096) {
    return absl::InvalidArgumentError(absl::StrCat("--batch=", o.batch, " out of range [1, 4096]"));
  }
  if (!(o.lr > 0 && o.lr < 1)) {
    return absl::InvalidArgumentError(absl::StrCat("--lr=", o.lr, " out of range (0, 1)"));
  }
  if (o.warmup < 1) return absl::InvalidArgumentError(absl::StrCat("--warmup=", o.warmup, " < 1"));
  if (!(o.weight_decay >= 0 && o.weight_decay < 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--weight_decay=", o.weight_decay, " out of range [0, 1)"));
  }
  o.model.patch_size = absl::GetFlag(FLAGS_patch);
  o.model.hidden = absl::GetFlag(FLAGS_hidden);
  o.model.heads = absl::GetFlag(FLAGS_heads);
  o.model.layers = absl::GetFlag(FLAGS_layers);
  o.model.mlp_unit_size = absl::GetFlag(FLAGS_mlp_unit_size);
  o.model.seed = absl::GetFlag(FLAGS_seed);
  o.model.max_batch = std::max(o.batch, 250);
  BALLAST_ASSIGN_OR_RETURN(o.model.priority, ParsePriority(absl::GetFlag(FLAGS_priority)));
  BALLAST_RETURN_IF_ERROR(ValidateVitConfig(o.model));
  o.eval_every = absl::GetFlag(FLAGS_eval_every);
  o.eval_images = absl::GetFlag(FLAGS_eval_images);
  if (o.eval_every < 0) return absl::InvalidArgumentError("--eval_every must be >= 0");
  if (o.eval_images < 1) return absl::InvalidArgumentError("--eval_images must be >= 1");
  o.checkpoint = absl::GetFlag(FLAGS_checkpoint);
  o.checkpoint_every = absl::GetFlag(FLAGS_checkpoint_every);
  if (o.checkpoint_every < 0) return absl::InvalidArgumentError("--checkpoint_every must be >= 0");
  o.resume = absl::GetFlag(FLAGS_resume);
  if (o.resume && o.checkpoint.empty()) {
    return absl::InvalidArgumentError("--resume needs --checkpoint");
  }
  o.agent_socket = absl::GetFlag(FLAGS_agent_socket);
  o.job = absl::GetFlag(FLAGS_job);
  if (o.job.empty()) return absl::InvalidArgumentError("--job must not be empty");
  o.node = absl::GetFlag(FLAGS_node);
  if (o.node.empty()) {
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    o.node = host;
  }
  o.metrics_out = absl::GetFlag(FLAGS_metrics_out);
  const std::string progress = absl::GetFlag(FLAGS_progress);
  if (progress == "auto") {
    o.progress = isatty(STDOUT_FILENO) ? Progress::Mode::kBar : Progress::Mode::kLines;
  } else if (progress == "bar") {
    o.progress = Progress::Mode::kBar;
  } else if (progress == "lines") {
    o.progress = Progress::Mode::kLines;
  } else if (progress == "none") {
    o.progress = Progress::Mode::kNone;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--progress=", progress, " is not one of auto|bar|lines|none"));
  }
  o.log_every = absl::GetFlag(FLAGS_log_every);
  if (o.log_every < 1) return absl::InvalidArgumentError("--log_every must be >= 1");
  return o;
}

}  // namespace
}  // namespace ballast::vit

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("One rank of a tensor-parallel ViT on Fashion-MNIST");
  absl::ParseCommandLine(argc, argv);
  absl::StatusOr<ballast::vit::Options> options = ballast::vit::ParseOptions();
  if (!options.ok()) {
    std::fprintf(stderr, "vit_train: %s\n", std::string(options.status().message()).c_str());
    return 2;
  }
  std::signal(SIGINT, ballast::vit::OnSignal);
  std::signal(SIGTERM, ballast::vit::OnSignal);
  const absl::Status status = ballast::vit::Run(*options);
  if (!status.ok()) {
    std::fprintf(stderr, "vit_train rank %d: %s\n", options->rank, status.ToString().c_str());
    return 1;
  }
  return 0;
}
