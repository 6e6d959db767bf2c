package catalog

import (
	"bytes"
	"compress/gzip"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// row is one line of the embedded catalog, one gpu_catalog.csv row.
type row struct {
	provider, instanceType, gpu string
	// gpuCount is fractional for rows that sell a share of one GPU.
	gpuCount                       float64
	vcpus, memoryGiB, gpuMemoryGiB float64
	price, spotPrice               float64
	hasPrice, hasSpotPrice         bool
	region, zone                   string
}

// The headers gen writes; a mismatch means data/ and this decoder are from
// different generations.
const (
	catalogHeader     = "provider,instance_type,gpu,gpu_count,vcpus,memory_gib,gpu_memory_gib,price,spot_price,region,zone"
	spotAdvisorHeader = "instance_type,region,band"
)

func decodeRows(gz []byte) ([]row, error) {
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		return nil, fmt.Errorf("decoding catalog: %w", err)
	}
	// The header sets the field count that every record must have.
	r := csv.NewReader(zr)
	r.ReuseRecord = true
	if err := readHeader(r, catalogHeader); err != nil {
		return nil, fmt.Errorf("decoding catalog: %w", err)
	}
	var rows []row
	for {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("decoding catalog: %w", err)
		}
		p := fieldParser{}
		rows = append(rows, row{
			provider:     rec[0],
			instanceType: rec[1],
			gpu:          rec[2],
			gpuCount:     p.number("gpu_count", rec[3]),
			vcpus:        p.optional("vcpus", rec[4]),
			memoryGiB:    p.optional("memory_gib", rec[5]),
			gpuMemoryGiB: p.optional("gpu_memory_gib", rec[6]),
			price:        p.optional("price", rec[7]),
			spotPrice:    p.optional("spot_price", rec[8]),
			hasPrice:     rec[7] != "",
			hasSpotPrice: rec[8] != "",
			region:       rec[9],
			zone:         rec[10],
		})
		if p.err != nil {
			line, _ := r.FieldPos(0)
			return nil, fmt.Errorf("decoding catalog line %d: %w", line, p.err)
		}
	}
	if err := zr.Close(); err != nil {
		return nil, fmt.Errorf("decoding catalog: %w", err)
	}
	return rows, nil
}

// fieldParser parses numeric fields, keeping the first error so that a row
// is checked once rather than field by field.
type fieldParser struct{ err error }

func (p *fieldParser) number(name, s string) float64 {
	v, err := strconv.ParseFloat(s, 64)
	if err == nil && v < 0 {
		err = errors.New("negative")
	}
	if err != nil && p.err == nil {
		p.err = fmt.Errorf("%s %q: %w", name, s, err)
	}
	return v
}

// optional parses a field that may be empty; empty reads as 0.
func (p *fieldParser) optional(name, s string) float64 {
	if s == "" {
		return 0
	}
	return p.number(name, s)
}

// bandKey identifies a Spot Advisor entry.
type bandKey struct{ instanceType, region string }

func decodeBands(data []byte) (map[bandKey]int, error) {
	r := csv.NewReader(bytes.NewReader(data))
	if err := readHeader(r, spotAdvisorHeader); err != nil {
		return nil, fmt.Errorf("decoding spot advisor: %w", err)
	}
	recs, err := r.ReadAll()
	if err != nil {
		return nil, fmt.Errorf("decoding spot advisor: %w", err)
	}
	bands := make(map[bandKey]int, len(recs))
	for i, rec := range recs {
		band, err := strconv.Atoi(rec[2])
		if err != nil || band < 0 || band >= spotBands {
			return nil, fmt.Errorf("decoding spot advisor line %d: band %q is not 0-%d", i+2, rec[2], spotBands-1)
		}
		bands[bandKey{rec[0], rec[1]}] = band
	}
	return bands, nil
}

func decodeSpecs(data []byte) ([]Accelerator, error) {
	d := json.NewDecoder(bytes.NewReader(data))
	d.DisallowUnknownFields()
	var specs []Accelerator
	if err := d.Decode(&specs); err != nil {
		return nil, fmt.Errorf("decoding specs: %w", err)
	}
	for i, a := range specs {
		if a.Name == "" {
			return nil, fmt.Errorf("decoding specs: entry %d has no name", i)
		}
		switch a.Verified {
		case VerifiedDatasheet, VerifiedThirdParty, Unverified:
		default:
			return nil, fmt.Errorf("decoding specs: %s %s: unknown verified level %q", a.Name, a.Variant, a.Verified)
		}
	}
	return specs, nil
}

func readHeader(r *csv.Reader, want string) error {
	rec, err := r.Read()
	if err != nil {
		return fmt.Errorf("reading header: %w", err)
	}
	if got := strings.Join(rec, ","); got != want {
		return fmt.Errorf("header %q, want %q: regenerate with go generate", got, want)
	}
	return nil
}
