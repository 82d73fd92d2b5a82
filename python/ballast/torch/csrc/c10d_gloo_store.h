// C10dGlooStore: a PyTorch job's c10d store (its process group's rendezvous) as the
// gloo::rendezvous::Store that Ballast's communicators meet through (the Gloo mesh, the
// NCCL unique id). Written here, on the public c10d::Store API that torch 1.x and 2.x
// share, rather than taken from torch's ProcessGroupGloo::GlooStore: that one is compiled
// against the Gloo headers torch bundles, which need not be the Gloo that Ballast links
// (Debian's), and its overrides follow torch's Gloo version.
#ifndef BALLAST_PYTHON_C10D_GLOO_STORE_H_
#define BALLAST_PYTHON_C10D_GLOO_STORE_H_

#include <gloo/rendezvous/store.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <utility>
#include <vector>

namespace ballast::torch_adapter {

class C10dGlooStore final : public gloo::rendezvous::Store {
 public:
  explicit C10dGlooStore(c10::intrusive_ptr<c10d::Store> store) : store_(std::move(store)) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    store_->set(key, std::vector<uint8_t>(data.begin(), data.end()));
  }
  std::vector<char> get(const std::string& key) override {
    const std::vector<uint8_t> value = store_->get(key);
    return std::vector<char>(value.begin(), value.end());
  }
  void wait(const std::vector<std::string>& keys) override { store_->wait(keys); }
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    store_->wait(keys, timeout);
  }

 private:
  c10::intrusive_ptr<c10d::Store> store_;
};

}  // namespace ballast::torch_adapter

#endif  // BALLAST_PYTHON_C10D_GLOO_STORE_H_
