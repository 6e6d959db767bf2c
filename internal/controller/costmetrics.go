package controller

import (
	"github.com/prometheus/client_golang/prometheus"
)

var (
	costDesc = prometheus.NewDesc("gpufleet_cost_dollars_total",
		"Dollars metered to jobs so far (the ledger, in micro-dollars, as a float), by project, queue and capacity type.",
		[]string{"project", "queue", "capacity_type"}, nil)
	idleCostDesc = prometheus.NewDesc("gpufleet_idle_cost_dollars_total",
		"Dollars metered to GPUs and machines no job held.", nil, nil)
	budgetRatioDesc = prometheus.NewDesc("gpufleet_budget_spend_ratio",
		"Each budget's actual spend this period over its amount (1 = all of it).", []string{"budget"}, nil)
)

// CostCollector exports the cost totals (CostTotals), read at scrape
// time so they match the ledger exactly. The totals are rebuilt from the
// ledger at start, so the counters continue across restarts.
func (c *Controller) CostCollector() prometheus.Collector { return costCollector{c} }

type costCollector struct{ c *Controller }

func (cc costCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- costDesc
	ch <- idleCostDesc
	ch <- budgetRatioDesc
}

func (cc costCollector) Collect(ch chan<- prometheus.Metric) {
	byKey, idle, ratios := cc.c.CostTotals()
	for k, v := range byKey {
		ch <- prometheus.MustNewConstMetric(costDesc, prometheus.CounterValue, v.Dollars(), k[0], k[1], k[2])
	}
	ch <- prometheus.MustNewConstMetric(idleCostDesc, prometheus.CounterValue, idle.Dollars())
	for name, r := range ratios {
		ch <- prometheus.MustNewConstMetric(budgetRatioDesc, prometheus.GaugeValue, r, name)
	}
}
