// DeviceSpec: every TensorFlow device-name form, canonical printing, error messages that
// name the bad part, and the merge/fill/match rules the placer and Scope rely on.
#include <gtest/gtest.h>

#include "graph/device_spec.h"

namespace actorflow {
namespace {

struct ValidCase {
  const char* in;
  const char* canonical;
};

TEST(DeviceSpecTest, ValidFormsPrintCanonically) {
  const ValidCase cases[] = {
      {"", ""},
      {"/", ""},
      {"/cpu:0", "/device:CPU:0"},
      {"/CPU:0", "/device:CPU:0"},
      {"/gpu:1", "/device:GPU:1"},
      {"/GPU:1", "/device:GPU:1"},
      {"/Gpu:3", "/device:GPU:3"},
      {"/gpu:*", "/device:GPU:*"},
      {"/device:GPU:1", "/device:GPU:1"},
      {"/device:gpu:1", "/device:GPU:1"},
      {"/device:CPU", "/device:CPU:*"},
      {"/device:CPU:*", "/device:CPU:*"},
      {"/device:*:2", "/device:*:2"},
      {"/device:*", ""},
      {"/device:XLA_CPU:0", "/device:XLA_CPU:0"},
      {"cpu:0", "/device:CPU:0"},
      {"/job:worker/replica:0/task:1/device:CPU:0", "/job:worker/replica:0/task:1/device:CPU:0"},
      {"/job:localhost/replica:0/task:0/gpu:0", "/job:localhost/replica:0/task:0/device:GPU:0"},
      {"/job:ps", "/job:ps"},
      {"/job:ps_2-b", "/job:ps_2-b"},
      {"/task:2", "/task:2"},
      {"/replica:3", "/replica:3"},
      {"/job:worker/task:7", "/job:worker/task:7"},
      {"/job:*/task:1", "/task:1"},
      {"/job:worker/replica:*/task:*/device:GPU:*", "/job:worker/device:GPU:*"},
      // Any order, canonical output order is job, replica, task, device.
      {"/device:GPU:1/task:2/job:worker", "/job:worker/task:2/device:GPU:1"},
      {"/gpu:0/replica:1/job:ps", "/job:ps/replica:1/device:GPU:0"},
      {"/task:3/job:a", "/job:a/task:3"},
      // Repeating a component with the same value is harmless.
      {"/task:1/task:1", "/task:1"},
      {"/cpu:0/device:CPU:0", "/device:CPU:0"},
      {"/task:007", "/task:7"},
      {"/task:999999999", "/task:999999999"},
  };
  for (const auto& c : cases) {
    auto r = DeviceSpec::parse(c.in);
    ASSERT_TRUE(r.ok()) << "'" << c.in << "': " << r.status();
    EXPECT_EQ(r->to_string(), c.canonical) << "input '" << c.in << "'";
    // The canonical form parses back to the same spec.
    auto again = DeviceSpec::parse(r->to_string());
    ASSERT_TRUE(again.ok()) << r->to_string() << ": " << again.status();
    EXPECT_EQ(*again, *r) << c.in;
  }
}

TEST(DeviceSpecTest, FieldsOfAFullName) {
  auto r = DeviceSpec::parse("/job:worker/replica:2/task:5/device:GPU:3");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r->job, "worker");
  EXPECT_EQ(*r->replica, 2);
  EXPECT_EQ(*r->task, 5);
  EXPECT_EQ(*r->type, "GPU");
  EXPECT_EQ(*r->index, 3);
  EXPECT_TRUE(r->fully_specified());
  EXPECT_FALSE(r->empty());
  EXPECT_EQ(r->legacy_device_name(), "/gpu:3");
  auto p = DeviceSpec::parse("/job:ps");
  ASSERT_TRUE(p.ok());
  EXPECT_FALSE(p->fully_specified());
  EXPECT_FALSE(p->replica.has_value());
  EXPECT_TRUE(DeviceSpec::parse("")->empty());
  EXPECT_EQ(DeviceSpec::full("w", 0, 1, "cpu", 2).to_string(), "/job:w/replica:0/task:1/device:CPU:2");
  EXPECT_EQ(DeviceSpec::parse("/device:GPU:*")->legacy_device_name(), "/gpu:*");
}

struct InvalidCase {
  const char* in;
  const char* must_contain;
};

TEST(DeviceSpecTest, MalformedNamesAreRejectedNamingTheBadPart) {
  const InvalidCase cases[] = {
      {"/job:worker/task:x", "task index 'x' is not a number"},
      {"/replica:-1", "replica index '-1' is not a number"},
      {"/task:", "task index '' is not a number"},
      {"/task:1/task:2", "task given twice"},
      {"/task:99999999999", "task index '99999999999' is out of range"},
      {"/gpu:x", "device index 'x' is not a number"},
      {"/device:GPU:one", "device index 'one' is not a number"},
      {"/device:GPU:1:2", "component 'device:GPU:1:2' should be device:TYPE:N"},
      {"/device", "component 'device' should be device:TYPE:N"},
      {"/device:G-PU:0", "device type 'G-PU' is not a name"},
      {"/device:0:0", "device type '0' is not a name"},
      {"/cpu:0/gpu:0", "device type given twice ('CPU' and 'GPU')"},
      {"/cpu", "component 'cpu' should be cpu:N"},
      {"/tpu:0", "unknown component 'tpu:0'"},
      {"/foo", "unknown component 'foo'"},
      {"/jobs:worker", "unknown component 'jobs:worker'"},
      {"/job:worker//task:1", "empty component"},
      {"/job:worker/", "empty component"},
      {"/job:", "job name '' must start with a letter"},
      {"/job:1abc", "job name '1abc' must start with a letter"},
      {"/job:wor ker", "job name 'wor ker'"},
      {"/job:a/job:b", "job given twice ('a' and 'b')"},
      {"/job:a:b", "component 'job:a:b' should be job:NAME"},
      {"/task:1:2", "component 'task:1:2' should be task:N"},
      {"/replica", "component 'replica' should be replica:N"},
  };
  for (const auto& c : cases) {
    auto r = DeviceSpec::parse(c.in);
    ASSERT_FALSE(r.ok()) << "'" << c.in << "' parsed as " << r->to_string();
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument) << c.in;
    const std::string m = r.status().message();
    EXPECT_NE(m.find(c.must_contain), std::string::npos) << "input '" << c.in << "': " << m;
    // Every message quotes the whole input.
    EXPECT_NE(m.find(std::string("malformed device '") + c.in + "'"), std::string::npos) << m;
  }
}

