// Command replica is a stand-in for an inference server in the services
// end-to-end test: it listens on $PORT, answers /health, and answers
// OpenAI-style /v1/completions with usage, streamed as Server-Sent Events
// when the request asks for "stream": true. Like vLLM's --api-key, it
// answers /v1/ only to "Authorization: Bearer $GPUFLEET_SERVICE_KEY" when
// that is set (the replica key the proxy sends), unless IGNORE_KEY is set,
// as a careless replica would.
//
// "replica probe URL..." is a tenant's job looking around instead: it
// prints "URL status CODE" (or "URL error") for a GET of each URL.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "probe" {
		c := &http.Client{Timeout: 5 * time.Second}
		for _, u := range os.Args[2:] {
			resp, err := c.Post(u, "application/json", strings.NewReader(`{"prompt":"probe"}`))
			if err != nil {
				fmt.Println(u, "error", err)
				continue
			}
			resp.Body.Close()
			fmt.Println(u, "status", resp.StatusCode)
		}
		return
	}
	port := os.Getenv("PORT")
	if port == "" {
		log.Fatal("PORT is not set")
	}
	reply := os.Getenv("REPLY")
	key := os.Getenv("GPUFLEET_SERVICE_KEY")
	if os.Getenv("IGNORE_KEY") != "" {
		key = ""
	}
	http.HandleFunc("/health", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	// /crash ends the process at once, as a crashing server would.
	http.HandleFunc("/crash", func(http.ResponseWriter, *http.Request) { os.Exit(3) })
	http.HandleFunc("/v1/completions", func(w http.ResponseWriter, r *http.Request) {
		if key != "" && r.Header.Get("Authorization") != "Bearer "+key {
			http.Error(w, `{"error":"unauthorized"}`, http.StatusUnauthorized)
			return
		}
		var req struct {
			Prompt string `json:"prompt"`
			Stream bool   `json:"stream"`
			// Tokens and IntervalMS shape a stream: how many events, how
			// far apart (default 3, none).
			Tokens     int `json:"tokens"`
			IntervalMS int `json:"interval_ms"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		prompt := len(strings.Fields(req.Prompt))
		usage := map[string]int{"prompt_tokens": prompt, "completion_tokens": 3, "total_tokens": prompt + 3}
		if req.Stream {
			w.Header().Set("Content-Type", "text/event-stream")
			n := req.Tokens
			if n <= 0 {
				n = 3
			}
			for i := range n {
				if i > 0 {
					time.Sleep(time.Duration(req.IntervalMS) * time.Millisecond)
				}
				fmt.Fprintf(w, "data: {\"choices\":[{\"text\":%q}]}\n\n", string(rune('a'+i%26)))
				w.(http.Flusher).Flush()
			}
			u, _ := json.Marshal(map[string]any{"choices": []any{}, "usage": usage})
			fmt.Fprintf(w, "data: %s\n\ndata: [DONE]\n\n", u)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"object": "text_completion", "model": "echo", "port": port,
			"choices": []any{map[string]any{"text": reply, "index": 0}}, "usage": usage})
	})
	// On SIGTERM (a stop, a spot notice) it stops accepting and finishes
	// the requests in flight, as a serving engine does.
	srv := &http.Server{Addr: ":" + port}
	done := make(chan struct{})
	go func() {
		term := make(chan os.Signal, 1)
		signal.Notify(term, syscall.SIGTERM)
		<-term
		log.Print("SIGTERM: finishing the requests in flight")
		srv.Shutdown(context.Background())
		close(done)
	}()
	log.Printf("replica listening on :%s", port)
	if err := srv.ListenAndServe(); err != http.ErrServerClosed {
		log.Fatal(err)
	}
	<-done
	log.Print("all requests finished")
}
