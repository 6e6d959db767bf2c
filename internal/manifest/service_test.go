package manifest

import (
	"strings"
	"testing"
)

func TestParseService(t *testing.T) {
	good := `apiVersion: gpufleet.dev/v1
kind: Service
metadata: {name: llm}
spec:
  template:
    run: {command: [python, serve.py]}
    resources: {gpus: 1}
  port: 8000
  readiness: {path: /health, initialDelay: 5s}
  replicas: {min: 0, max: 4}
  autoscaling: {metric: inflight, target: 8, scaleDownWindow: 2m}
`
	s, fe := ParseService([]byte(good), YAML, nil)
	if len(fe) > 0 {
		t.Fatal(fe)
	}
	if s.Spec.Readiness.Timeout == 0 || s.Spec.Update.MaxSurge != 1 || s.Spec.Auth.Mode != "token" || s.Spec.Template.Replicas != 1 {
		t.Fatalf("defaults not filled: %+v", s.Spec)
	}

	cases := map[string]string{
		"metadata.name": `apiVersion: gpufleet.dev/v1
kind: Service
spec: {template: {run: {command: [x]}}, port: 80}`,
		"spec.port": `apiVersion: gpufleet.dev/v1
kind: Service
metadata: {name: a}
spec: {template: {run: {command: [x]}}, port: 70000}`,
		"spec.autoscaling.metric": `apiVersion: gpufleet.dev/v1
kind: Service
metadata: {name: a}
spec: {template: {run: {command: [x]}}, port: 80, autoscaling: {metric: latency}}`,
		"spec.autoscaling.target": `apiVersion: gpufleet.dev/v1
kind: Service
metadata: {name: a}
spec: {template: {run: {command: [x]}}, port: 80, autoscaling: {metric: rps}}`,
		"spec.replicas.min": `apiVersion: gpufleet.dev/v1
kind: Service
metadata: {name: a}
spec: {template: {run: {command: [x]}}, port: 80, replicas: {min: 5, max: 2}}`,
		"spec.template.replicas": `apiVersion: gpufleet.dev/v1
kind: Service
metadata: {name: a}
spec: {template: {run: {command: [x]}, replicas: 2}, port: 80}`,
		"spec.template.run.command": `apiVersion: gpufleet.dev/v1
kind: Service
metadata: {name: a}
spec: {template: {}, port: 80}`,
		"spec.readiness.path": `apiVersion: gpufleet.dev/v1
kind: Service
metadata: {name: a}
spec: {template: {run: {command: [x]}}, port: 80, readiness: {path: health}}`,
		"spec.auth.mode": `apiVersion: gpufleet.dev/v1
kind: Service
metadata: {name: a}
spec: {template: {run: {command: [x]}}, port: 80, auth: {mode: apikey}}`,
		"spec.prot": `apiVersion: gpufleet.dev/v1
kind: Service
metadata: {name: a}
spec: {template: {run: {command: [x]}}, prot: 80}`,
	}
	for path, doc := range cases {
		_, fe := ParseService([]byte(doc), YAML, nil)
		found := false
		for _, e := range fe {
			if e.Path == path || strings.HasPrefix(e.Path, path) {
				found = true
			}
		}
		if !found {
			t.Errorf("%s: want a problem at %s, got %v", path, path, fe)
		}
	}
}
