// The C++ half of ballast.torch: one Session per TP group (a backend on the job's own
// process group, the TpGroup, and optionally the AgentClient) and one Block per Ballast
// layer, working on torch tensors' memory. Every number is computed by worker_lib; this
// file only checks tensors and moves them in and out. module.cc exposes it to Python.
//
// Errors are statuses naming what is wrong (module.cc turns them into Python exceptions).
// Collective calls (BeginStep, Forward, Backward, gathers, checkpoints) must be made by
// every rank of the group in the same order, as with any torch.distributed collective.
#ifndef BALLAST_PYTHON_SESSION_H_
#define BALLAST_PYTHON_SESSION_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "ballast/agent_client.h"
#include "ballast/backend.h"
#include "ballast/block.h"
#include "ballast/parallel_attention.h"
#include "ballast/parallel_mlp.h"
#include "ballast/parallel_moe.h"
#include "ballast/plan.h"
#include "ballast/tp_group.h"

namespace ballast::torch_adapter {

// Where the blocks' collectives run. Both use the job's TP group (its ranks, and for
// kBallast its c10d store to find each other).
enum class Collectives {
  // On the process group itself, through TorchCommunicator: any backend torch has.
  kTorch,
  // On Ballast's own Gloo mesh over the same ranks (worker_lib/cpu/gloo_communicator.h:
  // one round trip for two ranks, built for CPU-throttled ranks). In the PyTorch ViT it
  // was 9% slower without contention and 7% faster under a 2x straggler with Ballast
  // balancing (docs/benchmarks.md), so it is an option, not the default.
  kBallast,
};

struct SessionOptions {
  std::string group;          // the TP group's cluster-wide name, e.g. "gpt/tp0"
  int32_t plan_history = 16;  // TpGroupOptions::plan_history
  int blas_threads = 0;       // 0: leave OpenBLAS (shared with torch) alone
  Collectives collectives = Collectives::kTorch;
  // kBallast and CUDA: the group's c10d store (rendezvous) and how long a collective waits.
  c10::intrusive_ptr<c10d::Store> store;
  absl::Duration timeout = absl::Seconds(60);
  // CUDA: the device index of the job's tensors (-1: the CPU backend). The layers then
  // take CUDA tensors on that device, and Ballast's collectives are its own, meeting
  // through `store`: NCCL on an NCCL group (`nccl` true), host-staged Gloo on a Gloo group
  // (several ranks may then share the GPU).
  int cuda_device = -1;
  bool nccl = false;
  // The stream Ballast queues everything on: torch's current stream on that device when
  // the session starts (a cudaStream_t as an integer; 0 is the legacy default stream), so
  // Ballast's kernels are ordered with torch's and the caching allocator's reuse of the
  // tensors Ballast reads and writes needs no events. ballast.torch checks at every
  // forward and backward that it is still torch's current stream.
  uintptr_t cuda_stream = 0;
  GemmPrecision gemm_precision = GemmPrecision::kFp32;
};

class Session {
 public:
  static absl::StatusOr<std::unique_ptr<Session>> Create(
      c10::intrusive_ptr<c10d::ProcessGroup> process_group, const SessionOptions& options);
  ~Session();

  // Connects to the node's agent at the first BeginStep: the agent client announces the
  // group's blocks when it starts, so it waits until the model's layers exist. Plans then
  // arrive by themselves and EndStep reports each step's timings.
  absl::Status ConnectAgent(const AgentClientOptions& options);
  absl::Status BeginStep();
  absl::Status EndStep();
  TpGroup& group() { return *group_; }
  Backend& backend() { return *backend_; }
  bool in_step() const { return in_step_; }
  AgentClient* agent() { return agent_.get(); }
  // Blocks may be created until the agent client has announced them.
  bool accepts_blocks() const { return agent_ == nullptr; }
  // The CUDA device of the layers' tensors, or -1 (CPU).
  int cuda_device() const { return options_.cuda_device; }

 private:
  Session() = default;
  SessionOptions options_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<TpGroup> group_;
  std::unique_ptr<AgentClient> agent_;
  std::optional<AgentClientOptions> pending_agent_;
  bool in_step_ = false;
};

enum class BlockKind { kMlp, kAttention, kMoe };

// One Ballast layer's block. Keeps its session alive (blocks unregister from the group
// when they go).
class Block {
 public:
  static absl::StatusOr<std::unique_ptr<Block>> CreateMlp(std::shared_ptr<Session> session,
                                                          const MlpConfig& config);
  static absl::StatusOr<std::unique_ptr<Block>> CreateAttention(std::shared_ptr<Session> session,
                                                                const AttentionConfig& config);
  static absl::StatusOr<std::unique_ptr<Block>> CreateMoe(std::shared_ptr<Session> session,
                                                          const MoeConfig& config);

  // x and y: contiguous float32 tensors of batch * seq * hidden elements on the session's
  // device (CPU, or its CUDA device); x must stay alive and unchanged until Backward (the
  // caller's autograd context holds it).
  absl::Status Forward(const at::Tensor& x, int32_t batch, int32_t seq, const at::Tensor& y,
                       bool add_output_bias);
  absl::Status Backward(const at::Tensor& dy, const at::Tensor& dx);
  // Every rank passes the same dense parameters (MlpParams / AttentionParams / MoeParams
  // order);
  // resets optimizer state.
  absl::Status LoadDense(const at::Tensor& dense);

  // Everything else (AdamW, gathers, checkpoints, gradient norms) is the block's own API.
  ParallelBlock& block() { return *block_; }
  BlockKind kind() const { return kind_; }
  // The MoE block, or null for the other kinds.
  ParallelMoe* moe() {
    return kind_ == BlockKind::kMoe ? static_cast<ParallelMoe*>(block_.get()) : nullptr;
  }

 private:
  Block(std::shared_ptr<Session> session, std::unique_ptr<ParallelBlock> block, BlockKind kind);
  // Checks a tensor the block reads or writes: float32, on the session's device,
  // contiguous, `numel` elements.
  absl::Status CheckTensor(const at::Tensor& t, const char* name, int64_t numel) const;

  std::shared_ptr<Session> session_;
  // Declared after session_, so it goes (and unregisters from the group) first.
  std::unique_ptr<ParallelBlock> block_;
  BlockKind kind_;
  int64_t forward_numel_ = -1;  // tokens * hidden of the last Forward
};

}  // namespace ballast::torch_adapter

#endif  // BALLAST_PYTHON_SESSION_H_
