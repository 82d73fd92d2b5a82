// The IDX reader: real files when Debian's dataset-fashion-mnist is installed, and every
// way a file can be wrong.
#include "examples/vit/fashion_mnist.h"

#include <unistd.h>
#include <zlib.h>

#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace ballast::vit {
namespace {

std::vector<uint8_t> Idx(std::vector<uint8_t> header, size_t payload, uint8_t value = 0) {
  header.insert(header.end(), payload, value);
  return header;
}

TEST(ParseIdxTest, ReadsShapeAndData) {
  std::vector<int32_t> shape;
  auto data = ParseIdx(Idx({0, 0, 8, 3, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 4}, 24, 7), 3, &shape, "f");
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(shape, (std::vector<int32_t>{2, 3, 4}));
  EXPECT_EQ(data->size(), 24u);
  EXPECT_EQ((*data)[23], 7);
}

TEST(ParseIdxTest, RejectsMalformedFilesNamingThem) {
  std::vector<int32_t> shape;
  auto bad_magic = ParseIdx(Idx({0, 0, 9, 1, 0, 0, 0, 2}, 2), 1, &shape, "labels.idx");
  EXPECT_TRUE(absl::StrContains(bad_magic.status().message(), "labels.idx: not an IDX"));
  auto wrong_dims = ParseIdx(Idx({0, 0, 8, 1, 0, 0, 0, 2}, 2), 3, &shape, "f");
  EXPECT_FALSE(wrong_dims.ok());
  auto short_data = ParseIdx(Idx({0, 0, 8, 1, 0, 0, 0, 5}, 4), 1, &shape, "f");
  EXPECT_TRUE(absl::StrContains(short_data.status().message(), "header promises 5"));
  auto short_header = ParseIdx({0, 0, 8}, 1, &shape, "f");
  EXPECT_TRUE(absl::StrContains(short_header.status().message(), "shorter than its header"));
  auto zero = ParseIdx(Idx({0, 0, 8, 1, 0, 0, 0, 0}, 0), 1, &shape, "f");
  EXPECT_TRUE(absl::StrContains(zero.status().message(), "dimension 0 is 0"));
}

class LoadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / absl::StrCat("fmnist-test-", getpid());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  void WriteGz(const std::string& name, const std::vector<uint8_t>& bytes) {
    gzFile f = gzopen((dir_ / name).c_str(), "wb");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(gzwrite(f, bytes.data(), bytes.size()), static_cast<int>(bytes.size()));
    gzclose(f);
  }
  std::filesystem::path dir_;
};

TEST_F(LoadTest, MissingFilesNameThePackage) {
  auto set = LoadFashionMnist(dir_.string(), Split::kTest);
  EXPECT_TRUE(absl::IsNotFound(set.status()));
  EXPECT_TRUE(absl::StrContains(set.status().message(), "dataset-fashion-mnist"));
}

TEST_F(LoadTest, ReadsGzipAndRejectsDisagreeingCountsAndBadLabels) {
  WriteGz("t10k-images-idx3-ubyte.gz",
          Idx({0, 0, 8, 3, 0, 0, 0, 2, 0, 0, 0, 28, 0, 0, 0, 28}, 2 * 28 * 28));
  WriteGz("t10k-labels-idx1-ubyte.gz", {0, 0, 8, 1, 0, 0, 0, 2, 3, 9});
  auto set = LoadFashionMnist(dir_.string(), Split::kTest);
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ(set->count, 2);
  EXPECT_EQ(set->labels, (std::vector<uint8_t>{3, 9}));

  WriteGz("t10k-labels-idx1-ubyte.gz", {0, 0, 8, 1, 0, 0, 0, 3, 3, 9, 1});
  set = LoadFashionMnist(dir_.string(), Split::kTest);
  EXPECT_TRUE(absl::StrContains(set.status().message(), "has 2 images but"));

  WriteGz("t10k-labels-idx1-ubyte.gz", {0, 0, 8, 1, 0, 0, 0, 2, 3, 10});
  set = LoadFashionMnist(dir_.string(), Split::kTest);
  EXPECT_TRUE(absl::StrContains(set.status().message(), "label 10 at index 1"));
}

TEST(FashionMnistTest, InstalledDatasetHasTheKnownShape) {
  if (!std::filesystem::exists(kDefaultFashionMnistDir)) {
    GTEST_SKIP() << kDefaultFashionMnistDir << " missing (scripts/setup installs it)";
  }
  auto train = LoadFashionMnist(kDefaultFashionMnistDir, Split::kTrain);
  auto test = LoadFashionMnist(kDefaultFashionMnistDir, Split::kTest);
  ASSERT_TRUE(train.ok()) << train.status();
  ASSERT_TRUE(test.ok()) << test.status();
  EXPECT_EQ(train->count, 60000);
  EXPECT_EQ(test->count, 10000);
  EXPECT_EQ(train->rows, 28);
  EXPECT_EQ(train->cols, 28);
  // Balanced classes: 1,000 test images of each.
  std::vector<int> per_class(10);
  for (uint8_t l : test->labels) ++per_class[l];
  for (int c = 0; c < 10; ++c) EXPECT_EQ(per_class[c], 1000) << c;
}

}  // namespace
}  // namespace ballast::vit
