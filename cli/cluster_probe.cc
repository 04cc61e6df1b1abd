#include "cli/cluster_probe.h"

#include <algorithm>
#include <cstdio>

#include "actorflow/embedding.h"
#include "cli/commands.h"
#include "net/metrics_http.h"
#include "config/cluster_spec.h"  // the cluster file's options

namespace actorflow {
namespace cli {
namespace {

struct Sample {
  std::map<std::string, double> m;
  std::chrono::steady_clock::time_point at;
};

double get(const std::map<std::string, double>& m, const std::string& k) {
  auto it = m.find(k);
  return it == m.end() ? NAN : it->second;
}

double rate(const Sample& a, const Sample& b, const std::string& k) {
  const double dt = std::chrono::duration<double>(b.at - a.at).count();
  const double va = get(a.m, k), vb = get(b.m, k);
  if (dt <= 0 || std::isnan(vb)) return NAN;
  return ((std::isnan(va) ? 0 : vb - va)) / dt;
}

}  // namespace

std::string human_bytes(double b) {
  if (std::isnan(b)) return "-";
  const char* unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) {
    b /= 1024;
    ++u;
  }
  char o[32];
  std::snprintf(o, sizeof o, u == 0 ? "%.0f%s" : "%.1f%s", b, unit[u]);
  return o;
}

std::string json_num(double v) {
  if (std::isnan(v) || std::isinf(v)) return "null";
  char o[40];
  std::snprintf(o, sizeof o, "%.6g", v);
  return o;
}

std::string json_str(const std::string& s) {
  std::string o = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\', o += c;
    else if (static_cast<unsigned char>(c) < 0x20) {
      char b[8];
      std::snprintf(b, sizeof b, "\\u%04x", c);
      o += b;
    } else if (c == '<') {
      o += "\\u003c";  // safe inside an HTML page too
    } else o += c;
  }
  return o + "\"";
}

struct ClusterProbe::Impl {
  ClusterSpec cluster;
  MembershipConfig mc;
  std::chrono::milliseconds timeout;
  std::unique_ptr<caf::actor_system_config> cfg;
  std::unique_ptr<caf::actor_system> sys;
  std::unique_ptr<Membership> m;
  std::vector<TaskId> tasks;
  std::map<std::string, Sample> last;  // the previous scrape of each task

