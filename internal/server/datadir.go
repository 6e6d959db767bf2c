package server

import (
	"encoding/json"
	"os"
	"path/filepath"
)

// Files a server keeps in the data dir; local clients read InfoFile and
// TokenFile to find it.
const (
	// InfoFile is where a running server writes its Info.
	InfoFile = "server.json"
	// TokenFile holds the admin token `up` creates.
	TokenFile = "admin.token"
	// DBFile is the SQLite database.
	DBFile = "gpufleet.db"
	// SecretKeyFile is the sealing key file, made on first start.
	SecretKeyFile = "secrets.key"
	// CalibrationFile is where `gpufleet bench` stores measured rates.
	CalibrationFile = "calibration.json"
)

// Info is what a running server tells local clients.
type Info struct {
	URL string `json:"url"`
	PID int    `json:"pid"`
}

// removeServerInfo removes the data dir's server.json only when it is the
// one this process wrote (its pid and url): a server never deletes the
// address of another.
func removeServerInfo(dataDir, url string) {
	path := filepath.Join(dataDir, InfoFile)
	data, err := os.ReadFile(path)
	if err != nil {
		return
	}
	var info Info
	if json.Unmarshal(data, &info) != nil || info.PID != os.Getpid() || info.URL != url {
		return
	}
	_ = os.Remove(path)
}
