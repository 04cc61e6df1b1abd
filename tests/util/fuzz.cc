#include "tests/util/fuzz.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace actorflow {
namespace testing {

std::string mutate(const std::string& in, const std::vector<std::string>& corpus, std::mt19937_64& rng) {
  std::string s = in;
  const int ops = 1 + static_cast<int>(rng() % 4);
  static const uint64_t kInteresting[] = {0, 1, 0x7f, 0x80, 0xff, 0x7fff, 0xffff, 0x7fffffff, 0xffffffff,
                                          uint64_t{1} << 28, uint64_t{1} << 40, uint64_t{1} << 62,
                                          0x7fffffffffffffffull, 0xffffffffffffffffull};
  for (int k = 0; k < ops; ++k) {
    const size_t n = s.size();
    switch (rng() % 7) {
      case 0:  // bit flip
        if (n) s[rng() % n] ^= static_cast<char>(1u << (rng() % 8));
        break;
      case 1:  // random byte
        if (n) s[rng() % n] = static_cast<char>(rng());
        break;
      case 2:  // insert bytes
        s.insert(n ? rng() % (n + 1) : 0, std::string(1 + rng() % 8, static_cast<char>(rng())));
        break;
      case 3:  // delete a range
        if (n) {
          size_t at = rng() % n;
          s.erase(at, 1 + rng() % std::min<size_t>(16, n - at));
        }
        break;
      case 4:  // truncate
        s.resize(n ? rng() % n : 0);
        break;
      case 5: {  // interesting integer, 1/2/4/8 bytes little-endian
        const uint64_t v = kInteresting[rng() % (sizeof kInteresting / sizeof kInteresting[0])];
        const size_t w = size_t{1} << (rng() % 4);
        if (n >= w) std::memcpy(&s[rng() % (n - w + 1)], &v, w);
        break;
      }
      case 6: {  // splice with another corpus entry
        const std::string& o = corpus[rng() % corpus.size()];
        if (!o.empty()) s = s.substr(0, n ? rng() % n : 0) + o.substr(rng() % o.size());
        break;
      }
    }
  }
  return s;
}

}  // namespace testing
}  // namespace actorflow
