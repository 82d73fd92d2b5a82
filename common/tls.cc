#include "common/tls.h"

#include <fcntl.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace ballast {
namespace {

// Certificates and keys are a few KiB; a bound keeps a wrong path (a log file, a disk
// image) from being read into memory whole.
constexpr off_t kMaxSecretFileBytes = 1 << 20;

struct BioFree {
  void operator()(BIO* bio) const { BIO_free(bio); }
};
struct X509Free {
  void operator()(X509* x509) const { X509_free(x509); }
};
struct PkeyFree {
  void operator()(EVP_PKEY* key) const { EVP_PKEY_free(key); }
};
using BioPtr = std::unique_ptr<BIO, BioFree>;
using X509Ptr = std::unique_ptr<X509, X509Free>;
using PkeyPtr = std::unique_ptr<EVP_PKEY, PkeyFree>;

// OpenSSL's error queue is per thread and outlives the call that failed: take its newest
// entry for the message and leave the queue empty for gRPC's own TLS code.
std::string TakeOpenSslError() {
  unsigned long code = 0;  // NOLINT: OpenSSL's type
  unsigned long last = 0;  // NOLINT
  while ((code = ERR_get_error()) != 0) last = code;
  if (last == 0) return "no PEM data";
  char buffer[256];
  ERR_error_string_n(last, buffer, sizeof(buffer));
  return buffer;
}

BioPtr MemoryBio(const std::string& pem) {
  return BioPtr(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
}

// Without a callback, OpenSSL asks for a passphrase on the terminal when a key is
// encrypted; a daemon must fail instead.
int NoPassphrase(char*, int, int, void*) { return 0; }

X509Ptr FirstCertificate(const std::string& pem) {
  BioPtr bio = MemoryBio(pem);
  return X509Ptr(PEM_read_bio_X509(bio.get(), nullptr, NoPassphrase, nullptr));
}

PkeyPtr PrivateKey(const std::string& pem) {
  BioPtr bio = MemoryBio(pem);
  return PkeyPtr(PEM_read_bio_PrivateKey(bio.get(), nullptr, NoPassphrase, nullptr));
}

// The key must belong to the certificate, or the server would start and then fail every
// handshake with an error only visible in gRPC's own logs.
absl::Status CheckKeyMatches(const std::string& cert_pem, const std::string& key_pem,
                             const TlsFiles& files) {
  X509Ptr cert = FirstCertificate(cert_pem);
  PkeyPtr key = PrivateKey(key_pem);
  if (cert == nullptr || key == nullptr || X509_check_private_key(cert.get(), key.get()) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError(absl::StrCat(
        "TLS private key '", files.key, "' does not match certificate '", files.cert, "'"));
  }
  return absl::OkStatus();
}

struct CertAndKey {
  std::string cert;
  std::string key;
};

absl::StatusOr<CertAndKey> ReadCertAndKey(const TlsFiles& files) {
  CertAndKey pair;
  BALLAST_ASSIGN_OR_RETURN(pair.cert, ReadCertificatePem(files.cert, "TLS certificate"));
  BALLAST_ASSIGN_OR_RETURN(pair.key, ReadPrivateKeyPem(files.key, "TLS private key"));
  BALLAST_RETURN_IF_ERROR(CheckKeyMatches(pair.cert, pair.key, files));
  return pair;
}

}  // namespace

absl::StatusOr<std::string> ReadSecretFile(const std::string& path, absl::string_view what) {
  if (path.empty()) return absl::InvalidArgumentError(absl::StrCat(what, ": no file given"));
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int error = errno;
    const std::string message =
        absl::StrCat(what, " file '", path, "' cannot be read: ", std::strerror(error));
    if (error == ENOENT) return absl::NotFoundError(message);
    if (error == EACCES || error == EPERM) return absl::PermissionDeniedError(message);
    return absl::InvalidArgumentError(message);
  }
  absl::Cleanup close_fd = [fd] { ::close(fd); };
  struct stat info;
  if (::fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " file '", path, "' is not a regular file"));
  }
  if (info.st_size > kMaxSecretFileBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " file '", path, "' is larger than ", kMaxSecretFileBytes, " bytes"));
  }
  std::string contents(static_cast<size_t>(info.st_size), '\0');
  size_t filled = 0;
  while (filled < contents.size()) {
    const ssize_t n = ::read(fd, contents.data() + filled, contents.size() - filled);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " file '", path, "' cannot be read: ", std::strerror(errno)));
    }
    if (n == 0) break;  // shrank while reading
    filled += static_cast<size_t>(n);
  }
  contents.resize(filled);
  if (contents.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(what, " file '", path, "' is empty"));
  }
  return contents;
}

