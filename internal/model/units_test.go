package model

import (
	"encoding/json"
	"testing"
	"time"
)

func TestBytes(t *testing.T) {
	tests := map[string]struct {
		in      string
		want    Bytes
		str     string
		human   string
		wantErr bool
	}{
		"binary":       {in: "40Gi", want: 40 * GiB, str: "40Gi", human: "40Gi"},
		"decimal":      {in: "80G", want: 80e9, str: "78125000Ki", human: "74.5Gi"},
		"fraction":     {in: "1.5Ti", want: 3 * TiB / 2, str: "1536Gi", human: "1.5Ti"},
		"plain bytes":  {in: "1023", want: 1023, str: "1023", human: "1023"},
		"zero":         {in: "0", want: 0, str: "0", human: "0"},
		"negative":     {in: "-1Gi", wantErr: true},
		"garbage":      {in: "lots", wantErr: true},
		"empty":        {in: "", wantErr: true},
		"nan":          {in: "NaNGi", wantErr: true},
		"overflow":     {in: "1e30", wantErr: true},
		"unknown unit": {in: "4Pb", wantErr: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := ParseBytes(tc.in)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("ParseBytes(%q) = %v, want an error", tc.in, got)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("ParseBytes(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
			}
			if got.String() != tc.str || got.Human() != tc.human {
				t.Fatalf("String, Human = %q, %q; want %q, %q", got.String(), got.Human(), tc.str, tc.human)
			}
			again, err := ParseBytes(got.String())
			if err != nil || again != got {
				t.Fatalf("String does not round-trip: %q → %v, %v", got.String(), again, err)
			}
		})
	}
}

func TestDurationJSON(t *testing.T) {
	var v struct{ D Duration }
	if err := json.Unmarshal([]byte(`{"D":"3d"}`), &v); err != nil || v.D.D() != 72*time.Hour {
		t.Fatalf("3d = %v, %v", v.D, err)
	}
	if err := json.Unmarshal([]byte(`{"D":"soon"}`), &v); err == nil {
		t.Fatal("bad duration accepted")
	}
	out, _ := json.Marshal(Duration(90 * time.Second))
	if string(out) != `"1m30s"` {
		t.Fatalf("marshal = %s", out)
	}
	out, _ = json.Marshal(map[string]any{"b": 40 * GiB, "d": Duration(90 * time.Second), "z": Bytes(0)})
	if want := `{"b":"40Gi","d":"1m30s","z":"0"}`; string(out) != want {
		t.Fatalf("marshal = %s, want %s", out, want)
	}
}

// TestUnitsUnmarshalJSON covers both ways in: a plain string read as
// written, and anything else through encoding/json.
func TestUnitsUnmarshalJSON(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		in       string
		bytes    Bytes
		duration Duration
		bytesErr bool
		durErr   bool
	}{
		"plain":          {in: `"40Gi"`, bytes: 40 * GiB, durErr: true},
		"plain duration": {in: `"30m"`, bytesErr: true, duration: Duration(30 * time.Minute)},
		"escaped":        {in: `"4\u0030Gi"`, bytes: 40 * GiB, durErr: true},
		"escaped unit":   {in: `"3\u0030m"`, bytesErr: true, duration: Duration(30 * time.Minute)},
		"number":         {in: `1024`, bytes: KiB, durErr: true},
		"quote inside":   {in: `"4"0Gi"`, bytesErr: true, durErr: true},
		"not JSON":       {in: `"40Gi`, bytesErr: true, durErr: true},
		"object":         {in: `{}`, bytesErr: true, durErr: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var b Bytes
			if err := b.UnmarshalJSON([]byte(tc.in)); (err != nil) != tc.bytesErr || b != tc.bytes {
				t.Errorf("Bytes.UnmarshalJSON(%s) = %v, %v; want %v, error %t", tc.in, b, err, tc.bytes, tc.bytesErr)
			}
			var d Duration
			if err := d.UnmarshalJSON([]byte(tc.in)); (err != nil) != tc.durErr || d != tc.duration {
				t.Errorf("Duration.UnmarshalJSON(%s) = %v, %v; want %v, error %t", tc.in, d, err, tc.duration, tc.durErr)
			}
		})
	}
}

func FuzzParseBytes(f *testing.F) {
	for _, s := range []string{"40Gi", "1.5Ti", "80G", "0", "-1", "1e30", "Gi"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b, err := ParseBytes(s)
		if err != nil {
			return
		}
		if b < 0 {
			t.Fatalf("ParseBytes(%q) = %d < 0", s, b)
		}
		if again, err := ParseBytes(b.String()); err != nil || again != b {
			t.Fatalf("round trip of %q: %q → %v, %v", s, b.String(), again, err)
		}
	})
}
