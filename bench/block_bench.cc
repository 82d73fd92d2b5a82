// Block benchmarks for the worker library; one JSON object per line on stdout.
//
//   prune:    forward+backward of a transformer block (attention + MLP) on one CPU rank
//             at kept fractions 1.0 / 0.75 / 0.5 / 0.25. Target: time(k) / time(1) <=
//             k + 0.05. --shape=llama: hidden 1024, 16 query heads in 4 KV groups, causal,
//             RoPE, SwiGLU 2816, 4 x 256 tokens (a Llama-like decoder block).
//   offload:  2 ranks (threads); the cost per step of rank 1 offloading u MLP units to
//             rank 0, against both computing their own units.
//   overhead: the plan machinery with an empty plan against a plain TP MLP (the same
//             GEMMs and all-reduces, no plan, ranges or timers). Target: <= 1%.
//   skew:     2 ranks (threads), each pinned to a core of its own as the job harness pins
//             ranks, both busy until an all-reduce of a block's output (batch x seq x
//             hidden floats), rank 0 arriving --skew_ms later: the seconds each spends
//             inside it. What a late rank pays for a collective its peer already waits in
//             (gloo_communicator.cc, "Sends are posted before receives").
//
// Timings are medians over --reps steps after one warm-up step. Ratios within one run
// are what to compare on a shared machine.
//
// --backend=cuda runs the one-rank benchmarks (prune, overhead at one rank) on GPU 0.
// Several ranks on CUDA need one process per GPU, which this benchmark (ranks as threads)
// does not launch: those lines say "skipped" instead.
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "ballast/ballast.h"
#include "common/status_macros.h"

ABSL_FLAG(std::string, which, "prune,offload,overhead,skew", "Comma-separated benchmarks to run");
ABSL_FLAG(int, hidden, 768, "Hidden size (ViT-Base: 768)");
ABSL_FLAG(int, intermediate, 3072, "MLP size (ViT-Base: 3072)");
ABSL_FLAG(int, heads, 12, "Attention heads (ViT-Base: 12)");
ABSL_FLAG(int, unit_size, 64, "MLP neurons per unit");
ABSL_FLAG(int, batch, 8, "Sequences per step");
ABSL_FLAG(int, seq, 197, "Tokens per sequence (ViT-Base at 224px: 197)");
ABSL_FLAG(int, reps, 5, "Timed steps per configuration (median reported)");
ABSL_FLAG(std::string, backend, "cpu", "cpu, or cuda (GPU 0; one-rank benchmarks only)");
ABSL_FLAG(std::string, shape, "vit",
          "vit: the flags above, a ViT block (GELU, bidirectional MHA); llama: a decoder "
          "block (hidden 1024, 16 heads in 4 KV groups, causal, RoPE, SwiGLU 2816, 4 x 256 "
          "tokens), overriding them");
ABSL_FLAG(std::string, skew_ms, "0,1,5",
          "skew: how much later rank 0 arrives at the all-reduce, in ms (comma-separated)");
ABSL_FLAG(int, mean_interval, 0,
          "Steps between samples of the running means (0: the block's default); the "
          "overhead bench's knob for the share of the means in the plan machinery");

namespace ballast {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// The q-quantile (0 <= q <= 1) of v by nearest rank; 0 for an empty v.
double Quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(q * (v.size() - 1) + 0.5)];
}

struct Shape {
  int hidden, intermediate, heads, unit_size, batch, seq;
  // Decoder options (--shape=llama); the ViT shape leaves them off.
  int query_groups = 0;
  bool llm = false;  // causal, RoPE, SwiGLU
  size_t activations() const { return static_cast<size_t>(batch) * seq * hidden; }
  AttentionConfig Attention(BlockId id) const {
    return {.id = id,
            .hidden = hidden,
            .num_heads = heads,
            .head_dim = hidden / heads,
            .num_query_groups = query_groups,
            .causal = llm,
            .rotary = llm};
  }
  MlpConfig Mlp(BlockId id) const {
    MlpConfig config{.id = id,
                     .activation = llm ? MlpActivation::kSwiGlu : MlpActivation::kGelu,
                     .hidden = hidden,
                     .intermediate = intermediate,
                     .unit_size = unit_size};
    if (const int interval = absl::GetFlag(FLAGS_mean_interval); interval > 0) {
      config.units.mean_interval = interval;
    }
    return config;
  }
};

