package encode

import (
	"bytes"
	"encoding/json"
	"math"
	"testing"
)

// TestAppendJSONMatchesMarshal: the change record's fast path writes every
// argument byte for byte as json.Marshal does, the strings it must escape
// included.
func TestAppendJSONMatchesMarshal(t *testing.T) {
	for _, a := range []any{
		int64(0), int64(-42), int64(math.MaxInt64), int64(math.MinInt64), uint64(math.MaxUint64), 7,
		"", "job-0001", "2026-12-07T01:02:03.000000000Z", `a"b`, `back\\slash`, "tab\there", "<script>&",
		"héllo", "line\u2028sep", "del\x7f", string([]byte{0xff, 0xfe}), []byte{1, 2, 3}, 1.5, true, nil,
	} {
		want, err := json.Marshal(a)
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		buf.WriteString("x")
		if err := appendJSON(&buf, a); err != nil {
			t.Fatal(err)
		}
		if got := buf.String()[1:]; got != string(want) {
			t.Errorf("%#v: appended %s, json.Marshal writes %s", a, got, want)
		}
	}
}
