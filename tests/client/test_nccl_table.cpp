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

// One table per job: every rank's figures of a placement, as nccl-tests' Allreduce aggregates
// them: -a 0 rank 0's time, 1 the mean, 2 the least, 3 the greatest; #wrong summed; the failed
// checks counted on every rank that saw wrong elements.
TEST(NcclTable, AggregateOverRanks) {
  const nccl::Measurement a{100, 0, 0, true, 0}, b{300, 0, 0, true, 5}, c{200, 0, 0, true, 7};
  const std::vector<std::optional<nccl::Measurement>> ranks{a, b, c};
  const struct {
    nccl::Average how;
    double time_us;
  } cases[] = {
      {nccl::Average::rank0, 100}, {nccl::Average::mean, 200}, {nccl::Average::min, 100}, {nccl::Average::max, 300}};
  for (const auto& k : cases) {
    unsigned failed = 1;
    const std::optional<nccl::Measurement> m = nccl::aggregate(ranks, k.how, &failed);
    ASSERT_TRUE(m);
    EXPECT_DOUBLE_EQ(m->time_us, k.time_us) << static_cast<int>(k.how);
    EXPECT_EQ(m->wrong, 12u);
    EXPECT_TRUE(m->checked);
    EXPECT_EQ(failed, 3u);  // 1 before, ranks 1 and 2 now
  }
  unsigned failed = 0;
  EXPECT_EQ(nccl::aggregate({std::nullopt, std::nullopt}, nccl::Average::mean, &failed), std::nullopt);
  const nccl::Measurement unchecked{10, 0, 0, false, 0};
  const std::optional<nccl::Measurement> u = nccl::aggregate({unchecked, unchecked}, nccl::Average::mean, &failed);
  ASSERT_TRUE(u);
  EXPECT_FALSE(u->checked);
  EXPECT_EQ(failed, 0u);
  nccl::Measurement m{1000, 0, 0, true, 0};
  nccl::set_bandwidths(&m, 4000000, 1.5);  // 4 MB in 1 ms
  EXPECT_DOUBLE_EQ(m.algbw, 4.0);
  EXPECT_DOUBLE_EQ(m.busbw, 6.0);
}

TEST(NcclTable, RankRowsTravelExactly) {
  nccl::RankRow r;
  r.bytes = 1048576;
  r.placed[0] = nccl::Measurement{1234.5678901234567, 0, 0, true, 42};
  r.placed[1] = nccl::Measurement{0.1, 0, 0, false, 0};
  const std::optional<nccl::RankRow> back = nccl::decode_row(nccl::encode_row(r));
  ASSERT_TRUE(back) << nccl::encode_row(r);
  EXPECT_EQ(back->bytes, r.bytes);
  ASSERT_TRUE(back->placed[0] && back->placed[1]);
  EXPECT_EQ(back->placed[0]->time_us, r.placed[0]->time_us);  // bit for bit
  EXPECT_EQ(back->placed[0]->wrong, 42u);
  EXPECT_TRUE(back->placed[0]->checked);
  EXPECT_EQ(back->placed[1]->time_us, 0.1);
  EXPECT_FALSE(back->placed[1]->checked);
  r.placed[1].reset();
  const std::optional<nccl::RankRow> out_only = nccl::decode_row(nccl::encode_row(r));
  ASSERT_TRUE(out_only);
  EXPECT_FALSE(out_only->placed[1]);
  for (const char* bad : {"", "8", "8 1.0 0 - -  x", "-8 1.0 0 - -", "8 nan 0 - -", "8 1.0 -1 - -", "8 - 0 - -",
                          "8 1.0 0 2.0", "8 -1.0 0 - -"})
    EXPECT_EQ(nccl::decode_row(bad), std::nullopt) << bad;
}

