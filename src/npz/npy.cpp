#include "mmnpz/npy.hpp"

#include <algorithm>
#include <cstring>
#include <limits>
#include <set>
#include <stdexcept>

#include "detail/byte_reader.hpp"
#include "detail/errors.hpp"
#include "npz/py_literal.hpp"
#include "detail/utf8.hpp"

namespace mmnpz {
namespace {

using detail::append_utf8;
using detail::byte_reader;

// A parsed Python literal: the subset numpy writes in headers.
struct py_value {
  enum kind_t { str, integer, boolean, none, tuple, list, dict } kind = none;
  std::string text;             // str
  std::uint64_t num = 0;        // integer (magnitude)
  bool negative = false;        // integer sign
  bool flag = false;            // boolean
  std::vector<py_value> items;  // tuple, list; dict as key, value, key, value...
  std::size_t pos = 0;          // where it starts in the header text
};

// Recursive-descent parser over the header text; every index is checked against size.
class literal_parser {
 public:
  /// `latin1`: the text is latin-1 (.npy v1.0 and v2.0) and its strings are converted to UTF-8
  /// as they are read, so that positions stay byte offsets in the file.
  literal_parser(std::string_view text, const detail::context& ctx, std::uint64_t text_offset,
                 bool latin1 = false)
      : s_(text), ctx_(ctx), base_(text_offset), latin1_(latin1) {}

  py_value parse_document() {
    py_value v = value(0);
    skip_space();
    if (i_ != s_.size()) fail("unexpected text after the header dictionary");
    return v;
  }

  [[noreturn]] void fail(const std::string& why) const { fail_at(i_, why); }
  /// Byte `c` as a message shows it: itself when printable ASCII, else escaped ("\\x84"), so
  /// that messages stay UTF-8 (a stray byte would make Python's str of them fail).
  static std::string shown(char c) {
    const auto u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u < 0x7f) return std::string(1, c);
    static const char digits[] = "0123456789abcdef";
    return std::string("\\x") + digits[u >> 4] + digits[u & 15];
  }
  [[noreturn]] void fail_at(std::size_t pos, const std::string& why) const {
    ctx_.fail(errc::corrupt_npy, base_ + pos, "bad .npy header: " + why);
  }

