package cuda

import (
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		image, driver string
		ok            bool
		reason        string
	}{
		"no CUDA named":              {"", "", true, "names no CUDA"},
		"driver new enough":          {"12.4.1", "550.54.15", true, "≥ 550.54.14"},
		"exactly the least":          {"12.2", "535.54.03", true, "≥ 535.54.03"},
		"minor compatibility":        {"12.4.1", "535.104.05", true, "minor version compatibility"},
		"older major driver":         {"12.1", "470.199.02", false, "needs driver ≥ 530.30.02"},
		"no driver":                  {"11.8", "", false, "no NVIDIA driver"},
		"not a version":              {"twelve", "550.54.15", false, "not MAJOR.MINOR"},
		"unknown future major":       {"14.0", "580.65.06", false, "not in NVIDIA's driver table"},
		"versions compare by number": {"11.2", "460.100.1", true, "≥ 460.27.03"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			v := Check(tc.image, tc.driver)
			if v.OK != tc.ok || !strings.Contains(v.Reason, tc.reason) {
				t.Errorf("Check(%q, %q) = %+v; want ok=%v, reason with %q", tc.image, tc.driver, v, tc.ok, tc.reason)
			}
		})
	}
}
