// A Jinja template interpreter for chat templates: the subset of Jinja 3 that the chat
// templates of the Llama 3, Qwen 2.5 / 3 and DeepSeek V3 families use, with the
// semantics transformers' `apply_chat_template` renders them under (jinja_parser.h for
// whitespace; Undefined prints as nothing and fails when used further; lists and dicts
// are immutable; `tojson` is json.dumps with ensure_ascii=False; globals
// raise_exception, namespace, range, dict, strftime_now).
//
// Statements: if / elif / else, for (tuple targets, `if` filter, else, loop.index,
// index0, revindex, revindex0, first, last, length, previtem, nextitem), set (names,
// tuples, namespace attributes, blocks), macro and calls, break / continue, filter
// blocks. What is outside the subset fails at parse time with an error naming it.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "chat/jinja_ast.h"
#include "chat/jinja_value.h"

namespace gannet::chat::jinja {

// Raised by the template's own raise_exception(message): the input is what the template
// refuses (a bad conversation), not a bug in the template.
struct TemplateRaised : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Template {
 public:
  // Throws gannet::Error naming the line for syntax errors and unsupported constructs.
  explicit Template(std::string_view source);

  // Renders with `context` (a Dict) as the template's variables. Throws TemplateRaised
  // for raise_exception and gannet::Error (with the line) for evaluation errors.
  std::string render(const Value& context) const;

  // strftime_now's clock; defaults to the local time. Tests pin it.
  void set_clock(std::function<std::string(const std::string& format)> strftime_now) {
    strftime_now_ = std::move(strftime_now);
  }

 private:
  std::shared_ptr<const Body> body_;
  std::function<std::string(const std::string&)> strftime_now_;
};

}  // namespace gannet::chat::jinja
