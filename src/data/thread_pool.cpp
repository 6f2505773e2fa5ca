#include "data/thread_pool.hpp"

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <new>
#include <system_error>

namespace mmnpz::detail {

struct thread_pool::job {
  std::function<void(std::size_t)> owned;  // the task of a posted job
  const std::function<void(std::size_t)>* task = nullptr;
  std::size_t n = 0;
  std::size_t helpers = 0;            // how many workers may still join (threads - 1)
  std::atomic<std::size_t> next{0};   // next task to hand out
  std::size_t done = 0;               // finished tasks, under done_mutex
  std::atomic<bool> finished{false};  // done == n, for a caller spinning in wait()
  std::mutex done_mutex;
  std::condition_variable all_done;
  std::exception_ptr failure;   // that of the lowest-numbered task that threw, under done_mutex
  std::size_t failed_task = 0;  // its number
};

namespace {

// How long an idle worker, or a caller waiting for the last tasks of its job, spins before
// it sleeps (see the class description).
constexpr std::chrono::microseconds spin_time{50};

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Spins until done() or spin_time has passed; returns done().
template <class Done>
bool spin_until(Done&& done) {
  const auto until = std::chrono::steady_clock::now() + spin_time;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= until) return false;
    cpu_relax();
  }
  return true;
}

std::mutex shared_mutex;
thread_pool* shared_pool = nullptr;

// A forked child has the parent's pool object but none of its threads (and maybe a mutex
// some worker held): it forgets both and makes its own pool on first use.
void forget_pool_in_child() {
  new (&shared_mutex) std::mutex();
  shared_pool = nullptr;
}

}  // namespace

thread_pool& thread_pool::shared() {
  std::lock_guard<std::mutex> lock(shared_mutex);
  if (!shared_pool) {
    static const bool registered = pthread_atfork(nullptr, nullptr, forget_pool_in_child) == 0;
    (void)registered;
    // Leaked on purpose: workers may still be parked when static destructors run.
    shared_pool =
        new thread_pool(std::max<std::size_t>(1, std::thread::hardware_concurrency()) - 1);
  }
  return *shared_pool;
}

thread_pool::thread_pool(std::size_t workers) {
  workers_.reserve(workers);
  for (std::size_t i = 0; i < workers; ++i) {
    try {
      workers_.emplace_back([this] { work(); });
    } catch (const std::system_error&) {
      // The system would not give another thread (an address-space or process limit): the
      // pool works with those it has, and with none, callers do every task themselves.
      break;
    }
  }
}

thread_pool::~thread_pool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  posted_.fetch_add(1, std::memory_order_release);
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void thread_pool::execute(job& j) {
  std::size_t finished = 0;
  std::exception_ptr failure;  // a thread takes tasks in increasing order: its first is lowest
  std::size_t failed_task = 0;
  for (std::size_t i; (i = j.next.fetch_add(1)) < j.n;) {
    try {
      (*j.task)(i);
    } catch (...) {
      if (!failure) {
        failure = std::current_exception();
        failed_task = i;
      }
    }
    ++finished;
  }
  if (finished == 0) return;
  std::lock_guard<std::mutex> lock(j.done_mutex);
  if (failure && (!j.failure || failed_task < j.failed_task)) {
    j.failure = failure;
    j.failed_task = failed_task;
  }
  j.done += finished;
  if (j.done == j.n) {
    j.finished.store(true, std::memory_order_release);
    j.all_done.notify_all();
  }
}

void thread_pool::enqueue(const std::shared_ptr<job>& j) {
  const std::size_t helpers = j->helpers;  // workers decrement it once the job is queued
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(j);
  }
  posted_.fetch_add(1, std::memory_order_release);
  for (std::size_t i = 0; i < helpers; ++i) wake_.notify_one();
}

void thread_pool::ticket::wait() {
  if (!job_) return;
  const std::shared_ptr<job> j = std::move(job_);
  execute(*j);
  spin_until([&] { return j->finished.load(std::memory_order_acquire); });
  std::unique_lock<std::mutex> lock(j->done_mutex);
  j->all_done.wait(lock, [&] { return j->done == j->n; });
  if (j->failure) std::rethrow_exception(j->failure);
}

void thread_pool::run(std::size_t n, std::size_t threads,
                      const std::function<void(std::size_t)>& task) {
  if (n == 0) return;
  const std::size_t helpers = std::min({threads > 0 ? threads - 1 : 0, n - 1, workers_.size()});
  if (helpers == 0) {
    for (std::size_t i = 0; i < n; ++i) task(i);
    return;
  }
  ticket t;
  t.job_ = std::make_shared<job>();
  t.job_->task = &task;
  t.job_->n = n;
  t.job_->helpers = helpers;
  enqueue(t.job_);
  t.wait();  // the caller works too
}

thread_pool::ticket thread_pool::post(std::size_t n, std::size_t threads,
                                      std::function<void(std::size_t)> task) {
  ticket t;
  t.job_ = std::make_shared<job>();
  t.job_->owned = std::move(task);
  t.job_->task = &t.job_->owned;
  t.job_->n = n;
  t.job_->helpers = std::min({threads > 0 ? threads : 1, n, workers_.size()});
  if (t.job_->helpers > 0) enqueue(t.job_);
  return t;
}

void thread_pool::work() {
  for (;;) {
    std::shared_ptr<job> j;
    const std::size_t seen = posted_.load(std::memory_order_acquire);
    spin_until([&] { return posted_.load(std::memory_order_acquire) != seen; });
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (stop_) return;
      j = queue_.front();
      // A job takes at most `helpers` workers; once it has them (or has no task left to
      // hand out) it leaves the queue so the next job can be served.
      if (--j->helpers == 0 || j->next.load() >= j->n) queue_.pop_front();
    }
    execute(*j);
  }
}

}  // namespace mmnpz::detail
