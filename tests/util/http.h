// Plain-HTTP helpers for tests that talk to actorflow's HTTP endpoints (metrics, dashboard) as an
// outside client would: raw requests over a fresh loopback connection. Test-only.
#pragma once

#include <sys/socket.h>
#include <sys/time.h>

#include <chrono>
#include <cstdint>
#include <string>

#include "net/socket.h"

namespace actorflow {
namespace testing {

// True when `s` contains `what`.
inline bool has(const std::string& s, const std::string& what) { return s.find(what) != std::string::npos; }

// Sends `request` raw to 127.0.0.1:port and returns everything the server answers until it
// closes (5 s bounds on the connect and on each read), or "connect failed: <why>".
inline std::string raw_http(uint16_t port, const std::string& request) {
  auto fd = net::connect_tcp("127.0.0.1:" + std::to_string(port), std::chrono::seconds(5));
  if (!fd.ok()) return "connect failed: " + fd.status().message();
  (void)net::write_all(fd->get(), request.data(), request.size(), "http test client");
  timeval tv{5, 0};
  setsockopt(fd->get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  std::string out;
  char buf[16384];
  for (ssize_t n; (n = ::recv(fd->get(), buf, sizeof buf, 0)) > 0;) out.append(buf, static_cast<size_t>(n));
  return out;
}

// GET `path` (with "Authorization: <auth>" when given); the whole answer, headers included.
inline std::string get(uint16_t port, const std::string& path, const std::string& auth = "") {
  return raw_http(port, "GET " + path + " HTTP/1.1\r\nHost: x\r\n" +
                            (auth.empty() ? "" : "Authorization: " + auth + "\r\n") + "\r\n");
}

}  // namespace testing
}  // namespace actorflow
