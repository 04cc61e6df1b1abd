#include "net/certs.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "core/file_read.h"
#include "core/private_file.h"
#include "net/openssl_util.h"

namespace actorflow {
namespace net {
namespace {



Result<PkeyPtr> new_key() {
  PkeyPtr k(EVP_EC_gen("P-256"));
  if (!k) return Internal("generating an EC P-256 key: " + ssl_errors());
  return k;
}

bool is_ip(const std::string& h) {
  unsigned char buf[16];
  return inet_pton(AF_INET, h.c_str(), buf) == 1 || inet_pton(AF_INET6, h.c_str(), buf) == 1;
}

Status add_ext(X509* cert, X509* issuer, int nid, const std::string& value) {
  X509V3_CTX v3;
  X509V3_set_ctx_nodb(&v3);
  X509V3_set_ctx(&v3, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &v3, nid, value.c_str());
  if (!ext) return Internal("certificate extension '" + value + "': " + ssl_errors());
  X509_add_ext(cert, ext, -1);
  X509_EXTENSION_free(ext);
  return Status::OK();
}

// A certificate for `subject`'s key, signed by `issuer_key` (`issuer` null: self-signed CA).
Result<X509Ptr> make_cert(const std::string& cn, const std::vector<std::string>& hosts, EVP_PKEY* key,
                          X509* issuer, EVP_PKEY* issuer_key, bool ca) {
  X509Ptr x(X509_new());
  if (!x) return Internal("X509_new: " + ssl_errors());
  X509_set_version(x.get(), 2);
  unsigned char serial[16];
  RAND_bytes(serial, sizeof serial);
  serial[0] &= 0x7f;
  std::unique_ptr<BIGNUM, void (*)(BIGNUM*)> bn(BN_bin2bn(serial, sizeof serial, nullptr), BN_free);
  BN_to_ASN1_INTEGER(bn.get(), X509_get_serialNumber(x.get()));
  X509_gmtime_adj(X509_getm_notBefore(x.get()), -3600);
  X509_gmtime_adj(X509_getm_notAfter(x.get()), (ca ? 10L : 5L) * 365 * 24 * 3600);
  X509_set_pubkey(x.get(), key);
  X509_NAME* name = X509_get_subject_name(x.get());
  X509_NAME_add_entry_by_txt(name, "O", MBSTRING_ASC, reinterpret_cast<const unsigned char*>("actorflow cluster"), -1,
                             -1, 0);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1,
                             0);
  X509_set_issuer_name(x.get(), issuer ? X509_get_subject_name(issuer) : name);
  X509* iss = issuer ? issuer : x.get();
  if (ca) {
    AF_RETURN_IF_ERROR(add_ext(x.get(), iss, NID_basic_constraints, "critical,CA:TRUE,pathlen:0"));
    AF_RETURN_IF_ERROR(add_ext(x.get(), iss, NID_key_usage, "critical,keyCertSign,cRLSign"));
    AF_RETURN_IF_ERROR(add_ext(x.get(), iss, NID_subject_key_identifier, "hash"));
  } else {
    AF_RETURN_IF_ERROR(add_ext(x.get(), iss, NID_basic_constraints, "critical,CA:FALSE"));
    AF_RETURN_IF_ERROR(add_ext(x.get(), iss, NID_key_usage, "critical,digitalSignature"));
    AF_RETURN_IF_ERROR(add_ext(x.get(), iss, NID_ext_key_usage, "serverAuth,clientAuth"));
    AF_RETURN_IF_ERROR(add_ext(x.get(), iss, NID_subject_key_identifier, "hash"));
    AF_RETURN_IF_ERROR(add_ext(x.get(), iss, NID_authority_key_identifier, "keyid"));
    std::string san;
    for (const std::string& h0 : hosts) {
      std::string h = h0;
      if (h.size() > 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
      if (h.empty()) continue;
      if (!san.empty()) san += ",";
      san += (is_ip(h) ? "IP:" : "DNS:") + h;
      // A task at "localhost" is dialled as 127.0.0.1 on the data plane (the address it
      // advertises): name the loopback addresses too.
      if (h == "localhost") san += ",IP:127.0.0.1,IP:::1";
    }
    if (!san.empty()) AF_RETURN_IF_ERROR(add_ext(x.get(), iss, NID_subject_alt_name, san));
  }
  if (X509_sign(x.get(), issuer_key ? issuer_key : key, EVP_sha256()) <= 0)
    return Internal("signing the certificate for '" + cn + "': " + ssl_errors());
  return x;
}

std::string cert_pem(X509* x) {
  std::unique_ptr<BIO, BioFree> bio(BIO_new(BIO_s_mem()));
  PEM_write_bio_X509(bio.get(), x);
  char* p = nullptr;
  long n = BIO_get_mem_data(bio.get(), &p);
  return std::string(p, static_cast<size_t>(n));
}

std::string key_pem(EVP_PKEY* k) {
  std::unique_ptr<BIO, BioFree> bio(BIO_new(BIO_s_mem()));
  PEM_write_bio_PrivateKey(bio.get(), k, nullptr, nullptr, 0, nullptr, nullptr);
  char* p = nullptr;
  long n = BIO_get_mem_data(bio.get(), &p);
  return std::string(p, static_cast<size_t>(n));
}

// Writes `data` to `path` with mode 0600 from its creation on (core/private_file.h).
Status write_file_0600(const std::string& path, const std::string& data, bool overwrite) {
  Status s = write_private_file(path, data, overwrite);
  if (s.code() == Code::kAlreadyExists)
    return AlreadyExists("'" + path + "' already exists (pass --force to replace the cluster's certificates)");
  return s;
}

Status make_dir(const std::string& dir) {
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
    return Unavailable("cannot create the directory '" + dir + "': " + std::strerror(errno));
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    return InvalidArgument("'" + dir + "' is not a directory");
  return Status::OK();
}

Status write_pair(const std::string& dir, const CertSubject& s, X509* ca, EVP_PKEY* ca_key, bool overwrite) {
  AF_ASSIGN_OR_RETURN(PkeyPtr key, new_key());
  AF_ASSIGN_OR_RETURN(X509Ptr cert, make_cert(s.name, s.hosts, key.get(), ca, ca_key, false));
  const std::string stem = dir + "/" + cert_file_stem(s.name);
  AF_RETURN_IF_ERROR(write_file_0600(stem + ".key", key_pem(key.get()), overwrite));
  return write_file_0600(stem + ".crt", cert_pem(cert.get()), overwrite);
}

}  // namespace

std::string cert_file_stem(const std::string& name) {
  if (name == "*") return "any";
  std::string out;
  for (char c : name) {
    if (c == '/') out += '-';
    else if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
             c == '-')
      out += c;
    else
      out += '_';
  }
  return out;
}

Status write_cluster_certs(const std::string& dir, const std::vector<CertSubject>& subjects, bool overwrite) {
  for (const auto& s : subjects)
    if (s.name.empty() || s.name.find('*') != std::string::npos)
      return InvalidArgument("a certificate must name one task or tool, not '" + s.name + "'");
  AF_RETURN_IF_ERROR(make_dir(dir));
  if (!overwrite) {
    std::vector<std::string> files = {dir + "/ca.crt", dir + "/ca.key"};
    for (const auto& s : subjects) {
      files.push_back(dir + "/" + cert_file_stem(s.name) + ".crt");
      files.push_back(dir + "/" + cert_file_stem(s.name) + ".key");
    }
    for (const auto& f : files)
      if (::access(f.c_str(), F_OK) == 0)
        return AlreadyExists("'" + f + "' already exists (pass --force to replace the cluster's certificates)");
  }
  AF_ASSIGN_OR_RETURN(PkeyPtr ca_key, new_key());
  AF_ASSIGN_OR_RETURN(X509Ptr ca, make_cert("actorflow cluster CA", {}, ca_key.get(), nullptr, nullptr, true));
  AF_RETURN_IF_ERROR(write_file_0600(dir + "/ca.key", key_pem(ca_key.get()), true));
  AF_RETURN_IF_ERROR(write_file_0600(dir + "/ca.crt", cert_pem(ca.get()), true));
  for (const auto& s : subjects) AF_RETURN_IF_ERROR(write_pair(dir, s, ca.get(), ca_key.get(), true));
  return Status::OK();
}

Status issue_cert(const std::string& dir, const CertSubject& subject, bool overwrite) {
  AF_ASSIGN_OR_RETURN(std::string ca_pem, read_regular_file(dir + "/ca.crt", 1 << 20, "TLS CA certificate"));
  AF_ASSIGN_OR_RETURN(std::string key_pem_s, read_regular_file(dir + "/ca.key", 1 << 20, "TLS CA key"));
  std::unique_ptr<BIO, BioFree> b1(BIO_new_mem_buf(ca_pem.data(), static_cast<int>(ca_pem.size())));
  X509Ptr ca(PEM_read_bio_X509(b1.get(), nullptr, nullptr, nullptr));
  std::unique_ptr<BIO, BioFree> b2(BIO_new_mem_buf(key_pem_s.data(), static_cast<int>(key_pem_s.size())));
  PkeyPtr ca_key(PEM_read_bio_PrivateKey(b2.get(), nullptr, nullptr, nullptr));
  OPENSSL_cleanse(&key_pem_s[0], key_pem_s.size());
  if (!ca || !ca_key) {
    ERR_clear_error();
    return InvalidArgument("'" + dir + "' holds no readable ca.crt and ca.key");
  }
  return write_pair(dir, subject, ca.get(), ca_key.get(), overwrite);
}

}  // namespace net
}  // namespace actorflow
