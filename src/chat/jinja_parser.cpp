#include "chat/jinja_parser.h"

#include <cctype>
#include <cstring>

#include "core/error.h"

namespace gannet::chat::jinja {

namespace {

struct Token {
  enum class Kind { Text, VarBegin, VarEnd, BlockBegin, BlockEnd, Name, String, Int, Float, Op, Eof };
  Kind kind;
  std::string text;
  int line;
  int64_t i = 0;
  double f = 0;
};

[[noreturn]] void fail(int line, const std::string& what) {
  throw Error("chat template line " + std::to_string(line) + ": " + what);
}

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

class Lexer {
 public:
  explicit Lexer(std::string_view s) : s_(s) {}

  std::vector<Token> run() {
    bool line_starting = true;   // the last tag's match ended a line
    while (pos_ < s_.size()) {
      size_t start = pos_;
      for (;;) {
        start = s_.find('{', start);
        if (start == std::string_view::npos || start + 1 >= s_.size()) { start = std::string_view::npos; break; }
        const char c = s_[start + 1];
        if (c == '{' || c == '%' || c == '#') break;
        ++start;
      }
      std::string text(s_.substr(pos_, start == std::string_view::npos ? std::string_view::npos : start - pos_));
      if (start == std::string_view::npos) {
        emit_text(std::move(text));
        pos_ = s_.size();
        break;
      }
      const char type = s_[start + 1];
      const char sign = start + 2 < s_.size() ? s_[start + 2] : '\0';
      if (sign == '-') {
        size_t n = text.size();
        while (n > 0 && is_space(text[n - 1])) --n;
        text.resize(n);
      } else if (sign != '+' && type != '{') {
        const size_t nl = text.rfind('\n');
        const size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
        if (l_pos > 0 || line_starting) {
          bool ws = l_pos < text.size();
          for (size_t k = l_pos; k < text.size(); ++k) ws = ws && is_space(text[k]);
          if (ws) text.resize(l_pos);
        }
      }
      emit_text(std::move(text));
      line_ += count_lines(pos_, start);
      pos_ = start + 2 + ((sign == '-' || sign == '+') ? 1 : 0);
      bool strip_after = false;
      if (type == '#') {
        const size_t end = s_.find("#}", pos_);
        if (end == std::string_view::npos) fail(line_, "unclosed comment");
        strip_after = end > pos_ && s_[end - 1] == '-';
        line_ += count_lines(pos_, end);
        pos_ = end + 2;
      } else {
        out_.push_back({type == '{' ? Token::Kind::VarBegin : Token::Kind::BlockBegin, "", line_});
        strip_after = lex_tag(type == '{');
      }
      if (strip_after) {
        const size_t from = pos_;
        while (pos_ < s_.size() && is_space(s_[pos_])) ++pos_;
        line_ += count_lines(from, pos_);
        line_starting = pos_ > from && s_[pos_ - 1] == '\n';
      } else if (type != '{' && pos_ < s_.size() && s_[pos_] == '\n') {
        ++pos_, ++line_;
        line_starting = true;
      } else {
        line_starting = false;
      }
    }
    out_.push_back({Token::Kind::Eof, "", line_});
    return std::move(out_);
  }

 private:
  int count_lines(size_t a, size_t b) const {
    int n = 0;
    for (size_t k = a; k < b && k < s_.size(); ++k) n += s_[k] == '\n';
    return n;
  }

  void emit_text(std::string text) {
    if (!text.empty()) out_.push_back({Token::Kind::Text, std::move(text), line_});
  }

