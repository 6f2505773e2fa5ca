/* The PIECES file bench_first_touch.py writes, read by its C baselines (pread_pieces.c,
 * queue_pieces.c): little-endian, the magic "MMNPZPC1", u64 file count, u64 piece count,
 * u64 pieces per batch, then per piece u64 file index, u64 offset, u64 length. */
#ifndef MMNPZ_BENCH_PIECES_H
#define MMNPZ_BENCH_PIECES_H

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct piece {
  uint64_t file, offset, length;
};

struct pieces_file {
  struct piece *pieces;
  uint64_t file_count, piece_count, batch_size;
  uint64_t slot; /* the longest piece: where piece k of a batch lands is k * slot */
};

static uint64_t pieces_le64(const unsigned char *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = v << 8 | p[i];
  return v;
}

static void pieces_fail(const char *program, const char *path, const char *why) {
  fprintf(stderr, "%s: %s: %s\n", program, path, why);
  exit(1);
}

/* Reads `path`; a file that is not a pieces file ends the program (status 1), saying why. */
static struct pieces_file read_pieces(const char *program, const char *path) {
  struct pieces_file out = {0};
  FILE *f = fopen(path, "rb");
  if (!f) pieces_fail(program, path, strerror(errno));
  unsigned char head[32], record[24];
  if (fread(head, 1, 32, f) != 32 || memcmp(head, "MMNPZPC1", 8) != 0)
    pieces_fail(program, path, "not a pieces file");
  out.file_count = pieces_le64(head + 8);
  out.piece_count = pieces_le64(head + 16);
  out.batch_size = pieces_le64(head + 24);
  if (out.batch_size == 0) pieces_fail(program, path, "zero pieces per batch");
  out.pieces = malloc(out.piece_count * sizeof *out.pieces + 1);
  if (!out.pieces) pieces_fail(program, path, "out of memory");
  for (uint64_t k = 0; k < out.piece_count; ++k) {
    if (fread(record, 1, 24, f) != 24) pieces_fail(program, path, "truncated");
    struct piece *p = &out.pieces[k];
    p->file = pieces_le64(record);
    p->offset = pieces_le64(record + 8);
    p->length = pieces_le64(record + 16);
    if (p->file >= out.file_count)
      pieces_fail(program, path, "a piece names a file that is not given");
    if (p->length > out.slot) out.slot = p->length;
  }
  fclose(f);
  return out;
}

#endif