absl::StatusOr<Shape> FlagsShape() {
  const std::string shape = absl::GetFlag(FLAGS_shape);
  if (shape == "llama") {
    return Shape{.hidden = 1024,
                 .intermediate = 2816,
                 .heads = 16,
                 .unit_size = 64,
                 .batch = 4,
                 .seq = 256,
                 .query_groups = 4,
                 .llm = true};
  }
  if (shape != "vit") {
    return absl::InvalidArgumentError("--shape must be vit or llama, got '" + shape + "'");
  }
  return Shape{absl::GetFlag(FLAGS_hidden), absl::GetFlag(FLAGS_intermediate),
               absl::GetFlag(FLAGS_heads),  absl::GetFlag(FLAGS_unit_size),
               absl::GetFlag(FLAGS_batch),  absl::GetFlag(FLAGS_seq)};
}

std::string BackendName() { return absl::GetFlag(FLAGS_backend); }

// Prints the line of a benchmark that --backend cannot run, and says whether it could.
bool Runnable(const char* bench, int ranks) {
  if (BackendName() != "cuda" || ranks == 1) return true;
  std::printf(
      "{\"bench\":\"%s\",\"backend\":\"cuda\",\"ranks\":%d,\"skipped\":\"needs %d "
      "GPUs, one process each; this benchmark runs ranks as threads\"}\n",
      bench, ranks, ranks);
  std::fflush(stdout);
  return false;
}

// Runs `body(rank, backend)` on `size` ranks as threads of this process, on --backend.
// `pin`: each rank's thread is bound to core rank % cores before its backend connects, so
// the threads its communicator starts share that core, as in a pinned rank process.
absl::Status RunRanks(int size, const std::string& prefix,
                      const std::function<absl::Status(int, Backend&)>& body, bool pin = false) {
  RendezvousStore store = RendezvousStore::InProcess();
  std::vector<absl::Status> results(size);
  std::vector<std::thread> threads;
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      if (pin) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(r % cores, &set);
        if (sched_setaffinity(0, sizeof(set), &set) != 0) {  // 0: the calling thread
          results[r] =
              absl::InternalError(absl::StrFormat("rank %d: cannot pin to core %d", r, r % cores));
          return;
        }
      }
      absl::StatusOr<std::unique_ptr<Backend>> backend;
      if (BackendName() == "cuda") {
        CudaBackendOptions options;
        options.rank = r;
        options.size = size;
        options.device = r;
        options.store = store;
        options.prefix = prefix;
        backend = CreateCudaBackend(options);
      } else {
        CpuBackendOptions options;
        options.rank = r;
        options.size = size;
        options.store = store;
        options.prefix = prefix;
        backend = CreateCpuBackend(options);
      }
      results[r] = backend.ok() ? body(r, **backend) : backend.status();
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& s : results) BALLAST_RETURN_IF_ERROR(s);
  return absl::OkStatus();
}

struct Activations {
  Buffer x, y, dy, dx;
};

absl::StatusOr<Activations> MakeActivations(Compute& c, size_t n) {
  Activations a;
  BALLAST_ASSIGN_OR_RETURN(a.x, c.Allocate(n));
  BALLAST_ASSIGN_OR_RETURN(a.y, c.Allocate(n));
  BALLAST_ASSIGN_OR_RETURN(a.dy, c.Allocate(n));
  BALLAST_ASSIGN_OR_RETURN(a.dx, c.Allocate(n));
  c.Fill(a.x.data(), 0.02f, n);
  c.Fill(a.dy.data(), 0.01f, n);
  return a;
}

