#pragma once

#include <complex>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

/// \file
/// numpy data types: mmnpz::dtype, mmnpz::field and mmnpz::byte_order.
namespace mmnpz {

/// Byte order of a dtype, as numpy spells it in a descr string.
enum class byte_order : char {
  little = '<',
  big = '>',
  not_applicable = '|',  ///< one-byte types, bytes, void, structured
};

#if !defined(__BYTE_ORDER__) || \
    (__BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__ && __BYTE_ORDER__ != __ORDER_BIG_ENDIAN__)
#error "mmnpz needs a compiler that states the byte order (__BYTE_ORDER__)"
#endif
/// The host's byte order, from the compiler (std::endian is C++20).
constexpr byte_order native_order =
    __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__ ? byte_order::big : byte_order::little;
static_assert(sizeof(void*) == 8, "mmnpz needs a 64-bit platform");

struct field;

/// A numpy data type as read from (or written to) a .npy header. Immutable value type.
///
/// kind() is numpy's kind character: 'b' bool, 'i' signed, 'u' unsigned, 'f' float, 'c'
/// complex, 'S' bytes, 'U' unicode (UCS-4), 'V' void or structured, 'M' datetime64, 'm'
/// timedelta64, 'O' object (pickled; never mappable).
class dtype {
 public:
  /// Parses a simple descr such as "<f4", "|b1", ">U7", "<M8[ns]", "|V16", "|O", as
  /// np.dtype() reads it on 64-bit Linux: also without a byte order ("f8": native), with '|'
  /// on a multi-byte type (native), as a type code alone ("<i" is "<i4", "e" is "<f2", "?"
  /// is "|b1", "b" is "|i1") and "a5" for "S5", and a datetime unit with a divisor as numpy's
  /// multiple of a smaller unit ("<M8[us/2]" is "<M8[500ns]"; refused where numpy's reading
  /// is garbage: "[W/11]" is 0 years there). str() gives the canonical form, numpy's str:
  /// "<M8[1ns]" and "<M8[001ns]" are "<M8[ns]", "<m8[generic]" is "<m8". Sizes are those of
  /// 64-bit Linux ("<f12" and "<c24", a 32-bit platform's long double, are refused).
  /// Throws std::invalid_argument with a sentence saying what is wrong.
  static dtype parse(std::string_view descr);

  /// A packed structured dtype from its fields, laid out one after another as a .npy descr
  /// list lays them out (padding is an anonymous "|Vn" field); their offsets are set here.
  /// No fields make numpy's empty record, descr "[]" and itemsize 0 (is_structured() is
  /// false). A field of a sub-array type and no shape of its own becomes a field of the
  /// sub-array's base and shape, as numpy reads it. Throws std::invalid_argument for a size
  /// that overflows, or what numpy refuses: two fields of one name, a title used as a name or
  /// title, and a field without a name that is not untitled "|Vn" padding.
  static dtype structured(std::vector<field> fields);

  /// numpy's sub-array dtype (base, shape), for a non-empty shape: the type of a field that
  /// holds a sub-array of sub-arrays, as numpy spells it in a descr, `('a', ('<f4', (2,)),
  /// (3,))` (numpy keeps the two shapes apart). Kind 'V', order not_applicable, itemsize the
  /// base's times the shape's product, descr "('<f4', (2,))", str() "|V8". An array of this
  /// type is no .npy that numpy loads: read_npy_header() refuses one. Throws
  /// std::invalid_argument for an empty shape or a size that overflows.
  static dtype subarray(dtype base, std::vector<std::uint64_t> shape);

  /// The dtype of a C++ element type: bool, fixed-width integers, float, double,
  /// std::complex<float>, std::complex<double>. Native byte order.
  template <class T>
  static dtype of();

