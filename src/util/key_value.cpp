#include "inagg/util/key_value.hpp"

#include <algorithm>
#include <cctype>
#include <vector>

namespace inagg::util {
namespace {

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t k = 0; k <= b.size(); ++k) row[k] = k;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t k = 1; k <= b.size(); ++k) {
      const size_t up = row[k];
      const char ca = static_cast<char>(std::tolower(static_cast<unsigned char>(a[i - 1])));
      const char cb = static_cast<char>(std::tolower(static_cast<unsigned char>(b[k - 1])));
      row[k] = std::min({row[k] + 1, row[k - 1] + 1, diag + (ca == cb ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

std::string unknown_key_text(std::string_view key, std::span<const KeySpec> keys) {
  std::string out = "unknown key " + quote_for_error(key);
  const KeySpec* best = nullptr;
  size_t best_d = 3;  // suggest only close misspellings
  for (const KeySpec& k : keys) {
    const size_t d = edit_distance(key, k.name);
    if (d < best_d) best_d = d, best = &k;
  }
  if (best) out += " (did you mean '" + std::string(best->name) + "'?)";
  out += "; valid keys:";
  for (size_t i = 0; i < keys.size(); ++i) out += (i ? ", " : " ") + std::string(keys[i].name);
  return out;
}

}  // namespace

std::string ParseProblem::message() const { return line ? "line " + std::to_string(line) + ": " + text : text; }

std::string ParseProblem::message(std::string_view file) const {
  return std::string(file) + (line ? ":" + std::to_string(line) : std::string()) + ": " + text;
}

bool parse_key_values(std::string_view text, std::span<const KeySpec> keys,
                      const std::function<bool(size_t key, std::string_view value, std::string* problem)>& set,
                      ParseProblem* p) {
  std::vector<size_t> seen_on(keys.size(), 0);                     // line a key was first set on, 0 = not yet
  if (text.substr(0, 3) == "\xEF\xBB\xBF") text.remove_prefix(3);  // a UTF-8 BOM some editors add
  const bool ok = for_each_content_line(text, [&](size_t line_no, std::string_view line) {
    p->line = line_no;
    if (line.front() == '[') {
      p->text = "sections such as " + quote_for_error(line) + " are not used: write plain `key = value` lines";
      return false;
    }
    const size_t eq = line.find('=');
    if (eq == std::string_view::npos) {
      p->text = "expected `key = value`, got " + quote_for_error(line);
      return false;
    }
    const std::string_view key = trim(line.substr(0, eq)), value = trim(line.substr(eq + 1));
    if (key.empty()) {
      p->text = "no key before '='; write `key = value`";
      return false;
    }
    const auto it = std::find_if(keys.begin(), keys.end(), [&](const KeySpec& k) { return k.name == key; });
    if (it == keys.end()) {
      p->text = unknown_key_text(key, keys);
      return false;
    }
    const size_t index = static_cast<size_t>(it - keys.begin());
    if (!it->repeatable && seen_on[index] != 0) {
      p->text = "duplicate key '" + std::string(key) + "' (first set on line " + std::to_string(seen_on[index]) +
                "); keep one of the two lines";
      return false;
    }
    if (value.empty()) {
      p->text = std::string(key) + ": no value; write e.g. `" + std::string(it->example) + "`";
      return false;
    }
    std::string problem;
    if (!set(index, value, &problem)) {
      p->text = std::string(key) + ": " + problem;
      return false;
    }
    if (seen_on[index] == 0) seen_on[index] = line_no;
    return true;
  });
  if (!ok) return false;
  p->line = 0;
  std::vector<std::string_view> missing;
  for (size_t i = 0; i < keys.size(); ++i)
    if (keys[i].required && seen_on[i] == 0) missing.push_back(keys[i].example);
  if (missing.empty()) return true;
  p->text = missing.size() == 1 ? "missing required key; add a line like `" : "missing required keys; add lines like `";
  for (size_t i = 0; i < missing.size(); ++i) p->text += (i ? "`, `" : "") + std::string(missing[i]);
  p->text += "`";
  return false;
}

}  // namespace inagg::util
