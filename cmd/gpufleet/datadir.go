package main

import (
	"encoding/json"
	"os"
	"path/filepath"
)

// removeServerInfo removes the data dir's server.json only when it is the
// one this process wrote (its pid and url): a server never deletes the
// address of another.
func removeServerInfo(dataDir, url string) {
	path := filepath.Join(dataDir, serverFile)
	data, err := os.ReadFile(path)
	if err != nil {
		return
	}
	var info serverInfo
	if json.Unmarshal(data, &info) != nil || info.PID != os.Getpid() || info.URL != url {
		return
	}
	_ = os.Remove(path)
}
