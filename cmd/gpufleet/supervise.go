package main

import "github.com/gpufleet/gpufleet/internal/agent/supervisor"

// supervisorRun is the hidden `supervise` command's body.
func supervisorRun(dir string) int { return supervisor.Run(dir) }
