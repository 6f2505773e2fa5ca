#include "mmnpz/dtype.hpp"

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

}  // namespace

dtype dtype::parse(std::string_view descr) {
  // A kind without a byte order first ("f8", "i4", "O", as writers other than numpy's may
  // write) is in native order, as numpy reads it.
  const bool implicit_order =
      !descr.empty() && std::string_view("biufcSVUOMm").find(descr[0]) != std::string_view::npos;
  if (descr.size() < (implicit_order ? 1u : 2u)) bad(descr, "too short");
  dtype t;
  const char order = implicit_order ? '=' : descr[0];
  if (order == '<' || order == '>' || order == '|') {
    t.order_ = static_cast<byte_order>(order);
  } else if (order == '=') {
    t.order_ = native_order;
  } else {
    bad(descr, "the first character must be '<', '>', '|' or '='");
  }
  t.kind_ = descr[implicit_order ? 0 : 1];
  std::string_view rest = descr.substr(implicit_order ? 1 : 2);
  std::uint64_t n = 0;
  switch (t.kind_) {
    case 'b':
      if (rest != "1") bad(descr, "bool must have size 1");
      t.itemsize_ = 1;
      break;
    case 'i':
    case 'u':
      if (!parse_uint(rest, n) || (n != 1 && n != 2 && n != 4 && n != 8)) {
        bad(descr, "integers have size 1, 2, 4 or 8");
      }
      t.itemsize_ = n;
      break;
    case 'f':
      if (!parse_uint(rest, n) || (n != 2 && n != 4 && n != 8 && n != 12 && n != 16)) {
        bad(descr, "floats have size 2, 4, 8, 12 or 16");
      }
      t.itemsize_ = n;
      break;
    case 'c':
      if (!parse_uint(rest, n) || (n != 8 && n != 16 && n != 24 && n != 32)) {
        bad(descr, "complex numbers have size 8, 16, 24 or 32");
      }
      t.itemsize_ = n;
      break;
    case 'S':
    case 'V':
      if (!parse_uint(rest, n)) bad(descr, "a byte count must follow");
      t.itemsize_ = n;
      break;
    case 'U':
      if (!parse_uint(rest, n)) bad(descr, "a character count must follow");
      t.itemsize_ = n * 4;
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
        if (rest.front() != '[' || rest.back() != ']') bad(descr, "the unit goes in brackets");
        t.unit_ = std::string(rest.substr(1, rest.size() - 2));
        if (!valid_datetime_unit(t.unit_)) bad(descr, "unknown datetime unit");
      }
      t.itemsize_ = 8;
      break;
    }
    default:
      bad(descr, std::string("unknown kind '") + t.kind_ + "'");
  }
  const bool single_byte_kind = t.itemsize_ == 1 && t.kind_ != 'U';
  const bool orderless = t.kind_ == 'S' || t.kind_ == 'V' || t.kind_ == 'O' || single_byte_kind;
  if (orderless) {
    t.order_ = byte_order::not_applicable;
  } else if (t.order_ == byte_order::not_applicable) {
    bad(descr, "a multi-byte type needs '<' or '>'");
  }
  t.descr_ = "'" + t.str() + "'";
  return t;
}

dtype dtype::structured(std::vector<field> fields) {
  if (fields.empty()) throw std::invalid_argument("a structured dtype needs at least one field");
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
