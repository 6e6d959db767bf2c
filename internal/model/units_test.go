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
