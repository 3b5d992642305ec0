// JSON Schema (the draft 2020-12 subset users send with response_format) into the byte
// grammar, compact output (no whitespace). Supported: type (a name or a list), properties
// (kept in the schema's order; optional ones may be left out), required,
// additionalProperties (absent or false: none; true or a schema: extra members after the
// declared ones), enum, const, anyOf, oneOf (as anyOf), allOf of one schema, items,
// prefixItems, minItems, maxItems, minLength, maxLength, pattern (its language without the
// characters JSON would have to escape), format (date, time, date-time, uuid, email),
// $ref to #, #/$defs/... or #/definitions/... (recursion included), integer minimum 0,
// and the annotations (title, description, default, examples, $schema, $id, $comment,
// deprecated, readOnly, writeOnly), which change nothing. Anything else is an error
// naming the keyword and its JSON pointer, never ignored.
#pragma once

#include <string>

#include "structured/grammar.h"

namespace gannet::structured {

// Throws gannet::Error for text that is not JSON, or an unsupported or invalid schema.
Grammar compile_json_schema(const std::string& schema_json);

}  // namespace gannet::structured
