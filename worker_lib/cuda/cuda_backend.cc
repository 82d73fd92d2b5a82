// The CUDA backend: cuBLAS GEMMs and the kernels of cuda_kernels.cu for Compute, NCCL for
// Communicator, all ordered on one CUDA stream per rank. Semantics follow ballast/compute.h
// and ballast/communicator.h; the CPU backend is the reference implementation.
//
// Error handling. Every CUDA, cuBLAS and NCCL call goes through one macro per library
// (BALLAST_CUDA_*, BALLAST_CUBLAS_*, BALLAST_NCCL_*) that turns a failure into an
// absl::Status naming the call, file and line. Compute methods that return void record
// their first failure; Synchronize() reports it.
//
// Timeouts. NCCL communicators are created non-blocking, and every collective is followed
// by a bounded wait that polls the stream and the communicator's async error. When the
// communicator's timeout passes (a peer is missing or stalled) the communicator is aborted
// and the call returns DEADLINE_EXCEEDED; every later call on it fails fast with the same
// code. So a lost peer costs one timeout, never a hang.
//
// Memory. Communicator methods take device pointers (Compute buffers) or host pointers
// (e.g. the plan-agreement int64s, which cannot live in a float Buffer); host memory is
// staged through a device scratch buffer.
//
// Threads. A backend is used by one thread at a time (its rank's thread). Every entry point
// makes the backend's device current, because kernel launches, cuBLAS and NCCL act on the
// current device and the caller's thread may use another. Ranks with NCCL peers run one
// process per GPU, which CreateCudaBackend enforces (internal/cuda_device_claims.h): the
// stream-ordered pools are not peer-accessible.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstdint>
#include <cstring>
#include <exception>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "ballast/backend.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "gloo/rendezvous/store.h"
#include "worker_lib/cuda/cuda_kernels.h"
#include "worker_lib/internal/compute_checks.h"
#include "worker_lib/internal/cuda_device_claims.h"

namespace ballast {
namespace {

// ---------------------------------------------------------------------------------------
// Error translation: one function and one macro family per library.

const char* Basename(const char* path) {
  const char* slash = std::strrchr(path, '/');
  return slash == nullptr ? path : slash + 1;
}

absl::StatusCode CudaErrorCode(cudaError_t error) {
  switch (error) {
    case cudaErrorMemoryAllocation:
      return absl::StatusCode::kResourceExhausted;
    case cudaErrorInvalidValue:
    case cudaErrorInvalidDevice:
    case cudaErrorInvalidConfiguration:
      return absl::StatusCode::kInvalidArgument;
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorDevicesUnavailable:
      return absl::StatusCode::kUnavailable;
    default:
      return absl::StatusCode::kInternal;
  }
}

absl::Status CudaCallStatus(cudaError_t error, const char* call, const char* file, int line) {
  if (error == cudaSuccess) return absl::OkStatus();
  // Consume the thread's "last error" so the next kernel launch check (which reads it)
  // does not report this failure a second time under another name. Sticky errors (a
  // faulted context) stay and keep failing every call, as they should.
  cudaGetLastError();
  return absl::Status(CudaErrorCode(error),
                      absl::StrCat(call, " failed at ", Basename(file), ":", line, ": ",
                                   cudaGetErrorName(error), " (", cudaGetErrorString(error), ")"));
}

absl::StatusCode CublasErrorCode(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_ALLOC_FAILED:
      return absl::StatusCode::kResourceExhausted;
    case CUBLAS_STATUS_INVALID_VALUE:
      return absl::StatusCode::kInvalidArgument;
    case CUBLAS_STATUS_NOT_INITIALIZED:
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return absl::StatusCode::kUnavailable;
    default:
      return absl::StatusCode::kInternal;
  }
}

absl::Status CublasCallStatus(cublasStatus_t status, const char* call, const char* file, int line) {
  if (status == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  return absl::Status(
      CublasErrorCode(status),
      absl::StrCat(call, " failed at ", Basename(file), ":", line, ": ",
                   cublasGetStatusName(status), " (", cublasGetStatusString(status), ")"));
}

absl::StatusCode NcclErrorCode(ncclResult_t result) {
  switch (result) {
    case ncclInvalidArgument:
      return absl::StatusCode::kInvalidArgument;
    case ncclInvalidUsage:
      return absl::StatusCode::kFailedPrecondition;
    case ncclSystemError:
    case ncclRemoteError:
      // Sockets, peers or the network: the group lost a member or a link.
      return absl::StatusCode::kUnavailable;
    default:
      return absl::StatusCode::kInternal;
  }
}

absl::Status NcclResultStatus(ncclResult_t result, const char* call, const char* file, int line) {
  // Every communicator here is non-blocking, so ncclInProgress is the normal answer of an
  // enqueue or an init: the operation continues in the background and its outcome is read
  // later with ncclCommGetAsyncError.
  if (result == ncclSuccess || result == ncclInProgress) return absl::OkStatus();
  return absl::Status(
      NcclErrorCode(result),
      absl::StrCat(call, " failed at ", Basename(file), ":", line, ": ", ncclGetErrorString(result),
                   " (last NCCL error: ", ncclGetLastError(nullptr), ")"));
}

}  // namespace
}  // namespace ballast

#define BALLAST_CUDA_STATUS(call) ::ballast::CudaCallStatus((call), #call, __FILE__, __LINE__)
#define BALLAST_CUDA_RETURN_IF_ERROR(call) BALLAST_RETURN_IF_ERROR(BALLAST_CUDA_STATUS(call))
#define BALLAST_CUBLAS_STATUS(call) ::ballast::CublasCallStatus((call), #call, __FILE__, __LINE__)
#define BALLAST_CUBLAS_RETURN_IF_ERROR(call) BALLAST_RETURN_IF_ERROR(BALLAST_CUBLAS_STATUS(call))
#define BALLAST_NCCL_STATUS(call) ::ballast::NcclResultStatus((call), #call, __FILE__, __LINE__)
#define BALLAST_NCCL_RETURN_IF_ERROR(call) BALLAST_RETURN_IF_ERROR(BALLAST_NCCL_STATUS(call))

namespace ballast {
namespace {

using cuda_internal::AdamWKernelParams;

// ---------------------------------------------------------------------------------------
// StreamContext: the device and stream of one backend.

// Makes `device` current for its scope, then gives the thread its previous device back.
// Destructors and Buffer deleters run on whatever thread drops the last reference, whose
// current device is that thread's business (a framework's, another backend's).
class ScopedDevice {
 public:
  explicit ScopedDevice(int device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) {
      cudaGetLastError();
      previous_ = -1;
    }
    if (previous_ != device) cudaSetDevice(device);
  }
  ~ScopedDevice() {
    if (previous_ >= 0) cudaSetDevice(previous_);
  }
  ScopedDevice(const ScopedDevice&) = delete;
  ScopedDevice& operator=(const ScopedDevice&) = delete;

