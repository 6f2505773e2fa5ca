#include "mmnpz/dtype.hpp"

#include <algorithm>
#include <initializer_list>
#include <set>
#include <stdexcept>
#include <string_view>

#include "npz/py_literal.hpp"

namespace mmnpz {
namespace {

[[noreturn]] void bad(std::string_view descr, const std::string& why) {
  throw std::invalid_argument("invalid dtype '" + std::string(descr) + "': " + why);
}

bool parse_uint(std::string_view s, std::uint64_t& out) {
  if (s.empty() || s.size() > 12) return false;
  out = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    out = out * 10 + static_cast<std::uint64_t>(c - '0');
  }
  return true;
}

// The size after a numeric kind ("8" of "f8"), which must be one of `sizes`; else `why`.
std::uint64_t sized(std::string_view descr, std::string_view digits,
                    std::initializer_list<std::uint64_t> sizes, const char* why) {
  std::uint64_t n = 0;
  if (!parse_uint(digits, n) || std::find(sizes.begin(), sizes.end(), n) == sizes.end()) {
    bad(descr, why);
  }
  return n;
}

// The count after "S", "V" or "U" ("5" of "S5"): of `what`s ("byte", "character").
std::uint64_t counted(std::string_view descr, std::string_view digits, const char* what) {
  std::uint64_t n = 0;
  if (parse_uint(digits, n)) return n;
  if (!digits.empty() && digits.find_first_not_of("0123456789") == std::string_view::npos) {
    bad(descr, std::string("a ") + what + " count of " + std::string(digits) + " is too large");
  }
  bad(descr, std::string("a ") + what + " count must follow");
}

// A valid datetime unit as numpy spells it: no multiplier of 1, no leading zeros, and none
// for a generic unit, which has no brackets ("1ns" and "001ns" are "ns", "generic" is "").
std::string canonical_unit(std::string_view u) {
  const std::size_t digits = std::min(u.find_first_not_of("0123456789"), u.size());
  const std::string_view base = u.substr(digits);
  if (base == "generic" || base.empty()) return {};
  std::uint64_t num = 1;
  if (digits > 0) parse_uint(u.substr(0, digits), num);  // at most 9 digits: checked
  return (num == 1 ? std::string() : std::to_string(num)) + std::string(base);
}

// numpy's datetime units, optionally with a multiplier ("10ms"); empty means generic.
bool valid_datetime_unit(std::string_view u) {
  std::size_t digits = 0;
  while (digits < u.size() && u[digits] >= '0' && u[digits] <= '9') ++digits;
  const std::string_view base = u.substr(digits);
  if (digits > 9 || (digits > 0 && base.empty())) return false;
  static constexpr std::string_view units[] = {"Y",  "M",  "W",  "D",  "h",  "m",  "s",
                                               "ms", "us", "ns", "ps", "fs", "as", "generic"};
  if (base.empty()) return true;
  for (auto known : units) {
    if (base == known) return true;
  }
  return false;
}

// A datetime unit with a divisor ("us/2", "10s/2") as numpy reads it: the multiplier times
// the first smaller unit whose count in the base unit the divisor divides, tried in numpy's
// order (datetime.c, convert_datetime_divisor_to_multiple): "500ns", "5000ms". Refused when
// none divides, for a generic unit, and for a multiplier over 9 digits (numpy's int wraps).
std::string divided_unit(std::string_view descr, std::string_view unit) {
  const std::size_t slash = unit.find('/');
  const std::string_view left = unit.substr(0, slash);
  std::uint64_t den = 0;
  if (!parse_uint(unit.substr(slash + 1), den) || den == 0) {
    bad(descr, "a datetime unit's divisor must be a positive integer");
  }
  const std::size_t digits = std::min(left.find_first_not_of("0123456789"), left.size());
  const std::string_view base = left.substr(digits);
  if (base.empty() || !valid_datetime_unit(left)) bad(descr, "unknown datetime unit");
  if (den == 1) return std::string(left);
  if (base == "generic") bad(descr, "a generic datetime unit takes no divisor");
  std::uint64_t num = 1;
  if (digits > 0) parse_uint(left.substr(0, digits), num);
  struct smaller {
    std::uint64_t count;  // of this unit in the base unit
    std::string_view unit;
  };
  struct step {
    std::string_view base;
    smaller tries[3];
  };
  static constexpr step steps[] = {
      {"Y", {{12, "M"}, {52, "W"}, {365, "D"}}},     {"M", {{4, "W"}, {30, "D"}, {720, "h"}}},
      {"W", {{7, "D"}, {168, "h"}, {10080, "m"}}},   {"D", {{24, "h"}, {1440, "m"}, {86400, "s"}}},
      {"h", {{60, "m"}, {3600, "s"}}},               {"m", {{60, "s"}, {60000, "ms"}}},
      {"s", {{1000, "ms"}, {1000000, "us"}}},        {"ms", {{1000, "us"}, {1000000, "ns"}}},
      {"us", {{1000, "ns"}, {1000000, "ps"}}},       {"ns", {{1000, "ps"}, {1000000, "fs"}}},
      {"ps", {{1000, "fs"}, {1000000, "as"}}},       {"fs", {{1000, "as"}}},
      {"as", {}}};
  for (const step& s : steps) {
    if (s.base != base) continue;
    for (const smaller& to : s.tries) {
      if (to.count == 0 || to.count % den != 0) continue;
      const std::uint64_t multiple = num * (to.count / den);  // at most 9 digits times 86400
      if (multiple > 999999999) bad(descr, "the datetime unit's multiplier is too large");
      return (multiple == 1 ? std::string() : std::to_string(multiple)) + std::string(to.unit);
    }
  }
  bad(descr, "the divisor " + std::to_string(den) + " divides no smaller datetime unit");
}

// numpy's one-character type codes, as np.dtype() reads them on 64-bit Linux (a C long is 8
// bytes, a long double 16): the kind and size each stands for alone ("<i" is "<i4", "e" is
// "f2", "b" is "i1" but "b1" a bool, "c" is "S1", "S" and "a" are "S0").
struct type_code {
  char code, kind;
  std::uint64_t size;
};
constexpr type_code type_codes[] = {
    {'?', 'b', 1},  {'b', 'i', 1}, {'B', 'u', 1},  {'h', 'i', 2},  {'H', 'u', 2}, {'i', 'i', 4},
    {'I', 'u', 4},  {'l', 'i', 8}, {'L', 'u', 8},  {'q', 'i', 8},  {'Q', 'u', 8}, {'p', 'i', 8},
    {'P', 'u', 8},  {'e', 'f', 2}, {'f', 'f', 4},  {'d', 'f', 8},  {'g', 'f', 16}, {'F', 'c', 8},
    {'D', 'c', 16}, {'G', 'c', 32}, {'c', 'S', 1}, {'S', 'S', 0}, {'a', 'S', 0},  {'U', 'U', 0},
    {'V', 'V', 0},  {'M', 'M', 8}, {'m', 'm', 8},  {'O', 'O', 8}};

}  // namespace

