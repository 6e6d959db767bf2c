package telemetry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os/exec"

	"github.com/gpufleet/gpufleet/internal/clock"
)

// Options configures Detect. The zero value tries every source at its
// default place on the wall clock.
type Options struct {
	// Prefer names the one source to use ("nvml", "nvidia-smi",
	// "dcgm-exporter", "none"); empty tries them in order.
	Prefer string
	// NvidiaSMI is the nvidia-smi program; empty means nvidia-smi from
	// PATH, and none there skips the source.
	NvidiaSMI string
	// ExporterURL is dcgm-exporter's metrics URL; empty means
	// DefaultExporterURL.
	ExporterURL string
	// HTTPClient scrapes the exporter; nil is http.DefaultClient.
	HTTPClient *http.Client
	Clock      clock.Clock
	// Logger receives why a source was passed over. Nil discards.
	Logger *slog.Logger
}

// Detect returns the best source this machine has, in order: NVML (in
// builds with the nvml tag, when the library and driver load), nvidia-smi
// (when it runs and lists GPUs), a running dcgm-exporter (when its URL
// answers with DCGM metrics), and otherwise None, which reports no GPU. A
// source that is present but failing is logged and passed over: a broken
// GPU tool never stops the agent. Detect takes one sample from the
// nvidia-smi and exporter candidates to check them, under ctx.
func Detect(ctx context.Context, opts Options) Source {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	try := func(name string) bool { return opts.Prefer == "" || opts.Prefer == name }

	if try(SourceNVML) {
		src, ok, err := openNVML(NVMLOptions{Clock: opts.Clock})
		switch {
		case err != nil:
			log.Warn("GPU telemetry: NVML present but failing; trying the next source", "err", err)
		case ok:
			return src
		}
	}
	if try(SourceNvidiaSMI) {
		if src, err := checkSMI(ctx, opts); err == nil {
			return src
		} else if !errors.Is(err, exec.ErrNotFound) && !errors.Is(err, ErrNoDevices) {
			log.Warn("GPU telemetry: nvidia-smi present but failing; trying the next source", "err", err)
		}
	}
	if try(SourceDCGMExporter) {
		src := NewExporter(ExporterOptions{URL: opts.ExporterURL, Client: opts.HTTPClient, Clock: opts.Clock})
		s, err := src.Sample(ctx)
		switch {
		case err != nil:
			if opts.ExporterURL != "" {
				log.Warn("GPU telemetry: dcgm-exporter not answering", "url", opts.ExporterURL, "err", err)
			}
		case len(s.GPUs) > 0:
			return src
		}
	}
	return None{}
}

func checkSMI(ctx context.Context, opts Options) (Source, error) {
	program := opts.NvidiaSMI
	if program == "" {
		p, err := exec.LookPath("nvidia-smi")
		if err != nil {
			return nil, err
		}
		program = p
	}
	src := NewSMI(SMIOptions{Program: program, Clock: opts.Clock})
	s, err := src.Sample(ctx)
	if err != nil {
		return nil, err
	}
	if len(s.GPUs) == 0 {
		return nil, fmt.Errorf("%s listed no GPU: %w", program, ErrNoDevices)
	}
	return src, nil
}
