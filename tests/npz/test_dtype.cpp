#include <doctest/doctest.h>

#include <stdexcept>
#include <utility>

#include "mmnpz/dtype.hpp"

using mmnpz::byte_order;
using mmnpz::dtype;

TEST_SUITE("dtype") {
  TEST_CASE("parses every simple kind numpy writes, with its size and byte order") {
    struct expect {
      const char* descr;
      char kind;
      std::uint64_t itemsize;
      byte_order order;
    };
    const expect cases[] = {
        {"|b1", 'b', 1, byte_order::not_applicable}, {"|i1", 'i', 1, byte_order::not_applicable},
        {"<i8", 'i', 8, byte_order::little},         {">u2", 'u', 2, byte_order::big},
        {"<f2", 'f', 2, byte_order::little},         {">f8", 'f', 8, byte_order::big},
        {"<c16", 'c', 16, byte_order::little},       {"|S5", 'S', 5, byte_order::not_applicable},
        {">U7", 'U', 28, byte_order::big},           {"|V16", 'V', 16, byte_order::not_applicable},
        {"<M8[ns]", 'M', 8, byte_order::little},     {">m8[D]", 'm', 8, byte_order::big},
        {"<M8", 'M', 8, byte_order::little},         {"|O", 'O', 8, byte_order::not_applicable},
        {"<i1", 'i', 1, byte_order::not_applicable},
    };
    for (const auto& c : cases) {
      CAPTURE(c.descr);
      const dtype t = dtype::parse(c.descr);
      CHECK(t.kind() == c.kind);
      CHECK(t.itemsize() == c.itemsize);
      CHECK(t.order() == c.order);
    }
    CHECK(dtype::parse("<M8[10ms]").datetime_unit() == "10ms");
    CHECK(dtype::parse("<i1").str() == "|i1");
    CHECK(dtype::parse("|O").has_object());
    CHECK(dtype::parse("<f4").descr() == "'<f4'");
  }

  TEST_CASE("reads a kind without a byte order in native order, as numpy does") {
    // What np.dtype() makes of each: native order for multi-byte kinds, none for the rest.
    CHECK(dtype::parse("f8") == dtype::parse("=f8"));
    CHECK(dtype::parse("f8").str() == "<f8");  // the development machines are little-endian
    CHECK(dtype::parse("i4").str() == "<i4");
    CHECK(dtype::parse("U3").str() == "<U3");
    CHECK(dtype::parse("M8[ns]").str() == "<M8[ns]");
    CHECK(dtype::parse("u1").str() == "|u1");
    CHECK(dtype::parse("b1").str() == "|b1");
    CHECK(dtype::parse("S5").str() == "|S5");
    CHECK(dtype::parse("O").str() == "|O");
    CHECK_THROWS_WITH_AS(dtype::parse("f3"), "invalid dtype 'f3': floats have size 2, 4, 8 or 16",
                         std::invalid_argument);
  }

  TEST_CASE("reads numpy's one-character type codes as np.dtype reads them") {
    // np.dtype(code).str for each, numpy 1.24 on x86-64 Linux.
    const std::pair<const char*, const char*> codes[] = {
        {"?", "|b1"},   {"b", "|i1"},   {"B", "|u1"},   {"h", "<i2"},  {"H", "<u2"},
        {"i", "<i4"},   {"I", "<u4"},   {"l", "<i8"},   {"L", "<u8"},  {"q", "<i8"},
        {"Q", "<u8"},   {"p", "<i8"},   {"P", "<u8"},   {"e", "<f2"},  {"f", "<f4"},
        {"d", "<f8"},   {"g", "<f16"},  {"F", "<c8"},   {"D", "<c16"}, {"G", "<c32"},
        {"c", "|S1"},   {"S", "|S0"},   {"a", "|S0"},   {"U", "<U0"},  {"V", "|V0"},
        {"M", "<M8"},   {"m", "<m8"},   {"O", "|O"},    {"<i", "<i4"}, {">e", ">f2"},
        {"<b", "|i1"},  {"<?", "|b1"},  {"=i", "<i4"},  {"|i", "<i4"}, {"|e", "<f2"},
        {"|f8", "<f8"}, {"a3", "|S3"},  {"<a3", "|S3"}, {"<S", "|S0"}, {"<M", "<M8"}};
    for (const auto& spelling : codes) {
      const char* code = spelling.first;  // not a structured binding: clang cannot CAPTURE one
      CAPTURE(code);
      CHECK(dtype::parse(code).str() == spelling.second);
    }
    CHECK(dtype::parse("O").has_object());
    CHECK(dtype::parse("b1") == dtype::parse("?"));  // "b" alone is int8, "b1" a bool
    for (const char* refused : {"u", "b2", "?1", "c1", "i3", "<i0", "M[s]"}) {
      CAPTURE(refused);
      CHECK_THROWS_AS(dtype::parse(refused), std::invalid_argument);  // as np.dtype refuses
    }
  }

  TEST_CASE("spells datetime units as numpy's str does, so that equal units compare equal") {
    // Each kept its spelling: "<M8[1ns]" != "<M8[ns]", "<m8[generic]" != "<m8" (numpy 1.24).
    const std::pair<const char*, const char*> cases[] = {
        {"<M8[1ns]", "<M8[ns]"},   {"<M8[001ns]", "<M8[ns]"}, {"<M8[010ns]", "<M8[10ns]"},
        {"<m8[generic]", "<m8"},   {"<M8[1generic]", "<M8"},  {"<M8[2generic]", "<M8"},
        {"<M8[0ns]", "<M8[0ns]"}, {">m8[25s]", ">m8[25s]"}};
    for (const auto& c : cases) {
      const char* descr = c.first;
      CAPTURE(descr);
      CHECK(dtype::parse(descr).str() == c.second);
      CHECK(dtype::parse(descr) == dtype::parse(c.second));
    }
    CHECK(dtype::parse("<m8[generic]").datetime_unit().empty());
    CHECK_THROWS_WITH_AS(dtype::parse("<M8[]"),
                         "invalid dtype '<M8[]': empty datetime unit (numpy writes none: '<M8')",
                         std::invalid_argument);
    // Neither is a type on 64-bit Linux (np.dtype refuses them): they were written.
    CHECK_THROWS_WITH_AS(dtype::parse("<f12"),
                         "invalid dtype '<f12': floats have size 2, 4, 8 or 16",
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(dtype::parse("<c24"),
                         "invalid dtype '<c24': complex numbers have size 8, 16 or 32",
                         std::invalid_argument);
    // A count too large for numpy was said to be missing.
    CHECK_THROWS_WITH_AS(dtype::parse("|V9223372036854775807"),
                         "invalid dtype '|V9223372036854775807': a byte count of "
                         "9223372036854775807 is too large",
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(dtype::parse("<U4x"),
                         "invalid dtype '<U4x': a character count must follow",
                         std::invalid_argument);
  }

  TEST_CASE("reads a datetime unit with a divisor as numpy's multiple of a smaller unit") {
    const std::pair<const char*, const char*> cases[] = {
        {"<M8[us/2]", "<M8[500ns]"}, {"<m8[10s/2]", "<m8[5000ms]"}, {"<M8[Y/4]", "<M8[3M]"},
        {"<M8[Y/5]", "<M8[73D]"},    {"<M8[7M/3]", "<M8[70D]"},     {"<M8[W/4]", "<M8[42h]"},
        {"<M8[D/24]", "<M8[h]"},     {"<M8[m/60]", "<M8[s]"},       {"<M8[fs/2]", "<M8[500as]"},
        {"<M8[ns/1000000]", "<M8[fs]"}, {"<M8[s/01]", "<M8[s]"},
        {"<M8[0010us/4]", "<M8[2500ns]"}, {"<M8[generic/1]", "<M8"}};
    for (const auto& c : cases) {
      const char* descr = c.first;  // not a structured binding: clang cannot CAPTURE one
      CAPTURE(descr);
      CHECK(dtype::parse(descr).str() == c.second);
    }
    const std::pair<const char*, const char*> refused[] = {
        {"<M8[s/3]", "the divisor 3 divides no smaller datetime unit"},
        {"<M8[as/2]", "the divisor 2 divides no smaller datetime unit"},
        {"<M8[W/11]", "the divisor 11 divides no smaller datetime unit"},  // numpy: 0Y
        {"<M8[s/0]", "a datetime unit's divisor must be a positive integer"},  // numpy: SIGFPE
        {"<M8[s/-2]", "a datetime unit's divisor must be a positive integer"},
        {"<M8[/2]", "unknown datetime unit"},
        {"<M8[us/2/2]", "a datetime unit's divisor must be a positive integer"},
        {"<M8[generic/2]", "a generic datetime unit takes no divisor"},
        {"<M8[999999999Y/2]", "the datetime unit's multiplier is too large"}};  // numpy wraps
    for (const auto& c : refused) {
      const char* descr = c.first;
      CAPTURE(descr);
      CHECK_THROWS_WITH_AS(dtype::parse(descr),
                           ("invalid dtype '" + std::string(descr) + "': " + c.second).c_str(),
                           std::invalid_argument);
    }
  }

  TEST_CASE("refuses malformed descrs with a sentence saying why") {
    CHECK_THROWS_WITH_AS(dtype::parse("<f3"),
                         "invalid dtype '<f3': floats have size 2, 4, 8 or 16",
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(dtype::parse("<M8[fortnight]"),
                         "invalid dtype '<M8[fortnight]': unknown datetime unit",
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(dtype::parse("<q8"), "invalid dtype '<q8': unknown kind 'q'",
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(dtype::parse("x"), "invalid dtype 'x': unknown kind 'x'",
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(dtype::parse("<"), "invalid dtype '<': too short", std::invalid_argument);
    CHECK_THROWS_WITH_AS(dtype::parse(""), "invalid dtype '': too short", std::invalid_argument);
    CHECK_THROWS_AS(dtype::parse("<i99999999999999999"), std::invalid_argument);
  }

  TEST_CASE("maps C++ element types to their dtype and checks them") {
    CHECK(dtype::of<float>().str() == "<f4");
    CHECK(dtype::of<bool>().str() == "|b1");
    CHECK(dtype::of<std::uint8_t>().str() == "|u1");
    CHECK(dtype::of<std::complex<double>>().str() == "<c16");
    CHECK(dtype::parse("<f4").holds<float>());
    CHECK_FALSE(dtype::parse(">f4").holds<float>());
    CHECK_FALSE(dtype::parse("<i4").holds<float>());
    CHECK_FALSE(dtype::parse("<u4").holds<std::int32_t>());
  }

  TEST_CASE("lays out structured dtypes as numpy's descr lists them") {
    mmnpz::field inner{"x", "", dtype::parse("<f4"), {}, 0};
    mmnpz::field nested{"n", "", dtype::structured({inner}), {2}, 0};
    mmnpz::field titled{"t", "Title", dtype::parse(">i2"), {}, 0};
    mmnpz::field pad{"", "", dtype::parse("|V3"), {}, 0};
    const dtype t = dtype::structured({nested, titled, pad});
    CHECK(t.itemsize() == 13);
    CHECK(t.fields()[1].offset == 8);
    CHECK(t.fields()[2].offset == 10);
    CHECK(t.descr() == "[('n', [('x', '<f4')], (2,)), (('Title', 't'), '>i2'), ('', '|V3')]");
    CHECK(t.str() == "|V13");
    CHECK_FALSE(t.holds<std::uint8_t>());
  }

  TEST_CASE("makes numpy's sub-array pairs and its empty record") {
    const dtype pair = dtype::subarray(dtype::parse("<i2"), {2, 3});
    CHECK(pair.is_subarray());
    CHECK(pair.kind() == 'V');
    CHECK(pair.itemsize() == 12);
    CHECK(pair.descr() == "('<i2', (2, 3))");
    CHECK(pair.subarray_base() == dtype::parse("<i2"));
    CHECK_FALSE(dtype::parse("<i2").is_subarray());
    CHECK(dtype::parse("<i2").subarray_base() == dtype::parse("<i2"));
    CHECK_THROWS_AS(dtype::subarray(dtype::parse("<i2"), {}), std::invalid_argument);
    CHECK_THROWS_AS(dtype::subarray(dtype::parse("<f8"), {1ull << 62}), std::invalid_argument);
    // A field of a pair and no shape of its own is the field of the pair's base and shape.
    const dtype flat = dtype::structured({{"a", "", pair, {}, 0}});
    CHECK(flat.descr() == "[('a', '<i2', (2, 3))]");
    CHECK(flat.fields()[0].type == dtype::parse("<i2"));
    const dtype nested = dtype::structured({{"a", "", pair, {4}, 0}});
    CHECK(nested.descr() == "[('a', ('<i2', (2, 3)), (4,))]");
    CHECK(nested.itemsize() == 48);
    const dtype empty = dtype::structured({});
    CHECK(empty.descr() == "[]");
    CHECK(empty.itemsize() == 0);
    CHECK_FALSE(empty.is_structured());
  }

  TEST_CASE("refuses the records numpy refuses, before anything is written of them") {
    const dtype f8 = dtype::parse("<f8");
    const auto refusal = [](std::vector<mmnpz::field> fields) -> std::string {
      try {
        (void)dtype::structured(std::move(fields));
      } catch (const std::invalid_argument& e) {
        return e.what();
      }
      return "accepted";
    };
    CHECK(refusal({{"a", "", f8, {}, 0}, {"a", "", f8, {}, 0}}) == "duplicate field name 'a'");
    CHECK(refusal({{"", "", f8, {}, 0}}) ==
          "a field without a name must be '|Vn' padding, untitled");
    CHECK(refusal({{"", "t", dtype::parse("|V4"), {}, 0}}) ==
          "a field without a name must be '|Vn' padding, untitled");
    CHECK(refusal({{"a", "t", f8, {}, 0}, {"t", "", f8, {}, 0}}) ==
          "field 'a': title 't' is already used as a name or title");
    CHECK(refusal({{"a", "a", f8, {}, 0}}) ==
          "field 'a': title 'a' is already used as a name or title");
    CHECK(refusal({{"a", "t", f8, {}, 0}, {"b", "t", f8, {}, 0}}) ==
          "field 'b': title 't' is already used as a name or title");
    CHECK(refusal({{"", "", dtype::parse("|V4"), {}, 0}, {"", "", dtype::parse("|V4"), {}, 0},
                   {"a", "T", f8, {}, 0}}) == "accepted");  // padding twice, as numpy writes
  }
}

TEST_SUITE("dtype") {
  TEST_CASE("spells field names in a descr exactly as Python's repr does") {
    const auto named = [](const std::string& name) {
      return dtype::structured({{name, "", dtype::parse("<i4"), {}, 0}}).descr();
    };
    CHECK(named("it's") == "[(\"it's\", '<i4')]");
    CHECK(named("a\"b'c") == "[('a\"b\\'c', '<i4')]");
    CHECK(named("tab\there") == "[('tab\\there', '<i4')]");
    CHECK(named("a\xc2\xa0" "b") == "[('a\\xa0b', '<i4')]");            // U+00A0
    CHECK(named("a\xe2\x80\x8b" "b") == "[('a\\u200bb', '<i4')]");      // U+200B
    CHECK(named("caf\xc3\xa9 \xe2\x84\xb5") == "[('caf\xc3\xa9 \xe2\x84\xb5', '<i4')]");
  }
}
