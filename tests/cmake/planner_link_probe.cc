// Linked against ballast_planner alone (tests/CMakeLists.txt): the program links only if
// the planner needs nothing its CMake target does not bring, and layering_test.py reads
// this program's link line to check that nothing heavy comes with it.
#include "coordinator/planner/planner.h"

int main() { return ballast::coordinator::PruneBudget(0.5, 10) == 5 ? 0 : 1; }
