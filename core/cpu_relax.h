// A hint to the CPU that the calling thread is in a spin-wait loop (x86 `pause`, ARM `yield`):
// cheaper for the sibling hyperthread and for leaving the loop. Pure; thread-safe.
#pragma once

namespace actorflow {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

}  // namespace actorflow