 private:
  int previous_ = -1;
};

// Shared by a backend's compute, communicator, timers and every Buffer it handed out.
// Buffers and timers hold a reference, so one that outlives its backend still frees into a
// live stream rather than a destroyed one.
class StreamContext {
 public:
  static absl::StatusOr<std::shared_ptr<StreamContext>> Create(int device) {
    BALLAST_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
    int pools_supported = 0;
    BALLAST_CUDA_RETURN_IF_ERROR(
        cudaDeviceGetAttribute(&pools_supported, cudaDevAttrMemoryPoolsSupported, device));
    if (pools_supported != 0) {
      cudaMemPool_t pool = nullptr;
      BALLAST_CUDA_RETURN_IF_ERROR(cudaDeviceGetDefaultMemPool(&pool, device));
      // Keep freed blocks in the pool across synchronizations. With the default threshold
      // (0) every Synchronize hands them back to the driver, and the next training step
      // maps the same memory again.
      uint64_t threshold = std::numeric_limits<uint64_t>::max();
      BALLAST_CUDA_RETURN_IF_ERROR(
          cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
    }
    cudaStream_t stream = nullptr;
    // Non-blocking: no implicit synchronization with the legacy default stream, which
    // other libraries in the process may use. All of our work is ordered on this stream.
    BALLAST_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    return std::shared_ptr<StreamContext>(new StreamContext(device, stream, pools_supported != 0));
  }

  ~StreamContext() {
    // Errors are ignored: nothing can be reported from here, and at process exit the
    // runtime may already be unloading.
    ScopedDevice scoped(device_);
    cudaStreamSynchronize(stream_);
    cudaStreamDestroy(stream_);
    cudaGetLastError();
  }

  StreamContext(const StreamContext&) = delete;
  StreamContext& operator=(const StreamContext&) = delete;

  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }

  absl::Status Activate() const { return BALLAST_CUDA_STATUS(cudaSetDevice(device_)); }

  // The first failure of a void compute call (a launch that failed, or a call the
  // Compute contract refuses, naming the call) since it was last taken. Compute::
  // Synchronize reports it; so does the next collective, which must not run on what the
  // failed call left behind (its peers would get garbage, and this rank's error would read
  // "NCCL aborted" instead of the call that failed).
  void DeferComputeFailure(absl::Status status) { compute_failure_.Defer(std::move(status)); }
  absl::Status TakeComputeFailure() { return compute_failure_.Take(); }

  // Stream-ordered where the device supports memory pools, so allocating and freeing in a
  // training loop neither synchronizes nor calls into the driver.
  absl::StatusOr<void*> AllocateBytes(size_t bytes) const {
    void* ptr = nullptr;
    if (stream_ordered_) {
      BALLAST_CUDA_RETURN_IF_ERROR(cudaMallocAsync(&ptr, bytes, stream_));
    } else {
      BALLAST_CUDA_RETURN_IF_ERROR(cudaMalloc(&ptr, bytes));
    }
    return ptr;
  }

  // Runs from destructors (Buffer deleters), so it can only log. With stream-ordered
  // allocation the memory is reused only after the work queued before the free.
  void FreeBytes(void* ptr) const {
    if (ptr == nullptr) return;
    ScopedDevice scoped(device_);
    const cudaError_t error = stream_ordered_ ? cudaFreeAsync(ptr, stream_) : cudaFree(ptr);
    if (error != cudaSuccess) {
      cudaGetLastError();
      if (error != cudaErrorCudartUnloading) {
        BALLAST_LOG(WARNING) << "cuda backend: freeing device memory on device " << device_
                             << " failed: " << cudaGetErrorName(error);
      }
    }
  }

 private:
  StreamContext(int device, cudaStream_t stream, bool stream_ordered)
      : device_(device), stream_(stream), stream_ordered_(stream_ordered) {}

  internal::ComputeFailure compute_failure_;

  const int device_;
  const cudaStream_t stream_;
  const bool stream_ordered_;
};

// A grow-only device buffer (UnitL1 partial sums, communicator staging).
class DeviceScratch {
 public:
  explicit DeviceScratch(std::shared_ptr<StreamContext> ctx) : ctx_(std::move(ctx)) {}
  ~DeviceScratch() { ctx_->FreeBytes(data_); }
  DeviceScratch(const DeviceScratch&) = delete;
  DeviceScratch& operator=(const DeviceScratch&) = delete;

  absl::StatusOr<char*> Reserve(size_t bytes) {
    if (bytes <= capacity_) return data_;
    // Geometric growth: callers ask for slowly varying sizes.
    const size_t want = std::max(bytes, 2 * capacity_);
    // Stream-ordered free: work still queued on the old buffer completes first.
    ctx_->FreeBytes(data_);
    data_ = nullptr;
    capacity_ = 0;
    BALLAST_ASSIGN_OR_RETURN(void* raw, ctx_->AllocateBytes(want));
    data_ = static_cast<char*>(raw);
    capacity_ = want;
    return data_;
  }

 private:
  std::shared_ptr<StreamContext> ctx_;
  char* data_ = nullptr;
  size_t capacity_ = 0;
};

// ---------------------------------------------------------------------------------------
// Timer.

// Records an event pair per interval on the stream and reads the elapsed times only when
// asked, so timing never stalls the stream. Events are recycled through a free list.
class CudaIntervalTimer : public IntervalTimer {
 public:
  explicit CudaIntervalTimer(std::shared_ptr<StreamContext> ctx) : ctx_(std::move(ctx)) {}

  ~CudaIntervalTimer() override {
    ScopedDevice scoped(ctx_->device());
    if (open_start_ != nullptr) cudaEventDestroy(open_start_);
    for (const auto& [start, stop] : recorded_) {
      cudaEventDestroy(start);
      cudaEventDestroy(stop);
    }
    for (cudaEvent_t event : spare_) cudaEventDestroy(event);
    cudaGetLastError();
  }

  void Start() override {
    if (!Defer(ctx_->Activate())) return;
    // A second Start without Stop restarts the open interval.
    if (open_start_ == nullptr) {
      absl::StatusOr<cudaEvent_t> event = TakeEvent();
      if (!Defer(event.status())) return;
      open_start_ = *event;
    }
    if (!Defer(BALLAST_CUDA_STATUS(cudaEventRecord(open_start_, ctx_->stream())))) {
      spare_.push_back(open_start_);
      open_start_ = nullptr;
    }
  }

  void Stop() override {
    if (open_start_ == nullptr) return;  // Stop without Start: no interval to close.
    if (!Defer(ctx_->Activate())) return;
    absl::StatusOr<cudaEvent_t> stop = TakeEvent();
    if (!Defer(stop.status())) return;
    if (!Defer(BALLAST_CUDA_STATUS(cudaEventRecord(*stop, ctx_->stream())))) {
      spare_.push_back(*stop);
      return;
    }
    recorded_.emplace_back(open_start_, *stop);
    open_start_ = nullptr;
  }

