#include "internal/compute_checks.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace ballast::internal {
namespace {

// Whether [a, a + na) and [b, b + nb) share a float. Compared as addresses with
// std::less, which orders any two pointers.
bool Overlap(const float* a, size_t na, const float* b, size_t nb) {
  if (na == 0 || nb == 0 || a == nullptr || b == nullptr) return false;
  const std::less<const float*> before;
  return before(a, b + nb) && before(b, a + na);
}

// Floats from the first element of a rows x cols matrix of row stride ld to its last
// (0 when empty). The arguments are already checked: none negative, ld >= cols.
size_t Span(int rows, int cols, int ld) {
  if (rows == 0 || cols == 0) return 0;
  return static_cast<size_t>(rows - 1) * static_cast<size_t>(ld) + static_cast<size_t>(cols);
}

// Every rows[i] in [0, bound).
absl::Status CheckRowIndices(const char* op, const int32_t* rows, int n, int bound) {
  for (int i = 0; i < n; ++i) {
    if (rows[i] < 0 || rows[i] >= bound) {
      return absl::InvalidArgumentError(
          absl::StrCat(op, ": rows[", i, "] = ", rows[i], " is out of range [0, ", bound, ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckRowMajor(const char* op, int rows, int cols, int ld) {
  if (rows < 0 || cols < 0 || ld < cols) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": invalid shape rows=", rows, " cols=", cols, " ld=", ld));
  }
  return absl::OkStatus();
}

absl::Status CheckSwiGlu(const char* op, int rows, int units, int unit_size) {
  if (rows < 0 || units < 0 || unit_size < 0) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": invalid shape rows=", rows,
                                                   " units=", units, " unit_size=", unit_size));
  }
  return absl::OkStatus();
}

absl::Status CheckGemm(const char* op, bool trans_a, bool trans_b, int m, int n, int k, int lda,
                       int ldb, int ldc) {
  if (m < 0 || n < 0 || k < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": negative dimension m=", m, " n=", n, " k=", k));
  }
  const int min_lda = std::max(1, trans_a ? m : k);
  const int min_ldb = std::max(1, trans_b ? k : n);
  const int min_ldc = std::max(1, n);
  if (lda < min_lda || ldb < min_ldb || ldc < min_ldc) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": row stride too small (trans_a=", trans_a, " trans_b=", trans_b,
                     " m=", m, " n=", n, " k=", k, " lda=", lda, " ldb=", ldb, " ldc=", ldc, ")"));
  }
  return absl::OkStatus();
}

absl::Status CheckBatch(const char* op, int batch) {
  if (batch < 0) return absl::InvalidArgumentError(absl::StrCat(op, ": negative batch ", batch));
  return absl::OkStatus();
}

absl::Status CheckRotary(int rows, int seq, int ld, int groups, int group_stride, int heads,
                         int head_dim) {
  if (rows < 0 || seq <= 0 || groups < 0 || heads < 0 || head_dim <= 0 || head_dim % 2 != 0 ||
      static_cast<int64_t>(groups - 1) * group_stride + static_cast<int64_t>(heads) * head_dim >
          ld) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Rotary: rows ", rows, " seq ", seq, " ld ", ld, " groups ", groups, " group_stride ",
        group_stride, " heads ", heads, " head_dim ", head_dim, " do not fit"));
  }
  return absl::OkStatus();
}

absl::Status CheckAdamWStep(int64_t step) {
  if (step < 1) {
    return absl::InvalidArgumentError(absl::StrCat("AdamW: step must be >= 1, got ", step));
  }
  return absl::OkStatus();
}

absl::Status CheckUnitL1(const float* a, int units, size_t unit_elems, const double* out_host) {
  if (units < 0) {
    return absl::InvalidArgumentError(absl::StrCat("UnitL1: negative units ", units));
  }
  if (units > 0 && (out_host == nullptr || (a == nullptr && unit_elems > 0))) {
    return absl::InvalidArgumentError("UnitL1: null input or output");
  }
  return absl::OkStatus();
}

absl::Status CheckSquaredNorm(const float* x, size_t n, const float* sum) {
  if (n > 0 && (x == nullptr || sum == nullptr)) {
    return absl::InvalidArgumentError("AddSquaredNorm: null x or sum");
  }
  return absl::OkStatus();
}

absl::Status CheckCopy(const float* src, const float* dst, size_t n) {
  if (src != dst && Overlap(src, n, dst, n)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Copy: source and destination of ", n, " floats overlap (destination at offset ", dst - src,
        " from the source); copy through a separate buffer"));
  }
  return absl::OkStatus();
}