// A group with one ViT-sized MLP block on `backend`.
struct MlpOnGroup {
  std::unique_ptr<TpGroup> group;
  std::unique_ptr<ParallelMlp> mlp;
  Activations activations;
};

absl::StatusOr<MlpOnGroup> MakeMlp(Backend& backend, const Shape& s) {
  MlpOnGroup out;
  BALLAST_ASSIGN_OR_RETURN(out.group, TpGroup::Create({.group = GroupId("bench")}, &backend));
  BALLAST_ASSIGN_OR_RETURN(out.mlp, ParallelMlp::Create(out.group.get(), s.Mlp(BlockId(1))));
  BALLAST_ASSIGN_OR_RETURN(out.activations, MakeActivations(backend.compute(), s.activations()));
  return out;
}

// One forward+backward step of `blocks`; returns the wall seconds of the step, and the
// host seconds of BeginStep in `begin_seconds` if given (on CUDA the stream is idle there,
// so they add to the step one for one).
absl::StatusOr<double> TimedStep(TpGroup& group, const std::vector<ParallelBlock*>& blocks,
                                 Activations& a, const Shape& s,
                                 double* begin_seconds = nullptr,
                                 double* end_seconds = nullptr) {
  const auto start = Clock::now();
  BALLAST_RETURN_IF_ERROR(group.BeginStep());
  if (begin_seconds != nullptr) *begin_seconds = Seconds(start);
  for (ParallelBlock* b : blocks) {
    BALLAST_RETURN_IF_ERROR(b->Forward(a.x.data(), s.batch, s.seq, a.y.data()));
  }
  for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) {
    BALLAST_RETURN_IF_ERROR((*it)->Backward(a.dy.data(), a.dx.data()));
  }
  const auto end = Clock::now();
  BALLAST_RETURN_IF_ERROR(group.EndStep());
  if (end_seconds != nullptr) *end_seconds = Seconds(end);
  return Seconds(start);
}

absl::Status BenchPrune(const Shape& s, int reps) {
  return RunRanks(1, "bench-prune", [&](int, Backend& backend) -> absl::Status {
    BALLAST_ASSIGN_OR_RETURN(auto group, TpGroup::Create({.group = GroupId("bench")}, &backend));
    BALLAST_ASSIGN_OR_RETURN(auto attn,
                             ParallelAttention::Create(group.get(), s.Attention(BlockId(0))));
    BALLAST_ASSIGN_OR_RETURN(auto mlp, ParallelMlp::Create(group.get(), s.Mlp(BlockId(1))));
    BALLAST_ASSIGN_OR_RETURN(Activations a, MakeActivations(backend.compute(), s.activations()));
    double base = 0;
    int64_t version = 0;
    for (double kept : {1.0, 0.75, 0.5, 0.25}) {
      WorkloadPlan plan{.group = GroupId("bench"), .version = PlanVersion(++version)};
      for (ParallelBlock* b : std::vector<ParallelBlock*>{attn.get(), mlp.get()}) {
        BlockPlan& bp = plan.blocks.emplace_back();
        bp.block = b->id();
        bp.pruned_units = {static_cast<int32_t>(b->num_units() * (1.0 - kept) + 0.5)};
      }
      BALLAST_RETURN_IF_ERROR(group->OfferPlan(plan));
      std::vector<double> times, attn_t, mlp_t;
      for (int i = 0; i <= reps; ++i) {
        BALLAST_ASSIGN_OR_RETURN(double t, TimedStep(*group, {attn.get(), mlp.get()}, a, s));
        if (i == 0) continue;  // warm-up: buffers resized for the new plan
        times.push_back(t);
        attn_t.push_back(group->last_step_timings().blocks[0].compute_seconds);
        mlp_t.push_back(group->last_step_timings().blocks[1].compute_seconds);
      }
      const double median = Median(times);
      if (kept == 1.0) base = median;
      std::printf(
          "{\"bench\":\"prune\",\"backend\":\"%s\",\"shape\":\"%s\",\"hidden\":%d,\"intermediate\":"
          "%d,"
          "\"heads\":%d,\"kv_groups\":%d,\"tokens\":%d,"
          "\"kept\":%.2f,\"step_seconds\":%.6f,\"step_seconds_min\":%.6f,"
          "\"step_seconds_max\":%.6f,\"attention_compute_seconds\":%.6f,"
          "\"mlp_compute_seconds\":%.6f,\"ratio\":%.4f,\"target\":%.2f,\"meets_target\":%s}\n",
          BackendName().c_str(), s.llm ? "llama" : "vit", s.hidden, s.intermediate, s.heads,
          attn->num_query_groups(), s.batch * s.seq, kept, median, Quantile(times, 0),
          Quantile(times, 1), Median(attn_t), Median(mlp_t), median / base, kept + 0.05,
          median / base <= kept + 0.05 ? "true" : "false");
      std::fflush(stdout);
    }
    return absl::OkStatus();
  });
}

