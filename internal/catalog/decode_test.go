package catalog

import (
	"bytes"
	"compress/gzip"
	"strings"
	"testing"
)

func gzipped(t *testing.T, s string) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write([]byte(s)); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestDecodeErrors(t *testing.T) {
	t.Parallel()
	const header = "provider,instance_type,gpu,gpu_count,vcpus,memory_gib,gpu_memory_gib,price,spot_price,region,zone\n"
	tests := map[string]struct {
		decode  func() error
		wantErr string
	}{
		"catalog not gzip": {func() error { _, err := decodeRows([]byte(header)); return err }, "decoding catalog: gzip: invalid header"},
		"catalog header": {func() error { _, err := decodeRows(gzipped(t, "cloud,instance_type\n")); return err },
			"regenerate with go generate"},
		"catalog number": {func() error {
			_, err := decodeRows(gzipped(t, header+"aws,p5.48xlarge,H100,eight,192,2048,80,55.04,,us-east-1,\n"))
			return err
		}, `decoding catalog line 2: gpu_count "eight"`},
		"catalog negative price": {func() error {
			_, err := decodeRows(gzipped(t, header+"aws,p5.48xlarge,H100,8,192,2048,80,-1,,us-east-1,\n"))
			return err
		}, `price "-1": negative`},
		"catalog field count": {func() error { _, err := decodeRows(gzipped(t, header+"aws,p5\n")); return err },
			"wrong number of fields"},
		"band out of range": {func() error {
			_, err := decodeBands([]byte("instance_type,region,band\np5.48xlarge,us-east-1,5\n"))
			return err
		},
			`band "5" is not 0-4`},
		"specs unknown field": {func() error {
			_, err := decodeSpecs([]byte(`[{"name":"H100","verified":"datasheet","tflops":1}]`))
			return err
		},
			`unknown field "tflops"`},
		"specs verified level": {func() error { _, err := decodeSpecs([]byte(`[{"name":"H100","verified":"yes"}]`)); return err },
			`unknown verified level "yes"`},
		"specs unnamed": {func() error { _, err := decodeSpecs([]byte(`[{"verified":"datasheet"}]`)); return err },
			"entry 0 has no name"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			err := tt.decode()
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("error %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}
