package manifest

import (
	"errors"
	"net/url"

	"github.com/gpufleet/gpufleet/internal/cost"
	"github.com/gpufleet/gpufleet/internal/model"
)

// Budget is a manifest of kind Budget (docs/cost.md): a spend cap on a
// scope per period, with thresholds and their actions.
type Budget struct {
	APIVersion string     `json:"apiVersion"`
	Kind       string     `json:"kind"`
	Metadata   ObjectMeta `json:"metadata"`
	Spec       BudgetSpec `json:"spec"`
}

// BudgetSpec is cost.Budget as a user writes it, plus where notifications
// go. Amount is a string of dollars ("5000", at most six decimals).
type BudgetSpec struct {
	Scope      cost.Scope       `json:"scope"`
	Amount     cost.Money       `json:"amount"`
	Period     cost.Period      `json:"period"`
	Hard       bool             `json:"hard,omitempty"`
	Thresholds []cost.Threshold `json:"thresholds,omitempty"`
	// Webhook receives this budget's firings (POST, JSON, signed with
	// the server's webhook secret); empty means the server's default
	// (--webhook-url), if any.
	Webhook string `json:"webhook,omitempty"`
}

// Budget returns the document as the cost core's Budget.
func (d *Budget) Budget() cost.Budget {
	return cost.Budget{Name: d.Metadata.Name, Scope: d.Spec.Scope, Amount: d.Spec.Amount, Period: d.Spec.Period,
		Thresholds: d.Spec.Thresholds, Hard: d.Spec.Hard}
}

// Validate reports every problem in d; knownGPU is not used.
func (d *Budget) Validate(func(string) bool) model.FieldErrors {
	fe := validateObject(d.APIVersion, d.Kind, KindBudget, d.Metadata)
	b := d.Budget()
	if err := b.Validate(); err != nil {
		var more model.FieldErrors
		if errors.As(err, &more) {
			for _, e := range more {
				if e.Path != "metadata.name" {
					fe = append(fe, e)
				}
			}
		} else {
			fe.Add("spec", err.Error())
		}
	}
	if d.Spec.Webhook != "" {
		if u, err := url.Parse(d.Spec.Webhook); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			fe.Add("spec.webhook", "must be an http or https URL")
		}
	}
	return fe
}
