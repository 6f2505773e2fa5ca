#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "mmnpz/data/dataset.hpp"

/// \file
/// Batches of fixed-length excerpts copied out of datasets: mmnpz::gather(), mmnpz::gather_async().
namespace mmnpz {

/// What to do where an excerpt runs past the end of its member.
enum class pad_mode {
  none,  ///< refuse: every excerpt must lie inside its member (errc::invalid_argument)
  fill,  ///< copy what there is and fill the rest with a value (zeros unless given)
  wrap,  ///< continue from the member's first row, as often as needed
};

/// "none", "fill" or "wrap".
std::string_view to_string(pad_mode pad);
/// The pad_mode named `text`; throws errc::invalid_argument ("pad must be one of 'none',
/// 'fill', 'wrap', not 'zero'").
pad_mode parse_pad_mode(std::string_view text);

/// One excerpt length and rule for a whole batch.
struct excerpt_options {
  std::uint64_t length = 0;  ///< rows along axis 0 per excerpt (in the first field's units)
  /// What to do where an excerpt runs past its member's end.
  pad_mode pad = pad_mode::none;
  /// One element's bytes to fill with (pad_mode::fill), in the items' dtype; empty: zeros.
  std::vector<std::byte> fill;
  /// Threads of the shared pool to use, the caller included (0: every core).
  std::size_t threads = 0;
  /// How stored members' bytes are copied: io_mode::automatic takes each dataset's own
  /// dataset_options::io. Deflated members and members whose rows are not contiguous
  /// (Fortran order) are always copied from memory.
  io_mode io = io_mode::automatic;
};

/// Throws errc::invalid_argument for a `pad` that is no pad_mode or an `io` that is no
/// io_mode. gather() calls it; what
/// depends on the items (the fill's size, the windows) is checked by gather() itself.
void validate(const excerpt_options& options);

/// One field of a multi-field gather: the same excerpt window taken from `source` items at a
/// frame rate `rate_num/rate_den` relative to the excerpt's units. The field's window for
/// start s is rows [s*num/den (rounded down), + length*num/den), which must be a whole number.
struct gather_field {
  /// The dataset the field's items come from (must outlive the gather).
  const dataset* source = nullptr;
  const std::int64_t* indices = nullptr;  ///< `count` item indices into `source`
  /// Numerator of the field's frame rate relative to the excerpt's units.
  std::uint64_t rate_num = 1;
  /// Denominator of the field's frame rate (positive).
  std::uint64_t rate_den = 1;
  /// C-contiguous (count, field length, *trailing) destination of `out_bytes` bytes.
  std::byte* out = nullptr;
  /// Size of `out` in bytes; it must be exactly what the batch needs.
  std::uint64_t out_bytes = 0;
  /// Optional, `count` entries: rows of each excerpt that came from the member (the rest is
  /// padding); the field length except with pad_mode::fill.
  std::int64_t* valid = nullptr;
  /// The layout every item must have; when unset (row_bytes == 0) the first item's.
  item_layout expect;
  /// This field's fill element (pad_mode::fill) in its items' dtype, when fields differ in
  /// dtype; empty: excerpt_options::fill.
  std::vector<std::byte> fill;
};

/// The rows of one field's excerpt for a batch-wide `length` (checks it is whole).
std::uint64_t field_length(std::uint64_t length, std::uint64_t rate_num, std::uint64_t rate_den);

/// The layout the items `indices[0..count)` of `source` share. Throws errc::out_of_range for
/// a bad index, errc::type_mismatch / errc::invalid_argument naming the first item whose dtype
/// / trailing shape differs from the first item's.
item_layout batch_layout(const dataset& source, const std::int64_t* indices, std::size_t count);

/// Fills every field's `out` with `count` excerpts: excerpt k of a field is rows
/// [start_k, start_k + field length) (field-rate units) of item indices[k]. Everything is
/// checked before the first byte is copied (null `starts`, sources, indices or outputs when
/// count > 0, indices, layouts, starts: 0 <= start, and
/// start <= member length for pad_mode::fill, start + length <= member length for
/// pad_mode::none, a non-empty member for pad_mode::wrap; out_bytes); errors name the archive
/// and member. Copies run on the shared thread pool, reading items in file order; no lock
/// is taken and nothing is allocated per item. Safe to call from many threads at once.
/// An archive that was truncated after it was opened throws errc::corrupt_zip naming the
/// archive, the member and the offset of the read that came up short (of several, the first
/// in file order, whatever the threads' timing): a copy through the mapping (io_mode::map,
/// io_mode::automatic) that meets SIGBUS on the missing pages reads the piece instead. A
/// truncation inside the file's last page leaves that page mapped with zeros past the new
/// end, which a copy through the mapping takes: force io_mode::read for files that may
/// shrink.
void gather(const std::vector<gather_field>& fields, const std::int64_t* starts, std::size_t count,
            const excerpt_options& options);

/// A gather running in the background (see gather_async). Move-only.
class pending_gather {
 public:
  pending_gather();
  /// Takes over the running gather; the moved-from one holds none.
  pending_gather(pending_gather&&) noexcept;
  /// Waits for this gather (as the destructor does), then takes over the other's.
  pending_gather& operator=(pending_gather&&) noexcept;
  /// Waits for the copy to end (an error it raised is dropped): the outputs are never
  /// written after a pending_gather is gone.
  ~pending_gather();
  /// Helps with the copying on the calling thread until every excerpt is in place, then
  /// throws what a read raised (an archive truncated after it was opened, an I/O error);
  /// nothing else can fail (every check was made by gather_async). Later calls return at once.
  void wait();

  struct state;

 private:
  friend pending_gather gather_async(const std::vector<gather_field>&, const std::int64_t*,
                                     std::size_t, const excerpt_options&);
  std::unique_ptr<state> s_;
};

/// gather() in the background: checks everything and throws as gather() does, then returns
/// while the shared pool's workers copy (up to options.threads of them; on a machine with
/// one core, wait() does the copying). `indices` and `starts` may be reused at once; the
/// datasets and the outputs must stay alive and untouched until wait() returns.
pending_gather gather_async(const std::vector<gather_field>& fields, const std::int64_t* starts,
                            std::size_t count, const excerpt_options& options);

/// Single-field gather into a C-contiguous (count, length, *trailing) buffer.
void gather(const dataset& source, const std::int64_t* indices, const std::int64_t* starts,
            std::size_t count, std::byte* out, std::uint64_t out_bytes,
            const excerpt_options& options, std::int64_t* valid = nullptr);

}  // namespace mmnpz
