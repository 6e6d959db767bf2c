package schema

import (
	"strings"
	"testing"
	"testing/fstest"

	"github.com/google/go-cmp/cmp"
)

func TestReadMigrations(t *testing.T) {
	t.Parallel()
	file := func(sql string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(sql)} }
	tests := map[string]struct {
		files   fstest.MapFS
		want    []int
		wantErr string
	}{
		"in order":      {files: fstest.MapFS{"0002_b.sql": file("B"), "0001_a.sql": file("A"), "README": file("")}, want: []int{1, 2}},
		"none":          {files: fstest.MapFS{}, want: []int{}},
		"gap":           {files: fstest.MapFS{"0001_a.sql": file("A"), "0003_c.sql": file("C")}, wantErr: "migration 0003_c.sql: want number 2"},
		"repeat":        {files: fstest.MapFS{"0001_a.sql": file("A"), "0001_b.sql": file("B")}, wantErr: "migration 0001_b.sql: want number 2"},
		"zero":          {files: fstest.MapFS{"0000_a.sql": file("A")}, wantErr: "migration 0000_a.sql: name must be"},
		"not numbered":  {files: fstest.MapFS{"init.sql": file("A")}, wantErr: "migration init.sql: name must be"},
		"no underscore": {files: fstest.MapFS{"0001.sql": file("A")}, wantErr: "migration 0001.sql: name must be"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			migs, err := Read(tc.files)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("readMigrations error = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("readMigrations: %v", err)
			}
			got := []int{}
			for _, m := range migs {
				got = append(got, m.Version)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("versions (-want +got):\n%s", diff)
			}
		})
	}
}
