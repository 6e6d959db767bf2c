package secrets

import "strings"

// Scrubber replaces known secret values in text with "[redacted]", for logs,
// events and error messages that might echo them. Build it once with every
// value in play; it is immutable and safe for concurrent use.
type Scrubber struct{ r *strings.Replacer }

// minScrubLen skips values too short to be secrets; scrubbing "1" would
// mangle every log line.
const minScrubLen = 6

// redacted is what a scrubbed value becomes.
const redacted = "[redacted]"

// NewScrubber returns a scrubber for values.
func NewScrubber(values ...string) *Scrubber {
	var pairs []string
	for _, v := range values {
		if len(v) >= minScrubLen {
			pairs = append(pairs, v, redacted)
		}
	}
	return &Scrubber{r: strings.NewReplacer(pairs...)}
}

// Scrub returns s with every known secret value replaced.
func (s *Scrubber) Scrub(text string) string { return s.r.Replace(text) }
