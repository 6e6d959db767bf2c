package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/model"
)

// CostQuery is GET /v1/cost's query; zero fields take the server's
// defaults (30d, one row, idle shown).
type CostQuery struct {
	Window string   // e.g. "30d", "12h"
	By     []string // kind, project, user, queue, capacityType, …, tag:KEY
	Step   string   // e.g. "1d"
	TZ     string   // IANA time zone of day steps (server default UTC)
	Idle   string   // shown, shared or hidden
}

func (q CostQuery) values(format string) url.Values {
	v := url.Values{}
	set := func(k, val string) {
		if val != "" {
			v.Set(k, val)
		}
	}
	set("window", q.Window)
	set("step", q.Step)
	set("tz", q.TZ)
	set("idle", q.Idle)
	set("format", format)
	if len(q.By) > 0 {
		by := q.By[0]
		for _, b := range q.By[1:] {
			by += "," + b
		}
		v.Set("by", by)
	}
	return v
}

// Cost returns a cost report.
func (c *Client) Cost(ctx context.Context, q CostQuery) (*api.CostReport, error) {
	var r api.CostReport
	if _, err := c.do(ctx, "GET", "/v1/cost?"+q.values("").Encode(), nil, nil, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// CostCSV writes the report as the server's CSV to w.
func (c *Client) CostCSV(ctx context.Context, q CostQuery, w io.Writer) error {
	resp, err := c.do(ctx, "GET", "/v1/cost?"+q.values("csv").Encode(), nil, nil, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(w, resp.Body); err != nil {
		return fmt.Errorf("reading the cost report: %w", err)
	}
	return nil
}

// CostForecast returns every budget with its daily forecast for the rest
// of its period and days more.
func (c *Client) CostForecast(ctx context.Context, days int) ([]model.BudgetStatus, error) {
	var l api.BudgetList
	if _, err := c.do(ctx, "GET", "/v1/cost/forecast?days="+strconv.Itoa(days), nil, nil, &l); err != nil {
		return nil, err
	}
	return l.Budgets, nil
}

// CostPurchase returns a commitment recommendation per GPU model over a
// 7, 30 or 60-day lookback.
func (c *Client) CostPurchase(ctx context.Context, lookbackDays int) (*api.PurchaseList, error) {
	var l api.PurchaseList
	if _, err := c.do(ctx, "GET", "/v1/cost/purchase?lookback="+strconv.Itoa(lookbackDays), nil, nil, &l); err != nil {
		return nil, err
	}
	return &l, nil
}

// Budgets lists budgets with their spend this period.
func (c *Client) Budgets(ctx context.Context) ([]model.BudgetStatus, error) {
	var l api.BudgetList
	if _, err := c.do(ctx, "GET", "/v1/budgets", nil, nil, &l); err != nil {
		return nil, err
	}
	return l.Budgets, nil
}

// Budget returns one budget with its daily forecast.
func (c *Client) Budget(ctx context.Context, name string) (*model.BudgetStatus, error) {
	var b model.BudgetStatus
	if _, err := c.do(ctx, "GET", "/v1/budgets/"+url.PathEscape(name), nil, nil, &b); err != nil {
		return nil, err
	}
	return &b, nil
}

// ReportMetrics sends one training step's metrics for a job (with the
// job's own token) and returns the early-stop policy's verdict.
func (c *Client) ReportMetrics(ctx context.Context, jobID string, rep api.MetricReport) (*api.MetricVerdict, error) {
	body, err := json.Marshal(rep)
	if err != nil {
		return nil, fmt.Errorf("encoding the metric report: %w", err)
	}
	hdr := http.Header{}
	hdr.Set("Content-Type", "application/json")
	var v api.MetricVerdict
	if _, err := c.do(ctx, "POST", "/v1/jobs/"+url.PathEscape(jobID)+"/metrics", hdr, bytes.NewReader(body), &v); err != nil {
		return nil, err
	}
	return &v, nil
}