absl::Status BenchOffload(const Shape& s, int reps) {
  if (!Runnable("offload", 2)) return absl::OkStatus();
  const int units = s.intermediate / s.unit_size;
  for (int u : {0, 1, 2, 4, 8}) {
    if (u > units / 2) break;
    std::vector<std::vector<double>> step(2), compute(2), comm(2);
    absl::Status status =
        RunRanks(2, absl::StrFormat("bench-offload-%d", u), [&](int r, Backend& backend) {
          auto run = [&]() -> absl::Status {
            BALLAST_ASSIGN_OR_RETURN(MlpOnGroup m, MakeMlp(backend, s));
            auto& [group, mlp, a] = m;
            if (u > 0) {
              WorkloadPlan plan{.group = GroupId("bench"), .version = PlanVersion(1)};
              BlockPlan& bp = plan.blocks.emplace_back();
              bp.block = BlockId(1);
              bp.offloads = {{RankId(1), RankId(0), u}};
              BALLAST_RETURN_IF_ERROR(group->OfferPlan(plan));
            }
            for (int i = 0; i <= reps; ++i) {
              BALLAST_ASSIGN_OR_RETURN(double t, TimedStep(*group, {mlp.get()}, a, s));
              if (i == 0) continue;
              step[r].push_back(t);
              compute[r].push_back(group->last_step_timings().compute_seconds());
              comm[r].push_back(group->last_step_timings().comm_seconds());
            }
            return absl::OkStatus();
          };
          return run();
        });
    BALLAST_RETURN_IF_ERROR(status);
    // Per offloaded unit: w1t + b1 + w2 go to the helper, the same sizes come back.
    const double bytes = 2.0 * u * s.unit_size * (2.0 * s.hidden + 1) * sizeof(float);
    std::printf(
        "{\"bench\":\"offload\",\"backend\":\"cpu\",\"ranks\":2,\"units_per_rank\":%d,\"offloaded_units\":%d,"
        "\"step_seconds\":%.5f,\"helper_compute_seconds\":%.5f,\"owner_compute_seconds\":%.5f,"
        "\"helper_comm_seconds\":%.5f,\"owner_comm_seconds\":%.5f,\"bytes_per_step\":%.0f}\n",
        units / 2, u, Median(step[0]), Median(compute[0]), Median(compute[1]), Median(comm[0]),
        Median(comm[1]), bytes);
    std::fflush(stdout);
  }
  return absl::OkStatus();
}

