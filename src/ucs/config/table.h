/**
 * Declarative configuration tables.
 *
 * A component describes its options once, as a table of fields bound to the members
 * of a plain struct, and reads them with fill():
 *
 *   struct TcpConfig {
 *       std::size_t seg_size;
 *       std::chrono::nanoseconds connect_timeout;
 *   };
 *
 *   const RegisteredTable<TcpConfig> kTcpTable{"TCP_", "TCP transport", "Sockets over any IP network.", {
 *       field("SEG_SIZE", "64k", "Largest message sent in one piece.", &TcpConfig::seg_size, SizeParser()),
 *       field("CONN_TIMEOUT", "10s", "Time to wait for a connection.", &TcpConfig::connect_timeout,
 *             TimeParser().allow_inf()),
 *   }};
 *
 *   TcpConfig config;
 *   Status status = fill(kTcpTable, config);  // reads LOOM_TCP_SEG_SIZE, LOOM_TCP_CONN_TIMEOUT
 *
 * field() checks at compile time that the parser produces the member's type. Each
 * variable is LOOM_<table prefix><field name>. fill() applies, field by field, the
 * default, then the configuration file named by LOOM_CONFIG_FILE, then the
 * environment, then the caller's overrides; the last one that sets a field wins.
 * Tables are immutable after construction and may be read from any thread.
 */
#pragma once

#include "ucs/config/parser.h"
#include "ucs/type/result.h"
#include "ucs/type/status.h"

#include <cstddef>
#include <functional>
#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace loom::ucs::config {

/** Every configuration variable starts with this. */
inline constexpr std::string_view kVariablePrefix = "LOOM_";

/**
 * Values an application sets programmatically, applied after the environment. Keys
 * are variable names with or without LOOM_, in any case ("TCP_SEG_SIZE",
 * "LOOM_TCP_SEG_SIZE"); one map may hold values for several tables.
 */
using Overrides = std::map<std::string, std::string, std::less<>>;

/** What a table says about one field, independent of the struct the table fills. */
struct FieldInfo {
    std::string name;           ///< without LOOM_ and the table prefix, e.g. "SEG_SIZE"
    std::string default_value;  ///< the text parsed when nothing else sets the field
    std::string doc;            ///< what the field does, for loom_info -cf and the docs
    std::string syntax;         ///< what the parser accepts, e.g. "yes, no, try or auto"
    std::string what;           ///< the kind of value, for error messages, e.g. "size"
};

/** One field of a table for struct S: its description and how to parse and print it. */
template <typename S>
struct Field : FieldInfo {
    /** Parses text into the field's member of S; see ValueParser for the contract. */
    std::function<Status(std::string_view text, S& target, std::string& reason)> parse;
    /** Prints the field's member of S canonically. */
    std::function<std::string(const S& source)> print;
};

/**
 * A field bound to @p member of S and parsed by @p parser, whose value type must be
 * exactly the member's type (checked at compile time). @p name is the variable name
 * without LOOM_ and the table prefix; @p default_value must parse (checked when the
 * table is built).
 */
template <typename S, typename T, ParserFor<T> P>
Field<S> field(std::string name, std::string default_value, std::string doc, T S::*member, P parser) {
    Field<S> result;
    result.name = std::move(name);
    result.default_value = std::move(default_value);
    result.doc = std::move(doc);
    result.syntax = parser.syntax();
    result.what = parser.what();
    result.parse = [member, parser](std::string_view text, S& target, std::string& reason) {
        return parser.parse(text, target.*member, reason);
    };
    result.print = [member, parser](const S& source) { return parser.print(source.*member); };
    return result;
}

/** An entry of a table's field list: one field, or the fields of an embedded table. */
template <typename S>
class TableEntry {
public:
    /** One field. */
    TableEntry(Field<S> field) { fields_.push_back(std::move(field)); }  // NOLINT: implicit by design

    /** Several fields, as returned by embed(). */
    TableEntry(std::vector<Field<S>> fields) : fields_(std::move(fields)) {}  // NOLINT: implicit by design

    /** The fields of this entry. */
    const std::vector<Field<S>>& fields() const noexcept { return fields_; }

private:
    std::vector<Field<S>> fields_;
};

/**
 * The interface of every table, whatever struct it fills: what the registry,
 * loom_info and the documentation generator use.
 */
class TableBase {
public:
    /**
     * @p prefix goes between LOOM_ and each field name: "" for the global table, or
     * upper-case letters, digits and underscores ending with '_' ("TCP_").
     */
    TableBase(std::string prefix, std::string title, std::string doc);
    virtual ~TableBase() = default;
    TableBase(const TableBase&) = delete;
    TableBase& operator=(const TableBase&) = delete;

    /** What goes between LOOM_ and each field name ("TCP_"). */
    const std::string& prefix() const noexcept { return prefix_; }

    /** A short name for headings ("TCP transport"). */
    const std::string& title() const noexcept { return title_; }

    /** A paragraph about what the table configures. */
    const std::string& doc() const noexcept { return doc_; }

    /** Number of fields. */
    virtual std::size_t size() const noexcept = 0;

    /** Description of field @p index (< size()). */
    virtual const FieldInfo& field_info(std::size_t index) const = 0;

    /** Full variable name of field @p index: LOOM_<prefix><name>. */
    std::string variable_name(std::size_t index) const;

    /** Index of the field whose variable is @p name (with or without LOOM_, any case), if any. */
    std::optional<std::size_t> find(std::string_view name) const;