  absl::StatusOr<double> Seconds() override {
    if (!deferred_.ok()) {
      absl::Status failure = std::move(deferred_);
      deferred_ = absl::OkStatus();
      return failure;
    }
    BALLAST_RETURN_IF_ERROR(ctx_->Activate());
    size_t resolved = 0;
    absl::Status status;
    for (; resolved < recorded_.size(); ++resolved) {
      const auto [start, stop] = recorded_[resolved];
      status = BALLAST_CUDA_STATUS(cudaEventSynchronize(stop));
      float ms = 0;
      if (status.ok()) status = BALLAST_CUDA_STATUS(cudaEventElapsedTime(&ms, start, stop));
      spare_.push_back(start);
      spare_.push_back(stop);
      if (!status.ok()) {
        ++resolved;  // The failed pair is dropped, not retried forever.
        break;
      }
      resolved_seconds_ += static_cast<double>(ms) * 1e-3;
    }
    recorded_.erase(recorded_.begin(), recorded_.begin() + resolved);
    if (!status.ok()) return status;
    return resolved_seconds_;
  }

  void Reset() override {
    // An open interval stays open and counts once stopped.
    for (const auto& [start, stop] : recorded_) {
      spare_.push_back(start);
      spare_.push_back(stop);
    }
    recorded_.clear();
    resolved_seconds_ = 0;
    deferred_ = absl::OkStatus();
  }

 private:
  // Keeps the first failure for Seconds(); returns whether `status` is OK.
  bool Defer(absl::Status status) {
    if (status.ok()) return true;
    if (deferred_.ok()) deferred_ = std::move(status);
    return false;
  }

  absl::StatusOr<cudaEvent_t> TakeEvent() {
    if (!spare_.empty()) {
      cudaEvent_t event = spare_.back();
      spare_.pop_back();
      return event;
    }
    cudaEvent_t event = nullptr;
    BALLAST_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&event, cudaEventDefault));
    return event;
  }

  std::shared_ptr<StreamContext> ctx_;
  cudaEvent_t open_start_ = nullptr;
  std::vector<std::pair<cudaEvent_t, cudaEvent_t>> recorded_;  // stopped, not yet read
  std::vector<cudaEvent_t> spare_;
  double resolved_seconds_ = 0;
  absl::Status deferred_;
};

// ---------------------------------------------------------------------------------------
// Compute.

cublasOperation_t ToCublasOp(bool transpose) { return transpose ? CUBLAS_OP_T : CUBLAS_OP_N; }

using internal::CheckAdamWStep;
using internal::CheckBatch;
using internal::CheckCopy;
using internal::CheckGemm;
using internal::CheckLayerNormBackward;
using internal::CheckRotary;
using internal::CheckRowMajor;
using internal::CheckSwiGlu;
using internal::CheckUnitL1;

class CudaCompute : public Compute {
 public:
  static absl::StatusOr<std::unique_ptr<CudaCompute>> Create(std::shared_ptr<StreamContext> ctx,
                                                             GemmPrecision precision) {
    BALLAST_RETURN_IF_ERROR(ctx->Activate());
    cublasHandle_t handle = nullptr;
    BALLAST_CUBLAS_RETURN_IF_ERROR(cublasCreate(&handle));
    // Owns the handle from here on, also on the error paths below.
    std::unique_ptr<CudaCompute> compute(new CudaCompute(ctx, handle));
    switch (precision) {
      case GemmPrecision::kFp32:
        compute->compute_type_ = CUBLAS_COMPUTE_32F;
        break;
      case GemmPrecision::kBf16:
        compute->compute_type_ = CUBLAS_COMPUTE_32F_FAST_16BF;
        break;
      case GemmPrecision::kFp16:
        compute->compute_type_ = CUBLAS_COMPUTE_32F_FAST_16F;
        break;
    }
    BALLAST_CUBLAS_RETURN_IF_ERROR(cublasSetStream(handle, ctx->stream()));
    // Plain FP32 (no TF32 tensor-op math): the CPU backend is the reference and the two
    // must agree to ~1e-5, which TF32's 10-bit mantissa would not.
    BALLAST_CUBLAS_RETURN_IF_ERROR(cublasSetMathMode(handle, CUBLAS_DEFAULT_MATH));
    return compute;
  }

  ~CudaCompute() override {
    ScopedDevice scoped(ctx_->device());
    cudaStreamSynchronize(ctx_->stream());
    cublasDestroy(cublas_);
    cudaGetLastError();
  }