 private:
  void skip_space() {
    while (i_ < s_.size() &&
           (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) {
      ++i_;
    }
  }
  bool eat(char c) {
    skip_space();
    if (i_ < s_.size() && s_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }

  py_value value(std::size_t depth) {
    if (depth > 2 * max_dtype_depth + 4) fail("nested too deeply");
    skip_space();
    if (i_ >= s_.size()) fail("unexpected end of header");
    py_value v;
    v.pos = i_;
    const char c = s_[i_];
    const bool quote_next = i_ + 1 < s_.size() && (s_[i_ + 1] == '\'' || s_[i_ + 1] == '"');
    if (c == 'b' && quote_next) fail("a bytes literal, where numpy reads only str");
    if (c == '\'' || c == '"' || (c == 'u' && quote_next)) {
      v.kind = py_value::str;
      v.text = string_literal();
    } else if (c == '(' || c == '[' || c == '{') {
      const char close = c == '(' ? ')' : c == '[' ? ']' : '}';
      v.kind = c == '(' ? py_value::tuple : c == '[' ? py_value::list : py_value::dict;
      ++i_;
      bool saw_comma = false;
      while (!eat(close)) {
        if (!v.items.empty() && !saw_comma) fail(std::string("expected ',' or '") + close + "'");
        v.items.push_back(value(depth + 1));
        if (v.kind == py_value::dict) {
          if (!eat(':')) fail("expected ':' in dictionary");
          v.items.push_back(value(depth + 1));
        }
        saw_comma = eat(',');
      }
      // (x) without a comma is just x in Python.
      if (v.kind == py_value::tuple && v.items.size() == 1 && !saw_comma) {
        py_value inner = std::move(v.items[0]);
        return inner;
      }
    } else if (c == '-' || c == '+' || (c >= '0' && c <= '9')) {
      v.kind = py_value::integer;
      if (c == '-' || c == '+') {
        v.negative = c == '-';
        ++i_;
      }
      v.num = integer_literal();
    } else if (word("True")) {
      v.kind = py_value::boolean;
      v.flag = true;
    } else if (word("False")) {
      v.kind = py_value::boolean;
    } else if (word("None")) {
      v.kind = py_value::none;
    } else {
      fail("unexpected character '" + shown(c) + "'");
    }
    return v;
  }

  // A Python 3 integer literal, as ast.literal_eval reads it: decimal without leading zeros
  // ("0" and "00" but not "03"), or 0x, 0o, 0b; single underscores between digits. In a
  // latin-1 header (.npy v1.0, v2.0) a Python 2 "L" may follow, which numpy drops there.
  std::uint64_t integer_literal() {
    const std::size_t start = i_;
    unsigned base = 10;
    if (s_[i_] == '0' && i_ + 1 < s_.size()) {
      const char p = static_cast<char>(s_[i_ + 1] | 0x20);
      base = p == 'x' ? 16 : p == 'o' ? 8 : p == 'b' ? 2 : 10;
      if (base != 10) i_ += 2;
    }
    std::uint64_t num = 0;
    std::size_t digits = 0;
    bool leading_zero = false;  // a decimal that starts with 0 may hold only zeros
    while (i_ < s_.size()) {
      const char c = s_[i_];
      const bool separator = c == '_' && (digits > 0 || base != 10) && i_ + 1 < s_.size() &&
                             digit(s_[i_ + 1], base) >= 0;
      if (separator) {
        ++i_;
        continue;
      }
      const int d = digit(c, base);
      if (d < 0) break;
      if (base == 10 && digits == 0) leading_zero = d == 0;
      if (leading_zero && d != 0) fail_at(start, "leading zeros in a decimal integer");
      if (__builtin_mul_overflow(num, base, &num) ||
          __builtin_add_overflow(num, static_cast<unsigned>(d), &num)) {
        fail_at(start, "integer too large");
      }
      ++digits;
      ++i_;
    }
    if (digits == 0) fail("expected a digit");
    if (latin1_ && i_ < s_.size() && s_[i_] == 'L') ++i_;  // Python 2 long
    if (i_ < s_.size() && (digit(s_[i_], 36) >= 0 || s_[i_] == '_')) {
      fail("invalid integer literal");
    }
    return num;
  }

  // The value of digit `c` in `base` (up to 36), or -1.
  static int digit(char c, unsigned base) {
    const int d = c >= '0' && c <= '9'   ? c - '0'
                  : c >= 'a' && c <= 'z' ? c - 'a' + 10
                  : c >= 'A' && c <= 'Z' ? c - 'A' + 10
                                         : -1;
    return d >= 0 && static_cast<unsigned>(d) < base ? d : -1;
  }

  bool word(std::string_view w) {
    if (s_.substr(i_, w.size()) != w) return false;
    i_ += w.size();
    return true;
  }

  std::string string_literal() {
    if (s_[i_] == 'u') ++i_;
    const char quote = s_[i_++];
    std::string out;
    while (true) {
      if (i_ >= s_.size()) fail("unterminated string");
      const char c = s_[i_++];
      if (c == quote) return out;
      if (c != '\\') {
        if (latin1_) {
          append_utf8(out, static_cast<unsigned char>(c));
        } else {
          out += c;
        }
        continue;
      }
      if (i_ >= s_.size()) fail("unterminated string");
      const char e = s_[i_++];
      switch (e) {
        case 'n':
          out += '\n';
          break;
        case 't':
          out += '\t';
          break;
        case 'r':
          out += '\r';
          break;
        case '0':
          out += '\0';
          break;
        case '\\':
        case '\'':
        case '"':
          out += e;
          break;
        case 'x':
          append_utf8(out, hex_digits(2));
          break;
        case 'u':
          append_utf8(out, hex_digits(4));
          break;
        case 'U':
          append_utf8(out, hex_digits(8));
          break;
        default:
          fail("unsupported escape '\\" + shown(e) + "'");
      }
    }
  }

  std::uint32_t hex_digits(int n) {
    std::uint32_t v = 0;
    for (int k = 0; k < n; ++k) {
      if (i_ >= s_.size()) fail("truncated escape");
      const char c = s_[i_++];
      const int d = c >= '0' && c <= '9'   ? c - '0'
                    : c >= 'a' && c <= 'f' ? c - 'a' + 10
                    : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                           : -1;
      if (d < 0) fail("bad hex escape");
      v = v * 16 + static_cast<std::uint32_t>(d);
    }
    if (v > 0x10FFFF) fail("escape out of Unicode range");
    return v;
  }

  std::string_view s_;
  const detail::context& ctx_;
  std::uint64_t base_;
  bool latin1_;
  std::size_t i_ = 0;
};

// Turns the parsed literal into a dtype / shape, reporting problems at their position.
class header_interpreter {
 public:
  explicit header_interpreter(const literal_parser& p) : p_(p) {}

  std::vector<std::uint64_t> shape_of(const py_value& v, const char* what) {
    std::vector<std::uint64_t> shape;
    if (v.kind == py_value::integer) {
      shape.push_back(dimension(v, what));
      return shape;
    }
    if (v.kind != py_value::tuple && v.kind != py_value::list) {
      p_.fail_at(v.pos, std::string(what) + " must be a tuple of integers");
    }
    if (v.items.size() > max_npy_ndim) {
      p_.fail_at(v.pos, std::string(what) + " has more than " + std::to_string(max_npy_ndim) +
                            " dimensions");
    }
    for (const auto& d : v.items) shape.push_back(dimension(d, what));
    return shape;
  }

  dtype dtype_of(const py_value& v, std::size_t depth) {
    if (depth > max_dtype_depth) p_.fail_at(v.pos, "dtype nested too deeply");
    if (v.kind == py_value::str) {
      try {
        return dtype::parse(v.text);
      } catch (const std::invalid_argument& e) {
        p_.fail_at(v.pos, e.what());
      }
    }
    // (descr, shape): numpy's dtype((base, shape)); numpy's descr_to_dtype ignores any item
    // after the shape, and so does this.
    if (v.kind == py_value::tuple) {
      if (v.items.size() < 2) p_.fail_at(v.pos, "a sub-array descr must be a pair (descr, shape)");
      dtype base = dtype_of(v.items[0], depth + 1);
      std::vector<std::uint64_t> shape = subarray_shape_of(v.items[1], "a sub-array's shape");
      if (shape.empty()) return base;
      try {
        return dtype::subarray(std::move(base), std::move(shape));
      } catch (const std::invalid_argument& e) {
        p_.fail_at(v.pos, e.what());
      }
    }
    if (v.kind != py_value::list) p_.fail_at(v.pos, "descr must be a string, a list or a pair");
    std::vector<field> fields;
    std::set<std::string> seen;
    for (const auto& item : v.items) {
      if (item.kind != py_value::tuple || item.items.size() < 2 || item.items.size() > 3) {
        p_.fail_at(item.pos, "a field must be a tuple (name, descr[, shape])");
      }
      field f;
      const py_value& name = item.items[0];
      if (name.kind == py_value::str) {
        f.name = name.text;
      } else if (name.kind == py_value::tuple && name.items.size() == 2 &&
                 name.items[0].kind == py_value::str && name.items[1].kind == py_value::str) {
        f.title = name.items[0].text;
        f.name = name.items[1].text;
      } else {
        p_.fail_at(name.pos, "a field name must be a string or a (title, name) pair");
      }
      f.type = dtype_of(item.items[1], depth + 1);
      if (item.items.size() == 3) f.shape = subarray_shape_of(item.items[2], "a field's shape");
      if (!f.name.empty() && !seen.insert(f.name).second) {
        p_.fail_at(name.pos, "duplicate field name '" + f.name + "'");
      }
      if (f.name.empty() && (f.type.kind() != 'V' || f.type.is_structured())) {
        p_.fail_at(name.pos, "a field without a name must be '|Vn' padding");
      }
      fields.push_back(std::move(f));
    }
    try {
      return dtype::structured(std::move(fields));
    } catch (const std::invalid_argument& e) {
      p_.fail_at(v.pos, e.what());
    }
  }

  // The dtype of a whole array's descr. numpy loads a .npy of a sub-array descr only when it
  // holds no item (its count of items and its shape disagree otherwise), as an empty array of
  // the innermost element type; `shape` is null for a descr alone, whose sub-array is refused.
  dtype array_dtype_of(const py_value& v, const std::vector<std::uint64_t>* shape) {
    dtype t = dtype_of(v, 0);
    if (!t.is_subarray()) return t;
    if (shape && std::find(shape->begin(), shape->end(), 0) != shape->end()) {
      while (t.is_subarray()) {
        dtype base = t.subarray_base();
        t = std::move(base);
      }
      return t;
    }
    p_.fail_at(v.pos, "the sub-array descr " + t.descr() +
                          " is no array's descr (numpy cannot load it either)");
  }

 private:
  // A sub-array's shape (of a field, or of a (descr, shape) pair) as numpy.dtype((base,
  // shape)) reads it: an integer n is (n,), but 1 is no shape at all (numpy 1.x: "(type, 1)"
  // is a deprecated synonym of type, with a FutureWarning).
  std::vector<std::uint64_t> subarray_shape_of(const py_value& v, const char* what) {
    if (v.kind == py_value::integer && !v.negative && v.num == 1) return {};
    return shape_of(v, what);
  }

  std::uint64_t dimension(const py_value& d, const char* what) {
    if (d.kind != py_value::integer || d.negative) {
      p_.fail_at(d.pos, std::string(what) + " must hold non-negative integers");
    }
    if (d.num > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
      // numpy's dimensions are signed: it reads one of 2^63 or more as negative, and refuses.
      p_.fail_at(d.pos, std::string(what) + " holds " + std::to_string(d.num) +
                            ", past numpy's largest dimension, 2^63 - 1");
    }
    return d.num;
  }
  const literal_parser& p_;
};

// The header as numpy writes it for a simple dtype, read without building a literal tree:
//   {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }   then spaces and '\n'.
// Anything else (other spacing, key order, structured dtypes, bad values) returns false and
// goes to the general parser, which also produces the errors.
bool read_numpy_layout(std::string_view text, npy_header& h) {
  const auto eat = [&text](std::string_view prefix) {
    if (text.substr(0, prefix.size()) != prefix) return false;
    text.remove_prefix(prefix.size());
    return true;
  };
  if (!eat("{'descr': '")) return false;
  const std::size_t quote = text.find('\'');
  if (quote == std::string_view::npos) return false;
  const std::string_view descr = text.substr(0, quote);
  text.remove_prefix(quote + 1);
  if (!eat(", 'fortran_order': ")) return false;
  if (eat("True")) {
    h.fortran_order = true;
  } else if (!eat("False")) {
    return false;
  }
  if (!eat(", 'shape': (")) return false;
  h.shape.clear();
  bool comma = false;  // after the last dimension: "(3)" is no tuple in Python
  while (!eat(")")) {
    std::uint64_t d = 0;
    std::size_t digits = 0;
    for (; digits < text.size() && text[digits] >= '0' && text[digits] <= '9'; ++digits) {
      if (digits == 18) return false;  // may not fit: let the general parser decide
      d = d * 10 + static_cast<std::uint64_t>(text[digits] - '0');
    }
    // "03" is no Python integer: the general parser says so
    if (digits == 0 || (digits > 1 && text[0] == '0') || h.shape.size() == max_npy_ndim) {
      return false;
    }
    h.shape.push_back(d);
    text.remove_prefix(digits);
    comma = eat(", ") || eat(",");
    if (comma) continue;
    if (text.substr(0, 1) != ")") return false;
  }
  if (h.shape.size() == 1 && !comma) return false;
  if (!eat(", }")) return false;
  for (char c : text) {  // padding (find_first_not_of would call memchr per character)
    if (c != ' ' && c != '\n') return false;
  }
  if (descr.find('\\') != std::string_view::npos) return false;
  try {
    h.type = dtype::parse(descr);
  } catch (const std::invalid_argument&) {
    return false;
  }
  return true;
}

// UTF-8 to latin-1, or false when a character is above U+00FF (or the text is not UTF-8).
bool utf8_to_latin1(std::string_view s, std::string& out) {
  out.clear();
  for (std::size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      out += static_cast<char>(c);
    } else if ((c == 0xC2 || c == 0xC3) && i + 1 < s.size()) {
      out += static_cast<char>(((c & 0x1F) << 6) | (static_cast<unsigned char>(s[++i]) & 0x3F));
    } else {
      return false;
    }
  }
  return true;
}

// The header dictionary in general (any key order, spacing, Python 2 longs, structured
// dtypes), with the size checks; errors name their position in the file.
void read_header_dict(std::string_view raw, bool latin1, const detail::context& ctx,
                      std::uint64_t text_offset, npy_header& h) {
  literal_parser parser(raw, ctx, text_offset, latin1);
  const py_value doc = parser.parse_document();
  if (doc.kind != py_value::dict) parser.fail_at(doc.pos, "the header is not a dictionary");

  const py_value* descr = nullptr;
  const py_value* fortran = nullptr;
  const py_value* shape = nullptr;
  for (std::size_t k = 0; k + 1 < doc.items.size(); k += 2) {
    const py_value& key = doc.items[k];
    const py_value** slot = nullptr;
    if (key.kind == py_value::str) {
      slot = key.text == "descr"           ? &descr
             : key.text == "fortran_order" ? &fortran
             : key.text == "shape"         ? &shape
                                           : nullptr;
    }
    if (!slot) parser.fail_at(key.pos, "unexpected key (expected descr, fortran_order, shape)");
    if (*slot) parser.fail_at(key.pos, "duplicate key '" + key.text + "'");
    *slot = &doc.items[k + 1];
  }
  if (!descr || !fortran || !shape) {
    parser.fail_at(doc.pos, std::string("missing key '") +
                                (!descr     ? "descr"
                                 : !fortran ? "fortran_order"
                                            : "shape") +
                                "'");
  }
  if (fortran->kind != py_value::boolean) {
    parser.fail_at(fortran->pos, "fortran_order must be True or False");
  }
  h.fortran_order = fortran->flag;

  header_interpreter interp(parser);
  if (shape->kind != py_value::tuple) parser.fail_at(shape->pos, "shape must be a tuple");
  h.shape = interp.shape_of(*shape, "shape");
  h.type = interp.array_dtype_of(*descr, &h.shape);

  h.size = 1;
  for (auto d : h.shape) {
    if (!detail::checked_mul(h.size, d, h.size)) {
      parser.fail_at(shape->pos, "shape " + detail::shape_literal(h.shape) + " overflows");
    }
  }
  if (!array_nbytes(h.shape, h.type.itemsize(), h.nbytes)) {
    parser.fail_at(shape->pos, "shape " + detail::shape_literal(h.shape) + " of " + h.type.str() +
                                   " overflows");
  }
}

// Sets size and nbytes; false when they overflow.
bool sizes_fit(npy_header& h) {
  h.size = 1;
  for (auto d : h.shape) {
    if (!detail::checked_mul(h.size, d, h.size)) return false;
  }
  return array_nbytes(h.shape, h.type.itemsize(), h.nbytes);
}

}  // namespace

bool array_nbytes(const std::vector<std::uint64_t>& shape, std::uint64_t itemsize,
                  std::uint64_t& nbytes) {
  std::uint64_t extent = itemsize;  // ignoring zero dimensions: bounds every byte stride
  nbytes = itemsize;
  for (auto d : shape) {
    if (d != 0 && !detail::checked_mul(extent, d, extent)) return false;
    nbytes *= d;  // no overflow: nbytes is 0 or equal to extent
  }
  return extent <= static_cast<std::uint64_t>(INT64_MAX);
}

std::vector<std::int64_t> byte_strides(const std::vector<std::uint64_t>& shape,
                                       std::uint64_t itemsize, bool fortran_order) {
  std::uint64_t nbytes = 0;
  if (!array_nbytes(shape, itemsize, nbytes)) {  // then every product below fits in int64
    throw errors::invalid_argument(
        "<byte_strides>", "an array of shape " + detail::shape_literal(shape) + " and " +
                              std::to_string(itemsize) +
                              "-byte items is too big: its byte strides overflow int64");
  }
  std::vector<std::int64_t> strides(shape.size());
  auto stride = static_cast<std::int64_t>(itemsize);
  for (std::size_t k = 0; k < shape.size(); ++k) {
    const std::size_t axis = fortran_order ? k : shape.size() - 1 - k;
    strides[axis] = stride;
    stride *= static_cast<std::int64_t>(shape[axis]);
  }
  return strides;
}

std::uint64_t npy_header_size(const void* data, std::uint64_t size) noexcept {
  const auto* p = static_cast<const unsigned char*>(data);
  if (size < 10 || std::memcmp(p, npy_magic, npy_magic_len) != 0 || p[7] != 0) return 0;
  std::uint64_t prefix = 10;
  std::uint64_t header_len = p[8] | std::uint64_t{p[9]} << 8;
  if (p[6] == 2 || p[6] == 3) {
    if (size < 12) return 0;
    prefix = 12;
    header_len |= std::uint64_t{p[10]} << 16 | std::uint64_t{p[11]} << 24;
  } else if (p[6] != 1) {
    return 0;
  }
  return header_len > max_npy_header_len ? 0 : prefix + header_len;
}

npy_header read_npy_header(const void* data, std::uint64_t size, const std::string& path,
                           std::string_view member, std::uint64_t file_offset) {
  return read_npy_header_prefix(data, size, size, path, member, file_offset);
}

npy_header read_npy_header_prefix(const void* data, std::uint64_t size, std::uint64_t member_size,
                                  const std::string& path, std::string_view member,
                                  std::uint64_t file_offset) {
  const detail::context ctx{path, member};
  if (size > member_size) {
    ctx.fail(errc::invalid_argument, file_offset,
             std::to_string(size) + " bytes given of a member of " + std::to_string(member_size));
  }
  // The member's bytes that are not at hand: limits are checked against the whole member, and
  // running out of the bytes at hand is the caller's mistake, not the file's.
  const std::uint64_t missing = member_size - size;
  byte_reader r(static_cast<const std::byte*>(data), size, file_offset, ctx, errc::corrupt_npy);
  const auto at_hand = [&](std::uint64_t n) {
    if (missing > 0 && n > r.remaining()) {
      ctx.fail(errc::invalid_argument, r.offset(),
               "only the first " + std::to_string(size) + " of the member's " +
                   std::to_string(member_size) + " bytes were given: too few for its .npy header");
    }
  };
  npy_header h;
  at_hand(npy_magic_len + 2);
  const std::string_view magic = r.take_str(npy_magic_len, ".npy magic");
  if (magic != std::string_view(npy_magic, npy_magic_len)) {
    r.fail_at(file_offset, "not a .npy array: bad magic");
  }
  h.major_version = r.u8();
  h.minor_version = r.u8();
  std::uint64_t header_len = 0;
  if (h.major_version == 1 && h.minor_version == 0) {
    at_hand(2);
    header_len = r.le16();
  } else if ((h.major_version == 2 || h.major_version == 3) && h.minor_version == 0) {
    at_hand(4);
    header_len = r.le32();
  } else {
    r.fail_at(file_offset + 6, "unsupported .npy version " + std::to_string(h.major_version) + "." +
                                   std::to_string(h.minor_version));
  }
  if (header_len > max_npy_header_len) {
    r.fail("header length " + std::to_string(header_len) + " exceeds the limit of " +
           std::to_string(max_npy_header_len) + " bytes");
  }
  if (header_len > r.remaining() + missing) {
    r.fail("header length " + std::to_string(header_len) + " runs past the end of the member (" +
           std::to_string(r.remaining() + missing) + " bytes remain)");
  }
  at_hand(header_len);
  const std::uint64_t text_offset = r.offset();
  const std::string_view raw = r.take_str(header_len, ".npy header");
  h.data_offset = r.offset() - file_offset;
  // numpy decodes a 3.0 header as UTF-8 and refuses it when that fails; accepting it would
  // let invalid UTF-8 into field names, which no header can then spell again.
  if (h.major_version == 3 && !detail::is_valid_utf8(raw)) {
    ctx.fail(errc::corrupt_npy, text_offset, "bad .npy header: a version 3.0 header must be UTF-8");
  }

  if (!read_numpy_layout(raw, h) || !sizes_fit(h)) {
    read_header_dict(raw, h.major_version != 3, ctx, text_offset, h);
  }
  // Object arrays hold a pickle of unknown length; they are refused later, not here.
  const std::uint64_t data_left = r.remaining() + missing;
  if (!h.type.has_object() && h.nbytes > data_left) {
    ctx.fail(errc::corrupt_npy, r.offset(),
             "array data of " + std::to_string(h.nbytes) + " bytes (shape " +
                 detail::shape_literal(h.shape) + ", " + h.type.str() +
                 ") runs past the end of "
                 "the member (" +
                 std::to_string(data_left) + " bytes remain)");
  }
  return h;
}

dtype parse_descr(const std::string& literal) {
  static const std::string no_path = "<descr>";
  const detail::context ctx{no_path};
  literal_parser parser(literal, ctx, 0);
  const py_value v = parser.parse_document();
  header_interpreter interp(parser);
  return interp.array_dtype_of(v, nullptr);
}

std::string make_npy_header(const dtype& type, const std::vector<std::uint64_t>& shape,
                            bool fortran_order) {
  if (type.descr().empty()) {  // was written as "'descr': ," (as in a writer, refused first)
    throw errors::invalid_argument(
        "<.npy header>", "the dtype is empty (a default-constructed mmnpz::dtype; make one with "
                         "dtype::parse, dtype::of or dtype::structured)");
  }
  std::uint64_t nbytes = 0;
  if (shape.size() > max_npy_ndim || !array_nbytes(shape, type.itemsize(), nbytes)) {
    throw errors::invalid_argument("<.npy header>", shape.size() > max_npy_ndim
                                                        ? "too many dimensions"
                                                        : "the array's size overflows");
  }
  const std::string dict = "{'descr': " + type.descr() +
                           ", 'fortran_order': " + (fortran_order ? "True" : "False") +
                           ", 'shape': " + detail::shape_literal(shape) + ", }";
  std::string body;
  int major = 1;
  if (!utf8_to_latin1(dict, body)) {
    body = dict;
    major = 3;
  }
  std::size_t prefix = 10;
  auto padded = [&](std::size_t pre) { return (pre + body.size() + 1 + 63) / 64 * 64; };
  if (major == 1 && padded(10) - 10 > 0xFFFF) major = 2;
  if (major != 1) prefix = 12;
  const std::size_t total = padded(prefix);
  const std::size_t header_len = total - prefix;
  if (header_len > max_npy_header_len) {  // a reader would refuse it (and 2^32 would wrap)
    throw errors::invalid_argument(
        "<.npy header>", "the .npy header would be " + std::to_string(header_len) +
                             " bytes, over the limit of " + std::to_string(max_npy_header_len) +
                             " that readers accept (too many or too long field names)");
  }

  std::string out(npy_magic, npy_magic_len);
  out += static_cast<char>(major);
  out += '\0';
  for (std::size_t k = 0; k < prefix - 8; ++k)
    out += static_cast<char>((header_len >> (8 * k)) & 0xFF);
  out += body;
  out.append(total - out.size() - 1, ' ');
  out += '\n';
  // What is made must read back as this array: a structured dtype of unset fields, a sub-array
  // dtype (no array's) or nesting past what readers accept gave headers no reader parses.
  npy_header back;
  try {
    back = read_npy_header(out.data(), out.size() + nbytes);
  } catch (const error& e) {
    throw errors::invalid_argument("<.npy header>", "the dtype " + type.descr() +
                                                        " gives a .npy header readers refuse: " +
                                                        e.detail());
  }
  if (back.type != type || back.shape != shape || back.fortran_order != fortran_order) {
    throw errors::invalid_argument(
        "<.npy header>", "the dtype " + type.descr() +
                             " does not read back from a .npy header as itself (it reads as " +
                             back.type.descr() + ")");
  }
  return out;
}

}  // namespace mmnpz