  // Tokens of one {{ }} or {% %} up to and including its end; returns whether the end
  // strips the whitespace after it.
  bool lex_tag(bool var) {
    int depth = 0;  // open ( [ {
    for (;;) {
      while (pos_ < s_.size() && is_space(s_[pos_])) line_ += s_[pos_++] == '\n';
      if (pos_ >= s_.size()) fail(line_, var ? "unclosed '{{'" : "unclosed '{%'");
      const std::string_view rest = s_.substr(pos_);
      const char* close = var ? "}}" : "%}";
      if (depth == 0 || !var) {
        if (rest.substr(0, 3) == std::string("-") + close) {
          pos_ += 3;
          out_.push_back({var ? Token::Kind::VarEnd : Token::Kind::BlockEnd, "", line_});
          return true;
        }
        if (rest.substr(0, 2) == close) {
          pos_ += 2;
          out_.push_back({var ? Token::Kind::VarEnd : Token::Kind::BlockEnd, "", line_});
          return false;
        }
      }
      const char c = rest[0];
      if (std::isalpha((unsigned char)c) || c == '_') {
        size_t n = 1;
        while (n < rest.size() && (std::isalnum((unsigned char)rest[n]) || rest[n] == '_')) ++n;
        out_.push_back({Token::Kind::Name, std::string(rest.substr(0, n)), line_});
        pos_ += n;
      } else if (std::isdigit((unsigned char)c)) {
        size_t n = 0;
        while (n < rest.size() && (std::isdigit((unsigned char)rest[n]) || rest[n] == '_')) ++n;
        bool is_float = false;
        if (n + 1 < rest.size() && rest[n] == '.' && std::isdigit((unsigned char)rest[n + 1])) {
          is_float = true;
          ++n;
          while (n < rest.size() && std::isdigit((unsigned char)rest[n])) ++n;
        }
        if (n < rest.size() && (rest[n] == 'e' || rest[n] == 'E')) {
          size_t m = n + 1;
          if (m < rest.size() && (rest[m] == '+' || rest[m] == '-')) ++m;
          if (m < rest.size() && std::isdigit((unsigned char)rest[m])) {
            is_float = true;
            n = m;
            while (n < rest.size() && std::isdigit((unsigned char)rest[n])) ++n;
          }
        }
        std::string num;
        for (char d : rest.substr(0, n))
          if (d != '_') num += d;
        Token t{is_float ? Token::Kind::Float : Token::Kind::Int, num, line_};
        try {
          if (is_float) t.f = std::stod(num);
          else t.i = std::stoll(num);
        } catch (const std::exception&) {
          fail(line_, "number out of range: " + num);
        }
        out_.push_back(std::move(t));
        pos_ += n;
      } else if (c == '\'' || c == '"') {
        out_.push_back({Token::Kind::String, lex_string(c), line_});
      } else {
        static const char* ops[] = {"**", "//", "==", "!=", "<=", ">=", "<", ">", "+", "-", "*", "/", "%",
                                    "~",  "(",  ")",  "[",  "]",  "{", "}", ",", ".", ":", "|", "="};
        bool found = false;
        for (const char* op : ops) {
          const size_t n = std::strlen(op);
          if (rest.substr(0, n) == op) {
            if (op[0] == '(' || op[0] == '[' || op[0] == '{') ++depth;
            if (op[0] == ')' || op[0] == ']' || op[0] == '}') --depth;
            out_.push_back({Token::Kind::Op, op, line_});
            pos_ += n;
            found = true;
            break;
          }
        }
        if (!found) fail(line_, std::string("unexpected character '") + c + "'");
      }
    }
  }

  // A Python string literal with its escapes, from the opening quote at pos_.
  std::string lex_string(char quote) {
    std::string out;
    size_t k = pos_ + 1;
    for (;;) {
      if (k >= s_.size()) fail(line_, "unclosed string literal");
      const char c = s_[k];
      if (c == quote) break;
      if (c == '\n') ++line_;
      if (c != '\\' || k + 1 >= s_.size()) {
        out += c;
        ++k;
        continue;
      }
      const char e = s_[k + 1];
      k += 2;
      switch (e) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case '0': out += '\0'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'v': out += '\v'; break;
        case 'a': out += '\a'; break;
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case '\n': break;  // line continuation
        case 'x':
        case 'u':
        case 'U': {
          const size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          if (k + n > s_.size()) fail(line_, "bad escape in string literal");
          uint32_t cp = 0;
          for (size_t j = 0; j < n; ++j) {
            const char h = s_[k + j];
            if (!std::isxdigit((unsigned char)h)) fail(line_, "bad escape in string literal");
            cp = cp * 16 + uint32_t(std::isdigit((unsigned char)h) ? h - '0' : (std::tolower(h) - 'a' + 10));
          }
          k += n;
          if (cp < 0x80) out += char(cp);
          else if (cp < 0x800) out += char(0xC0 | (cp >> 6)), out += char(0x80 | (cp & 0x3F));
          else if (cp < 0x10000)
            out += char(0xE0 | (cp >> 12)), out += char(0x80 | ((cp >> 6) & 0x3F)), out += char(0x80 | (cp & 0x3F));
          else
            out += char(0xF0 | (cp >> 18)), out += char(0x80 | ((cp >> 12) & 0x3F)),
                out += char(0x80 | ((cp >> 6) & 0x3F)), out += char(0x80 | (cp & 0x3F));
          break;
        }
        default: out += '\\', out += e;  // Python keeps unknown escapes as written
      }
    }
    pos_ = k + 1;
    return out;
  }