  absl::StatusOr<Buffer> Allocate(size_t n) override {
    if (n == 0) return Buffer();
    if (n > std::numeric_limits<size_t>::max() / sizeof(float)) {
      return absl::InvalidArgumentError(absl::StrCat("Allocate: ", n, " floats overflow"));
    }
    BALLAST_RETURN_IF_ERROR(ctx_->Activate());
    BALLAST_ASSIGN_OR_RETURN(void* raw, ctx_->AllocateBytes(n * sizeof(float)));
    float* data = static_cast<float*>(raw);
    Buffer buffer(data, n, [ctx = ctx_](float* ptr) { ctx->FreeBytes(ptr); });
    BALLAST_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(data, 0, n * sizeof(float), stream()));
    return buffer;
  }

  // Both host copies complete before returning, as on the CPU backend: callers read the
  // host buffer (or reuse it) right away. Pageable copies would mostly behave so anyway;
  // pinned ones would not.
  void CopyFromHost(const float* host, float* dst, size_t n) override {
    if (n == 0 || !Activate()) return;
    Defer(BALLAST_CUDA_STATUS(
        cudaMemcpyAsync(dst, host, n * sizeof(float), cudaMemcpyHostToDevice, stream())));
    Defer(BALLAST_CUDA_STATUS(cudaStreamSynchronize(stream())));
  }

  void CopyToHost(const float* src, float* host, size_t n) override {
    if (n == 0 || !Activate()) return;
    Defer(BALLAST_CUDA_STATUS(
        cudaMemcpyAsync(host, src, n * sizeof(float), cudaMemcpyDeviceToHost, stream())));
    Defer(BALLAST_CUDA_STATUS(cudaStreamSynchronize(stream())));
  }

  void Copy(const float* src, float* dst, size_t n) override {
    if (!Defer(CheckCopy(src, dst, n)) || n == 0 || src == dst || !Activate()) return;
    Defer(BALLAST_CUDA_STATUS(
        cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToDevice, stream())));
  }

  void Fill(float* x, float value, size_t n) override {
    if (!Activate()) return;
    Defer(BALLAST_CUDA_STATUS(cuda_internal::LaunchFill(x, value, n, stream())));
  }

  void Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
            const float* b, int ldb, float beta, float* c, int ldc) override {
    if (!Activate()) return;
    if (!Defer(CheckGemm("Gemm", trans_a, trans_b, m, n, k, lda, ldb, ldc))) return;
    if (m == 0 || n == 0) return;
    // Row-major C (m x n, stride ldc) is column-major C^T (n x m, same stride), and
    // C^T = op(B)^T op(A)^T. A row-major operand read column-major is its own transpose,
    // so cuBLAS gets B first, then A, with the transpose flags unchanged and m, n swapped.
    if (compute_type_ == CUBLAS_COMPUTE_32F) {
      Defer(BALLAST_CUBLAS_STATUS(cublasSgemm(cublas_, ToCublasOp(trans_b), ToCublasOp(trans_a), n,
                                              m, k, &alpha, b, ldb, a, lda, &beta, c, ldc)));
      return;
    }
    // fp32 in and out, 16-bit inputs inside: tensor cores with fp32 accumulation.
    Defer(BALLAST_CUBLAS_STATUS(cublasGemmEx(cublas_, ToCublasOp(trans_b), ToCublasOp(trans_a), n,
                                             m, k, &alpha, b, CUDA_R_32F, ldb, a, CUDA_R_32F, lda,
                                             &beta, c, CUDA_R_32F, ldc, compute_type_,
                                             CUBLAS_GEMM_DEFAULT)));
  }

  void GemmStridedBatched(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                          const float* a, int lda, int64_t stride_a, const float* b, int ldb,
                          int64_t stride_b, float beta, float* c, int ldc, int64_t stride_c,
                          int batch) override {
    if (!Activate()) return;
    if (!Defer(CheckGemm("GemmStridedBatched", trans_a, trans_b, m, n, k, lda, ldb, ldc))) return;
    if (!Defer(CheckBatch("GemmStridedBatched", batch))) return;
    if (m == 0 || n == 0 || batch == 0) return;
    // Same operand swap as Gemm; the strides travel with their matrices.
    if (compute_type_ == CUBLAS_COMPUTE_32F) {
      Defer(BALLAST_CUBLAS_STATUS(cublasSgemmStridedBatched(
          cublas_, ToCublasOp(trans_b), ToCublasOp(trans_a), n, m, k, &alpha, b, ldb, stride_b, a,
          lda, stride_a, &beta, c, ldc, stride_c, batch)));
      return;
    }
    Defer(BALLAST_CUBLAS_STATUS(cublasGemmStridedBatchedEx(
        cublas_, ToCublasOp(trans_b), ToCublasOp(trans_a), n, m, k, &alpha, b, CUDA_R_32F, ldb,
        stride_b, a, CUDA_R_32F, lda, stride_a, &beta, c, CUDA_R_32F, ldc, stride_c, batch,
        compute_type_, CUBLAS_GEMM_DEFAULT)));
  }

  void Axpy(float alpha, const float* x, float* y, size_t n) override {
    if (!Activate()) return;
    Defer(BALLAST_CUDA_STATUS(cuda_internal::LaunchAxpy(alpha, x, y, n, stream())));
  }

  void Scale(float alpha, float* x, size_t n) override {
    if (!Activate()) return;
    Defer(BALLAST_CUDA_STATUS(cuda_internal::LaunchScale(alpha, x, n, stream())));
  }

  void AddRowVector(float* x, int rows, int cols, int ld, const float* v) override {
    if (!Activate() || !Defer(CheckRowMajor("AddRowVector", rows, cols, ld))) return;
    Defer(BALLAST_CUDA_STATUS(cuda_internal::LaunchAddRowVector(x, rows, cols, ld, v, stream())));
  }

  void ColumnSum(const float* x, int rows, int cols, int ld, float alpha, float beta,
                 float* out) override {
    if (!Activate() || !Defer(CheckRowMajor("ColumnSum", rows, cols, ld))) return;
    Defer(BALLAST_CUDA_STATUS(
        cuda_internal::LaunchColumnSum(x, rows, cols, ld, alpha, beta, out, stream())));
  }

  void GeluForward(const float* pre, float* out, int rows, int cols, int ld) override {
    if (!Activate() || !Defer(CheckRowMajor("GeluForward", rows, cols, ld))) return;
    Defer(
        BALLAST_CUDA_STATUS(cuda_internal::LaunchGeluForward(pre, out, rows, cols, ld, stream())));
  }

  void GeluBackward(const float* pre, const float* dout, float* dpre, int rows, int cols,
                    int ld) override {
    if (!Activate() || !Defer(CheckRowMajor("GeluBackward", rows, cols, ld))) return;
    Defer(BALLAST_CUDA_STATUS(
        cuda_internal::LaunchGeluBackward(pre, dout, dpre, rows, cols, ld, stream())));
  }

  void SoftmaxRows(float* x, int rows, int cols, float scale, bool causal) override {
    if (!Activate() || !Defer(CheckRowMajor("SoftmaxRows", rows, cols, cols))) return;
    Defer(BALLAST_CUDA_STATUS(
        cuda_internal::LaunchSoftmaxRows(x, rows, cols, scale, causal, stream())));
  }

  void Rotary(float* x, int rows, int seq, int ld, int groups, int group_stride, int heads,
              int head_dim, const float* cos, const float* sin, bool inverse) override {
    if (!Activate() ||
        !Defer(CheckRotary(rows, seq, ld, groups, group_stride, heads, head_dim))) {
      return;
    }
    Defer(BALLAST_CUDA_STATUS(cuda_internal::LaunchRotary(
        x, rows, seq, ld, groups, group_stride, heads, head_dim, cos, sin, inverse, stream())));
  }

  void SwiGluForward(const float* gate_up, float* out, int rows, int units,
                     int unit_size) override {
    if (!Activate() || !Defer(CheckSwiGlu("SwiGluForward", rows, units, unit_size))) return;
    Defer(BALLAST_CUDA_STATUS(
        cuda_internal::LaunchSwiGluForward(gate_up, out, rows, units, unit_size, stream())));
  }

  void SwiGluBackward(const float* gate_up, const float* dout, float* dgate_up, int rows,
                      int units, int unit_size) override {
    if (!Activate() || !Defer(CheckSwiGlu("SwiGluBackward", rows, units, unit_size))) return;
    Defer(BALLAST_CUDA_STATUS(cuda_internal::LaunchSwiGluBackward(gate_up, dout, dgate_up, rows,
                                                                  units, unit_size, stream())));
  }

  void SoftmaxBackwardRows(const float* p, float* dx, int rows, int cols, float scale) override {
    if (!Activate() || !Defer(CheckRowMajor("SoftmaxBackwardRows", rows, cols, cols))) return;
    Defer(BALLAST_CUDA_STATUS(
        cuda_internal::LaunchSoftmaxBackwardRows(p, dx, rows, cols, scale, stream())));
  }

  void LayerNormForward(const float* x, const float* gamma, const float* beta, int rows, int cols,
                        float eps, float* y, float* mean, float* rstd) override {
    if (!Activate() || !Defer(CheckRowMajor("LayerNormForward", rows, cols, cols))) return;
    Defer(BALLAST_CUDA_STATUS(cuda_internal::LaunchLayerNormForward(x, gamma, beta, rows, cols, eps,
                                                                    y, mean, rstd, stream())));
  }

  void LayerNormBackward(const float* x, const float* gamma, const float* mean, const float* rstd,
                         const float* dy, int rows, int cols, float* dx, float* dgamma,
                         float* dbeta) override {
    if (!Activate() || !Defer(CheckLayerNormBackward(x, gamma, mean, rstd, dy, rows, cols, dx,
                                                         dgamma, dbeta))) {
      return;
    }
    Defer(BALLAST_CUDA_STATUS(cuda_internal::LaunchLayerNormBackward(
        x, gamma, mean, rstd, dy, rows, cols, dx, dgamma, dbeta, stream())));
  }

  void AdamW(const AdamWOptions& options, int64_t step, float* w, const float* g, float* m,
             float* v, size_t n) override {
    if (!Activate() || !Defer(CheckAdamWStep(step))) return;
    AdamWKernelParams params;
    params.lr = options.lr;
    params.beta1 = options.beta1;
    params.beta2 = options.beta2;
    params.eps = options.eps;
    params.weight_decay = options.weight_decay;
    // In double: beta2^step for beta2 = 0.999 loses most of its float precision in
    // 1 - beta2^step for small steps.
    params.bias_correction1 = static_cast<float>(
        1.0 - std::pow(static_cast<double>(options.beta1), static_cast<double>(step)));
    params.bias_correction2 = static_cast<float>(
        1.0 - std::pow(static_cast<double>(options.beta2), static_cast<double>(step)));
    Defer(BALLAST_CUDA_STATUS(cuda_internal::LaunchAdamW(params, w, g, m, v, n, stream())));
  }

  absl::Status UnitL1(const float* a, const float* b, int units, size_t unit_elems,
                      double* out_host) override {
    BALLAST_RETURN_IF_ERROR(CheckUnitL1(a, units, unit_elems, out_host));
    if (units == 0) return absl::OkStatus();
    BALLAST_RETURN_IF_ERROR(ctx_->Activate());
    const size_t partial_doubles = cuda_internal::UnitL1ScratchDoubles(units, unit_elems);
    BALLAST_ASSIGN_OR_RETURN(
        char* raw,
        unit_l1_scratch_.Reserve((static_cast<size_t>(units) + partial_doubles) * sizeof(double)));
    double* out_device = reinterpret_cast<double*>(raw);
    double* partials = out_device + units;
    BALLAST_CUDA_RETURN_IF_ERROR(
        cuda_internal::LaunchUnitL1(a, b, units, unit_elems, partials, out_device, stream()));
    BALLAST_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(out_host, out_device, units * sizeof(double),
                                                 cudaMemcpyDeviceToHost, stream()));
    BALLAST_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream()));
    return absl::OkStatus();
  }

  absl::Status Synchronize() override {
    absl::Status status = ctx_->Activate();
    if (status.ok()) status = BALLAST_CUDA_STATUS(cudaStreamSynchronize(stream()));
    // The first failure since the last Synchronize wins: later ones are usually its
    // consequences. Reporting it clears it.
    if (absl::Status failed = ctx_->TakeComputeFailure(); !failed.ok()) status = std::move(failed);
    return status;
  }

  std::unique_ptr<IntervalTimer> NewTimer() override {
    return std::make_unique<CudaIntervalTimer>(ctx_);
  }

 private:
  CudaCompute(std::shared_ptr<StreamContext> ctx, cublasHandle_t cublas)
      : ctx_(ctx), cublas_(cublas), unit_l1_scratch_(ctx) {}

  // CUBLAS_COMPUTE_32F (plain Sgemm) unless CudaBackendOptions asked for 16-bit GEMMs.
  cublasComputeType_t compute_type_ = CUBLAS_COMPUTE_32F;

  cudaStream_t stream() const { return ctx_->stream(); }

  // Keeps the first failure of a void method for Synchronize() (and the next collective);
  // returns whether `status` is OK.
  bool Defer(absl::Status status) {
    if (status.ok()) return true;
    ctx_->DeferComputeFailure(std::move(status));
    return false;
  }

  bool Activate() { return Defer(ctx_->Activate()); }

  std::shared_ptr<StreamContext> ctx_;
  cublasHandle_t cublas_;
  DeviceScratch unit_l1_scratch_;
};

