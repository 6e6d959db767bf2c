package cost

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/internal/model"
)

func TestParsePrices(t *testing.T) {
	t.Parallel()
	csv := `match,value,price_per_hour,purchase_price,amortize_months,opex_per_hour
# owned DGX bought for $300k over 3 years, $2/h power and space
node,dgx-01,,300000,36,2
pool,onprem-l4,4.50,,,
instance_type,a100-box,12.25,,,0.75
`
	tab, err := ParsePrices(strings.NewReader(csv))
	if err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		node, pool, typ string
		want            Price
		ok              bool
	}{
		"amortised node": {"dgx-01", "onprem-l4", "", Price{model.FromDollars(300000.0/(36*730)) + 2*model.Dollar, model.PriceAmortized}, true},
		"pool":           {"other", "onprem-l4", "a100-box", Price{4_500_000, model.PriceCustom}, true},
		"instance type":  {"other", "", "a100-box", Price{13 * model.Dollar, model.PriceCustom}, true},
		"catalog":        {"x", "y", "z", Price{}, false},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			got, ok := tab.Lookup(tt.node, tt.pool, tt.typ)
			if diff := cmp.Diff(tt.want, got); diff != "" || ok != tt.ok {
				t.Errorf("ok=%v (-want +got)\n%s", ok, diff)
			}
		})
	}
}

func TestParsePricesErrors(t *testing.T) {
	t.Parallel()
	tests := map[string]struct{ csv, want string }{
		"unknown column": {"match,value,colour\n", `line 1: unknown column "colour"`},
		"bad match":      {"match,value,price_per_hour\nrack,r1,1\n", `line 2: match: "rack" must be node, pool or instance_type`},
		"both prices":    {"match,value,price_per_hour,purchase_price,amortize_months\nnode,n,1,2,3\n", "line 2: set price_per_hour or purchase_price, not both"},
		"no months":      {"match,value,purchase_price\nnode,n,1000\n", "line 2: amortize_months"},
		"negative":       {"match,value,price_per_hour\nnode,n,-1\n", "line 2: price_per_hour"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := ParsePrices(strings.NewReader(tt.csv))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

func TestWithInstanceType(t *testing.T) {
	t.Parallel()
	file, err := ParsePrices(strings.NewReader("match,value,price_per_hour\ninstance_type,mine,5\n"))
	if err != nil {
		t.Fatal(err)
	}
	demo := Price{PerHour: 2 * model.Dollar, Source: "demo"}
	for name, tc := range map[string]struct {
		table PriceTable
		typ   string
		want  Price
	}{
		"added to an empty table":     {table: PriceTable{}, typ: "demo-1xH100", want: demo},
		"added beside the file's":     {table: file, typ: "demo-1xH100", want: demo},
		"the file's own price stands": {table: file, typ: "mine", want: Price{PerHour: 5 * model.Dollar, Source: model.PriceCustom}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got, ok := tc.table.WithInstanceType(tc.typ, demo).Lookup("n", "", tc.typ)
			if !ok || got != tc.want {
				t.Errorf("Lookup = %+v %v, want %+v", got, ok, tc.want)
			}
		})
	}
	if _, ok := file.Lookup("n", "", "demo-1xH100"); ok {
		t.Error("WithInstanceType changed the table it was called on")
	}
}
