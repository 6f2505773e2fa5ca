/* Does io_uring read evicted pieces faster than what mmnpz's gather does? (issue 11: "io_uring
 * through liburing-dev if it measures better").
 *
 *   queue_pieces MODE PIECES THREADS_OR_DEPTH FILE [--cached]
 *
 * reads every (offset, length) piece of the PIECES file (the format bench_first_touch.py
 * writes, see pread_pieces.c; one archive) into a batch buffer, one batch at a time, after
 * evicting FILE from the page cache (fdatasync + POSIX_FADV_DONTNEED; not with --cached,
 * which reads what the page cache holds), with
 *
 *   pread     THREADS threads claiming the batch's pieces one at a time, blocking pread
 *             (pread_pieces.c's baseline);
 *   willneed  the same after POSIX_FADV_WILLNEED on every piece of the batch (what mmnpz's
 *             gather does once it finds a piece out of memory: the kernel reads them all at
 *             once while the threads copy);
 *   uring     one thread keeping DEPTH reads in flight on an io_uring (liburing), the
 *             batch's pieces submitted as slots free up.
 *
 * Prints one JSON line: mode, n (threads or depth), pieces, bytes, seconds, checksum (the sum
 * of every piece's 32-bit words mod 2^64, after timing: all modes must agree). Exit status 3
 * when the kernel refuses io_uring (a seccomp policy, io_uring_disabled).
 *
 * Build: cc -O2 -pthread -o queue_pieces queue_pieces.c -luring   (Debian: liburing-dev)
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "pieces.h"

static struct piece *pieces;
static uint64_t piece_count, batch_size, slot;
static unsigned char *batch;
static int fd;

static void die(const char *what, const char *detail) {
  fprintf(stderr, "queue_pieces: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
  exit(1);
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void read_exactly(uint64_t index, unsigned char *to) {
  uint64_t done = 0;
  while (done < pieces[index].length) {
    ssize_t n = pread(fd, to + done, pieces[index].length - done,
                      (off_t)(pieces[index].offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) die("pread failed or hit end of file", n < 0 ? strerror(errno) : NULL);
    done += (uint64_t)n;
  }
}

/* pread and willneed: THREADS threads (the caller one of them) claim the pieces of batch
   `current` one at a time; a barrier separates the batches. */
static pthread_barrier_t start, finish;
static atomic_uint_fast64_t next_piece;
static uint64_t current, batches;

static void claim_pieces(void) {
  uint64_t k;
  while ((k = atomic_fetch_add(&next_piece, 1)) < batch_size)
    read_exactly(current * batch_size + k, batch + k * slot);
}

static void *worker(void *unused) {
  (void)unused;
  for (;;) {
    pthread_barrier_wait(&start);
    if (current == batches) return NULL;
    claim_pieces();
    pthread_barrier_wait(&finish);
  }
}

static void run_threads(unsigned threads, int willneed) {
  pthread_t *ids = calloc(threads, sizeof *ids);
  pthread_barrier_init(&start, NULL, threads);
  pthread_barrier_init(&finish, NULL, threads);
  for (unsigned t = 1; t < threads; ++t) pthread_create(&ids[t], NULL, worker, NULL);
  for (current = 0; current < batches; ++current) {
    if (willneed)
      for (uint64_t k = 0; k < batch_size; ++k) {
        const struct piece *p = &pieces[current * batch_size + k];
        posix_fadvise(fd, (off_t)p->offset, (off_t)p->length, POSIX_FADV_WILLNEED);
      }
    atomic_store(&next_piece, 0);
    pthread_barrier_wait(&start);
    claim_pieces();
    pthread_barrier_wait(&finish);
  }
  pthread_barrier_wait(&start); /* current == batches: the workers return */
  for (unsigned t = 1; t < threads; ++t) pthread_join(ids[t], NULL);
  free(ids);
}

