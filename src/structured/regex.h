// Regular expressions (the ECMAScript subset JSON Schema `pattern`s and users write) into
// the byte grammar: literals, `.`, classes [...] with ranges and ^, the escapes \d \w \s
// \D \W \S \n \r \t \f \v \0 \xHH \uHHHH \u{H...} and escaped metacharacters, groups ( ),
// (?: ), named groups (?<name> ), alternation |, quantifiers * + ? {m} {m,} {m,n} (lazy
// forms match the same language). Anchors ^ and $ are accepted at the start and end only:
// the whole output must match. Back-references and lookaround are refused by name.
#pragma once

#include <string>

#include "structured/grammar.h"

namespace gannet::structured {

// Adds a rule matching the pattern's language to g and returns it. Throws gannet::Error
// naming the construct and its offset.
int32_t add_regex(Grammar& g, const std::string& pattern, const std::string& name = "regex");

// A grammar whose root is the pattern.
Grammar parse_regex(const std::string& pattern);

}  // namespace gannet::structured