  std::string_view s_;
  size_t pos_ = 0;
  int line_ = 1;
  std::vector<Token> out_;
};

class Parser {
 public:
  explicit Parser(std::vector<Token> toks) : t_(std::move(toks)) {}

  Body parse_all() {
    std::string end;
    Body b = parse_body({}, end);
    return b;
  }

 private:
  const Token& peek(size_t ahead = 0) const { return t_[std::min(p_ + ahead, t_.size() - 1)]; }
  const Token& next() { return t_[std::min(p_++, t_.size() - 1)]; }
  bool is_op(const char* op, size_t ahead = 0) const {
    return peek(ahead).kind == Token::Kind::Op && peek(ahead).text == op;
  }
  bool is_name(const char* n, size_t ahead = 0) const {
    return peek(ahead).kind == Token::Kind::Name && peek(ahead).text == n;
  }
  void expect_op(const char* op) {
    if (!is_op(op)) fail(peek().line, std::string("expected '") + op + "'" + got());
    ++p_;
  }
  void expect_name(const char* n) {
    if (!is_name(n)) fail(peek().line, std::string("expected '") + n + "'" + got());
    ++p_;
  }
  void expect_block_end() {
    if (peek().kind != Token::Kind::BlockEnd) fail(peek().line, "expected the end of the tag '%}'" + got());
    ++p_;
  }
  std::string got() const {
    const Token& t = peek();
    switch (t.kind) {
      case Token::Kind::Name:
      case Token::Kind::Op: return ", found '" + t.text + "'";
      case Token::Kind::String: return ", found a string";
      case Token::Kind::Int:
      case Token::Kind::Float: return ", found a number";
      case Token::Kind::BlockEnd: return ", found '%}'";
      case Token::Kind::VarEnd: return ", found '}}'";
      case Token::Kind::Eof: return ", found the end of the template";
      default: return "";
    }
  }
  std::string name() {
    if (peek().kind != Token::Kind::Name) fail(peek().line, "expected a name" + got());
    return next().text;
  }

  // Statements until a block tag whose keyword is in `ends` (consumed up to the keyword;
  // `end` receives it) or the end of the template (only when `ends` is empty).
  Body parse_body(const std::vector<std::string>& ends, std::string& end) {
    Body body;
    for (;;) {
      const Token& t = peek();
      if (t.kind == Token::Kind::Eof) {
        if (!ends.empty()) fail(t.line, "missing '{% " + ends.front() + " %}'");
        return body;
      }
      if (t.kind == Token::Kind::Text) {
        auto n = std::make_unique<Node>();
        n->kind = Node::Kind::Text;
        n->line = t.line;
        n->text = t.text;
        body.push_back(std::move(n));
        ++p_;
        continue;
      }
      if (t.kind == Token::Kind::VarBegin) {
        ++p_;
        auto n = std::make_unique<Node>();
        n->kind = Node::Kind::Output;
        n->line = t.line;
        n->expr = expr();
        if (peek().kind != Token::Kind::VarEnd) fail(peek().line, "expected '}}'" + got());
        ++p_;
        body.push_back(std::move(n));
        continue;
      }
      if (t.kind != Token::Kind::BlockBegin) fail(t.line, "unexpected token" + got());
      const std::string& kw = peek(1).kind == Token::Kind::Name ? peek(1).text : std::string();
      for (const std::string& e : ends)
        if (kw == e) {
          p_ += 2;
          end = kw;
          return body;
        }
      ++p_;
      body.push_back(statement());
    }
  }

