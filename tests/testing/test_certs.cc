#include "testing/test_certs.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"

namespace ballast::testing {

absl::StatusOr<TestCerts> MakeTestCerts(const std::string& dir) {
  // The script's path is baked in by CMake: tests run from the build tree.
  std::filesystem::create_directories(dir);
  const std::string command = absl::StrCat("bash '", BALLAST_MAKE_TEST_CERTS, "' '", dir, "' >'",
                                           dir, "/make_test_certs.log' 2>&1");
  if (std::system(command.c_str()) != 0) {
    return absl::InternalError(absl::StrCat("making test certificates failed: ", command));
  }
  return TestCerts{.dir = dir};
}

void WriteFile(const std::string& path, const std::string& contents) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << contents;
}

}  // namespace ballast::testing