TEST(DeviceSpecTest, MergeFromOverridesSetFields) {
  auto merge = [](const char* outer, const char* inner) {
    DeviceSpec a = *DeviceSpec::parse(outer);
    a.merge_from(*DeviceSpec::parse(inner));
    return a.to_string();
  };
  EXPECT_EQ(merge("/job:worker/task:1", "/gpu:0"), "/job:worker/task:1/device:GPU:0");
  EXPECT_EQ(merge("/job:worker/task:1/device:GPU:0", "/task:2"), "/job:worker/task:2/device:GPU:0");
  EXPECT_EQ(merge("/job:worker/task:1", "/job:ps"), "/job:ps/task:1");
  EXPECT_EQ(merge("/gpu:1", "/device:CPU"), "/device:CPU:*");  // a new type resets the index
  EXPECT_EQ(merge("/gpu:1", "/device:GPU"), "/device:GPU:1");  // the same type keeps it
  EXPECT_EQ(merge("/gpu:1", "/cpu:0"), "/device:CPU:0");
  EXPECT_EQ(merge("/device:*:1", "/device:GPU"), "/device:GPU:1");  // no type before: keep index
  EXPECT_EQ(merge("/job:a/replica:0/task:0/cpu:0", ""), "/job:a/replica:0/task:0/device:CPU:0");
  EXPECT_EQ(merge("", "/job:a"), "/job:a");
}

