// Element types a job's gradients can have (docs/protocol.md). Payload bytes are little-endian, as an
// RDMA NIC copies them from host memory. Here, below every module that names them: job
// descriptions (control), the kernels (agg) and the workers (client).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace inagg::util {

enum class Dtype : uint8_t {
  fp32,   // IEEE binary32
  fp16,   // IEEE binary16; summed in fp32 and rounded once
  bf16,   // bfloat16 (the top half of a binary32); summed in fp32 and rounded once
  int32,  // two's complement, wrapping sum (fixed point chosen by the client, as ALEPH does)
};

constexpr size_t dtype_size(Dtype dtype) {
  switch (dtype) {
    case Dtype::fp32:
      return 4;
    case Dtype::fp16:
      return 2;
    case Dtype::bf16:
      return 2;
    case Dtype::int32:
      return 4;
  }
  return 0;
}

// The names used in config files, the control socket and logs.
constexpr std::string_view dtype_name(Dtype dtype) {
  switch (dtype) {
    case Dtype::fp32:
      return "fp32";
    case Dtype::fp16:
      return "fp16";
    case Dtype::bf16:
      return "bf16";
    case Dtype::int32:
      return "int32";
  }
  return "unknown";
}

constexpr std::optional<Dtype> parse_dtype(std::string_view name) {
  for (Dtype d : {Dtype::fp32, Dtype::fp16, Dtype::bf16, Dtype::int32})
    if (name == dtype_name(d)) return d;
  return std::nullopt;
}

}  // namespace inagg::util