  // GET `path` of task t's metrics endpoint; `bound`: the timeout (the probe's by default).
  Result<std::string> get(const TaskId& t, const std::string& path,
                          std::chrono::milliseconds bound = std::chrono::milliseconds(0)) {
    const ServerOptions so = cluster.server_options(t);
    auto addr = cluster.task_address(t);
    AF_RETURN_IF_ERROR(addr.status());
    std::string host = addr->substr(0, addr->rfind(':'));
    if (host == "localhost") host = "127.0.0.1";
    if (host.size() > 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
    // With a secret the endpoint must first prove it is task `t` (net/metrics_http.h): a process
    // on a stopped task's port is refused by name and learns nothing.
    net::ScrapeOptions o;
    o.secret = mc.secret;
    o.task = t.to_string();
    o.fingerprint = cluster.fingerprint();
    o.tls = mc.tls;
    o.timeout = bound.count() > 0 ? bound : timeout;
    o.path = path;
    return net::scrape_metrics(host, static_cast<uint16_t>(so.metrics_port), o);
  }

  // `bound`: the scrape's timeout (the probe's by default).
  Result<std::pair<Sample, std::string>> scrape(const TaskId& t, std::chrono::milliseconds bound = std::chrono::milliseconds(0)) {
    AF_ASSIGN_OR_RETURN(std::string text, get(t, "/metrics", bound));
    return std::make_pair(Sample{net::sum_by_family(text), std::chrono::steady_clock::now()}, std::move(text));
  }
};

ClusterProbe::ClusterProbe(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ClusterProbe::~ClusterProbe() {
  if (!impl_) return;
  impl_->m.reset();  // the membership before its actor system
  impl_->sys.reset();
}

Result<std::unique_ptr<ClusterProbe>> ClusterProbe::create(const std::string& cluster_path, const std::string& tool,
                                                           std::chrono::milliseconds timeout) {
  AF_ASSIGN_OR_RETURN(ClusterSpec cluster, load_cluster(cluster_path));
  AF_ASSIGN_OR_RETURN(MembershipConfig mc, tool_membership_config(cluster, tool));
  auto impl = std::make_unique<Impl>(Impl{std::move(cluster), std::move(mc), timeout, nullptr, nullptr, nullptr, {}, {}});
  impl->cfg = std::make_unique<caf::actor_system_config>();
  Server::configure(*impl->cfg);
  impl->sys = std::make_unique<caf::actor_system>(*impl->cfg);
  impl->m = std::make_unique<Membership>(*impl->sys, impl->mc);
  impl->tasks = impl->cluster.all_tasks();
  return std::unique_ptr<ClusterProbe>(new ClusterProbe(std::move(impl)));
}

const ClusterSpec& ClusterProbe::cluster() const { return impl_->cluster; }
size_t ClusterProbe::num_tasks() const { return impl_->tasks.size(); }

void ClusterProbe::prime() {
  for (const auto& t : impl_->tasks)
    if (impl_->cluster.server_options(t).metrics_port > 0) {
      auto s = impl_->scrape(t);
      if (s.ok()) impl_->last[t.to_string()] = std::move(s->first);
    }
}

std::vector<std::pair<std::string, Result<std::string>>> ClusterProbe::fetch_all(const std::string& path) {
  std::vector<std::pair<std::string, Result<std::string>>> out;
  for (const auto& t : impl_->tasks) {
    if (impl_->cluster.server_options(t).metrics_port <= 0) {
      out.emplace_back(t.device_prefix(), FailedPrecondition("it has no [server] metrics_port in the cluster file, so " +
                                                             path + " cannot be read; give it one"));
      continue;
    }
    out.emplace_back(t.device_prefix(), impl_->get(t, path));
  }
  return out;
}

std::vector<TaskRow> ClusterProbe::poll() {
  Impl& d = *impl_;
  std::vector<TaskRow> rows;
  for (const auto& t : d.tasks) {
    TaskRow r;
    r.task = t.to_string();
    auto addr = d.cluster.task_address(t);
    r.address = addr.ok() ? *addr : "?";
    r.role = t == d.cluster.supervisor().chief ? "chief" : t.job;
    auto p = addr.ok() ? d.m->ensure(t.device_prefix(), *addr, d.timeout) : Result<PeerInfo>(addr.status());
    if (!p.ok()) {
      r.why = p.status().message();
      // Something else answering a down task's metrics port is worth saying (it proved nothing
      // and got nothing); a closed port is not. Bounded shorter than a poll: a host that is off
      // must not cost the poll twice.
      if (d.cluster.server_options(t).metrics_port > 0) {
        auto scraped = d.scrape(t, std::min(d.timeout, std::chrono::milliseconds(500)));
        if (!scraped.ok() && scraped.status().code() == Code::kUnauthenticated) r.metrics_error = scraped.status().message();
      }
      rows.push_back(r);
      continue;
    }
    r.up = true;
    r.state = "UP";
    for (const auto& dev : p->devices)
      r.devices += (r.devices.empty() ? "" : " ") + dev.name.substr(dev.name.find("/device:") + 1);
    if (d.cluster.server_options(t).metrics_port > 0) {
      auto scraped = d.scrape(t);
      if (!scraped.ok()) {
        r.metrics_error = scraped.status().message();
      } else {
        Sample& now = scraped->first;
        r.measured = true;
        auto prev = d.last.find(r.task);
        r.global_step = get(now.m, "actorflow_global_step");
        r.rss = get(now.m, "process_resident_memory_bytes");
        r.failures = get(now.m, "actorflow_actor_failures_total");
        if (std::isnan(r.failures)) r.failures = 0;
        r.sync_stale = get(now.m, "actorflow_sync_stale_gradients_total");
        r.sync_short = get(now.m, "actorflow_sync_short_steps_total");
        const double start = get(now.m, "process_start_time_seconds");
        r.uptime = std::isnan(start) ? NAN
                                     : static_cast<double>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                                               std::chrono::system_clock::now().time_since_epoch())
                                                               .count()) / 1000.0 - start;
        const double hb_n = get(now.m, "actorflow_heartbeat_rtt_seconds_count");
        if (hb_n > 0) r.hb_rtt_ms = 1000 * get(now.m, "actorflow_heartbeat_rtt_seconds_sum") / hb_n;
        // Rates only against a scrape of the same process (a restarted task starts its counters over).
        if (prev != d.last.end() && get(prev->second.m, "process_start_time_seconds") == start) {
          r.steps_per_sec = rate(prev->second, now, "actorflow_session_runs_total");
          r.cpu_pct = 100 * rate(prev->second, now, "process_cpu_seconds_total");
          r.net_in = rate(prev->second, now, "actorflow_data_plane_received_bytes_total");
          r.net_out = rate(prev->second, now, "actorflow_data_plane_sent_bytes_total");
        }
        r.families = now.m;
        r.summaries = net::sum_by_label(scraped->second, "actorflow_summary", "tag");
        r.faults_by_kind = net::sum_by_label(scraped->second, "actorflow_faults_injected_total", "kind");
        d.last[r.task] = std::move(now);
      }
    }
    rows.push_back(std::move(r));
  }
  return rows;
}

}  // namespace cli
}  // namespace actorflow
