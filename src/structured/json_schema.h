// JSON Schema (the draft 2020-12 subset users send with response_format) into the byte
// grammar (compact by default). Supported: type (a name or a list), properties (kept in
// the schema's order; optional ones may be left out), required, additionalProperties
// (absent or false: none; true or a schema: extra members after the declared ones), enum
// and const (with type: the values of those types), anyOf, oneOf (as anyOf; keywords beside
// them hold in every branch), allOf (merged into one schema with its siblings: properties
// in both become an allOf of the two, required joins, types intersect, bounds tighten, any
// other keyword must agree), items, prefixItems (with items and min/maxItems: every array
// length they allow, the first items matching their prefixItems), minItems, maxItems,
// minLength, maxLength (in code points, as JSON Schema counts; a character outside the BMP
// written as an escaped surrogate pair counts two: stricter, to keep the count unambiguous),
// pattern (ECMAScript search semantics on the decoded string: quotes, backslashes and
// control characters in their JSON escapes), format (below), $ref to #, #/$defs/... or #/definitions/... (recursion
// included), integer minimum / maximum / exclusiveMinimum / exclusiveMaximum, and the
// annotations (title, description, default, examples, $schema, $id, $comment, deprecated,
// readOnly, writeOnly), which change nothing. Anything else is an error naming the keyword
// and its JSON pointer, never ignored.
//
// Formats, each against the definition it follows and what the `jsonschema` package's
// format checker (4.x, with rfc3339-validator) accepts:
//   date       RFC 3339 §5.6 full-date, a real calendar date, years 0001-9999 (the checker:
//              the same, through date.fromisoformat).
//   time       RFC 3339 §5.6 full-time: HH:MM:SS[.frac] then Z or ±HH:MM, `z` allowed (§5.6's
//              NOTE); seconds 00-59 (the checker: the same; it refuses leap second 60 too).
//   date-time  RFC 3339 §5.6 date-time: full-date, T, full-time, `t` and `z` in either case
//              (the checker: the same, year 0000 refused as here).
//   uuid       RFC 9562 §4 (RFC 4122 §3): 8-4-4-4-12 hex digits, either case. Stricter than
//              the checker, which takes any text uuid.UUID parses with hyphens at those four
//              places (further hyphens, braces): the RFC defines the one form.
//   email      RFC 5321 §4.1.2 Mailbox, read loosely: a local part of RFC 5322 atext and dots
//              in any arrangement (as HTML's valid e-mail address allows) or a quoted string
//              (§4.1.2 Quoted-string), `@`, then a domain of dot-separated labels of letters,
//              digits and hyphens, or an address literal (§4.1.3: IPv4, or IPv6: with hex
//              digits, colons and dots). Stricter than the checker, which accepts any string
//              holding an `@`: a generated address should be one mail software can deliver
//              to, and that a checker reading the RFC accepts.
#pragma once

#include <string>

#include "structured/grammar.h"
#include "structured/json_grammar.h"

namespace gannet::structured {

// Throws gannet::Error for text that is not JSON, or an unsupported or invalid schema.
// ws: compact (the default) or up to ws.max_run whitespace characters wherever JSON
// allows them between tokens (not before or after the document).
Grammar compile_json_schema(const std::string& schema_json, const JsonWhitespace& ws = {});

}  // namespace gannet::structured
