package testutil

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// Call sends method url with body (none when empty) and the headers given
// as name, value pairs ("Host" sets the request's host; an empty value
// sends nothing), and returns the
// answer's status, body (as much as came) and headers. A request that gets no answer
// fails the test.
func Call(tb testing.TB, method, url, body string, hdr ...string) (int, string, http.Header) {
	tb.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, r)
	if err != nil {
		tb.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		switch {
		case hdr[i+1] == "": // not sent
		case http.CanonicalHeaderKey(hdr[i]) == "Host":
			req.Host = hdr[i+1]
		default:
			req.Header.Set(hdr[i], hdr[i+1])
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body) // what came before a cut
	return resp.StatusCode, string(b), resp.Header
}
