package model

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxUserLen bounds a user name (a user token's subject, a grant's user)
// in bytes: the length of a DNS name, room for an e-mail address.
const MaxUserLen = 253

// TextProblem says why s is not fit to be a free-form name that people
// read in tables, logs and audit entries (a user, a token's label), or
// returns "" when it is. Such a name is valid UTF-8 of at most max bytes,
// of printable characters only (unicode.IsPrint: no NUL, newline, escape
// or other control character, no bidi override or other invisible format
// character, which could make one name look like another or forge a log
// line), with no space at either end.
func TextProblem(s string, max int) string {
	switch {
	case !utf8.ValidString(s):
		return "must be valid UTF-8"
	case len(s) > max:
		return fmt.Sprintf("must be at most %d bytes (it has %d)", max, len(s))
	case strings.TrimSpace(s) != s:
		return "must not begin or end with a space"
	}
	for i, r := range s {
		if !unicode.IsPrint(r) {
			return fmt.Sprintf("must hold printable characters only: %U at byte %d is a control or invisible format character", r, i)
		}
	}
	return ""
}

// UserProblem says why s is not a valid user name, or returns "".
func UserProblem(s string) string {
	if s == "" {
		return "must name the user (a user token's subject), e.g. alice or alice@example.com"
	}
	return TextProblem(s, MaxUserLen)
}
