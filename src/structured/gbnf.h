// EBNF in the GBNF syntax llama.cpp users write: `name ::= alternatives`, with "literals",
// [character classes] (ranges, ^ negation), `.` (any character), ( groups ), rule
// references, the postfix operators * + ? {m} {m,} {m,n}, and # comments. Rules may span
// lines; a new rule starts at `name ::=`. Escapes: \n \r \t \\ \" \' \[ \] \- \/ \xHH
// \uHHHH \UHHHHHHHH. Literals and classes are Unicode code points, matched as UTF-8.
#pragma once

#include <string>

#include "structured/grammar.h"

namespace gannet::structured {

// The grammar of `text`, rooted at `root` (the rule named so must exist). Throws
// gannet::Error naming the line and column of a syntax error, an undefined rule, a
// duplicate definition or left recursion.
Grammar parse_gbnf(const std::string& text, const std::string& root = "root");
// The rules of `text` added to g (they may refer to rules g already defines, by name);
// no root is set and nothing is checked (callers check the finished grammar).
void add_gbnf(Grammar& g, const std::string& text);

// A helper rule matching `inner` repeated min..max times (max < 0: unbounded), built from
// right-recursive rules (front ends share it).
int32_t repeat_rule(Grammar& g, const std::vector<Element>& inner, int64_t min, int64_t max, const std::string& name);

}  // namespace gannet::structured