// ---------------------------------------------------------------------------------------
// Communicator.

// Publishes rank 0's ncclUniqueId under "<prefix>/nccl_id" and reads it on the other ranks.
absl::StatusOr<ncclUniqueId> ShareUniqueId(const CudaBackendOptions& options) {
  ncclUniqueId id;
  if (options.size == 1) {
    // Nobody to share with; leave the store untouched.
    BALLAST_NCCL_RETURN_IF_ERROR(ncclGetUniqueId(&id));
    return id;
  }
  auto* store = static_cast<gloo::rendezvous::Store*>(options.store.handle().get());
  if (store == nullptr) {
    return absl::InvalidArgumentError("CudaBackendOptions.store holds no rendezvous store");
  }
  const std::string key = absl::StrCat(options.prefix, "/nccl_id");
  if (options.rank == 0) {
    BALLAST_NCCL_RETURN_IF_ERROR(ncclGetUniqueId(&id));
    std::vector<char> bytes(sizeof(id));
    std::memcpy(bytes.data(), &id, sizeof(id));
    try {
      store->set(key, bytes);
    } catch (const std::exception& e) {
      return absl::InternalError(absl::StrCat("publishing ", key,
                                              " in the rendezvous store failed (is the prefix "
                                              "unique to this run?): ",
                                              e.what()));
    }
    return id;
  }
  std::vector<char> bytes;
  try {
    store->wait({key}, std::chrono::milliseconds(absl::ToInt64Milliseconds(options.timeout)));
    bytes = store->get(key);
  } catch (const std::exception& e) {
    return absl::DeadlineExceededError(
        absl::StrCat("rank ", options.rank, " did not get ", key, " from rank 0 within ",
                     absl::FormatDuration(options.timeout), ": ", e.what()));
  }
  if (bytes.size() != sizeof(id)) {
    return absl::DataLossError(
        absl::StrCat(key, " holds ", bytes.size(), " bytes, expected ", sizeof(id)));
  }
  std::memcpy(&id, bytes.data(), sizeof(id));
  return id;
}

// One caller buffer of a collective, and what NCCL uses in its place.
struct StagedBuffer {
  void* caller = nullptr;
  size_t bytes = 0;
  bool copy_in = false;   // caller -> device before the operation
  bool copy_out = false;  // device -> caller after it
  void* device = nullptr;
  bool staged = false;
  size_t offset = 0;  // in the staging scratch
};

class NcclCommunicator : public Communicator {
 public:
  static absl::StatusOr<std::unique_ptr<NcclCommunicator>> Create(
      const CudaBackendOptions& options, std::shared_ptr<StreamContext> ctx) {
    BALLAST_ASSIGN_OR_RETURN(ncclUniqueId id, ShareUniqueId(options));
    BALLAST_RETURN_IF_ERROR(ctx->Activate());
    // Non-blocking: init and every enqueue return at once and their progress is read with
    // ncclCommGetAsyncError, which is what lets Await give up (and abort) after the
    // timeout. A blocking init waits for all peers with no bound.
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclComm_t comm = nullptr;
    const absl::Status init =
        BALLAST_NCCL_STATUS(ncclCommInitRankConfig(&comm, options.size, id, options.rank, &config));
    if (!init.ok()) {
      if (comm != nullptr) ncclCommAbort(comm);
      return init;
    }
    std::unique_ptr<NcclCommunicator> communicator(new NcclCommunicator(options, ctx, comm));
    BALLAST_RETURN_IF_ERROR(communicator->Await("ncclCommInitRankConfig", false));
    return communicator;
  }

