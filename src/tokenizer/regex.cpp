#include "tokenizer/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "core/error.h"
#include "tokenizer/onig_syntax.h"
#include "tokenizer/utf8.h"

namespace gannet::tokenizer {

namespace {

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  pcre2_get_error_message(code, buf, sizeof buf);
  return reinterpret_cast<const char*>(buf);
}

// Match data holds only the overall match's offsets, so one block per thread serves every
// pattern and encode stays allocation-free per match and safe across threads.
pcre2_match_data* thread_match_data() {
  struct Holder {
    pcre2_match_data* md = pcre2_match_data_create(1, nullptr);
    ~Holder() { pcre2_match_data_free(md); }
  };
  thread_local Holder holder;
  GANNET_CHECK(holder.md != nullptr, "out of memory for PCRE2 match data");
  return holder.md;
}

}  // namespace

Regex::Regex(const std::string& pattern, bool literal) : pattern_(pattern) {
  int err = 0;
  PCRE2_SIZE offset = 0;
  // PCRE2_LITERAL refuses PCRE2_UCP, which only matters for escapes anyway.
  uint32_t options = PCRE2_UTF | PCRE2_MATCH_INVALID_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
  const std::string translated = literal ? pattern : onig_to_pcre2(pattern);
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()),
                                   translated.size(), options, &err, &offset, nullptr);
  if (!code) {
    fail("bad regex '", pattern, "'", translated == pattern ? "" : " (as PCRE2 '" + translated + "')",
         " at offset ", offset, ": ", pcre2_message(err));
  }
  // A pattern the JIT cannot compile still runs, more slowly, in the interpreter.
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  code_.reset(code, pcre2_code_free);
}

bool Regex::search(std::string_view subject, size_t start, size_t& match_begin,
                   size_t& match_end) const {
  pcre2_match_data* md = thread_match_data();
  auto* subj = reinterpret_cast<PCRE2_SPTR>(subject.data());
  int rc = pcre2_match(code_.get(), subj, subject.size(), start, 0, md, nullptr);
  // The JIT's fixed stack can run out on long pieces; the interpreter uses the heap.
  if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
    rc = pcre2_match(code_.get(), subj, subject.size(), start, PCRE2_NO_JIT, md, nullptr);
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  if (rc < 0) fail("regex '", pattern_, "' failed on a ", subject.size(), "-byte input: ", pcre2_message(rc));
  const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
  match_begin = ov[0];
  match_end = ov[1];
  return true;
}

void Regex::find_matches(std::string_view subject, std::vector<Span>& out) const {
  out.clear();
  if (subject.empty()) {
    out.push_back({0, 0, false});
    return;
  }
  size_t prev = 0, pos = 0, b = 0, e = 0;
  bool have_last = false;
  size_t last_end = 0;
  while (pos <= subject.size() && search(subject, pos, b, e)) {
    // Like onig's find_iter: an empty match right where the previous match ended is
    // skipped by stepping one character forward, so the scan always advances.
    if (b == e && have_last && last_end == e) {
      if (pos >= subject.size()) break;
      size_t i = pos;
      next_code_point(subject, i);
      pos = i;
      continue;
    }
    pos = e;
    have_last = true;
    last_end = e;
    if (prev != b) out.push_back({prev, b, false});
    out.push_back({b, e, true});
    prev = e;
  }
  if (prev != subject.size()) out.push_back({prev, subject.size(), false});
}

}  // namespace gannet::tokenizer