  std::unique_ptr<Node> statement() {
    const int line = peek().line;
    const std::string kw = name();
    auto n = std::make_unique<Node>();
    n->line = line;
    std::string end;
    if (kw == "if") {
      n->kind = Node::Kind::If;
      ExprPtr c = expr();
      expect_block_end();
      for (;;) {
        Body b = parse_body({"elif", "else", "endif"}, end);
        n->branches.emplace_back(std::move(c), std::move(b));
        if (end == "endif") break;
        if (end == "else") {
          expect_block_end();
          Body eb = parse_body({"endif"}, end);
          n->branches.emplace_back(nullptr, std::move(eb));
          break;
        }
        c = expr();
        expect_block_end();
      }
      expect_block_end();
    } else if (kw == "for") {
      n->kind = Node::Kind::For;
      n->targets.push_back(name());
      while (is_op(",")) {
        ++p_;
        n->targets.push_back(name());
      }
      expect_name("in");
      n->expr = expr(/*no_cond=*/true);
      if (is_name("if")) {
        ++p_;
        n->cond = expr(true);
      }
      if (is_name("recursive")) fail(line, "recursive for loops are not supported");
      expect_block_end();
      n->body = parse_body({"else", "endfor"}, end);
      if (end == "else") {
        expect_block_end();
        n->else_body = parse_body({"endfor"}, end);
      }
      expect_block_end();
    } else if (kw == "set") {
      std::string target = name();
      if (is_op(".")) {
        ++p_;
        n->attr_target = true;
        n->targets = {target, name()};
      } else {
        n->targets.push_back(target);
        while (is_op(",")) {
          ++p_;
          n->targets.push_back(name());
        }
      }
      if (is_op("=")) {
        ++p_;
        n->kind = Node::Kind::Set;
        n->expr = expr();
        expect_block_end();
      } else {
        if (n->attr_target || n->targets.size() != 1) fail(line, "a block set takes one plain name");
        n->kind = Node::Kind::SetBlock;
        n->text = target;
        expect_block_end();
        n->body = parse_body({"endset"}, end);
        expect_block_end();
      }
    } else if (kw == "macro") {
      n->kind = Node::Kind::Macro;
      n->text = name();
      expect_op("(");
      while (!is_op(")")) {
        std::string p = name();
        ExprPtr def;
        if (is_op("=")) {
          ++p_;
          def = expr();
        }
        n->params.emplace_back(std::move(p), std::move(def));
        if (!is_op(")")) expect_op(",");
      }
      ++p_;
      expect_block_end();
      n->body = parse_body({"endmacro"}, end);
      expect_block_end();
    } else if (kw == "break" || kw == "continue") {
      n->kind = kw == "break" ? Node::Kind::Break : Node::Kind::Continue;
      expect_block_end();
    } else if (kw == "filter") {
      n->kind = Node::Kind::FilterBlock;
      n->text = name();
      expect_block_end();
      n->body = parse_body({"endfilter"}, end);
      expect_block_end();
    } else if (kw == "generation") {
      // transformers' assistant-mask marker: renders its body unchanged.
      n->kind = Node::Kind::Scope;
      expect_block_end();
      n->body = parse_body({"endgeneration"}, end);
      expect_block_end();
    } else {
      fail(line, "the statement '" + kw + "' is not supported");
    }
    return n;
  }

  ExprPtr make(Expr::Kind k, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = k;
    e->line = line;
    return e;
  }

  // expr := or ['if' or ['else' expr]]
  ExprPtr expr(bool no_cond = false) {
    ExprPtr e = or_expr();
    if (!no_cond && is_name("if")) {
      auto c = make(Expr::Kind::Cond, peek().line);
      ++p_;
      c->args.push_back(std::move(e));
      c->args.push_back(or_expr());
      if (is_name("else")) {
        ++p_;
        c->args.push_back(expr());
      } else {
        c->args.push_back(nullptr);
      }
      return c;
    }
    return e;
  }

  ExprPtr or_expr() {
    ExprPtr e = and_expr();
    while (is_name("or")) {
      auto o = make(Expr::Kind::Or, next().line);
      o->args.push_back(std::move(e));
      o->args.push_back(and_expr());
      e = std::move(o);
    }
    return e;
  }

  ExprPtr and_expr() {
    ExprPtr e = not_expr();
    while (is_name("and")) {
      auto o = make(Expr::Kind::And, next().line);
      o->args.push_back(std::move(e));
      o->args.push_back(not_expr());
      e = std::move(o);
    }
    return e;
  }

  ExprPtr not_expr() {
    if (is_name("not")) {
      auto o = make(Expr::Kind::Not, next().line);
      o->args.push_back(not_expr());
      return o;
    }
    return compare();
  }

  ExprPtr binary(std::string op, ExprPtr a, ExprPtr b, int line) {
    auto o = make(Expr::Kind::Binary, line);
    o->name = std::move(op);
    o->args.push_back(std::move(a));
    o->args.push_back(std::move(b));
    return o;
  }

