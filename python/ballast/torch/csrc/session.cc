#include "session.h"

#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "c10d_gloo_store.h"
#include "torch_communicator.h"

namespace ballast::torch_adapter {

namespace {

// Keys stay in the job's store for its lifetime, so every mesh gets its own prefix: the
// group's name and how many sessions this process opened on it (the same on every rank,
// since every rank opens the same sessions in the same order).
std::string UniquePrefix(const std::string& group) {
  static absl::Mutex mu(absl::kConstInit);
  static auto* opened = new std::map<std::string, int>();
  absl::MutexLock lock(&mu);
  return absl::StrCat("ballast/", group, "/", (*opened)[group]++);
}

// The process group's c10d store, where Ballast's own collectives meet.
absl::StatusOr<RendezvousStore> GroupStore(const SessionOptions& options) {
  if (!options.store) {
    return absl::InvalidArgumentError("Ballast's own collectives need the process group's store");
  }
  std::shared_ptr<gloo::rendezvous::Store> store = std::make_shared<C10dGlooStore>(options.store);
  return RendezvousStore::FromGlooStore(std::static_pointer_cast<void>(store));
}

// Ballast's own Gloo mesh over the process group's ranks, meeting through its c10d store.
absl::StatusOr<std::unique_ptr<Backend>> BallastMesh(const c10d::ProcessGroup& process_group,
                                                     const SessionOptions& options) {
  absl::StatusOr<RendezvousStore> store = GroupStore(options);
  if (!store.ok()) return store.status();
  CpuBackendOptions backend;
  backend.rank = process_group.getRank();
  backend.size = process_group.getSize();
  backend.store = *std::move(store);
  backend.prefix = UniquePrefix(options.group);
  backend.timeout = options.timeout;
  backend.blas_threads = options.blas_threads;
  try {
    return CreateCpuBackend(backend);
  } catch (const std::exception& e) {  // the c10d store throws on its own failures
    return absl::UnavailableError(
        absl::StrCat("connecting Ballast's collectives through the job's store: ", e.what()));
  }
}

// The CUDA backend on the job's device and torch's stream, its collectives Ballast's own
// over the process group's ranks, meeting through the group's c10d store.
absl::StatusOr<std::unique_ptr<Backend>> CudaOnGroup(const c10d::ProcessGroup& process_group,
                                                     const SessionOptions& options) {
  absl::StatusOr<RendezvousStore> store = GroupStore(options);
  if (!store.ok()) return store.status();
  CudaBackendOptions backend;
  backend.rank = process_group.getRank();
  backend.size = process_group.getSize();
  backend.device = options.cuda_device;
  backend.stream = reinterpret_cast<void*>(options.cuda_stream);
  backend.gemm_precision = options.gemm_precision;
  backend.collectives = options.nccl ? CudaCollectives::kNccl : CudaCollectives::kHostStaged;
  backend.store = *std::move(store);
  backend.prefix = UniquePrefix(options.group);
  backend.timeout = options.timeout;
  try {
    return CreateCudaBackend(backend);
  } catch (const std::exception& e) {  // the c10d store throws on its own failures
    return absl::UnavailableError(
        absl::StrCat("connecting Ballast's CUDA collectives through the job's store: ", e.what()));
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<Session>> Session::Create(
    c10::intrusive_ptr<c10d::ProcessGroup> process_group, const SessionOptions& options) {
  if (!process_group) return absl::InvalidArgumentError("process group is None");
  if (options.group.empty()) return absl::InvalidArgumentError("group name is empty");
  std::unique_ptr<Session> session(new Session());
  session->options_ = options;
  session->options_.store.reset();  // only needed to meet
  absl::StatusOr<std::unique_ptr<Backend>> backend =
      options.cuda_device >= 0 ? CudaOnGroup(*process_group, options)
      : options.collectives == Collectives::kBallast
          ? BallastMesh(*process_group, options)
          : CreateCpuBackendOn(std::make_unique<TorchCommunicator>(std::move(process_group)),
                               options.blas_threads);
  if (!backend.ok()) return backend.status();
  session->backend_ = *std::move(backend);
  absl::StatusOr<std::unique_ptr<TpGroup>> group =
      TpGroup::Create({.group = GroupId(options.group), .plan_history = options.plan_history},
                      session->backend_.get());
  if (!group.ok()) return group.status();
  session->group_ = *std::move(group);
  return session;
}

Session::~Session() {
  agent_.reset();  // stops its thread before the group it offers plans to goes
}

absl::Status Session::ConnectAgent(const AgentClientOptions& options) {
  if (agent_ != nullptr || pending_agent_.has_value()) {
    return absl::FailedPreconditionError("already connected to an agent");
  }
  for (const auto& [field, value] : {std::pair{"socket", &options.socket_path},
                                     {"job", &options.job},
                                     {"device", &options.device},
                                     {"node", &options.node}}) {
    if (value->empty()) {
      return absl::InvalidArgumentError(absl::StrCat("agent ", field, " must not be empty"));
    }
  }
  pending_agent_ = options;
  return absl::OkStatus();
}

absl::Status Session::BeginStep() {
  if (in_step_) return absl::FailedPreconditionError("a step is already open; end it first");
  if (pending_agent_.has_value()) {
    absl::StatusOr<std::unique_ptr<AgentClient>> agent =
        AgentClient::Start(*pending_agent_, group_.get());
    if (!agent.ok()) return agent.status();
    agent_ = *std::move(agent);
    pending_agent_.reset();
  }
  absl::Status status = group_->BeginStep();
  if (status.ok()) in_step_ = true;
  return status;
}

absl::Status Session::EndStep() {
  if (!in_step_) return absl::FailedPreconditionError("no step is open");
  in_step_ = false;
  absl::Status status = group_->EndStep();
  if (status.ok() && agent_ != nullptr) agent_->Report(group_->last_step_timings());
  return status;
}

Block::Block(std::shared_ptr<Session> session, std::unique_ptr<ParallelBlock> block, BlockKind kind)
    : session_(std::move(session)), block_(std::move(block)), kind_(kind) {}

namespace {
absl::Status CheckCanCreate(const Session& session) {
  if (session.in_step()) {
    return absl::FailedPreconditionError("create Ballast layers between steps, not inside one");
  }
  if (!session.accepts_blocks()) {
    return absl::FailedPreconditionError(
        "the agent already announced this group's layers at the first step: with an agent, "
        "create every Ballast layer before the first forward");
  }
  return absl::OkStatus();
}
}  // namespace

absl::StatusOr<std::unique_ptr<Block>> Block::CreateMlp(std::shared_ptr<Session> session,
                                                        const MlpConfig& config) {
  if (absl::Status s = CheckCanCreate(*session); !s.ok()) return s;
  absl::StatusOr<std::unique_ptr<ParallelMlp>> mlp = ParallelMlp::Create(&session->group(), config);
  if (!mlp.ok()) return mlp.status();
  return std::unique_ptr<Block>(new Block(std::move(session), *std::move(mlp), BlockKind::kMlp));
}

absl::StatusOr<std::unique_ptr<Block>> Block::CreateAttention(std::shared_ptr<Session> session,
                                                              const AttentionConfig& config) {
  if (absl::Status s = CheckCanCreate(*session); !s.ok()) return s;
  absl::StatusOr<std::unique_ptr<ParallelAttention>> attn =
      ParallelAttention::Create(&session->group(), config);
  if (!attn.ok()) return attn.status();
  return std::unique_ptr<Block>(
      new Block(std::move(session), *std::move(attn), BlockKind::kAttention));
}

absl::StatusOr<std::unique_ptr<Block>> Block::CreateMoe(std::shared_ptr<Session> session,
                                                        const MoeConfig& config) {
  if (absl::Status s = CheckCanCreate(*session); !s.ok()) return s;
  absl::StatusOr<std::unique_ptr<ParallelMoe>> moe = ParallelMoe::Create(&session->group(), config);
  if (!moe.ok()) return moe.status();
  return std::unique_ptr<Block>(new Block(std::move(session), *std::move(moe), BlockKind::kMoe));
}

absl::Status Block::CheckTensor(const at::Tensor& t, const char* name, int64_t numel) const {
  const std::string where = absl::StrCat("block ", block_->id().value(), ": ", name);
  if (!t.defined()) return absl::InvalidArgumentError(absl::StrCat(where, " is undefined"));
  if (t.scalar_type() != at::kFloat) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, " has dtype ", c10::toString(t.scalar_type()),
        "; Ballast's layers take float32 (bf16/fp16 GEMMs: the gemm_precision option)"));
  }
  const int device = session_->cuda_device();
  const bool right_device =
      device < 0 ? t.device().is_cpu() : t.device().is_cuda() && t.device().index() == device;
  if (!right_device) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, " is on ", t.device().str(), "; this session's layers take ",
        device < 0 ? std::string("CPU tensors") : absl::StrCat("tensors on cuda:", device)));
  }
  if (!t.is_contiguous()) {
    return absl::InvalidArgumentError(absl::StrCat(where, " is not contiguous"));
  }
  if (t.numel() != numel) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, " has ", t.numel(), " elements, expected ", numel));
  }
  return absl::OkStatus();
}

