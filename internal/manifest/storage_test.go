package manifest

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/internal/model"
)

func TestPoolCheckpointStorage(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		block string
		want  *model.Storage
		errs  []string // field paths, in order
	}{
		"s3 block": {
			block: "checkpointStorage: {s3: {bucket: ckpt, prefix: fleet/a, endpoint: 'http://127.0.0.1:7070', pathStyle: true, credentialsRef: ops/S3_CKPT}}",
			want:  &model.Storage{S3: &model.S3Storage{Bucket: "ckpt", Prefix: "fleet/a", Endpoint: "http://127.0.0.1:7070", PathStyle: true, CredentialsRef: "ops/S3_CKPT"}},
		},
		"path block":  {block: "checkpointStorage: {path: /mnt/ckpt}", want: &model.Storage{Path: "/mnt/ckpt"}},
		"s3 string":   {block: "checkpointStorage: s3://ckpt/fleet", want: &model.Storage{S3: &model.S3Storage{Bucket: "ckpt", Prefix: "fleet"}}},
		"path string": {block: "checkpointStorage: /mnt/ckpt", want: &model.Storage{Path: "/mnt/ckpt"}},
		"bad fields": {
			block: "checkpointStorage: {s3: {bucket: A_, prefix: a/../b, endpoint: 'http://u:p@h', credentialsRef: nope}}",
			errs:  []string{"spec.checkpointStorage.s3.bucket", "spec.checkpointStorage.s3.credentialsRef", "spec.checkpointStorage.s3.endpoint", "spec.checkpointStorage.s3.prefix"},
		},
		"both":          {block: "checkpointStorage: {s3: {bucket: ckpt}, path: /x}", errs: []string{"spec.checkpointStorage"}},
		"relative path": {block: "checkpointStorage: ckpt", errs: []string{"spec.checkpointStorage.path"}},
		"secret inline": {block: "checkpointStorage: {s3: {bucket: ckpt, secretAccessKey: x}}", errs: []string{"spec.checkpointStorage"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			doc := goodPool + "  " + tc.block + "\n"
			v, fe := ParseDocument([]byte(doc), YAML, Checks{KnownGPU: knownTestGPU})
			var paths []string
			for _, e := range fe {
				paths = append(paths, e.Path)
			}
			if d := cmp.Diff(tc.errs, paths); d != "" {
				t.Fatalf("error paths (-want +got):\n%s\n%v", d, fe)
			}
			if tc.want == nil {
				return
			}
			if d := cmp.Diff(tc.want, v.(*NodePool).Spec.CheckpointStorage); d != "" {
				t.Errorf("storage (-want +got):\n%s", d)
			}
		})
	}
	if _, fe := ParseDocument([]byte(goodPool+"  checkpointStorage: {s3: {bucket: ckpt, secretAccessKey: x}}\n"), YAML, Checks{}); !strings.Contains(fe.Error(), "secretAccessKey") {
		t.Errorf("an inline secret's error does not name the field: %v", fe)
	}
}
