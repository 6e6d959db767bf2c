package agent

import "testing"

func TestViaSlirp(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"http://127.0.0.1:7777":        "http://10.0.2.2:7777",
		"https://localhost:7777/v1":    "https://10.0.2.2:7777/v1",
		"http://[::1]:7777":            "http://10.0.2.2:7777",
		"https://gpufleet.example.com": "https://gpufleet.example.com",
		"127.0.0.1":                    "10.0.2.2",
		"10.1.2.3":                     "10.1.2.3",
	} {
		if got := viaSlirp(in); got != want {
			t.Errorf("viaSlirp(%q) = %q, want %q", in, got, want)
		}
	}
}