// The baseline: a Megatron-style TP MLP written directly on Compute + Communicator, with
// the same GEMMs and collectives as ParallelMlp but no plan, ranges, timers or copies.
class PlainTpMlp {
 public:
  static absl::StatusOr<PlainTpMlp> Create(Backend& backend, const Shape& s) {
    PlainTpMlp m(backend, s);
    Compute& c = backend.compute();
    const size_t local = static_cast<size_t>(s.intermediate) / backend.comm().size();
    const size_t tokens = static_cast<size_t>(s.batch) * s.seq;
    m.n_ = static_cast<int>(local);
    const std::pair<Buffer*, size_t> buffers[] = {{&m.w1t_, local * s.hidden},
                                                  {&m.w2_, local * s.hidden},
                                                  {&m.gw1t_, local * s.hidden},
                                                  {&m.gw2_, local * s.hidden},
                                                  {&m.b1_, local},
                                                  {&m.gb1_, local},
                                                  {&m.b2_, s.hidden},
                                                  {&m.gb2_, s.hidden},
                                                  {&m.pre_, tokens * local},
                                                  {&m.act_, tokens * local}};
    for (auto [buffer, size] : buffers) {
      BALLAST_ASSIGN_OR_RETURN(*buffer, c.Allocate(size));
    }
    c.Fill(m.w1t_.data(), 0.01f, m.w1t_.size());
    c.Fill(m.w2_.data(), 0.01f, m.w2_.size());
    return m;
  }

  absl::Status Forward(const float* x, float* y) {
    Compute& c = backend_->compute();
    const int t = s_.batch * s_.seq, h = s_.hidden;
    c.Gemm(false, true, t, n_, h, 1.0f, x, h, w1t_.data(), h, 0.0f, pre_.data(), n_);
    c.AddRowVector(pre_.data(), t, n_, n_, b1_.data());
    c.GeluForward(pre_.data(), act_.data(), t, n_, n_);
    c.Gemm(false, false, t, h, n_, 1.0f, act_.data(), n_, w2_.data(), h, 0.0f, y, h);
    BALLAST_RETURN_IF_ERROR(backend_->comm().AllReduceSum(y, static_cast<size_t>(t) * h));
    c.AddRowVector(y, t, h, h, b2_.data());
    return absl::OkStatus();
  }

  absl::Status Backward(const float* x, const float* dy, float* dx) {
    Compute& c = backend_->compute();
    const int t = s_.batch * s_.seq, h = s_.hidden;
    c.Gemm(true, false, n_, h, t, 1.0f, act_.data(), n_, dy, h, 0.0f, gw2_.data(), h);
    c.Gemm(false, true, t, n_, h, 1.0f, dy, h, w2_.data(), h, 0.0f, act_.data(), n_);
    c.GeluBackward(pre_.data(), act_.data(), act_.data(), t, n_, n_);
    c.Gemm(true, false, n_, h, t, 1.0f, act_.data(), n_, x, h, 0.0f, gw1t_.data(), h);
    c.ColumnSum(act_.data(), t, n_, n_, 1.0f, 0.0f, gb1_.data());
    c.Gemm(false, false, t, h, n_, 1.0f, act_.data(), n_, w1t_.data(), h, 0.0f, dx, h);
    c.ColumnSum(dy, t, h, h, 1.0f, 0.0f, gb2_.data());
    return backend_->comm().AllReduceSum(dx, static_cast<size_t>(t) * h);
  }

 private:
  PlainTpMlp(Backend& backend, const Shape& s) : backend_(&backend), s_(s) {}
  Backend* backend_;
  Shape s_;
  int n_ = 0;
  Buffer w1t_, w2_, gw1t_, gw2_, b1_, gb1_, b2_, gb2_, pre_, act_;
};

