// base::Mutex and base::MutexLock: std::mutex and std::lock_guard with clang's thread-safety
// annotations, so that -Wthread-safety checks which fields a lock guards (SLUICE_GUARDED_BY) and
// which functions must hold it (SLUICE_REQUIRES). libstdc++'s std::mutex carries no
// annotations. Under gcc the macros are empty and the types are the standard ones wrapped.
// The clang builds (tools/dev/tidy, build-fuzz) compile with -Wthread-safety.
#pragma once

#include <mutex>

#if defined(__clang__)
#define SLUICE_THREAD_ATTRIBUTE(x) __attribute__((x))
#else
#define SLUICE_THREAD_ATTRIBUTE(x)
#endif

#define SLUICE_CAPABILITY(x) SLUICE_THREAD_ATTRIBUTE(capability(x))
#define SLUICE_SCOPED_CAPABILITY SLUICE_THREAD_ATTRIBUTE(scoped_lockable)
#define SLUICE_GUARDED_BY(x) SLUICE_THREAD_ATTRIBUTE(guarded_by(x))
#define SLUICE_REQUIRES(...) SLUICE_THREAD_ATTRIBUTE(requires_capability(__VA_ARGS__))
#define SLUICE_EXCLUDES(...) SLUICE_THREAD_ATTRIBUTE(locks_excluded(__VA_ARGS__))
#define SLUICE_ACQUIRE(...) SLUICE_THREAD_ATTRIBUTE(acquire_capability(__VA_ARGS__))
#define SLUICE_RELEASE(...) SLUICE_THREAD_ATTRIBUTE(release_capability(__VA_ARGS__))
// For the reads the analysis cannot prove safe (a sole writer reading its own data unlocked);
// the function says why where it is used.
#define SLUICE_NO_THREAD_SAFETY_ANALYSIS SLUICE_THREAD_ATTRIBUTE(no_thread_safety_analysis)

namespace sluice::base {

class SLUICE_CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void lock() SLUICE_ACQUIRE() { m_.lock(); }
  void unlock() SLUICE_RELEASE() { m_.unlock(); }

 private:
  std::mutex m_;
};

class SLUICE_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& m) SLUICE_ACQUIRE(m) : m_(m) { m_.lock(); }
  ~MutexLock() SLUICE_RELEASE() { m_.unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex& m_;
};

}  // namespace sluice::base
