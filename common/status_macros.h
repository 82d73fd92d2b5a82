// Early-return helpers for absl::Status / absl::StatusOr, used by every Ballast component.
//
//   BALLAST_RETURN_IF_ERROR(comm.AllReduceSum(buf, n));
//   BALLAST_ASSIGN_OR_RETURN(Buffer b, compute.Allocate(n));
#ifndef BALLAST_COMMON_STATUS_MACROS_H_
#define BALLAST_COMMON_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define BALLAST_RETURN_IF_ERROR(expr)                  \
  do {                                                 \
    ::absl::Status ballast_status_ = (expr);           \
    if (!ballast_status_.ok()) return ballast_status_; \
  } while (0)

#define BALLAST_STATUS_CONCAT_INNER_(a, b) a##b
#define BALLAST_STATUS_CONCAT_(a, b) BALLAST_STATUS_CONCAT_INNER_(a, b)

#define BALLAST_ASSIGN_OR_RETURN(lhs, expr) \
  BALLAST_ASSIGN_OR_RETURN_IMPL_(BALLAST_STATUS_CONCAT_(ballast_statusor_, __LINE__), lhs, expr)

#define BALLAST_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr) \
  auto statusor = (expr);                                   \
  if (!statusor.ok()) return std::move(statusor).status();  \
  lhs = std::move(statusor).value()

#endif  // BALLAST_COMMON_STATUS_MACROS_H_
