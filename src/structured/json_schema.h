// JSON Schema (the draft 2020-12 subset users send with response_format) into the byte
// grammar (compact by default). Supported: type (a name or a list), properties (kept in
// the schema's order; optional ones may be left out), required, additionalProperties
// (absent or false: none; true or a schema: extra members after the declared ones), enum
// and const (with type: the values of those types), anyOf, oneOf (as anyOf; keywords beside
// them hold in every branch), allOf (merged into one schema with its siblings: properties
// in both become an allOf of the two, required joins, types intersect, bounds tighten, any
// other keyword must agree), items, prefixItems, minItems, maxItems, minLength, maxLength,
// pattern (its language without the characters JSON would have to escape), format (date,
// time, date-time, uuid, email), $ref to #, #/$defs/... or #/definitions/... (recursion
// included), integer minimum / maximum / exclusiveMinimum / exclusiveMaximum, and the
// annotations (title, description, default, examples, $schema, $id, $comment, deprecated,
// readOnly, writeOnly), which change nothing. Anything else is an error naming the keyword
// and its JSON pointer, never ignored.
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
