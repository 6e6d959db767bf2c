package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/s3test"
)

// TestDatasetProgressAndContainerMount checks, through the real binary,
// podman and versitygw, the two dataset behaviours unit tests only
// approximate: `jobs get` shows a download in progress ("fetching data
// 4.0/12.0 MiB", the storage behind a proxy that slows reads to 2 MiB/s),
// and a container job sees its dataset as a read-only bind mount at its
// path.
func TestDatasetProgressAndContainerMount(t *testing.T) {
	if !podmanWorks(t) {
		t.Skip("needs rootful podman (.ci/run installs it)")
	}
	srv := s3test.Start(t)
	srv.CreateBucket(t, "lake")
	put := func(key string, data []byte) {
		t.Helper()
		if _, err := srv.Client().PutObject(context.Background(), &s3.PutObjectInput{Bucket: aws.String("lake"), Key: aws.String(key), Body: bytes.NewReader(data)}); err != nil {
			t.Fatal(err)
		}
	}
	blob := make([]byte, 12<<20)
	rand.Read(blob)
	put("big/blob.bin", blob)
	put("set/labels.txt", []byte("cat\ndog\n"))
	slow := slowProxy(t, srv.Endpoint, 2<<20)

	image := buildExampleImages(t)
	s := startServer(t, t.TempDir(), freePort(t))
	set := s.gpufleetCmd("secrets", "set", "default", "S3_LAKE")
	set.Stdin = strings.NewReader(s3test.AccessKey + ":" + s3test.SecretKey)
	if out, err := set.CombinedOutput(); err != nil {
		t.Fatalf("secrets set: %v\n%s", err, out)
	}
	project := filepath.Join(t.TempDir(), "project.yaml")
	if err := os.WriteFile(project, []byte(fmt.Sprintf(`apiVersion: gpufleet.dev/v1
kind: Project
metadata: {name: default}
spec:
  storage:
    lake: {s3: {bucket: lake, endpoint: %q, pathStyle: true, credentialsRef: default/S3_LAKE}}
    slow: {s3: {bucket: lake, endpoint: %q, pathStyle: true, credentialsRef: default/S3_LAKE}}
`, srv.Endpoint, slow)), 0o600); err != nil {
		t.Fatal(err)
	}
	s.gpufleet("apply", "-f", project)

	// 1. Progress while the node downloads.
	id := strings.TrimSpace(s.gpufleet("run", "--gpus", "0", "--data", "storage:slow/big:data/", "--", "true"))
	progress := regexp.MustCompile(`fetching data (\d+\.\d)/12\.0 MiB`)
	var seen []string
	var last string
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) { // polling a separate process; bounded
		out := s.gpufleet("jobs", "get", id)
		last = out
		if m := progress.FindStringSubmatch(out); m != nil && (len(seen) == 0 || seen[len(seen)-1] != m[1]) {
			seen = append(seen, m[1])
		}
		if v := s.job(id); v.State.Terminal() {
			if v.State != model.JobSucceeded {
				t.Fatalf("the dataset job %s: %s", v.State, v.Reason)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the dataset job did not end; last jobs get:\n%s", out)
		}
	}
	if len(seen) < 2 {
		t.Errorf("jobs get showed the download's progress at %v, want at least two different points of 12.0 MiB; last:\n%s", seen, last)
	}

	// 2. A container job: its dataset is a read-only bind mount.
	probe := `cd "$GPUFLEET_DATA_DIR"; cat data/labels.txt; ` +
		`grep " $GPUFLEET_DATA_DIR/data " /proc/mounts | cut -d' ' -f4 | cut -d, -f1; ` +
		`if (echo x > data/new) 2>/dev/null; then echo "data is WRITABLE"; else echo "data is read-only"; fi`
	cid := strings.TrimSpace(s.gpufleet("run", "--image", image, "--gpus", "1", "--data", "storage:lake/set:data/", "--", "sh", "-c", probe))
	v := s.waitJob(cid, func(v api.JobView) bool { return v.State.Terminal() }, "ended")
	logs := s.gpufleet("jobs", "logs", cid)
	if v.State != model.JobSucceeded || logs != "cat\ndog\nro\ndata is read-only\n" {
		t.Errorf("container dataset job %s (%s), logged\n%s\nwant the labels, an ro mount and a refused write", v.State, v.Reason, logs)
	}
}

// slowProxy serves target's API through a proxy whose response bodies
// arrive at rate bytes per second, and returns its URL. The client's
// signature holds: the proxy keeps the Host the client signed.
func slowProxy(t *testing.T, target string, rate int) string {
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	p := httputil.NewSingleHostReverseProxy(u)
	p.ModifyResponse = func(r *http.Response) error {
		if r.Request.Method == http.MethodGet && r.ContentLength > 64<<10 {
			r.Body = &slowBody{ReadCloser: r.Body, rate: rate}
		}
		return nil
	}
	ts := httptest.NewServer(p)
	t.Cleanup(ts.Close)
	return ts.URL
}

type slowBody struct {
	io.ReadCloser
	rate int
}

func (b *slowBody) Read(p []byte) (int, error) {
	const chunk = 64 << 10
	if len(p) > chunk {
		p = p[:chunk]
	}
	n, err := b.ReadCloser.Read(p)
	time.Sleep(time.Duration(n) * time.Second / time.Duration(b.rate))
	return n, err
}
