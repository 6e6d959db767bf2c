package catalog

import (
	"bytes"
	"compress/gzip"
	"encoding/csv"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// sourceDir is the shared reference data the embedded files come from. It
// sits beside the repository in development and is absent in CI, where the
// tests that need it skip and the embedded-data tests stand alone.
const sourceDir = "../../../shared/data"

func requireSource(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(sourceDir, "gpu_catalog.csv")); err != nil {
		t.Skipf("source data not available: %v", err)
	}
}

// TestRowsMatchSource compares every embedded row with gpu_catalog.csv,
// parsed here without the package's decoder.
func TestRowsMatchSource(t *testing.T) {
	t.Parallel()
	requireSource(t)
	f, err := os.Open(filepath.Join(sourceDir, "gpu_catalog.csv"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	col := map[string]int{}
	for i, name := range recs[0] {
		col[name] = i
	}
	num := func(rec []string, name string) float64 {
		if rec[col[name]] == "" {
			return 0
		}
		v, err := strconv.ParseFloat(rec[col[name]], 64)
		if err != nil {
			t.Fatalf("%s %q: %v", name, rec[col[name]], err)
		}
		return v
	}
	var want []row
	for _, rec := range recs[1:] {
		want = append(want, row{
			provider:     rec[col["cloud"]],
			instanceType: rec[col["instance_type"]],
			gpu:          rec[col["accelerator_name"]],
			gpuCount:     num(rec, "accelerator_count"),
			vcpus:        num(rec, "vcpus"),
			memoryGiB:    num(rec, "memory_gib"),
			gpuMemoryGiB: num(rec, "gpu_memory_gib_per_gpu"),
			price:        num(rec, "price_usd_hr"),
			spotPrice:    num(rec, "spot_price_usd_hr"),
			hasPrice:     rec[col["price_usd_hr"]] != "",
			hasSpotPrice: rec[col["spot_price_usd_hr"]] != "",
			region:       rec[col["region"]],
			zone:         rec[col["zone"]],
		})
	}
	if len(want) != 3667 {
		t.Errorf("gpu_catalog.csv has %d rows, want 3667 as its README says", len(want))
	}
	got, err := decodeRows(catalogCSVGz)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(row{})); diff != "" {
		t.Errorf("embedded rows (-source +embedded):\n%s", diff)
	}
}

// TestGeneratedFilesAreFresh regenerates data/ into a temporary directory
// and compares, so that a change to the sources or to gen cannot go
// uncommitted.
func TestGeneratedFilesAreFresh(t *testing.T) {
	requireSource(t)
	if testing.Short() {
		t.Skip("builds and runs gen")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command: %v", err)
	}
	out := t.TempDir()
	cmd := exec.Command(goTool, "run", "./gen", "-src", sourceDir, "-out", out)
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go run ./gen: %v\n%s", err, msg)
	}
	for name, embedded := range map[string][]byte{
		"catalog.csv.gz":   catalogCSVGz,
		"spot_advisor.csv": spotAdvisorCSV,
		"specs.json":       specsJSON,
	} {
		fresh, err := os.ReadFile(filepath.Join(out, name))
		if err != nil {
			t.Fatal(err)
		}
		// Compressed bytes may differ between Go releases; contents may not.
		if filepath.Ext(name) == ".gz" {
			fresh, embedded = gunzip(t, fresh), gunzip(t, embedded)
		}
		if !bytes.Equal(fresh, embedded) {
			t.Errorf("data/%s is stale: run go generate ./internal/catalog", name)
		}
	}
}

func gunzip(t *testing.T, data []byte) []byte {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	out, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	return out
}
