#pragma once

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
/// returns when all are done and rethrows the first exception a task threw. Several threads
/// may call run() at once: their jobs queue up and workers serve them in order.
class thread_pool {
 public:
  /// The process-wide pool, with hardware_concurrency() - 1 workers (the caller is one more),
  /// created on first use and never destroyed before exit.
  static thread_pool& shared();

  explicit thread_pool(std::size_t workers);
  ~thread_pool();
  thread_pool(const thread_pool&) = delete;
  thread_pool& operator=(const thread_pool&) = delete;

  /// Runs task(i) for i in [0, n); at most `threads` run at the same time (the caller
  /// counts as one). n == 1 or threads <= 1 runs everything on the calling thread.
  void run(std::size_t n, std::size_t threads, const std::function<void(std::size_t)>& task);

  std::size_t workers() const { return workers_.size(); }

 private:
  struct job;
  void work();
  static void execute(job& j);

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::shared_ptr<job>> queue_;
  std::vector<std::thread> workers_;
  bool stop_ = false;
};

}  // namespace mmnpz::detail