/* uring: one thread, up to `depth` reads in flight; a short read is finished by pread. */
static void run_uring(unsigned depth) {
  struct io_uring ring;
  int e = io_uring_queue_init(depth, &ring, 0);
  if (e < 0) {
    fprintf(stderr, "queue_pieces: io_uring refused: %s\n", strerror(-e));
    exit(3);
  }
  for (current = 0; current < batches; ++current) {
    uint64_t submitted = 0, completed = 0;
    while (completed < batch_size) {
      while (submitted < batch_size && submitted - completed < depth) {
        const struct piece *p = &pieces[current * batch_size + submitted];
        struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);
        if (!sqe) break;
        io_uring_prep_read(sqe, fd, batch + submitted * slot, (unsigned)p->length, p->offset);
        io_uring_sqe_set_data64(sqe, submitted);
        ++submitted;
      }
      io_uring_submit(&ring);
      struct io_uring_cqe *cqe;
      e = io_uring_wait_cqe(&ring, &cqe);
      if (e < 0) die("io_uring_wait_cqe", strerror(-e));
      const uint64_t k = io_uring_cqe_get_data64(cqe);
      const int res = cqe->res;
      io_uring_cqe_seen(&ring, cqe);
      if (res < 0) die("read", strerror(-res));
      if ((uint64_t)res != pieces[current * batch_size + k].length)
        read_exactly(current * batch_size + k, batch + k * slot); /* short: finish blocking */
      ++completed;
    }
  }
  io_uring_queue_exit(&ring);
}

int main(int argc, char **argv) {
  const int cached = argc == 6 && strcmp(argv[5], "--cached") == 0;
  if (argc != 5 && !cached)
    die("usage: queue_pieces pread|willneed|uring PIECES THREADS_OR_DEPTH FILE [--cached]", NULL);
  const char *mode = argv[1];
  const unsigned n = (unsigned)atoi(argv[3]);
  if (n == 0) die("threads and depth must be positive", NULL);
  const struct pieces_file pf = read_pieces("queue_pieces", argv[2]);
  if (pf.file_count != 1) die(argv[2], "pieces of more than one file");
  pieces = pf.pieces, piece_count = pf.piece_count, batch_size = pf.batch_size, slot = pf.slot;
  if (piece_count < batch_size) die(argv[2], "no whole batch");
  batches = piece_count / batch_size;
  batch = aligned_alloc(4096, (batch_size * slot + 4095) / 4096 * 4096);
  if (!batch) die("out of memory", NULL);
  memset(batch, 1, batch_size * slot);
  fd = open(argv[4], O_RDONLY | O_CLOEXEC);
  if (fd < 0) die(argv[4], strerror(errno));
  if (!cached) {
    if (fdatasync(fd) != 0 && errno != EINVAL) die("fdatasync", strerror(errno));
    if (posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) != 0) die("posix_fadvise", NULL);
  }

  const double t0 = now();
  if (strcmp(mode, "pread") == 0)
    run_threads(n, 0);
  else if (strcmp(mode, "willneed") == 0)
    run_threads(n, 1);
  else if (strcmp(mode, "uring") == 0)
    run_uring(n);
  else
    die("unknown mode", mode);
  const double seconds = now() - t0;

  uint64_t checksum = 0, bytes = 0;
  for (uint64_t i = 0; i < batches * batch_size; ++i) {
    read_exactly(i, batch); /* cached by now: untimed */
    for (uint64_t w = 0; w + 4 <= pieces[i].length; w += 4) {
      uint32_t word;
      memcpy(&word, batch + w, 4);
      checksum += word;
    }
    bytes += pieces[i].length;
  }
  printf("{\"mode\": \"%s\", \"n\": %u, \"pieces\": %llu, \"bytes\": %llu, \"seconds\": %.6f, "
         "\"checksum\": %llu}\n",
         mode, n, (unsigned long long)(batches * batch_size), (unsigned long long)bytes, seconds,
         (unsigned long long)checksum);
  return 0;
}