dtype dtype::parse(std::string_view descr) {
  // A byte order first ('<', '>', '|' or '='), or none: native order, as numpy reads "f8",
  // "i4" or "O" from writers other than numpy's. Then a kind and its size ("f8", "U3",
  // "M8[ns]"), or a type code alone ("f", "<i", "?").
  const bool has_order =
      !descr.empty() && std::string_view("<>|=").find(descr[0]) != std::string_view::npos;
  const std::string_view body = descr.substr(has_order ? 1 : 0);
  if (body.empty()) bad(descr, "too short");
  dtype t;
  const char order = has_order ? descr[0] : '=';
  t.order_ = order == '=' ? native_order : static_cast<byte_order>(order);
  t.kind_ = body[0];
  std::string_view rest = body.substr(1);
  const type_code* code = nullptr;
  for (const type_code& c : type_codes) {
    if (rest.empty() && c.code == t.kind_) code = &c;
  }
  if (code) {
    t.kind_ = code->kind;
    t.itemsize_ = code->size;
    t.has_object_ = code->kind == 'O';
  } else {
    // A kind and its size: "f8", "S5", "U3", "M8[ns]", "O" (objects' 8 may be left out).
    if (t.kind_ == 'a') t.kind_ = 'S';  // numpy's old name for bytes: "a5" is "S5"
    switch (t.kind_) {
      case 'b':
        if (rest != "1") bad(descr, "bool must have size 1");
        t.itemsize_ = 1;
        break;
      case 'i':
      case 'u':
        t.itemsize_ = sized(descr, rest, {1, 2, 4, 8}, "integers have size 1, 2, 4 or 8");
        break;
      case 'f':
        // 12 (a 32-bit platform's long double) is no type on 64-bit Linux: numpy refuses it.
        t.itemsize_ = sized(descr, rest, {2, 4, 8, 16}, "floats have size 2, 4, 8 or 16");
        break;
      case 'c':
        t.itemsize_ = sized(descr, rest, {8, 16, 32}, "complex numbers have size 8, 16 or 32");
        break;
      case 'S':
      case 'V':
        t.itemsize_ = counted(descr, rest, "byte");
        break;
      case 'U':
        t.itemsize_ = counted(descr, rest, "character") * 4;
        break;
      case 'O':
        if (!rest.empty() && rest != "8") bad(descr, "objects have size 8");
        t.itemsize_ = 8;
        t.has_object_ = true;
        break;
      case 'M':
      case 'm': {
        if (rest.substr(0, 1) != "8") bad(descr, "datetimes have size 8");
        rest.remove_prefix(1);
        if (!rest.empty()) {
          if (rest.size() < 2 || rest.front() != '[' || rest.back() != ']') {
            bad(descr, "the unit goes in brackets");
          }
          t.unit_ = std::string(rest.substr(1, rest.size() - 2));
          if (t.unit_.empty()) bad(descr, "empty datetime unit (numpy writes none: '<M8')");
          if (t.unit_.find('/') != std::string::npos) t.unit_ = divided_unit(descr, t.unit_);
          if (!valid_datetime_unit(t.unit_)) bad(descr, "unknown datetime unit");
          t.unit_ = canonical_unit(t.unit_);  // as numpy's str gives it, so == compares units
        }
        t.itemsize_ = 8;
        break;
      }
      default:
        bad(descr, std::string("unknown kind '") + t.kind_ + "'");
    }
  }
  // No byte order for bytes, voids, objects and single bytes; native order for '|' on a
  // multi-byte type, as numpy reads "|f8".
  const bool single_byte_kind = t.itemsize_ == 1 && t.kind_ != 'U';
  const bool orderless = t.kind_ == 'S' || t.kind_ == 'V' || t.kind_ == 'O' || single_byte_kind;
  if (orderless) {
    t.order_ = byte_order::not_applicable;
  } else if (t.order_ == byte_order::not_applicable) {
    t.order_ = native_order;
  }
  t.descr_ = "'" + t.str() + "'";
  return t;
}