absl::Status CheckLayerNormBackward(const float* x, const float* gamma, const float* mean,
                                    const float* rstd, const float* dy, int rows, int cols,
                                    const float* dx, const float* dgamma, const float* dbeta) {
  if (absl::Status s = CheckRowMajor("LayerNormBackward", rows, cols, cols); !s.ok()) return s;
  const size_t n = static_cast<size_t>(rows) * static_cast<size_t>(cols);
  const size_t c = static_cast<size_t>(cols);
  struct Range {
    const char* name;
    const float* data;
    size_t size;
  };
  const size_t r = static_cast<size_t>(rows);
  const Range ranges[] = {{"x", x, n},           {"gamma", gamma, c}, {"mean", mean, r},
                          {"rstd", rstd, r},     {"dy", dy, n},       {"dx", dx, n},
                          {"dgamma", dgamma, c}, {"dbeta", dbeta, c}};
  constexpr int kRanges = 8;
  constexpr int kFirstOutput = 5;  // dx, dgamma and dbeta are written
  for (int w = kFirstOutput; w < kRanges; ++w) {
    for (int other = 0; other < kRanges; ++other) {
      if (other == w ||
          !Overlap(ranges[w].data, ranges[w].size, ranges[other].data, ranges[other].size)) {
        continue;
      }
      return absl::InvalidArgumentError(
          absl::StrCat("LayerNormBackward: ", ranges[w].name, " overlaps ", ranges[other].name,
                       "; the outputs must not alias the inputs or each other"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckGatherRows(const float* src, int src_rows, int ld_src, const int32_t* rows, int n,
                             int cols, const float* dst, int ld_dst) {
  if (n < 0 || cols < 0 || src_rows < 0 || ld_src < cols || ld_dst < cols) {
    return absl::InvalidArgumentError(absl::StrCat("GatherRows: invalid shape n=", n,
                                                   " cols=", cols, " src_rows=", src_rows,
                                                   " ld_src=", ld_src, " ld_dst=", ld_dst));
  }
  if (n == 0) return absl::OkStatus();
  if (cols > 0 && (src == nullptr || rows == nullptr || dst == nullptr)) {
    return absl::InvalidArgumentError(absl::StrCat("GatherRows: null ", src == nullptr    ? "src"
                                                                        : rows == nullptr ? "rows"
                                                                                          : "dst"));
  }
  // The table is checked even with no columns to move: a bad index is a bug either way.
  if (rows != nullptr) {
    if (absl::Status s = CheckRowIndices("GatherRows", rows, n, src_rows); !s.ok()) return s;
  }
  if (Overlap(dst, Span(n, cols, ld_dst), src, Span(src_rows, cols, ld_src))) {
    return absl::InvalidArgumentError("GatherRows: dst overlaps src");
  }
  return absl::OkStatus();
}

absl::Status CheckScatterAddRows(const float* src, int ld_src, const int32_t* rows, int n, int cols,
                                 const float* dst, int dst_rows, int ld_dst) {
  if (n < 0 || cols < 0 || dst_rows < 0 || ld_src < cols || ld_dst < cols) {
    return absl::InvalidArgumentError(absl::StrCat("ScatterAddRows: invalid shape n=", n,
                                                   " cols=", cols, " dst_rows=", dst_rows,
                                                   " ld_src=", ld_src, " ld_dst=", ld_dst));
  }
  if (n == 0) return absl::OkStatus();
  if (cols > 0 && (src == nullptr || rows == nullptr || dst == nullptr)) {
    return absl::InvalidArgumentError(absl::StrCat("ScatterAddRows: null ", src == nullptr ? "src"
                                                                            : rows == nullptr
                                                                                ? "rows"
                                                                                : "dst"));
  }
  if (rows != nullptr) {
    if (absl::Status s = CheckRowIndices("ScatterAddRows", rows, n, dst_rows); !s.ok()) return s;
    // Sorted (row, position) pairs: O(n log n) whatever dst_rows is, and a repeat is
    // named with both of its positions.
    std::vector<std::pair<int32_t, int>> sorted(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) sorted[static_cast<size_t>(i)] = {rows[i], i};
    std::sort(sorted.begin(), sorted.end());
    for (size_t i = 1; i < sorted.size(); ++i) {
      if (sorted[i].first != sorted[i - 1].first) continue;
      return absl::InvalidArgumentError(absl::StrCat(
          "ScatterAddRows: row ", sorted[i].first, " appears twice (rows[", sorted[i - 1].second,
          "] and rows[", sorted[i].second, "]); the rows must be distinct"));
    }
  }
  if (Overlap(dst, Span(dst_rows, cols, ld_dst), src, Span(n, cols, ld_src))) {
    return absl::InvalidArgumentError("ScatterAddRows: dst overlaps src");
  }
  return absl::OkStatus();
}

absl::Status CheckRowDots(const float* a, int lda, const float* b, int ldb, int n, int cols,
                          const float* out) {
  if (n < 0 || cols < 0 || lda < cols || ldb < cols) {
    return absl::InvalidArgumentError(
        absl::StrCat("RowDots: invalid shape n=", n, " cols=", cols, " lda=", lda, " ldb=", ldb));
  }
  if (n == 0) return absl::OkStatus();
  if (out == nullptr || (cols > 0 && (a == nullptr || b == nullptr))) {
    return absl::InvalidArgumentError(absl::StrCat("RowDots: null ", out == nullptr ? "out"
                                                                     : a == nullptr ? "a"
                                                                                    : "b"));
  }
  const size_t m = static_cast<size_t>(n);
  if (Overlap(out, m, a, Span(n, cols, lda))) {
    return absl::InvalidArgumentError("RowDots: out overlaps a");
  }
  if (Overlap(out, m, b, Span(n, cols, ldb))) {
    return absl::InvalidArgumentError("RowDots: out overlaps b");
  }
  return absl::OkStatus();
}

}  // namespace ballast::internal
