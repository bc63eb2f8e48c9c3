// The few calls that differ between Linux and macOS, in one place (the core builds on both; what
// macOS lacks, /proc and per-thread getrusage, reads as absent, never as a build error).
#pragma once
#include <cstdint>

#include <pthread.h>
#include <unistd.h>
#if !defined(__APPLE__)
#include <sys/syscall.h>
#endif

namespace warmprof::os {

// The OS's id of the calling thread (Linux: gettid, as in /proc/self/task; macOS: the 64-bit id).
inline uint64_t thread_id() {
#if defined(__APPLE__)
  uint64_t tid = 0;
  pthread_threadid_np(nullptr, &tid);
  return tid;
#else
  return uint64_t(syscall(SYS_gettid));
#endif
}

}  // namespace warmprof::os
