package runtime

import (
	"os"
	"path/filepath"
	"testing"
)

func TestLookPathUsesTheChildsPathAndWorkdir(t *testing.T) {
	t.Parallel()
	workdir := t.TempDir()
	bin := filepath.Join(workdir, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, mode := range map[string]os.FileMode{"tool": 0o755, "data": 0o644} {
		if err := os.WriteFile(filepath.Join(bin, name), nil, mode); err != nil {
			t.Fatal(err)
		}
	}
	tests := map[string]struct {
		file, path string
		want       string
		wantErr    bool
	}{
		"absolute PATH entry": {file: "tool", path: "/nonexistent:" + bin, want: filepath.Join(bin, "tool")},
		"relative PATH entry": {file: "tool", path: "bin", want: filepath.Join(bin, "tool")},
		"not executable":      {file: "data", path: bin, wantErr: true},
		"not found":           {file: "tool", path: "/nonexistent", wantErr: true},
		"relative name":       {file: "./bin/tool", path: "", want: filepath.Join(bin, "tool")},
		"absolute name as is": {file: "/no/such/tool", path: bin, want: "/no/such/tool"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := LookPath(tc.file, tc.path, workdir)
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Errorf("LookPath(%q, %q) = %q, %v; want %q, error %v", tc.file, tc.path, got, err, tc.want, tc.wantErr)
			}
		})
	}
}