  ~NcclCommunicator() override {
    ScopedDevice scoped(ctx_->device());
    if (ready_ != nullptr) {
      cudaEventDestroy(ready_);
      cudaGetLastError();
    }
    if (comm_ == nullptr) return;
    // Finalize flushes outstanding work and may wait on peers, so it gets the same bound
    // as a collective; Await aborts the communicator when it runs out.
    const absl::Status finalized = BALLAST_NCCL_STATUS(ncclCommFinalize(comm_));
    if (finalized.ok() && Await("ncclCommFinalize", false).ok()) {
      ncclCommDestroy(comm_);
    } else if (comm_ != nullptr) {
      ncclCommAbort(comm_);
    }
    comm_ = nullptr;
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  absl::Status AllReduceSum(float* data, size_t n) override {
    if (n == 0) return CheckUsable();
    if (data == nullptr) return absl::InvalidArgumentError("AllReduceSum: null data");
    StagedBuffer buffer{data, n * sizeof(float), true, true};
    return Run("ncclAllReduce(sum)", {&buffer, 1}, [&] {
      return BALLAST_NCCL_STATUS(
          ncclAllReduce(buffer.device, buffer.device, n, ncclFloat, ncclSum, comm_, stream()));
    });
  }

  absl::Status AllReduceMin(int64_t* data, size_t n) override {
    if (n == 0) return CheckUsable();
    if (data == nullptr) return absl::InvalidArgumentError("AllReduceMin: null data");
    StagedBuffer buffer{data, n * sizeof(int64_t), true, true};
    return Run("ncclAllReduce(min)", {&buffer, 1}, [&] {
      return BALLAST_NCCL_STATUS(
          ncclAllReduce(buffer.device, buffer.device, n, ncclInt64, ncclMin, comm_, stream()));
    });
  }

  absl::Status Broadcast(float* data, size_t n, int root) override {
    BALLAST_RETURN_IF_ERROR(CheckRoot("Broadcast", root));
    if (n == 0) return CheckUsable();
    if (data == nullptr) return absl::InvalidArgumentError("Broadcast: null data");
    StagedBuffer buffer{data, n * sizeof(float), rank_ == root, true};
    return Run("ncclBroadcast", {&buffer, 1}, [&] {
      return BALLAST_NCCL_STATUS(
          ncclBroadcast(buffer.device, buffer.device, n, ncclFloat, root, comm_, stream()));
    });
  }

  absl::Status Reduce(float* data, size_t n, int root) override {
    BALLAST_RETURN_IF_ERROR(CheckRoot("Reduce", root));
    if (n == 0) return CheckUsable();
    if (data == nullptr) return absl::InvalidArgumentError("Reduce: null data");
    StagedBuffer buffer{data, n * sizeof(float), true, rank_ == root};
    return Run("ncclReduce", {&buffer, 1}, [&] {
      return BALLAST_NCCL_STATUS(
          ncclReduce(buffer.device, buffer.device, n, ncclFloat, ncclSum, root, comm_, stream()));
    });
  }

  absl::Status AllGather(const float* in, size_t n, float* out) override {
    if (n == 0) return CheckUsable();
    if (in == nullptr || out == nullptr) {
      return absl::InvalidArgumentError("AllGather: null input or output");
    }
    StagedBuffer buffers[2] = {{const_cast<float*>(in), n * sizeof(float), true, false},
                               {out, n * static_cast<size_t>(size_) * sizeof(float), false, true}};
    return Run("ncclAllGather", buffers, [&] {
      return BALLAST_NCCL_STATUS(
          ncclAllGather(buffers[0].device, buffers[1].device, n, ncclFloat, comm_, stream()));
    });
  }

  absl::Status Exchange(absl::Span<const PeerTransfer> sends,
                        absl::Span<const PeerTransfer> recvs) override {
    BALLAST_RETURN_IF_ERROR(CheckTransfers("send", sends));
    BALLAST_RETURN_IF_ERROR(CheckTransfers("receive", recvs));
    // Empty messages are skipped on both sides alike, so the pairwise order of the others
    // still matches.
    std::vector<StagedBuffer> buffers;
    std::vector<int> peers;
    size_t send_count = 0;
    for (const PeerTransfer& t : sends) {
      if (t.count == 0) continue;
      buffers.push_back({t.data, t.count * sizeof(float), true, false});
      peers.push_back(t.peer);
      ++send_count;
    }
    for (const PeerTransfer& t : recvs) {
      if (t.count == 0) continue;
      buffers.push_back({t.data, t.count * sizeof(float), false, true});
      peers.push_back(t.peer);
    }
    // Nothing to move: NCCL needs no call to stay in step (unlike Gloo's tags).
    if (buffers.empty()) return CheckUsable();
    return Run("ncclSend/ncclRecv group", absl::MakeSpan(buffers), [&]() -> absl::Status {
      BALLAST_NCCL_RETURN_IF_ERROR(ncclGroupStart());
      absl::Status status;
      for (size_t i = 0; i < buffers.size() && status.ok(); ++i) {
        const size_t count = buffers[i].bytes / sizeof(float);
        status = i < send_count ? BALLAST_NCCL_STATUS(ncclSend(buffers[i].device, count, ncclFloat,
                                                               peers[i], comm_, stream()))
                                : BALLAST_NCCL_STATUS(ncclRecv(buffers[i].device, count, ncclFloat,
                                                               peers[i], comm_, stream()));
      }
      // Close the group even after a failed call inside it, so NCCL's per-thread group
      // state does not leak into the next call.
      const absl::Status ended = BALLAST_NCCL_STATUS(ncclGroupEnd());
      return status.ok() ? ended : status;
    });
  }

 private:
  NcclCommunicator(const CudaBackendOptions& options, std::shared_ptr<StreamContext> ctx,
                   ncclComm_t comm)
      : rank_(options.rank),
        size_(options.size),
        // Capped so that now() + timeout cannot overflow for an infinite duration.
        timeout_(absl::ToChronoNanoseconds(std::min(options.timeout, absl::Hours(24 * 365)))),
        ctx_(ctx),
        comm_(comm),
        staging_(ctx) {}

  cudaStream_t stream() const { return ctx_->stream(); }

  absl::Status CheckUsable() const {
    if (comm_ != nullptr) return absl::OkStatus();
    return absl::Status(failure_.code(), absl::StrCat("NCCL communicator was aborted earlier: ",
                                                      failure_.message()));
  }

  absl::Status CheckRoot(const char* op, int root) const {
    if (root < 0 || root >= size_) {
      return absl::InvalidArgumentError(
          absl::StrCat(op, ": root ", root, " outside group of size ", size_));
    }
    return absl::OkStatus();
  }

  absl::Status CheckTransfers(const char* what, absl::Span<const PeerTransfer> transfers) const {
    for (const PeerTransfer& t : transfers) {
      if (t.peer < 0 || t.peer >= size_) {
        return absl::InvalidArgumentError(
            absl::StrCat("Exchange: ", what, " peer ", t.peer, " outside group of size ", size_));
      }
      if (t.count > 0 && t.data == nullptr) {
        return absl::InvalidArgumentError(
            absl::StrCat("Exchange: ", what, " with peer ", t.peer, " has null data"));
      }
    }
    return absl::OkStatus();
  }

  // Validation failures above leave the communicator intact. Anything that goes wrong from
  // here on aborts it: this rank has then skipped or broken a collective that its peers
  // are in, so the group is out of step for good.
  template <typename Enqueue>
  absl::Status Run(const char* what, absl::Span<StagedBuffer> buffers, Enqueue&& enqueue) {
    BALLAST_RETURN_IF_ERROR(CheckUsable());
    if (absl::Status failed = ctx_->TakeComputeFailure(); !failed.ok()) {
      return Abort(absl::Status(failed.code(), absl::StrCat(what, " not run: a compute call "
                                                            "before it failed: ",
                                                            failed.message())));
    }
    absl::Status status = ctx_->Activate();
    // Marks where the compute queued before this collective ends: the timeout runs from
    // there, so a long forward pass ahead of it is not mistaken for a missing peer.
    if (status.ok() && ready_ == nullptr) {
      status = BALLAST_CUDA_STATUS(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming));
    }
    if (status.ok()) status = BALLAST_CUDA_STATUS(cudaEventRecord(ready_, stream()));
    if (status.ok()) status = Classify(buffers);
    if (status.ok() && size_ == 1 && AllStaged(buffers)) return OneRankOnHost(what, buffers);
    if (status.ok()) status = StageIn(buffers);
    if (status.ok()) status = enqueue();
    if (!status.ok()) return Abort(std::move(status));
    BALLAST_RETURN_IF_ERROR(Await(what, true, ready_));
    status = StageOut(buffers);
    if (!status.ok()) return Abort(std::move(status));
    return absl::OkStatus();
  }

