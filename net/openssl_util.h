// Small helpers for OpenSSL handles in net/ (internal; not part of any public header): RAII
// deleters and the error queue as one line. Thread-safe as OpenSSL is (the error queue is
// per thread).
#pragma once

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/x509.h>

#include <memory>
#include <string>

namespace actorflow {
namespace net {

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct PkeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
using BioPtr = std::unique_ptr<BIO, BioFree>;
using X509Ptr = std::unique_ptr<X509, X509Free>;
using PkeyPtr = std::unique_ptr<EVP_PKEY, PkeyFree>;

// Drains this thread's OpenSSL error queue into one line ("unknown OpenSSL error" when empty).
inline std::string ssl_errors() {
  std::string s;
  unsigned long e;
  char buf[256];
  while ((e = ERR_get_error()) != 0) {
    ERR_error_string_n(e, buf, sizeof buf);
    if (!s.empty()) s += "; ";
    s += buf;
  }
  return s.empty() ? "unknown OpenSSL error" : s;
}

}  // namespace net
}  // namespace actorflow
