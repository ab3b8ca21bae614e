// A throwaway certificate authority for the HTTPS tests, made with the OpenSSL API in the test
// process: a self-signed CA (P-256) and a server certificate it signs for localhost and
// 127.0.0.1 (subjectAltName), valid one day. Nothing is read from or written to the system
// store; the CA goes to the client only as a PEM file the test names.
#pragma once

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <memory>
#include <stdexcept>
#include <string>

namespace pagoda::hub::testing {

struct TestPki {
  std::string ca_cert_pem;
  std::string server_cert_pem;
  std::string server_key_pem;
};

namespace pki_detail {

inline EVP_PKEY* make_key() {
  EVP_PKEY* key = EVP_EC_gen("P-256");
  if (!key) throw std::runtime_error("EVP_EC_gen failed");
  return key;
}

inline void add_ext(X509* cert, X509* issuer, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
  if (!ext) throw std::runtime_error("X509V3_EXT_conf_nid failed");
  X509_add_ext(cert, ext, -1);
  X509_EXTENSION_free(ext);
}

inline X509* make_cert(EVP_PKEY* key, const char* cn, X509* issuer, EVP_PKEY* issuer_key, long serial) {
  X509* cert = X509_new();
  X509_set_version(cert, 2);
  ASN1_INTEGER_set(X509_get_serialNumber(cert), serial);
  X509_gmtime_adj(X509_getm_notBefore(cert), -3600);
  X509_gmtime_adj(X509_getm_notAfter(cert), 86400);
  X509_set_pubkey(cert, key);
  X509_NAME* name = X509_get_subject_name(cert);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>(cn), -1, -1, 0);
  X509_set_issuer_name(cert, issuer ? X509_get_subject_name(issuer) : name);
  X509* signer = issuer ? issuer : cert;
  if (!issuer) {
    add_ext(cert, signer, NID_basic_constraints, "critical,CA:TRUE");
    add_ext(cert, signer, NID_key_usage, "critical,keyCertSign,cRLSign");
    add_ext(cert, signer, NID_subject_key_identifier, "hash");
  } else {
    add_ext(cert, signer, NID_basic_constraints, "critical,CA:FALSE");
    add_ext(cert, signer, NID_key_usage, "critical,digitalSignature");
    add_ext(cert, signer, NID_ext_key_usage, "serverAuth");
    add_ext(cert, signer, NID_subject_alt_name, "DNS:localhost,IP:127.0.0.1");
  }
  if (!X509_sign(cert, issuer_key ? issuer_key : key, EVP_sha256())) throw std::runtime_error("X509_sign failed");
  return cert;
}

inline std::string bio_text(BIO* bio) {
  char* data = nullptr;
  long n = BIO_get_mem_data(bio, &data);
  std::string s(data, static_cast<size_t>(n));
  BIO_free(bio);
  return s;
}

inline std::string cert_pem(X509* cert) {
  BIO* bio = BIO_new(BIO_s_mem());
  PEM_write_bio_X509(bio, cert);
  return bio_text(bio);
}

}  // namespace pki_detail

inline TestPki make_test_pki() {
  using namespace pki_detail;
  std::unique_ptr<EVP_PKEY, void (*)(EVP_PKEY*)> ca_key(make_key(), EVP_PKEY_free);
  std::unique_ptr<EVP_PKEY, void (*)(EVP_PKEY*)> server_key(make_key(), EVP_PKEY_free);
  std::unique_ptr<X509, void (*)(X509*)> ca(make_cert(ca_key.get(), "pagoda test CA", nullptr, nullptr, 1), X509_free);
  std::unique_ptr<X509, void (*)(X509*)> server(
      make_cert(server_key.get(), "localhost", ca.get(), ca_key.get(), 2), X509_free);
  TestPki pki;
  pki.ca_cert_pem = cert_pem(ca.get());
  pki.server_cert_pem = cert_pem(server.get());
  BIO* bio = BIO_new(BIO_s_mem());
  PEM_write_bio_PrivateKey(bio, server_key.get(), nullptr, nullptr, 0, nullptr, nullptr);
  pki.server_key_pem = bio_text(bio);
  return pki;
}

}  // namespace pagoda::hub::testing
