package api

import (
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

// TestReadAll checks that the declared length is only a hint: whatever a
// client declares, readAll returns the body as sent, like io.ReadAll.
func TestReadAll(t *testing.T) {
	t.Parallel()
	body := strings.Repeat("x", 657)
	tests := map[string]struct {
		declared int64
		r        io.Reader
		want     string
		wantErr  bool
	}{
		"as declared":       {declared: 657, r: strings.NewReader(body), want: body},
		"longer":            {declared: 100, r: strings.NewReader(body), want: body},
		"shorter":           {declared: 1000, r: strings.NewReader(body), want: body},
		"unknown":           {declared: -1, r: strings.NewReader(body), want: body},
		"over the limit":    {declared: presizeLimit, r: strings.NewReader(body), want: body},
		"empty":             {declared: 0, r: strings.NewReader(""), want: ""},
		"byte by byte":      {declared: 657, r: iotest.OneByteReader(strings.NewReader(body)), want: body},
		"error after bytes": {declared: 657, r: io.MultiReader(strings.NewReader("abc"), iotest.ErrReader(errors.New("reset"))), want: "abc", wantErr: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got, err := readAll(tc.r, tc.declared)
			if string(got) != tc.want || (err != nil) != tc.wantErr {
				t.Errorf("readAll = %d bytes, %v; want %d bytes, error %t", len(got), err, len(tc.want), tc.wantErr)
			}
		})
	}
}
