#include "runtime/placer.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <set>
#include <tuple>

#include "core/logging.h"
#include "graph/device_spec.h"

namespace actorflow {

namespace {

std::string describe(const Node& n) { return "'" + n.name + "' (" + n.op + ")"; }

struct UnionFind {
  explicit UnionFind(int n) : parent(static_cast<size_t>(n)) { std::iota(parent.begin(), parent.end(), 0); }
  int find(int x) {
    while (parent[static_cast<size_t>(x)] != x) {
      parent[static_cast<size_t>(x)] = parent[static_cast<size_t>(parent[static_cast<size_t>(x)])];
      x = parent[static_cast<size_t>(x)];
    }
    return x;
  }
  void unite(int a, int b) {
    a = find(a);
    b = find(b);
    if (a == b) return;
    if (b < a) std::swap(a, b);
    parent[static_cast<size_t>(b)] = a;  // the lowest id is the root
  }
  std::vector<int> parent;
};

int type_rank(const std::string& t) {
  if (t == "GPU") return 0;
  if (t == "CPU") return 1;
  return 2;
}

struct Dev {
  std::string name;
  std::string type;
  DeviceSpec spec;
};

// Sort key: lowest job/replica/task, then GPU before CPU before others, then lowest index.
bool dev_less(const Dev& a, const Dev& b) {
  return std::make_tuple(*a.spec.job, *a.spec.replica, *a.spec.task, type_rank(*a.spec.type), *a.spec.type,
                         *a.spec.index) <
         std::make_tuple(*b.spec.job, *b.spec.replica, *b.spec.task, type_rank(*b.spec.type), *b.spec.type,
                         *b.spec.index);
}

DeviceSpec task_part(const DeviceSpec& s) {
  DeviceSpec t = s;
  t.type.reset();
  t.index.reset();
  return t;
}

// Which member set each field of a group's merged request (for error messages).
struct MergedRequest {
  DeviceSpec spec;
  const Node* job_by = nullptr;
  const Node* replica_by = nullptr;
  const Node* task_by = nullptr;
  const Node* type_by = nullptr;   // also the node named in "explicitly assigned to"
  const Node* index_by = nullptr;
  const Node* first_request = nullptr;
  DeviceSpec first_request_spec;
  bool type_dropped = false;       // soft placement resolved a type/index conflict
};

class Placer {
 public:
  Placer(Graph& g, const std::vector<AvailableDevice>& devices, const PlacerOptions& opts)
      : g_(g), in_devices_(devices), opts_(opts), uf_(g.num_nodes()) {}

  Result<std::vector<std::string>> run() {
    AF_RETURN_IF_ERROR(parse_devices());
    AF_RETURN_IF_ERROR(parse_requests());
    build_groups();
    std::vector<int> order;
    auto topo = g_.topological_order();
    if (topo.ok()) {
      order = std::move(*topo);
    } else {
      order.resize(static_cast<size_t>(g_.num_nodes()));
      std::iota(order.begin(), order.end(), 0);
    }
    group_device_.assign(static_cast<size_t>(g_.num_nodes()), -1);
    for (int id : order) {
      int root = uf_.find(id);
      if (group_device_[static_cast<size_t>(root)] >= 0) continue;
      AF_ASSIGN_OR_RETURN(int d, place_group(root, id));
      group_device_[static_cast<size_t>(root)] = d;
    }
    std::vector<std::string> lines;
    lines.reserve(static_cast<size_t>(g_.num_nodes()));
    for (int id = 0; id < g_.num_nodes(); ++id) {
      Node* n = g_.node(id);
      n->assigned_device = devs_[static_cast<size_t>(group_device_[static_cast<size_t>(uf_.find(id))])].name;
      lines.push_back(n->name + ": (" + n->op + "): " + n->assigned_device);
      if (opts_.log_device_placement) {
        AF_LOG(INFO) << lines.back();
      }
    }
    return lines;
  }

