package api_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/internal/advisor"
)

func TestAdvise(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{})
	tests := map[string]struct {
		body       string
		yaml       bool
		wantStatus int
		wantPaths  []string
		check      func(t *testing.T, res advisor.Result)
	}{
		"ranks offers": {
			body:       `{"profile":{"preset":"llama-3-8b","task":"lora","tokens":1e7},"gpus":["a100-80gb"],"capacity":["on-demand"],"limit":3}`,
			wantStatus: http.StatusOK,
			check: func(t *testing.T, res advisor.Result) {
				if len(res.Rows) != 3 || res.Rows[0].GPU != "A100-80GB" || res.Rows[0].Cost <= 0 {
					t.Errorf("rows %+v", res.Rows)
				}
			},
		},
		"yaml body": {
			body:       "profile:\n  preset: llama-3-70b\n  task: serving\n  serving: {inputTokens: 1000, outputTokens: 100, concurrency: 8}\nlimit: 1\n",
			yaml:       true,
			wantStatus: http.StatusOK,
			check: func(t *testing.T, res advisor.Result) {
				if len(res.Rows) != 1 || res.Rows[0].PerMTokens <= 0 {
					t.Errorf("rows %+v", res.Rows)
				}
			},
		},
		"fits nowhere is an empty ranking": {
			body:       `{"profile":{"preset":"llama-3.1-405b","task":"full-finetune","tokens":1e9},"gpus":["T4"],"maxNodes":1}`,
			wantStatus: http.StatusOK,
			check: func(t *testing.T, res advisor.Result) {
				if len(res.Rows) != 0 || res.Shortfall == nil {
					t.Errorf("rows %d, shortfall %+v", len(res.Rows), res.Shortfall)
				}
			},
		},
		"invalid profile names the fields": {
			body:       `{"profile":{"preset":"llama-9","task":"serving","precision":"fp7","serving":{"inputTokens":1,"outputTokens":1}},"gpus":["Z80"]}`,
			wantStatus: http.StatusBadRequest,
			wantPaths:  []string{"gpus[0]", "profile.precision", "profile.preset"},
		},
		"unknown field": {
			body:       `{"profile":{"preset":"llama-3-8b","task":"lora","tokens":1},"colour":"red"}`,
			wantStatus: http.StatusBadRequest,
			wantPaths:  []string{"colour"},
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			hdr := map[string]string{"Content-Type": "application/json"}
			if tt.yaml {
				hdr["Content-Type"] = "application/yaml"
			}
			r := e.do(t, req{Method: "POST", Path: "/v1/advise", Token: e.admin, Header: hdr, Body: []byte(tt.body)})
			if r.Status != tt.wantStatus {
				t.Fatalf("status %d, want %d: %s", r.Status, tt.wantStatus, r.Body)
			}
			if tt.wantPaths != nil {
				if diff := cmp.Diff(tt.wantPaths, problemPaths(problem(t, r))); diff != "" {
					t.Errorf("paths (-want +got):\n%s", diff)
				}
				return
			}
			var res advisor.Result
			if err := json.Unmarshal(r.Body, &res); err != nil {
				t.Fatal(err)
			}
			tt.check(t, res)
		})
	}
}
