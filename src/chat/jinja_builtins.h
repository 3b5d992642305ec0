// Jinja's filters and tests and the Python methods templates call on str, list and dict
// values (the part of each that chat templates use). Each throws gannet::Error for a
// wrong argument or an unknown name (named); the interpreter adds the line.
#pragma once

#include <string>

#include "chat/jinja_value.h"

namespace gannet::chat::jinja {

Value apply_filter(const std::string& name, const Value& x, Args& args);
bool apply_test(const std::string& name, const Value& x, Args& args);
// obj.name(args): the str / dict / list methods.
Value call_method(const Value& obj, const std::string& name, Args& args);

// Python's operators as Jinja applies them (op: + - * / // % ** ~ < <= > >= in notin).
Value binary_op(const std::string& op, const Value& a, const Value& b);
// obj[key] as Jinja's getitem: list / str index (negative from the end), dict key;
// Undefined when absent.
Value get_item(const Value& obj, const Value& key);
// obj.name as Jinja's getattr: a dict's key, Undefined otherwise.
Value get_attr(const Value& obj, const std::string& name);
// obj[start:stop:step] for lists and strings (code points); null entries omitted.
Value slice(const Value& obj, const Value* start, const Value* stop, const Value* step);
// The items a for loop visits: a list's elements, a dict's keys, a string's characters;
// nothing for Undefined. Throws for what cannot be iterated.
List iterate(const Value& v);
// Python's len().
int64_t length(const Value& v);

}  // namespace gannet::chat::jinja
