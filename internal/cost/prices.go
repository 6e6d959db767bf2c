package cost

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/gpufleet/gpufleet/internal/model"
)

// HoursPerMonth is the month length used to amortise hardware: 730 hours
// (8,760 / 12), the convention cloud price sheets use.
const HoursPerMonth = 730

// Price is a node's price per hour and where it came from.
type Price struct {
	PerHour model.Money
	Source  model.PriceSource
}

// PriceTable is the custom price file: prices for owned or otherwise
// privately priced machines, matched by node, then pool, then instance
// type. The zero value matches nothing.
type PriceTable struct {
	byNode, byPool, byType map[string]Price
}

// Lookup returns the most specific custom price: node id, then pool, then
// instance type. ok is false when the file has none (use the catalog).
func (t PriceTable) Lookup(nodeID, pool, instanceType string) (p Price, ok bool) {
	for _, m := range []struct {
		m map[string]Price
		k string
	}{{t.byNode, nodeID}, {t.byPool, pool}, {t.byType, instanceType}} {
		if m.k == "" {
			continue
		}
		if p, ok = m.m[m.k]; ok {
			return p, true
		}
	}
	return Price{}, false
}

// WithInstanceType returns t with instance type name priced at p, unless
// t already prices that type (a price file row wins). t is not changed.
func (t PriceTable) WithInstanceType(name string, p Price) PriceTable {
	if _, ok := t.byType[name]; ok {
		return t
	}
	byType := make(map[string]Price, len(t.byType)+1)
	for k, v := range t.byType {
		byType[k] = v
	}
	byType[name] = p
	t.byType = byType
	return t
}

// priceColumns is the header a price file must start with, in any order;
// see docs/cost.md.
var priceColumns = []string{"match", "value", "price_per_hour", "purchase_price", "amortize_months", "opex_per_hour"}

// ParsePrices reads the custom price CSV. Columns (header required, any
// order, unknown columns rejected):
//
//	match            node | pool | instance_type
//	value            the node id, pool name or instance type
//	price_per_hour   USD per hour for the whole machine (source "custom"), or
//	purchase_price   USD paid for the machine, with
//	amortize_months  months to spread it over (source "amortized"); its
//	                 price per hour is purchase_price / (months × 730) +
//	                 opex_per_hour (power, space, support; optional).
//
// Amounts are decimal dollars, at most six decimals; the amortised rate
// is rounded half up to the micro-dollar per hour. Every problem is
// reported with its line and column.
func ParsePrices(r io.Reader) (PriceTable, error) {
	cr := csv.NewReader(r)
	cr.TrimLeadingSpace = true
	cr.Comment = '#'
	recs, err := cr.ReadAll()
	if err != nil {
		return PriceTable{}, fmt.Errorf("reading price csv: %w", err)
	}
	if len(recs) == 0 {
		return PriceTable{}, errors.New("reading price csv: empty (want a header: " + strings.Join(priceColumns, ",") + ")")
	}
	col := map[string]int{}
	var errs []error
	for i, h := range recs[0] {
		h = strings.TrimSpace(strings.ToLower(h))
		known := false
		for _, c := range priceColumns {
			known = known || c == h
		}
		if !known {
			errs = append(errs, fmt.Errorf("line 1: unknown column %q (want %s)", h, strings.Join(priceColumns, ", ")))
		}
		col[h] = i
	}
	for _, c := range []string{"match", "value"} {
		if _, ok := col[c]; !ok {
			errs = append(errs, fmt.Errorf("line 1: missing column %q", c))
		}
	}
	if len(errs) > 0 {
		return PriceTable{}, errors.Join(errs...)
	}
	t := PriceTable{byNode: map[string]Price{}, byPool: map[string]Price{}, byType: map[string]Price{}}
	get := func(rec []string, c string) string {
		if i, ok := col[c]; ok && i < len(rec) {
			return strings.TrimSpace(rec[i])
		}
		return ""
	}
	money := func(line int, rec []string, c string) (model.Money, bool) {
		s := get(rec, c)
		if s == "" {
			return 0, false
		}
		m, err := model.ParseMoney(s)
		if err != nil || m < 0 {
			errs = append(errs, fmt.Errorf("line %d: %s: %q is not a non-negative amount", line, c, s))
			return 0, false
		}
		return m, true
	}
	for n, rec := range recs[1:] {
		line := n + 2
		var m map[string]Price
		switch get(rec, "match") {
		case "node":
			m = t.byNode
		case "pool":
			m = t.byPool
		case "instance_type":
			m = t.byType
		default:
			errs = append(errs, fmt.Errorf("line %d: match: %q must be node, pool or instance_type", line, get(rec, "match")))
			continue
		}
		key := get(rec, "value")
		if key == "" {
			errs = append(errs, fmt.Errorf("line %d: value: must be set", line))
			continue
		}
		if _, dup := m[key]; dup {
			errs = append(errs, fmt.Errorf("line %d: %s %q listed twice", line, get(rec, "match"), key))
			continue
		}
		pph, hasPPH := money(line, rec, "price_per_hour")
		buy, hasBuy := money(line, rec, "purchase_price")
		opex, _ := money(line, rec, "opex_per_hour")
		switch {
		case hasPPH && hasBuy:
			errs = append(errs, fmt.Errorf("line %d: set price_per_hour or purchase_price, not both", line))
		case hasPPH:
			m[key] = Price{PerHour: pph + opex, Source: model.PriceCustom}
		case hasBuy:
			months, err := strconv.Atoi(get(rec, "amortize_months"))
			if err != nil || months <= 0 || months > 240 {
				errs = append(errs, fmt.Errorf("line %d: amortize_months: must be a whole number 1–240 with purchase_price", line))
				continue
			}
			hours := uint64(months) * HoursPerMonth
			perHour := model.Money((uint64(buy) + hours/2) / hours) // half up
			m[key] = Price{PerHour: perHour + opex, Source: model.PriceAmortized}
		default:
			errs = append(errs, fmt.Errorf("line %d: set price_per_hour or purchase_price", line))
		}
	}
	if len(errs) > 0 {
		return PriceTable{}, errors.Join(errs...)
	}
	return t, nil
}
