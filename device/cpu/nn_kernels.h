// Threading of the oneDNN-backed CPU kernels (device/cpu/nn_kernels.cc).
//
// oneDNN (Debian's build) parallelises each primitive with OpenMP. Every thread that calls a
// kernel gets its own OpenMP team, so several device actors, or several task processes on
// one machine, each running a team as wide as the machine oversubscribe the cores; with
// OpenMP's spin-waiting, small kernels then take milliseconds instead of microseconds
// (measured: a MaxPool finite-difference test went from 8 ms to 6 s on a loaded 2-core
// host). The team size of kernel calls is therefore a setting, TensorFlow's
// intra_op_parallelism_threads.
#pragma once

namespace actorflow {

// Sets how many threads one kernel call may use inside oneDNN: n >= 1, or 0 for one per
// hardware thread. Process-wide and thread-safe; takes effect at each thread's next kernel
// call. The default is the environment variable AF_INTRA_OP_THREADS when set (0 allowed),
// else the first value of OMP_NUM_THREADS, else 1 (the safe choice when several tasks share
// a host). A no-op if the oneDNN build is
// not OpenMP-threaded.
void set_intra_op_threads(int n);

// The current setting (0 = one per hardware thread).
int intra_op_threads();

// True when oneDNN computes bfloat16 natively on this CPU (AVX-512 BF16 or AMX), i.e. when ops
// marked for bfloat16 mixed precision (graph/mixed_precision.h) really take bfloat16 operands;
// false means they run float32. Thread-safe; computed once.
bool cpu_has_native_bfloat16();

}  // namespace actorflow
