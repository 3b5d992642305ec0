#include "structured/json_grammar.h"

#include "core/error.h"
#include "structured/gbnf.h"

namespace gannet::structured {

std::string json_gbnf(const JsonWhitespace& ws, bool object_at_top) {
  if (!ws.compact && (ws.max_run < 1 || ws.max_run > 64))
    fail("JSON whitespace: max_run must be in [1, 64], got ", ws.max_run);
  const std::string w = ws.compact ? "" : "[ \\t\\n\\r]{0," + std::to_string(ws.max_run) + "}";
  std::string g;
  g += std::string("root ::= ") + (ws.compact ? "" : "ws ") + (object_at_top ? "object" : "value") +
       (ws.compact ? "" : " ws") + "\n";
  g += "value ::= object | array | string | number | \"true\" | \"false\" | \"null\"\n";
  const std::string s = ws.compact ? " " : " ws ";
  g += "object ::= \"{\"" + s + "( member (" + s + "\",\"" + s + "member )*" + s + ")? \"}\"\n";
  g += "member ::= string" + s + "\":\"" + s + "value\n";
  g += "array ::= \"[\"" + s + "( value (" + s + "\",\"" + s + "value )*" + s + ")? \"]\"\n";
  // Any character but the quote, the backslash and the controls; or an escape.
  g += "string ::= \"\\\"\" char* \"\\\"\"\n";
  g += "char ::= [^\"\\\\\\x00-\\x1F] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4} )\n";
  g += "number ::= \"-\"? ( \"0\" | [1-9] [0-9]* ) ( \".\" [0-9]+ )? ( [eE] [-+]? [0-9]+ )?\n";
  if (!ws.compact) g += "ws ::= " + w + "\n";
  return g;
}

Grammar json_grammar(const JsonWhitespace& ws, bool object_at_top) { return parse_gbnf(json_gbnf(ws, object_at_top)); }

}  // namespace gannet::structured
