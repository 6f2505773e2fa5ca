#include <doctest/doctest.h>

#include <string>
#include <utility>
#include <vector>

#include "mmnpz/error.hpp"
#include "mmnpz/npy.hpp"

namespace {

// A .npy file: header text padded as numpy pads it, then `data_bytes` zero bytes.
std::string npy(const std::string& dict, int major = 1, std::size_t data_bytes = 64) {
  std::string out("\x93NUMPY", 6);
  out += static_cast<char>(major);
  out += '\0';
  const std::size_t prefix = major == 1 ? 10 : 12;
  std::string text = dict;
  while ((prefix + text.size() + 1) % 64 != 0) text += ' ';
  text += '\n';
  for (std::size_t k = 0; k < prefix - 8; ++k) out += static_cast<char>((text.size() >> (8 * k)) & 0xFF);
  return out + text + std::string(data_bytes, '\0');
}

mmnpz::npy_header parse(const std::string& file) {
  return mmnpz::read_npy_header(file.data(), file.size(), "f.npz", "m.npy", 1000);
}

std::string error_of(const std::string& file) {
  try {
    parse(file);
  } catch (const mmnpz::error& e) {
    CHECK(e.code() == mmnpz::errc::corrupt_npy);
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST_SUITE("npy") {
  TEST_CASE("reads keys in any order, Python 2 longs and double quotes") {
    const auto h = parse(npy("{\"shape\": (2L, 3), 'fortran_order': True, 'descr': \"<i2\"}"));
    CHECK(h.shape == std::vector<std::uint64_t>{2, 3});
    CHECK(h.fortran_order);
    CHECK(h.type.str() == "<i2");
    CHECK(h.data_offset == 128);  // a 64-byte multiple, as numpy pads
    CHECK(h.nbytes == 12);
  }

  TEST_CASE("reads 0-d, empty and version 2.0 and 3.0 headers") {
    CHECK(parse(npy("{'descr': '<f8', 'fortran_order': False, 'shape': (), }")).size == 1);
    CHECK(parse(npy("{'descr': '<f8', 'fortran_order': False, 'shape': (3, 0), }")).nbytes == 0);
    const auto v2 = parse(npy("{'descr': '|u1', 'fortran_order': False, 'shape': (4,), }", 2));
    CHECK(v2.major_version == 2);
    CHECK(v2.data_offset == 128);
    const auto v3 = parse(npy("{'descr': [('\xe2\x84\xb5', '<u2')], 'fortran_order': False, "
                              "'shape': (4,), }", 3));
    CHECK(v3.type.fields()[0].name == "\xe2\x84\xb5");
  }

  TEST_CASE("reads integers as Python 3 spells them and refuses what Python refuses") {
    const auto shape_of = [](const std::string& shape, int major = 1) {
      return parse(npy("{'descr': '|u1', 'fortran_order': False, 'shape': " + shape + "}", major))
          .shape;
    };
    using dims = std::vector<std::uint64_t>;
    CHECK(shape_of("(1_0, 0x1f, 0o17, 0b101, 00, 0x_1)") == dims{10, 31, 15, 5, 0, 1});
    CHECK(shape_of("(3,)") == dims{3});
    CHECK(shape_of("(2L, 3L)", 2) == dims{2, 3});  // Python 2 longs, in latin-1 headers only
    const std::pair<const char*, const char*> refused[] = {
        {"(03,)", "leading zeros in a decimal integer"},
        {"(1__0,)", "invalid integer literal"},
        {"(1_,)", "invalid integer literal"},
        {"(3l,)", "invalid integer literal"},
        {"(3j,)", "invalid integer literal"},
        {"(0x,)", "expected a digit"},
        {"(3)", "shape must be a tuple"},  // an int in parentheses, by either parser
        {"3", "shape must be a tuple"}};
    for (const auto& refusal : refused) {
      const auto& shape = refusal.first;  // not a structured binding: clang cannot CAPTURE one
      const auto& why = refusal.second;
      CAPTURE(shape);
      const std::string dict =
          "{'descr': '|u1', 'fortran_order': False, 'shape': " + std::string(shape) + ", }";
      CHECK(error_of(npy(dict)).find(why) != std::string::npos);
    }
    CHECK(error_of(npy("{'descr': '|u1', 'fortran_order': False, 'shape': (3L,), }", 3))
              .find("invalid integer literal") != std::string::npos);
    // numpy reads a dimension of 2^63 or more as negative and refuses it; an empty dtype made
    // the array's size 0 here, and 2^64 - 1 items.
    CHECK(error_of(npy("{'descr': '|V0', 'fortran_order': False, 'shape': "
                       "(9223372036854775808,), }"))
              .find("shape holds 9223372036854775808, past numpy's largest dimension, "
                    "2^63 - 1") != std::string::npos);
    CHECK(error_of(npy("{'descr': [('a', '|V0', (0, 18446744073709551615))], 'fortran_order': "
                       "False, 'shape': (1,), }"))
              .find("holds 18446744073709551615, past numpy's largest") != std::string::npos);
    CHECK_THROWS_AS(mmnpz::make_npy_header(mmnpz::dtype::parse("|V0"),
                                           {std::uint64_t{1} << 63}, false),
                    mmnpz::error);
    CHECK(parse(npy("{'descr': '|V0', 'fortran_order': False, 'shape': "
                    "(9223372036854775807,), }"))
              .shape == dims{9223372036854775807ULL});
    CHECK(error_of(npy("{'descr': b'<f4', 'fortran_order': False, 'shape': (3,), }"))
              .find("a bytes literal, where numpy reads only str") != std::string::npos);
  }

  TEST_CASE("decodes latin-1 field names of version 1.0 headers to UTF-8") {
    const auto h = parse(npy("{'descr': [('caf\xe9', '<u2')], 'fortran_order': False, 'shape': (1,), }"));
    CHECK(h.type.fields()[0].name == "caf\xc3\xa9");
  }

  TEST_CASE("reads structured descrs with titles, sub-arrays, nesting and padding") {
    const auto h = parse(npy("{'descr': [(('T', 'a'), '<i4'), ('b', '>f8', (2, 3)), "
                             "('c', [('x', '|u1'), ('', '|V3')]), ('', '|V4')], "
                             "'fortran_order': False, 'shape': (1,), }", 1, 128));
    CHECK(h.type.itemsize() == 4 + 48 + 4 + 4);
    CHECK(h.type.fields()[0].title == "T");
    CHECK(h.type.fields()[1].shape == std::vector<std::uint64_t>{2, 3});
    CHECK(h.type.fields()[2].type.fields().size() == 2);
    CHECK(h.type.descr() == "[(('T', 'a'), '<i4'), ('b', '>f8', (2, 3)), "
                            "('c', [('x', '|u1'), ('', '|V3')]), ('', '|V4')]");
  }

  TEST_CASE("reads sub-array pairs, integer field shapes and the empty record as numpy does") {
    const auto type_of = [](const std::string& descr, const std::string& shape = "(1,)") {
      return parse(npy("{'descr': " + descr + ", 'fortran_order': False, 'shape': " + shape +
                       ", }"))
          .type;
    };
    CHECK(type_of("[]").descr() == "[]");
    CHECK(type_of("[]").itemsize() == 0);
    CHECK(type_of("[]").str() == "|V0");
    CHECK(type_of("('<f4', ())").descr() == "'<f4'");
    CHECK(type_of("('<f4', 1)").descr() == "'<f4'");  // numpy 1.x: (type, 1) is type
    CHECK(type_of("[('a', '<f4', 1)]").descr() == "[('a', '<f4')]");
    CHECK(type_of("[('a', '<f4', 2)]").descr() == "[('a', '<f4', (2,))]");
    // A pair as a field's descr: one shape is the field's, two stay apart as numpy keeps them.
    CHECK(type_of("[('a', ('<f4', (2,)))]").descr() == "[('a', '<f4', (2,))]");
    CHECK(type_of("[('a', ('<f4', (2,)), 1)]").descr() == "[('a', '<f4', (2,))]");
    CHECK(type_of("[('a', ('<f4', ()), (3,))]").descr() == "[('a', '<f4', (3,))]");
    const mmnpz::dtype nested = type_of("[('a', ('<f4', (2,)), (3,)), ('b', '<i2')]");
    CHECK(nested.descr() == "[('a', ('<f4', (2,)), (3,)), ('b', '<i2')]");
    CHECK(nested.itemsize() == 26);
    CHECK(nested.fields()[1].offset == 24);
    const mmnpz::dtype& pair = nested.fields()[0].type;
    CHECK(pair.is_subarray());
    CHECK(pair.subarray_base().descr() == "'<f4'");
    CHECK(pair.subarray_shape() == std::vector<std::uint64_t>{2});
    CHECK(pair.str() == "|V8");
    // As the array's descr, a pair is read only for an array of no item, as numpy reads it.
    CHECK(type_of("(('<f4', (2,)), (3,))", "(0, 4)").descr() == "'<f4'");
    CHECK(error_of(npy("{'descr': ('<f4', (2,)), 'fortran_order': False, 'shape': (1,), }")) ==
          "f.npz: member 'm.npy' at offset 1020: bad .npy header: the sub-array descr ('<f4', "
          "(2,)) is no array's descr (numpy cannot load it either)");
    // numpy's descr_to_dtype ignores what follows a pair's shape; a pair needs its shape.
    CHECK(type_of("('<f4', (), 3)").descr() == "'<f4'");
    CHECK(type_of("[('a', ('<i2', (2,), 'x', None))]").descr() == "[('a', '<i2', (2,))]");
    CHECK(type_of("(('<f4', (2,), 3), (3,), [])", "(0,)").descr() == "'<f4'");
    CHECK(error_of(npy("{'descr': ('<f4',), 'fortran_order': False, 'shape': (1,), }")) ==
          "f.npz: member 'm.npy' at offset 1020: bad .npy header: a sub-array descr must be a "
          "pair (descr, shape)");
    CHECK(error_of(npy("{'descr': [('a', '<f4', (2,), 3)], 'fortran_order': False, "
                       "'shape': (1,), }"))
              .find("a field must be a tuple (name, descr[, shape])") != std::string::npos);
    CHECK_THROWS_AS(mmnpz::parse_descr("('<f4', (2,))"), mmnpz::error);
    CHECK(mmnpz::parse_descr("[('a', ('<f4', (2,)), (3,))]").descr() ==
          "[('a', ('<f4', (2,)), (3,))]");
  }

  TEST_CASE("writes headers numpy's way: padded to 64 bytes, version 2.0 or 3.0 when needed") {
    const std::string h = mmnpz::make_npy_header(mmnpz::dtype::parse("<f4"), {3, 4}, false);
    CHECK(h.size() % 64 == 0);
    const std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }";
    CHECK(h.substr(10, dict.size()) == dict);
    CHECK(h.back() == '\n');
    const auto back = mmnpz::read_npy_header((h + std::string(48, '\0')).data(), h.size() + 48);
    CHECK(back.shape == std::vector<std::uint64_t>{3, 4});
    std::vector<mmnpz::field> many;
    for (int i = 0; i < 3000; ++i) {
      many.push_back({"field_with_a_long_name_" + std::to_string(i), "", mmnpz::dtype::parse("|u1"), {}, 0});
    }
    CHECK(mmnpz::make_npy_header(mmnpz::dtype::structured(many), {1}, false)[6] == 2);
    mmnpz::field aleph{"\xe2\x84\xb5", "", mmnpz::dtype::parse("<u2"), {}, 0};
    CHECK(mmnpz::make_npy_header(mmnpz::dtype::structured({aleph}), {1}, false)[6] == 3);
  }

  TEST_CASE("make_npy_header refuses a header that would not read back as the array") {
    // Each was written: "'descr': ," for a default-constructed dtype, "[('a', )]" for a field
    // of one, a sub-array pair no reader takes, and a size past 2^64 that readers refuse.
    const auto refusal = [](const mmnpz::dtype& t, std::vector<std::uint64_t> shape) {
      try {
        mmnpz::make_npy_header(t, shape, false);
      } catch (const mmnpz::error& e) {
        CHECK(e.code() == mmnpz::errc::invalid_argument);
        return std::string(e.what());
      }
      return std::string("accepted");
    };
    CHECK(refusal(mmnpz::dtype(), {3}) ==
          "<.npy header>: the dtype is empty (a default-constructed mmnpz::dtype; make one with "
          "dtype::parse, dtype::of or dtype::structured)");
    CHECK(refusal(mmnpz::dtype::parse("<f8"), {std::uint64_t{1} << 62, 8}) ==
          "<.npy header>: the array's size overflows");
    CHECK(refusal(mmnpz::dtype::parse("<f8"), std::vector<std::uint64_t>(65, 1)) ==
          "<.npy header>: too many dimensions");
    const std::string unread = " gives a .npy header readers refuse: ";
    const mmnpz::field unset{"a", "", mmnpz::dtype(), {}, 0};
    CHECK(refusal(mmnpz::dtype::structured({unset}), {1})
              .rfind("<.npy header>: the dtype [('a', )]" + unread, 0) == 0);
    CHECK(refusal(mmnpz::dtype::subarray(mmnpz::dtype::parse("<f4"), {2}), {1})
              .rfind("<.npy header>: the dtype ('<f4', (2,))" + unread, 0) == 0);
    CHECK(refusal(mmnpz::dtype::parse("<f8"), {2, 3}) == "accepted");
  }

  TEST_CASE("refuses malformed headers, naming the file, member and offset") {
    // Without a file or member, the message starts with the offset (it began with a blank).
    try {
      mmnpz::read_npy_header("\x93NUMPX", 6);
      FAIL("no error");
    } catch (const mmnpz::error& e) {
      CHECK(std::string(e.what()) == "at offset 0: not a .npy array: bad magic");
    }
    CHECK(error_of("\x93NUMPX") == "f.npz: member 'm.npy' at offset 1000: not a .npy array: bad magic");
    CHECK(error_of(std::string("\x93NUMPY\x04\x00", 8) + "xx") ==
          "f.npz: member 'm.npy' at offset 1006: unsupported .npy version 4.0");
    CHECK(error_of(std::string("\x93NUMPY\x01\x00\xff\x00", 10)) ==
          "f.npz: member 'm.npy' at offset 1010: header length 255 runs past the end of the "
          "member (0 bytes remain)");
    CHECK(error_of(npy("['descr']")) ==
          "f.npz: member 'm.npy' at offset 1010: bad .npy header: the header is not a dictionary");
    CHECK(error_of(npy("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'x': 1}")) ==
          "f.npz: member 'm.npy' at offset 1066: bad .npy header: unexpected key (expected "
          "descr, fortran_order, shape)");
    CHECK(error_of(npy("{'descr': '<f4', 'fortran_order': False}")) ==
          "f.npz: member 'm.npy' at offset 1010: bad .npy header: missing key 'shape'");
    CHECK(error_of(npy("{'descr': '<f5', 'fortran_order': False, 'shape': (1,)}")) ==
          "f.npz: member 'm.npy' at offset 1020: bad .npy header: invalid dtype '<f5': floats "
          "have size 2, 4, 8 or 16");
    CHECK(error_of(npy("{'descr': '<f4', 'fortran_order': 0, 'shape': (1,)}")) ==
          "f.npz: member 'm.npy' at offset 1044: bad .npy header: fortran_order must be True or "
          "False");
    CHECK(error_of(npy("{'descr': '<f4', 'fortran_order': False, 'shape': (-1,)}")) ==
          "f.npz: member 'm.npy' at offset 1061: bad .npy header: shape must hold non-negative "
          "integers");
    CHECK(error_of(npy("{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, "
                       "4294967296)}")) ==
          "f.npz: member 'm.npy' at offset 1060: bad .npy header: shape (4294967296, "
          "4294967296) overflows");
    CHECK(error_of(npy("{'descr': '<f4', 'fortran_order': False, 'shape': (17,)}")) ==
          "f.npz: member 'm.npy' at offset 1128: array data of 68 bytes (shape (17,), <f4) runs "
          "past the end of the member (64 bytes remain)");
    std::string deep = "{'descr': ";
    for (int i = 0; i < 40; ++i) deep += "[('a', ";
    deep += "'<f4'";
    for (int i = 0; i < 40; ++i) deep += ")]";
    CHECK(error_of(npy(deep + ", 'fortran_order': False, 'shape': (1,)}"))
              .find("bad .npy header: nested too deeply") != std::string::npos);
    std::string many_dims = "{'descr': '<f4', 'fortran_order': False, 'shape': (";
    for (int i = 0; i < 65; ++i) many_dims += "1,";
    CHECK(error_of(npy(many_dims + ")}")).find("shape has more than 64 dimensions") !=
          std::string::npos);
  }

  TEST_CASE("npy_header_size() reads the header's length from the first 10 or 12 bytes") {
    const std::string v1 = npy("{'descr': '<f4', 'fortran_order': False, 'shape': (16,), }");
    const std::string v2 = npy("{'descr': '<f4', 'fortran_order': False, 'shape': (16,), }", 2);
    CHECK(mmnpz::npy_header_size(v1.data(), 10) == 128);  // 10 + 60 + 1, padded to 64
    CHECK(mmnpz::npy_header_size(v1.data(), v1.size()) == 128);
    CHECK(mmnpz::npy_header_size(v2.data(), 12) == 128);
    CHECK(mmnpz::npy_header_size(v1.data(), 9) == 0);   // too short to tell
    CHECK(mmnpz::npy_header_size(v2.data(), 11) == 0);  // the length field is 4 bytes
    CHECK(mmnpz::npy_header_size("\x93NUMPX\x01\x00\x40\x00", 10) == 0);
    CHECK(mmnpz::npy_header_size("\x93NUMPY\x04\x00\x40\x00", 10) == 0);
    CHECK(mmnpz::npy_header_size("\x93NUMPY\x02\x00\x00\x00\x00\x01", 12) ==
          12 + (std::uint64_t{1} << 24));  // the cap, max_npy_header_len
    CHECK(mmnpz::npy_header_size("\x93NUMPY\x02\x00\x01\x00\x00\x01", 12) == 0);  // over
    CHECK(mmnpz::npy_header_size("\x93NUMPY\x03\x00\x00\x00\xff\x00", 12) ==
          12 + (std::uint64_t{0xff} << 16));
  }

  TEST_CASE("read_npy_header_prefix() decodes a header without its data, checked as a whole") {
    const std::string file = npy("{'descr': '<f4', 'fortran_order': True, 'shape': (4, 4), }");
    const mmnpz::npy_header whole = parse(file);
    const std::uint64_t header_size = mmnpz::npy_header_size(file.data(), 10);
    REQUIRE(header_size == 128);
    REQUIRE(file.size() == 192);
    const mmnpz::npy_header head = mmnpz::read_npy_header_prefix(
        file.data(), header_size, file.size(), "f.npz", "m.npy", 1000);
    CHECK(head.type == whole.type);
    CHECK(head.shape == whole.shape);
    CHECK(head.fortran_order);
    CHECK(head.data_offset == 128);
    CHECK(head.nbytes == 64);
    // The data must fit the member, not the bytes at hand; the message is read_npy_header()'s.
    const std::string big = npy("{'descr': '<f4', 'fortran_order': False, 'shape': (17,), }");
    CHECK_THROWS_WITH_AS(
        mmnpz::read_npy_header_prefix(big.data(), 130, big.size(), "f.npz", "m.npy", 1000),
        error_of(big).c_str(), mmnpz::error);
    const std::string long_header = std::string("\x93NUMPY\x01\x00\xff\x00", 10) + "{";
    CHECK_THROWS_WITH_AS(
        mmnpz::read_npy_header_prefix(long_header.data(), 11, 200, "f.npz", "m.npy", 1000),
        "f.npz: member 'm.npy' at offset 1010: header length 255 runs past the end of the member "
        "(190 bytes remain)",
        mmnpz::error);
    // Too few bytes at hand for a header that fits is the caller's mistake.
    try {
      mmnpz::read_npy_header_prefix(file.data(), 127, file.size(), "f.npz", "m.npy", 1000);
      FAIL("no error");
    } catch (const mmnpz::error& e) {
      CHECK(e.code() == mmnpz::errc::invalid_argument);
      CHECK(std::string(e.what()) ==
            "f.npz: member 'm.npy' at offset 1010: only the first 127 of the member's 192 bytes "
            "were given: too few for its .npy header");
    }
    CHECK_THROWS_AS(mmnpz::read_npy_header_prefix(file.data(), 7, file.size()), mmnpz::error);
    CHECK_THROWS_AS(mmnpz::read_npy_header_prefix(file.data(), file.size(), 150), mmnpz::error);
  }

  TEST_CASE("computes C and Fortran byte strides") {
    CHECK(mmnpz::byte_strides({2, 3, 4}, 8, false) == std::vector<std::int64_t>{96, 32, 8});
    CHECK(mmnpz::byte_strides({2, 3, 4}, 8, true) == std::vector<std::int64_t>{8, 16, 48});
    CHECK(mmnpz::byte_strides({}, 8, false).empty());
    const std::uint64_t big = std::uint64_t{1} << 31;  // (2^31, 2^31, 0) of 2 bytes: 2^63
    CHECK(mmnpz::byte_strides({big, big / 2, 0}, 2, false) ==
          std::vector<std::int64_t>{0, 0, 2});
    CHECK(mmnpz::byte_strides({0, big, big / 2}, 2, false) ==
          std::vector<std::int64_t>{std::int64_t{1} << 62, std::int64_t{1} << 31, 2});
    CHECK_THROWS_WITH_AS(mmnpz::byte_strides({big, big, 0}, 2, true),
                         "<byte_strides>: an array of shape (2147483648, 2147483648, 0) and "
                         "2-byte items is too big: its byte strides overflow int64",
                         mmnpz::error);
  }
}
