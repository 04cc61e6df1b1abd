#include "tensor/tensor.h"

#include "tensor/pooling_allocator.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <new>
#include <stdexcept>

#include "core/checked_math.h"

namespace actorflow {

namespace {

// The bytes of a `dtype` tensor of `shape`, checked: InvalidArgument when the shape is not a
// tensor's (Shape::checked_num_elements) or the byte count does not fit in size_t.
Result<size_t> checked_bytes(DType dtype, const Shape& shape) {
  AF_ASSIGN_OR_RETURN(int64_t n, shape.checked_num_elements());
  size_t b;
  if (!checked_mul_size(static_cast<size_t>(n), dtype_size(dtype), &b))
    return InvalidArgument("shape " + shape.to_string() + " of " + dtype_name(dtype) + " has too many bytes");
  return b;
}

}  // namespace

Tensor::Tensor(DType dtype, const Shape& shape) : dtype_(dtype), shape_(shape) {
  auto checked = checked_bytes(dtype, shape);
  if (!checked.ok()) throw std::length_error("Tensor: " + checked.status().message());
  size_t n = *checked;
  void* p = cpu_host_pool()->allocate(n);
  if (!p) throw std::bad_alloc();
  std::memset(p, 0, n);
  buf_ = std::make_shared<Buffer>(cpu_host_pool(), p, n);
}

Tensor::Tensor(DType dtype, const Shape& shape, std::shared_ptr<Buffer> buffer)
    : dtype_(dtype), shape_(shape), buf_(std::move(buffer)) {
  auto checked = checked_bytes(dtype, shape);
  if (!checked.ok()) throw std::length_error("Tensor: " + checked.status().message());
  if (buf_ && buf_->size() < *checked)
    throw std::length_error("Tensor: a buffer of " + std::to_string(buf_->size()) + " bytes cannot hold " +
                            dtype_name(dtype) + " " + shape.to_string());
}

Result<Tensor> Tensor::allocate(Allocator* allocator, DType dtype, const Shape& shape) {
  if (!shape.fully_defined())
    return InvalidArgument("cannot allocate a tensor of partially known shape " + shape.to_string());
  auto checked = checked_bytes(dtype, shape);
  if (!checked.ok()) return InvalidArgument("cannot allocate a tensor: " + checked.status().message());
  const size_t n = *checked;
  void* p = allocator->allocate(n);
  if (!p && n > 0)
    return ResourceExhausted("allocator '" + allocator->name() + "' could not allocate " +
                             std::to_string(n) + " bytes for a " + dtype_name(dtype) + " tensor of shape " +
                             shape.to_string());
  return Tensor(dtype, shape, std::make_shared<Buffer>(allocator, p, n));
}

Result<Tensor> Tensor::reshaped(const Shape& shape) const {
  auto n = shape.checked_num_elements();
  if (!n.ok()) return InvalidArgument("cannot reshape a tensor into " + shape.to_string() + ": " + n.status().message());
  if (*n != num_elements())
    return InvalidArgument("cannot reshape a tensor of " + std::to_string(num_elements()) +
                           " elements into shape " + shape.to_string());
  return Tensor(dtype_, shape, buf_);
}

bool bool_bytes_valid(DType type, const void* p, size_t n) {
  if (type != DType::kBool) return true;
  const auto* b = static_cast<const unsigned char*>(p);
  for (size_t i = 0; i < n; ++i)
    if (b[i] > 1) return false;
  return true;
}

Tensor Tensor::deep_copy() const {
  if (!is_initialized()) return Tensor();
  // Every byte is written by the copy: no zero fill first.
  const size_t n = bytes();
  void* p = cpu_host_pool()->allocate(n);
  if (!p && n > 0) throw std::bad_alloc();
  Tensor t(dtype_, shape_, std::make_shared<Buffer>(cpu_host_pool(), p, n));
  if (n) std::memcpy(t.raw_data(), raw_data(), n);
  return t;
}

bool Tensor::equals(const Tensor& o) const {
  if (dtype_ != o.dtype_ || shape_ != o.shape_) return false;
  if (!is_initialized()) return true;
  return bytes() == 0 || std::memcmp(raw_data(), o.raw_data(), bytes()) == 0;
}

std::string Tensor::debug_string() const {
  return std::string("Tensor<type: ") + dtype_name(dtype_) + " shape: " + shape_.to_string() + ">";
}

namespace {

// Formats every element as a string; returns per-element strings aligned NumPy-style.
std::vector<std::string> format_elements(const Tensor& t) {
  const int64_t n = t.num_elements();
  std::vector<std::string> out(static_cast<size_t>(n));
  if (dtype_is_floating(t.dtype())) {
    std::vector<double> v(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i)
      v[i] = t.dtype() == DType::kFloat32 ? t.data<float>()[i] : t.data<double>()[i];
    bool all_int = true;
    double maxabs = 0, minabs = INFINITY;
    for (double x : v) {
      if (!std::isfinite(x)) continue;
      if (x != std::floor(x)) all_int = false;
      maxabs = std::max(maxabs, std::fabs(x));
      if (x != 0) minabs = std::min(minabs, std::fabs(x));
    }
    const bool sci = maxabs >= 1e16 || (minabs < 1e-4 && !all_int) || (maxabs / minabs > 1e3 && minabs < 1e-4);
    std::vector<std::string> ip(v.size()), fp(v.size());
    size_t wi = 0, wf = 0;
    const int prec = t.dtype() == DType::kFloat32 ? 8 : 8;
    for (size_t i = 0; i < v.size(); ++i) {
      double x = v[i];
      char b[64];
      if (std::isnan(x)) { ip[i] = "nan"; }
      else if (std::isinf(x)) { ip[i] = x < 0 ? "-inf" : "inf"; }
      else if (sci) {
        // Shortest round-trip mantissa, NumPy style: 1e-05 -> "1.e-05".
        char* end = t.dtype() == DType::kFloat32
                        ? std::to_chars(b, b + sizeof b, static_cast<float>(x), std::chars_format::scientific).ptr
                        : std::to_chars(b, b + sizeof b, x, std::chars_format::scientific).ptr;
        std::string s(b, end);
        auto e = s.find('e');
        std::string mant = s.substr(0, e), ex = s.substr(e);
        if (mant.find('.') == std::string::npos) mant += ".";
        ip[i] = mant + ex;
      } else if (all_int) {
        std::snprintf(b, sizeof b, "%.0f.", x);
        ip[i] = b;
      } else {
        // Shortest digits that round-trip in the tensor's own precision (NumPy's unique
        // repr), at most `prec` digits after the point.
        char* end = t.dtype() == DType::kFloat32
                        ? std::to_chars(b, b + sizeof b, static_cast<float>(x), std::chars_format::fixed).ptr
                        : std::to_chars(b, b + sizeof b, x, std::chars_format::fixed).ptr;
        std::string s(b, end);
        auto dot0 = s.find('.');
        if (dot0 == std::string::npos) s += ".";
        else if (s.size() - dot0 - 1 > static_cast<size_t>(prec)) {
          std::snprintf(b, sizeof b, "%.*f", prec, x);
          s = b;
        }
        while (!s.empty() && s.back() == '0') s.pop_back();
        auto dot = s.find('.');
        ip[i] = s.substr(0, dot + 1);
        fp[i] = s.substr(dot + 1);
      }
      wi = std::max(wi, ip[i].size());
      wf = std::max(wf, fp[i].size());
    }
    for (size_t i = 0; i < v.size(); ++i) {
      std::string s = std::string(wi - ip[i].size(), ' ') + ip[i];
      if (!all_int && !sci) {
        if (ip[i].find('.') == std::string::npos) s += std::string(wf + 1, ' ');
        else s += fp[i] + std::string(wf - fp[i].size(), ' ');
      }
      out[i] = s;
    }
    return out;
  }
  size_t w = 0;
  for (int64_t i = 0; i < n; ++i) {
    std::string s;
    switch (t.dtype()) {
      case DType::kInt32: s = std::to_string(t.data<int32_t>()[i]); break;
      case DType::kInt64: s = std::to_string(t.data<int64_t>()[i]); break;
      case DType::kUInt8: s = std::to_string(t.data<uint8_t>()[i]); break;
      case DType::kBool: s = t.data<bool>()[i] ? "True" : "False"; break;
      default: break;
    }
    w = std::max(w, s.size());
    out[static_cast<size_t>(i)] = s;
  }
  for (auto& s : out) s = std::string(w - s.size(), ' ') + s;
  return out;
}

void format_rec(const std::vector<std::string>& el, const Shape& shape, int dim, int64_t offset,
                bool summarise, std::string& out) {
  const int rank = shape.rank();
  if (dim == rank) { out += el[static_cast<size_t>(offset)]; return; }
  int64_t stride = 1;
  for (int d = dim + 1; d < rank; ++d) stride *= shape.dim(d);
  const int64_t n = shape.dim(dim);
  const int64_t edge = 3;
  std::vector<int64_t> idx;  // -1 marks the "..." of a summarised dimension
  if (summarise && n > 2 * edge) {
    for (int64_t i = 0; i < edge; ++i) idx.push_back(i);
    idx.push_back(-1);
    for (int64_t i = n - edge; i < n; ++i) idx.push_back(i);
  } else {
    for (int64_t i = 0; i < n; ++i) idx.push_back(i);
  }
  out += "[";
  for (size_t k = 0; k < idx.size(); ++k) {
    if (k > 0) {
      if (dim == rank - 1) {
        out += " ";
      } else {
        out += std::string(static_cast<size_t>(rank - dim - 1), '\n');
        out += std::string(static_cast<size_t>(dim + 1), ' ');
      }
    }
    if (idx[k] < 0) out += "...";
    else format_rec(el, shape, dim + 1, offset + idx[k] * stride, summarise, out);
  }
  out += "]";
}

}  // namespace

std::string Tensor::to_string() const {
  if (!is_initialized()) return "<uninitialized tensor>";
  if (!on_host()) return debug_string();
  auto el = format_elements(*this);
  if (shape_.rank() == 0) return el.empty() ? "" : el[0];
  std::string out;
  format_rec(el, shape_, 0, 0, num_elements() > 1000, out);
  return out;
}

}  // namespace actorflow
