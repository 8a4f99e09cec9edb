/**
 * The configuration file named by LOOM_CONFIG_FILE: INI style, one setting a line.
 *
 *   # comment            ; comment
 *   [logging]            section headers group lines for people; Loom ignores them
 *   LOG_LEVEL = info     the key with or without LOOM_, any case
 *   LOOM_TCP_SEG_SIZE = 64k   # a comment after white space ends the value
 *   LOG_FILE = "/tmp/a #1.log"   double quotes keep # ; and surrounding spaces
 *
 * A key set twice takes the later value. LOOM_CONFIG_FILE itself cannot be set here.
 */
#pragma once

#include "ucs/type/status.h"

#include <string>
#include <string_view>
#include <vector>

namespace loom::ucs::config {

/** One setting of a configuration file. */
struct ConfigFileEntry {
    std::string name;   ///< the full variable name, upper case with LOOM_ ("LOOM_LOG_LEVEL")
    std::string value;  ///< trimmed, quotes and comment removed
    int line = 0;       ///< 1-based line number
};

/** A parsed configuration file. */
class ConfigFile {
public:
    /**
     * Reads and parses the file at @p path into @p file. Returns invalid_config with
     * @p error naming the file (and the line, for a malformed line) when the file
     * cannot be opened or read or does not parse.
     */
    static Status load(const std::string& path, ConfigFile& file, std::string& error);

    /** Parses @p text as the contents of a file at @p path; errors as load(). */
    static Status parse(const std::string& path, std::string_view text, ConfigFile& file, std::string& error);

    const std::string& path() const noexcept { return path_; }
    const std::vector<ConfigFileEntry>& entries() const noexcept { return entries_; }

    /** The entry that sets @p name (full variable name) last, or nullptr. */
    const ConfigFileEntry* find(std::string_view name) const noexcept;

private:
    std::string path_;
    std::vector<ConfigFileEntry> entries_;
};

}  // namespace loom::ucs::config
