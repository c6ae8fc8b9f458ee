// Text helpers of the key = value files and control requests: strict numbers, quoting for error
// messages, trimming, comma fields and content lines.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "inagg/util/text.hpp"

namespace inagg::util {
namespace {

TEST(ParseUnsigned, Strict) {
  NumberError e;
  EXPECT_EQ(parse_unsigned("0", 10, &e), 0u);
  EXPECT_EQ(e, NumberError::none);
  EXPECT_EQ(parse_unsigned("010", 100), 10u);  // decimal, never octal
  EXPECT_EQ(parse_unsigned("0XfF", 255), 255u);
  EXPECT_EQ(parse_unsigned("18446744073709551615", UINT64_MAX), UINT64_MAX);
  EXPECT_FALSE(parse_unsigned("18446744073709551616", UINT64_MAX, &e));
  EXPECT_EQ(e, NumberError::out_of_range);
  EXPECT_FALSE(parse_unsigned("256", 255, &e));
  EXPECT_EQ(e, NumberError::out_of_range);
  for (const char* bad : {"", " 1", "1 ", "0x", "0xg", "1.0", "+1", "0b1", "1_000", "99999999999999999999x"}) {
    EXPECT_FALSE(parse_unsigned(bad, UINT64_MAX, &e)) << bad;
    EXPECT_EQ(e, NumberError::not_a_number) << bad;
  }
  EXPECT_FALSE(parse_unsigned("-0", 5, &e));
  EXPECT_EQ(e, NumberError::negative);
}

TEST(QuoteForError, EscapesAndCuts) {
  EXPECT_EQ(quote_for_error("ab"), "'ab'");
  EXPECT_EQ(quote_for_error(std::string("a\nb\0", 4)), "'a\\x0ab\\x00'");
  EXPECT_EQ(quote_for_error(std::string(100, 'x')), "'" + std::string(64, 'x') + "...'");
}

TEST(Text, TrimSplitAndContentLines) {
  EXPECT_EQ(trim(" \t a b \r\v\f"), "a b");
  EXPECT_EQ(trim("   "), "");
  EXPECT_EQ(split_fields("a, b ,c"), (std::vector<std::string_view>{"a", "b", "c"}));
  EXPECT_EQ(split_fields(" x "), (std::vector<std::string_view>{"x"}));
  EXPECT_EQ(split_fields("a,,"), (std::vector<std::string_view>{"a", "", ""}));
  std::vector<std::pair<size_t, std::string>> seen;
  EXPECT_TRUE(for_each_content_line("# c\n  k = v ; note\n\n;x\nlast", [&](size_t n, std::string_view l) {
    seen.emplace_back(n, std::string(l));
    return true;
  }));
  EXPECT_EQ(seen, (std::vector<std::pair<size_t, std::string>>{{2, "k = v"}, {5, "last"}}));
  size_t calls = 0;
  EXPECT_FALSE(for_each_content_line("a\nb\nc", [&](size_t, std::string_view) { return ++calls < 2; }));
  EXPECT_EQ(calls, 2u);
}

}  // namespace
}  // namespace inagg::util
