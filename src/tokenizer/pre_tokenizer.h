// The "pre_tokenizer" of tokenizer.json: splits normalized text into the pieces that BPE
// encodes independently. Supports "Split" (Regex or String pattern, every behavior,
// invert), "ByteLevel" (add_prefix_space, use_regex with the GPT-2 pattern), "Digits", and
// a "Sequence" of those; each step is applied to every piece the previous one produced.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "tokenizer/regex.h"

namespace gannet::tokenizer {

// What a Split does with the spans its pattern matches (Hugging Face's
// SplitDelimiterBehavior).
enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

class PreTokenizer {
 public:
  PreTokenizer() = default;  // no pre-tokenizer: the text is one piece

  // Parses the "pre_tokenizer" value (null allowed). Throws gannet::Error naming the step
  // and the problem (unknown type or behavior, bad regex, ...).
  static PreTokenizer from_json(const nlohmann::json& j);

  // Appends the non-empty pieces of `text` to `pieces`, in order.
  void split(std::string_view text, std::vector<std::string>& pieces) const;

  // Whether a ByteLevel step is present, i.e. BPE sees bytes mapped to GPT-2 characters.
  bool byte_level() const { return byte_level_; }

 private:
  struct Step {
    enum class Kind { kSplit, kByteLevel } kind;
    std::vector<Regex> regex;  // 0 or 1: Regex has no empty state
    SplitBehavior behavior = SplitBehavior::kIsolated;
    bool invert = false;
    bool add_prefix_space = false;  // ByteLevel
  };

  static void parse_step(const nlohmann::json& j, std::vector<Step>& steps, bool& byte_level);
  static void apply(const Step& step, std::string_view piece, std::vector<std::string>& out,
                    std::vector<Span>& spans);

  std::vector<Step> steps_;
  bool byte_level_ = false;
};

}  // namespace gannet::tokenizer