absl::StatusOr<std::string> ReadCertificatePem(const std::string& path, absl::string_view what) {
  BALLAST_ASSIGN_OR_RETURN(std::string pem, ReadSecretFile(path, what));
  if (FirstCertificate(pem) == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " file '", path, "' holds no PEM certificate: ", TakeOpenSslError()));
  }
  return pem;
}

absl::StatusOr<std::string> ReadPrivateKeyPem(const std::string& path, absl::string_view what) {
  BALLAST_ASSIGN_OR_RETURN(std::string pem, ReadSecretFile(path, what));
  if (PrivateKey(pem) == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " file '", path, "' holds no unencrypted PEM private key: ", TakeOpenSslError()));
  }
  return pem;
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentialsFromFiles(
    const TlsFiles& files) {
  if (!files.any()) return grpc::InsecureServerCredentials();
  if (files.cert.empty() || files.key.empty()) {
    return absl::InvalidArgumentError(
        "TLS needs both the server's certificate and its private key (a client CA alone "
        "cannot serve TLS)");
  }
  BALLAST_ASSIGN_OR_RETURN(CertAndKey pair, ReadCertAndKey(files));
  grpc::SslServerCredentialsOptions options(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  options.pem_key_cert_pairs.push_back({.private_key = pair.key, .cert_chain = pair.cert});
  if (!files.ca.empty()) {
    BALLAST_ASSIGN_OR_RETURN(options.pem_root_certs, ReadCertificatePem(files.ca, "TLS client CA"));
    // Require and verify: a peer without a certificate from this CA never completes the
    // handshake, so no RPC of any service on the port reaches a handler.
    options.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  return grpc::SslServerCredentials(options);
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ChannelCredentialsFromFiles(
    const TlsFiles& files) {
  if (!files.any()) return grpc::InsecureChannelCredentials();
  if (files.cert.empty() != files.key.empty()) {
    return absl::InvalidArgumentError(
        "a TLS client certificate needs its private key, and the other way round");
  }
  grpc::SslCredentialsOptions options;
  if (!files.ca.empty()) {
    BALLAST_ASSIGN_OR_RETURN(options.pem_root_certs, ReadCertificatePem(files.ca, "TLS CA"));
  }
  if (!files.cert.empty()) {
    BALLAST_ASSIGN_OR_RETURN(CertAndKey pair, ReadCertAndKey(files));
    options.pem_cert_chain = std::move(pair.cert);
    options.pem_private_key = std::move(pair.key);
  }
  return grpc::SslCredentials(options);
}

absl::StatusOr<std::string> ReadBearerTokenFile(const std::string& path) {
  absl::StatusOr<std::string> contents = ReadSecretFile(path, "token");
  if (!contents.ok()) return contents.status();
  std::string token(absl::StripTrailingAsciiWhitespace(*contents));
  if (token.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("token file '", path, "' is empty (only whitespace)"));
  }
  // The token travels as "Bearer <token>" in an HTTP/2 header: printable ASCII, no spaces.
  for (const char c : token) {
    if (c <= ' ' || c > '~') {
      return absl::InvalidArgumentError(absl::StrCat(
          "token file '", path, "' holds whitespace or non-printable characters inside the token"));
    }
  }
  return token;
}

}  // namespace ballast