  // Sets where each buffer lives, asking CUDA once per buffer: device memory is handed to
  // NCCL as is (`device`), host memory goes through the staging scratch (`staged`).
  absl::Status Classify(absl::Span<StagedBuffer> buffers) const {
    for (StagedBuffer& b : buffers) {
      BALLAST_ASSIGN_OR_RETURN(const bool on_device, IsDeviceMemory(b.caller));
      b.staged = !on_device;
      b.device = on_device ? b.caller : nullptr;
    }
    return absl::OkStatus();
  }

  static bool AllStaged(absl::Span<const StagedBuffer> buffers) {
    return std::all_of(buffers.begin(), buffers.end(),
                       [](const StagedBuffer& b) { return b.staged; });
  }

  // One rank over host memory: every collective is the identity (AllGather's one slot a
  // copy of its input), so it needs no staging copies, kernel or stream round trip, only
  // the wait for the compute queued before it (communicator.h's "blocking"). The plan
  // agreement at the start of every step of a one-rank group is such a call: through NCCL
  // it was two copies, a kernel and a stream drain per step (about 1% of a 1.3 ms step on
  // an H100 in two of three runs: docs/benchmarks.md, CUDA backend).
  absl::Status OneRankOnHost(const char* what, absl::Span<StagedBuffer> buffers) {
    BALLAST_RETURN_IF_ERROR(Await(what, true, ready_));
    if (buffers.size() == 2 && buffers[0].copy_in && !buffers[0].copy_out &&
        buffers[1].copy_out && !buffers[1].copy_in) {
      std::memmove(buffers[1].caller, buffers[0].caller,
                   std::min(buffers[0].bytes, buffers[1].bytes));
    }
    return absl::OkStatus();
  }

  // Device memory of this device (or managed memory) is handed to NCCL as is.
  absl::StatusOr<bool> IsDeviceMemory(const void* ptr) const {
    cudaPointerAttributes attributes;
    BALLAST_CUDA_RETURN_IF_ERROR(cudaPointerGetAttributes(&attributes, ptr));
    if (attributes.type == cudaMemoryTypeManaged) return true;
    if (attributes.type != cudaMemoryTypeDevice) return false;
    if (attributes.device != ctx_->device()) {
      return absl::InvalidArgumentError(absl::StrCat("buffer lives on device ", attributes.device,
                                                     ", the communicator on device ",
                                                     ctx_->device()));
    }
    return true;
  }

  // Host buffers (classified `staged`) go through the staging scratch: copied in (if
  // needed) before the operation, out after it.
  absl::Status StageIn(absl::Span<StagedBuffer> buffers) {
    // 256-byte slots, the alignment cudaMalloc gives and NCCL's kernels like.
    constexpr size_t kAlign = 256;
    size_t total = 0;
    for (StagedBuffer& b : buffers) {
      if (!b.staged) continue;
      b.offset = total;
      total += (b.bytes + kAlign - 1) / kAlign * kAlign;
    }
    if (total == 0) return absl::OkStatus();
    BALLAST_ASSIGN_OR_RETURN(char* base, staging_.Reserve(total));
    for (StagedBuffer& b : buffers) {
      if (!b.staged) continue;
      b.device = base + b.offset;
      if (b.copy_in) {
        BALLAST_CUDA_RETURN_IF_ERROR(
            cudaMemcpyAsync(b.device, b.caller, b.bytes, cudaMemcpyHostToDevice, stream()));
      }
    }
    return absl::OkStatus();
  }

