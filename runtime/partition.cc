#include "runtime/partition.h"

#include <cctype>
#include <set>

#include "device/rendezvous_key.h"

namespace actorflow {

std::string default_rendezvous_key(const std::string& src_dev, const std::string& dst_dev, const std::string& edge) {
  return src_dev + ";" + dst_dev + ";" + edge;
}

namespace {

std::string sanitize(const std::string& device) {
  std::string out;
  for (char c : device) {
    if (std::isalnum(static_cast<unsigned char>(c))) out += c;
    else if (!out.empty() && out.back() != '_') out += '_';
  }
  while (!out.empty() && out.back() == '_') out.pop_back();
  return out;
}

class Partitioner {
 public:
  Partitioner(const Graph& g, const PartitionOptions& opts) : g_(g), opts_(opts) {}

  Result<std::map<std::string, Graph>> run() {
    const int n = g_.num_nodes();
    // Validate first, so no partial result is built.
    for (int id = 0; id < n; ++id) {
      const Node* node = g_.node(id);
      const std::string where = node->op + " '" + node->name + "'";
      if (node->assigned_device.empty())
        return InvalidArgument("partition: " + where + " has no assigned device (run the placer first)");
      for (size_t i = 0; i < node->inputs.size(); ++i) {
        const Endpoint& e = node->inputs[i];
        if (e.node < 0 || e.node >= n)
          return InvalidArgument("partition: input " + std::to_string(i) + " of " + where + " refers to node id " +
                                 std::to_string(e.node) + " which is not in the graph");
        const Node* src = g_.node(e.node);
        if (e.index < 0 || e.index >= src->num_outputs())
          return InvalidArgument("partition: input " + std::to_string(i) + " of " + where + " reads output " +
                                 std::to_string(e.index) + " of '" + src->name + "', which has " +
                                 std::to_string(src->num_outputs()) + " outputs");
      }
      for (int c : node->control_inputs)
        if (c < 0 || c >= n)
          return InvalidArgument("partition: a control input of " + where + " refers to node id " +
                                 std::to_string(c) + " which is not in the graph");
    }
    // Pass 1: copy every node into its device's partition, edges cleared.
    new_id_.assign(static_cast<size_t>(n), -1);
    for (int id = 0; id < n; ++id) {
      Node copy = *g_.node(id);
      copy.inputs.clear();
      copy.control_inputs.clear();
      Graph& part = parts_[copy.assigned_device];
      AF_ASSIGN_OR_RETURN(Node * added, part.add_node(std::move(copy)));
      new_id_[static_cast<size_t>(id)] = added->id;
    }
    // Pass 2: rebuild edges; cross-device ones go through _Send/_Recv pairs.
    for (int id = 0; id < n; ++id) {
      const Node* node = g_.node(id);
      const std::string& dst_dev = node->assigned_device;
      std::vector<Endpoint> inputs;
      std::vector<int> control;
      for (const Endpoint& e : node->inputs) {
        const Node* src = g_.node(e.node);
        if (src->assigned_device == dst_dev) {
          inputs.push_back(Endpoint{new_id_[static_cast<size_t>(e.node)], e.index});
        } else {
          AF_ASSIGN_OR_RETURN(int recv, data_recv(e, dst_dev));
          inputs.push_back(Endpoint{recv, 0});
        }
      }
      for (int c : node->control_inputs) {
        const Node* src = g_.node(c);
        if (src->assigned_device == dst_dev) {
          control.push_back(new_id_[static_cast<size_t>(c)]);
        } else {
          AF_ASSIGN_OR_RETURN(int recv, control_recv(c, dst_dev));
          if (std::find(control.begin(), control.end(), recv) == control.end()) control.push_back(recv);
        }
      }
      Node* copy = parts_[dst_dev].node(new_id_[static_cast<size_t>(id)]);
      copy->inputs = std::move(inputs);
      copy->control_inputs = std::move(control);
    }
    return std::move(parts_);
  }

 private:
  Result<std::string> key(const std::string& src, const std::string& dst, const std::string& edge) {
    if (opts_.key_fn) return opts_.key_fn(src, dst, edge);
    // The key is built (and checked) once, here; every hop reads its parsed form.
    const uint64_t inc = opts_.incarnation_of ? opts_.incarnation_of(src) : 0;
    auto k = RendezvousKey::make(src, inc, dst, edge);
    if (!k.ok()) return k.status().with_prefix("partition: edge '" + edge + "' from " + src + " to " + dst);
    return k->wire();
  }

  static std::string fresh_name(const Graph& part, const std::string& base) {
    if (!part.find(base)) return base;
    for (int i = 1;; ++i) {
      std::string cand = base + "_" + std::to_string(i);
      if (!part.find(cand)) return cand;
    }
  }

