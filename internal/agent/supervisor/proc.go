package supervisor

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// ProcessStartTime returns the start time of process pid in clock ticks since
// boot (field 22 of /proc/<pid>/stat). Together with the pid it names one
// process: a recycled pid has another start time. The error wraps
// fs.ErrNotExist when there is no such process.
func ProcessStartTime(pid int) (uint64, error) {
	st, err := readStat(pid)
	if err != nil {
		return 0, fmt.Errorf("reading start time of process %d: %w", pid, err)
	}
	return st.start, nil
}

// Alive reports whether process pid exists, started at start, and has not
// exited: a zombie (exited, not yet reaped) is not alive, and neither is
// another process that was given the same pid later.
func Alive(pid int, start uint64) bool {
	if pid <= 0 {
		return false
	}
	st, err := readStat(pid)
	return err == nil && st.start == start && st.live()
}

// procStat is the part of /proc/<pid>/stat the supervisor uses.
type procStat struct {
	state byte // R, S, D, Z, …
	pgrp  int
	start uint64
}

// live reports whether the process has not exited: Z is a zombie, X dead.
func (s procStat) live() bool { return s.state != 'Z' && s.state != 'X' }

func readStat(pid int) (procStat, error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, err
	}
	return parseStat(string(data))
}

// parseStat parses the content of /proc/<pid>/stat. The command name (field
// 2) is in parentheses and may itself hold spaces and parentheses, so fields
// are counted from the last ')'.
func parseStat(s string) (procStat, error) {
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return procStat{}, errors.New("parsing process stat: no command name")
	}
	// f[0] is field 3 (state), so field n is f[n-3].
	f := strings.Fields(s[i+1:])
	if len(f) < 20 || len(f[0]) != 1 {
		return procStat{}, fmt.Errorf("parsing process stat: %d fields after the command name, want at least 20", len(f))
	}
	pgrp, err := strconv.Atoi(f[5-3])
	if err != nil {
		return procStat{}, fmt.Errorf("parsing process stat: process group: %w", err)
	}
	start, err := strconv.ParseUint(f[22-3], 10, 64)
	if err != nil {
		return procStat{}, fmt.Errorf("parsing process stat: start time: %w", err)
	}
	return procStat{state: f[0][0], pgrp: pgrp, start: start}, nil
}

// groupLive reports whether any process of group pgid has not exited.
// Zombies do not count: orphans are reparented to init, which may be slow to
// reap them or, in some containers, never does.
func groupLive(pgid int) (bool, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return false, fmt.Errorf("listing processes: %w", err)
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := readStat(pid)
		if err != nil {
			continue // exited while we looked
		}
		if st.pgrp == pgid && st.live() {
			return true, nil
		}
	}
	return false, nil
}