  // Only after Await: the stream is idle up to here, so this wait is short and cannot hang.
  absl::Status StageOut(absl::Span<StagedBuffer> buffers) {
    bool copied = false;
    for (const StagedBuffer& b : buffers) {
      if (!b.staged || !b.copy_out) continue;
      BALLAST_CUDA_RETURN_IF_ERROR(
          cudaMemcpyAsync(b.caller, b.device, b.bytes, cudaMemcpyDeviceToHost, stream()));
      copied = true;
    }
    if (copied) BALLAST_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream()));
    return absl::OkStatus();
  }

  // Waits until the communicator has finished enqueueing (non-blocking NCCL may do that
  // in the background) and, if `wait_for_stream`, until the stream has drained, polling
  // both so the wait can end at the deadline. The stream wait also covers compute queued
  // before the collective, which is what "blocking" means in communicator.h.
  //
  // `ready` (when set) marks the end of the compute queued before the collective: the
  // timeout starts when it completes, not at the call, since compute that is merely slow
  // (a straggler's) is not a missing peer. Compute that never completes (a hung kernel)
  // still ends the wait, after kComputeTimeouts timeouts.
  absl::Status Await(const char* what, bool wait_for_stream, cudaEvent_t ready = nullptr) {
    constexpr int kComputeTimeouts = 4;
    const auto called = std::chrono::steady_clock::now();
    auto deadline = called + (ready == nullptr ? 1 : kComputeTimeouts) * timeout_;
    bool timing = ready == nullptr;
    for (int polls = 0;; ++polls) {
      if (!timing) {
        const cudaError_t reached = cudaEventQuery(ready);
        if (reached == cudaSuccess) {
          timing = true;
          deadline = std::chrono::steady_clock::now() + timeout_;
        } else if (reached != cudaErrorNotReady) {
          absl::Status status = BALLAST_CUDA_STATUS(reached);
          return Abort(absl::Status(status.code(), absl::StrCat("compute before ", what,
                                                                " failed: ", status.message())));
        }
      }
      ncclResult_t state = ncclSuccess;
      absl::Status status = BALLAST_NCCL_STATUS(ncclCommGetAsyncError(comm_, &state));
      if (status.ok() && state != ncclSuccess && state != ncclInProgress) {
        status = absl::Status(NcclErrorCode(state),
                              absl::StrCat(what, " failed on rank ", rank_, " of ", size_, ": ",
                                           ncclGetErrorString(state),
                                           " (last NCCL error: ", ncclGetLastError(comm_), ")"));
      }
      if (status.ok() && state == ncclSuccess) {
        if (!wait_for_stream) return absl::OkStatus();
        const cudaError_t query = cudaStreamQuery(stream());
        if (query == cudaSuccess) return absl::OkStatus();
        if (query != cudaErrorNotReady) {
          status = BALLAST_CUDA_STATUS(query);
          status = absl::Status(status.code(),
                                absl::StrCat("waiting for ", what, ": ", status.message()));
        }
      }
      if (!status.ok()) return Abort(std::move(status));
      if (std::chrono::steady_clock::now() >= deadline) {
        if (!timing) {
          return Abort(absl::DeadlineExceededError(absl::StrCat(
              "the compute queued before ", what, " on rank ", rank_, " of ", size_,
              " did not complete within ", kComputeTimeouts, " x ",
              absl::FormatDuration(absl::FromChrono(timeout_)), "; communicator aborted")));
        }
        return Abort(absl::DeadlineExceededError(
            absl::StrCat(what, " on rank ", rank_, " of ", size_, " did not complete within ",
                         absl::FormatDuration(absl::FromChrono(timeout_)),
                         " (a peer is missing or stalled); communicator aborted")));
      }
      // Spin briefly (collectives of a TP step take tens of microseconds), then sleep so
      // a long wait does not burn a core.
      if (polls < 2000) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
    }
  }

  // Aborts the communicator (which also ends its kernels on the stream) and remembers why;
  // every later call fails with the same code.
  absl::Status Abort(absl::Status cause) {
    if (comm_ != nullptr) {
      BALLAST_LOG(ERROR) << "cuda backend: rank " << rank_ << " of " << size_
                         << ": aborting NCCL communicator: " << cause.message();
      ncclCommAbort(comm_);
      comm_ = nullptr;
      failure_ = cause;
    }
    return cause;
  }

  const int rank_;
  const int size_;
  const std::chrono::nanoseconds timeout_;
  std::shared_ptr<StreamContext> ctx_;
  ncclComm_t comm_;
  cudaEvent_t ready_ = nullptr;  // Run's mark at the end of the compute before a collective
  DeviceScratch staging_;
  absl::Status failure_;
};

// ---------------------------------------------------------------------------------------
// Backend.

class CudaBackend : public Backend {
 public:
  CudaBackend(internal::CudaDeviceClaim claim, std::shared_ptr<StreamContext> ctx,
              std::unique_ptr<CudaCompute> compute, std::unique_ptr<NcclCommunicator> comm)
      : claim_(std::move(claim)),
        ctx_(std::move(ctx)),
        compute_(std::move(compute)),
        comm_(std::move(comm)) {}

  Compute& compute() override { return *compute_; }
  Communicator& comm() override { return *comm_; }
  const char* name() const override { return "cuda"; }

 private:
  // Declaration order is destruction order reversed: the communicator goes first (it may
  // still wait on the stream), the stream next, the claim on the device last.
  internal::CudaDeviceClaim claim_;
  std::shared_ptr<StreamContext> ctx_;
  std::unique_ptr<CudaCompute> compute_;
  std::unique_ptr<NcclCommunicator> comm_;
};

absl::Status ValidateOptions(const CudaBackendOptions& options) {
  if (options.size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("CudaBackendOptions.size must be >= 1, got ", options.size));
  }
  if (options.rank < 0 || options.rank >= options.size) {
    return absl::InvalidArgumentError(
        absl::StrCat("CudaBackendOptions.rank ", options.rank, " outside [0, ", options.size, ")"));
  }
  if (options.device < kDeviceFromLocalRank) {
    return absl::InvalidArgumentError(absl::StrCat(
        "CudaBackendOptions.device must be >= 0 or kDeviceFromLocalRank, got ", options.device));
  }
  if (options.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat("CudaBackendOptions.timeout must be > 0, got ",
                                                   absl::FormatDuration(options.timeout)));
  }
  return absl::OkStatus();
}

}  // namespace

int CudaDeviceCount() {
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

bool CudaAvailable() { return CudaDeviceCount() > 0; }

absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(const CudaBackendOptions& options) {
  // Arguments first, so a bad configuration is reported as such on any machine.
  BALLAST_RETURN_IF_ERROR(ValidateOptions(options));
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    cudaGetLastError();
    return absl::UnavailableError(
        absl::StrCat("no usable CUDA device: cudaGetDeviceCount failed: ", cudaGetErrorName(error),
                     " (", cudaGetErrorString(error), ")"));
  }
  if (count == 0) return absl::UnavailableError("no usable CUDA device: none found");
  BALLAST_ASSIGN_OR_RETURN(
      const int device,
      ResolveCudaDevice(options.device, options.rank, count, std::getenv("LOCAL_RANK")));
  // With NCCL peers, one process per GPU (internal/cuda_device_claims.h).
  internal::CudaDeviceClaim claim;
  if (options.size > 1) {
    BALLAST_ASSIGN_OR_RETURN(claim, internal::CudaDeviceClaim::Claim(device));
  }
  BALLAST_ASSIGN_OR_RETURN(std::shared_ptr<StreamContext> ctx, StreamContext::Create(device));
  BALLAST_ASSIGN_OR_RETURN(std::unique_ptr<CudaCompute> compute,
                           CudaCompute::Create(ctx, options.gemm_precision));
  BALLAST_ASSIGN_OR_RETURN(std::unique_ptr<NcclCommunicator> comm,
                           NcclCommunicator::Create(options, ctx));
  int nccl_version = 0;
  ncclGetVersion(&nccl_version);
  BALLAST_LOG(INFO) << "cuda backend: prefix=" << options.prefix << " rank " << options.rank
                    << " of " << options.size << " on device " << device << " (NCCL "
                    << nccl_version << ")";
  return std::make_unique<CudaBackend>(std::move(claim), std::move(ctx), std::move(compute),
                                       std::move(comm));
}

}  // namespace ballast
