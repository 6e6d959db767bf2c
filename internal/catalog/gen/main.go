// Command gen converts the shared reference data into the compact files that
// package catalog embeds. go generate runs it from internal/catalog:
//
//	go generate ./internal/catalog
//
// It reads gpu_catalog.csv, gpu_specs.csv and spot/aws_spot_advisor.csv from
// -src and writes under -out:
//
//   - catalog.csv.gz: every catalog row, source order, with the columns the
//     catalog package reads, values copied verbatim;
//   - spot_advisor.csv: the Spot Advisor band of each Linux instance type that
//     the AWS rows use, per region;
//   - specs.json: the accelerator table of specs.go, each entry's notes saying
//     how it differs from the gpu_specs.csv row it was checked against.
//
// The output is deterministic: regenerating unchanged sources changes no byte.
package main

import (
	"bytes"
	"compress/gzip"
	"encoding/csv"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

func main() {
	src := flag.String("src", "../../../shared/data", "directory holding gpu_catalog.csv, gpu_specs.csv and spot/aws_spot_advisor.csv")
	out := flag.String("out", "data", "directory to write the embedded files to")
	flag.Parse()
	if err := run(*src, *out); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}

func run(src, out string) error {
	cat, err := readTable(filepath.Join(src, "gpu_catalog.csv"))
	if err != nil {
		return err
	}
	catalog, awsTypes, err := convertCatalog(cat)
	if err != nil {
		return err
	}
	adv, err := readTable(filepath.Join(src, "spot", "aws_spot_advisor.csv"))
	if err != nil {
		return err
	}
	advisor, err := convertAdvisor(adv, awsTypes)
	if err != nil {
		return err
	}
	raw, err := readTable(filepath.Join(src, "gpu_specs.csv"))
	if err != nil {
		return err
	}
	specs, err := convertSpecs(raw, accelerators)
	if err != nil {
		return err
	}
	for name, data := range map[string][]byte{
		"catalog.csv.gz":   catalog,
		"spot_advisor.csv": advisor,
		"specs.json":       specs,
	} {
		if err := os.WriteFile(filepath.Join(out, name), data, 0o644); err != nil {
			return fmt.Errorf("writing %s: %w", name, err)
		}
	}
	return nil
}

// table is a CSV file read whole, with its columns by name.
type table struct {
	name string
	cols map[string]int
	rows [][]string
}

func readTable(path string) (table, error) {
	f, err := os.Open(path)
	if err != nil {
		return table{}, fmt.Errorf("reading source: %w", err)
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil {
		return table{}, fmt.Errorf("reading %s: %w", path, err)
	}
	if len(recs) == 0 {
		return table{}, fmt.Errorf("reading %s: no header", path)
	}
	t := table{name: filepath.Base(path), cols: map[string]int{}, rows: recs[1:]}
	for i, c := range recs[0] {
		t.cols[c] = i
	}
	return t, nil
}

// column returns a getter for column name, or an error naming the file when
// the column is missing, so that a renamed upstream column fails loudly.
func (t table) column(name string) (func(row []string) string, error) {
	i, ok := t.cols[name]
	if !ok {
		return nil, fmt.Errorf("reading %s: no column %q", t.name, name)
	}
	return func(row []string) string { return row[i] }, nil
}

func (t table) columns(names ...string) ([]func([]string) string, error) {
	gets := make([]func([]string) string, len(names))
	for i, n := range names {
		g, err := t.column(n)
		if err != nil {
			return nil, err
		}
		gets[i] = g
	}
	return gets, nil
}

// catalogColumns maps each embedded column to its gpu_catalog.csv source.
// The total-memory, price_basis and source columns are left out: the first
// is derived, the others are per cloud and recorded in PROVENANCE.md.
var catalogColumns = [][2]string{
	{"provider", "cloud"},
	{"instance_type", "instance_type"},
	{"gpu", "accelerator_name"},
	{"gpu_count", "accelerator_count"},
	{"vcpus", "vcpus"},
	{"memory_gib", "memory_gib"},
	{"gpu_memory_gib", "gpu_memory_gib_per_gpu"},
	{"price", "price_usd_hr"},
	{"spot_price", "spot_price_usd_hr"},
	{"region", "region"},
	{"zone", "zone"},
}

// numericColumns must parse as non-negative numbers where present.
var numericColumns = []string{"gpu_count", "vcpus", "memory_gib", "gpu_memory_gib", "price", "spot_price"}

// convertCatalog returns the gzipped embedded catalog and the set of AWS
// instance types it holds.
func convertCatalog(t table) ([]byte, map[string]bool, error) {
	header := make([]string, len(catalogColumns))
	src := make([]string, len(catalogColumns))
	for i, c := range catalogColumns {
		header[i], src[i] = c[0], c[1]
	}
	gets, err := t.columns(src...)
	if err != nil {
		return nil, nil, err
	}
	var buf bytes.Buffer
	// A zero header (no name, no time) keeps the output byte-stable.
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return nil, nil, fmt.Errorf("compressing catalog: %w", err)
	}
	w := csv.NewWriter(zw)
	if err := w.Write(header); err != nil {
		return nil, nil, fmt.Errorf("writing catalog: %w", err)
	}
	awsTypes := map[string]bool{}
	out := make([]string, len(gets))
	for n, row := range t.rows {
		for i, get := range gets {
			out[i] = get(row)
		}
		for i, col := range header {
			if slices.Contains(numericColumns, col) && out[i] != "" {
				if v, err := strconv.ParseFloat(out[i], 64); err != nil || v < 0 {
					return nil, nil, fmt.Errorf("reading %s line %d: %s %q is not a non-negative number", t.name, n+2, col, out[i])
				}
			}
		}
		if out[0] == "aws" {
			awsTypes[out[1]] = true
		}
		if err := w.Write(out); err != nil {
			return nil, nil, fmt.Errorf("writing catalog: %w", err)
		}
	}
	w.Flush()
	if err := errors.Join(w.Error(), zw.Close()); err != nil {
		return nil, nil, fmt.Errorf("writing catalog: %w", err)
	}
	return buf.Bytes(), awsTypes, nil
}

// convertAdvisor keeps the Linux rows of the instance types in awsTypes:
// the catalog prices Linux only, and the rest of the snapshot (25,000 rows,
// mostly CPU types) would be dead weight in the binary.
func convertAdvisor(t table, awsTypes map[string]bool) ([]byte, error) {
	gets, err := t.columns("instance_type", "region", "os", "interruption_range_index")
	if err != nil {
		return nil, err
	}
	seen := map[[2]string]bool{}
	var rows [][]string
	for n, row := range t.rows {
		typ, region, system, band := gets[0](row), gets[1](row), gets[2](row), gets[3](row)
		if system != "Linux" || !awsTypes[typ] {
			continue
		}
		if b, err := strconv.Atoi(band); err != nil || b < 0 || b > 4 {
			return nil, fmt.Errorf("reading %s line %d: band %q is not 0-4", t.name, n+2, band)
		}
		key := [2]string{typ, region}
		if seen[key] {
			return nil, fmt.Errorf("reading %s line %d: %s in %s listed twice", t.name, n+2, typ, region)
		}
		seen[key] = true
		rows = append(rows, []string{typ, region, band})
	}
	slices.SortFunc(rows, func(a, b []string) int { return slices.Compare(a, b) })
	var buf bytes.Buffer
	w := csv.NewWriter(&buf)
	if err := w.Write([]string{"instance_type", "region", "band"}); err != nil {
		return nil, fmt.Errorf("writing spot advisor: %w", err)
	}
	if err := w.WriteAll(rows); err != nil {
		return nil, fmt.Errorf("writing spot advisor: %w", err)
	}
	return buf.Bytes(), nil
}

// specFigures pairs each gpu_specs.csv figure with the same figure of an
// entry, for the comparison written into the entry's notes.
var specFigures = []struct {
	column string
	value  func(a accelerator) float64
}{
	{"memory_gb", func(a accelerator) float64 { return a.Memory.GiB() }},
	{"memory_bw_gbs", func(a accelerator) float64 { return a.MemoryBandwidthGBs }},
	{"bf16_dense_tflops", func(a accelerator) float64 { return a.BF16TFLOPS }},
	{"fp16_dense_tflops", func(a accelerator) float64 { return a.FP16TFLOPS }},
	{"fp32_tflops", func(a accelerator) float64 { return a.FP32TFLOPS }},
	{"interconnect_bw_gbs", func(a accelerator) float64 { return a.InterconnectGBs }},
	{"tdp_w", func(a accelerator) float64 { return a.TDPWatts }},
}

// convertSpecs checks the entries against gpu_specs.csv and returns them as
// JSON. Every gpu_specs.csv row must be the From of some entry, so a row
// added upstream cannot slip in unchecked.
func convertSpecs(t table, entries []accelerator) ([]byte, error) {
	gpu, err := t.column("gpu")
	if err != nil {
		return nil, err
	}
	variant, err := t.column("variant")
	if err != nil {
		return nil, err
	}
	rows := map[string][]string{}
	for _, row := range t.rows {
		rows[gpu(row)+"|"+variant(row)] = row
	}
	used := map[string]bool{}
	out := make([]accelerator, len(entries))
	for i, a := range entries {
		switch a.Verified {
		case "datasheet", "third-party", "unverified":
		default:
			return nil, fmt.Errorf("checking specs: %s %s: verified %q is not datasheet, third-party or unverified", a.Name, a.Variant, a.Verified)
		}
		if a.From != "" {
			row, ok := rows[a.From]
			if !ok {
				return nil, fmt.Errorf("checking specs: %s %s: no %s row %q", a.Name, a.Variant, t.name, a.From)
			}
			used[a.From] = true
			diff, err := compareSpec(t, row, a)
			if err != nil {
				return nil, err
			}
			a.Notes += " " + diff
		}
		out[i] = a
	}
	for key := range rows {
		if !used[key] {
			return nil, fmt.Errorf("checking specs: %s row %q is not checked by any entry in specs.go", t.name, key)
		}
	}
	data, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encoding specs: %w", err)
	}
	return append(data, '\n'), nil
}

// compareSpec says which figures of a differ from its gpu_specs.csv row.
func compareSpec(t table, row []string, a accelerator) (string, error) {
	var changed []string
	for _, f := range specFigures {
		get, err := t.column(f.column)
		if err != nil {
			return "", err
		}
		was, now := get(row), f.value(a)
		old := 0.0
		if was != "" {
			if old, err = strconv.ParseFloat(was, 64); err != nil {
				return "", fmt.Errorf("reading %s row %q: %s %q is not a number", t.name, a.From, f.column, was)
			}
		}
		if old != now {
			changed = append(changed, fmt.Sprintf("%s %s → %s", f.column, orBlank(was), orBlank(formatFigure(now))))
		}
	}
	src := strings.ReplaceAll(a.From, "|", ", ")
	if len(changed) == 0 {
		return fmt.Sprintf("Agrees with gpu_specs.csv (%s).", src), nil
	}
	return fmt.Sprintf("Changed from gpu_specs.csv (%s): %s.", src, strings.Join(changed, "; ")), nil
}

func formatFigure(v float64) string {
	if v == 0 {
		return ""
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

func orBlank(s string) string {
	if s == "" {
		return "blank"
	}
	return s
}
