// Package sim is a provider of simulated clouds built from the real
// catalog: every offer of AWS, GCP, Azure, OCI, Lambda and Vast in every
// region, each with finite capacity, per-cloud boot delays, account quotas,
// spot interruptions with advance notice, injected failures and per-second
// billing. It implements provider.Provider, InterruptionWatcher,
// Interrupter and Biller, and runs the providertest conformance suite.
//
// # Time and determinism
//
// The simulator has no goroutines and never sleeps. Everything about an
// instance's future (boot delay, spot notice, stop) is drawn when it is
// launched, from a hash of Config.Seed and the instance id (ids count
// launches: sim-aws-000001, …); each call first brings the state up to
// Config.Clock's now, recording what fell due in time order (Events). A fake
// clock therefore drives it exactly, and the same seed, scenario and
// sequence of calls at the same times give the same events, ids and bills.
// Capacity per offer and injected failures are drawn the same way, from the
// seed, the offer and the attempt number.
//
// # Defaults and their sources
//
// Boot delay (launch accepted → running), uniform in a per-cloud range:
//
//	aws     100–150 s   issue 4's published figure for GPU VMs; in line with
//	                    the AWS/GCP start-up measurements of Ao et al., "An
//	                    Empirical Analysis of VM Startup Times in Public IaaS
//	                    Clouds" (arXiv 2107.03467, 2021), plus GPU driver init
//	gcp     130–160 s   issue 4's published figure; same study
//	azure   320–380 s   issue 4's ≈350 s, ±30 s
//	oci     120–180 s   assumption: no published GPU figure found
//	lambda  180–300 s   assumption: Lambda's console says instances take
//	                    "a few minutes" to boot
//	vast     60–180 s   assumption: container start plus image pull on a
//	                    marketplace host
//
// Spot notice lead (notice → stop):
//
//	aws     120 s  EC2 User Guide, "Spot Instance interruption notices":
//	               two minutes before the interruption
//	gcp      30 s  Compute Engine, "Spot VMs" / preemption process: 30 s to
//	               shut down after the preemption notice
//	azure    30 s  Azure Scheduled Events: Preempt events give a minimum of
//	               30 s notice for Spot VMs
//	others   30 s  assumption (the catalog sells OCI preemptible capacity;
//	               Lambda and Vast sell no spot here)
//
// Spot interruption rate: the offer's InterruptionRate from the catalog, in
// interruptions per instance-hour. For AWS it is derived from the Spot
// Advisor band of the instance type in the region: the band's midpoint p is
// read as the chance an instance running a month (730 h) is interrupted,
// with λ = −ln(1−p)/730 (catalog/spot.go); GCP, Azure and OCI offers get the
// median AWS band's rate, as the catalog has no figures for them. The
// simulator treats notices as a Poisson process per instance: the notice
// comes after an exponential time with rate λ from launch, and the stop
// follows one notice lead later, so the measured notices per instance-hour
// converge on λ. Spot trace replay is not implemented (the measured traces
// are not available at run time). At catalog rates (about one notice per
// 3,800 instance-hours) interruptions are rare; scenarios raise the rate,
// fix a time with interruptAfter, or Interrupt injects one by hand.
//
// Capacity: each offer holds 16, 32, 64 or 128 GPUs (drawn from the seed and
// the offer), so max(1, GPUs / GPUs-per-instance) instances run at once;
// on-demand and spot offers of a type are separate pools. Capacity returns
// when an instance stops.
//
// Quota: DefaultQuota (256) GPUs per cloud per GPU model, counted
// separately for on-demand and spot (AWS and GCP keep separate spot
// quotas), checked before capacity, as the clouds' APIs do. The figure is
// an assumption, not a published default (AWS counts on-demand P-instance
// quotas in vCPUs per region, raised on request): a fleet larger than it
// needs a scenario that grants its quota, as a real account would.
//
// A failed launch's Event says its kind (Refusal), so a simulation can
// report what held a fleet back.
//
// Billing: per second from launch accepted to stop (terminate or
// interruption), whole seconds, at the offer's catalog price: the price is
// rounded once to integer micro-dollars per hour, then seconds × that /
// 3600 is rounded half up. Per-cloud minimums (AWS and GCP bill at least
// 60 s) are not modelled.
//
// # Scenario schema
//
// A scenario (ParseScenario; strict YAML or JSON, unknown fields are
// errors reported by path) overrides any default. Example in
// testdata/scenario.yaml.
//
//	clouds:                    # keyed by cloud: aws gcp azure oci lambda vast
//	  aws:
//	    bootDelay: {min: 100s, max: 150s}   # uniform draw; min >= 0, max >= min
//	    noticeLead: 2m                      # > 0
//	    quota: {H100: 64, "*": 512}         # GPUs per GPU model, on-demand and
//	                                        # spot each; "*" = models not named
//	offers:                    # rules, in order; later ones override earlier
//	  - match:                 # path.Match patterns; empty matches anything
//	      cloud: aws
//	      region: "us-*"
//	      zone: ""
//	      instanceType: "p5.*"
//	      gpu: H100
//	      capacityType: spot   # on-demand | spot | reserved (exact)
//	    capacity: 4            # instances at once, >= 0
//	    interruptionRate: 0.5  # per instance-hour, >= 0; spot offers only
//	    interruptAfter: 45m    # notice this long after launch; spot only
//	    bootDelay: {min: 30s, max: 30s}
//	    fail:                  # injected launch failures
//	      first: 2             # the offer's first 2 attempts fail
//	      probability: 0.1     # then each attempt fails with this chance
//	      error: insufficient-capacity   # | quota-exceeded | transient
//
// Every rule must set something and match at least one offer, and every
// cloud named must exist, so that a typo fails loudly instead of silently
// simulating the defaults.
package sim
