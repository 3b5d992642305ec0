// The grammar of a tool-call block in DeepSeek's DSML layout, each parameter's value held to
// its tool's JSON Schema: what constrained tool calls (tool_choice "required" or a named
// function, and the arguments of any call under "auto") decode under. The chat layer gives
// the tag strings of the model's version; nothing here is DeepSeek-specific beyond the shape
//
//   CALLS_OPEN "\n" invoke ("\n" invoke)* "\n" CALLS_CLOSE
//   invoke = INVOKE_OPEN " name=\"" NAME "\">\n" param ("\n" param)* "\n" INVOKE_CLOSE
//   param  = PARAM_OPEN " name=\"" KEY "\" string=\"true|false\">" VALUE PARAM_CLOSE
//
// (no parameters: an empty line between the invoke's tags), exactly as DeepSeek's encoder
// writes calls. Parameters come in the schema's property order, each required one present,
// the optional ones free to be left out; no undeclared ones. A property whose schema is a
// plain string (type "string", perhaps with enum / const and annotations) is written raw,
// string="true" (enum and const as their literal texts; other strings any text that does
// not contain the parameter's closing tag); every other property, strings with pattern,
// format or length bounds included, is written as JSON, string="false", under its schema
// (the parameters' $defs in scope), so the arguments the server builds validate.
//
// Spec (JSON): {"calls_open", "calls_close", "invoke_open", "invoke_close", "param_open",
// "param_close": strings; "tools": [{"name", "parameters"?}]; "parallel": bool (more than
// one call allowed); "after_trigger": bool (the grammar starts right after CALLS_OPEN
// without its last character '>', which is then the first byte: the text a trigger of
// CALLS_OPEN minus '>' leaves)}.
//
// The dense families write a call as JSON: {"layout": "json", "block_open", "block_close",
// "call_open", "call_mid", "call_close", "separator": strings; "tools"; "parallel";
// "trigger": text that opens the block, already written when the grammar starts ("" for
// none)} gives BLOCK_OPEN call (SEPARATOR call)* BLOCK_CLOSE, a call being CALL_OPEN NAME
// CALL_MID ARGS CALL_CLOSE with ARGS the tool's parameters under their schema (Qwen:
// "<tool_call>\n{\"name\": \"" NAME "\", \"arguments\": " ARGS "}\n</tool_call>").
#pragma once

#include <string>

#include "structured/grammar.h"
#include "structured/json_grammar.h"

namespace gannet::structured {

// JSON values take Python's json.dumps layout (", " and ": ", no other whitespace), the
// text the chat templates write back when the call returns in the next turn's history.
// Throws gannet::Error naming the tool and property of a schema it cannot compile.
Grammar compile_tool_calls(const std::string& spec_json);

}  // namespace gannet::structured