 private:
  Status parse_devices() {
    if (in_devices_.empty()) return InvalidArgument("placer: the cluster has no devices");
    std::set<std::string> seen;
    for (const auto& d : in_devices_) {
      auto s = DeviceSpec::parse(d.name);
      if (!s.ok()) return s.status().with_prefix("placer: available device");
      if (!s->fully_specified())
        return InvalidArgument("placer: available device '" + d.name +
                               "' is not a full name (/job:J/replica:R/task:T/device:TYPE:N)");
      if (*s->type != d.type)
        return InvalidArgument("placer: available device '" + d.name + "' has type '" + d.type +
                               "' but its name says " + *s->type);
      Dev dev{s->to_string(), *s->type, *s};
      if (!seen.insert(dev.name).second) return InvalidArgument("placer: device '" + dev.name + "' is listed twice");
      devs_.push_back(std::move(dev));
      types_.insert(*s->type);
    }
    std::sort(devs_.begin(), devs_.end(), dev_less);
    if (!opts_.default_device.empty()) {
      auto d = DeviceSpec::parse(opts_.default_device);
      if (!d.ok()) return d.status().with_prefix("placer: default device");
      default_ = *d;
    }
    return Status::OK();
  }

  Status parse_requests() {
    requests_.resize(static_cast<size_t>(g_.num_nodes()));
    for (int id = 0; id < g_.num_nodes(); ++id) {
      const Node* n = g_.node(id);
      const std::string& req = n->assigned_device.empty() ? n->requested_device : n->assigned_device;
      auto s = DeviceSpec::parse(req);
      if (!s.ok())
        return InvalidArgument("Cannot assign a device for operation " + describe(*n) + ": " + s.status().message());
      apply_task_aliases(*s, opts_.task_aliases);  // a failed-over ps task's requests go to its backup
      requests_[static_cast<size_t>(id)] = *s;
    }
    return Status::OK();
  }

  void build_groups() {
    for (int id = 0; id < g_.num_nodes(); ++id) {
      const Node* n = g_.node(id);
      for (const auto& other : n->colocate_with) {
        if (const Node* o = g_.find(other)) uf_.unite(id, o->id);  // pruned names are ignored
      }
      if (!n->inputs.empty()) {
        const Node* src = g_.node(n->inputs[0].node);
        if (n->op == "_Retval") uf_.unite(id, src->id);
        else if (is_ref_consumer_op(n->op) && is_variable_op(src->op)) uf_.unite(id, src->id);
      }
    }
    members_.assign(static_cast<size_t>(g_.num_nodes()), {});
    for (int id = 0; id < g_.num_nodes(); ++id) members_[static_cast<size_t>(uf_.find(id))].push_back(id);
  }

  bool has_kernel(const std::string& op, const std::string& type) const {
    return !opts_.has_kernel || opts_.has_kernel(op, type);
  }

  bool has_any_kernel(const std::string& op) {
    auto it = any_kernel_.find(op);
    if (it != any_kernel_.end()) return it->second;
    bool any = has_kernel(op, "CPU") || has_kernel(op, "GPU");
    for (const auto& t : types_) any = any || has_kernel(op, t);
    any_kernel_[op] = any;
    return any;
  }

  // The first op of the group without a kernel for `type`, or "" when all are supported.
  std::string unsupported_op(int root, const std::string& type) {
    for (int m : members_[static_cast<size_t>(root)]) {
      const std::string& op = g_.node(m)->op;
      if (!has_kernel(op, type) && has_any_kernel(op)) return op;
    }
    return "";
  }