  ExprPtr compare() {
    ExprPtr e = math1();
    for (;;) {
      const int line = peek().line;
      std::string op;
      if (peek().kind == Token::Kind::Op &&
          (peek().text == "==" || peek().text == "!=" || peek().text == "<" || peek().text == "<=" ||
           peek().text == ">" || peek().text == ">=")) {
        op = next().text;
      } else if (is_name("in")) {
        ++p_;
        op = "in";
      } else if (is_name("not") && is_name("in", 1)) {
        p_ += 2;
        op = "notin";
      } else {
        return e;
      }
      e = binary(op, std::move(e), math1(), line);
    }
  }

  ExprPtr math1() {
    ExprPtr e = concat();
    while (is_op("+") || is_op("-")) {
      const Token& t = next();
      e = binary(t.text, std::move(e), concat(), t.line);
    }
    return e;
  }

  ExprPtr concat() {
    ExprPtr e = math2();
    while (is_op("~")) {
      const int line = next().line;
      e = binary("~", std::move(e), math2(), line);
    }
    return e;
  }

  ExprPtr math2() {
    ExprPtr e = pow_expr();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token& t = next();
      e = binary(t.text, std::move(e), pow_expr(), t.line);
    }
    return e;
  }

  ExprPtr pow_expr() {
    ExprPtr e = unary();
    while (is_op("**")) {
      const int line = next().line;
      e = binary("**", std::move(e), unary(), line);
    }
    return e;
  }

  // As Jinja: a sign binds tighter than filters (-3 | abs is 3).
  ExprPtr unary(bool with_filters = true) {
    if (is_op("-") || is_op("+")) {
      const Token& t = next();
      auto o = make(t.text == "-" ? Expr::Kind::Neg : Expr::Kind::Pos, t.line);
      o->args.push_back(unary(false));
      return with_filters ? filters(std::move(o)) : ExprPtr(std::move(o));
    }
    ExprPtr e = postfix(primary());
    return with_filters ? filters(std::move(e)) : std::move(e);
  }

  void call_args(Expr& call) {
    expect_op("(");
    while (!is_op(")")) {
      if (peek().kind == Token::Kind::Name && is_op("=", 1)) {
        std::string k = next().text;
        ++p_;
        call.kwargs.emplace_back(std::move(k), expr());
      } else {
        if (!call.kwargs.empty()) fail(peek().line, "a positional argument follows a keyword argument");
        call.args.push_back(expr());
      }
      if (!is_op(")")) expect_op(",");
    }
    ++p_;
  }

  ExprPtr postfix(ExprPtr e) {
    for (;;) {
      const int line = peek().line;
      if (is_op(".")) {
        ++p_;
        auto a = make(Expr::Kind::Attr, line);
        if (peek().kind == Token::Kind::Int) {  // x.0 is x[0]
          a->kind = Expr::Kind::Item;
          a->args.push_back(std::move(e));
          auto lit = make(Expr::Kind::Literal, line);
          lit->value = Value(next().i);
          a->args.push_back(std::move(lit));
        } else {
          a->name = name();
          a->args.push_back(std::move(e));
        }
        e = std::move(a);
      } else if (is_op("[")) {
        ++p_;
        ExprPtr parts[3];
        int colons = 0;
        for (;;) {
          if (is_op("]")) break;
          if (is_op(":")) {
            ++p_;
            if (++colons > 2) fail(line, "too many ':' in a slice");
            continue;
          }
          if (parts[colons]) fail(line, "expected ']'" + got());
          parts[colons] = expr();
        }
        ++p_;
        if (colons == 0) {
          if (!parts[0]) fail(line, "empty subscript");
          auto it = make(Expr::Kind::Item, line);
          it->args.push_back(std::move(e));
          it->args.push_back(std::move(parts[0]));
          e = std::move(it);
        } else {
          auto sl = make(Expr::Kind::Slice, line);
          sl->args.push_back(std::move(e));
          for (auto& p : parts) sl->args.push_back(std::move(p));
          e = std::move(sl);
        }
      } else if (is_op("(")) {
        auto c = make(Expr::Kind::Call, line);
        c->args.push_back(std::move(e));
        call_args(*c);
        e = std::move(c);
      } else {
        return e;
      }
    }
  }

