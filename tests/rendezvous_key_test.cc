// The rendezvous key (device/rendezvous_key.h): built once, parsed once, the same value either
// way; malformed keys refused with a message that says what is wrong; a key of another
// incarnation of the sending task recognised as stale.
#include <gtest/gtest.h>

#include "config/task_names.h"
#include "device/rendezvous_key.h"

namespace actorflow {
namespace {

const std::string kSrc = "/job:worker/replica:0/task:1/device:CPU:0";
const std::string kDst = "/job:ps/replica:0/task:0/device:GPU:1";

std::string error_of(const std::string& wire) {
  auto k = RendezvousKey::parse(wire);
  EXPECT_FALSE(k.ok()) << "parsed: " << wire;
  if (k.ok()) return "";
  EXPECT_EQ(k.status().code(), Code::kInvalidArgument);
  return k.status().message();
}

TEST(RendezvousKeyTest, MakeThenParseGivesTheSameKey) {
  auto k = RendezvousKey::make(kSrc, 0x0123456789abcdefULL, kDst, "gradients/MatMul:1");
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_EQ(k->wire(), kSrc + ";0123456789abcdef;" + kDst + ";gradients/MatMul:1");
  EXPECT_EQ(k->src_device(), kSrc);
  EXPECT_EQ(k->dst_device(), kDst);
  EXPECT_EQ(k->edge(), "gradients/MatMul:1");
  EXPECT_EQ(k->src_incarnation(), 0x0123456789abcdefULL);
  EXPECT_EQ(k->src_task(), "/job:worker/replica:0/task:1");
  EXPECT_EQ(k->dst_task(), "/job:ps/replica:0/task:0");
  EXPECT_EQ(k->src_task(), task_of_device(kSrc));
  EXPECT_TRUE(k->valid());

  auto p = RendezvousKey::parse(k->wire());
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(*p, *k);
  EXPECT_EQ(p->src_device(), kSrc);
  EXPECT_EQ(p->dst_device(), kDst);
  EXPECT_EQ(p->edge(), "gradients/MatMul:1");
  EXPECT_EQ(p->src_incarnation(), 0x0123456789abcdefULL);
  EXPECT_EQ(p->src_task(), "/job:worker/replica:0/task:1");
  EXPECT_EQ(p->dst_task(), "/job:ps/replica:0/task:0");
}

TEST(RendezvousKeyTest, WithoutAnIncarnationTheKeyKeepsItsThreeFields) {
  // Incarnation 0 (not known): the form tools, tests and older keys use.
  auto k = RendezvousKey::make(kSrc, 0, kDst, "^init");
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_EQ(k->wire(), kSrc + ";" + kDst + ";^init");
  auto p = RendezvousKey::parse(kSrc + ";" + kDst + ";^init");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(*p, *k);
  EXPECT_EQ(p->src_incarnation(), 0u);
  EXPECT_EQ(p->edge(), "^init");
  // A device name without "/device:" is its own task.
  auto bare = RendezvousKey::parse("/job:a/task:0/cpu:0;/job:b;x:0");
  ASSERT_TRUE(bare.ok()) << bare.status();
  EXPECT_EQ(bare->src_task(), "/job:a/task:0/cpu:0");
  EXPECT_EQ(bare->dst_task(), "/job:b");
}

TEST(RendezvousKeyTest, MalformedKeysAreRefusedSayingWhatIsWrong) {
  EXPECT_NE(error_of("").find("1 ';'-separated field"), std::string::npos);
  EXPECT_NE(error_of(kSrc).find("1 ';'-separated field"), std::string::npos);
  EXPECT_NE(error_of(kSrc + ";" + kDst).find("2 ';'-separated field"), std::string::npos);
  EXPECT_NE(error_of(kSrc + ";0123456789abcdef;" + kDst + ";x:0;y").find("more than 4"), std::string::npos);
  // Empty fields.
  EXPECT_NE(error_of(";" + kDst + ";x:0").find("empty source device"), std::string::npos);
  EXPECT_NE(error_of(kSrc + ";;x:0").find("empty destination device"), std::string::npos);
  EXPECT_NE(error_of(kSrc + ";" + kDst + ";").find("empty edge"), std::string::npos);
  EXPECT_NE(error_of(";;").find("empty source device"), std::string::npos);
  // Device names are absolute.
  EXPECT_NE(error_of("cpu:0;" + kDst + ";x:0").find("source device 'cpu:0' does not start with '/'"),
            std::string::npos);
  // Bad incarnations: not 16 lowercase hex digits, or all 0.
  EXPECT_NE(error_of(kSrc + ";123;" + kDst + ";x:0").find("bad incarnation '123'"), std::string::npos);
  EXPECT_NE(error_of(kSrc + ";0123456789ABCDEF;" + kDst + ";x:0").find("bad incarnation"), std::string::npos);
  EXPECT_NE(error_of(kSrc + ";0000000000000000;" + kDst + ";x:0").find("not all 0"), std::string::npos);
  // Control characters are refused, and shown escaped.
  const std::string ctl = error_of(kSrc + ";" + kDst + ";x\n:0");
  EXPECT_NE(ctl.find("edge 'x\\x0a:0' holds a control character"), std::string::npos) << ctl;
  // Over-long keys: refused before anything is split, the quote cut short.
  const std::string longer = kSrc + ";" + kDst + ";" + std::string(RendezvousKey::kMaxWireBytes, 'e');
  const std::string too_long = error_of(longer);
  EXPECT_NE(too_long.find(std::to_string(longer.size()) + " bytes (at most 4096)"), std::string::npos) << too_long;
  EXPECT_LT(too_long.size(), 400u);
  // The longest key accepted.
  const std::string fits = kSrc + ";" + kDst + ";";
  EXPECT_TRUE(RendezvousKey::parse(fits + std::string(RendezvousKey::kMaxWireBytes - fits.size(), 'e')).ok());
}

TEST(RendezvousKeyTest, MakeRefusesWhatParseWould) {
  auto semi = RendezvousKey::make(kSrc, 0, kDst, "a;b:0");
  ASSERT_FALSE(semi.ok());
  EXPECT_NE(semi.status().message().find("edge 'a;b:0' holds ';'"), std::string::npos) << semi.status();
  EXPECT_FALSE(RendezvousKey::make("", 0, kDst, "x:0").ok());
  EXPECT_FALSE(RendezvousKey::make(kSrc, 0, "gpu:0", "x:0").ok());
  auto big = RendezvousKey::make(kSrc, 7, kDst, std::string(RendezvousKey::kMaxWireBytes, 'n'));
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.status().message().find("at most 4096"), std::string::npos) << big.status();
  EXPECT_FALSE(RendezvousKey().valid());
}

TEST(RendezvousKeyTest, AnotherIncarnationOfTheSenderIsStale) {
  auto k = RendezvousKey::make(kSrc, 0xaa, kDst, "x:0");
  ASSERT_TRUE(k.ok());
  EXPECT_TRUE(k->check_incarnation(0xaa).ok());
  EXPECT_TRUE(k->check_incarnation(0).ok());  // the receiver does not know the sender's
  Status stale = k->check_incarnation(0xbb);
  ASSERT_FALSE(stale.ok());
  EXPECT_EQ(stale.code(), Code::kAborted);
  EXPECT_NE(stale.message().find("incarnation 00000000000000aa of /job:worker/replica:0/task:1"), std::string::npos)
      << stale;
  EXPECT_NE(stale.message().find("now runs as incarnation 00000000000000bb"), std::string::npos) << stale;
  // A key without an incarnation is never stale.
  auto any = RendezvousKey::make(kSrc, 0, kDst, "x:0");
  ASSERT_TRUE(any.ok());
  EXPECT_TRUE(any->check_incarnation(0xbb).ok());
  // The same edge of two incarnations: the same edge, different keys.
  auto other = RendezvousKey::make(kSrc, 0xbb, kDst, "x:0");
  ASSERT_TRUE(other.ok());
  EXPECT_TRUE(other->same_edge(*k));
  EXPECT_NE(*other, *k);
  EXPECT_FALSE(other->same_edge(*RendezvousKey::make(kSrc, 0xbb, kDst, "x:1")));
}

TEST(RendezvousKeyTest, IncarnationsAreFreshAndNonZero) {
  const uint64_t a = new_incarnation(), b = new_incarnation();
  EXPECT_NE(a, 0u);
  EXPECT_NE(b, 0u);
  EXPECT_NE(a, b);
  EXPECT_EQ(incarnation_hex(0xabcULL), "0000000000000abc");
}

}  // namespace
}  // namespace actorflow