  Result<MergedRequest> merge_requests(int root) {
    MergedRequest m;
    DeviceSpec& s = m.spec;
    for (int id : members_[static_cast<size_t>(root)]) {
      const Node* n = g_.node(id);
      const DeviceSpec& r = requests_[static_cast<size_t>(id)];
      if (r.empty()) continue;
      if (!m.first_request) {
        m.first_request = n;
        m.first_request_spec = r;
      }
      auto conflict = [&](const Node* by, const std::string& what) {
        return InvalidArgument("Cannot colocate nodes " + describe(*by) + " and " + describe(*n) +
                               ": they must share a device but request different " + what + " (" +
                               requests_[static_cast<size_t>(by->id)].to_string() + " vs " + r.to_string() + ")");
      };
      if (r.job) {
        if (s.job && *s.job != *r.job) return conflict(m.job_by, "jobs");
        if (!s.job) { s.job = r.job; m.job_by = n; }
      }
      if (r.replica) {
        if (s.replica && *s.replica != *r.replica) return conflict(m.replica_by, "replicas");
        if (!s.replica) { s.replica = r.replica; m.replica_by = n; }
      }
      if (r.task) {
        if (s.task && *s.task != *r.task) return conflict(m.task_by, "tasks");
        if (!s.task) { s.task = r.task; m.task_by = n; }
      }
      if (m.type_dropped) continue;
      const Node* clash = nullptr;
      std::string what;
      if (r.type && s.type && *s.type != *r.type) { clash = m.type_by; what = "device types"; }
      else if (r.index && s.index && *s.index != *r.index) { clash = m.index_by; what = "device indices"; }
      if (clash) {
        if (!opts_.allow_soft_placement) return conflict(clash, what);
        AF_LOG(WARNING) << "Nodes " << describe(*clash) << " and " << describe(*n) << " must share a device but request "
                        << requests_[static_cast<size_t>(clash->id)].to_string() << " and " << r.to_string()
                        << "; soft placement ignores the device type and index for their group";
        m.type_dropped = true;
        s.type.reset();
        s.index.reset();
        continue;
      }
      if (r.type && !s.type) { s.type = r.type; m.type_by = n; }
      if (r.index && !s.index) { s.index = r.index; m.index_by = n; }
    }
    if (!m.type_by) m.type_by = m.index_by ? m.index_by : m.first_request;
    return m;
  }

  std::string device_list() const {
    std::string out = "[ ";
    for (size_t i = 0; i < in_devices_.size(); ++i) out += (i ? ", " : "") + in_devices_[i].name;
    return out + " ]";
  }

  std::string task_list() const {
    std::set<std::string> tasks;
    for (const auto& d : devs_) tasks.insert(task_part(d.spec).to_string());
    std::string out = "[ ";
    bool first = true;
    for (const auto& t : tasks) { out += (first ? "" : ", ") + t; first = false; }
    return out + " ]";
  }

  // Index into devs_ of the best device matching `spec` whose type has the group's kernels.
  int best_matching(int root, const DeviceSpec& spec) {
    for (size_t i = 0; i < devs_.size(); ++i) {
      if (spec.matches(devs_[i].spec) && unsupported_op(root, devs_[i].type).empty()) return static_cast<int>(i);
    }
    return -1;
  }