  /// numpy's kind character (see the class description).
  char kind() const noexcept { return kind_; }
  /// Bytes of one element (of one record for a structured dtype).
  std::uint64_t itemsize() const noexcept { return itemsize_; }
  /// The byte order, byte_order::not_applicable for one-byte and structured types.
  byte_order order() const noexcept { return order_; }
  /// True when no byte swapping is needed to read the values on this host.
  bool is_native() const noexcept { return order_ != opposite(native_order); }
  /// True for a structured dtype (one with fields).
  bool is_structured() const noexcept { return !fields_.empty(); }
  /// True when the dtype is 'O' or contains an 'O' field anywhere.
  bool has_object() const noexcept { return has_object_; }
  /// Fields of a structured dtype in order, including anonymous padding ("" names); empty
  /// otherwise.
  const std::vector<field>& fields() const noexcept { return fields_; }
  /// True for a sub-array dtype (made by subarray()).
  bool is_subarray() const noexcept { return !base_.empty(); }
  /// The element type of a sub-array dtype; the dtype itself otherwise.
  const dtype& subarray_base() const noexcept { return base_.empty() ? *this : base_.front(); }
  /// The shape of a sub-array dtype; empty otherwise.
  const std::vector<std::uint64_t>& subarray_shape() const noexcept { return subarray_shape_; }
  /// The unit of a datetime64/timedelta64, such as "ns", "D" or "10ms"; empty for a generic
  /// unit and other kinds.
  const std::string& datetime_unit() const noexcept { return unit_; }
  /// The descr exactly as a .npy header spells it: "'<f4'" (with quotes) or "[('a', '<i4')]".
  const std::string& descr() const noexcept { return descr_; }
  /// numpy's dtype.str: "<f4", "|b1", "|V12" for a structured dtype.
  std::string str() const;

  /// True when T is the element type of this dtype (same kind and size, native order).
  template <class T>
  bool holds() const noexcept;

  /// Equal when the descrs are equal (same kind, size, byte order, unit and fields).
  friend bool operator==(const dtype& a, const dtype& b) { return a.descr_ == b.descr_; }
  /// Not operator==().
  friend bool operator!=(const dtype& a, const dtype& b) { return !(a == b); }

 private:
  static constexpr byte_order opposite(byte_order o) {
    return o == byte_order::little ? byte_order::big : byte_order::little;
  }
  template <class T>
  static constexpr char kind_of();

  char kind_ = 'V';
  std::uint64_t itemsize_ = 0;
  byte_order order_ = byte_order::not_applicable;
  bool has_object_ = false;
  std::string unit_;
  std::string descr_;
  std::vector<field> fields_;
  std::vector<dtype> base_;  // a sub-array's element type, or nothing
  std::vector<std::uint64_t> subarray_shape_;
};

/// One field of a structured dtype.
struct field {
  std::string name;                  ///< empty for anonymous padding
  std::string title;                 ///< empty unless given as (title, name)
  dtype type;                        ///< the element type (of each sub-array element)
  std::vector<std::uint64_t> shape;  ///< sub-array shape, empty for a scalar field
  std::uint64_t offset = 0;          ///< byte offset within the record
};

template <class T>
constexpr char dtype::kind_of() {
  if constexpr (std::is_same_v<T, bool>) {
    return 'b';
  } else if constexpr (std::is_integral_v<T> && std::is_signed_v<T>) {
    return 'i';
  } else if constexpr (std::is_integral_v<T>) {
    return 'u';
  } else if constexpr (std::is_floating_point_v<T>) {
    return 'f';
  } else if constexpr (std::is_same_v<T, std::complex<float>> ||
                       std::is_same_v<T, std::complex<double>>) {
    return 'c';
  } else {
    return 0;
  }
}

template <class T>
dtype dtype::of() {
  constexpr char k = kind_of<T>();
  static_assert(k != 0,
                "mmnpz::dtype::of<T>: T must be bool, an integer, float, double or "
                "std::complex<float|double>");
  const char order = sizeof(T) == 1 ? '|' : static_cast<char>(native_order);
  return parse(std::string(1, order) + k + std::to_string(sizeof(T)));
}

template <class T>
bool dtype::holds() const noexcept {
  constexpr char k = kind_of<T>();
  return k != 0 && k == kind_ && sizeof(T) == itemsize_ && is_native() && fields_.empty();
}

}  // namespace mmnpz