  // Adds the _Send (on src's device, reading `src_ep` of that partition) and the _Recv (on
  // dst_dev) of one edge; returns the _Recv's id in dst_dev's partition.
  Result<int> add_pair(const std::string& src_dev, Endpoint src_ep, const std::string& dst_dev,
                       const std::string& edge, const std::string& send_base, const std::string& recv_base,
                       DType dtype, const Shape& shape) {
    AF_ASSIGN_OR_RETURN(const std::string k, key(src_dev, dst_dev, edge));
    if (k.empty()) return InvalidArgument("partition: key_fn returned an empty key for edge '" + edge + "'");
    if (!keys_.insert(k).second)
      return InvalidArgument("partition: key_fn returned the key '" + k + "' for two different edges (the second is '" +
                             edge + "' from " + src_dev + " to " + dst_dev + ")");
    Graph& sp = parts_[src_dev];
    Node send;
    send.name = fresh_name(sp, send_base);
    send.op = "_Send";
    send.inputs = {src_ep};
    send.requested_device = src_dev;
    send.assigned_device = src_dev;
    send.attrs.set("tensor_name", k);
    send.attrs.set("send_device", src_dev);
    send.attrs.set("recv_device", dst_dev);
    send.attrs.set("client_terminated", false);
    AF_RETURN_IF_ERROR(sp.add_node(std::move(send)).status());

    Graph& dp = parts_[dst_dev];
    Node recv;
    recv.name = fresh_name(dp, recv_base);
    recv.op = "_Recv";
    recv.requested_device = dst_dev;
    recv.assigned_device = dst_dev;
    recv.attrs.set("tensor_name", k);
    recv.attrs.set("send_device", src_dev);
    recv.attrs.set("recv_device", dst_dev);
    recv.attrs.set("client_terminated", false);
    recv.attrs.set("dtype", dtype);
    recv.attrs.set("shape", shape);
    recv.output_types = {dtype};
    recv.output_shapes = {shape};
    AF_ASSIGN_OR_RETURN(Node * r, dp.add_node(std::move(recv)));
    return r->id;
  }

  Result<int> data_recv(const Endpoint& e, const std::string& dst_dev) {
    auto it = data_recvs_.find({e, dst_dev});
    if (it != data_recvs_.end()) return it->second;
    const Node* src = g_.node(e.node);
    const std::string idx = std::to_string(e.index);
    AF_ASSIGN_OR_RETURN(
        int r, add_pair(src->assigned_device, Endpoint{new_id_[static_cast<size_t>(e.node)], e.index}, dst_dev,
                        src->name + ":" + idx, "_send_" + src->name + "_" + idx + "_to_" + sanitize(dst_dev),
                        "_recv_" + src->name + "_" + idx + "_from_" + sanitize(src->assigned_device),
                        src->output_types[static_cast<size_t>(e.index)],
                        src->output_shapes[static_cast<size_t>(e.index)]));
    data_recvs_[{e, dst_dev}] = r;
    return r;
  }

  Result<int> control_recv(int src_id, const std::string& dst_dev) {
    auto it = control_recvs_.find({src_id, dst_dev});
    if (it != control_recvs_.end()) return it->second;
    const Node* src = g_.node(src_id);
    const std::string& src_dev = src->assigned_device;
    // One dummy scalar per source node, shared by the sends to every other device.
    auto cit = control_consts_.find(src_id);
    if (cit == control_consts_.end()) {
      Graph& sp = parts_[src_dev];
      Node c;
      c.name = fresh_name(sp, "_ctrl_" + src->name);
      c.op = "Const";
      c.control_inputs = {new_id_[static_cast<size_t>(src_id)]};
      c.requested_device = src_dev;
      c.assigned_device = src_dev;
      c.attrs.set("value", Tensor::scalar<float>(0.f));
      c.attrs.set("dtype", DType::kFloat32);
      c.output_types = {DType::kFloat32};
      c.output_shapes = {Shape{}};
      AF_ASSIGN_OR_RETURN(Node * added, sp.add_node(std::move(c)));
      cit = control_consts_.emplace(src_id, added->id).first;
    }
    AF_ASSIGN_OR_RETURN(int r, add_pair(src_dev, Endpoint{cit->second, 0}, dst_dev, "^" + src->name,
                                        "_send_ctrl_" + src->name + "_to_" + sanitize(dst_dev),
                                        "_recv_ctrl_" + src->name + "_from_" + sanitize(src_dev), DType::kFloat32,
                                        Shape{}));
    control_recvs_[{src_id, dst_dev}] = r;
    return r;
  }

  const Graph& g_;
  const PartitionOptions& opts_;
  std::map<std::string, Graph> parts_;
  std::vector<int> new_id_;
  std::map<std::pair<Endpoint, std::string>, int> data_recvs_;
  std::map<std::pair<int, std::string>, int> control_recvs_;
  std::map<int, int> control_consts_;
  std::set<std::string> keys_;
};

}  // namespace

Result<std::map<std::string, Graph>> partition_graph(const Graph& placed, const PartitionOptions& opts) {
  Partitioner p(placed, opts);
  return p.run();
}

}  // namespace actorflow
