// TLS credentials from files: every unusable file is refused at start with an error that
// names it; well-formed files give TLS or mTLS credentials; no file gives plaintext.
#include "common/tls.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "testing/test_certs.h"

namespace ballast {
namespace {

using ::ballast::testing::TestCerts;
using ::ballast::testing::WriteFile;
using ::testing::HasSubstr;

class TlsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(absl::StrCat(::testing::TempDir(), "/ballast-tls-", ::getpid()));
    absl::StatusOr<TestCerts> certs = testing::MakeTestCerts(*dir_);
    ASSERT_TRUE(certs.ok()) << certs.status();
    certs_ = new TestCerts(*certs);
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*dir_);
    delete certs_;
    delete dir_;
  }
  static std::string* dir_;
  static TestCerts* certs_;
};
std::string* TlsTest::dir_ = nullptr;
TestCerts* TlsTest::certs_ = nullptr;

TEST_F(TlsTest, ReadSecretFileNamesTheFileWhenMissingEmptyOrNotAFile) {
  absl::StatusOr<std::string> missing = ReadSecretFile(*dir_ + "/nope", "admin token");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("admin token file '" + *dir_ + "/nope'"));

  WriteFile(*dir_ + "/empty", "");
  absl::StatusOr<std::string> empty = ReadSecretFile(*dir_ + "/empty", "admin token");
  EXPECT_EQ(empty.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(empty.status().message(), HasSubstr("'" + *dir_ + "/empty' is empty"));

  absl::StatusOr<std::string> directory = ReadSecretFile(*dir_, "TLS CA");
  EXPECT_EQ(directory.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(directory.status().message(), HasSubstr("not a regular file"));

  EXPECT_EQ(ReadSecretFile("", "TLS CA").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(TlsTest, ReadSecretFileReportsUnreadableFiles) {
  if (::geteuid() == 0) GTEST_SKIP() << "root reads any file";
  const std::string path = *dir_ + "/unreadable";
  WriteFile(path, "secret");
  ASSERT_EQ(::chmod(path.c_str(), 0), 0);
  absl::StatusOr<std::string> result = ReadSecretFile(path, "admin token");
  EXPECT_EQ(result.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(result.status().message(), HasSubstr(path));
}

TEST_F(TlsTest, PemFilesAreParsedSoAWrongFileFailsNamingIt) {
  EXPECT_TRUE(ReadCertificatePem(certs_->Cert("ca"), "TLS CA").ok());
  EXPECT_TRUE(ReadPrivateKeyPem(certs_->Key("server"), "TLS private key").ok());

  WriteFile(*dir_ + "/garbage.pem", "not a certificate\n");
  absl::StatusOr<std::string> garbage = ReadCertificatePem(*dir_ + "/garbage.pem", "TLS CA");
  EXPECT_EQ(garbage.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(garbage.status().message(),
              HasSubstr("TLS CA file '" + *dir_ + "/garbage.pem' holds no PEM certificate"));
  // A key where a certificate belongs, and the other way round.
  EXPECT_FALSE(ReadCertificatePem(certs_->Key("server"), "TLS certificate").ok());
  absl::StatusOr<std::string> cert_as_key =
      ReadPrivateKeyPem(certs_->Cert("server"), "TLS private key");
  EXPECT_THAT(cert_as_key.status().message(), HasSubstr("holds no unencrypted PEM private key"));
}

TEST_F(TlsTest, NoFilesMeansPlaintext) {
  EXPECT_TRUE(ServerCredentialsFromFiles({}).ok());
  EXPECT_TRUE(ChannelCredentialsFromFiles({}).ok());
}

TEST_F(TlsTest, ServerNeedsCertAndKeyTogetherAndMatching) {
  EXPECT_TRUE(ServerCredentialsFromFiles(certs_->Server(/*mtls=*/false)).ok());
  EXPECT_TRUE(ServerCredentialsFromFiles(certs_->Server(/*mtls=*/true)).ok());

  auto ca_only = ServerCredentialsFromFiles({.ca = certs_->Cert("ca")});
  EXPECT_EQ(ca_only.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(ca_only.status().message(), HasSubstr("certificate and its private key"));

  auto mismatched =
      ServerCredentialsFromFiles({.cert = certs_->Cert("server"), .key = certs_->Key("admin")});
  EXPECT_EQ(mismatched.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(mismatched.status().message(),
              HasSubstr("TLS private key '" + certs_->Key("admin") +
                        "' does not match certificate '" + certs_->Cert("server") + "'"));

  auto missing_ca = ServerCredentialsFromFiles(
      {.cert = certs_->Cert("server"), .key = certs_->Key("server"), .ca = *dir_ + "/no-ca"});
  EXPECT_EQ(missing_ca.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing_ca.status().message(), HasSubstr("TLS client CA file '" + *dir_ + "/no-ca'"));
}

TEST_F(TlsTest, ClientCertNeedsItsKey) {
  EXPECT_TRUE(ChannelCredentialsFromFiles(certs_->Client("")).ok());
  EXPECT_TRUE(ChannelCredentialsFromFiles(certs_->Client("agent")).ok());
  auto cert_only =
      ChannelCredentialsFromFiles({.cert = certs_->Cert("agent"), .ca = certs_->Cert("ca")});
  EXPECT_EQ(cert_only.status().code(), absl::StatusCode::kInvalidArgument);
  auto mismatched = ChannelCredentialsFromFiles(
      {.cert = certs_->Cert("agent"), .key = certs_->Key("admin"), .ca = certs_->Cert("ca")});
  EXPECT_THAT(mismatched.status().message(), HasSubstr("does not match"));
}

TEST_F(TlsTest, BearerTokenFileStripsTheTrailingNewlineAndRefusesEmptyOrOddTokens) {
  WriteFile(*dir_ + "/token", "s3cret-token\n");
  absl::StatusOr<std::string> token = ReadBearerTokenFile(*dir_ + "/token");
  ASSERT_TRUE(token.ok()) << token.status();
  EXPECT_EQ(*token, "s3cret-token");

  absl::StatusOr<std::string> missing = ReadBearerTokenFile(*dir_ + "/no-token");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr(*dir_ + "/no-token"));

  WriteFile(*dir_ + "/empty-token", "");
  EXPECT_EQ(ReadBearerTokenFile(*dir_ + "/empty-token").status().code(),
            absl::StatusCode::kInvalidArgument);
  WriteFile(*dir_ + "/newline-token", "\n");
  absl::StatusOr<std::string> blank = ReadBearerTokenFile(*dir_ + "/newline-token");
  EXPECT_EQ(blank.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(blank.status().message(), HasSubstr("is empty"));
  WriteFile(*dir_ + "/spaced-token", "two words\n");
  EXPECT_THAT(ReadBearerTokenFile(*dir_ + "/spaced-token").status().message(),
              HasSubstr("whitespace or non-printable"));
}

}  // namespace
}  // namespace ballast
