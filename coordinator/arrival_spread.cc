#include "coordinator/arrival_spread.h"

#include <algorithm>
#include <cmath>

namespace ballast::coordinator {
namespace {

// g(x) = phi(x) - x (1 - Phi(x)) for x >= 0: E[max(Z - x, 0)] for a standard normal Z.
double WaitBeyondLead(double x) {
  constexpr double kInvSqrt2Pi = 0.3989422804014327;
  const double density = kInvSqrt2Pi * std::exp(-0.5 * x * x);
  const double upper_tail = 0.5 * std::erfc(x / std::sqrt(2.0));
  return std::max(0.0, density - x * upper_tail);
}

// g(1/2): a fit is taken only where the smaller wait is at least this times the lead.
constexpr double kWaitAtHalfASpread = 0.19779655740130608;

}  // namespace

double SpreadWait(double spread, double lead) {
  if (!std::isfinite(spread) || !std::isfinite(lead) || spread <= 0) return 0;
  return spread * WaitBeyondLead(std::abs(lead) / spread);
}

std::optional<double> FitArrivalSpread(double others_wait, double throttled_wait) {
  if (!std::isfinite(others_wait) || !std::isfinite(throttled_wait)) return std::nullopt;
  others_wait = std::max(others_wait, 0.0);
  throttled_wait = std::max(throttled_wait, 0.0);
  const double lead = std::abs(others_wait - throttled_wait);
  const double wait = std::min(others_wait, throttled_wait);
  if (!(wait > 0) || wait < kWaitAtHalfASpread * lead) return std::nullopt;
  // SpreadWait(s, lead) rises with s (its derivative is phi(lead / s) > 0) and is at most
  // g(0) s: bisect from the spread that would wait `wait` at lead 0 (too little, or just
  // enough) to one that waits enough.
  double lo = wait / WaitBeyondLead(0);
  double hi = lo;
  // Within half a spread the answer is under 2.1 lo; the bound only stops absurd input
  // (a wait near the largest double) from doubling forever.
  for (int i = 0; SpreadWait(hi, lead) < wait; ++i) {
    if (i == 64 || !std::isfinite(hi)) return std::nullopt;
    hi *= 2;
  }
  for (int i = 0; i < 100 && hi - lo > 1e-12 * hi; ++i) {
    const double mid = 0.5 * (lo + hi);
    (SpreadWait(mid, lead) < wait ? lo : hi) = mid;
  }
  return hi;
}

}  // namespace ballast::coordinator