  Result<int> place_group(int root, int first_in_order) {
    AF_ASSIGN_OR_RETURN(MergedRequest m, merge_requests(root));
    const Node* who = m.type_by ? m.type_by : g_.node(first_in_order);
    // Hard constraints: the request, with job (and, for the default's own job, replica and
    // task) taken from the default device.
    DeviceSpec hard = m.spec;
    if (!hard.job) hard.job = default_.job;
    if (hard.job == default_.job) {
      if (!hard.replica) hard.replica = default_.replica;
      if (!hard.task) hard.task = default_.task;
    }
    // The requested task must exist, soft placement or not.
    const DeviceSpec task = task_part(hard);
    if (std::none_of(devs_.begin(), devs_.end(), [&](const Dev& d) { return task.matches(d.spec); })) {
      return InvalidArgument("Cannot assign a device for operation " + describe(*who) + ": it requests " +
                             (m.first_request ? m.first_request_spec.to_string() : std::string("nothing")) +
                             (default_.empty() ? std::string() : " (with default device " + default_.to_string() + ")") +
                             ", but the cluster has no task " + task.to_string() + "; its tasks are " + task_list());
    }
    // Preference: the default device's type and index, or the first input's device when
    // nothing at all is requested and there is no default.
    DeviceSpec pref = hard;
    if (!default_.empty()) {
      DeviceSpec dflt_dev;
      dflt_dev.type = default_.type;
      dflt_dev.index = default_.index;
      pref.fill_from(dflt_dev);
    } else if (m.spec.empty()) {
      const Node* first = g_.node(first_in_order);
      if (!first->inputs.empty()) {
        int src_root = uf_.find(first->inputs[0].node);
        int d = group_device_[static_cast<size_t>(src_root)];
        if (d >= 0) pref = devs_[static_cast<size_t>(d)].spec;
      }
    }
    int d = best_matching(root, pref);
    if (d < 0) d = best_matching(root, hard);
    if (d >= 0) return d;

    // Nothing fits the request: the device does not exist, or lacks a kernel.
    bool exists = false;
    std::string missing_op;
    for (const auto& dev : devs_) {
      if (!hard.matches(dev.spec)) continue;
      exists = true;
      if (missing_op.empty()) missing_op = unsupported_op(root, dev.type);
    }
    const std::string wanted = hard.to_string();
    const std::string type = hard.type ? *hard.type : std::string("any");
    if (!opts_.allow_soft_placement) {
      const std::string asked = m.type_by ? requests_[static_cast<size_t>(m.type_by->id)].to_string() : wanted;
      if (!exists)
        return InvalidArgument("Cannot assign a device for operation " + describe(*who) +
                               ": Operation was explicitly assigned to " + asked + " but available devices are " +
                               device_list() + ". Make sure the device specification refers to a valid device.");
      return InvalidArgument("Cannot assign a device for operation " + describe(*who) +
                             ": Could not satisfy explicit device specification '" + asked +
                             "' because no supported kernel for " + type + " devices is available (op " + missing_op +
                             "); soft placement is off");
    }
    // Soft placement: a device of the same task with the kernels, the requested type first,
    // then CPU, then anything else.
    int best = -1;
    int best_rank = 3;
    for (size_t i = 0; i < devs_.size(); ++i) {
      const Dev& dev = devs_[i];
      if (!task.matches(dev.spec) || !unsupported_op(root, dev.type).empty()) continue;
      int rank = (hard.type && dev.type == *hard.type) ? 0 : dev.type == "CPU" ? 1 : 2;
      if (rank < best_rank) { best = static_cast<int>(i); best_rank = rank; }
    }
    if (best < 0) {
      std::string ops;
      for (int id : members_[static_cast<size_t>(root)]) ops += (ops.empty() ? "" : ", ") + g_.node(id)->op;
      return InvalidArgument("Cannot assign a device for operation " + describe(*who) + ": no device of task " +
                             task.to_string() + " has kernels for every op of its colocation group [" + ops +
                             "]; devices are " + device_list());
    }
    const std::string why = exists ? "which has no " + type + " kernel for " + missing_op : "which does not exist";
    AF_LOG(WARNING) << "Node '" << who->name << "' requested " << wanted << " " << why
                    << "; soft placement put it on " << devs_[static_cast<size_t>(best)].name;
    return best;
  }

  Graph& g_;
  const std::vector<AvailableDevice>& in_devices_;
  const PlacerOptions& opts_;
  UnionFind uf_;
  std::vector<Dev> devs_;
  std::set<std::string> types_;
  DeviceSpec default_;
  std::vector<DeviceSpec> requests_;
  std::vector<std::vector<int>> members_;
  std::vector<int> group_device_;
  std::map<std::string, bool> any_kernel_;
};

}  // namespace

Result<std::vector<std::string>> place_graph(Graph& g, const std::vector<AvailableDevice>& devices,
                                             const PlacerOptions& opts) {
  Placer p(g, devices, opts);
  return p.run();
}

}  // namespace actorflow
