#include "examples/vit/fashion_mnist.h"

#include <zlib.h>

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace ballast::vit {
namespace {

// gzread also reads uncompressed files transparently, so one path serves both.
absl::StatusOr<std::vector<uint8_t>> ReadMaybeGzip(const std::string& path) {
  gzFile file = gzopen(path.c_str(), "rb");
  if (file == nullptr) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  std::vector<uint8_t> out;
  std::vector<uint8_t> chunk(1 << 20);
  while (true) {
    const int n = gzread(file, chunk.data(), static_cast<unsigned>(chunk.size()));
    if (n < 0) {
      int errnum = 0;
      const std::string message = gzerror(file, &errnum);
      gzclose(file);
      return absl::DataLossError(absl::StrCat(path, ": ", message));
    }
    if (n == 0) break;
    out.insert(out.end(), chunk.begin(), chunk.begin() + n);
  }
  gzclose(file);
  return out;
}

absl::StatusOr<std::string> FindFile(const std::string& dir, const std::string& stem) {
  for (const std::string& name : {stem + ".gz", stem}) {
    const std::string path = absl::StrCat(dir, "/", name);
    if (std::filesystem::exists(path)) return path;
  }
  return absl::NotFoundError(absl::StrCat(
      "no ", stem, "[.gz] in ", dir,
      " (install Debian package dataset-fashion-mnist, or pass --data_dir)"));
}

uint32_t BigEndian32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}

}  // namespace

absl::StatusOr<std::vector<uint8_t>> ParseIdx(const std::vector<uint8_t>& bytes, int dims,
                                              std::vector<int32_t>* shape,
                                              const std::string& path) {
  const size_t header = 4 + 4 * static_cast<size_t>(dims);
  if (bytes.size() < header) {
    return absl::DataLossError(
        absl::StrCat(path, ": ", bytes.size(), " bytes, shorter than its header"));
  }
  // Magic: two zero bytes, type 0x08 (unsigned byte), number of dimensions.
  if (bytes[0] != 0 || bytes[1] != 0 || bytes[2] != 0x08 || bytes[3] != dims) {
    return absl::DataLossError(absl::StrCat(path, ": not an IDX file of ", dims,
                                            "-d unsigned bytes (bad magic)"));
  }
  shape->clear();
  size_t total = 1;
  for (int d = 0; d < dims; ++d) {
    const uint32_t n = BigEndian32(bytes.data() + 4 + 4 * d);
    if (n == 0 || n > (1u << 24)) {
      return absl::DataLossError(absl::StrCat(path, ": dimension ", d, " is ", n));
    }
    shape->push_back(static_cast<int32_t>(n));
    total *= n;
  }
  if (bytes.size() != header + total) {
    return absl::DataLossError(absl::StrCat(path, ": ", bytes.size() - header,
                                            " data bytes, header promises ", total));
  }
  return std::vector<uint8_t>(bytes.begin() + header, bytes.end());
}

absl::StatusOr<ImageSet> LoadFashionMnist(const std::string& dir, Split split) {
  const std::string prefix = split == Split::kTrain ? "train" : "t10k";
  BALLAST_ASSIGN_OR_RETURN(std::string images_path,
                           FindFile(dir, prefix + "-images-idx3-ubyte"));
  BALLAST_ASSIGN_OR_RETURN(std::string labels_path,
                           FindFile(dir, prefix + "-labels-idx1-ubyte"));
  BALLAST_ASSIGN_OR_RETURN(std::vector<uint8_t> image_bytes, ReadMaybeGzip(images_path));
  BALLAST_ASSIGN_OR_RETURN(std::vector<uint8_t> label_bytes, ReadMaybeGzip(labels_path));
  ImageSet set;
  std::vector<int32_t> image_shape, label_shape;
  BALLAST_ASSIGN_OR_RETURN(set.pixels, ParseIdx(image_bytes, 3, &image_shape, images_path));
  BALLAST_ASSIGN_OR_RETURN(set.labels, ParseIdx(label_bytes, 1, &label_shape, labels_path));
  if (image_shape[0] != label_shape[0]) {
    return absl::DataLossError(absl::StrCat(images_path, " has ", image_shape[0], " images but ",
                                            labels_path, " has ", label_shape[0], " labels"));
  }
  for (size_t i = 0; i < set.labels.size(); ++i) {
    if (set.labels[i] >= 10) {
      return absl::DataLossError(
          absl::StrCat(labels_path, ": label ", int{set.labels[i]}, " at index ", i,
                       " is not a class in [0, 10)"));
    }
  }
  set.count = image_shape[0];
  set.rows = image_shape[1];
  set.cols = image_shape[2];
  return set;
}

}  // namespace ballast::vit
