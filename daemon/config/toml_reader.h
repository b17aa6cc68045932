// Reading TOML against the schema: which sections and keys exist, and a reader of one table
// whose typed getters throw ConfigError with the key's line and a fix.
#pragma once

#include <toml++/toml.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/config_error.h"

namespace xferd::config {

using std::chrono::milliseconds;

// The schema: every section and the keys it may hold. Unknown keys are looked up here
// for a "did you mean" suggestion, across sections too (a key in the wrong section).
struct Section {
  std::string_view name;
  std::vector<std::string_view> keys;
};
const std::vector<Section>& Schema();

// "a string (\"x\")", "an integer (3)": what a value is, for "must be X, got Y".
std::string TypeName(const toml::node& node);
int LineOf(const toml::node& node);

// Reads one TOML table against the schema: typed getters that throw ConfigError with the
// key's line, and a final check that rejects keys nobody asked for.
class TableReader {
 public:
  TableReader(std::string file, const toml::table& table, std::string section)
      : file_(std::move(file)), table_(table), section_(std::move(section)) {}

  // `display` overrides the key prefix in messages ("health.band[1]" for an array entry).
  void SetDisplayPrefix(std::string prefix) { display_ = std::move(prefix); }

  std::string KeyName(std::string_view key) const;

  int TableLine() const { return LineOf(table_); }

  [[noreturn]] void Fail(const toml::node& node, std::string_view key, std::string problem,
                         std::string fix) const;
  [[noreturn]] void FailAt(int line, std::string_view key, std::string problem,
                           std::string fix) const;

  const toml::node* Find(std::string_view key) const { return table_.get(key); }

  std::optional<bool> Bool(std::string_view key) const;

  std::optional<std::int64_t> Integer(std::string_view key, std::int64_t min, std::int64_t max,
                                      std::int64_t suggestion) const;

  // A number (integer or float) in [min, max] or, when `open_min`, in (min, max].
  std::optional<double> Number(std::string_view key, double min, double max, bool open_min,
                               double suggestion) const;

  std::optional<std::string> String(std::string_view key, std::string_view example) const;

  std::optional<milliseconds> Duration(std::string_view key, milliseconds min, milliseconds max,
                                       std::string_view suggestion) const;

  // One size: a string ("64MiB") or a number of bytes. `example` is the line to suggest.
  std::uint64_t SizeValue(const toml::node& node, std::string_view key, std::uint64_t min,
                          std::uint64_t max, const std::string& example) const;

  std::optional<std::uint64_t> Size(std::string_view key, std::uint64_t min, std::uint64_t max,
                                    std::string_view suggestion) const;

  // `allow_zero`: 0 is a meaningful value (an idle simulated link), not a unit mistake.
  std::optional<double> Bandwidth(std::string_view key, std::string_view suggestion,
                                  bool allow_zero = false) const;

  // An array whose elements all pass `each`; empty arrays rejected when !allow_empty.
  const toml::array* Array(std::string_view key, bool allow_empty, std::string_view example) const;

  // Rejects keys this section does not know, with the closest known one as a suggestion.
  void RejectUnknown() const;

 private:
  std::string Suggest(std::string_view key) const;

  std::string file_;
  const toml::table& table_;
  std::string section_;
  std::string display_;
};

// Every key and string of the parsed file, before any section reads it: a NUL in a string
// (`"\u0000"`, legal TOML) would cut a path short where it reaches the system, and a control
// character in a key is never a key xferd knows. Throws ConfigError at the first, with its
// line. Walks the tree with a stack of its own (FindTooDeepNesting bounds its depth anyway).
void RejectControlCharacters(const std::string& file, const toml::table& root);

// A section is optional; when present it must be a table. nullptr when absent.
const toml::table* SectionTable(const std::string& file, const toml::table& root,
                                std::string_view name);

// The ID of a GPU in config: an index ("0" or 0) or a UUID string ("GPU-...", "MIG-...",
// "SIM-...", any case).
std::string GpuId(const TableReader& reader, const toml::node& node, std::string_view key);

}  // namespace xferd::config
