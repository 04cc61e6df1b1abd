// Creating a cluster's TLS material: a cluster CA and one certificate and key per task, as
// `actorflow certs --cluster F --out DIR` writes them and net/tls.h reads them.
//
// Layout of DIR (every file mode 0600, the directory 0700):
//   ca.crt, ca.key                 the cluster CA (EC P-256, self-signed, 10 years); keep ca.key
//                                  offline once the cluster's certificates are made
//   <job>-<task>.crt / .key        one per task: subject CN "<job>/<task>", subjectAltName the
//                                  task's host (DNS name or IP address), serverAuth+clientAuth
//   client.crt / client.key        for tools that connect to a cluster (`actorflow status`,
//                                  `actorflow dashboard`, remote client sessions): CN "client", no host
//   operator.crt / operator.key    for `actorflow chaos` (may load fault plans): CN "operator", no host
// Keys are EC P-256; certificates are signed with SHA-256 and valid for 5 years (the CA 10).
#pragma once

#include <string>
#include <vector>

#include "core/status.h"

namespace actorflow {
namespace net {

// One certificate to issue.
struct CertSubject {
  std::string name;                // subject CN: "worker/1", "client"
  std::vector<std::string> hosts;  // subjectAltName entries (IP literals become IP:, others DNS:)
};

// The file stem of a certificate for `name` in a cluster directory ("worker/1" -> "worker-1").
std::string cert_file_stem(const std::string& name);

// Creates `dir` (mode 0700) if needed and writes a new CA and one certificate/key pair per
// subject into it, as described above. InvalidArgument for an empty name or one holding '*'
// (no end accepts such a certificate: net/tls.h). Refuses to overwrite: AlreadyExists naming the first file
// that exists, unless `overwrite`. Errors name the file: PermissionDenied, Unavailable (I/O),
// Internal (OpenSSL). Writes each file to a temporary name first, so a failure leaves no
// half-written file. Thread-safe.
Status write_cluster_certs(const std::string& dir, const std::vector<CertSubject>& subjects, bool overwrite);

// Issues one more certificate/key pair `<stem>.crt/.key` in `dir`, signed by the CA already
// there (ca.crt, ca.key). For tests (a certificate for another host, or one no end accepts, such
// as CN "*") and for adding a task.
Status issue_cert(const std::string& dir, const CertSubject& subject, bool overwrite);

}  // namespace net
}  // namespace actorflow