TEST(DeviceSpecTest, FillFromSetsOnlyUnsetFields) {
  const DeviceSpec dflt = *DeviceSpec::parse("/job:localhost/replica:0/task:0/device:CPU:0");
  auto fill = [&](const char* s, const DeviceSpec& d) {
    DeviceSpec a = *DeviceSpec::parse(s);
    a.fill_from(d);
    return a.to_string();
  };
  EXPECT_EQ(fill("", dflt), "/job:localhost/replica:0/task:0/device:CPU:0");
  EXPECT_EQ(fill("/gpu:1", dflt), "/job:localhost/replica:0/task:0/device:GPU:1");
  EXPECT_EQ(fill("/job:ps", dflt), "/job:ps/replica:0/task:0/device:CPU:0");
  EXPECT_EQ(fill("/task:3/cpu:1", dflt), "/job:localhost/replica:0/task:3/device:CPU:1");
  // A type without index takes the default's index only for the same type.
  EXPECT_EQ(fill("/device:GPU", dflt), "/job:localhost/replica:0/task:0/device:GPU:*");
  EXPECT_EQ(fill("/device:CPU", dflt), "/job:localhost/replica:0/task:0/device:CPU:0");
  // An index without type keeps its index and takes the default's type.
  EXPECT_EQ(fill("/device:*:2", dflt), "/job:localhost/replica:0/task:0/device:CPU:2");
  EXPECT_EQ(fill("/job:w", DeviceSpec{}), "/job:w");
}

TEST(DeviceSpecTest, MatchesAndCompatibleWith) {
  const DeviceSpec dev = *DeviceSpec::parse("/job:worker/replica:0/task:1/device:GPU:0");
  auto matches = [&](const char* s) { return DeviceSpec::parse(s)->matches(dev); };
  EXPECT_TRUE(matches(""));
  EXPECT_TRUE(matches("/job:worker"));
  EXPECT_TRUE(matches("/task:1/gpu:0"));
  EXPECT_TRUE(matches("/gpu:*"));
  EXPECT_TRUE(matches("/device:*:0"));
  EXPECT_TRUE(matches("/job:worker/replica:0/task:1/device:GPU:0"));
  EXPECT_FALSE(matches("/job:ps"));
  EXPECT_FALSE(matches("/task:0"));
  EXPECT_FALSE(matches("/replica:1"));
  EXPECT_FALSE(matches("/cpu:0"));
  EXPECT_FALSE(matches("/gpu:1"));
  // matches() reads the other side as a concrete device: an unset field there fails a set one.
  EXPECT_FALSE(DeviceSpec::parse("/task:1")->matches(*DeviceSpec::parse("/job:worker")));

  auto compat = [](const char* a, const char* b) {
    bool ab = DeviceSpec::parse(a)->compatible_with(*DeviceSpec::parse(b));
    bool ba = DeviceSpec::parse(b)->compatible_with(*DeviceSpec::parse(a));
    EXPECT_EQ(ab, ba) << a << " vs " << b;  // symmetric
    return ab;
  };
  EXPECT_TRUE(compat("/job:worker", "/task:1"));
  EXPECT_TRUE(compat("/job:worker/gpu:0", "/job:worker/task:3"));
  EXPECT_TRUE(compat("", "/job:ps/replica:0/task:0/cpu:0"));
  EXPECT_TRUE(compat("/gpu:*", "/gpu:1"));
  EXPECT_FALSE(compat("/job:worker", "/job:ps"));
  EXPECT_FALSE(compat("/gpu:0", "/cpu:0"));
  EXPECT_FALSE(compat("/gpu:0", "/gpu:1"));
  EXPECT_FALSE(compat("/task:0", "/task:1"));
  EXPECT_FALSE(compat("/replica:0", "/replica:1"));
}

TEST(DeviceSpecTest, Equality) {
  EXPECT_EQ(*DeviceSpec::parse("/cpu:0"), *DeviceSpec::parse("/device:CPU:0"));
  EXPECT_NE(*DeviceSpec::parse("/cpu:0"), *DeviceSpec::parse("/cpu:1"));
  EXPECT_NE(*DeviceSpec::parse("/job:a"), *DeviceSpec::parse("/job:b"));
  EXPECT_EQ(*DeviceSpec::parse("/job:a/task:1"), *DeviceSpec::parse("/task:1/job:a"));
}

}  // namespace
}  // namespace actorflow
