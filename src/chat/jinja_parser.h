// Jinja source -> statement tree, with the environment transformers renders chat
// templates in: trim_blocks (the newline after a block or comment tag is dropped) and
// lstrip_blocks (spaces and tabs before a block or comment tag on its line are dropped),
// `{%-` / `-%}` / `{{-` / `-}}` strip whitespace, `{%+` keeps it, and the loop controls
// break / continue exist.
#pragma once

#include <string_view>

#include "chat/jinja_ast.h"

namespace gannet::chat::jinja {

// Throws gannet::Error "line N: problem" for a syntax error or a construct outside the
// supported subset (named).
Body parse_template(std::string_view source);

}  // namespace gannet::chat::jinja
