// cotenant: another tenant's compute job. It keeps one CPU busy with floating-point work
// until it is signalled, so a rank pinned to the same core gets only its fair share of
// that core: the machine slows the rank down, not a sleep in our code. The launcher pins
// it, and sets its weight (cgroup cpu.shares / cpu.weight, or nice) to choose how much of
// the core it takes.
#include <csignal>
#include <cstdio>

namespace {
volatile std::sig_atomic_t g_stop = 0;
void OnSignal(int) { g_stop = 1; }
}  // namespace

int main() {
  std::signal(SIGTERM, OnSignal);
  std::signal(SIGINT, OnSignal);
  // A dependent chain of multiply-adds: pure ALU work, no memory traffic, never optimised
  // away (the result is printed).
  double x = 1.0;
  while (!g_stop) {
    for (int i = 0; i < 1000000; ++i) x = x * 0.999999 + 1e-6;
  }
  std::printf("cotenant done (%g)\n", x);
  return 0;
}