// The per-rank line as nccl-tests' writeDeviceReport prints it: "#  Rank %2d Group %2d Pid %6d on
// %10s device %2d [%04x:%02x:%02x] %s".
TEST(NcclTable, RankLine) {
  const nccl::RankInfo r{3, 0, 4242, 0, "node7", "0000:00:00", "inagg ina 10.77.0.4"};
  EXPECT_EQ(nccl::rank_line(r),
            "#  Rank  3 Group  0 Pid   4242 on      node7 device  0 [0000:00:00] inagg ina 10.77.0.4");
  const std::optional<nccl::RankInfo> back = nccl::parse_rank_line(nccl::rank_line(r));
  ASSERT_TRUE(back);
  EXPECT_EQ(back->rank, 3);
  EXPECT_EQ(back->pid, 4242);
  EXPECT_EQ(back->hostname, "node7");
  EXPECT_EQ(back->device_hex, "0000:00:00");
  EXPECT_EQ(back->device_info, "inagg ina 10.77.0.4");
  EXPECT_EQ(nccl::parse_rank_line("#  Rank x Group 0"), std::nullopt);
}

// nccl-tests' JSON, written out by hand from util.cu's calls (jsonOutputInit, writeDeviceReport,
// writeBenchmarkLine*, writeResultFooter, writeErrors, jsonOutputFinalize).
TEST(NcclTable, Json) {
  nccl::JsonRun run;
  run.start_time = "2026-12-07 10:00:00";
  run.end_time = "2026-12-07 10:00:05";
  run.args = {"inagg-worker", "-b", "8"};
  run.env = nccl::environment_for_json(nullptr);
  run.min_bytes = 8;
  run.max_bytes = 16;
  run.step_factor = 2;
  run.warmup_iters = 1;
  run.iterations = 20;
  run.validation = 1;
  run.devices = {{0, 0, 7, 0, "h", "0000:00:00", "inagg ina"}};
  run.rows = {{8, 2, Dtype::fp32, "sum", nccl::Measurement{1.5, 0.25, 0.375, true, 3}, std::nullopt}};
  run.experiment_name = "all_reduce_perf";
  run.out_of_bounds = 1;
  run.avg_busbw = 0.375;
  EXPECT_EQ(nccl::results_json(run),
            "{\"version\":3,\"start_time\":\"2026-12-07 10:00:00\",\"args\":[\"inagg-worker\",\"-b\",\"8\"],\"env\":[],"
            "\"nccl_version\":0,\"config\":{\"nthreads\":1,\"ngpus\":1,\"minimum_bytes\":8,\"maximum_bytes\":16,"
            "\"step_factor\":2,\"warmup_iters\":1,\"iterations\":20,\"aggregated_iterations\":1,\"validation\":1,"
            "\"graph\":0,\"blocking_collectives\":\"false\",\"per_iter_timing\":\"false\",\"per_iter_skip\":0,"
            "\"parallel_init\":\"false\",\"devices\":[{\"rank\":0,\"group\":0,\"pid\":7,\"hostname\":\"h\","
            "\"device\":0,\"device_hex\":\"0000:00:00\",\"device_info\":\"inagg ina\"}]},\"results\":[{\"size\":8,"
            "\"count\":2,\"type\":\"float\",\"redop\":\"sum\",\"root\":\"    -1\",\"out_of_place\":{\"time\":1.500000,"
            "\"alg_bw\":0.250000,\"bus_bw\":0.375000,\"nwrong\":3.000000},\"in_place\":null,\"actual_iterations\":20,"
            "\"experiment_name\":\"all_reduce_perf\"}],\"out_of_bounds\":{\"count\":1,\"okay\":\"false\"},"
            "\"average_bus_bandwidth\":{\"bandwidth\":0.375000,\"okay\":\"unchecked\"},\"errors\":[],"
            "\"end_time\":\"2026-12-07 10:00:05\"}\n");
  char secret[] = "INAGG_EXCHANGE_SECRET=abc", key[] = "inagg_xdp_key=k", plain[] = "HOME=/root";
  char* envp[] = {secret, key, plain, nullptr};
  EXPECT_EQ(nccl::environment_for_json(envp), (std::vector<std::string>{"INAGG_EXCHANGE_SECRET=(not written)",
                                                                        "inagg_xdp_key=(not written)", "HOME=/root"}));
}
