#include "net/proc_sockets.h"

#include <dirent.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>
#include <utility>

namespace actorflow {
namespace net {
namespace {

struct Endpoints {
  std::string local, remote;  // /proc's hex "addr:port"
};

// Established TCP sockets of this network namespace by inode.
Result<std::map<std::string, Endpoints>> established() {
  std::map<std::string, Endpoints> out;
  bool any = false;
  for (const char* f : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(f);
    if (!in) continue;
    any = true;
    std::string line;
    std::getline(in, line);  // the header
    while (std::getline(in, line)) {
      std::istringstream ls(line);
      std::string slot, local, remote, state, queues, timer, retr, uid, timeout, inode;
      ls >> slot >> local >> remote >> state >> queues >> timer >> retr >> uid >> timeout >> inode;
      if (state == "01") out[inode] = Endpoints{local, remote};  // TCP_ESTABLISHED
    }
  }
  if (!any) return Unavailable("cannot read /proc/net/tcp or /proc/net/tcp6");
  return out;
}

Result<std::vector<std::string>> socket_inodes(pid_t pid) {
  const std::string d = "/proc/" + std::to_string(pid) + "/fd";
  DIR* dir = opendir(d.c_str());
  if (!dir) return NotFound("process " + std::to_string(pid) + ": cannot list " + d);
  std::vector<std::string> out;
  while (dirent* e = readdir(dir)) {
    char buf[128];
    const ssize_t n = readlink((d + "/" + e->d_name).c_str(), buf, sizeof buf - 1);
    if (n <= 0) continue;  // "." and "..", or a descriptor closed meanwhile
    const std::string link(buf, static_cast<size_t>(n));
    if (link.rfind("socket:[", 0) == 0 && link.back() == ']') out.push_back(link.substr(8, link.size() - 9));
  }
  closedir(dir);
  return out;
}

}  // namespace

Result<std::map<pid_t, ProcessConnections>> tcp_connections(const std::vector<pid_t>& pids) {
  AF_ASSIGN_OR_RETURN(auto est, established());
  // A connection is its two endpoints: one local port may serve several connections (a listener's
  // accepted sockets; an outgoing port reused towards different destinations), so the socket at
  // the other end of (local, remote) is the one whose endpoints are (remote, local).
  using Key = std::pair<std::string, std::string>;
  std::map<Key, pid_t> owner;                  // (local, remote) -> process
  std::map<pid_t, std::vector<Key>> sockets;  // process -> its sockets
  for (pid_t pid : pids) {
    AF_ASSIGN_OR_RETURN(auto inodes, socket_inodes(pid));
    auto& mine = sockets[pid];
    for (const auto& ino : inodes) {
      auto it = est.find(ino);
      if (it == est.end()) continue;
      owner[{it->second.local, it->second.remote}] = pid;
      mine.push_back({it->second.local, it->second.remote});
    }
  }
  std::map<pid_t, ProcessConnections> out;
  for (const auto& [pid, ss] : sockets) {
    ProcessConnections& c = out[pid];
    c.sockets = static_cast<int>(ss.size());
    for (const auto& [local, remote] : ss) {
      auto o = owner.find({remote, local});
      if (o == owner.end()) continue;
      if (o->second == pid)
        ++c.self_sockets;
      else
        c.peers.insert(o->second);
    }
  }
  return out;
}

}  // namespace net
}  // namespace actorflow
