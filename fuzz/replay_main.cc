// A main() for the fuzz targets in builds without libFuzzer (gcc, and the gcc ASan+UBSan
// build): runs LLVMFuzzerTestOneInput once on every file named on the command line, or in
// a directory named there (sorted, not recursive), so ctest replays the seed corpus and any
// crash file a fuzzer left. A crash or sanitizer report fails the run as it would fail the
// fuzzer.
//
//   build/fuzz/plan_fuzz fuzz/corpus/plan_fuzz crash-1234
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

bool Run(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "replay: cannot read %s\n", file.c_str());
    return false;
  }
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)),
                                std::istreambuf_iterator<char>());
  // A heap copy of exactly the input's size, as libFuzzer passes it, so ASan sees a read
  // past its end.
  auto input = std::make_unique<uint8_t[]>(bytes.size());
  std::copy(bytes.begin(), bytes.end(), input.get());
  LLVMFuzzerTestOneInput(input.get(), bytes.size());
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s FILE_OR_DIR...\n", argv[0]);
    return 2;
  }
  size_t ran = 0;
  for (int i = 1; i < argc; ++i) {
    const std::filesystem::path arg(argv[i]);
    std::vector<std::filesystem::path> files;
    if (std::filesystem::is_directory(arg)) {
      for (const auto& entry : std::filesystem::directory_iterator(arg)) {
        if (entry.is_regular_file()) files.push_back(entry.path());
      }
      std::sort(files.begin(), files.end());
    } else {
      files.push_back(arg);
    }
    for (const std::filesystem::path& file : files) {
      if (!Run(file)) return 1;
      ++ran;
    }
  }
  std::printf("replay: %zu inputs ran\n", ran);
  return ran > 0 ? 0 : 1;  // an empty corpus would test nothing: fail loudly
}