    /**
     * Parses @p text as field @p index would, without side effects. On success
     * @p canonical holds the value printed back; on failure returns invalid_config or
     * out_of_range and @p reason may explain (see ValueParser).
     */
    virtual Status check_value(std::size_t index, std::string_view text, std::string& canonical,
                               std::string& reason) const = 0;

    /**
     * The value of every field as fill() would set it now, printed canonically.
     * Returns invalid_config (after logging the problem) when a source is bad.
     */
    virtual Result<std::vector<std::string>> current_values(const Overrides& overrides) const = 0;

protected:
    /**
     * Checks the field names (valid, unique) and that every default parses. These are
     * programming errors of the table's author, so a violation is fatal.
     */
    void validate() const;

private:
    std::string prefix_;
    std::string title_;
    std::string doc_;
};

/** A table of fields filling struct S (a plain struct: default-constructible and copyable). */
template <typename S>
class Table : public TableBase {
    static_assert(std::is_default_constructible_v<S> && std::is_copy_assignable_v<S>,
                  "a configuration struct must be default-constructible and copyable");

public:
    /** Builds the table; fatal when a field name is invalid or repeated or a default does not parse. */
    Table(std::string prefix, std::string title, std::string doc,
          std::initializer_list<TableEntry<S>> entries)
        : TableBase(std::move(prefix), std::move(title), std::move(doc)) {
        for (const TableEntry<S>& entry : entries) {
            fields_.insert(fields_.end(), entry.fields().begin(), entry.fields().end());
        }
        validate();
    }

    /** Number of fields. */
    std::size_t size() const noexcept override { return fields_.size(); }

    /** Description of field @p index (< size()). */
    const FieldInfo& field_info(std::size_t index) const override { return fields_.at(index); }

    /** The typed fields, in declaration order. */
    const std::vector<Field<S>>& fields() const noexcept { return fields_; }

    /** A struct with every field at its default (the defaults were checked when the table was built). */
    S defaults() const {
        S result{};
        std::string reason;
        for (const Field<S>& f : fields_) (void)f.parse(f.default_value, result, reason);
        return result;
    }

    /** See TableBase::check_value(). */
    Status check_value(std::size_t index, std::string_view text, std::string& canonical,
                       std::string& reason) const override {
        const Field<S>& f = fields_.at(index);
        S scratch{};
        Status status = f.parse(text, scratch, reason);
        if (status == Status::ok) canonical = f.print(scratch);
        return status;
    }

    /** See TableBase::current_values(). */
    Result<std::vector<std::string>> current_values(const Overrides& overrides) const override;

private:
    std::vector<Field<S>> fields_;
};

/**
 * The fields of @p table, bound to @p member of S, for listing inside another table
 * (common options shared by several transports). The embedded fields keep their names
 * and take the prefix of the table they are listed in.
 */
template <typename S, typename Sub>
std::vector<Field<S>> embed(Sub S::*member, const Table<Sub>& table) {
    std::vector<Field<S>> result;
    for (const Field<Sub>& inner : table.fields()) {
        Field<S> outer;
        static_cast<FieldInfo&>(outer) = inner;
        outer.parse = [member, parse = inner.parse](std::string_view text, S& target, std::string& reason) {
            return parse(text, target.*member, reason);
        };
        outer.print = [member, print = inner.print](const S& source) { return print(source.*member); };
        result.push_back(std::move(outer));
    }
    return result;
}

namespace detail {

/** Where a field's text came from, for error messages. */
enum class Origin : std::uint8_t { default_value, file, environment, application };

/** The text a field gets from the highest-priority source that sets it. */
struct RawValue {
    std::string text;
    Origin origin = Origin::default_value;
    std::string location;  ///< "file:line" for Origin::file
};

/**
 * Collects the text of every field of @p table from its sources. Returns
 * invalid_config (after logging the problem once) when the configuration file
 * cannot be read or is malformed.
 */
Status resolve(const TableBase& table, const Overrides& overrides, std::vector<RawValue>& values);

/** Logs, once per process, the error for field @p index failing to parse @p value. */
void report_invalid(const TableBase& table, std::size_t index, const RawValue& value, Status status,
                    const std::string& reason);

}  // namespace detail

/**
 * Fills @p out from @p table: each field gets its default, then the value from the
 * configuration file, then from the environment, then from @p overrides. Returns
 * invalid_config, after logging one line naming the variable, the value and what is
 * accepted, when a value does not parse or the configuration file is bad; @p out is
 * then unchanged. Members of S that the table does not list keep their value.
 */
template <typename S>
[[nodiscard]] Status fill(const Table<S>& table, S& out, const Overrides& overrides = {}) {
    std::vector<detail::RawValue> values;
    Status status = detail::resolve(table, overrides, values);
    if (status != Status::ok) return status;
    S result = out;  // parse into a copy so a bad value leaves nothing half-applied
    const std::vector<Field<S>>& fields = table.fields();
    for (std::size_t i = 0; i < fields.size(); ++i) {
        std::string reason;
        status = fields[i].parse(values[i].text, result, reason);
        if (status != Status::ok) {
            detail::report_invalid(table, i, values[i], status, reason);
            return Status::invalid_config;
        }
    }
    out = std::move(result);
    return Status::ok;
}

template <typename S>
Result<std::vector<std::string>> Table<S>::current_values(const Overrides& overrides) const {
    S current{};
    Status status = fill(*this, current, overrides);
    if (status != Status::ok) return status;
    std::vector<std::string> printed;
    printed.reserve(fields_.size());
    for (const Field<S>& f : fields_) printed.push_back(f.print(current));
    return printed;
}

}  // namespace loom::ucs::config
