#include "inagg/util/text.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace inagg::util {

std::string_view trim(std::string_view s) {
  const auto is_space = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f'; };
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

std::vector<std::string_view> split_fields(std::string_view value) {
  std::vector<std::string_view> f;
  for (size_t start = 0;;) {
    const size_t comma = value.find(',', start);
    f.push_back(trim(value.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start)));
    if (comma == std::string_view::npos) return f;
    start = comma + 1;
  }
}

bool for_each_content_line(std::string_view text, const std::function<bool(size_t, std::string_view)>& fn) {
  size_t line_no = 0;
  for (size_t start = 0; start <= text.size();) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(start, end - start);
    line = trim(line.substr(0, line.find_first_of("#;")));
    start = end + 1;
    ++line_no;
    if (!line.empty() && !fn(line_no, line)) return false;
  }
  return true;
}

std::optional<uint64_t> parse_unsigned(std::string_view text, uint64_t max, NumberError* why) {
  NumberError dummy;
  NumberError& e = why ? *why : dummy;
  e = NumberError::not_a_number;
  if (text.empty()) return std::nullopt;
  if (text.front() == '-') {
    // "-5" is a clear mistake worth naming; "-x" is just not a number.
    if (parse_unsigned(text.substr(1), UINT64_MAX)) e = NumberError::negative;
    return std::nullopt;
  }
  unsigned base = 10;
  if (text.size() > 2 && text[0] == '0' && (text[1] == 'x' || text[1] == 'X')) {
    base = 16;
    text.remove_prefix(2);
  }
  uint64_t v = 0;
  bool overflow = false;
  for (char ch : text) {
    unsigned d;
    if (ch >= '0' && ch <= '9')
      d = static_cast<unsigned>(ch - '0');
    else if (base == 16 && ch >= 'a' && ch <= 'f')
      d = static_cast<unsigned>(ch - 'a' + 10);
    else if (base == 16 && ch >= 'A' && ch <= 'F')
      d = static_cast<unsigned>(ch - 'A' + 10);
    else
      return std::nullopt;
    if (v > (UINT64_MAX - d) / base) overflow = true;  // keep scanning: junk later still means "not a number"
    v = v * base + d;
  }
  if (overflow || v > max) {
    e = NumberError::out_of_range;
    return std::nullopt;
  }
  e = NumberError::none;
  return v;
}

std::string quote_for_error(std::string_view text) {
  constexpr size_t kMax = 64;
  std::string out = "'";
  for (size_t i = 0; i < text.size() && i < kMax; ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  if (text.size() > kMax) out += "...";
  return out + "'";
}

bool read_small_file(const std::string& path, std::string_view what, size_t max_bytes, std::string_view size_note,
                     std::string* text, std::string* error) {
  const std::string named = std::string(what) + " '" + path + "'";
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    *error = "cannot open " + named + ": " + std::strerror(errno);
    return false;
  }
  struct stat st {};
  std::string why;
  if (::fstat(fd, &st) != 0) {
    why = std::strerror(errno);
  } else if (!S_ISREG(st.st_mode)) {
    why = "not a regular file";
  } else if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    why = std::to_string(st.st_size) + " bytes; a " + std::string(what) + " is at most " + std::string(size_note);
  } else {
    text->resize(static_cast<size_t>(st.st_size));
    size_t got = 0;
    while (got < text->size()) {
      const ssize_t n = ::read(fd, text->data() + got, text->size() - got);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        why = std::string("read failed: ") + std::strerror(errno);
        break;
      }
      if (n == 0) break;  // shrank while we read: take what is there
      got += static_cast<size_t>(n);
    }
    text->resize(got);
  }
  ::close(fd);
  if (!why.empty()) *error = "cannot read " + named + ": " + why;
  return why.empty();
}

}  // namespace inagg::util
