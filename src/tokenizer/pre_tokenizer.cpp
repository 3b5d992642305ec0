#include "tokenizer/pre_tokenizer.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace gannet::tokenizer {

namespace {

// GPT-2's pattern, which ByteLevel applies when use_regex is true.
const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

SplitBehavior parse_behavior(const nlohmann::json& j) {
  if (!j.is_string()) fail("pre_tokenizer: Split needs a \"behavior\" string");
  const std::string b = j;
  if (b == "Removed") return SplitBehavior::kRemoved;
  if (b == "Isolated") return SplitBehavior::kIsolated;
  if (b == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (b == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (b == "Contiguous") return SplitBehavior::kContiguous;
  fail("pre_tokenizer: Split behavior \"", b, "\" is unknown");
}

bool get_step_bool(const nlohmann::json& j, const char* key, bool def) {
  if (!j.contains(key) || j[key].is_null()) return def;
  if (!j[key].is_boolean()) fail("pre_tokenizer: \"", key, "\" must be true or false");
  return j[key].get<bool>();
}

// Turns matches and gaps into the [begin, end) ranges a behavior keeps, merging as
// Hugging Face's NormalizedString::split does.
void apply_behavior(SplitBehavior behavior, const std::vector<Span>& spans,
                    std::vector<Span>& kept) {
  kept.clear();
  switch (behavior) {
    case SplitBehavior::kIsolated:
      kept = spans;
      break;
    case SplitBehavior::kRemoved:
      for (const Span& s : spans)
        if (!s.is_match) kept.push_back(s);
      break;
    case SplitBehavior::kContiguous: {
      bool prev_match = false;
      for (const Span& s : spans) {
        if (s.is_match == prev_match && !kept.empty())
          kept.back().end = s.end;
        else
          kept.push_back(s);
        prev_match = s.is_match;
      }
      break;
    }
    case SplitBehavior::kMergedWithPrevious: {
      bool prev_match = false;
      for (const Span& s : spans) {
        if (s.is_match && !prev_match && !kept.empty())
          kept.back().end = s.end;
        else
          kept.push_back(s);
        prev_match = s.is_match;
      }
      break;
    }
    case SplitBehavior::kMergedWithNext: {
      bool prev_match = false;  // walking backwards: "previous" is the span to the right
      for (size_t i = spans.size(); i-- > 0;) {
        const Span& s = spans[i];
        if (s.is_match && !prev_match && !kept.empty())
          kept.back().begin = s.begin;
        else
          kept.push_back(s);
        prev_match = s.is_match;
      }
      std::reverse(kept.begin(), kept.end());
      break;
    }
  }
}

}  // namespace

void PreTokenizer::parse_step(const nlohmann::json& j, std::vector<Step>& steps, bool& byte_level) {
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string())
    fail("pre_tokenizer: expected an object with a \"type\"");
  const std::string type = j["type"];
  if (type == "Sequence") {
    if (!j.contains("pretokenizers") || !j["pretokenizers"].is_array())
      fail("pre_tokenizer: Sequence needs a \"pretokenizers\" array");
    for (const auto& p : j["pretokenizers"]) parse_step(p, steps, byte_level);
  } else if (type == "Split") {
    Step step{Step::Kind::kSplit, {}};
    const auto& pat = j.contains("pattern") ? j["pattern"] : nlohmann::json();
    try {
      if (pat.is_object() && pat.contains("Regex") && pat["Regex"].is_string())
        step.regex.emplace_back(pat["Regex"].get<std::string>());
      else if (pat.is_object() && pat.contains("String") && pat["String"].is_string())
        step.regex.emplace_back(pat["String"].get<std::string>(), /*literal=*/true);
      else
        fail("needs a \"pattern\" of {\"Regex\": ...} or {\"String\": ...}");
    } catch (const Error& e) {
      fail("pre_tokenizer: Split: ", e.what());
    }
    step.behavior = parse_behavior(j.contains("behavior") ? j["behavior"] : nlohmann::json());
    step.invert = get_step_bool(j, "invert", false);
    steps.push_back(std::move(step));
  } else if (type == "ByteLevel") {
    Step step{Step::Kind::kByteLevel, {}};
    step.add_prefix_space = get_step_bool(j, "add_prefix_space", true);
    if (get_step_bool(j, "use_regex", true)) step.regex.emplace_back(kGpt2Pattern);
    steps.push_back(std::move(step));
    byte_level = true;
  } else if (type == "Digits") {
    // Hugging Face splits on char::is_numeric, Isolated per digit or Contiguous runs.
    Step step{Step::Kind::kSplit, {}};
    step.regex.emplace_back(get_step_bool(j, "individual_digits", false) ? R"(\p{N})" : R"(\p{N}+)");
    steps.push_back(std::move(step));
  } else {
    fail("pre_tokenizer: type \"", type, "\" is unsupported (supported: Sequence, Split, ByteLevel, Digits)");
  }
}

PreTokenizer PreTokenizer::from_json(const nlohmann::json& j) {
  PreTokenizer p;
  if (!j.is_null()) parse_step(j, p.steps_, p.byte_level_);
  return p;
}

void PreTokenizer::apply(const Step& step, std::string_view piece, std::vector<std::string>& out,
                         std::vector<Span>& spans) {
  std::string prefixed;
  if (step.kind == Step::Kind::kByteLevel) {
    // Hugging Face prepends the space to every piece, not only to the start of the text.
    if (step.add_prefix_space && piece.front() != ' ') {
      prefixed.reserve(piece.size() + 1);
      prefixed += ' ';
      prefixed += piece;
      piece = prefixed;
    }
    if (step.regex.empty()) {
      out.emplace_back(piece);
      return;
    }
  }
  step.regex[0].find_matches(piece, spans);
  if (step.invert)
    for (Span& s : spans) s.is_match = !s.is_match;
  thread_local std::vector<Span> kept;
  apply_behavior(step.kind == Step::Kind::kByteLevel ? SplitBehavior::kIsolated : step.behavior,
                 spans, kept);
  for (const Span& s : kept)
    if (s.end > s.begin) out.emplace_back(piece.substr(s.begin, s.end - s.begin));
}

void PreTokenizer::split(std::string_view text, std::vector<std::string>& pieces) const {
  if (text.empty()) return;
  if (steps_.empty()) {
    pieces.emplace_back(text);
    return;
  }
  std::vector<std::string> cur{std::string(text)}, next;
  std::vector<Span> spans;
  for (const Step& step : steps_) {
    next.clear();
    for (const std::string& piece : cur) apply(step, piece, next, spans);
    cur.swap(next);
  }
  for (std::string& p : cur) pieces.push_back(std::move(p));
}

}  // namespace gannet::tokenizer
