// The parsed form of a Jinja template: expressions and statements as trees.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "chat/jinja_value.h"

namespace gannet::chat::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    Literal,   // value
    Name,      // name
    Attr,      // args[0].name
    Item,      // args[0][args[1]]
    Slice,     // args[0][args[1]:args[2]:args[3]] (null entries: omitted)
    Call,      // args[0](args[1..], kwargs)
    Filter,    // args[0] | name(args[1..], kwargs)
    Test,      // args[0] is [not] name(args[1..])
    Not,       // not args[0]
    Neg,       // -args[0]
    Pos,       // +args[0]
    Binary,    // args[0] op args[1]: + - * / // % ** ~ == != < <= > >= in notin
    And,
    Or,
    Cond,      // args[0] if args[1] else args[2] (args[2] may be null)
    List,      // [args...]
    Tuple,     // (args...)
    Dict,      // {kwargs-like keys: args[2k] : args[2k+1]}
  };
  Kind kind;
  int line = 0;
  Value value;
  std::string name;  // Name, Attr, Call-less Filter/Test name, Binary op
  bool negate = false;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
};

struct Node;
using Body = std::vector<std::unique_ptr<Node>>;

struct Node {
  enum class Kind { Text, Output, If, For, Set, SetBlock, Macro, Break, Continue, FilterBlock, Scope };
  Kind kind;
  int line = 0;
  std::string text;                  // Text; SetBlock / Macro: name; FilterBlock: filter name
  ExprPtr expr;                      // Output; For: iterable; Set: value
  std::vector<std::string> targets;  // For / Set: names bound (Set "ns.attr" as {"ns", "attr"} with attr_target)
  bool attr_target = false;          // Set: targets = {object, attribute}
  ExprPtr cond;                      // For: the loop's `if` filter
  // If: branches (condition, body), the last with a null condition for else.
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body, else_body;              // For, SetBlock, Macro, FilterBlock, Scope
  std::vector<std::pair<std::string, ExprPtr>> params;  // Macro: name, default (may be null)
};

}  // namespace gannet::chat::jinja
