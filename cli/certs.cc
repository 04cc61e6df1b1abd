// `actorflow certs`: a cluster CA and one certificate per task (net/certs.h).
#include <limits.h>
#include <stdlib.h>

#include <iostream>

#include "actorflow/actorflow.h"
#include "cli/commands.h"
#include "net/certs.h"

namespace actorflow {
namespace cli {

int run_certs(const CertsOptions& o) {
  auto cluster = load_cluster(o.cluster);
  if (!cluster.ok()) {
    std::cerr << "actorflow certs: " << cluster.status().message() << "\n";
    return 2;
  }
  if (o.out.empty()) {
    std::cerr << "actorflow certs: --out DIR is required\n";
    return 2;
  }
  std::vector<net::CertSubject> subjects;
  for (const TaskId& t : cluster->all_tasks()) {
    auto addr = cluster->task_address(t);
    auto hp = addr.ok() ? parse_address(*addr) : Result<std::pair<std::string, int>>(addr.status());
    if (!hp.ok()) {
      std::cerr << "actorflow certs: " << hp.status().message() << "\n";
      return 2;
    }
    subjects.push_back(net::CertSubject{t.to_string(), {hp->first}});
  }
  subjects.push_back(net::CertSubject{"client", {}});
  subjects.push_back(net::CertSubject{"operator", {}});  // `actorflow chaos` (fault plans)
  Status st = net::write_cluster_certs(o.out, subjects, o.force);
  if (!st.ok()) {
    std::cerr << "actorflow certs: " << st.message() << "\n";
    return st.code() == Code::kAlreadyExists ? 2 : 1;
  }
  std::cout << "wrote the cluster CA and " << subjects.size() << " certificates to " << o.out << "/:\n"
            << "  ca.crt, ca.key (keep ca.key offline: it signs new members)\n";
  for (const auto& s : subjects)
    std::cout << "  " << net::cert_file_stem(s.name) << ".crt/.key  CN " << s.name
              << (s.hosts.empty() ? std::string() : "  host " + s.hosts[0]) << "\n";
  char abs[PATH_MAX];
  const std::string dir = ::realpath(o.out.c_str(), abs) ? std::string(abs) : o.out;
  std::cout << "turn TLS on with, in " << o.cluster << ":\n  [cluster]\n  tls_dir = \"" << dir
            << "\"   # a relative path is read from the cluster file's directory\n"
            << "give each host ca.crt and its own tasks' .crt/.key only" << std::endl;
  return 0;
}

}  // namespace cli
}  // namespace actorflow