dtype dtype::subarray(dtype base, std::vector<std::uint64_t> shape) {
  if (shape.empty()) throw std::invalid_argument("a sub-array dtype needs a shape");
  std::uint64_t bytes = base.itemsize();
  for (auto d : shape) {
    if (__builtin_mul_overflow(bytes, d, &bytes)) {
      throw std::invalid_argument("a sub-array's size overflows");
    }
  }
  dtype t;
  t.kind_ = 'V';
  t.order_ = byte_order::not_applicable;
  t.itemsize_ = bytes;
  t.has_object_ = base.has_object();
  t.descr_ = "(" + base.descr() + ", " + detail::shape_literal(shape) + ")";
  t.base_.push_back(std::move(base));
  t.subarray_shape_ = std::move(shape);
  return t;
}

dtype dtype::structured(std::vector<field> fields) {
  for (field& f : fields) {
    if (f.shape.empty() && f.type.is_subarray()) {  // numpy's reading of ('a', (base, shape))
      f.shape = f.type.subarray_shape();
      dtype base = f.type.subarray_base();
      f.type = std::move(base);
    }
  }
  dtype t;
  t.kind_ = 'V';
  t.order_ = byte_order::not_applicable;
  t.descr_ = "[";
  std::uint64_t offset = 0;
  // What numpy refuses of a record (as np.load of the header would): names and titles must
  // all differ, and a field without a name is padding.
  std::set<std::string_view> taken;
  for (const field& f : fields) {
    if (f.name.empty()) {
      if (f.type.kind() != 'V' || f.type.is_structured() || !f.title.empty()) {
        throw std::invalid_argument("a field without a name must be '|Vn' padding, untitled");
      }
    } else if (!taken.insert(f.name).second) {
      throw std::invalid_argument("duplicate field name '" + f.name + "'");
    }
  }
  for (const field& f : fields) {
    if (!f.title.empty() && !taken.insert(f.title).second) {
      throw std::invalid_argument("field '" + f.name + "': title '" + f.title +
                                  "' is already used as a name or title");
    }
  }
  for (std::size_t i = 0; i < fields.size(); ++i) {
    field& f = fields[i];
    std::uint64_t count = 1;
    for (auto d : f.shape) {
      if (__builtin_mul_overflow(count, d, &count)) {
        throw std::invalid_argument("field '" + f.name + "': sub-array size overflows");
      }
    }
    std::uint64_t bytes = 0;
    std::uint64_t end = 0;
    if (__builtin_mul_overflow(count, f.type.itemsize(), &bytes) ||
        __builtin_add_overflow(offset, bytes, &end)) {
      throw std::invalid_argument("field '" + f.name + "': record size overflows");
    }
    f.offset = offset;
    offset = end;
    t.has_object_ = t.has_object_ || f.type.has_object();
    if (i) t.descr_ += ", ";
    t.descr_ += "(";
    t.descr_ += f.title.empty()
                    ? detail::py_repr(f.name)
                    : "(" + detail::py_repr(f.title) + ", " + detail::py_repr(f.name) + ")";
    t.descr_ += ", " + f.type.descr();
    if (!f.shape.empty()) t.descr_ += ", " + detail::shape_literal(f.shape);
    t.descr_ += ")";
  }
  t.descr_ += "]";
  t.itemsize_ = offset;
  t.fields_ = std::move(fields);
  return t;
}

std::string dtype::str() const {
  std::string s(1, static_cast<char>(order_));
  if (is_structured()) return s + "V" + std::to_string(itemsize_);
  s += kind_;
  switch (kind_) {
    case 'U':
      return s + std::to_string(itemsize_ / 4);
    case 'O':
      return s;
    case 'M':
    case 'm':
      return s + "8" + (unit_.empty() ? "" : "[" + unit_ + "]");
    default:
      return s + std::to_string(itemsize_);
  }
}

}  // namespace mmnpz
