// Outside text echoed back into a log line or an error message: C-escaped (control bytes
// become \x01, never a raw NUL or newline) and cut to a bound, so a hostile client can
// neither forge log lines nor turn its 1 MB name into a 1 MB error.
#ifndef BALLAST_COMMON_TEXT_H_
#define BALLAST_COMMON_TEXT_H_

#include <cstddef>
#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace ballast {

inline constexpr size_t kExcerptBytes = 64;

// `text` in single quotes, escaped, and when longer than `max_bytes` cut there and
// followed by "... (N bytes)".
inline std::string Excerpt(absl::string_view text, size_t max_bytes = kExcerptBytes) {
  if (text.size() <= max_bytes) return absl::StrCat("'", absl::CHexEscape(text), "'");
  return absl::StrCat("'", absl::CHexEscape(text.substr(0, max_bytes)), "'... (", text.size(),
                      " bytes)");
}

}  // namespace ballast

#endif  // BALLAST_COMMON_TEXT_H_