  ExprPtr filters(ExprPtr e) {
    for (;;) {
      const int line = peek().line;
      if (is_op("|")) {
        ++p_;
        auto f = make(Expr::Kind::Filter, line);
        f->name = name();
        while (is_op(".")) {  // dotted filter names are not a thing we support
          fail(line, "unknown filter '" + f->name + ".'");
        }
        f->args.push_back(std::move(e));
        if (is_op("(")) call_args(*f);
        e = std::move(f);
      } else if (is_name("is")) {
        ++p_;
        auto t = make(Expr::Kind::Test, line);
        if (is_name("not")) {
          ++p_;
          t->negate = true;
        }
        // Test names may be keywords (none, true, false) or operators' names.
        if (peek().kind != Token::Kind::Name) fail(line, "expected a test name after 'is'" + got());
        t->name = next().text;
        t->args.push_back(std::move(e));
        if (is_op("(")) {
          call_args(*t);
        } else if (peek().kind == Token::Kind::String || peek().kind == Token::Kind::Int ||
                   peek().kind == Token::Kind::Float || is_op("[") || is_op("{") ||
                   (peek().kind == Token::Kind::Name && !is_name("and") && !is_name("or") && !is_name("if") &&
                    !is_name("else") && !is_name("is") && !is_name("in") && !is_name("not"))) {
          t->args.push_back(postfix(primary()));  // `x is sameas false`, `x is divisibleby 3`
        }
        e = std::move(t);
      } else {
        return e;
      }
    }
  }

  ExprPtr primary() {
    const Token& t = peek();
    const int line = t.line;
    if (t.kind == Token::Kind::String) {
      auto l = make(Expr::Kind::Literal, line);
      std::string s = next().text;
      while (peek().kind == Token::Kind::String) s += next().text;  // adjacent literals join
      l->value = Value(std::move(s));
      return l;
    }
    if (t.kind == Token::Kind::Int || t.kind == Token::Kind::Float) {
      auto l = make(Expr::Kind::Literal, line);
      l->value = t.kind == Token::Kind::Int ? Value(t.i) : Value(t.f);
      ++p_;
      return l;
    }
    if (t.kind == Token::Kind::Name) {
      const std::string n = next().text;
      auto l = make(Expr::Kind::Literal, line);
      if (n == "true" || n == "True") l->value = Value(true);
      else if (n == "false" || n == "False") l->value = Value(false);
      else if (n == "none" || n == "None") l->value = Value::none();
      else {
        l->kind = Expr::Kind::Name;
        l->name = n;
      }
      return l;
    }
    if (is_op("(")) {
      ++p_;
      if (is_op(")")) {
        ++p_;
        return make(Expr::Kind::Tuple, line);  // ()
      }
      ExprPtr e = expr();
      if (is_op(",")) {
        auto tup = make(Expr::Kind::Tuple, line);
        tup->args.push_back(std::move(e));
        while (is_op(",")) {
          ++p_;
          if (is_op(")")) break;
          tup->args.push_back(expr());
        }
        e = std::move(tup);
      }
      expect_op(")");
      return e;
    }
    if (is_op("[")) {
      ++p_;
      auto l = make(Expr::Kind::List, line);
      while (!is_op("]")) {
        l->args.push_back(expr());
        if (!is_op("]")) expect_op(",");
      }
      ++p_;
      return l;
    }
    if (is_op("{")) {
      ++p_;
      auto d = make(Expr::Kind::Dict, line);
      while (!is_op("}")) {
        d->args.push_back(expr());
        expect_op(":");
        d->args.push_back(expr());
        if (!is_op("}")) expect_op(",");
      }
      ++p_;
      return d;
    }
    fail(line, "expected an expression" + got());
  }

  std::vector<Token> t_;
  size_t p_ = 0;
};

}  // namespace

Body parse_template(std::string_view source) {
  // As Jinja: newlines normalised to \n, and one trailing newline dropped.
  std::string src;
  src.reserve(source.size());
  for (size_t k = 0; k < source.size(); ++k) {
    if (source[k] == '\r') {
      src += '\n';
      if (k + 1 < source.size() && source[k + 1] == '\n') ++k;
    } else {
      src += source[k];
    }
  }
  if (!src.empty() && src.back() == '\n') src.pop_back();
  Lexer lex(src);
  Parser p(lex.run());
  return p.parse_all();
}

}  // namespace gannet::chat::jinja
