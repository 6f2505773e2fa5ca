#pragma once

// The checks every writer makes of an array before it writes a byte of it (writer::write and
// begin, write_deflated, shard_writer::bound), and the .npy header they then write.

#include <cstdint>
#include <string>
#include <vector>

#include "mmnpz/error.hpp"
#include "mmnpz/npy.hpp"

namespace mmnpz::detail {

struct npy_plan {
  std::string header;        // the .npy header, when refusal is empty
  std::uint64_t nbytes = 0;  // the array data's size, when refusal is empty
  std::string refusal;       // why the array cannot be written, or empty
};

// The header and data size of an array of `type` and `shape`, or why no writer writes it: an
// object dtype, too many dimensions, a size that overflows, a header readers would refuse
// (too long, or one that does not read back as this array: a default-constructed dtype, a
// sub-array dtype, which numpy makes no array of).
inline npy_plan plan_npy(const dtype& type, const std::vector<std::uint64_t>& shape,
                         bool fortran_order) {
  npy_plan p;
  if (type.has_object()) {
    p.refusal = "object arrays cannot be written (they need pickle)";
  } else if (type.is_subarray()) {
    p.refusal = "a sub-array dtype " + type.descr() + " is no array's dtype (numpy loads no "
                ".npy of it): write its base type with the sub-array's shape appended";
  } else {
    try {
      // It refuses what no reader would read back as this array: an empty dtype, too many
      // dimensions, a size that overflows, a header too long or that reads as another.
      p.header = make_npy_header(type, shape, fortran_order);
      array_nbytes(shape, type.itemsize(), p.nbytes);  // it fits: make_npy_header checked
    } catch (const error& e) {
      p.refusal = e.detail();
    }
  }
  return p;
}

}  // namespace mmnpz::detail
