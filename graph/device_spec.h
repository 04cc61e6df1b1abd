// DeviceSpec: TensorFlow device names, parsed, merged and printed.
//
// Accepts every TensorFlow form: "/cpu:0", "/GPU:1", "/device:GPU:1", "/gpu:*", "/job:*",
// "/device:*:1",
// "/job:worker/replica:0/task:1/device:CPU:0", partial specs ("/job:ps", "/task:2"),
// components in any order, and the empty string (matches every device). Device types are
// normalised to upper case ("CPU", "GPU"). Value type; thread-safe for const use.
#pragma once

#include <map>
#include <optional>
#include <string>

#include "core/status.h"

namespace actorflow {

struct DeviceSpec {
  std::optional<std::string> job;
  std::optional<int> replica;
  std::optional<int> task;
  std::optional<std::string> type;   // "CPU", "GPU"; unset means any
  std::optional<int> index;          // unset ("*" or absent) means any

  // Parses `s`. InvalidArgument naming the bad component and the whole string, e.g.
  // "malformed device '/job:worker/task:x': task index 'x' is not a number".
  static Result<DeviceSpec> parse(const std::string& s);
  // A fully specified device name.
  static DeviceSpec full(const std::string& job, int replica, int task, const std::string& type, int index);

  // Canonical form with only the set fields, in the order job, replica, task, device:
  // "/job:worker/replica:0/task:1/device:CPU:0"; "/device:GPU:*" when only the type is set.
  std::string to_string() const;
  // Short legacy form "/cpu:0" of the device part (TensorFlow's old names).
  std::string legacy_device_name() const;

  // Sets every field that `other` sets (other wins, as TensorFlow's nested tf.device). When
  // `other` changes an already set device type, the index is reset unless `other` sets one:
  // "/gpu:1" merged with "/device:CPU" is "/device:CPU:*".
  void merge_from(const DeviceSpec& other);
  // Sets fields of `defaults` that this spec leaves unset. The device index is taken from
  // `defaults` only when the type is unset here or equal to the default's type.
  void fill_from(const DeviceSpec& defaults);
  // True when every field set here equals the same field of `device` (a concrete name).
  bool matches(const DeviceSpec& device) const;
  // True when this spec and `other` could name a common device (no set field differs).
  bool compatible_with(const DeviceSpec& other) const;
  bool fully_specified() const { return job && replica && task && type && index; }
  bool empty() const { return !job && !replica && !task && !type && !index; }

  bool operator==(const DeviceSpec& o) const {
    return job == o.job && replica == o.replica && task == o.task && type == o.type && index == o.index;
  }
  bool operator!=(const DeviceSpec& o) const { return !(*this == o); }
};

// Applies the first of `aliases` (task prefix -> task prefix, e.g. "/job:ps/replica:0/task:0" ->
// "/job:ps/replica:0/task:1") whose key names `s`'s job and task (and its replica, when `s` sets
// one): `s` then names the value's job, replica and task, keeping its device part. Keys or
// values that do not parse to a job and task are skipped. Returns whether `s` changed. Pure.
bool apply_task_aliases(DeviceSpec& s, const std::map<std::string, std::string>& aliases);

}  // namespace actorflow