absl::Status BenchOverhead(const Shape& s, int reps) {
  for (int p : {1, 2}) {
    if (!Runnable("overhead", p)) continue;
    std::vector<double> plain, planned, agreement, begin, plain_sync, end;
    std::mutex mu;
    BALLAST_RETURN_IF_ERROR(RunRanks(
        p, absl::StrFormat("bench-overhead-%d", p), [&](int r, Backend& backend) -> absl::Status {
          BALLAST_ASSIGN_OR_RETURN(PlainTpMlp base, PlainTpMlp::Create(backend, s));
          BALLAST_ASSIGN_OR_RETURN(MlpOnGroup m, MakeMlp(backend, s));
          auto& [group, mlp, a] = m;
          // Interleave the two so machine noise hits both alike.
          for (int i = 0; i <= reps; ++i) {
            auto start = Clock::now();
            BALLAST_RETURN_IF_ERROR(base.Forward(a.x.data(), a.y.data()));
            BALLAST_RETURN_IF_ERROR(base.Backward(a.x.data(), a.dy.data(), a.dx.data()));
            // The planned step ends synchronized (EndStep); so must the plain one on CUDA.
            const auto sync = Clock::now();
            BALLAST_RETURN_IF_ERROR(backend.compute().Synchronize());
            const double t_sync = Seconds(sync);
            const double t_plain = Seconds(start);
            double t_begin = 0, t_end = 0;
            BALLAST_ASSIGN_OR_RETURN(double t_planned,
                                     TimedStep(*group, {mlp.get()}, a, s, &t_begin, &t_end));
            if (i == 0 || r != 0) continue;
            std::lock_guard<std::mutex> lock(mu);
            plain.push_back(t_plain);
            planned.push_back(t_planned);
            agreement.push_back(group->last_step_timings().agreement_seconds);
            begin.push_back(t_begin);
            plain_sync.push_back(t_sync);
            end.push_back(t_end);
          }
          return absl::OkStatus();
        }));
    const double overhead = Median(planned) / Median(plain) - 1.0;
    // The overhead of each interleaved pair, so the figure comes with its own noise: met
    // only when the upper quartile is within the target, missed only when the lower
    // quartile is beyond it, else not resolved.
    std::vector<double> pairs;
    for (size_t i = 0; i < plain.size(); ++i) pairs.push_back(planned[i] / plain[i] - 1.0);
    constexpr double kTarget = 0.01;
    const double q1 = Quantile(pairs, 0.25), q3 = Quantile(pairs, 0.75);
    const char* verdict = q3 <= kTarget ? "met" : q1 > kTarget ? "missed" : "not resolved";
    std::printf(
        "{\"bench\":\"overhead\",\"backend\":\"%s\",\"ranks\":%d,\"pairs\":%zu,"
        "\"plain_step_seconds\":%.6f,\"planned_step_seconds\":%.6f,\"overhead\":%.4f,"
        "\"pair_overhead_min\":%.4f,\"pair_overhead_q1\":%.4f,\"pair_overhead_median\":%.4f,"
        "\"pair_overhead_q3\":%.4f,\"pair_overhead_max\":%.4f,\"plan_agreement_seconds\":%.6f,"
        "\"begin_step_host_seconds\":%.6f,\"end_step_host_seconds\":%.6f,"
        "\"plain_sync_host_seconds\":%.6f,\"mean_interval\":%d,\"target\":%.2f,"
        "\"verdict\":\"%s\"}\n",
        BackendName().c_str(), p, pairs.size(), Median(plain), Median(planned), overhead,
        Quantile(pairs, 0), q1, Median(pairs), q3, Quantile(pairs, 1), Median(agreement),
        Median(begin), Median(end), Median(plain_sync), s.Mlp(BlockId(1)).units.mean_interval,
        kTarget, verdict);
    std::fflush(stdout);
  }
  return absl::OkStatus();
}

// Keeps this thread busy, as a rank computing, for `seconds`.
void Spin(double seconds) {
  const auto until = Clock::now() + std::chrono::duration<double>(seconds);
  volatile double sink = 1.0;
  while (Clock::now() < until) {
    for (int i = 0; i < 1000; ++i) sink = sink * 0.999999 + 1e-9;
  }
}

