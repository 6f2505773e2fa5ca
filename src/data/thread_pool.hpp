#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace mmnpz::detail {

/// A persistent pool of worker threads shared by every gather in the process. run() splits
/// a job into tasks 0..n-1 that the calling thread and idle workers take one at a time; it
/// returns when all are done and rethrows the exception of the lowest-numbered task that threw
/// (the same one whichever thread ran what, so errors do not depend on timing). Several threads
/// may call run() at once: their jobs queue up and workers serve them in order.
///
/// An idle worker, and a caller waiting for the last tasks of its job, spin for up to 50 µs
/// before they sleep: gathers come one after another, and a thread woken from sleep starts
/// late (on the 2-core development VM, a warm 2-thread gather of 256 excerpts went from
/// 0.78-0.88 to 0.90-1.04 of a C memcpy of the same pieces). The cost is at most 50 µs of a
/// core per job that no other job follows.
class thread_pool {
 public:
  /// The process-wide pool, with hardware_concurrency() - 1 workers (the caller is one more),
  /// created on first use and never destroyed before exit.
  static thread_pool& shared();

  /// Starts up to `workers` threads: fewer when the system refuses more (workers() says how
  /// many), never an error.
  explicit thread_pool(std::size_t workers);
  ~thread_pool();
  thread_pool(const thread_pool&) = delete;
  thread_pool& operator=(const thread_pool&) = delete;

  /// Runs task(i) for i in [0, n); at most `threads` run at the same time (the caller
  /// counts as one). n == 1 or threads <= 1 runs everything on the calling thread.
  void run(std::size_t n, std::size_t threads, const std::function<void(std::size_t)>& task);

  struct job;
  /// A job posted to run in the background.
  class ticket {
   public:
    /// Takes the job's remaining tasks on the calling thread, waits for those the workers
    /// have, and rethrows the exception of the lowest-numbered task that threw. Later calls
    /// return at once.
    void wait();

   private:
    friend class thread_pool;
    std::shared_ptr<job> job_;
  };
  /// Starts task(i) for i in [0, n) on up to `threads` workers and returns at once; the
  /// ticket's wait() finishes the job (on the calling thread alone when there are no
  /// workers). `task` is owned by the job.
  ticket post(std::size_t n, std::size_t threads, std::function<void(std::size_t)> task);

  std::size_t workers() const { return workers_.size(); }

 private:
  void work();
  void enqueue(const std::shared_ptr<job>& j);
  static void execute(job& j);

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::shared_ptr<job>> queue_;
  std::atomic<std::size_t> posted_{0};  // jobs enqueued so far, for workers spinning
  std::vector<std::thread> workers_;
  bool stop_ = false;
};

}  // namespace mmnpz::detail
