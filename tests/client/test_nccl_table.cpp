// nccl-tests compatibility: the size syntax, the datatype names and the table's text, against
// strings written out by hand from nccl-tests' format strings (src/util.cu, nccl-tests 2.19).
#include "nccl_table.hpp"

#include <gtest/gtest.h>

using inagg::util::Dtype;
namespace nccl = inagg::apps::nccl;

TEST(NcclTable, Sizes) {
  EXPECT_EQ(nccl::parse_size("8"), 8u);
  EXPECT_EQ(nccl::parse_size("128M"), 128ull << 20);
  EXPECT_EQ(nccl::parse_size("128m"), 128ull << 20);
  EXPECT_EQ(nccl::parse_size("1K"), 1024u);
  EXPECT_EQ(nccl::parse_size("2G"), 2ull << 30);
  EXPECT_EQ(nccl::parse_size("1.5k"), 1536u);
  EXPECT_EQ(nccl::parse_size("0"), 0u);
  for (const char* bad : {"", "12Q", "-8", "1KB", "K", "1e3", "8 M", "1..2"})
    EXPECT_EQ(nccl::parse_size(bad), std::nullopt) << bad;
}

TEST(NcclTable, Types) {
  EXPECT_EQ(nccl::parse_type("float"), Dtype::fp32);
  EXPECT_EQ(nccl::parse_type("float32"), Dtype::fp32);
  EXPECT_EQ(nccl::parse_type("half"), Dtype::fp16);
  EXPECT_EQ(nccl::parse_type("bfloat16"), Dtype::bf16);
  EXPECT_EQ(nccl::parse_type("int32"), Dtype::int32);
  EXPECT_EQ(nccl::parse_type("int"), Dtype::int32);
  EXPECT_EQ(nccl::parse_type("fp32"), Dtype::fp32);  // inagg's own names stay
  EXPECT_EQ(nccl::parse_type("double"), std::nullopt);
  EXPECT_EQ(nccl::parse_type("int8"), std::nullopt);
  for (Dtype d : {Dtype::fp32, Dtype::fp16, Dtype::bf16, Dtype::int32})
    EXPECT_EQ(nccl::parse_type(nccl::type_name(d)), d);
  EXPECT_EQ(nccl::type_name(Dtype::fp32), "float");
}

TEST(NcclTable, FixedWidth) {
  EXPECT_EQ(nccl::fixed_width(33.5, 7), "  33.50");
  EXPECT_EQ(nccl::fixed_width(33625.7, 7), "33625.7");  // two decimals do not fit: one
  EXPECT_EQ(nccl::fixed_width(1234567.8, 7), "1234568");
  EXPECT_EQ(nccl::fixed_width(123456789.0, 7), "1.2e+08");
  EXPECT_EQ(nccl::fixed_width(0.001, 6), "  0.00");
}

TEST(NcclTable, Bandwidth) {
  EXPECT_DOUBLE_EQ(nccl::alg_bandwidth(1000000000, 1e6), 1.0);  // 1 GB in 1 s
  EXPECT_DOUBLE_EQ(nccl::bus_bandwidth(1.0, 4), 1.5);
  EXPECT_DOUBLE_EQ(nccl::bus_bandwidth(1.0, 2), 1.0);
  EXPECT_DOUBLE_EQ(nccl::bus_bandwidth(2.0, 8), 3.5);
}

TEST(NcclTable, Text) {
  const std::string h = nccl::header();
  EXPECT_EQ(
      h,
      "#\n"
      "#                                                              out-of-place                       in-place    "
      "      \n"
      "#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw "
      " #wrong \n"
      "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s) "
      "        \n");
  nccl::Measurement m{1234.56, 0.85, 1.27, true, 0};
  nccl::Measurement unchecked{12.5, 10.0, 15.0, false, 0};
  nccl::Measurement wrong{5.0, 1.0, 1.5, true, 1234567};
  EXPECT_EQ(
      nccl::row(1048576, 262144, Dtype::fp32, "sum", m, m),
      "     1048576        262144     float     sum      -1  1234.56    0.85    1.27       0  1234.56    0.85    1.27 "
      "      0\n");
  EXPECT_EQ(nccl::row(8, 4, Dtype::bf16, "sum", unchecked, std::nullopt),
            "           8             4  bfloat16     sum      -1    12.50   10.00   15.00    N/A" +
                std::string(33, ' ') + "\n");
  // %6g: large counts in exponent form, as nccl-tests prints them.
  EXPECT_NE(nccl::row(8, 2, Dtype::int32, "sum", wrong, std::nullopt).find("   1.50  1.23457e+06"), std::string::npos);
  EXPECT_EQ(
      nccl::footer(0, 1.5, std::nullopt, "inagg-worker"),
      "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 1.5 \n#\n# Collective test concluded: inagg-worker\n");
  EXPECT_EQ(nccl::footer(3, 1.5, 2.0, "x").substr(0, 72),
            "# Out of bounds values : 3 FAILED\n# Avg bus bandwidth    : 1.5 FAILED\n#\n");
  EXPECT_TRUE(nccl::bandwidth_failed(1.5, 2.0));
  EXPECT_FALSE(nccl::bandwidth_failed(1.9, 2.0));
}