absl::Status BenchSkew(const Shape& s, int reps) {
  if (!Runnable("skew", 2)) return absl::OkStatus();
  std::vector<double> skews_ms;
  for (absl::string_view part : absl::StrSplit(absl::GetFlag(FLAGS_skew_ms), ',')) {
    double ms = 0;
    if (!absl::SimpleAtod(part, &ms) || !(ms >= 0) || ms > 1000) {
      return absl::InvalidArgumentError(
          absl::StrFormat("--skew_ms: '%s' is not a delay in [0, 1000] ms", std::string(part)));
    }
    skews_ms.push_back(ms);
  }
  const size_t n = s.activations();
  constexpr double kBusySeconds = 0.004;  // both ranks' work before each collective
  for (const double skew_ms : skews_ms) {
    std::vector<std::vector<double>> inside(2);
    BALLAST_RETURN_IF_ERROR(RunRanks(
        2, absl::StrFormat("bench-skew-%g", skew_ms),
        [&](int r, Backend& backend) -> absl::Status {
          BALLAST_ASSIGN_OR_RETURN(Buffer y, backend.compute().Allocate(n));
          backend.compute().Fill(y.data(), 1.0f, n);
          // Many short reps: a skewed collective's cost is set by the scheduler's tick.
          for (int i = 0; i <= 10 * reps; ++i) {
            Spin(kBusySeconds + (r == 0 ? skew_ms / 1e3 : 0.0));
            const auto start = Clock::now();
            BALLAST_RETURN_IF_ERROR(backend.comm().AllReduceSum(y.data(), n));
            if (i > 0) inside[r].push_back(Seconds(start));
            backend.compute().Fill(y.data(), 1.0f, n);
          }
          return absl::OkStatus();
        },
        /*pin=*/true));
    std::printf(
        "{\"bench\":\"skew\",\"backend\":\"%s\",\"ranks\":2,\"pinned\":true,\"floats\":%zu,"
        "\"skew_ms\":%g,\"reps\":%zu,\"late_inside_seconds_median\":%.6f,"
        "\"late_inside_seconds_p90\":%.6f,\"early_inside_seconds_median\":%.6f}\n",
        BackendName().c_str(), n, skew_ms, inside[0].size(), Median(inside[0]),
        Quantile(inside[0], 0.9), Median(inside[1]));
    std::fflush(stdout);
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace ballast

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const absl::StatusOr<ballast::Shape> parsed = ballast::FlagsShape();
  if (!parsed.ok()) {
    std::fprintf(stderr, "%s\n", std::string(parsed.status().message()).c_str());
    return 2;
  }
  const ballast::Shape shape = *parsed;
  const int reps = absl::GetFlag(FLAGS_reps);
  const std::string backend = absl::GetFlag(FLAGS_backend);
  if (backend != "cpu" && backend != "cuda") {
    std::fprintf(stderr, "--backend must be cpu or cuda, got '%s'\n", backend.c_str());
    return 2;
  }
  if (backend == "cuda" && !ballast::CudaAvailable()) {
    std::fprintf(stderr,
                 "--backend=cuda: no usable CUDA device, or built without "
                 "-DBALLAST_WITH_CUDA=ON\n");
    return 2;
  }
  if (shape.hidden <= 0 || shape.heads <= 0 || shape.hidden % shape.heads != 0 || reps <= 0) {
    std::fprintf(stderr, "--hidden must be a positive multiple of --heads; --reps > 0\n");
    return 2;
  }
  for (absl::string_view which : absl::StrSplit(absl::GetFlag(FLAGS_which), ',')) {
    absl::Status status;
    if (which == "prune") {
      status = ballast::BenchPrune(shape, reps);
    } else if (which == "offload") {
      status = ballast::BenchOffload(shape, reps);
    } else if (which == "overhead") {
      // Its plain baseline is a GELU MLP: compare like with like.
      status = shape.llm ? absl::InvalidArgumentError("overhead runs on --shape=vit only")
                         : ballast::BenchOverhead(shape, reps);
    } else if (which == "skew") {
      status = ballast::BenchSkew(shape, reps);
    } else {
      std::fprintf(stderr, "unknown benchmark '%.*s' (prune, offload, overhead, skew)\n",
                   static_cast<int>(which.size()), which.data());
      return 2;
    }
    if (!status.ok()) {
      std::fprintf(stderr, "%.*s failed: %s\n", static_cast<int>(which.size()), which.data(),
                   status.ToString().c_str());
      return 1;
    }
  }
  return 0;
}
