package manifest

import (
	"errors"

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

// BudgetSpec is model.Budget as a user writes it, plus where notifications
// go. Amount is a string of dollars ("5000", at most six decimals).
type BudgetSpec struct {
	Scope      model.BudgetScope       `json:"scope"`
	Amount     model.Money             `json:"amount"`
	Period     model.BudgetPeriod      `json:"period"`
	Hard       bool                    `json:"hard,omitempty"`
	Thresholds []model.BudgetThreshold `json:"thresholds,omitempty"`
	// Webhook receives this budget's firings (POST, JSON, signed); nil
	// means the server's default receiver (--webhook-url), if any.
	Webhook *WebhookRef `json:"webhook,omitempty"`
}

// WebhookRef names a webhook receiver by sealed secrets (issue 9), so
// neither its URL nor its signing key is stored in the fleet's documents,
// and the API, which returns documents, never shows them.
type WebhookRef struct {
	// SecretRef is the secret ("project/NAME") whose value is the
	// receiver's http(s) URL. Required.
	SecretRef model.SecretRef `json:"secretRef"`
	// SigningKeyRef is the secret whose value signs the bodies
	// (HMAC-SHA256); empty signs with the server's --webhook-secret.
	SigningKeyRef model.SecretRef `json:"signingKeyRef,omitempty"`
	// LegacyURL is a receiver URL written inline, as budgets were before
	// secret references (spec.webhook: "https://…"). Only ParseStored sets
	// it, for a revision recorded then, so that such a data dir still
	// loads and its budget still notifies (signed with the server's
	// --webhook-secret, as it was). Parse refuses the form, so no new
	// revision records it; it is never encoded, so no plan, API view or
	// log shows it.
	LegacyURL string `json:"-"`
}

// Legacy reports whether w is an inline URL from before secret references.
func (w *WebhookRef) Legacy() bool { return w != nil && w.LegacyURL != "" }

// Refs returns the secrets w names.
func (w *WebhookRef) Refs() []model.SecretRef {
	if w == nil {
		return nil
	}
	var refs []model.SecretRef
	for _, r := range []model.SecretRef{w.SecretRef, w.SigningKeyRef} {
		if r != "" {
			refs = append(refs, r)
		}
	}
	return refs
}

// Help for webhooks written the way they were before secret references: a
// URL (or a signing key) in the document itself.
const (
	InlineWebhookHelp = "a URL in the budget is no longer accepted (it would be stored and shown in clear): " +
		"store it as a secret (printf %s \"$URL\" | gpufleet secrets set PROJECT NAME) and write webhook: {secretRef: PROJECT/NAME}; " +
		"add signingKeyRef: PROJECT/KEY_NAME to sign with a key of its own instead of the server's --webhook-secret"
	inlineKeyHelp = "a signing key in the budget is no longer accepted: store it as a secret " +
		"(gpufleet secrets set PROJECT KEY_NAME) and write signingKeyRef: PROJECT/KEY_NAME"
)

// Validate reports every problem in w, with paths under prefix.
func (w *WebhookRef) Validate(prefix string) model.FieldErrors {
	var fe model.FieldErrors
	if w == nil {
		return nil
	}
	if w.Legacy() {
		fe.Add(prefix, InlineWebhookHelp)
		return fe
	}
	if w.SecretRef == "" {
		fe.Add(prefix+".secretRef", "is required: the secret (project/NAME) holding the receiver's URL; write it with `gpufleet secrets set PROJECT NAME`")
	} else if msg := w.SecretRef.Validate(); msg != "" {
		fe.Add(prefix+".secretRef", msg)
	}
	if w.SigningKeyRef != "" {
		if msg := w.SigningKeyRef.Validate(); msg != "" {
			fe.Add(prefix+".signingKeyRef", msg)
		}
	}
	return fe
}

// Budget returns the document as the cost core's Budget.
func (d *Budget) Budget() model.Budget {
	return model.Budget{Name: d.Metadata.Name, Scope: d.Spec.Scope, Amount: d.Spec.Amount, Period: d.Spec.Period,
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
	fe = append(fe, d.Spec.Webhook.Validate("spec.webhook")...)
	return fe
}