absl::Status Block::Forward(const at::Tensor& x, int32_t batch, int32_t seq, const at::Tensor& y,
                            bool add_output_bias) {
  if (batch <= 0 || seq <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("block ", block_->id().value(), ": batch ",
                                                   batch, " and seq ", seq, " must be > 0"));
  }
  const int64_t numel = static_cast<int64_t>(batch) * seq * block_->hidden();
  if (absl::Status s = CheckTensor(x, "input", numel); !s.ok()) return s;
  if (absl::Status s = CheckTensor(y, "output", numel); !s.ok()) return s;
  absl::Status status =
      block_->Forward(x.data_ptr<float>(), batch, seq, y.data_ptr<float>(), add_output_bias);
  if (status.ok()) forward_numel_ = numel;
  return status;
}

absl::Status Block::Backward(const at::Tensor& dy, const at::Tensor& dx) {
  if (forward_numel_ < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("block ", block_->id().value(), ": backward without a forward"));
  }
  if (absl::Status s = CheckTensor(dy, "output gradient", forward_numel_); !s.ok()) return s;
  if (absl::Status s = CheckTensor(dx, "input gradient", forward_numel_); !s.ok()) return s;
  return block_->Backward(dy.data_ptr<float>(), dx.data_ptr<float>());
}

absl::Status Block::LoadDense(const at::Tensor& dense) {
  const int64_t n = static_cast<int64_t>(block_->dense_size());
  if (dense.scalar_type() != at::kFloat || !dense.device().is_cpu() || !dense.is_contiguous() ||
      dense.numel() != n) {
    return absl::InvalidArgumentError(absl::StrCat("block ", block_->id().value(),
                                                   ": dense parameters must be a contiguous "
                                                   "float32 CPU tensor of ",
                                                   n, " elements"));
  }
  std::vector<float> values(dense.data_ptr<float>(), dense.data_ptr<float>() + n);
  if (kind_ == BlockKind::kMoe) {
    auto& moe = static_cast<ParallelMoe&>(*block_);
    return moe.LoadDense(MoeParams::Split(values, moe.config()));
  }
  if (kind_ == BlockKind::kMlp) {
    auto& mlp = static_cast<ParallelMlp&>(*block_);
    return mlp.LoadDense(
        MlpParams::Split(values, mlp.hidden(), mlp.intermediate(), mlp.activation()));
  }
  auto& attn = static_cast<ParallelAttention&>(*block_);
  return attn.LoadDense(AttentionParams::Split(values, attn.hidden(), attn.num_heads(),
                                               attn.head_dim(), attn.num_query_groups()));
}

}  // namespace ballast::torch_adapter
