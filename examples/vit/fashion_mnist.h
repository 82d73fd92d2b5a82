// Fashion-MNIST in its IDX format (gzip-compressed or plain), as Debian's
// dataset-fashion-mnist package installs it under /usr/share/datasets/fashion-mnist.
#ifndef BALLAST_EXAMPLES_VIT_FASHION_MNIST_H_
#define BALLAST_EXAMPLES_VIT_FASHION_MNIST_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace ballast::vit {

inline constexpr char kDefaultFashionMnistDir[] = "/usr/share/datasets/fashion-mnist";

struct ImageSet {
  int32_t count = 0;
  int32_t rows = 0;
  int32_t cols = 0;
  std::vector<uint8_t> pixels;  // count * rows * cols, row-major per image
  std::vector<uint8_t> labels;  // count, each in [0, 10)
};

enum class Split { kTrain, kTest };

// Reads `<dir>/{train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]`. Errors name the file
// and what is wrong with it (missing, bad magic, truncated, counts that disagree, a label
// out of range).
absl::StatusOr<ImageSet> LoadFashionMnist(const std::string& dir, Split split);

// Parses one IDX file's bytes (already decompressed); `path` is only for messages.
// Exposed for tests.
absl::StatusOr<std::vector<uint8_t>> ParseIdx(const std::vector<uint8_t>& bytes, int dims,
                                              std::vector<int32_t>* shape,
                                              const std::string& path);

}  // namespace ballast::vit

#endif  // BALLAST_EXAMPLES_VIT_FASHION_MNIST_H_
