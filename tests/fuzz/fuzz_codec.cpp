// The ZIP codec fed directly: every record parser runs on the input at every signature it
// holds (and at its start), and whatever parses is emitted and parsed again to the same
// values. Parsers may refuse with mmnpz::error; anything else is a bug. Called by the fuzz
// target (fuzz_reader.cpp) on every input.

#include "fuzz_codec.hpp"

#include <stdexcept>
#include <string>

#include "zip/records.hpp"

namespace {

using mmnpz::detail::byte_reader;
namespace zip = mmnpz::zip;

void require(bool ok, const char* what) {
  if (!ok) throw std::logic_error(std::string("fuzz_codec: invariant broken: ") + what);
}

byte_reader over(const std::string& b, const mmnpz::detail::context& ctx) {
  return byte_reader(reinterpret_cast<const std::byte*>(b.data()), b.size(), 0, ctx,
                     mmnpz::errc::corrupt_zip);
}

void local_header_at(byte_reader r, const mmnpz::detail::context& ctx) {
  const zip::local_header h = zip::parse_local_header(r);
  require(h.data_offset == r.offset(), "data offset is not where the cursor stopped");
  zip::local_header_spec s;
  s.name = h.name;
  s.flags = h.flags;
  s.method = h.method;
  s.dos_time = h.dos_time;
  s.dos_date = h.dos_date;
  s.crc32 = h.crc32;
  s.compressed_size = h.compressed_size;
  s.uncompressed_size = h.uncompressed_size;
  s.zip64 = h.has_zip64;
  std::string b;
  zip::emit_local_header(b, s);
  require(b.size() == zip::local_header_size_of(s), "local_header_size_of() is wrong");
  byte_reader again = over(b, ctx);
  const zip::local_header p = zip::parse_local_header(again);
  require(again.empty(), "an emitted local header parses to a different length");
  require(p.name == h.name && p.flags == h.flags && p.method == h.method &&
              p.crc32 == h.crc32 && p.dos_time == h.dos_time && p.dos_date == h.dos_date,
          "local header fields do not round-trip");
  if (h.has_zip64) {
    require(p.compressed_size == h.compressed_size &&
                p.uncompressed_size == h.uncompressed_size,
            "zip64 local sizes do not round-trip");
  }
}

void central_entry_at(byte_reader r, const mmnpz::detail::context& ctx) {
  std::string converted;
  const zip::central_entry e = zip::parse_central_entry(r, 0, converted);
  std::string b;
  zip::emit_central_entry(b, e);
  byte_reader again = over(b, ctx);
  std::string converted_again;
  const zip::central_entry p = zip::parse_central_entry(again, 0, converted_again);
  require(again.empty(), "an emitted central entry parses to a different length");
  require(p.name == e.name && converted_again == converted && p.flags == e.flags &&
              p.method == e.method && p.crc32 == e.crc32 &&
              p.compressed_size == e.compressed_size &&
              p.uncompressed_size == e.uncompressed_size &&
              p.local_header_offset == e.local_header_offset,
          "central entry fields do not round-trip");
}

void end_records_at(byte_reader r, const mmnpz::detail::context& ctx) {
  const zip::end_record e = zip::parse_end_record(r);
  std::string b;
  zip::emit_end_records(b, e.entries, e.cd_size, e.cd_offset, e.comment);
  byte_reader again = over(b, ctx);
  if (zip::record_at(again.here(), again.remaining()) == zip::record_kind::end64) {
    const zip::end_record z = zip::parse_end64_record(again);
    require(z.entries == e.entries && z.cd_size == e.cd_size && z.cd_offset == e.cd_offset,
            "zip64 end record does not round-trip");
    zip::parse_end64_locator(again);
  }
  const zip::end_record p = zip::parse_end_record(again);
  require(again.empty() && p.comment == e.comment, "end record comment does not round-trip");
}

template <class F>
void attempt(F&& f) {
  try {
    f();
  } catch (const mmnpz::error&) {
  }
}

}  // namespace

void fuzz_codec(const std::uint8_t* data, std::size_t size) {
  const std::string path = "fuzz.zip";
  const mmnpz::detail::context ctx{path};
  const auto* p = reinterpret_cast<const std::byte*>(data);
  const auto at = [&](std::size_t k) {
    return byte_reader(p + k, size - k, k, ctx, mmnpz::errc::corrupt_zip);
  };
  attempt([&] {
    byte_reader r = at(0);
    zip::parse_extra(r);
  });
  for (std::size_t k = 0; k < size; ++k) {
    switch (zip::record_at(p + k, size - k)) {
      case zip::record_kind::local_header: attempt([&] { local_header_at(at(k), ctx); }); break;
      case zip::record_kind::central_entry: attempt([&] { central_entry_at(at(k), ctx); }); break;
      case zip::record_kind::end: attempt([&] { end_records_at(at(k), ctx); }); break;
      case zip::record_kind::end64:
        attempt([&] {
          byte_reader r = at(k);
          zip::parse_end64_record(r);
        });
        break;
      case zip::record_kind::end64_locator:
        attempt([&] {
          byte_reader r = at(k);
          zip::parse_end64_locator(r);
        });
        break;
      case zip::record_kind::data_descriptor:
        for (const bool wide : {false, true}) {
          attempt([&] {
            byte_reader r = at(k);
            const zip::data_descriptor d = zip::parse_data_descriptor(r, wide);
            std::string b;
            zip::emit_data_descriptor(b, d);
            require(b.size() == d.size(), "data descriptor size is wrong");
          });
        }
        break;
      case zip::record_kind::unknown: break;
    }
  }
}
