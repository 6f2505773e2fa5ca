/* The physical baselines of bench_first_touch.py: the exact (file, offset, length) pieces of
 * the gathered batches, read or copied by plain C on the same number of threads.
 *
 *   pread_pieces pread  PIECES THREADS [--evict] [--passes N] FILE...
 *       pread each piece from the files
 *   pread_pieces memcpy PIECES THREADS [--passes N] FILE...
 *       memcpy each piece from a private buffer holding the files' bytes
 *   pread_pieces mapped PIECES THREADS [--passes N] FILE...
 *       memcpy each piece from a read-only shared mapping of the files, populated in
 *       advance (MAP_POPULATE): the page cache itself as the source, no page fault
 *
 * PIECES is the binary file bench_first_touch.py writes (read by pieces.h; little-endian): the magic
 * "MMNPZPC1", u64 file count, u64 piece count, u64 pieces per batch, then per piece u64 file
 * index, u64 offset, u64 length. Piece k of a batch lands at k * (largest length) in the
 * batch buffer, as an excerpt lands in a gathered batch; the threads claim the pieces of one
 * batch at a time, and the next batch starts once the last piece is copied (a gather returns
 * only when its batch is complete). --evict drops the files from the page cache
 * (fdatasync + POSIX_FADV_DONTNEED) before the clock starts. --passes N runs over all the
 * batches N times (default 1), timing each pass, and reports the fastest.
 *
 * Prints one JSON line: mode, threads, pieces, batches, bytes, seconds (of the fastest pass),
 * passes, and checksum (the sum of every piece's 32-bit words mod 2^64, computed after
 * timing, for the caller to compare with what the gather returned).
 *
 * Build: cc -O2 -pthread -o pread_pieces pread_pieces.c
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "pieces.h"

static struct piece *pieces;
static uint64_t piece_count, batch_size, file_count, slot;
static int *fds;
static uint64_t *bases; /* where each file starts in `image` */
static unsigned char *image;
static unsigned char **sources; /* memcpy modes: each file's bytes in memory */
static unsigned threads;
static unsigned char *batch; /* batch_size * slot bytes, shared by the threads */

static void die(const char *what, const char *detail) {
  fprintf(stderr, "pread_pieces: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
  exit(1);
}

static void read_exactly(int fd, void *buffer, uint64_t length, uint64_t offset) {
  unsigned char *p = buffer;
  while (length > 0) {
    ssize_t n = pread(fd, p, length, (off_t)offset);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) die("pread failed or hit end of file", n < 0 ? strerror(errno) : NULL);
    p += n;
    offset += (uint64_t)n;
    length -= (uint64_t)n;
  }
}

static void copy_piece(uint64_t index, unsigned char *to) {
  const struct piece *p = &pieces[index];
  if (sources)
    memcpy(to, sources[p->file] + p->offset, p->length);
  else
    read_exactly(fds[p->file], to, p->length, p->offset);
}

/* The threads share the work as mmnpz's gather pool does: the caller publishes a batch,
   every thread (the caller too) claims pieces one at a time, and the caller returns once all
   are copied, so a thread the scheduler parks late does not hold the batch up. */
struct job {
  atomic_uint_fast64_t next; /* next piece of the batch to claim */
  uint64_t first, count, done;
};
static struct job *jobs;
static uint64_t published; /* jobs published so far, under `mutex` */
static int stop;
static pthread_mutex_t mutex = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake = PTHREAD_COND_INITIALIZER, all_done = PTHREAD_COND_INITIALIZER;

static void execute(struct job *j) {
  uint64_t finished = 0, i;
  while ((i = atomic_fetch_add(&j->next, 1)) < j->count) {
    copy_piece(j->first + i, batch + i * slot);
    ++finished;
  }
  if (finished == 0) return;
  pthread_mutex_lock(&mutex);
  j->done += finished;
  if (j->done == j->count) pthread_cond_broadcast(&all_done);
  pthread_mutex_unlock(&mutex);
}

static void *worker(void *unused) {
  (void)unused;
  uint64_t seen = 0;
  for (;;) {
    pthread_mutex_lock(&mutex);
    while (!stop && published == seen) pthread_cond_wait(&wake, &mutex);
    if (published == seen) { /* stopping */
      pthread_mutex_unlock(&mutex);
      return NULL;
    }
    seen = published;
    struct job *j = &jobs[seen - 1]; /* the latest: the caller waited for the earlier ones */
    pthread_mutex_unlock(&mutex);
    execute(j);
  }
}

