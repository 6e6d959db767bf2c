package ssh

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"

	"golang.org/x/crypto/ssh"
)

// run runs script with sh on the host, stdin from in (nil: none), and
// returns its standard output. A non-zero exit is an error carrying the
// script's last lines of standard error. Cancelling ctx closes the session.
func run(ctx context.Context, c *ssh.Client, what, script string, in io.Reader) ([]byte, error) {
	s, err := c.NewSession()
	if err != nil {
		return nil, fmt.Errorf("%s: opening an ssh session: %w", what, err)
	}
	defer s.Close()
	var out, errb bytes.Buffer
	s.Stdout, s.Stderr, s.Stdin = &out, &errb, in
	stop := context.AfterFunc(ctx, func() { s.Close() })
	defer stop()
	// sh -c keeps the script independent of the login shell.
	err = s.Run("sh -c " + quote(script))
	if ctx.Err() != nil {
		return nil, fmt.Errorf("%s: %w", what, ctx.Err())
	}
	if err != nil {
		return out.Bytes(), fmt.Errorf("%s: %w: %s", what, err, tail(errb.String(), 600))
	}
	return out.Bytes(), nil
}

// quote quotes s for a POSIX shell.
func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// tail keeps the last n bytes of s, trimmed.
func tail(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) > n {
		s = "…" + s[len(s)-n:]
	}
	return s
}
