// The built-in "any JSON value" grammar (RFC 8259): objects, arrays, strings with every
// escape (\uXXXX included) and any non-control character, numbers, true, false, null.
// Whitespace policy: compact (no whitespace at all) or a bounded run of JSON whitespace
// between tokens (so a model cannot fill the output with spaces).
#pragma once

#include <string>

#include "structured/grammar.h"

namespace gannet::structured {

struct JsonWhitespace {
  bool compact = true;      // no whitespace anywhere
  int max_run = 2;          // otherwise: up to this many of space, \t, \n, \r between tokens
  // Python's json.dumps layout instead (compile_json_schema only; tool-call grammars always
  // use it): one space after each ',' and ':' and none anywhere else, so that a value the
  // model writes is the text a chat template that re-renders it with json.dumps / tojson
  // writes back.
  bool python = false;
};

// The GBNF text of the grammar, rooted at `root` (value: any JSON value; object: an
// object at the top, as OpenAI's json_object mode asks).
std::string json_gbnf(const JsonWhitespace& ws = {}, bool object_at_top = false);
Grammar json_grammar(const JsonWhitespace& ws = {}, bool object_at_top = false);

}  // namespace gannet::structured