static void run_batch(struct job *j, uint64_t first, uint64_t count) {
  atomic_init(&j->next, 0);
  j->first = first, j->count = count, j->done = 0;
  pthread_mutex_lock(&mutex);
  ++published;
  pthread_cond_broadcast(&wake);
  pthread_mutex_unlock(&mutex);
  execute(j);
  pthread_mutex_lock(&mutex);
  while (j->done < j->count) pthread_cond_wait(&all_done, &mutex);
  pthread_mutex_unlock(&mutex);
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
  if (argc < 5)
    die("usage: pread_pieces pread|memcpy|mapped PIECES THREADS [--evict] [--passes N] FILE...",
        NULL);
  const int use_memcpy = strcmp(argv[1], "memcpy") == 0,
            use_mapped = strcmp(argv[1], "mapped") == 0;
  if (!use_memcpy && !use_mapped && strcmp(argv[1], "pread") != 0) die("unknown mode", argv[1]);
  const struct pieces_file pf = read_pieces("pread_pieces", argv[2]);
  pieces = pf.pieces, piece_count = pf.piece_count, batch_size = pf.batch_size;
  file_count = pf.file_count, slot = pf.slot;
  threads = (unsigned)atoi(argv[3]);
  if (threads == 0) die("threads must be positive", NULL);
  int arg = 4, evict = 0, passes = 1;
  for (;;) {
    if (arg < argc && strcmp(argv[arg], "--evict") == 0) {
      evict = 1, ++arg;
    } else if (arg + 1 < argc && strcmp(argv[arg], "--passes") == 0) {
      passes = atoi(argv[arg + 1]), arg += 2;
      if (passes <= 0) die("passes must be positive", NULL);
    } else {
      break;
    }
  }
  if ((uint64_t)(argc - arg) != file_count)
    die("the file count differs from the pieces file", NULL);

  fds = calloc(file_count, sizeof *fds);
  bases = calloc(file_count + 1, sizeof *bases);
  for (uint64_t i = 0; i < file_count; ++i) {
    fds[i] = open(argv[arg + i], O_RDONLY | O_CLOEXEC);
    if (fds[i] < 0) die(argv[arg + i], strerror(errno));
    struct stat st;
    if (fstat(fds[i], &st) != 0) die(argv[arg + i], strerror(errno));
    bases[i + 1] = bases[i] + (uint64_t)st.st_size;
    if (evict) {
      fdatasync(fds[i]);
      int err = posix_fadvise(fds[i], 0, 0, POSIX_FADV_DONTNEED);
      if (err) die("posix_fadvise", strerror(err));
    }
  }
  if (use_memcpy) { /* the files' bytes in private memory, every page touched; page-aligned
                       like a mapping, so that each piece keeps its alignment in the file */
    if (posix_memalign((void **)&image, 4096, bases[file_count] + 1) != 0)
      die("cannot allocate the image of the files", NULL);
    for (uint64_t i = 0; i < file_count; ++i)
      read_exactly(fds[i], image + bases[i], bases[i + 1] - bases[i], 0);
    sources = calloc(file_count, sizeof *sources);
    for (uint64_t i = 0; i < file_count; ++i) sources[i] = image + bases[i];
  }
  if (use_mapped) { /* the files mapped, every page mapped in advance */
    sources = calloc(file_count, sizeof *sources);
    for (uint64_t i = 0; i < file_count; ++i) {
      void *m =
          mmap(NULL, bases[i + 1] - bases[i], PROT_READ, MAP_SHARED | MAP_POPULATE, fds[i], 0);
      if (m == MAP_FAILED) die("mmap failed", strerror(errno));
      sources[i] = m;
    }
  }
  /* Page-aligned, as a well-placed batch array: copies into an address 16 bytes past a page
     (where malloc puts large blocks) run up to twice as slow on some CPUs. */
  if (posix_memalign((void **)&batch, 4096, batch_size * slot + 1) != 0)
    die("cannot allocate the batch", NULL);
  memset(batch, 1, batch_size * slot); /* first-write faults outside the clock */

  const uint64_t batches = (piece_count + batch_size - 1) / batch_size;
  jobs = calloc(batches * (uint64_t)passes + 1, sizeof *jobs);
  pthread_t *ids = calloc(threads, sizeof *ids);
  for (unsigned t = 1; t < threads; ++t) /* a persistent pool, started before the clock */
    if (pthread_create(&ids[t], NULL, worker, NULL) != 0) die("pthread_create failed", NULL);
  double seconds = 0;
  for (int pass = 0; pass < passes; ++pass) {
    const double t0 = now();
    for (uint64_t b = 0; b < batches; ++b) {
      const uint64_t first = b * batch_size;
      const uint64_t count = piece_count - first < batch_size ? piece_count - first : batch_size;
      run_batch(&jobs[pass * batches + b], first, count);
    }
    const double took = now() - t0;
    if (pass == 0 || took < seconds) seconds = took;
  }
  pthread_mutex_lock(&mutex);
  stop = 1;
  pthread_cond_broadcast(&wake);
  pthread_mutex_unlock(&mutex);
  for (unsigned t = 1; t < threads; ++t) pthread_join(ids[t], NULL);

  uint64_t checksum = 0, bytes = 0;
  unsigned char *one = malloc(slot + 4);
  for (uint64_t k = 0; k < piece_count; ++k) {
    copy_piece(k, one);
    for (uint64_t w = 0; w + 4 <= pieces[k].length; w += 4) {
      uint32_t word;
      memcpy(&word, one + w, 4);
      checksum += word;
    }
    bytes += pieces[k].length;
  }
  printf(
      "{\"mode\": \"%s\", \"threads\": %u, \"pieces\": %llu, \"batches\": %llu, "
      "\"bytes\": %llu, \"seconds\": %.9f, \"passes\": %d, \"checksum\": %llu}\n",
      argv[1], threads, (unsigned long long)piece_count, (unsigned long long)batches,
      (unsigned long long)bytes, seconds, passes, (unsigned long long)checksum);
  return 0;
}
