// The ZIP codec: each record emitted and parsed back gives what went in, its bytes are laid
// out as the APPNOTE says, and malformed bytes are refused where they are parsed.
#include <doctest/doctest.h>

#include <cstring>
#include <string>

#include "mmnpz/error.hpp"
#include "zip/crc32.hpp"
#include "zip/format.hpp"
#include "zip/records.hpp"

namespace zip = mmnpz::zip;

namespace {

const std::string path = "codec.zip";
const mmnpz::detail::context ctx{path};

// A cursor over `bytes`, which must outlive it (never a temporary).
mmnpz::detail::byte_reader cursor(const std::string& bytes, std::uint64_t offset = 0) {
  return mmnpz::detail::byte_reader(reinterpret_cast<const std::byte*>(bytes.data()),
                                    bytes.size(), offset, ctx, mmnpz::errc::corrupt_zip);
}

std::uint64_t le(const std::string& b, std::size_t at, int n) {
  std::uint64_t v = 0;
  for (int k = n - 1; k >= 0; --k) v = v << 8 | static_cast<unsigned char>(b[at + k]);
  return v;
}

}  // namespace

TEST_SUITE("zip records") {
  TEST_CASE("a local header round-trips, with its alignment record and the data offset") {
    zip::local_header_spec s;
    s.name = "clip_0.npy";
    s.flags = 0;
    s.dos_time = 0x6a21;
    s.dos_date = 0x5b77;
    s.crc32 = 0xdeadbeef;
    s.compressed_size = s.uncompressed_size = 1234;
    s.align_pad = 20;
    s.alignment = 64;
    std::string b;
    zip::emit_local_header(b, s);
    CHECK(b.size() == zip::local_header_size_of(s));
    CHECK(b.size() == 30 + 10 + 20);
    CHECK(b.compare(0, 4, "PK\x03\x04") == 0);
    CHECK(le(b, zip::local_crc_offset, 4) == 0xdeadbeef);
    CHECK(le(b, 28, 2) == 20);                 // extra length
    CHECK(le(b, 40, 2) == zip::align_extra_id);  // the alignment record
    CHECK(le(b, 44, 2) == 64);

    const std::string with_data = b + "DATA";
    auto r = cursor(with_data, 1000);
    const zip::local_header h = zip::parse_local_header(r);
    CHECK(h.offset == 1000);
    CHECK(h.name == "clip_0.npy");
    CHECK(h.name_offset == 1030);
    CHECK(h.crc32 == 0xdeadbeef);
    CHECK(h.compressed_size == 1234);
    CHECK(h.uncompressed_size == 1234);
    CHECK(h.dos_time == 0x6a21);
    CHECK(h.dos_date == 0x5b77);
    CHECK_FALSE(h.has_zip64);
    CHECK_FALSE(h.has_data_descriptor());
    CHECK(h.extra.size() == 20);
    CHECK(h.data_offset == 1000 + b.size());
    CHECK(r.remaining() == 4);
  }

  TEST_CASE("a zip64 local header states its sizes in the zip64 record only") {
    zip::local_header_spec s;
    s.name = "big.npy";
    s.zip64 = true;
    s.compressed_size = s.uncompressed_size = 5'000'000'000ull;
    std::string b;
    zip::emit_local_header(b, s);
    CHECK(le(b, 18, 4) == 0xFFFFFFFF);
    CHECK(le(b, 22, 4) == 0xFFFFFFFF);
    CHECK(le(b, 4, 2) == 45);  // version needed for zip64
    auto r = cursor(b);
    const zip::local_header h = zip::parse_local_header(r);
    CHECK(h.has_zip64);
    CHECK(h.compressed_size == 5'000'000'000ull);
    CHECK(h.uncompressed_size == 5'000'000'000ull);
  }

  TEST_CASE("a local header with a bad signature or cut short is refused at its offset") {
    std::string b;
    zip::local_header_spec s;
    s.name = "a.npy";
    zip::emit_local_header(b, s);
    std::string bad = b;
    bad[0] = 'X';
    auto r = cursor(bad, 100);
    CHECK_THROWS_WITH_AS(zip::parse_local_header(r),
                         "codec.zip at offset 100: bad local header signature", mmnpz::error);
    const std::string b20 = b.substr(0, 20), b32 = b.substr(0, 32);
    auto cut = cursor(b20, 100);
    CHECK_THROWS_WITH_AS(zip::parse_local_header(cut),
                         "codec.zip at offset 104: truncated local header: needs 26 bytes, 16 "
                         "remain",
                         mmnpz::error);
    auto no_name = cursor(b32, 0);
    CHECK_THROWS_WITH_AS(zip::parse_local_header(no_name),
                         "codec.zip at offset 30: truncated local header name: needs 5 bytes, 2 "
                         "remain",
                         mmnpz::error);
  }

  TEST_CASE("a central entry round-trips, switching to zip64 at CPython's limit") {
    for (const std::uint64_t big : {std::uint64_t{1000}, zip::zip64_limit, std::uint64_t{9'000'000'000}}) {
      CAPTURE(big);
      zip::central_entry e;
      e.name = "d\xc3\xa9j\xc3\xa0.npy";
      e.flags = zip::name_flags(e.name);
      e.method = zip::method_deflated;
      e.crc32 = 0x01020304;
      e.compressed_size = big / 2;
      e.uncompressed_size = big;
      e.local_header_offset = big + 7;
      std::string b;
      zip::emit_central_entry(b, e);
      CHECK(b.compare(0, 4, "PK\x01\x02") == 0);
      const bool zip64 = big >= zip::zip64_limit;
      const int saturated = (big >= zip::zip64_limit) + (big / 2 >= zip::zip64_limit) +
                            (big + 7 >= zip::zip64_limit);
      CHECK(le(b, 30, 2) == (zip64 ? 4 + 8 * saturated : 0));  // extra length
      CHECK(le(b, 24, 4) == (zip64 ? 0xFFFFFFFF : big));
      std::string converted = "stale";
      auto r = cursor(b, 50);
      const zip::central_entry p = zip::parse_central_entry(r, 3, converted);
      CHECK(r.empty());
      CHECK(converted.empty());  // flag bit 11: the name is UTF-8 as it is
      CHECK(p.offset == 50);
      CHECK(p.name == e.name);
      CHECK(p.flags == zip::flag_utf8);
      CHECK(p.method == zip::method_deflated);
      CHECK(p.crc32 == 0x01020304);
      CHECK(p.compressed_size == big / 2);
      CHECK(p.uncompressed_size == big);
      CHECK(p.local_header_offset == big + 7);
      CHECK(p.disk == 0);
    }
  }

  TEST_CASE("a central entry's cp437 name is converted, and a short zip64 record is named") {
    zip::central_entry e;
    e.name = "\x82t\x82.npy";  // "été" in cp437, no UTF-8 flag
    std::string b;
    zip::emit_central_entry(b, e);
    std::string converted;
    auto r = cursor(b);
    zip::parse_central_entry(r, 0, converted);
    CHECK(converted == "\xc3\xa9t\xc3\xa9.npy");

    // A saturated size with a zip64 record too short to hold it.
    zip::central_entry s;
    s.name = "a.npy";
    s.uncompressed_size = 0xFFFFFFFF;
    std::string sb;
    zip::emit_central_entry(sb, s);  // 0xFFFFFFFF >= the limit: a zip64 record of 8 bytes
    sb[30] = 4;                      // extra length: 4, the record's header alone
    sb[sb.size() - 8 - 2] = 0;       // the record's own length: 0
    sb.resize(sb.size() - 8);
    auto z = cursor(sb);
    CHECK_THROWS_WITH_AS(zip::parse_central_entry(z, 0, converted),
                         "codec.zip: member 'a.npy' at offset 55: zip64 extra field of 0 bytes "
                         "has no uncompressed size",
                         mmnpz::error);
  }

  TEST_CASE("a name flagged UTF-8 that is not valid UTF-8 is read as cp437") {
    zip::central_entry e;
    e.name = "\xff\x82.npy";  // not UTF-8, whatever the flag says
    e.flags = zip::flag_utf8;
    std::string b;
    zip::emit_central_entry(b, e);
    std::string converted;
    auto r = cursor(b);
    zip::parse_central_entry(r, 0, converted);
    CHECK(converted == "\xc2\xa0\xc3\xa9.npy");  // U+00A0, U+00E9 as cp437 has them
    std::string out;
    CHECK_FALSE(zip::cp437_to_utf8("d\xc3\xa9j\xc3\xa0", zip::flag_utf8, out));  // valid: kept
  }

  TEST_CASE("a central entry with a bad signature names its index") {
    std::string b(46, '\0');
    auto r = cursor(b, 10);
    std::string converted;
    CHECK_THROWS_WITH_AS(zip::parse_central_entry(r, 7, converted),
                         "codec.zip at offset 10: bad central directory entry signature (entry 7)",
                         mmnpz::error);
  }

  TEST_CASE("end records round-trip, with zip64 records when a count or offset needs them") {
    for (const std::uint64_t count : {std::uint64_t{3}, std::uint64_t{70000}}) {
      CAPTURE(count);
      std::string b;
      zip::emit_end_records(b, count, 4096, 123456, "hello");
      const bool zip64 = count >= 0xFFFF;
      CHECK(b.size() == (zip64 ? 56 + 20 : 0) + 22 + 5);
      std::uint64_t at = 0;
      if (zip64) {
        const std::string rec64 = b.substr(0, 56), loc = b.substr(56, 20);
        auto r64 = cursor(rec64);
        const zip::end_record z = zip::parse_end64_record(r64);
        CHECK(r64.empty());
        CHECK(z.entries == count);
        CHECK(z.cd_size == 4096);
        CHECK(z.cd_offset == 123456);
        auto rl = cursor(loc);
        const zip::end64_locator l = zip::parse_end64_locator(rl);
        CHECK(l.end64_offset == 123456 + 4096);
        CHECK(l.disks == 1);
        at = 76;
      }
      const std::string classic = b.substr(at);
      auto r = cursor(classic, at);
      const zip::end_record e = zip::parse_end_record(r);
      CHECK(e.offset == at);
      CHECK(e.entries == (zip64 ? 0xFFFF : count));
      CHECK(e.cd_size == (zip64 ? 0xFFFFFFFF : 4096));
      CHECK(e.comment == "hello");
      CHECK(e.comment_len == 5);
    }
  }

  TEST_CASE("an end record after bytes that end like a zip64 locator brings its own locator") {
    // Readers take a locator's signature in the 20 bytes before the classic end record for the
    // archive's locator: leading bytes kept before an empty directory may hold one.
    std::string lookalike;
    zip::put32(lookalike, zip::end64_locator_sig);
    lookalike += std::string(16, '\0');
    for (const std::size_t directory : {std::size_t{0}, std::size_t{12}}) {
      CAPTURE(directory);
      // `directory` bytes of the directory in `out` already; `before` the file's bytes ahead.
      std::string out(directory, 'd');
      const std::string before = "stub" + lookalike.substr(0, 20 - directory);
      zip::emit_end_records(out, 0, directory, 4096, "", before);
      REQUIRE(out.size() == directory + 56 + 20 + 22);
      const std::string rec64 = out.substr(directory, 56);
      auto r64 = cursor(rec64);
      const zip::end_record z = zip::parse_end64_record(r64);
      CHECK(z.entries == 0);
      CHECK(z.cd_size == directory);
      CHECK(z.cd_offset == 4096);
      const std::string loc = out.substr(directory + 56, 20);
      auto rl = cursor(loc);
      CHECK(zip::parse_end64_locator(rl).end64_offset == 4096 + directory);
    }
    // Without a lookalike there, or with too few bytes before to hold one, no zip64 records.
    for (const std::string& before : {std::string(20, 'x'), lookalike.substr(0, 19)}) {
      std::string out;
      zip::emit_end_records(out, 0, 0, 4096, "", before);
      CHECK(out.size() == 22);
    }
  }

  TEST_CASE("an end record whose comment runs past the bytes keeps what is there") {
    std::string b;
    zip::emit_end_records(b, 0, 0, 0, "comment");
    const std::string cut = b.substr(0, b.size() - 3);
    auto r = cursor(cut);
    const zip::end_record e = zip::parse_end_record(r);
    CHECK(e.comment == "comm");
    CHECK(e.comment_len == 7);
  }

  TEST_CASE("data descriptors round-trip in both widths, with and without signature") {
    for (const bool zip64 : {false, true}) {
      for (const bool sig : {false, true}) {
        CAPTURE(zip64);
        CAPTURE(sig);
        zip::data_descriptor d;
        d.crc32 = 0xcafebabe;
        d.compressed_size = 77;
        d.uncompressed_size = 99;
        d.zip64 = zip64;
        d.has_signature = sig;
        std::string b;
        zip::emit_data_descriptor(b, d);
        CHECK(b.size() == d.size());
        auto r = cursor(b);
        const zip::data_descriptor p = zip::parse_data_descriptor(r, zip64);
        CHECK(r.empty());
        CHECK(p.has_signature == sig);
        CHECK(p.crc32 == 0xcafebabe);
        CHECK(p.compressed_size == 77);
        CHECK(p.uncompressed_size == 99);
        auto m = cursor(b);
        CHECK(zip::match_data_descriptor(m, !zip64, 0xcafebabe, 77, 99));  // other width too
        CHECK(m.empty());
        auto wrong = cursor(b);
        CHECK_FALSE(zip::match_data_descriptor(wrong, zip64, 0xcafebabe, 78, 99));
        CHECK(wrong.remaining() == b.size());
      }
    }
  }

  TEST_CASE("extra fields split into records; a record past the field is refused or ends it") {
    std::string f;
    zip::put16(f, 0x5455);
    zip::put16(f, 3);
    f += "abc";
    zip::emit_align(f, 10, 4096);
    f += "zz";  // too short for a record header: ignored
    auto r = cursor(f, 40);
    const auto recs = zip::parse_extra(r);
    REQUIRE(recs.size() == 2);
    CHECK(recs[0].id == 0x5455);
    CHECK(recs[0].data == "abc");
    CHECK(recs[0].offset == 44);
    CHECK(recs[1].id == zip::align_extra_id);
    CHECK(recs[1].data.size() == 6);
    CHECK(le(std::string(recs[1].data), 0, 2) == 4096);

    std::string bad;
    zip::put16(bad, 1);
    zip::put16(bad, 30);
    bad += "short";
    auto strict = cursor(bad, 0);
    CHECK_THROWS_WITH_AS(zip::parse_extra(strict),
                         "codec.zip at offset 4: extra field record of 30 bytes runs past the "
                         "extra field (5 bytes remain)",
                         mmnpz::error);
    auto lenient = cursor(bad, 0);
    CHECK(zip::parse_extra(lenient, /*strict=*/false).empty());
  }

  TEST_CASE("records are recognised by their signatures when scanning") {
    std::string b;
    zip::local_header_spec s;
    s.name = "a";
    zip::emit_local_header(b, s);
    const auto* p = reinterpret_cast<const std::byte*>(b.data());
    CHECK(zip::record_at(p, b.size()) == zip::record_kind::local_header);
    CHECK(zip::record_at(p, 3) == zip::record_kind::unknown);
    const std::string padded = "junk" + b;
    CHECK(zip::find_local_header(reinterpret_cast<const std::byte*>(padded.data()), padded.size(),
                                 0) == 4);
    CHECK(zip::find_local_header(reinterpret_cast<const std::byte*>(padded.data()), 3, 0) == 3);
    std::string dir;
    zip::central_entry e;
    e.name = "a";
    zip::emit_central_entry(dir, e);
    zip::emit_end_records(dir, 1, 47, 0);
    auto r = cursor(dir);
    CHECK(zip::skip_directory_record(r));
    CHECK(zip::skip_directory_record(r));
    CHECK(r.empty());
    auto l = cursor(b);
    CHECK_FALSE(zip::skip_directory_record(l));
  }

  TEST_CASE("a directory record's length comes from its fixed part, 0 when that is cut or it is "
            "no directory record") {
    std::string dir;
    zip::central_entry e;
    e.name = "abc";
    zip::emit_central_entry(dir, e);
    const std::size_t entry = dir.size();
    zip::emit_end_records(dir, 70000, 4096, 123456, "hello");  // zip64 end, locator, end
    const auto length = [&](std::size_t at, std::size_t avail) {
      return zip::directory_record_length(reinterpret_cast<const std::byte*>(dir.data()) + at,
                                          avail);
    };
    CHECK(length(0, dir.size()) == entry);
    CHECK(entry == 46 + 3);
    CHECK(length(entry, dir.size() - entry) == 56);
    CHECK(length(entry + 56, 20) == 20);
    CHECK(length(entry + 76, 22) == 22 + 5);  // the comment is counted, held or not
    CHECK(length(entry, 11) == 0);             // the zip64 record's size field is cut
    CHECK(length(entry + 76, 21) == 0);
    CHECK(length(0, 45) == 0);
    std::string local;
    zip::local_header_spec s;
    s.name = "a";
    zip::emit_local_header(local, s);
    CHECK(zip::directory_record_length(reinterpret_cast<const std::byte*>(local.data()),
                                       local.size()) == 0);
    std::string huge = dir.substr(entry, 56);
    huge.replace(4, 8, std::string(8, '\xff'));  // a size field of 2^64 - 1
    CHECK(zip::directory_record_length(reinterpret_cast<const std::byte*>(huge.data()), 56) ==
          ~std::uint64_t{0});
  }
}
